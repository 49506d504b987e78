"""What a simulated chain kernel writes (see ptx/common/chain_records.ptxinc): every thread's result words,
then each warp's timing record, from its lane 0; and how long its loop takes an iteration. Shared by the ALU
and mma simulations.

An iteration of a chain loop (:func:`iteration_cycles`) takes the longest of three bounds: the dependent
chain (its steps at the instruction's latency, plus the bubble its branch leaves before the next
iteration's first step), the issue slots (each warp's instructions and its loop control, an IADD, an
ISETP and a BRA, one a clock per scheduler) and the pipe (the SM's warps' instructions at the unit's
rate). So a loop of 32 FFMA issues at 32 / 35 of the SM's 128 lanes a clock and a chain of them steps in
(32 x 4 + 7) / 32 cycles, as an H200 measured, while its twin of 64 under the same control adds exactly
32 x 4 cycles a warp-step; a unit slower than issue (IMAD, MUFU) hides the control in its idle slots.

Blocks go to SMs as a real block scheduler may send them: one per SM mostly, but in a share
(``gpu.double_up``, default :data:`DOUBLE_UP`) of the launches of several blocks one block lands on
an SM that already holds another, whose warps then share that SM. %globaltimer moves in ticks
(:mod:`gpuprobe.simulated.timer`).
"""

from __future__ import annotations

import math

import numpy as np

from gpuprobe.families.issue_sweep import TIMING_WORDS, TWIN_SUFFIX
from gpuprobe.simulated.gpu import CLOCKED_RUN_SD
from gpuprobe.simulated.timer import at_launch

EDGE = 40.0  # cycles a timed loop pays once
CONTROL_SLOTS = 3  # issue slots a warp's loop control takes an iteration: IADD, ISETP, BRA
SCHEDULERS = 4  # warp schedulers per SM, each issuing one warp instruction a clock
# A chain's cycles are the pipeline's, not a clock's: an H200's ALU and mma.sync figures repeated to 0.01 %
# on another board (reports/nvidia-h200 against run 1), where a launch's time moves with clocks and the host.
CYCLES_NOISE_SHARE = 0.1
BRANCH_BUBBLE = 7.0  # cycles a dependent chain waits each iteration for its loop's branch (H200 FFMA: 135 for 32 x 4)
WARP_SKEW = 5.0  # cycles between the starts of consecutive warps of an SM
DOUBLE_UP = 0.25  # the share of launches of 4 blocks or more in which one SM gets two blocks


def place_blocks(gpu, launch) -> np.ndarray:
    """Each block's SM: block b on SM b mod SM count, except that now and then one block is sent to
    the SM of another (the SM it should have had runs nothing)."""
    sm_of_block = np.arange(launch.blocks) % gpu.sm_count
    if launch.blocks >= 4 and gpu._rng.random() < getattr(gpu, "double_up", DOUBLE_UP):
        moved, host = gpu._rng.choice(launch.blocks, size=2, replace=False)
        sm_of_block[moved] = sm_of_block[host]
    return sm_of_block


def layout(launch, sm_of_block: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Each thread's SM, each thread's warp index in its block, warps per block."""
    warps = math.ceil(launch.threads / 32)
    thread_sm = np.repeat(sm_of_block, launch.threads)
    warp_in_block = (np.arange(launch.blocks * launch.threads) % launch.threads) // 32
    return thread_sm, warp_in_block, warps


def warps_on_sm(launch, sm_of_block: np.ndarray) -> np.ndarray:
    """Per thread, the warps resident on its SM."""
    thread_sm, _, warps = layout(launch, sm_of_block)
    per_sm = np.bincount(sm_of_block, minlength=int(sm_of_block.max()) + 1) * warps
    return per_sm[thread_sm]


def iteration_cycles(
    instructions: int, chain_cycles: float, pipe_cycles: np.ndarray, warps: np.ndarray, bubble: float = BRANCH_BUBBLE
) -> np.ndarray:
    """Cycles a loop iteration takes on an SM holding ``warps`` warps (per thread): the longest of one
    chain's ``chain_cycles`` (its dependent steps at their latency) and its branch ``bubble``, the issue
    slots of every warp's ``instructions`` and loop control over the schedulers the warps occupy, and
    ``pipe_cycles``, what the unit needs for every warp's instructions."""
    issue = warps * (instructions + CONTROL_SLOTS) / np.minimum(warps, SCHEDULERS)
    return np.maximum(np.maximum(chain_cycles + bubble, issue), pipe_cycles)


def cycles_factor(gpu) -> float:
    """This launch's factor on a chain's cycles: its run's (CLOCKED_RUN_SD, drawn once per kernel and shared
    by a twin, which runs its kernel's instructions on the same SMs) times a sample's noise, a tenth of a
    launch time's (:data:`CYCLES_NOISE_SHARE`)."""
    kernel = gpu._kernel.removesuffix(TWIN_SUFFIX)
    return gpu.run_factor(kernel, CLOCKED_RUN_SD) * (1.0 + CYCLES_NOISE_SHARE * gpu.noise * gpu._rng.standard_normal())


def write(
    gpu, launch, sm_of_block: np.ndarray, out, cycles_per_iteration: np.ndarray, iterations: int, results: np.ndarray
) -> float:
    """Write the results (threads x words, uint64) and each warp's timing; the simulated ms."""
    thread_sm, warp_in_block, _ = layout(launch, sm_of_block)
    start = 10_000.0 + WARP_SKEW * warp_in_block
    end = start + EDGE + iterations * cycles_per_iteration * cycles_factor(gpu)
    lane0 = np.arange(0, launch.blocks * launch.threads, 32) if launch.threads >= 32 else np.arange(launch.blocks)
    timer = at_launch(gpu)
    timing = np.zeros((len(lane0), TIMING_WORDS), dtype=np.uint64)
    timing[:, 0], timing[:, 1] = np.round(start[lane0]), np.round(end[lane0])
    timing[:, 2] = timer.read(start[lane0] / gpu.mhz * 1000.0)
    timing[:, 3] = timer.read(end[lane0] / gpu.mhz * 1000.0)
    timing[:, 4] = thread_sm[lane0]
    raw = out.data.view(np.uint64)
    raw[: results.size] = results.ravel()
    raw[results.size : results.size + timing.size] = timing.ravel()
    return float(end.max() / gpu.mhz / 1000.0)
