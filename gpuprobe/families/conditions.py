"""The conditions a probe ran under, recorded just before and just after it, for any family.

The run's isolation (:func:`gpuprobe.isolation.gpu_conditions`) re-measures a probe whose
conditions were bad (throttled, other tenants) and marks its facts if they stay bad; it reads the
outcome's ``sm_mhz_before`` / ``sm_mhz_after`` (the SM clock from the device's own timers) and
``nvml_before`` / ``nvml_after``. :func:`recorded` wraps a probe's measurement with both readings
and turns a :class:`ProbeFailure` into a "failed" outcome.

The SM clock comes from ``gp_sm_clock`` (ptx/memory_latency.ptx): every family's kernels are built
into one cubin, so the kernel is there whichever family asks.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from gpuprobe.families.base import Measured, ProbeFailure
from gpuprobe.families.measuring import Kernels
from gpuprobe.gpu import Launcher
from gpuprobe.results import ProbeOutcome

CLOCK_KERNEL = "gp_sm_clock"
SPIN_CYCLES = 2_000_000  # about 1 ms: long enough for the global timer's resolution


def sm_mhz(launcher: Launcher, parameters: dict[str, list[tuple[str, str]]]) -> float | None:
    """The SM clock over a short spin of %clock64 against %globaltimer; None without the kernel."""
    if CLOCK_KERNEL not in parameters:
        return None
    out = launcher.alloc(16)
    cycles, ns = (
        int(v) for v in Kernels(launcher, parameters).run(CLOCK_KERNEL, [np.uint64(SPIN_CYCLES), out], out, 2)
    )
    return cycles / ns * 1000.0 if ns else None


def readings(launcher: Launcher, parameters: dict[str, list[tuple[str, str]]], when: str) -> dict[str, Any]:
    return {f"sm_mhz_{when}": sm_mhz(launcher, parameters), f"nvml_{when}": launcher.nvml()}


def recorded(
    launcher: Launcher, parameters: dict[str, list[tuple[str, str]]], name: str, measure: Callable[[], Measured]
) -> Measured:
    """``measure()`` with the conditions before and after it; a failed self-check is status "failed"."""
    conditions = readings(launcher, parameters, "before")
    try:
        measured = measure()
    except ProbeFailure as exc:
        measured = Measured(name, ProbeOutcome("failed", str(exc)))
    conditions.update(readings(launcher, parameters, "after"))
    measured.outcome.conditions = conditions
    return measured
