"""The cache-geometry family: sectors, the L1 line, load width, TLB reach and the constant cache.

Every probe is a single-thread dependent chase (one warp for the divergent constant probe), timed
the memory family's way (gpuprobe.families.memory_latency): a sample is a long minus a short timed
chase continuing the same chain, so whatever a timed region pays once cancels; every launch's end
node is checked against the host's prediction, and a wrong end fails the probe. What changes from
probe to probe is how the host lays the chain out:

1. ``cache_geometry.sector.l1`` / ``.sector.l2`` — nodes in address order, S bytes apart, for
   strides S from 8 to 256 bytes; the knee of latency vs stride is the fill unit
   (:func:`~gpuprobe.families.cache_geometry.analysis.fit_unit`);
2. ``cache_geometry.line.l1`` — random chases over growing footprints with nodes packed densely
   and one per line; the L1 holds the same bytes of the first and one line's worth of nodes per line
   of the second, so a line is the ratio of the two capacities;
3. ``cache_geometry.width.{l1,l2,dram}`` — one random cycle per level chased by the 8-byte and the
   16-byte kernels in turn; a sample is the difference of their latencies;
4. ``cache_geometry.tlb`` — one node per 2 MiB page, footprints up to several GiB; find_levels reads
   the translation steps;
5. ``cache_geometry.constant.latency`` / ``.divergent`` — the .const array the PTX initializes.

Times are in cycles only: the family runs no clock probe of its own.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.families.base import Measured, Plan, ProbeFailure, Probes, Request, Smoke
from gpuprobe.families.cache_geometry.analysis import fit_unit, slope, tlb_levels
from gpuprobe.families.cache_geometry.checks import INVARIANTS as INVARIANTS
from gpuprobe.families.cache_geometry.checks import SECTIONS as SECTIONS
from gpuprobe.families.chain import Chain, random_cycle
from gpuprobe.families.measuring import (
    Kernels,
    Stopping,
    fact,
    require_counts,
    require_long_after_short,
    sample_until_stable,
)
from gpuprobe.families.memory_latency import (
    UNROLL,
    Chase,
    ChaseContext,
    Point,
    capacity_fact,
    chase_plan,
    node_of,
)
from gpuprobe.families.memory_latency import Settings as ChaseSettings
from gpuprobe.families.planning import (
    DRAM_STEP_CYCLES,
    L2_STEP_CYCLES,
    NO_WORK,
    chain_host_s,
    combined,
    cycles_s,
    dram_s,
    kernel_runs,
    link_s,
    probe,
    step_cycles,
)
from gpuprobe.judge.analysis import find_levels
from gpuprobe.runner.gpu import Launcher

LINE = 128  # one node per line where a probe is not about the line
CONST_ROWS, CONST_ROW_BYTES = 64, 128  # the .const cycle of ptx/cache_geometry/cache_geometry.ptx
CONST_SELF = CONST_ROWS * CONST_ROW_BYTES  # offset of the 32 self-referencing words after it
WARP = 32


@dataclass(frozen=True)
class Settings:
    short_iterations: int = 8  # a sample: the long chase minus the short one,
    long_iterations: int = 40  # (40 - 8) x 32 = 1024 loads
    min_repeats: int = 3
    max_repeats: int = 7
    target_noise: float = 0.01
    point_budget_s: float = 0.3  # the most time one point of a sweep may take
    strides: tuple[int, ...] = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
    l1_sweep_bytes: int = 1 << 20  # the L1 stride sweep's footprint: beyond any L1, at most half the L2
    width_l1_bytes: int = 8 * 1024
    width_l2_fraction: float = 0.125  # of the device L2: inside the near partition on split-L2 parts
    width_dram_l2_multiple: float = 4.0
    tlb_page_bytes: int = 2 << 20
    tlb_skew_bytes: int = 3 * LINE  # added to the page stride, so the nodes spread over the L2's sets
    tlb_max_bytes: int = 32 << 30
    tlb_memory_fraction: float = 0.25  # of the device memory, when it reports it;
    tlb_unknown_memory_bytes: int = 256 << 20  # the cap when it does not (a real device always does)
    tlb_reference_nodes: int = 64  # the no-miss reference: this many lines within one page
    tlb_points_per_octave: int = 3
    divergent_lanes: tuple[int, ...] = (1, 2, 4, 8, 16, 32)
    line_dense_stride: int = 32  # no more than any plausible line: the L1 holds its capacity in bytes
    line_sparse_stride: int = 544  # more than any plausible line (and no power of two): one node per line
    line_min_bytes: int = 8 * 1024  # the L1 line probe sweeps footprints (in lines' worth of data)
    line_max_bytes: int = 512 * 1024  # up to twice the largest L1
    line_points_per_octave: int = 4
    seed: int = 20240917

    def __post_init__(self) -> None:
        object.__setattr__(self, "strides", tuple(self.strides))  # JSON hands lists back
        object.__setattr__(self, "divergent_lanes", tuple(self.divergent_lanes))
        counts = ("short_iterations", "min_repeats", "l1_sweep_bytes", "width_l1_bytes", "tlb_page_bytes",
                  "tlb_max_bytes", "tlb_points_per_octave", "line_points_per_octave",
                  "tlb_unknown_memory_bytes")  # fmt: skip
        require_counts(self, counts)
        require_long_after_short(self)
        if len(self.strides) < 4 or min(self.strides) < 8 or any(s % 8 for s in self.strides):
            raise ValueError(f"Settings.strides must be at least 4 multiples of 8 bytes, got {self.strides}")
        if len(set(self.divergent_lanes)) < 2 or not all(1 <= k <= WARP for k in self.divergent_lanes):
            raise ValueError(
                f"Settings.divergent_lanes must be 2+ distinct counts in 1..32, got {self.divergent_lanes}"
            )
        if not 8 <= self.line_dense_stride < self.line_sparse_stride or self.line_max_bytes < 4 * self.line_min_bytes:
            raise ValueError("Settings: need 8 <= line_dense_stride < line_sparse_stride, line_max_bytes >= 4 x min")
        if self.tlb_skew_bytes % LINE or not 0 <= self.tlb_skew_bytes < self.tlb_page_bytes:
            raise ValueError("Settings.tlb_skew_bytes must be whole lines, less than a page")
        if not 2 <= self.tlb_reference_nodes <= self.tlb_page_bytes // LINE:
            raise ValueError("Settings.tlb_reference_nodes must be 2 to a page's worth of lines")

    def chase(self) -> ChaseSettings:
        """The memory family's settings for the chase lengths this family uses."""
        return ChaseSettings(short_iterations=self.short_iterations, long_iterations=self.long_iterations,
                             min_repeats=self.min_repeats, max_repeats=self.max_repeats)  # fmt: skip

    def stopping(self) -> Stopping:
        return Stopping(self.min_repeats, self.max_repeats, self.target_noise, self.point_budget_s)

    def steps_per_point(self) -> int:
        """The most chase steps one point's timed launches take (no warm-up)."""
        return self.max_repeats * (self.short_iterations + self.long_iterations) * UNROLL


