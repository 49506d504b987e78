// Thread-block clusters through cooperative groups (sm_90+): cg::this_cluster().sync() against the
// hand-written cluster barrier (ptx/cluster/), and a chase through another block's shared memory by
// cluster.map_shared_rank against the hand-written one (ptx/async_copy/, gp_ac_dsm_chase). Each has
// its twin's interface and check.
#include "coop.cuh"

__shared__ unsigned gp_coop_cluster_slots[32];

// cluster.sync() 32 times per iteration, clusters of SIZE one-warp blocks. Per iteration thread 0
// of each block writes the iteration's number into its slot in block 0's shared memory (one of two
// banks of 16 by parity), then the 32 barriers, then every block reads the slot of the next block of
// its cluster and adds it to a sum: 1 + 2 + ... + iters only if no block left a barrier before all
// had arrived. A last barrier keeps block 0's memory alive until every block has read it.
// out (u64), per block b at 4 b: [cycles, SM id, sum, rank in the cluster].
template <unsigned SIZE>
__device__ __forceinline__ void gp_cluster_sync(unsigned iters, unsigned long long* out)
{
    cg::cluster_group cluster = cg::this_cluster();
    const unsigned rank = cluster.block_rank();
    const unsigned next = (rank + 1) % SIZE;
    unsigned* slots = cluster.map_shared_rank(gp_coop_cluster_slots, 0);
    unsigned sum = 0;
    cluster.sync();
    const unsigned long long start = gp_clock();
    unsigned left = iters;
#pragma unroll 1
    do {
        volatile unsigned* bank = slots + (left & 1u) * 16u;
        if (threadIdx.x == 0) {
            bank[rank] = left;
        }
#pragma unroll
        for (int k = 0; k < GP_UNROLL; ++k) {
            cluster.sync();
        }
        sum += bank[next];
    } while (--left != 0);
    const unsigned long long cycles = gp_clock() - start;
    cluster.sync();
    if (threadIdx.x == 0) {
        unsigned long long* row = out + blockIdx.x * 4;
        row[0] = cycles;
        row[1] = gp_smid();
        row[2] = sum;
        row[3] = rank;
    }
}

#define GP_CLUSTER_SYNC(SIZE)                                                                                 \
    extern "C" __global__ void __cluster_dims__(SIZE, 1, 1) gp_coop_cluster_sync_##SIZE(unsigned iters,       \
                                                                                        unsigned long long* out) \
    {                                                                                                         \
        gp_cluster_sync<SIZE>(iters, out);                                                                    \
    }

GP_CLUSTER_SYNC(2)
GP_CLUSTER_SYNC(4)
GP_CLUSTER_SYNC(8)

// A chase through another block's shared memory by cluster.map_shared_rank, clusters of 2, as the
// hand-written gp_ac_dsm_chase does it: each block copies the cycle into its own dynamic shared
// memory (node i at i x stride), each node holding the address of its successor in the same block
// through the cluster window (map_shared_rank of the block's own rank); after cluster.sync(), thread
// 0 of rank 0 chases the copy of block `target` (0: its own memory; 1: the peer's) from the node
// `start` mapped there, `warm` untimed steps, then `iters` x 32 timed ones, each step a load of the
// next address. A last cluster.sync() keeps the peer's memory alive until the chase is done.
// out: [cycles, ns, final node's byte offset in the target block, SM id].
extern __shared__ __align__(16) unsigned char gp_coop_dsm_buf[];

extern "C" __global__ void __cluster_dims__(2, 1, 1)
    gp_coop_dsm_chase(const unsigned* successors, unsigned nodes, unsigned stride, unsigned start, unsigned target,
                      unsigned warm, unsigned iters, unsigned long long* out)
{
    cg::cluster_group cluster = cg::this_cluster();
    const unsigned rank = cluster.block_rank();
    for (unsigned i = threadIdx.x; i < nodes; i += blockDim.x) {
        unsigned char* successor = cluster.map_shared_rank(gp_coop_dsm_buf + successors[i], rank);
        *reinterpret_cast<unsigned char**>(gp_coop_dsm_buf + i * stride) = successor;
    }
    cluster.sync();
    if (threadIdx.x == 0 && rank == 0) {
        unsigned char* const base = cluster.map_shared_rank(gp_coop_dsm_buf, target);
        unsigned char* node = base + start * stride;
#pragma unroll 1
        for (unsigned i = 0; i < warm; ++i) {
            node = *reinterpret_cast<unsigned char**>(node);
        }
        const unsigned long long ns = gp_globaltimer();
        const unsigned long long begin = gp_clock();
        unsigned left = iters;
#pragma unroll 1
        do {
#pragma unroll
            for (int k = 0; k < GP_UNROLL; ++k) {
                node = *reinterpret_cast<unsigned char**>(node);
            }
        } while (--left != 0);
        const unsigned long long cycles = gp_clock() - begin;
        const unsigned long long elapsed = gp_globaltimer() - ns;
        out[0] = cycles;
        out[1] = elapsed;
        out[2] = static_cast<unsigned long long>(node - base);
        reinterpret_cast<unsigned*>(out)[6] = gp_smid();
    }
    cluster.sync();
}
