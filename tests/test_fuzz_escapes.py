"""Hostile strings in a results file stay inert in everything gpuprobe writes (issue 25, item 5).

A device name, fact id, unit, expectation source and note, fact detail and probe detail each carry, seeded,
pieces an attacker would use: every C0 and C1 control, NUL, ESC/CSI/OSC sequences (clear screen, colours,
window title, hyperlink), bidi overrides and zero widths, lone surrogates, HTML tags, and Markdown that
breaks a table, starts a heading or makes a link. Through ``report`` (Markdown and HTML), ``compare`` (text
and Markdown), ``fleet`` (text and Markdown) and ``index``, each output must be inert: on the terminal no
control character but the line break and tab, no line started by a string from the file; in Markdown also
no HTML tag (outside code, where it is text) and no link the file made; in HTML no tag the file made.
Each case is also run with an ASCII stdout, which must degrade (escapes), never raise.
"""

from __future__ import annotations

import io
import json
import os
import random
import re
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprobe.core.results import ProbeOutcome, load
from gpuprobe.core.text import STREAM_ERRORS, InertStream, md_code, md_fence, md_text
from gpuprobe.fleet.links import Link, LinksReport, SlowLink
from gpuprobe.fleet.links import render as render_links
from gpuprobe.output.first_contact import render_first_contact
from tests.test_cli import run
from tests.test_fuzz_cli import RESULTS, handled_or_refused

REPO = Path(__file__).resolve().parents[1]

PIECES = (
    *map(chr, range(0x20)), "\x7f", *map(chr, range(0x80, 0xA0)),
    "\x1b[2J", "\x1b[31mRED\x1b[0m", "\x1b]0;TITLE\x07", "\x9b2J",
    "\x1b]8;;http://evil.example/\x1b\\here\x1b]8;;\x1b\\",
    "\u202e", "\u2066", "\u200b", "\ufeff", "\u2028- INJECTED",
    "<script>alert(1)</script>", "<img src=x onerror=alert(2)>", "<svg onload=alert(3)>", "</td></tr></table>",
    "\n# INJECTED heading", "\r\n| INJECTED | x |\n|---|---|", "\n```\nINJECTED", "`", "``", "\\", "|", "**bold**",
    "[click](http://evil.example/)", "![i](http://evil.example/i.png)", "\n[x]: http://evil.example/", "\n- INJECTED",
    "\ud800", "\udfff", "\x00",
)  # fmt: skip
CASES = 4
PLACES = 7  # device name, fact id, unit, detail, note, source, probe detail

# What no terminal may be given and no page may hold: controls but the line break and tab, invisible format
# characters, lone surrogates.
HIDDEN = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff\ud800-\udfff]")
INJECTED_LINE = re.compile(r"^[\s#>|*+\-`]*INJECTED", re.MULTILINE)  # a string from the file starting a line
CODE_SPAN = re.compile(r"(?<!`)(`+)(?!`).*?(?<!`)\1(?!`)")
HTML_TAG = re.compile(r"<(?!br>)[A-Za-z/!?]")  # gpuprobe's own Markdown holds <br> only
FILE_LINK = re.compile(r"(?<!\\)(?:\\\\)*\]\s*[(:]\s*(https?://evil|javascript)")  # a "]" not escaped


def hostile(case: int, place: int, base: str) -> str:
    """``base`` and pieces: the case's share of every piece (dealt over the places, so each piece is used in
    one case and place at least), and two more drawn at random."""
    share = PIECES[case::CASES][place::PLACES]
    return base + "".join([*share, *random.Random(f"escapes-{case}-{place}").choices(PIECES, k=2)])


def hostile_results(case: int, path: Path) -> Path:
    """The extract of the H200 run with hostile strings in every place a reader shows one."""
    data = json.loads(RESULTS.read_text())
    data["device"]["name"] = hostile(case, 0, "NVIDIA H200 ")
    fact = next(f for f in data["facts"] if f["id"] == "latency.l2")
    fact["id"] = hostile(case, 1, "latency.l2.")
    fact["unit"] = fact["expectation"]["unit"] = hostile(case, 2, "cycle ")
    fact["detail"] = hostile(case, 3, "detail ")
    fact["expectation"]["note"] = hostile(case, 4, "note ")
    fact["expectation"]["source"] = hostile(case, 5, "source ")
    name, probe = next(iter(data["probes"].items()))
    data["probes"][name] = {**probe, "status": "failed", "detail": hostile(case, 6, "probe detail ")}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))  # lone surrogates as \ud800 escapes, as JSON allows
    return path


