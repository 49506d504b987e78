"""Benchmark of the README's test command, as a command (pytest-benchmark; it times, never judges).

Run with ``.venv/bin/pytest benchmarks/test_suite_speed.py --benchmark-only`` (one round: the whole suite, a few
minutes on 2 cores). What is timed is what ``.ci/run`` runs and a contributor types: ``pytest -m "not gpu" -n auto``
in the checkout, interpreter start, collection and every test included, with this environment's cache of static
check outcomes (``GPUPROBE_CACHE``: warm after the first run, as a contributor's is). Every test must pass: a
suite that fails is no figure.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
TEST_COMMAND = [sys.executable, "-m", "pytest", "-q", "-m", "not gpu", "-n", "auto", "-p", "no:cacheprovider"]


def run_the_test_command() -> str:
    """The README's test command in the checkout; its last line (the counts of passed and skipped tests)."""
    done = subprocess.run(TEST_COMMAND, cwd=REPO, capture_output=True, text=True)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return done.stdout.strip().splitlines()[-1]


def test_the_test_command(benchmark) -> None:
    counts = benchmark.pedantic(run_the_test_command, rounds=1, iterations=1)
    benchmark.extra_info["counts"] = counts
    assert " passed" in counts
