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

The tensor sweeps' kernels (ptx/roofline/tensor.ptx, tensor_sync.ptx):

* ``gp_rt_tma_<type>_r<R>``: finds its region through the tensor map it was given, walks each block's chunk as
  the PTX does (block b, step k: tile pair ``b x chunk + k mod chunk``), reads every tile pair's A and B where
  the descriptor bits (``layout``) say they lie in the stage the TMA filled, and accumulates ``R x A @ B^T`` per
  step, exactly (the sums the host's operands make are small: every accumulator, Hopper's 14-bit fp8 one too,
  holds them). Its time: the longer of the pairs' bytes at the level's read rate (the simulated memory's, the
  L2's while the blocks' chunks fit half of it and are walked more than once) and the flop at
  :data:`RING_EFFICIENCY` of the dense rate per clock per SM, jittered; records as the wgmma kernels write them.
* ``gp_rt_sync_<type>_r<R>``: the same walk and D from the region's memory as ldmatrix reads it, at the A100's
  mma.sync rate per clock per SM (:data:`~gpuprobe.families.roofline.tensor.SYNC_FLOP_PER_CLK_PER_SM`).
* ``gp_rts_tput_ss_<type>_n<N>``: the wgmma family's simulated throughput kernel, no faster than its operand
  reads at :data:`SHARED_BYTES_PER_CLOCK` (a small N is bound by them, as the framework's guard assumes).
* ``gp_rt_replicate``: the region, tiled from the period.

``gpu.roofline_tensor_corrupt = True`` adds one to one element of the last block's D, for a test to see the host's
check fail. Nothing it produces is a measurement.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from gpuprobe.families.bandwidth.simulated import memory_read_gbps
from gpuprobe.families.roofline import Settings
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
from gpuprobe.families.roofline.tensor import SYNC_FLOP_PER_CLK_PER_SM, Ring, TensorSettings
from gpuprobe.families.roofline.tensor_ptx import (
    BOX_ROWS,
    PAIR_BYTES,
    REPLICATE_KERNEL,
    RING_N,
    SYNC_STAGES,
    RingKernel,
    SyncKernel,
    ring_kernels,
    shared_kernels,
    sync_kernels,
)
from gpuprobe.families.wgmma.layout import K_BYTES, M, d_fragment_index, layout_bits, operand_offset
from gpuprobe.families.wgmma.operands import decode
from gpuprobe.families.wgmma.ptx import A_BYTES, Kernel
from gpuprobe.families.wgmma.simulated import FLOP_PER_CLK_PER_SM
from gpuprobe.families.wgmma.simulated import simulate as simulate_wgmma
from gpuprobe.simulated.simulation import Simulation
from gpuprobe.simulated.timer import at_launch

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


FP32_KERNELS = {
    f"gp_roofline_fp32_{source}_ffma{f}": functools.partial(roofline_fp32, f, source == "shared")
    for source in ("global", "shared")
    for f in FFMAS_PER_LOAD
}

# The sweeps' settings on a simulated part (its L2: 512 KiB): a DRAM region of 16 MiB, long enough at the suite part's
# DRAM rate to read the SM clock (92 us on 8 SMs), L2 launches of 0.1 ms, shared-level launches of 0.2 ms.
FAST_TENSOR = TensorSettings(dram_min_bytes=16 << 20, l2_ms=0.1, throughput_ms=0.2)
RING_EFFICIENCY = 0.95  # of the dense rate per clock per SM, compute-bound
READ_SHARE = {"l2": 0.8, "dram": 0.9}  # of the simulated memory's read rate a ring of TMA loads reaches
LAUNCH_MS = 0.004
# What an SM's shared memory gives the tensor cores' operand reads a clock, at most (its 32 banks x 4 bytes): a
# resident wgmma of small N reads A (2 KiB) for few flop, and is bound by it.
SHARED_BYTES_PER_CLOCK = 128 * 0.9


def _pairs(gpu: Any, tmap: Any) -> np.ndarray:
    """The region's tile pairs (tiles x PAIR_BYTES uint8), after checking the map's box is one pair."""
    buffer, tiles = gpu.mapped(tmap)
    assert (tiles.box_rows, tiles.box_cols, tiles.cols) == (BOX_ROWS, 64, 64), "the map's box is not a tile pair"
    assert tiles.rows % BOX_ROWS == 0
    return buffer.data[: tiles.rows * 128].reshape(-1, PAIR_BYTES)


def _operands(kernel: Ring, pairs: np.ndarray, layout: int) -> tuple[np.ndarray, np.ndarray]:
    """A (pairs x 64 x K) and B (pairs x 256 x K) values of each tile pair, read through the descriptor bits."""
    wgmma = kernel.wgmma
    element = np.dtype(f"u{wgmma.element_bytes}")
    k_bytes = np.arange(K_BYTES)[None, :]
    a = pairs[:, operand_offset(np.arange(M)[:, None], k_bytes, layout)]
    b = pairs[:, A_BYTES + operand_offset(np.arange(RING_N)[:, None], k_bytes, layout)]
    return decode(np.ascontiguousarray(a).view(element), wgmma), decode(np.ascontiguousarray(b).view(element), wgmma)


def _distinct(pairs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(the index of one pair of each distinct content, each pair's index among those): a region repeats a few
    pairs, so the products are worked out once per content. Pairs are told apart by a hash of their words, and
    every pair is compared with the one it was taken for."""
    words = np.ascontiguousarray(pairs).view(np.uint64)
    coefficients = np.random.default_rng(0).integers(1, 2**63, size=words.shape[1], dtype=np.uint64) | np.uint64(1)
    _, first, where = np.unique(words @ coefficients, return_index=True, return_inverse=True)
    assert np.array_equal(pairs, pairs[first][where]), "two tile pairs' hashes collided"
    return first, where.reshape(-1)


def _ring_d(kernel: Ring, pairs: np.ndarray, layout: int, blocks: int, chunk: int, steps: int) -> np.ndarray:
    """Each block's D (blocks x 64 x 256): R x the sum over its steps of A @ B^T of the pair it loaded. A block
    loads each pair of its chunk ``steps // chunk`` times, and the first ``steps % chunk`` once more."""
    walked = pairs[: blocks * chunk]
    first, where = _distinct(walked)
    a, b = _operands(kernel, walked[first], layout)
    products = np.einsum("umk,unk->umn", a, b).reshape(len(first), -1)
    laps, rest = divmod(steps, chunk)
    weights = np.tile(laps + (np.arange(chunk) < rest), blocks).astype(np.float64)  # per pair walked
    owner = np.repeat(np.arange(blocks), chunk)
    loads = np.bincount(owner * len(first) + where, weights, minlength=blocks * len(first)).reshape(blocks, -1)
    return kernel.repeats * (loads @ products).reshape(blocks, M, RING_N)


def _ring_ns(gpu: Any, kernel: Ring, blocks: int, chunk: int, steps: int) -> float:
    """The launch's time: the pairs' bytes at the level's rate or the flop at the tensor cores', the longer."""
    resident = blocks * chunk * PAIR_BYTES <= gpu.l2_bytes // 2 and steps > chunk
    gbps = READ_SHARE["l2" if resident else "dram"] * memory_read_gbps(gpu, "l2" if resident else "dram")
    memory_ns = blocks * steps * PAIR_BYTES / gbps
    per_clock = (SYNC_FLOP_PER_CLK_PER_SM if isinstance(kernel, SyncKernel) else FLOP_PER_CLK_PER_SM)[kernel.wgmma.name]
    peak = per_clock * min(blocks, gpu.sm_count) * RING_EFFICIENCY * gpu.mhz / 1e3
    compute_ns = blocks * steps * kernel.flop_per_step() / peak
    return max(memory_ns, compute_ns) * gpu._jitter()


def _launched(gpu, launch, kernel: Ring, pairs: np.ndarray, layout: int, chunk: int, steps: int, out) -> float:
    """A ring launch over ``pairs``: every block's D and record written, its ms returned."""
    blocks = launch.blocks
    assert launch.threads == 128 and steps >= 1
    assert blocks * chunk <= len(pairs), "a block's chunk runs past the region"
    d = _ring_d(kernel, pairs, layout, blocks, chunk, steps)
    d = d.astype(np.float32) if kernel.wgmma.accumulator == "f32" else d.astype(np.int64).astype(np.int32)
    rows, cols = d_fragment_index(RING_N)
    fragments = np.ascontiguousarray(d[:, rows, cols])
    if getattr(gpu, "roofline_tensor_corrupt", False):
        fragments[-1, 3, 0] += 1
    ns = _ring_ns(gpu, kernel, blocks, chunk, steps)
    true_start = np.arange(blocks) % 7.0
    true_end = true_start + ns
    timer = at_launch(gpu)
    start, end = timer.read(true_start), timer.read(true_end)
    cycles = np.full(blocks, ns * gpu.mhz / 1000.0).round().astype(np.uint64)
    records = np.stack([cycles, end - start, start, end], axis=1)
    words = out.data.view(np.uint32)
    words[: blocks * 8] = records.reshape(-1).view(np.uint32)
    words[blocks * 8 : blocks * 8 + fragments.size] = fragments.view(np.uint32).reshape(-1)
    return float(true_end.max() / 1e6) + LAUNCH_MS


def ring(kernel: RingKernel):
    def simulate(gpu, launch, tmap, layout, chunk, steps, stages, out) -> float:
        assert 2 <= int(stages) <= 8 and launch.shared_bytes >= int(stages) * PAIR_BYTES, "the stages must fit"
        return _launched(gpu, launch, kernel, _pairs(gpu, tmap), int(layout), int(chunk), int(steps), out)

    return simulate


def sync(kernel: SyncKernel):
    """The cp.async ring: its pairs straight from the region's memory; ldmatrix reads the core-matrix order the
    wgmma descriptors' layout bits (:func:`layout_bits`) describe."""

    def simulate(gpu, launch, src, chunk, steps, out) -> float:
        assert launch.shared_bytes >= SYNC_STAGES * PAIR_BYTES, "the stages must fit the dynamic shared memory"
        buffer, at = gpu.buffer_at(src)
        pairs = buffer.data[at:].reshape(-1, PAIR_BYTES)
        return _launched(gpu, launch, kernel, pairs, layout_bits(), int(chunk), int(steps), out)

    return simulate


def replicate(gpu, launch, src, period, bytes, out) -> float:
    """The region tiled from the period; its time, the region's bytes written at the DRAM's rate."""
    source, at = gpu.buffer_at(src)
    target, to = gpu.buffer_at(out)
    period, total = int(period), int(bytes)
    assert period % 16 == 0 and total % 16 == 0
    target.data[to : to + total] = np.resize(source.data[at : at + period], total)
    return (total / (memory_read_gbps(gpu, "dram") * 1e9) * 1e3 + LAUNCH_MS) * gpu._jitter()


def _resident(kernel: Kernel):
    """The wgmma family's simulated throughput kernel, its warpgroups slowed where their operand reads would
    take more than :data:`SHARED_BYTES_PER_CLOCK` of shared memory a clock per SM."""

    def simulate(gpu, launch, **params) -> float:
        ms = simulate_wgmma(gpu, launch, kernel, **params)
        warpgroups = launch.blocks * launch.threads // 128
        per_sm = max(1, warpgroups // min(gpu.sm_count, launch.blocks))
        iterations = int(params["iters"])
        smem_cycles = per_sm * iterations * kernel.batch * (M + kernel.n) * K_BYTES / SHARED_BYTES_PER_CLOCK
        records = params["out"].data.view(np.uint64)[: warpgroups * 4].reshape(warpgroups, 4)
        slower = max(1.0, smem_cycles / float(records[:, 0].max()))
        if slower > 1.0:
            records[:, 0] = (records[:, 0] * slower).round().astype(np.uint64)
            records[:, 3] = records[:, 2] + (records[:, 1] * slower).round().astype(np.uint64)
            records[:, 1] = records[:, 3] - records[:, 2]
        return ms * slower

    return simulate


TENSOR_KERNELS = {
    **{k.name: ring(k) for k in ring_kernels()},
    **{k.name: sync(k) for k in sync_kernels()},
    **{k.name: _resident(k) for k in shared_kernels()},
    REPLICATE_KERNEL: replicate,
}

FAST_SETTINGS = Settings(tensor=FAST_TENSOR)
SIMULATION = Simulation(kernels={**FP32_KERNELS, **TENSOR_KERNELS}, fast_settings=FAST_SETTINGS)
