// archs: all
// Warp-level tensor cores through inline PTX: mma.sync for f16, bf16, tf32, f64, int8, binary,
// sparse and fp8 inputs, and the shared-memory matrix loads/stores feeding them (LDSM/STSM).

#define FRAG(n) const unsigned* __restrict__ n

__device__ __forceinline__ unsigned smem_address(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

extern "C" __global__ void mma_turing(float* d, int* di, FRAG(a), FRAG(b), const float* c)
{
    const int t = threadIdx.x;
    float r[4];
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5}, {%6}, {%7,%8,%9,%10};"
                 : "=f"(r[0]), "=f"(r[1]), "=f"(r[2]), "=f"(r[3])
                 : "r"(a[t]), "r"(a[t + 32]), "r"(b[t]), "f"(c[t]), "f"(c[t + 32]), "f"(c[t + 64]), "f"(c[t + 96]));
    int s[2];
    asm volatile("mma.sync.aligned.m8n8k16.row.col.s32.s8.s8.s32 {%0,%1}, {%2}, {%3}, {%4,%5};"
                 : "=r"(s[0]), "=r"(s[1]) : "r"(a[t + 64]), "r"(b[t + 32]), "r"(t), "r"(t + 1));
    d[t] = r[0] + r[1] + r[2] + r[3];
    di[t] = s[0] ^ s[1];
}

extern "C" __global__ void ldmatrix_stmatrix(unsigned* out, const unsigned* in)
{
    __shared__ __align__(16) unsigned short tile[32 * 64];
    const int t = threadIdx.x;
    reinterpret_cast<uint4*>(tile)[t] = reinterpret_cast<const uint4*>(in)[t];
    __syncwarp();
    const unsigned row = smem_address(tile + (t % 16) * 64 + (t / 16) * 8);
    unsigned f[4], g[2];
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(f[0]), "=r"(f[1]), "=r"(f[2]), "=r"(f[3]) : "r"(row));
    asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0,%1}, [%2];" : "=r"(g[0]), "=r"(g[1]) : "r"(row));
#if __CUDA_ARCH__ >= 900
    __syncwarp();
    asm volatile("stmatrix.sync.aligned.m8n8.x4.shared.b16 [%0], {%1,%2,%3,%4};"
                 :: "r"(row), "r"(f[3]), "r"(f[2]), "r"(f[1]), "r"(f[0]) : "memory");
    asm volatile("stmatrix.sync.aligned.m8n8.x2.trans.shared.b16 [%0], {%1,%2};"
                 :: "r"(row + 2048), "r"(g[0]), "r"(g[1]) : "memory");
    __syncwarp();
    f[0] ^= tile[t * 3];
#endif
    out[t] = f[0] + f[1] + f[2] + f[3] + g[0] + g[1];
}

#if __CUDA_ARCH__ >= 800
extern "C" __global__ void mma_ampere(float* d, int* di, double* dd, FRAG(a), FRAG(b), const float* c, const double* cd)
{
    const int t = threadIdx.x;
    const unsigned a0 = a[t], a1 = a[t + 32], a2 = a[t + 64], a3 = a[t + 96], b0 = b[t], b1 = b[t + 32];
    float h[4], bf[4], tf[4];
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%10,%10,%10};"
                 : "=f"(h[0]), "=f"(h[1]), "=f"(h[2]), "=f"(h[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(c[t]));
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%11,%12,%13};"
                 : "=f"(bf[0]), "=f"(bf[1]), "=f"(bf[2]), "=f"(bf[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(h[0]), "f"(h[1]), "f"(h[2]), "f"(h[3]));
    asm volatile("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%11,%12,%13};"
                 : "=f"(tf[0]), "=f"(tf[1]), "=f"(tf[2]), "=f"(tf[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(bf[0]), "f"(bf[1]), "f"(bf[2]), "f"(bf[3]));
    int s[4], p[4];
    asm volatile("mma.sync.aligned.m16n8k32.row.col.satfinite.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%10,%10,%10};"
                 : "=r"(s[0]), "=r"(s[1]), "=r"(s[2]), "=r"(s[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(t));
    asm volatile("mma.sync.aligned.m16n8k256.row.col.s32.b1.b1.s32.and.popc {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%11,%12,%13};"
                 : "=r"(p[0]), "=r"(p[1]), "=r"(p[2]), "=r"(p[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(s[0]), "r"(s[1]), "r"(s[2]), "r"(s[3]));
    float sp[4];
    asm volatile("mma.sp.sync.aligned.m16n8k32.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, "
                 "{%8,%9,%4,%5}, {%10,%11,%12,%13}, %14, 0x0;"
                 : "=f"(sp[0]), "=f"(sp[1]), "=f"(sp[2]), "=f"(sp[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "f"(tf[0]), "f"(tf[1]), "f"(tf[2]), "f"(tf[3]),
                   "r"(a[t + 128]));
    double f64[2];
    asm volatile("mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0,%1}, {%2}, {%3}, {%4,%5};"
                 : "=d"(f64[0]), "=d"(f64[1]) : "d"(cd[t]), "d"(cd[t + 32]), "d"(cd[t + 64]), "d"(cd[t + 96]));
    d[t] = sp[0] + sp[1] + sp[2] + sp[3];
    di[t] = p[0] + p[1] + p[2] + p[3];
    dd[t] = f64[0] * f64[1];
}
#endif

#if __CUDA_ARCH__ >= 890
extern "C" __global__ void mma_fp8(float* d, unsigned short* packed, FRAG(a), FRAG(b), const float* c)
{
    const int t = threadIdx.x;
    float r[4];
    asm volatile("mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e5m2.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%10,%10,%10,%10};"
                 : "=f"(r[0]), "=f"(r[1]), "=f"(r[2]), "=f"(r[3])
                 : "r"(a[t]), "r"(a[t + 32]), "r"(a[t + 64]), "r"(a[t + 96]), "r"(b[t]), "r"(b[t + 32]), "f"(c[t]));
    unsigned short e4, e5;
    asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(e4) : "f"(r[0]), "f"(r[1]));
    asm("cvt.rn.satfinite.e5m2x2.f32 %0, %1, %2;" : "=h"(e5) : "f"(r[2]), "f"(r[3]));
    d[t] = r[0] - r[3];
    packed[t] = e4 ^ e5;
}
#endif
