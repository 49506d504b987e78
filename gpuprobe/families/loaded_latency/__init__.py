"""The loaded-latency family: the latency of a dependent pointer chase while the rest of the GPU streams from
the same level at increasing rates, for the L2 and DRAM (the curve Intel's MLC draws for CPUs as "loaded
latency"; few publish it for GPUs).

One launch per sample (``gp_loaded_latency``, ptx/loaded_latency/): block 0's thread 0 chases a random cycle
(:class:`~gpuprobe.families.chase.Cycle`, written by ``Launcher.write_cycle``), ``run_up_steps`` untimed then
``iterations`` x 32 timed between %clock64 reads, and publishes a ticket in a flag; one block per other SM
streams 16-byte ld.global.cg loads from a buffer of its own at the same level, ``warps`` warps each, until it
reads the ticket. The load points raise the streaming warps per SM from 0 (idle) to 32; each warp records its
bytes and its %globaltimer span, so the background is measured (the sum of the warps' rates), not assumed.

Every launch is checked: the chase ends on the node the host predicts, every lane's sum of the words it
streamed is what the buffer holds times its loads, no streaming warp shares the chaser's SM, every warp's span
covers the chase window (else the point is not a loaded point), and the background stays under the level's
ceiling (DRAM: the theoretical peak; L2: 128 bytes a clock per streaming SM, what an SM's L1 can take in).

Facts per level (``l2``, ``dram``): ``latency.<level>.loaded.idle``, the chase with no streamers (beside
``latency.l2`` / ``latency.dram`` of the memory family, which the family's invariants hold it to);
``.p50`` and ``.p90``, the chase at the load point nearest above 50 % and 90 % of the highest background the
sweep reached (``.max_bandwidth``, GB/s): a family measures before the bandwidth family's facts are judged
and cannot read them, so its own sweep's top is its 100 %, and the invariants hold that top to the bandwidth
family's ``bandwidth.<level>_read.v16``; ``.p90_over_idle``, their ratio. The points are measured, not
interpolated: each fact keeps its point's samples.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.chase import CLOCK_WINDOW_NS, Cycle, node_of, random_cycle
from gpuprobe.families.loaded_latency.report import INVARIANTS, SECTIONS
from gpuprobe.families.measuring import clock_mhz, fact, require_counts
from gpuprobe.families.planning import (
    DRAM_STEP_CYCLES,
    L2_STEP_CYCLES,
    combined,
    cycle_host_s,
    cycles_s,
    dram_peak_gbps,
    dram_s,
    kernel_runs,
    link_s,
    probe,
    readback_host_s,
)
from gpuprobe.families.sampling import ONE_SAMPLE, Stopping, sample_until_stable
from gpuprobe.families.stepping import probe_steps
from gpuprobe.judge.analysis import median_ci
from gpuprobe.kernels.registry import unroll_of

KERNEL = "gp_loaded_latency"
LEVELS = ("l2", "dram")
PROBES = [f"loaded_latency.{level}" for level in LEVELS]
RECORD_WORDS = 5  # per record: the chaser's (record 0) and each streaming warp's, as the PTX writes them
WARP_BYTES = 4 * 512  # what a streaming warp reads per iteration: four 16-byte loads by 32 lanes
L1_FILL_BYTES_PER_CLOCK = 128  # an SM's L1 takes in at most one 128-byte line a clock: the L2 ceiling per SM
LOADED_STEP_FACTOR = 4.0  # a loaded chase step at most this many times an idle one's bound (plan only)


@dataclass(frozen=True)
class Settings:
    # streaming warps per SM at each load point, 0 (idle) first: at 16-byte loads, 4 in flight a warp, 8 to
    # 16 warps per SM saturate an H100-class L2 or DRAM by Little's law, 32 goes past it
    warps: tuple[int, ...] = (0, 1, 2, 4, 6, 8, 12, 16, 32)
    iterations: int = 64  # timed chase iterations per launch, of the declared unroll (32) steps each
    run_up_steps: int = 512  # untimed chase steps first: the streamers start meanwhile (tens of microseconds)
    polls: int = 16  # stream iterations between two reads of the chaser's flag
    line_bytes: int = 128  # one chase node per cache line
    l2_chase_fraction: float = 1 / 16  # the L2 chase's footprint, of the L2: it and the stream fit a near half
    l2_stream_fraction: float = 0.25  # the L2 stream's footprint at most, of the L2 (a power of two)
    dram_chase_l2_multiple: float = 2.0  # the DRAM chase's cycle, in L2 sizes: never revisited in a sweep
    dram_stream_l2_multiple: float = 4.0  # the DRAM stream's footprint at least, in L2 sizes (a power of two)
    fill_byte: int = 0x5A  # every byte of the streams' buffers: a lane's sum is its loads x 16 x 0x5A5A5A5A
    sampling: Stopping = Stopping(3, 5, 0.01, 1.0)  # launches per load point
    seed: int = 20261207

    def __post_init__(self) -> None:
        require_counts(self, ("iterations", "run_up_steps", "polls", "line_bytes"))
        if not self.warps or self.warps[0] != 0 or list(self.warps) != sorted(set(self.warps)) or self.warps[-1] > 32:
            raise ValueError(f"Settings.warps must rise from 0 (the idle point) to at most 32, not {self.warps}")
        if len(self.warps) < 2 or not 0 <= self.fill_byte <= 0xFF:
            raise ValueError("Settings: need a loaded point besides the idle one, and fill_byte a byte")


@dataclass(frozen=True)
class Reading:
    """One launch: the chase's cycles per step and the background the streamers measured (GB/s)."""

    cycles_per_step: float
    gbps: float
    mhz: float | None  # the chaser's SM clock over its window, where long enough to read it


