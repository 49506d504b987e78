"""The ALU family's host side: predictions, arithmetic, and end to end against the simulated GPU."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpuprobe.core.arch import parse_arch
from gpuprobe.core.errors import ProbeFailure
from gpuprobe.families import alu
from gpuprobe.families.alu.simulated import FAST_SETTINGS, TIMING, thread_result
from gpuprobe.families.base import Request
from gpuprobe.families.differencing import Difference, Lengths
from gpuprobe.families.issue_sweep import (
    SMOKE_SETTINGS,
    TIMING_WORDS,
    TWIN_PASSES,
    Records,
    Settings,
    Sweeper,
    SweepPoint,
    plateau,
    sm_cycles,
    thread_cycles,
)
from gpuprobe.families.sampling import ONE_SAMPLE
from gpuprobe.kernels.contracts import check
from gpuprobe.kernels.cubin import build_for
from gpuprobe.kernels.registry import all_probes, find_probe
from gpuprobe.measure.plan import family_seconds
from gpuprobe.simulated.gpu import measure_family, ptx_parameters, simulated_gpu, simulated_kernels
from tests.helpers.checked import measured_module
from tests.helpers.devices import H100_SXM
from tests.helpers.issue_sweep_smoke import smoke_rates_of_the_full_run_s_shape

TERNARY = [op for op in alu.OPS if op.mufu is None]
MUFU = [op for op in alu.OPS if op.mufu is not None]


def _run(gpu, settings=FAST_SETTINGS, runnable=None, state=None):
    """The family measured on ``gpu``: every probe, or those of ``runnable``."""
    return measure_family(alu, gpu, set(alu.PROBES) if runnable is None else set(runnable), settings, state)


@pytest.mark.parametrize("op", TERNARY, ids=lambda op: op.name)
@pytest.mark.parametrize(("iterations", "ilp", "passes"), [(1, 1, 1), (7, 2, 1), (12, 8, 1), (3, 1, 2), (5, 8, 2)])
def test_ternary_prediction_is_what_the_chain_computes_step_by_step(op, iterations: int, ilp: int, passes: int) -> None:
    """The host's closed form (every chain at 1 - x0) against the chain stepped in the kernel's type, kernel
    and twin alike."""
    assert thread_result(op.name, alu.operands(op), iterations, ilp, passes) == alu.predicted_ternary(op)


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
    twin = float(np.uint32(thread_result(op.name, alu.operands(op), 1, 8, TWIN_PASSES)).view(np.float32))
    assert twin == pytest.approx(alu.predicted_mufu(op, 1, 8, TWIN_PASSES), abs=alu.MUFU_TOLERANCE)
    assert alu.predicted_mufu(op, 1, 8, TWIN_PASSES) == alu.predicted_mufu(op, 2, 8)  # a pass is 32 / ILP steps


def _records(starts: list[int], ends: list[int], sms: tuple[int, ...] | list[int] = (0,), lanes: int = 32) -> Records:
    """A launch's output with one warp per entry (its timing) and a zero result per thread."""
    warps = len(starts)
    timing = np.zeros((warps, TIMING_WORDS), dtype=np.uint64)
    timing[:, 0], timing[:, 1], timing[:, 3], timing[:, 4] = starts, ends, 100_000, sms
    words = np.concatenate([np.zeros(warps * lanes, dtype=np.uint64), timing.ravel()])
    return Records.from_output(words, warps * lanes, 1, "k")


class Loop:
    """A chain kernel and its twin as records: each warp's loop takes ``edge`` once, then per iteration
    ``control`` (the loop's IADD, ISETP and BRA) and ``step`` for each instruction of its body (32 a pass);
    ``sms`` lists each warp's SM. Every launch is kept as (passes, iterations)."""

    def __init__(self, step: float, control: float, edge: float = 57.0, sms: tuple[int, ...] = (0,), lanes: int = 1):
        self.step, self.control, self.edge, self.sms, self.lanes = step, control, edge, sms, lanes
        self.launches: list[tuple[int, int]] = []

    def __call__(self, passes: int, ilp: int, iterations: int, blocks: int, threads: int) -> Records:
        self.launches.append((passes, iterations))
        cycles = self.edge + iterations * (self.control + 32 * passes * self.step)
        return _records([0] * len(self.sms), [round(cycles)] * len(self.sms), self.sms, self.lanes)


