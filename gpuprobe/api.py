"""What a user script calls to measure a GPU and write its fact sheet: the same path ``gpuprobe run``
and ``gpuprobe report`` take, with the catalog's families filled in."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from gpuprobe.core.results import Device, Results
from gpuprobe.families import catalog
from gpuprobe.kernels.registry import with_declarations
from gpuprobe.measure.isolation import ChildPolicy
from gpuprobe.measure.plan import FULL, SMOKE
from gpuprobe.measure.session import default_out_dir, run_suite
from gpuprobe.output.factsheet import write_report
from gpuprobe.runner.device import device_identity, placement, require_gpu
from gpuprobe.runner.launcher import LauncherSpec


def local_device(device_index: int = 0) -> Device:
    """The GPU this process sees as CUDA device ``device_index``, with the node and GPU index it is
    on; a GpuprobeError (one line, saying why) when there is no usable GPU."""
    require_gpu()
    return dataclasses.replace(device_identity(device_index), **placement(device_index))


def measure_gpu(
    out_dir: Path | str | None = None,
    *,
    device_index: int = 0,
    model: str | None = None,
    smoke: bool = False,
    deadline_s: float | None = None,
    policy: ChildPolicy | None = None,
) -> Results:
    """Measure every probe on the GPU (``smoke``: each family's cheapest few, once) and write the
    results file and the fact sheet (or the first-contact page) to ``out_dir``, by default
    ``reports/<gpu-slug>/``. ``model`` forces the expectations to judge by (an expectations key,
    e.g. ``"h200"``); ``deadline_s`` bounds the run, recording what it did not reach ``not_run``."""
    device = local_device(device_index)
    target = Path(out_dir) if out_dir is not None else default_out_dir(device, smoke)
    stage = SMOKE if smoke else FULL
    launcher = LauncherSpec(device_index=device_index)
    return run_suite(device, launcher, target, model, policy=policy, stage=stage, deadline_s=deadline_s)


def write_factsheet(results: Results, out_dir: Path | str, fmt: str = "md") -> list[Path]:
    """Write the fact sheet of ``results`` into ``out_dir`` (``"md"``: Markdown with its plots beside
    it; ``"html"``: one self-contained page); return the paths written."""
    return write_report(with_declarations(results), Path(out_dir), fmt, sections=catalog.sections())
