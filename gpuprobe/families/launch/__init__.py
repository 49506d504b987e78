"""The launch family: what launching a kernel costs, on the host and on the GPU.

``launch.stream``: host enqueue latency through each binding (CuPy, cuda.bindings, PyCUDA where
installed), the GPU's back-to-back spacing of queued launches, and the end-to-end additional latency
per launch. ``launch.graph``: CUDA graph replay, per node and per replay. ``launch.event``: event
record and synchronize.

Every timed launch is the stamp kernel (ptx/launch/launch.ptx): one thread writes %globaltimer at its start
into the slot an atomic increment gives it, so repeated launches and graph nodes share their arguments,
and the slots come out in the order the launches ran. After every run the host checks the counter
counted every launch and every stamp was written, in order (:func:`checked_stamps`).

Costs that fixed overheads would pollute are long-minus-short (:class:`~gpuprobe.families.differencing.Difference`):
(time of N launches - time of 1) / (N - 1), the "additional latency" method. Host times are wall clocks
(time.perf_counter) taken in the runner; they depend on the host CPU, the driver and the binding as much as
on the GPU. A graph is replayed ``graph_replays`` times at every size, far fewer than the launch queue
holds: with more, the host blocks on a full queue while the GPU is held, and the host's time per replay
measures the GPU instead (the first H200 run replayed a 1-node graph 2000 times and read a host cost per
replay of 52 us against 3 us at 200 replays: a per-node host cost of -0.041 us).

Queued launches wait behind a holding launch that spins ``hold_ns`` (``hold_us_per_launch`` per queued
launch), so the GPU runs them back to back only once the host has enqueued them all. A busy host can
outlast the hold once (an interrupt, a page fault): that sample is not kept, the hold is doubled for the
rest of the probe and the sample taken again, at most :data:`HOLD_DOUBLINGS` times before the probe fails.
A launch path this machine cannot use (:class:`~gpuprobe.runner.launcher.LaunchPathUnavailable`, or an optional
binding that cannot launch) is left out, its fact not run with the reason.

:func:`plan` counts what measuring every probe costs at most, from the settings alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.differencing import EVENTS, HOST_CLOCK, Difference, Lengths
from gpuprobe.families.measuring import fact, unmeasured
from gpuprobe.families.planning import held_batch_s
from gpuprobe.families.sampling import ONE_SAMPLE, Stopping, sample_until_stable
from gpuprobe.families.stepping import probe_steps
from gpuprobe.judge.invariants import Check
from gpuprobe.output.sections import Section
from gpuprobe.runner.checked import POISON_BYTE, Kernels, unwritten
from gpuprobe.runner.launcher import Launcher, LaunchPaths, LaunchPathUnavailable, capability

PROBES = ["launch.stream", "launch.graph", "launch.event"]
STAMP = "gp_launch_stamp"
VIAS = {"cupy": "cupy", "cuda-bindings": "cuda_bindings", "pycuda": "pycuda"}  # launch path -> fact id part
OPTIONAL_VIAS = frozenset({"pycuda"})  # left out, with the reason, when it cannot launch; never a failure
HOLD_DOUBLINGS = 3  # an outlasted hold is doubled at most this often per probe (to 8 x hold_ns)
MAX_GRAPH_REPLAYS = 200  # replays the host enqueues at once without filling the launch queue (seen on an H200)


@dataclass(frozen=True)
class Settings:
    launches: int = 100  # N stamp launches per stream sample (minus 1 launch)
    hold_us_per_launch: float = 20.0  # the holding launch's spin per queued launch: outlasts any host enqueue
    graph_nodes: tuple[int, ...] = (1, 10, 100, 1000)
    graph_replays: int = 32  # replays of each graph per sample: below the launch queue's depth (200 never filled it)
    events: int = 200
    sampling: Stopping = Stopping(3, 7, 0.03, 0.5)  # per launch path, graph sizes and event calls

    def __post_init__(self) -> None:
        if self.launches < 2 or self.events < 1 or not 1 <= self.graph_replays <= MAX_GRAPH_REPLAYS:
            raise ValueError(
                f"Settings: launches must be at least 2, events at least 1, graph_replays 1 to {MAX_GRAPH_REPLAYS}"
            )
        nodes = list(self.graph_nodes)
        if len(nodes) < 2 or sorted(set(nodes)) != nodes or nodes[0] < 1:
            raise ValueError(f"Settings.graph_nodes must be increasing sizes >= 1, at least two: {self.graph_nodes}")
        if self.hold_us_per_launch <= 0:
            raise ValueError(f"Settings.hold_us_per_launch must be above 0, not {self.hold_us_per_launch}")

    @property
    def hold_ns(self) -> int:
        """How long the holding launch spins before each queued run of launches."""
        return int(self.launches * self.hold_us_per_launch * 1000)

    @property
    def capacity(self) -> int:
        """Stamp slots: enough for the largest run of any probe (a queued run has one more, the hold's)."""
        return max(self.launches, self.graph_nodes[-1] * self.graph_replays)


@dataclass
class _Stamps:
    """The stamp kernel's buffers and checked runs."""

    kernels: Kernels
    settings: Settings
    counter: Any = None
    slots: Any = None
    hold_ns: int = 0  # the holding launch's spin: the settings' until an enqueue outlasts it
    doublings: int = 0

    @property
    def launcher(self) -> LaunchPaths:
        """The launcher, asked for the launch paths this family times (enqueue, graph replay, event costs)."""
        return capability(self.kernels.launcher, LaunchPaths)

    def __post_init__(self) -> None:
        self.counter = self.launcher.alloc(8)
        self.slots = self.launcher.alloc(8 * (self.settings.capacity + 1))
        self.hold_ns = self.settings.hold_ns

    def args(self, hold_ns: int = 0) -> list[object]:
        return [self.counter, np.uint32(self.settings.capacity + 1), np.uint64(hold_ns), self.slots]

    def fresh(self) -> None:
        self.launcher.fill(self.counter, 0)
        self.launcher.fill(self.slots, POISON_BYTE)

    def queued(self, count: int, via: str) -> tuple[float, np.ndarray]:
        """Host seconds to enqueue ``count`` stamp launches through ``via`` behind a holding one (which
        stamps slot 0 and spins), and their stamps, all checked. An enqueue that outlasted the hold is
        taken again behind a hold twice as long (kept for later samples), at most HOLD_DOUBLINGS times."""
        while True:
            self.fresh()
            hold = self.hold_ns
            self.launcher.enqueue_seconds(STAMP, 1, 1, self.args(hold), 1, "cupy", wait=False)
            seconds = self.launcher.enqueue_seconds(STAMP, 1, 1, self.args(), count, via)
            stamps = checked_stamps(self.launcher, self.counter, self.slots, count + 1)
            if seconds * 1e9 < hold:
                return seconds, stamps[1:]
            if self.doublings == HOLD_DOUBLINGS:
                raise ProbeFailure(
                    f"enqueueing {count} launches through {via} took {seconds * 1e6:.0f} us, longer than the "
                    f"{hold / 1e3:.0f} us hold, doubled {HOLD_DOUBLINGS} times already: the host is too busy"
                )
            self.doublings += 1
            self.hold_ns *= 2


def checked_stamps(launcher: Launcher, counter: Any, slots: Any, count: int) -> np.ndarray:
    """The first ``count`` stamps, after checking the kernel counted ``count`` launches, wrote every stamp,
    and the stamps never go back in time (launches of one stream run in order)."""
    counted = int(launcher.read(counter, "uint32", 1)[0])
    if counted != count:
        raise ProbeFailure(f"{STAMP}: {count} launches enqueued, the kernel counted {counted}")
    stamps = launcher.read(slots, "uint64", count)
    if unwritten(stamps):
        raise ProbeFailure(f"{STAMP}: not every one of the {count} launches wrote its stamp")
    steps = np.diff(stamps.astype(np.int64))
    if np.any(steps < 0):
        slot = int(np.flatnonzero(steps < 0)[0]) + 1
        raise ProbeFailure(f"{STAMP}: launch {slot} stamped {-int(steps[slot - 1])} ns before launch {slot - 1}")
    return stamps


def mean_spacing_us(stamps: np.ndarray) -> float:
    """The mean spacing of consecutive stamps, in us: the first to the last over the gaps between. Not
    the median of the gaps, which %globaltimer's tick (about 1 us unless a profiler refines it)
    would quantise to whole ticks when launches are a microsecond or two apart."""
    return float(int(stamps[-1]) - int(stamps[0])) / (len(stamps) - 1) / 1e3


@dataclass
class _StreamSamples:
    host: dict[str, list[float]] = field(default_factory=dict)
    unavailable: dict[str, str] = field(default_factory=dict)
    spacing: list[float] = field(default_factory=list)
    additional: list[float] = field(default_factory=list)


def stream_samples(stamps: _Stamps, via: str) -> tuple[list[float], list[float]]:
    """Through ``via``: the host's additional enqueue cost per launch (us) and the GPU's mean spacing of
    the queued launches (us), one pair per sample; the first launch (which loads the path) untimed."""
    s = stamps.settings
    spacing: list[float] = []

    def enqueue(count: int) -> float:
        seconds, stamped = stamps.queued(count, via)
        if count > 1:
            spacing.append(mean_spacing_us(stamped))
        return seconds

    lengths = Lengths(1, s.launches, 1)
    host = Difference(enqueue, lengths, f"{STAMP} through {via}", HOST_CLOCK, longest=s.capacity).samples(s.sampling)
    return [seconds * 1e6 for seconds in host], spacing


def measure_stream(stamps: _Stamps) -> Measured:
    probe, s = PROBES[0], stamps.settings
    found = _StreamSamples()
    for via in VIAS:
        try:
            found.host[via], spacing = stream_samples(stamps, via)
        except ProbeFailure:  # a self-check failed: never taken for a path that cannot launch
            raise
        except LaunchPathUnavailable as exc:
            found.unavailable[via] = str(exc)
            continue
        except Exception as exc:  # an optional binding that is installed but cannot launch here
            if via not in OPTIONAL_VIAS:
                raise
            found.unavailable[via] = f"{via} could not launch ({type(exc).__name__}: {exc})"
            continue
        found.spacing += spacing

    def end_to_end(count: int) -> float:
        stamps.fresh()
        ms = stamps.kernels.time(STAMP, stamps.args(), grid=1, block=1, count=count)
        checked_stamps(stamps.launcher, stamps.counter, stamps.slots, count)
        return ms

    launches = Difference(end_to_end, Lengths(1, s.launches, 1), STAMP, EVENTS, longest=s.capacity)
    found.additional = [ms * 1e3 for ms in launches.samples(s.sampling)]
    facts = [fact(f"launch.stream.host_latency.{VIAS[via]}", v, "us", probe) for via, v in found.host.items()]
    facts += [unmeasured(f"launch.stream.host_latency.{VIAS[via]}", "us", probe, why)
              for via, why in found.unavailable.items()]  # fmt: skip
    facts += [fact("launch.stream.gpu_spacing", found.spacing, "us", probe),
              fact("launch.stream.additional_latency", found.additional, "us", probe)]  # fmt: skip
    notes = [f"{via} left out: {why}" for via, why in found.unavailable.items()]
    if stamps.doublings:
        notes.append(f"an enqueue outlasted the hold: samples retaken behind a {stamps.hold_ns / 1e3:.0f} us hold")
    return Measured(probe, ProbeOutcome("ok", "; ".join(notes)), facts)


@dataclass
class _GraphPoint:
    host: list[float] = field(default_factory=list)  # seconds per replay
    gpu: list[float] = field(default_factory=list)
    spacing: list[float] = field(default_factory=list)  # us between consecutive nodes of one replay


def graph_point(stamps: _Stamps, nodes: int) -> tuple[float, float, float | None]:
    """One run of a graph of ``nodes`` stamp nodes replayed ``graph_replays`` times: host and GPU seconds
    per replay, and the spacing of consecutive nodes within a replay (the median over replays of each
    replay's mean spacing; None for a 1-node graph), stamps checked."""
    replays = stamps.settings.graph_replays
    stamps.fresh()
    host, gpu = stamps.launcher.graph_replay(STAMP, 1, 1, stamps.args(), nodes, replays)
    stamped = checked_stamps(stamps.launcher, stamps.counter, stamps.slots, nodes * replays)
    per_replay = stamped.astype(np.int64).reshape(replays, nodes)
    spacing = float(np.median([mean_spacing_us(replay) for replay in per_replay])) if nodes > 1 else None
    return host / replays, gpu / replays, spacing


def measure_graph(stamps: _Stamps) -> Measured:
    """Per node: the GPU's cost (the largest graph minus the smallest, over the nodes between: a resolved
    difference) and the host's (the same two runs' host seconds; it may be zero within its noise: a
    graph launch is one call). Every size of ``graph_nodes`` in each sample, for the curve."""
    probe, s = PROBES[1], stamps.settings
    points: dict[int, _GraphPoint] = {}

    def replayed(nodes: int) -> float:
        """GPU milliseconds of the replays of a graph of ``nodes`` (the Difference's reading); the untimed
        warm-up's readings are not kept (it pays the graph path's first use)."""
        host, gpu, spacing = graph_point(stamps, nodes)
        if per_node.warmed:
            point = points.setdefault(nodes, _GraphPoint())
            point.host.append(host)
            point.gpu.append(gpu)
            if spacing is not None:
                point.spacing.append(spacing)
        return gpu * s.graph_replays * 1e3

    lengths = Lengths(s.graph_nodes[0], s.graph_nodes[-1], s.graph_replays)
    per_node = Difference(replayed, lengths, f"graphs of {STAMP}", EVENTS, longest=s.capacity // s.graph_replays)
    per_node_gpu: list[float] = []
    per_node_host: list[float] = []

    def take() -> None:
        per_node_gpu.append(per_node.sample() * 1e3)  # ms per node and replay -> us
        short, long = per_node.lengths.short, per_node.lengths.long
        per_replay = Lengths(short, long, 1)  # the host's seconds are per replay already
        per_node_host.append(per_replay.per_step(points[short].host[-1], points[long].host[-1]) * 1e6)
        for nodes in s.graph_nodes[1:-1]:  # the curve's middle sizes
            replayed(nodes)

    sample_until_stable(take, per_node_gpu, s.sampling)
    small, large = points[per_node.lengths.short], points[per_node.lengths.long]
    facts = [
        fact("launch.graph.per_node.gpu", per_node_gpu, "us", probe),
        fact("launch.graph.per_node.host", per_node_host, "us", probe),
        fact("launch.graph.latency", [g * 1e6 for g in small.gpu], "us", probe),
        fact("launch.graph.gpu_spacing", large.spacing, "us", probe),
    ]
    curve = sorted(points.items())
    series = {"graph": {
        "nodes": [float(n) for n, _ in curve],
        "gpu_us_per_replay": [float(np.median(p.gpu)) * 1e6 for _, p in curve],
        "host_us_per_replay": [float(np.median(p.host)) * 1e6 for _, p in curve],
    }}  # fmt: skip
    note = f"graphs of {', '.join(str(n) for n, _ in curve)} nodes, each replayed {s.graph_replays} times a sample"
    return Measured(probe, ProbeOutcome("ok", note, series), facts)


MAX_EVENT_S = 1e-3  # an event call slower than a millisecond is not a measurement of the call


def measure_event(stamps: _Stamps) -> Measured:
    probe, s = PROBES[2], stamps.settings
    found: dict[str, list[float]] = {"record": [], "synchronize": []}

    def take() -> None:
        costs = stamps.launcher.event_costs(s.events)
        for what, samples in found.items():
            seconds = costs[what]
            if not 0 < seconds < MAX_EVENT_S:
                raise ProbeFailure(f"event {what} took {seconds * 1e6:.3f} us per call: not a plausible call cost")
            samples.append(seconds * 1e6)

    sample_until_stable(take, found["record"], s.sampling)
    facts = [fact(f"launch.event.{what}", samples, "us", probe) for what, samples in found.items()]
    return Measured(probe, ProbeOutcome("ok"), facts)


def _graph_below_stream(facts: dict[str, Fact], device: Device) -> list[Check]:
    """A kernel replayed from a graph costs the GPU less than a plain stream launch does end to end."""
    node, stream = facts.get("launch.graph.per_node.gpu"), facts.get("launch.stream.additional_latency")
    if node is None or stream is None or node.value is None or stream.value is None:
        return []
    ok = node.unit == stream.unit and node.value < stream.value
    relation = "<" if ok else "≥"
    detail = (
        f"launch.graph.per_node.gpu = {node.value:g} {node.unit} {relation} "
        f"launch.stream.additional_latency = {stream.value:g} {stream.unit}"
    )
    return [Check("graph_node_below_stream_launch", ok, detail, (node.id, stream.id))]


INVARIANTS = (_graph_below_stream,)

SECTIONS = (
    Section(
        "Launch overhead",
        ("launch.stream.", "launch.graph.", "launch.event."),
        ("launch.",),
        blurb="Host enqueue cost per launch by binding, the GPU's back-to-back spacing, CUDA graph replay per node "
        "and event costs. Host-side numbers depend on the CPU, driver and binding as much as on the GPU.",
    ),
)


STAMP_S = 10e-6  # one stamp launch on the GPU, queued, at most
GRAPH_NODE_S = 2e-6  # one stamp node of a replayed graph on the GPU, at most (0.95 us on an H200, run 2)
ENQUEUE_S = 20e-6  # one launch enqueued or captured by the host, at most (CuPy takes 5 to 8 us)
GRAPH_BUILD_S = 0.05  # capturing, instantiating and uploading one graph, beyond its launches' enqueueing
EVENT_CALL_S = 50e-6  # one event created, recorded or synchronized, at most
QUEUED_CALLS = 6  # one queued run: two fresh fills, the hold's and the run's enqueueing, two reads
TIMED_CALLS = 5  # one end-to-end or graph sample: two fresh fills, the timed batch or replay, two reads


def plan(settings: Settings, device: Device) -> Plan:
    """What the three probes cost at most: every sample at its most repeats through every launch path;
    the queued runs behind the largest hold (:data:`HOLD_DOUBLINGS` doublings of ``hold_ns``) and the
    runs retaken behind the growing one; each stamp launch on the GPU at :data:`STAMP_S` (a graph's node at
    :data:`GRAPH_NODE_S`); the runner's hold before each timed batch or replay; graphs built once per
    sample; the event calls on the host."""
    s, repeats = settings, settings.sampling.max_repeats
    queued_runs = len(VIAS) * (1 + 2 * repeats) + HOLD_DOUBLINGS
    queued_s = queued_runs * (s.hold_ns * 2**HOLD_DOUBLINGS / 1e9 + (s.launches + 1) * STAMP_S)
    end_to_end_s = repeats * (held_batch_s(1, STAMP_S, device) + held_batch_s(s.launches, STAMP_S, device))
    stream = Plan(1, queued_runs * QUEUED_CALLS + repeats * 2 * TIMED_CALLS, queued_s + end_to_end_s)
    graph_s = sum(held_batch_s(s.graph_replays, n * GRAPH_NODE_S, device) for n in s.graph_nodes)
    builds_s = sum(GRAPH_BUILD_S + n * ENQUEUE_S for n in s.graph_nodes)  # the replays' enqueueing: in the hold
    graph = Plan(1, repeats * len(s.graph_nodes) * TIMED_CALLS, repeats * graph_s, repeats * builds_s)
    event = Plan(1, repeats, 0.0, repeats * 3 * s.events * EVENT_CALL_S)
    return stream + graph + event


# First contact: the stream probe (the stamp kernel through every binding behind a hold, its stamps
# checked) and the graph probe (one- and 64-node graphs replayed twice): one sample each, 64 queued
# launches behind a hold with room for a slow host: each difference long enough for its timer to resolve
# (at 1 to 2 us a launch or node, 100 ticks of the CUDA events).
SMOKE_SETTINGS = Settings(launches=64, hold_us_per_launch=100.0, graph_nodes=(1, 64), graph_replays=2, events=1,
                          sampling=ONE_SAMPLE)  # fmt: skip
SMOKE = Smoke(probes=("launch.stream", "launch.graph"), settings=SMOKE_SETTINGS)


def measure(request: Request) -> Probes:
    """The runnable probes in order, as (name, step); a failed self-check raises ProbeFailure."""
    settings = request.settings or Settings()
    stamps = cache(lambda: _Stamps(request.kernels, settings))  # made by the first probe measured
    measures = {PROBES[0]: measure_stream, PROBES[1]: measure_graph, PROBES[2]: measure_event}
    steps = {name: lambda measure=measure: measure(stamps()) for name, measure in measures.items()}
    return probe_steps(PROBES, steps, request.runnable)


FAMILY = Family(
    name="launch",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
    sections=SECTIONS,
    invariants=INVARIANTS,
)
