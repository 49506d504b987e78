"""The memory-latency family: plan the chase, launch it, verify it, and turn curves into facts.

Order of measurement, each step feeding the next:

1. ``memory.clock`` — the SM clock (cycles over global-timer nanoseconds), to convert cycles to ns;
2. ``memory.overhead.clock_read`` — the cost of the two clock reads around a timed region;
3. ``memory.overhead.loop`` — the chase loop's control cost per iteration;
4. ``memory.latency.shared`` — one footprint in shared memory;
5. ``memory.latency.global_ca`` / ``global_cg`` — latency vs footprint, L1-cached and L1-bypassing,
   from 4 KiB to several times the L2 the device reports; ``find_levels`` reads the levels.

Per launch: latency = (cycles - clock_read - iterations * loop) / loads. Every launch checks that
the chase ended on the node the host predicts; a wrong end fails the probe and yields no facts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import numpy as np

from gpuprobe.analysis import Level, find_levels, median_ci
from gpuprobe.families.chain import Chain, random_cycle
from gpuprobe.gpu import Launcher
from gpuprobe.registry import Probe, find_probe
from gpuprobe.results import Fact, ProbeOutcome

UNROLL = 32  # chase steps per iteration of the timed loop: fixed by the PTX (//@repeat 32)
MIN_CLOCK_WINDOW_NS = 100_000  # a timed region this long reads the clock to 1 % at 1 us timer resolution


class ProbeFailure(Exception):
    """The probe ran but its own check failed (wrong chase end, impossible timing)."""


@dataclass(frozen=True)
class Settings:
    line_bytes: int = 128  # one node per cache line
    min_footprint: int = 4 * 1024
    l2_multiple: float = 4.0  # largest footprint, in device L2 sizes
    points_per_octave: int = 4
    timed_loads: int = 4096  # chase steps timed per launch
    repeats: int = 5  # launches per footprint
    warm_l2_multiple: float = 1.5  # warm the whole cycle up to this many L2 sizes; beyond, all miss
    shared_footprint: int = 32 * 1024
    shared_stride: int = 32
    clock_spin_cycles: int = 20_000_000
    clock_repeats: int = 3
    overhead_repeats: int = 15
    loop_iterations: int = 1024
    seed: int = 20240901


@dataclass
class Measured:
    """One probe's outcome and facts, handed back as soon as the probe finishes."""

    probe: str
    outcome: ProbeOutcome
    facts: list[Fact] = field(default_factory=list)


def plan_footprints(l2_bytes: int, settings: Settings) -> list[int]:
    """Footprints log-spaced from ``min_footprint`` to ``l2_multiple`` x L2, whole lines, increasing."""
    top = max(settings.min_footprint * 4, int(l2_bytes * settings.l2_multiple))
    octaves = math.log2(top / settings.min_footprint)
    count = math.ceil(octaves * settings.points_per_octave) + 1
    raw = settings.min_footprint * np.power(2.0, np.linspace(0.0, octaves, count))
    lines = np.unique(np.round(raw / settings.line_bytes).astype(np.int64))
    return [int(n) * settings.line_bytes for n in lines if n >= 2]


def warm_steps(nodes: int, footprint: int, l2_bytes: int, settings: Settings) -> int:
    """Untimed steps before timing: one whole lap when the footprint could fit a cache, else none."""
    return nodes if footprint <= settings.warm_l2_multiple * l2_bytes else 0


