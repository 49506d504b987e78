"""The loaded-latency family: SASS contracts on every arch (the chase loop of dependent ld.global.cg loads, the
streamers' four 16-byte loads), then the chase's latency under a background stream, for the L2 and DRAM.

What is measured and why the kernel is shaped as it is: see the probe docs in
ptx/loaded_latency/loaded_latency.toml (``gpuprobe list loaded_latency``) and
gpuprobe/families/loaded_latency/__init__.py.
"""

from __future__ import annotations

import pytest

from gpuprobe.pytest_plugin import assert_invariants, family_tests

FAMILY = "loaded_latency"
test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests(FAMILY)


@pytest.mark.gpu
def test_the_loaded_chase_is_no_faster_than_the_idle_one(gpuprobe_results) -> None:
    assert_invariants(gpuprobe_results, "loaded_latency.l2.p90_not_below_idle",
                      "loaded_latency.dram.p90_not_below_idle", family=FAMILY)  # fmt: skip


@pytest.mark.gpu
def test_the_background_stays_within_the_levels_bandwidth(gpuprobe_results) -> None:
    assert_invariants(gpuprobe_results, "loaded_latency.l2.background_within", "loaded_latency.dram.background_within",
                      family=FAMILY)  # fmt: skip
