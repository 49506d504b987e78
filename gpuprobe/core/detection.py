"""What a fact's samples can detect: its noise, a two-sample test, and the smallest change it would see.

A comparison of two runs asks of each fact whether the mean of its samples moved beyond what their
spread and a run-to-run allowance explain: Student's pooled two-sample t-test at :data:`FACT_ALPHA` per
fact. docs/detection.md says why this test, what the allowance is, and how the smallest detectable
change is found.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

FACT_ALPHA = 0.001
"""Two-sided probability that the test calls one unchanged fact changed."""

POWER = 0.8
"""The probability with which a change of the smallest detectable size is flagged."""

TARGET_PCT = 5.0
"""The change every fact should be able to detect; a fact that cannot says why."""

MOST_SAMPLES = 50
"""A fact that would need more samples than this a side to detect ``TARGET_PCT`` is a noisy quantity."""

TOO_FEW = "too few samples"
NOISY = "a noisy quantity"
RUN_TO_RUN = "run-to-run noise"

RUN_TO_RUN_PCT = {"device": 0.5, "clocked": 0.75, "fitted": 1.0, "ratio": 1.0, "host": 1.0, "exact": 0.0}
"""The relative spread (one standard deviation per run, percent) allowed between two runs of an unchanged
GPU, by kind of quantity (:func:`quantity_kind`), and what each figure rests on. "Runs 1 and 2" are the two
stored full runs of an H200 (tests/data/h200_first_run_results.json, reports/nvidia-h200/results.json):
two boards of one model, two VMs and 11 commits of host code apart, so an upper bound on what one GPU
moves; tests/test_repeatability.py recomputes every figure below from them and holds these allowances to it.

- ``device`` 0.5 %: what the GPU times on itself, in cycles, per clock or in seconds of device time
  (latencies, per-clock issue rates, DRAM bandwidth). Runs 1 and 2: 172 such facts in both, median move
  0.0025 %, 95 % within 0.18 %; with each fact's own noise and 0.5 % a run, one lies beyond the comparison's
  p < 0.001: ``l2.near_latency``, whose decision rule changed between the runs. Per-clock rates moved at
  most 0.11 %, so for them 0.5 % is generous; DRAM and other device-time rates have no pair of real runs
  yet (run 1 lacks them) and rest on the simulated GPU's 0.5 %.
- ``clocked`` 0.75 %: a rate per second (or the clock itself) of work the SMs or the L2 do: TFLOP/s, MHz,
  atomics' Gop/s and the GB/s of L1, L2, shared memory and DSMEM. It is a per-clock rate times the clock the
  run settled on under that load, and the clock is what moves: between runs 1 and 2 the mma TFLOP/s moved
  0.11 to 0.76 % while their per-clock rates moved at most 0.08 %. Those eight moves give 0.29 % a run and
  would pass at 0.5 %; the allowance is set higher because the clock under tensor load was sampled once per
  board and moves with power and temperature (run 2's wgmma clocks span 1610 to 1800 MHz with the operands'
  type and data). 0.75 % puts the largest move at 0.71 standard deviations of a difference and keeps a 5 %
  change detectable (from about 0.86 % a run, no sample count would detect it). One fact lies beyond its
  noise and the allowance: ``atomic.global.red.throughput.distinct``, +4.4 % on the other board.
- ``fitted`` 1 %: a size or a count read off a curve (a capacity's knee between two footprint grid points,
  a line size from the ratio of two such knees, the occupancy where a bandwidth sweep saturates). Runs 1 and
  2: ``capacity.l2`` moved 1.25 %, ``capacity.l1`` 0.005 %, ``cache.l1.line_bytes`` not at all. A
  comparison judges such a fact by its stored interval (the grid points around the knee) before anything.
- ``ratio`` 1 %: a fraction of two measurements (of a peak, of cuBLAS, of memcpy, a share of SMs) moves
  with both: about the two allowances in quadrature, rounded up. Runs 1 and 2: ``l2.partition_consistency``
  moved 1.6 %; ``l2.near_line_fraction`` moved 49 % with the partition rule.
- ``host`` 1 %: what the host takes part in (``host.*``, ``launch.*``), on one host. No stored pair of runs
  shares a host: between runs 1 and 2 (two VMs) 7 of these 12 facts moved 3 to 202 %, beyond any
  allowance, so a comparison of two hosts labels their changes DIFFERENT HOST, or UNKNOWN when it cannot
  tell the hosts apart, never WORSE. On one host the 1 % rests on the simulated GPU's model of an enqueue
  or a PCIe copy.
