"""The multi-GPU families in a whole measured run, in a child process, against a simulated node: the
measuring process opens the node from its launcher, the per-pair facts are judged by the model's
patterns, and the fact sheet draws the matrices. (The collectives through their own process: the smoke
run on GPU 0 of two in tests/test_session.py; a process that sees one GPU measures no link, and its run
is complete all the same: that file's whole run on one simulated GPU.)"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpuprobe.core.results import load
from gpuprobe.measure import session
from gpuprobe.measure.plan import run_plan
from gpuprobe.simulated.gpu import SimulatedGpu, fast_settings, suite_options
from tests.helpers.devices import H200
from tests.test_session import POLICY, measure_only

FAMILIES = ("p2p", "collectives")


def _run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, node: dict, model: str | None = None):
    measure_only(monkeypatch, "p2p")  # the collectives through their process: the smoke run in test_session.py
    options = suite_options(name="Simulated GPU", peer_node=node)
    launcher = session.LauncherSpec("gpuprobe.simulated.gpu:open_simulated", 0, options)
    device = SimulatedGpu(**options).device()
    return session.run_suite(device, launcher, tmp_path, model, settings=fast_settings(), policy=POLICY)


def test_a_node_is_measured_pair_by_pair_and_its_slow_link_warned(tmp_path: Path, monkeypatch) -> None:
    results = _run(tmp_path, monkeypatch, {"count": 3, "slow": [[2, 0, 0.25]]}, model="h200")
    assert {o.status for n, o in results.probes.items() if n.startswith("p2p.")} == {"ok"}
    assert not results.partial and results.families["p2p"]["ended"] == "measured"
    verdicts = {f.id: f.verdict for f in results.facts}
    assert verdicts["p2p.ce.fraction_of_peers.2_0"] == verdicts["p2p.ce.bandwidth.2_0"] == "warn"
    assert verdicts["p2p.ce.bandwidth.0_2"] == "pass" and verdicts["p2p.nvlinks.2"] == "pass"
    assert results.fact("p2p.ce.bandwidth.2_0").expectation["low"] == 300.0  # the pattern's, from the file
    on_disk = load(tmp_path / "results.json")
    assert on_disk.fact("p2p.latency.1_2").unit == "cycle"
    assert "## GPU-to-GPU links" in (tmp_path / "factsheet.md").read_text()
    assert (tmp_path / "p2p_matrices.png").read_bytes()[:4] == b"\x89PNG"


def test_a_device_that_sees_one_gpu_plans_no_process_for_the_multi_gpu_families() -> None:
    one, eight = (run_plan(dataclasses.replace(H200, visible_gpus=n)) for n in (1, 8))
    seconds = {row.family: row.seconds for row in one.families}
    assert seconds["p2p"] == seconds["collectives"] == 0.0
    others = {row.family: row.seconds for row in eight.families if row.family not in FAMILIES}
    assert others == {family: s for family, s in seconds.items() if family not in FAMILIES}
    assert {row.family: row.seconds for row in eight.families}["p2p"] > 3.0
