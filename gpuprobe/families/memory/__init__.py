"""The memory family (the hierarchy's latencies and capacities): plan the chase, launch it, verify it, and
turn curves into facts.

Order of measurement:

1. ``memory.clock`` — the SM clock (cycles over global-timer nanoseconds), after a spin that
   brings the clock out of idle, to convert cycles to ns;
2. ``memory.overhead.clock_read`` and ``memory.overhead.loop`` — the cost of the clock reads and
   of the chase loop's control, measured on their own and reported;
3. ``memory.latency.shared`` — one footprint in shared memory;
4. ``memory.latency.global_ca`` / ``global_cg`` — latency vs footprint, L1-cached and L1-bypassing,
   from 4 KiB to several times the L2 the device reports, four footprints per octave (the L1-bypassing
   sweep eight from a quarter of the L2 to twice it, where a split L2's far plateau lies);
   ``find_levels`` reads the levels;
5. ``memory.latency.warp_v16.l2`` / ``.dram`` — a whole warp's dependent 16-byte-per-lane load (512 B,
   4 lines; :func:`measure_warp`) near-L2 resident and from DRAM, beside one lane of the same kernel.

Each latency sample is a pair of launches, a short and a long timed chase continuing the same cycle
(:class:`gpuprobe.families.chase.Chase`), read through :class:`gpuprobe.families.differencing.Difference`:
latency = (cycles_long - cycles_short) / (loads_long - loads_short), refused (the gap widened, then the
probe failed) where the difference is under 100 cycles or not positive. Everything a timed region pays
once (the clock reads, entering and leaving the loop, the first and last load's pipeline edges) is
measured by the short run and cancels. What the loop pays per iteration would not cancel, and the
contract shows there is none to pay: the control runs off the chain (``control_off_chain``), so it
issues in the loads' shadow; subtracting the control's standalone cost (``overhead.loop``) would bias
every latency low by that amount over 32.

What the facts are, and are not: ``latency.l2``, ``latency.l2_far`` and ``latency.dram`` are plateaus of
the footprint sweep, chased by one thread on whichever SM the launch lands on (the curve series records
it: SM 124 on the H200), so ``latency.l2`` is that SM's near-L2 hit; the SMs' spread of it is
``latency.l2.sm_spread`` (the L2-partition map reads every SM). ``latency.l2_far`` is the plateau of the
footprints the near half cannot hold, not the first touch of a far-homed line (``l2.far_latency``).
``capacity.l2_near`` is where the near plateau ends, on a split L2. ``latency.shared`` chases through
``ld.shared.u32 %r, [%r]`` with no address arithmetic, so it reads a few cycles under the papers' index
chases (23 against 29 cycles on an H100-class SM; see the probe doc).

Every launch checks that the chase ended on the node the host predicts; a wrong end fails the
probe and yields no facts. The cycle continues from launch to launch, so beyond the sizes any
cache could hold, no launch revisits a line an earlier one brought into L2; and before such a
footprint, a write through a scratch buffer of twice the L2 evicts the lines the host's cycle
writes left there.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.chase import OUT_WORDS, Chase, Cycle, chase_plan, memory_chase, node_of, random_cycle
from gpuprobe.families.differencing import Lengths
from gpuprobe.families.measuring import clock_mhz, fact, require_counts, require_long_after_short
from gpuprobe.families.planning import (
    NO_WORK,
    SHARED_STEP_CYCLES,
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
from gpuprobe.judge.analysis import Level, find_levels, median_ci
from gpuprobe.judge.invariants import Check
from gpuprobe.judge.ordering import pair_not_below
from gpuprobe.kernels.registry import CLOCK_KERNEL, find_probe, unroll_of
from gpuprobe.output.plots import latency_png
from gpuprobe.output.sections import Plot, Section


@dataclass(frozen=True)
class Settings:
    line_bytes: int = 128  # one node per cache line
    min_footprint: int = 4 * 1024
    l2_multiple: float = 4.0  # largest footprint, in device L2 sizes
    points_per_octave: int = 4
    # Denser from a quarter of the L2 to twice it: the near and the far L2 plateau of a split L2
    # (A100, H100, H200) and the step into DRAM. At 4 points per octave the far plateau of a
    # recorded H100 curve is missed in up to 11 % of noisy sweeps (tests/test_find_levels_recorded.py).
    dense_points_per_octave: int = 8
    dense_from_l2: float = 0.25
    dense_to_l2: float = 2.0
    short_iterations: int = 32  # a sample is the difference of a short and a long timed chase:
    long_iterations: int = 160  # (160 - 32) x 32 = 4096 loads
    # samples per footprint: 3 to 9, stopping once the median's CI half-width is 1 % of it, or after 3 s
    sampling: Stopping = Stopping(3, 9, 0.01, 3.0)
    warm_l2_multiple: float = 1.5  # warm the whole cycle up to this many L2 sizes; beyond, all miss
    l1_rewarm_bytes: int = 1 << 20  # at most this footprint, re-warm every launch (L1 is not kept across launches)
    shared_footprint: int = 32 * 1024
    shared_stride: int = 32
    clock_settle_cycles: int = 200_000_000  # spun untimed first, to leave idle clocks behind
    clock_spin_cycles: int = 20_000_000
    clock_sampling: Stopping = Stopping(3, 5, 0.01, 3.0)  # the SM clock: at most 5 samples (fewer once stable)
    overhead_sampling: Stopping = Stopping(3, 15, 0.01, 3.0)  # each overhead: at most 15 samples
    loop_iterations: int = 1024
    warp_l2_fraction: float = 0.125  # the warp-wide chase's L2 footprint: near-resident, like width.l2's
    warp_dram_l2_multiple: float = 2.0  # its DRAM footprint, flushed before every sample: beyond what the L2 holds
    seed: int = 20240901

    def __post_init__(self) -> None:
        counts = ("line_bytes", "min_footprint", "points_per_octave", "dense_points_per_octave", "short_iterations",
                  "shared_footprint", "shared_stride", "loop_iterations")  # fmt: skip
        require_counts(self, counts)
        require_long_after_short(self)
        if not 0 < self.dense_from_l2 <= self.dense_to_l2 or self.l2_multiple < 0:
            raise ValueError("Settings: need 0 < dense_from_l2 <= dense_to_l2 and l2_multiple >= 0")

    def lengths(self, kernel: str) -> Lengths:
        """A sample's short and long timed chase, in loop iterations of ``kernel``'s declared unroll of loads."""
        return Lengths(self.short_iterations, self.long_iterations, unroll_of(kernel))


def log_spaced(low: float, high: float, per_octave: int) -> np.ndarray:
    """At least ``per_octave`` points per octave from ``low`` to ``high``, both ends included."""
    octaves = math.log2(high / low)
    return low * np.power(2.0, np.linspace(0.0, octaves, math.ceil(octaves * per_octave) + 1))


def sweep_footprints(l2_bytes: int, settings: Settings, dense: bool = True) -> list[int]:
    """Footprints log-spaced from ``min_footprint`` to ``l2_multiple`` x L2 (at least 4 x ``min_footprint``),
    whole lines, increasing: ``points_per_octave``, and (``dense``) ``dense_points_per_octave`` from
    ``dense_from_l2`` to ``dense_to_l2`` L2 sizes as far as the sweep reaches, where a split L2 shows its
    far plateau."""
    s = settings
    top = max(s.min_footprint * 4, int(l2_bytes * s.l2_multiple))
    edges, rates = [s.min_footprint, top], [s.points_per_octave]
    if dense:
        low, high = (min(max(s.min_footprint, l2_bytes * k), top) for k in (s.dense_from_l2, s.dense_to_l2))
        edges = [s.min_footprint, low, high, top]
        rates = [s.points_per_octave, s.dense_points_per_octave, s.points_per_octave]
    pairs = zip(itertools.pairwise(edges), rates, strict=True)
    spans = [log_spaced(low, high, rate) for (low, high), rate in pairs if high > low]
    lines = np.unique(np.round(np.concatenate(spans) / s.line_bytes).astype(np.int64))
    return [int(n) * s.line_bytes for n in lines if n >= 2]


def first_warm_steps(nodes: int, footprint: int, l2_bytes: int, settings: Settings) -> int:
    """Untimed steps before a footprint's first timing: a whole lap where a cache could hold it."""
    return nodes if footprint <= settings.warm_l2_multiple * l2_bytes else 0


