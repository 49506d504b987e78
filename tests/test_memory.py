"""The memory-latency family's host side, end to end against a simulated GPU."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuprobe.core.arch import parse_arch
from gpuprobe.families.base import Request
from gpuprobe.families.chase import random_cycle
from gpuprobe.families.memory import (
    WARP_KERNEL,
    WARP_LANES,
    ProbeFailure,
    Settings,
    check_no_revisit,
    first_warm_steps,
    lane_successors,
    level_names,
    measure,
    plan,
    simulated,
    sweep_footprints,
    warp_footprint,
)
from gpuprobe.families.memory.simulated import FAST_SETTINGS
from gpuprobe.families.sampling import Stopping, sample_until_stable
from gpuprobe.judge.analysis import Level
from gpuprobe.kernels.check import check_probe
from gpuprobe.kernels.cubin import build_ptx
from gpuprobe.kernels.registry import PTX_DIR, find_probe, unroll_of
from gpuprobe.measure.conditions import ConditionRecorder
from gpuprobe.runner.checked import check_arguments
from gpuprobe.simulated.gpu import (
    KIB,
    MIB,
    SimulatedBuffer,
    SimulatedGpu,
    ptx_parameters,
    simulated_gpu,
    simulated_kernels,
)

ALL_PROBES = {
    "memory.clock",
    "memory.overhead.clock_read",
    "memory.overhead.loop",
    "memory.latency.shared",
    "memory.latency.global_ca",
    "memory.latency.global_cg",
    "memory.latency.warp_v16.l2",
    "memory.latency.warp_v16.dram",
}


def test_footprints_span_a_few_kib_to_several_l2_in_whole_lines() -> None:
    settings = Settings()
    footprints = sweep_footprints(50 * MIB, settings)
    assert footprints[0] == 4 * KIB
    assert footprints[-1] >= 4 * 50 * MIB * 0.99
    assert all(f % settings.line_bytes == 0 for f in footprints)
    assert all(b > a for a, b in itertools.pairwise(footprints))
    octaves = np.log2(footprints[-1] / footprints[0])
    dense = np.log2(settings.dense_to_l2 / settings.dense_from_l2)
    count = (octaves - dense) * settings.points_per_octave + dense * settings.dense_points_per_octave + 1
    assert len(footprints) == pytest.approx(count, abs=3)
    plain = sweep_footprints(50 * MIB, settings, dense=False)
    assert len(plain) == pytest.approx(octaves * settings.points_per_octave + 1, abs=2)


def test_footprints_are_dense_where_a_split_l2_shows_its_far_plateau() -> None:
    """From a quarter of the L2 to twice it, consecutive footprints are at most an eighth of an octave
    apart (the far plateau of an H100's L2 spans 0.6-1.0 L2 sizes); elsewhere a quarter."""
    settings = Settings()
    footprints = np.array(sweep_footprints(60 * MIB, settings))
    steps = np.diff(np.log2(footprints))
    middle = np.log2(footprints[1:]) <= np.log2(2 * 60 * MIB)
    middle &= np.log2(footprints[:-1]) >= np.log2(60 * MIB / 4)
    assert middle.sum() >= 3 * settings.dense_points_per_octave - 1
    assert steps[middle].max() <= 1 / settings.dense_points_per_octave + 0.02  # + whole lines' rounding
    assert steps[~middle].max() <= 1 / settings.points_per_octave + 0.02
    assert sum(0.6 * 60 * MIB <= f <= 60 * MIB for f in footprints) >= 5


def test_warm_up_covers_the_whole_cycle_only_where_a_cache_could_hold_it() -> None:
    settings = Settings()
    assert first_warm_steps(1000, 128_000, 50 * MIB, settings) == 1000
    assert first_warm_steps(10**6, 200 * MIB, 50 * MIB, settings) == 0


def test_random_cycle_is_one_cycle_through_every_node_starting_at_zero() -> None:
    cycle = random_cycle(1000, seed=3)
    assert cycle.order[0] == 0
    node, seen = 0, set()
    for step in range(1, 2501):
        node = int(cycle.successor[node])
        seen.add(node)
        assert node == cycle.node_after(step)
    assert seen == set(range(1000))
    assert node != int(cycle.order[0]) or 2500 % 1000 == 0


def test_random_cycle_rejects_a_single_node() -> None:
    with pytest.raises(ValueError, match="at least 2 nodes"):
        random_cycle(1, seed=0)


def test_latency_is_the_difference_of_a_long_and_a_short_chase() -> None:
    """Whatever a timed region pays once cancels; only the loads between the two lengths count."""
    sample = Settings(short_iterations=32, long_iterations=160).lengths("gp_chase_shared")
    fixed = 57.0  # clock reads, loop entry and exit, pipeline edges
    short, long = fixed + 32 * 32 * 30.0, fixed + 160 * 32 * 30.0
    assert sample.per_step(short, long) == pytest.approx(30.0)


def _iterations(monkeypatch: pytest.MonkeyPatch, kernel: str) -> list[int]:
    """The timed iterations of every launch of ``kernel`` (recorded by wrapping its simulation)."""
    seen: list[int] = []
    simulate = simulated_kernels()[kernel]

    def recorded(*args: Any, **kwargs: Any) -> None:
        seen.append(int(kwargs["iters"]))
        simulate(*args, **kwargs)

    monkeypatch.setitem(simulated_kernels(), kernel, recorded)
    return seen


def test_a_difference_under_a_hundred_cycles_is_widened_not_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    """A chase step of 0.05 cycles: (20 - 4) x 32 loads differ by 26 cycles, a quarter of what the clock must
    resolve; the long chase is lengthened until the difference spans 100 cycles, and the latency is right."""
    gpu = simulated_gpu(shared_latency=0.05, noise=0.0)
    launched = _iterations(monkeypatch, "gp_chase_shared")
    facts = _run(gpu, {"memory.clock", "memory.latency.shared"})["memory.latency.shared"].facts
    assert facts[0].value == pytest.approx(0.05, rel=0.05)
    assert max(launched) > FAST_SETTINGS.long_iterations
    unroll = unroll_of("gp_chase_shared")
    assert all((long - FAST_SETTINGS.short_iterations) * unroll * 0.05 >= 100 for long in set(launched) - {4, 20})


def test_a_chase_that_takes_no_time_fails_its_probe() -> None:
    measured = _run(simulated_gpu(shared_latency=0.0, noise=0.0), {"memory.latency.shared"})["memory.latency.shared"]
    assert measured.outcome.status == "failed" and measured.facts == []
    assert "long minus short is 0 cycles, not positive" in measured.outcome.detail


def test_every_launch_is_checked_against_the_kernels_ptx_parameters() -> None:
    parameters = ptx_parameters()
    assert all(params[-1][0] == "u64" for params in parameters.values()), "an output pointer is every kernel's last"
    written = {k: p for k, p in parameters.items() if not p[-1][1].startswith(f"{k}_param_")}  # NVRTC names by place
    assert len(written) < len(parameters)
    assert all(params[-1] == ("u64", "out") for params in written.values()), "out is every hand-written kernel's last"
    chase = parameters["gp_chase_global_cg"]
    check_arguments("gp_chase_global_cg", [np.uint64(1), np.uint32(0), np.uint32(4), object()], chase)
    with pytest.raises(ProbeFailure, match=r"takes 4 parameters"):
        check_arguments("gp_chase_global_cg", [np.uint64(1), np.uint32(4), object()], chase)
    with pytest.raises(ProbeFailure, match=r"parameter warm is \.u32, given uint64"):
        check_arguments("gp_chase_global_cg", [np.uint64(1), np.uint64(0), np.uint32(4), object()], chase)
    with pytest.raises(ProbeFailure, match=r"parameter iters is \.u32, given object"):
        check_arguments("gp_chase_global_cg", [np.uint64(1), np.uint32(0), object(), object()], chase)


def _levels(*starts_kib: float) -> list[Level]:
    """Levels whose plateaus start at the given footprints (only the start matters for naming)."""
    return [Level(None, 100.0 + i, s * KIB, s * KIB) for i, s in enumerate(starts_kib)]


@pytest.mark.parametrize(
    ("starts_kib", "l1", "names"),
    [
        ((4, 512, 32 * 1024, 64 * 1024), True, ["L1", "L2", "L2 far", "DRAM"]),
        ((4, 512, 64 * 1024), True, ["L1", "L2", "DRAM"]),
        ((4, 32 * 1024, 64 * 1024), False, ["L2", "L2 far", "DRAM"]),
        ((4, 64 * 1024), False, ["L2", "DRAM"]),
        ((4, 1024, 32 * 1024, 64 * 1024), False, ["L2", "L2 level 2", "L2 far", "DRAM"]),
        # TLB misses past the L2 make more plateaus: still DRAM, never a cache level
        ((4, 32 * 1024, 64 * 1024, 512 * 1024), False, ["L2", "L2 far", "DRAM", "DRAM, TLB level 2"]),
        ((64 * 1024,), False, ["DRAM"]),
    ],
)
def test_level_names_follow_the_device_l2(starts_kib: tuple[float, ...], l1: bool, names: list[str]) -> None:
    assert level_names(_levels(*starts_kib), l2_bytes=50 * MIB, cached_in_l1=l1) == names


def _run(gpu, runnable=frozenset(ALL_PROBES), settings=FAST_SETTINGS):
    """Each probe measured as the measuring child measures it (a failed self-check is "failed")."""
    recorder = ConditionRecorder(gpu, ptx_parameters(), clock_usable=True)
    probes = measure(Request(gpu, ptx_parameters(), gpu.device(), set(runnable), settings))
    return {name: recorder.measure(name, run) for name, run in probes}


def test_simulated_hierarchy_is_recovered() -> None:
    gpu = simulated_gpu()
    measured = _run(gpu)
    assert {name: m.outcome.status for name, m in measured.items()} == dict.fromkeys(ALL_PROBES, "ok")
    facts = {f.id: f for m in measured.values() for f in m.facts}
    wide, warp = simulated.V16_EXTRA, simulated.V16_EXTRA + simulated.WARP_EXTRA
    expected = {"latency.shared": 29.0, "latency.l1": 33.0, "latency.l2": 260.0, "latency.l2_far": 480.0,
                "latency.dram": 700.0, "overhead.clock_read": 6.0, "overhead.loop": 4.0,
                "latency.l2.warp_v16": 260.0 + warp, "latency.dram.warp_v16": 700.0 + warp}  # fmt: skip
    for fact_id, value in expected.items():
        assert facts[fact_id].value == pytest.approx(value, rel=0.06), fact_id
        low, high = facts[fact_id].ci
        assert low <= facts[fact_id].value <= high
    assert facts["capacity.l1"].value == pytest.approx(16 * KIB, rel=0.3)
    assert facts["capacity.l2"].value == pytest.approx(512 * KIB, rel=0.3)
    assert facts["capacity.l2_near"].value == pytest.approx(256 * KIB, rel=0.3)  # where the near plateau ends
    assert facts["device.sm_clock"].value == pytest.approx(gpu.mhz, rel=0.02)
    l2 = facts["latency.l2"]
    assert l2.converted["ns"] == pytest.approx(l2.value / facts["device.sm_clock"].value * 1000.0)
    for level, latency in (("l2", 260.0), ("dram", 700.0)):  # the warp's extra sectors over one lane's 16 bytes
        difference = facts[f"latency.{level}.warp_v16_minus_v16"]  # within the samples' noise (~1 % a sample)
        assert difference.value == pytest.approx(warp - wide, abs=0.03 * latency)
        assert difference.ci[0] - 0.01 * latency <= warp - wide <= difference.ci[1] + 0.01 * latency
        assert "ns" in difference.converted and "ns" in facts[f"latency.{level}.warp_v16"].converted
        width = measured[f"memory.latency.warp_v16.{level}"].outcome.series["width"]
        assert width["lanes"] == [1.0, 32.0] and width["load_bytes"] == [16.0, 512.0]


def test_a_warp_load_faster_than_the_one_thread_chase_is_refused() -> None:
    from gpuprobe.families.memory import INVARIANTS

    facts = {f.id: f for m in _run(simulated_gpu()).values() for f in m.facts}
    checks = {c.name: c for invariant in INVARIANTS for c in invariant(facts, None)}
    assert {name: c.ok for name, c in checks.items()} == {
        "memory.l2_warp_v16_not_below_chase": True,
        "memory.dram_warp_v16_not_below_chase": True,
    }
    fast = dataclasses.replace(facts["latency.l2.warp_v16"], value=200.0, ci=(199.0, 201.0))
    planted = {**facts, "latency.l2.warp_v16": fast}
    assert not next(c for i in INVARIANTS for c in i(planted, None) if c.name.startswith("memory.l2")).ok


def test_the_warp_chase_writes_every_lane_its_own_cycle_of_slots_and_launches_a_warp_and_a_lane() -> None:
    """Lane l of block b points to lane l of block successor[b]: each lane's next address is its own data."""
    cycle = random_cycle(5, 1)
    slots = lane_successors(cycle)
    for block, lane in itertools.product(range(5), range(WARP_LANES)):
        assert slots[block * WARP_LANES + lane] == cycle.successor[block] * WARP_LANES + lane
    gpu, threads = simulated_gpu(), set()

    def counted(gpu, launch, start, warm, iters, out) -> None:
        threads.add(launch.threads)
        simulated.chase_warp_v16(gpu, launch, start, warm, iters, out)

    with pytest.MonkeyPatch.context() as patch:
        patch.setitem(simulated_kernels(), WARP_KERNEL, counted)
        _run(gpu, runnable={"memory.clock", "memory.latency.warp_v16.l2"})
    assert threads == {1, WARP_LANES}
    assert warp_footprint("l2", gpu.l2_bytes, FAST_SETTINGS) <= gpu.l2_bytes / 2  # near-resident on a split L2
    assert warp_footprint("dram", gpu.l2_bytes, FAST_SETTINGS) > gpu.l2_bytes


def test_a_lane_that_ends_off_its_own_slot_fails_the_warp_probe(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = simulated_gpu()
    real = simulated.chase_warp_v16

    def one_lane_astray(gpu, launch, start, warm, iters, out) -> None:
        real(gpu, launch, start, warm, iters, out)
        out.data.view(np.uint64)[4 + 2 * (launch.threads - 1)] += 512 * (launch.threads > 1)

    monkeypatch.setitem(simulated_kernels(), WARP_KERNEL, one_lane_astray)
    measured = _run(gpu, runnable={"memory.clock", "memory.latency.warp_v16.l2"})["memory.latency.warp_v16.l2"]
    assert measured.outcome.status == "failed" and "lane 31 ended 1008 bytes" in measured.outcome.detail


def test_series_for_the_plot_are_recorded() -> None:
    measured = _run(simulated_gpu())
    series = measured["memory.latency.global_cg"].outcome.series
    curve = series["curve"]
    assert len(curve["footprint_bytes"]) == len(curve["latency_cycles"]) == len(curve["ci_low"])
    assert series["levels"]["name"] == ["L2", "L2 far", "DRAM"]
    assert series["levels"]["size_bytes"][-1] is None


def test_a_chase_that_ends_on_the_wrong_node_fails_its_probe_and_gives_no_number() -> None:
    measured = _run(simulated_gpu(corrupt_chase=True))
    for name in ("memory.latency.shared", "memory.latency.global_ca", "memory.latency.global_cg",
                 "memory.latency.warp_v16.l2", "memory.latency.warp_v16.dram"):  # fmt: skip
        assert measured[name].outcome.status == "failed"
        detail = measured[name].outcome.detail
        assert "host predicted" in detail or "not on a node" in detail or "slot" in detail
        assert measured[name].facts == []
    assert measured["memory.clock"].outcome.status == "ok"


def test_probes_whose_contract_failed_are_not_launched() -> None:
    gpu = simulated_gpu()
    measured = _run(gpu, runnable=ALL_PROBES - {"memory.latency.global_ca"})
    assert "memory.latency.global_ca" not in measured
    assert "gp_chase_global_ca" not in gpu.launches
    assert measured["memory.latency.global_cg"].outcome.status == "ok"


def test_the_chase_needs_no_standalone_overhead_to_be_exact() -> None:
    """The loop control's standalone cost is reported, never subtracted: the chase hides it."""
    measured = _run(simulated_gpu(loop=25.0), runnable=ALL_PROBES - {"memory.overhead.loop"})
    assert measured["memory.latency.shared"].facts[0].value == pytest.approx(29.0, rel=0.03)


def test_beyond_the_l2_every_launch_chases_lines_no_earlier_one_left_in_l2() -> None:
    """Cold footprints continue the chain across launches, after a flush of what writing it left."""
    measured = _run(simulated_gpu())
    facts = {f.id: f for f in measured["memory.latency.global_cg"].facts}
    assert facts["latency.dram"].value == pytest.approx(700.0, rel=0.06)
    assert facts["capacity.l2"].value == pytest.approx(512 * KIB, rel=0.3)


def test_a_plan_that_would_revisit_cold_lines_is_refused() -> None:
    kernel = "gp_chase_global_cg"
    greedy = dataclasses.replace(FAST_SETTINGS, long_iterations=200).lengths(kernel)
    defaults = Settings().lengths(kernel)
    one_sample = (defaults.short + defaults.long) * defaults.steps
    check_no_revisit(one_sample, one_sample * 128, defaults)  # any number of samples: L2 is flushed between them
    with pytest.raises(ProbeFailure, match=r"one sample's \d+ steps would revisit its 6144 nodes"):
        check_no_revisit(6144, 768 * KIB, greedy)


def test_the_global_chases_ask_for_the_largest_l1_and_record_the_sm() -> None:
    """One thread on one SM: the curve and the probe's note say which, so latency.l2 reads as that SM's."""
    gpu = simulated_gpu(sm_id=11)
    measured = _run(gpu)
    assert gpu.carveouts == {"gp_chase_global_ca": "max L1", "gp_chase_global_cg": "max L1"}
    outcome = measured["memory.latency.global_cg"].outcome
    assert set(outcome.series["curve"]["sm_id"]) == {11}
    assert outcome.detail.endswith("chased by one thread on SM 11")


def test_an_unsplit_l2_has_no_far_plateau_and_no_near_capacity() -> None:
    gpu = simulated_gpu(hierarchy_l2=[(512 * KIB, 260.0), (None, 700.0)])
    facts = {f.id: f for f in _run(gpu, {"memory.clock", "memory.latency.global_cg"})["memory.latency.global_cg"].facts}
    assert facts["latency.l2"].value == pytest.approx(260.0, rel=0.06)
    assert "latency.l2_far" not in facts and "capacity.l2_near" not in facts


def test_a_kernel_that_writes_nothing_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = simulated_gpu()  # the launch "succeeds" and leaves the poisoned words
    monkeypatch.setitem(simulated_kernels(), "gp_clock_overhead", lambda gpu, launch, out: None)
    measured = _run(gpu)
    assert measured["memory.overhead.clock_read"].outcome.status == "failed"
    assert "did not write all of its 1 results" in measured["memory.overhead.clock_read"].outcome.detail


def test_sampling_stops_once_the_median_is_known_well_enough() -> None:
    stop = Stopping(min_repeats=3, max_repeats=20, target_noise=0.01, budget_s=60)
    quiet: list[float] = []
    sample_until_stable(lambda: quiet.append(100.0 + 0.1 * len(quiet) % 2), quiet, stop)
    assert len(quiet) == 3  # three samples within 1 % already bound the median
    noisy: list[float] = []
    values = iter([100.0, 150.0, 70.0] * 10)
    sample_until_stable(lambda: noisy.append(next(values)), noisy, stop)
    assert len(noisy) == 20  # never tight enough: the repeats run out
    capped: list[float] = []
    sample_until_stable(lambda: capped.append(next(values)), capped, stop.at_most(5))
    assert len(capped) == 5
    timed: list[float] = []
    sample_until_stable(lambda: timed.append(next(values)), timed, dataclasses.replace(stop, budget_s=0.0))
    assert len(timed) == 3  # the time budget ran out after the minimum


@dataclasses.dataclass
class CountingGpu(SimulatedGpu):
    """The simulated GPU, counting the launcher calls that wait for it."""

    calls: int = 0

    def fill(self, buffer: SimulatedBuffer, value: int) -> None:
        self.calls += 1
        super().fill(buffer, value)

    def launch(self, *args: Any, **kwargs: Any) -> None:
        self.calls += 1
        super().launch(*args, **kwargs)

    def read(self, buffer: SimulatedBuffer, dtype: str, count: int) -> np.ndarray:
        self.calls += 1
        return super().read(buffer, dtype, count)

    def write_cycle(self, buffer: SimulatedBuffer, successor: np.ndarray, stride: int) -> None:
        self.calls += 1
        super().write_cycle(buffer, successor, stride)

    def upload(self, array: np.ndarray) -> SimulatedBuffer:
        self.calls += 1
        return super().upload(array)


def test_the_plan_bounds_the_launcher_calls_a_run_makes() -> None:
    """Every probe measured on the simulated GPU makes no more waiting launcher calls than ``plan`` counts
    (it counts every footprint at its most repeats; the simulated part's quiet samples stop sooner)."""
    gpu = CountingGpu()
    for _, run in measure(Request(gpu, ptx_parameters(), gpu.device(), set(ALL_PROBES), FAST_SETTINGS)):
        run()
    planned = plan(FAST_SETTINGS, gpu.device())
    assert planned.probes == len(ALL_PROBES)
    assert 0.5 * planned.launches <= gpu.calls <= planned.launches, (gpu.calls, planned)


@pytest.mark.parametrize(
    "change", [{"short_iterations": 0}, {"loop_iterations": 0}, {"long_iterations": 4}, {"dense_from_l2": 0.0}]
)
def test_settings_that_would_hang_or_mean_nothing_are_refused(change: dict) -> None:
    with pytest.raises(ValueError, match="Settings"):
        dataclasses.replace(Settings(), **change)


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_a_warp_chase_whose_second_halves_go_unused_is_caught(tmp_path: Path, arch: str) -> None:
    """Without the sink ptxas narrows each 16-byte load to 8 bytes: the contract's LDG.E.128 count fails."""
    text = (PTX_DIR / "memory" / "memory.ptx").read_text()
    wide = "ld.global.cg.v2.u64 {%rd1, %rd9}, [%rd1]; xor.b64 %rd10, %rd10, %rd9;"
    assert wide in text
    path = tmp_path / "narrowed.ptx"
    path.write_text(text.replace(wide, "ld.global.cg.v2.u64 {%rd1, %rd9}, [%rd1];"))
    result = check_probe(find_probe("memory.latency.warp_v16.l2"), build_ptx([path], parse_arch(arch)))
    assert result.status == "violated" and "count LDG" in result.detail
