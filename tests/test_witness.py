"""The hardware witness: Nsight Compute's counters beside the bytes the probes say they moved.

End to end, a fake ncu (``tests/fakes/fake_ncu.py``) wraps the witness measurement on the simulated GPU and
counts what each launch moved from the launch itself; the hostile cases (no ncu, counters refused, a CSV that
is not ncu's, a tool that is not ncu, one that hangs) are each one line.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import itertools
import re
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from gpuprobe.cli import main
from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Fact, ProbeOutcome, Results, load, save
from gpuprobe.families.base import Measured
from gpuprobe.families.catalog import BY_NAME
from gpuprobe.families.sampling import ONE_SAMPLE, Stopping
from gpuprobe.judge.verdicts import device_facts, judge_again
from gpuprobe.kernels.registry import CLOCK_KERNEL
from gpuprobe.measure.conditions import ConditionRecorder
from gpuprobe.measure.witness import ncu as ncu_module
from gpuprobe.measure.witness.compare import pair, witness_facts
from gpuprobe.measure.witness.counters import METRICS, Counted, MalformedCsv, parse_raw
from gpuprobe.measure.witness.run import WITNESSED, one_sample
from gpuprobe.output.factsheet import write_report
from gpuprobe.simulated.gpu import FaultyGpu, ptx_parameters, suite_options
from tests.fakes.fake_ncu import table
from tests.helpers.processes import processes_with

REPO = Path(__file__).resolve().parents[1]
FAKE_NCU = REPO / "tests" / "fakes" / "fake_ncu.py"
WITNESSED_PROBES = [p for probes in WITNESSED.values() for p in probes]


def fake_ncu(folder: Path) -> Path:
    """An executable ``ncu`` in ``folder`` that is the fake, under this Python."""
    path = folder / "ncu"
    path.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{FAKE_NCU}" "$@"\n')
    path.chmod(0o755)
    return path


def rehearsal(env: pytest.MonkeyPatch, **extra: str) -> None:
    """Every process ncu wraps measures the simulated GPU (as a device-check rehearsal does)."""
    env.setenv("GPUPROBE_REHEARSAL", "1")
    env.setenv("PYTHONPATH", str(REPO))
    for name, value in extra.items():
        env.setenv(name, value)


def full_results(path: Path) -> Path:
    """A full run's results of the rehearsal's simulated GPU (its device facts only), as RESULTS.json."""
    device = FaultyGpu(**suite_options(name="Rehearsal GPU")).device()
    save(Results(device=device, facts=device_facts(device), partial=False), path)
    return path


def witness(results: Path, *args: str) -> int:
    return main(["witness", str(results), *args])


@pytest.fixture(scope="module")
def witnessed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, str]]:
    """One witness of every witnessed probe by the fake ncu, its hardware moving 128-byte DRAM units where the
    suite's simulated part (and so its goodput claims) has 64: (RESULTS.json, what the command printed)."""
    folder = tmp_path_factory.mktemp("witness")
    results = full_results(folder / "results.json")
    with pytest.MonkeyPatch.context() as env, contextlib.redirect_stdout(io.StringIO()) as printed:
        rehearsal(env, FAKE_NCU_DRAM_GRANULE="128")
        assert witness(results, "--ncu", str(fake_ncu(folder)), "--timeout", "300") == 0
    yield results, printed.getvalue()


def facts_of(results: Path) -> dict[str, Fact]:
    return {f.id: f for f in load(results).facts if f.id.startswith("witness.")}


# ---- end to end, on the simulated GPU -----------------------------------------------------------------


def test_every_witnessed_probe_has_its_launches_paired_and_compared(witnessed) -> None:
    results, printed = witnessed
    facts = facts_of(results)
    for probe in WITNESSED_PROBES:
        assert facts[f"witness.{probe}.launches"].value >= 2, facts[f"witness.{probe}.launches"].detail
    ratios = {i: f for i, f in facts.items() if f.unit == "fraction"}
    claimed = {"dram_write_bytes", "l2_write_bytes", "dram_read_bytes", "l2_read_bytes"}
    assert {i.rsplit(".", 1)[1] for i in ratios} == claimed | {"shared_bank_conflicts"}
    overfetched = ("stride32", "gather.64.dram")  # the fake's 128-byte DRAM unit, where the suite measured 64
    agreeing = {i: f.value for i, f in ratios.items() if i.endswith("_bytes") and not any(o in i for o in overfetched)}
    assert agreeing and all(v == pytest.approx(1.0) for v in agreeing.values()), agreeing
    for probe in WITNESSED["async_copy"]:  # the re-laid slots: no bank conflict, and it says so
        conflicts = facts[f"witness.{probe}.shared_bank_conflicts"]
        assert (conflicts.value, conflicts.verdict) == (0.0, "pass")
    witnessing = load(results).environment["witness"]
    assert witnessing["version"].startswith("Version 2025") and Path(witnessing["csv"]).is_file()
    assert "wrote" in printed and "gpuprobe report" in printed


