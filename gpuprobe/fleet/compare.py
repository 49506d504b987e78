"""Regression comparison of two results files: every fact SAME, BETTER, WORSE, CHANGED, DIFFERENT HOST or UNKNOWN.

``gpuprobe compare BASE.json NEW.json`` (and ``pytest probes/ --baseline BASE.json``) label each fact of
NEW against BASE relative to the noise both runs measured, never by a fixed percentage. The report opens
with where the two runs came from (:mod:`gpuprobe.fleet.provenance`). The rules, in the order they are
tried, what the noise is and the exit status are in docs/comparing.md.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import StrEnum

from gpuprobe.core.detection import (
    FACT_ALPHA,
    KIND_TEXT,
    MOST_SAMPLES,
    NOISY,
    RUN_TO_RUN,
    RUN_TO_RUN_PCT,
    TARGET_PCT,
    TOO_FEW,
    Spread,
    TwoSample,
    percent_text,
    quantity_kind,
    run_to_run_pct,
    t_test,
    why_not,
)
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.results import DISTURBED_VERDICTS, WITNESS_PREFIX, Fact, Results, provenance
from gpuprobe.core.tables import NONE, md_table, text_table
from gpuprobe.core.text import md_code, md_text, shown
from gpuprobe.fleet.provenance import Relation, host_relation, provenance_lines, stage_refusal

CLOCK_TOLERANCE = 0.02
"""Measured SM clocks differing by more than this fraction of the base clock draw a warning."""

HIGHER_IS_BETTER = 1
LOWER_IS_BETTER = -1
NO_DIRECTION = 0

TIME_UNITS = frozenset({"cycle", "cycles", "clk", "ns", "us", "ms", "s"})


class Label(StrEnum):
    """The labels; a StrEnum, so ``row.label == "WORSE"`` holds.

    CHANGED: a real change of a fact that is neither better nor worse by itself (a count, a capacity).
    DIFFERENT HOST: a host cost that changed between two hosts: the machine, not the GPU, may have moved it.
    """

    SAME = "SAME"
    BETTER = "BETTER"
    WORSE = "WORSE"
    CHANGED = "CHANGED"
    DIFFERENT_HOST = "DIFFERENT HOST"
    UNKNOWN = "UNKNOWN"


SETTLED = (Label.SAME, Label.BETTER, Label.WORSE)
"""Labels that say all there is to say: ``--strict`` fails any other on a fact BASE has."""


@dataclass(frozen=True)
class Row:
    """One fact id's comparison.

    Attributes:
        fact_id: the stable fact id.
        base: the fact in BASE, or ``None`` if only NEW has it.
        new: the fact in NEW, or ``None`` if only BASE has it.
        label: SAME, BETTER, WORSE or UNKNOWN.
        change_pct: NEW minus BASE in percent of BASE (of the sample means when samples decided),
            ``None`` when there is no number to compare or BASE is zero.
        reason: why this label, in one sentence.
        change: NEW minus BASE in the fact's unit, ``None`` when there is no number to compare.
        noise_pct: the relative spread of BASE's and NEW's samples in percent, when samples decided
            (``None`` on a side with fewer than two).
        detects_pct: the smallest change in percent the two runs' samples detect (80 % of the time),
            when samples decided.
    """

    fact_id: str
    base: Fact | None
    new: Fact | None
    label: Label
    change_pct: float | None
    reason: str
    change: float | None = None
    noise_pct: tuple[float | None, float | None] | None = None
    detects_pct: float | None = None

    @property
    def unit(self) -> str:
        fact = self.base or self.new
        return fact.unit if fact else ""

    def fails(self, strict: bool = False) -> bool:
        """WORSE fails a regression check; with ``strict`` so does CHANGED, DIFFERENT HOST or UNKNOWN for a
        fact BASE has."""
        return self.label == Label.WORSE or (strict and self.label not in SETTLED and self.base is not None)


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
    fact_alpha: float = FACT_ALPHA
    """The probability that the test calls one unchanged fact compared by its samples changed."""
    tested: int = 0
    """How many facts were compared by their samples."""
    different_gpus: list[str] = dataclasses.field(default_factory=list)
    """What makes the two GPUs different hardware or clocks (:func:`gpu_differences`), also in ``warnings``."""
    provenance: list[str] = dataclasses.field(default_factory=list)
    """The board, host, driver and gpuprobe code that differ or cannot be told
    (:func:`gpuprobe.fleet.provenance.provenance_lines`): what the report opens with after the GPUs."""

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
        """WORSE rows; with ``strict`` also CHANGED, DIFFERENT HOST and UNKNOWN rows of facts that BASE has."""
        return [r for r in self.rows if r.fails(strict)]

    def summary(self) -> str:
        return ", ".join(f"{len(self.with_label(label))} {label.lower()}" for label in Label)

    def expected_false_worse(self) -> float:
        """How many facts compared by their samples an unchanged GPU would label WORSE, on average."""
        return self.tested * self.fact_alpha / 2.0

    def method(self) -> str:
        """One line saying how the labels were decided and what the decision promises."""
        threshold = f"; changes under {_number(self.threshold_pct)} % of BASE are SAME" if self.threshold_pct else ""
        return (
            f"facts with samples: two-sample t-test, each run's noise plus {allowance_text()} between runs, "
            f"changed when p < {self.fact_alpha:g}, so two runs of an unchanged GPU give "
            f"{self.expected_false_worse():.2g} false WORSE on average over the {self.tested} facts tested "
            f"(and as many false BETTER); facts without samples, and sizes fitted on a curve: stored intervals; "
            f"exact results (counts, flags, sizes decided on a grid): by value, any difference CHANGED (BETTER or "
            f"WORSE where the fact has a direction); a host cost changed on another host: DIFFERENT HOST{threshold}"
        )


def allowance_text() -> str:
    """``±0.3 % (in cycles), ±0.5 % (device rates in seconds), ...``: the run-to-run spread allowed by kind."""
    return ", ".join(f"±{percent_text(pct)} % ({KIND_TEXT[kind]})" for kind, pct in RUN_TO_RUN_PCT.items() if pct)


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
    alpha: float = FACT_ALPHA,
    base_name: str = "BASE",
    new_name: str = "NEW",
) -> Comparison:
    """Label every fact of ``new`` against ``base`` (the rules: docs/comparing.md).

    Args:
        base: the earlier run (the baseline).
        new: the run to judge.
        threshold_pct: changes smaller than this percentage of the base value are SAME even when
            they lie beyond the noise.
        alpha: the probability that one unchanged fact compared by its samples is labelled changed.
        base_name, new_name: how the report names the two runs (e.g. their file paths).

    Raises:
        GpuprobeError: a negative or non-finite threshold, an alpha outside (0, 1), a run holding
            two facts with one id (which of them to compare would be a guess), or runs of two stages.
    """
    if not (math.isfinite(threshold_pct) and threshold_pct >= 0):
        raise GpuprobeError(f"the threshold must be a finite percentage of at least 0, got {threshold_pct!r}")
    if not 0.0 < alpha < 1.0:
        raise GpuprobeError(f"the false-alarm probability alpha must lie strictly between 0 and 1, got {alpha!r}")
    before, now = provenance(base), provenance(new)
    refusal = stage_refusal(before, now, base_name, new_name)
    if refusal:
        raise GpuprobeError(refusal)
    base_facts = _facts_by_id(base, base_name)
    new_facts = _facts_by_id(new, new_name)
    ids = sorted(i for i in base_facts.keys() | new_facts.keys() if not i.startswith(WITNESS_PREFIX))
    pairs = [(i, base_facts.get(i), new_facts.get(i)) for i in ids]
    context = _Terms(threshold_pct, alpha, base_name, new_name, host_relation(before, now))
    return Comparison(
        rows=[_row(fact_id, b, n, context) for fact_id, b, n in pairs],
        warnings=run_warnings(base, new, base_name, new_name),
        different_gpus=gpu_differences(base, new, base_name, new_name),
        provenance=provenance_lines(before, now, base_name, new_name),
        base_name=base_name,
        new_name=new_name,
        base=base,
        new=new,
        threshold_pct=threshold_pct,
        fact_alpha=alpha,
        tested=sum(_by_samples(b, n) for _, b, n in pairs),
    )


@dataclass(frozen=True)
class _Terms:
    """What a comparison is held to, and what it calls its two runs."""

    threshold_pct: float
    fact_alpha: float
    base_name: str
    new_name: str
    hosts: Relation = Relation.SAME  # whether the two runs' machines are one (gpuprobe.fleet.provenance)


def _facts_by_id(results: Results, name: str) -> dict[str, Fact]:
    facts: dict[str, Fact] = {}
    for fact in results.facts:
        if fact.id in facts:
            raise GpuprobeError(f"{name}: fact {fact.id!r} appears twice; cannot tell which one to compare")
        facts[fact.id] = fact
    return facts


def is_invariant(fact: Fact) -> bool:
    return fact.id.startswith("invariant.") or fact.unit == "bool"


def _finite_samples(fact: Fact) -> list[float]:
    return [s for s in fact.samples if math.isfinite(s)]


def _by_samples(base: Fact | None, new: Fact | None) -> bool:
    """Whether rule 5 (raw samples on both sides) decides this pair: a measured quantity, not an exact result
    or a fitted size with its intervals, with samples on both sides."""
    if base is None or new is None or base.unit != new.unit or is_invariant(base) or is_invariant(new):
        return False
    if base.value is None or new.value is None or _is_exact(base) or _by_intervals(base, new):
        return False
    return bool(_finite_samples(base)) and bool(_finite_samples(new))


def _is_exact(fact: Fact) -> bool:
    return quantity_kind(fact.id, fact.unit) == "exact"


def _by_intervals(base: Fact, new: Fact) -> bool:
    """A size fitted on a curve with an interval on both sides: its samples are refits of one knee, its
    interval the grid points around it, so the intervals decide (rule 6)."""
    return quantity_kind(base.id, base.unit) == "fitted" and base.ci is not None and new.ci is not None


def _row(fact_id: str, base: Fact | None, new: Fact | None, context: _Terms) -> Row:
    if base is None or new is None:
        where = context.base_name if new is None else context.new_name
        return Row(fact_id, base, new, Label.UNKNOWN, None, f"only in {where}")
    if base.unit != new.unit:
        reason = f"unit changed from {base.unit!r} to {new.unit!r}; the numbers cannot be compared"
        return Row(fact_id, base, new, Label.UNKNOWN, None, reason)
    if is_invariant(base) or is_invariant(new):
        return _invariant_row(fact_id, base, new)
    if base.value is None or new.value is None:
        where = " and ".join(n for n, f in ((context.base_name, base), (context.new_name, new)) if f.value is None)
        return Row(fact_id, base, new, Label.UNKNOWN, None, f"no value in {where}")
    if _is_exact(base):
        return _exact_row(fact_id, base, new, context)
    if _by_samples(base, new):
        return _samples_row(fact_id, base, new, context)
    return _interval_row(fact_id, base, new, context)


def _exact_row(fact_id: str, base: Fact, new: Fact, context: _Terms) -> Row:
    """An exact result by value: equal is SAME, any difference a change (never noise, never UNKNOWN)."""
    assert base.value is not None and new.value is not None
    change, pct = _change(base.value, new.value)
    if change == 0:
        return Row(fact_id, base, new, Label.SAME, pct, "equal values (an exact result)", change)
    evidence = f"an exact result, {_number(base.value)} -> {_number(new.value)} {base.unit}: any difference is real"
    return _changed_row(fact_id, base, new, (change, pct, base.value), evidence, context)


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


def _range(spread_samples: list[float]) -> tuple[float, float]:
    return min(spread_samples), max(spread_samples)


def _noise_text(spread: Spread) -> str:
    noise = spread.noise_pct
    return "" if noise is None else f" ±{percent_text(noise)} %"


def _pair_detection(
    test: TwoSample, before: Spread, now: Spread, alpha: float, run_to_run: float
) -> tuple[float | None, str]:
    """The smallest change in percent this pair would flag, and its text: ``detects changes ≥ 2.1 %``,
    with the run-to-run allowance it counts, and why a change of ``TARGET_PCT`` is out of reach when it is."""
    if before.mean == 0:
        return None, "no relative noise (BASE's mean is 0)"
    smallest = test.detectable(alpha) / abs(before.mean) * 100.0
    between = f" (±{percent_text(run_to_run)} % allowed between runs)" if run_to_run else ""
    text = f"detects changes ≥ {percent_text(smallest)} %{between}"
    if smallest <= TARGET_PCT:
        return smallest, text
    noise = max((n for n in (before.noise_pct, now.noise_pct) if n is not None), default=0.0)
    limit, needs = why_not(noise, alpha, run_to_run)
    why = {
        TOO_FEW: f"{TOO_FEW} ({needs} a side would do)",
        NOISY: f"{NOISY} (over {MOST_SAMPLES} a side)",
        RUN_TO_RUN: f"{RUN_TO_RUN} (no sample count would do)",
    }[limit]
    return smallest, f"{text}, not {TARGET_PCT:g} %: {why}"


def _samples_row(fact_id: str, base: Fact, new: Fact, context: _Terms) -> Row:
    base_samples, new_samples = _finite_samples(base), _finite_samples(new)
    before, now = Spread.of(base_samples), Spread.of(new_samples)
    counts = f"{base.unit} (n={before.n}/{now.n})"
    noise = (before.noise_pct, now.noise_pct)
    run_to_run = run_to_run_pct(fact_id, base.unit)
    test = t_test(before, now, run_to_run)
    change, pct = _change(before.mean, now.mean)
    if test is None:
        if change == 0:
            return Row(fact_id, base, new, Label.SAME, pct, f"equal samples {counts}", change, noise)
        reason = f"too few samples to tell: the test needs 2 a side to measure the noise, has {before.n}/{now.n}"
        return Row(fact_id, base, new, Label.UNKNOWN, pct, reason, change, noise)
    smallest, detects = _pair_detection(test, before, now, context.fact_alpha, run_to_run)
    means = (
        f"means {_number(before.mean)}{_noise_text(before)} and {_number(now.mean)}{_noise_text(now)} {counts}, "
        f"p = {_p_text(test.p_value)}"
    )
    if test.changed(context.fact_alpha):
        evidence = f"beyond the noise: {means} < {context.fact_alpha:g}"
        row = _changed_row(fact_id, base, new, (change, pct, before.mean), evidence, context)
        return dataclasses.replace(row, noise_pct=noise, detects_pct=smallest)
    low_before, high_before = _range(base_samples)
    low_now, high_now = _range(new_samples)
    disjoint = high_before < low_now or high_now < low_before
    if disjoint and abs(change) >= TARGET_PCT / 100.0 * min(abs(before.mean), abs(now.mean)):
        reason = (
            f"cannot tell: a change of {TARGET_PCT:g} % or more with sample ranges {_number(low_before)}–"
            f"{_number(high_before)} and {_number(low_now)}–{_number(high_now)} {base.unit} apart, but the "
            f"noise explains it: {means}; {detects}"
        )
        return Row(fact_id, base, new, Label.UNKNOWN, pct, reason, change, noise, smallest)
    reason = f"within the noise: {means}; {detects}"
    return Row(fact_id, base, new, Label.SAME, pct, reason, change, noise, smallest)


def _p_text(p: float) -> str:
    return "0" if p == 0 else f"{p:.2g}"


def _change(before: float, now: float) -> tuple[float, float | None]:
    change = now - before
    pct = change / abs(before) * 100.0 if before != 0 else None
    return change, pct


def _changed_row(
    fact_id: str, base: Fact, new: Fact, delta: tuple[float, float | None, float], evidence: str, context: _Terms
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
        return Row(fact_id, base, new, Label.CHANGED, pct, reason, change)
    if quantity_kind(fact_id, base.unit) == "host" and context.hosts != Relation.SAME:
        return _host_row(fact_id, base, new, (change, pct), evidence, context.hosts)
    disturbed = [f"{name} was measured {f.verdict}" for name, f in ((context.base_name, base), (context.new_name, new))
                 if f.verdict in DISTURBED_VERDICTS]  # fmt: skip
    if disturbed:
        reason = f"changed, but {' and '.join(disturbed)} (GPU throttling or other tenants): {evidence}"
        return Row(fact_id, base, new, Label.UNKNOWN, pct, reason, change)
    improved = (change > 0) == (sign == HIGHER_IS_BETTER)
    label = Label.BETTER if improved else Label.WORSE
    return Row(fact_id, base, new, label, pct, f"{evidence}; {_direction_text(sign)}", change)


def _host_row(
    fact_id: str, base: Fact, new: Fact, delta: tuple[float, float | None], evidence: str, hosts: Relation
) -> Row:
    """A host cost that changed where the two runs' hosts differ (DIFFERENT HOST) or cannot be told apart
    (UNKNOWN): the machine may have moved it, by more than any allowance."""
    change, pct = delta
    if hosts == Relation.DIFFERENT:
        return Row(fact_id, base, new, Label.DIFFERENT_HOST, pct, f"changed on another host: {evidence}", change)
    reason = f"changed, but the host is not known to be the same (a host cost moves with it): {evidence}"
    return Row(fact_id, base, new, Label.UNKNOWN, pct, reason, change)


# --------------------------------------------------------------------------- no samples


def _interval(fact: Fact) -> tuple[float, float] | None:
    """The fact's stored interval; its value for an exact identity fact; ``None`` if its noise is unknown."""
    if fact.ci is not None:
        return min(fact.ci), max(fact.ci)
    if fact.value is not None and not fact.samples and fact.id.startswith("device."):
        return fact.value, fact.value
    return None


