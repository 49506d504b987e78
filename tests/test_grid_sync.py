"""The grid_sync family's host side, end to end against a simulated GPU, and its contracts."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpuprobe.core.arch import SUPPORTED_ARCHS, parse_arch
from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Fact
from gpuprobe.families import grid_sync
from gpuprobe.families.base import Request
from gpuprobe.families.grid_sync import PROBES, Settings, barrier_difference, grid_sizes
from gpuprobe.families.grid_sync.simulated import WORK_NS, sync_cycles
from gpuprobe.families.sampling import Stopping
from gpuprobe.kernels.contracts import check
from gpuprobe.kernels.cubin import build_ptx
from gpuprobe.kernels.registry import PTX_DIR, find_probe
from gpuprobe.measure.plan import family_seconds
from gpuprobe.pytest_plugin import family_probes
from gpuprobe.runner.launcher import CooperativeGridTooLarge
from gpuprobe.simulated.gpu import measure_family, ptx_parameters, simulated_gpu
from tests.helpers.checked import contract_results
from tests.helpers.devices import H100_SXM

FAST = Settings(long_syncs=161, long_steps=21, sampling=Stopping(3, 3, 0.02, 0.5))  # phases of >= 100 us: clock to 1 %


def _run(gpu, runnable=frozenset(PROBES), settings=FAST):
    return measure_family(grid_sync, gpu, runnable, settings)


def _opened(gpu) -> grid_sync.GridBarrier:
    return grid_sync.GridBarrier.open(Request(gpu, ptx_parameters(), gpu.device(), set(PROBES)), FAST)


def _facts(measured) -> dict[str, Fact]:
    return {f.id: f for m in measured.values() for f in m.facts}


def test_grids_run_from_one_block_to_the_co_resident_maximum() -> None:
    assert grid_sizes(132, 8) == [1, 33, 66, 132, 264, 528, 1056]
    assert grid_sizes(108, 1) == [1, 27, 54, 108]
    assert grid_sizes(1, 1) == [1]
    with pytest.raises(ProbeFailure, match="no cooperative grid fits"):
        grid_sizes(132, 0)


def test_cost_per_sync_is_long_minus_short_over_the_syncs_between() -> None:
    settings = Settings(short_syncs=1, long_syncs=401)
    fixed = 77.0  # clock reads, loop entry and exit
    clocks: list[float] = []

    def timed(blocks: int, syncs: int) -> tuple[int, int]:
        cycles = fixed + syncs * 1500.0
        return int(cycles), int(cycles / 1.98)  # a 1980 MHz clock

    difference = barrier_difference(timed, 132, settings, clocks, "gp_gs_grid")
    assert difference.sample() == pytest.approx(1500.0)
    assert clocks == [pytest.approx(1980.0, rel=1e-3)]  # the long launch's window reads the clock, the short's not


def test_simulated_barrier_costs_are_recovered_in_cycles_and_ns() -> None:
    gpu = simulated_gpu()
    measured = _run(gpu)
    assert {n: m.outcome.status for n, m in measured.items()} == dict.fromkeys(PROBES, "ok")
    facts = _facts(measured)
    one_per_sm, full = facts["sync.grid.latency"], facts["sync.grid.latency_full"]
    assert one_per_sm.value == pytest.approx(sync_cycles(gpu.sm_count), rel=0.03)
    assert full.value == pytest.approx(sync_cycles(gpu.sm_count * gpu.blocks_per_sm), rel=0.03)
    assert one_per_sm.converted["ns"] == pytest.approx(one_per_sm.value / gpu.mhz * 1000.0, rel=0.02)
    series = measured["grid_sync.latency"].outcome.series["grid"]
    assert series["blocks"][-1] == gpu.sm_count * gpu.blocks_per_sm
    step_us = (sync_cycles(gpu.sm_count) / gpu.mhz * 1000.0 + WORK_NS) / 1e3
    assert facts["sync.grid.persistent_step"].value == pytest.approx(step_us, rel=0.05)
    assert facts["launch.back_to_back_step"].value == pytest.approx((gpu.stream_spacing_ns + WORK_NS) / 1e3, rel=0.05)


def test_a_short_phase_under_a_timer_tick_reads_0_or_1_tick_and_is_no_error() -> None:
    """One barrier (0.7 us here) between block 0's reads of a %globaltimer that moves every 1 us."""
    gpu = simulated_gpu()
    grid = _opened(gpu)
    readings = {grid.timed(1, 1)[1] for _ in range(20)}
    assert readings == {0, 1000}


