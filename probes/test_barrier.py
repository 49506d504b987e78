"""The barrier family: SASS contracts on every arch, then block-barrier costs.

What is measured and why each kernel is shaped as it is: see the probe docs in ptx/barrier/barrier.toml
(``gpuprobe list barrier``) and gpuprobe/families/barrier/__init__.py.
"""

from __future__ import annotations

import pytest

from gpuprobe.pytest_plugin import assert_invariants, family_tests

FAMILY = "barrier"
test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests(FAMILY)


@pytest.mark.gpu
def test_barrier_cost_grows_with_the_warps_it_waits_for(gpuprobe_results) -> None:
    assert_invariants(gpuprobe_results, "barrier_cost_grows")
