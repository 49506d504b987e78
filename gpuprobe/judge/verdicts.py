"""A run's verdicts: each fact against its model's expectation, the invariants and physics over them all.

The same judgement is made while a run measures (each fact as its probe ends, then every invariant at the
end) and whenever a results file is rendered again (:func:`judge_again`): a sheet re-rendered by a newer
gpuprobe shows what this gpuprobe's expectations, invariants and physics say of the stored values, not the
verdicts stored beside them. A verdict that changed says so in its detail.

* A full run's fact is held to its model's expectation (:func:`judge_fact`); a fact whose confidence
  interval is wider than :data:`MAX_NOISE` of its value is ``unstable`` rather than judged.
* A smoke run's facts come from each family's cheapest probes, measured once at minimal settings: they are
  never held to the full run's expectations, only to physics (:data:`SMOKE_DETAIL`).
* Every invariant is a fact ``invariant.<name>``; a smoke run is held only to those that are physics.
* A failed invariant marks each fact it names ``fail`` with why: no PASS sits beside an impossible number.
  One that holds only within the noise (two medians the wrong way round, their CIs overlapping) turns a
  PASS of its facts into ``unstable``: the samples cannot say which of them is right.
* Facts measured while the GPU throttled or had other tenants keep that verdict: their conditions, not
  their value, decide it, and only the run saw those.
* A tensor-core or ALU rate held to an absolute range (TFLOP/s: a warn at most) says the SM clock it ran at
  after its judgement (:func:`state_clocks`): that range judges the clock as much as the part.

Every reader of a results file reads it through :func:`gpuprobe.fleet.reading.read_judged`: validated, then
judged again, so no reader repeats a stored verdict, range or interval it has not checked. A stored verdict
that the values no longer earn is shown as such: in the fact's detail on the sheet, and as one line
(:func:`gpuprobe.fleet.reading.changes_text`) naming the facts in ``compare``, ``fleet`` and ``index``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from pathlib import Path

from gpuprobe.core.numbers import fmt_num
from gpuprobe.core.results import DISTURBED_VERDICTS, INVALID, WITNESS_PREFIX, Device, Fact, Results
from gpuprobe.judge import expectations
from gpuprobe.judge.expectations import (
    ABSOLUTE_RATE_UNITS,
    STRADDLES,
    UNIT_MISMATCH,
    Expectation,
    ModelExpectations,
    judge,
    load_all,
    match_model,
)
from gpuprobe.judge.invariants import Check, InvariantCheck, check_invariants
from gpuprobe.judge.physics import physics_checks

MAX_NOISE = 0.10  # a fact whose CI half-width exceeds this fraction of its value is unstable, not judged
UNJUDGED = (*DISTURBED_VERDICTS, "unstable")  # facts whose conditions or noise forbid judging them
KEPT = (*DISTURBED_VERDICTS, INVALID)  # verdicts a re-judgement keeps: they rest on what the file cannot show
SMOKE_DETAIL = (
    "smoke stage: measured once at minimal settings to see the probe run and verify itself; "
    "held to physics, not to the full run's expectations"
)
IMPOSSIBLE = "IMPOSSIBLE"  # how a fact marked by a failed invariant begins its detail
DOUBTFUL = "INCONSISTENT WITHIN THE NOISE"  # how a fact a doubtful invariant names begins its detail
TOO_NOISY = "; UNSTABLE: "  # where a fact too noisy to judge says so, after the judge's detail
STORED = " (stored verdict: "  # where a fact judged again says what its file held
RAN_AT = "; ran at "  # where a rate held to an absolute range says the SM clock it ran at, after its judgement


# A hardware counter's witness of a probe's own claim (``witness.<probe>.<quantity>``, gpuprobe.measure.witness): what
# Nsight Compute counted over what the probe says it moved is within WITNESS_TOLERANCE of 1; bank conflicts
# (``...shared_bank_conflicts``, per shared-memory wavefront) within it of none. Whatever the GPU model: the
# claim is the probe's, not the model's. Other witness facts (the figures themselves) are reported.
WITNESS_CONFLICTS = ".shared_bank_conflicts"
WITNESS_TOLERANCE = 0.10
WITNESS_SOURCE = "the probe's own claim, which a hardware counter (Nsight Compute) must agree with within 10 %"
WITNESS_JUDGED = "; judged: "  # between what the witness said of a fact and what its judgement says


def witness_expectation(fact: Fact) -> Expectation | None:
    """The built-in expectation of a witness fact: a ratio near 1, a conflict share near 0; None for a figure."""
    if fact.unit != "fraction":
        return None
    if fact.id.endswith(WITNESS_CONFLICTS):
        return Expectation(fact.id, 0.0, WITNESS_TOLERANCE, "fraction", "warn", WITNESS_SOURCE)
    return Expectation(fact.id, 1 - WITNESS_TOLERANCE, 1 + WITNESS_TOLERANCE, "fraction", "warn", WITNESS_SOURCE)


RECORDED = tuple(f.name for f in fields(Expectation) if f.name != "fact_id")


def recorded(expectation: Expectation | None) -> dict | None:
    """An expectation as a fact records it (without the fact id it repeats): its fields, all plain values, read
    directly (``asdict`` copies each deeply: a quarter of judging a stored run again, for nothing)."""
    return None if expectation is None else {name: getattr(expectation, name) for name in RECORDED}


def judge_witness(fact: Fact) -> Fact:
    """A witness fact held to :func:`witness_expectation` (a WARN outside it); what the witness said of it
    kept before the judgement, so that judging it again changes nothing."""
    expectation = witness_expectation(fact)
    said = fact.detail.split(WITNESS_JUDGED, 1)[0]
    fact.expectation = recorded(expectation)
    if expectation is None or fact.value is None:
        fact.verdict = "report" if fact.value is not None else "not_run"
        fact.detail = said
        return fact
    fact.verdict, judged = judge(fact, expectation)
    fact.detail = f"{said}{WITNESS_JUDGED}{judged}"
    return fact


def judge_fact(fact: Fact, model: ModelExpectations | None, stage: str = "full") -> Fact:
    """``fact`` held to its expectation in ``model`` (none in a smoke run); its expectation recorded. A witness
    fact is held to its built-in expectation (:func:`judge_witness`), at any stage."""
    if fact.id.startswith(WITNESS_PREFIX):
        return judge_witness(fact)
    if stage == "smoke":
        fact.expectation = None
        fact.verdict, fact.detail = ("not_run", fact.detail) if fact.value is None else ("report", SMOKE_DETAIL)
        return fact
    expectation = model.expectation_for(fact.id) if model else None
    fact.expectation = recorded(expectation)
    fact.verdict, fact.detail = judge(fact, expectation)
    return fact


def mark_disturbed(facts: Iterable[Fact], reason: str, attempts: int) -> str:
    """Mark facts measured under conditions that forbid judging them (another process on the GPU, a throttled
    clock, after ``attempts`` tries) as such, never judged; the verdict given."""
    verdict = "shared" if reason.startswith("shared") and "throttled" not in reason else "throttled"
    for fact in facts:
        fact.verdict = verdict
        fact.detail = f"{fact.id}: measured {verdict} after {attempts} attempt(s), not judged: {reason}"
    return verdict


def too_noisy(fact: Fact) -> bool:
    """A judged fact whose confidence interval is wider than ``MAX_NOISE`` of its value."""
    if fact.ci is None or not fact.value or fact.verdict not in ("pass", "fail", "warn"):
        return False
    return (fact.ci[1] - fact.ci[0]) / 2 > MAX_NOISE * abs(fact.value)


def judge_measured(fact: Fact, model: ModelExpectations | None, stage: str = "full") -> Fact:
    """Judge a measured fact, unless its conditions were bad (already marked) or its noise too large."""
    if fact.verdict in DISTURBED_VERDICTS:
        return fact
    judge_fact(fact, model, stage)
    if too_noisy(fact):
        low, high = fact.ci
        fact.verdict = "unstable"
        fact.detail += f"{TOO_NOISY}CI {low:g}–{high:g} is wider than ±{MAX_NOISE:.0%} of the value, too noisy to judge"
    return fact


def device_facts(device: Device) -> list[Fact]:
    """What the part reports of itself, as the facts :data:`~gpuprobe.judge.expectations.DEVICE_FACT_IDS` names."""
    sm_count, l2_bytes = expectations.DEVICE_FACT_IDS
    return [
        Fact(sm_count, float(device.sm_count), "count", probe="device"),
        Fact(l2_bytes, float(device.l2_bytes), "byte", probe="device"),
    ]


def run_checks(results: Results, family_checks: Iterable[InvariantCheck]) -> list[Check]:
    """Physics and invariants over the facts fit to be judged; a smoke run's physics only."""
    facts = {f.id: f for f in results.facts if f.verdict not in UNJUDGED and not f.id.startswith("invariant.")}
    checks = [*physics_checks(facts), *check_invariants(facts, results.device, family_checks)]
    return [c for c in checks if c.physics] if results.stage == "smoke" else checks


