"""Benchmark of level finding on a dense latency sweep (pytest-benchmark; it times, never judges).

Run with ``.venv/bin/pytest benchmarks/ --benchmark-only``: ``find_levels`` over 200 footprints of a
simulated H100 curve with 3 % noise and outliers, the densest sweep a run hands it.
"""

from __future__ import annotations

import numpy as np

from gpuprobe.judge.analysis import find_levels
from gpuprobe.simulated.cache_model import HIERARCHIES, KIB, MIB, curve


def test_find_levels_on_200_points(benchmark) -> None:
    footprints = np.geomspace(4 * KIB, 256 * MIB, 200)
    latency = curve(HIERARCHIES["H100"], footprints, "smooth", noise=0.03, outliers=3, seed=0)
    levels = benchmark(find_levels, footprints, latency)
    assert len(levels) >= 3  # L1, L2 and DRAM at least: what was timed found the hierarchy
