"""The TMA family (sm_90+): 2-D tiles moved through tensor maps by cp.async.bulk.tensor.

The host encodes a tensor map for each tensor and tile (``TensorMaps.tensor_map``: cuTensorMapEncodeTiled
in the launch runner) and passes it by value, as the PTX ISA requires. Tiles are 64 x 64 and 128 x 64
bf16 (8 and 16 KiB), under the 128-byte, 64-byte or no shared-memory swizzle (the 64-byte swizzle
moves a tile as two 32-column boxes, :mod:`gpuprobe.families.tma.tiles`), with the L2 promotion at
256 bytes or off for tiles read from DRAM. Per swizzle mode:

* ``tma.latency.<swizzle>`` — one thread chases a random cycle of tiles, each tile naming the next, one
  tile in flight; from L2 (64 tiles, warmed) and DRAM (a long cycle, the L2 flushed before each launch).
  A sample is a long minus a short chase (:class:`gpuprobe.families.chase.Chase`): cycles per tile.
* ``tma.bandwidth.<swizzle>`` — every SM streams tiles through a 4-stage mbarrier pipeline per block;
  from DRAM (a tensor of 4 L2 sizes, flushed before each run) and L2 (half the L2). GB/s from CUDA
  events, the extra bytes of a long run over its extra time.
* ``tma.store.<swizzle>`` — every block stores one shared tile to successive tiles of a tensor.

And, on sm_90a and sm_100a, ``tma.unicast.c{2,4}`` and ``tma.multicast.c{2,4}``: clusters of 2 and 4
blocks stream the same 128 x 64 tiles, each block loading them itself or each loading one slice of
every tile multicast to the whole cluster; the facts are the bytes the blocks received per second and
the multicast's speed-up over the unicast stream measured just before it.

Every launch is checked: the chase ends on the tile the host predicts and the last tile, as it lies in
shared memory, is the tensor's tile once the swizzle is decoded; every block's sum of the words it
received is the host's; a stored tile in global memory is the block's tile with the swizzle decoded,
and the tiles past a run's are untouched. A wrong result fails the probe and gives no facts.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.families.async_copy import L2Flush, within_source
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.chase import OUT_WORDS, Chase, random_cycle
from gpuprobe.families.differencing import Lengths, event_gbps
from gpuprobe.families.measuring import fact, require_counts, unmeasured
from gpuprobe.families.planning import (
    DRAM_STEP_CYCLES,
    L2_STEP_CYCLES,
    cycles_s,
    dram_s,
    generate_host_s,
    kernel_runs,
    link_s,
    probe,
    resident_blocks,
    sum_host_s,
)
from gpuprobe.families.sampling import ONE_SAMPLE, Stopping
from gpuprobe.families.stepping import probe_steps
from gpuprobe.families.tma.plot import bandwidth_png, multicast_png
from gpuprobe.families.tma.tiles import (
    ROW_BYTES,
    SWIZZLE_BYTES,
    TILE_ROWS,
    Tile,
    chase_tensor,
    tensor_values,
    tile_word_sums,
    tiles,
)
from gpuprobe.judge.invariants import Check
from gpuprobe.kernels.registry import unroll_of
from gpuprobe.output.sections import Plot, Section
from gpuprobe.runner.launcher import TensorMaps, capability
from gpuprobe.runner.tensor_map import TileMap

MIB = 1 << 20
ALIGN = 1024  # dynamic shared memory beyond the tiles, so they can start on a 1024-byte boundary
CLUSTER_SIZES = (2, 4)
MULTICAST_TILE = Tile(128, "sw128")  # the tile of the cluster streams: 128 x 64 bf16, CUTLASS's usual
LEVELS = ("l2", "dram")
LOAD_CONFIGS = (("l2", True), ("dram", True), ("dram", False))  # (level, L2 promotion): promotion is DRAM's
STRIDE_ROWS = max(TILE_ROWS)  # tensors hold whole tiles of every shape

PROBES = [
    *(f"tma.latency.{swizzle}" for swizzle in SWIZZLE_BYTES),
    *(f"tma.bandwidth.{swizzle}" for swizzle in SWIZZLE_BYTES),
    *(f"tma.store.{swizzle}" for swizzle in SWIZZLE_BYTES),
    *(f"tma.unicast.c{c}" for c in CLUSTER_SIZES),
    *(f"tma.multicast.c{c}" for c in CLUSTER_SIZES),
]


@dataclass(frozen=True)
class Settings:
    l2_tiles: int = 64  # the L2 chase's cycle (0.5 or 1 MiB), warmed by a lap each launch
    dram_tiles: int = 1024  # the DRAM chase's cycle: longer than a launch's steps, so none is met twice
    chase_steps: tuple[int, int] = (16, 256)  # timed steps of the short and the long chase
    stages: int = 4  # tiles in flight per block in the streams (at most 8: the kernels' barriers)
    threads: int = 128
    dram_l2_multiple: float = 4.0  # the DRAM streams' tensor, in L2 sizes,
    dram_min_bytes: int = 64 * MIB  # and at least this
    dram_passes: tuple[float, float] = (0.5, 2.0)  # short and long runs over the DRAM tensor
    l2_fraction: float = 0.5  # the L2 streams' tensor, of the L2
    l2_passes: tuple[float, float] = (4.0, 32.0)  # short and long runs over the L2 tensor
    sampling: Stopping = Stopping(3, 7, 0.01, 0.3)  # each configuration's samples
    seed: int = 20250917

    def __post_init__(self) -> None:
        require_counts(self, ("l2_tiles", "dram_tiles", "stages", "threads"))
        pairs = {"chase_steps": self.chase_steps, "dram_passes": self.dram_passes, "l2_passes": self.l2_passes}
        for name, (short, long) in pairs.items():
            if not 0 < short < long:
                raise ValueError(f"Settings.{name}: need 0 < short < long, got {short}, {long}")
        if self.chase_steps[1] > self.dram_tiles:
            raise ValueError("Settings: a DRAM chase must not meet a tile twice (chase_steps[1] <= dram_tiles)")
        if self.stages > 8 or self.dram_tiles > 1 << 16:
            raise ValueError("Settings: stages <= 8, dram_tiles <= 65536")


def fact_id(direction: str, level: str, tile: Tile, promotion: bool, quantity: str) -> str:
    """e.g. ``tma.load.dram.128x64.sw128.no_l2_promotion.bandwidth``."""
    off = "" if promotion else ".no_l2_promotion"
    return f"tma.{direction}.{level}.{tile.name}.{tile.swizzle}{off}.{quantity}"


def tensor_rows(settings: Settings, device: Device, level: str) -> int:
    """Rows of the streams' tensor at ``level``: half the L2, or 4 L2 sizes (at least 64 MiB); whole tiles."""
    nbytes = (settings.l2_fraction * device.l2_bytes if level == "l2"
              else max(settings.dram_min_bytes, settings.dram_l2_multiple * device.l2_bytes))  # fmt: skip
    return max(STRIDE_ROWS, int(nbytes) // ROW_BYTES // STRIDE_ROWS * STRIDE_ROWS)


def stream_steps(settings: Settings, level: str, tile_count: int, blocks: int) -> tuple[int, int]:
    """Steps per block of a stream's short and long run: the passes over the tensor its level asks for
    (a DRAM run at least twice the stages, so the pipeline fills)."""
    per_pass = max(1.0, tile_count / blocks)
    passes = settings.l2_passes if level == "l2" else settings.dram_passes
    short = max(2 * settings.stages, round(passes[0] * per_pass))
    return short, max(short + 1, round(passes[1] * per_pass))


@dataclass
class Mapped:
    """A tensor on the device, its values on the host, and tensor maps of it (the buffer must outlive them)."""

    buffer: Any
    values: np.ndarray  # rows x 64 bf16 bits


@dataclass
class Streams:
    """What the family's streams share across probes: their tensors by level (made once), those tensors'
    smallest tiles' sums, and the L2's flush."""

    tensors: dict[str, Mapped] = field(default_factory=dict)
    sums: dict[tuple[str, int], np.ndarray] = field(default_factory=dict)
    flush: L2Flush = field(default_factory=L2Flush)

    def tensor(self, request: Request, level: str) -> Mapped:
        if level not in self.tensors:
            values = tensor_values(tensor_rows(request.settings, request.device, level), request.settings.seed)
            self.tensors[level] = Mapped(request.launcher.upload(values.ravel()), values)
        return self.tensors[level]

    def tile_sums(self, request: Request, level: str, rows: int) -> np.ndarray:
        """What a block adds up of each tile of ``rows`` rows of the streams' tensor at ``level``: the
        tensor's smallest tiles summed once, larger ones made of them."""
        key = (level, min(TILE_ROWS))
        if key not in self.sums:
            self.sums[key] = tile_word_sums(self.tensor(request, level).values, key[1])
        smallest = self.sums[key]
        return smallest.reshape(-1, rows // key[1]).sum(axis=1, dtype=np.uint64)


def full_grid(request: Request, kernel: str, shared: int, multiple: int = 1) -> int:
    """Blocks filling every SM with as many blocks of ``kernel`` as fit, whole clusters of ``multiple``."""
    threads = request.settings.threads
    per_sm = request.launcher.max_active_blocks(kernel, threads, shared)
    blocks = request.device.sm_count * per_sm // multiple * multiple
    if blocks < multiple or per_sm < 1:
        raise ProbeFailure(f"{kernel}: no block of {threads} threads with {shared} bytes fits")
    return blocks


def tensor_map(request: Request, buffer: Any, tiles: TileMap) -> np.void:
    """The tensor map of ``buffer`` that ``tiles`` describes (the launcher's TMA capability)."""
    return capability(request.launcher, TensorMaps).tensor_map(buffer, tiles)


# ---- latency -----------------------------------------------------------------------------------


def check_tile(kernel: str, got: np.ndarray, expected: np.ndarray, which: str) -> None:
    """A tile (rows x 64 bf16 bits, its swizzle decoded) is the tensor's ``expected`` one."""
    wrong = np.argwhere(got != expected)
    if wrong.size:
        row, col = (int(v) for v in wrong[0])
        raise ProbeFailure(
            f"{kernel}: {which} tile holds {int(got[row, col]):#06x} at ({row}, {col}), the tensor "
            f"{int(expected[row, col]):#06x} ({len(wrong)} of {got.size} elements wrong once the swizzle is decoded)"
        )


def tile_chase(request: Request, streams: Streams, tile: Tile, level: str, promotion: bool) -> Chase:
    """A chase through a fresh cycle of tiles at ``level``; every launch's last tile checked."""
    s = request.settings
    nodes = s.l2_tiles if level == "l2" else s.dram_tiles
    cycle = random_cycle(nodes, s.seed + nodes + tile.rows)
    values = chase_tensor(cycle, tile.rows, s.seed)
    mapped = Mapped(request.launcher.upload(values.ravel()), values)
    tmap = tensor_map(request, mapped.buffer, tile.tensor_map(len(values), promotion))
    kernel, words = f"gp_tma_chase_x{tile.boxes}", OUT_WORDS + tile.bytes // 8
    position = np.empty(nodes, dtype=np.int64)  # each tile's step in the cycle
    position[cycle.order] = np.arange(nodes)

    def launch(start: int, warm: int, iterations: int) -> np.ndarray:
        if level == "dram":
            streams.flush(request)
        out = request.outputs.get(words)
        args = [tmap, np.uint32(tile.rows), np.uint32(start), np.uint32(warm), np.uint32(iterations), out]
        got = request.kernels.results(kernel, args, out, words, block=32, shared=tile.bytes + ALIGN)
        loaded = cycle.order[(position[start] + warm + iterations - 1) % nodes]  # the last tile the host predicts
        last = tiles(mapped.values, tile.rows)[loaded]
        check_tile(kernel, tile.from_shared(got[OUT_WORDS:]), last, f"the last {tile.name} ({tile.swizzle})")
        return got[:OUT_WORDS]

    def end_tile(end: int) -> int:
        if not 0 <= end < nodes:
            raise ProbeFailure(f"{kernel}: chase ended on tile {end}, not one of the {nodes}")
        return end

    return Chase(cycle, launch, end_tile, unroll_of(kernel), kernel, warm_laps=1 if level == "l2" else 0)


def measure_latency(request: Request, streams: Streams, name: str) -> Measured:
    swizzle, s = name.rsplit(".", 1)[1], request.settings
    facts, clocks = [], []
    for rows in TILE_ROWS:
        tile = Tile(rows, swizzle)
        for level, promotion in LOAD_CONFIGS:
            chase = tile_chase(request, streams, tile, level, promotion)
            samples = chase.latencies(*s.chase_steps, s.sampling)
            clocks += chase.clock_mhz
            facts.append(fact(fact_id("load", level, tile, promotion, "latency"), samples, "cycle", name, chase.mhz))
    note = f"SM clock {float(np.median(clocks)):.0f} MHz over the long chases" if clocks else ""
    return Measured(name, ProbeOutcome("ok", note), facts)


# ---- streams -----------------------------------------------------------------------------------


def timed_rate(request: Request, streams: Streams, kernel: str, args: Callable[[int], list[object]],
               steps: tuple[int, int], step_bytes: int, grid: int, shared: int, level: str) -> list[float]:  # fmt: skip
    """Samples of a stream's rate: a short and a long run of ``steps`` steps of ``step_bytes`` each (CUDA
    events, :class:`~gpuprobe.families.differencing.Difference`), the DRAM's L2 flushed before each run."""

    def ms(count: int) -> float:
        if level == "dram":
            streams.flush(request)
        return request.kernels.time(kernel, args(count), grid=grid, block=request.settings.threads, shared=shared)

    # every stream's checked run came first: the kernel is warm
    return event_gbps(ms, Lengths(*steps, 1), step_bytes, kernel, request.settings.sampling, warmed=True)[0]


def check_block_sums(kernel: str, got: np.ndarray, expected: np.ndarray) -> None:
    wrong = np.flatnonzero(got != expected)
    if wrong.size:
        b = int(wrong[0])
        raise ProbeFailure(f"{kernel}: block {b} added up {int(got[b]):#x} of what it received, the host "
                           f"{int(expected[b]):#x} ({wrong.size} blocks wrong)")  # fmt: skip


def received_sums(tile_sums: np.ndarray, owners: np.ndarray, groups: int, steps: int) -> np.ndarray:
    """Per block, the sum of the tiles it received: block b's group g = owners[b] takes tiles
    (g + k x groups) mod tiles for k < ``steps``."""
    index = (owners[:, None] + np.arange(steps)[None, :] * groups) % len(tile_sums)
    return tile_sums[index].sum(axis=1, dtype=np.uint64)


def load_stream_rate(request: Request, streams: Streams, tile: Tile, level: str, promotion: bool) -> list[float]:
    s, mapped = request.settings, streams.tensor(request, level)
    count = len(mapped.values) // tile.rows
    tmap = tensor_map(request, mapped.buffer, tile.tensor_map(len(mapped.values), promotion))
    kernel, shared = f"gp_tma_stream_x{tile.boxes}", s.stages * tile.bytes + ALIGN
    grid = full_grid(request, kernel, shared)
    short, long = stream_steps(s, level, count, grid)
    words = grid * s.threads + tile.bytes // 8
    out = request.outputs.get(words)

    def args(steps: int) -> list[object]:
        return [tmap, np.uint32(tile.rows), np.uint32(s.stages), np.uint32(count), np.uint32(steps), out]

    got = request.kernels.results(kernel, args(short), out, words, grid=grid, block=s.threads, shared=shared)
    block_sums = got[: grid * s.threads].reshape(grid, s.threads).sum(axis=1, dtype=np.uint64)
    sums = streams.tile_sums(request, level, tile.rows)
    check_block_sums(kernel, block_sums, received_sums(sums, np.arange(grid), grid, short))
    last = ((short - 1) * grid) % count
    expected = tiles(mapped.values, tile.rows)[last]
    which = f"block 0's last {tile.name} ({tile.swizzle})"
    check_tile(kernel, tile.from_shared(got[grid * s.threads :]), expected, which)
    return timed_rate(request, streams, kernel, args, (short, long), grid * tile.bytes, grid, shared, level)


def measure_bandwidth(request: Request, streams: Streams, name: str) -> Measured:
    swizzle = name.rsplit(".", 1)[1]
    facts, series = [], {"config": [], "gbps": []}
    for rows in TILE_ROWS:
        tile = Tile(rows, swizzle)
        for level, promotion in LOAD_CONFIGS:
            result = fact(fact_id("load", level, tile, promotion, "bandwidth"),
                          load_stream_rate(request, streams, tile, level, promotion), "GB/s", name)  # fmt: skip
            facts.append(result)
            series["config"].append(result.id)
            series["gbps"].append(result.value)
    note = f"{request.settings.stages} stages of {request.settings.threads}-thread blocks, every SM"
    return Measured(name, ProbeOutcome("ok", note, {"bandwidth": series}), facts)


def store_rate(request: Request, streams: Streams, tile: Tile, level: str) -> list[float]:
    s = request.settings
    rows = tensor_rows(s, request.device, level)
    tensor = request.launcher.alloc(rows * ROW_BYTES)
    count = rows // tile.rows
    tmap = tensor_map(request, tensor, tile.tensor_map(rows))
    kernel, shared = f"gp_tma_store_x{tile.boxes}", tile.bytes + ALIGN
    grid = full_grid(request, kernel, shared)
    short, long = stream_steps(s, level, count, grid)
    out = request.outputs.get(grid)

    def args(steps: int) -> list[object]:
        return [tmap, np.uint32(tile.rows), np.uint32(count), np.uint32(steps), out]

    issued = request.kernels.results(kernel, args(1), out, grid, grid=grid, block=s.threads, shared=shared)
    if np.any(issued != 1):
        raise ProbeFailure(f"{kernel}: a block issued {int(issued.max())} stores, not 1")
    written = min(count, grid + 1)
    back = request.launcher.read(tensor, "uint16", written * tile.rows * 64).reshape(written, tile.rows, 64)
    stored = tile.stored()
    for index in range(min(count, grid)):
        check_tile(kernel, back[index], stored, f"stored {tile.name} ({tile.swizzle}) tile {index}: the")
    if count > grid and np.any(back[grid]):
        raise ProbeFailure(f"{kernel}: tile {grid}, past the {grid} one store per block wrote, was written")
    return timed_rate(request, streams, kernel, args, (short, long), grid * tile.bytes, grid, shared, level)


def measure_store(request: Request, streams: Streams, name: str) -> Measured:
    swizzle = name.rsplit(".", 1)[1]
    facts = [
        fact(fact_id("store", level, Tile(rows, swizzle), True, "bandwidth"),
             store_rate(request, streams, Tile(rows, swizzle), level), "GB/s", name)
        for rows in TILE_ROWS for level in LEVELS
    ]  # fmt: skip
    return Measured(name, ProbeOutcome("ok", "every block stores one shared tile, one bulk group per tile"), facts)


# ---- multicast ---------------------------------------------------------------------------------


def cast_rate(request: Request, streams: Streams, kind: str, size: int, level: str) -> list[float]:
    """Samples of the bytes the blocks of clusters of ``size`` received per second, ``kind`` "unicast"
    (each block loads every tile) or "multicast" (each block a slice, to every block of its cluster)."""
    s, tile, mapped = request.settings, MULTICAST_TILE, streams.tensor(request, level)
    count = len(mapped.values) // tile.rows
    box_rows = tile.rows // size if kind == "multicast" else tile.rows
    tmap = tensor_map(request, mapped.buffer, tile.tensor_map(len(mapped.values), box_rows=box_rows))
    kernel, shared = f"gp_tma_{kind}_c{size}", s.stages * tile.bytes + ALIGN
    grid = full_grid(request, kernel, shared, size)
    clusters = grid // size
    short, long = stream_steps(s, level, count, clusters)
    out = request.outputs.get(grid * s.threads)

    def args(steps: int) -> list[object]:
        return [tmap, np.uint32(tile.rows), np.uint32(s.stages), np.uint32(count), np.uint32(steps), out]

    got = request.kernels.results(kernel, args(short), out, grid * s.threads, grid=grid, block=s.threads, shared=shared)
    block_sums = got.reshape(grid, s.threads).sum(axis=1, dtype=np.uint64)
    sums = streams.tile_sums(request, level, tile.rows)
    check_block_sums(kernel, block_sums, received_sums(sums, np.arange(grid) // size, clusters, short))
    return timed_rate(request, streams, kernel, args, (short, long), grid * tile.bytes, grid, shared, level)


def measure_cast(request: Request, streams: Streams, name: str) -> Measured:
    kind, size = name.split(".")[1], int(name.rsplit(".c", 1)[1])
    rates = {level: cast_rate(request, streams, kind, size, level) for level in LEVELS}
    baseline = request.state.setdefault("tma_unicast", {})
    facts = [fact(f"tma.{kind}.c{size}.{level}.bandwidth", rates[level], "GB/s", name) for level in LEVELS]
    if kind == "unicast":
        baseline.update({f"c{size}.{level}": rates[level] for level in LEVELS})
    for level in LEVELS if kind == "multicast" else ():
        unicast, fact_name = baseline.get(f"c{size}.{level}"), f"tma.multicast.c{size}.{level}.speedup"
        if unicast:
            reference = float(np.median(unicast))
            facts.append(fact(fact_name, [r / reference for r in rates[level]], "ratio", name))
        else:
            facts.append(unmeasured(fact_name, "ratio", name, f"tma.unicast.c{size} was not measured in this run"))
    note = f"clusters of {size}, {MULTICAST_TILE.name} tiles ({MULTICAST_TILE.swizzle}); GB/s received by all blocks"
    return Measured(name, ProbeOutcome("ok", note, {"received_gbps": {k: v for k, v in rates.items()}}), facts)


STEPS: dict[str, Callable[[Request, Streams, str], Measured]] = {
    **{f"tma.latency.{sw}": measure_latency for sw in SWIZZLE_BYTES},
    **{f"tma.bandwidth.{sw}": measure_bandwidth for sw in SWIZZLE_BYTES},
    **{f"tma.store.{sw}": measure_store for sw in SWIZZLE_BYTES},
    **{f"tma.{kind}.c{c}": measure_cast for kind in ("unicast", "multicast") for c in CLUSTER_SIZES},
}


# ---- the time plan -----------------------------------------------------------------------------

TMA_STEP_CYCLES = {"l2": 2 * L2_STEP_CYCLES, "dram": 2 * DRAM_STEP_CYCLES}  # one tile's round trip, at most


def _chases(s: Settings, device: Device) -> Plan:
    """One swizzle's chases: per shape and configuration a tensor made and uploaded, and every sample's
    two launches (the L2's warm lap, the steps at the level's tile round trip, the DRAM's flush)."""
    r, total = s.sampling.max_repeats, Plan(0, 0, 0.0)
    for rows in TILE_ROWS:
        for level, _ in LOAD_CONFIGS:
            nodes = s.l2_tiles if level == "l2" else s.dram_tiles
            nbytes = nodes * rows * ROW_BYTES
            steps = r * ((2 * nodes if level == "l2" else 0) + sum(s.chase_steps))
            flush = 2 * r * dram_s(2 * device.l2_bytes, device) if level == "dram" else 0.0
            made = Plan(0, 1, 0.0, generate_host_s(nbytes) + link_s(nbytes))
            total += made + kernel_runs(2 * r, steps * cycles_s(TMA_STEP_CYCLES[level], device) + flush)
    return total


def _streams(s: Settings, device: Device, tile_bytes: int, per_block_bytes: int, levels: tuple[str, ...]) -> Plan:
    """A stream of ``tile_bytes`` tiles at each of ``levels``: a checked run and every sample's short and
    long run, the bytes at the DRAM's planning rate (an L2 run no faster), the DRAM's flushes."""
    r, total = s.sampling.max_repeats, Plan(0, 0, 0.0)
    grid = device.sm_count * resident_blocks(device, s.threads, per_block_bytes)
    for level in levels:
        count = tensor_rows(s, device, level) * ROW_BYTES // tile_bytes
        short, long = stream_steps(s, level, count, grid)
        moved = grid * tile_bytes * (short + r * (short + long))
        flush = 2 * r * dram_s(2 * device.l2_bytes, device) if level == "dram" else 0.0
        total += kernel_runs(1 + 2 * r, dram_s(moved, device) + flush)
    return total


def plan(settings: Settings, device: Device) -> Plan:
    """Every probe at its most repeats (counted as if the arch had them all: an upper bound): the chases
    step by step, the streams by the bytes they move at the DRAM's planning rate and their flushes, the
    two stream tensors generated, uploaded and summed once."""
    s = settings
    loads = [level for level, _ in LOAD_CONFIGS]
    total = Plan(0, 0, 0.0)
    for _ in SWIZZLE_BYTES:
        total += probe(_chases(s, device))
        bandwidth = [_streams(s, device, rows * ROW_BYTES, s.stages * rows * ROW_BYTES + ALIGN, tuple(loads))
                     for rows in TILE_ROWS]  # fmt: skip
        stores = [_streams(s, device, rows * ROW_BYTES, rows * ROW_BYTES + ALIGN, LEVELS) for rows in TILE_ROWS]
        total += probe(*bandwidth) + probe(*stores)
    cast_bytes = MULTICAST_TILE.bytes
    for _ in range(2 * len(CLUSTER_SIZES)):
        total += probe(_streams(s, device, cast_bytes, s.stages * cast_bytes + ALIGN, LEVELS))
    tensors = sum(tensor_rows(s, device, level) * ROW_BYTES for level in LEVELS)
    return total + Plan(0, 0, link_s(tensors), generate_host_s(tensors) + sum_host_s(tensors))


# A first contact: the 128-byte swizzle's chases (both shapes, L2 and DRAM), each launch's end tile and last
# tile checked, one short sample each.
SMOKE_SETTINGS = Settings(l2_tiles=8, dram_tiles=16, chase_steps=(1, 2), sampling=ONE_SAMPLE,
                          dram_l2_multiple=0.0, dram_min_bytes=1 << 20, l2_fraction=0.01)  # fmt: skip
SMOKE = Smoke(probes=("tma.latency.sw128",), settings=SMOKE_SETTINGS)


# ---- invariants and the sheet ------------------------------------------------------------------


def _value(facts: dict[str, Fact], fact_name: str) -> float | None:
    found = facts.get(fact_name)
    return found.value if found is not None and found.value is not None else None


ORDERINGS = (("latency", lambda l2, dram: l2 < dram), ("bandwidth", lambda l2, dram: l2 >= dram))


def level_invariants(facts: dict[str, Fact], device: Device) -> list[Check]:
    """A tile from L2 arrives sooner than one from DRAM, and tiles stream from L2 at least as fast as from
    DRAM (same shape, swizzle and promotion)."""
    checks = []
    for swizzle in SWIZZLE_BYTES:
        for rows in TILE_ROWS:
            tile = Tile(rows, swizzle)
            for quantity, faster in ORDERINGS:
                ids = (fact_id("load", "l2", tile, True, quantity), fact_id("load", "dram", tile, True, quantity))
                l2, dram = (_value(facts, i) for i in ids)
                if l2 is not None and dram is not None:
                    checks.append(Check(f"tma.l2_beats_dram.{quantity}.{tile.name}.{swizzle}", faster(l2, dram),
                                        f"{quantity}: L2 {l2:.1f}, DRAM {dram:.1f}", ids))  # fmt: skip
    return checks


def multicast_invariants(facts: dict[str, Fact], device: Device) -> list[Check]:
    """A multicast to C blocks cannot deliver more than C times what unicast loads of the same bytes do:
    it requests 1/C of them (5 % for the noise of two rates)."""
    checks = []
    for size in CLUSTER_SIZES:
        for level in LEVELS:
            speedup_id = f"tma.multicast.c{size}.{level}.speedup"
            speedup = _value(facts, speedup_id)
            if speedup is not None:
                name = f"tma.multicast_at_most_cluster_size.c{size}.{level}"
                detail = f"speed-up {speedup:.2f} in clusters of {size}"
                checks.append(Check(name, speedup <= 1.05 * size, detail, (speedup_id,), physics=True))
    return checks


def source_invariants(facts: dict[str, Fact], device: Device) -> list[Check]:
    """No TMA load stream outruns the run's own read of the level it reads (``bandwidth.l2_read.v16``,
    ``bandwidth.dram_read.v16``) beyond their CIs: every tile load from the L2 tensor is an L2 read, every one
    from the DRAM tensor (flushed, 4 L2 sizes) a DRAM read, promotion or not; a unicast block loads every tile
    itself, so whatever the tensor, what the blocks receive is what the L2 served them. A multicast's received
    rate is not a read rate (the L2 serves 1/C of it): ``multicast_invariants`` bounds it. Stores write."""
    loads = [
        (fact_id("load", level, Tile(rows, swizzle), promotion, "bandwidth"), level)
        for swizzle in SWIZZLE_BYTES for rows in TILE_ROWS for level, promotion in LOAD_CONFIGS
    ]  # fmt: skip
    unicast = [(f"tma.unicast.c{size}.{level}.bandwidth", "l2") for size in CLUSTER_SIZES for level in LEVELS]
    return within_source(facts, loads + unicast)


INVARIANTS = (level_invariants, multicast_invariants, source_invariants)

SECTIONS = (
    Section(
        title="TMA tensor maps (sm_90+)",
        fact_prefixes=("tma.load.", "tma.store."),
        probe_prefixes=("tma.latency.", "tma.bandwidth.", "tma.store."),
        plot=Plot("tma_bandwidth", "tma_bandwidth.png", "TMA bandwidth vs tile shape and swizzle", bandwidth_png),
        blurb=(
            "cp.async.bulk.tensor 2-D tiles of bf16 (64 x 64, 128 x 64) through tensor maps the host encoded, per "
            "shared-memory swizzle (none, 64 B as two 32-column boxes, 128 B) and L2 promotion (256 B, or none: "
            "no_l2_promotion). Latency: one tile in flight, a chase through a random cycle of tiles (cycles). "
            "Bandwidth: every SM, a 4-stage mbarrier pipeline per block; compare with bandwidth.dram_read and "
            "bandwidth.l2_read.v16. Stores: every block storing one shared tile. Every tile checked with its "
            "swizzle decoded."
        ),
    ),
    Section(
        title="TMA multicast (sm_90a, sm_100a)",
        fact_prefixes=("tma.multicast.", "tma.unicast."),
        probe_prefixes=("tma.multicast.", "tma.unicast."),
        plot=Plot("tma_multicast", "tma_multicast.png", "TMA multicast speed-up vs cluster size", multicast_png),
        blurb=(
            "Clusters of 2 and 4 blocks streaming the same 128 x 64 tiles: each block loading every tile itself "
            "(unicast), or one slice of it multicast to the whole cluster (.multicast::cluster), so the L2 serves "
            "1/C of the bytes the blocks receive. GB/s received by all blocks; speed-up = multicast over unicast."
        ),
    ),
)


def measure(request: Request) -> Probes:
    """The family's runnable probes in order, each as (name, step); a probe whose own check fails raises
    ProbeFailure. Probes the arch lacks are not runnable (their toml's archs)."""
    request, streams = replace(request, settings=request.settings or Settings()), Streams()
    steps = {name: lambda name=name: STEPS[name](request, streams, name) for name in PROBES}
    return probe_steps(PROBES, steps, request.runnable)


FAMILY = Family(
    name="tma",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
    sections=SECTIONS,
    invariants=INVARIANTS,
)
