"""Run-to-run repeatability: the same suite twice, each fact's difference against its noise.

Two views. :func:`repeatability` (``gpuprobe run --repeat``): a fact is repeatable when two runs differ by
no more than their confidence intervals say they may: the ratio |value_2 - value_1| / (half-width_1 +
half-width_2) is at most 1 when the intervals overlap. The largest ratio over all facts is the headline
number.

:func:`kind_table`: how far each kind of quantity (:func:`gpuprobe.core.detection.quantity_kind`) moved
between two runs, against the run-to-run allowance a comparison makes for it
(:data:`gpuprobe.core.detection.RUN_TO_RUN_PCT`): how many facts moved by more than 0.5, 1, 2 and 5 %, the
median, 95th percentile and largest move, the share that lies within 1.96 standard errors of their
difference (their own noise in each run and the allowance; 95 % if the allowance is right and the moves
normal), and which lie beyond what that explains at the comparison's false-alarm probability. It is the
evidence the allowances rest on (tests/test_repeatability.py computes it from the two stored H200 runs).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

from gpuprobe.core.detection import FACT_ALPHA, RUN_TO_RUN_PCT, Spread, percent_text, quantity_kind, run_to_run_variance
from gpuprobe.core.results import Fact, Results
from gpuprobe.core.text import md_code, md_text
from gpuprobe.fleet.compare import is_invariant
from gpuprobe.fleet.spread import CI_HALF_WIDTH_IN_SE


@dataclass(frozen=True)
class Repeat:
    fact_id: str
    unit: str
    values: tuple[float, ...]
    difference: float  # largest minus smallest value
    noise: float  # the sum of the two widest CI half-widths; 0 when no run gave a CI
    ratio: float | None  # difference / noise; None when there is no noise to compare with

    @property
    def repeatable(self) -> bool:
        return self.ratio is not None and self.ratio <= 1.0


def _half_width(fact: Fact) -> float:
    return 0.0 if fact.ci is None else (fact.ci[1] - fact.ci[0]) / 2


def repeatability(runs: list[Results]) -> list[Repeat]:
    """One row per fact measured (with a value) in every run, largest ratio first."""
    if len(runs) < 2:
        raise ValueError("repeatability needs at least two runs")
    common = set.intersection(*({f.id for f in r.facts if f.value is not None} for r in runs))
    rows = []
    for fact_id in common:
        facts = [r.fact(fact_id) for r in runs]
        values = tuple(float(f.value) for f in facts if f is not None and f.value is not None)
        halves = sorted((_half_width(f) for f in facts if f is not None), reverse=True)
        noise = sum(halves[:2])
        difference = max(values) - min(values)
        ratio = difference / noise if noise > 0 else (0.0 if difference == 0 else None)
        rows.append(Repeat(fact_id, facts[0].unit, values, difference, noise, ratio))
    return sorted(rows, key=lambda r: (-(r.ratio if r.ratio is not None else float("inf")), r.fact_id))


def render_markdown(rows: list[Repeat]) -> str:
    judged = [r for r in rows if r.ratio is not None]
    worst = judged[0] if judged else None
    lines = ["# Run-to-run repeatability", ""]
    if worst is not None:
        lines += [
            f"Largest difference relative to the confidence intervals: **{worst.ratio:.2f}** "
            f"({md_code(worst.fact_id)}).",
            "",
        ]
    lines += [
        "| Fact | Values | Difference | CI half-widths (sum) | Ratio | Within the CIs |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        values = " / ".join(f"{v:.6g}" for v in r.values)
        ratio = "—" if r.ratio is None else f"{r.ratio:.2f}"
        within = "—" if r.ratio is None else ("yes" if r.repeatable else "**no**")
        cells = [md_code(r.fact_id), f"{values} {md_text(r.unit)}", f"{r.difference:.4g}", f"{r.noise:.4g}"]
        cells += [ratio, within]
        lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- by kind of quantity


MOVE_STEPS = (0.5, 1.0, 2.0, 5.0)
"""The moves, in percent, the table counts facts beyond."""


@dataclass(frozen=True)
class Move:
    """One fact in both runs: its means, how far it moved in percent of the first, and that move in
    standard errors of the difference (its own noise in each run and the allowance for its kind)."""

    fact_id: str
    unit: str
    kind: str
    before: float
    after: float
    pct: float
    z: float


def _mean_and_error(fact: Fact) -> tuple[float, float]:
    """The mean of a fact's finite samples and its standard error; with fewer than two, its value and its
    stored interval's half-width as 1.96 standard errors (0 without an interval)."""
    spread = Spread.of(fact.samples)
    if spread.n >= 2:
        return spread.mean, math.sqrt(spread.variance / spread.n)
    assert fact.value is not None
    half = 0.0 if fact.ci is None else abs(fact.ci[1] - fact.ci[0]) / 2.0
    return fact.value, half / CI_HALF_WIDTH_IN_SE


