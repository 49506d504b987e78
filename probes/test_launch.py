"""The launch family: SASS contracts on every arch, then the measured launch costs.

What is measured and why: see the probe docs in ptx/launch.toml (``gpuprobe list``) and
gpuprobe/families/launch.py. Launch costs depend on the host, driver and binding: most facts are
report-only, judged against the few published numbers where they apply.
"""

from __future__ import annotations

import pytest

from gpuprobe.pytest_plugin import assert_contract, assert_fact, family_fact_ids, family_probes, static_cases

FAMILY = "launch"
OPTIONAL_PATH = {"launch.stream.host_latency.pycuda": "pycuda"}  # fact -> the launch path it needs


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
    stream = gpuprobe_results.probes.get("launch.stream")
    path = OPTIONAL_PATH.get(fact_id)
    if path and gpuprobe_results.fact(fact_id) is None and stream is not None and f"{path} left out" in stream.detail:
        pytest.skip(stream.detail)
    assert_fact(gpuprobe_results, fact_id, gpuprobe_comparison)


@pytest.mark.gpu
def test_graph_replay_per_kernel_is_cheaper_than_a_stream_launch(gpuprobe_results) -> None:
    checks = [f for f in gpuprobe_results.facts if f.id == "invariant.graph_node_below_stream_launch"]
    assert checks, "the graph and stream launch facts are missing"
    broken = [f.detail for f in checks if f.verdict == "fail"]
    assert not broken, "; ".join(broken)
