"""The first-contact report: what a smoke run on new hardware found, per family, in one page.

A smoke run (``gpuprobe run --smoke``, the first stage of ``scripts/device-check.sh``) measures each
family's cheapest probes once. This page says, per family, whether they ran and passed their own
self-check (the chase ended where the host predicts, the mma matched NumPy, every word was written), failed
it (with its numbers), crashed (with the driver's error), timed out, or were skipped and why; and it flags
every value outside physics (:mod:`gpuprobe.judge.physics` and the families' physics invariants): a
smoke figure is never judged against the full run's expectations, but an impossible one is never called
verified. Then the machine as it was found (NVML's record, every software version, the cubin's hash),
and for each probe that went wrong the last launcher calls its measuring process made (the flight
record), so the failure can be diagnosed without another GPU run.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from gpuprobe.core.numbers import fmt_bytes, fmt_num
from gpuprobe.core.results import Fact, ProbeOutcome, Results
from gpuprobe.core.tables import md_table
from gpuprobe.core.text import md_code, md_fence, md_text, shown
from gpuprobe.output.report import simulated_banner
from gpuprobe.output.sheet import identity_rows, sheet_title

# Outcome of a probe, worst first: a family shows the worst of its probes.
OUTCOMES = {
    "crashed": "crashed",
    "timeout": "timed out",
    "failed": "self-check failed",
    "impossible": "a value outside physics",
    "error": "skipped: build error",
    "violated": "skipped: SASS contract violated",
    "not_run": "not run",
    "skipped": "skipped",
    "unsupported": "skipped: arch lacks it",
    "ok": "ran, self-check passed",
}
FLIGHT_SHOWN = 12  # calls shown per probe that went wrong (the results file keeps more)


def _probe_outcome(results: Results, name: str) -> ProbeOutcome:
    outcome = results.probes.get(name)
    if outcome is not None:
        return outcome
    if any(name in record.get("probe_names", ()) for record in results.families.values()):
        return ProbeOutcome("not_run", "never ran: the run ended before it")
    probe = results.declared_probes.get(name)  # a file from before probes were declared in it: targets unknown
    targets = " ".join(probe.archs) if probe else "?"
    return ProbeOutcome("unsupported", f"{results.device.arch} lacks what it needs (targets: {targets})")


def _worst(statuses: list[str]) -> str:
    return min(statuses, key=list(OUTCOMES).index) if statuses else "skipped"


def _facts_text(results: Results, probes: list[str]) -> str:
    facts = [f for f in results.facts if f.probe in probes and f.value is not None]
    return "; ".join(f"{f.id} {fmt_num(f.value)} {f.unit}" for f in facts[:4]) + (" ..." if len(facts) > 4 else "")


def _seconds(record: dict[str, Any]) -> str:
    planned, actual = (record.get(key) for key in ("planned_s", "actual_s"))
    return " / ".join("?" if v is None else f"{v:.1f}" for v in (planned, actual))


def impossible_facts(results: Results, probes: Sequence[str]) -> list[Fact]:
    """The facts of ``probes`` a physics check failed (the verdict "fail" is physics' alone in a smoke run)."""
    return [f for f in results.facts if f.probe in probes and f.verdict == "fail"]


def family_rows(
    results: Results, probes_by_family: Mapping[str, Sequence[str]]
) -> list[tuple[str, str, str, str, str]]:
    """One row per family measured: its probes (those the run recorded it meant to measure, else
    ``probes_by_family``: the smoke stage's, for a smoke run), worst outcome, seconds, and what happened."""
    rows = []
    for family, record in results.families.items():
        probes = list(record.get("probe_names") or probes_by_family.get(family, ()))
        outcomes = {name: _probe_outcome(results, name) for name in probes}
        impossible = impossible_facts(results, probes)
        worst = _worst([o.status for o in outcomes.values()] + (["impossible"] if impossible else []))
        bad = [f"{f.id} = {fmt_num(f.value)} {f.unit}: {f.detail[:300]}" for f in impossible if f.value is not None]
        bad += [f"{name}: {o.detail.splitlines()[0][:300]}" for name, o in outcomes.items() if o.status != "ok"]
        what = "; ".join(bad) if bad else _facts_text(results, probes)
        rows.append((family, ", ".join(probes), OUTCOMES[worst], _seconds(record), what))
    return rows


def verdict_line(rows: list[tuple[str, str, str, str, str]]) -> str:
    verified = [r[0] for r in rows if r[2] == OUTCOMES["ok"]]
    others = [md_text(f"{r[0]} ({r[2]})") for r in rows if r[2] != OUTCOMES["ok"]]
    line = f"**{len(verified)} of {len(rows)} families ran, passed their self-checks, every value within physics.**"
    return line + (f" Not: {', '.join(others)}." if others else "")


def _record_lines(title: str, record: Any) -> list[str]:
    if not isinstance(record, dict) or not record:
        return [f"**{title}:** not available", ""]
    rows = [(str(key), str(value)) for key, value in record.items()]
    return [f"**{title}**", "", *md_table(("", ""), rows), ""]


def environment_lines(results: Results) -> list[str]:
    build = results.build
    lines = ["## The machine as found", ""]
    if build:
        lines += [
            f"Cubin measured: {md_code(str(build.get('arch')))}, SHA-256 {md_code(str(build.get('cubin_sha256')))} "
            f"(each measuring process checked it before loading), built by {md_text(build.get('toolkit'))}.",
            "",
        ]
    environment = results.environment
    lines += _record_lines("NVML device record", environment.get("device_record"))
    lines += _record_lines("Software", environment.get("software"))
    return lines


def flight_lines(outcome: ProbeOutcome) -> list[str]:
    """The probe's last launcher calls, oldest first; one never returned is marked."""
    if not outcome.flight:
        return []
    kept = outcome.flight[-FLIGHT_SHOWN:]
    calls = []
    for call in kept:
        fields = " ".join(f"{k}={v}" for k, v in call.items() if k not in ("n", "call", "elapsed_ms", "error"))
        ended = "NEVER RETURNED" if call.get("elapsed_ms") is None else f"{call['elapsed_ms']:.3f} ms"
        error = f" ERROR {call['error']}" if call.get("error") else ""
        calls.append(shown(f"#{call.get('n')} {call.get('call')} {fields} -> {ended}{error}"))
    head = f"Last {len(kept)} of {len(outcome.flight)} launcher calls kept (all are in results.json):"
    return [head, "", *md_fence("\n".join(calls)), ""]


def problem_lines(results: Results) -> list[str]:
    lines: list[str] = []
    for name, outcome in results.probes.items():
        if outcome.status == "ok":
            continue
        heading = f"### {md_code(name)}: {OUTCOMES.get(outcome.status, outcome.status)}"
        lines += [heading, "", *md_fence(outcome.detail), ""]
        lines += flight_lines(outcome)
    return ["## What went wrong", "", *lines] if lines else []


def render_first_contact(results: Results, probes_by_family: Mapping[str, Sequence[str]]) -> str:
    """The first-contact page for a (smoke) results file, with each family's probes."""
    rows = family_rows(results, probes_by_family)
    device = results.device
    lines = [
        f"# {md_text(sheet_title('first contact', results))}",
        "",
        *([*simulated_banner(), ""] if device.simulated else []),
        md_text(
            f"{device.arch}, {device.sm_count} SMs, L2 {fmt_bytes(device.l2_bytes)}; run {results.created} "
            f"({results.stage} stage{', partial' if results.partial else ''})."
        ),
        "",
        verdict_line(rows),
        "",
        *md_table(("Family", "Probes", "Outcome", "Seconds (planned / actual)", "What happened"), rows),
        "",
        *md_table(("Device", "Value"), identity_rows(results)),
        "",
        *environment_lines(results),
        *problem_lines(results),
    ]
    return "\n".join(shown(line) for line in lines).rstrip() + "\n"
