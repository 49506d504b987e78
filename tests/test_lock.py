"""One measuring run per GPU, one run per output folder: a second run waits for the first, or refuses; a dead
holder frees it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from gpuprobe.cli import main
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.measure import lock
from gpuprobe.measure.lock import folder_lock, gpu_lock

REPO = Path(__file__).resolve().parent.parent
HOLD = """
import sys, time
from pathlib import Path
from gpuprobe.measure.lock import folder_lock, gpu_lock
with eval(sys.argv[1]):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
"""


@pytest.fixture(autouse=True)
def private_lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPROBE_LOCK_DIR", str(tmp_path))


def hold(key: str, seconds: float, tmp_path: Path, lock: str = "gpu_lock({!r}, wait_s=0)") -> subprocess.Popen[str]:
    """A process holding a lock (``lock``: the call that takes it, ``key`` its argument) for ``seconds``."""
    holder = subprocess.Popen([sys.executable, "-c", HOLD, lock.format(key), str(seconds)], stdout=subprocess.PIPE,
                              text=True,
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


def test_a_second_run_waits_for_the_first_to_finish(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Proven by events, not seconds: the first run ends while the second waits, and the second then measures."""
    holder = hold("GPU-1234", 30, tmp_path)
    waits: list[float] = []

    def first_run_ends(seconds: float) -> None:
        waits.append(seconds)
        holder.kill()
        holder.wait()

    monkeypatch.setattr(lock.time, "sleep", first_run_ends)
    with gpu_lock("GPU-1234", wait_s=30):
        assert waits and holder.returncode is not None  # it found the GPU held, waited, and took it once free


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


FOLDER = "folder_lock(Path({!r}))"


def test_a_second_run_into_one_folder_is_refused_in_one_line_and_writes_nothing(tmp_path: Path, capsys) -> None:
    out = tmp_path / "demo"
    out.mkdir()
    holder = hold(str(out), 30, tmp_path, FOLDER)
    try:
        assert main(["demo", "-o", str(out), "--families", "warp"]) == 2
    finally:
        holder.kill()
        holder.wait()
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"{out} is being written by gpuprobe pid {holder.pid}" in err
    assert not (out / "results.json").exists()


def test_a_killed_writer_leaves_its_folder_free_and_holding_it_leaves_nothing_in_it(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    holder = hold(str(out), 30, tmp_path, FOLDER)
    holder.kill()
    holder.wait()
    with folder_lock(out):
        assert not list(out.iterdir())  # the lock file is in the lock folder: a run's folder holds what it writes
    same_folder = tmp_path / "out" / ".." / "out"
    with folder_lock(same_folder), pytest.raises(GpuprobeError, match="is being written by"), folder_lock(out):
        pytest.fail("two writers in one folder, named two ways")


def test_a_lock_folder_that_cannot_be_made_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    in_the_way = tmp_path / "a-file"
    in_the_way.write_text("")
    monkeypatch.setenv("GPUPROBE_LOCK_DIR", str(in_the_way / "locks"))
    with pytest.raises(GpuprobeError, match=r"cannot make the lock folder .*; set GPUPROBE_LOCK_DIR"), gpu_lock("G", 0):
        pytest.fail("locked without a lock folder")


def test_a_lock_file_that_is_a_link_is_refused_and_its_target_left_as_it_was(tmp_path: Path) -> None:
    target = tmp_path / "precious"
    target.write_text("keep me")
    (tmp_path / "gpu-GPU-1234.lock").symlink_to(target)
    with pytest.raises(GpuprobeError, match="cannot open the lock"), gpu_lock("GPU-1234", 0):
        pytest.fail("locked through a link")
    assert target.read_text() == "keep me"
