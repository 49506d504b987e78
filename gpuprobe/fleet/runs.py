"""Measuring every GPU of a node at once, one measuring process per GPU, and knowing which GPU it was.

- **Placement**: which node and which GPU a run measured (:func:`placement`), recorded in the results.
- **fleet-run** (``gpuprobe fleet-run OUT``): one ``pytest probes/`` process per GPU, all at once,
  each pinned with ``CUDA_VISIBLE_DEVICES`` before CUDA starts, each writing
  ``OUT/<hostname>-gpu<K>/results.json``; then the fleet report (:mod:`gpuprobe.fleet.aggregate`) over OUT.
  A pinned process sees one GPU, so its multi-GPU families (p2p, collectives) measure no link: with
  ``--links DIR``, once the pinned runs are done, one more pytest of those families sees every listed GPU
  and writes ``DIR/<hostname>/results.json``, and the links report (:mod:`gpuprobe.fleet.links`) follows.
- **pytest-xdist**: ``pytest probes/ -n NUM_GPUS --dist each`` with :func:`pin_xdist_worker` called
  from ``pytest_configure``: ``--dist each`` sends every test to every worker, and worker ``gwK`` is
  pinned to GPU K.

Users' documentation: docs/fleet.md.
"""

from __future__ import annotations

import argparse
import functools
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Callable, Mapping, MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.files import make_dirs
from gpuprobe.fleet.aggregate import RESULTS_NAME, add_outlier_options, aggregate_paths, positive_number, render

# ---------------------------------------------------------------- placement ----------------


def _visible_list(value: str | None) -> list[str] | None:
    """``CUDA_VISIBLE_DEVICES`` as a list of entries; None when unset (every GPU visible)."""
    if value is None:
        return None
    return [entry.strip() for entry in value.split(",") if entry.strip()]


def _int_or_none(text: str | None) -> int | None:
    return int(text) if text is not None and text.strip().isdecimal() else None


def placement(
    device_index: int = 0, env: Mapping[str, str] | None = None, hostname: str | None = None
) -> dict[str, Any]:
    """Where a measurement ran, for ``results.Device``: ``hostname``, ``gpu_index`` and ``cuda_visible_devices``.

    ``gpu_index`` is the GPU's index on its node: ``GPUPROBE_GPU_INDEX`` where the fleet tooling set
    it (fleet-run, the xdist pin, the Slurm recipe), else the ``CUDA_VISIBLE_DEVICES`` entry the
    process's device ``device_index`` maps to when that entry is a number, else ``device_index``.
    """
    env = os.environ if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    index = _int_or_none(env.get("GPUPROBE_GPU_INDEX"))
    if index is None:
        entries = _visible_list(visible)
        if entries is None:
            index = device_index
        elif device_index < len(entries):
            index = _int_or_none(entries[device_index])
    return {"hostname": hostname or socket.gethostname(), "gpu_index": index, "cuda_visible_devices": visible}


def gpu_dir_name(hostname: str, gpu_index: int) -> str:
    """``<hostname>-gpu<K>``: one directory per GPU under a fleet output directory."""
    return f"{hostname}-gpu{gpu_index}"


# ---------------------------------------------------------------- xdist: one worker per GPU ---


@dataclass(frozen=True)
class WorkerPin:
    """An xdist worker's GPU: worker ``gwK`` sees only ``visible`` (``""``: no GPU of its own)."""

    worker: str
    gpu_index: int
    visible: str
    hostname: str
    reason: str | None = None  # why the worker has no GPU


@functools.cache
def _pin_key() -> Any:
    import pytest

    return pytest.StashKey[WorkerPin]()


def pin_xdist_worker(config: Any, env: MutableMapping[str, str] | None = None) -> WorkerPin | None:
    """In an xdist worker ``gwK``, before CUDA starts: make GPU K the only one this worker sees.

    Call from ``pytest_configure``. A worker is known by ``config.workerinput``, which xdist sets
    before ``pytest_configure``; ``PYTEST_XDIST_WORKER`` alone is not trusted, as every pytest a
    test starts inherits it. Outside a worker it does nothing. Worker K takes the K-th entry
    of the ``CUDA_VISIBLE_DEVICES`` it inherited (or GPU K when that is unset); a worker beyond
    the listed GPUs sees none, so its measured tests skip with the reason and never share a GPU.
    ``--gpu-device`` other than 0 is refused: in a pinned worker its only device is 0.
    """
    import pytest

    env = os.environ if env is None else env
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return None
    worker = str(workerinput.get("workerid", ""))
    match = re.fullmatch(r"gw(\d+)", worker)
    if not match:
        raise pytest.UsageError(f"gpuprobe: cannot pin xdist worker {worker!r} to a GPU (expected gw0, gw1, ...)")
    if (config.getoption("gpu_device", 0) or 0) != 0:
        raise pytest.UsageError("gpuprobe: --gpu-device cannot be combined with xdist; worker gwK measures GPU K")
    k = int(match[1])
    entries = _visible_list(env.get("CUDA_VISIBLE_DEVICES"))
    reason = None
    if entries is None:
        visible = str(k)
    elif k < len(entries):
        visible = entries[k]
    else:
        visible = ""
        reason = f"xdist worker {worker} has no GPU of its own (CUDA_VISIBLE_DEVICES listed {len(entries)})"
    gpu_index = _int_or_none(visible) if visible else None
    pin = WorkerPin(worker, k if gpu_index is None else gpu_index, visible, socket.gethostname(), reason)
    env["CUDA_VISIBLE_DEVICES"] = visible
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    env["GPUPROBE_GPU_INDEX"] = str(pin.gpu_index)
    config.stash[_pin_key()] = pin
    return pin


