"""Bytes in flight (Little's law): read bandwidth against resident threads per SM, for DRAM and the L2.

Two probes sweep the 4-byte read stream (``gp_bw_read_cg_v4``: every thread keeps its kernel's declared
unroll of independent loads in flight, LOADS x WIDTH = 16 bytes) over resident threads per SM, all SMs
equally loaded: ``bandwidth.dram.occupancy.v4`` over a DRAM footprint (every block size at every block
count up to the occupancy limit, flushed before each launch), ``bandwidth.l2.occupancy.v4`` over an
L2-resident one (``l2_fraction`` of the L2, each distinct count of threads per SM once, from the fewest).

Per level (``dram``, ``l2``) the facts are what it takes to hide that level's latency:

* ``bandwidth.<level>.bytes_in_flight_per_sm.p50`` / ``.p90``: bytes per SM in flight at the fewest threads
  per SM that reach 50 % / 90 % of the sweep's best (threads per SM x 16 bytes), its interval down to the
  most threads per SM that did not;
* ``bandwidth.<level>.warps_per_sm.p90``: the warps per SM that provide them;
* ``bandwidth.<level>.little_bytes_per_sm``: Little's law, the best bandwidth per SM times the level's
  latency as the same stream sees it unloaded (at its fewest threads, where it is latency-bound: the
  bytes it keeps in flight over the rate it reaches). The latency is the stream's own, not a pointer
  chase's (another family's fact, measured in another process): it is recorded in the series and the note,
  for the sheet to set beside ``latency.<level>``.

Guards (:data:`INVARIANTS`): p50 <= p90, and p90's bytes within :data:`LITTLE_BAND` of Little's.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device, Fact, ProbeOutcome, Results
from gpuprobe.families.bandwidth import patterns
from gpuprobe.families.bandwidth.patterns import Stream
from gpuprobe.families.bandwidth.shapes import Settings, Work, dram_stream, extra_passes, sweep_points
from gpuprobe.families.bandwidth.shapes import _differenced as differenced
from gpuprobe.families.base import Measured, Request
from gpuprobe.families.differencing import Lengths, event_gbps
from gpuprobe.families.measuring import fact
from gpuprobe.judge.invariants import Check, measured
from gpuprobe.kernels.registry import unroll_of
from gpuprobe.output.plots import COLORS, DEFAULT_DPI, new_figure, png_bytes
from gpuprobe.output.sections import Plot, Section

KERNEL = "gp_bw_read_cg_v4"
WIDTH = 4  # bytes per load
LOADS = unroll_of(KERNEL)  # independent loads in flight per thread: the kernel's declared unroll (4)
THREAD_BYTES = WIDTH * LOADS  # bytes each resident thread keeps in flight
WARP = 32
LEVELS = ("dram", "l2")
PROBES = {level: f"bandwidth.{level}.occupancy.v4" for level in LEVELS}
FRACTIONS = {"p50": 0.5, "p90": 0.9}
# The L2 sweep's event resolution is sized at this many times the DRAM's peak (L2 reads run 1.8x (H200) to
# 2.6x (H100 SXM) the DRAM's): the difference widens itself where the L2 is faster still.
L2_OVER_DRAM = 3.0
# p90's bytes in flight over Little's: at least 0.9 (Little's law at 90 % of the best, on a curve that is
# linear up to saturation), less half a sweep step (points double in threads per SM, so the first point
# reaching 90 % may sit up to 2x past it, never before it); at most 2 (that step) x 2 (the latency under
# load at 90 % of the bandwidth over the unloaded one: a queue at 90 % utilisation waits about as long as the
# unloaded access takes, on top of it). Outside the band the curve is not Little-shaped: a probe finding.
LITTLE_BAND = (0.45, 4.0)


@dataclass(frozen=True)
class Sweeper:
    """What the sweeps measure with, from the family's bench: ``most(threads)`` blocks of KERNEL per SM (the
    occupancy API), ``passes_of(stream)`` the GPU ms of ``n`` passes of a read stream after an L2 flush,
    ``within_peak`` a DRAM figure held to the DRAM's peak (ProbeFailure above it)."""

    request: Request
    settings: Settings
    most: Callable[[int], int]
    passes_of: Callable[[Stream], Callable[[int], float]]
    within_peak: Callable[[Fact], Fact]
    peak_gbps: float | None


