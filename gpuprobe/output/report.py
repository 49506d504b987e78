"""The fact sheet as Markdown: :class:`~gpuprobe.output.sheet.Sheet` marked up, nothing more.

What the sheet says, and in what order, is :mod:`gpuprobe.output.sheet`'s; this module only writes it as GitHub
Markdown (:mod:`gpuprobe.output.html_report` writes the same sheet as HTML). Every string of the model enters
as text (:func:`~gpuprobe.core.text.md_text`) or as a code span (:func:`~gpuprobe.core.text.md_code`), never as
markup: a device name's ``<script>`` reads as text, and its line break as ``\\n`` (each line of the sheet stays
one line); gpuprobe's own markup (its bold, its links, its headings) stays Markdown.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuprobe.core.results import Results
from gpuprobe.core.tables import NONE, md_markup_table, md_table
from gpuprobe.core.text import md_code, md_text, shown
from gpuprobe.output.headline import HEADLINE_HEADER, TENSOR_HEADER
from gpuprobe.output.quantities import verdict_marker
from gpuprobe.output.references import marker
from gpuprobe.output.sections import Section
from gpuprobe.output.sheet import (
    CONDITIONS_HEADER,
    DEVICE_HEADER,
    FACT_HEADER,
    INVARIANT_HEADER,
    LEGEND,
    PROBE_HEADER,
    PROBE_STATUS_NOTE,
    RAN_AT,
    SIMULATED_TEXT,
    Sheet,
    SheetSection,
    fact_sheet,
    plot_alt,
)
from gpuprobe.output.witness import BLURB, HEADER, TITLE, WitnessSection


def banner(text: str, alert: str = "WARNING") -> list[str]:
    """A Markdown alert of one of the sheet's banner texts, its first sentence in bold."""
    bold, rest = text.split(". ", 1)
    return [f"> [!{alert}]", f"> **{bold}.** {rest}"]


def simulated_banner() -> list[str]:
    """The stamp on every page rendered from a simulated run (top and bottom)."""
    return banner(SIMULATED_TEXT, "CAUTION")


def _with_reference(text: str, reference: int | None) -> str:
    """A range and its source's number: "240 – 330 cyc (warn) [4]"."""
    return " ".join(p for p in (md_text(text), marker(reference)) if p)


def verdict_lines(sheet: Sheet) -> list[str]:
    """The verdict line naming the facts that did not pass, and the probe line."""
    line = f"**Verdict:** {md_text(sheet.verdict.text())}."
    for verdict, ids, more in sheet.verdict.named:
        listed = [md_code(i) for i in ids] + ([f"{more} more"] if more else [])
        line += f" **{verdict_marker(verdict).strip('*')}:** {', '.join(listed)}."
    return [line + "  ", f"**Probes:** {md_text(sheet.probes_line)}"]


def answers_lines(sheet: Sheet) -> list[str]:
    """The two questions, each in bold and answered in a few sentences of the run's own facts."""
    lines = ["## Answers", ""]
    for answer in sheet.answers:
        lines += [f"**{md_text(answer.question)}** {md_text(answer.text())}", ""]
    return lines


def headline_lines(sheet: Sheet) -> list[str]:
    """The headline facts, each with what it is set against, its expectation [n] and verdict; then the
    tensor-core rates per type, where the run has any."""
    rows = [
        (md_text(r.label), md_text(r.measured), md_text(r.compared),
         "; ".join(_with_reference(c.text, c.reference) for c in r.published),
         _with_reference(r.expected, r.reference), verdict_marker(r.verdict) if r.fact is not None else NONE)
        for r in sheet.headline
    ]  # fmt: skip
    lines = ["## Headline", "", *md_markup_table(HEADLINE_HEADER, rows), ""]
    if sheet.tensor:
        body = [(md_text(r.label), *map(md_text, r.cells), verdict_marker(r.verdict)) for r in sheet.tensor]
        lines += ["**Tensor cores per type**", "", *md_markup_table((*TENSOR_HEADER, "Verdicts"), body), ""]
    return lines