def invariant_fact(check: Check) -> Fact:
    verdict = "pass" if check.ok else "fail"
    return Fact(f"invariant.{check.name}", float(check.ok), "bool", probe="invariants", verdict=verdict,
                detail=check.detail)  # fmt: skip


def mark_impossible(facts: Iterable[Fact], checks: Iterable[Check]) -> None:
    """Each fact a failed check names: ``fail``, with the check's name and detail before its own; each passed
    fact a doubtful check names: ``unstable``, with why."""
    by_id = {f.id: f for f in facts}
    for check in checks:
        for fact_id in check.facts if not check.ok or check.doubtful else ():
            fact = by_id.get(fact_id)
            if fact is None or fact.verdict in KEPT or (check.ok and fact.verdict != "pass"):
                continue
            fact.verdict, mark = ("unstable", DOUBTFUL) if check.ok else ("fail", IMPOSSIBLE)
            fact.detail = f"{mark} (invariant.{check.name}): {check.detail}. {fact.detail}".strip()


def judge_invariants(results: Results, family_checks: Iterable[InvariantCheck]) -> None:
    """The run's invariant facts, replaced by what the checks say now; the facts they fail marked."""
    checks = run_checks(results, family_checks)
    results.facts = [f for f in results.facts if not f.id.startswith("invariant.")]
    mark_impossible(results.facts, checks)
    results.facts += [invariant_fact(c) for c in checks]


