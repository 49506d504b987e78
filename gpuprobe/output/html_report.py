"""The fact sheet as one self-contained HTML page: the Markdown sheet's content, marked up for a browser.

Same results, same content as ``gpuprobe.output.report.render_markdown``: the text of every row comes
from the plain-text builders in ``gpuprobe.output.report`` and ``gpuprobe.output.headline`` and is only
escaped and marked up here. The first screen (device, verdict, probes, the headline table) fits a
1400x900 window; the key plots follow two by two; each family's section is collapsible (``<details>``,
open when it holds a failure), its rows anchored (``#fact-latency.l2``) so the verdict line links to
the facts it names, and every ``[n]`` links to its reference at the end.

The page needs nothing but itself: CSS inline, plots embedded as ``data:`` URIs, no script, no font or
image fetched from anywhere (a Content-Security-Policy says so to the browser too). The only outside
addresses are links in citation text, followed only when clicked. Everything that comes from a results
file is escaped; a URL in a citation becomes a link only if it is plain http(s).
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Iterable, Sequence

from gpuprobe.core.results import Fact, Results
from gpuprobe.output import headline, probe_status, report, witness
from gpuprobe.output.plots import measured_sm_mhz
from gpuprobe.output.references import References
from gpuprobe.output.run_conditions import condition_rows
from gpuprobe.output.sections import Section
from gpuprobe.output.tables import html_table

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
    label = report.verdict_marker(verdict).strip("*")
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


def verdict_html(results: Results) -> list[str]:
    """The verdict line (badges, the named facts linked to their rows) and the probe line."""
    counts = headline.verdict_counts(results.facts)
    badges = " ".join(f'<span class="badge v-{esc(v)}">{n} {esc(v.replace("_", " "))}</span>' for v, n in counts)
    reported = sum(1 for f in results.facts if f.verdict == "report")
    line = f"<strong>Verdict:</strong> {badges or 'nothing judged'} {reported} reported, not judged "
    line += f"({len(results.facts)} facts)."
    _, named = report.verdict_text(results.facts)
    for verdict, ids, more in named:
        links = [f'<a href="#{esc(fact_anchor(i))}"><code>{esc(i)}</code></a>' for i in ids]
        links += [f"{more} more"] if more else []
        line += f" <strong>{esc(report.verdict_marker(verdict).strip('*'))}:</strong> {', '.join(links)}."
    probes = f'<strong>Probes:</strong> {esc(probe_status.summary(results))} <a href="#probe-status">Status</a>'
    return [f'<p class="summary">{line}</p>', f"<p>{probes}</p>"]


def headline_html(results: Results, refs: References) -> list[str]:
    """The headline table, each fact linked to its row below, and the tensor cores per type."""
    rows = []
    for row in headline.headline_rows(results):
        number = refs.number(row.fact) if row.fact is not None else None
        label = f'<span title="{esc(row.fact_id)}">{esc(row.label)}</span>'
        if row.fact is not None:  # linked to its row below
            label = f'<a href="#{esc(fact_anchor(row.fact_id))}" title="{esc(row.fact_id)}">{esc(row.label)}</a>'
        verdict = verdict_badge(row.verdict) if row.fact is not None else esc(report.NONE)
        rows.append([label, esc(row.measured), esc(row.compared or report.NONE),
                     esc(row.expected or report.NONE) + ref_link(number), verdict])  # fmt: skip
    lines = ['<h2 id="headline" class="first">Headline</h2>']
    lines += html_table(headline.HEADLINE_HEADER, rows, "headline")
    tensor = headline.tensor_rows(results)
    if tensor:
        body = [[esc(r.label), *(esc(c or report.NONE) for c in r.cells), _worst_badge(r.facts)] for r in tensor]
        lines += ["<h3>Tensor cores per type</h3>", *html_table((*headline.TENSOR_HEADER, "Verdicts"), body, "tensor")]
    return lines


def _worst_badge(facts: Iterable[Fact]) -> str:
    verdicts = [f.verdict for f in facts]
    return verdict_badge(next((v for v in headline.JUDGED if v in verdicts), "report"))


def key_plots_html(key_plots: list[tuple[str, str, str]]) -> list[str]:
    """The key plots, two by two."""
    if not key_plots:
        return []
    figures = [line for _, uri, alt in key_plots for line in figure_html(uri, alt)]
    return ['<h2 id="key-plots">Key plots</h2>', '<div class="plots">', *figures, "</div>"]


def conditions_html(results: Results) -> list[str]:
    """The run's conditions."""
    rows = [[esc(label), esc(text)] for label, text in condition_rows(results)]
    table = html_table(("Condition", "Over the run"), rows, "conditions")
    return ['<h2 id="run-conditions">Run conditions</h2>', *table]


