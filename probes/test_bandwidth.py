"""The bandwidth family: SASS contracts on every arch, then the measured bandwidths.

What is measured and why each kernel is shaped as it is: see the probe docs in ptx/bandwidth/bandwidth.toml
(``gpuprobe list bandwidth``) and gpuprobe/families/bandwidth/__init__.py.
"""

from __future__ import annotations

import pytest

from gpuprobe.pytest_plugin import assert_invariants, family_tests

FAMILY = "bandwidth"
test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests(FAMILY)


@pytest.mark.gpu
def test_bandwidth_invariants(gpuprobe_results) -> None:
    assert_invariants(gpuprobe_results, "bandwidth")
