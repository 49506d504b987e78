// Asynchronous copies through cooperative groups and libcu++, against the hand-written cp.async and
// bulk-copy chases (ptx/async_copy/). Each kernel chases a random cycle of nodes in global memory, one
// thread, each step copying the node it points at into shared memory and reading the next node's
// address from the copy, so a step is one whole copy round trip; the interface is the twins'
// (gpuprobe.families.chase): (start address, warm, iters, out), out = [cycles, ns, end address, SM id].
#include "coop.cuh"
#include <cooperative_groups/memcpy_async.h>
#include <cuda/barrier>
#include <cuda/pipeline>

#define GP_COPY_STEPS 4       // steps per timed iteration: a step is a copy round trip of hundreds of cycles
#define GP_BARRIER_BYTES 256  // bytes the barrier chase copies per step (the bulk twin's smallest node)

__shared__ alignas(128) unsigned long long gp_coop_copy_slot[GP_BARRIER_BYTES / 8];

template <class Step>
__device__ __forceinline__ void gp_copy_chase(const unsigned long long* node, unsigned warm, unsigned iters,
                                              unsigned long long* out, Step step)
{
#pragma unroll 1
    for (unsigned i = 0; i < warm; ++i) {
        node = step(node);
    }
    const unsigned long long ns = gp_globaltimer();
    const unsigned long long start = gp_clock();
    unsigned left = iters;
#pragma unroll 1
    do {
#pragma unroll
        for (int k = 0; k < GP_COPY_STEPS; ++k) {
            node = step(node);
        }
    } while (--left != 0);
    const unsigned long long cycles = gp_clock() - start;
    const unsigned long long elapsed = gp_globaltimer() - ns;
    out[0] = cycles;
    out[1] = elapsed;
    out[2] = reinterpret_cast<unsigned long long>(node);
    reinterpret_cast<unsigned*>(out)[6] = gp_smid();
}

__device__ __forceinline__ const unsigned long long* gp_next(const unsigned long long* slot)
{
    return reinterpret_cast<const unsigned long long*>(*reinterpret_cast<const volatile unsigned long long*>(slot));
}

// cg::memcpy_async(block, slot, node, 16 bytes) and cg::wait(block): a block of one thread.
extern "C" __global__ void gp_coop_cg_memcpy_chase(const unsigned long long* start, unsigned warm, unsigned iters,
                                                   unsigned long long* out)
{
    const cg::thread_block block = cg::this_thread_block();
    gp_copy_chase(start, warm, iters, out, [&](const unsigned long long* node) {
        cg::memcpy_async(block, gp_coop_copy_slot, node, cuda::aligned_size_t<16>(16));
        cg::wait(block);
        return gp_next(gp_coop_copy_slot);
    });
}

// cuda::memcpy_async(slot, node, 256 bytes, barrier) and barrier.arrive_and_wait(), a
// cuda::barrier<thread_scope_block> in shared memory for a block of one thread.
extern "C" __global__ void gp_coop_barrier_memcpy_chase(const unsigned long long* start, unsigned warm,
                                                        unsigned iters, unsigned long long* out)
{
    using barrier_t = cuda::barrier<cuda::thread_scope_block>;
    __shared__ barrier_t bar;
    init(&bar, 1);
    gp_copy_chase(start, warm, iters, out, [&](const unsigned long long* node) {
        cuda::memcpy_async(gp_coop_copy_slot, node, cuda::aligned_size_t<16>(GP_BARRIER_BYTES), bar);
        bar.arrive_and_wait();
        return gp_next(gp_coop_copy_slot);
    });
}

// A cuda::pipeline<thread_scope_thread> stage per step: producer_acquire, memcpy_async of 16 bytes,
// producer_commit, consumer_wait, read, consumer_release.
extern "C" __global__ void gp_coop_pipeline_chase(const unsigned long long* start, unsigned warm, unsigned iters,
                                                  unsigned long long* out)
{
    cuda::pipeline<cuda::thread_scope_thread> pipe = cuda::make_pipeline();
    gp_copy_chase(start, warm, iters, out, [&](const unsigned long long* node) {
        pipe.producer_acquire();
        cuda::memcpy_async(gp_coop_copy_slot, node, cuda::aligned_size_t<16>(16), pipe);
        pipe.producer_commit();
        pipe.consumer_wait();
        const unsigned long long* next = gp_next(gp_coop_copy_slot);
        pipe.consumer_release();
        return next;
    });
}
