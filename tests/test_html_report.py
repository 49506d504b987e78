"""The HTML fact sheet: self-contained, escaped, and saying what the Markdown sheet says.

All results here are fabricated test data (tests/test_report.py's H100-like run), never written
under reports/.
"""

from __future__ import annotations

import base64
import re
from html.parser import HTMLParser
from pathlib import Path

import pytest

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.results import Fact, Results
from gpuprobe.families.catalog import sections
from gpuprobe.families.memory import LATENCY_PLOT
from gpuprobe.output import factsheet, html_report, probe_status, report, sheet
from gpuprobe.output.run_conditions import condition_rows
from tests.test_report import PNG_SIGNATURE, TEST_DPI, simulated_results

SECTIONS = sections()
FAKE_PNG = PNG_SIGNATURE + b"not really a picture"
EVIL = '<script>alert("x")</script>'


class Page(HTMLParser):
    """Every tag with its attributes, and the text of every table row, by table class."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str]]] = []
        self.rows: dict[str, list[list[str]]] = {}
        self.headings: list[str] = []
        self.texts: list[str] = []
        self._table: list[str] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self._heading: list[str] | None = None
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {k: v or "" for k, v in attrs}
        self.tags.append((tag, values))
        if tag == "table":
            self._table.append(values.get("class", ""))
        elif tag == "tr":
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []
        elif tag == "h2":
            self._heading = []

    def handle_endtag(self, tag: str) -> None:
        if tag == "table":
            self._table.pop()
        elif tag == "tr" and self._row is not None:
            self.rows.setdefault(self._table[-1] if self._table else "", []).append(self._row)
            self._row = None
        elif tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "h2" and self._heading is not None:
            self.headings.append("".join(self._heading))
            self._heading = None

    def handle_data(self, data: str) -> None:
        self.texts.append(data)
        for sink in (self._cell, self._heading):
            if sink is not None:
                sink.append(data)

    def attrs(self, name: str) -> list[tuple[str, dict[str, str]]]:
        """(tag, attributes) of every tag that has attribute ``name``."""
        return [(tag, a) for tag, a in self.tags if name in a]


def render(results: Results | None = None, plots: dict[str, bytes] | None = None) -> str:
    results = simulated_results() if results is None else results
    return html_report.render_html(results, {LATENCY_PLOT.key: FAKE_PNG} if plots is None else plots, sections=SECTIONS)


@pytest.fixture(scope="module")
def page_text() -> str:
    return render()


@pytest.fixture(scope="module")
def page(page_text: str) -> Page:
    return Page(page_text)


def md_rows(markdown: str) -> dict[str, list[str]]:
    """Markdown table rows that start with a code id, as cell texts keyed by the id."""
    rows = {}
    for line in markdown.splitlines():
        if line.startswith("| `"):
            cells = [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]
            rows[cells[0].strip("`")] = cells
    return rows


# ---------------------------------------------------------------- self-contained


def test_page_is_self_contained(page: Page, page_text: str) -> None:
    for tag, attrs in page.attrs("src"):
        assert attrs["src"].startswith("data:image/png;base64,"), tag
    for tag, attrs in page.attrs("href"):
        href = attrs["href"]
        assert href.startswith("#") or (tag == "a" and attrs.get("class") == "cite"), (tag, href)
    for tag in ("script", "link", "iframe", "object", "embed", "base", "form"):
        assert not [t for t, _ in page.tags if t == tag], tag
    assert not [a for _, a in page.tags for k in a if k.startswith("on")], "no event handlers"
    style = page_text.split("<style>", 1)[1].split("</style>", 1)[0]
    assert "url(" not in style and "@import" not in style
    csp = [a for t, a in page.tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert csp and "default-src 'none'" in csp[0]["content"]


def test_citation_links_are_the_only_outside_addresses(page: Page) -> None:
    results = simulated_results()
    source = "Luo et al. (arXiv:2402.13499), gpu-benches (github.com/te42kyfo/gpu-benches); https://example.org/x."
    results.facts[1].expectation = dict(results.facts[1].expectation or {}, source=source)
    cites = [a["href"] for t, a in Page(render(results)).tags if t == "a" and a.get("class") == "cite"]
    assert cites == [
        "https://arxiv.org/abs/2402.13499",
        "https://github.com/te42kyfo/gpu-benches",
        "https://example.org/x",
    ]
    assert not [a for t, a in page.tags if t == "a" and a.get("class") == "cite"]  # the fake sources cite no URL


def test_plot_is_embedded_as_a_data_uri(page: Page) -> None:
    (img,) = [a for t, a in page.tags if t == "img"]
    assert base64.b64decode(img["src"].split(",", 1)[1]) == FAKE_PNG
    assert img["alt"] == "Memory latency: latency vs footprint"


def test_no_plot_no_image() -> None:
    page = Page(render(simulated_results(with_curves=False), plots={}))
    assert not [t for t, _ in page.tags if t == "img"]


def test_other_plots_are_not_dropped() -> None:
    page = Page(render(plots={LATENCY_PLOT.key: FAKE_PNG, "zz_extra": FAKE_PNG}))
    assert "Other plots" in page.texts
    assert len([t for t, _ in page.tags if t == "img"]) == 2


# ---------------------------------------------------------------- escaping


def evil_results() -> Results:
    results = simulated_results(partial=True)
    results.device.name = f"GPU {EVIL} & co"
    results.device.driver = '"><img src=x onerror=alert(1)>'
    results.probes["alu.ffma"].detail = f"crashed: {EVIL}\n<b>bold</b>"
    fact = results.facts[2]
    fact.detail = "</td></tr></table><script>1</script>"
    fact.expectation = dict(fact.expectation or {}, source='x" onmouseover="alert(1) javascript:alert(1)', note=EVIL)
    results.facts.append(Fact("evil.<b>fact</b>", 1.0, "<i>unit</i>", probe="x", verdict='fail"><script>'))
    return results


def test_everything_from_results_is_escaped() -> None:
    text = render(evil_results())
    page = Page(text)
    assert "<script" not in text.lower()
    assert not [t for t, _ in page.tags if t in ("script", "b", "i") or (t == "img" and "onerror" in _)]
    assert not [a for _, a in page.tags for k in a if k.startswith("on")]
    assert all(not a["href"].lower().startswith("javascript") for _, a in page.attrs("href"))
    shown = "".join(page.texts)
    assert f"GPU {EVIL} & co" in shown  # shown literally, not interpreted
    assert "crashed: " + EVIL in shown and "evil.<b>fact</b>" in shown


def test_escaped_page_keeps_its_tables_whole() -> None:
    page = Page(render(evil_results()))
    for css, rows in page.rows.items():
        widths = {len(r) for r in rows}
        assert len(widths) == 1, (css, widths)


# ---------------------------------------------------------------- partial banner


def test_partial_banner() -> None:
    full, partial = render(simulated_results(partial=False)), render(simulated_results(partial=True))
    assert "PARTIAL RUN" not in full
    assert 'role="alert"' in partial and "PARTIAL RUN" in partial
    assert partial.index("PARTIAL RUN") < partial.index('class="device"')
    assert 'href="#probe-status"' in partial and 'id="probe-status"' in partial


# ---------------------------------------------------------------- same content as the Markdown


def test_same_facts_as_markdown(page: Page) -> None:
    results = simulated_results()
    text = report.render_markdown(results, {LATENCY_PLOT.key: "x.png"}, sections=SECTIONS)
    markdown = md_rows(text.split("## Details", 1)[1].split("## Probe status", 1)[0])
    headers = [list(sheet.FACT_HEADER), list(sheet.INVARIANT_HEADER)]
    html_rows = {r[0]: r for css in ("facts", "invariants") for r in page.rows[css] if r not in headers}
    held = {f.id for f in results.facts if sheet.holds(f) and f.id.startswith("invariant.")}
    assert set(html_rows) == {f.id for f in results.facts} - held == set(markdown)
    for fact_id, cells in html_rows.items():
        md = [re.sub(r"\\(.)", r"\1", c).strip("*") for c in markdown[fact_id]]  # unescaped, unbolded
        assert cells[1:] == md[1:], fact_id  # measured, detects, expected [n], verdict (or the invariant's)


def test_same_headline_sections_software_and_probe_status(page: Page) -> None:
    results = simulated_results()
    markdown = report.render_markdown(results, {LATENCY_PLOT.key: "x.png"}, sections=SECTIONS)
    assert page.headings == [line[3:] for line in markdown.splitlines() if line.startswith("## ")]
    headline = {r[0]: r[1:] for r in page.rows["headline"][1:]}
    md_headline = [line for line in markdown.split("## Headline", 1)[1].split("## ", 1)[0].splitlines()]
    for label, cells in headline.items():
        assert f"| {label} | {cells[0]} | {cells[1]} | {cells[2]} |" in "\n".join(md_headline), label
    software = {row[0]: row[1] for row in page.rows["software"][1:]}
    assert software == {label: value for label, value in sheet.software_rows(results)}
    conditions = {row[0]: row[1] for row in page.rows["conditions"][1:]}
    assert conditions == dict(condition_rows(results))
    probes = {row[0]: row[1:] for row in page.rows["probes"][1:]}
    assert probes == {", ".join(p.probes): [p.status, p.detail] for p in probe_status.problems(results)}


def test_verdict_line_links_the_failing_facts_to_their_rows(page: Page, page_text: str) -> None:
    for verdict, count in [("fail", 1), ("unstable", 1), ("warn", 2), ("pass", 6)]:
        assert f'class="badge v-{verdict}">{count} {verdict}</span>' in page_text
    links = [a["href"] for t, a in page.tags if t == "a" and a.get("href", "").startswith("#fact-")]
    assert "#fact-latency.l2" in links and "#fact-overhead.loop" in links
    anchors = {a["id"] for _, a in page.attrs("id")}
    assert {link[1:] for link in links} <= anchors  # every link lands on a row


def test_sections_are_collapsible_and_references_linked(page: Page) -> None:
    details = [a for t, a in page.tags if t == "details"]
    assert len(details) >= 4
    opened = [a["id"] for a in details if "open" in a]
    assert opened == ["memory-latency"]  # the section holding the failed fact starts open
    refs = [a["href"] for t, a in page.tags if t == "a" and a.get("class") == "ref"]
    listed = [a["id"] for t, a in page.tags if t == "li" and a.get("id", "").startswith("ref-")]
    # ref-1 the test data's source, the others the published measurements of the headline's facts
    assert refs and "#ref-1" in refs and {ref[1:] for ref in refs} == set(listed)


def test_empty_family_says_why() -> None:
    results = simulated_results(with_curves=False)
    results.facts = []
    results.probes["memory.latency.global_ca"].status = "violated"
    text = render(results, plots={})
    assert "No facts measured (memory.latency.global_ca violated, memory.latency.global_cg ok" in text


def test_render_is_deterministic() -> None:
    assert render() == render()


# ---------------------------------------------------------------- write_report


def test_write_report_html_writes_one_self_contained_file(tmp_path: Path) -> None:
    paths = factsheet.write_report(simulated_results(), tmp_path / "out", "html", dpi=TEST_DPI, sections=SECTIONS)
    assert paths == [tmp_path / "out" / "factsheet.html"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["factsheet.html"]
    (img,) = [a for t, a in Page(paths[0].read_text(encoding="utf-8")).tags if t == "img"]
    assert base64.b64decode(img["src"].split(",", 1)[1]).startswith(PNG_SIGNATURE)


def test_write_report_default_is_markdown(tmp_path: Path) -> None:
    paths = factsheet.write_report(simulated_results(with_curves=False), tmp_path, sections=SECTIONS)
    assert [p.name for p in paths] == ["factsheet.md"]


def test_unknown_format_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(GpuprobeError, match="unknown fact sheet format 'pdf'"):
        factsheet.write_report(simulated_results(), tmp_path, "pdf", sections=SECTIONS)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("text", "links"),
    [
        ("see arXiv:2501.12084v2 Table 3", ["https://arxiv.org/abs/2501.12084v2"]),
        ("(github.com/te42kyfo/gpu-benches).", ["https://github.com/te42kyfo/gpu-benches"]),
        ("https://a.example/p?q=1&r=2, then", ["https://a.example/p?q=1&r=2"]),
        ("javascript:alert(1) and ftp://x.example", []),
        ("no links here", []),
    ],
)
def test_cite_html_links(text: str, links: list[str]) -> None:
    page = Page(html_report.cite_html(text))
    assert [a["href"] for _, a in page.attrs("href")] == links
    assert "".join(page.texts) == text
