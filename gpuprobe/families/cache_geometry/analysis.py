"""Pure analysis for the cache-geometry family: knees of stride sweeps, slopes, TLB levels and reaches.

Nothing here launches anything; every function is tested on synthetic curves
(tests/test_cache_geometry.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuprobe.judge.analysis import Level, find_levels

MIN_RISE = 0.05  # a stride sweep whose miss level is not this fraction above the hit level shows no unit


@dataclass(frozen=True)
class UnitFit:
    """The fill unit a stride sweep shows, and the hit and miss latencies of the model fitted with it."""

    unit_bytes: int
    hit: float
    miss: float
    residual: float  # root-mean-square residual of the best fit


def miss_fraction(strides: Sequence[float], unit: float) -> np.ndarray:
    """The share of a sequential chase's loads that are the first to touch their unit: min(1, S / unit)."""
    return np.minimum(1.0, np.asarray(strides, dtype=float) / unit)


def candidate_units(strides: Sequence[int]) -> list[int]:
    """Powers of two with a swept stride below and at least two at or above: knees the sweep can place."""
    low, ordered = min(strides), sorted(strides)
    units, unit = [], 8
    while unit <= ordered[-2]:
        if unit > low:
            units.append(unit)
        unit *= 2
    return units


def fit_unit(strides: Sequence[int], latencies: Sequence[float]) -> UnitFit | None:
    """The fill unit U for which latency = hit + (miss - hit) x min(1, S / U) fits a sequential
    stride sweep best (least squares over the candidate units); None when the latency does not rise
    with the stride (no miss level at least ``MIN_RISE`` above the hit level), or a fit needs a
    negative hit time."""
    if len(strides) != len(latencies) or len(strides) < 4:
        raise ValueError(f"a stride sweep needs at least 4 (stride, latency) pairs, got {len(strides)}")
    y = np.asarray(latencies, dtype=float)
    best: UnitFit | None = None
    for unit in candidate_units(strides):
        x = miss_fraction(strides, unit)
        design = np.column_stack([np.ones_like(x), x])
        (hit, rise), *_ = np.linalg.lstsq(design, y, rcond=None)
        residual = float(np.sqrt(np.mean((design @ np.array([hit, rise]) - y) ** 2)))
        if best is None or residual < best.residual:
            best = UnitFit(unit, float(hit), float(hit + rise), residual)
    if best is None or best.hit <= 0 or best.miss < best.hit * (1 + MIN_RISE):
        return None
    return best


def slope(xs: Sequence[float], ys: Sequence[float]) -> float:
    """The least-squares slope of ys over xs."""
    x, y = np.asarray(xs, dtype=float), np.asarray(ys, dtype=float)
    if len(x) < 2 or np.ptp(x) == 0:
        raise ValueError("a slope needs at least two distinct x values")
    return float(np.polyfit(x, y, 1)[0])


TLB_HIT_MARGIN = 0.1  # a plateau this far above the no-miss reference already misses a TLB level


@dataclass(frozen=True)
class TlbLevels:
    """What a page-stride footprint sweep shows, against a chase that misses no TLB (``reference``)."""

    reaches: dict[int, float]  # TLB level (1 = first) -> footprint where it stops serving
    last: Level  # the plateau that misses every level seen

    def miss_cycles(self, reference: float) -> float:
        return self.last.latency - reference


def tlb_levels(levels: list[Level], reference: float) -> TlbLevels | None:
    """Read TLB levels off the plateaus of a page-stride sweep whose lines all stay in L2: every
    step up (by more than ``TLB_HIT_MARGIN``) is one more translation level missed; a plateau that
    does not rise so (a fall, or a drift) is no level. ``reference`` is the latency of the same chase
    within one page: when the plateau the first step rises from is already well above it (the
    smallest footprints already exceed the first level's reach), the first step seen is the second
    level's. None when no plateau rises above the one before it."""
    rises = [k for k in range(len(levels) - 1) if levels[k + 1].latency > levels[k].latency * (1 + TLB_HIT_MARGIN)]
    if not rises:
        return None
    first = 2 if levels[rises[0]].latency > reference * (1 + TLB_HIT_MARGIN) else 1
    reaches = {first + n: levels[k].size_bytes for n, k in enumerate(rises) if levels[k].size_bytes is not None}
    return TlbLevels(reaches, levels[rises[-1] + 1])