def test_a_counter_twice_the_claim_is_a_warn_that_names_the_probe(witnessed) -> None:
    results, printed = witnessed
    facts = facts_of(results)
    wide = facts["witness.bandwidth.goodput.v4.stride32.dram_read_bytes"]  # 128 B apart: every lane its own unit
    assert (wide.value, wide.verdict) == (pytest.approx(2.0), "warn")
    assert wide.detail.startswith("bandwidth.goodput.v4.stride32:") and "counted / claimed = 2.000" in wide.detail
    counted = facts["witness.bandwidth.goodput.v4.stride32.dram_read_bytes.counted"].value
    assert counted == 2 * facts["witness.bandwidth.goodput.v4.stride32.dram_read_bytes.claimed"].value
    assert facts["witness.bandwidth.goodput.v4.stride16.dram_read_bytes"].verdict == "pass"  # 64 B apart: the same
    rows = facts["witness.bandwidth.goodput.gather.64.dram_read_bytes"]  # 64-byte rows at random: each its own unit
    assert (rows.value, rows.verdict) == (pytest.approx((128 + 4) / (64 + 4)), "warn")  # 4 bytes of index a row
    warned = sorted(line.split()[1].rstrip(":") for line in printed.splitlines() if line.startswith("WARN"))
    assert warned == ["witness.bandwidth.goodput.gather.64.dram_read_bytes",
                      "witness.bandwidth.goodput.v4.stride32.dram_read_bytes"], printed  # fmt: skip


def test_the_fact_sheet_shows_the_witness_in_its_own_section(witnessed, tmp_path: Path) -> None:
    results, _ = witnessed
    run = load(results)
    sheet = write_report(run, tmp_path, sections=())[0].read_text()
    section = sheet.split("### Hardware witness (Nsight Compute)", 1)[1].split("\n## ", 1)[0]
    row = next(line for line in section.splitlines() if "stride32" in line and "read from DRAM" in line)
    counted = facts_of(results)["witness.bandwidth.goodput.v4.stride32.dram_read_bytes.counted"].value
    assert "| 2.000 | WARN |" in row and f"| {counted / 2**20:.0f} MiB |" in row
    assert "witness." not in sheet.split("### Hardware witness", 1)[0].split("## Details", 1)[1]  # nowhere else
    page = write_report(run, tmp_path, "html", sections=())[0].read_text()
    assert 'id="hardware-witness" open' in page and "bandwidth.goodput.v4.stride32" in page


def test_the_ncu_version_from_the_results_file_is_literal_text_in_the_markdown_sheet(witnessed, tmp_path: Path) -> None:
    run = load(witnessed[0])
    run.environment["witness"]["version"] = "<script>alert(1)</script>\n# injected"
    sheet = write_report(run, tmp_path, sections=())[0].read_text()
    assert "<script>" not in sheet and "&lt;script&gt;" in sheet and "\n# injected" not in sheet


def test_judging_the_results_again_keeps_each_witness_verdict_and_detail(witnessed) -> None:
    results, _ = witnessed
    run = load(results)
    before = {f.id: (f.verdict, f.detail) for f in run.facts if f.id.startswith("witness.")}
    judge_again(run, None, ())
    assert {f.id: (f.verdict, f.detail) for f in run.facts if f.id.startswith("witness.")} == before


# ---- the stage skipped, or refused ----------------------------------------------------------------------


def one_line(text: str) -> str:
    lines = [line for line in text.splitlines() if line.strip()]
    assert len(lines) == 1, text
    return lines[0]


def test_no_ncu_anywhere_is_one_line_and_the_stage_skipped(tmp_path, monkeypatch, capsys) -> None:
    results = full_results(tmp_path / "results.json")
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.setattr(ncu_module, "TOOLKIT_HOMES", (str(tmp_path / "cuda"),))
    before = results.read_bytes()
    assert witness(results) == 0
    assert "skipped: no ncu" in one_line(capsys.readouterr().out)
    assert results.read_bytes() == before


