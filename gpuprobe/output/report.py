"""The fact sheet: one run's results rendered as Markdown (or HTML), with its plots.

The sheet opens with one screen (:mod:`gpuprobe.output.headline`): the device in a line, the verdict in a
line naming the facts that failed, the probes in a line (how many ran, how they ended, how many never ran),
the headline table and the tensor cores per type; then the key plots and the conditions the run measured
under (:mod:`gpuprobe.output.run_conditions`). The details follow: one section per probe family (the
``SECTIONS`` each family declares, then ``GENERAL_SECTIONS``), every fact in one row, its expectation's
source as a numbered reference (:mod:`gpuprobe.output.references`) listed once at the end; then the
probes that did not end ok or never ran (:mod:`gpuprobe.output.probe_status`).

No fact's text is printed twice: a row says the value, CI, noise, expected range and verdict, and a note
under the table adds only what the row does not say (why a fact is unstable or was not measured, an
invariant's comparison, the expectation's note for a fact that did not pass). Every number comes from the
results; nothing here measures or edits one.

The content is computed once as plain text (``fact_rows``, ``invariant_rows``, ``fact_notes``,
``plan_sections``, the headline's rows); ``render_markdown`` here and
``gpuprobe.output.html_report.render_html`` only mark it up, so the two formats say the same thing.
Every string from the results file enters the Markdown as text (:func:`~gpuprobe.core.text.md_text`) or as a
code span (:func:`~gpuprobe.core.text.md_code`), never as markup: a device name's ``<script>`` reads as text,
and its line break as ``\\n`` (each line of the sheet stays one line).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from gpuprobe.core.numbers import fmt_bytes, fmt_num
from gpuprobe.core.results import Fact, Results, provenance
from gpuprobe.core.text import md_code, md_text, shown
from gpuprobe.judge.expectations import Expectation, judge
from gpuprobe.output import headline, probe_status, witness
from gpuprobe.output.plots import measured_sm_mhz
from gpuprobe.output.quantities import (
    NONE,
    VERDICT_MARKERS,
    ci_shown,
    fmt_detection,
    fmt_expected,
    fmt_measured,
    fmt_quantity,
    fmt_values,
    spans_zero,
    unit_suffix,
    verdict_marker,
)
from gpuprobe.output.references import References, marker, source_of
from gpuprobe.output.run_conditions import condition_rows
from gpuprobe.output.sections import Plot
from gpuprobe.output.sections import Section as Family
from gpuprobe.output.series import Series, fold
from gpuprobe.output.tables import markdown_table

__all__ = ["NONE", "VERDICT_MARKERS", "fmt_expected", "fmt_measured", "fmt_quantity", "fmt_values", "verdict_marker"]

FACTSHEET_NAME = "factsheet.md"
FACTSHEET_HTML_NAME = "factsheet.html"
FORMATS = ("md", "html")

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

LEGEND = (
    "Each fact once: its median, with the confidence interval when wider than ±1 %; Detects, the smallest "
    "change `gpuprobe compare` flags against a run like this one (80 % of the time), and why when 5 % is "
    "out of reach; the expected range, severity and source [n] (see References); the verdict (—: reported, "
    "not judged). Facts whose ids differ in one part share a row, that part as `*`. A note under a table "
    "adds only what its row does not say; `gpuprobe expectations MODEL` gives every expectation's note."
)


def gpu_slug(device_name: str) -> str:
    """File-name slug of a GPU name: "NVIDIA A100-SXM4-80GB" -> "nvidia-a100-sxm4-80gb".

    Lower case; every run of characters outside [a-z0-9] becomes one "-"; no leading or trailing
    "-". A name with nothing usable gives "unknown-gpu".
    """
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")
    return slug or "unknown-gpu"


# ---------------------------------------------------------------- markdown pieces


def table(header: Iterable[str], rows: Iterable[Iterable[object]]) -> list[str]:
    """A Markdown table as lines; each cell Markdown already."""
    return markdown_table(list(header), [list(row) for row in rows])


def md_text_table(header: Iterable[str], rows: Iterable[Iterable[str]]) -> list[str]:
    """A Markdown table of plain text (a file's strings among it), each cell shown as text."""
    return table(header, ([md_text(cell) for cell in row] for row in rows))


def _mhz(value: float | None) -> str:
    return NONE if value is None else f"{fmt_num(value)} MHz"


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
    """The device identity as (label, plain text) pairs (the first-contact page's table)."""
    dev = results.device
    sm_clock = f"{_mhz(measured_sm_mhz(results))} measured (nominal {_mhz(dev.sm_clock_nominal_mhz)})"
    return [
        ("GPU", dev.name),
        ("Architecture", f"{dev.arch} (compute capability {dev.cc})"),
        ("SMs", str(dev.sm_count)),
        ("SM clock", sm_clock),
        ("L2 cache", fmt_bytes(dev.l2_bytes)),
        *software_rows(results),
        ("Run date (UTC)", results.created),
    ]


def software_rows(results: Results) -> list[tuple[str, str]]:
    """What the sheet's device line leaves out, as (label, plain text) pairs: memory, shared memory, the
    driver, CUDA runtime, the toolkit that built the probes, and where the numbers came from: the board
    (UUID, serial), the host (name, machine id, boot) and the gpuprobe that measured (version, commit)."""
    dev, origin = results.device, provenance(results)
    return [
        ("Memory", _memory_row(results)),
        ("Shared memory per SM", _shared_row(results)),
        ("Driver", origin.driver_text()),
        ("CUDA runtime", dev.cuda_runtime),
        ("Toolkit that compiled the probes", dev.toolkit),
        ("Board", origin.board_text()),
        ("Host", origin.host_text()),
        ("gpuprobe", origin.code_text()),
    ]


def identity_lines(results: Results) -> list[str]:
    """The device identity table."""
    return md_text_table(("Device", "Value"), identity_rows(results))


PARTIAL_TEXT = (
    "PARTIAL RUN — this run did not finish. Facts may be missing and probes may not have run; see Probe "
    "status below. Do not publish or compare against this sheet as a complete result."
)


SIMULATED_TEXT = (
    "SIMULATED — no GPU was measured. Every number here comes from gpuprobe's simulated GPU (a NumPy model "
    "of each kernel on a small made-up part): it shows what a run produces, not what any hardware does. "
    "Do not publish, compare or judge hardware by it."
)


def banner(text: str, alert: str = "WARNING") -> list[str]:
    """A Markdown alert of one of the texts above, its first sentence in bold."""
    bold, rest = text.split(". ", 1)
    return [f"> [!{alert}]", f"> **{bold}.** {rest}"]


def simulated_banner() -> list[str]:
    """The stamp on every page rendered from a simulated run (top and bottom)."""
    return banner(SIMULATED_TEXT, "CAUTION")


SMOKE_TEXT = (
    "SMOKE STAGE — each family's cheapest probes, measured once at minimal settings to see them run and "
    "verify their own results. These figures are not the part's performance: they are held to physics only, "
    "never to the GPU model's expectations. Quote the full run's sheet, not this one."
)


def sheet_title(kind: str, results: Results) -> str:
    """A page's title: what it is and the device, marked SIMULATED where no GPU was measured."""
    return f"gpuprobe {kind}: {results.device.name}" + (" (SIMULATED)" if results.device.simulated else "")


# ---------------------------------------------------------------- the verdict and probe lines


def verdict_text(facts: list[Fact]) -> tuple[str, list[tuple[str, list[str], int]]]:
    """The verdict line as plain text (counts, worst first, then the reported facts), and the facts it
    names: (verdict, fact ids, how many more) for failed, invalid, unstable and warned facts."""
    counts = headline.verdict_counts(facts)
    reported = sum(1 for f in facts if f.verdict == "report")
    text = ", ".join(f"{n} {v.replace('_', ' ')}" for v, n in counts) or "nothing judged"
    text += f"; {reported} reported, not judged ({len(facts)} facts)"
    named = [(v, *headline.named_facts(facts, v)) for v in headline.NAMED if any(f.verdict == v for f in facts)]
    return text, named


def verdict_lines(results: Results) -> list[str]:
    """The verdict line naming the facts that did not pass, and the probe line, Markdown."""
    text, named = verdict_text(results.facts)
    line = f"**Verdict:** {md_text(text)}."
    for verdict, ids, more in named:
        listed = [md_code(i) for i in ids] + ([f"{more} more"] if more else [])
        line += f" **{verdict_marker(verdict).strip('*')}:** {', '.join(listed)}."
    return [line + "  ", f"**Probes:** {md_text(probe_status.summary(results))}"]


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


FACT_HEADER = ("Fact", "Median [CI]", "Detects", "Expected [ref]", "Verdict")
INVARIANT_HEADER = ("Invariant", "Result", "Verdict", "Detail")
PROBE_HEADER = ("Probes", "Status", "Detail")


@dataclass(frozen=True)
class FactRow:
    """One fact-table row as plain text; ``verdict`` is the verdict key (``"fail"``), not its marker;
    ``reference`` the number of its expectation's source (None: no source)."""

    fact_id: str
    measured: str
    detects: str
    expected: str
    reference: int | None
    verdict: str
    members: tuple[str, ...] = ()  # the ids a sweep's row holds (a single fact's row: its own)


@dataclass(frozen=True)
class InvariantRow:
    """One invariant-table row as plain text."""

    fact_id: str
    result: str
    verdict: str
    detail: str


@dataclass(frozen=True)
class SectionPlan:
    """What one family's section shows: its facts, its probes, and its plot (None: no plot)."""

    family: Family
    facts: list[Fact]
    probes: list[str]
    plot: str | None


FOLDED_VERDICTS = ("pass", "warn", "report")


def _sweep_kin(fact: Fact) -> str | None:
    """What a fact's sweep must share with it (unit, expected range, source, verdict), or None when the fact
    keeps its own row: it failed, is unstable or not measured, its sign is not known, or it has a note (see
    :mod:`gpuprobe.output.series`)."""
    if fact.verdict not in FOLDED_VERDICTS or fact.value is None or fact.unit == "bool" or extra_detail(fact):
        return None
    if spans_zero(fact):
        return None
    expected = fmt_expected(fact.expectation, fact.unit)
    return "\0".join((fact.unit, expected, source_of(fact.expectation), fact.verdict))


def holds(fact: Fact) -> bool:
    """An invariant that was checked and holds."""
    return fact.verdict == "pass" and bool(fact.value)


def _held_kin(fact: Fact) -> str | None:
    return "holds" if holds(fact) else None


def series_values(sweep: Series) -> str:
    """ "ilp1 63.67 · ilp2 86.69 [85.2, 87.0] · ilp4 115.9 op/clk/SM": each member's median by its label,
    its CI when wider than ±0.5 %, the unit once."""
    unit = sweep.facts[0].unit
    parts = []
    for label, fact in zip(sweep.labels, sweep.facts, strict=True):
        value = fact.value if fact.value is not None else float("nan")
        if unit == "byte":
            text = fmt_quantity(value, unit)
        elif fact.ci is not None and ci_shown(fact):
            text = fmt_values([value, *fact.ci], "", "{0} [{1}, {2}]")
        else:
            text = fmt_num(value)
        parts.append(f"{label} {text}")
    return " · ".join(parts) + ("" if unit == "byte" else unit_suffix(unit))


def series_detection(sweep: Series) -> str:
    """The least sensitive member's detectable change, "up to" when the members differ."""
    found = [f.detection for f in sweep.facts if f.detection is not None]
    if not found:
        return NONE
    worst = max(found, key=lambda d: (d.detects_pct is not None, d.detects_pct or 0.0))
    text = fmt_detection(worst)
    return text if all(fmt_detection(d) == text for d in found) else f"up to {text}"


def fact_rows(facts: list[Fact], mhz: float | None, refs: References) -> list[FactRow]:
    """Fact id, measured, noise and what a comparison detects, expected, source number, verdict; a sweep
    of reported facts in one row (see :mod:`gpuprobe.output.series`)."""
    rows = []
    for item in fold(facts, _sweep_kin):
        if isinstance(item, Series):
            first = item.facts[0]
            expected = fmt_expected(first.expectation, first.unit)
            rows.append(FactRow(item.pattern, series_values(item), series_detection(item), expected,
                                refs.number(first), first.verdict, tuple(f.id for f in item.facts)))  # fmt: skip
            continue
        rows.append(
            FactRow(
                fact_id=item.id,
                measured=fmt_measured(item, mhz),
                detects=fmt_detection(item.detection),
                expected=fmt_expected(item.expectation, item.unit),
                reference=refs.number(item),
                verdict=item.verdict,
                members=(item.id,),
            )
        )
    return rows


def invariant_rows(facts: list[Fact]) -> list[InvariantRow]:
    """Every invariant that does not hold (or was not checked): id, result, verdict and what it compared,
    as plain text. Those that hold are ``held_invariants``."""
    rows = []
    for fact in facts:
        if not holds(fact):
            result = NONE if fact.value is None else ("holds" if fact.value else "VIOLATED")
            rows.append(InvariantRow(fact.id, result, fact.verdict, fact.detail.strip()))
    return rows


def held_invariants(facts: list[Fact]) -> list[tuple[str, list[str]]]:
    """The invariants that hold, by their first name part: [("latency_order", ["shared_below_l1", ...])],
    a sweep in one entry, "rate_below_peak.bf16.*.ss (m64n64k16, m64n128k16, m64n256k16)"; one-part names
    last, under ""."""
    groups: dict[str, list[Fact]] = {}
    for fact in facts:
        if holds(fact):
            name = fact.id.removeprefix("invariant.")
            groups.setdefault(name.partition(".")[0] if "." in name else "", []).append(fact)
    listed = []
    for group, members in sorted(groups.items(), key=lambda kv: kv[0] == ""):
        start = len(f"invariant.{group}.") if group else len("invariant.")
        names = []
        for item in fold(members, _held_kin):
            if isinstance(item, Series):
                rest = item.pattern[start:]
                names.append(", ".join(item.labels) if rest == "*" else f"{rest} ({', '.join(item.labels)})")
            else:
                names.append(item.id[start:])
        listed.append((group, names))
    return listed


def _restated(fact: Fact) -> str | None:
    """The detail the judge writes for this fact and its stored expectation (None if it cannot say)."""
    try:
        expectation = None if fact.expectation is None else Expectation(fact_id=fact.id, **fact.expectation)
        return judge(fact, expectation)[1]
    except (TypeError, ValueError):
        return None


def extra_detail(fact: Fact) -> str:
    """What a fact's recorded detail says beyond its row: the judge's restatement of value, CI, range and
    source left out; why it was not measured, why it is unstable, what an invariant compared kept."""
    detail = fact.detail.strip()
    restated = _restated(fact)
    if detail and restated is not None and detail.startswith(restated):
        extra = detail[len(restated) :].lstrip("; ").strip()
        if extra:
            return extra
        if "straddles" in restated:
            return "its CI straddles an expected bound: too noisy to judge"
        if "unit mismatch" in restated:
            return f"unit mismatch: measured in {fact.unit}, expected in {(fact.expectation or {}).get('unit')}"
        if fact.value is None and detail.startswith(f"{fact.id}: "):
            return detail[len(fact.id) + 2 :]
        return ""
    return detail.removeprefix(f"{fact.id}: ")


NOTED_VERDICTS = ("fail", "unstable", "invalid")  # whose expectation note the sheet shows


def fact_notes(facts: list[Fact]) -> list[tuple[str, str, str]]:
    """(fact id, what its detail adds, its expectation's note when it did not pass) for each fact with either."""
    items = []
    for fact in facts:
        note = str((fact.expectation or {}).get("note") or "").strip() if fact.verdict in NOTED_VERDICTS else ""
        extra = extra_detail(fact)
        if extra or note:
            items.append((fact.id, extra, note))
    return items


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


def section_counts(facts: list[Fact]) -> str:
    """ "12 facts: 1 fail, 9 pass, 2 reported": what a collapsed section's title line says."""
    counts = headline.verdict_counts(facts)
    reported = sum(1 for f in facts if f.verdict == "report")
    parts = [f"{n} {v.replace('_', ' ')}" for v, n in counts] + ([f"{reported} reported"] if reported else [])
    return f"{len(facts)} fact{'s' if len(facts) != 1 else ''}" + (f": {', '.join(parts)}" if parts else "")


def fact_table(facts: list[Fact], mhz: float | None, refs: References) -> list[str]:
    """Fact id, measured, noise and the smallest change it lets a comparison detect, expected [n], verdict."""
    rows = [
        (md_code(r.fact_id), md_text(r.measured), md_text(r.detects), _expected_md(r), verdict_marker(r.verdict))
        for r in fact_rows(facts, mhz, refs)
    ]
    return table(FACT_HEADER, rows)


def _expected_md(row: FactRow) -> str:
    """The expected range and its source's number: "240 – 330 cyc (warn) [4]"."""
    return " ".join(p for p in (md_text(row.expected), marker(row.reference)) if p)


def invariant_table(facts: list[Fact]) -> list[str]:
    """The invariants that do not hold, each with what it compared; then the names of those that do."""
    rows = [(md_code(r.fact_id), r.result, verdict_marker(r.verdict), md_text(r.detail)) for r in invariant_rows(facts)]
    lines = [*table(INVARIANT_HEADER, rows), ""] if rows else []
    held = held_invariants(facts)
    if held:
        lines += [f"**Hold ({sum(1 for f in facts if holds(f))}):**", ""]
        lines += [f"- {md_code(group or 'other')}: {', '.join(map(md_text, members))}" for group, members in held]
    return lines


def notes(facts: list[Fact]) -> list[str]:
    """Bullets for what a row does not say (see ``fact_notes``)."""
    lines = []
    for fact_id, extra, note in fact_notes(facts):
        text = " — ".join(p for p in (md_text(extra), md_text(note)) if p)
        lines.append(f"- {md_code(fact_id)}: {text}")
    return lines


def plot_alt(family: Family) -> str:
    """Alt text for a family's plot."""
    return family.plot.alt if family.plot else "plot"


def section(
    results: Results,
    family: Family,
    facts: list[Fact],
    plot_files: dict[str, str],
    refs: References | None = None,
    plots_above: Iterable[str] = (),
) -> list[str]:
    """One family's heading, blurb, table, notes and plot; empty when it has nothing to show. A plot whose
    key is in ``plots_above`` is under Key plots already: the section points there instead."""
    plan = plan_section(results, family, facts, plot_files)
    if plan is None:
        return []
    refs = References() if refs is None else refs
    lines = [f"### {family.title}", ""]
    if family.blurb:
        lines += [family.blurb, ""]
    if facts:
        if family.invariants:
            lines += invariant_table(facts)
        else:
            lines += fact_table(facts, measured_sm_mhz(results), refs)
        extra = [] if family.invariants else notes(facts)
        lines += [""] + ([*extra, ""] if extra else [])
    else:
        statuses = ", ".join(f"{md_code(p)} {results.probes[p].status}" for p in plan.probes)
        lines += [f"No facts measured ({statuses}); see *Probe status*.", ""]
    if plan.plot and family.plot_key in set(plots_above):
        lines += [f"Plot: *{plot_alt(family)}*, under Key plots.", ""]
    elif plan.plot:
        lines += [f"![{family.title}: {plot_alt(family)}]({plan.plot})", ""]
    return lines


def all_plots(layout: Sequence[Family]) -> list[Plot]:
    """Every plot a section of the sheet can show."""
    return [family.plot for family in layout if family.plot]


def key_plots(plot_files: dict[str, str], layout: Sequence[Family]) -> list[tuple[str, str, str]]:
    """(key, file or URI, alt text) of the key plots this run has, in ``headline.HEADLINE_PLOTS`` order."""
    alts = {f.plot_key: f"{f.title}: {plot_alt(f)}" for f in layout if f.plot_key}
    return [(k, plot_files[k], alts.get(k, k)) for k in headline.HEADLINE_PLOTS if k in plot_files]


def extra_plot_keys(plot_files: dict[str, str], layout: Sequence[Family]) -> list[str]:
    """Plot keys no family claims, sorted, so a plot handed in is never silently dropped."""
    known = {f.plot_key for f in layout if f.plot_key}
    return sorted(k for k in plot_files if k not in known)


def other_plots(plot_files: dict[str, str], layout: Sequence[Family]) -> list[str]:
    """Links for plots no family claims, so a plot handed in is never silently dropped."""
    extra = extra_plot_keys(plot_files, layout)
    if not extra:
        return []
    return ["### Other plots", ""] + [line for key in extra for line in (f"![{key}]({plot_files[key]})", "")]


PROBE_STATUS_NOTE = "Probes that ended alike share a row, with the first one's detail; results.json holds every detail."


def probe_status_lines(results: Results) -> list[str]:
    """The probe line, then every probe that did not end "ok" or never ran."""
    lines = ["## Probe status", "", md_text(probe_status.summary(results)), ""]
    bad = [
        (", ".join(md_code(name) for name in p.probes), p.status, md_text(p.detail))
        for p in probe_status.problems(results)
    ]
    return [*lines, PROBE_STATUS_NOTE, "", *table(PROBE_HEADER, bad), ""] if bad else lines


# ---------------------------------------------------------------- the first screen


def headline_table(results: Results, refs: References) -> list[str]:
    """The headline facts, each with what it is set against, its expectation [n] and verdict."""
    rows = []
    for row in headline.headline_rows(results):
        number = refs.number(row.fact) if row.fact is not None else None
        expected = " ".join(p for p in (md_text(row.expected), marker(number)) if p)
        verdict = verdict_marker(row.verdict) if row.fact is not None else NONE
        rows.append((md_text(row.label), md_text(row.measured), md_text(row.compared), expected, verdict))
    return table(headline.HEADLINE_HEADER, rows)


def tensor_table(results: Results) -> list[str]:
    """Tensor-core rates per data type; empty when the run has none."""
    rows = headline.tensor_rows(results)
    if not rows:
        return []
    body = [(md_text(r.label), *map(md_text, r.cells), _worst_marker(r.facts)) for r in rows]
    return ["**Tensor cores per type**", "", *table((*headline.TENSOR_HEADER, "Verdicts"), body), ""]


def _worst_marker(facts: Iterable[Fact]) -> str:
    """The worst verdict among a row's facts, as its marker."""
    verdicts = [f.verdict for f in facts]
    worst = next((v for v in headline.JUDGED if v in verdicts), "report")
    return verdict_marker(worst)


def conditions_lines(results: Results) -> list[str]:
    """The run's conditions in a two-column table."""
    return ["## Run conditions", "", *md_text_table(("Condition", "Over the run"), condition_rows(results)), ""]


def references_lines(refs: References) -> list[str]:
    """The numbered sources, each once."""
    if not len(refs):
        return []
    return ["## References", "", *(f"{n}. {md_text(text)}" for n, text in refs.entries()), ""]


def render_markdown(results: Results, plot_files: dict[str, str], *, sections: Sequence[Family]) -> str:
    """The fact sheet as Markdown, with the families' ``sections`` (in catalog order).

    ``plot_files`` maps a family's ``plot_key`` (e.g. ``"latency_vs_footprint"``) to the image
    path to link, relative to the sheet; a family whose key is absent gets no image link.
    """
    dev = results.device
    refs = References()
    lines = [f"# {md_text(sheet_title('fact sheet', results))}", ""]
    if dev.simulated:
        lines += [*simulated_banner(), ""]
    if results.stage == "smoke":
        lines += [*banner(SMOKE_TEXT), ""]
    if results.partial:
        lines += [*banner(PARTIAL_TEXT), ""]
    lines += [md_text(headline.device_line(results)), "", *verdict_lines(results), ""]
    lines += ["## Headline", "", *headline_table(results, refs), "", *tensor_table(results)]
    layout = sheet_layout(sections)
    keyed = key_plots(plot_files, layout)
    if keyed:
        lines += ["## Key plots", "", *(f"![{alt}]({path})" for _, path, alt in keyed), ""]
    lines += conditions_lines(results)
    software = md_text_table(("Device", "Value"), software_rows(results))
    lines += ["## Details", "", LEGEND, "", "### Device and software", "", *software, ""]
    above = [key for key, _, _ in keyed]
    for plan in plan_sections(witness.without_witness(results), plot_files, layout):
        lines += section(results, plan.family, plan.facts, plot_files, refs, above)
    lines += witness.markdown_lines(results)
    lines += other_plots(plot_files, layout)
    lines += probe_status_lines(results)
    lines += references_lines(refs)
    if dev.simulated:
        lines += ["", *simulated_banner()]
    return "\n".join(shown(line) for line in lines).rstrip("\n") + "\n"
