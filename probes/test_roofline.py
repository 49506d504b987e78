"""The roofline family: SASS contracts on every arch, then each point of every sweep ran and checked itself, and the
ceilings, ridge points and clocks per type and level.

What is measured and why each kernel is shaped as it is: see the probe docs in ptx/roofline/*.toml
(``gpuprobe list roofline``) and gpuprobe/families/roofline/__init__.py.
"""

from __future__ import annotations

import pytest

from gpuprobe.pytest_plugin import assert_invariants, family_tests

FAMILY = "roofline"
test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests(FAMILY)


@pytest.mark.gpu
def test_the_on_chip_ceilings_stay_within_the_bandwidth_streams(gpuprobe_results) -> None:
    assert_invariants(gpuprobe_results, "roofline.", family=FAMILY)