def judges_clock(fact: Fact) -> bool:
    """A judged rate in an absolute unit (``ABSOLUTE_RATE_UNITS``) held to a range: its verdict judges the SM
    clock it ran at as much as the part."""
    held = fact.expectation or {}
    bounded = held.get("low") is not None or held.get("high") is not None
    return fact.value is not None and fact.unit in ABSOLUTE_RATE_UNITS and fact.verdict not in KEPT and bounded


def clock_text(fact: Fact, by_id: dict[str, Fact]) -> str:
    """Where a rate ran: ``; ran at 1751 MHz (<stem>.sm_clock)``, its sibling clock fact, which its probe
    measured in the same kernels; ``; ran at a clock not measured (no <stem>.sm_clock)`` without one."""
    clock_id = f"{fact.id.rsplit('.', 1)[0]}.sm_clock"
    clock = by_id.get(clock_id)
    if clock is None or clock.value is None:
        return f"{RAN_AT}a clock not measured (no {clock_id})"
    return f"{RAN_AT}{fmt_num(clock.value)} {clock.unit} ({clock_id})"


def state_clocks(facts: list[Fact]) -> None:
    """Each rate held to an absolute range (:func:`judges_clock`) says, after its judgement, the SM clock it ran
    at; once, however often its facts are judged together."""
    by_id = {f.id: f for f in facts}
    for fact in facts:
        if judges_clock(fact) and (said := clock_text(fact, by_id)) not in fact.detail:
            fact.detail += said


def judge_together(results: Results, family_checks: Iterable[InvariantCheck]) -> None:
    """What is judged of a run's facts together, once each was judged alone: the clock each absolute rate ran at
    (:func:`state_clocks`), then the invariants and physics over them all (:func:`judge_invariants`)."""
    state_clocks(results.facts)
    judge_invariants(results, family_checks)


