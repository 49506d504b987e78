// archs: sm_100a
// Fifth-generation tensor cores: tensor-memory allocation, tcgen05.mma from shared-memory
// descriptors into tensor memory, commit to an mbarrier, and tensor-memory loads/stores.

__device__ __forceinline__ unsigned smem_address(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ unsigned long long descriptor(const void* p)
{
    return (static_cast<unsigned long long>(smem_address(p)) & 0x3ffff) >> 4 | (1ull << 16) | (64ull << 32)
           | (1ull << 46);
}

extern "C" __global__ void __launch_bounds__(128, 1) tcgen05_mma(float* out, const unsigned* in, unsigned idesc,
                                                                  int accumulate)
{
    __shared__ __align__(1024) unsigned short a_tile[128 * 16];
    __shared__ __align__(1024) unsigned short b_tile[128 * 16];
    __shared__ unsigned tmem_base;
    __shared__ __align__(8) unsigned long long bar;
    const int t = threadIdx.x;
    const int warp = t / 32;
    reinterpret_cast<uint4*>(a_tile)[t] = reinterpret_cast<const uint4*>(in)[t];
    reinterpret_cast<uint4*>(b_tile)[t] = reinterpret_cast<const uint4*>(in)[t + 128];
    if (warp == 0) {
        asm volatile("tcgen05.alloc.cta_group::1.sync.aligned.shared::cta.b32 [%0], 32;" :: "r"(smem_address(&tmem_base)));
        asm volatile("tcgen05.relinquish_alloc_permit.cta_group::1.sync.aligned;");
    }
    if (t == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_address(&bar)));
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
    __syncthreads();
    asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
    const unsigned tmem = tmem_base;
    if (t == 0) {
        asm volatile("{ .reg .pred p; setp.ne.b32 p, %4, 0;\n"
                     "tcgen05.mma.cta_group::1.kind::f16 [%0], %1, %2, %3, p; }"
                     :: "r"(tmem), "l"(descriptor(a_tile)), "l"(descriptor(b_tile)), "r"(idesc), "r"(accumulate));
        asm volatile("tcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%0];"
                     :: "r"(smem_address(&bar)) : "memory");
    }
    unsigned done = 0;
    do {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], 0; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(smem_address(&bar)) : "memory");
    } while (!done);
    asm volatile("tcgen05.fence::after_thread_sync;" ::: "memory");
    unsigned r[4];
    const unsigned lane_base = tmem + (static_cast<unsigned>(warp * 32) << 16);
    asm volatile("tcgen05.ld.sync.aligned.32x32b.x4.b32 {%0, %1, %2, %3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3]) : "r"(lane_base));
    asm volatile("tcgen05.wait::ld.sync.aligned;" ::: "memory");
    asm volatile("tcgen05.st.sync.aligned.32x32b.x1.b32 [%0], {%1};" :: "r"(lane_base + 8), "r"(r[0] ^ r[3]));
    asm volatile("tcgen05.wait::st.sync.aligned;" ::: "memory");
    out[blockIdx.x * blockDim.x + t] = __uint_as_float(r[0]) + __uint_as_float(r[1]) + __uint_as_float(r[2])
                                       + __uint_as_float(r[3]);
    asm volatile("tcgen05.fence::before_thread_sync;" ::: "memory");
    __syncthreads();
    if (warp == 0) {
        asm volatile("tcgen05.dealloc.cta_group::1.sync.aligned.b32 %0, 32;" :: "r"(tmem));
    }
}
