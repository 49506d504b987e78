"""The cluster family: SASS contracts on every arch (sm_90+: older archs skip, naming the targets), then
cluster-barrier and mbarrier costs.

What is measured and why each kernel is shaped as it is: see the probe docs in ptx/cluster/cluster.toml
(``gpuprobe list cluster``) and gpuprobe/families/cluster/__init__.py.
"""

from __future__ import annotations

import pytest

from gpuprobe.pytest_plugin import assert_invariants, family_tests

FAMILY = "cluster"
test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests(FAMILY)


@pytest.mark.gpu
def test_cluster_barrier_costs_at_least_a_block_barrier(gpuprobe_results) -> None:
    assert_invariants(gpuprobe_results, "cluster_sync_above_block_sync", family=FAMILY)
