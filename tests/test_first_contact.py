"""The first-contact page: per family what the smoke run found, the machine as found, and each failure's flight."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuprobe.core.results import Device, Fact, ProbeOutcome, Results, load, save
from gpuprobe.families.catalog import BY_NAME, probes_by_family
from gpuprobe.output.first_contact import OUTCOMES, family_rows, render_first_contact, verdict_line

DEVICE = Device("NVIDIA H200", "9.0", "sm_90a", 132, 60 * 2**20, driver="580.159", cuda_runtime="13.0")
HUNG_CALL = {"n": 7, "call": "launch", "kernel": "gp_gs_grid", "grid": 132, "block": 256, "elapsed_ms": None}

SMOKE_PROBES = probes_by_family(smoke=True)


def smoke_results() -> Results:
    results = Results(DEVICE, stage="smoke", partial=False)
    results.build = {"arch": "sm_90a", "cubin": "/c/x.cubin", "cubin_sha256": "ab" * 32, "toolkit": "ptxas V13.0.88"}
    results.environment = {
        "device_record": {"power_limit_w": 700.0, "ecc_mode": "enabled"},
        "software": {"cupy": "14.2"},
    }
    for family in ("memory", "grid_sync", "launch", "wgmma"):
        results.families[family] = {"planned_s": 5.0, "actual_s": 4.2, "probes": 1, "ended": "measured"}
    for name in BY_NAME["memory"].smoke.probes:
        results.probes[name] = ProbeOutcome("ok")
    results.facts.append(Fact("device.sm_clock", 1980.0, "MHz", probe="memory.clock"))
    (grid,) = BY_NAME["grid_sync"].smoke.probes[:1]
    results.probes[grid] = ProbeOutcome("timeout", f"{grid} ran past its 15 s limit", flight=[HUNG_CALL])
    for name in BY_NAME["launch"].smoke.probes:
        results.probes[name] = ProbeOutcome("crashed", "CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access")
    for name in BY_NAME["wgmma"].smoke.probes:
        results.probes[name] = ProbeOutcome("failed", "wgmma D[3, 5] = 1.5, NumPy says 2.5")
    return results


def test_each_family_shows_its_worst_probe_and_what_happened() -> None:
    rows = {row[0]: row for row in family_rows(smoke_results(), SMOKE_PROBES)}
    assert rows["memory"][2] == OUTCOMES["ok"] and "device.sm_clock 1980 MHz" in rows["memory"][4]
    assert rows["grid_sync"][2] == "timed out" and "15 s limit" in rows["grid_sync"][4]
    assert rows["launch"][2] == "crashed" and "CUDA_ERROR_ILLEGAL_ADDRESS" in rows["launch"][4]
    assert rows["wgmma"][2] == "self-check failed" and "NumPy says 2.5" in rows["wgmma"][4]
    assert rows["memory"][3] == "5.0 / 4.2"
    line = verdict_line(list(rows.values()))
    assert line.startswith("**1 of 4 families ran, passed their self-checks, every value within physics.**")


def test_the_page_records_the_machine_and_the_call_that_never_returned(tmp_path: Path) -> None:
    page = render_first_contact(smoke_results(), SMOKE_PROBES)
    assert page.startswith("# gpuprobe first contact: NVIDIA H200\n")
    assert "SHA-256 `" + "ab" * 32 + "`" in page and "ptxas V13.0.88" in page
    assert "| power_limit_w | 700.0 |" in page and "| cupy | 14.2 |" in page
    assert "#7 launch kernel=gp_gs_grid grid=132 block=256 -> NEVER RETURNED" in page
    save(smoke_results(), tmp_path / "results.json")  # and it round-trips through the results file
    assert render_first_contact(load(tmp_path / "results.json"), SMOKE_PROBES) == page


def test_a_probe_the_arch_cannot_run_is_skipped_with_the_reason() -> None:
    results = Results(Device("Tesla T4", "7.5", "sm_75", 40, 4 * 2**20), stage="smoke")
    results.families["wgmma"] = {"planned_s": 1.0, "actual_s": 0.0, "probes": 0, "ended": "measured"}
    (row,) = family_rows(results, SMOKE_PROBES)
    assert row[2] == "skipped: arch lacks it" and "sm_75 lacks what it needs" in row[4]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"stage": "warm"}, "unknown stage 'warm'"),
        ({"probes": {"x": {"status": "ok", "flight": "not a list"}}}, "flight record that is not a list"),
        ({"probes": {"x": {"status": "not_a_status"}}}, "unknown status"),
    ],
)
def test_a_results_file_with_a_bad_new_field_is_a_one_line_error(tmp_path: Path, change: dict, message: str) -> None:
    path = tmp_path / "results.json"
    save(smoke_results(), path)
    data = {**json.loads(path.read_text()), **change}
    path.write_text(json.dumps(data))
    with pytest.raises(Exception, match=message):
        load(path)


def test_a_version_1_results_file_still_loads(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    save(Results(DEVICE, [Fact("device.sm_count", 132.0, "count")]), path)
    data = json.loads(path.read_text())
    for key in ("stage", "environment", "build", "families"):
        del data[key]
    path.write_text(json.dumps({**data, "schema_version": 1}))
    old = load(path)
    assert (old.stage, old.environment, old.build, old.families) == ("full", {}, {}, {})