@dataclass(frozen=True)
class VerdictChange:
    """A fact whose verdict stored in its file differs from what this gpuprobe judges of its value."""

    fact_id: str
    stored: str
    judged: str

    def text(self) -> str:
        """``latency.l2 (stored pass, judged fail)``."""
        return f"{self.fact_id} (stored {self.stored}, judged {self.judged})"


def judge_again(
    results: Results, model: ModelExpectations | None, family_checks: Iterable[InvariantCheck]
) -> list[VerdictChange]:
    """Every fact of ``results`` judged again by this gpuprobe, in place (see the module docstring); each fact
    whose verdict differs from the stored one says so in its detail, and is returned."""
    stored = {f.id: f.verdict for f in results.facts}
    for fact in results.facts:
        if fact.value is not None and not fact.id.startswith("invariant.") and fact.verdict not in KEPT:
            judge_measured(fact, model, results.stage)
    judge_together(results, family_checks)
    changes = []
    for fact in results.facts:
        before = stored.get(fact.id, fact.verdict)  # a fact the file did not hold (a new invariant) changed nothing
        if before != fact.verdict:
            fact.detail = f"{fact.detail}{STORED}{before}; judged again by this gpuprobe)".strip()
            changes.append(VerdictChange(fact.id, before, fact.verdict))
    return changes


def remarks(fact: Fact) -> str:
    """What a fact's detail says beyond its value, CI and expected range (what a sheet's row shows), as the judge
    wrote it: the judge's opening (the fact's id and value, the range it was held to) left out, the rest kept
    (too noisy, the clock a rate ran at, judged again); a detail the judge did not open (not measured, marked
    impossible or disturbed, a smoke run's) whole, without the fact's id."""
    detail = fact.detail.strip()
    if not detail.startswith(f"{fact.id} = "):
        return detail.removeprefix(f"{fact.id}: ")
    end = min((at for at in (detail.find(m) for m in (TOO_NOISY, RAN_AT, STORED)) if at >= 0), default=len(detail))
    opening, added = detail[:end], detail[end:].lstrip("; ").strip()
    said = ""
    if opening.endswith(STRADDLES):
        said = "its CI straddles an expected bound: too noisy to judge"
    elif UNIT_MISMATCH in opening:
        said = f"unit mismatch: measured in {fact.unit}, expected in {(fact.expectation or {}).get('unit')}"
    return "; ".join(part for part in (said, added) if part)


def is_impossible(fact: Fact) -> bool:
    """Whether a failed invariant or physics rule marked the fact (:func:`mark_impossible`): a value no
    hardware gives, which nothing else of the sheet (a share of a peak) may be set against."""
    return fact.verdict == "fail" and fact.detail.startswith(IMPOSSIBLE)


_MODELS_READ: dict[tuple[object, ...], dict[str, ModelExpectations]] = {}


def _stamp(directory: Path, families: Path) -> tuple[object, ...]:
    """What changes when an expectations file does: each model file's and family file's path, time and size."""
    stamp: list[object] = [directory, families]
    for path in [*sorted(directory.glob("*.toml")), *expectations.family_files(families)]:
        try:
            info = path.stat()
        except OSError:  # gone, or a dangling link: load_all says which
            stamp.append(str(path))
            continue
        stamp.append((str(path), info.st_mtime_ns, info.st_size))
    return tuple(stamp)


def current_models() -> dict[str, ModelExpectations]:
    """:func:`load_all`'s models, parsed again only when a file of the expectations folder changed (its path, size
    or time): a reader of a thousand results files, or a process reading several, parses ~100 TOML files once."""
    stamp = _stamp(expectations.DEFAULT_DIRECTORY, expectations.FAMILIES_DIRECTORY)
    if stamp not in _MODELS_READ:
        _MODELS_READ.clear()
        _MODELS_READ[stamp] = load_all()
    return _MODELS_READ[stamp]


def model_of(results: Results) -> ModelExpectations | None:
    """The GPU model a stored run was judged as (``clocks["model"]``, a model key), else the one its device's
    name matches now; None for discovery mode."""
    models = current_models()
    key = results.clocks.get("model")
    return models[key] if isinstance(key, str) and key in models else match_model(results.device.name, None, models)
