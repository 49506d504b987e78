"""Simulated warp-family kernels: each lane's chain replayed lane by lane from the PTX ISA's
pseudo-code (written apart from the host's replay in gpuprobe.families.warp, so one checks the
other), with a latency per collective. ``gpu.warp_corrupt = True`` makes lane 5 end one off (and thread 7
of the throughput kernel); ``gpu.warp_corrupt_sum = True`` makes redux's first sum one off."""

from __future__ import annotations

import functools

import numpy as np

from gpuprobe.kernels.registry import unroll_of
from gpuprobe.simulated.simulation import Simulation

LANES = 32
CYCLES = {"idx": 23.0, "partial": 24.0, "up": 22.0, "down": 22.0, "bfly": 23.0, "ballot": 15.0, "any": 11.0,
          "match": 41.0, "redux": 31.0, "tile": 28.0, "syncwarp": 1.0}  # fmt: skip
FIXED = 60.0  # what a timed region pays once
SHFL_PER_CLK = 1.0  # warp shuffles per clock per SM


def _words(buffer, count: int) -> list[int]:
    return [int(x) for x in buffer.data.view(np.uint32)[:count]]


def _source_lane(mode: str, lane: int, b: int, c: int) -> int:
    segmask, cval = (c >> 8) & 31, c & 31
    max_lane = (lane & segmask) | (cval & ~segmask & 31)
    b &= 31
    if mode == "up":
        j, ok = lane - b, lane - b >= max_lane
    elif mode == "down":
        j, ok = lane + b, lane + b <= max_lane
    elif mode == "bfly":
        j, ok = lane ^ b, (lane ^ b) <= max_lane
    else:
        j = (lane & segmask) | (b & ~segmask & 31)
        ok = j <= max_lane
    return j if ok else lane


def _steps(kernel: str, iters) -> int:
    """The collectives a launch of ``kernel`` runs: ``iters`` iterations of its declared unroll."""
    return int(iters) * unroll_of(kernel)


def _finish(gpu, out, kind: str, steps: int, values: list[int], extra: int | None = None) -> None:
    if getattr(gpu, "warp_corrupt", False):
        values[5] ^= 1
    words = out.data.view(np.uint64)
    words[0] = round(FIXED + steps * CYCLES[kind] * gpu._jitter())
    words[1 : 1 + len(values)] = [v & 0xFFFFFFFF for v in values]
    if extra is not None:
        words[1 + LANES] = extra


def shfl(mode: str, gpu, launch, lanes, clamp, iters, out) -> None:
    words = _words(lanes, 2 * LANES)
    source = [_source_lane(mode, lane, words[lane], int(clamp)) for lane in range(LANES)]
    values, steps = words[LANES:], _steps(f"gp_warp_shfl_{mode}_lat", iters)
    for _ in range(steps):
        values = [values[source[lane]] for lane in range(LANES)]
    _finish(gpu, out, mode, steps, values)


def shfl_partial(gpu, launch, lanes, iters, out) -> None:
    """A block of 16 threads: only lanes 0..15 exist, and they shuffle among themselves."""
    assert launch.threads == 16, "the partial-warp kernel runs in a block of 16 threads"
    words = _words(lanes, 2 * LANES)
    source = words[:16]
    values, steps = words[LANES : LANES + 16], _steps("gp_warp_shfl_partial_lat", iters)
    for _ in range(steps):
        values = [values[source[lane]] for lane in range(16)]
    _finish(gpu, out, "partial", steps, values)


def ballot(gpu, launch, lanes, iters, out) -> None:
    words = _words(lanes, LANES + 1)
    value, steps = words[LANES], _steps("gp_warp_ballot_lat", iters)
    for _ in range(steps):
        value = sum(1 << lane for lane in range(LANES) if value >> words[lane] & 1)
    _finish(gpu, out, "ballot", steps, [value] * LANES)


def vote_any(gpu, launch, lanes, iters, out) -> None:
    chosen = _words(lanes, LANES + 1)[LANES]
    p, steps = [lane == chosen for lane in range(LANES)], _steps("gp_warp_vote_any_lat", iters)
    for _ in range(steps):
        p = [any(not x for x in p)] * LANES
    _finish(gpu, out, "any", steps, [int(x) for x in p])


def match_any(gpu, launch, lanes, iters, out) -> None:
    values, steps = _words(lanes, 2 * LANES)[LANES:], _steps("gp_warp_match_any_lat", iters)
    for _ in range(steps):
        values = [sum(1 << k for k in range(LANES) if values[k] == v) for v in values]
    _finish(gpu, out, "match", steps, values)


