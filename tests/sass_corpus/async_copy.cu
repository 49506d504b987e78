// archs: sm_80 sm_86 sm_89 sm_90 sm_90a sm_100a sm_120
// Ampere asynchronous copies (cp.async -> LDGSTS) with commit/wait groups and an mbarrier
// completing on them, double-buffered in a loop.

__device__ __forceinline__ unsigned smem_address(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

extern "C" __global__ void cp_async_pipeline(float4* out, const float4* in, const float* scalars, int tiles)
{
    __shared__ float4 stage[2][128];
    __shared__ float singles[2][128];
    const int t = threadIdx.x;
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" :: "r"(smem_address(&stage[0][t])), "l"(in + t));
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;" :: "r"(smem_address(&singles[0][t])), "l"(scalars + t));
    asm volatile("cp.async.commit_group;");
    float4 acc = make_float4(0.f, 0.f, 0.f, 0.f);
    for (int k = 1; k < tiles; ++k) {
        const int next = k & 1;
        asm volatile("cp.async.cg.shared.global.L2::128B [%0], [%1], 16;"
                     :: "r"(smem_address(&stage[next][t])), "l"(in + k * 128 + t));
        asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;"
                     :: "r"(smem_address(&singles[next][t])), "l"(scalars + k * 128 + t), "r"(t & 3));
        asm volatile("cp.async.commit_group;");
        asm volatile("cp.async.wait_group 1;" ::: "memory");
        __syncthreads();
        const float4 v = stage[next ^ 1][(t + k) & 127];
        const float s = singles[next ^ 1][t];
        acc.x += v.x * s; acc.y += v.y; acc.z += v.z; acc.w += v.w;
        __syncthreads();
    }
    asm volatile("cp.async.wait_all;" ::: "memory");
    out[t] = acc;
}

extern "C" __global__ void cp_async_mbarrier(float* out, const float* in)
{
    __shared__ __align__(8) unsigned long long bar;
    __shared__ float buffer[256];
    const int t = threadIdx.x;
    const unsigned b = smem_address(&bar);
    if (t == 0) {
        asm volatile("mbarrier.init.shared.b64 [%0], %1;" :: "r"(b), "r"(blockDim.x));
    }
    __syncthreads();
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;" :: "r"(smem_address(&buffer[2 * t])), "l"(in + 2 * t));
    asm volatile("cp.async.mbarrier.arrive.noinc.shared.b64 [%0];" :: "r"(b));
    unsigned long long state;
    asm volatile("mbarrier.arrive.shared.b64 %0, [%1];" : "=l"(state) : "r"(b) : "memory");
    unsigned done = 0;
    while (!done) {
        asm volatile("{ .reg .pred p; mbarrier.test_wait.shared.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(b), "l"(state) : "memory");
    }
    out[t] = buffer[(t * 7) & 255];
    if (t == 0) {
        asm volatile("mbarrier.inval.shared.b64 [%0];" :: "r"(b));
    }
}
