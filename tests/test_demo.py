"""``gpuprobe demo``: the suite on the simulated GPU, every page it writes stamped SIMULATED, and the commands
that need real runs refusing or flagging its results. Two families keep it to seconds; the whole suite
through the same path is tests/test_session.py's ``clean_run``."""

from __future__ import annotations

import dataclasses
import io
import json
from pathlib import Path

import pytest
from matplotlib.image import imread

from gpuprobe.cli import main
from gpuprobe.core.results import load
from gpuprobe.families.catalog import sections
from gpuprobe.output.factsheet import plot_images
from gpuprobe.output.html_report import render_html
from tests.test_cli import run, user_error

DATA = Path(__file__).resolve().parent / "data"
REAL = DATA / "h200_first_run_results.json"


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("demo")
    assert main(["demo", "-o", str(out), "--families", "memory,warp"]) == 0
    return out


def test_the_demo_writes_results_and_a_sheet_marked_simulated(demo: Path) -> None:
    results = load(demo / "results.json")
    assert results.device.simulated and json.loads((demo / "results.json").read_text())["device"]["simulated"]
    assert {f.id.split(".")[0] for f in results.facts} >= {"latency", "warp"}
    sheet = (demo / "factsheet.md").read_text()
    assert sheet.startswith("# gpuprobe fact sheet: Simulated GPU (SIMULATED)\n")
    top, bottom = sheet[:600], sheet[-600:]
    assert "**SIMULATED — no GPU was measured.**" in top and "**SIMULATED — no GPU was measured.**" in bottom


def test_the_demo_records_the_code_the_board_and_the_host_it_came_from(demo: Path) -> None:
    """Every results file says which gpuprobe (version, commit), which board (serial, UUID) and which machine."""
    import socket

    from gpuprobe.core.results import BOOT_ID_FILE, PACKAGE_ROOT, provenance

    origin = provenance(load(demo / "results.json"))
    assert origin.version and origin.serial == "SIMULATED-0" and len(origin.uuid) == 32
    assert origin.hostname == socket.gethostname() and (origin.boot_id or not BOOT_ID_FILE.exists())
    if (PACKAGE_ROOT / ".git").exists():  # the tests run from a checkout: the commit it is at
        assert len(origin.commit) == 40 and origin.dirty is not None
    build = json.loads((demo / "results.json").read_text())["build"]["gpuprobe"]
    assert set(build) == {"version", "commit", "dirty"}


def test_its_html_page_and_its_plots_say_simulated_too(demo: Path) -> None:
    results = load(demo / "results.json")
    plots = plot_images(results, sections())
    page = render_html(results, plots, sections=sections())
    assert page.count('class="banner simulated"') == 2 and "(SIMULATED)</h1>" in page
    stamped = imread(io.BytesIO(plots["latency_vs_footprint"]), format="png")
    assert stamped.shape[:2] == imread(demo / "latency_vs_footprint.png").shape[:2]
    as_if_real = dataclasses.replace(results, device=dataclasses.replace(results.device, simulated=False))
    assert plots["latency_vs_footprint"] != plot_images(as_if_real, sections())["latency_vs_footprint"]


def test_reports_index_refuses_it_compare_warns_and_strict_refuses(demo: Path, tmp_path: Path, capsys) -> None:
    reports = tmp_path / "reports"
    (reports / "simulated-gpu").mkdir(parents=True)
    (reports / "simulated-gpu" / "results.json").write_bytes((demo / "results.json").read_bytes())
    code, _, _ = run(capsys, "index", str(reports))
    index = (reports / "README.md").read_text()
    assert code == 0 and "No GPU runs recorded yet." in index and "is SIMULATED (gpuprobe demo)" in index
    code, out, _ = run(capsys, "compare", str(REAL), str(demo / "results.json"))
    first = out.splitlines()[0]
    assert first.startswith("WARNING: DIFFERENT GPUS OR CLOCKS: ")
    assert "results.json is SIMULATED (gpuprobe demo)" in first
    assert "SIMULATED" in user_error(capsys, "compare", "--strict", str(REAL), str(demo / "results.json"))


def test_fleet_flags_a_simulated_file(demo: Path, capsys) -> None:
    _, out, _ = run(capsys, "fleet", str(REAL), str(demo / "results.json"))
    assert "(SIMULATED)" in out and "are SIMULATED (gpuprobe demo" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [(["--families", "memory,nosuch"], "--families: nosuch not a family"), (["--families", ","], "(none)")],
)
def test_a_demo_of_an_unknown_family_is_refused(capsys, tmp_path: Path, argv: list[str], message: str) -> None:
    assert message in user_error(capsys, "demo", "-o", str(tmp_path / "out"), *argv)


@pytest.mark.parametrize(
    ("families", "why"),
    [
        ("tcgen05", "tcgen05: no probe of it runs on sm_90a, left out"),
        ("selftest", "selftest: measured only by gpuprobe run --inject-fault"),
    ],
)
def test_a_demo_of_families_that_cannot_run_on_its_arch_is_refused_saying_why(capsys, tmp_path, families, why) -> None:
    message = user_error(capsys, "demo", "-o", str(tmp_path / "out"), "--families", families)
    assert message == f"--families: nothing to measure on the simulated GPU ({why})"
    assert not (tmp_path / "out").exists()


def test_a_demo_says_which_families_its_arch_cannot_run(capsys, tmp_path: Path) -> None:
    code, _, err = run(capsys, "demo", "-o", str(tmp_path), "--families", "barrier,tcgen05")
    assert code == 0 and "gpuprobe: tcgen05: no probe of it runs on sm_90a, left out\n" in err
    record = load(tmp_path / "results.json").families["tcgen05"]
    assert (record["planned_s"], record["actual_s"], record["probes"]) == (0.0, 0.0, 0)


def test_a_demo_into_a_file_is_refused(capsys, tmp_path: Path) -> None:
    (tmp_path / "taken").write_text("")
    user_error(capsys, "demo", "-o", str(tmp_path / "taken"))
