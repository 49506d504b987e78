"""The power family's kernels on the simulated GPU: what they compute in NumPy, and their time at the clock the
simulated power model (:mod:`gpuprobe.simulated.power`) gives them, so a sustained run of random-operand mma
slows as the power limit pulls the clock down, and zeros or a stream do not. Nothing it produces is a measurement.

* ``gp_pw_bf16_m16n8k16_ilp8``: every lane writes the sum of 8 chains at C + A B (decoded from the fragments the
  host uploaded); an SM's iteration takes its warps' multiply-adds over the bf16 peak per clock; zero fragments
  draw as ``tensor_zero``;
* ``gp_pw_stream``: thread t's four word sums over vectors t, t + T, t + 2T, ... (wrapping at the span), its
  bytes at the bandwidth family's DRAM or L2 rate (:func:`~gpuprobe.families.bandwidth.simulated.memory_read_gbps`);
* ``gp_pw_ffma``: every chain back at its start, x_q + x_(q+4) a thread; an SM's iteration its warps' FFMAs and
  loop control, one warp instruction a scheduler a clock (64 of 67 issue slots FFMAs);
* ``gp_pw_shared``: each thread's sums, the iterations times those of a neighbour warp's four vectors of the block's
  16 KB; an SM's iteration its warps' bytes over :data:`SHARED_BYTES_PER_CLOCK`;
* ``gp_pw_wg_tput_ss_bf16_n256``: the wgmma family's simulated throughput kernel, at the power model's clock;
* ``gp_pw_clock_stamp``: the wgmma family's simulated clock stamp around the simulated GPU's cuBLAS, whose rate
  and clock the power model leaves alone (its batches draw as tensor work: the power and energy follow).

``gpu.power_corrupt`` (a kernel name) flips a bit of the last thread's first word in every launch of it.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np

from gpuprobe.families.bandwidth.simulated import memory_read_gbps
from gpuprobe.families.mma.simulated import TIMING, cached_lane_results
from gpuprobe.families.power import (
    BYTES_PER_THREAD_ITERATION,
    FFMA_CHAINS,
    FFMA_KERNEL,
    FFMA_PER_THREAD_ITERATION,
    MMA_KERNEL,
    SHARED_KERNEL,
    SHARED_THREADS,
    STREAM_KERNEL,
    VARIANT,
    Settings,
)
from gpuprobe.families.power.wgmma import CLOCK_STAMP, WGMMA
from gpuprobe.families.wgmma.simulated import clock_stamp
from gpuprobe.families.wgmma.simulated import simulate as simulate_wgmma
from gpuprobe.simulated import power
from gpuprobe.simulated.chain_output import CONTROL_SLOTS, SCHEDULERS, warps_on_sm, write
from gpuprobe.simulated.simulation import Simulation

FAST_SETTINGS = Settings(idle_s=0.2, sustained_s=0.4, launch_ms=10.0, rest_s=0.05, wgmma_warpgroups=1)
MMA_PER_ITERATION = 16
SHARED_BYTES_PER_CLOCK = 128  # an SM's shared memory: 32 banks of 4 bytes


@contextlib.contextmanager
def clocked(gpu, work: str) -> Iterator[float]:
    """The part's clock, for one launch, at what the power model gives ``work`` now."""
    nominal = gpu.mhz
    gpu.mhz = gpu.power_state.clock(work, nominal)
    try:
        yield gpu.mhz
    finally:
        gpu.mhz = nominal


def full_grid_sms(gpu, launch) -> np.ndarray:
    """Each block's SM: a full grid fills every SM's room for blocks, so none is sent to an SM that holds another
    (:func:`~gpuprobe.simulated.chain_output.place_blocks`'s now-and-then double-up cannot happen)."""
    return np.arange(launch.blocks) % gpu.sm_count


def corrupted(gpu, kernel: str, words: np.ndarray) -> np.ndarray:
    """Each thread's four words as the kernel writes them (64-bit pairs), one bit wrong where ``power_corrupt``
    names ``kernel``."""
    if getattr(gpu, "power_corrupt", "") == kernel:
        words[-1, 0] ^= 1
    return words.view(np.uint64).reshape(-1, 2)


