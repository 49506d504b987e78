"""Regression comparison of two results files: every fact SAME, BETTER, WORSE or UNKNOWN.

``gpuprobe compare BASE.json NEW.json`` (and ``pytest probes/ --baseline BASE.json``) label each
fact of NEW against BASE relative to the noise both runs measured, never by a fixed percentage.

The rules, in the order they are tried for each fact id:

1. **Present on one side only**: UNKNOWN ("only in BASE" / "only in NEW"), and listed above the
   table.
2. **Units differ**: UNKNOWN (the numbers cannot be compared).
3. **Invariants** (``invariant.*`` or unit ``bool``): by verdict (or value 1/0): pass -> fail is
   WORSE, fail -> pass is BETTER, unchanged is SAME; anything else UNKNOWN.
4. **No value** on either side (not measured, or non-finite): UNKNOWN.
5. **Raw samples on both sides**: each run's median gets an order-statistic interval
   ``[x_(j), x_(n+1-j)]`` (the construction of :func:`gpuprobe.judge.analysis.median_ci`).  Intervals
   that overlap: SAME.  Disjoint intervals: the medians differ beyond the noise.  The ranks ``j``
   are the narrowest for which two runs of an *unchanged* fact -- samples from one distribution,
   whatever it is -- give disjoint intervals with probability at most ``alpha``; that probability
   depends only on the ranks and the sample counts (a precedence test: every interleaving of the
   two sorted samples is equally likely), so it is computed exactly, with no normal approximation,
   no resampling and no random seed.  ``alpha`` is ``(1 - confidence) / m`` over the ``m`` facts
   compared this way (Bonferroni), so that a whole unchanged run is flagged with probability at
   most ``1 - confidence`` (5 %): the exit status of a regression check must not cry wolf on one of
   fifty unchanged facts.  Ties (quantised timings) only make disjoint intervals rarer.  When even
   the two sample ranges are disjoint too often by chance (3 samples against 3: 1 time in 10),
   disjoint ranges are UNKNOWN ("too few samples"), overlapping ones SAME.
   Why this rather than a rank-sum test or a bootstrap: it judges the medians the facts report (a
   Mann-Whitney test judges P(X < Y), which a change of shape moves while the median stays), its
   evidence is two intervals a reader can check in the table, and it is exact for any sample count
   without a random seed (a bootstrap of a median is neither exact nor smooth for small samples).
6. **Otherwise** (no samples on a side, e.g. ``device.sm_count``, or a capacity whose interval
   brackets a knee between footprint grid points) the stored values are compared with their
   stored intervals: equal values SAME; overlapping ``Fact.ci`` intervals SAME, disjoint ones
   changed.  A fact with neither samples nor interval is exact when it is an identity fact
   (``device.*``, unit ``count``) -- its interval is its value -- and of unknown noise otherwise:
   a changed value with no noise estimate is UNKNOWN.

A change beyond the noise is then SAME when it is smaller than ``threshold_pct`` percent of the
base median (practical significance); else BETTER or WORSE by the fact's :func:`direction`, or
UNKNOWN ("changed, no better or worse") for facts without one (``capacity.*``, ``device.sm_count``,
``device.l2_bytes``, anything unrecognised).  A change in a fact that either run measured while the
GPU throttled or had other tenants (verdict ``throttled`` or ``shared``) is UNKNOWN as well: the
conditions, not the hardware or software, may have moved it.

What the noise is: the spread of samples within each run.  Run-to-run variation that no single run
sees (another physical page layout, a different boost clock) is not in it; ``--threshold`` is the
allowance for that, and a couple of percent is a sensible gate for latencies.  The samples of a
run are taken to be independent draws.

Exit status of ``gpuprobe compare``: 1 when any fact is WORSE; with ``--strict`` also when any
fact that BASE has is UNKNOWN (missing now, changed without a direction, undecidable); else 0.
Unreadable, foreign or newer-schema files raise :class:`GpuprobeError` (one line, exit 2).
"""

from __future__ import annotations

import argparse
import functools
import math
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.results import DISTURBED_VERDICTS, Fact, Results, load

EXIT_WORSE = 1
"""Exit status when a fact got worse (the CLI's EXIT_FAILED)."""

FAMILY_CONFIDENCE = 0.95
"""Probability that no unchanged fact compared by its samples is reported changed."""

CLOCK_TOLERANCE = 0.02
"""Measured SM clocks differing by more than this fraction of the base clock draw a warning."""

