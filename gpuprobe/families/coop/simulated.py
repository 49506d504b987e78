"""Simulated coop-family kernels (ptx/coop/*.cu): each C++ abstraction's result computed lane by lane
from what cooperative groups, libcu++ and CUB document (written apart from the host's replay in
gpuprobe.families.coop.chains, so one checks the other), with a cost per step a little above its
twin's in the other families' simulations, as the real lowering is (the twin's instructions and more).

NVRTC names a kernel's parameters ``<kernel>_param_<i>``: :func:`_positional` hands them over in order.
``gpu.coop_corrupt = KERNEL`` makes that kernel's result wrong (a lane, a tag, a sum, a node off by
one); ``gpu.coop_cheaper = KERNEL`` makes it cost a third of its twin (a lowering that cannot be, which
the floor invariant must catch).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np

from gpuprobe.families.async_copy import simulated as async_copy
from gpuprobe.families.atomics import simulated as atomics
from gpuprobe.families.barrier import simulated as barrier
from gpuprobe.families.cluster import simulated as cluster
from gpuprobe.families.coop import Settings
from gpuprobe.families.grid_sync import simulated as grid_sync
from gpuprobe.families.sampling import Stopping
from gpuprobe.families.warp import simulated as warp
from gpuprobe.kernels.registry import unroll_of
from gpuprobe.simulated.simulation import Simulation

LANES = 32
FIXED = 70.0  # what a timed region pays once
WORD = 0xFFFFFFFF

# Settings for the simulated GPU: few samples, short chases.
FAST_SETTINGS = Settings(short_iterations=2, long_iterations=6, sampling=Stopping(3, 6, 0.01, 0.5), grid_long_syncs=41,
                         copy_iterations=(2, 6), bulk_iterations=(4, 20), dsm_nodes=64)  # fmt: skip

# Cycles per step of each C++ kernel: its twin's in the other simulations, plus what the abstraction adds.
CYCLES = {
    "gp_coop_tile_shfl_lat": warp.CYCLES["idx"],
    "gp_coop_tile_shfl_down_lat": warp.CYCLES["down"],
    "gp_coop_reduce_add_32_lat": warp.CYCLES["redux"] + 2.0,
    "gp_coop_reduce_add_16_lat": warp.CYCLES["redux"] + 4.0,
    "gp_coop_reduce_add_8_lat": 3 * warp.CYCLES["tile"] + 3.0,
    "gp_coop_reduce_add_4_lat": 2 * warp.CYCLES["tile"] + 3.0,
    "gp_coop_reduce_min_32_lat": warp.CYCLES["redux"] + 1.0,
    "gp_coop_reduce_and_32_lat": warp.CYCLES["redux"] + 1.0,
    "gp_coop_reduce_fadd_32_lat": 5 * (warp.CYCLES["tile"] + 2.0),
    "gp_coop_scan_add_32_lat": 5 * (warp.CYCLES["up"] + 8.0),
    "gp_coop_tile_sync_lat": warp.CYCLES["syncwarp"],
    "gp_coop_coalesced_shfl_lat": warp.CYCLES["partial"] + 45.0,
    "gp_coop_labeled_reduce_lat": warp.CYCLES["match"] + 38.0,
    "gp_coop_binary_reduce_lat": warp.CYCLES["any"] + 36.0,
}
LDS = 30.0  # one shared-memory load's latency, a store's too
BARRIER_256 = barrier.block_cost(8)  # one bar.sync of the CUB kernels' block of 256 threads
CYCLES.update({  # CUB and the hand-written block twins (cub.cu), per step as their contracts pin it
    "gp_coop_cub_warp_reduce_lat": warp.CYCLES["redux"] + 2.0,  # REDUX, and lane 0's LOP3
    "gp_coop_cub_warp_scan_lat": 5 * (warp.CYCLES["up"] + 8.0),
    "gp_coop_cub_block_reduce_lat": warp.CYCLES["redux"] + LDS + BARRIER_256 + 3 * LDS + 8.0,
    "gp_coop_ptx_block_reduce_lat": warp.CYCLES["redux"] + LDS + BARRIER_256 + 2 * LDS + 6.0,
    "gp_coop_cub_block_scan_lat": 5 * (warp.CYCLES["up"] + 8.0) + 2 * BARRIER_256 + 18 * LDS,
    "gp_coop_ptx_block_scan_lat": 5 * (warp.CYCLES["up"] + 8.0) + BARRIER_256 + 3 * LDS + 14.0,
    "gp_coop_cub_radix_sort_lat": 8 * (7 * BARRIER_256 + 12 * LDS + 5 * warp.CYCLES["up"] + 120.0),
})  # fmt: skip
TWINS = {  # the kernel whose simulated cost the C++ one's cheaper fault is a third of
    "gp_coop_tile_shfl_lat": warp.CYCLES["idx"],
    "gp_coop_reduce_add_32_lat": warp.CYCLES["redux"],
    "gp_coop_block_sync": barrier.block_cost(8),
    "gp_coop_cub_block_scan_lat": CYCLES["gp_coop_ptx_block_scan_lat"],
}


def _positional(function: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(function)
    def simulate(gpu: Any, launch: Any, **named: Any) -> Any:
        ordered = [named[key] for key in sorted(named, key=lambda key: int(key.rsplit("_", 1)[1]))]
        return function(gpu, launch, *ordered)

    return simulate


def _corrupt(gpu: Any, kernel: str) -> bool:
    return getattr(gpu, "coop_corrupt", "") == kernel


def _cost(gpu: Any, kernel: str, per_step: float) -> float:
    if getattr(gpu, "coop_cheaper", "") == kernel:
        return TWINS[kernel] / 3.0
    return per_step


def _words(buffer: Any, count: int) -> list[int]:
    return [int(x) for x in buffer.data.view(np.uint32)[:count]]


def _steps(kernel: str, iters: Any) -> int:
    """The steps a launch of ``kernel`` runs: ``iters`` iterations of its declared unroll."""
    return int(iters) * unroll_of(kernel)


def _finish(gpu: Any, kernel: str, out: Any, iters: int, values: list[int], check: int | None = None) -> None:
    """The kernel's words: cycles for its steps, every lane's value, the check."""
    if _corrupt(gpu, kernel):
        values[3] ^= 1
    words = out.data.view(np.uint64)
    words[0] = round(FIXED + _steps(kernel, iters) * _cost(gpu, kernel, CYCLES[kernel]) * gpu._jitter())
    words[1 : 1 + LANES] = [v & WORD for v in values]
    if check is not None:
        words[1 + LANES] = check & WORD


def _tile_total(values: list[int], lane: int, tile: int, combine: str) -> int:
    members = values[lane - lane % tile : lane - lane % tile + tile]
    if combine == "min":
        return min(members)
    if combine == "and":
        return functools.reduce(lambda a, b: a & b, members)
    return sum(members) & WORD


def tile_chain(
    kernel: str, step: Callable[[list[int], list[int]], list[int]], after: Callable[[list[int]], list[int]] = list
) -> Callable[..., None]:
    """A whole-warp chain of the kernel's steps per iteration: ``step(values, operands)`` is one collective
    of every lane; ``after`` what the kernel does to the values once the loop is done."""

    @_positional
    def simulate(gpu: Any, launch: Any, lanes: Any, iters: Any, out: Any) -> None:
        words = _words(lanes, 2 * LANES)
        operands, values = words[:LANES], words[LANES:]
        for _ in range(_steps(kernel, iters)):
            values = step(values, operands)
        _finish(gpu, kernel, out, int(iters), after(values))

    return simulate


def reduce_kernel(kernel: str, tile: int, combine: str) -> Callable[..., None]:
    """cg::reduce over tiles of ``tile`` lanes: 32 reductions per iteration, 8 below a whole warp."""

    @_positional
    def simulate(gpu: Any, launch: Any, lanes: Any, iters: Any, out: Any) -> None:
        start = _words(lanes, 2 * LANES)[LANES:]
        values = start
        for _ in range(_steps(kernel, iters)):
            values = [_tile_total(values, lane, tile, combine) for lane in range(LANES)]
        check = _tile_total(start, 0, tile, combine)
        _finish(gpu, kernel, out, int(iters), values, check)

    return simulate


def _float_total(values: list[np.float32]) -> np.float32:
    total = np.float32(0.0)
    with np.errstate(over="ignore"):
        for value in values:
            total = np.float32(total + value)
    return total


@_positional
def reduce_fadd(gpu: Any, launch: Any, lanes: Any, iters: Any, out: Any) -> None:
    """cg::reduce with plus<float>: the starting words are whole numbers, turned into floats."""
    start = [np.float32(v) for v in _words(lanes, 2 * LANES)[LANES:]]
    values = start
    for _ in range(_steps("gp_coop_reduce_fadd_32_lat", iters)):
        values = [_float_total(values)] * LANES
    bits = [int(np.float32(v).view(np.uint32)) for v in values]
    first = int(_float_total(start).view(np.uint32))
    _finish(gpu, "gp_coop_reduce_fadd_32_lat", out, int(iters), bits, first)


def _scan(values: list[int], operands: list[int]) -> list[int]:
    running, result = 0, []
    for value in values:
        running = (running + value) & WORD
        result.append(running)
    return result


def _label(value: int) -> int:
    """labeled_partition's label in the kernel: the value's low two bits."""
    return value & 3


def _bit(value: int) -> int:
    """binary_partition's predicate in the kernel: the value's low bit."""
    return value & 1


def _groups_step(values: list[int], label: Callable[[int], int]) -> list[int]:
    totals: dict[int, int] = {}
    for value in values:
        totals[label(value)] = (totals.get(label(value), 0) + value) & WORD
    return [totals[label(value)] for value in values]


@_positional
def coalesced_shfl(gpu: Any, launch: Any, lanes: Any, active: Any, iters: Any, out: Any) -> None:
    """Lanes below ``active`` form the group of lanes 0..active-1 and read the lane of the group rank
    their operand names (the rank of lane i is i: the group is the lowest lanes)."""
    words = _words(lanes, 2 * LANES)
    ranks, values = words[:LANES], words[LANES:]
    members, kernel = list(range(int(active))), "gp_coop_coalesced_shfl_lat"
    for _ in range(_steps(kernel, iters)):
        values = [values[members[ranks[lane]]] if lane in members else values[lane] for lane in range(LANES)]
    _finish(gpu, kernel, out, int(iters), values)


def _first_takes_total(values: list[int]) -> list[int]:
    """CUB's Sum as cub.cu uses it: the first thread takes the total, the others keep their value."""
    return [sum(values) & WORD, *values[1:]]


