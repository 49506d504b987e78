"""The fact sheet: one run's results rendered as Markdown (or HTML), with its plots.

The sheet opens with the device identity, shouts if the run is partial, then gives one section
per probe family (the ``SECTIONS`` each family declares, then ``GENERAL_SECTIONS``: facts grouped
by id prefix, or failing that by the probe that measured them), the cross-generation invariants,
and the probes that did not end ok.
Every number comes from the results; nothing here measures or edits one.

The content is computed once as plain text (``identity_rows``, ``plan_sections``, ``fact_rows``,
``invariant_rows``, ``note_items``, ``probe_problems``); ``render_markdown`` here and
``gpuprobe.output.html_report.render_html`` only mark it up, so the two formats say the same thing.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from gpuprobe.core.numbers import fmt_bytes, fmt_num, fmt_nums
from gpuprobe.core.results import Fact, Results
from gpuprobe.output.plots import measured_sm_mhz
from gpuprobe.output.sections import Plot
from gpuprobe.output.sections import Section as Family

FACTSHEET_NAME = "factsheet.md"
FACTSHEET_HTML_NAME = "factsheet.html"
FORMATS = ("md", "html")

VERDICT_MARKERS: dict[str, str] = {
    "pass": "PASS",
    "fail": "**FAIL**",
    "warn": "WARN",
    "unstable": "UNSTABLE",
    "not_run": "NOT RUN",
    "throttled": "THROTTLED",
    "shared": "SHARED",
    "report": "—",
}

NONE = "—"


# The sections every sheet ends with, after the families' own (see ``sheet_layout``). A fact goes to the
# first section whose id prefix matches, else to the first whose probe prefix matches its probe, else
# to "Other facts".
GENERAL_SECTIONS: tuple[Family, ...] = (
    Family(
        title="Device",
        fact_prefixes=("device.",),
        blurb="What the probes measured about the device, held against what it reports.",
    ),
    Family(
        title="Measurement overheads",
        fact_prefixes=("overhead.",),
        blurb="Measured costs subtracted from every timed loop.",
    ),
    Family(
        title="Cross-generation invariants",
        fact_prefixes=("invariant.",),
        blurb="Relations that hold on every GPU generation; asserted even for a GPU with no expectations.",
        invariants=True,
    ),
)
OTHER = Family(title="Other facts", fact_prefixes=())

_UNIT_ABBREV = {"cycle": "cyc", "count": "", "bool": ""}
_MD_SPECIAL = re.compile(r"[\\`*<\[\]]")  # not "_": GFM never emphasises inside a word


def gpu_slug(device_name: str) -> str:
    """File-name slug of a GPU name: "NVIDIA A100-SXM4-80GB" -> "nvidia-a100-sxm4-80gb".

    Lower case; every run of characters outside [a-z0-9] becomes one "-"; no leading or trailing
    "-". A name with nothing usable gives "unknown-gpu".
    """
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")
    return slug or "unknown-gpu"


# ---------------------------------------------------------------- number formatting


def _unit_suffix(unit: str) -> str:
    """ " cyc" for cycles, nothing for counts and bools, else the unit itself after a space."""
    abbrev = _UNIT_ABBREV.get(unit, unit)
    return f" {abbrev}" if abbrev else ""


def fmt_quantity(value: float, unit: str) -> str:
    """A value in its unit for humans: bytes scaled, cycles as "cyc", bools as yes/no."""
    if unit == "byte":
        return fmt_bytes(value)
    if unit == "bool":
        return "yes" if value else "no"
    return fmt_num(value) + _unit_suffix(unit)


def fmt_values(values: Sequence[float], unit: str, template: str) -> str:
    """Several values of one unit in ``template`` ("{0} [{1}, {2}]"), at one shared precision.

    Bytes and bools carry their unit in each value; other units are written once, at the end.
    """
    if unit in ("byte", "bool"):
        return template.format(*(fmt_quantity(v, unit) for v in values))
    return template.format(*fmt_nums(values)) + _unit_suffix(unit)


def _ns_of(fact: Fact, mhz: float | None) -> float | None:
    """The fact's latency in ns: as recorded, else derived from cycles at the measured clock."""
    if "ns" in fact.converted:
        return fact.converted["ns"]
    if fact.unit == "cycle" and fact.value is not None and mhz:
        return fact.value / mhz * 1000
    return None


