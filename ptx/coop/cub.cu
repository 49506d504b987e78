// CUB's warp and block primitives (the CCCL headers NVRTC has on its include path), each a dependent chain
// of one primitive between %clock64 reads, beside the hand-written kernel doing what it does: the warp
// ones beside the PTX shuffle and redux chains of ptx/warp/ (and the cooperative-groups kernels of
// tiles.cu), the block ones beside the small hand-written kernels at the end of this file (the step one
// asm block: warp collectives, one shared-memory exchange, bar.sync), which their probes declare as
// their twins.
#include "coop.cuh"
#include <cub/block/block_radix_sort.cuh>
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cub/warp/warp_reduce.cuh>
#include <cub/warp/warp_scan.cuh>

// All ones where a thread keeps its own value, zero where it takes a reduction's total: hidden from the
// compiler (an asm), so the choice is one LOP3 per step, never a branch on the thread that it could hoist
// out of the loop (a loop per side, each collective behind a convergence test).
__device__ __forceinline__ unsigned gp_keep_mask(bool takes_total)
{
    unsigned keep;
    asm volatile("mov.u32 %0, %1;" : "=r"(keep) : "r"(takes_total ? 0u : ~0u));
    return keep;
}

__device__ __forceinline__ unsigned gp_take_total(unsigned total, unsigned x, unsigned keep)
{
    return (x & keep) | (total & ~keep);
}

// cub::WarpReduce<unsigned>::Sum: the total is defined in lane 0 alone, so lane 0 takes it and the other
// lanes keep their value; lane 0's value feeds the next reduction (x0 + the others' sum each step). The
// warp family's chain interface: `lanes` holds 32 operands (unused) and 32 starting values; out (u64):
// [cycles, every lane's value, the untimed first sum of lane 0].
extern "C" __global__ void gp_coop_cub_warp_reduce_lat(const unsigned* lanes, unsigned iters, unsigned long long* out)
{
    using Reduce = cub::WarpReduce<unsigned>;
    __shared__ typename Reduce::TempStorage storage;
    const unsigned lane = gp_laneid();
    const unsigned first = Reduce(storage).Sum(lanes[32 + lane]);
    const unsigned keep = gp_keep_mask(lane == 0);
    unsigned long long cycles;
    const unsigned v = gp_chain(
        lanes[32 + lane], iters, [&](unsigned x) { return gp_take_total(Reduce(storage).Sum(x), x, keep); }, &cycles);
    gp_lanes_write(out, cycles, v);
    if (lane == 0) {
        out[1 + 32] = first;
    }
}

// cub::WarpScan<unsigned>::InclusiveSum: every lane gets the sum of the lanes up to its own, fed back.
extern "C" __global__ void gp_coop_cub_warp_scan_lat(const unsigned* lanes, unsigned iters, unsigned long long* out)
{
    using Scan = cub::WarpScan<unsigned>;
    __shared__ typename Scan::TempStorage storage;
    const unsigned lane = gp_laneid();
    unsigned long long cycles;
    const unsigned v = gp_chain(
        lanes[32 + lane], iters,
        [&](unsigned x) {
            unsigned sum;
            Scan(storage).InclusiveSum(x, sum);
            return sum;
        },
        &cycles);
    gp_lanes_write(out, cycles, v);
}

// ---- the block: one block of GP_CUB_THREADS threads ---------------------------------------------------

#define GP_CUB_THREADS 256
#define GP_CUB_BLOCK_STEPS 8  // block collectives per loop iteration (even: the storages alternate)

// The block chain: `iters` iterations of GP_CUB_BLOCK_STEPS steps, thread 0's clock reads around them. Step
// k uses storage k % 2: a thread can start step k + 1 while others still read step k's storage, but not
// step k + 2 before every thread has passed step k + 1's barrier, so the primitive's own barriers suffice
// (none is added between steps). `start` in `in[thread]`; out (u64): [cycles, each thread's value].
template <class Storage, class Step>
__device__ __forceinline__ void gp_block_chain(const unsigned* in, unsigned iters, unsigned long long* out, Step step)
{
    __shared__ Storage storage[2];
    unsigned x = in[threadIdx.x];
    __syncthreads();
    const unsigned long long start = gp_clock();
    unsigned left = iters;
#pragma unroll 1
    do {
#pragma unroll
        for (int k = 0; k < GP_CUB_BLOCK_STEPS; ++k) {
            x = step(storage[k % 2], x);
        }
    } while (--left != 0);
    const unsigned long long cycles = gp_clock() - start;
    out[1 + threadIdx.x] = x;
    if (threadIdx.x == 0) {
        out[0] = cycles;
    }
}

