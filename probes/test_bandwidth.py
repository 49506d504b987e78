"""The bandwidth family: SASS contracts on every arch, then the measured bandwidths.

What is measured and why each kernel is shaped as it is: see the probe docs in ptx/bandwidth.toml
(``gpuprobe list``) and gpuprobe/families/bandwidth.py.
"""

from __future__ import annotations

import pytest

from gpuprobe.pytest_plugin import assert_contract, assert_fact, family_fact_ids, family_probes, static_cases

FAMILY = "bandwidth"
PEAK_FACTS = {
    "bandwidth.dram_theoretical",
    *(f"bandwidth.dram_{op}_fraction_of_peak" for op in ("read", "write", "copy")),
}


@pytest.mark.static
@pytest.mark.parametrize(("probe", "arch"), static_cases(FAMILY))
def test_sass_contract(probe, arch) -> None:
    assert_contract(probe, arch)


@pytest.mark.gpu
@pytest.mark.parametrize("name", [p.name for p in family_probes(FAMILY)])
def test_probe_ran_and_verified_itself(gpuprobe_results, name: str) -> None:
    outcome = gpuprobe_results.probes.get(name)
    assert outcome is not None, f"{name} did not run"
    assert outcome.status == "ok", f"{name}: {outcome.status}: {outcome.detail}"


@pytest.mark.gpu
@pytest.mark.parametrize("fact_id", family_fact_ids(FAMILY))
def test_fact(gpuprobe_results, gpuprobe_comparison, fact_id: str) -> None:
    read = gpuprobe_results.probes.get("bandwidth.dram.read.v16")
    if fact_id in PEAK_FACTS and read is not None and "no theoretical peak" in read.detail:
        pytest.skip(f"{fact_id}: the device reports no memory clock or bus width and its model no datasheet peak")
    assert_fact(gpuprobe_results, fact_id, gpuprobe_comparison)


@pytest.mark.gpu
def test_bandwidth_invariants(gpuprobe_results) -> None:
    checks = [f for f in gpuprobe_results.facts if f.id.startswith("invariant.bandwidth")]
    assert checks, "no bandwidth invariant could be checked: the bandwidth facts are missing"
    broken = [f.detail for f in checks if f.verdict == "fail"]
    assert not broken, "; ".join(broken)