@dataclass(frozen=True)
class Point:
    """One point of a sweep: its launch shape and GB/s samples."""

    threads: int  # per block
    per_sm: int  # blocks per SM
    gbps: list[float]

    @property
    def threads_per_sm(self) -> int:
        return self.threads * self.per_sm

    @property
    def median(self) -> float:
        return float(np.median(self.gbps))


def l2_sweep_points(
    settings: Settings, most: Callable[[int], int], sm_count: int, l2_bytes: int
) -> list[tuple[int, int]]:
    """(threads per block, blocks per SM) of the L2 sweep: the DRAM sweep's shapes, each distinct count of
    threads per SM once (the smallest blocks first), as far as every SM's tile fits the L2 footprint."""
    footprint = int(settings.l2_fraction * l2_bytes)
    chosen: dict[int, tuple[int, int]] = {}
    for threads, per_sm in sweep_points(settings, most, sm_count, l2_bytes):
        if sm_count * threads * per_sm * THREAD_BYTES <= footprint:
            chosen.setdefault(threads * per_sm, (threads, per_sm))
    return [chosen[count] for count in sorted(chosen)]


def _shapes(level: str, settings: Settings, most: Callable[[int], int], device: Device,
            peak_gbps: float | None) -> list[tuple[int, int, Stream, Lengths]]:  # fmt: skip
    """Each point's (threads, blocks per SM, one pass, short and long passes), as measured and planned."""
    sms, l2 = device.sm_count, device.l2_bytes
    if level == "dram":
        streams = [
            (t, b, dram_stream(WIDTH, sms * b, t, l2, settings)) for t, b in sweep_points(settings, most, sms, l2)
        ]
        return [(t, b, once, extra_passes(once.footprint, peak_gbps)) for t, b, once in streams]
    footprint = int(settings.l2_fraction * l2)
    rate = peak_gbps and L2_OVER_DRAM * peak_gbps
    points = l2_sweep_points(settings, most, sms, l2)
    streams = [(t, b, patterns.sweep_for(WIDTH, sms * b, t, footprint)) for t, b in points]
    return [(t, b, once, extra_passes(once.footprint, rate)) for t, b, once in streams]


def planned_work(device: Device, settings: Settings, most_blocks: Callable[[str, int], int],
                 peak_gbps: float | None) -> list[Work]:  # fmt: skip
    """The L2 sweep's work at its most samples, from the shapes :func:`measure` launches (the DRAM sweep's is
    :func:`~gpuprobe.families.bandwidth.shapes.planned_work`'s)."""
    flush = int(settings.flush_l2_multiple * device.l2_bytes)
    repeats = settings.sweep_sampling.max_repeats
    shapes = _shapes("l2", settings, lambda t: most_blocks(KERNEL, t), device, peak_gbps)
    return [differenced(PROBES["l2"], "l2", once.footprint, lengths, repeats, flush) for _, _, once, lengths in shapes]


def sweep(sweeper: Sweeper, level: str) -> list[Point]:
    """Every point of ``level``'s sweep measured: GB/s of a short and a long launch's difference."""
    s, name = sweeper.settings, PROBES[level]
    shapes = _shapes(level, s, sweeper.most, sweeper.request.device, sweeper.peak_gbps)
    if not shapes:
        raise ProbeFailure(f"{name}: the footprint holds too few tiles of even one {min(s.sweep_threads)}-thread "
                           "block per SM")  # fmt: skip
    points = []
    for threads, per_sm, once, lengths in shapes:
        what = f"{name} at {per_sm} blocks of {threads}"
        samples, _ = event_gbps(sweeper.passes_of(once), lengths, once.footprint, what, s.sweep_sampling)
        points.append(Point(threads, per_sm, samples))
    return points


ROUNDING = 1e-9  # a median this close to a share of the best (relative) reaches it: a tie, not a miss


def _reaching(points: list[Point], level: float) -> tuple[Point, int]:
    """The point with the fewest threads per SM at ``level`` GB/s or more (within ROUNDING), and the most
    threads per SM of a point with fewer that did not reach it (0: none had fewer)."""
    reached = min((p for p in points if p.median >= level * (1 - ROUNDING)), key=lambda p: p.threads_per_sm)
    below = [p.threads_per_sm for p in points if p.threads_per_sm < reached.threads_per_sm]
    return reached, max(below, default=0)


def _single(fact_id: str, value: float, unit: str, probe: str, ci: tuple[float, float] | None = None) -> Fact:
    return Fact(fact_id, value, unit, ci or (value, value), [value], {}, probe)