def _interval_row(fact_id: str, base: Fact, new: Fact, context: _Terms) -> Row:
    assert base.value is not None and new.value is not None
    change, pct = _change(base.value, new.value)
    if change == 0:
        return Row(fact_id, base, new, Label.SAME, pct, "equal values", change)
    before, now = _interval(base), _interval(new)
    if before is None or now is None:
        where = " and ".join(n for n, i in ((context.base_name, before), (context.new_name, now)) if i is None)
        reason = f"values differ but {where} kept neither samples nor an interval: no noise estimate"
        return Row(fact_id, base, new, Label.UNKNOWN, pct, reason, change)
    both = f"{_interval_text(before)} and {_interval_text(now)} {base.unit}"
    if before[1] >= now[0] and now[1] >= before[0]:
        return Row(fact_id, base, new, Label.SAME, pct, f"no samples; stored intervals {both} overlap", change)
    kind = "values" if before[0] == before[1] and now[0] == now[1] else "stored intervals"
    return _changed_row(fact_id, base, new, (change, pct, base.value), f"no samples; {kind} {both} differ", context)


def _interval_text(interval: tuple[float, float]) -> str:
    low, high = interval
    return _number(low) if low == high else f"{_number(low)}–{_number(high)}"


# --------------------------------------------------------------------------- warnings


