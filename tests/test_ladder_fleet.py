"""``gpuprobe fleet`` names the GPU whose library rate (the ladder's cuBLAS) is low while its tensor cores'
instruction rates (wgmma, mma.sync) are normal: the GPU that passes every diagnostic and still trains slowly. A GPU
whose tensor cores are slow too is an outlier, not that finding."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from gpuprobe.fleet import aggregate as fleet
from tests.test_fleet import H100, results_dict, write_json

# fact id -> (unit, typical value on an H100-like part)
RATES = {
    "library.cublas.bf16.best.fraction_of_peak": ("fraction", 0.80),
    "library.cublas.bf16.reference.tflops": ("TFLOP/s", 700.0),
    "tensor.wgmma.bf16.m64n256k16.ss.tflops": ("TFLOP/s", 900.0),
    "tensor.wgmma.bf16.m64n256k16.ss.fraction_of_peak": ("fraction", 0.96),
    "tensor.mma_sync.bf16.m16n8k16.tflops": ("TFLOP/s", 600.0),
    "latency.l2": ("cycle", 262.0),
}
LIBRARY = ("library.cublas.bf16.best.fraction_of_peak", "library.cublas.bf16.reference.tflops")
INSTRUCTIONS = tuple(i for i in RATES if i.startswith("tensor."))


def _fleet(root: Path, gpus: int = 12, slow: dict[int, tuple[str, ...]] | None = None) -> list[Path]:
    """``gpus`` GPUs within 1 % of each other; GPU k of ``slow`` has the named facts 15 % low."""
    rng = np.random.default_rng(3)
    paths = []
    for k in range(gpus):
        values = {i: base * (1 + rng.uniform(-0.01, 0.01)) for i, (_, base) in RATES.items()}
        values.update({i: values[i] * 0.85 for i in (slow or {}).get(k, ())})
        data = results_dict(H100, f"GPU-node-{k}", values)
        for fact in data["facts"]:
            fact["unit"] = RATES[fact["id"]][0]
        paths.append(write_json(root / f"node-gpu{k}" / "results.json", data))
    return paths


def test_a_gpu_whose_library_is_slow_while_its_tensor_cores_are_normal_is_named(tmp_path: Path) -> None:
    paths = _fleet(tmp_path, slow={3: LIBRARY, 7: LIBRARY + INSTRUCTIONS})
    report = fleet.aggregate_paths([tmp_path], jobs=1)
    assert report.exit_status == 1 and {s.gpu.file for s in report.outliers} == {str(paths[3]), str(paths[7])}
    [gap] = report.library_gaps  # GPU 7's tensor cores are slow too: an outlier, not a library gap
    assert gap.gpu.file == str(paths[3]) and gap.gpu.hostname == "node" and gap.gpu.gpu_index == 3
    assert {d.fact_id for d in gap.library} == set(LIBRARY) and all(d.pct < -10 for d in gap.library)
    assert gap.instructions == len(INSTRUCTIONS) and abs(gap.instruction.z) <= report.threshold
    text = fleet.render(report, "text")
    assert "library slower than its tensor cores (1)" in text and "(node gpu 3): library rate low" in text
    assert "library slower than its tensor cores (1)" in fleet.render(report, "md").lower()
    [entry] = json.loads(fleet.render(report, "json"))["library_gaps"]
    assert entry["file"] == str(paths[3]) and entry["instruction_facts"] == len(INSTRUCTIONS)
    assert {f["id"] for f in entry["library_facts"]} == set(LIBRARY)


def test_a_fleet_without_one_names_none(tmp_path: Path) -> None:
    _fleet(tmp_path, slow={2: INSTRUCTIONS})  # slow tensor cores, the library with them: no gap
    report = fleet.aggregate_paths([tmp_path], jobs=1)
    assert report.library_gaps == [] and "library slower" not in fleet.render(report, "text")
    clean = fleet.aggregate_paths([_fleet(tmp_path / "clean")[0].parent.parent], jobs=1)
    assert clean.library_gaps == [] and clean.exit_status == 0


def test_without_instruction_rates_a_slow_library_is_an_outlier_and_no_gap(tmp_path: Path) -> None:
    """A fleet measured without the wgmma and mma families cannot say its tensor cores are normal."""
    paths = _fleet(tmp_path, slow={4: LIBRARY})
    for path in paths:
        data = json.loads(path.read_text())
        data["facts"] = [f for f in data["facts"] if not f["id"].startswith("tensor.")]
        path.write_text(json.dumps(data))
    report = fleet.aggregate_paths([tmp_path], jobs=1)
    assert report.exit_status == 1 and report.library_gaps == []
