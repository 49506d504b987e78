// archs: all
// Barriers (block, named, warp), fences, warp collectives (shuffle, vote, match, redux),
// divergence, atomics of every kind, and clock / timer / special register reads.

extern "C" __global__ void barriers(int* out, const int* in)
{
    __shared__ int s[256];
    const int t = threadIdx.x;
    s[t] = in[t];
    __syncthreads();
    const int count = __syncthreads_count(s[t ^ 1] > 0);
    const int any = __syncthreads_or(s[t ^ 2] < 0);
    if (t < 64) {
        asm volatile("bar.sync 1, 64;");
    } else if (t < 128) {
        asm volatile("bar.arrive 1, 64;");
    }
    asm volatile("barrier.sync.aligned 2;" ::: "memory");
    __syncwarp(0xffff0000u);
    __threadfence_block();
    __threadfence();
    __threadfence_system();
    __nanosleep(100);
    out[t] = count + any + s[255 - t];
}

extern "C" __global__ void warp_collectives(int* out, const int* in, const float* f)
{
    const int t = threadIdx.x;
    int v = in[t];
    float g = f[t];
    v += __shfl_sync(0xffffffffu, v, 3) + __shfl_up_sync(0xffffffffu, v, 1);
    v += __shfl_down_sync(0xffffffffu, v, 2) + __shfl_xor_sync(0xffffffffu, v, 16);
    g += __shfl_xor_sync(0xffffffffu, g, 1, 16);
    const unsigned ballot = __ballot_sync(0xffffffffu, v > 0);
    const int all = __all_sync(0xffffffffu, v != 0);
    const int any = __any_sync(0xffffffffu, v == 7);
    if (v & 1) {                                   // divergent: the warp splits, then reconverges
        const unsigned active = __activemask();
        v += __popc(active) + __shfl_sync(active, v, 0);
        __syncwarp(active);
    }
    unsigned peers = __match_any_sync(0xffffffffu, v & 3);
    int pred = 0;
    peers += __match_all_sync(0xffffffffu, v >> 4, &pred);
#if __CUDA_ARCH__ >= 800
    v += static_cast<int>(__reduce_add_sync(0xffffffffu, static_cast<unsigned>(v)));
    v += __reduce_min_sync(0xffffffffu, v) + static_cast<int>(__reduce_or_sync(0xffffffffu, ballot));
#endif
    out[t] = v + all + any + static_cast<int>(ballot ^ peers) + pred + static_cast<int>(g);
}

extern "C" __global__ void atomics(int* gi, unsigned* gu, float* gf, double* gd, unsigned long long* gl,
                                   int* result)
{
    __shared__ int si[64];
    __shared__ float sf[64];
    __shared__ unsigned long long sl[64];
    const int t = threadIdx.x;
    if (t < 64) { si[t] = 0; sf[t] = 0.0f; sl[t] = 0; }
    __syncthreads();
    atomicAdd(gi, 1);                                   // result unused: RED
    const int old = atomicAdd(gi + 1, t);               // result used: ATOMG
    atomicAdd(gf, 1.5f);
    const float oldf = atomicAdd(gf + 1, 2.0f);
    atomicAdd(gd, 0.25);
    atomicMax(gi + 2, t);
    atomicMin(gu + 2, static_cast<unsigned>(t));
    atomicAnd(gu + 3, 0xf0u);
    atomicOr(gu + 4, 1u << (t & 31));
    atomicXor(gu + 5, static_cast<unsigned>(t));
    const unsigned inc = atomicInc(gu + 6, 100u);
    const int exch = atomicExch(gi + 3, t);
    const int cas = atomicCAS(gi + 4, t, t + 1);
    const unsigned long long cas64 = atomicCAS(gl, 0ull, static_cast<unsigned long long>(t));
    atomicAdd(gl + 1, 5ull);
    atomicAdd_block(gi + 5, 1);
    atomicAdd_system(gi + 6, 1);
    atomicAdd(si + (t & 63), 1);
    const int sold = atomicCAS(si + ((t + 1) & 63), 0, t);
    atomicAdd(sf + (t & 63), 0.5f);
    atomicMax(si + ((t + 2) & 63), t);
    atomicExch(sl + (t & 63), 7ull);
    unsigned half = 0;
    asm volatile("red.global.add.noftz.f16x2 [%0], %1;" :: "l"(gu + 7), "r"(0x3c003c00u) : "memory");
    asm volatile("atom.global.acquire.gpu.exch.b32 %0, [%1], %2;" : "=r"(half) : "l"(gu + 8), "r"(1u) : "memory");
#if __CUDA_ARCH__ >= 900
    float4 four;
    asm volatile("atom.global.v4.f32.add {%0, %1, %2, %3}, [%4], {%5, %5, %5, %5};"
                 : "=f"(four.x), "=f"(four.y), "=f"(four.z), "=f"(four.w) : "l"(gf + 4), "f"(1.0f) : "memory");
    half += static_cast<unsigned>(four.x + four.w);
#endif
    __syncthreads();
    result[t] = old + static_cast<int>(oldf) + static_cast<int>(inc) + exch + cas + static_cast<int>(cas64) + sold
                + si[t & 63] + static_cast<int>(sf[t & 63] + static_cast<float>(sl[t & 63])) + static_cast<int>(half);
}

extern "C" __global__ void clocks(unsigned long long* out)
{
    const long long start = clock64();
    const unsigned c32 = static_cast<unsigned>(clock());
    unsigned long long timer;
    unsigned smid, lane, warp;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(timer));
    asm volatile("mov.u32 %0, %%smid;" : "=r"(smid));
    asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
    asm volatile("mov.u32 %0, %%warpid;" : "=r"(warp));
    const long long stop = clock64();
    out[threadIdx.x] = static_cast<unsigned long long>(stop - start) + c32 + timer
                         + (static_cast<unsigned long long>(smid) << 32) + (lane << 8) + warp;
}