def fmt_measured(fact: Fact, mhz: float | None) -> str:
    """Measured column: "262.4 [261.9, 263.0] cyc (149.5 ns)"; "not measured" when no value."""
    if fact.value is None:
        return "not measured"
    if fact.ci is None:
        text = fmt_quantity(fact.value, fact.unit)
    else:
        text = fmt_values([fact.value, *fact.ci], fact.unit, "{0} [{1}, {2}]")
    ns = _ns_of(fact, mhz)
    if ns is not None:
        text += f" ({fmt_num(ns)} ns)"
    return text


def fmt_expected(expectation: dict[str, Any] | None, fact_unit: str) -> str:
    """Expected column: "250 – 290 cyc (assert)", "≥ 40 MiB (warn)", "= 132 (assert)"."""
    if not expectation:
        return NONE
    unit = str(expectation.get("unit") or fact_unit)
    low, high = expectation.get("low"), expectation.get("high")
    if low is None and high is None:
        text = "any"
    elif low is not None and high is not None and float(low) == float(high):
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


# ---------------------------------------------------------------- markdown pieces


def escape(text: str) -> str:
    """Machine-written text (probe details, SASS lines) shown literally: ``/*0090*/`` stays unemphasised."""
    return _MD_SPECIAL.sub(r"\\\g<0>", text)


def cell(text: object) -> str:
    """Text safe inside a Markdown table cell: pipes escaped, newlines as <br>."""
    value = str(text).strip()
    if not value:
        return NONE
    return value.replace("|", "\\|").replace("\r\n", "\n").replace("\n", "<br>")


def table(header: Iterable[str], rows: Iterable[Iterable[object]]) -> list[str]:
    """A Markdown table as lines."""
    head = list(header)
    lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return lines


def _mhz(value: float | None) -> str:
    return NONE if value is None else f"{fmt_num(value)} MHz"


def _sm_clock_row(results: Results) -> str:
    """SM clock: measured against nominal, with any NVML readings."""
    measured = measured_sm_mhz(results)
    text = f"{_mhz(measured)} measured (nominal {_mhz(results.device.sm_clock_nominal_mhz)})"
    nvml = results.clocks.get("nvml")
    if isinstance(nvml, dict) and nvml:
        readings = ", ".join(f"{k} = {v}" for k, v in sorted(nvml.items()))
        text += f"; NVML: {readings}"
    return text


def _memory_row(results: Results) -> str:
    """Memory: clock, bus width and size, whichever the device reported."""
    dev = results.device
    parts = [f"{dev.memory_type} (datasheet)"] if dev.memory_type else []
    if dev.mem_bytes is not None:
        parts.append(fmt_bytes(dev.mem_bytes))
    if dev.mem_bus_bits is not None:
        parts.append(f"{dev.mem_bus_bits}-bit bus")
    if dev.mem_clock_mhz is not None:
        parts.append(f"{_mhz(dev.mem_clock_mhz)} clock")
    return ", ".join(parts) or NONE


def _shared_row(results: Results) -> str:
    dev = results.device
    if dev.shared_per_sm_bytes is None:
        return NONE
    text = fmt_bytes(dev.shared_per_sm_bytes)
    if dev.shared_per_block_optin_bytes is not None:
        text += f" (opt-in per block {fmt_bytes(dev.shared_per_block_optin_bytes)})"
    return text


