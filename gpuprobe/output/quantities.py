"""How the sheet writes a fact: its value in its unit, its confidence interval, its expected range, its noise
and its verdict, as plain text (Markdown and HTML only mark it up)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from gpuprobe.core.detection import Detection, percent_text
from gpuprobe.core.numbers import fmt_bytes, fmt_num, fmt_nums
from gpuprobe.core.results import Fact
from gpuprobe.core.tables import NONE
from gpuprobe.judge.physics import is_difference

VERDICT_MARKERS: dict[str, str] = {
    "pass": "PASS",
    "fail": "**FAIL**",
    "warn": "WARN",
    "unstable": "UNSTABLE",
    "not_run": "NOT RUN",
    "throttled": "THROTTLED",
    "shared": "SHARED",
    "invalid": "**INVALID**",
    "report": NONE,
}

_UNIT_ABBREV = {"cycle": "cyc", "count": "", "bool": "", "fraction": ""}


def unit_suffix(unit: str) -> str:
    """ " cyc" for cycles, nothing for counts, bools and fractions, else the unit itself after a space."""
    abbrev = _UNIT_ABBREV.get(unit, unit)
    return f" {abbrev}" if abbrev else ""


def fmt_quantity(value: float, unit: str) -> str:
    """A value in its unit for humans: bytes scaled, cycles as "cyc", bools as yes/no."""
    if unit == "byte":
        return fmt_bytes(value)
    if unit == "bool":
        return "yes" if value else "no"
    return fmt_num(value) + unit_suffix(unit)


def fmt_values(values: Sequence[float], unit: str, template: str) -> str:
    """Several values of one unit in ``template`` ("{0} [{1}, {2}]"), at one shared precision.

    Bytes and bools carry their unit in each value; other units are written once, at the end.
    """
    if unit in ("byte", "bool"):
        return template.format(*(fmt_quantity(v, unit) for v in values))
    return template.format(*fmt_nums(values)) + unit_suffix(unit)


def ns_of(fact: Fact, mhz: float | None) -> float | None:
    """The fact's latency in ns: as recorded, else derived from cycles at the measured clock."""
    if "ns" in fact.converted:
        return fact.converted["ns"]
    if fact.unit == "cycle" and fact.value is not None and mhz:
        return fact.value / mhz * 1000
    return None


NARROW_CI = 0.01  # a CI within ±1 % of the median is not shown: the median alone is that precise


def ci_shown(fact: Fact) -> bool:
    """Whether a fact's CI says more than its median: wider than ±``NARROW_CI`` of it."""
    if fact.ci is None or fact.value is None:
        return False
    low, high = fact.ci
    return max(fact.value - low, high - fact.value) > NARROW_CI * abs(fact.value)


def spans_zero(fact: Fact) -> bool:
    """A measured figure whose confidence interval holds zero and more: its sign is not known."""
    if fact.value is None or fact.ci is None or fact.unit == "bool":
        return False
    low, high = fact.ci
    return low <= 0.0 <= high and low < high


def fmt_measured(fact: Fact, mhz: float | None, with_ci: bool = True) -> str:
    """ "262.4 [259.9, 265.0] cyc (149.5 ns)": the median, its CI when wider than ±1 % of it, ns beside
    cycles; "not measured" without a value. A figure whose CI spans zero is no signed number: "no
    measurable difference" for a difference of two variants, "not distinguishable from 0" otherwise,
    with its CI."""
    if fact.value is None:
        return "not measured"
    if spans_zero(fact) and fact.ci is not None:
        what = "no measurable difference" if is_difference(fact.id) else "not distinguishable from 0"
        return f"{what} ({fmt_values(list(fact.ci), fact.unit, 'CI {0} to {1}')})"
    text = fmt_quantity(fact.value, fact.unit)
    if with_ci and ci_shown(fact) and fact.ci is not None:
        text = fmt_values([fact.value, *fact.ci], fact.unit, "{0} [{1}, {2}]")
    ns = ns_of(fact, mhz)
    if ns is not None:
        text += f" ({fmt_num(ns)} ns)"
    return text


def fmt_expected(expectation: dict[str, Any] | None, fact_unit: str) -> str:
    """Expected: "250 – 290 cyc (assert)", "≥ 40 MiB (warn)", "= 132 (assert)"; "—" when there is no range
    to judge by (no expectation, or a report-only one without bounds)."""
    if not expectation:
        return NONE
    unit = str(expectation.get("unit") or fact_unit)
    low, high = expectation.get("low"), expectation.get("high")
    if low is None and high is None:
        return NONE
    if low is not None and high is not None and float(low) == float(high):
        text = f"= {fmt_quantity(float(low), unit)}"
    elif low is not None and high is not None:
        text = fmt_values([float(low), float(high)], unit, "{0} – {1}")
    elif low is not None:
        text = f"≥ {fmt_quantity(float(low), unit)}"
    else:
        text = f"≤ {fmt_quantity(float(high), unit)}"
    severity = expectation.get("severity")
    return f"{text} ({severity})" if severity else text


def verdict_marker(verdict: str) -> str:
    """PASS / **FAIL** / WARN / UNSTABLE / NOT RUN / — (report only); unknown verdicts upper-cased."""
    return VERDICT_MARKERS.get(verdict, verdict.upper() or NONE)


_LIMIT_SHORT = {"too few samples": "few samples", "a noisy quantity": "noisy", "run-to-run noise": "run-to-run"}


def fmt_detection(detection: Detection | None) -> str:
    """The smallest change a comparison with a run like this one flags: "≥ 2.1 %"; with why when a 5 %
    change is out of reach ("≥ 13 % (17 samples would do)", "(noisy)", "(run-to-run)"); "exact" for
    samples that never vary; the sample count when there is no noise to judge by; "—" without samples."""
    if detection is None:
        return NONE
    if detection.noise_pct is None or detection.detects_pct is None:
        return f"{detection.samples} sample{'s' if detection.samples != 1 else ''}"
    if detection.noise_pct == 0 and not detection.run_to_run_pct:
        return "exact"
    text = f"≥ {percent_text(detection.detects_pct)} %"
    if detection.limit and detection.needs is not None:
        return text + f" ({detection.needs} samples would do)"
    if detection.limit:
        return text + f" ({_LIMIT_SHORT.get(detection.limit, detection.limit)})"
    return text