def _compared(fact: Fact | None) -> bool:
    return fact is not None and fact.value is not None and not is_invariant(fact)


def moves(base: Results, new: Results) -> list[Move]:
    """Every numeric fact (not an invariant or a flag) with a value in both runs and a non-zero first mean."""
    found = []
    later: dict[str, Fact] = {}
    for fact in new.facts:
        later.setdefault(fact.id, fact)  # the first of an id, as Results.fact finds it
    for fact in base.facts:
        other = later.get(fact.id)
        if not (_compared(fact) and _compared(other)) or other is None or other.unit != fact.unit:
            continue
        (before, error_before), (after, error_after) = _mean_and_error(fact), _mean_and_error(other)
        if before == 0:
            continue
        kind = quantity_kind(fact.id, fact.unit)
        error = math.sqrt(error_before**2 + error_after**2 + run_to_run_variance(before, after, RUN_TO_RUN_PCT[kind]))
        change = after - before
        z = abs(change) / error if error else (0.0 if change == 0 else math.inf)
        found.append(Move(fact.id, fact.unit, kind, before, after, change / abs(before) * 100.0, z))
    return found


@dataclass(frozen=True)
class KindRepeat:
    """How one kind of quantity moved between two runs, against its allowance.

    Attributes:
        kind: the :func:`~gpuprobe.core.detection.quantity_kind`.
        allowance_pct: the spread per run a comparison allows it.
        facts: how many facts of the kind both runs have.
        moved_over: per step of :data:`MOVE_STEPS`, how many moved by more (in percent of the first run).
        median_pct, p95_pct, largest_pct: the median, 95th percentile and largest move, in percent.
        within_pct: the share of the facts whose move lies within 1.96 standard errors of the difference
            (:attr:`Move.z`), in percent: about 95 where the allowance fits.
        beyond: the facts whose move lies beyond their own noise and the allowance at ``FACT_ALPHA``.
    """

    kind: str
    allowance_pct: float
    facts: int
    moved_over: tuple[int, ...]
    median_pct: float
    p95_pct: float
    largest_pct: float
    within_pct: float
    beyond: tuple[str, ...]


def _quantile(ordered: Sequence[float], share: float) -> float:
    """The ``share`` quantile of sorted values, interpolated between neighbours."""
    position = share * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


WITHIN_Z = NormalDist().inv_cdf(0.975)
"""1.96: a normal difference lies within this many standard errors 95 % of the time."""


def _kind_row(kind: str, of_kind: list[Move], critical: float) -> KindRepeat:
    sizes = sorted(abs(m.pct) for m in of_kind)
    return KindRepeat(
        kind=kind,
        allowance_pct=RUN_TO_RUN_PCT[kind],
        facts=len(sizes),
        moved_over=tuple(sum(size > step for size in sizes) for step in MOVE_STEPS),
        median_pct=statistics.median(sizes),
        p95_pct=_quantile(sizes, 0.95),
        largest_pct=sizes[-1],
        within_pct=100.0 * sum(m.z <= WITHIN_Z for m in of_kind) / len(of_kind),
        beyond=tuple(sorted(m.fact_id for m in of_kind if m.z > critical)),
    )


def kind_table(base: Results, new: Results) -> list[KindRepeat]:
    """One row per kind of quantity that both runs have facts of, in :data:`RUN_TO_RUN_PCT`'s order."""
    found = moves(base, new)
    critical = NormalDist().inv_cdf(1.0 - FACT_ALPHA / 2.0)
    rows = []
    for kind in RUN_TO_RUN_PCT:
        of_kind = [m for m in found if m.kind == kind]
        if of_kind:
            rows.append(_kind_row(kind, of_kind, critical))
    return rows


def render_kind_table(rows: Sequence[KindRepeat]) -> str:
    """The table as Markdown, one row per kind, the facts beyond their noise and allowance named."""
    steps = " | ".join(f"> {step:g} %" for step in MOVE_STEPS)
    tail = f"Median | 95th pct | Largest | Within 1.96 SE | Beyond p < {FACT_ALPHA:g}"
    lines = [
        f"| Kind | Allowance | Facts | {steps} | {tail} |",
        "|---|---|---|" + "---|" * len(MOVE_STEPS) + "---|---|---|---|---|",
    ]
    for r in rows:
        counts = " | ".join(str(c) for c in r.moved_over)
        named = ", ".join(md_code(fact_id) for fact_id in r.beyond) or "none"
        lines.append(
            f"| {r.kind} | ±{percent_text(r.allowance_pct)} % | {r.facts} | {counts} | {percent_text(r.median_pct)} % "
            f"| {percent_text(r.p95_pct)} % | {percent_text(r.largest_pct)} % | {r.within_pct:.0f} % "
            f"| {named} |"
        )
    return "\n".join(lines) + "\n"
