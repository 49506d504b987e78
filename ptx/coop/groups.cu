// Groups formed at run time: cg::coalesced_threads() inside a divergent branch, cg::labeled_partition
// and cg::binary_partition. Each step forms the group and runs one collective on it, and the next
// step's group depends on that result, so neither can be hoisted out of the timed loop: the cost is
// forming the group plus one collective. The interface is the warp family's latency kernels': one
// warp, `lanes` = 32 per-lane operands then 32 starting values, out (u64) = [cycles, lane values].
// A step is tens of instructions (the rank search, the convergence tests), so the loop unrolls 8 of
// them, not 32: a quarter of the code, and its control still a few cycles in hundreds per iteration.
#include "coop.cuh"
#include <cooperative_groups/reduce.h>

#define GP_GROUP_STEPS 8

// The lanes below `active` take a branch (the compiler cannot know how many) and, inside it, form
// the coalesced group of the lanes that took it, 8 times per iteration, each time reading the value
// of the group's rank `lanes[lane]` (1 .. active - 1: CG treats rank 0 apart, and on sm_100 and newer
// ptxas unswitches the loop on that case, so a lane reading rank 0 would run apart from the others and
// form another group). The other lanes write their starting value. The twin is shfl.sync.idx with
// half the warp inactive (warp.shfl.partial).
extern "C" __global__ void gp_coop_coalesced_shfl_lat(const unsigned* lanes, unsigned active, unsigned iters,
                                                      unsigned long long* out)
{
    const unsigned lane = gp_laneid();
    const unsigned src = lanes[lane];
    unsigned v = lanes[32 + lane];
    unsigned long long cycles = 0;
    if (lane < active) {
        v = gp_chain<GP_GROUP_STEPS>(
            v, iters, [&](unsigned x) { return cg::coalesced_threads().shfl(x, src); }, &cycles, __activemask());
    }
    gp_lanes_write(out, cycles, v);
}

// The lanes holding the same v & 3 form a group (labeled_partition: match.any on the label) and each
// gets the sum of its group's values, 8 times per iteration: every step's labels are the previous
// step's sums, so the groups change as the chain runs, which the host replays lane by lane.
extern "C" __global__ void gp_coop_labeled_reduce_lat(const unsigned* lanes, unsigned iters, unsigned long long* out)
{
    const auto warp = cg::tiled_partition<32>(cg::this_thread_block());
    const unsigned lane = warp.thread_rank();
    unsigned long long cycles;
    const unsigned v = gp_chain<GP_GROUP_STEPS>(
        lanes[32 + lane], iters,
        [&](unsigned x) { return cg::reduce(cg::labeled_partition(warp, x & 3u), x, cg::plus<unsigned>()); },
        &cycles);
    gp_lanes_write(out, cycles, v);
}

// The same with two groups, by the lowest bit of v (binary_partition: a ballot on the predicate).
extern "C" __global__ void gp_coop_binary_reduce_lat(const unsigned* lanes, unsigned iters, unsigned long long* out)
{
    const auto warp = cg::tiled_partition<32>(cg::this_thread_block());
    const unsigned lane = warp.thread_rank();
    unsigned long long cycles;
    const unsigned v = gp_chain<GP_GROUP_STEPS>(
        lanes[32 + lane], iters,
        [&](unsigned x) { return cg::reduce(cg::binary_partition(warp, (x & 1u) != 0), x, cg::plus<unsigned>()); },
        &cycles);
    gp_lanes_write(out, cycles, v);
}