def test_ncu_found_on_path_or_in_the_toolkit(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.delenv("CUDA_HOME", raising=False)
    toolkit = tmp_path / "cuda"
    (toolkit / "bin").mkdir(parents=True)
    monkeypatch.setattr(ncu_module, "TOOLKIT_HOMES", (str(toolkit),))
    assert ncu_module.find_ncu(None) is None
    found = fake_ncu(toolkit / "bin")
    assert ncu_module.find_ncu(None) == found
    monkeypatch.setenv("PATH", str(toolkit / "bin"))
    assert ncu_module.find_ncu(None) == found


def test_counters_ncu_may_not_read_are_one_line_and_the_stage_skipped(tmp_path, monkeypatch, capsys) -> None:
    results = full_results(tmp_path / "results.json")
    rehearsal(monkeypatch, FAKE_NCU_MODE="refused")
    assert witness(results, "--ncu", str(fake_ncu(tmp_path))) == 0
    line = one_line(capsys.readouterr().out)
    assert "skipped" in line and "ERR_NVGPUCTRPERM" in line
    assert not facts_of(results)


# ---- hostile tools and files: one line, exit 2 ------------------------------------------------------------


def refused_with(capsys: pytest.CaptureFixture[str]) -> str:
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    return one_line(captured.err)


@pytest.mark.parametrize(
    ("mode", "said"), [("garbage", "cells for"), ("failed", "ncu failed (exit status 1): ==ERROR==")]
)
def test_a_csv_that_is_not_ncus_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys, mode, said) -> None:
    results = full_results(tmp_path / "results.json")
    rehearsal(monkeypatch, FAKE_NCU_MODE=mode)
    assert witness(results, "--ncu", str(fake_ncu(tmp_path))) == 2
    assert said in refused_with(capsys)
    assert not facts_of(results)


def test_a_tool_that_is_not_ncu_is_one_line_and_exit_2(tmp_path, capsys) -> None:
    impostor = tmp_path / "ncu"
    impostor.write_text("#!/bin/sh\necho 'usage: something else'\n")
    impostor.chmod(0o755)
    assert witness(full_results(tmp_path / "results.json"), "--ncu", str(impostor)) == 2
    assert "is not Nsight Compute's ncu" in refused_with(capsys)


def test_a_hanging_ncu_is_killed_at_its_timeout(tmp_path, monkeypatch, capsys) -> None:
    """The fake ncu never ends, so its limit passes whatever the machine's speed; what it started is gone
    (found by its environment, whether or not it got as far as writing its pid)."""
    pidfile = tmp_path / "ncu.pid"
    rehearsal(monkeypatch, FAKE_NCU_MODE="hang", FAKE_NCU_PIDFILE=str(pidfile))
    assert witness(full_results(tmp_path / "results.json"), "--ncu", str(fake_ncu(tmp_path)), "--timeout", "3") == 2
    assert "ran past its 3 s limit: killed" in refused_with(capsys)
    assert not processes_with(f"FAKE_NCU_PIDFILE={pidfile}")


# ---- ncu's CSV, read strictly ---------------------------------------------------------------------------------


def launch(kernel: str = "gp_bw_pattern_v4", ranges: tuple[str, ...] = (), passes: float = 1.0, **counted) -> dict:
    values = {m: 0.0 for m in METRICS} | {"dram__bytes_read.sum": 1000.0 * passes} | counted
    return {"pid": 7, "tid": 70, "kernel": kernel, "grid": [8, 1, 1], "block": [256, 1, 1], "ranges": list(ranges),
            "counters": values}  # fmt: skip


def test_the_raw_page_is_read_with_its_quotes_separators_units_and_nvtx_stack() -> None:
    text = "==PROF== Connected to process 7\n" + table(
        [launch(ranges=("outer: a range", "gpuprobe:bandwidth.goodput.v4.stride32"), passes=2345.0)], list(METRICS)
    )
    assert '"2,345,000"' in text  # a number as ncu prints it
    (counted,) = parse_raw(text, "ncu.csv")
    assert counted.ranges == ("outer: a range", "gpuprobe:bandwidth.goodput.v4.stride32")
    assert counted.innermost("gpuprobe:") == "gpuprobe:bandwidth.goodput.v4.stride32"
    assert (counted.kernel, counted.blocks, counted.threads) == ("gp_bw_pattern_v4", 8, 256)
    assert counted.values["dram__bytes_read.sum"] == 2_345_000.0


