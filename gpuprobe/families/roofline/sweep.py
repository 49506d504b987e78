"""The roofline framework: a sweep over arithmetic intensity for one (type, level), its physics guards, and the
analysis that turns its points into the level's ceilings. Every type (CUDA-core FP32, the tensor cores' types)
is measured, guarded, analysed and drawn the same way; only the points come from a type's own kernels.

The hook a type plugs in with (:class:`Sweep`)::

    Sweep(type="fp32", level="dram",
          probes=("roofline.fp32.dram.ffma4", ..., "roofline.fp32.dram.ffma512"),  # lowest intensity first
          measure=measure_point,        # (request, probe) -> Point: one probe's point, its result checked
          flop_per_clock=fp32_peak,     # (request) -> flop per clock per SM at most, or None where unknown
          datasheet=("fp32_tflops", "fp32_clock_mhz"))  # the datasheet's peak and the clock it assumes

Each probe of ``probes`` is one point (one kernel of fixed intensity, its SASS contract its own), whose fact is
its rate, ``<probe>.rate``; a point whose probe is not runnable here is left out. The last probe also analyses
the points measured so far and declares the sweep's facts (:func:`sweep_facts`).

The fit, and why it is this one: a roofline is ``rate = min(compute, bandwidth x intensity)``. A point left
of the ridge is memory-bound and moves the level's bandwidth; right of it, the rate is the compute ceiling
and its bytes/s fall as ``1 / intensity``. So the memory ceiling is the best bytes/s of any point (it is reached
left of the knee: right of it bytes/s only fall) and the compute ceiling the best rate of any point (reached
at the high-intensity end: left of it the rate only falls). No curve is fitted through the knee, where the
two limits blur; each ceiling is a measured point's own samples. A ceiling is only reported where the sweep
reached that regime: a point on the memory ceiling (within :data:`PLATEAU` of the best bytes/s) must run below
:data:`BOUND_FRACTION` of the best rate (else no point was memory-bound: the bandwidth is unmeasured, with the
reason), and a point on the compute ceiling (within :data:`PLATEAU` of the best rate) must move below that
fraction of the best bytes/s (else no point was compute-bound). On a plateau the best point is the timer's
choice: the point just past the knee often wins it by noise, and is not what decides the regime. The ridge is
compute / bandwidth in flop/B, where the two ceilings meet.

Guards (a broken one fails the probe, :class:`~gpuprobe.core.errors.ProbeFailure`; no number sits beside an
impossible one): no point's rate above the type's per-clock peak x SMs x the clock it witnessed, and no
point's bytes/s above the level's limit: for DRAM the theoretical peak (2 x memory clock x bus width, else
the datasheet's, :func:`~gpuprobe.families.planning.dram_peak_gbps`), for the L2 and shared memory (and DRAM
of a part with neither) the 128 bytes per clock an SM's L1/shared array takes in at most (32 banks x 4 bytes),
at the witnessed clock;
each beyond :data:`~gpuprobe.judge.physics.RESOLUTION`. The L2 and shared ceilings are held to the bandwidth
family's own measurement of the level in the same run by an invariant (:mod:`~gpuprobe.families.roofline.report`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Fact, ProbeOutcome
from gpuprobe.families.base import Measured, Request
from gpuprobe.families.measuring import fact, unmeasured
from gpuprobe.families.planning import dram_peak_gbps
from gpuprobe.judge.physics import RESOLUTION

LEVELS = ("dram", "l2", "shared")
SM_INGEST_BYTES_PER_CLOCK = 128  # what an SM's L1/shared array takes in per clock at most: 32 banks x 4 bytes
BOUND_FRACTION = 0.8  # a ceiling's point must run below this share of the other ceiling to be in its regime
PLATEAU = 0.95  # a point within this share of a ceiling is on it: which of them is best is the timer's noise
SERIES = "roofline"  # the outcome series every point's probe writes (the plot reads it)


@dataclass(frozen=True)
class Point:
    """One point of a sweep: the intensity its kernel's text fixes (flop per byte moved from the level), the
    rate of each sample (TFLOP/s, TOP/s for integer types) and the SM clock each sample ran at (MHz)."""

    probe: str
    intensity: float
    tflops: tuple[float, ...]
    mhz: tuple[float, ...]

    def __post_init__(self) -> None:
        if self.intensity <= 0 or not self.tflops or len(self.tflops) != len(self.mhz):
            raise ValueError(f"Point {self.probe}: a positive intensity and one clock per rate sample, not {self}")

    @property
    def gbps(self) -> tuple[float, ...]:
        """Each sample's GB/s from the level: its rate over the intensity."""
        return tuple(t * 1e3 / self.intensity for t in self.tflops)

    @property
    def rate(self) -> float:
        return float(np.median(self.tflops))

    @property
    def bandwidth(self) -> float:
        return float(np.median(self.gbps))

    @property
    def clock(self) -> float:
        return float(np.median(self.mhz))


