"""The ALU family: SASS contracts on every arch, then the measured latencies and issue rates.

What is measured and why each kernel is shaped as it is: see the probe docs in
ptx/alu.toml, ptx/alu_sm80.toml (``gpuprobe list``) and gpuprobe/families/alu.py.
"""

from __future__ import annotations

import pytest

from gpuprobe.arch import parse_arch
from gpuprobe.pytest_plugin import assert_contract, assert_fact, family_fact_ids, family_probes, static_cases

FAMILY = "alu"


@pytest.mark.static
@pytest.mark.parametrize(("probe", "arch"), static_cases(FAMILY))
def test_sass_contract(probe, arch) -> None:
    assert_contract(probe, arch)


@pytest.mark.gpu
@pytest.mark.parametrize("name", [p.name for p in family_probes(FAMILY)])
def test_probe_ran_and_verified_itself(gpuprobe_results, name: str) -> None:
    skip_unless_targeted(gpuprobe_results, [p for p in family_probes(FAMILY) if p.name == name])
    outcome = gpuprobe_results.probes.get(name)
    assert outcome is not None, f"{name} did not run"
    assert outcome.status == "ok", f"{name}: {outcome.status}: {outcome.detail}"


@pytest.mark.gpu
@pytest.mark.parametrize("fact_id", family_fact_ids(FAMILY))
def test_fact(gpuprobe_results, gpuprobe_comparison, fact_id: str) -> None:
    skip_unless_targeted(gpuprobe_results, [p for p in family_probes(FAMILY) if fact_id in p.facts])
    assert_fact(gpuprobe_results, fact_id, gpuprobe_comparison)


def skip_unless_targeted(results, probes) -> None:
    """A probe (or every probe of a fact) the device's arch lacks is a skip with the reason, not a failure."""
    arch = parse_arch(results.device.arch)
    if not any(p.supports(arch) for p in probes):
        pytest.skip(f"{arch} lacks it: {', '.join(p.name for p in probes)} target other archs")