def timed_iterations(settings: Settings) -> int:
    return max(1, settings.timed_loads // UNROLL)


def per_load_cycles(cycles: float, iterations: int, clock_read: float, loop: float) -> float:
    """Latency of one chase step from a timed region: measured overheads subtracted."""
    return (cycles - clock_read - iterations * loop) / (iterations * UNROLL)


def _fact(fact_id: str, samples: list[float], unit: str, probe: str, mhz: float | None) -> Fact:
    value, low, high = median_ci(samples)
    converted = {"ns": value / mhz * 1000.0} if unit == "cycle" and mhz else {}
    return Fact(fact_id, value, unit, (low, high), [float(s) for s in samples], converted, probe)


@dataclass
class _Context:
    launcher: Launcher
    l2_bytes: int
    settings: Settings
    out: object = None
    mhz: float | None = None
    clock_read: float | None = None
    loop: float | None = None

    def run(self, kernel: str, args: list[object], grid: int = 1, block: int = 1, shared: int = 0, words: int = 3):
        self.launcher.launch(kernel, grid, block, [*args, self.out], shared)
        return self.launcher.read_u64(self.out, words)


def measure_clock(ctx: _Context) -> Measured:
    s = ctx.settings
    samples = []
    for _ in range(s.clock_repeats):
        cycles, ns = ctx.run("gp_sm_clock", [np.uint64(s.clock_spin_cycles)], words=2)
        if ns == 0 or cycles < s.clock_spin_cycles:
            raise ProbeFailure(f"clock probe returned {cycles} cycles in {ns} ns")
        samples.append(float(cycles) / float(ns) * 1000.0)
    ctx.mhz = float(np.median(samples))
    return Measured(
        "memory.clock", ProbeOutcome("ok"), [_fact("device.sm_clock", samples, "MHz", "memory.clock", None)]
    )


def measure_clock_read(ctx: _Context) -> Measured:
    samples = [float(ctx.run("gp_clock_overhead", [], words=1)[0]) for _ in range(ctx.settings.overhead_repeats)]
    ctx.clock_read = float(np.median(samples))
    fact = _fact("overhead.clock_read", samples, "cycle", "memory.overhead.clock_read", ctx.mhz)
    return Measured("memory.overhead.clock_read", ProbeOutcome("ok"), [fact])


def measure_loop(ctx: _Context) -> Measured:
    iterations = ctx.settings.loop_iterations
    samples = []
    for _ in range(ctx.settings.overhead_repeats):
        cycles, remaining = ctx.run("gp_loop_overhead", [np.uint32(iterations)], words=2)
        if remaining & 0xFFFFFFFF:
            raise ProbeFailure(f"loop ended with counter {remaining}, expected 0")
        samples.append((float(cycles) - _known(ctx.clock_read)) / iterations)
    ctx.loop = float(np.median(samples))
    return Measured(
        "memory.overhead.loop",
        ProbeOutcome("ok"),
        [_fact("overhead.loop", samples, "cycle", "memory.overhead.loop", ctx.mhz)],
    )


def _known(value: float | None) -> float:
    if value is None:
        raise ProbeFailure("an overhead this probe subtracts was not measured")
    return value


def _check_end(result_node: int, chain: Chain, steps: int, what: str) -> None:
    expected = chain.node_after(steps)
    if result_node != expected:
        raise ProbeFailure(f"{what}: chase ended on node {result_node}, host predicted node {expected}")


def _node_of(offset: int, stride: int, kernel: str) -> int:
    node, rest = divmod(offset, stride)
    if rest or node < 0:
        raise ProbeFailure(f"{kernel}: chase ended at offset {offset:#x}, not on a node")
    return node


def _launch_latency(ctx: _Context, cycles: int, iterations: int) -> float:
    latency = per_load_cycles(float(cycles), iterations, _known(ctx.clock_read), _known(ctx.loop))
    if not latency > 0:
        raise ProbeFailure(f"non-positive latency {latency:.2f} cycles from {cycles} cycles")
    return latency


def measure_shared(ctx: _Context) -> Measured:
    s = ctx.settings
    nodes = s.shared_footprint // s.shared_stride
    chain = random_cycle(nodes, s.seed)
    offsets = ctx.launcher.upload((chain.successor * s.shared_stride).astype(np.uint32))
    iterations = timed_iterations(s)
    samples = []
    for _ in range(s.repeats):
        args = [offsets, np.uint32(nodes), np.uint32(s.shared_stride), np.uint32(nodes), np.uint32(iterations)]
        cycles, _, end = ctx.run("gp_chase_shared", args, block=128, shared=s.shared_footprint)
        _check_end(_node_of(int(end), s.shared_stride, "gp_chase_shared"), chain, nodes + iterations * UNROLL, "shared")
        samples.append(_launch_latency(ctx, cycles, iterations))
    fact = _fact("latency.shared", samples, "cycle", "memory.latency.shared", ctx.mhz)
    series = {"footprint": {"footprint_bytes": [float(s.shared_footprint)], "latency_cycles": [fact.value]}}
    return Measured("memory.latency.shared", ProbeOutcome("ok", series=series), [fact])


@dataclass
class Curve:
    footprints: list[int]
    samples: list[list[float]]  # per footprint, one latency per launch
    clock_mhz: list[float | None]  # per footprint, the SM clock over its timed regions (long enough ones)

    def medians(self) -> np.ndarray:
        return np.array([np.median(s) for s in self.samples])

    def samples_between(self, low: float, high: float) -> list[float]:
        return [x for f, s in zip(self.footprints, self.samples, strict=True) if low <= f <= high for x in s]


def chase_curve(ctx: _Context, kernel: str, footprints: list[int]) -> Curve:
    s = ctx.settings
    buffer = ctx.launcher.alloc(max(footprints))
    base = ctx.launcher.address(buffer)
    iterations = timed_iterations(s)
    samples: list[list[float]] = []
    clock_mhz: list[float | None] = []
    for index, footprint in enumerate(footprints):
        nodes = footprint // s.line_bytes
        chain = random_cycle(nodes, s.seed + index)
        ctx.launcher.write_chain(buffer, chain.successor, s.line_bytes)
        warm = warm_steps(nodes, footprint, ctx.l2_bytes, s)
        point, clocks = [], []
        for _ in range(s.repeats):
            cycles, ns, end = ctx.run(kernel, [np.uint64(base), np.uint32(warm), np.uint32(iterations)])
            node = _node_of(int(end) - base, s.line_bytes, kernel)
            _check_end(node, chain, warm + iterations * UNROLL, f"{kernel} at {footprint} bytes")
            point.append(_launch_latency(ctx, cycles, iterations))
            if ns >= MIN_CLOCK_WINDOW_NS:
                clocks.append(float(cycles) / float(ns) * 1000.0)
        samples.append(point)
        clock_mhz.append(float(np.median(clocks)) if clocks else None)
    return Curve(footprints, samples, clock_mhz)


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
    bounds = [median_ci(s)[1:] for s in curve.samples]
    return {
        "curve": {
            "footprint_bytes": [float(f) for f in curve.footprints],
            "latency_cycles": [float(m) for m in medians],
            "latency_ns": [float(m) / mhz * 1000.0 for m in medians] if mhz else [],
            "ci_low": [float(b[0]) for b in bounds],
            "ci_high": [float(b[1]) for b in bounds],
            "sm_mhz": curve.clock_mhz,
        },
        "levels": {
            "size_bytes": [lvl.size_bytes for lvl in levels],
            "latency_cycles": [lvl.latency for lvl in levels],
            "name": names,
        },
    }


def _capacity_fact(fact_id: str, level: Level, footprints: list[int], probe: str) -> Fact:
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
            facts.append(_fact(fact_id, samples, "cycle", probe, mhz))
    on_chip = [level for name, level in zip(names, levels, strict=True) if name.startswith("L2")]
    if "capacity.l1" in wanted and names[0] == "L1":
        facts.append(_capacity_fact("capacity.l1", levels[0], curve.footprints, probe))
    if "capacity.l2" in wanted and on_chip and on_chip[-1].size_bytes is not None:
        facts.append(_capacity_fact("capacity.l2", on_chip[-1], curve.footprints, probe))
    return facts, _series(curve, levels, names, mhz), f"{len(levels)} levels: " + ", ".join(names)


def measure_global(ctx: _Context, probe: Probe, cached_in_l1: bool) -> Measured:
    """A latency-vs-footprint sweep; the probe's declaration says which facts it yields."""
    curve = chase_curve(ctx, probe.kernel, plan_footprints(ctx.l2_bytes, ctx.settings))
    facts, series, note = curve_facts(curve, probe.name, set(probe.facts), ctx.l2_bytes, cached_in_l1, ctx.mhz)
    return Measured(probe.name, ProbeOutcome("ok", note, series), facts)


STEPS: list[tuple[str, Callable[[_Context], Measured]]] = [
    ("memory.clock", measure_clock),
    ("memory.overhead.clock_read", measure_clock_read),
    ("memory.overhead.loop", measure_loop),
    ("memory.latency.shared", measure_shared),
    ("memory.latency.global_ca", lambda c: measure_global(c, find_probe("memory.latency.global_ca"), True)),
    ("memory.latency.global_cg", lambda c: measure_global(c, find_probe("memory.latency.global_cg"), False)),
]


def measure(
    launcher: Launcher, l2_bytes: int, runnable: set[str], settings: Settings | None = None
) -> Iterator[Measured]:
    """Run the family's probes in order, yielding each as it finishes.

    ``runnable`` holds the probes whose SASS contract held on this arch; the others yield their
    status without a number. A probe that fails its own check yields status "failed".
    """
    ctx = _Context(launcher, l2_bytes, settings or Settings())
    ctx.out = launcher.alloc(64)
    for name, step in STEPS:
        if name not in runnable:
            yield Measured(name, ProbeOutcome("skipped", "its SASS contract did not hold on this arch"))
            continue
        try:
            yield step(ctx)
        except ProbeFailure as exc:
            yield Measured(name, ProbeOutcome("failed", str(exc)))
        except Exception as exc:  # a CUDA error from the launch: record it, and let later probes try
            yield Measured(name, ProbeOutcome("crashed", f"{type(exc).__name__}: {exc}"))
