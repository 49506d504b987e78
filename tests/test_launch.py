"""The launch family's host side, end to end against a simulated GPU, its contracts, and the runner's
cuda.bindings argument block."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from gpuprobe.core.arch import SUPPORTED_ARCHS, parse_arch
from gpuprobe.core.errors import GpuprobeError, ProbeFailure
from gpuprobe.core.results import Fact
from gpuprobe.families import launch
from gpuprobe.families.launch import PROBES, Settings, checked_stamps
from gpuprobe.families.launch.simulated import REALISTIC_ENQUEUE_US, busy_host
from gpuprobe.families.sampling import Stopping
from gpuprobe.judge.expectations import judge
from gpuprobe.kernels.contracts import check
from gpuprobe.kernels.cubin import build_ptx
from gpuprobe.kernels.registry import PTX_DIR, find_probe
from gpuprobe.measure.plan import family_seconds
from gpuprobe.pytest_plugin import family_probes
from gpuprobe.runner.launch_paths import _argument_block
from gpuprobe.runner.launcher import LaunchPathUnavailable
from gpuprobe.simulated.gpu import measure_family, simulated_gpu
from tests.helpers.checked import contract_results
from tests.helpers.devices import H100_SXM

FAST = Settings(launches=20, graph_nodes=(1, 10, 100), graph_replays=16, events=20,
                sampling=Stopping(3, 3, 0.03, 0.5))  # fmt: skip


def _run(gpu, runnable=frozenset(PROBES), settings=FAST):
    return measure_family(launch, gpu, runnable, settings)


def _facts(measured) -> dict[str, Fact]:
    return {f.id: f for m in measured.values() for f in m.facts}


def test_simulated_launch_costs_are_recovered() -> None:
    gpu = simulated_gpu()
    measured = _run(gpu)
    assert {n: m.outcome.status for n, m in measured.items()} == dict.fromkeys(PROBES, "ok")
    facts = _facts(measured)
    expected = {
        "launch.stream.host_latency.cupy": gpu.enqueue_us["cupy"],
        "launch.stream.host_latency.cuda_bindings": gpu.enqueue_us["cuda-bindings"],
        "launch.stream.gpu_spacing": gpu.stream_spacing_ns / 1e3,
        "launch.stream.additional_latency": gpu.stream_spacing_ns / 1e3,
        "launch.graph.per_node.gpu": gpu.graph_node_ns / 1e3,
        "launch.graph.latency": gpu.graph_node_ns / 1e3,
        "launch.graph.gpu_spacing": gpu.graph_node_ns / 1e3,
        "launch.event.record": gpu.event_us["record"],
        "launch.event.synchronize": gpu.event_us["synchronize"],
    }
    for fact_id, value in expected.items():
        assert facts[fact_id].value == pytest.approx(value, rel=0.05), fact_id
        assert facts[fact_id].unit == "us"
    assert abs(facts["launch.graph.per_node.host"].value) < 0.01  # the simulated replay costs the same at any size
    graph = [facts[f"launch.graph.{what}"].samples for what in ("latency", "per_node.gpu")]
    assert len(graph[0]) == len(graph[1])  # the untimed warm-up replay is no sample
    series = measured["launch.graph"].outcome.series["graph"]
    assert series["nodes"] == [1.0, 10.0, 100.0]
    assert series["gpu_us_per_replay"][-1] == pytest.approx(100 * gpu.graph_node_ns / 1e3, rel=0.05)


def test_a_binding_that_is_not_installed_is_not_measured_with_the_reason_never_failed() -> None:
    measured = _run(simulated_gpu(), runnable={"launch.stream"})
    outcome = measured["launch.stream"].outcome
    assert outcome.status == "ok"
    assert "pycuda left out: pycuda is not installed" in outcome.detail
    pycuda = _facts(measured)["launch.stream.host_latency.pycuda"]
    assert pycuda.value is None and "pycuda is not installed" in pycuda.detail
    assert judge(pycuda, None)[0] == "not_run"
    with_pycuda = simulated_gpu(enqueue_us={"cupy": 4.0, "cuda-bindings": 2.5, "pycuda": 6.0})
    facts = _facts(_run(with_pycuda, runnable={"launch.stream"}))
    assert facts["launch.stream.host_latency.pycuda"].value == pytest.approx(6.0, rel=0.05)


def test_an_installed_optional_binding_that_cannot_launch_is_left_out_but_a_required_one_fails() -> None:
    gpu = simulated_gpu(enqueue_us={"cupy": 4.0, "cuda-bindings": 2.5, "pycuda": 6.0})
    enqueue = gpu.enqueue_seconds

    def broken(kernel, grid, block, args, count, via="cupy", wait=True):
        if via in ("pycuda", gpu.broken_via):
            raise RuntimeError("cuLaunchKernel: CUDA_ERROR_INVALID_CONTEXT")
        return enqueue(kernel, grid, block, args, count, via, wait)

    gpu.enqueue_seconds, gpu.broken_via = broken, ""
    measured = _run(gpu, runnable={"launch.stream"})
    assert measured["launch.stream"].outcome.status == "ok"
    assert "pycuda could not launch (RuntimeError: cuLaunchKernel: CUDA_ERROR_INVALID_CONTEXT)" in (
        measured["launch.stream"].outcome.detail
    )
    gpu.broken_via = "cuda-bindings"
    with pytest.raises(RuntimeError, match="INVALID_CONTEXT"):
        _run(gpu, runnable={"launch.stream"})


def test_a_launch_path_that_is_unavailable_here_is_not_run_with_the_reason_never_a_crash() -> None:
    """cuda-bindings as well as pycuda: the runner says LaunchPathUnavailable (not installed, or a call it
    cannot make), first or in the middle of the samples; the probe measures the others."""
    measured = _run(simulated_gpu(enqueue_us={"cupy": 4.0}), runnable={"launch.stream"})
    assert measured["launch.stream"].outcome.status == "ok"
    bindings = _facts(measured)["launch.stream.host_latency.cuda_bindings"]
    assert bindings.value is None and judge(bindings, None)[0] == "not_run"
    gpu = simulated_gpu()
    enqueue, calls = gpu.enqueue_seconds, []

    def fails_later(kernel, grid, block, args, count, via="cupy", wait=True):
        calls.append(via)
        if via == "cuda-bindings" and calls.count(via) == 3:
            raise LaunchPathUnavailable("cuLaunchKernel: the extra argument must be an integer")
        return enqueue(kernel, grid, block, args, count, via, wait)

    gpu.enqueue_seconds = fails_later
    measured = _run(gpu, runnable={"launch.stream"})
    assert measured["launch.stream"].outcome.status == "ok"
    assert "cuda-bindings left out: cuLaunchKernel: the extra argument" in measured["launch.stream"].outcome.detail
    facts = _facts(measured)
    assert facts["launch.stream.host_latency.cuda_bindings"].value is None
    assert facts["launch.stream.host_latency.cupy"].value == pytest.approx(gpu.enqueue_us["cupy"], rel=0.05)


def test_a_host_that_outlasts_the_hold_once_costs_a_retaken_sample_not_the_probe() -> None:
    """CuPy's 5 to 8 us per launch, and one 8 ms stall (call 6: the first 100-launch run through CuPy)
    behind a 2 ms hold: the run is taken again behind 4 ms, and the hold stays doubled. 100 launches a
    sample (the default) make each host latency good to about 1.4 % under the fake's +-25 % per launch."""
    gpu = busy_host(simulated_gpu(enqueue_us=dict(REALISTIC_ENQUEUE_US)), stalls={6}, stall_us=8000.0)
    measured = _run(gpu, runnable={"launch.stream"}, settings=dataclasses.replace(FAST, launches=100))
    outcome = measured["launch.stream"].outcome
    assert outcome.status == "ok", outcome.detail
    assert "an enqueue outlasted the hold: samples retaken behind a 4000 us hold" in outcome.detail
    facts = _facts(measured)
    for via, us in REALISTIC_ENQUEUE_US.items():
        assert facts[f"launch.stream.host_latency.{launch.VIAS[via]}"].value == pytest.approx(us, rel=0.05)