def _sweeper(loop: Loop, settings: Settings = FAST_SETTINGS, sm_count: int = 1) -> Sweeper:
    return Sweeper(loop, settings, sm_count, "gp_alu_ffma_ilp1")


def test_the_twin_cancels_the_loop_control_that_iterations_alone_count() -> None:
    """An FFMA chain as an H200 ran it: 4 cycles a step and 7 an iteration for the loop's branch. Long minus
    short iterations of the kernel reads (32 x 4 + 7) / 32 = 4.22; the twin, same iterations, reads 4."""
    loop = Loop(step=4.0, control=7.0)
    alone = Difference(lambda n: thread_cycles(loop(1, 1, n, 1, 1)), Lengths(8, 400, 32), "kernel alone")
    assert alone.sample() == pytest.approx(4.21875)
    assert _sweeper(loop).latency(threads=1) == pytest.approx([4.0] * len(_sweeper(loop).latency(threads=1)))
    passes = {p for p, _ in loop.launches[2:]}
    assert passes == {1, TWIN_PASSES}


def test_the_pair_runs_the_same_iterations_sized_from_a_short_run_of_the_kernel() -> None:
    loop = Loop(step=4.0, control=7.0, edge=0.0)
    _sweeper(loop, Settings(sampling=ONE_SAMPLE, latency_target_cycles=13_500.0)).latency(threads=1)
    short, kernel, twin = loop.launches
    assert short == (1, 8) and kernel[0] == 1 and twin[0] == TWIN_PASSES
    assert kernel[1] == twin[1] == round(13_500.0 / 135.0)  # the twin adds one pass of 135 cycles an iteration
    capped = Loop(step=4.0, control=7.0)
    _sweeper(capped, Settings(sampling=ONE_SAMPLE, latency_target_cycles=1e12, max_iterations=5000)).latency(1)
    assert {n for _, n in capped.launches[1:]} == {5000}


def test_a_twin_no_slower_than_its_kernel_fails_the_probe_with_its_numbers() -> None:
    """A twin whose extra pass costs nothing (a body ptxas emptied) is refused, not reported as a rate."""
    with pytest.raises(ProbeFailure, match="not positive"):
        _sweeper(Loop(step=0.0, control=7.0)).latency(threads=1)


def test_the_rate_is_each_sm_span_from_first_start_to_last_end() -> None:
    # two SMs, two warps each; the second warp of each SM starts 10 cycles late
    run = _records([0, 10, 0, 10], [110, 120, 110, 120], (0, 0, 1, 1))
    assert run.span() == 120 and run.alone(warps=2) == 2 and sm_cycles(run, warps=2) == 120
    loop = Loop(step=1.0, control=3.0, sms=(0, 0, 1, 1), lanes=32)  # 64 threads an SM, one instruction a clock
    point = _sweeper(loop, sm_count=2).point(ilp=8, warps=2, work_per_instruction=1.0)
    assert point.rates == pytest.approx([64.0] * len(point.rates))  # the 3 cycles of control cancel


def test_an_sm_the_scheduler_gave_two_blocks_is_left_out_of_the_rate() -> None:
    """Five one-warp blocks on four SMs: SM 0 ran two (one after the other, or together), so its span is
    another load's; the reading is over SMs 1 to 3 (median span 1100 - 100), not over all four (1200 - 100)."""
    run = _records([0, 0, 0, 0, 200], [1100, 1100, 1300, 1100, 2300], (1, 2, 3, 0, 0))
    assert run.span() == 1200 and run.span(warps=1) == 1100 and run.alone(warps=1) == 3
    assert sm_cycles(run, warps=1) == 1100


