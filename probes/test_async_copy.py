"""The async-copy family: SASS contracts on every arch, then cp.async, bulk copies and distributed
shared memory measured.

What is measured and why each kernel is shaped as it is: see the probe docs in
ptx/async_copy_sm80.toml and ptx/async_copy_sm90.toml (``gpuprobe list``) and
gpuprobe/families/async_copy.py. cp.async needs sm_80, bulk copies and clusters sm_90: on older
archs those probes skip as unsupported, and their facts are not expected.
"""

from __future__ import annotations

import pytest

from gpuprobe.arch import parse_arch
from gpuprobe.pytest_plugin import assert_contract, assert_fact, family_fact_ids, family_probes, static_cases

FAMILY = "async_copy"


@pytest.mark.static
@pytest.mark.parametrize(("probe", "arch"), static_cases(FAMILY))
def test_sass_contract(probe, arch) -> None:
    assert_contract(probe, arch)


def _supported(results, name: str) -> bool:
    probe = next(p for p in family_probes(FAMILY) if p.name == name)
    return probe.supports(parse_arch(results.device.arch))


@pytest.mark.gpu
@pytest.mark.parametrize("name", [p.name for p in family_probes(FAMILY)])
def test_probe_ran_and_verified_itself(gpuprobe_results, name: str) -> None:
    if not _supported(gpuprobe_results, name):
        pytest.skip(f"{name}: {gpuprobe_results.device.arch} lacks it")
    outcome = gpuprobe_results.probes.get(name)
    assert outcome is not None, f"{name} did not run"
    assert outcome.status == "ok", f"{name}: {outcome.status}: {outcome.detail}"


@pytest.mark.gpu
@pytest.mark.parametrize("fact_id", family_fact_ids(FAMILY))
def test_fact(gpuprobe_results, gpuprobe_comparison, fact_id: str) -> None:
    producer = next(p for p in family_probes(FAMILY) if fact_id in p.facts)
    if not _supported(gpuprobe_results, producer.name):
        pytest.skip(f"{fact_id}: {gpuprobe_results.device.arch} lacks {producer.name}")
    assert_fact(gpuprobe_results, fact_id, gpuprobe_comparison)
