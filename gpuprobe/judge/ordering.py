"""Cross-generation invariants that compare measured facts: one must not fall below another.

A measured fact is a median with a confidence interval; "b does not fall below a" holds when b's
CI reaches a's CI (b's upper bound at least a's lower bound), so two costs equal within their
noise never fail. Facts that were not measured are left out, and so is every check that needs them.
"""

from __future__ import annotations

import itertools

from gpuprobe.core.results import Fact
from gpuprobe.judge.invariants import Check


def _measured(facts: dict[str, Fact], fact_id: str) -> Fact | None:
    fact = facts.get(fact_id)
    return fact if fact is not None and fact.value is not None else None


def not_below(name: str, lower: Fact, upper: Fact) -> Check:
    """``upper`` does not fall below ``lower``, within their confidence intervals; doubtful where it holds only
    within them (``upper``'s median below ``lower``'s)."""
    low = lower.ci[0] if lower.ci else lower.value
    high = upper.ci[1] if upper.ci else upper.value
    ok = lower.unit == upper.unit and high >= low
    relation = "≥" if ok else "<"
    detail = (
        f"{upper.id} = {upper.value:g} (CI up to {high:g}) {relation} {lower.id} = {lower.value:g} "
        f"(CI from {low:g}) {upper.unit}"
    )
    doubtful = ok and upper.value < lower.value
    if doubtful:
        detail += f"; but the medians are the wrong way round ({upper.value:g} < {lower.value:g})"
    return Check(name, ok, detail, (lower.id, upper.id), doubtful=doubtful)


def non_decreasing(facts: dict[str, Fact], ordered: list[tuple[str, str]], prefix: str) -> list[Check]:
    """Consecutive measured facts of ``ordered`` ((label, fact id), smallest first) do not fall:
    one check per consecutive measured pair, named ``<prefix>.<label>_to_<label>``."""
    present = [(label, fact) for label, fact_id in ordered if (fact := _measured(facts, fact_id)) is not None]
    return [
        not_below(f"{prefix}.{small}_to_{large}", lower, upper)
        for (small, lower), (large, upper) in itertools.pairwise(present)
    ]


def pair_not_below(facts: dict[str, Fact], name: str, lower_id: str, upper_id: str) -> list[Check]:
    """One check that ``upper_id`` does not fall below ``lower_id``, if both were measured."""
    lower, upper = _measured(facts, lower_id), _measured(facts, upper_id)
    return [not_below(name, lower, upper)] if lower is not None and upper is not None else []
