// Warp tiles of cooperative groups against the hand-written warp collectives (ptx/warp/): each kernel
// has the interface of the warp family's latency kernels, so the same host code runs, replays and
// checks both. One warp; `lanes` holds 32 per-lane operands, then 32 starting values; the kernel
// feeds every collective's result to the next, 32 per iteration of a loop between two %clock64
// reads in lane 0, and writes out (u64): [cycles, the value of lane 0, ..., of lane 31, a check word].
#include "coop.cuh"
#include <cooperative_groups/reduce.h>
#include <cooperative_groups/scan.h>

// tile.shfl(v, src): a shuffle through a permutation of the lanes (the operand of each lane), the
// twin of shfl.sync.idx (warp.shfl.idx).
extern "C" __global__ void gp_coop_tile_shfl_lat(const unsigned* lanes, unsigned iters, unsigned long long* out)
{
    const auto tile = cg::tiled_partition<32>(cg::this_thread_block());
    const unsigned lane = tile.thread_rank();
    const unsigned src = lanes[lane];
    unsigned long long cycles;
    const unsigned v = gp_chain(lanes[32 + lane], iters, [&](unsigned x) { return tile.shfl(x, src); }, &cycles);
    gp_lanes_write(out, cycles, v);
}

// tile.shfl_down(v, delta): each lane's delta its operand (1..31), the twin of shfl.sync.down.
extern "C" __global__ void gp_coop_tile_shfl_down_lat(const unsigned* lanes, unsigned iters, unsigned long long* out)
{
    const auto tile = cg::tiled_partition<32>(cg::this_thread_block());
    const unsigned lane = tile.thread_rank();
    const unsigned delta = lanes[lane];
    unsigned long long cycles;
    const unsigned v =
        gp_chain(lanes[32 + lane], iters, [&](unsigned x) { return tile.shfl_down(x, delta); }, &cycles);
    gp_lanes_write(out, cycles, v);
}

// cg::reduce(tile, v, op) over tiles of T lanes: the reduced value feeds the next reduction. An
// untimed first reduction of the starting values is written as the check word. A tile narrower than
// the warp gets a convergence test and an out-of-line slow path per shuffle from ptxas, so its loop
// unrolls 8 reductions, not 32: a quarter of the code, its control still nothing beside 8 reductions.
#define GP_SUBWARP_STEPS 8

template <unsigned T, class Op>
__device__ __forceinline__ void gp_tile_reduce(const unsigned* lanes, unsigned iters, unsigned long long* out, Op op)
{
    const auto tile = cg::tiled_partition<T>(cg::this_thread_block());
    const unsigned lane = gp_laneid();
    const unsigned first = cg::reduce(tile, lanes[32 + lane], op);
    unsigned long long cycles;
    const unsigned v = gp_chain < T<32 ? GP_SUBWARP_STEPS : GP_UNROLL>(
        lanes[32 + lane], iters, [&](unsigned x) { return cg::reduce(tile, x, op); }, &cycles);
    gp_lanes_write(out, cycles, v);
    if (lane == 0) {
        out[1 + 32] = first;
    }
}

#define GP_TILE_REDUCE(NAME, T, OP)                                                                          \
    extern "C" __global__ void gp_coop_reduce_##NAME##_lat(const unsigned* lanes, unsigned iters,             \
                                                            unsigned long long* out)                          \
    {                                                                                                         \
        gp_tile_reduce<T>(lanes, iters, out, OP);                                                             \
    }

GP_TILE_REDUCE(add_4, 4, cg::plus<unsigned>())
GP_TILE_REDUCE(add_8, 8, cg::plus<unsigned>())
GP_TILE_REDUCE(add_16, 16, cg::plus<unsigned>())
GP_TILE_REDUCE(add_32, 32, cg::plus<unsigned>())
GP_TILE_REDUCE(min_32, 32, cg::less<unsigned>())
GP_TILE_REDUCE(and_32, 32, cg::bit_and<unsigned>())

// cg::reduce(tile, v, cg::plus<float>()): no hardware reduction for floats, on any arch. The values
// are small whole numbers, so every sum is exact whatever the order, and each later reduction
// scales by 32 (exact too, until it overflows to infinity).
extern "C" __global__ void gp_coop_reduce_fadd_32_lat(const unsigned* lanes, unsigned iters, unsigned long long* out)
{
    const auto tile = cg::tiled_partition<32>(cg::this_thread_block());
    const unsigned lane = tile.thread_rank();
    const float start = static_cast<float>(lanes[32 + lane]);
    const float first = cg::reduce(tile, start, cg::plus<float>());
    unsigned long long cycles;
    const unsigned bits = gp_chain(
        __float_as_uint(start), iters,
        [&](unsigned x) { return __float_as_uint(cg::reduce(tile, __uint_as_float(x), cg::plus<float>())); },
        &cycles);
    gp_lanes_write(out, cycles, bits);
    if (lane == 0) {
        out[1 + 32] = __float_as_uint(first);
    }
}

// cg::inclusive_scan(tile, v): each lane gets the sum of the lanes up to its own, fed back.
extern "C" __global__ void gp_coop_scan_add_32_lat(const unsigned* lanes, unsigned iters, unsigned long long* out)
{
    const auto tile = cg::tiled_partition<32>(cg::this_thread_block());
    const unsigned lane = tile.thread_rank();
    unsigned long long cycles;
    const unsigned v = gp_chain(
        lanes[32 + lane], iters, [&](unsigned x) { return cg::inclusive_scan(tile, x, cg::plus<unsigned>()); },
        &cycles);
    gp_lanes_write(out, cycles, v);
}

// tile.sync() on a whole-warp tile, 32 per iteration; a shuffle after the loop hands each lane its
// neighbour's (lane ^ 1) starting value, which the host checks: the twin of __syncwarp().
extern "C" __global__ void gp_coop_tile_sync_lat(const unsigned* lanes, unsigned iters, unsigned long long* out)
{
    const auto tile = cg::tiled_partition<32>(cg::this_thread_block());
    const unsigned lane = tile.thread_rank();
    unsigned long long cycles;
    const unsigned v = gp_chain(lanes[32 + lane], iters, [&](unsigned x) { tile.sync(); return x; }, &cycles);
    gp_lanes_write(out, cycles, tile.shfl_xor(v, 1));
}