def test_a_host_that_outlasts_every_hold_fails_the_probe_after_three_doublings() -> None:
    gpu = busy_host(simulated_gpu(), stalls=range(1, 1000), stall_us=1e4)  # 10 ms stalls: past 8 x 400 us
    measured = _run(gpu, runnable={"launch.stream"})
    outcome = measured["launch.stream"].outcome
    assert outcome.status == "failed" and measured["launch.stream"].facts == []
    assert "longer than the 3200 us hold, doubled 3 times already" in outcome.detail


def test_an_unavailable_launch_path_is_a_one_line_gpuprobe_error() -> None:
    assert issubclass(LaunchPathUnavailable, GpuprobeError)
    with pytest.raises(LaunchPathUnavailable, match="pycuda is not installed"):
        simulated_gpu().enqueue_seconds("gp_launch_stamp", 1, 1, [], 1, "pycuda")


@pytest.mark.parametrize(
    ("corrupt", "detail"),
    [
        ("skip", "gp_launch_stamp: 21 launches enqueued, the kernel counted 3"),
        ("order", "gp_launch_stamp: launch 5 stamped"),
    ],
)
def test_a_launch_that_did_not_count_or_stamp_in_order_fails_its_probe(corrupt: str, detail: str) -> None:
    gpu = simulated_gpu()
    gpu.corrupt_launch = corrupt
    measured = _run(gpu, runnable={"launch.stream", "launch.graph"})
    for name in ("launch.stream", "launch.graph"):
        assert measured[name].outcome.status == "failed"
        assert measured[name].facts == []
    assert detail in measured["launch.stream"].outcome.detail