def test_long_phases_too_short_to_read_the_clock_give_cycles_only_and_say_so() -> None:
    measured = _run(simulated_gpu(), runnable={"grid_sync.latency"}, settings=dataclasses.replace(FAST, long_syncs=41))
    outcome = measured["grid_sync.latency"].outcome
    assert outcome.status == "ok" and "no timed phase of 100 us or more" in outcome.detail
    assert all(f.converted == {} for f in measured["grid_sync.latency"].facts)
    assert "latency_ns" not in outcome.series["grid"]


def test_every_cooperative_grid_fits_what_the_occupancy_api_allows() -> None:
    gpu = simulated_gpu(blocks_per_sm=3, sm_count=20)
    measured = _run(gpu)
    assert measured["grid_sync.latency"].outcome.status == "ok"
    assert measured["grid_sync.latency"].outcome.series["grid"]["blocks"][-1] == 60


def test_an_oversized_cooperative_grid_is_refused_never_shrunk() -> None:
    gpu = simulated_gpu(blocks_per_sm=2, sm_count=4)
    grid = _opened(gpu)
    with pytest.raises(ProbeFailure, match=r"9 blocks .* at most 8 \(2 per SM x 4 SMs.*never shrunk"):
        grid.timed(9, 1)
    assert "gp_gs_grid" not in gpu.launches
    with pytest.raises(CooperativeGridTooLarge, match="9 blocks cannot be co-resident"):  # as the launcher refuses it
        gpu.launch("gp_gs_grid", 9, FAST.block, grid.args(1, 1, 0), cooperative=True)


def test_no_co_resident_block_at_all_fails_the_probe_with_the_reason() -> None:
    measured = _run(simulated_gpu(blocks_per_sm=0))
    assert measured["grid_sync.latency"].outcome.status == "failed"
    assert "no cooperative grid fits" in measured["grid_sync.latency"].outcome.detail
    assert "at most 0" in measured["grid_sync.persistent"].outcome.detail


@pytest.mark.parametrize(
    ("corrupt", "detail"),
    [  # the first launch runs 4 check rounds and 1 timed barrier: 5 barriers, an odd number
        ("order", "1 tag(s) read after the barrier were not the round's"),
        ("passed", "passed 4 barriers, not 5"),
        ("counter", "the arrive word ended 0x0 after 5 barriers, not 0x80000000"),
    ],
)
def test_a_barrier_that_did_not_order_fails_its_probe_and_gives_no_number(corrupt: str, detail: str) -> None:
    gpu = simulated_gpu()
    gpu.corrupt_grid_sync = corrupt
    measured = _run(gpu, runnable={"grid_sync.latency"})
    outcome = measured["grid_sync.latency"].outcome
    assert outcome.status == "failed"
    assert detail in outcome.detail
    assert measured["grid_sync.latency"].facts == []


def test_the_persistent_kernels_words_are_checked() -> None:
    gpu = simulated_gpu()
    gpu.corrupt_grid_sync = "work"
    measured = _run(gpu, runnable=PROBES)
    assert measured["grid_sync.latency"].outcome.status == "ok"  # no step in the latency launches
    assert measured["grid_sync.persistent"].outcome.status == "failed"
    assert "gp_gs_grid: thread 0 counted 0 steps, not 1" in measured["grid_sync.persistent"].outcome.detail


