"""The launch family: SASS contracts on every arch, then the measured launch costs.

What is measured and why: see the probe docs in ptx/launch/launch.toml (``gpuprobe list launch``) and
gpuprobe/families/launch/__init__.py. Launch costs depend on the host, driver and binding: most facts are
report-only, judged against the few published numbers where they apply.
"""

from __future__ import annotations

import pytest

from gpuprobe.pytest_plugin import assert_invariants, family_tests

FAMILY = "launch"
test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests(FAMILY)


@pytest.mark.gpu
def test_graph_replay_per_kernel_is_cheaper_than_a_stream_launch(gpuprobe_results) -> None:
    assert_invariants(gpuprobe_results, "graph_node_below_stream_launch")