def worker_pin(config: Any) -> WorkerPin | None:
    return config.stash.get(_pin_key(), None)


def worker_results_dir(config: Any, out: Path) -> Path:
    """Where this pytest process writes results: ``out/<hostname>-gpu<K>`` in a pinned worker, else ``out``."""
    pin = worker_pin(config)
    return out / gpu_dir_name(pin.hostname, pin.gpu_index) if pin else out


def worker_gpu_reason(config: Any, reason: str | None) -> str | None:
    """The no-GPU skip reason, told which GPU this worker was pinned to (None: the GPU is usable)."""
    pin = worker_pin(config)
    if pin is None:
        return reason
    if pin.reason:
        return f"no GPU: {pin.reason}"
    return reason and f"{reason} (xdist worker {pin.worker} is pinned to CUDA_VISIBLE_DEVICES={pin.visible})"


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


def gpu_count() -> int:
    """GPUs the CUDA driver reports (0 when none or no CuPy); only the launcher calls it, never a worker."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # no CuPy, no driver: nothing to run on
        return 0


def local_gpus(requested: str | None, env: Mapping[str, str], count: Callable[[], int]) -> list[tuple[int, str]]:
    """``(gpu_index, CUDA_VISIBLE_DEVICES value)`` for each GPU to measure, each exactly once.

    ``requested`` (``--gpus 0,2`` or UUIDs) wins; else the inherited ``CUDA_VISIBLE_DEVICES``;
    else every GPU the driver counts. A numeric entry is its own index; a UUID takes its position.
    """
    entries = _visible_list(requested) if requested is not None else _visible_list(env.get("CUDA_VISIBLE_DEVICES"))
    if entries is None:
        entries = [str(i) for i in range(count())]
    if not entries:
        raise GpuprobeError("fleet-run: no GPU to measure (the driver reports none, or CUDA_VISIBLE_DEVICES is empty)")
    duplicated = sorted(e for e, n in Counter(entries).items() if n > 1)
    if duplicated:
        raise GpuprobeError(f"fleet-run: GPU {', '.join(duplicated)} listed twice; two runs never share a GPU")
    gpus = [(_int_or_none(e) if _int_or_none(e) is not None else pos, e) for pos, e in enumerate(entries)]
    indices = Counter(i for i, _ in gpus)
    if any(n > 1 for n in indices.values()):
        gpus = list(enumerate(entries))  # mixed numbers and UUIDs that collide: fall back to positions
    return gpus


def pytest_command(python: str, tests: Sequence[str], out_dir: Path, pytest_args: Sequence[str]) -> tuple[str, ...]:
    """One fleet run's command: pytest on ``tests``, writing ``out_dir``, with the user's ``pytest_args``."""
    return (python, "-m", "pytest", *tests, "-p", "no:cacheprovider", "--gpuprobe-out", str(out_dir), *pytest_args)


def plan_runs(
    gpus: Sequence[tuple[int, str]],
    out: Path,
    hostname: str,
    tests: str = "probes",
    pytest_args: Sequence[str] = (),
    python: str = sys.executable,
) -> list[GpuRun]:
    """One ``pytest`` per GPU, pinned by ``CUDA_VISIBLE_DEVICES``, writing ``out/<hostname>-gpu<K>``."""
    if any(a == "--gpu-device" or a.startswith("--gpu-device=") for a in pytest_args):
        raise GpuprobeError("fleet-run: --gpu-device cannot be passed on; each run sees only its own GPU, as device 0")
    runs = []
    for index, visible in gpus:
        out_dir = out / gpu_dir_name(hostname, index)
        command = pytest_command(python, [tests], out_dir, pytest_args)
        env = {"CUDA_VISIBLE_DEVICES": visible, "GPUPROBE_GPU_INDEX": str(index)}
        runs.append(GpuRun(index, visible, out_dir, command, env))
    return runs


LINK_TESTS = ("test_p2p.py", "test_collectives.py")  # the multi-GPU families' tests, in the tests folder


def plan_links_run(
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


def _stop(process: Any) -> None:
    """Kill a run and everything it started (its own session), then reap it."""
    pid = getattr(process, "pid", 0)
    try:
        if isinstance(pid, int) and pid > 1:
            os.killpg(pid, signal.SIGKILL)  # start_new_session: its group id is its pid
        else:
            process.kill()
    except ProcessLookupError:
        pass  # already gone
    process.wait()


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
            _stop(process)
            ended[i] = RunOutcome(run, None, elapsed)


def launch(
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
                _stop(process)


def _existing_results(runs: Sequence[GpuRun]) -> list[Path]:
    return [run.out_dir / RESULTS_NAME for run in runs if (run.out_dir / RESULTS_NAME).exists()]


# ---------------------------------------------------------------- command -------------------


def positive_seconds(text: str) -> float:
    return positive_number(text, "number of seconds")


def cmd_fleet_run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    gpus = local_gpus(args.gpus, os.environ, gpu_count)
    try:
        pytest_args = shlex.split(args.pytest_args)
    except ValueError as exc:
        raise GpuprobeError(f"fleet-run: --pytest-args {args.pytest_args!r}: {exc}") from None
    runs = plan_runs(gpus, out, socket.gethostname(), args.tests, pytest_args, args.python)
    if not Path(args.tests).exists():
        raise GpuprobeError(f"fleet-run: no {args.tests} here (run from a gpuprobe checkout or give --tests)")
    stale = _existing_results(runs)
    if stale and not args.overwrite:
        raise GpuprobeError(f"fleet-run: {stale[0]} already exists; use a new OUT or --overwrite")
    for path in stale:
        path.unlink()  # a run that writes nothing must not leave the old numbers to be read as new
    make_dirs(out)  # an OUT that cannot be a folder is said before any GPU starts
    print(f"gpuprobe fleet-run: {len(runs)} GPU(s), one pytest each, logs in {out}/<host>-gpu<K>/pytest.log")
    outcomes = launch(runs, os.environ, args.timeout)
    for outcome in outcomes:
        print(outcome.text())
    failed = [o for o in outcomes if not o.ok]
    links_bad = bool(args.links) and _links(gpus, Path(args.links), args, pytest_args)
    if args.no_aggregate:
        return 1 if failed or links_bad else 0
    try:
        report = aggregate_paths([out], args.threshold, min_deviation_pct=args.min_deviation)
    except GpuprobeError as exc:
        print(f"gpuprobe fleet-run: no fleet report: {exc}")
        return 1
    print()
    print(render(report, "text"), end="")
    return 1 if failed or links_bad or report.exit_status else 0


def _links(gpus: Sequence[tuple[int, str]], links: Path, args: argparse.Namespace, pytest_args: list[str]) -> bool:
    """The multi-GPU families over every listed GPU at once, then the links report: whether the run failed
    or a link is slow."""
    from gpuprobe.fleet.links import links_report
    from gpuprobe.fleet.links import render as render_links

    if len(gpus) < 2:
        print("gpuprobe fleet-run: --links needs two or more GPUs; one GPU has no link to measure")
        return False
    run = plan_links_run(gpus, links, socket.gethostname(), args.tests, pytest_args, args.python)
    print(f"gpuprobe fleet-run: links between {len(gpus)} GPUs, one pytest, log in {run.log}")
    outcome = launch([run], os.environ, args.timeout)[0]
    print(outcome.text())
    try:
        report = links_report([links])
    except GpuprobeError as exc:
        print(f"gpuprobe fleet-run: no links report: {exc}")
        return True
    print(render_links(report), end="")
    return not outcome.ok or bool(report.exit_status)


def add_command(subparsers: Any) -> None:
    """Register ``fleet-run`` on the ``gpuprobe`` command's subparsers."""
    p = subparsers.add_parser("fleet-run", help="measure every GPU of this node at once: one pytest per GPU")
    p.add_argument("out", metavar="OUT", help="results go to OUT/<hostname>-gpu<K>/results.json")
    p.add_argument(
        "--pytest-args",
        default="",
        metavar="ARGS",
        help="more arguments for every pytest, one string, e.g. --pytest-args='-x --require-gpu'",
    )
    p.add_argument(
        "--gpus",
        metavar="LIST",
        help="CUDA_VISIBLE_DEVICES entries to measure, one run each "
        "(default: the inherited CUDA_VISIBLE_DEVICES, else every GPU)",
    )
    p.add_argument("--tests", default="probes", help="what each pytest runs (default: probes)")
    p.add_argument("--python", default=sys.executable, help="interpreter for the pytest runs")
    p.add_argument("--timeout", type=positive_seconds, default=None, metavar="S",
                   help="kill a run still going after S seconds")  # fmt: skip
    p.add_argument("--overwrite", action="store_true", help="replace results already in OUT")
    p.add_argument("--no-aggregate", action="store_true", help="skip the fleet report over OUT afterwards")
    add_outlier_options(p)
    p.add_argument("--links", metavar="DIR",
                   help="then measure the links between the GPUs (p2p, collectives) in one process that sees them "
                   "all, into DIR/<hostname>, and report the slow ones")  # fmt: skip
    p.set_defaults(func=cmd_fleet_run)
