"""What a simulated chain kernel writes (see ptx/chain_records.ptxinc): every thread's result words,
then each warp's timing record, from its lane 0. Shared by the ALU and mma simulations."""

from __future__ import annotations

import math

import numpy as np

from gpuprobe.families.issue_sweep import TIMING_WORDS

EDGE = 40.0  # cycles a timed loop pays once
WARP_SKEW = 5.0  # cycles between the starts of consecutive warps of an SM


def layout(gpu, launch) -> tuple[np.ndarray, np.ndarray, int]:
    """Each thread's SM (block b on SM b mod SM count), each warp's index in its block, warps per block."""
    warps = math.ceil(launch.threads / 32)
    sm_of_block = np.arange(launch.blocks) % gpu.sm_count
    thread_sm = np.repeat(sm_of_block, launch.threads)
    warp_in_block = (np.arange(launch.blocks * launch.threads) % launch.threads) // 32
    return thread_sm, warp_in_block, warps


def warps_on_sm(gpu, launch) -> np.ndarray:
    """Per thread, the warps resident on its SM."""
    thread_sm, _, warps = layout(gpu, launch)
    per_sm = np.bincount(np.arange(launch.blocks) % gpu.sm_count, minlength=gpu.sm_count) * warps
    return per_sm[thread_sm]


def write(gpu, launch, out, cycles_per_iteration: np.ndarray, iterations: int, results: np.ndarray) -> float:
    """Write the results (threads x words, uint64) and each warp's timing; the simulated ms."""
    thread_sm, warp_in_block, _ = layout(gpu, launch)
    start = 10_000.0 + WARP_SKEW * warp_in_block
    end = start + EDGE + iterations * cycles_per_iteration * (1.0 + gpu.noise * gpu._rng.standard_normal())
    lane0 = np.arange(0, launch.blocks * launch.threads, 32) if launch.threads >= 32 else np.arange(launch.blocks)
    timing = np.zeros((len(lane0), TIMING_WORDS), dtype=np.uint64)
    timing[:, 0], timing[:, 1] = np.round(start[lane0]), np.round(end[lane0])
    timing[:, 2] = np.round(1e9 + start[lane0] / gpu.mhz * 1000.0)
    timing[:, 3] = np.round(1e9 + end[lane0] / gpu.mhz * 1000.0)
    timing[:, 4] = thread_sm[lane0]
    raw = out.data.view(np.uint64)
    raw[: results.size] = results.ravel()
    raw[results.size : results.size + timing.size] = timing.ravel()
    return float(end.max() / gpu.mhz / 1000.0)
