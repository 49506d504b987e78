"""The fact sheet as one self-contained HTML page: the Markdown sheet's content, marked up for a browser.

Same results, same content as ``gpuprobe.output.report.render_markdown``: the text of every row comes
from the plain-text builders in ``gpuprobe.output.report`` and is only escaped and marked up here.
The page needs nothing but itself: CSS inline, plots embedded as ``data:`` URIs, no script, no
font or image fetched from anywhere (a Content-Security-Policy says so to the browser too). The
only outside addresses are links in citation text, and they are followed only when clicked.

Everything that comes from a results file (device name, probe details, expectation sources and
notes) is escaped; a URL in a citation becomes a link only if it is plain http(s).
"""

from __future__ import annotations

import base64
import html
import re
from collections.abc import Iterable, Sequence

from gpuprobe.core.results import Results
from gpuprobe.output import report
from gpuprobe.output.plots import measured_sm_mhz
from gpuprobe.output.sections import Section

CONTENT_SECURITY_POLICY = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

# Plain http(s) URLs, bare github.com/owner/repo mentions and arXiv ids in citation text.
_LINKABLE = re.compile(
    r"(?P<url>https?://[^\s<>\"'`]+)"
    r"|(?<![\w/.])(?P<github>github\.com/[\w.-]+/[\w.-]+)"
    r"|\barXiv:\s?(?P<arxiv>\d{4}\.\d{4,5}(?:v\d+)?)",
    re.IGNORECASE,
)
_TRAILING = ".,;:)]}"