- ``exact`` 0: counts, flags, a size the device reports (``device.*``) or a probe decides on a grid (a
  sector size, ``l2.partition_count``). Runs 1 and 2: all equal but ``l2.partition_count`` (1 -> 2), which
  the changed decision rule moved; a comparison calls such a change CHANGED, never noise."""

KIND_TEXT = {
    "device": "measured on the GPU",
    "clocked": "rates at the clock the GPU ran",
    "fitted": "sizes read off a curve",
    "ratio": "ratios",
    "host": "host costs, on one host",
}
"""What each kind with an allowance holds, in a few words (the comparison's method line)."""

HOST_PREFIXES = ("host.", "launch.")
EXACT_UNITS = frozenset({"byte", "count", "bool"})
FITTED_PREFIXES = ("capacity.",)
"""A capacity is where a latency curve's plateau ends, between two footprint grid points."""
FITTED_SUFFIXES = (".line_bytes", ".reach_bytes", "no_step_below_bytes")
"""A line size is the ratio of two such capacities (dense and one node per line), rounded to a power of two; a
TLB's reach is where a page-stride chase steps up, and the footprint below which it did not, points of a grid."""
FITTED_PARTS = ("_saturation",)
"""The occupancy at which a bandwidth sweep first reaches a share of its best: a point on a noisy curve."""
CLOCKED_UNITS = frozenset({"TFLOP/s", "MHz", "Gop/s"})
ON_CHIP_LEVELS = ("l1", "l2", "shared", "dsmem")
"""A GB/s fact whose id names one of these (``bandwidth.l2_read.v16``, ``dsmem.bandwidth.peer``) moves
with the SM and L2 clocks; DRAM, PCIe and NVLink rates move with clocks a run does not set."""


# --------------------------------------------------------------------------- Student's t


def _continued_fraction(a: float, b: float, x: float) -> float:
    """The continued fraction of the regularized incomplete beta function (modified Lentz's method)."""
    tiny = 1e-300
    c, d = 1.0, 1.0 - (a + b) * x / (a + 1.0)
    d = 1.0 / (d if abs(d) > tiny else tiny)
    value = d
    for m in range(1, 400):
        for numerator in (
            m * (b - m) * x / ((a + 2 * m - 1) * (a + 2 * m)),
            -(a + m) * (a + b + m) * x / ((a + 2 * m) * (a + 2 * m + 1)),
        ):
            d = 1.0 + numerator * d
            d = 1.0 / (d if abs(d) > tiny else tiny)
            c = 1.0 + numerator / c
            c = c if abs(c) > tiny else tiny
            value *= c * d
        if abs(c * d - 1.0) < 1e-15:
            break
    return value


def incomplete_beta(a: float, b: float, x: float) -> float:
    """The regularized incomplete beta function ``I_x(a, b)`` for ``a, b > 0``, ``0 <= x <= 1``."""
    if x <= 0.0:
        return 0.0
    if x >= 1.0:
        return 1.0
    log_front = math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b) + a * math.log(x) + b * math.log1p(-x)
    if x < (a + 1.0) / (a + b + 2.0):
        return math.exp(log_front) * _continued_fraction(a, b, x) / a
    return 1.0 - math.exp(log_front) * _continued_fraction(b, a, 1.0 - x) / b


def t_two_sided(t: float, df: float) -> float:
    """``P(|T| >= |t|)`` for Student's t with ``df`` degrees of freedom (``df`` need not be whole)."""
    if math.isinf(t):
        return 0.0
    return incomplete_beta(df / 2.0, 0.5, df / (df + t * t))


@functools.lru_cache(maxsize=4096)
def t_quantile(p: float, df: float) -> float:
    """The ``t`` with ``P(T <= t) = p`` for ``0.5 <= p < 1`` (by bisection on :func:`t_two_sided`)."""
    tail = 2.0 * (1.0 - p)
    low, high = 0.0, 1.0
    while t_two_sided(high, df) > tail:
        high *= 2.0
    for _ in range(200):
        middle = (low + high) / 2.0
        if t_two_sided(middle, df) > tail:
            low = middle
        else:
            high = middle
        if high - low <= 1e-12 * high:
            break
    return (low + high) / 2.0


_GRID = 200
_TRAPEZOID = np.array([0.5] + [1.0] * (_GRID - 1) + [0.5])  # the trapezoid rule's weights on the grid's nodes
_ROOT2 = math.sqrt(2.0)