def toolkit_versions(description: str) -> str:
    """A results file's toolkit line without where each tool was found: ``ptxas V13.0.88; nvdisasm V13.2.86``
    (the same versions installed in two places build the same cubins)."""
    return re.sub(r"\s*\([^()]*\)", "", description)


def gpu_differences(base: Results, new: Results, base_name: str = "BASE", new_name: str = "NEW") -> list[str]:
    """What makes the two runs' GPUs different hardware, or the same hardware at different clocks: the
    model, the SM count or L2 size (another SKU, a MIG slice), the nominal SM or memory clock, the SM
    clock measured (more than ``CLOCK_TOLERANCE`` apart). Any of these and a change may be the GPU's,
    not the software's: the report opens with them, and ``--strict`` refuses the comparison."""
    b, n = base.device, new.device
    found = [f"{name} is SIMULATED (gpuprobe demo): no GPU was measured" for name, run in ((base_name, b),
             (new_name, n)) if run.simulated]  # fmt: skip
    if (b.name, b.cc) != (n.name, n.cc):
        found.append(f"different GPU models: {base_name} {b.name} (cc {b.cc}), {new_name} {n.name} (cc {n.cc})")
    elif (b.sm_count, b.l2_bytes) != (n.sm_count, n.l2_bytes):
        found.append(
            f"same model, different configuration (MIG or another SKU?): {base_name} {b.sm_count} SMs, "
            f"{b.l2_bytes} bytes L2; {new_name} {n.sm_count} SMs, {n.l2_bytes} bytes L2"
        )
    for what, before, now in (
        ("nominal SM clocks", b.sm_clock_nominal_mhz, n.sm_clock_nominal_mhz),
        ("memory clocks", b.mem_clock_mhz, n.mem_clock_mhz),
    ):
        if before is not None and now is not None and before != now:
            found.append(f"different {what}: {base_name} {before:g} MHz, {new_name} {now:g} MHz")
    clock = _clock_warning(base, new, base_name, new_name)
    if clock:
        found.append(clock)
    return found