MeasurePoint = Callable[[Request, str], Point]


@dataclass(frozen=True)
class Sweep:
    """One roofline: ``type`` fed from ``level``, one probe per point in increasing intensity (the module
    docstring: the hook every type plugs in with)."""

    type: str
    level: str
    probes: tuple[str, ...]
    measure: MeasurePoint
    flop_per_clock: Callable[[Request], float | None]
    datasheet: tuple[str, str] | None = None

    def __post_init__(self) -> None:
        if self.level not in LEVELS or not self.probes:
            raise ValueError(f"Sweep {self.type}.{self.level}: a level of {LEVELS} and at least one probe")

    @property
    def stem(self) -> str:
        return f"roofline.{self.type}.{self.level}"

    @property
    def unit(self) -> str:
        return "TOP/s" if self.type.startswith("s8") else "TFLOP/s"  # s8 and s8_sync: integer operations


def dram_peak(request: Request) -> tuple[float, str] | None:
    """The device's theoretical DRAM GB/s and where it came from (its memory clock and bus, else the datasheet)."""
    device = request.device
    return dram_peak_gbps(device.mem_clock_mhz, device.mem_bus_bits, request.state.get("datasheet", {}))


def level_limit(request: Request, level: str, mhz: float) -> tuple[float, str]:
    """The most GB/s ``level`` can move at SM clock ``mhz``, and what that figure is: DRAM's theoretical peak where
    known, else (and for the L2 and shared memory) what every SM takes in at most."""
    peak = dram_peak(request)
    if level == "dram" and peak is not None:
        return peak
    gbps = SM_INGEST_BYTES_PER_CLOCK * request.device.sm_count * mhz * 1e6 / 1e9
    return gbps, f"{SM_INGEST_BYTES_PER_CLOCK} B/clk/SM x {request.device.sm_count} SMs at {mhz:.0f} MHz"


def guard(request: Request, sweep: Sweep, point: Point) -> None:
    """ProbeFailure where ``point`` beats the per-clock peak at its clock, or its level's limit (module docstring)."""
    clock = point.clock
    per_clock = sweep.flop_per_clock(request)
    if per_clock is not None:
        peak = per_clock * request.device.sm_count * clock * 1e6 / 1e12
        if point.rate > peak * (1 + RESOLUTION):
            raise ProbeFailure(
                f"{point.probe}: {point.rate:.2f} {sweep.unit} at {clock:.0f} MHz is above the peak at that clock, "
                f"{peak:.2f} ({per_clock:g} flop/clk/SM x {request.device.sm_count} SMs): impossible, so the timing "
                "or the work counted is wrong"
            )
    limit = level_limit(request, sweep.level, clock)
    if point.bandwidth > limit[0] * (1 + RESOLUTION):
        raise ProbeFailure(
            f"{point.probe}: {point.bandwidth:.0f} GB/s from {sweep.level} at {point.intensity:g} flop/B is above "
            f"what the level moves at most, {limit[0]:.0f} GB/s ({limit[1]}): impossible, so the timing is wrong"
        )


def datasheet_peak(request: Request, sweep: Sweep, mhz: float) -> float | None:
    """The datasheet's peak for the sweep's type scaled from the clock it assumes to ``mhz`` (None if unknown)."""
    if sweep.datasheet is None:
        return None
    sheet = request.state.get("datasheet", {})
    peak, clock = sheet.get(sweep.datasheet[0]), sheet.get(sweep.datasheet[1])
    return float(peak) * mhz / float(clock) if peak and clock else None