@dataclass(frozen=True)
class TlbSweep:
    """One page stride's sweep: a chase of one line every ``stride`` bytes over each footprint
    (nodes x stride), with that footprint's latency samples (cycles)."""

    stride: int
    footprints: list[float]
    samples: list[list[float]]

    @property
    def medians(self) -> list[float]:
        return [float(np.median(x)) for x in self.samples]

    def samples_from(self, footprint: float) -> list[float]:
        """Every sample at ``footprint`` and beyond."""
        return [x for f, xs in zip(self.footprints, self.samples, strict=True) if f >= footprint for x in xs]


@dataclass(frozen=True)
class TlbStep:
    """A plateau of one sweep: where it stops serving (``plateau.size_bytes``) is a TLB level's reach."""

    sweep: TlbSweep
    plateau: Level


@dataclass(frozen=True)
class TlbReading:
    """Every sweep read against the no-miss ``reference``: each TLB level's step where a sweep shows it at
    the smallest footprint, the highest last plateau (every level seen missed), and how far the sweeps went."""

    reference: float
    sweeps: list[TlbSweep]
    plateaus: list[list[Level]]  # each sweep's, in the same order
    steps: dict[int, TlbStep]
    last: TlbStep | None

    @property
    def swept_bytes(self) -> float:
        """The largest footprint of the smallest stride's sweep: below it no level the sweeps did not place
        runs out of reach, whatever the page (at least that stride: every page of the footprint was touched)."""
        return min(self.sweeps, key=lambda sweep: sweep.stride).footprints[-1]

    def miss_samples(self) -> list[float]:
        """The cost of missing every level seen: the last plateau's samples (and beyond) minus the reference."""
        if self.last is None:
            return []
        return [x - self.reference for x in self.last.sweep.samples_from(self.last.plateau.first_footprint)]

    def extent(self) -> str:
        """How far each sweep went, e.g. "67,502,080 bytes at one line every 65,920"."""
        return ", ".join(f"{s.footprints[-1]:,.0f} bytes at one line every {s.stride:,}" for s in self.sweeps)

    def why_unmeasured(self, level: int) -> str:
        """Why TLB level ``level`` has no reach: no step at all, a first step already behind the smallest
        footprint, or fewer steps than levels."""
        if not self.steps:
            return (
                f"no translation step in any sweep (to {self.extent()}): every TLB level reaches beyond "
                f"{self.swept_bytes:,.0f} bytes (tlb.no_step_below_bytes)"
            )
        if level < min(self.steps):
            smallest = min(sweep.footprints[0] for sweep in self.sweeps)
            return (
                f"the smallest footprint swept, {smallest:,.0f} bytes, already misses TLB level {level}: "
                "its reach is below that"
            )
        return f"no step for TLB level {level} in any sweep (to {self.extent()})"


def read_tlb(sweeps: list[TlbSweep], reference: float) -> TlbReading:
    """Each sweep's steps (:func:`tlb_levels` of its plateaus), merged: a level's reach is the smallest
    footprint where any sweep shows its step. A stride at most the page steps at the reach itself (every
    page of the footprint touched); a larger stride touches one page per node, so it steps at the level's
    entries x its stride, further out, and the smallest footprint is the truest."""
    if not sweeps:
        raise ValueError("read_tlb needs at least one sweep")
    steps: dict[int, TlbStep] = {}
    last: TlbStep | None = None
    plateaus = [find_levels(sweep.footprints, sweep.medians) for sweep in sweeps]
    for sweep, levels in zip(sweeps, plateaus, strict=True):
        found = tlb_levels(levels, reference)
        if found is None:
            continue
        by_size = {level.size_bytes: level for level in levels}
        for number, reach in found.reaches.items():
            if number not in steps or reach < steps[number].plateau.size_bytes:
                steps[number] = TlbStep(sweep, by_size[reach])
        if last is None or found.last.latency > last.plateau.latency:
            last = TlbStep(sweep, found.last)
    return TlbReading(reference, sweeps, plateaus, steps, last)
