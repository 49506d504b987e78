"""Measuring every GPU of a node at once: one pytest per GPU, each pinned to its GPU, supervised to the end.

- **fleet-run** (``gpuprobe fleet-run OUT``): one ``pytest probes/`` process per GPU, all at once
  (:func:`pinned_runs`, :func:`supervise`), each pinned with ``CUDA_VISIBLE_DEVICES`` before CUDA starts,
  each writing ``OUT/<hostname>-gpu<K>/results.json``; a pinned process sees one GPU, so the multi-GPU
  families' links are measured afterwards by one more pytest that sees them all (:func:`links_run`).
- **pytest-xdist**: the pytest plugin pins worker ``gwK`` to GPU K (``gpuprobe.pytest_plugin.pin_xdist_worker``).

Users' documentation: docs/fleet.md.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.files import make_dirs
from gpuprobe.core.processes import kill_session
from gpuprobe.fleet.aggregate import RESULTS_NAME


def gpu_dir_name(hostname: str, gpu_index: int) -> str:
    """``<hostname>-gpu<K>``: one directory per GPU under a fleet output directory."""
    return f"{hostname}-gpu{gpu_index}"


# ---------------------------------------------------------------- fleet-run: one pytest per GPU ---


@dataclass(frozen=True)
class GpuRun:
    """One measuring process: its GPU, its command, the environment it adds, and where it writes."""

    gpu_index: int
    visible: str
    out_dir: Path
    command: tuple[str, ...]
    env: dict[str, str]

    @property
    def log(self) -> Path:
        return self.out_dir / "pytest.log"


@dataclass(frozen=True)
class RunOutcome:
    run: GpuRun
    returncode: int | None  # None: killed at the time limit
    seconds: float

    @property
    def ok(self) -> bool:
        return self.returncode == 0

    def text(self) -> str:
        status = "timed out" if self.returncode is None else f"pytest exit {self.returncode}"
        return (
            f"gpu{self.run.gpu_index} (CUDA_VISIBLE_DEVICES={self.run.visible}): {status} after "
            f"{self.seconds:.0f} s -> {self.run.out_dir}"
        )


def pytest_command(python: str, tests: Sequence[str], out_dir: Path, pytest_args: Sequence[str]) -> tuple[str, ...]:
    """One fleet run's command: pytest on ``tests``, writing ``out_dir``, with the user's ``pytest_args``."""
    return (python, "-m", "pytest", *tests, "-p", "no:cacheprovider", "--gpuprobe-out", str(out_dir), *pytest_args)


def pinned_runs(
    gpus: Sequence[tuple[int, str]],
    out: Path,
    hostname: str,
    tests: str = "probes",
    pytest_args: Sequence[str] = (),
    python: str = sys.executable,
) -> list[GpuRun]:
    """One ``pytest`` per GPU, pinned by ``CUDA_VISIBLE_DEVICES``, writing ``out/<hostname>-gpu<K>``."""
    if any(a == "--gpuprobe-device" or a.startswith("--gpuprobe-device=") for a in pytest_args):
        raise GpuprobeError(
            "fleet-run: --gpuprobe-device cannot be passed on; each run sees only its own GPU, as device 0"
        )
    runs = []
    for index, visible in gpus:
        out_dir = out / gpu_dir_name(hostname, index)
        command = pytest_command(python, [tests], out_dir, pytest_args)
        env = {"CUDA_VISIBLE_DEVICES": visible, "GPUPROBE_GPU_INDEX": str(index)}
        runs.append(GpuRun(index, visible, out_dir, command, env))
    return runs


LINK_TESTS = ("test_p2p.py", "test_collectives.py")  # the multi-GPU families' tests, in the tests folder


def links_run(
    gpus: Sequence[tuple[int, str]],
    links: Path,
    hostname: str,
    tests: str = "probes",
    pytest_args: Sequence[str] = (),
    python: str = sys.executable,
) -> GpuRun:
    """One ``pytest`` of the multi-GPU families that sees every GPU of ``gpus`` (their links need them all in
    one process), writing ``links/<hostname>``; run after the pinned runs, so no GPU is measured twice at once."""
    visible = ",".join(entry for _, entry in gpus)
    out_dir = links / hostname
    command = pytest_command(python, [str(Path(tests) / name) for name in LINK_TESTS], out_dir, pytest_args)
    env = {"CUDA_VISIBLE_DEVICES": visible, "GPUPROBE_GPU_INDEX": str(gpus[0][0])}  # device 0 of the process
    return GpuRun(gpus[0][0], visible, out_dir, command, env)


def child_env(run: GpuRun, base: Mapping[str, str]) -> dict[str, str]:
    """The parent's environment, pinned to the run's GPU, outside any xdist worker it was started from."""
    env = {k: v for k, v in base.items() if not k.startswith("PYTEST_XDIST_")}
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")  # indices as nvidia-smi numbers them
    env.update(run.env)
    return env


def spawn_process(run: GpuRun, env: dict[str, str]) -> subprocess.Popen:
    """Start one run in its own session (so a time limit can end it and everything it started)."""
    make_dirs(run.out_dir)
    with open(run.log, "w", encoding="utf-8") as log:
        return subprocess.Popen(
            run.command, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
        )


def _poll(
    runs: Sequence[GpuRun],
    processes: Sequence[Any],
    ended: dict[int, RunOutcome],
    elapsed: float,
    timeout_s: float | None,
) -> None:
    """Record the runs that ended since the last look, and end those past the time limit."""
    for i, (run, process) in enumerate(zip(runs, processes, strict=True)):
        if i in ended:
            continue
        code = process.poll()
        if code is not None:
            ended[i] = RunOutcome(run, code, elapsed)
        elif timeout_s is not None and elapsed > timeout_s:
            kill_session(process)
            ended[i] = RunOutcome(run, None, elapsed)


def supervise(
    runs: Sequence[GpuRun],
    base_env: Mapping[str, str],
    timeout_s: float | None = None,
    spawn: Callable[[GpuRun, dict[str, str]], Any] | None = None,
    poll_s: float = 0.5,
) -> list[RunOutcome]:
    """Start every run at once and wait for all; a run past ``timeout_s`` is killed with its children.

    Whatever happens here (a run that cannot start, Ctrl-C), no run is left behind.
    """
    spawn = spawn or spawn_process
    start = time.monotonic()
    processes: list[Any] = []
    ended: dict[int, RunOutcome] = {}
    try:
        for run in runs:
            processes.append(spawn(run, child_env(run, base_env)))
        while True:
            _poll(runs, processes, ended, time.monotonic() - start, timeout_s)
            if len(ended) == len(runs):
                return [ended[i] for i in range(len(runs))]
            time.sleep(poll_s)
    finally:
        for i, process in enumerate(processes):
            if i not in ended and process.poll() is None:
                kill_session(process)


def existing_results(runs: Sequence[GpuRun]) -> list[Path]:
    """The results files the runs would write that are there already."""
    return [run.out_dir / RESULTS_NAME for run in runs if (run.out_dir / RESULTS_NAME).exists()]