def assert_inert_on_a_terminal(text: str) -> None:
    assert not HIDDEN.search(text), HIDDEN.search(text)
    assert not INJECTED_LINE.search(text), INJECTED_LINE.search(text)


def assert_inert_markdown(text: str) -> None:
    assert_inert_on_a_terminal(text.replace("\t", " "))
    outside_code = CODE_SPAN.sub("", text)
    assert not HTML_TAG.search(outside_code), HTML_TAG.search(outside_code)
    assert not FILE_LINK.search(outside_code), FILE_LINK.search(outside_code)


def assert_inert_html(page: str) -> None:
    assert not HIDDEN.search(page), HIDDEN.search(page)
    for made_by_the_file in ("<script", "<img src=x", "<svg", "</td></tr></table><", 'href="javascript', "href='http"):
        assert made_by_the_file not in page


def handled(outcome: tuple[int, str, str]) -> str:
    """stdout of a command that handled its input or refused it in one line; every stream inert."""
    handled_or_refused(outcome)
    assert_inert_on_a_terminal(outcome[2])
    return outcome[1]


@pytest.mark.parametrize("case", range(CASES))
def test_hostile_strings_stay_inert(capsys: pytest.CaptureFixture[str], tmp_path: Path, case: int) -> None:
    path = hostile_results(case, tmp_path / "reports" / "gpu" / "results.json")
    for fmt in ("md", "html"):
        out = handled(run(capsys, "report", str(path), "-o", str(tmp_path / fmt), "--format", fmt))
        if out:
            sheet = (tmp_path / fmt / f"factsheet.{fmt}").read_text(errors="surrogateescape")
            (assert_inert_markdown if fmt == "md" else assert_inert_html)(sheet)
    for fmt in ("text", "md"):
        out = handled(run(capsys, "compare", str(RESULTS), str(path), "--format", fmt))
        (assert_inert_markdown if fmt == "md" else assert_inert_on_a_terminal)(out)
        out = handled(run(capsys, "fleet", str(RESULTS), str(path), "--jobs", "1", "--format", fmt))
        (assert_inert_markdown if fmt == "md" else assert_inert_on_a_terminal)(out)
    handled(run(capsys, "index", str(tmp_path / "reports")))
    assert_inert_markdown((tmp_path / "reports" / "README.md").read_text(errors="surrogateescape"))


# ---------------------------------------------------------------- the trial's cases (newcomer trial 3)


def results_with(path: Path, name: str = "NVIDIA H200", fact_id: str = "latency.l2", unit: str = "cycle") -> Path:
    """The extract with this device name, and ``latency.l2`` renamed ``fact_id`` in ``unit``."""
    data = json.loads(RESULTS.read_text())
    data["device"]["name"] = name
    fact = next(f for f in data["facts"] if f["id"] == "latency.l2")
    fact["id"], fact["unit"], fact["expectation"]["unit"] = fact_id, unit, unit
    path.write_text(json.dumps(data))
    return path


ANSI_NAME = "NVIDIA H200\x1b[2J\x1b[31mPWNED\x1b[0m\x07"
OSC_ID = "latency.l2\x1b]0;evil-title\x07"
XSS_NAME = "NVIDIA H200<script>alert(1)</script><img src=x onerror=alert(2)>"
BREAK_NAME = "NVIDIA | H200\n# injected heading\n| a | b |"
HOSTILE_HOST = "node\x1b[2J\n# INJECTED <img src=x onerror=alert(1)>"


