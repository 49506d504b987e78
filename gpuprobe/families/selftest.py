"""The self-test family: a probe that faults on purpose, run only when asked (``--inject-fault``).

On a real GPU it shows the isolation works: the faulting launch poisons its child's CUDA context,
the run records ``selftest.fault_isolation`` as crashed with the driver's error, and the families
after it are measured by fresh children. A launch that does *not* fault is a failed self-test.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuprobe.families.base import Measured, ProbeFailure
from gpuprobe.gpu import Launcher
from gpuprobe.results import Device

PROBES = ["selftest.fault_isolation"]


@dataclass(frozen=True)
class Settings:
    """Nothing to tune: the fault is the whole probe."""


def _fault(launcher: Launcher) -> Measured:
    out = launcher.alloc(8)
    launcher.launch("gp_fault_illegal_address", 1, 1, [out])
    value = launcher.read(out, "uint64", 1)
    raise ProbeFailure(f"the null-pointer load did not fault (it read {int(np.asarray(value)[0]):#x})")


def measure(
    launcher: Launcher,
    parameters: dict[str, list[tuple[str, str]]],
    device: Device,
    runnable: set[str],
    settings: Settings | None = None,
    state: dict[str, Any] | None = None,
) -> Iterator[tuple[str, Callable[[], Measured]]]:
    """The fault, as (name, run): ``run`` raises the launch's error for the isolation to record, or
    ProbeFailure when the load did not fault."""
    if PROBES[0] in runnable:
        yield PROBES[0], lambda: _fault(launcher)
