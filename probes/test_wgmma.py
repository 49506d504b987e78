"""The wgmma family (sm_90a): SASS contracts, then latency and throughput measured and judged.

What is measured and why each kernel is shaped as it is: see the probe docs in ptx/wgmma/wgmma.toml
(``gpuprobe list wgmma``) and gpuprobe/families/wgmma/__init__.py. On any GPU but Hopper the family is
unsupported: the static cases skip with the reason, and so do the measured ones.
"""

from __future__ import annotations

import pytest

from gpuprobe.core.arch import SUPPORTED_ARCHS
from gpuprobe.pytest_plugin import assert_invariants, family_probes, family_tests

FAMILY = "wgmma"
test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests(FAMILY)


@pytest.mark.static
def test_wgmma_targets_sm_90a_alone() -> None:
    """Every other arch lacks wgmma (sm_90 without the 'a' features; sm_100a's tcgen05 replaces it)."""
    for probe in family_probes(FAMILY):
        assert [a.name for a in SUPPORTED_ARCHS if probe.supports(a)] == ["sm_90a"], probe.name


@pytest.mark.gpu
def test_wgmma_invariants(gpuprobe_results) -> None:
    assert_invariants(gpuprobe_results, "wgmma.", family=FAMILY)
