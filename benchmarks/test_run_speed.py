"""Benchmark of a full run's measuring on the simulated GPU, through the real process machinery (pytest-benchmark;
it times, never judges).

Run with ``.venv/bin/pytest benchmarks/test_run_speed.py --benchmark-only``. The cubin is built and checked once
(as ``gpuprobe demo`` builds it); what is timed is the session's measuring of every family
(:func:`gpuprobe.measure.session.measure_families`): measuring child processes started as a run starts them,
every probe between its snapshots, its events read and judged, the results written as probes end. Once as a run
measures (one process serving family after family), once with ``--process-per-family`` (a fresh process each, as
every run did before): the difference is what the process starts cost. The plan's seconds for the same run, and
for an H200 seeing one GPU, are in ``extra_info``.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpuprobe.judge.expectations import load_all
from gpuprobe.measure import session
from gpuprobe.measure.isolation import ChildPolicy
from gpuprobe.measure.plan import FULL, model_device, run_plan
from gpuprobe.measure.progress import QuietSink
from gpuprobe.runner.launcher import LauncherSpec
from gpuprobe.simulated.demo import DEMO_POLICY
from gpuprobe.simulated.gpu import SimulatedGpu, fast_settings, suite_options

OPTIONS = suite_options(name="Simulated GPU")
LAUNCHER = LauncherSpec("gpuprobe.simulated.gpu:open_simulated", 0, OPTIONS)


@pytest.fixture(scope="module")
def planned() -> tuple[session.Build, session.Selection]:
    """The demo's run up to its measuring: the cubin built and every contract checked, the families selected."""
    build = session.build_and_check(SimulatedGpu(**OPTIONS).device(), None, inject_fault=False)
    return build, session.select(build, FULL, fast_settings(), None, False, QuietSink())


def measure_every_family(planned: tuple[session.Build, session.Selection], out: Path, policy: ChildPolicy) -> None:
    build, selection = planned
    results = session.start_results(build, LAUNCHER, FULL, selection)
    recording = session.Recording(results, out / "results.json", build.model, build.clock_fact)
    session.measure_families(recording, build, selection, LAUNCHER, FULL, policy, QuietSink())
    broke = {name: o.status for name, o in results.probes.items() if o.status in ("failed", "crashed", "timeout")}
    assert not broke, broke


@pytest.mark.parametrize("per_family", [False, True], ids=["one-process", "process-per-family"])
def test_measure_every_family_on_the_simulated_gpu(benchmark, tmp_path: Path, planned, per_family: bool) -> None:
    policy = dataclasses.replace(DEMO_POLICY, process_per_family=per_family)
    build, selection = planned
    benchmark.extra_info["families"] = sum(bool(probes) for probes in selection.probes.values())
    plan = run_plan(build.device, process_per_family=per_family)
    benchmark.extra_info["plan_measuring_s"] = round(plan.measuring_s, 1)
    h200 = run_plan(model_device(load_all()["h200"], visible_gpus=1), process_per_family=per_family)
    benchmark.extra_info["plan_h200_one_gpu_measuring_s"] = round(h200.measuring_s, 1)
    runs = iter(range(100))
    benchmark.pedantic(
        lambda: measure_every_family(planned, tmp_path / str(next(runs)), policy), rounds=2, iterations=1
    )
