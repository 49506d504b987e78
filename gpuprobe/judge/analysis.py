"""Statistics for measured series: median confidence intervals and cache-level detection.

Everything here is a pure function of its arguments (numpy only, no randomness), so the
same measurements always give the same facts.

Cache-level detection (:func:`find_levels`) reads a latency-vs-footprint curve from a
random pointer chase, working on ln(latency) against log2(footprint):

1. Sort by footprint, drop NaN points, and set aside single-point upward spikes (timing
   outliers); a step between plateaus never rises above both of its neighbours.
2. Estimate the noise scale from the median absolute second difference.
3. Segment the curve optimally by dynamic programming.  A segment is either *flat* (a line
   whose slope is clipped to a small drift allowance) or, from ``MIN_RAMP_POINTS`` points
   on, a *ramp* (a free line, at an extra cost); every segment pays a penalty.  Costs are
   in units of the noise variance, so the same penalties suit quiet and noisy curves.  The
   noise scale is then re-estimated from the segments' residuals and the curve segmented
   again.
4. Flat segments of two points or more are plateau candidates.  Adjacent candidates whose
   levels differ by less than ``MERGE_RATIO`` merge (noise, drift and the shoulders of a
   transition split plateaus that belong together); candidates with fewer than
   ``MIN_PLATEAU_POINTS`` points are dropped.  Each plateau then takes in neighbouring
   points within ``EDGE_SIGMAS`` noise scales of its level; the rest are transitions.
5. A level ends where the curve crosses the geometric midpoint between its plateau's
   latency and the next plateau's, interpolated in log-footprint.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
Span = tuple[int, int]  # points start .. stop - 1 of the sorted, spike-free curve

MIN_PLATEAU_POINTS = 3
"""A level needs at least this many points on its plateau."""

MIN_PLATEAU_OCTAVES = 0.2
"""A level's plateau must also span this much footprint: a stair of a few points inside a
transition (seen on a recorded A40 curve: three flat points over 0.11 octave between L1 and L2)
is not a cache level. The narrowest real level in the recorded curves, an A100's far L2, spans
0.27 octave."""

MERGE_RATIO = 1.2
"""Adjacent plateaus closer than this latency ratio are one level."""

MAX_PLATEAU_SLOPE = 0.08
"""Drift a plateau may have, in ln(latency) per octave of footprint (about 8 % per octave)."""

NOISE_FLOOR = 0.01
"""Smallest noise scale assumed, in ln(latency) (1 %), so that clean curves segment sanely."""

SEGMENT_PENALTY = 6.0
"""Cost of one more segment, in units of the noise variance."""

RAMP_PENALTY = 10.0
"""Extra cost of a ramp (free slope) over a flat segment, in units of the noise variance."""

MIN_RAMP_POINTS = 4
"""Shorter segments are always fitted flat, so a three-point plateau is never mistaken for a ramp."""

EDGE_SIGMAS = 4.0
"""A point next to a plateau and this many noise scales from its level joins the plateau."""

SPIKE_SIGMAS = 6.0
SPIKE_RATIO = 1.25
"""A point rising above both neighbours by more than both margins is a spike (an outlier)."""


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


# ----------------------------------------------------------------------------- median_ci


def median_ci(samples: npt.ArrayLike, confidence: float = 0.95) -> tuple[float, float, float]:
    """Return ``(median, low, high)``: the sample median and a distribution-free interval for it.

    The interval is ``[x_(j), x_(n+1-j)]`` (1-based order statistics) with the largest ``j``
    whose coverage ``1 - 2 P(B <= j - 1)``, ``B ~ Binomial(n, 1/2)``, is at least
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
    coverage = 1.0 - 2.0 * _half_binomial_cdf(n)  # coverage[j - 1] is the coverage of rank j
    acceptable = np.flatnonzero(coverage >= confidence)
    if acceptable.size == 0:
        return None
    return int(acceptable[-1]) + 1


