"""Clock and power while a probe measures: the sampler (a thread, told by events and a fake clock, never timed),
the compact record kept with each probe, the simulated GPU's power model, the throttle it reveals and the sheet's
rows "while measuring"."""

from __future__ import annotations

import itertools
import threading
from typing import Any

import numpy as np
import pytest

from gpuprobe.core.results import Device, ProbeOutcome, Results
from gpuprobe.families.base import Measured
from gpuprobe.measure.conditions import TRAJECTORY_KEY, ConditionRecorder, gpu_conditions
from gpuprobe.output.run_conditions import condition_rows
from gpuprobe.runner.launcher import GemmShape
from gpuprobe.runner.trajectory import MAX_POINTS, NvmlSampler, Reading, Trajectory, reading
from gpuprobe.simulated import power
from gpuprobe.simulated.gpu import SimulatedGpu, ptx_parameters

ENOUGH = 6  # readings the fake NVML gives before it tells the test the thread has sampled


class FakeNvml:
    """NVML as the sampler meets it: each read a little later on a fake clock, the energy counter moving by
    ``watts`` x the clock's seconds; ``sampled`` is set once the thread has made ``ENOUGH`` readings."""

    def __init__(self, watts: float = 400.0) -> None:
        self.now = 0.0
        self.watts = watts
        self.reads = 0
        self.sampled = threading.Event()
        self.threads: set[str] = set()

    def clock(self) -> float:
        return self.now

    def read(self) -> dict[str, Any]:
        self.threads.add(threading.current_thread().name)
        self.reads += 1
        self.now += 0.005
        if self.reads >= ENOUGH:
            self.sampled.set()
        return {"sm_mhz": 1980 - self.reads, "mem_mhz": 2619, "power_w": self.watts, "temperature_c": 50,
                "reasons": 0x4 if self.reads == 3 else 0}  # fmt: skip

    def energy(self) -> float:
        return 1e6 + self.watts * self.now * 1e3


def test_the_sampler_reads_on_its_own_thread_from_the_start_to_the_end_with_the_energy_at_both_ends() -> None:
    nvml = FakeNvml()
    sampler = NvmlSampler(nvml.read, nvml.energy, period_s=0.0, clock=nvml.clock)
    with sampler.sampling() as trajectory:
        assert nvml.sampled.wait(60), "the sampling thread never read"  # an event, not a timed wait
    assert len(trajectory.readings) >= ENOUGH + 1 and "gpuprobe-nvml-sampler" in nvml.threads
    times = [r.t_s for r in trajectory.readings]
    assert times[0] == 0.0 and times == sorted(times)
    assert trajectory.energy_j == pytest.approx(nvml.watts * nvml.now)  # W x s = J, the counter read at both ends
    record = trajectory.record()
    assert record["reasons"] == 0x4 and record["sm_mhz"]["min"] == 1980 - nvml.reads
    assert record["power_w"] == {"mean": 400.0, "max": 400.0} and record["temperature_c"] == 50


def test_without_an_energy_counter_the_trajectory_says_none_and_a_refused_reading_is_no_number() -> None:
    nvml = FakeNvml()
    with NvmlSampler(lambda: {"sm_mhz": "unavailable (Not Supported)", "power_w": True}, lambda: None,
                     period_s=3600.0, clock=nvml.clock).sampling() as trajectory:  # fmt: skip
        pass
    assert trajectory.energy_j is None and len(trajectory.readings) == 2  # the two ends: the period never passed
    assert trajectory.readings[0] == Reading(0.0)
    record = trajectory.record()
    assert (record["sm_mhz"], record["power_w"], record["energy_j"], record["energy_w"]) == (None, None, None, None)


def test_a_counter_that_went_backwards_gives_no_energy_and_no_readings_give_no_record() -> None:
    assert Trajectory([Reading(0.0), Reading(1.0)], (5e6, 4e6)).energy_j is None
    assert Trajectory().record() is None
    assert reading(0.5, None) == Reading(0.5)