# ---------------------------------------------------------------- the details


def fact_table_html(results: Results, facts: list[Fact], refs: References) -> list[str]:
    """Fact id, median [CI], detects, expected [n], verdict; each row anchored (a sweep's at each member)."""
    rows = [
        [
            "".join(f'<span id="{esc(fact_anchor(i))}"></span>' for i in r.members) + f"<code>{esc(r.fact_id)}</code>",
            esc(r.measured),
            esc(r.detects),
            esc(r.expected) + ref_link(r.reference),
            verdict_badge(r.verdict),
        ]
        for r in report.fact_rows(facts, measured_sm_mhz(results), refs)
    ]
    return html_table(report.FACT_HEADER, rows, "facts")


def invariant_html(facts: list[Fact]) -> list[str]:
    """The invariants that do not hold, with what each compared; then the names of those that do."""
    rows = [
        [f'<span id="{esc(fact_anchor(r.fact_id))}"></span><code>{esc(r.fact_id)}</code>', esc(r.result),
         verdict_badge(r.verdict), f'<span class="detail">{esc(r.detail or report.NONE)}</span>']
        for r in report.invariant_rows(facts)
    ]  # fmt: skip
    lines = html_table(report.INVARIANT_HEADER, rows, "invariants") if rows else []
    held = report.held_invariants(facts)
    if held:
        count = sum(1 for f in facts if report.holds(f))
        items = [f"<li><code>{esc(g or 'other')}</code>: {esc(', '.join(m))}</li>" for g, m in held]
        lines += [f"<p><strong>Hold ({count}):</strong></p>", '<ul class="notes">', *items, "</ul>"]
    return lines


def notes_html(facts: list[Fact]) -> list[str]:
    """What a row does not say, one bullet per fact."""
    items = []
    for fact_id, extra, note in report.fact_notes(facts):
        parts = [f'<span class="detail">{esc(extra)}</span>'] if extra else []
        parts += [f'<span class="note">{cite_html(note)}</span>'] if note else []
        items.append(f"<li><code>{esc(fact_id)}</code>: {' — '.join(parts)}</li>")
    return ['<ul class="notes">', *items, "</ul>"] if items else []


def figure_html(src: str, alt: str) -> list[str]:
    """An embedded plot with its caption."""
    return [f'<figure><img src="{esc(src)}" alt="{esc(alt)}"><figcaption>{esc(alt)}</figcaption></figure>']


def section_html(results: Results, plan: report.SectionPlan, refs: References, above: Sequence[str]) -> list[str]:
    """One family's collapsible section: title and counts, blurb, table, notes and plot."""
    family = plan.family
    opened = " open" if any(f.verdict in OPEN_WHEN for f in plan.facts) else ""
    counts = report.section_counts(plan.facts) if plan.facts else "no facts"
    lines = [f'<details id="{slug(family.title)}"{opened}>',
             f'<summary>{esc(family.title)}<span class="counts">{esc(counts)}</span></summary>']  # fmt: skip
    if family.blurb:
        lines.append(f'<p class="blurb">{esc(family.blurb)}</p>')
    if plan.facts and family.invariants:
        lines += invariant_html(plan.facts)
    elif plan.facts:
        lines += fact_table_html(results, plan.facts, refs) + notes_html(plan.facts)
    else:
        lines.append(f"<p>{esc(report.empty_section_text(results, plan.probes))}</p>")
    if plan.plot and family.plot_key in above:
        lines.append(
            f'<p class="note">Plot: <a href="#key-plots">{esc(report.plot_alt(family))}</a>, under Key plots.</p>'
        )
    elif plan.plot:
        lines += figure_html(plan.plot, f"{family.title}: {report.plot_alt(family)}")
    return [*lines, "</details>"]


