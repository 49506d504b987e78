"""The roofline kernels on the simulated GPU: their results from the PTX's semantics, their time from a roofline.

Semantics (ptx/roofline/fp32.ptx): block ``b``'s thread ``t`` loads, per iteration ``j`` and load ``u``, the four
f32 at byte ``b x iters x 16 KiB + j x 16 KiB + u x 4 KiB + 16 t`` of ``src`` (the shared kernel: ``iters`` 1, its
tile copied from the same bytes), and adds each word ``F / 4`` times a load into accumulators that start at
0 .. 7; thread 0 of each block writes its cycles, ns and SM. Worked out here from the addresses, not from the
host's prediction (:mod:`gpuprobe.families.roofline.fp32`).

Time: a launch moves ``footprint x passes`` bytes and does 2 F flop per 16 of them; the level is the L2 when the
footprint fits it (the launches before left it there), DRAM otherwise, and shared memory for the shared kernels;
its seconds are ``(memory^4 + compute^4)^(1/4)``, a roofline with a rounded knee, times the run's noise. Rates,
attributes of the SimulatedGpu: ``roof_dram_gbps`` and ``roof_l2_gbps`` (a 132-SM part's; scaled to the part's
SMs), ``roof_shared_bpc`` (bytes per clock per SM), ``roof_fp32_share`` (of 128 lanes x 2 flop per clock per SM).

Faults to plant: ``roof_corrupt`` (thread 0's sum is off by one: the self-check fails the probe) and
``roof_speedup`` (every launch takes this many times less: rates above the per-clock peak, which the guard fails).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from gpuprobe.families.roofline.fp32_ptx import (
    ACCUMULATORS,
    FFMAS_PER_LOAD,
    ITERATION_BYTES,
    LOAD_BYTES,
    LOADS,
    RECORD_WORDS,
    STRIDE,
    THREADS,
)
from gpuprobe.simulated.simulation import Simulation

DEFAULTS = {"roof_dram_gbps": 3600.0, "roof_l2_gbps": 9000.0, "roof_shared_bpc": 120.0, "roof_fp32_share": 0.9}
REFERENCE_SMS = 132
KNEE = 4.0  # the rounding of the roofline's knee


def _option(gpu: Any, name: str) -> Any:
    return getattr(gpu, name, DEFAULTS.get(name))


def _thread_sums(src: Any, blocks: int, iters: int) -> np.ndarray:
    """Per thread (block-major), the sum of the words it loads in one pass, address by address."""
    words = np.asarray(src.data).view(np.float32)
    b, j, u, t = np.ix_(np.arange(blocks), np.arange(iters), np.arange(LOADS), np.arange(THREADS))
    first_word = (b * iters * ITERATION_BYTES + j * ITERATION_BYTES + u * STRIDE + t * LOAD_BYTES) // 4
    loaded = sum(words[first_word + w] for w in range(LOAD_BYTES // 4))
    return loaded.sum(axis=(1, 2)).reshape(-1).astype(np.float64)


def _seconds(gpu: Any, level: str, moved: float, flop: float) -> float:
    scale = gpu.sm_count / REFERENCE_SMS
    gbps = {"dram": _option(gpu, "roof_dram_gbps") * scale, "l2": _option(gpu, "roof_l2_gbps") * scale,
            "shared": _option(gpu, "roof_shared_bpc") * gpu.sm_count * gpu.mhz * 1e6 / 1e9}[level]  # fmt: skip
    flops = _option(gpu, "roof_fp32_share") * 2 * 128 * gpu.sm_count * gpu.mhz * 1e6
    memory, compute = moved / (gbps * 1e9), flop / flops
    return (memory**KNEE + compute**KNEE) ** (1 / KNEE) * gpu._jitter() / getattr(gpu, "roof_speedup", 1.0)


def roofline_fp32(
    ffmas: int, shared: bool, gpu: Any, launch: Any, src, passes, c, sums, out, iters=1, toggle=0
) -> float:
    """One launch of gp_roofline_fp32_{global,shared}_ffma{F}: every thread's result, every block's record, its ms."""
    assert launch.threads == THREADS, f"the roofline kernels take {THREADS}-thread blocks (.reqntid)"
    assert int(toggle) == 0, "the host passes toggle 0"
    blocks, iters, passes = launch.blocks, int(iters), int(passes)
    per_pass = _thread_sums(src, blocks, iters)
    result = (sum(range(ACCUMULATORS)) + passes * (ffmas // 4) * float(c) * per_pass).astype(np.float32)
    if getattr(gpu, "roof_corrupt", False):
        result[0] += 1
    sums.data[: 4 * result.size] = result.view(np.uint8)
    footprint = blocks * iters * ITERATION_BYTES
    level = "shared" if shared else "l2" if footprint <= gpu.l2_bytes else "dram"
    moved = float(footprint * passes)
    seconds = _seconds(gpu, level, moved, moved / LOAD_BYTES * 2 * ffmas)
    record = np.zeros((blocks, RECORD_WORDS), dtype=np.uint64)
    record[:, 0] = round(seconds * gpu.mhz * 1e6)
    record[:, 1] = round(seconds * 1e9)
    record[:, 2] = np.arange(blocks) % gpu.sm_count
    out.data[: record.nbytes] = record.view(np.uint8).reshape(-1)
    return seconds * 1e3


KERNELS = {
    f"gp_roofline_fp32_{source}_ffma{f}": functools.partial(roofline_fp32, f, source == "shared")
    for source in ("global", "shared")
    for f in FFMAS_PER_LOAD
}

SIMULATION = Simulation(kernels=KERNELS)
