"""Simulated barrier-family kernels: every warp's checked sum as a correct barrier makes it, and a
per-barrier cost that grows with the warps waited for. ``gpu.barrier_corrupt = True`` makes one
warp read a stale slot once (its sum short by one iteration's number), as a broken barrier would;
``gpu.barrier_silent_block = True`` makes the last block write nothing."""

from __future__ import annotations

import numpy as np

from gpuprobe.kernels.registry import unroll_of
from gpuprobe.simulated.simulation import Simulation

FIXED = 80.0


def block_cost(warps: int) -> float:
    """Cycles per bar.sync for a block of ``warps`` warps (grows with the warps it waits for)."""
    return 18.0 + 1.5 * warps


def _write(gpu, launch, out, kernel: str, iters: int, per_step: float, sums: list[int]) -> None:
    words = out.data.view(np.uint64)
    per_sm = -(-launch.blocks // gpu.sm_count)
    crowding = 1.0 + 0.04 * (per_sm - 1)
    stride, unroll = 2 + launch.threads // 32, unroll_of(kernel)
    for block in range(launch.blocks):
        if getattr(gpu, "barrier_silent_block", False) and block == launch.blocks - 1:
            continue  # a block that never wrote its words: they keep the poison
        row = words[block * stride : (block + 1) * stride]
        row[0] = round(FIXED + iters * unroll * per_step * crowding * gpu._jitter())
        row[1] = block % gpu.sm_count
        values = list(sums)
        if getattr(gpu, "barrier_corrupt", False) and block == launch.blocks - 1:
            values[-1] = (values[-1] - 1) & 0xFFFFFFFF
        row[2 : 2 + len(values)] = values


def bar_block(gpu, launch, iters, out) -> None:
    warps, n = launch.threads // 32, int(iters)
    _write(gpu, launch, out, "gp_bar_block", n, block_cost(warps), [n * (n + 1) // 2] * warps)


def bar_named(gpu, launch, iters, out) -> None:
    warps, n = launch.threads // 32, int(iters)
    _write(gpu, launch, out, "gp_bar_named", n, block_cost(4) + 2.0, [n * (n + 1) // 2] * warps)


def bar_split(gpu, launch, iters, out) -> None:
    warps, rounds = launch.threads // 32, int(iters) * unroll_of("gp_bar_split")
    sums = [(rounds * (rounds + 1) // 2) & 0xFFFFFFFF if w % 2 else 0 for w in range(warps)]
    _write(gpu, launch, out, "gp_bar_split", int(iters), 2 * block_cost(warps) + 10.0, sums)


KERNELS = {"gp_bar_block": bar_block, "gp_bar_named": bar_named, "gp_bar_split": bar_split}

SIMULATION = Simulation(kernels=KERNELS)
