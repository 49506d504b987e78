"""The facts index beside each results file (gpuprobe.core.results_index) as ``gpuprobe fleet`` reads it: the same
report from the indexes as from the files, every index that does not hold its file as it is now passed over, and
the fleet's cheaper reading (no detection, files side by side, the worst deviations picked over arrays) changing
nothing it reports."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuprobe.core.results import Device, Fact, ProbeOutcome, Provenance, Results, load, save
from gpuprobe.core.results_index import INDEX_SCHEMA_VERSION, index_path, projection
from gpuprobe.fleet import aggregate as fleet
from gpuprobe.fleet.reading import changes_text, read_indexed, read_judged
from gpuprobe.judge.expectations import Expectation
from gpuprobe.judge.verdicts import recorded
from tests.helpers.real_fleet import gpu_folder, write_real_fleet

REAL_GPUS = 4  # GPU 2 planted off its peers (tests/helpers/real_fleet.py)
DEVICE = Device(name="Test GPU", cc="9.0", arch="sm_90", sm_count=132, l2_bytes=50 * 2**20)


@pytest.fixture(scope="module")
def real_fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Four GPUs' real-size results files (the real H200 run, varied), each with the index its save wrote."""
    root = tmp_path_factory.mktemp("real-fleet")
    write_real_fleet(root, REAL_GPUS)
    return root


def small_results() -> Results:
    """A made-up run (test data, never a measurement): one fact with samples, one probe with a series."""
    fact = Fact("latency.l2", 261.0, "cycle", (260.5, 261.5), [260.5, 261.0, 261.5], {"ns": 150.0}, "p", detail="why")
    return Results(DEVICE, [fact], {"p": ProbeOutcome("ok", "fine", {"curve": {"x": [1.0]}})}, partial=False)