def run_warnings(base: Results, new: Results, base_name: str = "BASE", new_name: str = "NEW") -> list[str]:
    """What differs between the two runs' GPUs (:func:`gpu_differences`) and software beside the driver and
    gpuprobe (:attr:`Comparison.provenance` says those): the CUDA runtime and toolkit; and a partial run."""
    b, n = base.device, new.device
    warnings = gpu_differences(base, new, base_name, new_name)
    for what, before, now in (
        ("CUDA runtimes", b.cuda_runtime, n.cuda_runtime),
        ("CUDA toolkits", toolkit_versions(b.toolkit), toolkit_versions(n.toolkit)),
    ):
        if before != now:
            warnings.append(f"different {what}: {base_name} {before or 'unrecorded'}, {new_name} {now or 'unrecorded'}")
    for name, results in ((base_name, base), (new_name, new)):
        if results.partial:
            warnings.append(f"{name} is a partial run (interrupted): facts it lacks are missing, not removed")
    return warnings


def different_gpus_line(differences: list[str]) -> str:
    """The one loud line a comparison of different GPUs (or clocks) opens with."""
    return (
        f"WARNING: DIFFERENT GPUS OR CLOCKS: {'; '.join(differences)}. A change below may be the hardware or its "
        f"clocks, not the software (--strict refuses such a comparison)"
    )


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


