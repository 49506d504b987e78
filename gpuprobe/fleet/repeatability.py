"""Run-to-run repeatability: the same suite twice on one GPU, each fact's difference against its noise.

A fact is repeatable when two runs differ by no more than their confidence intervals say they may:
the ratio |value_2 - value_1| / (half-width_1 + half-width_2) is at most 1 when the intervals
overlap. The largest ratio over all facts is the headline number.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuprobe.core.results import Fact, Results


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
            f"Largest difference relative to the confidence intervals: **{worst.ratio:.2f}** ({worst.fact_id}).",
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
        lines.append(f"| `{r.fact_id}` | {values} {r.unit} | {r.difference:.4g} | {r.noise:.4g} | {ratio} | {within} |")
    return "\n".join(lines) + "\n"
