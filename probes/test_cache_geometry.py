"""The cache-geometry family: SASS contracts on every arch, then the measured geometry.

What is measured and why each kernel is shaped as it is: see the probe docs in
ptx/cache_geometry/cache_geometry.toml (``gpuprobe list cache_geometry``) and
gpuprobe/families/cache_geometry/__init__.py.
"""

from __future__ import annotations

import pytest

from gpuprobe.pytest_plugin import assert_invariants, family_tests

FAMILY = "cache_geometry"
test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests(FAMILY)


@pytest.mark.gpu
def test_cross_generation_invariants(gpuprobe_results) -> None:
    assert_invariants(gpuprobe_results, "cache.", "constant.", "tlb.", family=FAMILY)