def identity_rows(results: Results) -> list[tuple[str, str]]:
    """The device identity as (label, plain text) pairs."""
    dev = results.device
    return [
        ("GPU", dev.name),
        ("Architecture", f"{dev.arch} (compute capability {dev.cc})"),
        ("SMs", str(dev.sm_count)),
        ("SM clock", _sm_clock_row(results)),
        ("Memory", _memory_row(results)),
        ("L2 cache", fmt_bytes(dev.l2_bytes)),
        ("Shared memory per SM", _shared_row(results)),
        ("Driver", dev.driver),
        ("CUDA runtime", dev.cuda_runtime),
        ("Toolkit that compiled the probes", dev.toolkit),
        ("Run date (UTC)", results.created),
    ]


def identity_lines(results: Results) -> list[str]:
    """The device identity table."""
    return table(("Device", "Value"), identity_rows(results))


def partial_banner() -> list[str]:
    """The loud warning for a run that did not finish."""
    return [
        "> [!WARNING]",
        (
            "> **PARTIAL RUN — this run did not finish.** Facts may be missing and probes may not have run; "
            "see *Probe status* below. Do not publish or compare against this sheet as a complete result."
        ),
    ]


def verdict_counts(facts: list[Fact]) -> list[tuple[str, int]]:
    """(verdict, how many facts have it), known verdicts in ``VERDICT_MARKERS`` order, others after."""
    counts: dict[str, int] = {}
    for fact in facts:
        counts[fact.verdict] = counts.get(fact.verdict, 0) + 1
    order = [v for v in VERDICT_MARKERS if v in counts] + sorted(v for v in counts if v not in VERDICT_MARKERS)
    return [(v, counts[v]) for v in order]


def verdict_summary(facts: list[Fact]) -> str:
    """One line counting facts by verdict, in a fixed order."""
    parts = [f"{n} {v.replace('_', ' ')}" for v, n in verdict_counts(facts)]
    return f"**{len(facts)} facts:** " + (", ".join(parts) if parts else "none")


# ---------------------------------------------------------------- sections


def sheet_layout(family_sections: Sequence[Family]) -> tuple[Family, ...]:
    """Every section of the sheet in order: the families' own (``SECTIONS``, in the order the catalog
    gives them), then the general ones (``GENERAL_SECTIONS``)."""
    return (*family_sections, *GENERAL_SECTIONS)


def family_of(fact: Fact, layout: Sequence[Family]) -> Family:
    """The section a fact belongs to: by id prefix first, then by the probe that measured it."""
    for family in layout:
        if fact.id.startswith(family.fact_prefixes):
            return family
    for family in layout:
        if family.probe_prefixes and fact.probe.startswith(family.probe_prefixes):
            return family
    return OTHER


def group_facts(facts: list[Fact], layout: Sequence[Family]) -> dict[str, list[Fact]]:
    """Facts by family title, each list in results order."""
    groups: dict[str, list[Fact]] = {}
    for fact in facts:
        groups.setdefault(family_of(fact, layout).title, []).append(fact)
    return groups


FACT_HEADER = ("Fact", "Measured (median [CI])", "Noise, detects", "Expected (severity)", "Source", "Verdict")
INVARIANT_HEADER = ("Invariant", "Result", "Severity", "Verdict", "Detail")
PROBE_HEADER = ("Probe", "Status", "Detail")


@dataclass(frozen=True)
class FactRow:
    """One fact-table row as plain text; ``verdict`` is the verdict key (``"fail"``), not its marker."""

    fact_id: str
    measured: str
    detects: str
    expected: str
    source: str
    verdict: str


@dataclass(frozen=True)
class InvariantRow:
    """One invariant-table row as plain text."""

    fact_id: str
    result: str
    severity: str
    verdict: str
    detail: str


@dataclass(frozen=True)
class SectionPlan:
    """What one family's section shows: its facts, its probes, and its plot (None: no plot)."""

    family: Family
    facts: list[Fact]
    probes: list[str]
    plot: str | None