CSS = """
:root { color-scheme: light; --fg: #1b1f24; --muted: #57606a; --line: #d0d7de; --zebra: #f6f8fa; }
* { box-sizing: border-box; }
body { margin: 0; background: #fff; color: var(--fg);
  font: 15px/1.5 system-ui, -apple-system, "Segoe UI", Roboto, "Helvetica Neue", Arial, sans-serif; }
main { max-width: 1180px; margin: 0 auto; padding: 24px 28px 48px; }
h1 { font-size: 1.6em; margin: 0 0 16px; padding-bottom: 8px; border-bottom: 1px solid var(--line); }
h2 { font-size: 1.25em; margin: 32px 0 8px; padding-bottom: 4px; border-bottom: 1px solid var(--line); }
p { margin: 8px 0; }
code { font: 0.9em/1.3 ui-monospace, SFMono-Regular, Menlo, Consolas, "Liberation Mono", monospace;
  background: var(--zebra); padding: 1px 4px; border-radius: 4px; white-space: nowrap; }
a { color: #0969da; text-decoration: none; }
a:hover { text-decoration: underline; }
table { border-collapse: collapse; width: 100%; margin: 8px 0 12px; font-size: 0.92em; }
th, td { border: 1px solid var(--line); padding: 5px 8px; text-align: left; vertical-align: top; }
thead th { background: var(--zebra); font-weight: 600; }
tbody tr:nth-child(even) { background: #fbfcfd; }
table.identity { width: auto; min-width: 60%; }
table.identity th { background: var(--zebra); font-weight: 600; white-space: nowrap; }
table.facts, table.invariants, table.probes { table-layout: fixed; }
table.facts th:nth-child(1) { width: 16%; } table.facts th:nth-child(2) { width: 21%; }
table.facts th:nth-child(3) { width: 17%; } table.facts th:nth-child(5) { width: 10%; }
table.invariants th:nth-child(1) { width: 28%; } table.invariants th:nth-child(2) { width: 10%; }
table.invariants th:nth-child(3) { width: 9%; } table.invariants th:nth-child(4) { width: 10%; }
table.probes th:nth-child(1) { width: 28%; } table.probes th:nth-child(2) { width: 12%; }
td code { white-space: normal; overflow-wrap: anywhere; }
td.num { font-variant-numeric: tabular-nums; }
td.source { font-size: 0.86em; color: var(--muted); min-width: 18em; overflow-wrap: anywhere; }
td.detail, li .detail { white-space: pre-wrap; overflow-wrap: anywhere; }
td.verdict { text-align: center; white-space: nowrap; }
.badge { display: inline-block; min-width: 4.2em; padding: 1px 6px; border-radius: 10px; font-size: 0.85em;
  font-weight: 600; text-align: center; background: #eaeef2; color: var(--muted); }
.v-pass { background: #dafbe1; color: #116329; }
.v-fail { background: #ffebe9; color: #a40e26; border: 1px solid #ff8182; }
.v-warn { background: #fff8c5; color: #7d4e00; }
.v-unstable { background: #fbefff; color: #6e40c9; }
.v-not_run, .v-throttled, .v-shared { background: #eaeef2; color: #424a53; }
.v-report { background: none; min-width: 0; }
.summary .badge { margin-right: 4px; }
.banner { margin: 0 0 16px; padding: 12px 16px; border: 2px solid #cf222e; border-radius: 6px;
  background: #ffebe9; color: #82071e; }
.blurb { color: var(--muted); }
ul.notes { margin: 4px 0 12px; padding-left: 20px; font-size: 0.9em; }
ul.notes li { margin: 3px 0; }
.note { color: var(--muted); }
figure { margin: 12px 0; }
figure img { max-width: 100%; height: auto; border: 1px solid var(--line); border-radius: 4px; }
figcaption { color: var(--muted); font-size: 0.88em; }
footer { margin-top: 40px; color: var(--muted); font-size: 0.85em; border-top: 1px solid var(--line);
  padding-top: 8px; }
@media print { main { max-width: none; padding: 0; } .banner { break-inside: avoid; } }
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


def slug(title: str) -> str:
    """An id for a heading: "Memory latency" -> "memory-latency"."""
    return re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-") or "section"


def verdict_badge(verdict: str) -> str:
    """A colored badge for a verdict key, labelled like the Markdown marker (without the bold)."""
    label = report.verdict_marker(verdict).strip("*")
    title = "reported, not judged" if verdict == "report" else verdict.replace("_", " ")
    css = re.sub(r"[^a-z_]", "", verdict.lower()) or "unknown"
    return f'<span class="badge v-{css}" title="{esc(title)}">{esc(label)}</span>'


def html_table(header: Iterable[str], rows: Iterable[Iterable[str]], css: str = "") -> list[str]:
    """A table from a plain-text header and rows of ready-made cell HTML (``<td>`` included)."""
    cls = f' class="{css}"' if css else ""
    lines = [f"<table{cls}>", "<thead><tr>" + "".join(f"<th>{esc(h)}</th>" for h in header) + "</tr></thead>"]
    lines.append("<tbody>")
    lines += ["<tr>" + "".join(row) + "</tr>" for row in rows]
    lines += ["</tbody>", "</table>"]
    return lines


def td(content_html: str, css: str = "") -> str:
    """One cell of already-escaped HTML."""
    return f'<td class="{css}">{content_html}</td>' if css else f"<td>{content_html}</td>"


# ---------------------------------------------------------------- page parts


def identity_html(results: Results) -> list[str]:
    """The device identity table."""
    rows = [
        f'<tr><th scope="row">{esc(label)}</th><td>{esc(value.strip() or report.NONE)}</td></tr>'
        for label, value in report.identity_rows(results)
    ]
    return ['<table class="identity">', "<tbody>", *rows, "</tbody>", "</table>"]


def partial_banner_html() -> list[str]:
    """The loud warning for a run that did not finish (same words as the Markdown banner)."""
    return [
        '<div class="banner" role="alert"><strong>PARTIAL RUN — this run did not finish.</strong> '
        'Facts may be missing and probes may not have run; see <a href="#probe-status">Probe status</a> below. '
        "Do not publish or compare against this sheet as a complete result.</div>"
    ]


def summary_html(results: Results) -> list[str]:
    """The fact count by verdict, one badge per verdict."""
    counts = report.verdict_counts(results.facts)
    parts = " ".join(f'<span class="badge v-{esc(v)}">{n} {esc(v.replace("_", " "))}</span>' for v, n in counts)
    return [f'<p class="summary"><strong>{len(results.facts)} facts:</strong> {parts or "none"}</p>']


def fact_table_html(results: Results, plan: report.SectionPlan) -> list[str]:
    """Fact id, measured, noise and what it lets a comparison detect, expected, source, verdict."""
    rows = [
        [
            td(f"<code>{esc(r.fact_id)}</code>"),
            td(esc(r.measured), "num"),
            td(esc(r.detects)),
            td(esc(r.expected), "num"),
            td(cite_html(r.source), "source"),
            td(verdict_badge(r.verdict), "verdict"),
        ]
        for r in report.fact_rows(plan.facts, measured_sm_mhz(results))
    ]
    return html_table(report.FACT_HEADER, rows, "facts")


def invariant_table_html(plan: report.SectionPlan) -> list[str]:
    """Invariant id, whether it holds, its severity, verdict, and what it compared."""
    rows = [
        [
            td(f"<code>{esc(r.fact_id)}</code>"),
            td(esc(r.result)),
            td(esc(r.severity)),
            td(verdict_badge(r.verdict), "verdict"),
            td(esc(r.detail.strip() or report.NONE), "detail"),
        ]
        for r in report.invariant_rows(plan.facts)
    ]
    return html_table(report.INVARIANT_HEADER, rows, "invariants")


def notes_html(plan: report.SectionPlan) -> list[str]:
    """Fact details and expectation notes, one bullet per fact."""
    items = []
    for fact_id, detail, note in report.note_items(plan.facts):
        parts = [f'<span class="detail">{esc(detail)}</span>'] if detail else []
        parts += [f'<span class="note">{cite_html(note)}</span>'] if note else []
        items.append(f"<li><code>{esc(fact_id)}</code>: {' — '.join(parts)}</li>")
    return ['<ul class="notes">', *items, "</ul>"] if items else []


def figure_html(src: str, alt: str) -> list[str]:
    """An embedded plot with its caption."""
    return [f'<figure><img src="{esc(src)}" alt="{esc(alt)}"><figcaption>{esc(alt)}</figcaption></figure>']


def section_html(results: Results, plan: report.SectionPlan) -> list[str]:
    """One family's heading, blurb, table, notes and plot."""
    family = plan.family
    lines = [f'<section id="{slug(family.title)}">', f"<h2>{esc(family.title)}</h2>"]
    if family.blurb:
        lines.append(f'<p class="blurb">{esc(family.blurb)}</p>')
    if plan.facts and family.invariants:
        lines += invariant_table_html(plan)
    elif plan.facts:
        lines += fact_table_html(results, plan) + notes_html(plan)
    else:
        lines.append(f"<p>{esc(report.empty_section_text(results, plan.probes))}</p>")
    if plan.plot:
        lines += figure_html(plan.plot, f"{family.title}: {report.plot_alt(family)}")
    return [*lines, "</section>"]