@_positional
def cub_warp_reduce(gpu: Any, launch: Any, lanes: Any, iters: Any, out: Any) -> None:
    """cub::WarpReduce Sum fed back through lane 0; the check word the untimed first sum."""
    kernel = "gp_coop_cub_warp_reduce_lat"
    start = _words(lanes, 2 * LANES)[LANES:]
    values = start
    for _ in range(_steps(kernel, iters)):
        values = _first_takes_total(values)
    _finish(gpu, kernel, out, int(iters), values, sum(start) & WORD)


def _sorted_and_mapped(keys: list[int]) -> list[int]:
    """BlockRadixSort into a blocked arrangement (ascending, flattened), then cub.cu's k * 2654435761 + 1."""
    return [(key * 2654435761 + 1) & WORD for key in sorted(keys)]


def block_kernel(kernel: str, step: Callable[[list[int]], list[int]], per_thread: int = 1) -> Callable[..., None]:
    """One block's chain (cub.cu's block interface): ``per_thread`` values per thread in, ``step`` the whole
    block's collective, out (u64) [cycles, every value after the last step]."""

    @_positional
    def simulate(gpu: Any, launch: Any, values_in: Any, iters: Any, out: Any) -> None:
        count = launch.threads * per_thread
        values = _words(values_in, count)
        for _ in range(_steps(kernel, iters)):
            values = step(values)
        if _corrupt(gpu, kernel):
            values[3] ^= 1
        words = out.data.view(np.uint64)
        words[0] = round(FIXED + _steps(kernel, iters) * _cost(gpu, kernel, CYCLES[kernel]) * gpu._jitter())
        words[1 : 1 + count] = values

    return simulate