@pytest.mark.parametrize(
    ("change", "said"),
    [
        (lambda t: t.replace('"byte"', '"Mbyte"', 1), "unit 'Mbyte', not byte"),
        (lambda t: t.replace('"2,345,000"', '"2.345 M"'), "is not a number"),
        (lambda t: t.replace("Push/Pop_Range", "Ranges"), "NVTX push/pop column"),
        (lambda t: t.replace('"(8, 1, 1)"', '"8"'), "is not (x, y, z)"),
        (lambda t: t.split("\n", 2)[0] + "\n" + t.split("\n", 3)[3], "should hold the units"),
        (lambda t: "just words\n", "no header row"),
        (lambda t: t.replace('"70  ""<default domain>:', '"70 <default domain>:'), "neither a thread id nor quoted"),
    ],
)
def test_anything_else_is_malformed(change, said) -> None:
    text = table([launch(ranges=("gpuprobe:p.q",), passes=2345.0)], list(METRICS))
    parse_raw(text, "ncu.csv")  # as ncu writes it
    with pytest.raises(MalformedCsv, match=re.escape(said)):
        parse_raw(change(text), "ncu.csv")


def test_a_metric_ncu_could_not_collect_is_not_a_number() -> None:
    text = table([launch()], list(METRICS)).replace('"1,000"', '"n/a"')
    assert parse_raw(text, "ncu.csv")[0].values["dram__bytes_read.sum"] is None


# ---- whose launches, and which are claimed --------------------------------------------------------------------


def counted_launches(*launches: dict) -> list[Counted]:
    return parse_raw(table(list(launches), list(METRICS)), "ncu.csv")


def test_the_claimed_launches_are_the_last_of_the_probes_kernel_in_its_innermost_range() -> None:
    mine, other = "gpuprobe:bandwidth.goodput.v4.stride16", "gpuprobe:bandwidth.goodput.v4.stride32"
    counted = counted_launches(
        launch(ranges=(mine,)),  # the untimed first launch
        launch(ranges=(mine,), kernel="gp_bw_read_cg_v16", passes=9.0),  # a flush: another kernel
        launch(ranges=(mine,), passes=1.0),
        launch(ranges=(mine,), passes=4.0),
        launch(ranges=(mine, other), passes=5.0),  # the sweep measuring stride 32 under stride 16's call
    )
    claims = {"passes": [1.0, 4.0], "useful_bytes": [10.0, 40.0], "moved_bytes": [1000.0, 4000.0]}
    outcome = ProbeOutcome("ok", series={"launch": claims})
    facts = {f.id: f for f in witness_facts("bandwidth.goodput.v4.stride16", "gp_bw_pattern_v4", outcome, counted)}
    assert facts["witness.bandwidth.goodput.v4.stride16.launches"].value == 2.0
    assert facts["witness.bandwidth.goodput.v4.stride16.dram_read_bytes"].value == pytest.approx(1.0)
    assert "ID 3" in facts["witness.bandwidth.goodput.v4.stride16.dram_read_bytes"].detail
    stride32 = witness_facts("bandwidth.goodput.v4.stride32", "gp_bw_pattern_v4", outcome, counted)
    assert stride32[0].value is None and "counted 1 such launches, the probe claims 2" in stride32[0].detail


def test_the_claim_held_to_the_counter_is_the_full_runs_a_pass() -> None:
    mine = ("gpuprobe:p.q",)
    counted = counted_launches(launch(ranges=mine, passes=1.0), launch(ranges=mine, passes=4.0))  # 1000 a pass
    witnessed = ProbeOutcome("ok", series={"launch": {"passes": [1.0, 4.0], "moved_bytes": [0.0, 0.0]}})
    full = ProbeOutcome("ok", series={"launch": {"passes": [1.0, 9.0], "moved_bytes": [500.0, 4500.0]}})
    facts = {f.id: f for f in witness_facts("p.q", "gp_bw_pattern_v4", witnessed, counted, full)}
    assert facts["witness.p.q.dram_read_bytes.claimed"].value == 1500.0  # 500 a pass, 3 passes apart
    assert facts["witness.p.q.dram_read_bytes"].value == pytest.approx(2.0)  # no granule here: the full run's
    claiming = ProbeOutcome("ok", series={"launch": {"passes": [1.0, 4.0], "moved_bytes": [1000.0, 4000.0]}})
    (ratio,) = [f for f in witness_facts("p.q", "gp_bw_pattern_v4", claiming, counted, full) if f.unit == "fraction"]
    assert (
        ratio.value == pytest.approx(2.0) and "the full run's 500 bytes a pass; the witness run's 3,000" in ratio.detail
    )
    alone = [f for f in witness_facts("p.q", "gp_bw_pattern_v4", claiming, counted) if f.unit == "fraction"]
    assert alone[0].value == pytest.approx(1.0) and "the full run recorded none" in alone[0].detail