HIGHER_IS_BETTER = 1
LOWER_IS_BETTER = -1
NO_DIRECTION = 0

TIME_UNITS = frozenset({"cycle", "cycles", "clk", "ns", "us", "ms", "s"})
EXACT_UNITS = frozenset({"count"})


class Label(StrEnum):
    """The four labels; a StrEnum, so ``row.label == "WORSE"`` holds."""

    SAME = "SAME"
    BETTER = "BETTER"
    WORSE = "WORSE"
    UNKNOWN = "UNKNOWN"


@dataclass(frozen=True)
class Row:
    """One fact id's comparison.

    Attributes:
        fact_id: the stable fact id.
        base: the fact in BASE, or ``None`` if only NEW has it.
        new: the fact in NEW, or ``None`` if only BASE has it.
        label: SAME, BETTER, WORSE or UNKNOWN.
        change_pct: NEW minus BASE in percent of BASE (of the sample medians when samples decided),
            ``None`` when there is no number to compare or BASE is zero.
        reason: why this label, in one sentence.
        change: NEW minus BASE in the fact's unit, ``None`` when there is no number to compare.
    """

    fact_id: str
    base: Fact | None
    new: Fact | None
    label: Label
    change_pct: float | None
    reason: str
    change: float | None = None

    @property
    def unit(self) -> str:
        fact = self.base or self.new
        return fact.unit if fact else ""

    def fails(self, strict: bool = False) -> bool:
        """WORSE fails a regression check; with ``strict`` so does UNKNOWN for a fact BASE has."""
        return self.label == Label.WORSE or (strict and self.label == Label.UNKNOWN and self.base is not None)


@dataclass
class Comparison:
    """Every fact of two runs, labelled; the warnings about what differs between the runs."""

    rows: list[Row]
    warnings: list[str]
    base_name: str = "BASE"
    new_name: str = "NEW"
    base: Results | None = None
    new: Results | None = None
    threshold_pct: float = 0.0
    confidence: float = FAMILY_CONFIDENCE
    fact_alpha: float = 1.0 - FAMILY_CONFIDENCE
    """The false-alarm probability allowed to each fact compared by its samples."""
    tested: int = 0
    """How many facts were compared by their samples (the Bonferroni family)."""

    def with_label(self, label: Label) -> list[Row]:
        return [r for r in self.rows if r.label == label]

    def worse(self) -> list[Row]:
        """The facts that got worse beyond the noise and the threshold."""
        return self.with_label(Label.WORSE)

    def better(self) -> list[Row]:
        return self.with_label(Label.BETTER)

    def only_in_base(self) -> list[str]:
        return [r.fact_id for r in self.rows if r.new is None]

    def only_in_new(self) -> list[str]:
        return [r.fact_id for r in self.rows if r.base is None]

    def row(self, fact_id: str) -> Row | None:
        return next((r for r in self.rows if r.fact_id == fact_id), None)

    def failures(self, strict: bool = False) -> list[Row]:
        """WORSE rows; with ``strict`` also UNKNOWN rows of facts that BASE has."""
        return [r for r in self.rows if r.fails(strict)]

    def summary(self) -> str:
        return ", ".join(f"{len(self.with_label(label))} {label.lower()}" for label in Label)

    def method(self) -> str:
        """One line saying how the labels were decided."""
        threshold = f"; changes under {_number(self.threshold_pct)} % of BASE are SAME" if self.threshold_pct else ""
        return (
            f"facts with samples: changed when the medians' order-statistic intervals are disjoint, which "
            f"happens to an unchanged fact with probability {_number(self.fact_alpha)} at most "
            f"({_percent_text(self.confidence)} confidence over all {self.tested} such facts together); "
            f"facts without samples: stored intervals or exact values{threshold}"
        )


# --------------------------------------------------------------------------- direction