def redux_add(gpu, launch, lanes, iters, out) -> None:
    values, steps = _words(lanes, 2 * LANES)[LANES:], _steps("gp_warp_redux_add_lat", iters)
    first = sum(values) & 0xFFFFFFFF
    for _ in range(steps):
        values = [sum(values) & 0xFFFFFFFF] * LANES
    _finish(gpu, out, "redux", steps, values, extra=first + int(getattr(gpu, "warp_corrupt_sum", False)))


def tile_reduce(gpu, launch, lanes, tile, iters, out) -> None:
    values, steps = _words(lanes, 2 * LANES)[LANES:], _steps("gp_warp_tile_reduce_lat", iters)
    size, distance = int(tile), int(tile) // 2
    for _ in range(steps):
        values = [(values[lane] + values[lane ^ distance]) & 0xFFFFFFFF for lane in range(LANES)]
        distance = distance >> 1 or size >> 1
    _finish(gpu, out, "tile", steps, values)


def syncwarp(gpu, launch, lanes, iters, out) -> None:
    values = _words(lanes, 2 * LANES)[LANES:]
    _finish(gpu, out, "syncwarp", _steps("gp_warp_syncwarp_lat", iters), [values[lane ^ 1] for lane in range(LANES)])


IMAD_CYCLES, BRANCH_CYCLES = 4.0, 12.0  # one dependent IMAD; the split and the reconvergence


def diverge(gpu, launch, lanes, split, iters, out) -> None:
    """Lanes below ``split`` step x = x * m + 1, the others x * m + 2, 16 steps an iteration; both
    paths run, one after the other, when the warp is split."""
    words, path = _words(lanes, 2 * LANES), unroll_of("gp_warp_diverge_lat")
    values = words[LANES:]
    for lane in range(LANES):
        add = 1 if lane < int(split) else 2
        for _ in range(int(iters) * path):
            values[lane] = (values[lane] * words[lane] + add) & 0xFFFFFFFF
    if getattr(gpu, "warp_corrupt", False):
        values[5] ^= 1
    paths = 2 if 0 < int(split) < LANES else 1
    per_iteration = paths * path * IMAD_CYCLES + BRANCH_CYCLES
    result = out.data.view(np.uint64)
    result[0] = round(FIXED + int(iters) * per_iteration * gpu._jitter())
    result[1 : 1 + LANES] = values


def bfly_throughput(gpu, launch, iters, out) -> float:
    """Blocks spread over the SMs round-robin; an SM retires SHFL_PER_CLK warp shuffles a clock."""
    threads, blocks = launch.threads, launch.blocks
    thread = np.arange(blocks * threads, dtype=np.int64)
    chains = [4 * thread + k for k in range(4)]
    flip = 0
    for _ in range(int(iters)):
        for mask in (1, 2, 4, 8, 16, 3, 5, 9):
            flip ^= mask
    source = (thread & ~31) | ((thread & 31) ^ flip)
    total = sum(chain[source] for chain in chains) & 0xFFFFFFFF
    if getattr(gpu, "warp_corrupt", False):
        total[7] += 1
    warps = blocks * threads // LANES
    words = out.data.view(np.uint64)
    words[3 * warps :] = total.astype(np.uint64)
    sm = (np.arange(warps) // (threads // LANES)) % gpu.sm_count
    per_sm = np.bincount(sm, minlength=gpu.sm_count)
    start = 1000 + (np.arange(warps) % (threads // LANES)) * 3
    steps = _steps("gp_warp_shfl_bfly_tput", iters)
    busy = per_sm[sm] * steps / SHFL_PER_CLK * gpu._jitter()
    timing = np.stack([start, start + FIXED + busy, sm], axis=1).astype(np.uint64)
    words[: 3 * warps] = timing.reshape(-1)
    return float(per_sm.max() * steps / SHFL_PER_CLK / (gpu.mhz * 1e3))


KERNELS = {
    **{f"gp_warp_shfl_{mode}_lat": functools.partial(shfl, mode) for mode in ("idx", "up", "down", "bfly")},
    "gp_warp_shfl_partial_lat": shfl_partial,
    "gp_warp_ballot_lat": ballot,
    "gp_warp_vote_any_lat": vote_any,
    "gp_warp_match_any_lat": match_any,
    "gp_warp_redux_add_lat": redux_add,
    "gp_warp_tile_reduce_lat": tile_reduce,
    "gp_warp_syncwarp_lat": syncwarp,
    "gp_warp_diverge_lat": diverge,
    "gp_warp_shfl_bfly_tput": bfly_throughput,
}

SIMULATION = Simulation(kernels=KERNELS)
