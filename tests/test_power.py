"""The power family's host side on the simulated GPU and its power model: burst against sustained, the clock
settling, energy per operation with and without idle power, every launch's check, a part without an energy
counter, the invariants, the plot, the contracts and the time plan."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Fact, ProbeOutcome, Results
from gpuprobe.families import power
from gpuprobe.families.base import Request
from gpuprobe.families.mma.fragments import CHAINS, operands_of, predicted_words
from gpuprobe.families.power import simulated
from gpuprobe.families.power.plot import sustained_png
from gpuprobe.families.power.wgmma import WGMMA, module_text
from gpuprobe.families.wgmma.simulated import CUBLAS_CLOCK_DROP, ONE_WARPGROUP_SHORTFALL, THROUGHPUT_EFFICIENCY
from gpuprobe.judge.invariants import check_invariants
from gpuprobe.judge.physics import physics_checks
from gpuprobe.kernels.registry import all_probes
from gpuprobe.kernels.source_tree import PTX_DIR
from gpuprobe.measure.plan import family_seconds
from gpuprobe.runner.launcher import LaunchPathUnavailable
from gpuprobe.runner.trajectory import Reading, Trajectory
from gpuprobe.simulated import power as power_model
from gpuprobe.simulated.gpu import SimulatedGpu, measure_family, ptx_parameters, suite_options
from tests.helpers.devices import A100_SXM, H200

FAST = simulated.FAST_SETTINGS


def _run(gpu: SimulatedGpu | None = None, runnable=None, settings=FAST):
    gpu = gpu or SimulatedGpu(**suite_options(noise=0.0))
    return measure_family(power, gpu, set(runnable or power.PROBES), settings)


def _facts(measured) -> dict[str, Fact]:
    return {f.id: f for m in measured.values() for f in m.facts}


@pytest.fixture(scope="module")
def measured():
    return _run()


def test_the_probes_are_the_declared_family_in_order() -> None:
    assert set(power.PROBES) == {p.name for p in all_probes() if p.family == "power"}
    assert power.PROBES[0] == power.IDLE  # the idle power first: every run's energy above idle takes it off


def test_a_power_limited_run_slows_as_its_clock_falls_and_the_others_hold(measured) -> None:
    assert {n: m.outcome.status for n, m in measured.items()} == dict.fromkeys(power.PROBES, "ok")
    facts = _facts(measured)
    random, zero = "power.mma.bf16.random", "power.mma.bf16.zero"
    limited = (power_model.POWER_LIMIT_W - power_model.IDLE_W) / (power_model.DRAW_W["tensor"] - power_model.IDLE_W)
    assert facts[f"{random}.sustained_mhz"].value == pytest.approx(SimulatedGpu().mhz * limited, rel=0.01)
    for run in (random, "power.wgmma.bf16.random"):
        assert facts[f"{run}.sustained_fraction"].value == pytest.approx(limited, rel=0.01), run
        assert 0 < facts[f"{run}.settle_ms"].value < 3 * power_model.RAMP_S * 1e3, run  # the controller acted early
    for run in (zero, "power.wgmma.bf16.zero", "power.ffma", "power.dram_read", "power.l2_read", "power.shared_read"):
        assert facts[f"{run}.sustained_fraction"].value == pytest.approx(1.0, abs=0.01), run
        assert facts[f"{run}.settle_ms"].value == 0.0, run
    assert facts["power.l2_read.sustained"].value > 2 * facts["power.dram_read.sustained"].value


def test_energy_per_operation_is_the_counters_joules_over_the_work_and_idle_is_taken_off(measured) -> None:
    facts = _facts(measured)
    scale = SimulatedGpu(**suite_options()).sm_count / 132
    assert facts["power.idle.watts"].value == pytest.approx(power_model.IDLE_W * scale)
    assert facts["power.mma.bf16.random.watts"].value == pytest.approx(power_model.POWER_LIMIT_W * scale, rel=1e-6)
    assert facts["power.mma.bf16.zero.watts"].value == pytest.approx(power_model.DRAW_W["tensor_zero"] * scale)
    for run, unit in (("power.mma.bf16.random", "pJ/FLOP"), ("power.dram_read", "pJ/byte")):
        steady = measured[run].outcome.series["steady"]
        (ops,), (seconds,), (joules,) = steady["ops"], steady["seconds"], steady["energy_j"]
        assert facts[f"{run}.watts"].value == pytest.approx(joules / seconds)
        assert facts[f"{run}.pj_per_op"].unit == unit
        assert facts[f"{run}.pj_per_op"].value == pytest.approx(joules / ops * 1e12)
        above = (joules - facts["power.idle.watts"].value * seconds) / ops * 1e12
        assert facts[f"{run}.pj_per_op_above_idle"].value == pytest.approx(above)
        rate = facts[f"{run}.sustained"].value * (1e12 if unit == "pJ/FLOP" else 1e9)  # the median launch's
        assert facts[f"{run}.pj_per_op"].value == pytest.approx(joules / seconds / rate * 1e12, rel=0.15)


def test_the_invariants_hold_and_a_sustained_rate_above_its_burst_breaks_physics(measured) -> None:
    facts = _facts(measured)
    checks = {c.name: c for c in check_invariants(facts, H200, power.INVARIANTS)}
    assert checks and all(c.ok for c in checks.values()), [c.detail for c in checks.values() if not c.ok]
    for unit in ("mma", "wgmma"):
        assert {f"power_zero_operands.{unit}.draw_no_more", f"power_zero_operands.{unit}.not_slower"} <= set(checks)
    assert all(c.ok for c in physics_checks(facts))
    faster = dict(facts)
    burst = facts["power.dram_read.burst"]
    twice = 2 * burst.value
    faster["power.dram_read.sustained"] = dataclasses.replace(burst, id="power.dram_read.sustained", value=twice,
                                                              ci=(twice, twice))  # fmt: skip
    broken = {c.name: c for c in physics_checks(faster)}
    assert not broken["physics.sustained_within_burst.power.dram_read.sustained"].ok


def test_every_arithmetic_run_is_judged_per_clock_and_the_others_are_held_to_their_probes(measured) -> None:
    facts = _facts(measured)
    sm_count = SimulatedGpu(**suite_options()).sm_count
    for run in ("power.wgmma.bf16.random", "power.ffma"):
        per_clock = facts[f"{run}.flop_per_clock"]
        rate = facts[f"{run}.sustained"].value * 1e12 / (facts[f"{run}.sustained_mhz"].value * 1e6 * sm_count)
        assert per_clock.unit == "FLOP/clk/SM" and per_clock.value == pytest.approx(rate, rel=0.01)
        peak = power.RUNS[run].flop_per_clock_per_sm(H200)
        assert facts[f"{run}.fraction_of_peak"].value == pytest.approx(per_clock.value / peak)
    wgmma = facts["power.wgmma.bf16.random.fraction_of_peak"].value  # one warpgroup an SM in the fast settings
    assert wgmma == pytest.approx(THROUGHPUT_EFFICIENCY["random"] * ONE_WARPGROUP_SHORTFALL, rel=0.01)
    assert facts["power.ffma.fraction_of_peak"].value == pytest.approx(64 / 67, rel=0.01)  # loop control: 3 of 67
    assert "power.mma.bf16.random.fraction_of_peak" not in facts  # no per-clock peak of its own: held to its probe
    references = {
        "tensor.mma_sync.bf16.m16n8k16.throughput": facts["power.mma.bf16.zero.flop_per_clock"].value / 2,
        "alu.ffma.throughput": facts["power.ffma.flop_per_clock"].value / 2,
        "bandwidth.dram_read.v16": facts["power.dram_read.burst"].value,
        "bandwidth.l2_read.v16": facts["power.l2_read.burst"].value,
    }
    planted = {**facts, **{i: Fact(i, v, "") for i, v in references.items()}}
    checks = {c.name: c for c in power.within_the_issue_and_bandwidth_probes(planted, H200)}
    assert len(checks) == 5 and all(c.ok for c in checks.values()), [c.detail for c in checks.values()]
    low = {**planted, **{i: Fact(i, 0.8 * v, "") for i, v in references.items()}}
    checks = {c.name: c for c in power.within_the_issue_and_bandwidth_probes(low, H200)}
    assert not any(c.ok for c in checks.values())
    assert set(checks) == {"power_within_issue_rate.mma.bf16.random", "power_within_issue_rate.mma.bf16.zero",
                           "power_within_issue_rate.ffma", "power_within_bandwidth.dram_read",
                           "power_within_bandwidth.l2_read"}  # fmt: skip


def test_the_wgmma_kernel_is_the_wgmma_familys_generator_output_under_its_own_name() -> None:
    assert (PTX_DIR / "power" / "power_wgmma.ptx").read_text() == module_text(), (
        "regenerate: python -m gpuprobe.families.power > ptx/power/power_wgmma.ptx"
    )
    assert WGMMA.name == "gp_pw_wg_tput_ss_bf16_n256" and "gp_pw_wg_smem" in module_text()


def test_ffma_operands_carry_random_bits_and_every_chain_step_is_exact() -> None:
    operands = power.ffma_operands(power.Settings().seed).astype(np.float64)
    a, b, x = operands.reshape(3, power.FFMA_CHAINS)
    assert len(np.unique(np.abs(a))) > 4 and set(np.abs(a)) <= {1 + m / 128 for m in range(128)}
    step = (x + a * b).astype(np.float32).astype(np.float64)
    assert np.array_equal(step, x + a * b) and np.array_equal(step - a * b, x)  # both FMAs exact in f32
    assert np.array_equal((x[:4] + x[4:]).astype(np.float32), x[:4] + x[4:])


def test_a_dram_stream_above_the_dram_peak_breaks_physics(measured) -> None:
    facts = _facts(measured)
    rate = facts["power.dram_read.burst"].value
    within = {"bandwidth.dram_theoretical": Fact("bandwidth.dram_theoretical", 1.5 * rate, "GB/s"), **facts}
    checks = {c.name: c for c in check_invariants(within, H200, power.INVARIANTS)}
    assert checks["power_dram_within_peak.burst"].ok and checks["power_dram_within_peak.burst"].physics
    planted = {**within, "bandwidth.dram_theoretical": Fact("bandwidth.dram_theoretical", 0.5 * rate, "GB/s")}
    checks = {c.name: c for c in check_invariants(planted, H200, power.INVARIANTS)}
    assert not checks["power_dram_within_peak.burst"].ok and not checks["power_dram_within_peak.sustained"].ok


def test_a_run_drawing_less_than_idle_fails_the_probe(measured) -> None:
    run = power.Sustained(steady=Trajectory([Reading(0.0), Reading(1.0)], (0.0, 50e3)))  # 50 W over 1 s
    spec = power.RUNS["power.dram_read"]
    assert power.energy_facts(spec.probe, spec, run, 1e12, idle_w=40.0)[-1].value > 0
    with pytest.raises(ProbeFailure, match=r"below the 60\.0 W measured idle"):
        power.energy_facts(spec.probe, spec, run, 1e12, idle_w=60.0)


def test_random_operands_toggle_every_mantissa_bit_yet_every_chain_step_is_exact() -> None:
    a, b, c = power.random_operands(power.Settings().seed)
    assert set(np.unique(np.abs(a))) <= {1 + m / 128 for m in range(128)} and len(np.unique(np.abs(a))) > 64
    assert np.all(c / power.FRACTION == np.round(c / power.FRACTION)) and np.abs(c).max() < 32
    made = operands_of(power.VARIANT, a, b, c)
    reference = (c + a @ b).astype(np.float32).astype(np.float64)
    assert np.array_equal(reference, c + a @ b)  # exact in f32: every sum the tensor core makes is too
    words = predicted_words(power.VARIANT, made)
    assert words.view(np.float32)[0, 0] == np.float32(CHAINS * (c + a @ b)[0, 0])  # lane 0's D[0][0], 8 chains


CORRUPTED = {power.MMA_KERNEL: "power.mma.bf16.random", power.STREAM_KERNEL: "power.l2_read",
             power.FFMA_KERNEL: "power.ffma", power.SHARED_KERNEL: "power.shared_read"}  # fmt: skip


@pytest.mark.parametrize("kernel", list(CORRUPTED))
def test_a_wrong_word_in_any_launch_fails_the_run_naming_the_thread(kernel: str) -> None:
    gpu = SimulatedGpu(**suite_options(noise=0.0))
    gpu.power_corrupt = kernel
    probe = CORRUPTED[kernel]
    outcome = _run(gpu, {probe})[probe].outcome
    assert outcome.status == "failed" and f"{kernel}: thread" in outcome.detail and "host predicts" in outcome.detail


def test_a_wrong_wgmma_d_fails_the_run_and_only_checked_launches_read_d_back() -> None:
    gpu = SimulatedGpu(**suite_options(noise=0.0))
    gpu.wgmma_corrupt = True
    outcome = _run(gpu, {"power.wgmma.bf16.random"})["power.wgmma.bf16.random"].outcome
    assert outcome.status == "failed" and "D differs" in outcome.detail
    gpu = SimulatedGpu(**suite_options(noise=0.0))
    request = Request(gpu, ptx_parameters(gpu.arch), gpu.device(), set(power.PROBES), FAST)
    load = power.wgmma_load(request, FAST, "random")
    reads = []
    read = gpu.read
    gpu.read = lambda buffer, dtype, count: reads.append(count) or read(buffer, dtype, count)
    for check in (True, False, False, True):
        power.launch(load, 4, check=check)
    assert reads[0] == reads[3] and reads[1] == reads[2] < reads[0] / 100  # the unchecked: their records alone


def test_the_steady_launches_read_their_records_alone_and_the_run_checks_one_launch_after_them() -> None:
    checks = []
    real = power.launch

    def spied(load, iterations, at_ms=0.0, check=True):
        checks.append(check)
        return real(load, iterations, at_ms, check)

    gpu = SimulatedGpu(**suite_options(noise=0.0))
    request = Request(gpu, ptx_parameters(gpu.arch), gpu.device(), set(power.PROBES), FAST)
    load = power.stream_load(request, FAST, "l2")
    iterations = power.sized(FAST, load)  # launches of about launch_ms, as the family's run makes them
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(power, "launch", spied)
        run = power.sustain(request, FAST, load, iterations)
    bursts = FAST.burst_launches
    assert len(run.launches) > bursts + 1  # steady launches, between the burst and the check after the run
    assert checks == [True] * bursts + [False] * (len(run.launches) - bursts) + [True]


def test_a_stream_launch_may_end_inside_a_pass_and_its_sums_still_match() -> None:
    gpu = SimulatedGpu(**suite_options(noise=0.0))
    request = Request(gpu, ptx_parameters(gpu.arch), gpu.device(), set(power.PROBES), FAST)
    load = power.stream_load(request, FAST, "dram")
    assert len(np.unique([power.launch(load, n).ops for n in (1, 3, 7)])) == 3  # checked: no ProbeFailure
    iterations_a_pass = FAST.dram_l2_multiple * gpu.l2_bytes // load.ops_per_iteration  # the span: whole iterations
    assert iterations_a_pass > 1 and all(n % iterations_a_pass for n in (1, 3, 7))  # each launch ends inside a pass


class NoCounter(SimulatedGpu):
    """A part whose NVML has no energy counter: its trajectories carry readings and no energy."""

    def sampling(self):
        @contextlib.contextmanager
        def without() -> Iterator[Trajectory]:
            with super(NoCounter, self).sampling() as inner:
                yield inner
            inner.energy_mj = None

        return without()


def test_without_an_energy_counter_the_energy_facts_say_why_and_the_rates_stand() -> None:
    facts = _facts(_run(NoCounter(**suite_options(noise=0.0)), {power.IDLE, "power.dram_read"}))
    for fact_id in ("power.idle.watts", "power.dram_read.watts", "power.dram_read.pj_per_op"):
        assert facts[fact_id].value is None and facts[fact_id].detail == power.NO_COUNTER, fact_id
    assert facts["power.dram_read.sustained"].value > 0 and facts["power.dram_read.sustained_mhz"].value > 0


def test_without_idle_power_the_energy_above_idle_says_so() -> None:
    facts = _facts(_run(runnable={"power.l2_read"}))
    assert facts["power.l2_read.pj_per_op"].value > 0
    assert facts["power.l2_read.pj_per_op_above_idle"].detail == "no idle power measured (power.idle)"


def test_the_clock_settles_at_the_first_launch_after_which_every_clock_stays_near_the_steady_one() -> None:
    def run(clocks: list[float | None]) -> power.Sustained:
        launches = [power.Launched(10.0 * k, 10.0, 1.0, 1.0, mhz) for k, mhz in enumerate(clocks)]
        return power.Sustained(launches, first_steady=len(clocks) // 2)

    assert power.settle_ms(run([1980, 1900, 1700, 1610, 1600, 1605, 1600, 1602]), 0.02) == 30.0
    assert power.settle_ms(run([1600, 1980, 1600, 1600]), 0.02) == 20.0  # a late excursion counts
    assert power.settle_ms(run([1755.0] * 6), 0.02) == 0.0
    assert power.settle_ms(run([None] * 4), 0.02) is None


def test_the_series_and_the_plot_show_clock_and_power_over_each_run(measured) -> None:
    series = measured["power.mma.bf16.random"].outcome.series
    launches = series["launches"]
    assert launches["at_ms"] == sorted(launches["at_ms"]) and launches["steady"][-1] and not launches["steady"][0]
    assert min(series["nvml"]["sm_mhz"]) < max(series["nvml"]["sm_mhz"])  # NVML saw the clock fall too
    probes = {name: m.outcome for name, m in measured.items()}
    results = Results(device=H200, probes=probes)
    assert sustained_png(results, 60).startswith(b"\x89PNG")
    assert sustained_png(Results(device=H200, probes={"power.idle": ProbeOutcome("ok")}), 60) is None


def test_settings_refuse_what_cannot_be_run() -> None:
    for bad in ({"sustained_s": 0.0}, {"steady_share": 1.0}, {"threads": 100}, {"burst_launches": 0}):
        with pytest.raises(ValueError, match="power Settings"):
            power.Settings(**bad)


def test_the_plan_counts_the_seconds_of_sustained_work_and_the_smoke_stage_a_tenth_of_one() -> None:
    settings = power.Settings()
    plan = power.plan(settings, H200)
    assert plan.wait_s >= settings.idle_s + len(power.RUNS) * settings.sustained_s  # waited out, never scaled
    assert family_seconds(power.plan(power.SMOKE.settings, H200)) < family_seconds(plan) / 3
    assert power.SMOKE.probes == ("power.l2_read",)


def test_cublas_runs_at_the_clock_its_stamps_witness_and_costs_energy_per_flop(measured) -> None:
    facts = _facts(measured)
    stem = "power.cublas.bf16"
    sm_count = SimulatedGpu(**suite_options()).sm_count
    assert facts[f"{stem}.sustained_mhz"].value == pytest.approx(SimulatedGpu().mhz * CUBLAS_CLOCK_DROP, rel=0.01)
    per_clock = facts[f"{stem}.sustained"].value * 1e12 / (facts[f"{stem}.sustained_mhz"].value * 1e6 * sm_count)
    assert facts[f"{stem}.flop_per_clock"].value == pytest.approx(per_clock, rel=0.01)
    assert 0 < facts[f"{stem}.fraction_of_peak"].value <= 1
    assert facts[f"{stem}.pj_per_op"].unit == "pJ/FLOP" and facts[f"{stem}.pj_per_op"].value > 0


def test_without_cublas_its_run_is_not_run_with_the_reason_and_every_fact_says_why() -> None:
    gpu = SimulatedGpu(**suite_options(noise=0.0))

    def no_cublas(n: int, dtype: str, count: int = 1, stamp=None) -> float:
        raise LaunchPathUnavailable("cuBLAS cannot be loaded here (Failure finding libcublasLt.so.13)")

    gpu.time_gemm = no_cublas
    measured = _run(gpu, {"power.cublas.bf16", "power.l2_read"})
    statuses = {name: m.outcome.status for name, m in measured.items()}
    assert statuses == {"power.cublas.bf16": "not_run", "power.l2_read": "ok"}
    facts = measured["power.cublas.bf16"].facts
    declared = next(p for p in all_probes() if p.name == "power.cublas.bf16").facts
    assert sorted(f.id for f in facts) == sorted(declared)
    assert all(f.value is None and "libcublasLt" in f.detail for f in facts)


def test_a_run_that_leaves_the_gpu_idle_breaks_the_busy_invariant_and_the_sim_keeps_it_busy(measured) -> None:
    facts = _facts(measured)
    assert all(facts[f"{probe}.busy_share"].value == pytest.approx(1.0, abs=0.02) for probe in power.RUNS)
    idle = dataclasses.replace(facts["power.dram_read.busy_share"], value=0.5)
    checks = {c.name: c for c in power.runs_keep_the_gpu_busy({**facts, idle.id: idle}, H200)}
    assert not checks["power_busy.dram_read"].ok and checks["power_busy.l2_read"].ok


def test_zero_operands_at_the_power_limit_may_draw_what_random_ones_do_within_nvmls_resolution(measured) -> None:
    facts = _facts(measured)
    random = facts["power.wgmma.bf16.random.watts"]

    def draw(watts: float) -> bool:
        zero = dataclasses.replace(facts["power.wgmma.bf16.zero.watts"], value=watts)
        checks = {c.name: c for c in power.zero_operands_cost_no_more({**facts, zero.id: zero}, H200)}
        return checks["power_zero_operands.wgmma.draw_no_more"].ok

    assert draw(random.value * 1.01) and not draw(random.value * 1.05)


def test_the_clock_facts_stand_when_the_clock_never_settles() -> None:
    clocks = [1980.0, 1900.0, 1700.0, 1610.0, 1600.0, 1605.0, 1600.0, 1500.0]  # the last launch far off
    launches = [power.Launched(10.0 * k, 10.0, 1.0, 1.0, mhz) for k, mhz in enumerate(clocks)]
    run = power.Sustained(launches, first_steady=4, steady=Trajectory([Reading(0.0), Reading(0.05)], (0.0, 5e3)))
    facts = {f.id: f for f in power.run_facts(power.RUNS["power.ffma"], run, FAST, None, H200)}
    assert facts["power.ffma.sustained_mhz"].value == pytest.approx(1600.0, abs=3)
    assert facts["power.ffma.settle_ms"].value is None and "never settled" in facts["power.ffma.settle_ms"].detail
    assert facts["power.ffma.busy_share"].value == pytest.approx(0.8)  # 40 ms of launches in 50 ms of wall time


def test_the_ffma_peak_per_clock_is_the_parts_fp32_lanes() -> None:
    assert power.ffma_peak(H200) == 256.0 and power.ffma_peak(A100_SXM) == 128.0
