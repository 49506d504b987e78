// The block and the grid: cg::this_thread_block().sync() against bar.sync (ptx/barrier/), and
// cg::this_grid().sync() in a cooperative launch against the hand-written grid barrier
// (ptx/grid_sync/), each with the interface and the check of its twin so the same host code runs both.
#include "coop.cuh"

// Slots the block's warps write and read around the barriers (two banks of 32 words).
__shared__ unsigned gp_coop_block_slots[64];

// block.sync() 32 times per iteration of a loop between %clock64 reads in thread 0. As in
// gp_bar_block: before an iteration's barriers each warp writes the iteration's number into its slot
// (one of two banks, by the iteration's parity); after them it reads the slot of the next warp and
// adds it to a sum, which is 1 + 2 + ... + iters only if the barriers held every warp back until all
// had written. out (u64), per block b of W warps at (2 + W) b: [cycles, SM id, the sum of each warp].
extern "C" __global__ void gp_coop_block_sync(unsigned iters, unsigned long long* out)
{
    const cg::thread_block block = cg::this_thread_block();
    const unsigned warp = threadIdx.x / 32, warps = blockDim.x / 32;
    const unsigned next = (warp + 1) % warps;
    unsigned sum = 0;
    block.sync();
    const unsigned long long start = gp_clock();
    unsigned left = iters;
#pragma unroll 1
    do {
        const unsigned bank = (left & 1u) * 32u;
        gp_coop_block_slots[bank + warp] = left;
#pragma unroll
        for (int k = 0; k < GP_UNROLL; ++k) {
            block.sync();
        }
        sum += gp_coop_block_slots[bank + next];
    } while (--left != 0);
    const unsigned long long cycles = gp_clock() - start;
    unsigned long long* row = out + blockIdx.x * (2 + warps);
    if (threadIdx.x % 32 == 0) {
        row[2 + warp] = sum;
    }
    if (threadIdx.x == 0) {
        row[0] = cycles;
        row[1] = gp_smid();
    }
}

// grid.sync() in a cooperative launch (the barrier word is the driver's grid workspace, CG reads its
// address from %envreg1-2). `checks` untimed rounds first: in round r each block's thread 0 writes
// the tag r * nblocks + b + 1 into slot b of one of two banks of `slots` (by r's parity), the grid
// syncs, and every block reads every slot of the bank, counting tags that are not the round's into
// errors[0]. Then `syncs` barriers between block 0's clock reads. out (u64): [cycles, globaltimer ns]
// of the timed phase (block 0, thread 0), then per block the barriers it passed.
extern "C" __global__ void gp_coop_grid_sync(unsigned* slots, unsigned* errors, unsigned checks, unsigned syncs,
                                             unsigned long long* out)
{
    cg::grid_group grid = cg::this_grid();
    const unsigned blocks = gridDim.x, block = blockIdx.x;
    unsigned wrong = 0, passed = 0;
#pragma unroll 1
    for (unsigned round = 0; round < checks; ++round) {
        volatile unsigned* bank = slots + (round & 1u) * blocks;
        const unsigned tag = round * blocks + 1;
        if (threadIdx.x == 0) {
            bank[block] = tag + block;
        }
        grid.sync();
        ++passed;
        for (unsigned other = threadIdx.x; other < blocks; other += blockDim.x) {
            wrong += bank[other] != tag + other;
        }
    }
    const unsigned long long ns = gp_globaltimer();
    const unsigned long long start = gp_clock();
#pragma unroll 1
    for (unsigned round = 0; round < syncs; ++round) {
        grid.sync();
        ++passed;
    }
    const unsigned long long cycles = gp_clock() - start;
    const unsigned long long elapsed = gp_globaltimer() - ns;
    if (wrong != 0) {
        atomicAdd(errors, wrong);
    }
    if (threadIdx.x == 0) {
        out[2 + block] = passed;
        if (block == 0) {
            out[0] = cycles;
            out[1] = elapsed;
        }
    }
}
