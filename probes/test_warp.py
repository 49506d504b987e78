"""The warp family: SASS contracts on every arch, then warp-collective latencies and shuffle throughput.

What is measured and why each kernel is shaped as it is: see the probe docs in
ptx/warp/warp.toml, ptx/warp/warp_redux.toml (``gpuprobe list warp``) and gpuprobe/families/warp/__init__.py.
"""

from __future__ import annotations

import pytest

from gpuprobe.pytest_plugin import assert_invariants, family_tests

FAMILY = "warp"
test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests(FAMILY)


@pytest.mark.gpu
def test_tile_reductions_cost_more_as_the_tile_grows(gpuprobe_results) -> None:
    assert_invariants(gpuprobe_results, "tile_reduce_grows")
