"""The cache-geometry family: sectors, the L1 line, load width, TLB reach and the constant cache.

Every probe is a single-thread dependent chase (one warp for the divergent constant probe). A sample
is a long minus a short timed chase continuing the same cycle (:class:`gpuprobe.families.chase.Chase`,
read through :class:`gpuprobe.families.differencing.Difference`, which refuses a difference it cannot
resolve), so whatever a timed region pays once cancels; every launch's end node is checked against the
host's prediction, and a wrong end fails the probe. What changes from probe to probe is how the host
lays the cycle out:

1. ``cache_geometry.sector.l1`` / ``.sector.l2`` — nodes in address order, S bytes apart, for
   strides S from 8 to 256 bytes; the knee of latency vs stride is the fill unit
   (:func:`~gpuprobe.families.cache_geometry.analysis.fit_unit`);
2. ``cache_geometry.line.l1`` — random chases over growing footprints with nodes packed densely
   and one per line; the L1 holds the same bytes of the first and one line's worth of nodes per line
   of the second, so a line is the ratio of the two capacities;
3. ``cache_geometry.width.{l1,l2,dram}`` — one random cycle per level chased by the 8-byte and the
   16-byte kernels in turn; a sample is the difference of their latencies;
4. ``cache_geometry.tlb`` — one line per page stride (2 MiB, 32 MiB and 512 MiB, each its own sweep),
   footprints up to half the device memory; the steps of latency vs footprint are translation levels
   missed (:func:`~gpuprobe.families.cache_geometry.analysis.read_tlb`), and where there is none the
   facts say how far the sweeps went;
5. ``cache_geometry.constant.latency`` / ``.divergent`` — the .const array the PTX initializes.

Times are in cycles only: the family runs no clock probe of its own.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, partial
from typing import Any

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.cache_geometry.analysis import (
    TlbReading,
    TlbSweep,
    fit_unit,
    read_tlb,
    slope,
)
from gpuprobe.families.cache_geometry.checks import INVARIANTS, SECTIONS
from gpuprobe.families.chase import OUT_WORDS, Chase, Cycle, chase_plan, memory_chase, random_cycle
from gpuprobe.families.differencing import Difference, Lengths
from gpuprobe.families.measuring import fact, require_counts, require_long_after_short, unmeasured
from gpuprobe.families.memory import capacity_fact, log_spaced
from gpuprobe.families.planning import (
    DRAM_STEP_CYCLES,
    L2_STEP_CYCLES,
    NO_WORK,
    combined,
    cycle_host_s,
    cycles_s,
    dram_s,
    kernel_runs,
    link_s,
    probe,
    step_cycles,
)
from gpuprobe.families.sampling import ONE_SAMPLE, Stopping, sample_until_stable
from gpuprobe.families.stepping import probe_steps
from gpuprobe.judge.analysis import find_levels
from gpuprobe.kernels.registry import unroll_of

MIB = 1 << 20
LINE = 128  # one node per line where a probe is not about the line
CONST_ROWS, CONST_ROW_BYTES = 64, 128  # the .const cycle of ptx/cache_geometry/cache_geometry.ptx
CONST_SELF = CONST_ROWS * CONST_ROW_BYTES  # offset of the 32 self-referencing words after it
WARP = 32
CHASE_WORDS = OUT_WORDS + 1  # a global chase's output: the chase's four words, then the sink its loads fold into


@dataclass(frozen=True)
class Settings:
    short_iterations: int = 8  # a sample: the long chase minus the short one,
    long_iterations: int = 40  # (40 - 8) x 32 = 1024 loads
    sampling: Stopping = Stopping(3, 7, 0.01, 0.3)  # per point of a sweep: 3 to 7 samples, 0.3 s at most
    strides: tuple[int, ...] = (8, 16, 24, 32, 48, 64, 96, 128, 192, 256)
    l1_sweep_bytes: int = 1 << 20  # the L1 stride sweep's footprint: beyond any L1, at most half the L2
    width_l1_bytes: int = 8 * 1024
    width_l2_fraction: float = 0.125  # of the device L2: inside the near partition on split-L2 parts
    width_dram_l2_multiple: float = 4.0
    # The TLB sweeps: one per page stride, so pages larger than the smallest stride show their steps too
    # (GH100's MMU maps 2 MiB and 512 MiB pages); each stride has the skew added, so the nodes spread
    # over the L2's sets instead of piling into one.
    tlb_strides: tuple[int, ...] = (2 * MIB, 32 * MIB, 512 * MIB)
    tlb_skew_bytes: int = 3 * LINE
    tlb_max_bytes: int = 128 << 30  # the largest footprint, whatever the device memory
    tlb_memory_fraction: float = 0.5  # of the device memory, when it reports it;
    tlb_unknown_memory_bytes: int = 256 << 20  # the cap when it does not (a real device always does)
    tlb_l2_fraction: float = 0.25  # a sweep's lines (one per node) fill at most this share of the L2
    tlb_min_nodes: int = 8  # each sweep starts here; a stride without 4 x as many within the caps is left out
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
        for name in ("strides", "divergent_lanes", "tlb_strides"):
            object.__setattr__(self, name, tuple(getattr(self, name)))  # JSON hands lists back
        counts = ("short_iterations", "l1_sweep_bytes", "width_l1_bytes", "tlb_max_bytes",
                  "tlb_points_per_octave", "line_points_per_octave", "tlb_unknown_memory_bytes")  # fmt: skip
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
        self._check_tlb()

    def _check_tlb(self) -> None:
        pages = self.tlb_strides
        if not pages or list(pages) != sorted(set(pages)) or any(page % LINE for page in pages):
            raise ValueError(f"Settings.tlb_strides must be increasing whole lines, got {pages}")
        if self.tlb_skew_bytes % LINE or not 0 <= self.tlb_skew_bytes < pages[0]:
            raise ValueError("Settings.tlb_skew_bytes must be whole lines, less than the smallest stride")
        if not 2 <= self.tlb_reference_nodes <= pages[0] // LINE:
            raise ValueError("Settings.tlb_reference_nodes must be 2 to a page's worth of lines")
        if self.tlb_min_nodes < 2 or not 0 < self.tlb_l2_fraction <= 1 or not 0 < self.tlb_memory_fraction <= 1:
            raise ValueError("Settings: need tlb_min_nodes >= 2 and TLB fractions in (0, 1]")

    def lengths(self, kernel: str) -> Lengths:
        """The short and long chase of one sample, in timed iterations of ``kernel``'s declared unroll of loads."""
        return Lengths(self.short_iterations, self.long_iterations, unroll_of(kernel))