def _settings(request: Request) -> Settings:
    return request.settings or Settings()


def _launch(
    request: Request, kernel: str, args: list[object], words: int, block: int = 1, shared: int = 0
) -> list[int]:
    """Launch ``kernel`` with an output buffer appended, and read its first ``words`` results back."""
    out = request.outputs.get(OUT_WORDS)
    values = request.kernels.results(kernel, [*args, out], out, words, block=block, shared=shared)
    return [int(v) for v in values]


def measure_clock(request: Request) -> Measured:
    s = _settings(request)
    _launch(request, CLOCK_KERNEL, [np.uint64(s.clock_settle_cycles)], words=2)
    samples: list[float] = []

    def take() -> None:
        cycles, ns = _launch(request, CLOCK_KERNEL, [np.uint64(s.clock_spin_cycles)], words=2)
        mhz = clock_mhz(cycles, ns, window_ns=1)  # any window: the spin is as long as the settings make it
        if mhz is None or cycles < s.clock_spin_cycles:
            raise ProbeFailure(f"clock probe returned {cycles} cycles in {ns} ns")
        samples.append(mhz)

    sample_until_stable(take, samples, s.clock_sampling)
    request.state["mhz"] = float(np.median(samples))
    result = fact("device.sm_clock", samples, "MHz", "memory.clock", None)
    return Measured("memory.clock", ProbeOutcome("ok"), [result])


