"""Fleets: many GPUs' results aggregated by model with robust outliers, one run per GPU on a node
(pinning and launching, with the GPU count and processes faked), and the Slurm recipe."""

from __future__ import annotations

import argparse
import copy
import dataclasses
import json
import os
import re
import stat
import subprocess
import sys
from pathlib import Path
from statistics import NormalDist
from typing import Any

import numpy as np
import pytest

from gpuprobe import cli, pytest_plugin
from gpuprobe.cli import fleet as fleet_cli
from gpuprobe.core.detection import quantity_kind
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.results import SCHEMA, SCHEMA_VERSION, Results, load
from gpuprobe.fleet import aggregate as fleet
from gpuprobe.fleet import node_runs, spread
from gpuprobe.runner.device import placement
from gpuprobe.simulated.gpu import CLOCKED_RUN_SD, DEVICE_RUN_SD, HOST_RUN_SD

REPO = Path(__file__).resolve().parent.parent
H200_RUN = REPO / "reports" / "nvidia-h200" / "results.json"  # a real H200's 272 facts, as measured
SBATCH = REPO / "docs" / "slurm" / "gpuprobe-fleet.sbatch"

H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-80GB"
# fact id -> (unit, typical value on an H100-like part)
FACTS = {
    "latency.l1": ("cycle", 33.0),
    "latency.l2": ("cycle", 262.0),
    "latency.dram": ("cycle", 650.0),
    "bandwidth.dram_read": ("GB/s", 3000.0),
    "device.sm_clock": ("MHz", 1755.0),
    "device.sm_count": ("count", 132.0),
    "invariant.latency_order.l1_below_l2": ("bool", 1.0),
}
EXACT = {"device.sm_count", "invariant.latency_order.l1_below_l2"}


CODE = {"version": "0.1.0", "commit": "c" * 40, "dirty": False}  # one gpuprobe measured the fleet


def results_dict(name: str, uuid: str, values: dict[str, float], partial: bool = False) -> dict[str, Any]:
    """A minimal valid results file with these fact values, measured by one gpuprobe (``CODE``)."""
    facts = [
        {"id": fact_id, "value": value, "unit": FACTS.get(fact_id, ("cycle", 0.0))[0], "verdict": "report"}
        for fact_id, value in values.items()
    ]
    return {
        "schema": SCHEMA,
        "schema_version": SCHEMA_VERSION,
        "created": "2025-01-01T00:00:00+00:00",
        "partial": partial,
        "device": {"name": name, "cc": "9.0", "arch": "sm_90", "sm_count": 132, "l2_bytes": 52428800, "uuid": uuid},
        "clocks": {},
        "build": {"gpuprobe": CODE},
        "probes": {},
        "facts": facts,
    }  # fmt: skip