@dataclass
class Point:
    """One load point's samples."""

    warps: int
    latencies: list[float] = field(default_factory=list)
    gbps: list[float] = field(default_factory=list)

    @property
    def background(self) -> float:
        return float(np.median(self.gbps))

    @property
    def latency(self) -> float:
        return float(np.median(self.latencies))


def power_of_two_at_most(nbytes: float) -> int:
    """The largest power of two not above ``nbytes``: a stream's footprint, which the kernel wraps with a mask."""
    return 1 << int(np.floor(np.log2(nbytes)))


def power_of_two_at_least(nbytes: float) -> int:
    """The smallest power of two not below ``nbytes``."""
    return 1 << int(np.ceil(np.log2(nbytes)))


@dataclass(frozen=True)
class Footprints:
    """One level's chase and stream footprints (bytes) and whether the chase is warmed (L2) or cold (DRAM)."""

    chase: int
    stream: int
    warm: bool


def footprints(level: str, l2_bytes: int, settings: Settings) -> Footprints:
    """The level's footprints on a part of ``l2_bytes`` of L2: for the L2 a small chase and a stream that fit
    together in a near half; for DRAM a chase of several L2 sizes and a stream the L2 cannot keep."""
    s = settings
    if level == "l2":
        chase = max(2 * s.line_bytes, int(l2_bytes * s.l2_chase_fraction) // s.line_bytes * s.line_bytes)
        return Footprints(chase, power_of_two_at_most(l2_bytes * s.l2_stream_fraction), warm=True)
    chase = int(l2_bytes * s.dram_chase_l2_multiple) // s.line_bytes * s.line_bytes
    return Footprints(chase, power_of_two_at_least(l2_bytes * s.dram_stream_l2_multiple), warm=False)


def steps_per_launch(settings: Settings) -> int:
    """Chase steps one sample's launch takes: the run-up and the timed steps."""
    return settings.run_up_steps + settings.iterations * unroll_of(KERNEL)


def check_no_revisit(nodes: int, settings: Settings) -> None:
    """A cold chase misses on every step only if the sweep's launches, continuing the cycle, never come back
    to a node."""
    launches = 1 + len(settings.warps) * settings.sampling.max_repeats
    if launches * steps_per_launch(settings) > nodes:
        raise ProbeFailure(
            f"the DRAM chase's {launches} launches of {steps_per_launch(settings)} steps would revisit its "
            f"{nodes} nodes: lower the iterations or the repeats, or raise dram_chase_l2_multiple"
        )


def stream_word(fill_byte: int) -> int:
    """The 32-bit word every word of a stream buffer filled with ``fill_byte`` holds."""
    return fill_byte * 0x01010101


def level_ceiling(level: str, request: Request, streaming_sms: int, mhz: float | None) -> tuple[float, str] | None:
    """The most background GB/s the level can serve: DRAM's theoretical peak; for the L2, what the streaming
    SMs' L1s can take in (one 128-byte line a clock each) at the SM clock. None where unknown."""
    device = request.device
    if level == "dram":
        return dram_peak_gbps(device.mem_clock_mhz, device.mem_bus_bits, request.state.get("datasheet", {}))
    clock = mhz or device.sm_clock_nominal_mhz
    if not clock:
        return None
    return streaming_sms * L1_FILL_BYTES_PER_CLOCK * clock / 1000.0, "128 bytes a clock per streaming SM"


def background_gbps(kernel: str, chaser: np.ndarray, streams: np.ndarray) -> float:
    """The streamers' rate, GB/s, after holding every warp to the launch: its lanes' sums right, its SM not the
    chaser's, its span covering the chase window. The sum of each warp's bytes over its own span."""
    _, start, end, _, chaser_sm = (int(v) for v in chaser)
    iterations, first, last, sms, wrong = (streams[:, k].astype(np.int64) for k in range(RECORD_WORDS))
    if wrong.any():
        raise ProbeFailure(f"{kernel}: {int(wrong.sum())} streaming lanes summed words the buffer does not hold")
    if (sms == chaser_sm).any():
        raise ProbeFailure(f"{kernel}: a streaming warp ran on the chaser's SM {chaser_sm}: its load is not the "
                           "rest of the GPU's")  # fmt: skip
    late, early = int((first > start).sum()), int((last < end).sum())
    if late or early:
        raise ProbeFailure(
            f"{kernel}: the stream does not cover the chase window ({start}..{end} ns): {late} warps started "
            f"after it began, {early} ended before it ended; raise run_up_steps"
        )
    return float(np.sum(iterations * WARP_BYTES / (last - first)))  # bytes per ns: GB/s


@dataclass
class Sweep:
    """One level's buffers and its chase, continued from launch to launch."""

    request: Request
    level: str
    settings: Settings
    cycle: Cycle
    chain: Any
    stream: Any
    stream_bytes: int
    flag: Any
    step: int = 0  # chase steps taken so far: where the next launch starts
    ticket: int = 0

    def launch(self, warps: int, warm: int, iterations: int) -> Reading:
        """One launch with ``warps`` streaming warps on each SM but the chaser's, checked."""
        request, s = self.request, self.settings
        launcher, unroll = request.launcher, unroll_of(KERNEL)
        blocks = request.device.sm_count if warps else 1
        streaming = (blocks - 1) * warps
        words = RECORD_WORDS * (1 + streaming)
        out = request.outputs.get(words)
        self.ticket += 1
        start = launcher.address(self.chain) + self.cycle.node_after(self.step) * s.line_bytes
        args = [np.uint64(start), np.uint32(warm), np.uint32(iterations), self.stream,
                np.uint64(self.stream_bytes - 1), np.uint64(streaming * WARP_BYTES), np.uint32(s.polls),
                np.uint32(stream_word(s.fill_byte)), self.flag, np.uint64(self.ticket), out]  # fmt: skip
        values = request.kernels.results(KERNEL, args, out, words, grid=blocks, block=32 * max(warps, 1))
        records = values.reshape(-1, RECORD_WORDS)
        cycles, begin, end, last, _ = (int(v) for v in records[0])
        self.step += warm + iterations * unroll
        node = node_of(last - launcher.address(self.chain), s.line_bytes, self.cycle.nodes, KERNEL)
        if node != self.cycle.node_after(self.step):
            raise ProbeFailure(f"{KERNEL}: chase of {self.cycle.nodes} nodes ended on node {node}, "
                               f"host predicted node {self.cycle.node_after(self.step)}")  # fmt: skip
        gbps = background_gbps(KERNEL, records[0], records[1:]) if streaming else 0.0
        mhz = clock_mhz(cycles, end - begin, CLOCK_WINDOW_NS)
        ceiling = level_ceiling(self.level, request, blocks - 1, mhz or request.state.get("mhz"))
        if ceiling is not None and gbps > ceiling[0]:
            raise ProbeFailure(f"{KERNEL}: {gbps:.0f} GB/s streamed from {self.level}, above its ceiling "
                               f"{ceiling[0]:.0f} GB/s ({ceiling[1]})")  # fmt: skip
        return Reading(cycles / (iterations * unroll), gbps, mhz)


def open_sweep(request: Request, level: str, settings: Settings) -> Sweep:
    """The level's stream buffer written (every byte ``fill_byte``; after the cycle, so for DRAM it flushes the
    cycle's lines from the L2) and its chase cycle, warmed into the L2 for the L2 level."""
    s, launcher = settings, request.launcher
    sizes = footprints(level, request.device.l2_bytes, s)
    nodes = sizes.chase // s.line_bytes
    if not sizes.warm:
        check_no_revisit(nodes, s)
    cycle = random_cycle(nodes, s.seed + LEVELS.index(level))
    chain, stream, flag = launcher.alloc(sizes.chase), launcher.alloc(sizes.stream), launcher.alloc(8)
    launcher.write_cycle(chain, cycle.successor, s.line_bytes)
    launcher.fill(stream, s.fill_byte)
    launcher.fill(flag, 0)
    sweep = Sweep(request, level, s, cycle, chain, stream, sizes.stream, flag)
    if sizes.warm:  # one untimed lap brings the cycle into the L2; its reading is discarded
        sweep.launch(0, nodes, 1)
    return sweep


def sample_point(sweep: Sweep, warps: int, clocks: list[float]) -> Point:
    """One load point's samples until the settings' stopping rule says enough; the SM clocks read go to ``clocks``."""
    point, s = Point(warps), sweep.settings

    def take() -> None:
        reading = sweep.launch(warps, s.run_up_steps, s.iterations)
        point.latencies.append(reading.cycles_per_step)
        point.gbps.append(reading.gbps)
        if reading.mhz is not None:
            clocks.append(reading.mhz)

    sample_until_stable(take, point.latencies, s.sampling)
    return point


def check_not_below_idle(level: str, points: list[Point]) -> None:
    """No loaded point's latency lies below the idle one's, beyond their CIs and one cycle (the clock's
    resolution): more traffic never shortens a queue, so such a point is a probe error."""
    idle_low = median_ci(points[0].latencies)[1]
    for point in points[1:]:
        high = median_ci(point.latencies)[2]
        if high < idle_low - 1.0:
            raise ProbeFailure(
                f"{level}: {point.warps} streaming warps per SM gave {point.latency:.1f} cycles a step, below the "
                f"idle chase's {points[0].latency:.1f} (CI from {idle_low:.1f}): a loaded chase cannot be faster"
            )


def nearest_above(points: list[Point], target_gbps: float) -> Point:
    """The loaded point of least background at or above ``target_gbps``."""
    return min((p for p in points[1:] if p.background >= target_gbps), key=lambda p: p.background)


def level_facts(level: str, points: list[Point], probe_name: str, mhz: float | None) -> tuple[list[Fact], str]:
    """The level's facts from its sweep (idle point first), and a note naming the points they come from."""
    top = max(points[1:], key=lambda p: p.background)
    prefix = f"latency.{level}.loaded"
    idle = fact(f"{prefix}.idle", points[0].latencies, "cycle", probe_name, mhz)
    facts, picked = [idle], []
    for share in (50, 90):
        point = nearest_above(points, share / 100 * top.background)
        facts.append(fact(f"{prefix}.p{share}", point.latencies, "cycle", probe_name, mhz))
        picked.append(f"p{share} from {point.warps} warps/SM at {point.background / top.background:.0%}")
    facts.append(fact(f"{prefix}.max_bandwidth", top.gbps, "GB/s", probe_name))
    facts.append(ratio_fact(f"{prefix}.p90_over_idle", facts[2], idle, probe_name))
    note = (f"100 % = the sweep's top, {top.background:.0f} GB/s at {top.warps} streaming warps/SM; "
            f"{'; '.join(picked)} (nearest point above, not interpolated)")  # fmt: skip
    return facts, note


def ratio_fact(fact_id: str, loaded: Fact, idle: Fact, probe_name: str) -> Fact:
    """``loaded`` over ``idle``, its interval from their CIs' far ends (the two points' samples are not paired)."""
    assert loaded.value and idle.value and loaded.ci and idle.ci
    ratio = loaded.value / idle.value
    return Fact(fact_id, ratio, "ratio", (loaded.ci[0] / idle.ci[1], loaded.ci[1] / idle.ci[0]), [], {}, probe_name)


def level_series(points: list[Point], mhz: float | None) -> dict[str, dict[str, list]]:
    """The sweep as a curve for the plot: background GB/s and the chase's latency per load point."""
    top = max(p.background for p in points)
    bounds = [median_ci(p.latencies)[1:] for p in points]
    return {
        "curve": {
            "warps_per_sm": [p.warps for p in points],
            "background_gbps": [p.background for p in points],
            "fraction_of_max": [p.background / top for p in points],
            "latency_cycles": [p.latency for p in points],
            "latency_ns": [p.latency / mhz * 1000.0 for p in points] if mhz else [],
            "ci_low": [float(b[0]) for b in bounds],
            "ci_high": [float(b[1]) for b in bounds],
        }
    }


def measure_level(request: Request, level: str) -> Measured:
    """One level's probe: its sweep from idle to 32 streaming warps per SM, checked, and its facts."""
    s: Settings = request.settings or Settings()
    probe_name = f"loaded_latency.{level}"
    sweep = open_sweep(request, level, s)
    clocks: list[float] = []
    points = [sample_point(sweep, warps, clocks) for warps in s.warps]
    check_not_below_idle(level, points)
    mhz = float(np.median(clocks)) if clocks else request.state.get("mhz")
    facts, note = level_facts(level, points, probe_name, mhz)
    return Measured(probe_name, ProbeOutcome("ok", note, level_series(points, mhz)), facts)


def measure(request: Request) -> Probes:
    """The family's runnable probes in order, each as (name, step). Cycles convert to ns at the SM clock the
    chaser's own windows read (%clock64 over %globaltimer, under load), else at ``request.state["mhz"]``."""
    steps: dict[str, Callable[[], Measured]] = {
        f"loaded_latency.{level}": partial(measure_level, request, level) for level in LEVELS
    }
    return probe_steps(PROBES, steps, request.runnable)


# ---- the time plan ------------------------------------------------------------------------------


def level_plan(settings: Settings, device: Device, level: str) -> Plan:
    """One level's sweep at its most repeats: the buffers written, the cycle built, the L2 warm lap, and every
    launch with its records read back, each chase step at most LOADED_STEP_FACTOR times the level's bound."""
    s, sizes = settings, footprints(level, device.l2_bytes, settings)
    nodes, step_cycles = sizes.chase // s.line_bytes, (L2_STEP_CYCLES if sizes.warm else DRAM_STEP_CYCLES)
    setup = Plan(0, 3, dram_s(sizes.chase + sizes.stream, device) + link_s(8 * nodes, pinned=False),
                 cycle_host_s(nodes))  # fmt: skip
    warm = kernel_runs(1, cycles_s(nodes * step_cycles, device)) if sizes.warm else Plan(0, 0, 0.0)
    launches = len(s.warps) * s.sampling.max_repeats
    records = sum(RECORD_WORDS * (1 + (device.sm_count - 1) * w) for w in s.warps) * s.sampling.max_repeats
    work = cycles_s(launches * steps_per_launch(s) * step_cycles * LOADED_STEP_FACTOR, device)
    return setup + warm + kernel_runs(launches, work, readback_host_s(8 * records))


def plan(settings: Settings, device: Device) -> Plan:
    """Every probe of the family at its most repeats on ``device`` (see :mod:`gpuprobe.families.planning`)."""
    return combined(probe(level_plan(settings, device, level)) for level in LEVELS)


# A first contact: the L2 level's idle point and one loaded point, one launch each (the chase's end, the
# streamers' sums, SMs and window all checked).
SMOKE = Smoke(
    probes=("loaded_latency.l2",),
    settings=Settings(warps=(0, 8), iterations=8, sampling=ONE_SAMPLE),
)


FAMILY = Family(
    name="loaded_latency",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
    sections=SECTIONS,
    invariants=INVARIANTS,
)
