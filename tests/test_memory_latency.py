"""The memory-latency family's host side, end to end against a simulated GPU."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gpuprobe.analysis import Level
from gpuprobe.families.chain import random_cycle
from gpuprobe.families.memory_latency import (
    UNROLL,
    Settings,
    level_names,
    measure,
    per_load_cycles,
    plan_footprints,
    timed_iterations,
    warm_steps,
)
from tests.fake_gpu import KIB, MIB, fake_gpu

FAST = Settings(repeats=3, timed_loads=1024, clock_spin_cycles=100_000, overhead_repeats=5)
ALL_PROBES = {
    "memory.clock",
    "memory.overhead.clock_read",
    "memory.overhead.loop",
    "memory.latency.shared",
    "memory.latency.global_ca",
    "memory.latency.global_cg",
}


def test_footprints_span_a_few_kib_to_several_l2_in_whole_lines() -> None:
    settings = Settings()
    footprints = plan_footprints(50 * MIB, settings)
    assert footprints[0] == 4 * KIB
    assert footprints[-1] >= 4 * 50 * MIB * 0.99
    assert all(f % settings.line_bytes == 0 for f in footprints)
    assert all(b > a for a, b in itertools.pairwise(footprints))
    octaves = np.log2(footprints[-1] / footprints[0])
    assert len(footprints) == pytest.approx(octaves * settings.points_per_octave + 1, abs=2)


def test_warm_up_covers_the_whole_cycle_only_where_a_cache_could_hold_it() -> None:
    settings = Settings()
    assert warm_steps(1000, 128_000, 50 * MIB, settings) == 1000
    assert warm_steps(10**6, 200 * MIB, 50 * MIB, settings) == 0


def test_random_cycle_is_one_cycle_through_every_node_starting_at_zero() -> None:
    chain = random_cycle(1000, seed=3)
    assert chain.order[0] == 0
    node, seen = 0, set()
    for step in range(1, 2501):
        node = int(chain.successor[node])
        seen.add(node)
        assert node == chain.node_after(step)
    assert seen == set(range(1000))
    assert node != int(chain.order[0]) or 2500 % 1000 == 0


def test_random_cycle_rejects_a_single_node() -> None:
    with pytest.raises(ValueError, match="at least 2 nodes"):
        random_cycle(1, seed=0)


def test_latency_subtracts_the_measured_overheads() -> None:
    iterations = 10
    cycles = 12.0 + iterations * (UNROLL * 30.0 + 4.0)
    assert per_load_cycles(cycles, iterations, clock_read=12.0, loop=4.0) == pytest.approx(30.0)
    assert timed_iterations(Settings(timed_loads=4096)) == 4096 // UNROLL


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


def _run(gpu, runnable=frozenset(ALL_PROBES)):
    return {m.probe: m for m in measure(gpu, gpu.l2_bytes, set(runnable), FAST)}


def test_simulated_hierarchy_is_recovered() -> None:
    gpu = fake_gpu()
    measured = _run(gpu)
    assert {name: m.outcome.status for name, m in measured.items()} == dict.fromkeys(ALL_PROBES, "ok")
    facts = {f.id: f for m in measured.values() for f in m.facts}
    expected = {"latency.shared": 29.0, "latency.l1": 33.0, "latency.l2": 260.0, "latency.l2_far": 480.0,
                "latency.dram": 700.0, "overhead.clock_read": 6.0, "overhead.loop": 4.0}  # fmt: skip
    for fact_id, value in expected.items():
        assert facts[fact_id].value == pytest.approx(value, rel=0.06), fact_id
        low, high = facts[fact_id].ci
        assert low <= facts[fact_id].value <= high
    assert facts["capacity.l1"].value == pytest.approx(16 * KIB, rel=0.3)
    assert facts["capacity.l2"].value == pytest.approx(512 * KIB, rel=0.3)
    assert facts["device.sm_clock"].value == pytest.approx(gpu.mhz, rel=0.02)
    l2 = facts["latency.l2"]
    assert l2.converted["ns"] == pytest.approx(l2.value / facts["device.sm_clock"].value * 1000.0)


def test_series_for_the_plot_are_recorded() -> None:
    measured = _run(fake_gpu())
    series = measured["memory.latency.global_cg"].outcome.series
    curve = series["curve"]
    assert len(curve["footprint_bytes"]) == len(curve["latency_cycles"]) == len(curve["ci_low"])
    assert series["levels"]["name"] == ["L2", "L2 far", "DRAM"]
    assert series["levels"]["size_bytes"][-1] is None


def test_a_chase_that_ends_on_the_wrong_node_fails_its_probe_and_gives_no_number() -> None:
    measured = _run(fake_gpu(corrupt_chase=True))
    for name in ("memory.latency.shared", "memory.latency.global_ca", "memory.latency.global_cg"):
        assert measured[name].outcome.status == "failed"
        assert "host predicted" in measured[name].outcome.detail or "not on a node" in measured[name].outcome.detail
        assert measured[name].facts == []
    assert measured["memory.clock"].outcome.status == "ok"


def test_probes_whose_contract_failed_are_not_launched() -> None:
    gpu = fake_gpu()
    measured = _run(gpu, runnable=ALL_PROBES - {"memory.latency.global_ca"})
    assert measured["memory.latency.global_ca"].outcome.status == "skipped"
    assert "gp_chase_global_ca" not in gpu.launches
    assert measured["memory.latency.global_cg"].outcome.status == "ok"


def test_without_the_overheads_the_chase_cannot_be_corrected() -> None:
    measured = _run(fake_gpu(), runnable=ALL_PROBES - {"memory.overhead.loop"})
    assert measured["memory.latency.shared"].outcome.status == "failed"
    assert "was not measured" in measured["memory.latency.shared"].outcome.detail


def test_a_launch_error_marks_its_probe_crashed_and_the_family_goes_on() -> None:
    gpu = fake_gpu()
    real_launch = gpu.launch

    def launch(kernel, *args, **kwargs):
        if kernel == "gp_chase_shared":
            raise RuntimeError("cudaErrorIllegalAddress: an illegal memory access was encountered")
        return real_launch(kernel, *args, **kwargs)

    gpu.launch = launch
    measured = _run(gpu)
    assert measured["memory.latency.shared"].outcome.status == "crashed"
    assert "cudaErrorIllegalAddress" in measured["memory.latency.shared"].outcome.detail
    assert measured["memory.latency.global_cg"].outcome.status == "ok"