def _power(shift: float, critical: float, df: float) -> float:
    """``P(T > critical)`` for ``T`` noncentral t with ``df`` degrees of freedom and noncentrality ``shift``.

    ``T = (Z + shift) / sqrt(V / df)`` with ``V`` chi-square: the mean over ``V`` of
    ``P(Z > critical * sqrt(V / df) - shift)``, integrated over ``ln V`` (smooth for every ``df``) by
    the trapezoid rule on a grid that spans the chi-square's mass. The lower tail (a change flagged the
    wrong way) is left out: it is below 1e-6 at any shift that matters. The grid is one array: this runs
    for every fact of every run, a few dozen times each.
    """
    centre, width = math.log(df), 12.0 * math.sqrt(2.0 / df)
    low, high = centre - width - 40.0 / df, centre + width + 2.0
    y = np.linspace(low, high, _GRID + 1)  # ln V at the grid's nodes
    v = np.exp(y)
    density = np.exp(df / 2.0 * (y - centre) - (v - df) / 2.0) * _TRAPEZOID
    z = shift - critical * np.sqrt(v / df)
    below = np.array([0.5 * (1.0 + math.erf(x / _ROOT2)) for x in z.tolist()])  # the normal CDF at each node
    return float(density @ below / density.sum())


@functools.lru_cache(maxsize=4096)
def shift_for_power(alpha: float, df: float) -> float:
    """The mean shift, in standard errors, that a t-test at ``alpha`` with ``df`` degrees of freedom
    flags with probability ``POWER`` (bisection: the power grows with the shift)."""
    critical = t_quantile(1.0 - alpha / 2.0, df)
    low, high = critical, critical + t_quantile(POWER, df) + 1.0
    while _power(high, critical, df) < POWER:
        low, high = high, 2.0 * high
    for _ in range(40):
        middle = (low + high) / 2.0
        low, high = (middle, high) if _power(middle, critical, df) < POWER else (low, middle)
    return high


# --------------------------------------------------------------------------- between runs


def quantity_kind(fact_id: str, unit: str) -> str:
    """Which :data:`RUN_TO_RUN_PCT` kind a fact is, by its id and unit: ``fitted`` (a size or count read off
    a curve, named by id: its unit says byte or count, yet it is an estimate), ``exact`` (other bytes,
    counts and flags), ``host``, ``ratio``, ``clocked`` or ``device`` (see :data:`RUN_TO_RUN_PCT`)."""
    if _is_fitted(fact_id):
        return "fitted"
    if unit in EXACT_UNITS:
        return "exact"
    if fact_id.startswith(HOST_PREFIXES):
        return "host"
    if unit == "fraction":
        return "ratio"
    if _is_clocked(fact_id, unit):
        return "clocked"
    return "device"


def _is_fitted(fact_id: str) -> bool:
    return (
        fact_id.startswith(FITTED_PREFIXES)
        or fact_id.endswith(FITTED_SUFFIXES)
        or any(part in fact_id for part in FITTED_PARTS)
    )


def _is_clocked(fact_id: str, unit: str) -> bool:
    if unit in CLOCKED_UNITS:
        return True
    return unit == "GB/s" and any(part.startswith(ON_CHIP_LEVELS) for part in fact_id.split("."))


def run_to_run_pct(fact_id: str, unit: str) -> float:
    """The run-to-run spread, in percent, a comparison allows a fact (:data:`RUN_TO_RUN_PCT`)."""
    return RUN_TO_RUN_PCT[quantity_kind(fact_id, unit)]


# --------------------------------------------------------------------------- one run's samples


@dataclass(frozen=True)
class Spread:
    """One run's finite samples of a fact: count, mean and sample variance (``nan`` under 2 samples)."""

    n: int
    mean: float
    variance: float

    @classmethod
    def of(cls, samples: Sequence[float]) -> Spread:
        finite = [float(s) for s in samples if math.isfinite(s)]
        n = len(finite)
        mean = math.fsum(finite) / n if n else math.nan
        variance = math.fsum((s - mean) ** 2 for s in finite) / (n - 1) if n >= 2 else math.nan
        return cls(n, mean, variance)

    @property
    def noise_pct(self) -> float | None:
        """The relative spread: the samples' standard deviation in percent of their mean's size."""
        if self.n < 2 or self.mean == 0:
            return None
        return math.sqrt(self.variance) / abs(self.mean) * 100.0


# --------------------------------------------------------------------------- two runs


