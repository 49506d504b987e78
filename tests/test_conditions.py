"""Every probe is measured between two snapshots of the SM clock and NVML, whatever its family."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import pytest

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import ProbeOutcome
from gpuprobe.families.base import Measured
from gpuprobe.kernels.registry import CLOCK_KERNEL
from gpuprobe.measure.conditions import SETTLE_TRIES, ConditionRecorder
from gpuprobe.runner.launcher import CooperativeGridTooLarge
from gpuprobe.simulated.gpu import FaultyGpu, ptx_parameters

KEYS = {"sm_mhz_before", "sm_mhz_after", "nvml_before", "nvml_after", "sm_mhz_reference", "trajectory"}


def _ok() -> Measured:
    return Measured("toy.probe", ProbeOutcome("ok"))


def test_a_probe_is_measured_between_two_snapshots() -> None:
    gpu = FaultyGpu(mhz=1500.0, noise=0.0)
    measured = ConditionRecorder(gpu, ptx_parameters(), clock_usable=True).measure("toy.probe", _ok)
    conditions = measured.outcome.conditions
    assert set(conditions) == KEYS
    assert conditions["sm_mhz_before"] == pytest.approx(1500.0, rel=0.01)
    assert {k: conditions["nvml_after"][k] for k in ("clock_event_reasons", "compute_processes")} == {
        "clock_event_reasons": 0, "compute_processes": 0}  # fmt: skip
    assert gpu.launches == [CLOCK_KERNEL] * 3  # no clock known yet: one spin to wake the GPU, then the readings
    assert conditions["trajectory"]["seconds"] == 0.0  # the probe launched nothing: its spins lie outside it


def test_a_failed_self_check_is_failed_and_keeps_what_it_ran_under() -> None:
    def wrong() -> Measured:
        raise ProbeFailure("the chase ended on node 3, host predicted node 4")

    gpu = FaultyGpu(mhz=1500.0, noise=0.0)
    measured = ConditionRecorder(gpu, ptx_parameters(), clock_usable=True).measure("toy.probe", wrong)
    assert (measured.probe, measured.outcome.status) == ("toy.probe", "failed")
    assert measured.outcome.detail == "the chase ended on node 3, host predicted node 4"
    assert measured.outcome.conditions["sm_mhz_before"] == pytest.approx(1500.0, rel=0.01)
    assert "sm_mhz_after" not in measured.outcome.conditions


def test_the_clock_is_read_only_where_its_contract_held() -> None:
    gpu = FaultyGpu()
    for recorder in (
        ConditionRecorder(gpu, ptx_parameters(), clock_usable=False),
        ConditionRecorder(gpu, {}, clock_usable=True),  # the kernel is not in the cubin
    ):
        conditions = recorder.measure("toy.probe", _ok).outcome.conditions
        assert conditions["sm_mhz_before"] is None and conditions["sm_mhz_after"] is None
    assert gpu.launches == []


def test_a_cuda_error_is_not_caught() -> None:
    def crash() -> Measured:
        raise RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS")

    with pytest.raises(RuntimeError, match="ILLEGAL_ADDRESS"):
        ConditionRecorder(FaultyGpu(), ptx_parameters(), clock_usable=True).measure("toy.probe", crash)


@dataclass
class RampingGpu(FaultyGpu):
    """A GPU found idle: its clock is ``idle_mhz`` until ``ramp_launches`` kernels have run, then ``mhz``."""

    idle_mhz: float = 345.0
    ramp_launches: int = 2

    def _launch(self, kernel: str, *args: Any) -> float:
        """The launch at the idle clock until ``ramp_launches`` kernels ran before it, then at ``mhz``."""
        full, self.mhz = self.mhz, self.mhz if len(self.launches) >= self.ramp_launches else self.idle_mhz
        try:
            return super()._launch(kernel, *args)
        finally:
            self.mhz = full


def test_a_gpu_found_idle_is_woken_before_its_clock_is_read_and_the_reference_kept() -> None:
    gpu, state = RampingGpu(mhz=1980.0, noise=0.0, ramp_launches=3), {"sm_mhz_reference": 1980.0}
    measured = ConditionRecorder(gpu, ptx_parameters(), clock_usable=True, state=state).measure("toy.probe", _ok)
    assert measured.outcome.conditions["sm_mhz_before"] == pytest.approx(1980.0, rel=0.01)
    assert gpu.launches == [CLOCK_KERNEL] * 6  # idle read, settle, idle read, settle, read, and the one after
    assert state["sm_mhz_reference"] == pytest.approx(1980.0, rel=0.01)


def test_a_gpu_that_stays_slow_is_read_as_slow_after_a_bounded_settling() -> None:
    gpu, state = RampingGpu(mhz=1980.0, noise=0.0, ramp_launches=10_000), {"sm_mhz_reference": 1980.0}
    measured = ConditionRecorder(gpu, ptx_parameters(), clock_usable=True, state=state).measure("toy.probe", _ok)
    assert measured.outcome.conditions["sm_mhz_before"] == pytest.approx(345.0, rel=0.01)
    assert len(gpu.launches) == 2 + 2 * SETTLE_TRIES  # the first reading, SETTLE_TRIES settles and readings, after
    assert measured.outcome.conditions["sm_mhz_reference"] == 1980.0  # a slow reading never lowers the reference


def test_the_reference_rises_to_the_highest_settled_clock() -> None:
    state = {"sm_mhz_reference": 1500.0}
    recorder = ConditionRecorder(FaultyGpu(mhz=1800.0, noise=0.0), ptx_parameters(), clock_usable=True, state=state)
    recorder.measure("toy.probe", _ok)
    assert state["sm_mhz_reference"] == pytest.approx(1800.0, rel=0.01)


def test_a_cooperative_grid_the_launcher_refused_is_failed_not_crashed() -> None:
    def too_large() -> Measured:
        raise CooperativeGridTooLarge("a cooperative grid of 2000 blocks cannot be co-resident (at most 1056)")

    measured = ConditionRecorder(FaultyGpu(), ptx_parameters(), clock_usable=True).measure("toy.probe", too_large)
    assert measured.outcome.status == "failed" and "at most 1056" in measured.outcome.detail