def write_json(path: Path, data: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def gpu_values(rng: np.random.Generator, scale: float = 1.0, spread: float = 0.01) -> dict[str, float]:
    """Typical values times ``scale``, each off by a bounded uniform noise (so no clean GPU is ever an outlier)."""
    return {
        fact_id: base * scale if fact_id in EXACT else base * scale * (1 + rng.uniform(-spread, spread))
        for fact_id, (_, base) in FACTS.items()
    }


def make_fleet(
    root: Path, gpus: int, name: str = H100, host: str = "node", scale: float = 1.0, seed: int = 0
) -> list[Path]:
    """``root/<host>-gpu<K>/results.json`` for ``gpus`` healthy GPUs of one model."""
    rng = np.random.default_rng(seed)
    paths = []
    for k in range(gpus):
        data = results_dict(name, f"GPU-{host}-{k}", gpu_values(rng, scale))
        paths.append(write_json(root / f"{host}-gpu{k}" / "results.json", data))
    return paths


def plant(path: Path, **changes: float) -> None:
    data = json.loads(path.read_text())
    for fact in data["facts"]:
        if fact["id"] in changes:
            fact["value"] = changes[fact["id"]]
    path.write_text(json.dumps(data))


# ---------------------------------------------------------------- statistics ---


def test_robust_z_matches_the_definition() -> None:
    values = np.array([10.0, 11.0, 12.0, 13.0, 100.0])
    got = spread.robust_z(values)
    assert got.median == 12.0 and got.mad == 1.0 and got.source == spread.SPREAD
    assert np.allclose(got.z, 0.6745 * (values - 12.0) / 1.0)
    floored = spread.robust_z(values, noise=3.0, practical_fraction=0.01)  # a noise floor above MAD / 0.6745
    assert floored.source == spread.NOISE and np.allclose(floored.z, (values - 12.0) / 3.0)
    practical = spread.robust_z(values, noise=0.5, practical_fraction=0.5)  # 50 % of 12 over the threshold
    assert practical.source == spread.PRACTICAL and practical.scale == 6.0


def test_an_exact_fact_counts_any_difference_with_a_finite_z(tmp_path: Path) -> None:
    got = spread.robust_z(np.array([132.0] * 9 + [114.0]))
    assert got.mad == 0 and got.source == spread.EXACT and got.scale == pytest.approx(0.132)
    assert got.z[-1] == pytest.approx(-18 / 0.132)
    assert np.all(spread.robust_z(np.full(5, 7.0)).z == 0)  # all equal: nobody is an outlier
    zero = spread.robust_z(np.array([0.0, 0.0, 0.0, 0.0, 5.0]))  # median 0: the floor is relative to the spread
    assert np.isfinite(zero.z).all() and zero.z[-1] > 100

    paths = make_fleet(tmp_path, 10)
    plant(paths[4], **{"device.sm_count": 131.0})  # one SM fewer: 0.8 %, under the practical floor, yet real
    report = fleet.aggregate_paths([tmp_path])
    assert [s.gpu.gpu_index for s in report.outliers] == [4]
    assert report.outliers[0].deviations[0].fact_id == "device.sm_count"
    sm_count = next(f for f in report.models[0].facts if f.fact_id == "device.sm_count")
    assert sm_count.source == spread.EXACT and "0.10 % exact" in fleet.render(report, "text")


def test_the_noise_floor_needs_more_standard_deviations_the_more_values_a_report_judges() -> None:
    few, many = spread.noise_quantile(3 * 272), spread.noise_quantile(4000 * 550)
    assert 3.5 < few < many < 6.0
    # noise alone beyond the quantile, anywhere among the values judged: FLEET_ALPHA (Bonferroni, two-sided)
    assert 2 * (1 - NormalDist().cdf(few)) * 3 * 272 == pytest.approx(spread.FLEET_ALPHA)
    # three GPUs: the median is itself one noisy value, so a deviation from it is noisier than one GPU
    assert spread.noise_floor(1.0, 3, few, 3.5) == pytest.approx((1 + np.pi / 6) ** 0.5 * few / 3.5)


def test_planted_outlier_is_found_and_named_by_file_and_identity(tmp_path: Path) -> None:
    paths = make_fleet(tmp_path / "a", 12, host="nodeA") + make_fleet(tmp_path / "b", 12, host="nodeB", seed=1)
    plant(paths[15], **{"latency.dram": 900.0})  # nodeB-gpu3
    report = fleet.aggregate_paths([tmp_path / "a", tmp_path / "b"], jobs=1)
    assert report.exit_status == 1
    [worst] = report.outliers
    assert worst.gpu.file == str(paths[15])
    gpu = worst.gpu
    assert (gpu.hostname, gpu.gpu_index, gpu.uuid, gpu.model) == ("nodeB", 3, "GPU-nodeB-3", H100)
    top = worst.deviations[0]
    assert top.fact_id == "latency.dram" and top.value == 900.0 and top.z > 3.5
    assert report.ranking[0] is worst
    dram = next(f for f in report.models[0].facts if f.fact_id == "latency.dram")
    assert (dram.count, dram.outliers, dram.maximum) == (24, 1, 900.0)
    text = fleet.render(report, "text")
    assert str(paths[15]) in text and "nodeB" in text and "GPU-nodeB-3" in text
    assert re.search(r"latency\.dram \+38\.\d % z=\+\d+\.\d \(900 vs 65\d\.\d+ cycle\)", text), text


def test_identity_inside_the_file_wins_over_the_directory_name(tmp_path: Path) -> None:
    data = results_dict(H100, "GPU-x", gpu_values(np.random.default_rng(0)))
    results = Results.from_dict(data)
    results.device.hostname = "real-host"  # as it will be once Device carries the placement fields
    results.device.gpu_index = 5
    gpu = fleet.identify(str(tmp_path / "copied-gpu1" / "results.json"), results)
    assert (gpu.hostname, gpu.gpu_index) == ("real-host", 5)
    plain = fleet.identify("anywhere/results.json", Results.from_dict(data))
    assert (plain.hostname, plain.gpu_index) == ("", None)


def test_a_clean_fleet_has_no_outlier_and_exits_0(tmp_path: Path) -> None:
    make_fleet(tmp_path, 40)
    report = fleet.aggregate_paths([tmp_path])
    assert report.exit_status == 0 and not report.outliers and report.gpus == 40
    l2 = next(f for f in report.models[0].facts if f.fact_id == "latency.l2")
    assert l2.minimum <= l2.p5 <= l2.median <= l2.p95 <= l2.maximum and l2.mad > 0


# ---------------------------------------------------------------- identical GPUs, ordinary noise ---


@pytest.fixture(scope="module")
def h200() -> Results:
    return load(H200_RUN)


def run_to_run_sd(fact_id: str, unit: str) -> float:
    """How much the simulated GPU moves a quantity between runs (gpuprobe/simulated/gpu.py): cycles 0.3 %, other
    device quantities (rates at a clock, ratios) 0.5 %, what the host takes part in 1 %, exact results and the
    knees of its cache model (fitted sizes) not at all."""
    kind = quantity_kind(fact_id, unit)
    if kind in ("exact", "fitted"):
        return 0.0
    if kind == "host":
        return HOST_RUN_SD
    return CLOCKED_RUN_SD if unit == "cycle" else DEVICE_RUN_SD


def identical_gpus(template: Results, count: int, seed: int) -> list[tuple[str, Results]]:
    """``count`` runs of GPUs identical to ``template``'s, each fact moved as another run moves it: by the
    simulated GPU's run-to-run spread, and by its own measured noise (its CI as 1.96 standard errors)."""
    rng = np.random.default_rng(seed)
    gpus = []
    for k in range(count):
        results = copy.copy(template)
        results.device = dataclasses.replace(template.device, uuid=f"GPU-{k}")
        results.facts = [copy.copy(f) for f in template.facts]
        for fact in results.facts:
            sd = run_to_run_sd(fact.id, fact.unit)
            if fact.value is None or not sd:
                continue
            standard_error = 0.0 if fact.ci is None else (fact.ci[1] - fact.ci[0]) / 2 / 1.96
            moved = fact.value * (1 + sd * rng.standard_normal()) + standard_error * rng.standard_normal()
            if fact.ci is not None:
                fact.ci = (fact.ci[0] + moved - fact.value, fact.ci[1] + moved - fact.value)
            fact.value = moved
        gpus.append((f"node-gpu{k}/results.json", results))
    return gpus


def scaled(gpu: tuple[str, Results], fact_id: str, factor: float) -> tuple[str, Results]:
    name, results = gpu
    changed = copy.copy(results)
    changed.facts = [copy.copy(f) for f in results.facts]
    fact = next(f for f in changed.facts if f.id == fact_id)
    fact.value = None if fact.value is None else fact.value * factor
    return name, changed


@pytest.mark.parametrize(("count", "seed"), [(3, 0), (3, 1), (12, 2), (40, 3)])
def test_identical_gpus_with_ordinary_noise_have_no_outlier(h200: Results, count: int, seed: int) -> None:
    report = fleet.aggregate(identical_gpus(h200, count, seed))
    assert report.exit_status == 0 and not report.outliers, [s.deviations[:2] for s in report.outliers]
    assert report.models[0].gpus == count and len(report.models[0].facts) > 250


def test_the_trials_three_h200s_a_1_7_percent_apart_are_no_outliers(h200: Results) -> None:
    """The newcomer trial: two GPUs agreeing exactly, the third 1.7 % off on one latency, scored z = 12.5 and
    exit 1 when the spread was floored at 0.1 % of the median."""
    same = identical_gpus(h200, 1, seed=4)[0]
    gpus = [("a.json", same[1]), ("b.json", same[1]), scaled(("c.json", same[1]), "warp.tile.reduce.latency.16", 1.017)]
    report = fleet.aggregate(gpus)
    assert report.exit_status == 0
    [top] = [d for d in report.ranking[0].deviations if d.fact_id == "warp.tile.reduce.latency.16"]
    assert top.pct == pytest.approx(1.7) and abs(top.z) < 3.5
    five = fleet.aggregate([*gpus[:2], scaled(("c.json", same[1]), "warp.tile.reduce.latency.16", 1.05)])
    assert [s.gpu.file for s in five.outliers] == ["c.json"] and five.exit_status == 1


@pytest.mark.parametrize(
    ("fact_id", "factor"),
    [("latency.l2", 1.05), ("latency.dram", 1.05), ("device.sm_clock", 0.95), ("warp.shfl.bfly.throughput", 0.95)],
)
def test_one_fact_five_percent_off_names_its_gpu(h200: Results, fact_id: str, factor: float) -> None:
    gpus = identical_gpus(h200, 8, seed=5)
    gpus[6] = scaled(gpus[6], fact_id, factor)
    report = fleet.aggregate(gpus)
    assert [s.gpu.file for s in report.outliers] == ["node-gpu6/results.json"] and report.exit_status == 1
    worst = report.outliers[0].deviations[0]
    assert worst.fact_id == fact_id and abs(worst.pct) == pytest.approx(5.0, abs=1.5)
    assert fact_id in fleet.render(report, "text")
    assert fleet.aggregate(gpus, min_deviation_pct=8.0).exit_status == 0  # under a larger practical threshold


def test_the_practical_threshold_and_the_noise_floor_are_stated(h200: Results) -> None:
    report = fleet.aggregate(identical_gpus(h200, 3, seed=0))
    text = fleet.render(report, "text")
    assert "the practical floor: 3 % of the median / 3.5, so an outlier is more than 3 % off (--min-deviation)" in text
    assert re.search(r"noise alone then makes an outlier in 1 % of reports on identical GPUs \(Bonferroni over "
                     r"the \d+ values judged\)", text)  # fmt: skip
    data = json.loads(fleet.render(report, "json"))
    assert data["min_deviation_pct"] == 3.0 and data["values_judged"] == 3 * len(report.models[0].facts)
    assert {f["scale_from"] for f in data["models"][0]["facts"]} <= set(spread.SOURCES)
    assert "- the practical floor: 3 % of the median" in fleet.render(report, "md")


def test_notes_stay_short_however_many_facts(h200: Results) -> None:
    """The trial's notes line named all 552 fact ids in 21,000 characters."""
    gpus = [(f"gpu{k}.json", h200) for k in range(3)]  # three identical files: every MAD is 0
    again = copy.copy(h200)
    again.facts = [dataclasses.replace(f, unit="ns") if f.unit == "cycle" else f for f in h200.facts]
    report = fleet.aggregate([*gpus, ("again.json", again), ("twice.json", h200)])
    assert report.notes and all(len(note) < 300 for note in report.notes), report.notes
    assert any(re.search(r"\d+ fact\(s\) come in several units \(.+, .+, .+ and \d+ more\)", n) for n in report.notes)
    assert max(len(line) for line in fleet.render(report, "text").splitlines()[-len(report.notes) :]) < 300


def test_models_are_compared_only_with_their_own_kind(tmp_path: Path) -> None:
    make_fleet(tmp_path / "h", 10, H100)
    make_fleet(tmp_path / "a", 6, A100, host="anode", scale=0.7, seed=3)  # 30% off: outliers if pooled
    report = fleet.aggregate_paths([tmp_path])
    assert [(m.model, m.gpus) for m in report.models] == [(H100, 10), (A100, 6)]
    assert report.exit_status == 0
    assert "2 GPU model(s)" in fleet.render(report, "text")


def test_too_few_gpus_of_a_model_are_shown_but_not_judged(tmp_path: Path) -> None:
    make_fleet(tmp_path, 2, A100)
    plant(tmp_path / "node-gpu1" / "results.json", **{"latency.l2": 5000.0})
    report = fleet.aggregate_paths([tmp_path])
    assert report.exit_status == 0 and not report.models[0].facts[0].judged
    assert any("only 2 GPU(s)" in n for n in report.notes)


def test_unreadable_files_are_skipped_with_the_reason(tmp_path: Path) -> None:
    make_fleet(tmp_path, 5)
    (tmp_path / "junk.json").write_text("{not json")
    write_json(tmp_path / "other.json", {"hello": 1})
    newer = results_dict(H100, "GPU-new", {})
    newer["schema_version"] = SCHEMA_VERSION + 1
    write_json(tmp_path / "sub" / "newer.json", newer)
    (tmp_path / "notes.txt").write_text("not a .json: never read")
    report = fleet.aggregate_paths([tmp_path, tmp_path / "missing"])
    reasons = {Path(s.path).name: s.reason for s in report.skipped}
    assert set(reasons) == {"junk.json", "other.json", "newer.json", "missing"}
    assert reasons["junk.json"].startswith("corrupt results file (not JSON")
    assert reasons["other.json"] == "not a gpuprobe results file"
    assert "newer than this gpuprobe reads" in reasons["newer.json"]
    assert reasons["missing"] == "no such file or directory"
    assert report.gpus == 5 and "skipped files (4)" in fleet.render(report, "text")


def test_a_folder_that_cannot_be_listed_is_skipped_with_the_reason(tmp_path: Path, monkeypatch) -> None:
    make_fleet(tmp_path, 5)
    locked = tmp_path / "node-locked"
    locked.mkdir()
    listing = os.scandir

    def scandir(path):  # as a folder without read permission answers (the tests may run as root, whom none stops)
        if Path(path) == locked:
            raise PermissionError(13, "Permission denied", str(path))
        return listing(path)

    monkeypatch.setattr(os, "scandir", scandir)
    report = fleet.aggregate_paths([tmp_path])
    assert [(s.path, s.reason) for s in report.skipped] == [
        (str(locked), "cannot list this folder (Permission denied)")
    ]
    assert report.gpus == 5


def test_no_readable_file_is_an_error(tmp_path: Path) -> None:
    (tmp_path / "junk.json").write_text("[]")
    with pytest.raises(GpuprobeError, match="no readable gpuprobe results"):
        fleet.aggregate_paths([tmp_path])
    (tmp_path / "empty").mkdir()
    with pytest.raises(GpuprobeError, match=r"no \.json files found"):
        fleet.aggregate_paths([tmp_path / "empty"])
    with pytest.raises(GpuprobeError, match="missing: no such file or directory"):
        fleet.aggregate_paths([tmp_path / "missing"])


def test_duplicates_partials_and_unit_changes_are_noted(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    pairs = [(f"r{k}.json", Results.from_dict(results_dict(H100, f"GPU-{k}", gpu_values(rng)))) for k in range(5)]
    pairs.append(("again.json", Results.from_dict(results_dict(H100, "GPU-0", gpu_values(rng), partial=True))))
    ns = Results.from_dict(results_dict(H100, "GPU-9", gpu_values(rng)))
    ns.facts[1].unit = "ns"
    pairs.append(("ns.json", ns))
    report = fleet.aggregate(pairs)
    notes = " | ".join(report.notes)
    assert report.warnings == [
        "ONE BOARD IN SEVERAL FILES: GPU-0 in r0.json, again.json: measured more than once, a GPU counts more than once"
    ]
    assert fleet.render(report, "text").startswith("WARNING: ONE BOARD IN SEVERAL FILES: GPU-0 in r0.json")
    assert "1 results file(s) are partial" in notes
    assert "1 fact(s) come in several units (latency.l2); each unit on its own" in notes
    assert "again.json (partial)" in fleet.render(report, "text")


def _with(data: dict[str, Any], **top: Any) -> Results:
    return Results.from_dict({**data, **top})


def test_the_first_lines_say_what_the_files_differ_in_besides_their_gpus() -> None:
    """Another driver or another gpuprobe may move a GPU's facts as much as the GPU does: said first. A smoke
    run's facts share the full run's ids, not its settings: its files are a group of their own."""
    rng = np.random.default_rng(3)
    files = [(f"r{k}.json", results_dict(H100, f"GPU-{k}", gpu_values(rng))) for k in range(4)]
    newer = {**CODE, "commit": "e" * 40}
    pairs = [
        *((name, _with(data)) for name, data in files[:2]),
        ("newer.json", _with(files[2][1], build={"gpuprobe": newer})),
        ("driver.json", _with(files[3][1], environment={"device_record": {"driver": "580.65.06"}})),
        ("smoke.json", _with(results_dict(H100, "GPU-0", gpu_values(rng)), stage="smoke")),
    ]
    report = fleet.aggregate(pairs)
    assert [line.split(":")[0] for line in report.warnings] == ["DRIVERS DIFFER", "GPUPROBE CODE DIFFERS",
                                                                "STAGES DIFFER"]  # fmt: skip
    assert report.warnings[0] == (
        "DRIVERS DIFFER: CUDA version not recorded on 4, 580.65.06 (CUDA version not recorded) on 1 of 5 files: "
        "a GPU's difference may be its driver's"
    )
    assert f"gpuprobe 0.1.0 at {'c' * 12} on 4, gpuprobe 0.1.0 at {'e' * 12} on 1 of 5 files" in report.warnings[1]
    assert sorted(m.model for m in report.models) == [H100, f"{H100} (smoke stage)"]  # GPU-0 twice, not in one group
    text = fleet.render(report, "text").splitlines()
    assert [line.split(":")[0] for line in text[:4]] == ["WARNING"] * 3 + ["gpuprobe fleet"]
    assert "on 1 host(s) (5 file(s) name their host without a machine id)" in text[3]
    assert json.loads(fleet.render(report, "json"))["warnings"] == report.warnings
    assert fleet.render(report, "md").startswith("> **WARNING: DRIVERS DIFFER: ")


def test_files_from_before_gpuprobe_recorded_its_code_say_so() -> None:
    old = {k: v for k, v in results_dict(H100, "GPU-0", {"latency.l2": 262.0}).items() if k != "build"}
    report = fleet.aggregate([("a.json", Results.from_dict(old)), ("b.json", Results.from_dict({**old, "device": {
        **old["device"], "uuid": "GPU-1"}}))])  # fmt: skip
    assert report.warnings == [
        "GPUPROBE CODE NOT RECORDED in the 2 files: cannot tell whether one gpuprobe measured them"
    ]


# ---------------------------------------------------------------- speed ---------


def realistic_template() -> tuple[list[str], list[str]]:
    """A results file shaped like a real run (~40 KB: curves, NVML readings, raw samples), as text
    pieces around the placeholders ``name``, ``uuid`` and one per fact value."""
    rng = np.random.default_rng(0)
    nvml = {f"reading_{i}": float(rng.uniform(0, 1000)) for i in range(20)}
    curve = {col: rng.uniform(0, 1e3, 63).tolist() for col in ("footprint_bytes", "latency_cycles", "latency_ns",
                                                                "ci_low", "ci_high", "sm_mhz", "sm_id")}  # fmt: skip
    conditions = {"sm_mhz_before": 1755.0, "sm_mhz_after": 1750.0, "nvml_before": nvml, "nvml_after": nvml}
    probes = {
        f"memory.probe{i}": {"status": "ok", "detail": "", "series": {"curve": curve} if i < 2 else {},
                             "conditions": conditions}
        for i in range(6)
    }  # fmt: skip
    data = results_dict("@@name@@", "@@uuid@@", {})
    data["probes"] = probes
    data["clocks"] = {"sm_mhz_measured": 1755.0, "samples": [1755.0] * 3, "nvml_before": nvml}
    data["facts"] = [
        {"id": fact_id, "value": f"@@{fact_id}@@", "unit": unit, "ci": [base * 0.99, base * 1.01],
         "samples": (base * (1 + rng.uniform(-0.01, 0.01, 40))).tolist(), "converted": {"ns": base / 1.755},
         "probe": "memory.probe0", "expectation": None, "verdict": "report", "detail": f"{fact_id} measured"}
        for fact_id, (unit, base) in FACTS.items()
    ]  # fmt: skip
    text = json.dumps(data, indent=1)
    pieces, keys = [], []
    for chunk in text.split('"@@')[1:]:
        key, rest = chunk.split('@@"', 1)
        keys.append(key)
        pieces.append(rest)
    return [text.split('"@@')[0], *pieces], keys


def write_fleet(root: Path, count: int, outlier: int) -> Path:
    """``count`` realistic results files (H100s and every fifth an A100), eight per node folder, the GPU
    ``outlier`` with an L2 latency far from its peers; returns that GPU's file."""
    pieces, keys = realistic_template()
    rng = np.random.default_rng(1)
    for k in range(count):
        values = gpu_values(rng)
        if k == outlier:
            values["latency.l2"] = 400.0
        fill = {"name": json.dumps(H100 if k % 5 else A100), "uuid": json.dumps(f"GPU-{k}"),
                **{f: repr(v) for f, v in values.items()}}  # fmt: skip
        text = pieces[0] + "".join(fill[key] + piece for key, piece in zip(keys, pieces[1:], strict=True))
        directory = root / f"node{k // 8:03d}"  # a directory per node, not per GPU: mkdir is slow here (~1 ms)
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"gpu{k % 8}.json").write_text(text, encoding="utf-8")
    assert 30_000 < len(text) < 60_000
    return root / f"node{outlier // 8:03d}" / f"gpu{outlier % 8}.json"


def test_a_fleet_of_realistic_files_aggregates_and_names_its_one_outlier(tmp_path: Path) -> None:
    """How fast 5,000 such files aggregate is a benchmark (benchmarks/test_fleet_speed.py), not a test."""
    odd = write_fleet(tmp_path / "fleet", 400, outlier=321)
    report = fleet.aggregate_paths([tmp_path / "fleet"])
    assert report.gpus == 400 and not report.skipped and len(report.models) == 2
    assert [s.gpu.file for s in report.outliers] == [str(odd)]
    assert all(fleet.render(report, fmt) for fmt in fleet.FORMATS)


# ---------------------------------------------------------------- rendering and the command ---


@pytest.fixture
def mixed(tmp_path: Path) -> Path:
    paths = make_fleet(tmp_path, 8, H100) + make_fleet(tmp_path, 4, A100 + " | odd", host="anode", scale=0.7)
    plant(paths[2], **{"latency.l2": 400.0, "latency.dram": 10.0})
    (tmp_path / "junk.json").write_text("nope")
    return tmp_path


def test_render_formats_are_well_formed(mixed: Path) -> None:
    report = fleet.aggregate_paths([mixed])
    data = json.loads(fleet.render(report, "json"))
    assert data["schema"] == fleet.FLEET_SCHEMA and data["exit_status"] == 1 and data["gpus"] == 12
    assert data["model_count"] == 2 and data["outlier_count"] == 1 and len(data["ranking"]) == 12
    assert {f["id"] for f in data["ranking"][0]["worst_facts"]} >= {"latency.l2", "latency.dram"}
    assert data["skipped"] == [{"path": str(mixed / "junk.json"), "reason": data["skipped"][0]["reason"]}]

    md = fleet.render(report, "md")
    tables = [line for line in md.splitlines() if line.startswith("|")]
    assert tables and all(line.endswith("|") for line in tables)
    for block in md.split("\n\n"):
        rows = [line for line in block.splitlines() if line.startswith("|")]
        cells = {len(row.replace("\\|", "").split("|")) for row in rows}
        assert len(cells) <= 1, block  # every row of a table has as many cells as its header
    assert "A100-SXM4-80GB \\| odd" in md

    text = fleet.render(report, "text")
    assert text.startswith("gpuprobe fleet: 12 GPU(s)") and "worst GPUs (10 of 12 shown; 1 beyond" in text
    with pytest.raises(GpuprobeError, match="unknown format"):
        fleet.render(report, "xml")


def tiny_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuprobe")
    commands = parser.add_subparsers(dest="command", required=True)
    fleet_cli.add_commands(commands)
    return parser


def run_command(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str]:
    args = tiny_parser().parse_args(argv)
    code = args.func(args)
    return code, capsys.readouterr().out


def test_exit_status_through_add_commands(tmp_path: Path, mixed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out = run_command(capsys, "fleet", str(mixed))
    assert code == 1 and "worst GPUs" in out
    code, out = run_command(capsys, "fleet", str(mixed), "--threshold", "1e9", "--format", "json")
    assert code == 0 and json.loads(out)["exit_status"] == 0
    make_fleet(tmp_path / "clean", 6)
    assert run_command(capsys, "fleet", str(tmp_path / "clean"), "--format", "md")[0] == 0
    code, out = run_command(capsys, "fleet", str(mixed), "--min-deviation", "1e6", "--format", "json")
    assert json.loads(out)["min_deviation_pct"] == 1e6  # nothing measured is a million % off, but judged again
    worst = json.loads(out)["ranking"][0]["worst_facts"][0]  # the planted GPU fails an invariant: exact, any % counts
    assert code == 1 and worst["id"] == "invariant.latency_order.l2_below_dram" and worst["value"] == 0.0
    for option, value in (("--threshold", "-1"), ("--min-deviation", "-1"), ("--min-deviation", "nan")):
        with pytest.raises(SystemExit) as bad:
            tiny_parser().parse_args(["fleet", str(mixed), option, value])
        assert bad.value.code == 2


def test_module_main_reports_user_errors_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["fleet", str(tmp_path / "nothing")]) == 2
    err = capsys.readouterr().err
    assert err.startswith("gpuprobe: error: fleet: no readable gpuprobe results") and err.count("\n") == 1


def test_cli_fleet_end_to_end(mixed: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from gpuprobe.cli import main

    assert main(["fleet", str(mixed), "--format", "json"]) == 1
    assert json.loads(capsys.readouterr().out)["outlier_count"] == 1
    assert main(["fleet", str(mixed / "missing")]) == 2
    assert "no readable gpuprobe results" in capsys.readouterr().err


# ---------------------------------------------------------------- placement and xdist pinning ---


def test_placement_records_host_index_and_visible_devices() -> None:
    assert placement(0, {}, "h") == {"hostname": "h", "gpu_index": 0, "cuda_visible_devices": None}
    assert placement(1, {"CUDA_VISIBLE_DEVICES": "4,6"}, "h")["gpu_index"] == 6
    assert placement(0, {"CUDA_VISIBLE_DEVICES": "GPU-abc"}, "h")["gpu_index"] is None
    pinned = placement(0, {"CUDA_VISIBLE_DEVICES": "0", "GPUPROBE_GPU_INDEX": "3"}, "h")
    assert pinned == {"hostname": "h", "gpu_index": 3, "cuda_visible_devices": "0"}
    assert placement()["hostname"]


class FakeConfig:
    """What pin_xdist_worker uses of a pytest.Config."""

    def __init__(self, worker: str | None = None, device: int = 0) -> None:
        self.stash = pytest.Stash()
        self._options = {"gpuprobe_device": device}
        if worker is not None:  # xdist sets this on its workers' configs, before pytest_configure
            self.workerinput = {"workerid": worker, "workercount": 4}

    def getoption(self, name: str, default: Any = None) -> Any:
        return self._options.get(name, default)


@pytest.mark.parametrize(
    ("worker", "inherited", "visible", "index"),
    [("gw2", None, "2", 2), ("gw1", "4,5,6", "5", 5), ("gw1", "GPU-a,GPU-b", "GPU-b", 1), ("gw3", "0,1", "", 3)],
)
def test_xdist_worker_k_is_pinned_to_gpu_k(worker: str, inherited: str | None, visible: str, index: int) -> None:
    env = {"PYTEST_XDIST_WORKER": worker, "PYTEST_XDIST_WORKER_COUNT": "4"}
    if inherited is not None:
        env["CUDA_VISIBLE_DEVICES"] = inherited
    config = FakeConfig(worker)
    pin = pytest_plugin.pin_xdist_worker(config, env)
    assert pin is not None and (pin.visible, pin.gpu_index) == (visible, index)
    assert env["CUDA_VISIBLE_DEVICES"] == visible and env["GPUPROBE_GPU_INDEX"] == str(index)
    assert env["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert pytest_plugin.worker_results_dir(config, Path("out")) == Path("out") / f"{pin.hostname}-gpu{index}"
    reason = pytest_plugin.worker_gpu_reason(config, "no GPU: the CUDA driver reports 0 devices")
    if visible:
        assert reason.endswith(f"(xdist worker {worker} is pinned to CUDA_VISIBLE_DEVICES={visible})")
        assert pytest_plugin.worker_gpu_reason(config, None) is None
    else:
        assert reason == f"no GPU: xdist worker {worker} has no GPU of its own (CUDA_VISIBLE_DEVICES listed 2)"


def test_outside_xdist_nothing_is_pinned() -> None:
    env = {"PYTEST_XDIST_WORKER": "gw1"}  # inherited by a pytest that a worker's test started: not a worker
    config = FakeConfig()
    assert pytest_plugin.pin_xdist_worker(config, env) is None and env == {"PYTEST_XDIST_WORKER": "gw1"}
    assert pytest_plugin.worker_results_dir(config, Path("out")) == Path("out")
    assert pytest_plugin.worker_gpu_reason(config, "why") == "why"
    with pytest.raises(pytest.UsageError, match="--gpuprobe-device"):
        pytest_plugin.pin_xdist_worker(FakeConfig("gw0", device=1), {})
    with pytest.raises(pytest.UsageError, match="cannot pin"):
        pytest_plugin.pin_xdist_worker(FakeConfig("ssh-1"), {})


XDIST_CONFTEST = """
pytest_plugins = ["gpuprobe.pytest_plugin"]  # where gpuprobe is not installed: as the checkout's conftest.py
"""

XDIST_TESTS = """
import json, os, pathlib
import pytest

@pytest.mark.parametrize("n", range(3))
def test_record(n, request):
    from gpuprobe.pytest_plugin import PIN
    pin = request.config.stash[PIN]
    out = pathlib.Path(os.environ["RECORD_DIR"]) / f"{pin.worker}-{n}.json"
    out.write_text(json.dumps({"visible": os.environ["CUDA_VISIBLE_DEVICES"], "index": pin.gpu_index}))
"""


def test_real_xdist_each_runs_every_test_once_per_gpu(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(XDIST_CONFTEST)
    (tmp_path / "test_each.py").write_text(XDIST_TESTS)
    path = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "3,5", "RECORD_DIR": str(tmp_path), "PYTHONPATH": path}
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-n", "2", "--dist", "each", str(tmp_path)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    records = {p.stem: json.loads(p.read_text()) for p in tmp_path.glob("gw*.json")}
    assert sorted(records) == [f"gw{w}-{n}" for w in range(2) for n in range(3)]
    assert {r["visible"] for k, r in records.items() if k.startswith("gw0")} == {"3"}
    assert {r["visible"] for k, r in records.items() if k.startswith("gw1")} == {"5"}


# ---------------------------------------------------------------- fleet-run: one pytest per GPU ---


def test_local_gpus_each_exactly_once() -> None:
    assert fleet_cli.local_gpus(None, {}, lambda: 4) == [(0, "0"), (1, "1"), (2, "2"), (3, "3")]
    assert fleet_cli.local_gpus(None, {"CUDA_VISIBLE_DEVICES": "2,7"}, lambda: 8) == [(2, "2"), (7, "7")]
    assert fleet_cli.local_gpus("GPU-a,GPU-b", {}, lambda: 8) == [(0, "GPU-a"), (1, "GPU-b")]
    assert fleet_cli.local_gpus("1,GPU-b", {}, lambda: 8) == [(0, "1"), (1, "GPU-b")]  # positions when they collide
    with pytest.raises(GpuprobeError, match="listed twice"):
        fleet_cli.local_gpus("0,1,0", {}, lambda: 8)
    with pytest.raises(GpuprobeError, match="no GPU to measure"):
        fleet_cli.local_gpus(None, {}, lambda: 0)


def test_pinned_runs_pin_each_pytest_to_its_gpu_and_directory() -> None:
    runs = node_runs.pinned_runs([(0, "0"), (5, "5")], Path("out"), "hostA", "probes", ["-k", "latency"], "py")
    assert [r.out_dir for r in runs] == [Path("out/hostA-gpu0"), Path("out/hostA-gpu5")]
    assert runs[1].command == ("py", "-m", "pytest", "probes", "-p", "no:cacheprovider", "--gpuprobe-out",
                               str(Path("out/hostA-gpu5")), "-k", "latency")  # fmt: skip
    env = node_runs.child_env(runs[1], {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "0,5", "PYTEST_XDIST_WORKER": "gw0"})
    assert env == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "5", "GPUPROBE_GPU_INDEX": "5",
                   "CUDA_DEVICE_ORDER": "PCI_BUS_ID"}  # fmt: skip
    with pytest.raises(GpuprobeError, match="--gpuprobe-device"):
        node_runs.pinned_runs([(0, "0")], Path("out"), "h", pytest_args=["--gpuprobe-device=1"])


class FakeProcess:
    """A child that 'runs' for ``steps`` polls, then exits with ``code`` (writing results first)."""

    def __init__(
        self, run: node_runs.GpuRun, env: dict[str, str], code: int = 0, hang: bool = False, write: bool = True
    ):
        self.run, self.env, self.code, self.hang, self.write = run, env, code, hang, write
        self.steps = 2
        self.pid = -1
        self.killed = False

    def poll(self) -> int | None:
        if self.killed:
            return -9
        self.steps -= 1
        if self.steps > 0 or self.hang:
            return None
        if not self.write:
            return self.code
        index = self.run.out_dir.name.rsplit("-gpu", 1)[1]
        values = {"latency.l2": 900.0 if index == "2" else 262.0 + int(index) * 0.1, "device.sm_count": 132.0}
        write_json(self.run.out_dir / "results.json", results_dict(H100, f"GPU-{index}", values))
        return self.code

    def kill(self) -> None:
        self.killed = True

    def wait(self) -> int:
        return -9


def test_supervise_runs_all_gpus_at_once_and_kills_at_the_time_limit(tmp_path: Path) -> None:
    runs = node_runs.pinned_runs([(0, "0"), (1, "1")], tmp_path, "h")
    started: list[FakeProcess] = []

    def spawn(run: node_runs.GpuRun, env: dict[str, str]) -> FakeProcess:
        started.append(FakeProcess(run, env, hang=run.gpu_index == 1))
        return started[-1]

    outcomes = node_runs.supervise(runs, {}, timeout_s=0.05, spawn=spawn, poll_s=0.02)
    assert [p.env["CUDA_VISIBLE_DEVICES"] for p in started] == ["0", "1"]
    assert [o.returncode for o in outcomes] == [0, None] and started[1].killed
    assert "timed out" in outcomes[1].text()


def test_fleet_run_measures_every_gpu_once_then_reports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    started: list[FakeProcess] = []

    def spawn(run: node_runs.GpuRun, env: dict[str, str]) -> FakeProcess:
        started.append(FakeProcess(run, env, code=1 if run.gpu_index == 3 else 0))
        return started[-1]

    monkeypatch.setattr(fleet_cli, "gpu_count", lambda: 4)
    monkeypatch.setattr(node_runs, "spawn_process", spawn)
    monkeypatch.setattr(fleet_cli.socket, "gethostname", lambda: "nodeX")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    monkeypatch.chdir(REPO)
    out = tmp_path / "out"
    code, text = run_command(capsys, "fleet-run", str(out), "--pytest-args", "-k 'latency or clock'")
    assert code == 1
    assert sorted(p.env["CUDA_VISIBLE_DEVICES"] for p in started) == ["0", "1", "2", "3"]
    assert all(p.run.command[-2:] == ("-k", "latency or clock") for p in started)
    assert "gpu3 (CUDA_VISIBLE_DEVICES=3): pytest exit 1" in text
    assert f"{out / 'nodeX-gpu2' / 'results.json'}" in text and "latency.l2 +243." in text
    with pytest.raises(GpuprobeError, match="already exists"):
        run_command(capsys, "fleet-run", str(out))
    monkeypatch.setattr(node_runs, "spawn_process", lambda run, env: FakeProcess(run, env, write=run.gpu_index != 1))
    code, text = run_command(capsys, "fleet-run", str(out), "--overwrite", "--no-aggregate")
    assert code == 0 and not (out / "nodeX-gpu1" / "results.json").exists()  # no stale numbers left behind


# ---------------------------------------------------------------- Slurm ----------


def test_sbatch_script_parses_and_runs_one_task_per_gpu() -> None:
    text = SBATCH.read_text()
    subprocess.run(["bash", "-n", str(SBATCH)], check=True)
    assert "#SBATCH --gpus-per-task=1" in text
    srun = next(line for line in text.splitlines() if line.lstrip().startswith("srun "))
    assert "--gpus-per-task=1" in srun and "--ntasks-per-node=" in srun
    assert '"$OUT/$(hostname)-gpu$SLURM_LOCALID"' in text
    assert '-m gpuprobe fleet "$OUT"' in text


FAKE_SRUN = """#!/usr/bin/env bash
# Runs the task command twice, as two tasks of one node with one GPU each.
while [[ $1 == -* ]]; do shift; done
for task in 0 1; do
  SLURM_LOCALID=$task SLURM_PROCID=$task CUDA_VISIBLE_DEVICES=$task "$@" || echo "task $task failed" >&2
done
"""

FAKE_PYTHON = """#!/usr/bin/env bash
# 'python -m pytest ... --gpuprobe-out DIR' writes a results file; 'python -m gpuprobe fleet' aggregates.
if [[ $2 == pytest ]]; then
  while [[ $# -gt 0 && $1 != --gpuprobe-out ]]; do shift; done
  exec "$REAL_PYTHON" -c 'import sys, tests.test_fleet as t; t.fake_measurement(sys.argv[1])' "$2"
fi
shift 2
exec "$REAL_PYTHON" -m gpuprobe "$@"
"""


def fake_measurement(out_dir: str) -> None:
    """What a task's pytest leaves behind: its GPU's results file (GPU 1 planted slow)."""
    index = int(os.environ["GPUPROBE_GPU_INDEX"])
    values = {"latency.l2": 262.0 + 1000 * index}
    write_json(Path(out_dir) / "results.json", results_dict(H100, f"GPU-{index}", values))


def test_sbatch_script_end_to_end_with_a_fake_srun(tmp_path: Path) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for name, body in (("srun", FAKE_SRUN), ("python", FAKE_PYTHON)):
        (bin_dir / name).write_text(body)
        (bin_dir / name).chmod(stat.S_IRWXU)
    out = tmp_path / "fleet-out"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "GPUPROBE_PYTHON": str(bin_dir / "python"),
           "REAL_PYTHON": sys.executable, "GPUPROBE_REPO": str(REPO), "GPUPROBE_FLEET_OUT": str(out),
           "SLURM_JOB_ID": "42", "PYTHONPATH": str(REPO)}  # fmt: skip
    run = subprocess.run(["bash", str(SBATCH)], env=env, capture_output=True, text=True, timeout=120, check=False)
    host = subprocess.run(["hostname"], capture_output=True, text=True, check=True).stdout.strip()
    assert sorted(p.name for p in out.iterdir() if p.is_dir()) == [f"{host}-gpu0", f"{host}-gpu1"], run.stderr
    assert (out / "fleet.md").read_text().startswith("# gpuprobe fleet")
    assert run.returncode == 0, run.stdout + run.stderr  # two GPUs: shown, not judged


# ---------------------------------------------------------------- read as every reader reads (issue 25) ---


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="this platform has no named pipes")
def test_a_fifo_and_a_device_named_like_results_are_skipped_with_why_never_waited_on(tmp_path: Path) -> None:
    """The newcomer trial 3's n39: a ``results.json`` that links to /dev/zero and one that is a FIFO vanished
    from the report without a word."""
    make_fleet(tmp_path, 1)
    os.mkfifo(tmp_path / "fifo.json")
    (tmp_path / "zero.json").symlink_to("/dev/zero")
    report = fleet.aggregate_paths([tmp_path, tmp_path / "zero.json"])
    assert {(Path(s.path).name, s.reason) for s in report.skipped} == {
        ("fifo.json", "cannot read (not a regular file)"), ("zero.json", "cannot read (not a regular file)")}
    assert report.gpus == 1


def test_fleet_judges_each_file_again_and_names_the_stored_verdicts_that_differ(tmp_path: Path) -> None:
    """A stored FAIL the value does not earn (n34) is named in a note; a fact given twice in one file (n03, which
    fleet read as its first) is refused by the validator, with the line every reader gives."""
    from tests.test_verdicts import stored_lie

    (tmp_path / "a").mkdir()
    lying = stored_lie(tmp_path / "a", "latency.dram", verdict="fail")
    twice = tmp_path / "b" / "results.json"
    data = json.loads(lying.read_text())
    data["facts"].append({**data["facts"][1], "value": 999.0, "samples": [999.0], "ci": [998.0, 1000.0]})
    write_json(twice, data)
    report = fleet.aggregate_paths([tmp_path])
    assert f"{lying}: 1 stored verdict(s) differ from this gpuprobe's judgement of the values: latency.dram " \
           "(stored fail, judged pass)" in report.notes  # fmt: skip
    assert [(s.path, s.reason) for s in report.skipped] == [
        (str(twice), "invalid results file: fact 'latency.l2' appears twice; cannot tell which one is the measurement")]
