"""The tcgen05 family (sm_100a): SASS contracts, then Blackwell's tensor-core MMAs and tensor memory measured.

What is measured and why each kernel is shaped as it is: see the probe docs in ptx/tcgen05/tcgen05.toml
(``gpuprobe list``) and gpuprobe/families/tcgen05/__init__.py. On any GPU but an sm_100a part (a B200) the
family is unsupported: the static cases skip with the reason, and so do the measured ones.
"""

from __future__ import annotations

import pytest

from gpuprobe.core.arch import SUPPORTED_ARCHS
from gpuprobe.pytest_plugin import assert_invariants, family_probes, family_tests

FAMILY = "tcgen05"
test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests(FAMILY)


@pytest.mark.static
def test_tcgen05_targets_sm_100a_alone() -> None:
    """Hopper has wgmma instead, consumer Blackwell (sm_120) no tcgen05 at all."""
    for probe in family_probes(FAMILY):
        assert [a.name for a in SUPPORTED_ARCHS if probe.supports(a)] == ["sm_100a"], probe.name


@pytest.mark.gpu
def test_tcgen05_invariants(gpuprobe_results) -> None:
    assert_invariants(gpuprobe_results, "tcgen05.", family=FAMILY)