def other_plots_html(plot_uris: dict[str, str], layout: Sequence[Section]) -> list[str]:
    """Plots no family claims, so a plot handed in is never silently dropped."""
    extra = report.extra_plot_keys(plot_uris, layout)
    if not extra:
        return []
    figures = [line for key in extra for line in figure_html(plot_uris[key], key)]
    return ['<section id="other-plots">', "<h2>Other plots</h2>", *figures, "</section>"]


def probe_status_html(results: Results) -> list[str]:
    """Every probe that did not end "ok", or one line saying they all did."""
    lines = ['<section id="probe-status">', "<h2>Probe status</h2>"]
    summary = report.probe_status_summary(results)
    if summary is not None:
        return [*lines, f"<p>{esc(summary)}</p>", "</section>"]
    rows = [
        [td(f"<code>{esc(name)}</code>"), td(esc(status)), td(esc(detail.strip() or report.NONE), "detail")]
        for name, status, detail in report.probe_problems(results)
    ]
    return [*lines, *html_table(report.PROBE_HEADER, rows, "probes"), "</section>"]


def data_uri(png: bytes) -> str:
    """A PNG as a ``data:`` URI."""
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def render_html(results: Results, plots: dict[str, bytes] | None = None, *, sections: Sequence[Section]) -> str:
    """The fact sheet as one self-contained HTML page, with the families' ``sections`` (in catalog order).

    ``plots`` maps a family's ``plot_key`` (e.g. ``"latency_vs_footprint"``) to PNG bytes, which
    are embedded; a family whose key is absent gets no image.
    """
    plot_uris = {key: data_uri(png) for key, png in (plots or {}).items()}
    title = f"gpuprobe fact sheet: {results.device.name}"
    body = [f"<h1>{esc(title)}</h1>"]
    if results.partial:
        body += partial_banner_html()
    body += identity_html(results) + summary_html(results)
    layout = report.sheet_layout(sections)
    for plan in report.plan_sections(results, plot_uris, layout):
        body += section_html(results, plan)
    body += other_plots_html(plot_uris, layout) + probe_status_html(results)
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
