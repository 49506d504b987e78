"""The self-test family: a probe that faults on purpose, run only when asked
(``gpuprobe run --inject-fault``, ``pytest --gpuprobe-inject-fault``).

On a real GPU it shows the isolation works: the faulting launch poisons its child's CUDA context,
the run records ``selftest.fault_isolation`` as crashed with the driver's error, and the families
after it are measured by fresh children. A launch that does *not* fault is a failed self-test.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.planning import kernel_runs, probe
from gpuprobe.families.stepping import probe_steps

PROBES = ["selftest.fault_isolation"]
KERNEL = "gp_fault_illegal_address"


@dataclass(frozen=True)
class Settings:
    """Nothing to tune: the fault is the whole probe."""


def plan(settings: Settings, device: Device) -> Plan:
    """One checked launch that faults (a crash ends the measuring process; the next family starts its
    own, as it would anyway)."""
    return probe(kernel_runs(1, 0.0))


SMOKE = Smoke(probes=(PROBES[0],), settings=Settings())  # the fault is already as small as a probe gets


def fault(request: Request) -> Measured:
    """The null-pointer load, launched as every probe launches: ProbeFailure if it did not fault."""
    out = request.outputs.get(1)
    value = request.kernels.results(KERNEL, [out], out, 1)
    raise ProbeFailure(f"the null-pointer load did not fault (it read {int(np.asarray(value)[0]):#x})")


def measure(request: Request) -> Probes:
    """The fault, as (name, step): ``step`` raises the launch's error for the isolation to record, or
    ProbeFailure when the load did not fault."""
    return probe_steps(PROBES, {PROBES[0]: lambda: fault(request)}, request.runnable)


FAMILY = Family(
    name="selftest",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
)