def stream_latency_ns(points: list[Point], sm_count: int) -> float:
    """The level's latency as the stream sees it unloaded: at its fewest threads per SM, the bytes each SM
    keeps in flight over the rate each SM reaches (Little's law where the stream is latency-bound)."""
    fewest = min(points, key=lambda p: (p.threads_per_sm, p.threads))
    return fewest.threads_per_sm * THREAD_BYTES / (fewest.median / sm_count)  # bytes / (GB/s) = ns


def in_flight_facts(level: str, points: list[Point], sm_count: int) -> tuple[list[Fact], str]:
    """Bytes in flight per SM at 50 % and 90 % of the best, the warps giving the 90 %, Little's bytes, and a
    note that says how they were reached."""
    probe = PROBES[level]
    best = max(p.median for p in points)
    facts, reached = [], {}
    for key, share in FRACTIONS.items():
        point, below = _reaching(points, share * best)
        reached[key] = point
        value = float(point.threads_per_sm * THREAD_BYTES)
        facts.append(_single(f"bandwidth.{level}.bytes_in_flight_per_sm.{key}", value, "byte", probe,
                             (float(below * THREAD_BYTES) or value, value)))  # fmt: skip
    facts.append(_single(f"bandwidth.{level}.warps_per_sm.p90", reached["p90"].threads_per_sm / WARP, "count", probe))
    latency = stream_latency_ns(points, sm_count)
    little = best / sm_count * latency  # GB/s x ns = bytes
    facts.append(_single(f"bandwidth.{level}.little_bytes_per_sm", little, "byte", probe))
    p90 = reached["p90"]
    note = (f"best {best:.0f} GB/s ({best / sm_count:.1f} GB/s per SM); 90 % from {p90.threads_per_sm} threads per SM "
            f"({p90.per_sm} blocks of {p90.threads}: {p90.threads_per_sm // WARP} warps x {LOADS} loads x {WIDTH} B "
            f"= {p90.threads_per_sm * THREAD_BYTES} B in flight per SM), 50 % from "
            f"{reached['p50'].threads_per_sm * THREAD_BYTES} B; Little: {best / sm_count:.1f} GB/s per SM x "
            f"{latency:.0f} ns (the stream's latency at its fewest threads) = {little:.0f} B")  # fmt: skip
    return facts, note


def _series(points: list[Point], sm_count: int) -> dict[str, list[float]]:
    return {
        "threads_per_block": [float(p.threads) for p in points],
        "blocks_per_sm": [float(p.per_sm) for p in points],
        "threads_per_sm": [float(p.threads_per_sm) for p in points],
        "bytes_in_flight_per_sm": [float(p.threads_per_sm * THREAD_BYTES) for p in points],
        "gbps": [p.median for p in points],
        "stream_latency_ns": [stream_latency_ns(points, sm_count)],
    }


def measure(sweeper: Sweeper, level: str) -> Measured:
    """One level's sweep and its facts; the DRAM's also the saturation and best its probe always gave."""
    s, name, sms = sweeper.settings, PROBES[level], sweeper.request.device.sm_count
    points = sweep(sweeper, level)
    facts, note = in_flight_facts(level, points, sms)
    if level == "dram":
        best = max(points, key=lambda p: p.median)
        saturated = min((p for p in points if p.median >= s.saturation * best.median), key=lambda p: p.threads_per_sm)
        facts = [
            _single("bandwidth.dram_read_saturation.v4", float(saturated.threads_per_sm), "count", name),
            sweeper.within_peak(fact("bandwidth.dram_read_best.v4", best.gbps, "GB/s", name)),
            *facts,
        ]
        note = (f"{s.saturation:.0%} of the best {best.median:.0f} GB/s from {saturated.threads_per_sm} resident "
                f"threads per SM; {note}")  # fmt: skip
    return Measured(name, ProbeOutcome("ok", note, {"occupancy": _series(points, sms)}), facts)


# ---- guards ------------------------------------------------------------------------------------------


def ordered_checks(facts: dict[str, Fact], device: Device) -> list[Check]:
    """Per level: no fewer bytes in flight reach 90 % of the best than reach 50 %."""
    checks = []
    for level in LEVELS:
        found = measured(facts, *(f"bandwidth.{level}.bytes_in_flight_per_sm.{key}" for key in FRACTIONS))
        if found is not None:
            p50, p90 = found
            detail = f"{p50.value:.0f} B for 50 %, {p90.value:.0f} B for 90 %"
            checks.append(Check(f"bandwidth.{level}_in_flight_ordered", p50.value <= p90.value, detail,
                                (p50.id, p90.id), physics=True))  # fmt: skip
    return checks


