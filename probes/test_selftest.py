"""The run's own fault isolation, on a real GPU: with --gpuprobe-inject-fault a probe faults on purpose.

What the self-test probe does and why: ptx/selftest/selftest.toml. Without that option it must not run.
"""

from __future__ import annotations

import pytest

from gpuprobe.families.catalog import FAMILIES


@pytest.mark.gpu
def test_an_injected_fault_costs_only_its_probe(request: pytest.FixtureRequest, gpuprobe_results) -> None:
    fault = gpuprobe_results.probes.get("selftest.fault_isolation")
    if not request.config.getoption("gpuprobe_inject_fault"):
        assert fault is None, "the faulting self-test ran without --gpuprobe-inject-fault"
        return
    assert fault is not None and fault.status == "crashed", fault
    assert "ILLEGAL_ADDRESS" in fault.detail.upper() or "illegal" in fault.detail.lower(), fault.detail
    later = [p for family in FAMILIES[1:] for p in family.probes]
    assert all(gpuprobe_results.probes[name].status == "ok" for name in later if name in gpuprobe_results.probes)