def measure_clock_read(request: Request) -> Measured:
    samples: list[float] = []

    def take() -> None:
        samples.append(float(_launch(request, "gp_clock_overhead", [], words=1)[0]))

    sample_until_stable(take, samples, _settings(request).overhead_sampling)
    result = fact("overhead.clock_read", samples, "cycle", "memory.overhead.clock_read", request.state.get("mhz"))
    return Measured("memory.overhead.clock_read", ProbeOutcome("ok"), [result])


def measure_loop(request: Request) -> Measured:
    s = _settings(request)
    samples: list[float] = []

    def take() -> None:
        cycles, remaining = _launch(request, "gp_loop_overhead", [np.uint32(s.loop_iterations)], words=2)
        if remaining & 0xFFFFFFFF:
            raise ProbeFailure(f"loop ended with counter {remaining}, expected 0")
        samples.append(cycles / s.loop_iterations)

    sample_until_stable(take, samples, s.overhead_sampling)
    result = fact("overhead.loop", samples, "cycle", "memory.overhead.loop", request.state.get("mhz"))
    return Measured("memory.overhead.loop", ProbeOutcome("ok"), [result])


@dataclass
class Point:
    """One footprint's samples: latency per sample, the SM clock and the SM of its launches."""

    latencies: list[float] = field(default_factory=list)
    clock_mhz: list[float] = field(default_factory=list)
    sms: list[int] = field(default_factory=list)


def sample_point(chase: Chase, settings: Settings, before: Callable[[], None], longest: int | None = None) -> Point:
    """Samples of one step's latency (a short and a long launch each, through :meth:`Chase.difference`, the
    long one at most ``longest`` iterations) until the settings' stopping rule says enough, ``before``
    run ahead of each; the point keeps the SM clock its launches read and the SMs they ran on."""
    point, first = Point(), len(chase.sms)  # the SMs of its own launches only, not a warm-up's before it
    difference = chase.difference(settings.short_iterations, settings.long_iterations, longest)

    def take() -> None:
        before()
        point.latencies.append(difference.sample())

    sample_until_stable(take, point.latencies, settings.sampling)
    point.clock_mhz, point.sms = chase.clock_mhz, chase.sms[first:]
    return point


def measure_shared(request: Request) -> Measured:
    s, kernel = _settings(request), "gp_chase_shared"
    nodes = s.shared_footprint // s.shared_stride
    cycle = random_cycle(nodes, s.seed)
    successors = request.launcher.upload((cycle.successor * s.shared_stride).astype(np.uint32))

    def launch(start: int, warm: int, iterations: int) -> list[int]:
        fixed = [successors, np.uint32(nodes), np.uint32(s.shared_stride)]
        args = [*fixed, np.uint32(start), np.uint32(warm), np.uint32(iterations)]
        return _launch(request, kernel, args, OUT_WORDS, block=128, shared=s.shared_footprint)

    def end_node(end: int) -> int:
        return node_of(end, s.shared_stride, nodes, kernel)

    # each launch refills the shared memory it chases, and laps the cycle once: every sample is warm
    chase = Chase(cycle, launch, end_node, unroll_of(kernel), kernel, warm_laps=1)
    point = sample_point(chase, s, lambda: None)
    result = fact("latency.shared", point.latencies, "cycle", "memory.latency.shared", request.state.get("mhz"))
    series = {"footprint": {"footprint_bytes": [float(s.shared_footprint)], "latency_cycles": [result.value]}}
    return Measured("memory.latency.shared", ProbeOutcome("ok", series=series), [result])


@dataclass
class Curve:
    footprints: list[int]
    points: list[Point]

    def medians(self) -> np.ndarray:
        return np.array([np.median(p.latencies) for p in self.points])

    def samples_between(self, low: float, high: float) -> list[float]:
        return [x for f, p in zip(self.footprints, self.points, strict=True) if low <= f <= high for x in p.latencies]


