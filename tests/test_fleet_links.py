"""``gpuprobe fleet-links``: 64 nodes' GPU-to-GPU matrices compared link by link, the slow one named."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pytest

from gpuprobe.cli import fleet as fleet_cli
from gpuprobe.cli import main
from gpuprobe.core.results import Device, Fact, Results, save
from gpuprobe.fleet import node_runs
from gpuprobe.fleet.links import DEFAULT_FLOOR, compare_links, links_report, render

GPUS = 8
NVLINK_GBPS, LATENCY_CYCLES = 376.0, 1500.0


def node(name: str, seed: int, slow: dict[tuple[str, int, int], float] | None = None, scale: float = 1.0) -> Results:
    """One node's p2p results: every ordered pair of 8 GPUs, copy engine and latency, 1 % noise between nodes;
    ``slow`` scales a link's bandwidth (or, for "latency", multiplies its cycles)."""
    rng = np.random.default_rng(seed)
    facts = [Fact("p2p.gpus", float(GPUS), "count", probe="p2p.access")]
    for src in range(GPUS):
        for dst in range(GPUS):
            if src == dst:
                continue
            factor = (slow or {}).get(("ce", src, dst), 1.0) * scale
            gbps = NVLINK_GBPS * factor * (1 + 0.01 * rng.standard_normal())
            facts.append(Fact(f"p2p.ce.bandwidth.{src}_{dst}", gbps, "GB/s", probe="p2p.ce"))
            cycles = LATENCY_CYCLES * (slow or {}).get(("latency", src, dst), 1.0) * (1 + 0.01 * rng.standard_normal())
            facts.append(Fact(f"p2p.latency.{src}_{dst}", cycles, "cycle", probe="p2p.latency"))
            facts.append(Fact(f"p2p.ce.fraction_of_peers.{src}_{dst}", 1.0, "fraction", probe="p2p.ce"))
    device = Device("NVIDIA H100 80GB HBM3", "9.0", "sm_90a", 132, 50 << 20, hostname=name, gpu_index=0)
    return Results(device, facts)


def fleet(**odd: dict) -> list[tuple[str, Results]]:
    return [(f"node{i:02d}", node(f"node{i:02d}", i, **odd.get(f"node{i:02d}", {}))) for i in range(64)]


def test_the_one_slow_link_of_64_nodes_is_named_with_its_node() -> None:
    report = compare_links(fleet(node17={"slow": {("ce", 3, 5): 0.3}}))
    assert (report.nodes, report.links) == (64, 64 * 56 * 2)
    assert [(s.link.node, s.link.fact_id) for s in report.slow] == [("node17", "p2p.ce.bandwidth.3_5")]
    slow = report.slow[0]
    assert slow.held_to == "fleet" and slow.fraction == pytest.approx(0.3, rel=0.05)
    assert slow.reference == pytest.approx(NVLINK_GBPS, rel=0.01) and slow.node_median == pytest.approx(
        NVLINK_GBPS, rel=0.01
    )
    assert report.exit_status == 1
    text = render(report)
    assert "node17" in text and "p2p.ce.bandwidth.3_5" in text and "30%" in text


def test_a_slow_latency_and_a_whole_slow_node_are_told_apart_by_the_nodes_own_median() -> None:
    report = compare_links(fleet(node03={"slow": {("latency", 6, 1): 2.0}}, node40={"scale": 0.6}))
    latency = [s for s in report.slow if s.link.kind == "latency"]
    assert [(s.link.node, s.link.src, s.link.dst) for s in latency] == [("node03", 6, 1)]
    assert latency[0].fraction == pytest.approx(0.5, rel=0.05)
    whole = [s for s in report.slow if s.link.node == "node40"]
    assert len(whole) == 56 and all(s.node_median == pytest.approx(0.6 * NVLINK_GBPS, rel=0.02) for s in whole)


def test_a_healthy_fleet_names_nothing_and_a_lone_node_is_held_to_itself() -> None:
    assert compare_links(fleet()).slow == [] and compare_links(fleet()).exit_status == 0
    lone = compare_links([("only", node("only", 1, slow={("ce", 0, 7): 0.5}))])
    assert [(s.link.fact_id, s.held_to) for s in lone.slow] == [("p2p.ce.bandwidth.0_7", "node")]
    assert any("held to its own node's median" in n for n in lone.notes)
    one_gpu = Results(Device("NVIDIA H100 80GB HBM3", "9.0", "sm_90a", 132, 1), [])
    assert "no GPU-to-GPU link measured" in compare_links([("solo.json", one_gpu)]).notes[0]


