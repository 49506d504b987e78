// What every CUDA C++ probe of the coop family shares: the headers, the clock read, and the output
// conventions. Included by each .cu file of ptx/coop/ (NVRTC compiles them as one translation unit
// per arch, so everything here is inline or a template).
#pragma once

#include <cooperative_groups.h>

namespace cg = cooperative_groups;

// %clock64, as the hand-written probes read it. The asm is volatile with a memory clobber, so the
// compiler neither drops it nor moves loads and stores across it; arithmetic may still move, which
// each probe's SASS contract checks (the clock reads bracket the timed loop and nothing else).
__device__ __forceinline__ unsigned long long gp_clock()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%clock64;" : "=l"(t) : : "memory");
    return t;
}

// %globaltimer (ns, ticking about once a microsecond), for the SM clock over long timed regions.
__device__ __forceinline__ unsigned long long gp_globaltimer()
{
    unsigned long long t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t) : : "memory");
    return t;
}

__device__ __forceinline__ unsigned gp_smid()
{
    unsigned id;
    asm volatile("mov.u32 %0, %%smid;" : "=r"(id));
    return id;
}

__device__ __forceinline__ unsigned gp_laneid()
{
    unsigned id;
    asm("mov.u32 %0, %%laneid;" : "=r"(id));
    return id;
}

// Steps per iteration of every timed loop, as in the hand-written kernels; each probe declares it
// (unroll in ptx/coop/*.toml), and its SASS contract holds it.
#define GP_UNROLL 32

// The timed chain: `iters` (at least 1) iterations of STEPS steps by the lanes of `members`. The
// __syncwarp(members) before the first clock read keeps the loads of the operands before it (ptxas
// does not move memory accesses across it), as bar.warp.sync does in the hand-written kernels; the
// loop is a do-while, as theirs is, so the timed region holds no test of the count before the loop.
template <int STEPS = GP_UNROLL, class Step>
__device__ __forceinline__ unsigned gp_chain(unsigned v, unsigned iters, Step step, unsigned long long* cycles,
                                             unsigned members = 0xffffffffu)
{
    __syncwarp(members);
    const unsigned long long start = gp_clock();
    unsigned left = iters;
#pragma unroll 1
    do {
#pragma unroll
        for (int k = 0; k < STEPS; ++k) {
            v = step(v);
        }
    } while (--left != 0);
    *cycles = gp_clock() - start;
    return v;
}

// Every lane's final value at out[1 + lane], lane 0's cycles at out[0].
__device__ __forceinline__ void gp_lanes_write(unsigned long long* out, unsigned long long cycles, unsigned v)
{
    const unsigned lane = gp_laneid();
    out[1 + lane] = v;
    if (lane == 0) {
        out[0] = cycles;
    }
}

