"""The grid_sync family: SASS contracts on every arch, then the measured grid barrier.

What is measured and why each kernel is shaped as it is: see the probe docs in ptx/grid_sync/grid_sync.toml
(``gpuprobe list grid_sync``) and gpuprobe/families/grid_sync/__init__.py.
"""

from __future__ import annotations

import pytest

from gpuprobe.pytest_plugin import assert_invariants, family_tests

FAMILY = "grid_sync"
test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests(FAMILY)


@pytest.mark.gpu
def test_grid_sync_costs_more_than_a_block_barrier(gpuprobe_results) -> None:
    assert_invariants(gpuprobe_results, "grid_sync_above_", family=FAMILY)