def test_the_kept_series_is_short_and_keeps_the_slowest_clock_and_the_largest_power() -> None:
    readings = [Reading(k * 0.005, 1980.0, 2619.0, 300.0, 45.0, 0) for k in range(1000)]
    readings[637] = Reading(637 * 0.005, 1410.0, 2619.0, 300.0, 45.0, 0x4)  # one dip
    readings[211] = Reading(211 * 0.005, 1980.0, 2619.0, 699.0, 45.0, 0)  # one spike
    record = Trajectory(readings, (0.0, 1.5e3)).record()
    series = record["series"]
    assert all(len(values) == MAX_POINTS for values in series.values())
    assert min(series["sm_mhz"]) == 1410.0 and max(series["power_w"]) == 699.0
    assert record["energy_j"] == 1.5 and record["energy_w"] == pytest.approx(1.5 / (999 * 0.005), abs=0.01)
    assert record["readings"] == 1000 and record["reasons"] == 0x4


# ---- the simulated GPU's power model -----------------------------------------------------------------------


def _worked(work: list[tuple[str, float]], mhz: float = 1755.0) -> tuple[Trajectory, power.PowerState]:
    """The trajectory of ``work`` ((kind, ms) back to back) on a fresh simulated part."""
    state = power.PowerState()
    with state.sampling(mhz) as trajectory:
        for what, ms in work:
            state.advance(what, ms)
    return trajectory, state


def test_sustained_tensor_work_is_pulled_to_the_power_limit_memory_and_zero_operands_are_not() -> None:
    heavy, state = _worked([("tensor", 25.0), ("tensor", 25.0)])
    before = [r for r in heavy.readings if r.t_s < power.RAMP_S]
    after = [r for r in heavy.readings if r.t_s > power.RAMP_S]
    assert {r.power_w for r in before} == {power.DRAW_W["tensor"]} and {r.sm_mhz for r in before} == {1755.0}
    assert {r.power_w for r in after} == {power.POWER_LIMIT_W} and {r.reasons for r in after} == {power.SW_POWER_CAP}
    assert max(r.sm_mhz for r in after) < 1755.0 and round(state.clock("tensor", 1755.0), 1) == after[-1].sm_mhz
    assert state.clock("memory", 1755.0) == 1755.0  # another kind of work starts a stretch of its own
    for what in ("memory", "tensor_zero"):
        light, _ = _worked([(what, 50.0)])
        assert {(r.sm_mhz, r.power_w, r.reasons) for r in light.readings} == {(1755.0, power.DRAW_W[what], 0)}


def test_the_energy_counter_moves_by_the_integral_of_the_power_and_contexts_nest() -> None:
    state = power.PowerState(energy_mj=1e6)
    with state.sampling(1755.0) as whole:
        state.advance("tensor", 5.0)
        with state.sampling(1755.0) as inner:
            state.advance("tensor", 15.0)  # 20 ms of tensor work: past the ramp
        state.advance("other", 10.0)
    tensor = power.DRAW_W["tensor"] * power.RAMP_S + power.POWER_LIMIT_W * (0.020 - power.RAMP_S)
    assert whole.energy_j == pytest.approx(tensor + power.DRAW_W["other"] * 0.010)
    assert inner.energy_j == pytest.approx(tensor - power.DRAW_W["tensor"] * 0.005)
    assert state.energy_mj == pytest.approx(1e6 + 1e3 * whole.energy_j)
    assert whole.readings[-1].t_s == pytest.approx(0.030) and inner.readings[-1].t_s == pytest.approx(0.015)
    steps = np.diff([r.t_s for r in whole.readings])
    assert steps.max() <= 0.005 + 1e-12 and steps.min() > 0


@pytest.mark.parametrize(("kernel", "kind"), [("gp_wg_bf16_ss", "tensor"), ("gp_mma_f16", "tensor"),
                                              ("cublas", "tensor"), ("gp_bw_walk_v4", "memory"),
                                              ("gp_tma_load", "memory"), ("gp_chase_l2", "other")])  # fmt: skip
