"""The wgmma family (sm_90a): SASS contracts, then latency and throughput measured and judged.

What is measured and why each kernel is shaped as it is: see the probe docs in ptx/wgmma.toml
(``gpuprobe list``) and gpuprobe/families/wgmma.py. On any GPU but Hopper the family is
unsupported: the static cases skip with the reason, and so do the measured ones.
"""

from __future__ import annotations

import pytest

from gpuprobe.arch import SUPPORTED_ARCHS
from gpuprobe.pytest_plugin import assert_contract, assert_fact, family_fact_ids, family_probes, static_cases

FAMILY = "wgmma"
# Facts that need the GPU model's datasheet peak: an unknown GPU cannot have them.
DATASHEET_FACTS = ("tensor.wgmma.bf16.datasheet_peak_at_clock", "tensor.wgmma.bf16.fraction_of_peak")


def _needs_hopper(results) -> None:
    if results.device.cc != "9.0":
        pytest.skip(f"wgmma needs sm_90a: {results.device.name} is cc {results.device.cc}, the family is unsupported")


@pytest.mark.static
@pytest.mark.parametrize(("probe", "arch"), static_cases(FAMILY))
def test_sass_contract(probe, arch) -> None:
    assert_contract(probe, arch)


@pytest.mark.static
def test_wgmma_targets_sm_90a_alone() -> None:
    """Every other arch lacks wgmma (sm_90 without the 'a' features, sm_100a's tcgen05 replaces it)."""
    for probe in family_probes(FAMILY):
        assert [a.name for a in SUPPORTED_ARCHS if probe.supports(a)] == ["sm_90a"], probe.name


@pytest.mark.gpu
@pytest.mark.parametrize("name", [p.name for p in family_probes(FAMILY)])
def test_probe_ran_and_verified_itself(gpuprobe_results, name: str) -> None:
    _needs_hopper(gpuprobe_results)
    outcome = gpuprobe_results.probes.get(name)
    assert outcome is not None, f"{name} did not run"
    assert outcome.status == "ok", f"{name}: {outcome.status}: {outcome.detail}"


@pytest.mark.gpu
@pytest.mark.parametrize("fact_id", family_fact_ids(FAMILY))
def test_fact(gpuprobe_results, gpuprobe_comparison, fact_id: str) -> None:
    _needs_hopper(gpuprobe_results)
    unjudgeable = gpuprobe_results.fact(fact_id) is None and fact_id in DATASHEET_FACTS
    if unjudgeable and gpuprobe_results.fact("tensor.wgmma.bf16.fraction_of_cublas") is not None:
        pytest.skip(f"{fact_id}: no datasheet peak for {gpuprobe_results.device.name}")
    assert_fact(gpuprobe_results, fact_id, gpuprobe_comparison)


@pytest.mark.gpu
def test_wgmma_invariants(gpuprobe_results) -> None:
    _needs_hopper(gpuprobe_results)
    invariants = [f for f in gpuprobe_results.facts if f.id.startswith("invariant.wgmma.")]
    assert invariants, "no wgmma invariant could be checked: the wgmma facts are missing"
    broken = [f.detail for f in invariants if f.verdict == "fail"]
    assert not broken, "; ".join(broken)
