"""Every probe is measured between two snapshots of the SM clock and NVML, whatever its family."""

from __future__ import annotations

import pytest

from gpuprobe.families.base import Measured, ProbeFailure
from gpuprobe.families.conditions import CLOCK_KERNEL, ConditionRecorder
from gpuprobe.results import ProbeOutcome
from tests.fake_gpu import FaultyGpu, ptx_parameters

KEYS = {"sm_mhz_before", "sm_mhz_after", "nvml_before", "nvml_after"}


def _ok() -> Measured:
    return Measured("toy.probe", ProbeOutcome("ok"))


def test_a_probe_is_measured_between_two_snapshots() -> None:
    gpu = FaultyGpu(mhz=1500.0, noise=0.0)
    measured = ConditionRecorder(gpu, ptx_parameters(), clock_usable=True).measure("toy.probe", _ok)
    conditions = measured.outcome.conditions
    assert set(conditions) == KEYS
    assert conditions["sm_mhz_before"] == pytest.approx(1500.0, rel=0.01)
    assert conditions["nvml_after"] == {"clock_event_reasons": 0, "compute_processes": 1}
    assert gpu.launches == [CLOCK_KERNEL, CLOCK_KERNEL]


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