def test_save_writes_beside_the_results_an_index_bound_to_the_bytes_it_wrote(tmp_path: Path) -> None:
    path = tmp_path / "results.json"
    save(small_results(), path)
    data, index = path.read_bytes(), json.loads(index_path(path).read_text())
    assert index["results"] == {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    assert index["record"] == projection(json.loads(data))
    assert index["record"]["probes"] == {"p": {"status": "ok"}}  # the series, the detail left out
    assert {"detail", "detection"}.isdisjoint(index["record"]["facts"][0]) and index["record"]["facts"][0]["samples"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["results.index.json", "results.json"]  # no temporary left


def test_an_index_is_named_after_its_results_file() -> None:
    assert index_path(Path("n/results.json")) == Path("n/results.index.json")
    assert index_path(Path("n/smoke-results.json")) == Path("n/smoke-results.index.json")
    assert index_path(Path("n/run")) == Path("n/run.index.json")


def test_the_fleet_report_from_the_indexes_is_the_report_from_the_files(real_fleet: Path, tmp_path: Path) -> None:
    """Every format, from the real H200 run's facts (its invariants, its verdicts judged otherwise now): the index
    holds what the report needs."""
    indexed = shutil.copytree(real_fleet, tmp_path / "indexed")
    in_full = shutil.copytree(real_fleet, tmp_path / "in_full", ignore=shutil.ignore_patterns("*.index.json"))
    assert all(read_indexed(path) is not None for path in indexed.glob("*/results.json"))
    from_indexes, from_files = fleet.aggregate_paths([indexed]), fleet.aggregate_paths([in_full])
    for fmt in fleet.FORMATS:  # the folders' names are as long: the tables' columns too
        assert fleet.render(from_indexes, fmt) == fleet.render(from_files, fmt).replace("in_full", "indexed")
    assert [Path(s.gpu.file).parent.name for s in from_indexes.outliers] == [gpu_folder(2)]
    assert not from_indexes.skipped and any("stored verdict(s) differ" in note for note in from_indexes.notes)


def as_read_in_full(path: Path) -> fleet.FileSummary:
    """``path`` summarised as every reader reads it, whole (:func:`read_judged`)."""
    results, changes = read_judged(path)
    return fleet.summarize(str(path), results, changes_text(changes))


def _edit(change: Callable[[dict[str, Any]], None]) -> Callable[[Path], None]:
    """Damage that rewrites the index's JSON."""

    def damage(path: Path) -> None:
        index = json.loads(index_path(path).read_text())
        change(index)
        index_path(path).write_text(json.dumps(index))

    return damage


def _truncated(path: Path) -> None:
    index = index_path(path).read_bytes()
    index_path(path).write_bytes(index[: len(index) // 2])


def _results_changed(path: Path) -> None:
    """The results file rewritten after its index (by hand, by a gpuprobe that writes none): its L2 latency moved."""
    data = json.loads(path.read_text())
    fact = next(f for f in data["facts"] if f["id"] == "latency.l2")
    fact.update(value=fact["value"] * 1.5, ci=[b * 1.5 for b in fact["ci"]], samples=[s * 1.5 for s in fact["samples"]],
                converted={unit: v * 1.5 for unit, v in fact["converted"].items()})  # fmt: skip
    path.write_text(json.dumps(data))


def _a_folder(path: Path) -> None:
    index_path(path).unlink()
    index_path(path).mkdir()


def _a_pipe(path: Path) -> None:
    index_path(path).unlink()
    os.mkfifo(index_path(path))  # reading one would wait for a writer for ever


DAMAGE: dict[str, Callable[[Path], None]] = {
    "missing": lambda path: index_path(path).unlink(),
    "truncated": _truncated,
    "another file's hash": _edit(lambda index: index["results"].update(sha256="0" * 64)),
    "another file's size": _edit(lambda index: index["results"].update(bytes=index["results"]["bytes"] + 1)),
    "no binding": _edit(lambda index: index.pop("results")),
    "another schema": _edit(lambda index: index.update(schema="gpuprobe.core.results")),
    "a newer version": _edit(lambda index: index.update(schema_version=INDEX_SCHEMA_VERSION + 1)),
    "a record refused": _edit(lambda index: index["record"]["facts"][0].update(value="fast")),
    "no record": _edit(lambda index: index.update(record=[])),
    "not a table": lambda path: index_path(path).write_text("[1, 2]"),
    "not UTF-8": lambda path: index_path(path).write_bytes(b'{"schema": "\xff"}'),
    "nested too deep": lambda path: index_path(path).write_text("[" * 100_000),
    "a folder": _a_folder,
    "a pipe": _a_pipe,
    "the results changed after it": _results_changed,
}


@pytest.mark.parametrize("damage", DAMAGE.values(), ids=DAMAGE.keys())
def test_an_index_that_does_not_hold_its_file_as_it_is_now_is_passed_over(
    tmp_path: Path, damage: Callable[[Path], None]
) -> None:
    path = tmp_path / "node-gpu0" / "results.json"
    save(small_results(), path)
    assert read_indexed(path) is not None
    damage(path)
    assert read_indexed(path) is None
    summary = fleet.read_summary(str(path))
    assert summary == as_read_in_full(path)  # the file read whole, as it is now
    l2 = next(value for fact_id, _, value, _ in summary.facts if fact_id == "latency.l2")
    assert l2 == (391.5 if damage is _results_changed else 261.0)


def test_an_index_is_never_a_gpu_of_the_fleet_even_alone(tmp_path: Path) -> None:
    save(small_results(), tmp_path / "node-gpu0" / "results.json")
    (tmp_path / "gone-gpu1").mkdir()
    shutil.copy(index_path(tmp_path / "node-gpu0" / "results.json"), tmp_path / "gone-gpu1" / "results.index.json")
    assert fleet.discover([tmp_path]) == ([str(tmp_path / "node-gpu0" / "results.json")], [])


def test_a_file_without_an_index_is_read_whole_and_counts_the_same(real_fleet: Path, tmp_path: Path) -> None:
    path = shutil.copytree(real_fleet / gpu_folder(1), tmp_path / gpu_folder(1)) / "results.json"
    index_path(path).unlink()
    with_index = fleet.read_summary(str(real_fleet / gpu_folder(1) / "results.json"))
    assert dataclasses.replace(with_index, gpu=dataclasses.replace(with_index.gpu, file=str(path))) == (
        fleet.read_summary(str(path))
    )


def test_a_fact_read_without_detection_is_the_same_fact_without_it() -> None:
    record = {"id": "latency.l2", "value": 261.0, "unit": "cycle", "samples": [260.0, 261.0, 262.5]}
    detected = Fact.from_dict(record)
    assert detected.detection is not None
    assert Fact.from_dict(record, detect=False) == dataclasses.replace(detected, detection=None)


def test_an_expectation_recorded_is_its_fields_but_the_fact_id() -> None:
    expectation = Expectation("latency.l2", 200.0, None, "cycle", "warn", "a citation", "a note")
    assert recorded(expectation) == {k: v for k, v in dataclasses.asdict(expectation).items() if k != "fact_id"}


def test_files_read_side_by_side_keep_their_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each process reads every jobs-th file; the summaries come back in the files' order (the processes
    themselves are gpuprobe.core.workers' map_in_processes, here run in place)."""
    paths = []
    for k in range(7):
        save(dataclasses.replace(small_results(), device=dataclasses.replace(DEVICE, uuid=f"GPU-{k}")),
             tmp_path / f"node-gpu{k}" / "results.json")  # fmt: skip
        paths.append(str(tmp_path / f"node-gpu{k}" / "results.json"))
    paths.insert(3, str(tmp_path / "absent.json"))
    jobs: list[int] = []
    monkeypatch.setattr(fleet, "PARALLEL_FROM", 1)
    monkeypatch.setattr(
        fleet, "map_in_processes", lambda f, chunks: jobs.append(len(chunks)) or [f(*c) for c in chunks]
    )
    summaries, skipped = fleet.load_summaries(paths, jobs=3)
    assert jobs == [3] and [s.gpu.uuid for s in summaries] == [f"GPU-{k}" for k in range(7)]
    assert [s.path for s in skipped] == [str(tmp_path / "absent.json")]
    assert (summaries, skipped) == fleet.load_summaries(paths, jobs=1)


def _worst_one_by_one(report: fleet.FleetReport, summaries: list[fleet.FileSummary]) -> list[list[fleet.Deviation]]:
    """Each GPU's worst deviations the plain way: every deviation made, sorted by |z| then id, the kept cut."""
    medians = {(m.model, f.fact_id, f.unit): f for m in report.models for f in m.facts}
    worst = []
    for summary in summaries:
        deviations = []
        for fact_id, unit, value, _ in summary.facts:
            stats = medians[(summary.gpu.model, fact_id, unit)]
            if stats.judged:
                z = (value - stats.median) / stats.scale if stats.scale else 0.0
                deviations.append(fleet.Deviation(fact_id, unit, value, stats.median, z))
        deviations.sort(key=lambda d: (-abs(d.z), d.fact_id))  # stable: a tie keeps the (id, unit) order
        beyond = sum(abs(d.z) > report.threshold for d in deviations)
        worst.append(deviations[: max(beyond, fleet.FACTS_PER_GPU)])
    return worst


def test_the_worst_deviations_picked_over_arrays_are_those_sorted_one_by_one() -> None:
    """Ties in |z| (whole-number values), facts in two units, two models, GPUs missing facts, one GPU alone."""
    rng = np.random.default_rng(5)
    summaries = []
    for k in range(40):
        facts = [(f"f.{i}", unit, float(rng.integers(95, 106)), None) for i in range(8) for unit in ("a", "b")]
        kept = tuple(f for f in facts if rng.random() > 0.2)
        gpu = fleet.GpuIdentity(f"gpu{k}.json", "odd" if k == 39 else ("A" if k % 3 else "B"))
        summaries.append(fleet.FileSummary(gpu, kept, Provenance()))
    report = fleet.aggregate_summaries(summaries, threshold=1.0, min_deviation_pct=0.0)
    by_file = {s.gpu.file: s.deviations for s in report.ranking}
    assert [by_file[s.gpu.file] for s in summaries] == _worst_one_by_one(report, summaries)
    assert any(len(d) > fleet.FACTS_PER_GPU for d in by_file.values()) and not by_file["gpu39.json"]


def test_the_real_run_reads_the_same_from_its_index_as_whole(real_fleet: Path) -> None:
    """The Results a fleet judges: every fact's value, interval, samples and verdict as the whole file gives them."""
    path = real_fleet / gpu_folder(3) / "results.json"
    from_index, whole = read_indexed(path), load(path, detect=False)
    assert from_index is not None and len(from_index.facts) == len(whole.facts) > 500
    fields = ("id", "value", "unit", "ci", "samples", "converted", "verdict", "expectation", "stopped")
    for ours, theirs in zip(from_index.facts, whole.facts, strict=True):
        assert all(getattr(ours, name) == getattr(theirs, name) for name in fields), ours.id
    assert (from_index.device, from_index.clocks, from_index.environment, from_index.build) == (
        whole.device, whole.clocks, whole.environment, whole.build
    )  # fmt: skip
    assert {name: p.status for name, p in from_index.probes.items()} == {n: p.status for n, p in whole.probes.items()}
