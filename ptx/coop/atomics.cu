// cuda::atomic_ref<unsigned, scope>::fetch_add against the hand-written atomic chains (ptx/atomics/):
// the same self-feeding chain of returning adds, one lane, each add's increment the value the previous
// add returned (from a zeroed counter the values run through a Fibonacci-like sequence the host
// predicts), 32 adds per iteration between %clock64 reads. The interface is the twins': global
// (counters, lane_stride, first, iters, out) and shared (lane_stride, first, iters, out); out =
// [cycles, SM id, then per lane its last and second-to-last returned values (and, for shared, the
// counter's final value)].
#include "coop.cuh"
#include <cuda/atomic>

template <cuda::thread_scope Scope>
__device__ __forceinline__ void gp_atomic_chain(unsigned* counter, unsigned first, unsigned iters,
                                                unsigned long long* out, unsigned long long* lane_out)
{
    cuda::atomic_ref<unsigned, Scope> ref(*counter);
    unsigned a = first, b = 0;
    const unsigned long long start = gp_clock();
    unsigned left = iters;
#pragma unroll 1
    do {
#pragma unroll
        for (int k = 0; k < GP_UNROLL / 2; ++k) {
            b = ref.fetch_add(a, cuda::memory_order_relaxed);
            a = ref.fetch_add(b, cuda::memory_order_relaxed);
        }
    } while (--left != 0);
    const unsigned long long cycles = gp_clock() - start;
    lane_out[0] = a;
    lane_out[1] = b;
    if (threadIdx.x == 0) {
        out[0] = cycles;
        out[1] = gp_smid();
    }
}

#define GP_ATOMIC_GLOBAL(NAME, SCOPE)                                                                         \
    extern "C" __global__ void gp_coop_atomic_ref_##NAME##_lat(unsigned* counters, unsigned lane_stride,      \
                                                                unsigned first, unsigned iters,               \
                                                                unsigned long long* out)                      \
    {                                                                                                         \
        unsigned* counter = reinterpret_cast<unsigned*>(reinterpret_cast<char*>(counters) +                   \
                                                        threadIdx.x * lane_stride);                           \
        gp_atomic_chain<SCOPE>(counter, first, iters, out, out + 2 + 2 * threadIdx.x);                        \
    }

GP_ATOMIC_GLOBAL(device, cuda::thread_scope_device)
GP_ATOMIC_GLOBAL(block, cuda::thread_scope_block)

__shared__ alignas(16) unsigned gp_coop_atomic_counters[32];

// The block-scope chain on a shared-memory counter, zeroed first.
extern "C" __global__ void gp_coop_atomic_ref_shared_lat(unsigned lane_stride, unsigned first, unsigned iters,
                                                         unsigned long long* out)
{
    unsigned* counter = reinterpret_cast<unsigned*>(reinterpret_cast<char*>(gp_coop_atomic_counters) +
                                                    threadIdx.x * lane_stride);
    *counter = 0;
    __syncthreads();
    unsigned long long* lane_out = out + 2 + 3 * threadIdx.x;
    gp_atomic_chain<cuda::thread_scope_block>(counter, first, iters, out, lane_out);
    __syncthreads();
    lane_out[2] = *counter;
}
