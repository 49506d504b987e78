"""The TMA family: SASS contracts on every arch, then tensor-map tile loads, stores and multicast measured.

What is measured and why each kernel is shaped as it is: see the probe docs in ptx/tma/tma.toml and
ptx/tma/tma_multicast.toml (``gpuprobe list``) and gpuprobe/families/tma/__init__.py. Tensor maps need sm_90,
multicast is advised on sm_90a and sm_100a only: elsewhere those probes skip as unsupported, and their facts
are not expected.
"""

from __future__ import annotations

import pytest

from gpuprobe.pytest_plugin import assert_invariants, family_tests

FAMILY = "tma"
test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests(FAMILY)


@pytest.mark.gpu
def test_cross_generation_invariants(gpuprobe_results) -> None:
    assert_invariants(gpuprobe_results, "tma.", family=FAMILY)
