"""Benchmark of ``gpuprobe fleet DIR`` over 2,000 real-size results files (pytest-benchmark; it times, never judges).

Run with ``.venv/bin/pytest benchmarks/test_fleet_real_size.py --benchmark-only``. The files are the real H200 run
as 2,000 GPUs of a fleet write it (``tests/helpers/real_fleet.py``: 1.9 MB each, with their facts indexes, 4 GB
in all), written once for the rounds (about 4 minutes); each round is the command a user types, the
interpreter's start included.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.real_fleet import PLANTED, REAL_RUN, gpu_folder, write_real_fleet

GPUS = 2000


@pytest.fixture(scope="module")
def real_fleet(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """2,000 real-size results files, written once for the rounds."""
    root = tmp_path_factory.mktemp("real-fleet")
    write_real_fleet(root, GPUS)
    return root


def test_fleet_command_over_two_thousand_real_size_files(benchmark, real_fleet: Path) -> None:
    def command() -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "gpuprobe", "fleet", str(real_fleet)], capture_output=True,
                              text=True, check=False, cwd=REAL_RUN.parents[2])  # fmt: skip

    done = benchmark.pedantic(command, rounds=3, iterations=1)
    assert done.returncode == 1, done.stderr  # the planted GPUs are outliers, and only they
    assert f"{GPUS} GPU(s) from {GPUS} results file(s), on {GPUS // 8} host(s)" in done.stdout
    assert f"{len(PLANTED)} outlier GPU(s)" in done.stdout
    worst = done.stdout.split("\nworst GPUs", 1)[1].splitlines()[3 : 3 + len(PLANTED)]
    assert sorted(next(k for k in PLANTED if f"/{gpu_folder(k)}/" in row) for row in worst) == sorted(PLANTED)
