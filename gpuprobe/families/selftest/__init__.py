"""The self-test family: a probe that faults on purpose, run only when asked (``--inject-fault``).

On a real GPU it shows the isolation works: the faulting launch poisons its child's CUDA context,
the run records ``selftest.fault_isolation`` as crashed with the driver's error, and the families
after it are measured by fresh children. A launch that does *not* fault is a failed self-test.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuprobe.core.results import Device
from gpuprobe.families.base import Measured, Plan, ProbeFailure, Probes, Request, Smoke
from gpuprobe.families.planning import MIN_KERNEL_S
from gpuprobe.runner.gpu import Launcher

PROBES = ["selftest.fault_isolation"]


@dataclass(frozen=True)
class Settings:
    """Nothing to tune: the fault is the whole probe."""


def plan(settings: Settings, device: Device) -> Plan:
    """One launch that faults and the read that reports it (a crash ends the measuring process; the
    next family starts its own, as it would anyway)."""
    return Plan(1, 2, MIN_KERNEL_S)


SMOKE = Smoke(probes=(PROBES[0],), settings=Settings())  # the fault is already as small as a probe gets


def _fault(launcher: Launcher) -> Measured:
    out = launcher.alloc(8)
    launcher.launch("gp_fault_illegal_address", 1, 1, [out])
    value = launcher.read(out, "uint64", 1)
    raise ProbeFailure(f"the null-pointer load did not fault (it read {int(np.asarray(value)[0]):#x})")


def measure(request: Request) -> Probes:
    """The fault, as (name, run): ``run`` raises the launch's error for the isolation to record, or
    ProbeFailure when the load did not fault."""
    launcher, runnable = request.launcher, request.runnable
    if PROBES[0] in runnable:
        yield PROBES[0], lambda: _fault(launcher)