def test_blocks_the_scheduler_doubles_up_neither_fail_nor_bias_the_sweep() -> None:
    gpu = simulated_gpu(sm_count=8)
    gpu.double_up = 1.0  # every launch of 4 blocks or more puts two of them on one SM
    measured = _run(gpu, runnable={"alu.ffma.ilp8"})
    assert measured["alu.ffma.ilp8"].outcome.status == "ok", measured["alu.ffma.ilp8"].outcome.detail
    throughput = {f.id: f for f in measured["alu.ffma.ilp8"].facts}["alu.ffma.throughput"]
    assert throughput.value == pytest.approx(TIMING["ffma"][1], rel=0.03)


def test_a_run_with_most_blocks_doubled_up_fails_the_rate() -> None:
    uneven = _records([0, 0, 0], [100, 100, 100], (0, 0, 1))  # three one-warp blocks: two on SM 0, one on SM 1
    with pytest.raises(ProbeFailure, match=r"only 1 of 3 blocks of 1 warps had an SM to themselves"):
        sm_cycles(uneven, warps=1)


def test_timings_that_go_backwards_fail_the_probe() -> None:
    with pytest.raises(ProbeFailure, match="a warp's timed loop ended at or before its start"):
        _records([5], [5], [0])


def test_the_peak_is_the_plateau_not_the_luckiest_point() -> None:
    points = [SweepPoint(1, 1, [30.0]), SweepPoint(8, 16, [127.0, 128.0]), SweepPoint(8, 32, [126.5, 130.5])]
    top, samples = plateau(points)
    assert top.warps == 32
    assert sorted(samples) == [126.5, 127.0, 128.0, 130.5]  # 30 is far below: not saturated


def _launch(gpu, op: alu.Op):
    """The family's checked launches of ``op``'s kernels, on ``gpu``, outside any probe."""
    return alu.op_launch(Request(gpu, ptx_parameters(gpu.arch), gpu.device(), set(), FAST_SETTINGS), op)


def test_the_simulated_loop_control_reads_as_on_the_h200_alone_and_cancels_against_the_twin() -> None:
    """The simulated FFMA loop pays its IADD/ISETP/BRA: timed alone (long minus short iterations of the
    kernel, the method before the twins) it reads the H200's 115.8-like rate (128 x 32 / 35) and 4.22-like
    latency ((32 x 4 + 7) / 32); the probes, against the twin, read the SM's 128 and the FFMA's 4."""
    gpu = simulated_gpu(sm_count=4, noise=0.0)
    gpu.double_up = 0.0
    launch = _launch(gpu, alu.OPS[0])
    chain = Difference(lambda n: thread_cycles(launch(1, 1, n, 1, 1)), Lengths(8, 400, 32), "alone")
    sweep = Difference(lambda n: sm_cycles(launch(1, 8, n, 4, 32 * 32), 32), Lengths(8, 200, 32), "alone")
    assert chain.sample() == pytest.approx((32 * 4 + 7) / 32, rel=1e-3)
    assert 32 * 32 / sweep.sample() == pytest.approx(128 * 32 / 35, rel=1e-3)
    facts = {f.id: f.value for m in _run(gpu, runnable={"alu.ffma.ilp1", "alu.ffma.ilp8"}).values() for f in m.facts}
    assert facts["alu.ffma.latency"] == pytest.approx(4.0, rel=1e-3)
    assert facts["alu.ffma.throughput"] == pytest.approx(128.0, rel=1e-3)


def test_a_probe_whose_twin_breaks_its_contract_is_not_runnable() -> None:
    """The twin is held to the probe's contract at two passes: a twin of one pass (the kernel itself) fails it,
    and with it the probe, whose figures would otherwise keep the loop control."""
    from gpuprobe.kernels.check import check_probe
    from gpuprobe.kernels.registry import Twin

    probe = find_probe("alu.ffma.ilp8")
    module = build_for(all_probes(), parse_arch("sm_90"))
    assert check_probe(probe, module).status == "ok"
    one_pass = dataclasses.replace(probe, twin=Twin(probe.kernel, probe.twin.contract))
    result = check_probe(one_pass, module)
    assert result.status == "violated" and result.detail.startswith("its twin gp_alu_ffma_ilp8: ")
    assert "count FFMA in timed_loop == 64" in result.detail


