"""The async-copy family: SASS contracts on every arch, then cp.async, bulk copies and distributed
shared memory measured.

What is measured and why each kernel is shaped as it is: see the probe docs in
ptx/async_copy/async_copy_sm80.toml and ptx/async_copy/async_copy_sm90.toml (``gpuprobe list async_copy``) and
gpuprobe/families/async_copy/__init__.py. cp.async needs sm_80, bulk copies and clusters sm_90: on older
archs those probes skip as unsupported, and their facts are not expected.
"""

from __future__ import annotations

import pytest

from gpuprobe.pytest_plugin import assert_invariants, family_tests

FAMILY = "async_copy"
test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests(FAMILY)


@pytest.mark.gpu
def test_cross_generation_invariants(gpuprobe_results) -> None:
    assert_invariants(gpuprobe_results, "async.", family=FAMILY)