// cub::BlockReduce<unsigned, 256>::Sum, the default algorithm (BLOCK_REDUCE_WARP_REDUCTIONS): the total is
// defined in thread 0 alone, which takes it; the others keep their value.
extern "C" __global__ void gp_coop_cub_block_reduce_lat(const unsigned* in, unsigned iters, unsigned long long* out)
{
    using Reduce = cub::BlockReduce<unsigned, GP_CUB_THREADS>;
    const unsigned keep = gp_keep_mask(threadIdx.x == 0);
    gp_block_chain<typename Reduce::TempStorage>(in, iters, out, [&](typename Reduce::TempStorage& s, unsigned x) {
        return gp_take_total(Reduce(s).Sum(x), x, keep);
    });
}

// cub::BlockScan<unsigned, 256>::InclusiveSum, the default algorithm (BLOCK_SCAN_RAKING): every thread
// gets the sum of the threads up to its own, fed back.
extern "C" __global__ void gp_coop_cub_block_scan_lat(const unsigned* in, unsigned iters, unsigned long long* out)
{
    using Scan = cub::BlockScan<unsigned, GP_CUB_THREADS>;
    gp_block_chain<typename Scan::TempStorage>(in, iters, out, [](typename Scan::TempStorage& s, unsigned x) {
        unsigned sum;
        Scan(s).InclusiveSum(x, sum);
        return sum;
    });
}

// cub::BlockRadixSort<unsigned, 256, GP_CUB_KEYS>::Sort: 256 threads of GP_CUB_KEYS keys each (a blocked
// arrangement: thread t holds keys t * KEYS ...), all 32 bits, one sort per iteration. Each sorted key is
// then mapped by k * 2654435761 + 1 (odd, so a bijection mod 2^32: new keys, in a new order, every step),
// and a __syncthreads() lets the next sort reuse the storage, as CUB's documentation asks.
// in: the 256 * KEYS starting keys; out (u64): [cycles, each key after the last step].
#define GP_CUB_KEYS 4

extern "C" __global__ void gp_coop_cub_radix_sort_lat(const unsigned* in, unsigned iters, unsigned long long* out)
{
    using Sort = cub::BlockRadixSort<unsigned, GP_CUB_THREADS, GP_CUB_KEYS>;
    __shared__ typename Sort::TempStorage storage;
    unsigned keys[GP_CUB_KEYS];
#pragma unroll
    for (int i = 0; i < GP_CUB_KEYS; ++i) {
        keys[i] = in[threadIdx.x * GP_CUB_KEYS + i];
    }
    __syncthreads();
    const unsigned long long start = gp_clock();
    unsigned left = iters;
#pragma unroll 1
    do {
        Sort(storage).Sort(keys);
#pragma unroll
        for (int i = 0; i < GP_CUB_KEYS; ++i) {
            keys[i] = keys[i] * 2654435761u + 1u;
        }
        __syncthreads();
    } while (--left != 0);
    const unsigned long long cycles = gp_clock() - start;
#pragma unroll
    for (int i = 0; i < GP_CUB_KEYS; ++i) {
        out[1 + threadIdx.x * GP_CUB_KEYS + i] = keys[i];
    }
    if (threadIdx.x == 0) {
        out[0] = cycles;
    }
}

// ---- the hand-written twins of the block collectives ------------------------------------------------
// One asm block per step, so the PTX of the step is what is written here. A warp's total: redux.sync where
// the arch has it (as CUB's warp reduction uses it, sm_80 and newer), else a butterfly of five shuffles.

#if __CUDA_ARCH__ >= 800
#define GP_WARP_TOTAL(R) "redux.sync.add.u32 " R ", " R ", -1;\n\t"
#else
#define GP_WARP_TOTAL(R)                                                                                   \
    "shfl.sync.bfly.b32 t, " R ", 16, 31, -1;\n\tadd.u32 " R ", " R ", t;\n\t"                              \
    "shfl.sync.bfly.b32 t, " R ", 8, 31, -1;\n\tadd.u32 " R ", " R ", t;\n\t"                               \
    "shfl.sync.bfly.b32 t, " R ", 4, 31, -1;\n\tadd.u32 " R ", " R ", t;\n\t"                               \
    "shfl.sync.bfly.b32 t, " R ", 2, 31, -1;\n\tadd.u32 " R ", " R ", t;\n\t"                               \
    "shfl.sync.bfly.b32 t, " R ", 1, 31, -1;\n\tadd.u32 " R ", " R ", t;\n\t"
#endif

// The block's total in thread 0 (the others keep their value): each warp's total, lane 0 stores it in the
// storage's slot of its warp, bar.sync, thread 0 adds the 8 slots (one 16-byte load of each half).
struct alignas(16) GpBlockSlots {
    unsigned warp[GP_CUB_THREADS / 32];
};

