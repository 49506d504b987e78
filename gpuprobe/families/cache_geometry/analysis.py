"""Pure analysis for the cache-geometry family: knees of stride sweeps, slopes, TLB levels.

Nothing here launches anything; every function is tested on synthetic curves
(tests/test_cache_geometry.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from gpuprobe.judge.analysis import Level

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
    step up is one more translation level missed. ``reference`` is the latency of the same chase
    within one page: when even the first plateau is well above it (the smallest footprint already
    exceeds the first level's reach), the first step seen is the second level's. None with fewer
    than two plateaus (no step seen)."""
    if len(levels) < 2:
        return None
    first = 2 if levels[0].latency > reference * (1 + TLB_HIT_MARGIN) else 1
    reaches = {first + k: level.size_bytes for k, level in enumerate(levels[:-1]) if level.size_bytes is not None}
    return TlbLevels(reaches, levels[-1])
