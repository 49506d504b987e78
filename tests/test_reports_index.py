"""reports/README.md: the index of every GPU's results, on generated results in temporary folders.

Nothing here touches the real reports/ folder; every results file is fabricated test data.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.results import Results, save
from gpuprobe.fleet import reports_index
from gpuprobe.output.factsheet import gpu_slug
from tests.test_report import simulated_results

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"


def add_run(reports: Path, results: Results, sheet: str | None = "factsheet.md") -> Path:
    """Save ``results`` where a run would, with a stand-in fact sheet file if ``sheet`` is given."""
    folder = reports / gpu_slug(results.device.name)
    save(results, folder / "results.json")
    if sheet:
        (folder / sheet).write_text("stand-in sheet\n", encoding="utf-8")
    return folder


def a100_partial() -> Results:
    results = simulated_results(partial=True)
    results.device.name = A100
    results.device.arch, results.device.cc, results.device.sm_count = "sm_80", "8.0", 108
    results.device.l2_bytes = 40 * 2**20
    results.facts = [f for f in results.facts if f.id not in ("latency.l2_far", "capacity.l2")]
    results.created = "2025-03-04T05:06:07+00:00"
    return results


def row_of(index: str, name: str) -> list[str]:
    """The cells of the table row whose GPU link text is ``name``."""
    line = next(line for line in index.splitlines() if line.startswith(f"| [{name}]"))
    return [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]


@pytest.fixture
def reports(tmp_path: Path) -> Path:
    folder = tmp_path / "reports"
    folder.mkdir()
    add_run(folder, simulated_results())
    add_run(folder, a100_partial(), sheet=None)
    return folder


def test_empty_reports_dir(tmp_path: Path) -> None:
    index = reports_index.render_index(tmp_path)
    assert index.startswith("# gpuprobe reports\n")
    assert "No GPU runs recorded yet." in index and "|" not in index
    assert reports_index.render_index(tmp_path / "missing") == index


def test_folders_without_results_are_skipped(tmp_path: Path) -> None:
    (tmp_path / "some-gpu").mkdir()
    (tmp_path / "some-gpu" / "factsheet.md").write_text("x", encoding="utf-8")
    (tmp_path / "README.md").write_text("old index", encoding="utf-8")
    assert "No GPU runs recorded yet." in reports_index.render_index(tmp_path)


def test_headline_facts_side_by_side(reports: Path) -> None:
    index = reports_index.render_index(reports)
    header = next(line for line in index.splitlines() if line.startswith("| GPU |"))
    assert [c.strip() for c in header.split("|")[1:-1]] == list(reports_index.HEADER)
    h100 = row_of(index, H100)
    assert h100[0] == f"[{H100}](nvidia-h100-80gb-hbm3/factsheet.md)"
    assert h100[1:3] == ["sm_90 (9.0)", "132"]
    assert h100[3:7] == ["33.1 cyc / 18.86 ns", "262.4 cyc / 149.5 ns", "478 cyc / 272.4 ns", "819.5 cyc / 467 ns"]
    assert h100[7:11] == ["50 MiB / 50 MiB", "1755 MHz", "550.54.15", "2025-01-02"]
    assert h100[11] == "1 warn, 1 unstable, 13 pass"  # judged again: the stored verdicts are fabricated
    changed = index.split("## Verdicts judged again\n", 1)[1]
    assert "- nvidia-h100-80gb-hbm3: 7 stored verdict(s) differ" in changed and "(stored fail, judged pass)" in changed


def test_partial_run_is_marked_and_missing_facts_are_dashes(reports: Path) -> None:
    index = reports_index.render_index(reports)
    a100 = row_of(index, A100)
    assert a100[0] == f"[{A100}](nvidia-a100-sxm4-80gb/results.json) {reports_index.PARTIAL_MARK}"  # no sheet yet
    assert a100[5] == "—" and a100[7] == "— / 40 MiB"
    assert a100[10] == "2025-03-04"
    assert reports_index.PARTIAL_MARK not in row_of(index, H100)[0]
    assert "marks a run that did not finish" in index


def test_rows_sorted_by_gpu_name(reports: Path) -> None:
    index = reports_index.render_index(reports)
    assert index.index(f"[{A100}]") < index.index(f"[{H100}]")


def test_unreadable_results_listed_without_machine_paths(reports: Path) -> None:
    (reports / "broken").mkdir()
    (reports / "broken" / "results.json").write_text("{not json", encoding="utf-8")
    (reports / "alien").mkdir()
    (reports / "alien" / "results.json").write_text('{"schema": "something else"}', encoding="utf-8")
    index = reports_index.render_index(reports)
    unreadable = index.split("## Unreadable results\n", 1)[1]
    assert "- broken: broken/results.json: corrupt results file" in unreadable
    assert "- alien: alien/results.json: not a gpuprobe results file" in unreadable
    assert str(reports) not in index
    assert f"[{H100}]" in index  # the readable runs are still indexed


def test_names_from_results_cannot_break_the_table(tmp_path: Path) -> None:
    results = simulated_results()
    results.device.name = "GPU | with [brackets] <b>"
    results.device.driver = "1|2"
    add_run(tmp_path, results)
    index = reports_index.render_index(tmp_path)
    rows = [line for line in index.splitlines() if line.startswith("|")]
    assert len({len(re.findall(r"(?<!\\)\|", line)) for line in rows}) == 1
    assert r"GPU \| with [brackets] &lt;b&gt;" in index  # shown as text: no HTML, no link


def test_regenerated_from_results_only(reports: Path) -> None:
    first = reports_index.render_index(reports)
    (reports / "nvidia-h100-80gb-hbm3" / "factsheet.md").write_text("edited by hand: 1 cycle", encoding="utf-8")
    assert reports_index.render_index(reports) == first
    path = reports_index.write_index(reports)
    assert path == reports / "README.md" and path.read_text(encoding="utf-8") == first
    assert reports_index.render_index(reports) == first  # its own README.md is not a run


def test_links_prefer_markdown_then_html(tmp_path: Path) -> None:
    folder = add_run(tmp_path, simulated_results(), sheet="factsheet.html")
    assert f"[{H100}](nvidia-h100-80gb-hbm3/factsheet.html)" in reports_index.render_index(tmp_path)
    (folder / "factsheet.md").write_text("x", encoding="utf-8")
    assert f"[{H100}](nvidia-h100-80gb-hbm3/factsheet.md)" in reports_index.render_index(tmp_path)


def test_write_index_needs_an_existing_folder(tmp_path: Path) -> None:
    with pytest.raises(GpuprobeError, match="reports directory not found"):
        reports_index.write_index(tmp_path / "missing")
    assert not (tmp_path / "missing").exists()


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="this platform has no named pipes")
def test_a_fifo_a_device_and_a_fact_given_twice_are_listed_as_unreadable_with_why(reports: Path) -> None:
    """The newcomer trial 3's n39 and n01: the index passed over a ``results.json`` that is a FIFO or a link to
    /dev/zero without a word, and indexed a file giving one fact twice."""
    for folder in ("fifo", "zero", "twice"):
        (reports / folder).mkdir()
    os.mkfifo(reports / "fifo" / "results.json")
    (reports / "zero" / "results.json").symlink_to("/dev/zero")
    twice = simulated_results()
    twice.facts.append(twice.facts[0])
    save(twice, reports / "twice" / "results.json")
    unreadable = reports_index.render_index(reports).split("## Unreadable results\n", 1)[1]
    assert "- fifo: fifo/results.json: cannot read (not a regular file)" in unreadable
    assert "- zero: zero/results.json: cannot read (not a regular file)" in unreadable
    assert f"- twice: twice/results.json: invalid results file: fact '{twice.facts[0].id}' appears twice" in unreadable
