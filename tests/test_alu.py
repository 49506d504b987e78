"""The ALU family's host side: predictions, arithmetic, and end to end against the simulated GPU."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpuprobe.build.contracts import check
from gpuprobe.build.cubin import build_for
from gpuprobe.build.registry import all_probes, find_probe
from gpuprobe.core.arch import parse_arch
from gpuprobe.families import alu
from gpuprobe.families.base import ProbeFailure
from gpuprobe.families.issue_sweep import (
    TIMING_WORDS,
    Records,
    SweepPoint,
    issue_rate,
    iterations_for,
    plateau,
    step_latency,
)
from gpuprobe.measure.plan import family_seconds
from gpuprobe.simulated.gpu import fake_gpu, measure_family, simulated_kernels
from gpuprobe.simulated.kernels.alu import FAST_SETTINGS, TIMING, thread_result
from tests.devices import H100_SXM

TERNARY = [op for op in alu.OPS if op.mufu is None]
MUFU = [op for op in alu.OPS if op.mufu is not None]


def _run(gpu, settings=FAST_SETTINGS, runnable=None, state=None):
    probes = set(alu.PROBES) if runnable is None else runnable
    return measure_family(alu, gpu, probes, settings, state)


@pytest.mark.parametrize("op", TERNARY, ids=lambda op: op.name)
@pytest.mark.parametrize(("iterations", "ilp"), [(1, 1), (7, 2), (12, 8)])
def test_ternary_prediction_is_what_the_chain_computes_step_by_step(op, iterations: int, ilp: int) -> None:
    """The host's closed form (every chain at 1 - x0) against the chain stepped in the kernel's type."""
    assert thread_result(op.name, alu.operands(op), iterations, ilp) == alu.predicted_ternary(op)


def test_ternary_chains_start_apart_and_end_where_a_skipped_step_would_not() -> None:
    for op in TERNARY:
        slots = alu.operands(op)
        assert len(set(slots[2:].tolist())) == alu.CHAINS, op.name
        untouched = 0
        for x0 in slots[2:].tolist():
            untouched ^= int(x0)
        assert alu.predicted_ternary(op) not in (untouched, 0), op.name  # skipped steps or zeros are caught


@pytest.mark.parametrize("op", MUFU, ids=lambda op: op.name)
def test_mufu_prediction_converges_to_the_fixed_point(op) -> None:
    fixed = {"mufu_rsqrt": 1.0, "mufu_ex2": 0.6411857445, "mufu_sin": 0.9477471335}[op.name]
    assert alu.predicted_mufu(op, 100, 8) == pytest.approx(8 * fixed, abs=1e-8)
    got = float(np.uint32(thread_result(op.name, alu.operands(op), 3, 2)).view(np.float32))
    assert got == pytest.approx(alu.predicted_mufu(op, 3, 2), abs=alu.MUFU_TOLERANCE)


def _records(starts: list[int], ends: list[int], sms: tuple[int, ...] = (0,), lanes: int = 32) -> Records:
    """A launch's output with one warp per entry (its timing) and a zero result per thread."""
    warps = len(starts)
    timing = np.zeros((warps, TIMING_WORDS), dtype=np.uint64)
    timing[:, 0], timing[:, 1], timing[:, 3], timing[:, 4] = starts, ends, 100_000, sms
    words = np.concatenate([np.zeros(warps * lanes, dtype=np.uint64), timing.ravel()])
    return Records.from_output(words, warps * lanes, 1, "k")


def test_latency_is_long_minus_short_over_the_steps_between() -> None:
    fixed = 57
    short, long = _records([0], [fixed + 8 * 32 * 4], lanes=1), _records([0], [fixed + 108 * 32 * 4], lanes=1)
    assert step_latency(short, long, 100 * 32) == pytest.approx(4.0)


def test_issue_rate_uses_each_sm_span_from_first_start_to_last_end() -> None:
    # two SMs, two warps each; the second warp of each SM starts 10 cycles late
    short = _records([0, 10, 0, 10], [110, 120, 110, 120], (0, 0, 1, 1))
    long = _records([0, 10, 0, 10], [1110, 1120, 1110, 1120], (0, 0, 1, 1))
    assert short.span() == 120 and long.span() == 1120
    assert short.alone(warps=2) == 2  # each SM held one block of two warps: 64 threads
    assert issue_rate(short, long, work_per_thread_between=500.0, warps=2) == pytest.approx(64 * 500 / 1000)


def test_an_sm_the_scheduler_gave_two_blocks_is_left_out_of_the_rate() -> None:
    """Five one-warp blocks on four SMs: SM 0 ran two (one after the other, or together), so its span is
    another load's; the rate is over SMs 1 to 3 (median span 1100 - 100), not over all four (1200 - 100)."""
    short = _records([0] * 5, [100] * 5, (1, 2, 3, 0, 0))
    long = _records([0, 0, 0, 0, 200], [1100, 1100, 1300, 1100, 2300], (1, 2, 3, 0, 0))
    assert long.span() == 1200 and long.span(warps=1) == 1100 and long.alone(warps=1) == 3
    assert issue_rate(short, long, work_per_thread_between=500.0, warps=1) == pytest.approx(32 * 500 / 1000)