def fact_text(fact: Fact | None) -> str:
    """A fact's value with its interval and unit, e.g. ``250.3 (248.1–252.0) cycle``; ``—`` if absent."""
    if fact is None:
        return "—"
    if is_invariant(fact) and fact.verdict in ("pass", "fail"):
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
    pct = f"{row.change_pct:+.2f}" if abs(row.change_pct) < 1e6 else f"{row.change_pct:+.3g}"  # never 300 digits
    return f"{pct} % ({absolute})"


def _cells(row: Row) -> list[str]:
    return [row.fact_id, fact_text(row.base), fact_text(row.new), change_text(row), str(row.label), row.reason]


def _run_line(name: str, results: Results | None) -> str:
    if results is None:
        return name
    d, origin = results.device, provenance(results)
    mhz = _measured_clock(results)
    clock = f"SM clock {mhz:.0f} MHz" if mhz else "SM clock not measured"
    software = ", ".join(
        f"{what} {value or 'unrecorded'}"
        for what, value in (("CUDA runtime", d.cuda_runtime), ("toolkit", d.toolkit))
    )
    return (
        f"{name}: {d.name} (cc {d.cc}, {d.sm_count} SMs), board {origin.board_text()}, host {origin.host_text()}, "
        f"{origin.code_text()}, {origin.stage} stage, driver {origin.driver_text()}, {software}, {clock}, "
        f"created {results.created or '?'}"
    )


