"""The power family: SASS contracts on every arch (sm_80+, wgmma sm_90a: others skip, naming the targets), then
seconds of sustained wgmma, mma.sync, FFMA and streams with their clocks, power and energy.

What is measured and why each kernel is shaped as it is: see the probe docs in ptx/power/power.toml
(``gpuprobe list power``), ptx/power/power_wgmma.toml and gpuprobe/families/power/__init__.py.
"""

from __future__ import annotations

import pytest

from gpuprobe.pytest_plugin import assert_invariants, family_tests

FAMILY = "power"
test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests(FAMILY)


@pytest.mark.gpu
def test_zero_operands_draw_no_more_and_run_no_slower(gpuprobe_results) -> None:
    assert_invariants(gpuprobe_results, "power_zero_operands.", family=FAMILY)