# ---- planning: footprints and node counts, shared with the budget estimate --------------------


def l1_sweep_bytes(settings: Settings, l2_bytes: int) -> int:
    return min(settings.l1_sweep_bytes, l2_bytes // 2)


def cold_nodes(settings: Settings, kernel: str) -> int:
    """Nodes of a cycle ``kernel`` chases once, cold: more than every step a point's timed launches can take."""
    lengths = settings.lengths(kernel)
    return settings.sampling.max_repeats * (lengths.short + lengths.long) * lengths.steps + 1


def log_counts(low: int, high: int, per_octave: int) -> list[int]:
    """Whole counts log-spaced from ``low`` to ``high`` (both included), ``per_octave`` or more per octave."""
    return [int(n) for n in np.unique(np.round(log_spaced(low, high, per_octave)).astype(np.int64))]


def tlb_cap_bytes(settings: Settings, mem_bytes: int | None) -> int:
    """The largest footprint a TLB sweep may take: a share of the device memory (a small cap when the
    device does not report it), at most ``tlb_max_bytes``."""
    known = int(mem_bytes * settings.tlb_memory_fraction) if mem_bytes else settings.tlb_unknown_memory_bytes
    return min(settings.tlb_max_bytes, known)


def tlb_sweeps(settings: Settings, device: Device) -> list[tuple[int, list[int]]]:
    """Each TLB sweep as (stride, node counts): per page stride of ``tlb_strides`` (plus the skew), counts
    log-spaced from ``tlb_min_nodes`` up to as many nodes as the footprint cap holds and whose lines fill at
    most ``tlb_l2_fraction`` of the L2 (so every load stays an L2 hit, and a step can only be a translation's).
    A stride with fewer than 4 x ``tlb_min_nodes`` within those (two octaves, the least that places a step)
    is left out; ProbeFailure when every one is."""
    s = settings
    cap, lines = tlb_cap_bytes(s, device.mem_bytes), int(device.l2_bytes * s.tlb_l2_fraction) // LINE
    sweeps = []
    for page in s.tlb_strides:
        stride = page + s.tlb_skew_bytes
        most = min(cap // stride, lines)
        if most >= 4 * s.tlb_min_nodes:
            sweeps.append((stride, log_counts(s.tlb_min_nodes, most, s.tlb_points_per_octave)))
    if not sweeps:
        raise ProbeFailure(
            f"a TLB sweep needs {4 * s.tlb_min_nodes} nodes of {s.tlb_strides[0] + s.tlb_skew_bytes} bytes within "
            f"{cap} bytes and {lines} lines of L2"
        )
    return sweeps


def line_node_counts(settings: Settings) -> list[int]:
    """Node counts of the L1 line probe's sweeps: footprints of ``line_min_bytes`` to ``line_max_bytes``
    at the dense stride, the same counts of lines at the sparse one (log-spaced, whole nodes)."""
    s = settings
    low, high = s.line_min_bytes // s.line_dense_stride, s.line_max_bytes // s.line_dense_stride
    return log_counts(low, high, s.line_points_per_octave)


def line_bytes_from_capacities(dense_capacity: float, sparse_nodes: float) -> int:
    """The L1 line: the L1 holds ``dense_capacity`` bytes of densely packed nodes, but only
    ``sparse_nodes`` nodes one line apart, so a line is their ratio, rounded to a power of two."""
    return int(2 ** round(math.log2(dense_capacity / sparse_nodes)))


def width_footprints(settings: Settings, l2_bytes: int) -> dict[str, int]:
    """Each width probe's footprint; the DRAM one holds two cold chases (one per width) at least."""
    l2 = max(2 * LINE, int(l2_bytes * settings.width_l2_fraction) // LINE * LINE)
    both = sum(cold_nodes(settings, f"gp_cg_chase_cg_{width}") for width in ("v8", "v16"))
    dram = max(int(l2_bytes * settings.width_dram_l2_multiple) // LINE, both) * LINE
    return {"l1": settings.width_l1_bytes, "l2": l2, "dram": dram}


def sequential_cycle(nodes: int) -> Cycle:
    """The cycle 0 -> 1 -> ... -> nodes - 1 -> 0: the chase walks the nodes in address order."""
    if nodes < 2:
        raise ValueError(f"a chase needs at least 2 nodes, got {nodes}")
    order = np.arange(nodes, dtype=np.int64)
    return Cycle(order=order, successor=np.roll(order, -1))


# ---- the global chases -----------------------------------------------------------------------

Latencies = list[float]  # one point's samples: cycles per chase step


@dataclass
class _Chases:
    """The family's chases on the requested device, and the one buffer they share: a scratch of twice the
    L2, made on first use, written through to flush it."""

    request: Request
    scratch: Any = None

    @cached_property
    def settings(self) -> Settings:
        return self.request.settings or Settings()

    def flush_l2(self) -> None:
        """Write through a buffer of twice the L2, so no line the host's cycle writes left stays there."""
        launcher = self.request.launcher
        if self.scratch is None:
            self.scratch = launcher.alloc(2 * self.request.device.l2_bytes)
        launcher.fill(self.scratch, 0)

    def chase(self, kernel: str, buffer: Any, cycle: Cycle, stride: int, warm_laps: int, step: int = 0) -> Chase:
        """A chase of ``cycle`` laid out in ``buffer`` with node i at i x ``stride``, from ``step``, each launch
        first taking ``warm_laps`` untimed laps. The chase holds the buffer (its kernel gets only raw
        addresses into it, which must not outlive it)."""
        request = self.request
        request.launcher.write_cycle(buffer, cycle.successor, stride)
        out = request.outputs.get(CHASE_WORDS)
        chase = memory_chase(request.kernels, kernel, buffer, cycle, stride, unroll_of(kernel), out,
                             warm_laps=warm_laps)  # fmt: skip
        chase.step = step
        return chase

    def difference(self, chase: Chase, warm_first: bool = False) -> Difference:
        """One step's latency, long minus short, for ``chase``; ``warm_first``: one untimed lap first, in a
        launch of its own (checked like any other), so a chase that warms no launch finds its lines in L2."""
        if warm_first:
            dataclasses.replace(chase, warm_laps=1).reading(self.settings.short_iterations)
        return chase.difference(self.settings.short_iterations, self.settings.long_iterations)

    def latencies(self, chase: Chase, warm_first: bool = False) -> Latencies:
        """One point: samples of :meth:`difference` until stable."""
        return self.difference(chase, warm_first).samples(self.settings.sampling)


def _median(samples: Latencies) -> float:
    return float(np.median(samples))


def _unit_facts(fact_id: str, strides: list[int], points: list[Latencies], probe: str) -> tuple[Fact, float, float]:
    """The fill unit from the medians, with one refit per round of samples as its distribution."""
    medians = [_median(p) for p in points]
    best = fit_unit(strides, medians)
    if best is None:
        raise ProbeFailure(f"{probe}: latency does not rise with the stride ({', '.join(f'{m:.0f}' for m in medians)})")
    rounds = min(len(p) for p in points)
    units = [fit_unit(strides, [p[r] for p in points]) for r in range(rounds)]
    samples = [float(u.unit_bytes) for u in units if u is not None] or [float(best.unit_bytes)]
    result = fact(fact_id, samples, "byte", probe)
    result.value = float(best.unit_bytes)
    return result, best.hit, best.miss


def _stride_series(strides: list[int], points: list[Latencies]) -> dict[str, dict[str, list]]:
    return {"stride": {"stride_bytes": [float(s) for s in strides],
                       "latency_cycles": [_median(p) for p in points]}}  # fmt: skip


def measure_sector_l1(chases: _Chases, probe: str) -> Measured:
    """Sequential stride sweep, L1-cached loads, over a footprint beyond L1 but inside L2."""
    s = chases.settings
    footprint = l1_sweep_bytes(s, chases.request.device.l2_bytes)
    buffer = chases.request.launcher.alloc(footprint)
    chases.request.launcher.prefer_l1("gp_cg_chase_ca_v8")
    points = []
    for stride in s.strides:
        nodes = footprint // stride
        chase = chases.chase("gp_cg_chase_ca_v8", buffer, sequential_cycle(nodes), stride, warm_laps=0)
        points.append(chases.latencies(chase, warm_first=True))  # one lap puts every line in L2; L1 cannot hold them
    result, hit, miss = _unit_facts("cache.l1.sector_bytes", list(s.strides), points, probe)
    note = f"{footprint} B footprint: {hit:.0f} cycles per L1 hit, {miss:.0f} per L1 miss"
    return Measured(probe, ProbeOutcome("ok", note, _stride_series(list(s.strides), points)), [result])


def _capacity_sweep(chases: _Chases, stride: int, counts: list[int], seed: int) -> tuple[list[int], list[Latencies]]:
    """L1-cached random chases of ``counts`` nodes ``stride`` apart, each launch warming its whole cycle."""
    buffer = chases.request.launcher.alloc(counts[-1] * stride)
    points = []
    for index, nodes in enumerate(counts):
        chase = chases.chase("gp_cg_chase_ca_v8", buffer, random_cycle(nodes, seed + index), stride, warm_laps=1)
        points.append(chases.latencies(chase))  # L1 is not kept across launches: warm every one
    return [n * stride for n in counts], points


def _l1_capacity(
    footprints: list[int], points: list[Latencies], probe: str, what: str
) -> tuple[float, tuple[float, float]]:
    """The footprint where the first plateau (L1 hits) ends, with the sweep points around it."""
    levels = find_levels(footprints, [_median(p) for p in points])
    if len(levels) < 2 or levels[0].size_bytes is None:
        raise ProbeFailure(f"{probe}: no L1 capacity step in the {what} sweep up to {footprints[-1]} bytes")
    capacity = capacity_fact("capacity", levels[0], footprints, probe)
    return capacity.value, capacity.ci


def measure_line_l1(chases: _Chases, probe: str) -> Measured:
    """The L1's capacity with nodes packed densely (bytes) and one per line (lines): a line is their ratio."""
    s = chases.settings
    counts = line_node_counts(s)
    chases.request.launcher.prefer_l1("gp_cg_chase_ca_v8")
    dense = _capacity_sweep(chases, s.line_dense_stride, counts, s.seed)
    lines = [max(2, n * s.line_dense_stride // LINE) for n in counts]
    sparse = _capacity_sweep(chases, s.line_sparse_stride, sorted(set(lines)), s.seed + len(counts))
    dense_bytes, (dense_low, dense_high) = _l1_capacity(*dense, probe, "dense")
    sparse_bytes, (sparse_low, sparse_high) = _l1_capacity(*sparse, probe, "sparse")
    per = s.line_sparse_stride
    line = line_bytes_from_capacities(dense_bytes, sparse_bytes / per)
    ci = (dense_low / (sparse_high / per), dense_high / (sparse_low / per))
    result = Fact("cache.l1.line_bytes", float(line), "byte", ci, [dense_bytes / (sparse_bytes / per)], {}, probe)
    series = {
        f"stride_{stride}": {"footprint_bytes": [float(f) for f in sweep[0]],
                             "latency_cycles": [_median(p) for p in sweep[1]]}
        for stride, sweep in ((s.line_dense_stride, dense), (per, sparse))
    }  # fmt: skip
    note = f"L1 holds {dense_bytes:.0f} B of dense nodes and {sparse_bytes / per:.0f} nodes {per} B apart"
    return Measured(probe, ProbeOutcome("ok", note, series), [result])


def measure_sector_l2(chases: _Chases, probe: str) -> Measured:
    """Sequential stride sweep, L1 bypassed, each stride chased once from DRAM after an L2 flush."""
    s = chases.settings
    nodes = cold_nodes(s, "gp_cg_chase_cg_v8")
    buffer = chases.request.launcher.alloc(nodes * max(s.strides))
    points = []
    for stride in s.strides:
        chase = chases.chase("gp_cg_chase_cg_v8", buffer, sequential_cycle(nodes), stride, warm_laps=0)
        chases.flush_l2()
        points.append(chases.latencies(chase))
    result, hit, miss = _unit_facts("cache.l2.sector_bytes", list(s.strides), points, probe)
    note = f"{hit:.0f} cycles per L2 hit, {miss:.0f} per fill from DRAM"
    return Measured(probe, ProbeOutcome("ok", note, _stride_series(list(s.strides), points)), [result])


def measure_width(chases: _Chases, probe: str, level: str) -> Measured:
    """The 16-byte and the 8-byte chase of one level in turn; a sample is their difference."""
    s = chases.settings
    cache = "ca" if level == "l1" else "cg"
    footprint = width_footprints(s, chases.request.device.l2_bytes)[level]
    nodes = footprint // LINE
    buffer = chases.request.launcher.alloc(footprint)
    cycle = random_cycle(nodes, s.seed)
    laps = 1 if level == "l1" else 0  # L1 is not kept across launches: an L1 chase warms every one
    narrow = chases.chase(f"gp_cg_chase_{cache}_v8", buffer, cycle, LINE, laps)
    wide = chases.chase(
        f"gp_cg_chase_{cache}_v16", buffer, cycle, LINE, laps, step=nodes // 2 if level == "dram" else 0
    )
    if level == "dram":
        chases.flush_l2()  # each kernel chases its own half of the cycle once (width_footprints)
    for kernel in (narrow.kernel, wide.kernel):
        chases.request.launcher.prefer_l1(kernel)
    narrow_diff, wide_diff = chases.difference(narrow, warm_first=level == "l2"), chases.difference(wide)
    p8: Latencies = []
    p16: Latencies = []
    differences: Latencies = []

    def take() -> None:
        p8.append(narrow_diff.sample())
        p16.append(wide_diff.sample())
        differences.append(p16[-1] - p8[-1])

    sample_until_stable(take, differences, s.sampling)
    v8, v16 = _median(p8), _median(p16)
    result = fact(f"latency.{level}.v16_minus_v8", differences, "cycle", probe)
    series = {"width": {"load_bytes": [8.0, 16.0], "latency_cycles": [v8, v16]}}
    note = f"{footprint} B footprint: 8-byte loads {v8:.1f} cycles, 16-byte loads {v16:.1f} cycles"
    return Measured(probe, ProbeOutcome("ok", note, series), [result])


# ---- the TLB sweeps --------------------------------------------------------------------------

TLB_REACH_LEVELS = (1, 2)  # the TLB levels with a reach fact


def _tlb_reference(chases: _Chases) -> tuple[int, float]:
    """The footprint and latency of the no-miss reference: ``tlb_reference_nodes`` lines within one page."""
    nodes = chases.settings.tlb_reference_nodes
    buffer = chases.request.launcher.alloc(nodes * LINE)
    chase = chases.chase("gp_cg_chase_cg_v8", buffer, random_cycle(nodes, chases.settings.seed), LINE, warm_laps=0)
    return nodes * LINE, _median(chases.latencies(chase, warm_first=True))


def _tlb_sweep(chases: _Chases, buffer: Any, stride: int, counts: list[int], seed: int) -> TlbSweep:
    """One stride's sweep: per node count a random cycle of one line every ``stride`` bytes, warmed once
    (its lines into L2, its pages into the TLBs), then sampled until stable."""
    samples = []
    for index, nodes in enumerate(counts):
        chase = chases.chase("gp_cg_chase_cg_v8", buffer, random_cycle(nodes, seed + index), stride, warm_laps=0)
        samples.append(chases.latencies(chase, warm_first=True))
    return TlbSweep(stride, [float(n * stride) for n in counts], samples)


def _tlb_facts(reading: TlbReading, probe: str) -> list[Fact]:
    """Each level's reach (without a value, and the reason, where no sweep showed its step), the cost of
    missing every level seen (likewise), and ``tlb.no_step_below_bytes``: how far the smallest stride's
    sweep went, below which no level the sweeps did not place runs out of reach."""
    facts = []
    for level in TLB_REACH_LEVELS:
        fact_id, step = f"tlb.l{level}.reach_bytes", reading.steps.get(level)
        if step is None:
            facts.append(unmeasured(fact_id, "byte", probe, reading.why_unmeasured(level)))
        else:
            facts.append(capacity_fact(fact_id, step.plateau, step.sweep.footprints, probe))
    if reading.last is None:
        facts.append(unmeasured("tlb.miss_cycles", "cycle", probe, reading.why_unmeasured(TLB_REACH_LEVELS[0])))
    else:
        facts.append(fact("tlb.miss_cycles", reading.miss_samples(), "cycle", probe))
    swept = reading.swept_bytes
    return [*facts, Fact("tlb.no_step_below_bytes", swept, "byte", (swept, swept), [], {}, probe)]


def _mib(nbytes: float) -> str:
    return f"{nbytes / MIB:,.0f} MiB"


def _tlb_note(reading: TlbReading, left_out: list[int]) -> str:
    """Per stride, the plateaus its sweep showed and how far it went; the strides left out."""
    parts = [f"{reading.reference:.0f} cycles within one page"]
    for sweep, plateaus in zip(reading.sweeps, reading.plateaus, strict=True):
        latencies = ", ".join(f"{level.latency:.0f}" for level in plateaus) or "none"
        ends = [_mib(level.size_bytes) for level in plateaus if level.size_bytes is not None]
        where = f"ending at {', '.join(ends)}" if ends else "no step"
        parts.append(f"stride {sweep.stride:,} B to {_mib(sweep.footprints[-1])}: plateaus {latencies} cycles, {where}")
    parts += [f"stride {_mib(page)} left out (too few nodes within the caps)" for page in left_out]
    return "; ".join(parts)


def _tlb_series(reading: TlbReading, reference_bytes: int) -> dict[str, dict[str, list]]:
    """Each stride's curve (``stride_<bytes>``), the steps read as levels with the stride that placed each,
    and the no-miss reference."""
    series: dict[str, dict[str, list]] = {
        f"stride_{sweep.stride}": {"footprint_bytes": sweep.footprints, "latency_cycles": sweep.medians}
        for sweep in reading.sweeps
    }
    levels = sorted(reading.steps)
    series["steps"] = {
        "level": [float(level) for level in levels],
        "reach_bytes": [reading.steps[level].plateau.size_bytes for level in levels],
        "stride_bytes": [float(reading.steps[level].sweep.stride) for level in levels],
    }
    series["reference"] = {"footprint_bytes": [float(reference_bytes)], "latency_cycles": [reading.reference]}
    return series


def measure_tlb(chases: _Chases, probe: str) -> Measured:
    """Latency vs footprint with one line per page stride, for each stride of ``tlb_strides``; the steps
    are translation levels missed (:func:`~gpuprobe.families.cache_geometry.analysis.read_tlb`)."""
    s = chases.settings
    reference_bytes, reference = _tlb_reference(chases)
    plan = tlb_sweeps(s, chases.request.device)
    buffer = chases.request.launcher.alloc(max(counts[-1] * stride for stride, counts in plan))
    seeds = [s.seed + 1000 * (k + 1) for k in range(len(plan))]  # each point of sweep k seeds its own cycle
    sweeps = [
        _tlb_sweep(chases, buffer, stride, counts, seed) for (stride, counts), seed in zip(plan, seeds, strict=True)
    ]
    reading = read_tlb(sweeps, reference)
    left_out = [page for page in s.tlb_strides if page + s.tlb_skew_bytes not in {stride for stride, _ in plan}]
    outcome = ProbeOutcome("ok", _tlb_note(reading, left_out), _tlb_series(reading, reference_bytes))
    return Measured(probe, outcome, _tlb_facts(reading, probe))


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


CONSTANT_KERNEL = "gp_cg_const_chase"


@dataclass
class _ConstantChase:
    """Launches of gp_cg_const_chase, each from ``start`` (the .const cycle cannot be continued from the
    host) after ``warm`` untimed steps, each end checked against :func:`constant_end`."""

    chases: _Chases
    start: int
    lanes: int
    threads: int
    warm: int

    def launch(self, iterations: int) -> float:
        """One checked launch of ``iterations`` timed iterations: the cycles they took."""
        request, kernel = self.chases.request, CONSTANT_KERNEL
        args = [np.uint32(self.start), np.uint32(self.lanes), np.uint32(self.warm), np.uint32(iterations)]
        out = request.outputs.get(2 + WARP)  # cycles, nanoseconds, one end per thread
        values = request.kernels.results(kernel, [*args, out], out, 2 + self.threads, block=self.threads)
        steps = self.warm + iterations * unroll_of(kernel)
        ends = [int(v) for v in values[2:]]
        expected = [constant_end(self.start, self.lanes, t, steps) for t in range(self.threads)]
        if ends != expected:
            wrong = next(t for t in range(self.threads) if ends[t] != expected[t])
            raise ProbeFailure(
                f"gp_cg_const_chase: thread {wrong} ended at offset {ends[wrong]}, host predicted {expected[wrong]}"
            )
        return float(values[0])

    def difference(self) -> Difference:
        """One warp load's latency, long minus short (every launch restarts, so no length runs out)."""
        return Difference(self.launch, self.chases.settings.lengths(CONSTANT_KERNEL), CONSTANT_KERNEL)


def measure_constant_latency(chases: _Chases, probe: str) -> Measured:
    s = chases.settings
    facts, medians = [], []
    for fact_id, start in (("latency.constant.hit", CONST_SELF), ("latency.constant.miss", 0)):
        samples = _ConstantChase(chases, start, 1, 1, warm=CONST_ROWS).difference().samples(s.sampling)
        facts.append(fact(fact_id, samples, "cycle", probe))
        medians.append(facts[-1].value)
    series = {"footprint": {"footprint_bytes": [4.0, float(CONST_SELF)], "latency_cycles": medians}}
    note = f"one word: {medians[0]:.1f} cycles; {CONST_ROWS} rows of {CONST_ROW_BYTES} B: {medians[1]:.1f} cycles"
    return Measured(probe, ProbeOutcome("ok", note, series), facts)


def measure_constant_divergent(chases: _Chases, probe: str) -> Measured:
    s = chases.settings
    lanes = sorted(s.divergent_lanes)
    differences = [_ConstantChase(chases, CONST_SELF, k, WARP, warm=4).difference() for k in lanes]
    per_lanes: list[Latencies] = [[] for _ in lanes]
    slopes: Latencies = []

    def take() -> None:  # one round: every distinct-address count once, and the slope over them
        for difference, samples in zip(differences, per_lanes, strict=True):
            samples.append(difference.sample())
        slopes.append(slope(lanes, [samples[-1] for samples in per_lanes]))

    sample_until_stable(take, slopes, s.sampling)
    medians = [_median(x) for x in per_lanes]
    series = {"lanes": {"distinct_addresses": [float(k) for k in lanes], "cycles_per_instruction": medians}}
    note = f"{medians[0]:.1f} cycles per warp load at 1 address, {medians[-1]:.1f} at {lanes[-1]}"
    return Measured(probe, ProbeOutcome("ok", note, series), [fact("constant.divergent_cost", slopes, "cycle", probe)])


# ---- the family ------------------------------------------------------------------------------

STEPS: list[tuple[str, Callable[[_Chases, str], Measured]]] = [
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
    """Every probe at its most repeats (see :mod:`gpuprobe.families.planning`): per point its cycle built
    and written and its samples (:func:`~gpuprobe.families.chase.chase_plan`: a warm-up
    launch of a lap when the point warms first, each launch taking ``warm_laps`` laps), per flush a scratch
    of twice the L2 written (allocated, and zeroed, once), and the TLB sweeps' buffer (as large as the
    largest footprint, half the device memory at most), zeroed when it is allocated (70 GB on an H200: 30 ms
    at half its DRAM peak)."""
    s, l2, r = settings, device.l2_bytes, settings.sampling.max_repeats

    def point(kernel: str, nodes: int, warm_laps: int, warm_first: bool, step: float) -> Plan:
        write = Plan(0, 1, dram_s(nodes * LINE, device) + link_s(8 * nodes, pinned=False), cycle_host_s(nodes))
        return write + chase_plan(s.lengths(kernel), r, device, nodes if warm_first else 0, warm_laps * nodes, step)

    ca, cg = "gp_cg_chase_ca_v8", "gp_cg_chase_cg_v8"
    flush = Plan(0, 1, dram_s(2 * l2, device))  # the scratch of twice the L2 written (zeroed once, below)
    swept = l1_sweep_bytes(s, l2)
    sector_l1 = probe(*(point(ca, swept // stride, 0, True, L2_STEP_CYCLES) for stride in s.strides))
    dense = line_node_counts(s)
    sparse = sorted({max(2, n * s.line_dense_stride // LINE) for n in dense})
    line_l1 = probe(*(point(ca, n, 1, False, L2_STEP_CYCLES) for n in [*dense, *sparse]))
    sector_l2 = probe(*(point(cg, cold_nodes(s, cg), 0, False, DRAM_STEP_CYCLES) + flush for _ in s.strides))
    widths = []
    for level, footprint in width_footprints(s, l2).items():
        nodes, step, cache = footprint // LINE, step_cycles(footprint, device), "ca" if level == "l1" else "cg"
        narrow = point(f"gp_cg_chase_{cache}_v8", nodes, int(level == "l1"), level == "l2", step)
        wide = point(f"gp_cg_chase_{cache}_v16", nodes, int(level == "l1"), False, step)
        widths.append(probe(narrow, wide, flush if level == "dram" else NO_WORK))
    sweeps = tlb_sweeps(s, device)
    reference = point(cg, s.tlb_reference_nodes, 0, True, L2_STEP_CYCLES)
    zeroed = Plan(0, 0, dram_s(max(counts[-1] * stride for stride, counts in sweeps), device))
    tlb = probe(reference, zeroed, *(point(cg, n, 0, True, TLB_STEP_CYCLES) for _, counts in sweeps for n in counts))
    timed = (s.short_iterations + s.long_iterations) * unroll_of(CONSTANT_KERNEL)
    hit_miss = [kernel_runs(2 * r, cycles_s(r * (2 * CONST_ROWS + timed) * CONSTANT_STEP_CYCLES, device))] * 2
    lanes = [kernel_runs(2 * r, cycles_s(r * (8 + timed) * k * CONSTANT_STEP_CYCLES, device))
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
        sampling=ONE_SAMPLE,
        strides=(8, 16, 32, 64),
        l1_sweep_bytes=64 * 1024,
        width_l2_fraction=0.0,
        width_dram_l2_multiple=0.0,
        tlb_strides=(2 * MIB,),
        tlb_max_bytes=128 * MIB,
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
    """The family's runnable probes in order, each as (name, step); see the module docstring.

    A width probe whose 8-byte partner kernel failed its contract is "skipped" with the reason; a
    probe whose own check fails raises ProbeFailure. ``state`` is not used: the family reports cycles only.
    """
    chases = _Chases(request)

    def with_partner(name: str, step: Callable[[_Chases, str], Measured]) -> Measured:
        partner = PARTNERS.get(name)
        if partner is not None and partner not in request.runnable:
            return Measured(name, ProbeOutcome("skipped", f"the 8-byte kernel's contract ({partner}) did not hold"))
        return step(chases, name)

    yield from probe_steps(PROBES, {name: partial(with_partner, name, step) for name, step in STEPS}, request.runnable)


FAMILY = Family(
    name="cache_geometry",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
    sections=SECTIONS,
    invariants=INVARIANTS,
)
