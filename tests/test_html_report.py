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
from gpuprobe.families.memory_latency import LATENCY_PLOT
from gpuprobe.output import factsheet, html_report, report
from tests.test_report import PNG_SIGNATURE, TEST_DPI, fake_results

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
    results = fake_results() if results is None else results
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
    results = fake_results()
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
    page = Page(render(fake_results(with_curves=False), plots={}))
    assert not [t for t, _ in page.tags if t == "img"]


def test_other_plots_are_not_dropped() -> None:
    page = Page(render(plots={LATENCY_PLOT.key: FAKE_PNG, "zz_extra": FAKE_PNG}))
    assert "Other plots" in page.headings
    assert len([t for t, _ in page.tags if t == "img"]) == 2


# ---------------------------------------------------------------- escaping


def evil_results() -> Results:
    results = fake_results(partial=True)
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
    full, partial = render(fake_results(partial=False)), render(fake_results(partial=True))
    assert "PARTIAL RUN" not in full
    assert 'role="alert"' in partial and "PARTIAL RUN" in partial
    assert partial.index("PARTIAL RUN") < partial.index('class="identity"')
    assert 'href="#probe-status"' in partial and 'id="probe-status"' in partial


# ---------------------------------------------------------------- same content as the Markdown


def test_same_facts_as_markdown(page: Page) -> None:
    results = fake_results()
    sheet = report.render_markdown(results, {LATENCY_PLOT.key: "x.png"}, sections=SECTIONS)
    markdown = md_rows(sheet.split("## Probe status", 1)[0])
    headers = [list(report.FACT_HEADER), list(report.INVARIANT_HEADER)]
    html_rows = {r[0]: r for css in ("facts", "invariants") for r in page.rows[css] if r not in headers}
    assert set(html_rows) == {f.id for f in results.facts} == set(markdown)
    for fact_id, cells in html_rows.items():
        md = [re.sub(r"\\(.)", r"\1", c).strip("*") for c in markdown[fact_id]]  # unescaped, unbolded
        assert cells[1:] == md[1:], fact_id  # measured, expected, source, verdict (or the invariant's columns)


def test_same_sections_identity_and_probe_status(page: Page) -> None:
    results = fake_results()
    markdown = report.render_markdown(results, {LATENCY_PLOT.key: "x.png"}, sections=SECTIONS)
    assert page.headings == [line[3:] for line in markdown.splitlines() if line.startswith("## ")]
    identity = {row[0]: row[1] for row in page.rows["identity"]}
    assert identity == {label: value for label, value in report.identity_rows(results)}
    probes = {row[0]: row[1:] for row in page.rows["probes"][1:]}
    assert probes == {
        name: [status, " ".join(detail.split())] for name, status, detail in report.probe_problems(results)
    }


def test_summary_counts_match_markdown(page: Page, page_text: str) -> None:
    assert "<strong>14 facts:</strong>" in page_text
    for verdict, count in report.verdict_counts(fake_results().facts):
        assert f'class="badge v-{verdict}">{count} {verdict.replace("_", " ")}</span>' in page_text


def test_empty_family_says_why() -> None:
    results = fake_results(with_curves=False)
    results.facts = []
    results.probes["memory.latency.global_ca"].status = "violated"
    text = render(results, plots={})
    assert "No facts measured (memory.latency.global_ca violated, memory.latency.global_cg ok" in text


def test_render_is_deterministic() -> None:
    assert render() == render()


# ---------------------------------------------------------------- write_report


def test_write_report_html_writes_one_self_contained_file(tmp_path: Path) -> None:
    paths = factsheet.write_report(fake_results(), tmp_path / "out", "html", dpi=TEST_DPI, sections=SECTIONS)
    assert paths == [tmp_path / "out" / "factsheet.html"]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["factsheet.html"]
    (img,) = [a for t, a in Page(paths[0].read_text(encoding="utf-8")).tags if t == "img"]
    assert base64.b64decode(img["src"].split(",", 1)[1]).startswith(PNG_SIGNATURE)


def test_write_report_default_is_markdown(tmp_path: Path) -> None:
    paths = factsheet.write_report(fake_results(with_curves=False), tmp_path, sections=SECTIONS)
    assert [p.name for p in paths] == ["factsheet.md"]


def test_unknown_format_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(GpuprobeError, match="unknown fact sheet format 'pdf'"):
        factsheet.write_report(fake_results(), tmp_path, "pdf", sections=SECTIONS)
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
