"""The warp family: SASS contracts on every arch, then warp-collective latencies and shuffle throughput.

What is measured and why each kernel is shaped as it is: see the probe docs in ptx/warp.toml, ptx/warp_redux.toml
(``gpuprobe list``) and gpuprobe/families/warp.py.
"""

from __future__ import annotations

import pytest

from gpuprobe.arch import parse_arch
from gpuprobe.pytest_plugin import assert_contract, assert_fact, family_fact_ids, family_probes, static_cases

FAMILY = "warp"


def skip_where_the_arch_lacks_it(results, probe_names: list[str]) -> None:
    """Skip, naming the targets, when none of the probes can run on the measured GPU's arch."""
    arch = parse_arch(results.device.arch)
    probes = [p for p in family_probes(FAMILY) if p.name in probe_names]
    if probes and not any(p.supports(arch) for p in probes):
        targets = " ".join(a.name for a in probes[0].archs)
        pytest.skip(f"{arch} lacks what {', '.join(probe_names)} needs (targets: {targets})")


@pytest.mark.static
@pytest.mark.parametrize(("probe", "arch"), static_cases(FAMILY))
def test_sass_contract(probe, arch) -> None:
    assert_contract(probe, arch)


@pytest.mark.gpu
@pytest.mark.parametrize("name", [p.name for p in family_probes(FAMILY)])
def test_probe_ran_and_verified_itself(gpuprobe_results, name: str) -> None:
    skip_where_the_arch_lacks_it(gpuprobe_results, [name])
    outcome = gpuprobe_results.probes.get(name)
    assert outcome is not None, f"{name} did not run"
    assert outcome.status == "ok", f"{name}: {outcome.status}: {outcome.detail}"


@pytest.mark.gpu
@pytest.mark.parametrize("fact_id", family_fact_ids(FAMILY))
def test_fact(gpuprobe_results, gpuprobe_comparison, fact_id: str) -> None:
    skip_where_the_arch_lacks_it(gpuprobe_results, [p.name for p in family_probes(FAMILY) if fact_id in p.facts])
    assert_fact(gpuprobe_results, fact_id, gpuprobe_comparison)


@pytest.mark.gpu
def test_cross_generation_invariants(gpuprobe_results) -> None:
    checks = [f for f in gpuprobe_results.facts if f.id.startswith("invariant.tile_reduce_grows")]
    assert checks, "no invariant could be checked: warp.tile.reduce.latency.* missing"
    broken = [f.detail for f in checks if f.verdict == "fail"]
    assert not broken, "; ".join(broken)
