"""The barrier family's host side: the sums a correct barrier yields, the self-check, the run
against the simulated GPU, the invariant, the contracts on every arch, and the plan's time."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpuprobe.core.arch import SUPPORTED_ARCHS, parse_arch
from gpuprobe.core.results import Fact
from gpuprobe.families import barrier
from gpuprobe.families.barrier import simulated
from gpuprobe.families.sampling import Stopping
from gpuprobe.kernels.check import check_probe
from gpuprobe.kernels.cubin import build_ptx
from gpuprobe.kernels.registry import PTX_DIR, all_probes, find_probe, unroll_of
from gpuprobe.measure.plan import family_seconds
from gpuprobe.simulated.gpu import measure_family, simulated_gpu
from tests.helpers.checked import contract_results
from tests.helpers.devices import H200

FAST = barrier.Settings(short_iterations=2, long_iterations=6, sampling=Stopping(3, 3, 0.01, 0.5))


def _run(gpu, settings=FAST, runnable=None):
    names = set(barrier.PROBES) if runnable is None else runnable
    return measure_family(barrier, gpu, names, settings)


def test_the_probe_order_is_the_declared_family() -> None:
    assert set(barrier.PROBES) == {p.name for p in all_probes() if p.family == "barrier"}


def test_the_sums_a_correct_barrier_yields() -> None:
    assert barrier.triangle(40) == 820
    assert barrier.triangle(2**17) == (2**17 * (2**17 + 1) // 2) & 0xFFFFFFFF
    assert list(barrier.expected_sums("gp_bar_block", 96, 5)) == [15, 15, 15]
    rounds = 3 * unroll_of("gp_bar_split")  # the split kernel: consumers (odd warps) sum every round, producers write 0
    assert list(barrier.expected_sums("gp_bar_split", 128, 3)) == [0, barrier.triangle(rounds)] * 2


def test_the_simulated_costs_are_recovered() -> None:
    measured = _run(simulated_gpu(sm_count=2, noise=0.0))
    assert {n: m.outcome.status for n, m in measured.items()} == dict.fromkeys(barrier.PROBES, "ok")
    facts = {f.id: f for m in measured.values() for f in m.facts}
    for threads in barrier.BLOCK_SIZES:
        value = facts[f"sync.block.latency.{threads}"].value
        assert value == pytest.approx(simulated.block_cost(threads // 32), rel=0.01), threads
    assert facts["sync.block.named.latency"].value == pytest.approx(simulated.block_cost(4) + 2.0, rel=0.01)
    assert facts["sync.block.split.latency"].value == pytest.approx(2 * simulated.block_cost(8) + 10.0, rel=0.01)
    crowded = measured["barrier.per_sm"].outcome.series["per_sm"]
    assert crowded["blocks_per_sm"] == [1.0, 2.0, 4.0, 8.0]
    assert crowded["cycles_per_barrier"][-1] == pytest.approx(simulated.block_cost(8) * (1 + 0.04 * 7), rel=0.01)
    assert set(facts) == {f for p in all_probes() if p.family == "barrier" for f in p.facts}


def test_a_barrier_that_let_a_read_pass_a_write_fails_the_probe() -> None:
    gpu = simulated_gpu(sm_count=2)
    gpu.barrier_corrupt = True
    measured = _run(gpu)
    for name, m in measured.items():
        assert m.outcome.status == "failed", name
        assert m.facts == []
    detail = measured["barrier.block.256"].outcome.detail
    assert "block 0 warp 7 summed" in detail and "a barrier let a read pass a write" in detail


def _fact(fact_id: str, value: float, low: float, high: float) -> Fact:
    return Fact(fact_id, value, "cycle", (low, high))


def test_the_invariant_holds_when_cost_grows_and_fails_when_it_falls() -> None:
    device = simulated_gpu().device()
    growing = {f"sync.block.latency.{t}": _fact(f"sync.block.latency.{t}", 20 + t / 32, 19 + t / 32, 21 + t / 32)
               for t in barrier.BLOCK_SIZES}  # fmt: skip
    checks = barrier.barrier_monotonic(growing, device)
    assert len(checks) == len(barrier.BLOCK_SIZES) - 1 and all(ok for _, ok, *_ in checks)
    falling = dict(growing, **{"sync.block.latency.512": _fact("sync.block.latency.512", 10.0, 9.5, 10.5)})
    broken = [name for name, ok, *_ in barrier.barrier_monotonic(falling, device) if not ok]
    assert broken == ["barrier_cost_grows.256_to_512"]
    noisy = dict(growing, **{"sync.block.latency.64": _fact("sync.block.latency.64", 20.5, 19.0, 22.0)})
    assert all(ok for _, ok, *_ in barrier.barrier_monotonic(noisy, device)), "overlapping CIs are not a fall"
    assert barrier.barrier_monotonic({}, device) == []  # nothing measured: nothing checked


def test_a_block_that_wrote_nothing_is_caught() -> None:
    gpu = simulated_gpu(sm_count=2)
    gpu.barrier_silent_block = True
    measured = _run(gpu, runnable={"barrier.block.64", "barrier.per_sm"})
    for name in ("barrier.block.64", "barrier.per_sm"):
        assert measured[name].outcome.status == "failed"
        assert "did not write all" in measured[name].outcome.detail


@pytest.mark.parametrize("change", [{"long_iterations": 8}, {"named_threads": 200}, {"split_threads": 96}])
def test_settings_that_mean_nothing_are_refused(change: dict) -> None:
    with pytest.raises(ValueError, match=r"Settings|Lengths"):
        dataclasses.replace(barrier.Settings(), **change)


def test_every_probe_holds_its_contract_on_every_arch() -> None:
    results = contract_results([p for p in all_probes() if p.family == "barrier"], SUPPORTED_ARCHS)
    assert results and all(r.status == "ok" for r in results), [(r.probe, r.arch, r.detail) for r in results]


def test_a_barrier_loop_without_its_check_breaks_the_contract(tmp_path: Path) -> None:
    """The ordering check is part of what is timed: a loop that drops the slot write is not the probe."""
    text = (PTX_DIR / "barrier" / "barrier.ptx").read_text()
    old = "\tst.shared.u32 [%r13], %r2;\n//@repeat 32\n\tbar.sync 0;"
    assert text.count(old) == 1
    path = tmp_path / "barrier_mutated.ptx"
    path.write_text(text.replace(old, "//@repeat 32\n\tbar.sync 0;"))
    result = check_probe(find_probe("barrier.block.256"), build_ptx([path], parse_arch("sm_90")))
    assert result.status == "violated" and "STS" in result.detail


def test_the_planned_work_fits_the_time_budget() -> None:
    """Worst case on an H200 (``barrier.plan``): every repeat taken, 300 cycles a barrier, every launcher
    call's round trip (the per-SM probe: four levels of up to 8 blocks per SM, taking turns)."""
    plan = barrier.plan(barrier.Settings(), H200)
    assert plan.probes == len(barrier.PROBES)
    total = family_seconds(plan, child_start=False)
    assert total < 3.0, f"the barrier family could take {total:.2f} s"
    greedy = barrier.plan(dataclasses.replace(barrier.Settings(), long_iterations=20_000), H200)
    assert family_seconds(greedy, child_start=False) > 3.0  # the bound counts the kernels: it can fail