def test_the_smoke_stage_publishes_its_facts_with_the_full_run_s_shape() -> None:
    """A smoke fact id means what the full run's does: every rate from the same ILP and warps per SM (one warp
    per SM would read a sixteenth of the ILP-1 plateau), one thread for the latency; fewer iterations and
    samples only."""
    assert SMOKE_SETTINGS.warps == Settings().warps
    rates = smoke_rates_of_the_full_run_s_shape(alu.FAMILY)
    assert rates["alu.ffma.throughput.ilp1"] == pytest.approx(TIMING["ffma"][1], rel=0.05)  # the plateau, not 1 warp


def test_simulated_latencies_and_peaks_are_recovered() -> None:
    measured = _run(simulated_gpu(sm_count=4))
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
    gpu = simulated_gpu(sm_count=2)
    gpu.alu_corrupt = True
    measured = _run(gpu, runnable={"alu.ffma.ilp1", "alu.mufu_rsqrt.ilp4"})
    for name in ("alu.ffma.ilp1", "alu.mufu_rsqrt.ilp4"):
        assert measured[name].outcome.status == "failed"
        assert "computed" in measured[name].outcome.detail and measured[name].facts == []


def test_a_kernel_that_writes_nothing_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(simulated_kernels(), "gp_alu_imad_ilp1", lambda gpu, launch, **params: None)
    measured = _run(simulated_gpu(sm_count=2), runnable={"alu.imad.ilp1"})
    assert measured["alu.imad.ilp1"].outcome.status == "failed"
    assert "did not write all" in measured["alu.imad.ilp1"].outcome.detail


def test_the_sin_latency_is_the_whole_step_nothing_assumed_subtracted() -> None:
    measured = _run(simulated_gpu(sm_count=2), runnable={"alu.mufu_sin.ilp1"})
    outcome = measured["alu.mufu_sin.ilp1"]
    assert outcome.outcome.status == "ok" and "2 FMULs" in outcome.outcome.detail
    assert outcome.facts[0].value == pytest.approx(TIMING["mufu_sin"][0], rel=0.03)  # FMUL + FMUL.RZ + MUFU.SIN


def test_the_throughput_is_reported_over_every_ilp_measured_and_state_stays_json() -> None:
    import json

    state: dict = {}
    measured = _run(simulated_gpu(sm_count=2), runnable={f"alu.ffma.ilp{k}" for k in alu.ILPS}, state=state)
    assert [f.id for f in measured["alu.ffma.ilp8"].facts] == ["alu.ffma.throughput.ilp8", "alu.ffma.throughput"]
    assert [f.id for f in measured["alu.ffma.ilp2"].facts] == ["alu.ffma.throughput.ilp2"]
    assert {row[0] for row in state["alu_sweeps"]["ffma"]} == set(alu.ILPS)
    json.dumps(state)


def test_probes_whose_contract_failed_are_not_launched() -> None:
    gpu = simulated_gpu(sm_count=2)
    measured = _run(gpu, runnable={"alu.ffma.ilp1"})
    assert list(measured) == ["alu.ffma.ilp1"]
    assert set(gpu.launches) - {"gp_sm_clock"} == {"gp_alu_ffma_ilp1", "gp_alu_ffma_ilp1_x2"}  # clock: every probe


def test_the_whole_family_fits_its_share_of_the_time_budget_on_an_h100() -> None:
    """Both compute families get 15 s on an H100-class GPU; the ALU sweep must stay well inside half."""
    assert family_seconds(alu.plan(alu.Settings(), H100_SXM), child_start=False) < 5.0


def test_every_probe_is_declared_and_measured_in_order() -> None:
    declared = [p.name for p in all_probes() if p.family == "alu"]
    assert sorted(declared) == sorted(alu.PROBES)
    assert all(alu.PROBES.index(f"alu.{op.name}.ilp1") < alu.PROBES.index(f"alu.{op.name}.ilp8") for op in alu.OPS)
    assert alu.PROBES.index("alu.ffma.ilp1") < alu.PROBES.index("alu.mufu_sin.ilp1")  # sin subtracts FFMA
    for name in alu.PROBES:  # each timed against its twin, which its declaration names and its contract holds
        assert find_probe(name).twin.kernel == f"{find_probe(name).kernel}_x2" and find_probe(name).facts