def direction(fact_id: str, unit: str = "") -> int:
    """Which way is better for a fact: ``HIGHER_IS_BETTER``, ``LOWER_IS_BETTER`` or ``NO_DIRECTION``.

    Lower is better for latencies and overheads (a dotted component ``latency`` or ``overhead``:
    ``latency.l2``, ``alu.ffma.latency``, ``overhead.loop``); higher for bandwidths, throughputs and
    flop rates (``bandwidth``, ``throughput``, a component containing ``flops``) and for
    ``device.sm_clock``.  Other ``device.*`` facts (identity: SM count, L2 size) and ``capacity.*``
    have no direction.  Unrecognised ids fall back on the unit: a time is lower-better, a rate
    (``.../s``, ``.../cycle``) higher-better; anything else has no direction.
    """
    parts = fact_id.split(".")
    if "latency" in parts or "overhead" in parts:
        return LOWER_IS_BETTER
    if "bandwidth" in parts or "throughput" in parts or any("flops" in p for p in parts):
        return HIGHER_IS_BETTER
    if fact_id == "device.sm_clock":
        return HIGHER_IS_BETTER
    if parts[0] in ("device", "capacity", "invariant"):
        return NO_DIRECTION
    if unit in TIME_UNITS:
        return LOWER_IS_BETTER
    if unit.endswith(("/s", "/cycle", "/clk")):
        return HIGHER_IS_BETTER
    return NO_DIRECTION


def _direction_text(sign: int) -> str:
    return {HIGHER_IS_BETTER: "higher is better", LOWER_IS_BETTER: "lower is better"}.get(sign, "")


# --------------------------------------------------------------------------- compare


def compare(
    base: Results,
    new: Results,
    threshold_pct: float = 0.0,
    confidence: float = FAMILY_CONFIDENCE,
    base_name: str = "BASE",
    new_name: str = "NEW",
) -> Comparison:
    """Label every fact of ``new`` against ``base`` (see the module docstring for the rules).

    Args:
        base: the earlier run (the baseline).
        new: the run to judge.
        threshold_pct: changes smaller than this percentage of the base value are SAME even when
            they lie beyond the noise.
        confidence: probability that no unchanged fact compared by its samples is labelled changed.
        base_name, new_name: how the report names the two runs (e.g. their file paths).

    Raises:
        GpuprobeError: a negative or non-finite threshold, a confidence outside (0, 1), or a run
            holding two facts with one id (which of them to compare would be a guess).
    """
    if not (math.isfinite(threshold_pct) and threshold_pct >= 0):
        raise GpuprobeError(f"the threshold must be a finite percentage of at least 0, got {threshold_pct!r}")
    if not 0.0 < confidence < 1.0:
        raise GpuprobeError(f"the confidence must lie strictly between 0 and 1, got {confidence!r}")
    base_facts = _facts_by_id(base, base_name)
    new_facts = _facts_by_id(new, new_name)
    ids = sorted(base_facts.keys() | new_facts.keys())
    pairs = [(i, base_facts.get(i), new_facts.get(i)) for i in ids]
    tested = sum(_by_samples(b, n) for _, b, n in pairs)
    fact_alpha = (1.0 - confidence) / max(tested, 1)
    context = _Context(threshold_pct, fact_alpha, base_name, new_name)
    rows = [_row(fact_id, b, n, context) for fact_id, b, n in pairs]
    return Comparison(
        rows=rows,
        warnings=run_warnings(base, new, base_name, new_name),
        base_name=base_name,
        new_name=new_name,
        base=base,
        new=new,
        threshold_pct=threshold_pct,
        confidence=confidence,
        fact_alpha=fact_alpha,
        tested=tested,
    )


@dataclass(frozen=True)
class _Context:
    threshold_pct: float
    fact_alpha: float
    base_name: str
    new_name: str


def _facts_by_id(results: Results, name: str) -> dict[str, Fact]:
    facts: dict[str, Fact] = {}
    for fact in results.facts:
        if fact.id in facts:
            raise GpuprobeError(f"{name}: fact {fact.id!r} appears twice; cannot tell which one to compare")
        facts[fact.id] = fact
    return facts


def _is_invariant(fact: Fact) -> bool:
    return fact.id.startswith("invariant.") or fact.unit == "bool"


def _finite_samples(fact: Fact) -> list[float]:
    return [s for s in fact.samples if math.isfinite(s)]


def _by_samples(base: Fact | None, new: Fact | None) -> bool:
    """Whether rule 5 (raw samples on both sides) decides this pair."""
    if base is None or new is None or base.unit != new.unit or _is_invariant(base) or _is_invariant(new):
        return False
    if base.value is None or new.value is None:
        return False
    return bool(_finite_samples(base)) and bool(_finite_samples(new))