@dataclass(frozen=True)
class TwoSample:
    """The t-test of two runs' samples: the means' difference, its standard error, df and p-value."""

    change: float
    standard_error: float
    df: float
    p_value: float

    def changed(self, alpha: float = FACT_ALPHA) -> bool:
        return self.p_value < alpha

    def detectable(self, alpha: float = FACT_ALPHA) -> float:
        """The smallest shift of the mean (in the fact's unit) this test flags with probability ``POWER``."""
        return shift_for_power(alpha, self.df) * self.standard_error


MOST_DF = 10_000.0
"""Degrees of freedom past which Student's t is the normal (a known variance has infinitely many)."""


def effective_df(within: float, df: int, known: float) -> float:
    """Satterthwaite's degrees of freedom of ``within + known``, the first estimated with ``df``, the
    second known; rounded down to two significant digits (conservative, and the quantiles cached)."""
    if known == 0.0:
        return float(df)
    if within == 0.0:
        return MOST_DF
    exact = min(MOST_DF, df * ((within + known) / within) ** 2)
    step = 10.0 ** max(0, math.floor(math.log10(exact)) - 1)
    return math.floor(exact / step) * step


def run_to_run_variance(base_mean: float, new_mean: float, run_to_run: float) -> float:
    """The variance of two runs' difference that ``run_to_run`` percent of the means' size allowed each run
    for the variation between runs adds (one allowance for each run)."""
    scale = (abs(base_mean) + abs(new_mean)) / 2.0
    return 2.0 * (run_to_run / 100.0 * scale) ** 2


def t_test(base: Spread, new: Spread, run_to_run: float = 0.0) -> TwoSample | None:
    """Student's pooled two-sample t-test of ``new`` against ``base``, with ``run_to_run`` percent of
    the means' size allowed each run for the variation between runs; ``None`` when a side has fewer
    than two samples (no noise estimate of its own to check the other's by).

    Samples that never vary (a quantised count read the same every time) and no allowance: any change
    of their mean is beyond the noise (p-value 0), none is within it (p-value 1).
    """
    if base.n < 2 or new.n < 2:
        return None
    change, df = new.mean - base.mean, base.n + new.n - 2
    pooled = ((base.n - 1) * base.variance + (new.n - 1) * new.variance) / df
    within = pooled * (1.0 / base.n + 1.0 / new.n)
    known = run_to_run_variance(base.mean, new.mean, run_to_run)
    error = math.sqrt(within + known)
    if error == 0.0:
        return TwoSample(change, 0.0, df, 0.0 if change else 1.0)
    freedom = effective_df(within, df, known)
    return TwoSample(change, error, freedom, t_two_sided(change / error, freedom))


# --------------------------------------------------------------------------- what a fact records


@dataclass(frozen=True)
class Detection:
    """What one fact's samples can detect against a run like its own.

    Attributes:
        samples: how many finite samples the fact has.
        noise_pct: their relative spread (standard deviation over mean, in percent); ``None`` under 2
            samples or for a mean of 0.
        detects_pct: the smallest change, in percent, a comparison with a run of the same sample count
            and noise flags with probability ``POWER``; ``None`` when there is no noise estimate.
        limit: ``""`` when ``TARGET_PCT`` is detectable; else why not: ``TOO_FEW`` (more samples would
            do, see ``needs``), ``NOISY`` (more than ``MOST_SAMPLES`` a side would be needed) or
            ``RUN_TO_RUN`` (no sample count would do: the run-to-run allowance alone is too large).
        needs: the sample count a side that detects ``TARGET_PCT`` at this noise (``None``: more than
            ``MOST_SAMPLES``, or no noise estimate).
        run_to_run_pct: the run-to-run spread the detectable change allows for (:func:`run_to_run_pct`).
    """

    samples: int
    noise_pct: float | None
    detects_pct: float | None
    limit: str = ""
    needs: int | None = None
    run_to_run_pct: float = 0.0

    def text(self) -> str:
        """``noise ±0.42 %, detects changes ≥ 2.1 %``; with the reason when 5 % is out of reach."""
        if self.noise_pct is None or self.detects_pct is None:
            why = TOO_FEW if self.limit == TOO_FEW else "its mean is 0"
            return f"{self.samples} sample{'s' if self.samples != 1 else ''}: no relative noise ({why})"
        if self.noise_pct == 0 and not self.run_to_run_pct:
            return f"no noise ({self.samples} equal samples): any change is beyond it"
        between = f" (±{percent_text(self.run_to_run_pct)} % between runs)" if self.run_to_run_pct else ""
        text = f"noise ±{percent_text(self.noise_pct)} %{between}, detects changes ≥ {percent_text(self.detects_pct)} %"
        return text + limit_text(self.limit, self.samples, self.needs)