def test_bf16_needs_sm_80_and_sm_75_builds_without_it() -> None:
    sm75 = parse_arch("sm_75")
    assert not find_probe("alu.hfma2_bf16.ilp1").supports(sm75)
    assert find_probe("alu.hfma2.ilp1").supports(sm75)
    assert "gp_alu_hfma2_bf16_ilp1" not in measured_module(sm75).parameters


@pytest.mark.parametrize(
    ("probe", "twin", "kernel", "broken"),
    [
        ("alu.ffma.ilp1", False, "gp_alu_dfma_ilp1", "count FFMA in timed_loop == 32"),  # another instruction
        ("alu.mufu_rsqrt.ilp1", False, "gp_alu_mufu_sin_ilp1", "only"),  # the sin step's FMULs are unannounced
        ("alu.ffma.ilp8", True, "gp_alu_ffma_ilp8", "count FFMA in timed_loop == 64"),  # a twin of one pass
        ("alu.ffma.ilp8", False, "gp_alu_ffma_ilp8_x2", "count FFMA in timed_loop == 32"),  # the twin for its kernel
        ("alu.mufu_sin.ilp1", True, "gp_alu_mufu_sin_ilp1", "count FMUL(\\.RZ)? in timed_loop == 128"),
    ],
)
def test_a_contract_catches_a_kernel_that_is_not_what_it_claims(probe: str, twin: bool, kernel: str, broken: str):
    """Each kernel against its own contract (the probe's, or its twin's: the probe's at two passes), then a
    kernel it must not pass for."""
    declared = find_probe(probe)
    own, contract = (declared.twin.kernel, declared.twin.contract) if twin else (declared.kernel, declared.contract)
    listing = measured_module(parse_arch("sm_90")).listing
    assert check(listing.kernel(own), list(contract)) == []
    violations = check(listing.kernel(kernel), list(contract))
    assert any(v.rule.startswith(broken) for v in violations), [str(v) for v in violations]


@pytest.mark.parametrize("change", [{"warps": (0,)}, {"warps": (64,)}, {"short_iterations": 0}])
def test_settings_that_would_hang_or_mean_nothing_are_refused(change: dict) -> None:
    with pytest.raises(ValueError, match="Settings"):
        dataclasses.replace(alu.Settings(), **change)


def _facts(**values: float) -> dict:
    from gpuprobe.core.results import Fact

    return {k.replace("__", "."): Fact(k.replace("__", "."), v, "x", (v, v), [v], {}, "p") for k, v in values.items()}


def test_invariants_bound_the_issue_rate_and_order_the_latencies() -> None:
    device = simulated_gpu().device()
    good = _facts(alu__ffma__throughput=126.0, alu__hfma2__throughput=250.0, alu__ffma__latency=4.0,
                  alu__mufu_rsqrt__latency=18.0)  # fmt: skip
    assert all(ok for check in alu.INVARIANTS for _, ok, *_ in check(good, device))
    bad = _facts(alu__ffma__throughput=300.0, alu__ffma__latency=4.0, alu__mufu_ex2__latency=3.0)
    failed = {name for check in alu.INVARIANTS for name, ok, *_ in check(bad, device) if not ok}
    assert failed == {"alu.ffma.issue_bound", "alu.mufu_ex2.slower_than_ffma"}
    assert [r for check in alu.INVARIANTS for r in check({}, device)] == []  # nothing measured: nothing checked


def test_a_block_the_kernel_cannot_launch_is_left_out_of_the_sweep(monkeypatch: pytest.MonkeyPatch) -> None:
    gpu = simulated_gpu(sm_count=2)
    monkeypatch.setattr(gpu, "max_active_blocks", lambda kernel, block, shared=0: 0 if block > 128 else 8)
    measured = _run(gpu, runnable={"alu.ffma.ilp1"})
    assert measured["alu.ffma.ilp1"].outcome.series["sweep"]["warps_per_sm"] == [1, 4]