HEADLINE = ("fact", "change", "noise (base / new)")
"""The columns of the WORSE and BETTER lists that open a report."""


def noise_text(row: Row) -> str:
    """``±0.42 % / ±0.51 %; detects changes ≥ 2.1 %`` (BASE's and NEW's noise) for a row samples decided."""
    if quantity_kind(row.fact_id, row.unit) == "exact":
        return "an exact result: no noise, any difference is real"
    if row.noise_pct is None:
        return "no samples on a side: stored intervals"
    before, now = (NONE if n is None else f"±{percent_text(n)} %" for n in row.noise_pct)
    detects = "" if row.detects_pct is None else f"; detects changes ≥ {percent_text(row.detects_pct)} %"
    return f"{before} / {now}{detects}"


HEADLINED = (Label.WORSE, Label.BETTER, Label.CHANGED)
"""The labels whose facts a report lists first, each with its change and noise."""


def _headline(comparison: Comparison) -> list[tuple[str, list[list[str]]]]:
    """The WORSE facts, then the BETTER and the CHANGED ones, as (label, rows of fact, change, noise)."""
    return [
        (label, [[r.fact_id, change_text(r), noise_text(r)] for r in comparison.with_label(label)])
        for label in HEADLINED
    ]


def _listed(comparison: Comparison, show_all: bool) -> list[Row]:
    return [r for r in comparison.rows if show_all or r.label != Label.SAME]


