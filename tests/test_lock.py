"""One measuring run per GPU: a second run waits for the first, or refuses; a dead holder frees it."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.measure.lock import gpu_lock

REPO = Path(__file__).resolve().parent.parent
HOLD = """
import sys, time
from gpuprobe.measure.lock import gpu_lock
with gpu_lock(sys.argv[1], wait_s=0):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


@pytest.fixture(autouse=True)
def private_lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPROBE_LOCK_DIR", str(tmp_path))


def hold(key: str, seconds: float, tmp_path: Path) -> subprocess.Popen[str]:
    holder = subprocess.Popen([sys.executable, "-c", HOLD, key, str(seconds)], stdout=subprocess.PIPE, text=True,
                              env={"GPUPROBE_LOCK_DIR": str(tmp_path), "PYTHONPATH": str(REPO)})  # fmt: skip
    assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
    return holder


def test_a_second_run_refuses_while_the_first_measures(tmp_path: Path) -> None:
    holder = hold("GPU-1234", 30, tmp_path)
    try:
        with (
            pytest.raises(GpuprobeError, match=r"GPU GPU-1234 is being measured by gpuprobe pid \d+"),
            gpu_lock("GPU-1234", wait_s=0.5),
        ):
            pytest.fail("measured alongside another run")
    finally:
        holder.kill()
        holder.wait()


def test_a_second_run_waits_for_the_first_to_finish(tmp_path: Path) -> None:
    holder = hold("GPU-1234", 1.0, tmp_path)
    started = time.monotonic()
    with gpu_lock("GPU-1234", wait_s=30):
        waited = time.monotonic() - started
    holder.wait()
    assert 0.3 < waited < 20


def test_a_killed_holder_leaves_the_gpu_free(tmp_path: Path) -> None:
    holder = hold("GPU-1234", 30, tmp_path)
    holder.kill()
    holder.wait()
    with gpu_lock("GPU-1234", wait_s=0):
        pass


def test_other_gpus_are_not_blocked(tmp_path: Path) -> None:
    holder = hold("GPU-1234", 30, tmp_path)
    try:
        with gpu_lock("GPU-5678", wait_s=0):
            pass
    finally:
        holder.kill()
        holder.wait()
