"""The memory-latency family: SASS contracts on every arch, then the measured hierarchy.

What is measured and why each kernel is shaped as it is: see the probe docs in
ptx/memory/memory.toml (``gpuprobe list memory``) and gpuprobe/families/memory/__init__.py.
"""

from __future__ import annotations

import pytest

from gpuprobe.pytest_plugin import assert_invariants, family_tests

FAMILY = "memory"
DEVICE_FACTS = ("device.sm_count", "device.l2_bytes")  # what the device reports, judged with the family
test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests(FAMILY, DEVICE_FACTS)


@pytest.mark.gpu
def test_cross_generation_invariants(gpuprobe_results) -> None:
    assert_invariants(gpuprobe_results, "latency_order", "capacity_")