def mma(gpu, launch, iters, fragments, out) -> float:
    raw = fragments.data.tobytes()
    work = "tensor" if np.any(np.frombuffer(raw, dtype=np.uint32) & 0x7FFF7FFF) else "tensor_zero"  # -0 is zero too
    gpu.power_kind = work
    lanes = cached_lane_results(VARIANT, raw)
    results = corrupted(gpu, MMA_KERNEL, np.ascontiguousarray(lanes[np.arange(launch.blocks * launch.threads) % 32]))
    sms = full_grid_sms(gpu, launch)
    peak = TIMING[(VARIANT.name, VARIANT.shape)][1]  # multiply-adds per clock per SM
    per_iteration = warps_on_sm(launch, sms) * MMA_PER_ITERATION * VARIANT.fmas / peak
    with clocked(gpu, work):
        return write(gpu, launch, sms, out, per_iteration.astype(float), int(iters), results)


def stream(gpu, launch, src, span, iters, out) -> float:
    holder, at = gpu.buffer_at(src)
    threads = launch.blocks * launch.threads
    rounds = holder.data[at : at + int(span)].view(np.uint32).reshape(-1, threads, 4).astype(np.uint64)
    loads = 4 * int(iters)  # thread t's load k reads vector (t + k T) mod V: round k mod V/T of the buffer
    whole, part = divmod(loads, len(rounds))
    sums = rounds.sum(axis=0) * np.uint64(whole) + rounds[:part].sum(axis=0, dtype=np.uint64)
    results = corrupted(gpu, STREAM_KERNEL, (sums & np.uint64(0xFFFFFFFF)).astype(np.uint32))
    level = "dram" if int(span) > gpu.l2_bytes else "l2"
    ms = threads * loads * 16 / (memory_read_gbps(gpu, level) * 1e6)
    sms = full_grid_sms(gpu, launch)
    with clocked(gpu, power.kind(STREAM_KERNEL)) as mhz:
        per_iteration = np.full(threads, ms * 1e3 * mhz / int(iters))
        return write(gpu, launch, sms, out, per_iteration, int(iters), results)


def ffma(gpu, launch, operands, iters, out) -> float:
    x = operands.data.view(np.float32)[2 * FFMA_CHAINS : 3 * FFMA_CHAINS]
    threads = launch.blocks * launch.threads
    results = corrupted(gpu, FFMA_KERNEL, np.tile((x[:4] + x[4:]).view(np.uint32), (threads, 1)))
    sms = full_grid_sms(gpu, launch)
    per_iteration = warps_on_sm(launch, sms) * (FFMA_PER_THREAD_ITERATION + CONTROL_SLOTS) / SCHEDULERS  # issue-bound
    with clocked(gpu, power.kind(FFMA_KERNEL)):
        return write(gpu, launch, sms, out, per_iteration.astype(float), int(iters), results)


def shared(gpu, launch, src, iters, out) -> float:
    holder, at = gpu.buffer_at(src)
    vectors = holder.data[at : at + 4 * SHARED_THREADS * 16].view(np.uint32).reshape(-1, 4).astype(np.uint64)
    lanes = np.arange(SHARED_THREADS) ^ 32
    sums = sum(vectors[lanes + SHARED_THREADS * k] for k in range(4)) * np.uint64(int(iters))
    block = (sums & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    results = corrupted(gpu, SHARED_KERNEL, np.tile(block, (launch.blocks, 1)))
    sms = full_grid_sms(gpu, launch)
    per_iteration = warps_on_sm(launch, sms) * 32 * BYTES_PER_THREAD_ITERATION / SHARED_BYTES_PER_CLOCK
    with clocked(gpu, power.kind(SHARED_KERNEL)):
        return write(gpu, launch, sms, out, per_iteration.astype(float), int(iters), results)


def wgmma(gpu, launch, a, **params) -> float:
    work = "tensor" if a.data.any() else "tensor_zero"
    gpu.power_kind = work
    with clocked(gpu, work):
        return simulate_wgmma(gpu, launch, WGMMA, a=a, **params)


KERNELS = {MMA_KERNEL: mma, STREAM_KERNEL: stream, FFMA_KERNEL: ffma, SHARED_KERNEL: shared, WGMMA.name: wgmma,
           CLOCK_STAMP: clock_stamp}  # fmt: skip
SIMULATION = Simulation(kernels=KERNELS, fast_settings=FAST_SETTINGS)