def fact_rows(facts: list[Fact], mhz: float | None) -> list[FactRow]:
    """Fact id, measured, what its samples detect (as the results file records it), expected, source,
    verdict, as plain text."""
    return [
        FactRow(
            fact_id=f.id,
            measured=fmt_measured(f, mhz),
            detects=NONE if f.detection is None else f.detection.text(),
            expected=fmt_expected(f.expectation, f.unit),
            source=str((f.expectation or {}).get("source") or NONE),
            verdict=f.verdict,
        )
        for f in facts
    ]


def invariant_rows(facts: list[Fact]) -> list[InvariantRow]:
    """Invariant id, whether it holds, its severity, verdict, and what it compared, as plain text."""
    return [
        InvariantRow(
            fact_id=f.id,
            result=NONE if f.value is None else ("holds" if f.value else "VIOLATED"),
            severity=str((f.expectation or {}).get("severity") or NONE),
            verdict=f.verdict,
            detail=f.detail,
        )
        for f in facts
    ]


def note_items(facts: list[Fact]) -> list[tuple[str, str, str]]:
    """(fact id, measurement detail, expectation note) for every fact with either, stripped."""
    items = []
    for fact in facts:
        detail, note = fact.detail.strip(), str((fact.expectation or {}).get("note") or "").strip()
        if detail or note:
            items.append((fact.id, detail, note))
    return items


def fact_table(facts: list[Fact], mhz: float | None) -> list[str]:
    """Fact id, measured, noise and the smallest change it lets a comparison detect, expected, source, verdict."""
    rows = [
        (f"`{r.fact_id}`", r.measured, r.detects, r.expected, r.source, verdict_marker(r.verdict))
        for r in fact_rows(facts, mhz)
    ]
    return table(FACT_HEADER, rows)


def invariant_table(facts: list[Fact]) -> list[str]:
    """Invariant id, whether it holds, its severity, verdict, and what it compared."""
    rows = [
        (f"`{r.fact_id}`", r.result, r.severity, verdict_marker(r.verdict), escape(r.detail))
        for r in invariant_rows(facts)
    ]
    return table(INVARIANT_HEADER, rows)


def notes(facts: list[Fact]) -> list[str]:
    """Bullets for fact details and expectation notes, so the tables stay narrow."""
    lines = []
    for fact_id, detail, note in note_items(facts):
        text = " — ".join(p for p in (escape(detail), note) if p)
        lines.append(f"- `{fact_id}`: " + text.replace("\n", " "))
    return lines


def _probes_for(results: Results, family: Family) -> list[str]:
    """The probes of a family, by name prefix, in results order."""
    return [p for p in results.probes if family.probe_prefixes and p.startswith(family.probe_prefixes)]


def plan_section(results: Results, family: Family, facts: list[Fact], plot_files: dict[str, str]) -> SectionPlan | None:
    """What a family's section shows; None when it has nothing to show (no facts, plot or probes)."""
    plot = plot_files.get(family.plot_key) if family.plot_key else None
    probes = _probes_for(results, family)
    if not facts and not plot and not probes:
        return None
    return SectionPlan(family, facts, probes, plot)


def plan_sections(results: Results, plot_files: dict[str, str], layout: Sequence[Family]) -> list[SectionPlan]:
    """Every family's section that has something to show, in sheet order ("Other facts" last)."""
    groups = group_facts(results.facts, layout)
    plans = (plan_section(results, f, groups.get(f.title, []), plot_files) for f in (*layout, OTHER))
    return [plan for plan in plans if plan is not None]


def empty_section_text(results: Results, probes: list[str]) -> str:
    """Why a section has no facts, naming each of its probes and how it ended (plain text)."""
    statuses = ", ".join(f"{p} {results.probes[p].status}" for p in probes)
    return f"No facts measured ({statuses}); see Probe status."


