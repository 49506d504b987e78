// archs: sm_90 sm_90a sm_100a sm_120
// Hopper-era asynchrony: mbarriers with transaction counts (SYNCS), bulk and tensor (TMA) copies
// (UBLKCP / UTMALDG / UTMASTG / UTMAPF), async proxy fences, elect.sync, thread-block clusters
// (cluster barriers, distributed shared memory) and programmatic dependent launch.

struct alignas(64) TensorMap { unsigned long long opaque[16]; };  // stands in for CUtensorMap

__device__ __forceinline__ unsigned smem_address(const void* p)
{
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void wait_parity(unsigned bar, unsigned parity)
{
    unsigned done = 0;
    do {
        asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                     : "=r"(done) : "r"(bar), "r"(parity) : "memory");
    } while (!done);
}

__device__ __forceinline__ bool elect_one()
{
    unsigned elected;
    asm volatile("{ .reg .pred p; elect.sync _|p, 0xffffffff; selp.u32 %0, 1, 0, p; }" : "=r"(elected));
    return elected != 0;
}

extern "C" __global__ void tma_tiles(const __grid_constant__ TensorMap in_map, const __grid_constant__ TensorMap out_map,
                                     float* out, int steps)
{
    __shared__ __align__(128) float tile[2][32 * 32];
    __shared__ __align__(8) unsigned long long full[2];
    const unsigned long long in_desc = reinterpret_cast<unsigned long long>(&in_map);
    const unsigned long long out_desc = reinterpret_cast<unsigned long long>(&out_map);
    const int t = threadIdx.x;
    if (t == 0) {
        asm volatile("prefetch.tensormap [%0];" :: "l"(in_desc) : "memory");
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_address(&full[0])));
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_address(&full[1])));
        asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
    }
    __syncthreads();
    float acc = 0.0f;
    for (int k = 0; k < steps; ++k) {
        const int s = k & 1;
        const unsigned bar = smem_address(&full[s]);
        if (t == 0) {
            asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(bar), "r"(4096) : "memory");
            asm volatile("cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
                         " [%0], [%1, {%2, %3}], [%4];"
                         :: "r"(smem_address(tile[s])), "l"(in_desc), "r"(k * 32), "r"(blockIdx.x * 32), "r"(bar)
                         : "memory");
            asm volatile("cp.async.bulk.prefetch.tensor.2d.L2.global.tile [%0, {%1, %2}];"
                         :: "l"(in_desc), "r"(k * 32 + 32), "r"(blockIdx.x * 32) : "memory");
        }
        wait_parity(bar, (k >> 1) & 1);
        acc += tile[s][t];
        tile[s][t] = acc;
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        __syncthreads();
        if (t == 0) {
            asm volatile("cp.async.bulk.tensor.2d.global.shared::cta.tile.bulk_group [%0, {%1, %2}], [%3];"
                         :: "l"(out_desc), "r"(k * 32), "r"(blockIdx.x * 32), "r"(smem_address(tile[s])) : "memory");
            asm volatile("cp.reduce.async.bulk.tensor.2d.global.shared::cta.add.tile.bulk_group [%0, {%1, %2}], [%3];"
                         :: "l"(out_desc), "r"(k * 32), "r"(0), "r"(smem_address(tile[s])) : "memory");
            asm volatile("cp.async.bulk.commit_group;");
            asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
        }
        __syncthreads();
    }
    out[blockIdx.x * blockDim.x + t] = acc;
}

extern "C" __global__ void bulk_copy(float* out, const float* in, int bytes)
{
    __shared__ __align__(128) float buffer[1024];
    __shared__ __align__(8) unsigned long long bar;
    const int t = threadIdx.x;
    const unsigned b = smem_address(&bar);
    asm volatile("griddepcontrol.wait;" ::: "memory");
    if (t < 32 && elect_one()) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(b));
        asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
        asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" :: "r"(b), "r"(bytes) : "memory");
        asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                     :: "r"(smem_address(buffer)), "l"(in), "r"(bytes), "r"(b) : "memory");
    }
    __syncthreads();
    wait_parity(b, 0);
    buffer[t] *= 2.0f;
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncthreads();
    if (t == 0) {
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;"
                     :: "l"(out), "r"(smem_address(buffer)), "r"(bytes) : "memory");
        asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;"
                     :: "l"(out + 1024), "r"(smem_address(buffer)), "r"(bytes) : "memory");
        asm volatile("cp.async.bulk.commit_group;");
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
    asm volatile("griddepcontrol.launch_dependents;");
}

extern "C" __global__ void __cluster_dims__(2, 1, 1) cluster_exchange(unsigned* out)
{
    __shared__ unsigned mailbox[128];
    __shared__ __align__(8) unsigned long long bar;
    const int t = threadIdx.x;
    unsigned rank, nranks;
    asm volatile("mov.u32 %0, %%cluster_ctarank;" : "=r"(rank));
    asm volatile("mov.u32 %0, %%cluster_nctarank;" : "=r"(nranks));
    mailbox[t] = rank * 1000u + static_cast<unsigned>(t);
    if (t == 0) {
        asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" :: "r"(smem_address(&bar)));
    }
    asm volatile("barrier.cluster.arrive.release.aligned;" ::: "memory");
    asm volatile("barrier.cluster.wait.acquire.aligned;" ::: "memory");
    const unsigned peer = (rank + 1) % nranks;
    unsigned remote, value, remote_bar;
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote) : "r"(smem_address(&mailbox[t ^ 1])), "r"(peer));
    asm volatile("ld.shared::cluster.u32 %0, [%1];" : "=r"(value) : "r"(remote) : "memory");
    asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(remote_bar) : "r"(smem_address(&bar)), "r"(peer));
    if (t == 0) {
        asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.u32 [%0], %1, [%2];"
                     :: "r"(remote), "r"(value), "r"(remote_bar) : "memory");
    }
    asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
    asm volatile("barrier.cluster.wait.aligned;" ::: "memory");
    out[blockIdx.x * blockDim.x + t] = value + mailbox[t];
}