def _row(fact_id: str, base: Fact | None, new: Fact | None, context: _Context) -> Row:
    if base is None or new is None:
        where = context.base_name if new is None else context.new_name
        return Row(fact_id, base, new, Label.UNKNOWN, None, f"only in {where}")
    if base.unit != new.unit:
        reason = f"unit changed from {base.unit!r} to {new.unit!r}; the numbers cannot be compared"
        return Row(fact_id, base, new, Label.UNKNOWN, None, reason)
    if _is_invariant(base) or _is_invariant(new):
        return _invariant_row(fact_id, base, new)
    if base.value is None or new.value is None:
        where = " and ".join(n for n, f in ((context.base_name, base), (context.new_name, new)) if f.value is None)
        return Row(fact_id, base, new, Label.UNKNOWN, None, f"no value in {where}")
    if _by_samples(base, new):
        return _samples_row(fact_id, base, new, context)
    return _interval_row(fact_id, base, new, context)


# --------------------------------------------------------------------------- invariants


def _holds(fact: Fact) -> bool | None:
    if fact.verdict in ("pass", "fail"):
        return fact.verdict == "pass"
    if fact.value in (0.0, 1.0):
        return fact.value == 1.0
    return None


def _invariant_row(fact_id: str, base: Fact, new: Fact) -> Row:
    before, now = _holds(base), _holds(new)
    if before is None or now is None:
        reason = f"invariant verdicts {base.verdict} -> {new.verdict}: neither pass nor fail"
        return Row(fact_id, base, new, Label.UNKNOWN, None, reason)
    if before == now:
        return Row(fact_id, base, new, Label.SAME, None, "invariant " + ("holds" if now else "fails") + " in both")
    if now:
        return Row(fact_id, base, new, Label.BETTER, None, "invariant failed before, holds now")
    detail = f": {new.detail}" if new.detail else ""
    return Row(fact_id, base, new, Label.WORSE, None, f"invariant held before, fails now{detail}")


# --------------------------------------------------------------------------- samples


def _log_choose(n: int, k: int) -> float:
    return math.lgamma(n + 1) - math.lgamma(k + 1) - math.lgamma(n - k + 1)


