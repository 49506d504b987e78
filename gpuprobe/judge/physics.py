"""The physics every fact obeys, whatever its family: checks a run is held to before any expectation.

A measured figure can be wrong in ways the hardware rules out. Each rule here looks at every fact of a
run and fails, naming the facts that break it (each of them is then marked failed: no PASS sits beside
an impossible number, :mod:`gpuprobe.judge.verdicts`). A figure breaks a rule only when its whole
confidence interval does: noise alone never fails a run.

* ``physics.no_negative_quantity``: a latency, cost, rate, bandwidth, clock, size or fraction is never
  negative. Only a difference may be: of two measured variants (its id says so: ``_minus_``), or what a
  hardware counter counted in a long launch beyond a short one (``witness.*``).
* ``physics.fraction_of_peak_at_most_1``: a ``*fraction_of_peak`` is the measured rate over what the unit
  or the memory can do at most; above 1 the rate, the peak or the clock it was scaled by is wrong. Its
  timers resolve it to :data:`RESOLUTION` (a difference spans 100 ticks; a clock window reads the clock to
  1 %), so a single sample 0.3 % over is the timer's, and 1.9 % over (the first H200 smoke stage's DRAM
  read) is not.
* ``physics.sustained_within_burst``: a rate sustained over seconds (``*.sustained*``) does not beat the
  same rate in a short burst (``*.burst*``) beyond :data:`BURST_ALLOWANCE`: the clock only falls as the part
  heats, and a burst's short launches pay their fixed costs in a shorter span. Not physics in the
  smoke sense (a smoke run measures neither), so held in full runs only. The power family's runs
  (``power.<run>.sustained`` against ``power.<run>.burst``) are the rates it holds.

A family's own physics (its unit's per-clock peak, its level's pin rate, one level never beating the one
it is fed by) is among its ``INVARIANTS``, marked ``physics=True`` where it holds at any settings.
"""

from __future__ import annotations

from gpuprobe.core.results import WITNESS_PREFIX, Fact
from gpuprobe.judge.invariants import Check

SIGNLESS_UNITS = ("bool",)
DIFFERENCE_MARK = "_minus_"  # a fact id holding this is a difference of two variants, either sign possible

SHOWN = 4  # offending facts named in a check's detail (all are marked)
RESOLUTION = 0.01  # what the suite's timers resolve a rate to: 100 ticks of a difference, a 1 % clock window


def bounds(fact: Fact) -> tuple[float, float]:
    """A measured fact's confidence interval, or its value twice where it has none: a check fails only beyond
    it."""
    assert fact.value is not None
    return fact.ci if fact.ci is not None else (fact.value, fact.value)


def _measured(facts: dict[str, Fact]) -> list[Fact]:
    return [f for f in facts.values() if f.value is not None and not f.id.startswith("invariant.")]


def _rule(name: str, applies: list[Fact], broken: list[Fact], what: str) -> list[Check]:
    """One check over every fact a rule applies to (none if it applies to none); ``what`` is what breaks it."""
    if not applies:
        return []
    if not broken:
        return [Check(name, True, f"none of {len(applies)} facts {what}", physics=True)]
    shown = "; ".join(f"{f.id} = {f.value:g} {f.unit}" + (f" (CI {f.ci[0]:g} – {f.ci[1]:g})" if f.ci else "")
                      for f in broken[:SHOWN])  # fmt: skip
    more = f" and {len(broken) - SHOWN} more" if len(broken) > SHOWN else ""
    return [Check(name, False, f"{what}: {shown}{more}", tuple(f.id for f in broken), physics=True)]


def is_difference(fact_id: str) -> bool:
    """Whether the fact is a difference, which may have either sign."""
    return DIFFERENCE_MARK in fact_id or fact_id.startswith(WITNESS_PREFIX)  # a count long less short


def no_negative_quantity(facts: dict[str, Fact]) -> list[Check]:
    applies = [f for f in _measured(facts) if f.unit not in SIGNLESS_UNITS and not is_difference(f.id)]
    broken = [f for f in applies if bounds(f)[1] < 0]
    return _rule("physics.no_negative_quantity", applies, broken, "negative beyond its CI")


def fraction_of_peak_at_most_1(facts: dict[str, Fact]) -> list[Check]:
    applies = [f for f in _measured(facts) if f.id.endswith("fraction_of_peak")]
    broken = [f for f in applies if bounds(f)[0] > 1.0 + RESOLUTION]
    return _rule("physics.fraction_of_peak_at_most_1", applies, broken, f"above 1 beyond its CI and {RESOLUTION:.0%}")


BURST_ALLOWANCE = 0.02  # a burst's launches are a tenth as long: their dispatch and tail weigh ten times as much


def sustained_within_burst(facts: dict[str, Fact]) -> list[Check]:
    checks = []
    for fact in _measured(facts):
        if ".sustained" not in fact.id:
            continue
        burst = facts.get(fact.id.replace(".sustained", ".burst"))
        if burst is not None and burst.value is not None:
            low, high = bounds(fact)[0], bounds(burst)[1] * (1 + BURST_ALLOWANCE)
            ok = fact.unit == burst.unit and low <= high
            detail = (f"{fact.id} = {fact.value:g} (CI from {low:g}) against {burst.id} = {burst.value:g} (CI up to "
                      f"{bounds(burst)[1]:g}, +{BURST_ALLOWANCE:.0%}: {high:g}) {fact.unit}")  # fmt: skip
            checks.append(Check(f"physics.sustained_within_burst.{fact.id}", ok, detail, (fact.id, burst.id),
                                physics=True))  # fmt: skip
    return checks


def physics_checks(facts: dict[str, Fact]) -> list[Check]:
    """Every rule of this module over ``facts`` (invariant facts left out)."""
    return [*no_negative_quantity(facts), *fraction_of_peak_at_most_1(facts), *sustained_within_burst(facts)]