def test_the_command_reads_a_folder_of_node_results(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for name, results in (
        fleet(node63={"slow": {("ce", 0, 1): 0.2}})[:8] + fleet(node63={"slow": {("ce", 0, 1): 0.2}})[-1:]
    ):
        save(results, tmp_path / name / "results.json")
    (tmp_path / "junk.json").write_text("{not json")
    assert main(["fleet-links", str(tmp_path), "--format", "json"]) == 1
    data = json.loads(capsys.readouterr().out)
    assert data["nodes"] == 9 and [s["fact"] for s in data["slow"]] == ["p2p.ce.bandwidth.0_1"]
    assert data["slow"][0]["node"] == "node63" and data["skipped"][0]["path"].endswith("junk.json")
    assert main(["fleet-links", str(tmp_path), "--format", "md"]) == 1
    assert "| node63 | p2p.ce.bandwidth.0_1 |" in capsys.readouterr().out


@pytest.mark.parametrize(("argv", "message"), [(["--floor", "1.5"], "fraction under 1"), (["--floor", "x"], "number")])
def test_a_bad_floor_is_one_line_and_exit_2(tmp_path: Path, argv: list[str], message: str, capsys) -> None:
    with pytest.raises(SystemExit) as info:
        main(["fleet-links", str(tmp_path), *argv])
    assert info.value.code == 2 and message in capsys.readouterr().err


def test_nothing_readable_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(Exception, match="no readable results file"):
        links_report([tmp_path], DEFAULT_FLOOR)


class _Process:
    """A run that ends at once: the links run writes one node's p2p results with a slow link."""

    def __init__(self, run: node_runs.GpuRun, env: dict[str, str]) -> None:
        self.run, self.env, self.pid = run, env, -1
        if run.out_dir.parent.name == "links":
            save(node(run.out_dir.name, 1, slow={("ce", 2, 6): 0.4}), run.out_dir / "results.json")

    def poll(self) -> int:
        return 0


def test_fleet_run_measures_the_links_once_with_every_gpu_after_the_pinned_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    started: list[_Process] = []
    monkeypatch.setattr(fleet_cli, "gpu_count", lambda: 4)
    monkeypatch.setattr(node_runs, "spawn_process", lambda run, env: started.append(_Process(run, env)) or started[-1])
    monkeypatch.setattr(fleet_cli.socket, "gethostname", lambda: "nodeX")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.chdir(Path(__file__).resolve().parents[1])
    code = main(["fleet-run", str(tmp_path / "out"), "--no-aggregate", "--links", str(tmp_path / "links")])
    text = capsys.readouterr().out
    assert [p.env["CUDA_VISIBLE_DEVICES"] for p in started] == ["0", "1", "2", "3", "0,1,2,3"]  # the links run last
    links = started[-1].run
    assert links.command[3:5] == ("probes/test_p2p.py", "probes/test_collectives.py")
    assert links.out_dir == tmp_path / "links" / "nodeX" and started[-1].env["GPUPROBE_GPU_INDEX"] == "0"
    assert code == 1 and "p2p.ce.bandwidth.2_6" in text and "held to its own node's median" in text
    code = main(["fleet-run", str(tmp_path / "one"), "--no-aggregate", "--gpus", "2", "--links", str(tmp_path / "l")])
    assert code == 0 and "--links needs two or more GPUs" in capsys.readouterr().out


def test_the_slurm_recipe_runs_one_task_per_node_with_all_its_gpus() -> None:
    script = Path(__file__).resolve().parents[1] / "docs" / "slurm" / "gpuprobe-links.sbatch"
    subprocess.run(["bash", "-n", str(script)], check=True)
    text = script.read_text()
    assert "#SBATCH --ntasks-per-node=1" in text and "#SBATCH --gpus-per-node=8" in text
    assert "probes/test_p2p.py probes/test_collectives.py" in text and '"$OUT/$(hostname)"' in text
    assert '-m gpuprobe fleet-links "$OUT"' in text
