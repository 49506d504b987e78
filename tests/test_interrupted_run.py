"""A run stopped from outside, by Ctrl-C or by a kill, keeps every fact already measured and leaves no
child process measuring the GPU. Real processes, the simulated GPU, a probe that hangs to stop on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprobe.core.results import load
from tests.helpers.processes import CTRL_C_ARMED, measuring_children, wait_until

REPO = Path(__file__).resolve().parent.parent
DRIVER = CTRL_C_ARMED + """
import sys
from pathlib import Path
from gpuprobe.measure import session
from gpuprobe.runner.launcher import LauncherSpec
from gpuprobe.measure.isolation import ChildPolicy
from gpuprobe.simulated.gpu import SimulatedGpu, fast_settings

options = {"name": "Simulated GPU", "faults": {"gp_chase_global_cg": "hang"}}
launcher = LauncherSpec("gpuprobe.simulated.gpu:open_simulated", 0, options)
device = SimulatedGpu(name="Simulated GPU").device()
policy = ChildPolicy(probe_time_limit_s=600)
session.run_suite(device, launcher, Path(sys.argv[1]), settings=fast_settings(), policy=policy)
"""


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
