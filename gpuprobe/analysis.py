"""Statistics for measured series: median confidence intervals and cache-level detection.

Everything here is a pure function of its arguments (numpy only, no randomness), so the
same measurements always give the same facts.

Cache-level detection (:func:`find_levels`) reads a latency-vs-footprint curve from a
random pointer chase.  It works on log(latency) against log2(footprint):

1. Sort by footprint, drop NaN points, and remove single-point spikes with a running
   median of three (a monotone staircase passes through it unchanged).
2. Estimate the noise scale from the median absolute second difference.
3. Segment the curve optimally by dynamic programming.  Each segment is either *flat*
   (a line whose slope is clipped to a small drift allowance) or a *ramp* (any line, at
   an extra cost); each segment pays a penalty, measured in units of the noise variance.
4. Flat segments are plateau candidates.  Adjacent candidates whose levels differ by less
   than ``MERGE_RATIO`` are merged (drift, noise and transition shoulders split plateaus
   that belong together); candidates shorter than ``MIN_PLATEAU_POINTS`` are dropped.
5. Each level ends where the curve crosses the geometric midpoint between its plateau
   and the next one (interpolated in log-footprint).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
ArrayLike = Sequence[float] | npt.NDArray[np.floating]

MIN_PLATEAU_POINTS = 3
"""A level needs at least this many points on its plateau."""

MERGE_RATIO = 1.2
"""Adjacent plateaus closer than this latency ratio are one level."""

MAX_PLATEAU_SLOPE = 0.08
"""Drift a plateau may have, in ln(latency) per octave of footprint (about 8 % per octave)."""

NOISE_FLOOR = 0.01
"""Smallest noise scale assumed, in ln(latency) (1 %), so that clean curves still segment sanely."""

SEGMENT_PENALTY = 6.0
"""Cost of one more segment, in units of the noise variance."""

RAMP_PENALTY = 10.0
"""Extra cost of a segment with a free slope over a flat one, in units of the noise variance."""

MIN_RAMP_POINTS = 4
"""Shorter segments are fitted flat; a short transition is a run of one- or two-point segments."""

SPIKE_SIGMAS = 6.0
SPIKE_RATIO = 1.25
"""A single point further than both these margins from both of its neighbours is a spike (an outlier)."""


@dataclass(frozen=True)
class Level:
    """One level of a memory hierarchy, as seen on a latency-vs-footprint curve.

    Attributes:
        size_bytes: footprint where this level stops serving (the latency crosses the
            geometric midpoint to the next plateau); ``None`` for the last level.
        latency: the plateau latency, the median over the plateau's points.
        first_footprint: footprint of the plateau's first point.
        last_footprint: footprint of the plateau's last point.
    """

    size_bytes: float | None
    latency: float
    first_footprint: float
    last_footprint: float


# --------------------------------------------------------------------------- median_ci


def median_ci(samples: ArrayLike, confidence: float = 0.95) -> tuple[float, float, float]:
    """Return ``(median, low, high)``: the sample median and a distribution-free interval for it.

    The interval is ``[x_(j), x_(n+1-j)]`` (1-based order statistics) with the largest ``j``
    whose coverage ``1 - 2 P(B <= j - 1)``, ``B ~ Binomial(n, 1/2)``, is still at least
    ``confidence``.  With too few samples for any such ``j`` the interval is the sample range.

    Raises:
        ValueError: empty input, non-finite values, or ``confidence`` outside (0, 1).
    """
    if not 0.0 < confidence < 1.0:
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence!r}")
    values = np.sort(np.asarray(samples, dtype=np.float64).ravel())
    if values.size == 0:
        raise ValueError("median_ci needs at least one sample")
    if not np.all(np.isfinite(values)):
        raise ValueError("median_ci needs finite samples (found NaN or infinity)")
    median = _sorted_median(values)
    rank = _order_statistic_rank(values.size, confidence)
    if rank is None:
        return median, float(values[0]), float(values[-1])
    return median, float(values[rank - 1]), float(values[values.size - rank])


def _sorted_median(values: FloatArray) -> float:
    """Median of sorted values, without overflow for huge magnitudes."""
    n = values.size
    upper = float(values[n // 2])
    if n % 2 == 1:
        return upper
    lower = float(values[n // 2 - 1])
    middle = lower + (upper - lower) / 2 if math.isfinite(upper - lower) else lower / 2 + upper / 2
    return min(max(middle, lower), upper)


def _order_statistic_rank(n: int, confidence: float) -> int | None:
    """Largest 1-based rank ``j`` whose interval ``[x_(j), x_(n+1-j)]`` covers the median with
    at least ``confidence``, or ``None`` if even the sample range falls short."""
    cdf = _half_binomial_cdf(n)  # cdf[k] = P(B <= k) for k = 0 .. n // 2
    coverage = 1.0 - 2.0 * cdf  # coverage of rank j = k + 1
    acceptable = np.flatnonzero(coverage >= confidence)
    if acceptable.size == 0:
        return None
    return int(acceptable[-1]) + 1


def _half_binomial_cdf(n: int) -> FloatArray:
    """``P(B <= k)`` for ``B ~ Binomial(n, 1/2)`` and ``k = 0 .. n // 2``, computed in log space."""
    k = np.arange(n // 2 + 1, dtype=np.float64)
    log_ratio = np.log((n - k[:-1]) / (k[:-1] + 1.0))  # ln C(n, k+1) - ln C(n, k)
    log_pmf = n * math.log(0.5) + np.concatenate(([0.0], np.cumsum(log_ratio)))
    return np.cumsum(np.exp(log_pmf))


# --------------------------------------------------------------------------- find_levels


def find_levels(footprint_bytes: ArrayLike, latency: ArrayLike) -> list[Level]:
    """Find the cache levels on a latency-vs-footprint curve, fastest first.

    Args:
        footprint_bytes: working-set sizes of a random pointer chase, in any order
            (log-spaced in practice, a few points per octave).
        latency: the measured latency at each footprint (cycles or any positive unit).
            Points where either value is NaN are ignored.

    Returns:
        One :class:`Level` per plateau of at least ``MIN_PLATEAU_POINTS`` points, in order of
        footprint; the last one has ``size_bytes=None``.  Empty if the curve has no plateau.

    Raises:
        ValueError: mismatched or non-1-D inputs, infinite or non-positive values, or fewer
            than 3 points that are not NaN.
    """
    footprints, latencies = _valid_sorted_points(footprint_bytes, latency)
    x_all = np.log2(footprints)
    y_all = np.log(latencies)
    spikes = _isolated_spikes(y_all, max(_noise_scale(y_all), NOISE_FLOOR))
    kept = np.flatnonzero(~spikes)
    x, y = x_all[kept], y_all[kept]
    sigma = max(_noise_scale(y), NOISE_FLOOR)
    segments = _segment(x, y, sigma)
    sigma = max(_residual_noise_scale(x, y, segments), NOISE_FLOOR)
    segments = _segment(x, y, sigma)
    plateaus = _merge_plateaus(segments, y)
    return _levels(plateaus, x, y, latencies[kept])


def _valid_sorted_points(footprint_bytes: ArrayLike, latency: ArrayLike) -> tuple[FloatArray, FloatArray]:
    """Check the inputs, drop NaN points and sort by footprint."""
    footprints = np.asarray(footprint_bytes, dtype=np.float64)
    latencies = np.asarray(latency, dtype=np.float64)
    if footprints.ndim != 1 or latencies.ndim != 1:
        raise ValueError("find_levels needs 1-D footprint and latency arrays")
    if footprints.shape != latencies.shape:
        raise ValueError(
            f"find_levels needs as many footprints as latencies, got {footprints.size} and {latencies.size}"
        )
    keep = ~(np.isnan(footprints) | np.isnan(latencies))
    footprints, latencies = footprints[keep], latencies[keep]
    if footprints.size < 3:
        raise ValueError(f"find_levels needs at least 3 points that are not NaN, got {footprints.size}")
    for name, values in (("footprints", footprints), ("latencies", latencies)):
        if not np.all(np.isfinite(values)):
            raise ValueError(f"find_levels needs finite {name} (NaN marks a missing point; infinity is invalid)")
        if np.any(values <= 0):
            raise ValueError(f"find_levels needs strictly positive {name}, got minimum {values.min():g}")
    order = np.argsort(footprints, kind="stable")
    return footprints[order], latencies[order]


def _isolated_spikes(y: FloatArray, sigma: float) -> npt.NDArray[np.bool_]:
    """Mark single points that rise above both neighbours by more than a spike margin.

    The margin is the larger of ``SPIKE_SIGMAS`` noise scales and ``ln(SPIKE_RATIO)``.  Timing
    outliers only ever add time, and a step between plateaus never rises above both of its
    neighbours, so only upward single-point spikes are marked.  The first point counts as a
    spike when it lies that far above the second (no cache makes latency fall); the last
    point is never marked, since it may be the start of the next step.
    """
    margin = max(SPIKE_SIGMAS * sigma, math.log(SPIKE_RATIO))
    spikes = np.zeros(y.size, dtype=bool)
    if y.size < 3:
        return spikes
    spikes[1:-1] = y[1:-1] - np.maximum(y[:-2], y[2:]) > margin
    spikes[0] = y[0] - y[1] > margin
    return spikes


def _noise_scale(y: FloatArray) -> float:
    """Robust standard deviation of the point noise, from the median absolute second difference.

    A second difference of independent noise has variance 6 sigma^2; plateaus, straight ramps
    and most of a curve contribute only noise, steps and spikes only a few large values.
    """
    if y.size < 3:
        return 0.0
    second_differences = y[:-2] - 2 * y[1:-1] + y[2:]
    return float(1.4826 * np.median(np.abs(second_differences)) / math.sqrt(6.0))


def _residual_noise_scale(x: FloatArray, y: FloatArray, segments: list[_Segment]) -> float:
    """Robust noise scale from the residuals of a segmentation, corrected for the fitted lines."""
    residuals = [_fit_residuals(x[seg.start : seg.stop], y[seg.start : seg.stop], seg.flat) for seg in segments]
    pooled = np.concatenate(residuals)
    fitted_parameters = 2 * sum(1 for seg in segments if seg.size > 2) + sum(seg.size for seg in segments if seg.size <= 2)
    degrees_of_freedom = pooled.size - fitted_parameters
    if degrees_of_freedom <= 0:
        return 0.0
    return float(1.4826 * np.median(np.abs(pooled)) * math.sqrt(pooled.size / degrees_of_freedom))


def _fit_residuals(x: FloatArray, y: FloatArray, flat: bool) -> FloatArray:
    """Residuals of the segment model: a line, its slope clipped to the plateau limit if ``flat``."""
    dx = x - x.mean()
    spread = float(np.dot(dx, dx))
    slope = float(np.dot(dx, y - y.mean()) / spread) if spread > 1e-12 else 0.0
    if flat:
        slope = float(np.clip(slope, -MAX_PLATEAU_SLOPE, MAX_PLATEAU_SLOPE))
    return y - y.mean() - slope * dx


@dataclass(frozen=True)
class _Segment:
    """Points ``start`` to ``stop - 1`` of the sorted curve, fitted flat or as a ramp."""

    start: int
    stop: int
    flat: bool

    @property
    def size(self) -> int:
        return self.stop - self.start


def _segment(x: FloatArray, y: FloatArray, sigma: float) -> list[_Segment]:
    """Optimal penalised segmentation of ``y(x)`` into flat segments and ramps."""
    cost, flat = _segment_costs(x, y, sigma)
    n = x.size
    best = np.zeros(n + 1)
    first_point = np.zeros(n + 1, dtype=np.int64)
    for end in range(n):
        candidates = best[: end + 1] + cost[: end + 1, end]
        start = int(np.argmin(candidates))
        best[end + 1] = candidates[start]
        first_point[end + 1] = start
    segments: list[_Segment] = []
    stop = n
    while stop > 0:
        start = int(first_point[stop])
        segments.append(_Segment(start, stop, bool(flat[start, stop - 1])))
        stop = start
    return segments[::-1]


def _segment_costs(x: FloatArray, y: FloatArray, sigma: float) -> tuple[FloatArray, npt.NDArray[np.bool_]]:
    """Cost of every segment ``[i, j]`` (``i`` rows, inclusive ``j`` columns) and whether flat fits it best.

    A segment's cost is its penalty plus its least-squares residual in units of ``sigma**2``,
    for the cheaper of two models: a line with slope clipped to ``MAX_PLATEAU_SLOPE`` (flat),
    or a free line that pays ``RAMP_PENALTY`` more (ramp).  Sums come from prefix sums.
    """
    xc, yc = x - x.mean(), y - y.mean()

    def window_sums(values: FloatArray) -> FloatArray:
        prefix = np.concatenate(([0.0], np.cumsum(values)))
        return prefix[None, 1:] - prefix[:-1, None]

    count = window_sums(np.ones_like(xc))
    valid = count > 0
    count = np.where(valid, count, 1.0)
    sum_x, sum_y = window_sums(xc), window_sums(yc)
    var_x = np.maximum(window_sums(xc * xc) - sum_x**2 / count, 0.0)
    cov_xy = window_sums(xc * yc) - sum_x * sum_y / count
    var_y = np.maximum(window_sums(yc * yc) - sum_y**2 / count, 0.0)

    has_spread = var_x > 1e-12
    free_slope = np.where(has_spread, cov_xy / np.where(has_spread, var_x, 1.0), 0.0)
    clipped_slope = np.clip(free_slope, -MAX_PLATEAU_SLOPE, MAX_PLATEAU_SLOPE)
    ramp_residual = np.maximum(var_y - free_slope * cov_xy, 0.0)
    flat_residual = np.maximum(var_y - 2 * clipped_slope * cov_xy + clipped_slope**2 * var_x, 0.0)

    variance = sigma * sigma
    flat_cost = flat_residual / variance
    ramp_cost = ramp_residual / variance + RAMP_PENALTY
    ramp_cost = np.where(count >= MIN_RAMP_POINTS, ramp_cost, np.inf)
    is_flat = flat_cost <= ramp_cost
    cost = np.where(valid, np.minimum(flat_cost, ramp_cost) + SEGMENT_PENALTY, np.inf)
    return cost, is_flat & valid


def _merge_plateaus(segments: list[_Segment], y: FloatArray) -> list[tuple[int, int]]:
    """Turn flat segments into plateaus ``(start, stop)``: merge near-equal neighbours, drop short ones.

    Candidates start as flat segments of two points or more.  The closest adjacent pair under
    ``MERGE_RATIO`` merges first (the merged plateau spans any points between them); when no
    pair is close enough, candidates shorter than ``MIN_PLATEAU_POINTS`` are dropped, which may
    make new neighbours, so the two steps repeat until nothing changes.
    """
    spans = [(s.start, s.stop) for s in segments if s.flat and s.size >= 2]
    merge_limit = math.log(MERGE_RATIO)
    while True:
        gaps = [abs(_span_level(y, a) - _span_level(y, b)) for a, b in zip(spans, spans[1:], strict=False)]
        if gaps and min(gaps) < merge_limit:
            k = int(np.argmin(gaps))
            spans[k : k + 2] = [(spans[k][0], spans[k + 1][1])]
            continue
        long_enough = [span for span in spans if span[1] - span[0] >= MIN_PLATEAU_POINTS]
        if len(long_enough) == len(spans):
            return spans
        spans = long_enough


def _span_level(y: FloatArray, span: tuple[int, int]) -> float:
    """Median of ``y`` over a span of points."""
    return float(np.median(y[span[0] : span[1]]))


def _levels(plateaus: list[tuple[int, int]], x: FloatArray, y: FloatArray, latencies: FloatArray) -> list[Level]:
    """Build the levels: plateau medians, extents, and the midpoint crossing to the next plateau."""
    levels: list[Level] = []
    for index, (start, stop) in enumerate(plateaus):
        size: float | None = None
        if index + 1 < len(plateaus):
            next_start, next_stop = plateaus[index + 1]
            threshold = (_span_level(y, (start, stop)) + _span_level(y, (next_start, next_stop))) / 2
            size = 2.0 ** _crossing(x[start:next_stop], y[start:next_stop], threshold)
        levels.append(
            Level(
                size_bytes=size,
                latency=float(np.median(latencies[start:stop])),
                first_footprint=float(2.0 ** x[start]),
                last_footprint=float(2.0 ** x[stop - 1]),
            )
        )
    return levels


def _crossing(x: FloatArray, y: FloatArray, threshold: float) -> float:
    """Where ``y(x)`` crosses ``threshold``, from the first plateau's side to the second's.

    The split point is the one that leaves the fewest points on the wrong side of the
    threshold (robust to a noisy point near the crossing); the crossing is then interpolated
    linearly between the two points around the split.
    """
    rising = y[-1] >= y[0]
    beyond = (y >= threshold) if rising else (y <= threshold)
    # wrong[s]: points before s already beyond the threshold plus points from s on not yet beyond it.
    wrong = np.concatenate(([0], np.cumsum(beyond))) + np.concatenate((np.cumsum((~beyond)[::-1])[::-1], [0]))
    split = int(np.argmin(wrong[1:-1])) + 1
    x0, x1, y0, y1 = x[split - 1], x[split], y[split - 1], y[split]
    if (y0 - threshold) * (y1 - threshold) > 0 or y0 == y1:
        return float((x0 + x1) / 2)
    return float(x0 + (threshold - y0) / (y1 - y0) * (x1 - x0))