def test_blocks_the_scheduler_doubles_up_neither_fail_nor_bias_the_sweep() -> None:
    gpu = fake_gpu(sm_count=8)
    gpu.double_up = 1.0  # every launch of 4 blocks or more puts two of them on one SM
    measured = _run(gpu, runnable={"alu.ffma.ilp8"})
    assert measured["alu.ffma.ilp8"].outcome.status == "ok", measured["alu.ffma.ilp8"].outcome.detail
    throughput = {f.id: f for f in measured["alu.ffma.ilp8"].facts}["alu.ffma.throughput"]
    assert throughput.value == pytest.approx(TIMING["ffma"][1], rel=0.03)


def test_a_run_with_most_blocks_doubled_up_fails_the_rate() -> None:
    uneven = _records([0, 0, 0], [100, 100, 100], (0, 0, 1))  # three one-warp blocks: two on SM 0, one on SM 1
    with pytest.raises(ProbeFailure, match=r"only 1 of 3 blocks of 1 warps had an SM to themselves"):
        issue_rate(uneven, uneven, 500.0, warps=1)


def test_timings_that_go_backwards_fail_the_probe() -> None:
    with pytest.raises(ProbeFailure, match="a warp's timed loop ended at or before its start"):
        _records([5], [5], [0])
    with pytest.raises(ProbeFailure, match="cycles more than the short one"):
        step_latency(_records([0], [500]), _records([0], [400]), 10)


def test_the_long_run_is_sized_from_the_short_one_and_capped() -> None:
    assert iterations_for(8, short_span=800.0, target_cycles=10_000, most=10**6) == 8 + 100
    assert iterations_for(8, short_span=800.0, target_cycles=10**9, most=5000) == 5000


def test_the_peak_is_the_plateau_not_the_luckiest_point() -> None:
    points = [SweepPoint(1, 1, [30.0]), SweepPoint(8, 16, [127.0, 128.0]), SweepPoint(8, 32, [126.5, 130.5])]
    top, samples = plateau(points)
    assert top.warps == 32
    assert sorted(samples) == [126.5, 127.0, 128.0, 130.5]  # 30 is far below: not saturated


def test_simulated_latencies_and_peaks_are_recovered() -> None:
    measured = _run(fake_gpu(sm_count=4))
    assert {m.outcome.status for m in measured.values()} == {"ok"}
    facts = {f.id: f for m in measured.values() for f in m.facts}
    for op in alu.OPS:
        latency, peak, _ = TIMING[op.name]
        assert facts[f"alu.{op.name}.latency"].value == pytest.approx(latency, rel=0.03), op.name
        assert facts[f"alu.{op.name}.throughput"].value == pytest.approx(peak, rel=0.03), op.name
        assert facts[f"alu.{op.name}.latency"].converted["ns"] > 0
    sweep = measured["alu.ffma.ilp1"].outcome.series["sweep"]
    assert sweep["warps_per_sm"] == list(FAST_SETTINGS.warps) and set(sweep["ilp"]) == {1}
    assert sweep["rate"][0] < sweep["rate"][-1]  # one warp with one chain is latency bound


def test_a_wrong_result_fails_every_probe_with_the_thread_named() -> None:
    gpu = fake_gpu(sm_count=2)
    gpu.alu_corrupt = True
    measured = _run(gpu, runnable={"alu.ffma.ilp1", "alu.mufu_rsqrt.ilp4"})
    for name in ("alu.ffma.ilp1", "alu.mufu_rsqrt.ilp4"):
        assert measured[name].outcome.status == "failed"
        assert "computed" in measured[name].outcome.detail and measured[name].facts == []


def test_a_kernel_that_writes_nothing_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(simulated_kernels(), "gp_alu_imad_ilp1", lambda gpu, launch, **params: None)
    measured = _run(fake_gpu(sm_count=2), runnable={"alu.imad.ilp1"})
    assert measured["alu.imad.ilp1"].outcome.status == "failed"
    assert "did not write all" in measured["alu.imad.ilp1"].outcome.detail


def test_the_sin_latency_is_the_whole_step_nothing_assumed_subtracted() -> None:
    measured = _run(fake_gpu(sm_count=2), runnable={"alu.mufu_sin.ilp1"})
    outcome = measured["alu.mufu_sin.ilp1"]
    assert outcome.outcome.status == "ok" and "2 FMULs" in outcome.outcome.detail
    assert outcome.facts[0].value == pytest.approx(TIMING["mufu_sin"][0], rel=0.03)  # FMUL + FMUL.RZ + MUFU.SIN


