"""How far one GPU's fact lies from its model's median, in units that only a real difference exceeds.

A fleet report (:mod:`gpuprobe.fleet.aggregate`) scores each GPU's value ``x`` of each fact by
``z = (x - median) / scale`` over the GPUs of one model, and calls ``|z| > threshold`` (3.5) an outlier.
The scale is the largest of the GPUs' spread, the fact's own noise (:func:`noise_floor`) and a practical
floor; an exact fact's is the spread alone, never below :data:`EXACT_FLOOR`. docs/fleet.md ("Comparing
results") says why each.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist
from typing import TYPE_CHECKING

from gpuprobe.core.detection import run_to_run_pct

if TYPE_CHECKING:
    import numpy as np  # imported where used: `gpuprobe --help` stays quick

MAD_TO_Z = 0.6745  # the 0.75 quantile of the standard normal: MAD / 0.6745 estimates sigma
CI_HALF_WIDTH_IN_SE = 1.96  # a 95 % confidence interval reaches about 1.96 standard errors either side
EXACT_FLOOR = 1e-3  # an exact fact's scale is never below 0.1 % of |median| (see the module docstring)
FLEET_ALPHA = 0.01
"""The probability that noise alone makes an outlier of some GPU in a report on a fleet of identical GPUs."""

SPREAD = "spread"
NOISE = "noise"
PRACTICAL = "floor"
EXACT = "exact"
SOURCES = (SPREAD, NOISE, PRACTICAL, EXACT)
"""Where a fact's scale came from, as the report names it."""


def measured_noise(median: float, half_widths: Sequence[float], fact_id: str, unit: str) -> float:
    """One GPU's run-to-run standard deviation of a fact, from the fact's own measurements: the median
    CI half-width over the GPUs that recorded one, as a standard error, and the run-to-run allowance for
    its kind of quantity, in quadrature. 0 for an exact fact (no interval, no allowance)."""
    import numpy as np

    standard_error = float(np.median(half_widths)) / CI_HALF_WIDTH_IN_SE if len(half_widths) else 0.0
    between_runs = run_to_run_pct(fact_id, unit) / 100.0 * abs(median)
    return math.hypot(standard_error, between_runs)


def noise_quantile(values_judged: int, alpha: float = FLEET_ALPHA) -> float:
    """How many standard deviations of noise a deviation must exceed so that, over ``values_judged``
    values (every judged fact of every GPU), noise alone exceeds it with probability ``alpha``: the
    two-sided Bonferroni quantile of the normal."""
    return NormalDist().inv_cdf(1.0 - alpha / (2.0 * max(1, values_judged)))


def noise_floor(noise: float, gpus: int, quantile: float, threshold: float) -> float:
    """The scale below which noise could make ``|z| > threshold``: ``noise`` with the median's own
    noise added (``1 + pi / (2 gpus)`` in variance), times ``quantile / threshold``."""
    return noise * math.sqrt(1.0 + math.pi / (2.0 * gpus)) * quantile / threshold


@dataclass(frozen=True)
class RobustZ:
    """The centre, the scale chosen and where it came from, and the z-scores of one fact across GPUs."""

    median: float
    mad: float
    scale: float  # what z divides by: the largest candidate
    source: str  # which candidate that was: one of SOURCES
    z: np.ndarray


def robust_z(values: np.ndarray, noise: float = 0.0, practical_fraction: float = 0.0) -> RobustZ:
    """``z = (x - median) / scale`` with the scale the largest of the spread (``MAD / 0.6745``), the
    ``noise`` floor and ``practical_fraction * |median|``; with no ``noise`` (an exact fact), the largest
    of the spread and ``EXACT_FLOOR * |median|`` (for a median of 0, of the largest deviation). All
    values equal: every z is 0.
    """
    import numpy as np

    median = float(np.median(values))
    deviations = values - median
    mad = float(np.median(np.abs(deviations)))
    spread = mad / MAD_TO_Z
    if noise > 0:
        candidates = {SPREAD: spread, NOISE: noise, PRACTICAL: practical_fraction * abs(median)}
    else:
        largest = float(np.abs(deviations).max()) if len(values) else 0.0
        candidates = {SPREAD: spread, EXACT: EXACT_FLOOR * (abs(median) or largest)}
    source = max(candidates, key=lambda name: candidates[name])  # a tie goes to the first: the spread
    scale = candidates[source]
    z = np.zeros_like(values) if scale == 0 else deviations / scale
    return RobustZ(median, mad, scale, source, z)