def limit_text(limit: str, samples: int, needs: int | None) -> str:
    """``; not 5 %: too few samples (3; 5 would do)``, or ``""`` when ``TARGET_PCT`` is detectable."""
    why = {
        TOO_FEW: f"{TOO_FEW} ({samples}; {needs} would do)",
        NOISY: f"{NOISY} (over {MOST_SAMPLES} samples needed)",
        RUN_TO_RUN: f"{RUN_TO_RUN} (no sample count would do)",
    }
    return f"; not {TARGET_PCT:g} %: {why[limit]}" if limit else ""


def percent_text(value: float) -> str:
    """Two significant digits, at least one decimal under 10: ``0.42``, ``2.1``, ``12``."""
    if value == 0:
        return "0"
    value = float(f"{value:.2g}")
    digits = max(0, 1 - math.floor(math.log10(abs(value))))
    return f"{value:.{digits}f}"


def detects_pct(spread: Spread, alpha: float = FACT_ALPHA, run_to_run: float = 0.0) -> float | None:
    """The smallest change in percent that a run like ``spread`` detects against another like it,
    ``run_to_run`` percent allowed each run for the variation between runs."""
    if spread.n < 2 or spread.mean == 0:
        return None
    test = t_test(spread, spread, run_to_run)
    assert test is not None
    return test.detectable(alpha) / abs(spread.mean) * 100.0


def samples_needed(noise_pct: float, alpha: float = FACT_ALPHA, run_to_run: float = 0.0) -> int | None:
    """The fewest samples a side that detect ``TARGET_PCT`` at ``noise_pct`` (and ``run_to_run``);
    ``None`` past ``MOST_SAMPLES``.

    The smallest detectable change shrinks as the sample count grows, so the count is found by bisection.
    """

    def enough(n: int) -> bool:
        found = detects_pct(Spread(n, 1.0, (noise_pct / 100.0) ** 2), alpha, run_to_run)
        return found is not None and found <= TARGET_PCT

    if not enough(MOST_SAMPLES):
        return None
    low, high = 1, MOST_SAMPLES  # enough(high); low is not enough (one sample detects nothing)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (low, middle) if enough(middle) else (middle, high)
    return high


def unreachable(run_to_run: float, alpha: float = FACT_ALPHA) -> bool:
    """Whether the run-to-run allowance alone puts ``TARGET_PCT`` out of reach of any sample count."""
    found = detects_pct(Spread(2, 1.0, 0.0), alpha, run_to_run)
    return found is not None and found > TARGET_PCT


def why_not(noise_pct: float, alpha: float = FACT_ALPHA, run_to_run: float = 0.0) -> tuple[str, int | None]:
    """Why ``TARGET_PCT`` is out of reach at this noise: the limit, and the samples a side that would do."""
    if unreachable(run_to_run, alpha):
        return RUN_TO_RUN, None
    needs = samples_needed(noise_pct, alpha, run_to_run)
    return (TOO_FEW if needs is not None else NOISY), needs


def detection(samples: Sequence[float], alpha: float = FACT_ALPHA, run_to_run: float = 0.0) -> Detection | None:
    """What a fact with these samples can detect, ``run_to_run`` percent allowed each run for the
    variation between runs (:func:`run_to_run_pct`); ``None`` for a fact without samples. Remembered for the
    samples given: a run writes each fact with its detection once a second, its samples unchanged."""
    return _detection(tuple(samples), alpha, run_to_run)


@functools.lru_cache(maxsize=1 << 14)
def _detection(samples: tuple[float, ...], alpha: float, run_to_run: float) -> Detection | None:
    spread = Spread.of(samples)
    if spread.n == 0:
        return None
    found = detects_pct(spread, alpha, run_to_run)
    noise = spread.noise_pct
    if spread.n < 2:
        return Detection(spread.n, None, None, TOO_FEW, run_to_run_pct=run_to_run)
    if found is None or noise is None:
        return Detection(spread.n, None, None, run_to_run_pct=run_to_run)
    if found <= TARGET_PCT:
        return Detection(spread.n, noise, found, run_to_run_pct=run_to_run)
    limit, needs = why_not(noise, alpha, run_to_run)
    return Detection(spread.n, noise, found, limit, needs, run_to_run)