def test_escape_sequences_from_a_file_reach_no_terminal(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """n10: ESC[2J, colours and an OSC window title in a device name and a fact id, through compare and fleet."""
    path = results_with(tmp_path / "ansi.json", ANSI_NAME, OSC_ID)
    for argv in (["compare", str(RESULTS), str(path)], ["fleet", str(RESULTS), str(path), "--jobs", "1"]):
        code, out, err = run(capsys, *argv)
        assert code in (0, 1) and "\x1b" not in out + err and "\x07" not in out + err, argv
        assert r"NVIDIA H200\x1b[2J\x1b[31mPWNED\x1b[0m\x07" in out  # shown, escaped


def test_a_line_break_in_a_name_starts_no_line_on_the_terminal(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """n10: a device name's line break shows as \\n inside gpuprobe's line, in every line that names it."""
    path = results_with(tmp_path / "break.json", BREAK_NAME, "latency.dram|x\ny")
    for argv in (["compare", str(RESULTS), str(path)], ["fleet", str(RESULTS), str(path), "--jobs", "1"]):
        code, out, _ = run(capsys, *argv)
        assert code in (0, 1) and r"NVIDIA | H200\n# injected heading\n| a | b |" in out, argv
        assert not re.search(r"^(# injected|\| a \||y\b)", out, re.MULTILINE), argv


def test_the_markdown_sheet_shows_html_from_a_file_as_text(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """n07: the title, a unit cell and a fact id carry <script>, <img onerror>, <svg onload>."""
    path = results_with(
        tmp_path / "xss.json", XSS_NAME, "latency.l2<script>alert(3)</script>", "cycle<svg onload=alert(4)>"
    )
    assert run(capsys, "report", str(path), "-o", str(tmp_path / "sheet"))[0] == 0
    sheet = (tmp_path / "sheet" / "factsheet.md").read_text()
    assert sheet.startswith("# gpuprobe fact sheet: NVIDIA H200&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x")
    assert "cycle&lt;svg onload=alert(4)&gt;" in sheet and "`latency.l2<script>alert(3)</script>`" in sheet  # code
    assert not HTML_TAG.search(CODE_SPAN.sub("", sheet))


def test_compare_markdown_shows_html_from_a_file_as_text(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """n08: ``compare --format md`` (for a ticket): the warning and the ``new:`` line name the device."""
    code, out, _ = run(
        capsys, "compare", str(RESULTS), str(results_with(tmp_path / "xss.json", XSS_NAME)), "--format", "md"
    )
    assert code in (0, 1) and not HTML_TAG.search(CODE_SPAN.sub("", out))
    lines = [line for line in out.splitlines() if "NVIDIA H200&lt;script&gt;" in line]
    assert [line[:12] for line in lines] == ["> **WARNING:", "- **new**: N"]


def test_a_line_break_in_a_name_injects_no_heading_into_the_sheet(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """n09: a device name's line break and pipe, and a fact id's, stay inside their line of the sheet."""
    path = results_with(tmp_path / "break.json", BREAK_NAME, "latency.dram|x\ny")
    assert run(capsys, "report", str(path), "-o", str(tmp_path / "sheet"))[0] == 0
    sheet = (tmp_path / "sheet" / "factsheet.md").read_text()
    assert sheet.splitlines()[0] == r"# gpuprobe fact sheet: NVIDIA | H200\\n# injected heading\\n| a | b |"
    assert not re.search(r"^(# injected|\| a \||y\b)", sheet, re.MULTILINE)
    assert r"`latency.dram\|x\ny`" in sheet


def test_a_nul_in_a_name_is_shown_not_written(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """n32: a NUL byte in the device name lands in neither sheet: each shows it as \\x00."""
    path = results_with(tmp_path / "nul.json", "NVIDIA\x00H200")
    for fmt in ("md", "html"):
        assert run(capsys, "report", str(path), "-o", str(tmp_path / fmt), "--format", fmt)[0] == 0
        sheet = (tmp_path / fmt / f"factsheet.{fmt}").read_text()
        assert "\x00" not in sheet and r"NVIDIA\x00H200" in sheet.replace("\\\\", "\\")


@pytest.mark.parametrize(
    "env",
    [{"PYTHONIOENCODING": "ascii"}, {"LC_ALL": "C", "PYTHONCOERCECLOCALE": "0", "PYTHONUTF8": "0"}],
    ids=["n108-ascii-stdout", "n109-c-locale-uncoerced"],
)
def test_a_stdout_that_cannot_encode_a_character_shows_its_escape(env: dict[str, str], tmp_path: Path) -> None:
    """n108, n109: ``compare`` prints "—" and "≥"; an ASCII stdout gets their escapes, not a traceback."""
    path = results_with(tmp_path / "renamed.json", fact_id="latency.l2_renamed")
    locale = ("LANG", "LC_ALL", "LC_CTYPE", "PYTHONUTF8", "PYTHONIOENCODING", "PYTHONCOERCECLOCALE")
    environ = {k: v for k, v in os.environ.items() if k not in locale}
    proc = subprocess.run(
        [sys.executable, "-m", "gpuprobe", "compare", str(RESULTS), str(path)], cwd=REPO,
        env={**environ, "PYTHONPATH": str(REPO), **env}, capture_output=True, timeout=300,
    )  # fmt: skip
    assert proc.returncode in (0, 1) and proc.stderr == b"", proc.stderr.decode(errors="replace")
    assert proc.stdout.isascii() and rb"\u2014" in proc.stdout  # the "—" of a fact only one run has


# ---------------------------------------------------------------- the text layer


def test_the_terminal_gets_escapes_but_for_the_live_progress() -> None:
    screen = io.StringIO()
    InertStream(screen).write("a\x1b[2J\x9b1m\u202eb\tc\n\r\x1b[Kstatus\rd\ud800")
    assert screen.getvalue() == "a\\x1b[2J\\x9b1m\\u202eb\tc\n\r\x1b[Kstatus\\rd\\ud800"


def test_an_ascii_terminal_gets_escapes_and_a_file_names_bytes() -> None:
    raw = io.BytesIO()
    stream = io.TextIOWrapper(raw, encoding="ascii", errors=STREAM_ERRORS)
    stream.write("±3 % \udcff.json")
    stream.flush()
    assert raw.getvalue() == b"\\xb13 % \xff.json"


def test_markdown_from_a_file_makes_no_markup() -> None:
    assert md_text("<b>&</b> *x* [l](u) ![i](u) [r]: u `c` ~~s~~ \\") == (
        r"&lt;b&gt;&amp;&lt;/b&gt; \*x\* [l\](u) ![i\](u) [r\]: u \`c\` \~\~s\~\~ \\"
    )
    assert md_text("# h") == r"\# h" and md_text("- x") == r"\- x" and md_text("-") == "-"
    assert md_code("a`b") == "`` a`b ``" and md_code("x\ny") == r"`x\ny`"
    assert md_fence("one\n```\ntwo") == ["````", "one", "```", "two", "````"]


def test_the_first_contact_page_keeps_a_tools_text_in_its_code_blocks() -> None:
    """A driver's error (a probe's detail, a launcher call's fields) that closes a code block and starts a
    heading and a tag stays inside its block; the family's name from the file stays text."""
    results = load(RESULTS)
    name = next(iter(results.probes))
    detail = "CUDA error\n```\n# INJECTED\n<script>alert(1)</script>"
    flight = [{"n": 1, "call": "launch", "grid": "```\n# INJECTED <script>", "elapsed_ms": None}]
    results.probes[name] = ProbeOutcome("crashed", detail, flight=flight)
    results.families = {"memory<img src=x>": {"probe_names": [name]}}
    page = render_first_contact(results, {})
    assert_inert_markdown(CODE_SPAN.sub("", "\n".join(re.split(r"^(````+)$.*?^\1$", page, flags=re.M | re.S)[::2])))
    assert "````\nCUDA error\n```\n# INJECTED\n<script>alert(1)</script>\n````" in page


@pytest.mark.parametrize("fmt", ["text", "md"])
def test_fleet_links_shows_a_hostile_host_name_as_text(fmt: str) -> None:
    """A node's host name (from its results file) with an escape, a line break and HTML, in a slow link's row."""
    link = Link(HOSTILE_HOST, "ce", 0, 1, 12.5, "GB/s")
    report = LinksReport(0.8, nodes=2, links=2, slow=[SlowLink(link, 25.0, 25.0, 0.5, "fleet")])
    page = render_links(report, fmt)
    (assert_inert_markdown if fmt == "md" else assert_inert_on_a_terminal)(page)
    assert r"node\x1b[2J\n# INJECTED" in page.replace("\\\\", "\\")
