"""Simulated atomics kernels (ptx/atomics/atomics.ptx) for the simulated GPU.

The adds really happen on the simulated memory, in an order the simulation picks (a shuffled
order within each instruction of a warp on one address), so the host's predictions and checks run
on real values. Timing: a latency per add that depends on the memory space and how many lanes
share an address; a throughput that grows with the number of distinct addresses up to a peak.
``with_fault(gpu, fault)`` makes the device misbehave: "lost_add" (one counter ends one add
short), "duplicate_value" (two adds return the same value).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpuprobe.families.atomics import WARP, WORD
from gpuprobe.kernels.registry import unroll_of
from gpuprobe.simulated.simulation import Simulation

LATENCY = {  # (space, lanes on one address) -> cycles per dependent add
    ("global", 1): 690.0,
    ("global", WARP): 1150.0,
    ("shared", 1): 42.0,
    ("shared", WARP): 310.0,
}
ONE_ADDRESS_GOPS = {"global": 1.6, "shared": 0.9}  # one counter: the adds to it are serialized
PEAK_GOPS = {"global": 650.0, "shared": 4000.0}  # every SM, adds spread over many addresses
RED_SPEEDUP = 1.8
EDGE_CYCLES = 60.0
LAUNCH_MS = 0.004


def with_fault(gpu: Any, fault: str) -> Any:
    """The simulated GPU, told to corrupt its atomics in the way ``fault`` names."""
    gpu.atomic_fault = fault
    return gpu


def _fault(gpu: Any) -> str:
    return getattr(gpu, "atomic_fault", "")


def _chain(gpu: Any, counters: np.ndarray, addresses: np.ndarray, first: int, steps: int) -> np.ndarray:
    """Run the self-feeding chain of every lane on ``counters`` (uint32 words); per lane the last two
    returned values. Lanes on one address are serialized in a shuffled order per instruction; lanes
    on distinct addresses run side by side."""
    lanes = len(addresses)
    shared_word = len(set(addresses.tolist())) == 1 and lanes > 1
    assert shared_word or len(set(addresses.tolist())) == lanes, "lanes share some addresses but not all"
    increment = np.full(lanes, first, dtype=np.int64)
    last = np.zeros(lanes, dtype=np.int64)
    before = np.zeros(lanes, dtype=np.int64)
    values = counters.astype(np.int64)
    for _ in range(steps):
        before = last
        if shared_word:
            order = gpu._rng.permutation(lanes)
            last = np.empty(lanes, dtype=np.int64)
            last[order] = (values[addresses[0]] + np.concatenate(([0], np.cumsum(increment[order])[:-1]))) % WORD
            values[addresses[0]] = (values[addresses[0]] + increment.sum()) % WORD
        else:
            last = values[addresses].copy()
            values[addresses] = (values[addresses] + increment) % WORD
        increment = last
    counters[:] = values.astype(np.uint32)
    if _fault(gpu) == "lost_add":
        counters[addresses[0]] = (int(counters[addresses[0]]) - int(increment[0])) % WORD
    if _fault(gpu) == "duplicate_value" and lanes > 1:
        last[1] = last[0]
    return np.stack([last, before], axis=1)


def _latency_cycles(gpu: Any, space: str, lanes: int, stride: int, steps: int) -> float:
    shared_address = WARP if lanes > 1 and stride == 0 else 1
    per_add = LATENCY[space, shared_address] * gpu._jitter()
    return gpu.clock_read + EDGE_CYCLES + steps * per_add


def _write_latency(gpu: Any, out: Any, cycles: float, per_lane: np.ndarray) -> None:
    words = out.data.view(np.uint64)
    words[0], words[1] = round(cycles), gpu.sm_id
    words[2 : 2 + per_lane.size] = per_lane.astype(np.uint64).ravel()


def lat_global(gpu: Any, launch: Any, counters: Any, lane_stride: Any, first: Any, iters: Any, out: Any) -> float:
    lanes, stride, steps = launch.threads, int(lane_stride), int(iters) * unroll_of("gp_at_lat_global")
    words = counters.data.view(np.uint32)
    values = _chain(gpu, words, np.arange(lanes) * stride // 4, int(first), steps)
    cycles = _latency_cycles(gpu, "global", lanes, stride, steps)
    _write_latency(gpu, out, cycles, values)
    return LAUNCH_MS + cycles / gpu.mhz * 1e-3


def lat_shared(gpu: Any, launch: Any, lane_stride: Any, first: Any, iters: Any, out: Any) -> float:
    lanes, stride, steps = launch.threads, int(lane_stride), int(iters) * unroll_of("gp_at_lat_shared")
    words = np.zeros(WARP, dtype=np.uint32)
    addresses = np.arange(lanes) * stride // 4
    values = _chain(gpu, words, addresses, int(first), steps)
    final = words[addresses].astype(np.int64)[:, None]
    cycles = _latency_cycles(gpu, "shared", lanes, stride, steps)
    _write_latency(gpu, out, cycles, np.concatenate([values, final], axis=1))
    return LAUNCH_MS + cycles / gpu.mhz * 1e-3


def _add_all(gpu: Any, words: np.ndarray, targets: np.ndarray, adds: int, inc: int) -> np.ndarray:
    """Every thread adds ``inc`` ``adds`` times to word ``targets[t]``; the adds to one word are
    interleaved round-robin over its threads. Each thread's sum of returned values (mod 2**32)."""
    order = np.argsort(targets, kind="stable")
    sorted_targets = targets[order]
    starts = np.searchsorted(sorted_targets, sorted_targets, side="left")
    rank = np.empty(len(targets), dtype=np.int64)
    rank[order] = np.arange(len(targets)) - starts
    sharing = np.bincount(targets, minlength=len(words)).astype(np.int64)
    k = sharing[targets]
    base = words.astype(np.int64)[targets]
    # thread of rank r gets values base + (t k + r) inc for t in 0..adds-1
    sums = adds * base + inc * (k * (adds * (adds - 1) // 2) + rank * adds)
    words[:] = (words.astype(np.int64) + sharing * adds * inc) % WORD
    if _fault(gpu) == "lost_add":
        words[targets[0]] = (int(words[targets[0]]) - inc) % WORD
    if _fault(gpu) == "duplicate_value":
        sums[0] += inc
    return sums % WORD


def _stream_ms(gpu: Any, space: str, targets: np.ndarray, adds: int, red: bool = False) -> float:
    distinct = int(np.count_nonzero(np.bincount(targets)))
    gops = min(ONE_ADDRESS_GOPS[space] * distinct, PEAK_GOPS[space]) * (RED_SPEEDUP if red else 1.0)
    jitter = gpu._jitter()
    return LAUNCH_MS + len(targets) * adds / (gops * 1e9) * 1e3 * jitter


def _targets(launch: Any, shift: Any, mask: Any, spacing: Any) -> np.ndarray:
    g = np.arange(launch.blocks * launch.threads, dtype=np.int64)
    return (((g >> int(shift)) & int(mask)) << int(spacing)) // 4


def tput_global(
    gpu: Any, launch: Any, counters: Any, shift: Any, mask: Any, spacing: Any, inc: Any, iters: Any, out: Any
) -> float:
    targets, adds = _targets(launch, shift, mask, spacing), int(iters) * unroll_of("gp_at_tput_global")
    words = counters.data.view(np.uint32)
    out.data.view(np.uint32)[: len(targets)] = _add_all(gpu, words, targets, adds, int(inc))
    return _stream_ms(gpu, "global", targets, adds)


def red_global(gpu: Any, launch: Any, shift: Any, mask: Any, spacing: Any, inc: Any, iters: Any, out: Any) -> float:
    targets, adds = _targets(launch, shift, mask, spacing), int(iters) * unroll_of("gp_at_red_global")
    _add_all(gpu, out.data.view(np.uint32), targets, adds, int(inc))
    return _stream_ms(gpu, "global", targets, adds, red=True)


def tput_shared(gpu: Any, launch: Any, mask: Any, inc: Any, iters: Any, out: Any) -> float:
    threads, adds = launch.blocks * launch.threads, int(iters) * unroll_of("gp_at_tput_shared")
    g = np.arange(threads, dtype=np.int64)
    targets = (g // launch.threads) * WARP + ((g % launch.threads) & int(mask))
    counters = np.zeros(launch.blocks * WARP, dtype=np.uint32)
    sums = _add_all(gpu, counters, targets, adds, int(inc))
    view = out.data.view(np.uint32)
    view[: len(counters)] = counters
    view[len(counters) : len(counters) + threads] = sums
    return _stream_ms(gpu, "shared", targets, adds)


KERNELS = {
    "gp_at_lat_global": lat_global,
    "gp_at_lat_shared": lat_shared,
    "gp_at_tput_global": tput_global,
    "gp_at_red_global": red_global,
    "gp_at_tput_shared": tput_shared,
}

SIMULATION = Simulation(kernels=KERNELS)