def test_stamps_are_checked_for_count_completeness_and_order() -> None:
    gpu = simulated_gpu()
    counter, slots = gpu.alloc(8), gpu.alloc(64)
    counter.data.view(np.uint32)[0] = 3
    slots.data.view(np.uint64)[:3] = [100, 200, 250]
    assert checked_stamps(gpu, counter, slots, 3).tolist() == [100, 200, 250]
    with pytest.raises(ProbeFailure, match="4 launches enqueued, the kernel counted 3"):
        checked_stamps(gpu, counter, slots, 4)
    slots.data.view(np.uint64)[1] = np.uint64(2**64 - 1)
    with pytest.raises(ProbeFailure, match="not every one of the 3 launches wrote its stamp"):
        checked_stamps(gpu, counter, slots, 3)
    slots.data.view(np.uint64)[1] = 300
    with pytest.raises(ProbeFailure, match="launch 2 stamped 50 ns before launch 1"):
        checked_stamps(gpu, counter, slots, 3)


def test_a_hold_shorter_than_the_enqueue_fails_rather_than_report_host_bound_spacing() -> None:
    slow_host = simulated_gpu(enqueue_us={"cupy": 200.0, "cuda-bindings": 2.5})  # 20 launches: 4 ms, past 8 x 400 us
    measured = _run(slow_host, runnable={"launch.stream"})
    assert measured["launch.stream"].outcome.status == "failed"
    assert "longer than the 3200 us hold" in measured["launch.stream"].outcome.detail


def test_a_host_slower_than_the_planned_hold_is_measured_behind_a_longer_one() -> None:
    # 20 launches: 600 us, past the 400 us hold
    slow_host = simulated_gpu(enqueue_us={"cupy": 30.0, "cuda-bindings": 2.5})
    measured = _run(slow_host, runnable={"launch.stream"})
    assert measured["launch.stream"].outcome.status == "ok"
    assert "samples retaken behind a 800 us hold" in measured["launch.stream"].outcome.detail
    facts = _facts(measured)
    assert facts["launch.stream.gpu_spacing"].value == pytest.approx(slow_host.stream_spacing_ns / 1e3, rel=0.05)
    assert facts["launch.stream.host_latency.cupy"].value == pytest.approx(30.0, rel=0.05)


def test_implausible_event_costs_fail_the_event_probe() -> None:
    measured = _run(simulated_gpu(event_us={"record": 0.25, "synchronize": 0.0}), runnable={"launch.event"})
    assert measured["launch.event"].outcome.status == "failed"
    assert "event synchronize took 0.000 us per call" in measured["launch.event"].outcome.detail


def test_graph_replay_below_stream_launch_is_checked_where_both_were_measured() -> None:
    node = Fact("launch.graph.per_node.gpu", 0.45, "us", (0.4, 0.5), [], {}, "launch.graph")
    stream = Fact("launch.stream.additional_latency", 2.0, "us", (1.9, 2.1), [], {}, "launch.stream")
    facts = {f.id: f for f in (node, stream)}
    assert [c[:4] for c in launch._graph_below_stream(facts, None)] == [
        ("graph_node_below_stream_launch", True, "launch.graph.per_node.gpu = 0.45 us < "
         "launch.stream.additional_latency = 2 us", (node.id, stream.id))]  # fmt: skip
    facts[node.id] = dataclasses.replace(node, value=3.0)
    assert launch._graph_below_stream(facts, None)[0][1] is False
    assert launch._graph_below_stream({node.id: node}, None) == []


def test_the_slots_hold_the_largest_run() -> None:
    s = Settings()
    assert s.capacity >= max(s.launches, max(s.graph_nodes) * s.graph_replays)


def test_replays_that_would_fill_the_launch_queue_are_refused() -> None:
    with pytest.raises(ValueError, match="graph_replays 1 to 200"):
        Settings(graph_replays=2000)