def _hidden_line(comparison: Comparison, show_all: bool) -> list[str]:
    same = len(comparison.with_label(Label.SAME))
    return [] if show_all or not same else [f"{same} SAME facts not listed (--all lists them)"]


def render(comparison: Comparison, fmt: str = "text", show_all: bool = False) -> str:
    """The comparison as a plain-text (``text``) or GitHub Markdown (``md``) report, ending in a newline.

    The report opens with the counts and every WORSE and BETTER fact with its change and noise; the
    table after lists every fact that is not SAME, and with ``show_all`` the SAME ones too.
    """
    renderers: dict[str, Callable[[Comparison, bool], list[str]]] = {"text": _text_lines, "md": _markdown_lines}
    if fmt not in renderers:
        raise GpuprobeError(f"unknown format {fmt!r}; choose text or md")
    return "\n".join(shown(line) for line in renderers[fmt](comparison, show_all)) + "\n"  # a name's line break too


def _loud(comparison: Comparison) -> list[str]:
    """The lines a comparison opens with: different GPUs or clocks, then each of board, host, driver and
    gpuprobe code that differs or that the files cannot tell; nothing for two runs of one of each."""
    gpus = [different_gpus_line(comparison.different_gpus)] if comparison.different_gpus else []
    return gpus + [f"WARNING: {line}" for line in comparison.provenance]


def _preamble(comparison: Comparison) -> list[str]:
    lines = [f"warning: {w}" for w in comparison.warnings if w not in comparison.different_gpus]
    for where, ids in (("base", comparison.only_in_base()), ("new", comparison.only_in_new())):
        if ids:
            lines.append(f"only in {where} ({getattr(comparison, where + '_name')}): {', '.join(ids)}")
    return lines


def _text_lines(comparison: Comparison, show_all: bool) -> list[str]:
    lines = [
        *_loud(comparison),
        f"gpuprobe compare: {comparison.base_name} -> {comparison.new_name}",
        "summary: " + comparison.summary(),
    ]
    for label, rows in _headline(comparison):
        if rows:
            lines += ["", f"{label} ({len(rows)}):", *("  " + line for line in text_table(HEADLINE, rows))]
    lines += [
        "",
        "  " + _run_line("base", comparison.base),
        "  " + _run_line("new", comparison.new),
        "method: " + comparison.method(),
        *_preamble(comparison),
        "",
    ]
    listed = _listed(comparison, show_all)
    if listed:
        lines += text_table(COLUMNS, [_cells(r) for r in listed])
    return lines + _hidden_line(comparison, show_all)


