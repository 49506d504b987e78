"""A fleet of real-size results files made from the real H200 run, one per GPU, as a fleet's runs write them.

Each file is ``reports/nvidia-h200/results.json`` as one GPU of a fleet would write it: its own node, index, UUID,
serial and machine, each measured fact that varies between runs (not exact results, nor sizes on a grid) moved
by its own 0.3 % of noise, the GPUs of :data:`PLANTED` off their peers; written by
:func:`gpuprobe.core.results.save`, as a run writes it (1.9 MB: the committed file, 3 MB, was indented by an older
writer), its facts index beside it.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np

from gpuprobe.core.detection import quantity_kind
from gpuprobe.core.results import Fact, Results, load, save

REAL_RUN = Path(__file__).resolve().parents[2] / "reports" / "nvidia-h200" / "results.json"
PER_NODE = 8
NOISE = 0.003  # a measured fact's spread between GPUs, relative: below every floor of the z scale
VARY = ("device", "clocked", "host", "ratio")  # the kinds of fact that vary (gpuprobe.core.detection.quantity_kind)
PLANTED = {2: ("latency.l2", 1.12), 77: ("bandwidth.dram_read.v16", 0.85)}  # GPU -> (fact, its factor)


def gpu_folder(k: int) -> str:
    """GPU ``k``'s folder, as ``gpuprobe fleet-run`` names it: ``node009-gpu5``."""
    return f"node{k // PER_NODE:03d}-gpu{k % PER_NODE}"


def _scaled(fact: Fact, factor: float) -> Fact:
    """``fact`` with its value, interval, samples and conversions times ``factor`` (the clock a conversion
    implies unchanged)."""
    return dataclasses.replace(
        fact,
        value=fact.value * factor,
        ci=(fact.ci[0] * factor, fact.ci[1] * factor),
        samples=[s * factor for s in fact.samples],
        converted={unit: v * factor for unit, v in fact.converted.items()},
    )


def _factor(k: int, fact: Fact, rng: np.random.Generator) -> float:
    planted, off = PLANTED.get(k, ("", 1.0))
    return (1.0 + NOISE * rng.standard_normal()) * (off if fact.id == planted else 1.0)


def one_gpu(run: Results, k: int) -> Results:
    """GPU ``k`` of the fleet: ``run`` on its own node and board, its measured facts moved by its noise."""
    rng = np.random.default_rng(k)
    varies = [f.value is not None and f.ci is not None and quantity_kind(f.id, f.unit) in VARY for f in run.facts]
    facts = [_scaled(f, _factor(k, f, rng)) if vary else f for f, vary in zip(run.facts, varies, strict=True)]
    node = k // PER_NODE
    host = {"hostname": f"node{node:03d}", "machine_id": f"{node:016x}", "boot_id": f"boot-{node:08d}"}
    device = dataclasses.replace(
        run.device, uuid=f"{k:032x}", serial=f"1653924{k:06d}", hostname=host["hostname"], gpu_index=k % PER_NODE
    )
    return dataclasses.replace(run, device=device, facts=facts, environment={**run.environment, "host": host})


def write_real_fleet(root: Path, count: int) -> list[Path]:
    """``count`` GPUs' results files, ``root/<node>-gpu<K>/results.json``, each with its index beside it."""
    run = load(REAL_RUN)
    paths = []
    for k in range(count):
        path = root / gpu_folder(k) / "results.json"
        save(one_gpu(run, k), path)
        paths.append(path)
    return paths