def test_each_kernel_draws_as_its_kind_of_work(kernel: str, kind: str) -> None:
    assert power.kind(kernel) == kind


# ---- in the measuring process and the results --------------------------------------------------------------


def test_every_probe_carries_the_trajectory_of_its_own_work_and_the_counter_moves_by_it() -> None:
    gpu = SimulatedGpu(noise=0.0)

    def probe() -> Measured:
        for _ in range(3):
            gpu.time_gemm(GemmShape(4096, 4096, 4096), "bf16", 20)
        return Measured("toy.probe", ProbeOutcome("ok"))

    start = gpu.power_state.energy_mj
    measured = ConditionRecorder(gpu, ptx_parameters(), clock_usable=True).measure("toy.probe", probe)
    record = measured.outcome.conditions[TRAJECTORY_KEY]
    spent = (gpu.power_state.energy_mj - start) / 1e3  # the snapshots' clock spins spent a little more
    assert record["readings"] >= 2 and 0 < record["energy_j"] < spent
    gemm_s = 3 * 20 * (2 * 4096**3 / (gpu.gemm_tflops["bf16"] * 1e12) + gpu.gemm_call_us * 1e-6)
    assert record["seconds"] == pytest.approx(gemm_s, abs=1e-6)  # the snapshots' clock spins lie outside it


@pytest.mark.parametrize(("bits", "throttled"), [(0x8, True), (0x40, True), (0x4, False), (0x1, False)])
def test_a_throttle_named_while_measuring_marks_the_probe_but_a_power_cap_not(bits: int, throttled: bool) -> None:
    said = gpu_conditions({TRAJECTORY_KEY: {"readings": 9, "reasons": bits}})
    assert (said is not None and "while measuring" in said) == throttled


def _results(records: dict[str, dict[str, Any] | None]) -> Results:
    device = Device(name="Test GPU", cc="9.0", arch="sm_90a", sm_count=8, l2_bytes=1 << 20)
    probes = {name: ProbeOutcome("ok", conditions={TRAJECTORY_KEY: record}) for name, record in records.items()}
    return Results(device=device, probes=probes)


def test_the_sheet_says_the_clock_power_energy_and_reasons_while_measuring_naming_the_slowest_probe() -> None:
    def record(low: float, peak: float, energy: float, bits: int) -> dict[str, Any] | None:
        return Trajectory([Reading(0.0, 1980.0, 2619.0, 200.0, 50.0, 0), Reading(0.5, low, 2619.0, peak, 61.0, bits)],
                          (0.0, energy * 1e3)).record()  # fmt: skip

    rows = dict(condition_rows(_results({"a.tensor": record(1590.0, 700.0, 300.0, 0x4),
                                         "b.memory": record(1980.0, 450.0, 200.0, 0), "c.none": None})))  # fmt: skip
    clock = "1590 – 1980 MHz over 2 probes (4 readings); slowest: a.tensor"
    assert rows["SM clock while measuring (NVML, every 5 ms)"] == clock
    assert rows["Power while measuring (NVML)"] == "up to 700 W (a.tensor); energy counter: 500 J in 1 s of measuring"
    assert rows["Clock-event reasons while measuring"] == "SW power cap in 1 of 2 probes"
    assert rows["GPU temperature while measuring"] == "61 °C"


def test_a_run_without_trajectories_says_not_recorded_while_measuring() -> None:
    rows = dict(condition_rows(_results({"a": None})))
    assert rows["SM clock while measuring (NVML, every 5 ms)"] == "not recorded"
    assert rows["Power while measuring (NVML)"] == "not recorded"


def test_the_sampler_never_outlives_its_context_even_when_entered_many_times() -> None:
    nvml = FakeNvml()
    before = threading.active_count()
    for _ in itertools.repeat(None, 20):
        with NvmlSampler(nvml.read, nvml.energy, period_s=3600.0, clock=nvml.clock).sampling():
            pass
    assert threading.active_count() == before
