"""The host-transfer family: host <-> device bandwidth and latency, copy engine against SMs.

The probes ``host_transfer.h2d``, ``.d2h`` and ``.bidirectional`` each measure one direction two ways:

* the copy engine (``HostCopies.time_host_copy``: cudaMemcpy on its own buffers, host wall clock),
  from pinned and from pageable host memory: bandwidth as the extra bytes over the extra time
  between a small and a large copy (``small_bytes``, ``large_bytes``), so the fixed cost of a call
  cancels; and, one way at a time, the latency of small pinned copies (``latency_sizes``, many
  back to back, the time per copy);
* the SMs (``gp_ht_sm_copy``): a full grid copies 16-byte chunks between device memory and pinned
  host memory it addresses directly (``HostCopies.alloc_pinned``), timed with events at the same two
  sizes and differenced alike. The copy is checked twice: every thread's sum of the words it moved
  against the host's, and the destination, read back, against the source.

The copy engine's buffers belong to the runtime, so its copies cannot be checked; a timing that
makes no sense (a large copy no slower than a small one, a rate no link reaches) fails the probe.

``host_transfer.sm_latency`` times one SM load's round trip to pinned host memory: a one-thread
chase through a random cycle written there (:mod:`gpuprobe.families.chase`), every load fetched again.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property, partial
from typing import Any

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.chase import OUT_WORDS, memory_chase, random_cycle
from gpuprobe.families.differencing import EVENTS, Lengths, resolved_step
from gpuprobe.families.measuring import fact
from gpuprobe.families.planning import (
    GEN4_LINK,
    NO_WORK,
    Link,
    compare_host_s,
    cycle_host_s,
    generate_host_s,
    kernel_runs,
    probe,
    sum_host_s,
)
from gpuprobe.families.sampling import ONE_SAMPLE, Stopping, sample_until_stable
from gpuprobe.families.stepping import probe_steps
from gpuprobe.families.streams import check_sums, chunk_sums, pattern, stream_sums
from gpuprobe.kernels.registry import unroll_of
from gpuprobe.output.sections import Section
from gpuprobe.runner.launcher import HostCopies, capability

PROBES = ["host_transfer.h2d", "host_transfer.d2h", "host_transfer.bidirectional", "host_transfer.sm_latency"]
KERNEL = "gp_ht_sm_copy"
CHASE_KERNEL = "gp_ht_sm_chase"
LINK_STEP_S = 5e-6  # the most one load from host memory is expected to take, for the time plan
CHUNK = 16  # bytes per load and store (a thread moves its kernel's declared unroll of them per iteration)
MIB = 1 << 20


def check_copy_settings(settings: Any) -> None:
    """The SM copy's and the chase's settings, as this family and the GPU-to-GPU one share them: ``blocks``
    x ``threads``, ``small_bytes`` < ``large_bytes`` in whole ``iteration_bytes``, and the chase's
    ``chase_iterations`` (short < long), ``chase_nodes`` and whole-word ``chase_stride``; ValueError if not."""
    if settings.blocks < 1 or settings.threads < 1:
        raise ValueError(f"Settings: the SM copy needs blocks and threads, got {settings.blocks} x {settings.threads}")
    step = settings.iteration_bytes
    for name in ("small_bytes", "large_bytes"):
        value = getattr(settings, name)
        if value < step or value % step:
            raise ValueError(f"Settings.{name} must be a positive multiple of {step} bytes, got {value}")
    if settings.large_bytes <= settings.small_bytes:
        raise ValueError("Settings: large_bytes must exceed small_bytes")
    short, long = settings.chase_iterations
    if not 1 <= short < long or settings.chase_nodes < 2 or settings.chase_stride % 8:
        raise ValueError("Settings: chase_iterations 1 <= short < long, 2+ chase_nodes, chase_stride of whole words")


@dataclass(frozen=True)
class Settings:
    small_bytes: int = 64 * MIB
    large_bytes: int = 256 * MIB
    latency_sizes: tuple[int, ...] = (4, 64, 1024, 16 * 1024, 64 * 1024)
    latency_copies: int = 40  # back-to-back copies per latency sample
    blocks: int = 1024  # the SM copy's grid: 1024 x 256 threads, four chunks each, per iteration
    threads: int = 256
    sampling: Stopping = Stopping(3, 5, 0.02, 0.6)  # each measurement: 3 to 5 samples, 0.6 s at most
    max_gbps: float = 2000.0  # no host link moves more: a faster reading is a broken timing
    chase_nodes: int = 256  # the SM-load latency chase: 256 nodes in pinned host memory,
    chase_stride: int = 256
    chase_iterations: tuple[int, int] = (2, 12)  # short and long timed iterations (16 loads each)
    seed: int = 20240903

    def __post_init__(self) -> None:
        for name in ("latency_sizes", "chase_iterations"):
            object.__setattr__(self, name, tuple(getattr(self, name)))  # JSON hands lists back
        check_copy_settings(self)
        if not self.latency_sizes or min(self.latency_sizes) < 1 or self.latency_copies < 1:
            raise ValueError("Settings: latency_sizes must be positive sizes and latency_copies at least 1")

    @property
    def threads_total(self) -> int:
        return self.blocks * self.threads

    @property
    def iteration_bytes(self) -> int:
        """Bytes the SM copy moves per loop iteration of the whole grid."""
        return self.threads_total * unroll_of(KERNEL) * CHUNK


def rate_gbps(small_bytes: int, small_ms: float, large_bytes: int, large_ms: float, limit: float, what: str) -> float:
    """The extra bytes over the extra time, GB/s, the difference resolved by the CUDA events
    (:func:`~gpuprobe.families.differencing.resolved_step`); ProbeFailure for a timing no link could give."""
    ms_per_byte = resolved_step(Lengths(small_bytes, large_bytes, 1), small_ms, large_ms, EVENTS, what)
    gbps = 1e-6 / ms_per_byte
    if gbps > limit:
        raise ProbeFailure(f"{what}: {gbps:.0f} GB/s is beyond any link ({limit:.0f} GB/s)")
    return gbps


SMALL_COPY_S = 50e-6  # one small pinned copy back to back with others, call included, at most


def _checked_copy(nbytes: int, ways: int, link: Link, device_destination: bool) -> Plan:
    """``_Copies.sm_copy``: the destination zeroed, the SM copy (its threads' sums checked), the
    destination read back and every word compared."""
    read_back = link.seconds(nbytes, pinned=False) if device_destination else 0.0
    return kernel_runs(1, link.seconds(ways * nbytes) + read_back, compare_host_s(nbytes)) + Plan(0, 2, 0.0)


def plan(settings: Settings, device: Device, link: Link = GEN4_LINK) -> Plan:
    """Every probe at its most repeats over ``link`` (see :mod:`gpuprobe.families.planning`): each direction
    checks one SM copy, then samples the copy engine from pinned and pageable memory and the SMs, each a
    small and a large copy; h2d and d2h also time small pinned copies; the buffers are made once."""
    s = settings
    pair, r = s.small_bytes + s.large_bytes, s.sampling.max_repeats
    made = generate_host_s(s.large_bytes) + sum_host_s(s.large_bytes)  # the pattern, and its threads' sums
    buffers = Plan(0, 0, link.seconds(s.large_bytes, pinned=False), made)
    buffers += _checked_copy(s.large_bytes, 1, link, device_destination=False)  # the pinned source
    latency = Plan(0, r * len(s.latency_sizes), r * len(s.latency_sizes) * s.latency_copies * SMALL_COPY_S)
    directions = []
    for ways, destination, timed_latency in ((1, True, True), (1, False, True), (2, False, False)):  # h2d, d2h, both
        copied = _checked_copy(s.large_bytes, ways, link, destination)
        engine = Plan(0, 4 * r, r * (link.seconds(ways * pair) + link.seconds(ways * pair, pinned=False)))
        sms = Plan(0, 2 * r, r * link.seconds(ways * pair))  # a small and a large copy, event-timed
        directions.append(probe(copied, engine, sms, latency if timed_latency else NO_WORK))
    steps = r * (2 * s.chase_nodes + unroll_of(CHASE_KERNEL) * sum(s.chase_iterations))
    chase = probe(Plan(0, 1, 0.0, cycle_host_s(s.chase_nodes)), kernel_runs(2 * r, steps * LINK_STEP_S))
    return sum(directions, buffers + chase)


@dataclass
class _Copies:
    """The SM copy's ``large_bytes`` buffers, made once, the source pattern they hold, and each thread's
    expected sum by the bytes a copy moves."""

    request: Request
    buffers: dict[str, Any] = field(default_factory=dict)
    source: np.ndarray | None = None
    sums: dict[int, np.ndarray] = field(default_factory=dict)  # bytes copied -> each thread's expected sum

    @cached_property
    def settings(self) -> Settings:
        return self.request.settings or Settings()

    def words(self) -> np.ndarray:
        if self.source is None:
            self.source = pattern(self.settings.large_bytes // 4)
        return self.source

    def buffer(self, name: str) -> Any:
        """A ``large_bytes`` buffer, made once: "device" (holding the source pattern), "scratch"
        (device), "pinned" (host, holding the source pattern), "pinned_out" (host)."""
        launcher = self.request.launcher
        if name not in self.buffers:
            nbytes = self.settings.large_bytes
            if name == "device":
                self.buffers[name] = launcher.upload(self.words())
            elif name == "scratch":
                self.buffers[name] = launcher.alloc(nbytes)
            elif name == "pinned":
                pinned = capability(launcher, HostCopies).alloc_pinned(nbytes)
                self.sm_copy(self.buffer("device"), pinned, nbytes)  # kept only once the copy checked out
                self.buffers[name] = pinned
            else:
                self.buffers[name] = capability(launcher, HostCopies).alloc_pinned(nbytes)
        return self.buffers[name]

    def sm_copy(self, src: Any, dst: Any, nbytes: int) -> None:
        """Copy ``nbytes`` with the SMs and check it: each thread's sum, then every copied word."""
        s, launcher = self.settings, self.request.launcher
        out = self.request.outputs.get(s.threads_total)
        launcher.fill(dst, 0)  # so a copy that wrote nothing cannot pass on an earlier one's bytes
        args = [src, dst, np.uint32(nbytes // s.iteration_bytes), out]
        sums = self.request.kernels.results(KERNEL, args, out, s.threads_total, grid=s.blocks, block=s.threads)
        if nbytes not in self.sums:
            self.sums[nbytes] = stream_sums(chunk_sums(self.words()[: nbytes // 4]), s.threads_total)
        check_sums(KERNEL, sums, self.sums[nbytes], "thread")
        copied = launcher.read(dst, "uint32", nbytes // 4)
        bad = np.flatnonzero(copied != self.words()[: nbytes // 4])
        if bad.size:
            word = int(bad[0])
            raise ProbeFailure(
                f"{KERNEL}: destination word {word} is {int(copied[word]):#x}, expected {int(self.words()[word]):#x} "
                f"({bad.size} words wrong)"
            )

    def sm_rate(self, src: Any, dst: Any, ways: int) -> float:
        """One sample of the SM copy's rate: the large copy minus the small one, event-timed; ``ways``
        is 2 when both ends are host memory (every byte crosses the link each way)."""
        s, out = self.settings, self.request.outputs.get(self.settings.threads_total)

        def ms(nbytes: int) -> float:
            args = [src, dst, np.uint32(nbytes // s.iteration_bytes), out]
            return self.request.kernels.time(KERNEL, args, grid=s.blocks, block=s.threads)

        small = ms(s.small_bytes)
        return rate_gbps(ways * s.small_bytes, small, ways * s.large_bytes, ms(s.large_bytes), s.max_gbps, KERNEL)


def _sampled(take: Callable[[], float], settings: Settings) -> list[float]:
    samples: list[float] = []
    sample_until_stable(lambda: samples.append(take()), samples, settings.sampling)
    return samples


def _engine_rate(copies: _Copies, direction: str, pinned: bool) -> float:
    """One sample of the copy engine's rate ``direction`` ("h2d", "d2h" or "both": bytes each way)."""
    s, launcher = copies.settings, capability(copies.request.launcher, HostCopies)
    ways = 2 if direction == "both" else 1
    small = launcher.time_host_copy(s.small_bytes, direction, pinned)
    large = launcher.time_host_copy(s.large_bytes, direction, pinned)
    what = f"{'pinned' if pinned else 'pageable'} {direction} copy"
    return rate_gbps(ways * s.small_bytes, small, ways * s.large_bytes, large, s.max_gbps, what)


def _latencies(copies: _Copies, direction: str, probe: str) -> tuple[Fact, dict[str, list[float]]]:
    """Per-copy time of small pinned copies vs size; the fact is the smallest size's."""
    s = copies.settings
    per_size: list[list[float]] = []
    for size in sorted(s.latency_sizes):

        def take(size: int = size) -> float:
            ms = capability(copies.request.launcher, HostCopies).time_host_copy(size, direction, True, s.latency_copies)
            if not ms > 0:
                raise ProbeFailure(f"{s.latency_copies} copies of {size} bytes {direction} took {ms} ms")
            return ms * 1e3 / s.latency_copies

        per_size.append(_sampled(take, s))
    sizes = [float(x) for x in sorted(s.latency_sizes)]
    series = {"size_bytes": sizes, "latency_us": [float(np.median(x)) for x in per_size]}
    return fact(f"host.{direction}.latency", per_size[0], "us", probe), series


_DIRECTIONS = {  # probe -> (copy-engine direction, fact prefix, SM fact, SM source and destination buffers)
    "host_transfer.h2d": ("h2d", "host.h2d", "host.sm_read.bandwidth", ("pinned", "scratch")),
    "host_transfer.d2h": ("d2h", "host.d2h", "host.sm_write.bandwidth", ("device", "pinned_out")),
    "host_transfer.bidirectional": (
        "both",
        "host.bidirectional",
        "host.sm_bidirectional.bandwidth",
        ("pinned", "pinned_out"),
    ),
}


def measure_direction(copies: _Copies, probe: str) -> Measured:
    direction, prefix, sm_fact, (src_name, dst_name) = _DIRECTIONS[probe]
    s = copies.settings
    src, dst = copies.buffer(src_name), copies.buffer(dst_name)
    copies.sm_copy(src, dst, s.large_bytes)
    pinned, pageable = (partial(_engine_rate, copies, direction, kind) for kind in (True, False))
    facts = [
        fact(f"{prefix}.pinned.bandwidth", _sampled(pinned, s), "GB/s", probe),
        fact(f"{prefix}.pageable.bandwidth", _sampled(pageable, s), "GB/s", probe),
        fact(sm_fact, _sampled(lambda: copies.sm_rate(src, dst, 2 if direction == "both" else 1), s), "GB/s", probe),
    ]
    series: dict[str, dict[str, list]] = {}
    if direction != "both":
        latency, series["latency"] = _latencies(copies, direction, probe)
        facts.append(latency)
    note = ", ".join(f"{f.id.removeprefix('host.')} {f.value:.1f} {f.unit}" for f in facts)
    return Measured(probe, ProbeOutcome("ok", note, series), facts)


def measure_sm_latency(request: Request, probe: str) -> Measured:
    """One SM load's round trip to pinned host memory, from a chase through it."""
    s, launcher = request.settings or Settings(), request.launcher
    cycle = random_cycle(s.chase_nodes, s.seed)
    buffer = capability(launcher, HostCopies).alloc_pinned(s.chase_nodes * s.chase_stride)
    launcher.write_cycle(buffer, cycle.successor, s.chase_stride)
    out = request.outputs.get(OUT_WORDS)
    chase = memory_chase(request.kernels, CHASE_KERNEL, buffer, cycle, s.chase_stride, unroll_of(CHASE_KERNEL), out)
    samples = chase.latencies(*s.chase_iterations, s.sampling)
    result = fact("host.sm_read.latency", samples, "cycle", probe, chase.mhz)
    ns = result.converted.get("ns")
    note = f"{result.value:.0f} cycles" + (f", {ns:.0f} ns" if ns else "") + " per load from pinned host memory"
    return Measured(probe, ProbeOutcome("ok", note), [result])


# A first contact: one direction at small sizes (its SM copy checked word by word, the copy engine
# timed from pinned and pageable memory), and the SM-load chase through pinned memory, one sample each.
SMOKE = Smoke(
    probes=("host_transfer.h2d", "host_transfer.sm_latency"),
    settings=Settings(
        small_bytes=4 * MIB,  # 12 MiB between the two sizes: half a millisecond on any link
        large_bytes=16 * MIB,
        latency_sizes=(4,),
        latency_copies=10,
        blocks=64,  # 1 MiB per iteration of the SM copy's grid
        sampling=ONE_SAMPLE,
        chase_iterations=(1, 2),
    ),
)

SECTIONS = (
    Section(
        "Host transfers",
        ("host.",),
        ("host_transfer.",),
        blurb="Copy engine (cudaMemcpy, pinned and pageable host memory) against the SMs copying through "
        "pinned host memory they address directly; bandwidth from the difference of a 64 MiB and a 256 MiB "
        "copy, latency per small pinned copy (host wall clock, call included).",
    ),
)


def measure(request: Request) -> Probes:
    """The family's runnable probes in order, each as (name, step); a probe whose own check fails raises
    ProbeFailure."""
    copies = _Copies(request)
    steps = {name: partial(measure_direction, copies, name) for name in _DIRECTIONS}
    steps["host_transfer.sm_latency"] = partial(measure_sm_latency, request, "host_transfer.sm_latency")
    yield from probe_steps(PROBES, steps, request.runnable)


FAMILY = Family(
    name="host_transfer",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
    sections=SECTIONS,
)
