// archs: sm_90a
// Warpgroup tensor cores (wgmma.mma_async -> HGMMA / IGMMA / QGMMA) with shared-memory matrix
// descriptors, register-sourced A, the fence/commit/wait protocol, and setmaxnreg.

__device__ __forceinline__ unsigned long long descriptor(const void* p, unsigned leading, unsigned stride)
{
    const unsigned long long address = static_cast<unsigned>(__cvta_generic_to_shared(p));
    return ((address & 0x3ffff) >> 4) | (static_cast<unsigned long long>(leading >> 4) << 16)
           | (static_cast<unsigned long long>(stride >> 4) << 32);
}

extern "C" __global__ void __launch_bounds__(128) wgmma_kinds(float* out, int* iout, const unsigned* in, int scale)
{
    __shared__ __align__(128) unsigned char a_tile[64 * 64];
    __shared__ __align__(128) unsigned char b_tile[64 * 64];
    const int t = threadIdx.x;
    reinterpret_cast<uint4*>(a_tile)[t] = reinterpret_cast<const uint4*>(in)[t];
    reinterpret_cast<uint4*>(b_tile)[t] = reinterpret_cast<const uint4*>(in)[t + 128];
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    const unsigned long long a = descriptor(a_tile, 128, 256), b = descriptor(b_tile, 128, 256);
    float d[4] = {0.f, 0.f, 0.f, 0.f}, q[4] = {0.f, 0.f, 0.f, 0.f};
    int s[4] = {0, 0, 0, 0};
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
    asm volatile("{ .reg .pred p; setp.ne.b32 p, %6, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n8k16.f32.f16.f16 {%0,%1,%2,%3}, %4, %5, p, 1, -1, 0, 1; }"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "l"(a), "l"(b), "r"(scale));
    asm volatile("wgmma.mma_async.sync.aligned.m64n8k16.f32.bf16.bf16 {%0,%1,%2,%3}, {%4,%5,%6,%7}, %8, 1, 1, 1, 0;"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(in[t]), "r"(in[t + 128]), "r"(in[t + 256]), "r"(in[t + 384]), "l"(b));
    asm volatile("wgmma.mma_async.sync.aligned.m64n8k8.f32.tf32.tf32 {%0,%1,%2,%3}, %4, %5, 1, 1, 1;"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]) : "l"(a), "l"(b));
    asm volatile("wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e5m2 {%0,%1,%2,%3}, %4, %5, 0, 1, 1;"
                 : "+f"(q[0]), "+f"(q[1]), "+f"(q[2]), "+f"(q[3]) : "l"(a), "l"(b));
    asm volatile("wgmma.mma_async.sync.aligned.m64n8k32.s32.s8.u8.satfinite {%0,%1,%2,%3}, %4, %5, 0;"
                 : "+r"(s[0]), "+r"(s[1]), "+r"(s[2]), "+r"(s[3]) : "l"(a), "l"(b));
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    out[t] = d[0] + d[1] + d[2] + d[3] + q[0] * q[3];
    iout[t] = s[0] + s[1] + s[2] + s[3];
}

extern "C" __global__ void __launch_bounds__(256, 1) wgmma_pipelined(float* out, const unsigned* in, int k_tiles)
{
    __shared__ __align__(128) unsigned short tiles[2][64 * 64];
    const int t = threadIdx.x;
    const int warpgroup = t / 128;
    if (warpgroup == 0) {
        asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
        for (int k = 0; k < k_tiles; ++k) {
            reinterpret_cast<uint4*>(tiles[k & 1])[t] = reinterpret_cast<const uint4*>(in)[k * 128 + t];
        }
        return;
    }
    asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    float d[8] = {};
    #pragma unroll 1
    for (int k = 0; k < k_tiles; ++k) {
        const unsigned long long a = descriptor(tiles[k & 1], 128, 256), b = descriptor(tiles[(k + 1) & 1], 128, 256);
        asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
        asm volatile("wgmma.mma_async.sync.aligned.m64n16k16.f32.f16.f16 {%0,%1,%2,%3,%4,%5,%6,%7}, %8, %9, 1, 1, 1, 0, 0;"
                     : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7])
                     : "l"(a), "l"(b));
        asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
        asm volatile("wgmma.wait_group.sync.aligned 1;" ::: "memory");
    }
    asm volatile("wgmma.wait_group.sync.aligned 0;" ::: "memory");
    float r = 0.f;
    #pragma unroll
    for (int j = 0; j < 8; ++j) {
        r += d[j];
    }
    out[t] = r;
}
