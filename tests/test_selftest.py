"""The self-test family's host side: the fault goes through the checked launch and reaches the isolation,
a load that did not fault fails the probe, and the plan counts its one launch."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.families import selftest
from gpuprobe.families.base import Request
from gpuprobe.families.planning import CHECKED_LAUNCH_CALLS
from gpuprobe.simulated.gpu import measure_family, ptx_parameters, simulated_gpu
from tests.helpers.devices import H200


class LoadThatDoesNotFault:
    """A launcher whose every launch runs, and whose outputs read back 0x1234."""

    def __init__(self) -> None:
        self.calls: list[str] = []

    def alloc(self, nbytes: int) -> bytearray:
        return bytearray(nbytes)

    def fill(self, buffer: Any, byte: int) -> None:
        self.calls.append("fill")

    def launch(self, kernel: str, *args: Any) -> None:
        self.calls.append(kernel)

    def read(self, buffer: Any, dtype: str, count: int) -> np.ndarray:
        self.calls.append("read")
        return np.full(count, 0x1234, dtype=dtype)


def test_the_fault_reaches_the_isolation_that_records_it() -> None:
    """The simulated GPU faults as a real one does: the error is the isolation's to record, not a failed check."""
    gpu = simulated_gpu()
    with pytest.raises(RuntimeError, match="ILLEGAL_ADDRESS"):
        measure_family(selftest.FAMILY, gpu, set(selftest.PROBES))
    assert gpu.launches.count(selftest.KERNEL) == 1  # beside the condition snapshots' clock reads


def test_a_load_that_did_not_fault_fails_the_self_test_after_a_checked_launch() -> None:
    launcher = LoadThatDoesNotFault()
    request = Request(launcher, ptx_parameters(), H200, set(selftest.PROBES))  # type: ignore[arg-type]
    [(name, step)] = list(selftest.FAMILY.measure(request))
    with pytest.raises(ProbeFailure, match=r"did not fault \(it read 0x1234\)"):
        step()
    assert name == "selftest.fault_isolation" and launcher.calls == ["fill", selftest.KERNEL, "read"]


def test_not_asked_for_it_measures_nothing_and_its_plan_is_one_checked_launch() -> None:
    request = Request(LoadThatDoesNotFault(), ptx_parameters(), H200, set())  # type: ignore[arg-type]
    assert list(selftest.FAMILY.measure(request)) == []
    plan = selftest.plan(selftest.Settings(), H200)
    assert plan.probes == 1 and plan.launches == CHECKED_LAUNCH_CALLS
