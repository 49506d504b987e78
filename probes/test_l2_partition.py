"""The L2-partition family: SASS contract on every arch, then the measured partition map.

What is measured and why the kernel is shaped as it is: see the probe doc in ptx/l2_partition/l2_partition.toml
(``gpuprobe list l2_partition``) and gpuprobe/families/l2_partition/__init__.py.
"""

from __future__ import annotations

import pytest

from gpuprobe.pytest_plugin import assert_invariants, family_tests

FAMILY = "l2_partition"
test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests(FAMILY)


@pytest.mark.gpu
def test_cross_generation_invariants(gpuprobe_results) -> None:
    assert_invariants(gpuprobe_results, "l2_partition.", family=FAMILY)