def identity_html(results: Results) -> list[str]:
    """What the device line leaves out, in a collapsible section."""
    rows = [[esc(label), esc(value.strip() or report.NONE)] for label, value in report.software_rows(results)]
    return ['<details id="device-and-software">', "<summary>Device and software</summary>",
            *html_table(("Device", "Value"), rows, "software"), "</details>"]  # fmt: skip


def other_plots_html(plot_uris: dict[str, str], layout: Sequence[Section]) -> list[str]:
    """Plots no family claims, so a plot handed in is never silently dropped."""
    extra = report.extra_plot_keys(plot_uris, layout)
    if not extra:
        return []
    figures = [line for key in extra for line in figure_html(plot_uris[key], key)]
    return ['<details id="other-plots" open>', "<summary>Other plots</summary>", *figures, "</details>"]


def probe_status_html(results: Results) -> list[str]:
    """The probe line, then every probe that did not end "ok" or never ran."""
    lines = ['<h2 id="probe-status">Probe status</h2>', f"<p>{esc(probe_status.summary(results))}</p>"]
    problems = probe_status.problems(results)
    if not problems:
        return lines
    rows = [
        [
            ", ".join(f"<code>{esc(n)}</code>" for n in p.probes),
            esc(p.status),
            f'<span class="detail">{esc(p.detail)}</span>',
        ]
        for p in problems
    ]
    note = f'<p class="note">{esc(report.PROBE_STATUS_NOTE)}</p>'
    return [*lines, note, *html_table(report.PROBE_HEADER, rows, "probes")]


def references_html(refs: References) -> list[str]:
    """The numbered sources, each once, linkable as #ref-n."""
    if not len(refs):
        return []
    items = [f'<li id="ref-{n}">{cite_html(text)}</li>' for n, text in refs.entries()]
    return ['<h2 id="references">References</h2>', '<ol class="references">', *items, "</ol>"]


def data_uri(png: bytes) -> str:
    """A PNG as a ``data:`` URI."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def render_html(results: Results, plots: dict[str, bytes] | None = None, *, sections: Sequence[Section]) -> str:
    """The fact sheet as one self-contained HTML page, with the families' ``sections`` (in catalog order).

    ``plots`` maps a family's ``plot_key`` (e.g. ``"latency_vs_footprint"``) to PNG bytes, which
    are embedded; a family whose key is absent gets no image.
    """
    plot_uris = {key: data_uri(png) for key, png in (plots or {}).items()}
    refs = References()
    title = report.sheet_title("fact sheet", results)
    body = [f"<h1>{esc(title)}</h1>"]
    if results.device.simulated:
        body += banner_html(report.SIMULATED_TEXT, "simulated")
    if results.stage == "smoke":
        body += banner_html(report.SMOKE_TEXT)
    if results.partial:
        body += banner_html(report.PARTIAL_TEXT)
    body += [f'<p class="device">{esc(headline.device_line(results))}</p>', *verdict_html(results)]
    body += headline_html(results, refs)
    layout = report.sheet_layout(sections)
    shown = report.key_plots(plot_uris, layout)
    body += key_plots_html(shown) + conditions_html(results)
    body += [
        '<h2 id="details">Details</h2>',
        f'<p class="legend">{code_spans(report.LEGEND)}</p>',
        *identity_html(results),
    ]
    above = [key for key, _, _ in shown]
    for plan in report.plan_sections(witness.without_witness(results), plot_uris, layout):
        body += section_html(results, plan, refs, above)
    body += witness.html_lines(results, verdict_badge)
    body += other_plots_html(plot_uris, layout) + probe_status_html(results) + references_html(refs)
    if results.device.simulated:
        body += banner_html(report.SIMULATED_TEXT, "simulated")
    body.append("<footer>Rendered by gpuprobe from this run's results file; every number above comes from it.</footer>")
    head = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CONTENT_SECURITY_POLICY)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{esc(title)}</title>",
        f"<style>{CSS}</style>",
        "</head>",
    ]
    return "\n".join([*head, "<body>", "<main>", *body, "</main>", "</body>", "</html>"]) + "\n"
