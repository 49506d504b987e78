"""Simulated cluster-family kernels: clusters formed from consecutive blocks as the hardware forms
them for a 1-D grid, each block's checked sum and rank, and mbarrier phases counted one by one.
``gpu.cluster_corrupt = True`` makes the last block of each launch leave a barrier early once (its
sum misses an iteration) and an mbarrier lose one arrival (the phase parities come out shifted)."""

from __future__ import annotations

import functools

import numpy as np

from gpuprobe.kernels.registry import unroll_of
from gpuprobe.simulated.simulation import Simulation

FIXED = 120.0


def cluster_cost(size: int) -> float:
    """Cycles per cluster.sync() of ``size`` blocks (a release fence, the barrier, an invalidation)."""
    return 330.0 + 25.0 * size


def cluster_bar(size: int, gpu, launch, iters, out) -> None:
    assert launch.blocks % size == 0, "a cluster kernel's grid must be a multiple of its cluster size"
    n, unroll = int(iters), unroll_of(f"gp_cluster_bar_{size}")
    words = out.data.view(np.uint64)
    corrupt = getattr(gpu, "cluster_corrupt", False)
    for block in range(launch.blocks):
        total = n * (n + 1) // 2 - (1 if corrupt and block == launch.blocks - 1 else 0)
        cycles = round(FIXED + n * unroll * cluster_cost(size) * gpu._jitter())
        words[4 * block : 4 * block + 4] = [cycles, block // size % gpu.sm_count, total, block % size]


def mbarrier(kernel: str, gpu, launch, iters, out) -> None:
    """Count the phases as the kernel runs them, then read its parity tests as the hardware would."""
    prologue, unroll = (1 if kernel == "gp_mbar_tx" else 0), unroll_of(kernel)
    phases = prologue + int(iters) * unroll - (1 if getattr(gpu, "cluster_corrupt", False) else 0)
    tested = prologue + int(iters) * unroll  # the kernel tests the parities it expects from iters
    current_parity = phases & 1

    def complete(parity: int) -> int:  # the phase of this parity completed: it is not the current one
        return int(parity != current_parity)

    cost = {"gp_mbar_arrive_wait": 48.0, "gp_mbar_tx": 75.0}[kernel]
    words = out.data.view(np.uint64)
    words[0] = round(FIXED + int(iters) * unroll * cost * gpu._jitter())
    words[1] = complete((tested & 1) ^ 1)
    words[2] = complete(tested & 1)
    words[3] = 0


KERNELS = {
    **{f"gp_cluster_bar_{size}": functools.partial(cluster_bar, size) for size in (2, 4, 8)},
    **{name: functools.partial(mbarrier, name) for name in ("gp_mbar_arrive_wait", "gp_mbar_tx")},
}

SIMULATION = Simulation(kernels=KERNELS)