def section(results: Results, family: Family, facts: list[Fact], plot_files: dict[str, str]) -> list[str]:
    """One family's heading, blurb, table, notes and plot; empty when it has nothing to show."""
    plan = plan_section(results, family, facts, plot_files)
    if plan is None:
        return []
    plot, probes = plan.plot, plan.probes
    lines = [f"## {family.title}", ""]
    if family.blurb:
        lines += [family.blurb, ""]
    if facts:
        if family.invariants:
            lines += invariant_table(facts)
        else:
            lines += fact_table(facts, measured_sm_mhz(results))
        extra = [] if family.invariants else notes(facts)
        lines += [""] + ([*extra, ""] if extra else [])
    else:
        statuses = ", ".join(f"`{p}` {results.probes[p].status}" for p in probes)
        lines += [f"No facts measured ({statuses}); see *Probe status*.", ""]
    if plot:
        lines += [f"![{family.title}: {plot_alt(family)}]({plot})", ""]
    return lines


def plot_alt(family: Family) -> str:
    """Alt text for a family's plot."""
    return family.plot.alt if family.plot else "plot"


def all_plots(layout: Sequence[Family]) -> list[Plot]:
    """Every plot a section of the sheet can show."""
    return [family.plot for family in layout if family.plot]


def extra_plot_keys(plot_files: dict[str, str], layout: Sequence[Family]) -> list[str]:
    """Plot keys no family claims, sorted, so a plot handed in is never silently dropped."""
    known = {f.plot_key for f in layout if f.plot_key}
    return sorted(k for k in plot_files if k not in known)


def other_plots(plot_files: dict[str, str], layout: Sequence[Family]) -> list[str]:
    """Links for plots no family claims, so a plot handed in is never silently dropped."""
    extra = extra_plot_keys(plot_files, layout)
    if not extra:
        return []
    return ["## Other plots", ""] + [f"![{key}]({plot_files[key]})\n" for key in extra]


def probe_problems(results: Results) -> list[tuple[str, str, str]]:
    """(probe, STATUS, detail) for every probe that did not end "ok", in results order (plain text)."""
    return [(name, p.status.upper(), p.detail) for name, p in results.probes.items() if p.status != "ok"]


def probe_status_summary(results: Results) -> str | None:
    """The line shown instead of a table when no probe ran or all ended ok; None when some did not."""
    if not results.probes:
        return "No probe ran."
    if not probe_problems(results):
        return f"All {len(results.probes)} probes ended ok."
    return None


def probe_status_lines(results: Results) -> list[str]:
    """Every probe that did not end "ok", or one line saying they all did."""
    lines = ["## Probe status", ""]
    summary = probe_status_summary(results)
    if summary is not None:
        return [*lines, summary, ""]
    bad = [(f"`{name}`", status, escape(detail)) for name, status, detail in probe_problems(results)]
    return [*lines, *table(PROBE_HEADER, bad), ""]


def render_markdown(results: Results, plot_files: dict[str, str], *, sections: Sequence[Family]) -> str:
    """The fact sheet as Markdown, with the families' ``sections`` (in catalog order).

    ``plot_files`` maps a family's ``plot_key`` (e.g. ``"latency_vs_footprint"``) to the image
    path to link, relative to the sheet; a family whose key is absent gets no image link.
    """
    dev = results.device
    lines = [f"# gpuprobe fact sheet: {dev.name}", ""]
    if results.partial:
        lines += [*partial_banner(), ""]
    lines += [*identity_lines(results), ""]
    lines += [verdict_summary(results.facts), ""]
    layout = sheet_layout(sections)
    for plan in plan_sections(results, plot_files, layout):
        lines += section(results, plan.family, plan.facts, plot_files)
    lines += other_plots(plot_files, layout)
    lines += probe_status_lines(results)
    return "\n".join(lines).rstrip("\n") + "\n"