# ---- block, grid, cluster ----------------------------------------------------------------------


@_positional
def block_sync(gpu: Any, launch: Any, iters: Any, out: Any) -> None:
    kernel = "gp_coop_block_sync"
    n, warps = int(iters), launch.threads // 32
    sums = [n * (n + 1) // 2 - (1 if _corrupt(gpu, kernel) and w == warps - 1 else 0) for w in range(warps)]
    per_step = _cost(gpu, kernel, barrier.block_cost(warps) + 1.0)
    words = out.data.view(np.uint64)
    words[0] = round(barrier.FIXED + _steps(kernel, n) * per_step * gpu._jitter())
    words[1] = 0
    words[2 : 2 + warps] = sums


@_positional
def grid_sync_cg(gpu: Any, launch: Any, slots: Any, errors: Any, checks: Any, syncs: Any, out: Any) -> float:
    """cg::this_grid().sync(): refused outside a cooperative launch (it would deadlock), the tags all
    current, every block passing every barrier, a little dearer than the hand-written barrier."""
    if not launch.cooperative:
        raise RuntimeError("gp_coop_grid_sync launched without cooperative=True: grid.sync() would deadlock")
    kernel = "gp_coop_grid_sync"
    barriers = int(checks) + int(syncs)
    errors.data.view(np.uint32)[0] += 1 if _corrupt(gpu, kernel) else 0
    per_sync = grid_sync.sync_cycles(launch.blocks) + 90.0
    cycles = int(syncs) * per_sync * gpu._jitter() + 2 * gpu.clock_read
    result = out.data.view(np.uint64)
    result[0] = round(cycles)
    result[1] = round(cycles / gpu.mhz * 1000.0)
    result[2 : 2 + launch.blocks] = barriers
    return (grid_sync.COOPERATIVE_LAUNCH_NS + barriers * per_sync / gpu.mhz * 1000.0) / 1e6


def cluster_sync(size: int) -> Callable[..., None]:
    kernel = f"gp_coop_cluster_sync_{size}"

    @_positional
    def simulate(gpu: Any, launch: Any, iters: Any, out: Any) -> None:
        assert launch.blocks % size == 0, "a cluster kernel's grid must be a multiple of its cluster size"
        n = int(iters)
        words = out.data.view(np.uint64)
        for block in range(launch.blocks):
            total = n * (n + 1) // 2 - (1 if _corrupt(gpu, kernel) and block == 0 else 0)
            cycles = round(cluster.FIXED + _steps(kernel, n) * (cluster.cluster_cost(size) - 40.0) * gpu._jitter())
            words[4 * block : 4 * block + 4] = [cycles, block // size % gpu.sm_count, total, block % size]

    return simulate


# ---- chases and atomics -----------------------------------------------------------------------------


@_positional
def dsm_chase(gpu: Any, launch: Any, successors: Any, nodes: Any, stride: Any, start: Any, target: Any,
              warm: Any, iters: Any, out: Any) -> None:  # fmt: skip
    assert launch.grid[0] % 2 == 0, "clusters of two"
    succ = successors.data.view(np.uint32)[: int(nodes)] // int(stride)
    node, steps = int(start), _steps("gp_coop_dsm_chase", iters)
    for _ in range(int(warm) + steps):
        node = int(succ[node])
    extra = int(stride) if _corrupt(gpu, "gp_coop_dsm_chase") else 0
    per_step = async_copy.model(gpu).dsm[int(target)] + 1.0
    async_copy._finish_chase(gpu, out, per_step, steps, node * int(stride) + extra)


COPY_EXTRA = {"gp_coop_cg_memcpy_chase": 40.0, "gp_coop_barrier_memcpy_chase": 60.0, "gp_coop_pipeline_chase": 30.0}


def copy_chase(kernel: str) -> Callable[..., None]:
    """A chase whose step is a copy round trip: the cp.async twin's (or, for the barrier kernel on the
    simulated sm_90 part, the bulk copy's of its node) plus what the library adds."""

    @_positional
    def simulate(gpu: Any, launch: Any, start: Any, warm: Any, iters: Any, out: Any) -> None:
        m = async_copy.model(gpu)
        stride = 256 if kernel == "gp_coop_barrier_memcpy_chase" else 128
        base = m.bulk_base + stride / m.bulk_bytes_per_cycle if stride == 256 else m.cp_async["cg"]
        steps = _steps(kernel, iters)
        end = async_copy._walk_global(gpu, start, int(warm) + steps, stride) + (stride if _corrupt(gpu, kernel) else 0)
        async_copy._finish_chase(gpu, out, base + COPY_EXTRA[kernel], steps, end)

    return simulate


def atomic_ref(kernel: str, space: str) -> Callable[..., float]:
    """cuda::atomic_ref chains: the adds done on the simulated memory as the twin's simulation does them, at
    a latency of its own (a generic ATOM; a narrower scope)."""
    twin = atomics.lat_shared if space == "shared" else atomics.lat_global

    @_positional
    def simulate(gpu: Any, launch: Any, *args: Any) -> float:
        ms = twin(gpu, launch, *args)
        if _corrupt(gpu, kernel):
            words = args[-1].data.view(np.uint64)
            words[2] += np.uint64(1)
        return ms

    return simulate


KERNELS = {
    "gp_coop_tile_shfl_lat": tile_chain("gp_coop_tile_shfl_lat", lambda v, src: [v[s] for s in src]),
    "gp_coop_tile_shfl_down_lat": tile_chain(
        "gp_coop_tile_shfl_down_lat", lambda v, d: [v[i + d[i]] if i + d[i] < LANES else v[i] for i in range(LANES)]
    ),
    **{f"gp_coop_reduce_add_{t}_lat": reduce_kernel(f"gp_coop_reduce_add_{t}_lat", t, "add") for t in (4, 8, 16, 32)},
    "gp_coop_reduce_min_32_lat": reduce_kernel("gp_coop_reduce_min_32_lat", 32, "min"),
    "gp_coop_reduce_and_32_lat": reduce_kernel("gp_coop_reduce_and_32_lat", 32, "and"),
    "gp_coop_reduce_fadd_32_lat": reduce_fadd,
    "gp_coop_scan_add_32_lat": tile_chain("gp_coop_scan_add_32_lat", _scan),
    "gp_coop_tile_sync_lat": tile_chain(  # after the syncs, each lane takes its neighbour's value (shfl_xor 1)
        "gp_coop_tile_sync_lat", lambda v, _: v, lambda v: [v[lane ^ 1] for lane in range(LANES)]
    ),
    "gp_coop_coalesced_shfl_lat": coalesced_shfl,
    "gp_coop_labeled_reduce_lat": tile_chain("gp_coop_labeled_reduce_lat", lambda v, _: _groups_step(v, _label)),
    "gp_coop_binary_reduce_lat": tile_chain("gp_coop_binary_reduce_lat", lambda v, _: _groups_step(v, _bit)),
    "gp_coop_block_sync": block_sync,
    "gp_coop_grid_sync": grid_sync_cg,
    **{f"gp_coop_cluster_sync_{size}": cluster_sync(size) for size in (2, 4, 8)},
    "gp_coop_dsm_chase": dsm_chase,
    **{kernel: copy_chase(kernel) for kernel in COPY_EXTRA},
    "gp_coop_atomic_ref_device_lat": atomic_ref("gp_coop_atomic_ref_device_lat", "global"),
    "gp_coop_atomic_ref_block_lat": atomic_ref("gp_coop_atomic_ref_block_lat", "global"),
    "gp_coop_atomic_ref_shared_lat": atomic_ref("gp_coop_atomic_ref_shared_lat", "shared"),
    "gp_coop_cub_warp_reduce_lat": cub_warp_reduce,
    "gp_coop_cub_warp_scan_lat": tile_chain("gp_coop_cub_warp_scan_lat", _scan),
    **{kernel: block_kernel(kernel, _first_takes_total)
       for kernel in ("gp_coop_cub_block_reduce_lat", "gp_coop_ptx_block_reduce_lat")},
    **{kernel: block_kernel(kernel, lambda v: _scan(v, [])) for kernel in ("gp_coop_cub_block_scan_lat",
                                                                          "gp_coop_ptx_block_scan_lat")},
    "gp_coop_cub_radix_sort_lat": block_kernel("gp_coop_cub_radix_sort_lat", _sorted_and_mapped, per_thread=4),
}  # fmt: skip

SIMULATION = Simulation(kernels=KERNELS, fast_settings=FAST_SETTINGS)