extern "C" __global__ void gp_coop_ptx_block_reduce_lat(const unsigned* in, unsigned iters, unsigned long long* out)
{
    gp_block_chain<GpBlockSlots>(in, iters, out, [](GpBlockSlots& s, unsigned x) {
        const unsigned slots = static_cast<unsigned>(__cvta_generic_to_shared(&s));
        const unsigned slot = slots + (threadIdx.x / 32) * 4;
        unsigned y;
        asm volatile(
            "{\n\t.reg .u32 t, a, b, c, d, e, f, g, h;\n\t.reg .pred first, lead;\n\t"
            "mov.u32 %0, %1;\n\t" GP_WARP_TOTAL("%0")
            "setp.eq.u32 lead, %4, 0;\n\t"
            "@lead st.shared.u32 [%3], %0;\n\t"
            "bar.sync 0;\n\t"
            "setp.eq.u32 first, %5, 0;\n\t"
            "mov.u32 %0, %1;\n\t"
            "@first ld.shared.v4.u32 {a, b, c, d}, [%2];\n\t"
            "@first ld.shared.v4.u32 {e, f, g, h}, [%2+16];\n\t"
            "@first add.u32 a, a, b;\n\t@first add.u32 c, c, d;\n\t@first add.u32 e, e, f;\n\t@first add.u32 g, g, h;\n\t"
            "@first add.u32 a, a, c;\n\t@first add.u32 e, e, g;\n\t@first add.u32 %0, a, e;\n\t}"
            : "=&r"(y)
            : "r"(x), "r"(slots), "r"(slot), "r"(threadIdx.x % 32), "r"(threadIdx.x)
            : "memory");
        return y;
    });
}

// The block's inclusive scan: each warp's scan (five shuffles up, each added where the source lane
// exists), lane 31 stores its warp's total in its slot, bar.sync, and each thread adds the totals of
// the warps below its own (w slots of 8, read as two 16-byte loads and masked).
extern "C" __global__ void gp_coop_ptx_block_scan_lat(const unsigned* in, unsigned iters, unsigned long long* out)
{
    gp_block_chain<GpBlockSlots>(in, iters, out, [](GpBlockSlots& s, unsigned x) {
        const unsigned slots = static_cast<unsigned>(__cvta_generic_to_shared(&s));
        const unsigned warp = threadIdx.x / 32;
        unsigned y;
        asm volatile(
            "{\n\t.reg .u32 t, a, b, c, d, e, f, g, h;\n\t.reg .pred p, last;\n\t"
            "mov.u32 %0, %1;\n\t"
            "shfl.sync.up.b32 t|p, %0, 1, 0, -1;\n\t@p add.u32 %0, %0, t;\n\t"
            "shfl.sync.up.b32 t|p, %0, 2, 0, -1;\n\t@p add.u32 %0, %0, t;\n\t"
            "shfl.sync.up.b32 t|p, %0, 4, 0, -1;\n\t@p add.u32 %0, %0, t;\n\t"
            "shfl.sync.up.b32 t|p, %0, 8, 0, -1;\n\t@p add.u32 %0, %0, t;\n\t"
            "shfl.sync.up.b32 t|p, %0, 16, 0, -1;\n\t@p add.u32 %0, %0, t;\n\t"
            "setp.eq.u32 last, %3, 31;\n\t"
            "@last st.shared.u32 [%2], %0;\n\t"
            "bar.sync 0;\n\t"
            "ld.shared.v4.u32 {a, b, c, d}, [%4];\n\t"
            "ld.shared.v4.u32 {e, f, g, h}, [%4+16];\n\t"
            "setp.gt.u32 p, %5, 0;\n\t@p add.u32 %0, %0, a;\n\t"
            "setp.gt.u32 p, %5, 1;\n\t@p add.u32 %0, %0, b;\n\t"
            "setp.gt.u32 p, %5, 2;\n\t@p add.u32 %0, %0, c;\n\t"
            "setp.gt.u32 p, %5, 3;\n\t@p add.u32 %0, %0, d;\n\t"
            "setp.gt.u32 p, %5, 4;\n\t@p add.u32 %0, %0, e;\n\t"
            "setp.gt.u32 p, %5, 5;\n\t@p add.u32 %0, %0, f;\n\t"
            "setp.gt.u32 p, %5, 6;\n\t@p add.u32 %0, %0, g;\n\t}"
            : "=&r"(y)
            : "r"(x), "r"(slots + warp * 4), "r"(threadIdx.x % 32), "r"(slots), "r"(warp)
            : "memory");
        return y;
    });
}
