"""The atomics family: SASS contracts on every arch, then measured atomic latency and throughput.

What is measured and why each kernel is shaped as it is: see the probe docs in ptx/atomics/atomics.toml
(``gpuprobe list atomics``) and gpuprobe/families/atomics/__init__.py.
"""

from __future__ import annotations

import pytest

from gpuprobe.pytest_plugin import assert_invariants, family_tests

FAMILY = "atomics"
test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests(FAMILY)


@pytest.mark.gpu
def test_cross_generation_invariants(gpuprobe_results) -> None:
    assert_invariants(gpuprobe_results, "atomics.", family=FAMILY)