def _median_coverages(n: int) -> list[float]:
    """Coverage of the median by ``[x_(j), x_(n+1-j)]`` for ``j = 1 .. ceil(n / 2)``: ``1 - 2 P(B < j)``,
    ``B ~ Binomial(n, 1/2)``, so decreasing in ``j``."""
    coverages, below = [], 0.0
    for j in range(1, (n + 1) // 2 + 1):
        below += math.exp(_log_choose(n, j - 1) - n * math.log(2.0))
        coverages.append(max(0.0, 1.0 - 2.0 * below))
    return coverages


def _below_probability(n_x: int, j_x: int, n_y: int, j_y: int) -> float:
    """P(x_(n_x+1-j_x) < y_(j_y)) when all interleavings of the two samples are equally likely.

    The ``j_y``-th smallest y has ``i`` of the x below it with probability
    ``C(i + j_y - 1, i) C(n_x + n_y - i - j_y, n_x - i) / C(n_x + n_y, n_x)``; the x interval lies
    below the y interval when ``i >= n_x + 1 - j_x``.
    """
    total = _log_choose(n_x + n_y, n_x)
    terms = (
        _log_choose(i + j_y - 1, i) + _log_choose(n_x + n_y - i - j_y, n_x - i) - total
        for i in range(n_x + 1 - j_x, n_x + 1)
    )
    return min(1.0, math.fsum(math.exp(t) for t in terms))


def disjoint_probability(n_base: int, j_base: int, n_new: int, j_new: int) -> float:
    """Probability that the intervals ``[x_(j), x_(n+1-j)]`` of two samples of one continuous distribution
    are disjoint (either way round); ties in real data only make it smaller."""
    return _below_probability(n_base, j_base, n_new, j_new) + _below_probability(n_new, j_new, n_base, j_base)


@functools.lru_cache(maxsize=256)
def interval_ranks(n_base: int, n_new: int, alpha: float) -> tuple[int, int] | None:
    """The ranks ``(j_base, j_new)`` of the narrowest intervals, of equal coverage on both sides, that an
    unchanged fact leaves disjoint with probability at most ``alpha``; ``None`` if even the sample ranges
    are disjoint more often than that (too few samples)."""
    if disjoint_probability(n_base, 1, n_new, 1) > alpha:
        return None
    base_cover, new_cover = _median_coverages(n_base), _median_coverages(n_new)
    levels = sorted(set(base_cover) | set(new_cover), reverse=True)

    def ranks(level: float) -> tuple[int, int]:
        return max(1, sum(c >= level for c in base_cover)), max(1, sum(c >= level for c in new_cover))

    good, bad = 0, len(levels)  # levels[good] keeps the bound (it gives the ranges); levels[bad] would not
    while bad - good > 1:
        middle = (good + bad) // 2
        if disjoint_probability(n_base, ranks(levels[middle])[0], n_new, ranks(levels[middle])[1]) <= alpha:
            good = middle
        else:
            bad = middle
    return ranks(levels[good])


@dataclass(frozen=True)
class _Spread:
    """A run's median and its order-statistic interval of rank ``j``."""

    median: float
    low: float
    high: float
    n: int

    @classmethod
    def of(cls, samples: list[float], rank: int) -> _Spread:
        ordered = sorted(samples)
        n = len(ordered)
        middle = (ordered[(n - 1) // 2] + ordered[n // 2]) / 2
        return cls(middle, ordered[rank - 1], ordered[n - rank], n)

    def text(self) -> str:
        return f"{_number(self.median)} in {_number(self.low)}–{_number(self.high)}"


def _samples_row(fact_id: str, base: Fact, new: Fact, context: _Context) -> Row:
    base_samples, new_samples = _finite_samples(base), _finite_samples(new)
    ranks = interval_ranks(len(base_samples), len(new_samples), context.fact_alpha)
    before = _Spread.of(base_samples, ranks[0] if ranks else 1)
    now = _Spread.of(new_samples, ranks[1] if ranks else 1)
    change, pct = _change(before.median, now.median)
    counts = f"{base.unit} (n={before.n}/{now.n})"
    if before.high >= now.low and now.high >= before.low:
        reason = f"within the noise: medians {before.text()} and {now.text()} {counts} overlap"
        return Row(fact_id, base, new, Label.SAME, pct, reason, change)
    if ranks is None:
        reason = (
            f"too few samples to tell: even by chance, ranges {_number(before.low)}–{_number(before.high)} and "
            f"{_number(now.low)}–{_number(now.high)} "
            f"{counts} would be disjoint with probability over {_number(context.fact_alpha)}"
        )
        return Row(fact_id, base, new, Label.UNKNOWN, pct, reason, change)
    evidence = f"beyond the noise: medians {before.text()} and {now.text()} {counts} are disjoint"
    return _changed_row(fact_id, base, new, (change, pct, before.median), evidence, context)


def _change(before: float, now: float) -> tuple[float, float | None]:
    change = now - before
    pct = change / abs(before) * 100.0 if before != 0 else None
    return change, pct


def _changed_row(
    fact_id: str, base: Fact, new: Fact, delta: tuple[float, float | None, float], evidence: str, context: _Context
) -> Row:
    """A change beyond the noise: SAME under the threshold, else by the fact's direction.

    ``delta`` is (NEW - BASE, the same in percent of BASE, the BASE number it is relative to).
    """
    change, pct, reference = delta
    if context.threshold_pct and abs(change) < context.threshold_pct / 100.0 * abs(reference):
        reason = f"{evidence}, but under the {_number(context.threshold_pct)} % threshold"
        return Row(fact_id, base, new, Label.SAME, pct, reason, change)
    sign = direction(fact_id, base.unit)
    if sign == NO_DIRECTION:
        reason = f"changed, no better or worse for this fact: {evidence}"
        return Row(fact_id, base, new, Label.UNKNOWN, pct, reason, change)
    disturbed = [f"{name} was measured {f.verdict}" for name, f in ((context.base_name, base), (context.new_name, new))
                 if f.verdict in DISTURBED_VERDICTS]  # fmt: skip
    if disturbed:
        reason = f"changed, but {' and '.join(disturbed)} (GPU throttling or other tenants): {evidence}"
        return Row(fact_id, base, new, Label.UNKNOWN, pct, reason, change)
    improved = (change > 0) == (sign == HIGHER_IS_BETTER)
    label = Label.BETTER if improved else Label.WORSE
    return Row(fact_id, base, new, label, pct, f"{evidence}; {_direction_text(sign)}", change)


# --------------------------------------------------------------------------- no samples


def _interval(fact: Fact) -> tuple[float, float] | None:
    """The fact's stored interval; its value for an exact identity fact; ``None`` if its noise is unknown."""
    if fact.ci is not None:
        return min(fact.ci), max(fact.ci)
    if fact.value is not None and not fact.samples and (fact.id.startswith("device.") or fact.unit in EXACT_UNITS):
        return fact.value, fact.value
    return None


def _interval_row(fact_id: str, base: Fact, new: Fact, context: _Context) -> Row:
    assert base.value is not None and new.value is not None
    change, pct = _change(base.value, new.value)
    if change == 0:
        return Row(fact_id, base, new, Label.SAME, pct, "equal values", change)
    before, now = _interval(base), _interval(new)
    if before is None or now is None:
        where = " and ".join(n for n, i in ((context.base_name, before), (context.new_name, now)) if i is None)
        reason = f"values differ but {where} kept neither samples nor an interval: no noise estimate"
        return Row(fact_id, base, new, Label.UNKNOWN, pct, reason, change)
    shown = f"{_interval_text(before)} and {_interval_text(now)} {base.unit}"
    if before[1] >= now[0] and now[1] >= before[0]:
        return Row(fact_id, base, new, Label.SAME, pct, f"no samples; stored intervals {shown} overlap", change)
    kind = "values" if before[0] == before[1] and now[0] == now[1] else "stored intervals"
    return _changed_row(fact_id, base, new, (change, pct, base.value), f"no samples; {kind} {shown} differ", context)


def _interval_text(interval: tuple[float, float]) -> str:
    low, high = interval
    return _number(low) if low == high else f"{_number(low)}–{_number(high)}"


# --------------------------------------------------------------------------- warnings


def toolkit_versions(description: str) -> str:
    """A results file's toolkit line without where each tool was found: ``ptxas V13.0.88; nvdisasm V13.2.86``
    (the same versions installed in two places build the same cubins)."""
    return re.sub(r"\s*\([^()]*\)", "", description)


def run_warnings(base: Results, new: Results, base_name: str = "BASE", new_name: str = "NEW") -> list[str]:
    """What differs between the two runs' machines and software: warnings, not errors."""
    b, n = base.device, new.device
    warnings: list[str] = []
    if (b.name, b.cc) != (n.name, n.cc):
        warnings.append(f"different GPU models: {base_name} {b.name} (cc {b.cc}), {new_name} {n.name} (cc {n.cc})")
    elif (b.sm_count, b.l2_bytes) != (n.sm_count, n.l2_bytes):
        warnings.append(
            f"same model, different configuration (MIG or another SKU?): {base_name} {b.sm_count} SMs, "
            f"{b.l2_bytes} bytes L2; {new_name} {n.sm_count} SMs, {n.l2_bytes} bytes L2"
        )
    for what, before, now in (
        ("drivers", b.driver, n.driver),
        ("CUDA runtimes", b.cuda_runtime, n.cuda_runtime),
        ("CUDA toolkits", toolkit_versions(b.toolkit), toolkit_versions(n.toolkit)),
    ):
        if before != now:
            warnings.append(f"different {what}: {base_name} {before or 'unrecorded'}, {new_name} {now or 'unrecorded'}")
    clock = _clock_warning(base, new, base_name, new_name)
    if clock:
        warnings.append(clock)
    for name, results in ((base_name, base), (new_name, new)):
        if results.partial:
            warnings.append(f"{name} is a partial run (interrupted): facts it lacks are missing, not removed")
    return warnings


def _measured_clock(results: Results) -> float | None:
    mhz = results.clocks.get("sm_mhz_measured")
    return float(mhz) if isinstance(mhz, int | float) and math.isfinite(mhz) and mhz > 0 else None


def _clock_warning(base: Results, new: Results, base_name: str, new_name: str) -> str | None:
    before, now = _measured_clock(base), _measured_clock(new)
    if before is None or now is None:
        return None
    if abs(now - before) <= CLOCK_TOLERANCE * before:
        return None
    pct = (now - before) / before * 100.0
    return (
        f"SM clocks differ by {pct:+.1f} % ({base_name} {before:.0f} MHz, {new_name} {now:.0f} MHz): "
        f"latencies in cycles and times in ns do not scale alike"
    )


# --------------------------------------------------------------------------- rendering

COLUMNS = ("fact", "base", "new", "change", "label", "reason")


def _number(value: float) -> str:
    """Whole numbers in full (byte counts), others to about four significant digits (``3.906e+12`` when large)."""
    if not math.isfinite(value):
        return str(value)
    if value == int(value) and abs(value) < 1e15:
        return f"{value:.0f}"
    magnitude = math.floor(math.log10(abs(value)))
    if magnitude >= 6:
        return f"{value:.4g}"
    return f"{value:.{min(max(0, 3 - magnitude), 9)}f}"


def _percent_text(fraction: float) -> str:
    """0.95 -> '95 %', 0.99373 -> '99.37 %': two significant digits of what falls short of 100 %."""
    shortfall = (1.0 - fraction) * 100.0
    digits = max(0, 1 - math.floor(math.log10(shortfall))) if shortfall > 0 else 0
    return f"{fraction * 100.0:.{digits}f}".rstrip("0").rstrip(".") + " %"


def fact_text(fact: Fact | None) -> str:
    """A fact's value with its interval and unit, e.g. ``250.3 (248.1–252.0) cycle``; ``—`` if absent."""
    if fact is None:
        return "—"
    if _is_invariant(fact) and fact.verdict in ("pass", "fail"):
        return fact.verdict
    if fact.value is None:
        return "no value"
    ci = f" ({_number(min(fact.ci))}–{_number(max(fact.ci))})" if fact.ci is not None else ""
    return f"{_number(fact.value)}{ci} {fact.unit}".rstrip()


def change_text(row: Row) -> str:
    """``+5.02 % (+12.56 cycle)``, or ``—`` when there is no number to compare."""
    if row.change is None:
        return "—"
    absolute = f"{'+' if row.change >= 0 else ''}{_number(row.change)} {row.unit}".rstrip()
    if row.change_pct is None:
        return absolute
    return f"{row.change_pct:+.2f} % ({absolute})"


def _cells(row: Row) -> list[str]:
    return [row.fact_id, fact_text(row.base), fact_text(row.new), change_text(row), str(row.label), row.reason]


def _run_line(name: str, results: Results | None) -> str:
    if results is None:
        return name
    d = results.device
    mhz = _measured_clock(results)
    clock = f"SM clock {mhz:.0f} MHz" if mhz else "SM clock not measured"
    software = ", ".join(
        f"{what} {value or 'unrecorded'}"
        for what, value in (("driver", d.driver), ("CUDA runtime", d.cuda_runtime), ("toolkit", d.toolkit))
    )
    return f"{name}: {d.name} (cc {d.cc}, {d.sm_count} SMs), {software}, {clock}, created {results.created or '?'}"


def render(comparison: Comparison, fmt: str = "text") -> str:
    """The comparison as a plain-text (``text``) or GitHub Markdown (``md``) report, ending in a newline."""
    renderers: dict[str, Callable[[Comparison], list[str]]] = {"text": _text_lines, "md": _markdown_lines}
    if fmt not in renderers:
        raise GpuprobeError(f"unknown format {fmt!r}; choose text or md")
    return "\n".join(renderers[fmt](comparison)) + "\n"


def _preamble(comparison: Comparison) -> list[str]:
    lines = [f"warning: {w}" for w in comparison.warnings]
    for where, ids in (("base", comparison.only_in_base()), ("new", comparison.only_in_new())):
        if ids:
            lines.append(f"only in {where} ({getattr(comparison, where + '_name')}): {', '.join(ids)}")
    return lines


def _text_lines(comparison: Comparison) -> list[str]:
    lines = [
        f"gpuprobe compare: {comparison.base_name} -> {comparison.new_name}",
        "  " + _run_line("base", comparison.base),
        "  " + _run_line("new", comparison.new),
        "method: " + comparison.method(),
        *_preamble(comparison),
        "",
    ]
    table = [list(COLUMNS), *(_cells(r) for r in comparison.rows)]
    widths = [max(len(cells[i]) for cells in table) for i in range(len(COLUMNS) - 1)]
    rule = ["-" * w for w in widths] + ["-" * len(COLUMNS[-1])]
    for cells in (table[0], rule, *table[1:]):
        lines.append("  ".join([*(c.ljust(w) for c, w in zip(cells, widths, strict=False)), cells[-1]]).rstrip())
    lines += ["", comparison.summary()]
    return lines


def _md_cell(text: str) -> str:
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _md_row(cells: Iterable[str]) -> str:
    return "| " + " | ".join(_md_cell(c) for c in cells) + " |"


def _markdown_lines(comparison: Comparison) -> list[str]:
    lines = [
        f"## gpuprobe compare: `{_md_cell(comparison.base_name)}` → `{_md_cell(comparison.new_name)}`",
        "",
        f"- {_md_cell(_run_line('**base**', comparison.base))}",
        f"- {_md_cell(_run_line('**new**', comparison.new))}",
        f"- method: {_md_cell(comparison.method())}",
    ]
    lines += [f"- {_md_cell(line)}" for line in _preamble(comparison)]
    lines += ["", _md_row(c.capitalize() for c in COLUMNS), "|" + "---|" * len(COLUMNS)]
    lines += [_md_row(_cells(r)) for r in comparison.rows]
    lines += ["", f"**{comparison.summary()}**"]
    return lines


# --------------------------------------------------------------------------- pytest --baseline


def _measured_text(fact: Fact) -> str:
    """A fact's value and what its noise was, e.g. ``250.2 cycle (CI 249.3–250.9, ±0.3 %, 40 samples)``."""
    if _is_invariant(fact) or fact.value is None:
        return fact_text(fact)
    parts = []
    if fact.ci is not None and fact.value:
        low, high = min(fact.ci), max(fact.ci)
        parts.append(f"CI {_number(low)}–{_number(high)}, ±{(high - low) / 2 / abs(fact.value) * 100:.1f} %")
    samples = _finite_samples(fact)
    parts.append(f"{len(samples)} samples" if samples else "no samples")
    return f"{_number(fact.value)} {fact.unit} ({', '.join(parts)})"


def baseline_failure(row: Row) -> str:
    """One paragraph for a failed ``pytest probes/ --baseline`` assertion: before, now, noise, label, why."""
    if row.base is None or row.new is None:
        return f"{row.fact_id} is {row.label} against the baseline: {row.reason}."
    before = f"before {_measured_text(row.base)}"
    now = f"now {_measured_text(row.new)}"
    change = "" if row.change is None else f"; change {change_text(row)}"
    return f"{row.fact_id} is {row.label} against the baseline: {before}, {now}{change}. Why: {row.reason}."


def baseline_message(comparison: Comparison | None, fact_id: str, strict: bool = False) -> str | None:
    """The assertion message if ``fact_id`` fails the baseline (WORSE; with ``strict`` also UNKNOWN), else None."""
    if comparison is None:
        return None
    row = comparison.row(fact_id)
    return baseline_failure(row) if row is not None and row.fails(strict) else None


# --------------------------------------------------------------------------- command line


def cmd_compare(args: argparse.Namespace) -> int:
    """``gpuprobe compare``: print the report; 1 if a fact got WORSE (or, with --strict, UNKNOWN), else 0."""
    base = load(Path(args.base))
    new = load(Path(args.new))
    comparison = compare(base, new, args.threshold, base_name=args.base, new_name=args.new)
    print(render(comparison, args.format), end="")
    return EXIT_WORSE if comparison.failures(args.strict) else 0


def add_command(subparsers: argparse._SubParsersAction) -> None:
    """Register ``compare`` on the ``gpuprobe`` sub-command parsers (``func`` returns the exit status)."""
    p = subparsers.add_parser(
        "compare",
        help="label every fact of NEW against BASE: SAME, BETTER, WORSE or UNKNOWN, relative to their noise",
        description="Compare two results files fact by fact, relative to the noise measured in both runs. "
        "Exit status 1 when a fact got WORSE, 2 for unreadable input.",
    )
    p.add_argument("base", metavar="BASE.json", help="the baseline results file")
    p.add_argument("new", metavar="NEW.json", help="the results file to judge")
    p.add_argument("--format", choices=("text", "md"), default="text", help="plain text (default) or GitHub Markdown")
    p.add_argument(
        "--threshold", type=float, default=0.0, metavar="PCT",
        help="changes smaller than PCT percent of the base value are SAME even beyond the noise (default 0)",
    )  # fmt: skip
    p.add_argument(
        "--strict", action="store_true",
        help="also exit 1 when a fact of BASE is UNKNOWN (missing now, changed without a direction, undecidable)",
    )  # fmt: skip
    p.set_defaults(func=cmd_compare)


__all__ = [
    "FAMILY_CONFIDENCE",
    "HIGHER_IS_BETTER",
    "LOWER_IS_BETTER",
    "NO_DIRECTION",
    "Comparison",
    "Label",
    "Row",
    "add_command",
    "baseline_failure",
    "baseline_message",
    "change_text",
    "cmd_compare",
    "compare",
    "direction",
    "fact_text",
    "render",
    "run_warnings",
]
