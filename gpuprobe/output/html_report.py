"""The fact sheet as one self-contained HTML page: :class:`~gpuprobe.output.sheet.Sheet` marked up for a browser.

What the sheet says is :mod:`gpuprobe.output.sheet`'s, as the Markdown writer's (:mod:`gpuprobe.output.report`)
is: every text is only escaped and marked up here. The first screen (device, verdict, probes, the Answers block and
the start of the headline table) fits a 1400x900 window; the key plots follow two by two; each family's section is
collapsible (``<details>``, open when it holds a failure), its rows anchored (``#fact-latency.l2``) so the verdict
line links to the facts it names, and every ``[n]`` links to its reference at the end.

The page needs nothing but itself: CSS inline, plots embedded as ``data:`` URIs, no script, no font or
image fetched from anywhere (a Content-Security-Policy says so to the browser too). The only outside
addresses are links in citation text, followed only when clicked. Everything that comes from a results
file is escaped; a URL in a citation becomes a link only if it is plain http(s).
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Sequence

from gpuprobe.core.results import Results
from gpuprobe.core.tables import NONE, html_table
from gpuprobe.output.headline import HEADLINE_HEADER, TENSOR_HEADER
from gpuprobe.output.quantities import verdict_marker
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
    KeyPlot,
    Sheet,
    SheetSection,
    fact_sheet,
    plot_alt,
)
from gpuprobe.output.witness import BLURB, HEADER, TITLE, WitnessSection

CONTENT_SECURITY_POLICY = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

# Plain http(s) URLs, bare github.com/owner/repo mentions and arXiv ids in citation text.
_LINKABLE = re.compile(
    r"(?P<url>https?://[^\s<>\"'`]+)"
    r"|(?<![\w/.])(?P<github>github\.com/[\w.-]+/[\w.-]+)"
    r"|\barXiv:\s?(?P<arxiv>\d{4}\.\d{4,5}(?:v\d+)?)",
    re.IGNORECASE,
)
_TRAILING = ".,;:)]}"
OPEN_WHEN = ("fail", "invalid")  # a section holding a fact with one of these verdicts starts open

CSS = """
:root { color-scheme: light; --fg: #1b1f24; --muted: #57606a; --line: #d0d7de; --zebra: #f6f8fa; }
* { box-sizing: border-box; }
body { margin: 0; background: #fff; color: var(--fg);
  font: 14px/1.4 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1340px; margin: 0 auto; padding: 12px 24px 40px; }
h1 { font-size: 1.45em; margin: 0 0 6px; }
h2 { font-size: 1.2em; margin: 22px 0 6px; padding-bottom: 3px; border-bottom: 1px solid var(--line); }
h2.first { margin-top: 10px; }
.answers { max-width: 1100px; } .answers p { margin: 2px 0 6px; }
h3 { font-size: 1.05em; margin: 14px 0 6px; }
p { margin: 4px 0; }
.device { color: var(--muted); }
code { font: 0.92em/1.3 ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace;
  background: var(--zebra); padding: 0 3px; border-radius: 3px; }
a { color: #0969da; text-decoration: none; }
a:hover { text-decoration: underline; }
table { border-collapse: collapse; width: 100%; margin: 4px 0 10px; font-size: 0.93em; }
th, td { border: 1px solid var(--line); padding: 2px 6px; text-align: left; vertical-align: top; }
thead th { background: var(--zebra); font-weight: 600; }
tbody tr:nth-child(even) { background: #fbfcfd; }
td code { overflow-wrap: anywhere; }
table.headline td:nth-child(2), table.facts td:nth-child(2) { font-variant-numeric: tabular-nums; }
table.headline td:nth-child(2), table.headline td:nth-child(5) { white-space: nowrap; }
table.headline td:last-child, table.facts td:last-child, table.tensor td:last-child { text-align: center;
  white-space: nowrap; width: 6.5em; }
table.facts { table-layout: fixed; }
table.facts th:nth-child(1) { width: 27%; } table.facts th:nth-child(2) { width: 31%; }
table.facts th:nth-child(3) { width: 13%; } table.facts th:nth-child(4) { width: 21%; }
table.conditions, table.software { width: auto; min-width: 50%; }
td.detail, .detail { white-space: pre-wrap; overflow-wrap: anywhere; }
.badge { display: inline-block; min-width: 4.2em; padding: 0 6px; border-radius: 9px; font-size: 0.85em;
  font-weight: 600; text-align: center; background: #eaeef2; color: var(--muted); }
.v-pass { background: #dafbe1; color: #116329; }
.v-fail, .v-invalid { background: #ffebe9; color: #a40e26; border: 1px solid #ff8182; }
.v-warn { background: #fff8c5; color: #7d4e00; }
.v-unstable { background: #fbefff; color: #6e40c9; }
.v-not_run, .v-throttled, .v-shared { background: #eaeef2; color: #424a53; }
.v-report { background: none; min-width: 0; }
.summary .badge { margin-right: 3px; }
.banner { margin: 0 0 10px; padding: 8px 14px; border: 2px solid #cf222e; border-radius: 6px;
  background: #ffebe9; color: #82071e; }
.blurb, .legend, .note, figcaption, summary .counts { color: var(--muted); }
.legend { font-size: 0.9em; }
ul.notes { margin: 2px 0 10px; padding-left: 20px; font-size: 0.9em; }
.plots { display: grid; grid-template-columns: 1fr 1fr; gap: 10px; }
figure { margin: 6px 0; }
figure img { width: 100%; height: auto; border: 1px solid var(--line); border-radius: 4px; }
figcaption { font-size: 0.86em; }
details { border-bottom: 1px solid var(--line); padding: 4px 0; }
summary { cursor: pointer; font-weight: 600; font-size: 1.02em; padding: 2px 0; }
summary .counts { font-weight: normal; font-size: 0.9em; margin-left: 8px; }
ol.references { font-size: 0.88em; color: var(--muted); padding-left: 28px; }
ol.references li { margin: 2px 0; overflow-wrap: anywhere; }
ol.references li:target, tr:target { background: #fff8c5; }
footer { margin-top: 30px; color: var(--muted); font-size: 0.85em; border-top: 1px solid var(--line);
  padding-top: 6px; }
@media print { main { max-width: none; padding: 0; } details { display: block; } }
"""


# ---------------------------------------------------------------- escaping and small pieces


def esc(text: object) -> str:
    """Text safe anywhere in the page, attribute values included."""
    return html.escape(str(text), quote=True)


def _link_target(match: re.Match[str]) -> tuple[str, str]:
    """(href, shown text) for one linkable match, trailing punctuation left out of both."""
    text = match.group(0).rstrip(_TRAILING)
    if match.group("arxiv"):
        return f"https://arxiv.org/abs/{match.group('arxiv').rstrip(_TRAILING)}", text
    if match.group("github"):
        return f"https://{text}", text
    return text, text


def cite_html(text: str) -> str:
    """Citation text escaped, with http(s) URLs, github.com/owner/repo and arXiv ids as links."""
    out: list[str] = []
    pos = 0
    for match in _LINKABLE.finditer(text):
        href, shown = _link_target(match)
        out.append(esc(text[pos : match.start()]))
        out.append(f'<a class="cite" href="{esc(href)}">{esc(shown)}</a>')
        pos = match.start() + len(shown)
    out.append(esc(text[pos:]))
    return "".join(out)


def code_spans(text: str) -> str:
    """Markdown-flavoured text escaped, its `code` spans as <code>."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", esc(text))


def slug(title: str) -> str:
    """An id for a heading: "Memory latency" -> "memory-latency"."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "section"


def fact_anchor(fact_id: str) -> str:
    """The id of a fact's row: "fact-latency.l2"."""
    return "fact-" + re.sub(r"[^\w.*-]", "_", fact_id)


def verdict_badge(verdict: str) -> str:
    """A colored badge for a verdict key, labelled like the Markdown marker (without the bold)."""
    label = verdict_marker(verdict).strip("*")
    title = "reported, not judged" if verdict == "report" else verdict.replace("_", " ")
    css = re.sub(r"[^a-z_]", "", verdict.lower()) or "unknown"
    return f'<span class="badge v-{css}" title="{esc(title)}">{esc(label)}</span>'


def ref_link(number: int | None) -> str:
    """``[3]`` linked to reference 3; "" for no source."""
    return "" if number is None else f' <a class="ref" href="#ref-{number}">[{number}]</a>'


# ---------------------------------------------------------------- the first screen


def banner_html(text: str, kind: str = "") -> list[str]:
    """A loud banner in the Markdown one's words: a run that did not finish, a smoke run, or (``kind``
    "simulated", at the top and the bottom of the page) the SIMULATED stamp."""
    bold, rest = text.split(". ", 1)
    classes = f"banner {kind}".rstrip()
    return [f'<div class="{classes}" role="alert"><strong>{esc(bold)}.</strong> {esc(rest)}</div>']


def verdict_html(sheet: Sheet) -> list[str]:
    """The verdict line (badges, the named facts linked to their rows) and the probe line."""
    verdict = sheet.verdict
    badges = " ".join(f'<span class="badge v-{esc(v)}">{n} {esc(v.replace("_", " "))}</span>'
                      for v, n in verdict.counts)  # fmt: skip
    line = f"<strong>Verdict:</strong> {badges or 'nothing judged'} {verdict.reported} reported, not judged "
    line += f"({verdict.facts} facts)."
    for named, ids, more in verdict.named:
        links = [f'<a href="#{esc(fact_anchor(i))}"><code>{esc(i)}</code></a>' for i in ids]
        links += [f"{more} more"] if more else []
        line += f" <strong>{esc(verdict_marker(named).strip('*'))}:</strong> {', '.join(links)}."
    probes = f'<strong>Probes:</strong> {esc(sheet.probes_line)} <a href="#probe-status">Status</a>'
    return [f'<p class="summary">{line}</p>', f"<p>{probes}</p>"]


def answers_html(sheet: Sheet) -> list[str]:
    """The two questions, each answered in a few sentences of the run's own facts."""
    items = [f'<p class="answer"><strong>{esc(a.question)}</strong> {esc(a.text())}</p>' for a in sheet.answers]
    return ['<h2 id="answers" class="first">Answers</h2>', '<div class="answers">', *items, "</div>"]


def headline_html(sheet: Sheet) -> list[str]:
    """The headline table, each fact linked to its row below, and the tensor cores per type."""
    rows = []
    for row in sheet.headline:
        label = f'<span title="{esc(row.fact_id)}">{esc(row.label)}</span>'
        if row.fact is not None:  # linked to its row below
            label = f'<a href="#{esc(fact_anchor(row.fact_id))}" title="{esc(row.fact_id)}">{esc(row.label)}</a>'
        verdict = verdict_badge(row.verdict) if row.fact is not None else esc(NONE)
        published = "; ".join(esc(c.text) + ref_link(c.reference) for c in row.published)
        rows.append([label, esc(row.measured), esc(row.compared or NONE), published or esc(NONE),
                     esc(row.expected or NONE) + ref_link(row.reference), verdict])  # fmt: skip
    lines = ['<h2 id="headline">Headline</h2>', *html_table(HEADLINE_HEADER, rows, "headline")]
    if sheet.tensor:
        body = [[esc(r.label), *(esc(c or NONE) for c in r.cells), verdict_badge(r.verdict)] for r in sheet.tensor]
        lines += ["<h3>Tensor cores per type</h3>", *html_table((*TENSOR_HEADER, "Verdicts"), body, "tensor")]
    return lines


def key_plots_html(key_plots: list[KeyPlot]) -> list[str]:
    """The key plots, two by two."""
    if not key_plots:
        return []
    figures = [line for plot in key_plots for line in figure_html(plot.src, plot.alt)]
    return ['<h2 id="key-plots">Key plots</h2>', '<div class="plots">', *figures, "</div>"]


def conditions_html(sheet: Sheet) -> list[str]:
    """The run's conditions."""
    rows = [[esc(label), esc(text)] for label, text in sheet.conditions]
    return ['<h2 id="run-conditions">Run conditions</h2>', *html_table(CONDITIONS_HEADER, rows, "conditions")]


# ---------------------------------------------------------------- the details


def fact_table_html(part: SheetSection) -> list[str]:
    """Fact id, median [CI], detects, expected [n], verdict; each row anchored (a sweep's at each member)."""
    rows = [
        [
            "".join(f'<span id="{esc(fact_anchor(i))}"></span>' for i in r.members) + f"<code>{esc(r.fact_id)}</code>",
            esc(r.measured),
            esc(r.detects),
            esc(r.expected) + ref_link(r.reference),
            verdict_badge(r.verdict),
        ]
        for r in part.rows
    ]
    return html_table(FACT_HEADER, rows, "facts")


def invariant_html(part: SheetSection) -> list[str]:
    """The invariants that do not hold, with what each compared; then the names of those that do."""
    rows = [
        [f'<span id="{esc(fact_anchor(r.fact_id))}"></span><code>{esc(r.fact_id)}</code>', esc(r.result),
         verdict_badge(r.verdict), f'<span class="detail">{esc(r.detail or NONE)}</span>']
        for r in part.invariants
    ]  # fmt: skip
    lines = html_table(INVARIANT_HEADER, rows, "invariants") if rows else []
    if part.held:
        items = [f"<li><code>{esc(g or 'other')}</code>: {esc(', '.join(m))}</li>" for g, m in part.held]
        lines += [f"<p><strong>Hold ({part.held_count}):</strong></p>", '<ul class="notes">', *items, "</ul>"]
    return lines


def notes_html(part: SheetSection) -> list[str]:
    """What a row does not say, one bullet per fact."""
    items = []
    for note in part.notes:
        parts = [f'<span class="detail">{esc(note.said)}</span>'] if note.said else []
        parts += [f'<span class="note">{cite_html(note.note)}</span>'] if note.note else []
        items.append(f"<li><code>{esc(note.fact_id)}</code>: {' — '.join(parts)}</li>")
    return ['<ul class="notes">', *items, "</ul>"] if items else []


def figure_html(src: str, alt: str) -> list[str]:
    """An embedded plot with its caption."""
    return [f'<figure><img src="{esc(src)}" alt="{esc(alt)}"><figcaption>{esc(alt)}</figcaption></figure>']


def section_html(part: SheetSection) -> list[str]:
    """One section, collapsible: title and counts, blurb, table, notes and plot (open when it holds a failure)."""
    section = part.section
    opened = " open" if any(f.verdict in OPEN_WHEN for f in part.facts) else ""
    lines = [f'<details id="{slug(section.title)}"{opened}>',
             f'<summary>{esc(section.title)}<span class="counts">{esc(part.counts)}</span></summary>']  # fmt: skip
    if section.blurb:
        lines.append(f'<p class="blurb">{esc(section.blurb)}</p>')
    if part.ran_at:
        lines.append(f'<p class="blurb">{esc(RAN_AT + part.ran_at)}.</p>')
    if part.facts and section.invariants:
        lines += invariant_html(part)
    elif part.facts:
        lines += fact_table_html(part) + notes_html(part)
    else:
        statuses = ", ".join(f"{probe} {status}" for probe, status in part.probes)
        lines.append(f"<p>{esc(f'No facts measured ({statuses}); see Probe status.')}</p>")
    if part.plot_above:
        lines.append(f'<p class="note">Plot: <a href="#key-plots">{esc(plot_alt(section))}</a>, under Key plots.</p>')
    elif part.plot:
        lines += figure_html(part.plot, f"{section.title}: {plot_alt(section)}")
    return [*lines, "</details>"]


def software_html(sheet: Sheet) -> list[str]:
    """What the device line leaves out, in a collapsible section."""
    rows = [[esc(label), esc(value.strip() or NONE)] for label, value in sheet.software]
    return ['<details id="device-and-software">', "<summary>Device and software</summary>",
            *html_table(DEVICE_HEADER, rows, "software"), "</details>"]  # fmt: skip


def witness_html(part: WitnessSection | None) -> list[str]:
    """The hardware witness's section, collapsible like the families' (open when a comparison is noted)."""
    if part is None:
        return []
    body = [[f"<code>{esc(r.probe)}</code>", esc(r.what), esc(r.claimed), esc(r.counted), esc(r.ratio),
             verdict_badge(r.verdict)] for r in part.rows]  # fmt: skip
    notes = [f"<li><code>{esc(i)}</code>: {esc(said)}</li>" for i, said in part.notes]
    lines = [f'<details id="hardware-witness"{" open" if notes else ""}>', f"<summary>{esc(TITLE)}</summary>",
             f'<p class="blurb">{code_spans(BLURB + part.counted_with)}</p>']  # fmt: skip
    lines += html_table(HEADER, body, "facts") + (['<ul class="notes">', *notes, "</ul>"] if notes else [])
    return [*lines, "</details>"]


def other_plots_html(sheet: Sheet) -> list[str]:
    """Plots no section claims, so a plot handed in is never silently dropped."""
    if not sheet.other_plots:
        return []
    figures = [line for key, src in sheet.other_plots for line in figure_html(src, key)]
    return ['<details id="other-plots" open>', "<summary>Other plots</summary>", *figures, "</details>"]


def probe_status_html(sheet: Sheet) -> list[str]:
    """The probe line, then every probe that did not end "ok" or never ran."""
    lines = ['<h2 id="probe-status">Probe status</h2>', f"<p>{esc(sheet.probes_line)}</p>"]
    if not sheet.problems:
        return lines
    rows = [
        [
            ", ".join(f"<code>{esc(n)}</code>" for n in p.probes),
            esc(p.status),
            f'<span class="detail">{esc(p.detail)}</span>',
        ]
        for p in sheet.problems
    ]
    return [*lines, f'<p class="note">{esc(PROBE_STATUS_NOTE)}</p>', *html_table(PROBE_HEADER, rows, "probes")]


def references_html(sheet: Sheet) -> list[str]:
    """The numbered sources, each once, linkable as #ref-n."""
    if not sheet.references:
        return []
    items = [f'<li id="ref-{n}">{cite_html(text)}</li>' for n, text in sheet.references]
    return ['<h2 id="references">References</h2>', '<ol class="references">', *items, "</ol>"]


def data_uri(png: bytes) -> str:
    """A PNG as a ``data:`` URI."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def html_page(sheet: Sheet) -> str:
    """The sheet as one self-contained HTML page."""
    body = [f"<h1>{esc(sheet.title)}</h1>"]
    if sheet.simulated:
        body += banner_html(SIMULATED_TEXT, "simulated")
    for text in sheet.warnings:
        body += banner_html(text)
    body += [f'<p class="device">{esc(sheet.device_line)}</p>', *verdict_html(sheet), *answers_html(sheet)]
    body += headline_html(sheet)
    body += key_plots_html(sheet.key_plots) + conditions_html(sheet)
    body += ['<h2 id="details">Details</h2>', f'<p class="legend">{code_spans(LEGEND)}</p>', *software_html(sheet)]
    for part in sheet.sections:
        body += section_html(part)
    body += witness_html(sheet.witness) + other_plots_html(sheet) + probe_status_html(sheet) + references_html(sheet)
    if sheet.simulated:
        body += banner_html(SIMULATED_TEXT, "simulated")
    body.append("<footer>Rendered by gpuprobe from this run's results file; every number above comes from it.</footer>")
    head = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CONTENT_SECURITY_POLICY)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(sheet.title)}</title>",
        f"<style>{CSS}</style>",
        "</head>",
    ]
    return "\n".join([*head, "<body>", "<main>", *body, "</main>", "</body>", "</html>"]) + "\n"


def render_html(results: Results, plots: dict[str, bytes] | None = None, *, sections: Sequence[Section]) -> str:
    """The fact sheet of ``results`` as one self-contained HTML page, with the families' ``sections`` (in catalog
    order).

    ``plots`` maps a family's ``plot_key`` (e.g. ``"latency_vs_footprint"``) to PNG bytes, which
    are embedded; a family whose key is absent gets no image.
    """
    uris = {key: data_uri(png) for key, png in (plots or {}).items()}
    return html_page(fact_sheet(results, uris, sections=sections))