def little_checks(facts: dict[str, Fact], device: Device) -> list[Check]:
    """Per level: the bytes in flight at 90 % of the best lie within LITTLE_BAND of Little's law's."""
    checks = []
    low, high = LITTLE_BAND
    for level in LEVELS:
        found = measured(
            facts, f"bandwidth.{level}.bytes_in_flight_per_sm.p90", f"bandwidth.{level}.little_bytes_per_sm"
        )
        if found is not None:
            p90, little = found
            ratio = p90.value / little.value if little.value else float("inf")
            detail = (f"{p90.value:.0f} B in flight per SM at 90 % against Little's {little.value:.0f} B: "
                      f"{ratio:.2f}x, allowed {low:g}-{high:g}x")  # fmt: skip
            checks.append(Check(f"bandwidth.{level}_in_flight_matches_little", low <= ratio <= high, detail,
                                (p90.id, little.id)))  # fmt: skip
    return checks


INVARIANTS = (ordered_checks, little_checks)


# ---- the fact sheet ----------------------------------------------------------------------------------


def in_flight_png(results: Results, dpi: int = DEFAULT_DPI) -> bytes | None:
    """Each level's read bandwidth, as a share of its best, against bytes in flight per SM, with the
    points reaching 50 % and 90 % and Little's bytes marked; None without a sweep."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullFormatter

    drawn = {}
    for level, probe in PROBES.items():
        outcome = results.probes.get(probe)
        columns = outcome.series.get("occupancy") if outcome is not None else None
        if columns and columns.get("gbps") and columns.get("bytes_in_flight_per_sm"):
            drawn[level] = columns
    if not drawn:
        return None
    fig = new_figure((7.0, 4.2), dpi)
    ax = fig.add_subplot()
    ticks: set[float] = set()
    for index, (level, columns) in enumerate(drawn.items()):
        color, best = COLORS[index % len(COLORS)], max(columns["gbps"])
        by_bytes: dict[float, float] = {}
        for x, y in zip(columns["bytes_in_flight_per_sm"], columns["gbps"], strict=True):
            by_bytes[x] = max(by_bytes.get(x, 0.0), y / best)  # the best block shape at each count
        xs = sorted(by_bytes)
        ticks.update(xs)
        ax.plot(xs, [by_bytes[x] for x in xs], marker="o", color=color, label=f"{level.upper()} ({best:.0f} GB/s best)")
        little = results.fact(f"bandwidth.{level}.little_bytes_per_sm")
        if little is not None and little.value:
            ax.axvline(little.value, color=color, linestyle="--", linewidth=1,
                       label=f"{level.upper()} Little's law: {little.value / 1024:.1f} KiB")  # fmt: skip
    for share in FRACTIONS.values():
        ax.axhline(share, color="#555555", linestyle=":", linewidth=1)
    ax.set_xscale("log", base=2)
    ax.xaxis.set_major_locator(FixedLocator(sorted(ticks)))
    ax.xaxis.set_major_formatter(FixedFormatter([f"{t / 1024:g}" for t in sorted(ticks)]))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel(f"bytes in flight per SM (KiB; {LOADS} loads x {WIDTH} B per thread)")
    ax.set_ylabel("read bandwidth, share of the level's best")
    ax.set_ylim(0, 1.1)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return png_bytes(fig)


SECTION = Section(
    "Bytes in flight",
    tuple(f"bandwidth.{level}.{what}" for level in LEVELS for what in ("bytes_in_flight", "warps_per_sm", "little")),
    plot=Plot("bytes_in_flight", "bytes_in_flight.png", "read bandwidth vs bytes in flight per SM", in_flight_png),
    blurb=(
        f"What it takes to hide each level's latency: the 4-byte read stream ({LOADS} independent loads x {WIDTH} B "
        f"= {THREAD_BYTES} B in flight per thread) swept over resident threads per SM, every SM alike. "
        "bytes_in_flight_per_sm.p50 and .p90 are the bytes per SM in flight at the fewest threads reaching 50 % "
        "and 90 % of the level's best, warps_per_sm.p90 the warps that hold them; little_bytes_per_sm is Little's "
        "law, the best bandwidth per SM times the latency the stream sees unloaded (its fewest threads). A kernel "
        "with wider loads or more loads per thread needs proportionally fewer warps for the same bytes."
    ),
)
