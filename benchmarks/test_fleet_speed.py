"""Benchmark of the fleet report over 5,000 realistic results files (pytest-benchmark; it times, never judges).

Run with ``.venv/bin/pytest benchmarks/ --benchmark-only``. The files are the ones
``tests/test_fleet.py`` writes (40 samples a fact, curves and NVML readings: 30-60 KB each); reading
and aggregating them, then rendering every format, is what ``gpuprobe fleet DIR`` does for a cluster.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from gpuprobe.fleet import aggregate as fleet
from tests.test_fleet import write_fleet

GPUS = 5000


@pytest.fixture(scope="module")
def fleet_dir(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """5,000 results files, written once for the rounds (about 200 MB), and the one outlier's file."""
    root = tmp_path_factory.mktemp("fleet")
    return root, write_fleet(root, GPUS, outlier=4321)


def test_aggregate_and_render_five_thousand_files(benchmark, fleet_dir: tuple[Path, Path]) -> None:
    root, odd = fleet_dir

    def report() -> fleet.FleetReport:
        aggregated = fleet.aggregate_paths([root])
        assert all(fleet.render(aggregated, fmt) for fmt in fleet.FORMATS)
        return aggregated

    aggregated = benchmark.pedantic(report, rounds=3, iterations=1)
    assert aggregated.gpus == GPUS and [s.gpu.file for s in aggregated.outliers] == [str(odd)]