def test_the_throughput_is_reported_over_every_ilp_measured_and_state_stays_json() -> None:
    import json

    state: dict = {}
    measured = _run(fake_gpu(sm_count=2), runnable={f"alu.ffma.ilp{k}" for k in alu.ILPS}, state=state)
    assert [f.id for f in measured["alu.ffma.ilp8"].facts] == ["alu.ffma.throughput.ilp8", "alu.ffma.throughput"]
    assert [f.id for f in measured["alu.ffma.ilp2"].facts] == ["alu.ffma.throughput.ilp2"]
    assert {row[0] for row in state["alu_sweeps"]["ffma"]} == set(alu.ILPS)
    json.dumps(state)


def test_probes_whose_contract_failed_are_not_launched() -> None:
    gpu = fake_gpu(sm_count=2)
    measured = _run(gpu, runnable={"alu.ffma.ilp1"})
    assert list(measured) == ["alu.ffma.ilp1"]
    assert set(gpu.launches) - {"gp_sm_clock"} == {"gp_alu_ffma_ilp1"}  # the clock is read around every probe


def test_the_whole_family_fits_its_share_of_the_time_budget_on_an_h100() -> None:
    """Both compute families get 15 s on an H100-class GPU; the ALU sweep must stay well inside half."""
    assert family_seconds(alu.plan(alu.Settings(), H100_SXM), child_start=False) < 5.0


def test_every_probe_is_declared_and_measured_in_order() -> None:
    declared = [p.name for p in all_probes() if p.family == "alu"]
    assert sorted(declared) == sorted(alu.PROBES)
    assert all(alu.PROBES.index(f"alu.{op.name}.ilp1") < alu.PROBES.index(f"alu.{op.name}.ilp8") for op in alu.OPS)
    assert alu.PROBES.index("alu.ffma.ilp1") < alu.PROBES.index("alu.mufu_sin.ilp1")  # sin subtracts FFMA


def test_bf16_needs_sm_80_and_sm_75_builds_without_it() -> None:
    sm75 = parse_arch("sm_75")
    assert not find_probe("alu.hfma2_bf16.ilp1").supports(sm75)
    assert find_probe("alu.hfma2.ilp1").supports(sm75)
    assert "gp_alu_hfma2_bf16_ilp1" not in build_for(all_probes(), sm75).parameters


@pytest.mark.parametrize(
    ("probe", "kernel", "broken"),
    [
        ("alu.ffma.ilp1", "gp_alu_dfma_ilp1", "count FFMA in timed_loop == 32"),  # another instruction
        ("alu.mufu_rsqrt.ilp1", "gp_alu_mufu_sin_ilp1", "only"),  # the sin step's FMULs are unannounced
    ],
)
def test_a_contract_catches_a_kernel_that_is_not_what_it_claims(probe: str, kernel: str, broken: str) -> None:
    listing = build_for(all_probes(), parse_arch("sm_90")).listing
    assert check(listing.kernel(find_probe(probe).kernel), list(find_probe(probe).contract)) == []
    violations = check(listing.kernel(kernel), list(find_probe(probe).contract))
    assert any(v.rule.startswith(broken) for v in violations), [str(v) for v in violations]


@pytest.mark.parametrize("change", [{"warps": (0,)}, {"warps": (64,)}, {"short_iterations": 0}, {"max_repeats": 0}])
def test_settings_that_would_hang_or_mean_nothing_are_refused(change: dict) -> None:
    with pytest.raises(ValueError, match="Settings"):
        dataclasses.replace(alu.Settings(), **change)


def _facts(**values: float) -> dict:
    from gpuprobe.core.results import Fact

    return {k.replace("__", "."): Fact(k.replace("__", "."), v, "x", (v, v), [v], {}, "p") for k, v in values.items()}


def test_invariants_bound_the_issue_rate_and_order_the_latencies() -> None:
    device = fake_gpu().device()
    good = _facts(alu__ffma__throughput=126.0, alu__hfma2__throughput=250.0, alu__ffma__latency=4.0,
                  alu__mufu_rsqrt__latency=18.0)  # fmt: skip
    assert all(ok for check in alu.INVARIANTS for _, ok, *_ in check(good, device))
    bad = _facts(alu__ffma__throughput=300.0, alu__ffma__latency=4.0, alu__mufu_ex2__latency=3.0)
    failed = {name for check in alu.INVARIANTS for name, ok, *_ in check(bad, device) if not ok}
    assert failed == {"alu.ffma.issue_bound", "alu.mufu_ex2.slower_than_ffma"}
    assert [r for check in alu.INVARIANTS for r in check({}, device)] == []  # nothing measured: nothing checked


def test_a_block_the_kernel_cannot_launch_is_left_out_of_the_sweep(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = fake_gpu(sm_count=2)
    monkeypatch.setattr(gpu, "max_active_blocks", lambda kernel, block, shared=0: 0 if block > 128 else 8)
    measured = _run(gpu, runnable={"alu.ffma.ilp1"})
    assert measured["alu.ffma.ilp1"].outcome.series["sweep"]["warps_per_sm"] == [1, 4]