def md_warnings(lines: Sequence[str]) -> list[str]:
    """Warnings a Markdown report opens with: one quote, each line a bold paragraph of its own."""
    quoted = [f"> **{md_text(line)}**" for line in lines]
    return [part for i, line in enumerate(quoted) for part in ([">", line] if i else [line])]


def _markdown_lines(comparison: Comparison, show_all: bool) -> list[str]:
    loud = md_warnings(_loud(comparison))
    lines = [
        *loud,
        *([""] if loud else []),
        f"## gpuprobe compare: {md_code(comparison.base_name)} → {md_code(comparison.new_name)}",
        "",
        f"**{comparison.summary()}**",
    ]
    for label, rows in _headline(comparison):
        if rows:
            table = md_table([c.capitalize() for c in HEADLINE], rows)
            lines += ["", f"### {label.capitalize()} ({len(rows)})", "", *table]
    lines += [
        "",
        f"- **base**{md_text(_run_line('', comparison.base))}",
        f"- **new**{md_text(_run_line('', comparison.new))}",
        f"- method: {md_text(comparison.method())}",
    ]
    lines += [f"- {md_text(line)}" for line in _preamble(comparison)]
    listed = _listed(comparison, show_all)
    if listed:
        lines += ["", *md_table([c.capitalize() for c in COLUMNS], [_cells(r) for r in listed])]
    hidden = _hidden_line(comparison, show_all)
    return lines + (["", f"_{hidden[0]}_"] if hidden else [])


# --------------------------------------------------------------------------- pytest --baseline


def _measured_text(fact: Fact) -> str:
    """A fact's value and what its noise was, e.g. ``250.2 cycle (CI 249.3–250.9, ±0.3 %, 40 samples)``."""
    if is_invariant(fact) or fact.value is None:
        return fact_text(fact)
    parts = []
    if fact.ci is not None and fact.value:
        low, high = min(fact.ci), max(fact.ci)
        parts.append(f"CI {_number(low)}–{_number(high)}, ±{(high - low) / 2 / abs(fact.value) * 100:.1f} %")
    samples = _finite_samples(fact)
    parts.append(f"{len(samples)} samples" if samples else "no samples")
    return f"{_number(fact.value)} {fact.unit} ({', '.join(parts)})"


def baseline_failure(row: Row) -> str:
    """One paragraph for a failed ``pytest probes/ --baseline`` assertion: before, now, the change, both
    runs' noise and the smallest change they detect, label, why."""
    if row.base is None or row.new is None:
        return f"{row.fact_id} is {row.label} against the baseline: {row.reason}."
    before = f"before {_measured_text(row.base)}"
    now = f"now {_measured_text(row.new)}"
    change = "" if row.change is None else f"; change {change_text(row)}"
    noise = "" if row.noise_pct is None else f"; noise {noise_text(row)}"
    return f"{row.fact_id} is {row.label} against the baseline: {before}, {now}{change}{noise}. Why: {row.reason}."


def baseline_message(comparison: Comparison | None, fact_id: str, strict: bool = False) -> str | None:
    """The assertion message if ``fact_id`` fails the baseline (WORSE; with ``strict`` also UNKNOWN), else None."""
    if comparison is None:
        return None
    row = comparison.row(fact_id)
    return baseline_failure(row) if row is not None and row.fails(strict) else None


__all__ = [
    "HIGHER_IS_BETTER",
    "LOWER_IS_BETTER",
    "NO_DIRECTION",
    "Comparison",
    "Label",
    "Row",
    "baseline_failure",
    "baseline_message",
    "change_text",
    "compare",
    "different_gpus_line",
    "direction",
    "fact_text",
    "gpu_differences",
    "md_warnings",
    "render",
    "run_warnings",
]