def point_series(request: Request, sweep: Sweep, point: Point) -> dict[str, dict[str, list[Any]]]:
    """The point as the plot reads it: type, level, intensity, rate, GB/s and clock (medians), and the datasheet's
    ceilings beside them (the DRAM peak for a DRAM sweep; the type's peak at the point's clock), 0 where unknown."""
    dram = dram_peak(request)
    return {SERIES: {
        "type": [sweep.type], "level": [sweep.level], "intensity": [point.intensity], "tflops": [point.rate],
        "gbps": [point.bandwidth], "mhz": [point.clock],
        "datasheet_tflops": [datasheet_peak(request, sweep, point.clock) or 0.0],
        "datasheet_gbps": [dram[0] if dram and sweep.level == "dram" else 0.0],
    }}  # fmt: skip


def sweep_facts(sweep: Sweep, points: list[Point], probe: str) -> tuple[list[Fact], str]:
    """The sweep's ceilings, ridge and clock from ``points`` (module docstring: the fit), and a note saying
    where each ceiling was read."""
    stem, unit = sweep.stem, sweep.unit
    memory, compute = max(points, key=lambda p: p.bandwidth), max(points, key=lambda p: p.rate)
    on_memory = [p for p in points if p.bandwidth >= PLATEAU * memory.bandwidth]
    on_compute = [p for p in points if p.rate >= PLATEAU * compute.rate]
    memory_bound = min(p.rate for p in on_memory) < BOUND_FRACTION * compute.rate
    compute_bound = min(p.bandwidth for p in on_compute) < BOUND_FRACTION * memory.bandwidth
    facts = [
        fact(f"{stem}.bandwidth", memory.gbps, "GB/s", probe) if memory_bound else unmeasured(
            f"{stem}.bandwidth", "GB/s", probe,
            f"no point was memory-bound: of the points within {PLATEAU:g} x the best bytes/s ({memory.intensity:g} "
            f"flop/B), none ran below {BOUND_FRACTION:g} x the best rate {compute.rate:.2f} {unit}"),
        fact(f"{stem}.compute", compute.tflops, unit, probe) if compute_bound else unmeasured(
            f"{stem}.compute", unit, probe,
            f"no point was compute-bound: of the points within {PLATEAU:g} x the best rate ({compute.intensity:g} "
            f"flop/B), none moved below {BOUND_FRACTION:g} x the best {memory.bandwidth:.0f} GB/s"),
    ]  # fmt: skip
    if memory_bound and compute_bound:
        ridges = [t * 1e3 / g for t in compute.tflops for g in memory.gbps]  # every pair: taken apart
        facts.append(fact(f"{stem}.ridge", ridges, "flop/B", probe))
    else:
        facts.append(unmeasured(f"{stem}.ridge", "flop/B", probe, "the sweep did not reach both ceilings"))
    facts.append(fact(f"{stem}.sm_clock", [m for p in points for m in p.mhz], "MHz", probe))
    note = (f"{len(points)} points, {points[0].intensity:g} to {points[-1].intensity:g} flop/B; memory ceiling at "
            f"{memory.intensity:g} flop/B ({memory.bandwidth:.0f} GB/s), compute at {compute.intensity:g} flop/B "
            f"({compute.rate:.2f} {unit})")  # fmt: skip
    return facts, note


def measured_point(request: Request, sweep: Sweep, probe: str, points: list[Point]) -> Measured:
    """One probe of ``sweep``: its point measured, guarded and kept in ``points``; the last probe also gives the
    sweep's facts from every point kept."""
    point = sweep.measure(request, probe)
    guard(request, sweep, point)
    points.append(point)
    series = point_series(request, sweep, point)
    note = (f"{point.intensity:g} flop/B: {point.rate:.2f} {sweep.unit}, {point.bandwidth:.0f} GB/s "
            f"at {point.clock:.0f} MHz")  # fmt: skip
    rate = fact(f"{probe}.rate", point.tflops, sweep.unit, probe)
    if probe != sweep.probes[-1]:
        return Measured(probe, ProbeOutcome("ok", note, series), [rate])
    facts, summary = sweep_facts(sweep, sorted(points, key=lambda p: p.intensity), probe)
    return Measured(probe, ProbeOutcome("ok", f"{note}; {summary}", series), [rate, *facts])