def facts_lines(part: SheetSection) -> list[str]:
    """A section's facts: their table and the notes under it (an invariants section: those that do not hold,
    each with what it compared, then the names of those that do)."""
    if part.section.invariants:
        rows = [(md_code(r.fact_id), r.result, verdict_marker(r.verdict), md_text(r.detail)) for r in part.invariants]
        lines = [*md_markup_table(INVARIANT_HEADER, rows), ""] if rows else []
        if part.held:
            lines += [f"**Hold ({part.held_count}):**", ""]
            lines += [f"- {md_code(group or 'other')}: {', '.join(map(md_text, names))}" for group, names in part.held]
        return [*lines, ""]
    rows = [(md_code(r.fact_id), md_text(r.measured), md_text(r.detects), _with_reference(r.expected, r.reference),
             verdict_marker(r.verdict)) for r in part.rows]  # fmt: skip
    notes = [f"- {md_code(n.fact_id)}: {' — '.join(p for p in (md_text(n.said), md_text(n.note)) if p)}"
             for n in part.notes]  # fmt: skip
    return [*md_markup_table(FACT_HEADER, rows), "", *([*notes, ""] if notes else [])]


def section_lines(part: SheetSection) -> list[str]:
    """One section's heading, blurb, facts and plot (a plot under Key plots already pointed to)."""
    section = part.section
    lines = [f"### {section.title}", ""] + ([section.blurb, ""] if section.blurb else [])
    if part.ran_at:
        lines += [f"{RAN_AT}{md_text(part.ran_at)}.", ""]
    if part.facts:
        lines += facts_lines(part)
    else:
        statuses = ", ".join(f"{md_code(probe)} {status}" for probe, status in part.probes)
        lines += [f"No facts measured ({statuses}); see *Probe status*.", ""]
    if part.plot_above:
        lines += [f"Plot: *{plot_alt(section)}*, under Key plots.", ""]
    elif part.plot:
        lines += [f"![{section.title}: {plot_alt(section)}]({part.plot})", ""]
    return lines


def witness_lines(part: WitnessSection | None) -> list[str]:
    """The hardware witness's section; empty when the run has none."""
    if part is None:
        return []
    body = [(md_code(r.probe), *map(md_text, (r.what, r.claimed, r.counted, r.ratio)), verdict_marker(r.verdict))
            for r in part.rows]  # fmt: skip
    notes = [f"- {md_code(fact_id)}: {md_text(said)}" for fact_id, said in part.notes]
    lines = [f"### {TITLE}", "", BLURB + md_text(part.counted_with), "", *md_markup_table(HEADER, body), ""]
    return lines + ([*notes, ""] if notes else [])


def probe_status_lines(sheet: Sheet) -> list[str]:
    """The probe line, then every probe that did not end "ok" or never ran."""
    lines = ["## Probe status", "", md_text(sheet.probes_line), ""]
    if not sheet.problems:
        return lines
    rows = [(", ".join(md_code(name) for name in p.probes), p.status, md_text(p.detail)) for p in sheet.problems]
    return [*lines, PROBE_STATUS_NOTE, "", *md_markup_table(PROBE_HEADER, rows), ""]


def markdown(sheet: Sheet) -> str:
    """The sheet as Markdown."""
    lines = [f"# {md_text(sheet.title)}", ""]
    if sheet.simulated:
        lines += [*simulated_banner(), ""]
    for text in sheet.warnings:
        lines += [*banner(text), ""]
    lines += [md_text(sheet.device_line), "", *verdict_lines(sheet), "", *answers_lines(sheet), *headline_lines(sheet)]
    if sheet.key_plots:
        lines += ["## Key plots", "", *(f"![{p.alt}]({p.src})" for p in sheet.key_plots), ""]
    lines += ["## Run conditions", "", *md_table(CONDITIONS_HEADER, sheet.conditions), ""]
    lines += ["## Details", "", LEGEND, "", "### Device and software", "", *md_table(DEVICE_HEADER, sheet.software), ""]
    for part in sheet.sections:
        lines += section_lines(part)
    lines += witness_lines(sheet.witness)
    if sheet.other_plots:
        lines += ["### Other plots", "", *(line for key, src in sheet.other_plots for line in (f"![{key}]({src})", ""))]
    lines += probe_status_lines(sheet)
    if sheet.references:
        lines += ["## References", "", *(f"{n}. {md_text(text)}" for n, text in sheet.references), ""]
    if sheet.simulated:
        lines += ["", *simulated_banner()]
    return "\n".join(shown(line) for line in lines).rstrip("\n") + "\n"


def render_markdown(results: Results, plot_files: dict[str, str], *, sections: Sequence[Section]) -> str:
    """The fact sheet of ``results`` as Markdown, with the families' ``sections`` (in catalog order).

    ``plot_files`` maps a family's ``plot_key`` (e.g. ``"latency_vs_footprint"``) to the image
    path to link, relative to the sheet; a family whose key is absent gets no image link.
    """
    return markdown(fact_sheet(results, plot_files, sections=sections))