def _half_binomial_cdf(n: int) -> FloatArray:
    """``P(B <= k)`` for ``B ~ Binomial(n, 1/2)`` and ``k = 0 .. n // 2``, computed in log space."""
    k = np.arange(n // 2, dtype=np.float64)
    log_ratio = np.log((n - k) / (k + 1.0))  # ln C(n, k + 1) - ln C(n, k)
    log_pmf = n * math.log(0.5) + np.concatenate(([0.0], np.cumsum(log_ratio)))
    return np.cumsum(np.exp(log_pmf))


# --------------------------------------------------------------------------- find_levels


def find_levels(footprint_bytes: npt.ArrayLike, latency: npt.ArrayLike) -> list[Level]:
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
    log_latency = np.log(latencies)
    kept = ~_isolated_spikes(log_latency, max(_noise_scale(log_latency), NOISE_FLOOR))
    footprints, latencies = footprints[kept], latencies[kept]
    x, y = np.log2(footprints), log_latency[kept]

    sigma = max(_noise_scale(y), NOISE_FLOOR)
    segments = _segment(x, y, sigma)
    sigma = max(_residual_noise_scale(x, y, segments), NOISE_FLOOR)
    segments = _segment(x, y, sigma)
    plateaus = _grown(_plateaus(segments, x, y), y, sigma)
    return [_level(pair, x, y, footprints, latencies) for pair in _with_next(plateaus)]


def _valid_sorted_points(footprint_bytes: npt.ArrayLike, latency: npt.ArrayLike) -> tuple[FloatArray, FloatArray]:
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


def _isolated_spikes(y: FloatArray, sigma: float) -> BoolArray:
    """Mark single points that rise above both neighbours by more than a spike margin.

    The margin is the larger of ``SPIKE_SIGMAS`` noise scales and ``ln(SPIKE_RATIO)``.  Timing
    outliers only ever add time, and a step between plateaus never rises above both of its
    neighbours, so only upward single-point spikes are marked.  The first point is a spike
    when it lies that far above the second (no cache makes latency fall); the last point is
    never marked, since it may be the start of the next step.
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

    A second difference of independent noise has variance ``6 sigma**2``.  Plateaus and
    straight ramps contribute only noise; steps and spikes spoil a minority of the values.
    """
    if y.size < 3:
        return 0.0
    second_differences = y[:-2] - 2 * y[1:-1] + y[2:]
    return float(1.4826 * np.median(np.abs(second_differences)) / math.sqrt(6.0))


@dataclass(frozen=True)
class _Segment:
    """Points ``start`` to ``stop - 1`` of the curve, fitted flat or as a ramp."""

    start: int
    stop: int
    flat: bool

    @property
    def size(self) -> int:
        return self.stop - self.start


def _segment(x: FloatArray, y: FloatArray, sigma: float) -> list[_Segment]:
    """Optimal penalised segmentation of ``y(x)`` into flat segments and ramps (dynamic programming)."""
    cost, flat = _segment_costs(x, y, sigma)
    n = x.size
    best_cost = np.zeros(n + 1)  # best_cost[k]: cheapest segmentation of the first k points
    last_start = np.zeros(n + 1, dtype=np.int64)  # where its last segment starts
    for end in range(n):
        candidates = best_cost[: end + 1] + cost[: end + 1, end]
        start = int(np.argmin(candidates))
        best_cost[end + 1] = candidates[start]
        last_start[end + 1] = start
    segments: list[_Segment] = []
    stop = n
    while stop > 0:
        start = int(last_start[stop])
        segments.append(_Segment(start, stop, bool(flat[start, stop - 1])))
        stop = start
    return segments[::-1]


def _segment_costs(x: FloatArray, y: FloatArray, sigma: float) -> tuple[FloatArray, BoolArray]:
    """Cost of every segment of points ``i .. j`` (row ``i``, column ``j``) and whether it is flat.

    A segment costs ``SEGMENT_PENALTY`` plus its least-squares residual in units of
    ``sigma**2``, for the cheaper of two models: a line with its slope clipped to
    ``MAX_PLATEAU_SLOPE`` (flat), or a free line, for ``RAMP_PENALTY`` more and only from
    ``MIN_RAMP_POINTS`` points on (ramp).  All sums come from prefix sums.
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
    flat_residual = np.maximum(var_y - 2 * clipped_slope * cov_xy + clipped_slope**2 * var_x, 0.0)
    ramp_residual = np.maximum(var_y - free_slope * cov_xy, 0.0)

    variance = sigma * sigma
    flat_cost = flat_residual / variance
    ramp_cost = np.where(count >= MIN_RAMP_POINTS, ramp_residual / variance + RAMP_PENALTY, np.inf)
    cost = np.where(valid, np.minimum(flat_cost, ramp_cost) + SEGMENT_PENALTY, np.inf)
    return cost, valid & (flat_cost <= ramp_cost)


def _residual_noise_scale(x: FloatArray, y: FloatArray, segments: list[_Segment]) -> float:
    """Robust noise scale from the residuals of the segments that have any (three points or more).

    The median absolute residual is scaled up for the two parameters fitted per segment.
    """
    fitted = [seg for seg in segments if seg.size > 2]
    if not fitted:
        return 0.0
    residuals = np.concatenate(
        [_fit_residuals(x[seg.start : seg.stop], y[seg.start : seg.stop], seg.flat) for seg in fitted]
    )
    degrees_of_freedom = residuals.size - 2 * len(fitted)
    return float(1.4826 * np.median(np.abs(residuals)) * math.sqrt(residuals.size / degrees_of_freedom))


def _fit_residuals(x: FloatArray, y: FloatArray, flat: bool) -> FloatArray:
    """Residuals of a segment's model: a least-squares line, its slope clipped if ``flat``."""
    dx, dy = x - x.mean(), y - y.mean()
    spread = float(np.dot(dx, dx))
    slope = float(np.dot(dx, dy) / spread) if spread > 1e-12 else 0.0
    if flat:
        slope = float(np.clip(slope, -MAX_PLATEAU_SLOPE, MAX_PLATEAU_SLOPE))
    return dy - slope * dx


def _plateaus(segments: list[_Segment], x: FloatArray, y: FloatArray) -> list[Span]:
    """Turn flat segments into plateaus: merge near-equal neighbours, drop short ones.

    Candidates are the flat segments of two points or more.  The closest adjacent pair under
    ``MERGE_RATIO`` merges first (the merged plateau spans any points between them); when no
    pair is close enough, candidates shorter than ``MIN_PLATEAU_POINTS`` or narrower than
    ``MIN_PLATEAU_OCTAVES`` are dropped, which
    may make new neighbours, so the two steps repeat until nothing changes.
    """
    spans = [(seg.start, seg.stop) for seg in segments if seg.flat and seg.size >= 2]
    merge_limit = math.log(MERGE_RATIO)
    while True:
        gaps = [abs(_span_level(y, left) - _span_level(y, right)) for left, right in itertools.pairwise(spans)]
        if gaps and min(gaps) < merge_limit:
            k = int(np.argmin(gaps))
            spans[k : k + 2] = [(spans[k][0], spans[k + 1][1])]
            continue
        long_enough = [
            (start, stop)
            for start, stop in spans
            if stop - start >= MIN_PLATEAU_POINTS and x[stop - 1] - x[start] >= MIN_PLATEAU_OCTAVES
        ]
        if len(long_enough) == len(spans):
            return spans
        spans = long_enough


def _grown(plateaus: list[Span], y: FloatArray, sigma: float) -> list[Span]:
    """Extend each plateau over neighbouring free points within ``EDGE_SIGMAS`` noise scales of its level.

    The segmentation may leave a plateau's noisiest edge point on its own; it belongs to the level.
    """
    grown: list[Span] = []
    for index, (start, stop) in enumerate(plateaus):
        level = _span_level(y, (start, stop))
        lowest = grown[-1][1] if grown else 0
        highest = plateaus[index + 1][0] if index + 1 < len(plateaus) else y.size
        while start > lowest and abs(y[start - 1] - level) <= EDGE_SIGMAS * sigma:
            start -= 1
        while stop < highest and abs(y[stop] - level) <= EDGE_SIGMAS * sigma:
            stop += 1
        grown.append((start, stop))
    return grown


def _with_next(spans: list[Span]) -> list[tuple[Span, Span | None]]:
    """Each span with the one after it (``None`` after the last)."""
    return [(span, spans[index + 1] if index + 1 < len(spans) else None) for index, span in enumerate(spans)]


def _span_level(y: FloatArray, span: Span) -> float:
    """Median of ``y`` over a span."""
    return float(np.median(y[span[0] : span[1]]))


def _level(
    plateau_and_next: tuple[Span, Span | None],
    x: FloatArray,
    y: FloatArray,
    footprints: FloatArray,
    latencies: FloatArray,
) -> Level:
    """The level of one plateau: its median latency, its extent, and where the next plateau takes over."""
    (start, stop), following = plateau_and_next
    size: float | None = None
    if following is not None:
        level, next_level = _span_level(y, (start, stop)), _span_level(y, following)
        end = following[1]
        size = 2.0 ** _crossing(x[start:end], y[start:end], (level + next_level) / 2, rising=next_level > level)
    return Level(
        size_bytes=size,
        latency=float(np.median(latencies[start:stop])),
        first_footprint=float(footprints[start]),
        last_footprint=float(footprints[stop - 1]),
    )


def _crossing(x: FloatArray, y: FloatArray, threshold: float, rising: bool) -> float:
    """Where ``y(x)`` crosses ``threshold`` on its way from one plateau to the next.

    The split between two consecutive points is the one that leaves the fewest points on the
    wrong side of the threshold (robust to a noisy point near the crossing); the crossing is
    interpolated linearly between those two points.
    """
    beyond = y >= threshold if rising else y <= threshold
    # wrong[s]: points before s already beyond the threshold plus points from s on not yet beyond it.
    wrong = np.concatenate(([0], np.cumsum(beyond))) + np.concatenate((np.cumsum(~beyond[::-1])[::-1], [0]))
    split = int(np.argmin(wrong[1:-1])) + 1
    x0, x1, y0, y1 = x[split - 1], x[split], y[split - 1], y[split]
    if (y0 - threshold) * (y1 - threshold) > 0 or y0 == y1:
        return float((x0 + x1) / 2)
    return float(x0 + (threshold - y0) / (y1 - y0) * (x1 - x0))