def test_the_persistent_probe_needs_the_barrier_kernels_contract() -> None:
    measured = _run(simulated_gpu(), runnable={"grid_sync.persistent"})
    assert measured["grid_sync.persistent"].outcome.status == "failed"
    assert "contract (grid_sync.latency) did not hold" in measured["grid_sync.persistent"].outcome.detail


def test_planned_work_fits_the_family_budget_on_an_h100() -> None:
    """Every launch the defaults can plan on an H100 (132 SMs, up to 8 blocks of 256 per SM), at a
    pessimistic 5 us per barrier, with the runner's fills, read-backs and holds: under 5 s."""
    plan = grid_sync.plan(Settings(), H100_SXM)
    assert plan.probes == 2 and plan.launches == 7 * 7 * 2 * grid_sync.TIMED_CALLS + 7 * 2 * 8
    assert family_seconds(plan, child_start=False) < 5.0


def test_grid_sync_costs_more_than_a_block_barrier_where_both_were_measured() -> None:
    grid = Fact("sync.grid.latency", 1500.0, "cycle", (1400.0, 1600.0), [], {}, "grid_sync.latency")
    block = Fact("sync.block.latency", 40.0, "cycle", (39.0, 41.0), [], {}, "sync.block")
    (check_result,) = grid_sync._block_barrier_check({"sync.grid.latency": grid, "sync.block.latency": block}, None)
    assert check_result[1] is True and check_result[0] == "grid_sync_above_latency"
    slow = dataclasses.replace(block, value=2000.0)
    assert grid_sync._block_barrier_check({"sync.grid.latency": grid, "x": slow}, None)[0][1] is False
    assert grid_sync._block_barrier_check({"sync.block.latency": block}, None) == []


@pytest.mark.parametrize("change", [{"long_syncs": 1}, {"checks": 0}, {"long_steps": 1}, {"short_steps": 0}])
def test_settings_that_mean_nothing_are_refused(change: dict) -> None:
    with pytest.raises(ValueError, match="Settings"):
        dataclasses.replace(Settings(), **change)


# ---- static: the SASS contracts -----------------------------------------------------------------


def test_each_probe_compiles_and_its_contract_holds_on_every_supported_arch() -> None:
    probes = family_probes("grid_sync")
    results = {(r.probe, r.arch): r for r in contract_results(probes, SUPPORTED_ARCHS)}
    for probe in probes:
        for arch in SUPPORTED_ARCHS:
            result = results[probe.name, arch.name]
            assert result.status == "ok", f"{probe.name} on {arch}: {result.detail} {result.violations}"


@pytest.mark.parametrize(
    ("edit", "broken"),
    [
        # no release / acquire: the arrival is a relaxed add and the spin a relaxed load
        ((("red.release.gpu", "red.relaxed.gpu"), ("ld.acquire.gpu", "ld.relaxed.gpu")), {"MEMBAR", "CCTL"}),
        # a weak spin load that may sit in L1 forever
        ((("ld.acquire.gpu.global.u32", "ld.global.u32"),), {"LDG", "CCTL"}),
        # the block does not meet after the release: other threads run ahead of thread 0's acquire
        ((("ARRIVED_{PHASE}:\n\tbar.sync 0;", "ARRIVED_{PHASE}:"),), {"BAR"}),
    ],
)
def test_the_contract_catches_a_barrier_that_would_not_order(tmp_path: Path, edit, broken: set[str]) -> None:
    source = (PTX_DIR / "grid_sync" / "grid_sync.ptx").read_text()
    for old, new in edit:
        assert old in source
        source = source.replace(old, new)
    path = tmp_path / "broken_grid_sync.ptx"
    path.write_text(source)
    kernel = build_ptx([path], parse_arch("sm_90a")).listing.kernel("gp_gs_grid")
    violations = check(kernel, list(find_probe("grid_sync.latency").contract))
    assert violations
    named = " ".join(v.rule for v in violations)
    assert all(word in named for word in broken), named
