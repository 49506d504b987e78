"""A whole measured run against the simulated GPU: build, check, measure, judge, write."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuprobe import session
from gpuprobe.check import CheckResult
from gpuprobe.results import load
from tests.fake_gpu import FAST, fake_gpu, opener


def test_a_run_writes_complete_results_fact_sheet_and_plot(tmp_path: Path) -> None:
    gpu = fake_gpu(name="Simulated GPU")
    results = session.run_suite(gpu.device(), opener(gpu), tmp_path, settings=FAST)
    assert not results.partial
    on_disk = load(tmp_path / "results.json")
    assert on_disk.partial is False
    assert {f.id for f in on_disk.facts} >= {
        "latency.l1",
        "latency.l2",
        "latency.dram",
        "capacity.l2",
        "device.sm_count",
    }
    assert (tmp_path / "factsheet.md").read_text().startswith("# gpuprobe fact sheet: Simulated GPU")
    assert (tmp_path / "latency_vs_footprint.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert results.clocks["sm_mhz_during_chases"] == pytest.approx(gpu.mhz, rel=0.01)
    assert results.clocks["sm_mhz_measured"] == pytest.approx(gpu.mhz, rel=0.02)


def test_an_unknown_gpu_is_measured_in_discovery_mode(tmp_path: Path) -> None:
    gpu = fake_gpu(name="Simulated GPU")
    results = session.run_suite(gpu.device(), opener(gpu), tmp_path, settings=FAST)
    measured = [f for f in results.facts if f.id.startswith(("latency.", "capacity."))]
    assert measured and all(f.verdict == "report" for f in measured)
    invariants = [f for f in results.facts if f.id.startswith("invariant.")]
    assert invariants and all(f.verdict == "pass" for f in invariants), [f.detail for f in invariants]
    assert results.clocks["model"].startswith("unknown")


def test_a_known_gpu_is_judged_against_its_model(tmp_path: Path) -> None:
    gpu = fake_gpu()  # named like an H100 SXM, but with a tiny simulated L2
    results = session.run_suite(gpu.device(), opener(gpu), tmp_path, settings=FAST)
    verdicts = {f.id: f.verdict for f in results.facts}
    assert verdicts["latency.l2"] == "pass"
    assert verdicts["device.l2_bytes"] == "fail"  # 512 KiB is not an H100's L2: the assert catches it
    assert "OUTSIDE" in results.fact("device.l2_bytes").detail


def test_a_forced_model_replaces_detection(tmp_path: Path) -> None:
    gpu = fake_gpu(name="Simulated GPU")
    results = session.run_suite(gpu.device(), opener(gpu), tmp_path, forced_model="a100", settings=FAST)
    assert results.clocks["model"] == "a100"
    assert results.fact("device.sm_count").verdict == "fail"  # 132 SMs is not an A100


def test_a_probe_whose_contract_fails_reports_the_violation_and_no_number(tmp_path: Path, monkeypatch) -> None:
    real = session.check_probe

    def check(probe, module):
        if probe.name == "memory.latency.global_ca":
            return CheckResult(probe.name, module.arch.name, "violated", "rule 'count' violated: found 31")
        return real(probe, module)

    monkeypatch.setattr(session, "check_probe", check)
    gpu = fake_gpu(name="Simulated GPU")
    results = session.run_suite(gpu.device(), opener(gpu), tmp_path, settings=FAST)
    outcome = results.probes["memory.latency.global_ca"]
    assert outcome.status == "violated" and "found 31" in outcome.detail
    assert results.fact("latency.l1") is None
    assert "gp_chase_global_ca" not in gpu.launches
    assert results.fact("latency.l2") is not None


def test_an_interrupted_run_keeps_what_it_measured(tmp_path: Path) -> None:
    gpu = fake_gpu(name="Simulated GPU")
    real_launch = gpu.launch

    def launch(kernel, *args, **kwargs):
        if kernel == "gp_chase_global_cg":
            raise KeyboardInterrupt
        return real_launch(kernel, *args, **kwargs)

    gpu.launch = launch
    with pytest.raises(KeyboardInterrupt):
        session.run_suite(gpu.device(), opener(gpu), tmp_path, settings=FAST)
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["partial"] is True
    ids = {f["id"] for f in data["facts"]}
    assert {"latency.shared", "latency.l1", "capacity.l1"} <= ids
    assert "latency.l2_far" not in ids
