"""A cache-hierarchy latency model that fabricates pointer-chase curves for tests.

Every curve built here is made up.  A hierarchy is a list of
``(capacity_bytes, latency_cycles)`` pairs, fastest first; the last level (memory) has
capacity ``None``.

For a footprint F, each cache of capacity C misses a fraction ``m(F)`` of the chase:

* ``"sharp"``: ~LRU, no misses up to C, then a short linear ramp to all misses over
  ``SHARP_RAMP_OCTAVES`` (a chase point just past C catches part of the step);
* ``"smooth"``: a logistic in log2(F/C) (non-LRU replacement, hashing, TLB effects) whose
  10-90 % rise spans ``smooth_width_octaves`` and whose centre sits a fifth of that past C.
  A transition is never wider than ``MAX_TRANSITION_SHARE`` of the octaves to a neighbouring
  capacity, so every level keeps a plateau to be found: the near/far split of an A100/H100
  L2 leaves the far level one octave (four points at four per octave), and its steps stay
  nearly sharp.

Caches are inclusive: the fraction served by level ``i`` or faster is the running maximum of
the hit fractions, and the average latency is the served-fraction-weighted mix.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
Hierarchy = list[tuple[float | None, float]]

KIB, MIB = 2**10, 2**20

SHARP_RAMP_OCTAVES = 0.1
SMOOTH_CENTRE_SHARE = 0.2
MAX_TRANSITION_SHARE = 0.15
LOGISTIC_10_90_SPAN = 2 * math.log(9.0)  # in units of the logistic's scale

HIERARCHIES: dict[str, Hierarchy] = {
    "T4": [(64 * KIB, 32.0), (4 * MIB, 220.0), (None, 500.0)],
    "V100": [(128 * KIB, 28.0), (6 * MIB, 193.0), (None, 450.0)],
    "A100": [(192 * KIB, 34.0), (20 * MIB, 210.0), (40 * MIB, 380.0), (None, 620.0)],
    "H100": [(256 * KIB, 33.0), (25 * MIB, 260.0), (50 * MIB, 480.0), (None, 700.0)],
    "RTX4090": [(128 * KIB, 30.0), (72 * MIB, 270.0), (None, 550.0)],
    # Five levels, with a 1.3x step (40 -> 52 cycles) the detector must still resolve.
    "synthetic5": [(32 * KIB, 20.0), (256 * KIB, 40.0), (2 * MIB, 52.0), (16 * MIB, 130.0), (None, 300.0)],
}


def log_footprints(start: float, stop: float, per_octave: int = 4) -> FloatArray:
    """Footprints ``start * 2**(k / per_octave)`` up to and including ``stop``."""
    octaves = math.log2(stop / start)
    steps = math.floor(octaves * per_octave + 1e-9)
    return start * 2.0 ** (np.arange(steps + 1) / per_octave)


def curve(
    levels: Hierarchy,
    footprints: npt.ArrayLike,
    transition: str = "sharp",
    noise: float = 0.0,
    outliers: int = 0,
    drift_per_octave: float = 0.0,
    seed: int = 0,
    smooth_width_octaves: float = 1.0,
) -> FloatArray:
    """Average pointer-chase latency at each footprint for a cache hierarchy.

    Args:
        levels: ``(capacity_bytes, latency_cycles)`` fastest first, the last capacity ``None``.
        footprints: chase footprints in bytes.
        transition: ``"sharp"`` or ``"smooth"`` (see the module docstring).
        noise: relative standard deviation of multiplicative gaussian noise.
        outliers: how many single, non-adjacent points to multiply by 2-5x.
        drift_per_octave: the last level's latency grows by this factor per octave beyond
            its start (the last cache's capacity), as TLB misses pile up.
        seed: seed for the noise and outliers.
        smooth_width_octaves: 10-90 % width of a smooth transition.
    """
    _check_hierarchy(levels, transition)
    sizes = np.asarray(footprints, dtype=np.float64)
    served = _served_fractions(levels, sizes, transition, smooth_width_octaves)
    latencies = np.array([latency for _, latency in levels], dtype=np.float64)[:, None] * np.ones_like(sizes)
    latencies[-1] *= _drift_factor(levels, sizes, drift_per_octave)
    mean_latency = np.sum(served * latencies, axis=0)
    rng = np.random.default_rng(seed)
    mean_latency *= np.clip(1.0 + noise * rng.standard_normal(sizes.size), 0.05, None)
    for index in _outlier_positions(rng, sizes.size, outliers):
        mean_latency[index] *= rng.uniform(2.0, 5.0)
    return mean_latency


def _check_hierarchy(levels: Hierarchy, transition: str) -> None:
    """Reject hierarchies the model cannot describe."""
    if transition not in ("sharp", "smooth"):
        raise ValueError(f"transition must be 'sharp' or 'smooth', got {transition!r}")
    if not levels or levels[-1][0] is not None:
        raise ValueError("the last level must have capacity None")
    capacities = [capacity for capacity, _ in levels[:-1]]
    if any(capacity is None for capacity in capacities):
        raise ValueError("only the last level may have capacity None")
    if any(b <= a for a, b in itertools.pairwise(capacities)):  # type: ignore[operator]
        raise ValueError("capacities must increase")


def _served_fractions(levels: Hierarchy, sizes: FloatArray, transition: str, width: float) -> FloatArray:
    """Fraction of accesses served by each level (rows) at each footprint (columns)."""
    capacities = [float(capacity) for capacity, _ in levels[:-1]]  # type: ignore[arg-type]
    hits = [
        1.0 - _miss_fraction(sizes, capacity, transition, _transition_width(capacities, i, width))
        for i, capacity in enumerate(capacities)
    ]
    served_or_faster = np.maximum.accumulate(np.vstack([*hits, np.ones_like(sizes)]), axis=0)
    return np.diff(served_or_faster, axis=0, prepend=0.0)


def _transition_width(capacities: list[float], index: int, width: float) -> float:
    """Smooth width for cache ``index``, capped by the octaves to its neighbouring capacities."""
    neighbours = capacities[max(index - 1, 0) : index + 2]
    gaps = [abs(math.log2(other / capacities[index])) for other in neighbours if other != capacities[index]]
    return min([width, *(MAX_TRANSITION_SHARE * gap for gap in gaps)])


def _miss_fraction(sizes: FloatArray, capacity: float, transition: str, width: float) -> FloatArray:
    """Fraction of a random chase over ``sizes`` bytes that misses a cache of ``capacity`` bytes."""
    octaves_past = np.log2(sizes / capacity)
    if transition == "sharp":
        return np.clip(octaves_past / SHARP_RAMP_OCTAVES, 0.0, 1.0)
    scale = width / LOGISTIC_10_90_SPAN
    return 1.0 / (1.0 + np.exp(-(octaves_past - SMOOTH_CENTRE_SHARE * width) / scale))


def _drift_factor(levels: Hierarchy, sizes: FloatArray, drift_per_octave: float) -> FloatArray:
    """``(1 + drift)**octaves`` beyond the last level's start (the last cache, or the smallest footprint)."""
    start = float(levels[-2][0]) if len(levels) > 1 else float(sizes.min())  # type: ignore[arg-type]
    octaves_beyond = np.maximum(np.log2(sizes / start), 0.0)
    return (1.0 + drift_per_octave) ** octaves_beyond


def _outlier_positions(rng: np.random.Generator, n: int, count: int) -> list[int]:
    """``count`` distinct indices, no two adjacent (each outlier is a single point)."""
    chosen: list[int] = []
    for index in rng.permutation(n):
        if len(chosen) == count:
            break
        if all(abs(int(index) - other) > 1 for other in chosen):
            chosen.append(int(index))
    if len(chosen) < count:
        raise ValueError(f"cannot place {count} separated outliers among {n} points")
    return chosen
