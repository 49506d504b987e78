"""The grid_sync family: SASS contracts on every arch, then the measured grid barrier.

What is measured and why each kernel is shaped as it is: see the probe docs in ptx/grid_sync.toml
(``gpuprobe list``) and gpuprobe/families/grid_sync.py.
"""

from __future__ import annotations

import pytest

from gpuprobe.arch import parse_arch
from gpuprobe.pytest_plugin import assert_contract, assert_fact, family_fact_ids, family_probes, static_cases
from gpuprobe.registry import find_probe

FAMILY = "grid_sync"


@pytest.mark.static
@pytest.mark.parametrize(("probe", "arch"), static_cases(FAMILY))
def test_sass_contract(probe, arch) -> None:
    assert_contract(probe, arch)


def _skip_unsupported(results, probe_name: str) -> None:
    arch = parse_arch(results.device.arch)
    if not find_probe(probe_name).supports(arch):
        pytest.skip(f"{arch} lacks what {FAMILY} probes need (see ptx/grid_sync.toml)")


@pytest.mark.gpu
@pytest.mark.parametrize("name", [p.name for p in family_probes(FAMILY)])
def test_probe_ran_and_verified_itself(gpuprobe_results, name: str) -> None:
    _skip_unsupported(gpuprobe_results, name)
    outcome = gpuprobe_results.probes.get(name)
    assert outcome is not None, f"{name} did not run"
    assert outcome.status == "ok", f"{name}: {outcome.status}: {outcome.detail}"


@pytest.mark.gpu
@pytest.mark.parametrize("fact_id", family_fact_ids(FAMILY))
def test_fact(gpuprobe_results, gpuprobe_comparison, fact_id: str) -> None:
    _skip_unsupported(gpuprobe_results, "grid_sync.latency")
    assert_fact(gpuprobe_results, fact_id, gpuprobe_comparison)


@pytest.mark.gpu
def test_grid_sync_costs_more_than_a_block_barrier(gpuprobe_results) -> None:
    checks = [f for f in gpuprobe_results.facts if f.id.startswith("invariant.grid_sync_above_")]
    if not checks:
        pytest.skip("no sync.block.* barrier fact was measured to compare the grid barrier with")
    broken = [f.detail for f in checks if f.verdict == "fail"]
    assert not broken, "; ".join(broken)