# ---- planning: footprints and node counts, shared with the budget estimate --------------------


def l1_sweep_bytes(settings: Settings, l2_bytes: int) -> int:
    return min(settings.l1_sweep_bytes, l2_bytes // 2)


def cold_nodes(settings: Settings) -> int:
    """Nodes of a chain chased once, cold: more than every step a point can take."""
    return settings.steps_per_point() + 1


def tlb_stride(settings: Settings) -> int:
    return settings.tlb_page_bytes + settings.tlb_skew_bytes


def tlb_node_counts(settings: Settings, mem_bytes: int | None) -> list[int]:
    """Nodes (one per page) of each TLB footprint, log-spaced from 2 to the cap."""
    known = int(mem_bytes * settings.tlb_memory_fraction) if mem_bytes else settings.tlb_unknown_memory_bytes
    cap = min(settings.tlb_max_bytes, known)
    most = cap // tlb_stride(settings)
    if most < 8:
        raise ProbeFailure(f"a TLB sweep needs at least 8 pages of {tlb_stride(settings)} bytes within {cap} bytes")
    octaves = math.log2(most / 2)
    raw = 2 * np.power(2.0, np.linspace(0.0, octaves, math.ceil(octaves * settings.tlb_points_per_octave) + 1))
    return [int(n) for n in np.unique(np.round(raw).astype(np.int64))]


def line_node_counts(settings: Settings) -> list[int]:
    """Node counts of the L1 line probe's sweeps: footprints of ``line_min_bytes`` to ``line_max_bytes``
    at the dense stride, the same counts of lines at the sparse one (log-spaced, whole nodes)."""
    s = settings
    octaves = math.log2(s.line_max_bytes / s.line_min_bytes)
    raw = s.line_min_bytes * np.power(2.0, np.linspace(0.0, octaves, math.ceil(octaves * s.line_points_per_octave) + 1))
    return [int(n) for n in np.unique(np.round(raw / s.line_dense_stride).astype(np.int64))]


def line_bytes_from_capacities(dense_capacity: float, sparse_nodes: float) -> int:
    """The L1 line: the L1 holds ``dense_capacity`` bytes of densely packed nodes, but only
    ``sparse_nodes`` nodes one line apart, so a line is their ratio, rounded to a power of two."""
    return int(2 ** round(math.log2(dense_capacity / sparse_nodes)))


def width_footprints(settings: Settings, l2_bytes: int) -> dict[str, int]:
    """Each width probe's footprint; the DRAM one holds two cold chases (one per width) at least."""
    l2 = max(2 * LINE, int(l2_bytes * settings.width_l2_fraction) // LINE * LINE)
    dram = max(int(l2_bytes * settings.width_dram_l2_multiple) // LINE, 2 * cold_nodes(settings)) * LINE
    return {"l1": settings.width_l1_bytes, "l2": l2, "dram": dram}


def sequential_cycle(nodes: int) -> Chain:
    """The cycle 0 -> 1 -> ... -> nodes - 1 -> 0: the chase walks the nodes in address order."""
    if nodes < 2:
        raise ValueError(f"a chase needs at least 2 nodes, got {nodes}")
    order = np.arange(nodes, dtype=np.int64)
    return Chain(order=order, successor=np.roll(order, -1))


# ---- the global chases -----------------------------------------------------------------------


@dataclass
class _Family:
    """What the probes share: the launcher, the memory family's chase context, the device."""

    ctx: ChaseContext
    settings: Settings
    device: Device
    const_out: Any = None
    scratch: Any = None  # twice the L2, made once, written through to flush it

    @property
    def launcher(self) -> Launcher:
        return self.ctx.launcher

    def flush_l2(self) -> None:
        """Write through a buffer of twice the L2, so no line the host's chain writes left stays there."""
        if self.scratch is None:
            self.scratch = self.launcher.alloc(2 * self.device.l2_bytes)
        self.launcher.fill(self.scratch, 0)

    def chase(self, kernel: str, buffer: Any, chain: Chain, stride: int, step: int = 0) -> Chase:
        """A chase of ``chain`` laid out in ``buffer`` with node i at i x ``stride``, from ``step``. The
        chase holds the buffer (its kernel gets only raw addresses into it, which must not outlive it)."""
        self.launcher.write_chain(buffer, chain.successor, stride)

        def args(start: int, warm: int, iterations: int) -> list[object]:
            return [np.uint64(self.launcher.address(buffer) + start * stride), np.uint32(warm), np.uint32(iterations)]

        def end_node(end: int) -> int:
            return node_of(end - self.launcher.address(buffer), stride, kernel)

        return Chase(self.ctx, kernel, chain, args, end_node, step=step)

    def sample(self, chase: Chase, warm_first: int, warm_rest: int) -> Point:
        """One point: samples until stable, the first warming ``warm_first`` steps, later ones ``warm_rest``."""
        point = Point()
        sample_until_stable(
            lambda: chase.sample(point, warm_rest if point.latencies else warm_first, warm_rest),
            point.latencies,
            self.settings.stopping(),
        )
        return point


def _unit_facts(fact_id: str, strides: list[int], points: list[Point], probe: str) -> tuple[Fact, float, float]:
    """The fill unit from the medians, with one refit per round of samples as its distribution."""
    medians = [float(np.median(p.latencies)) for p in points]
    best = fit_unit(strides, medians)
    if best is None:
        raise ProbeFailure(f"{probe}: latency does not rise with the stride ({', '.join(f'{m:.0f}' for m in medians)})")
    rounds = min(len(p.latencies) for p in points)
    units = [fit_unit(strides, [p.latencies[r] for p in points]) for r in range(rounds)]
    samples = [float(u.unit_bytes) for u in units if u is not None] or [float(best.unit_bytes)]
    result = fact(fact_id, samples, "byte", probe)
    result.value = float(best.unit_bytes)
    return result, best.hit, best.miss


def _stride_series(strides: list[int], points: list[Point]) -> dict[str, dict[str, list]]:
    return {"stride": {"stride_bytes": [float(s) for s in strides],
                       "latency_cycles": [float(np.median(p.latencies)) for p in points]}}  # fmt: skip


def measure_sector_l1(fam: _Family, probe: str) -> Measured:
    """Sequential stride sweep, L1-cached loads, over a footprint beyond L1 but inside L2."""
    s = fam.settings
    footprint = l1_sweep_bytes(s, fam.device.l2_bytes)
    buffer = fam.launcher.alloc(footprint)
    fam.launcher.prefer_l1("gp_cg_chase_ca_v8")
    points = []
    for stride in s.strides:
        nodes = footprint // stride
        chase = fam.chase("gp_cg_chase_ca_v8", buffer, sequential_cycle(nodes), stride)
        points.append(fam.sample(chase, nodes, 0))  # one lap puts every line in L2; L1 cannot hold them
    result, hit, miss = _unit_facts("cache.l1.sector_bytes", list(s.strides), points, probe)
    note = f"{footprint} B footprint: {hit:.0f} cycles per L1 hit, {miss:.0f} per L1 miss"
    return Measured(probe, ProbeOutcome("ok", note, _stride_series(list(s.strides), points)), [result])


def _capacity_sweep(fam: _Family, stride: int, counts: list[int], seed: int) -> tuple[list[int], list[Point]]:
    """L1-cached random chases of ``counts`` nodes ``stride`` apart, each launch warming its whole cycle."""
    buffer = fam.launcher.alloc(counts[-1] * stride)
    points = []
    for index, nodes in enumerate(counts):
        chase = fam.chase("gp_cg_chase_ca_v8", buffer, random_cycle(nodes, seed + index), stride)
        points.append(fam.sample(chase, nodes, nodes))  # L1 is not kept across launches: warm every one
    return [n * stride for n in counts], points


def _l1_capacity(
    footprints: list[int], points: list[Point], probe: str, what: str
) -> tuple[float, tuple[float, float]]:
    """The footprint where the first plateau (L1 hits) ends, with the sweep points around it."""
    levels = find_levels(footprints, [float(np.median(p.latencies)) for p in points])
    if len(levels) < 2 or levels[0].size_bytes is None:
        raise ProbeFailure(f"{probe}: no L1 capacity step in the {what} sweep up to {footprints[-1]} bytes")
    capacity = capacity_fact("capacity", levels[0], footprints, probe)
    return capacity.value, capacity.ci


def measure_line_l1(fam: _Family, probe: str) -> Measured:
    """The L1's capacity with nodes packed densely (bytes) and one per line (lines): a line is their ratio."""
    s = fam.settings
    counts = line_node_counts(s)
    fam.launcher.prefer_l1("gp_cg_chase_ca_v8")
    dense = _capacity_sweep(fam, s.line_dense_stride, counts, s.seed)
    lines = [max(2, n * s.line_dense_stride // LINE) for n in counts]
    sparse = _capacity_sweep(fam, s.line_sparse_stride, sorted(set(lines)), s.seed + len(counts))
    dense_bytes, (dense_low, dense_high) = _l1_capacity(*dense, probe, "dense")
    sparse_bytes, (sparse_low, sparse_high) = _l1_capacity(*sparse, probe, "sparse")
    per = s.line_sparse_stride
    line = line_bytes_from_capacities(dense_bytes, sparse_bytes / per)
    ci = (dense_low / (sparse_high / per), dense_high / (sparse_low / per))
    result = Fact("cache.l1.line_bytes", float(line), "byte", ci, [dense_bytes / (sparse_bytes / per)], {}, probe)
    series = {
        f"stride_{stride}": {"footprint_bytes": [float(f) for f in sweep[0]],
                             "latency_cycles": [float(np.median(p.latencies)) for p in sweep[1]]}
        for stride, sweep in ((s.line_dense_stride, dense), (per, sparse))
    }  # fmt: skip
    note = f"L1 holds {dense_bytes:.0f} B of dense nodes and {sparse_bytes / per:.0f} nodes {per} B apart"
    return Measured(probe, ProbeOutcome("ok", note, series), [result])


def measure_sector_l2(fam: _Family, probe: str) -> Measured:
    """Sequential stride sweep, L1 bypassed, each stride chased once from DRAM after an L2 flush."""
    s = fam.settings
    nodes = cold_nodes(s)
    buffer = fam.launcher.alloc(nodes * max(s.strides))
    points = []
    for stride in s.strides:
        chase = fam.chase("gp_cg_chase_cg_v8", buffer, sequential_cycle(nodes), stride)
        fam.flush_l2()
        points.append(fam.sample(chase, 0, 0))
    result, hit, miss = _unit_facts("cache.l2.sector_bytes", list(s.strides), points, probe)
    note = f"{hit:.0f} cycles per L2 hit, {miss:.0f} per fill from DRAM"
    return Measured(probe, ProbeOutcome("ok", note, _stride_series(list(s.strides), points)), [result])


def measure_width(fam: _Family, probe: str, level: str) -> Measured:
    """The 16-byte and the 8-byte chase of one level in turn; a sample is their difference."""
    s = fam.settings
    cache = "ca" if level == "l1" else "cg"
    footprint = width_footprints(s, fam.device.l2_bytes)[level]
    nodes = footprint // LINE
    buffer = fam.launcher.alloc(footprint)
    chain = random_cycle(nodes, s.seed)
    narrow = fam.chase(f"gp_cg_chase_{cache}_v8", buffer, chain, LINE)
    wide = fam.chase(f"gp_cg_chase_{cache}_v16", buffer, chain, LINE, step=nodes // 2 if level == "dram" else 0)
    warm_first, warm_rest = {"l1": (nodes, nodes), "l2": (nodes, 0), "dram": (0, 0)}[level]
    if level == "dram":
        fam.flush_l2()  # each kernel chases its own half of the cycle once (width_footprints)
    for kernel in (narrow.kernel, wide.kernel):
        fam.launcher.prefer_l1(kernel)
    p8, p16, differences = Point(), Point(), []

    def take() -> None:
        warm = warm_rest if differences else warm_first
        narrow.sample(p8, warm, warm_rest)
        wide.sample(p16, warm, warm_rest)
        differences.append(p16.latencies[-1] - p8.latencies[-1])

    sample_until_stable(take, differences, s.stopping())
    v8, v16 = float(np.median(p8.latencies)), float(np.median(p16.latencies))
    result = fact(f"latency.{level}.v16_minus_v8", differences, "cycle", probe)
    series = {"width": {"load_bytes": [8.0, 16.0], "latency_cycles": [v8, v16]}}
    note = f"{footprint} B footprint: 8-byte loads {v8:.1f} cycles, 16-byte loads {v16:.1f} cycles"
    return Measured(probe, ProbeOutcome("ok", note, series), [result])


def measure_tlb(fam: _Family, probe: str) -> Measured:
    """Latency vs footprint with one node per page; the steps are translation levels missed."""
    s = fam.settings
    nodes = s.tlb_reference_nodes
    reference_chase = fam.chase(
        "gp_cg_chase_cg_v8", fam.launcher.alloc(nodes * LINE), random_cycle(nodes, s.seed), LINE
    )
    reference = float(np.median(fam.sample(reference_chase, nodes, 0).latencies))  # within one page: no TLB miss
    stride = tlb_stride(s)
    counts = tlb_node_counts(s, fam.device.mem_bytes)
    buffer = fam.launcher.alloc(counts[-1] * stride)
    points = []
    for index, nodes in enumerate(counts):
        chase = fam.chase("gp_cg_chase_cg_v8", buffer, random_cycle(nodes, s.seed + index), stride)
        points.append(fam.sample(chase, max(nodes, 64), 0))  # warm: the lines into L2, the pages into the TLBs
    footprints = [n * stride for n in counts]
    medians = [float(np.median(p.latencies)) for p in points]
    levels = find_levels(footprints, medians)
    series: dict[str, dict[str, list]] = {
        "footprint": {"footprint_bytes": [float(f) for f in footprints], "latency_cycles": medians},
        "levels": {"size_bytes": [lvl.size_bytes for lvl in levels], "latency_cycles": [lvl.latency for lvl in levels]},
        "reference": {"footprint_bytes": [float(nodes * LINE)], "latency_cycles": [reference]},
    }
    found = tlb_levels(levels, reference)
    if found is None:
        note = f"no translation step up to {footprints[-1]} bytes ({reference:.0f} cycles within one page)"
        return Measured(probe, ProbeOutcome("ok", note, series), [])
    by_size = {level.size_bytes: level for level in levels}
    facts = [capacity_fact(f"tlb.l{number}.reach_bytes", by_size[reach], footprints, probe)
             for number, reach in found.reaches.items() if number <= 2]  # fmt: skip
    last = [x for f, p in zip(footprints, points, strict=True) if f >= found.last.first_footprint for x in p.latencies]
    facts.append(fact("tlb.miss_cycles", [x - reference for x in last], "cycle", probe))
    note = f"{reference:.0f} cycles within one page; plateaus at " + ", ".join(f"{lvl.latency:.0f}" for lvl in levels)
    return Measured(probe, ProbeOutcome("ok", note, series), facts)


# ---- the constant chase ----------------------------------------------------------------------


def constant_end(start: int, lanes: int, thread: int, steps: int) -> int:
    """Where thread ``thread`` of the constant chase ends after ``steps`` loads."""
    offset = start + 4 * (thread % lanes)
    if offset >= CONST_SELF:
        return offset  # a self-referencing word
    row, rest = divmod(offset, CONST_ROW_BYTES)
    if rest:
        raise ValueError(f"offset {offset} is not the start of a row")
    return (row + steps) % CONST_ROWS * CONST_ROW_BYTES


@dataclass
class _ConstantChase:
    """Launches of gp_cg_const_chase, each from ``start`` (the .const cycle cannot be continued from the
    host), each end checked against :func:`constant_end`."""

    fam: _Family
    start: int
    lanes: int
    threads: int

    def launch(self, warm: int, iterations: int) -> int:
        kernels = Kernels(self.fam.launcher, self.fam.ctx.parameters)
        args = [np.uint32(self.start), np.uint32(self.lanes), np.uint32(warm), np.uint32(iterations)]
        out = self.fam.const_out
        values = kernels.run("gp_cg_const_chase", [*args, out], out, 2 + self.threads, block=self.threads)
        steps = warm + iterations * UNROLL
        ends = [int(v) for v in values[2:]]
        expected = [constant_end(self.start, self.lanes, t, steps) for t in range(self.threads)]
        if ends != expected:
            wrong = next(t for t in range(self.threads) if ends[t] != expected[t])
            raise ProbeFailure(
                f"gp_cg_const_chase: thread {wrong} ended at offset {ends[wrong]}, host predicted {expected[wrong]}"
            )
        return int(values[0])

    def latency(self, warm: int) -> float:
        s = self.fam.settings
        short = self.launch(warm, s.short_iterations)
        long = self.launch(warm, s.long_iterations)
        cycles = (long - short) / ((s.long_iterations - s.short_iterations) * UNROLL)
        if not cycles > 0:
            raise ProbeFailure(f"gp_cg_const_chase: the long chase took {long} cycles, the short one {short}")
        return cycles


def measure_constant_latency(fam: _Family, probe: str) -> Measured:
    s = fam.settings
    facts, medians = [], []
    for fact_id, start in (("latency.constant.hit", CONST_SELF), ("latency.constant.miss", 0)):
        chase, samples = _ConstantChase(fam, start, 1, 1), []
        sample_until_stable(lambda c=chase, x=samples: x.append(c.latency(CONST_ROWS)), samples, s.stopping())
        facts.append(fact(fact_id, samples, "cycle", probe))
        medians.append(facts[-1].value)
    series = {"footprint": {"footprint_bytes": [4.0, float(CONST_SELF)], "latency_cycles": medians}}
    note = f"one word: {medians[0]:.1f} cycles; {CONST_ROWS} rows of {CONST_ROW_BYTES} B: {medians[1]:.1f} cycles"
    return Measured(probe, ProbeOutcome("ok", note, series), facts)


def measure_constant_divergent(fam: _Family, probe: str) -> Measured:
    s = fam.settings
    lanes = sorted(s.divergent_lanes)
    chases = [_ConstantChase(fam, CONST_SELF, k, WARP) for k in lanes]
    per_lanes: list[list[float]] = [[] for _ in lanes]
    slopes: list[float] = []

    def take() -> None:  # one round: every distinct-address count once, and the slope over them
        for chase, samples in zip(chases, per_lanes, strict=True):
            samples.append(chase.latency(4))
        slopes.append(slope(lanes, [samples[-1] for samples in per_lanes]))

    sample_until_stable(take, slopes, s.stopping())
    medians = [float(np.median(x)) for x in per_lanes]
    series = {"lanes": {"distinct_addresses": [float(k) for k in lanes], "cycles_per_instruction": medians}}
    note = f"{medians[0]:.1f} cycles per warp load at 1 address, {medians[-1]:.1f} at {lanes[-1]}"
    return Measured(probe, ProbeOutcome("ok", note, series), [fact("constant.divergent_cost", slopes, "cycle", probe)])


# ---- the family ------------------------------------------------------------------------------

STEPS: list[tuple[str, Callable[[_Family, str], Measured]]] = [
    ("cache_geometry.sector.l1", measure_sector_l1),
    ("cache_geometry.line.l1", measure_line_l1),
    ("cache_geometry.sector.l2", measure_sector_l2),
    ("cache_geometry.width.l1", lambda f, p: measure_width(f, p, "l1")),
    ("cache_geometry.width.l2", lambda f, p: measure_width(f, p, "l2")),
    ("cache_geometry.width.dram", lambda f, p: measure_width(f, p, "dram")),
    ("cache_geometry.tlb", measure_tlb),
    ("cache_geometry.constant.latency", measure_constant_latency),
    ("cache_geometry.constant.divergent", measure_constant_divergent),
]

PROBES = [name for name, _ in STEPS]

# ---- the time plan ---------------------------------------------------------------------------

TLB_STEP_CYCLES = 3000.0  # a load missing every TLB level, at most (the page walk from L2 or DRAM)
CONSTANT_STEP_CYCLES = 300.0  # a constant-cache load missing to L2, at most


def plan(settings: Settings, device: Device) -> Plan:
    """Every probe at its most repeats (see :mod:`gpuprobe.families.planning`): per point its chain built
    and written and its samples (the memory family's :func:`chase_plan`), per flush a scratch of twice the
    L2 written (allocated, and zeroed, once), and the TLB sweep's buffer, one page per node up to ``tlb_max_bytes``,
    zeroed when it is allocated (34 GB on an H200: 14 ms at half its DRAM peak)."""
    s, l2 = settings, device.l2_bytes
    lengths = s.chase()

    def point(nodes: int, warm_first: int, warm_rest: int, step: float) -> Plan:
        write = Plan(0, 1, dram_s(nodes * LINE, device) + link_s(8 * nodes, pinned=False), chain_host_s(nodes))
        return write + chase_plan(lengths, device, warm_first, warm_rest, step)

    flush = Plan(0, 1, dram_s(2 * l2, device))  # the scratch of twice the L2 written (zeroed once, below)
    swept = l1_sweep_bytes(s, l2)
    sector_l1 = probe(*(point(swept // stride, swept // stride, 0, L2_STEP_CYCLES) for stride in s.strides))
    dense = line_node_counts(s)
    sparse = sorted({max(2, n * s.line_dense_stride // LINE) for n in dense})
    line_l1 = probe(*(point(n, n, n, L2_STEP_CYCLES) for n in [*dense, *sparse]))
    sector_l2 = probe(*(point(cold_nodes(s), 0, 0, DRAM_STEP_CYCLES) + flush for _ in s.strides))
    laps = {"l1": (1, 1), "l2": (1, 0), "dram": (0, 0)}  # the width chases' warm-ups: first sample, later ones
    widths = []
    for level, footprint in width_footprints(s, l2).items():
        nodes, (first, rest) = footprint // LINE, laps[level]
        one = point(nodes, first * nodes, rest * nodes, step_cycles(footprint, device))
        widths.append(probe(one, one, flush if level == "dram" else NO_WORK))  # the 8- and 16-byte chases
    counts = tlb_node_counts(s, device.mem_bytes)
    reference = point(s.tlb_reference_nodes, s.tlb_reference_nodes, 0, L2_STEP_CYCLES)
    zeroed = Plan(0, 0, dram_s(counts[-1] * tlb_stride(s), device))
    tlb = probe(reference, zeroed, *(point(n, max(n, 64), 0, TLB_STEP_CYCLES) for n in counts))
    r = s.max_repeats
    timed = s.short_iterations + s.long_iterations
    hit_miss = [kernel_runs(2 * r, cycles_s(r * (2 * CONST_ROWS + timed * UNROLL) * CONSTANT_STEP_CYCLES, device))] * 2
    lanes = [kernel_runs(2 * r, cycles_s(r * (8 + timed * UNROLL) * k * CONSTANT_STEP_CYCLES, device))
             for k in s.divergent_lanes]  # fmt: skip
    parts = [sector_l1, line_l1, sector_l2, *widths, tlb, probe(*hit_miss), probe(*lanes)]
    return combined(parts) + Plan(0, 0, dram_s(2 * l2, device))


# A first contact: the constant-cache chase (no buffer of its own: the .const array the PTX initializes),
# every thread's end checked, one sample; every other probe's sweep at its shortest, should it run.
SMOKE = Smoke(
    probes=("cache_geometry.constant.latency",),
    settings=Settings(
        short_iterations=1,
        long_iterations=2,
        min_repeats=1,
        max_repeats=1,
        strides=(8, 16, 32, 64),
        l1_sweep_bytes=64 * 1024,
        width_l2_fraction=0.0,
        width_dram_l2_multiple=0.0,
        tlb_max_bytes=64 << 20,
        tlb_points_per_octave=1,
        divergent_lanes=(1, 32),
        line_max_bytes=32 * 1024,
        line_points_per_octave=1,
    ),
)

# A width probe also launches the 8-byte kernel, whose contract another probe pins.
PARTNERS = {
    "cache_geometry.width.l1": "cache_geometry.sector.l1",
    "cache_geometry.width.l2": "cache_geometry.sector.l2",
    "cache_geometry.width.dram": "cache_geometry.sector.l2",
}


def measure(request: Request) -> Probes:
    """The family's runnable probes in order, each as (name, run); see the module docstring.

    A width probe whose 8-byte partner kernel failed its contract is "skipped" with the reason; a
    probe whose own check fails raises ProbeFailure. ``state`` is not used: the family reports cycles only.
    """
    launcher, parameters = request.launcher, request.parameters
    device, runnable, settings = request.device, request.runnable, request.settings
    s = settings or Settings()
    ctx = ChaseContext(launcher, device.l2_bytes, s.chase(), parameters, out=launcher.alloc(64))
    fam = _Family(ctx, s, device, const_out=launcher.alloc(8 * (2 + WARP)))

    def run(name: str, step: Callable[[_Family, str], Measured]) -> Measured:
        partner = PARTNERS.get(name)
        if partner is not None and partner not in runnable:
            return Measured(name, ProbeOutcome("skipped", f"the 8-byte kernel's contract ({partner}) did not hold"))
        return step(fam, name)

    for name, step in STEPS:
        if name in runnable:
            yield name, lambda name=name, step=step: run(name, step)
