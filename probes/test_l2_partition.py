"""The L2-partition family: SASS contract on every arch, then the measured partition map.

What is measured and why the kernel is shaped as it is: see the probe doc in ptx/l2_partition.toml
(``gpuprobe list``) and gpuprobe/families/l2_partition.py.
"""

from __future__ import annotations

import pytest

from gpuprobe.pytest_plugin import assert_contract, assert_fact, family_fact_ids, family_probes, static_cases

FAMILY = "l2_partition"
SPLIT_ONLY = ("l2.far_latency", "l2.partition_sm_fraction")  # measured only where the L2 is split


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
    count = gpuprobe_results.fact("l2.partition_count")
    unsplit = count is not None and count.value == 1.0
    if fact_id in SPLIT_ONLY and unsplit and gpuprobe_results.fact(fact_id) is None:
        pytest.skip(f"{fact_id}: the map found one L2 partition")
    assert_fact(gpuprobe_results, fact_id, gpuprobe_comparison)
