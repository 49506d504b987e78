"""The tensor-core roofline's kernels on the simulated GPU (to be merged into the family's ``SIMULATION``).

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

from typing import Any

import numpy as np

from gpuprobe.families.bandwidth.simulated import memory_read_gbps
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
from gpuprobe.simulated.timer import at_launch

# The sweeps' settings on a simulated part (its L2: 512 KiB): a DRAM region of 16 MiB, long enough at the suite part's
# DRAM rate to read the SM clock (92 us on 8 SMs), L2 launches of 0.1 ms, shared-level launches of 0.2 ms.
FAST_SETTINGS = TensorSettings(dram_min_bytes=16 << 20, l2_ms=0.1, throughput_ms=0.2)
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
        assert 1 <= int(stages) <= 8 and launch.shared_bytes >= int(stages) * PAIR_BYTES, "the stages must fit"
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


def replicate(gpu, launch, src, period, dst, bytes) -> float:
    """The region tiled from the period; its time, the region's bytes written at the DRAM's rate."""
    source, at = gpu.buffer_at(src)
    target, to = gpu.buffer_at(dst)
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


KERNELS = {
    **{k.name: ring(k) for k in ring_kernels()},
    **{k.name: sync(k) for k in sync_kernels()},
    **{k.name: _resident(k) for k in shared_kernels()},
    REPLICATE_KERNEL: replicate,
}