def test_the_host_cost_per_node_is_not_the_gpu_drained_through_a_full_queue() -> None:
    """The first H200 run replayed a 1-node graph 2000 times behind the runner's hold: the host blocked on
    the full launch queue, its time per replay was the GPU's, and the per-node host cost came out
    -0.041 us. Replayed the same few times at every size, the host's per-node cost is what it is: here
    none (a simulated replay costs the host the same at any size), and never negative."""
    gpu = simulated_gpu(launch_queue_depth=100)
    facts = _facts(_run(gpu, runnable={"launch.graph"}, settings=dataclasses.replace(FAST, graph_replays=64)))
    assert abs(facts["launch.graph.per_node.host"].value) < 0.001  # us: none, within the host's 1 % jitter
    flooded = host_per_replay_of_a_flooded_queue(gpu)
    assert flooded > 10 * gpu.graph_replay_us  # what the old 2000 replays of one node read: the GPU's time


def host_per_replay_of_a_flooded_queue(gpu) -> float:
    """Host us per replay of a 1-node graph replayed 2000 times (the old settings) on ``gpu``."""
    from gpuprobe.runner.checked import Kernels

    stamps = launch._Stamps(Kernels(gpu), Settings())
    host, _ = gpu.graph_replay(launch.STAMP, 1, 1, stamps.args(), 1, 2000)
    return host / 2000 * 1e6


def test_planned_work_fits_the_family_budget_on_an_h100() -> None:
    """The defaults' planned launches at pessimistic costs (10 us per stamp launch on the GPU, 20 us per
    launch enqueued or captured, 50 ms per graph built, 50 us per event call, every hold at its largest,
    the runner's calls and holds): under 5 s."""
    plan = launch.plan(Settings(), H100_SXM)
    assert plan.probes == 3
    assert family_seconds(plan, child_start=False) < 5.0


@pytest.mark.parametrize(
    "change", [{"launches": 1}, {"graph_nodes": (10,)}, {"graph_nodes": (10, 1)}, {"hold_us_per_launch": 0.0}]
)
def test_settings_that_mean_nothing_are_refused(change: dict) -> None:
    with pytest.raises(ValueError, match="Settings"):
        dataclasses.replace(Settings(), **change)


def test_the_cuda_bindings_argument_block_points_at_each_value() -> None:
    class Addresses:
        def address(self, buffer: object) -> int:
            return 0xDEAD0000

    holders, pointers = _argument_block(Addresses(), [object(), np.uint32(7), np.uint64(9)])
    assert [h.dtype for h in holders] == [np.dtype(np.uint64), np.dtype(np.uint32), np.dtype(np.uint64)]
    assert [int(h[0]) for h in holders] == [0xDEAD0000, 7, 9]
    assert pointers.tolist() == [h.ctypes.data for h in holders]


# ---- static: the SASS contracts -----------------------------------------------------------------


def test_each_probe_compiles_and_its_contract_holds_on_every_supported_arch() -> None:
    probes = family_probes("launch")
    assert {p.name for p in probes} == set(PROBES)
    for result in contract_results(probes, SUPPORTED_ARCHS):
        assert result.status == "ok", f"{result.probe} on {result.arch}: {result.detail} {result.violations}"


@pytest.mark.parametrize(
    ("old", "new", "broken"),
    [
        # a fixed slot instead of the atomic: repeated launches would overwrite one stamp
        ("atom.global.add.u32 %r2, [%rd2], 1;", "ld.global.u32 %r2, [%rd2];", "count ATOMG"),
        # a fence before the stamp store: the kernel would wait on memory
        ("st.global.u64 [%rd4], %rd1;", "membar.gl;\n\tst.global.u64 [%rd4], %rd1;", "forbid"),
    ],
)
def test_the_contract_catches_a_stamp_kernel_that_is_not_the_minimal_one(
    tmp_path: Path, old: str, new: str, broken: str
) -> None:
    source = (PTX_DIR / "launch" / "launch.ptx").read_text()
    assert old in source
    path = tmp_path / "broken_launch.ptx"
    path.write_text(source.replace(old, new))
    kernel = build_ptx([path], parse_arch("sm_90a")).listing.kernel("gp_launch_stamp")
    violations = check(kernel, list(find_probe("launch.stream").contract))
    assert any(v.rule.startswith(broken) for v in violations), [v.rule for v in violations]


def test_spacing_is_not_quantised_by_the_timer_tick() -> None:
    """Launches 1.5 us apart, stamped by a timer that ticks every 1.024 us: the gaps read 1.024 or
    2.048 us, and only the first-to-last mean recovers 1.5."""
    from gpuprobe.families.launch import mean_spacing_us

    true_ns = np.arange(201) * 1500.0
    stamped = (true_ns // 1024 * 1024).astype(np.uint64)
    assert set(np.diff(stamped.astype(np.int64))) == {1024, 2048}
    assert mean_spacing_us(stamped) == pytest.approx(1.5, rel=0.01)
