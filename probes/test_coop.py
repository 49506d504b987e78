"""The coop family: CUDA C++ (cooperative groups, libcu++) probes' SASS contracts on every arch, then
each abstraction's cost measured beside the hand-written PTX it wraps.

What is measured and why each kernel is shaped as it is: see the probe docs in ptx/coop/*.toml
(``gpuprobe list``) and gpuprobe/families/coop/__init__.py.
"""

from __future__ import annotations

import pytest

from gpuprobe.pytest_plugin import assert_invariants, family_tests

FAMILY = "coop"
test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests(FAMILY)


@pytest.mark.gpu
def test_an_abstraction_costs_no_less_than_the_instructions_it_wraps(gpuprobe_results) -> None:
    assert_invariants(gpuprobe_results, "coop_not_below_ptx")