def test_launches_of_another_shape_than_claimed_are_not_the_probes() -> None:
    claims = {"passes": [1.0, 4.0], "blocks": [16.0, 16.0], "threads": [256.0, 256.0]}
    assert isinstance(pair(claims, counted_launches(launch(), launch())), str)  # 8 blocks ran, 16 claimed


def test_a_failed_or_unclaiming_probe_is_not_witnessed_and_says_why() -> None:
    failed = witness_facts("p.q", "k", ProbeOutcome("failed", "the sums differ"), [])
    quiet = witness_facts("p.q", "k", ProbeOutcome("ok"), [])
    assert [f.id for f in failed + quiet] == ["witness.p.q.launches"] * 2
    assert "ended failed: the sums differ" in failed[0].detail and "series 'launch'" in quiet[0].detail


# ---- the measuring process marks each probe ------------------------------------------------------------------


class RangedGpu(FaultyGpu):
    """A simulated GPU that notes the NVTX range each kernel launched in."""

    def __init__(self, **options) -> None:
        super().__init__(**options)
        self.open: list[str] = []
        self.seen: list[tuple[str, tuple[str, ...]]] = []

    @contextlib.contextmanager
    def nvtx_range(self, name: str):
        self.open.append(name)
        try:
            yield
        finally:
            self.open.pop()

    def _launch(self, kernel, grid, block, args, shared_bytes, cooperative) -> float:
        self.seen.append((kernel, tuple(self.open)))
        return super()._launch(kernel, grid, block, args, shared_bytes, cooperative)


def test_each_probe_is_measured_inside_its_own_range_and_the_snapshots_outside() -> None:
    gpu = RangedGpu(noise=0.0)
    out = gpu.alloc(16)

    def probe() -> Measured:
        gpu.launch(CLOCK_KERNEL, 1, 1, [np.uint64(10), out])
        return Measured("toy.probe", ProbeOutcome("ok"))

    ConditionRecorder(gpu, ptx_parameters(), clock_usable=True).measure("toy.probe", probe)
    ranges = [ranges for _, ranges in gpu.seen]
    assert ranges.count(("gpuprobe:toy.probe",)) == 1 and ranges.count(()) == len(ranges) - 1 > 0
    assert not gpu.open


def test_a_probe_that_fails_its_check_leaves_no_range_open() -> None:
    gpu = RangedGpu(noise=0.0)

    def failing() -> Measured:
        raise ProbeFailure("the sums differ")

    measured = ConditionRecorder(gpu, ptx_parameters(), clock_usable=True).measure("toy.probe", failing)
    assert measured.outcome.status == "failed" and not gpu.open


def test_ncu_wraps_the_measuring_process_counting_the_witnessed_kernels_alone_as_the_run_left_the_gpu() -> None:
    command = ncu_module.profile_command(Path("ncu"), Path("log.csv"), ["gp_b", "gp_a", "gp_b"], ["python3", "-m", "x"])
    options = dict(itertools.pairwise(command[1:-3]))  # each option and what follows it
    assert command[-3:] == ["python3", "-m", "x"]  # the one runner, wrapped: not replaced
    assert options["--kernel-name"] == "regex:^(gp_a|gp_b)$"
    assert {k: options[k] for k in ("--target-processes", "--clock-control", "--cache-control", "--page")} == {
        "--target-processes": "all", "--clock-control": "none", "--cache-control": "none", "--page": "raw"}  # fmt: skip
    assert "--nvtx" in command and options["--metrics"].split(",") == list(METRICS)


@pytest.mark.parametrize("family", list(WITNESSED))
def test_a_witnessed_family_is_measured_at_its_own_settings_one_sample_each(family: str) -> None:
    """Its shapes as the full run's, each of its ``Stopping`` values (a sweep's too) one sample."""
    defaults, once = BY_NAME[family].settings(), one_sample(BY_NAME[family])
    stops = [f.name for f in dataclasses.fields(once) if isinstance(getattr(defaults, f.name), Stopping)]
    assert stops and all(getattr(once, name) == ONE_SAMPLE for name in stops)
    assert dataclasses.replace(once, **{name: getattr(defaults, name) for name in stops}) == defaults
