"""A run stopped from outside, by Ctrl-C or by a kill, keeps every fact already measured and leaves no
child process measuring the GPU. Real processes, the simulated GPU, a probe that hangs to stop on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuprobe.core.results import load

REPO = Path(__file__).resolve().parent.parent
DRIVER = """
import sys
from pathlib import Path
from gpuprobe.measure import session
from gpuprobe.runner.gpu import LauncherSpec
from gpuprobe.measure.isolation import ChildPolicy
from tests.fake_gpu import FakeGpu, fast_settings

options = {"name": "Simulated GPU", "faults": {"gp_chase_global_cg": "hang"}}
launcher = LauncherSpec("tests.fake_gpu:open_fake", 0, options)
device = FakeGpu(name="Simulated GPU").device()
policy = ChildPolicy(probe_time_limit_s=600)
session.run_suite(device, launcher, Path(sys.argv[1]), settings=fast_settings(), policy=policy)
"""


def measuring_children(lock_dir: str | Path) -> list[int]:
    """Live gpuprobe child processes (zombies excluded) of the runs whose lock folder is ``lock_dir``.

    Every child inherits its run's ``GPUPROBE_LOCK_DIR``, and that is what tells the runs apart: under
    xdist another worker's run has children measuring at the same time, and a killed run's children are
    no longer its children in the process tree."""
    marker = f"GPUPROBE_LOCK_DIR={lock_dir}".encode()
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().split(") ", 1)[1][0]
        except OSError:
            continue
        if b"gpuprobe.measure.child" in cmdline and marker in environ and state != "Z":
            found.append(int(entry.name))
    return found


def wait_until(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()


def l1_sweep_saved(out: Path) -> bool:
    """The run's results say the L1 sweep was measured: its child has gone on into the L2 sweep, which hangs."""
    try:
        probes = json.loads((out / "results.json").read_text())["probes"]
    except (OSError, ValueError):
        return False
    return probes.get("memory.latency.global_ca", {}).get("status") == "ok"


def start_and_wait_for_hang(out: Path) -> subprocess.Popen[bytes]:
    run = subprocess.Popen([sys.executable, "-c", DRIVER, str(out)], cwd=REPO, stderr=subprocess.DEVNULL,
                           env={**os.environ, "GPUPROBE_LOCK_DIR": str(out / "locks")})  # fmt: skip
    if not wait_until(lambda: l1_sweep_saved(out), 120):
        run.kill()
        pytest.fail("the run never got as far as the L1 sweep")
    return run


@pytest.mark.skipif(not Path("/proc/self/cmdline").exists(), reason="needs /proc to find the child processes")
@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "killed"])
def test_a_stopped_run_keeps_its_facts_and_leaves_no_child(tmp_path: Path, stop: signal.Signals) -> None:
    earlier = os.environ["GPUPROBE_LOCK_DIR"]  # the lock folder of every run this test process made before
    left = "an earlier test in this process left a measuring child behind"
    assert wait_until(lambda: not measuring_children(earlier), 30), left  # time for an orphan to see it is one
    run = start_and_wait_for_hang(tmp_path)
    try:
        ours = tmp_path / "locks"
        assert measuring_children(ours), "the hanging probe's child should be running"
        run.send_signal(stop)
        run.wait(timeout=60)
        assert wait_until(lambda: not measuring_children(ours), 60), "a child kept measuring after the run was stopped"
    finally:
        run.kill()  # a failed check leaves neither the run nor its hanging child behind
    results = load(tmp_path / "results.json")
    assert results.partial
    assert {"device.sm_clock", "latency.shared", "latency.l1", "capacity.l1"} <= {f.id for f in results.facts}