@dataclass
class _Sweep:
    """What every footprint of one latency sweep shares: the kernel, the cycle's buffer, the scratch."""

    request: Request
    kernel: str
    buffer: Any
    scratch: Any

    def point(self, footprint: int, seed: int) -> Point:
        """One footprint: a fresh cycle chased on across launches. Where a cache could hold it, every launch
        laps the whole cycle first while the L1 could (launches do not keep it), else one warm-up launch
        does; beyond, every sample is cold, after a flush."""
        request, s = self.request, _settings(self.request)
        nodes, unroll = footprint // s.line_bytes, unroll_of(self.kernel)
        cycle = random_cycle(nodes, seed)
        request.launcher.write_cycle(self.buffer, cycle.successor, s.line_bytes)
        cold = first_warm_steps(nodes, footprint, request.device.l2_bytes, s) == 0
        out = request.outputs.get(OUT_WORDS)
        chase = memory_chase(request.kernels, self.kernel, self.buffer, cycle, s.line_bytes, unroll, out,
                             warm_laps=0 if cold else 1)  # fmt: skip
        if cold:
            check_no_revisit(nodes, footprint, s.lengths(self.kernel))
            return sample_point(chase, s, self.flush, longest=nodes // unroll - s.short_iterations)
        if footprint > s.l1_rewarm_bytes:  # the L2 keeps what one lap brought in
            chase.reading(s.short_iterations)  # the warm-up lap; its reading is discarded
            chase.warm_laps = 0
        return sample_point(chase, s, lambda: None)

    def flush(self) -> None:
        """Evict from L2 what writing the cycle, or the samples before, left there."""
        self.request.launcher.fill(self.scratch, 0)


def chase_curve(request: Request, kernel: str, footprints: list[int]) -> Curve:
    """Latency at each footprint, the cycle rebuilt for each and chased on across its launches."""
    launcher = request.launcher
    sweep = _Sweep(request, kernel, launcher.alloc(max(footprints)), launcher.alloc(2 * request.device.l2_bytes))
    launcher.prefer_l1(kernel)
    seed = _settings(request).seed
    points = [sweep.point(footprint, seed + index) for index, footprint in enumerate(footprints)]
    return Curve(footprints, points)


def check_no_revisit(nodes: int, footprint: int, sample: Lengths) -> None:
    """A cold chase misses on every load only if no sample visits a node twice: L2 is flushed before each
    sample (so what earlier samples touched is gone), and one sample's short and long chases must fit
    in the cycle."""
    steps = (sample.short + sample.long) * sample.steps
    if steps > nodes:
        raise ProbeFailure(
            f"{footprint} bytes is chased cold, but one sample's {steps} steps would revisit its {nodes} nodes: "
            "lower the iterations, or raise warm_l2_multiple"
        )


def level_names(levels: list[Level], l2_bytes: int, cached_in_l1: bool) -> list[str]:
    """Name the levels a curve shows, fastest first, using the L2 size the device reports.

    DRAM is the first plateau that starts beyond the L2; plateaus after it are DRAM with TLB
    misses ("DRAM, TLB level k"), never mistaken for cache levels. Before it: L1 (first, when the
    loads cache in L1), then the L2 plateaus: "L2", and on split-L2 parts "L2 far" for the last.
    """
    dram = next((i for i, level in enumerate(levels) if level.first_footprint > l2_bytes), len(levels) - 1)
    l1 = ["L1"] if cached_in_l1 and dram > 1 else []
    l2_count = dram - len(l1)
    middle = [f"L2 level {k}" for k in range(2, l2_count)]
    l2 = ["L2", *middle, "L2 far"] if l2_count >= 2 else ["L2"] * l2_count
    beyond = [f"DRAM, TLB level {k + 2}" for k in range(len(levels) - dram - 1)]
    return [*l1, *l2, "DRAM", *beyond]


_LATENCY_FACTS = {"L1": "latency.l1", "L2": "latency.l2", "L2 far": "latency.l2_far", "DRAM": "latency.dram"}


def _series(curve: Curve, levels: list[Level], names: list[str], mhz: float | None) -> dict[str, dict[str, list]]:
    medians = curve.medians()
    bounds = [median_ci(p.latencies)[1:] for p in curve.points]
    return {
        "curve": {
            "footprint_bytes": [float(f) for f in curve.footprints],
            "latency_cycles": [float(m) for m in medians],
            "latency_ns": [float(m) / mhz * 1000.0 for m in medians] if mhz else [],
            "ci_low": [float(b[0]) for b in bounds],
            "ci_high": [float(b[1]) for b in bounds],
            "sm_mhz": [float(np.median(p.clock_mhz)) if p.clock_mhz else None for p in curve.points],
            "sm_id": [p.sms[0] if len(set(p.sms)) == 1 else -1 for p in curve.points],
        },
        "levels": {
            "size_bytes": [lvl.size_bytes for lvl in levels],
            "latency_cycles": [lvl.latency for lvl in levels],
            "name": names,
        },
    }


def capacity_fact(fact_id: str, level: Level, footprints: list[int], probe: str) -> Fact:
    """A level's size, with the footprint grid points around it as its interval."""
    assert level.size_bytes is not None
    below = max((f for f in footprints if f <= level.size_bytes), default=level.size_bytes)
    above = min((f for f in footprints if f >= level.size_bytes), default=level.size_bytes)
    return Fact(fact_id, float(level.size_bytes), "byte", (float(below), float(above)), [], {}, probe)


def curve_facts(
    curve: Curve, probe: str, wanted: set[str], l2_bytes: int, cached_in_l1: bool, mhz: float | None
) -> tuple[list[Fact], dict, str]:
    """The ``wanted`` facts from one latency-vs-footprint curve, the series for plots, and a note."""
    levels = find_levels(curve.footprints, curve.medians())
    if not levels:
        return [], _series(curve, levels, [], mhz), "no plateau found on the curve"
    names = level_names(levels, l2_bytes, cached_in_l1)
    facts: list[Fact] = []
    for name, level in zip(names, levels, strict=True):
        fact_id = _LATENCY_FACTS.get(name)
        if fact_id in wanted:
            samples = curve.samples_between(level.first_footprint, level.last_footprint)
            facts.append(fact(fact_id, samples, "cycle", probe, mhz))
    on_chip = [level for name, level in zip(names, levels, strict=True) if name.startswith("L2")]
    if "capacity.l1" in wanted and names[0] == "L1":
        facts.append(capacity_fact("capacity.l1", levels[0], curve.footprints, probe))
    if "capacity.l2" in wanted and on_chip and on_chip[-1].size_bytes is not None:
        facts.append(capacity_fact("capacity.l2", on_chip[-1], curve.footprints, probe))
    if "capacity.l2_near" in wanted and "L2 far" in names:  # where the near plateau ends, on a split L2
        facts.append(capacity_fact("capacity.l2_near", levels[names.index("L2")], curve.footprints, probe))
    sms = sorted({sm for point in curve.points for sm in point.sms})
    note = f"{len(levels)} levels: {', '.join(names)}; chased by one thread on SM {', '.join(map(str, sms))}"
    return facts, _series(curve, levels, names, mhz), note


def measure_global(request: Request, name: str, cached_in_l1: bool) -> Measured:
    """A latency-vs-footprint sweep; the probe's declaration says which facts it yields. Only the
    L1-bypassing sweep is dense around the L2 (its plateaus are that probe's facts; the L1-cached
    one reports the L1, and needs the L2 and DRAM only to tell the L1 from them)."""
    probe, l2_bytes = find_probe(name), request.device.l2_bytes
    footprints = sweep_footprints(l2_bytes, _settings(request), dense=not cached_in_l1)
    curve = chase_curve(request, probe.kernel, footprints)
    mhz = request.state.get("mhz")
    facts, series, note = curve_facts(curve, probe.name, set(probe.facts), l2_bytes, cached_in_l1, mhz)
    return Measured(probe.name, ProbeOutcome("ok", note, series), facts)


# ---- the warp-wide vector chase ------------------------------------------------------------------

WARP_KERNEL = "gp_chase_warp_v16"
WARP_LANES = 32
SLOT_BYTES = 16  # each lane's load: ld.global.cg.v2.u64
VECTOR_BYTES = WARP_LANES * SLOT_BYTES  # one warp step: 512 contiguous bytes, 4 lines of 128


def lane_successors(cycle: Cycle) -> np.ndarray:
    """The cycle of blocks as a cycle of 16-byte slots (slot b x 32 + l is lane l's in block b), each
    pointing to its lane's slot of the next block: ``Launcher.write_cycle`` at SLOT_BYTES writes it."""
    return (cycle.successor[:, None] * WARP_LANES + np.arange(WARP_LANES)).ravel()


def warp_chase(request: Request, buffer: Any, cycle: Cycle, lanes: int, warm_laps: int, step: int = 0) -> Chase:
    """A chase of ``cycle`` (one node per VECTOR_BYTES block of ``buffer``) by ``lanes`` lanes of one warp
    (32: the warp-wide vector; 1: the one-thread 16-byte reference), every lane's end checked: lane l
    must end on its own slot of the block lane 0 ends on (which :class:`Chase` holds to the host's)."""
    kernels, words = request.kernels, OUT_WORDS + 2 * lanes
    base, out = kernels.launcher.address(buffer), request.outputs.get(words)

    def launch(start: int, warm: int, iterations: int) -> np.ndarray:
        args = [np.uint64(base + start * VECTOR_BYTES), np.uint32(warm), np.uint32(iterations), out]
        values = np.asarray(kernels.results(WARP_KERNEL, args, out, words, block=lanes), dtype=np.uint64)
        offsets = values[OUT_WORDS::2].astype(np.int64) - int(values[2])
        if np.any(offsets != np.arange(lanes) * SLOT_BYTES):
            lane = int(np.argmax(offsets != np.arange(lanes) * SLOT_BYTES))
            raise ProbeFailure(
                f"{WARP_KERNEL}: lane {lane} ended {int(offsets[lane])} bytes from lane 0's end, not on its own "
                f"slot {lane * SLOT_BYTES} bytes on"
            )
        return values[:OUT_WORDS]

    def end_node(end: int) -> int:
        return node_of(end - base, VECTOR_BYTES, cycle.nodes, WARP_KERNEL)

    return Chase(cycle, launch, end_node, unroll_of(WARP_KERNEL), WARP_KERNEL, warm_laps, step)


def warp_footprint(level: str, l2_bytes: int, settings: Settings) -> int:
    """The warp chase's footprint, whole blocks: ``warp_l2_fraction`` of the L2 (near-resident), or
    ``warp_dram_l2_multiple`` L2 sizes and at least two samples' worth of steps (one per chase's half)."""
    s = settings
    if level == "l2":
        return max(2, int(l2_bytes * s.warp_l2_fraction) // VECTOR_BYTES) * VECTOR_BYTES
    lengths = s.lengths(WARP_KERNEL)
    sample_steps = (lengths.short + lengths.long) * lengths.steps
    return max(int(l2_bytes * s.warp_dram_l2_multiple) // VECTOR_BYTES, 2 * sample_steps) * VECTOR_BYTES


def measure_warp(request: Request, level: str) -> Measured:
    """The warp-wide 16-byte-per-lane chase and the one-lane chase of the same kernel in turn, over one
    cycle: near-L2 resident (warmed once) or from DRAM (each on its own half, the L2 flushed before every
    sample); a sample is the warp's latency and its difference from the lane's."""
    s, device, probe_name = _settings(request), request.device, f"memory.latency.warp_v16.{level}"
    footprint = warp_footprint(level, device.l2_bytes, s)
    cycle = random_cycle(footprint // VECTOR_BYTES, s.seed)
    buffer, launcher = request.launcher.alloc(footprint), request.launcher
    launcher.write_cycle(buffer, lane_successors(cycle), SLOT_BYTES)
    cold = level == "dram"
    warp = warp_chase(request, buffer, cycle, WARP_LANES, warm_laps=0)
    lane = warp_chase(request, buffer, cycle, 1, warm_laps=0, step=cycle.nodes // 2 if cold else 0)
    scratch = launcher.alloc(2 * device.l2_bytes) if cold else None
    longest = cycle.nodes // 2 // warp.unroll - s.short_iterations if cold else None
    if cold:
        check_no_revisit(cycle.nodes // 2, footprint // 2, s.lengths(WARP_KERNEL))
    else:
        warp.warm_laps = 1
        warp.reading(s.short_iterations)  # the warm-up lap (all 32 lanes: every block's 4 lines); discarded
        warp.warm_laps = 0
    wide, narrow = (c.difference(s.short_iterations, s.long_iterations, longest) for c in (warp, lane))
    warp_cycles: list[float] = []
    lane_cycles: list[float] = []
    differences: list[float] = []

    def take() -> None:
        for chase_difference, samples in ((wide, warp_cycles), (narrow, lane_cycles)):
            if scratch is not None:
                launcher.fill(scratch, 0)  # no step of the sample finds its lines in the L2
            samples.append(chase_difference.sample())
        differences.append(warp_cycles[-1] - lane_cycles[-1])

    sample_until_stable(take, differences, s.sampling)
    mhz = request.state.get("mhz")
    facts = [
        fact(f"latency.{level}.warp_v16", warp_cycles, "cycle", probe_name, mhz),
        fact(f"latency.{level}.warp_v16_minus_v16", differences, "cycle", probe_name, mhz),
    ]
    one, whole = float(np.median(lane_cycles)), facts[0].value
    series = {"width": {"lanes": [1.0, float(WARP_LANES)], "load_bytes": [float(SLOT_BYTES), float(VECTOR_BYTES)],
                        "latency_cycles": [one, whole]}}  # fmt: skip
    sms = ", ".join(map(str, sorted(set(warp.sms))))
    note = (f"{footprint} B footprint: one lane's 16-byte load {one:.1f} cycles, the warp's 512-byte vector "
            f"(32 lanes x 16 B, 4 lines) {whole:.1f} cycles; SM {sms}")  # fmt: skip
    return Measured(probe_name, ProbeOutcome("ok", note, series), facts)


STEPS: list[tuple[str, Callable[[Request], Measured]]] = [
    ("memory.clock", measure_clock),
    ("memory.overhead.clock_read", measure_clock_read),
    ("memory.overhead.loop", measure_loop),
    ("memory.latency.shared", measure_shared),
    ("memory.latency.global_ca", partial(measure_global, name="memory.latency.global_ca", cached_in_l1=True)),
    ("memory.latency.global_cg", partial(measure_global, name="memory.latency.global_cg", cached_in_l1=False)),
    ("memory.latency.warp_v16.l2", partial(measure_warp, level="l2")),
    ("memory.latency.warp_v16.dram", partial(measure_warp, level="dram")),
]


PROBES = [name for name, _ in STEPS]


def invariant_warp_not_below_lane(facts: dict[str, Fact], device: Device) -> list[Check]:
    """A warp's 512-byte vector load is no faster than one thread's 8-byte load of the same level (the
    footprint plateau), within the CIs: the warp waits for that load's sector and 15 more."""
    return [check for level in ("l2", "dram")
            for check in pair_not_below(facts, f"memory.{level}_warp_v16_not_below_chase", f"latency.{level}",
                                        f"latency.{level}.warp_v16")]  # fmt: skip


INVARIANTS = (invariant_warp_not_below_lane,)

OPTIONAL_FACTS = {  # absent where the part shows no far-L2 plateau
    "capacity.l2_near": "this part shows no far-L2 plateau (no split L2)",
    "latency.l2_far": "this part shows no far-L2 plateau (no split L2)",
}
LATENCY_PLOT = Plot("latency_vs_footprint", "latency_vs_footprint.png", "latency vs footprint", latency_png)
SECTIONS = (
    Section(
        title="Memory latency",
        fact_prefixes=("latency.", "capacity."),
        probe_prefixes=("memory.latency.",),
        plot=LATENCY_PLOT,
        blurb="Dependent pointer-chase loads; one load in flight at a time. Cycles are SM clock cycles; "
        "ns are at the measured SM clock. Capacities are where the latency curve steps up. latency.l2, "
        "latency.l2_far and latency.dram are plateaus of a footprint sweep chased by one thread on one SM "
        "(the probe's note names it): latency.l2.sm_spread, from the L2 partition map of every SM, says how "
        "much the near-L2 hit varies across SMs. latency.l2_far is the plateau beyond what the near L2 half "
        "holds (capacity.l2_near), not a far-homed line's first touch (l2.far_latency, lower). latency.shared "
        "chases a direct ld.shared.u32 %r, [%r] with no index arithmetic: 23 cycles on an H100-class SM, "
        "where index chases (Luo et al., reproduced in Johnsonms/NVIDIA-Hopper-Benchmark) read 29 and mt4g 29.9. "
        "latency.l2.warp_v16 and latency.dram.warp_v16 are a whole warp's dependent vector load (32 lanes x 16 B "
        "= 512 B, 4 lines, each lane's next address from its own data): what loading a vector costs a kernel; "
        "the _minus_v16 facts are that less one lane's 16-byte load by the same kernel.",
    ),
)


# ---- the time plan ------------------------------------------------------------------------------

LOOP_CYCLES = 20.0  # one iteration of the bare loop (gp_loop_overhead) at most: a few cycles measured


def sweep_plan(settings: Settings, device: Device, kernel: str, dense: bool) -> Plan:
    """One latency-vs-footprint sweep (``chase_curve`` over ``sweep_footprints``), its probe not counted:
    per footprint a cycle built and written, the flush before each sample of a cold one, and its samples."""
    s, l2, repeats = settings, device.l2_bytes, settings.sampling.max_repeats
    footprints = sweep_footprints(l2, s, dense)
    total = Plan(0, 0, dram_s(max(footprints) + 2 * l2, device))  # the cycle's buffer and the scratch, zeroed
    for footprint in footprints:
        nodes = footprint // s.line_bytes
        warm = first_warm_steps(nodes, footprint, l2, s)
        lap = warm if footprint <= s.l1_rewarm_bytes else 0
        write = dram_s(footprint, device) + link_s(8 * nodes, pinned=False)  # the successors uploaded, scattered
        flush = Plan(0, repeats, repeats * dram_s(2 * l2, device)) if warm == 0 else NO_WORK
        chase = chase_plan(s.lengths(kernel), repeats, device, warm - lap, lap, step_cycles(footprint, device))
        total += Plan(0, 1, write, cycle_host_s(nodes)) + flush + chase
    return total


def warp_plan(settings: Settings, device: Device, level: str) -> Plan:
    """One warp-wide chase probe (:func:`measure_warp`) at its most samples: its slots built and written, the
    warm-up lap (L2) or the flush before each chase's sample (DRAM), and both chases' samples."""
    s, l2, repeats = settings, device.l2_bytes, settings.sampling.max_repeats
    footprint = warp_footprint(level, l2, s)
    nodes, step = footprint // VECTOR_BYTES, step_cycles(footprint, device)
    slots = nodes * WARP_LANES
    # the random cycle is the blocks'; its slots are a NumPy broadcast of it, written on the GPU from their upload
    write = Plan(0, 1, dram_s(footprint, device) + link_s(8 * slots, pinned=False), cycle_host_s(nodes))
    lengths = s.lengths(WARP_KERNEL)
    if level == "dram":
        # the scratch zeroed, then a flush before each chase's sample
        flushes = Plan(0, 2 * repeats, dram_s(2 * l2, device) * (1 + 2 * repeats))
        return probe(write, flushes, combined(chase_plan(lengths, repeats, device, 0, 0, step) for _ in range(2)))
    warmed = chase_plan(lengths, repeats, device, nodes, 0, step)  # the warp's warm-up lap, then its samples
    return probe(write, warmed, chase_plan(lengths, repeats, device, 0, 0, step))


def plan(settings: Settings, device: Device) -> Plan:
    """Every probe of the family at its most repeats on ``device`` (see :mod:`gpuprobe.families.planning`)."""
    s = settings
    clocks, overheads = s.clock_sampling.max_repeats, s.overhead_sampling.max_repeats
    clock = probe(kernel_runs(1 + clocks, cycles_s(s.clock_settle_cycles + clocks * s.clock_spin_cycles, device)))
    clock_read = probe(kernel_runs(overheads, 0.0))
    loop = probe(kernel_runs(overheads, cycles_s(overheads * s.loop_iterations * LOOP_CYCLES, device)))
    nodes = s.shared_footprint // s.shared_stride
    shared_chase = chase_plan(s.lengths("gp_chase_shared"), s.sampling.max_repeats, device, 0, nodes,
                              SHARED_STEP_CYCLES)  # fmt: skip
    shared = probe(Plan(0, 1, 0.0, cycle_host_s(nodes)), shared_chase)
    sweeps = [probe(sweep_plan(s, device, kernel, dense)) for kernel, dense in
              (("gp_chase_global_ca", False), ("gp_chase_global_cg", True))]  # fmt: skip
    warps = [warp_plan(s, device, level) for level in ("l2", "dram")]
    return clock + clock_read + loop + shared + combined(sweeps) + combined(warps)


# A first contact: the clock (its kernel is the one every probe's conditions read the clock with) and
# the cheapest chase (one shared-memory footprint: every launch's end node checked), one sample each.
# A global sweep this short would name its one plateau DRAM, a wrong fact: the full run measures those.
SMOKE = Smoke(
    probes=("memory.clock", "memory.latency.shared"),
    settings=Settings(
        l2_multiple=0.0,  # the global sweeps at their shortest: 4 x min_footprint, one point per octave
        points_per_octave=1,
        short_iterations=1,
        long_iterations=2,
        sampling=ONE_SAMPLE,
        clock_sampling=ONE_SAMPLE,
        overhead_sampling=ONE_SAMPLE,
    ),
)


def measure(request: Request) -> Probes:
    """The family's runnable probes in order, each as (name, step): calling ``step`` measures it.

    A probe whose own check fails gives status "failed"; any other exception (a CUDA error) propagates,
    for the caller to isolate. ``request.state["mhz"]`` carries the SM clock ``memory.clock`` measured to
    the probes after it (and to other measuring processes), which give their cycles in ns too.
    """
    yield from probe_steps(PROBES, {name: partial(step, request) for name, step in STEPS}, request.runnable)


FAMILY = Family(
    name="memory",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
    sections=SECTIONS,
    invariants=INVARIANTS,
    optional_facts=OPTIONAL_FACTS,
)
