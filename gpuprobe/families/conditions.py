"""What the GPU was like around each probe: the SM clock and NVML's readings, just before and after.

The measuring child wraps every probe of every family in :class:`ConditionRecorder`, so a probe
measured while the GPU throttled or had other tenants is caught (:func:`gpuprobe.isolation.gpu_conditions`)
whatever family it belongs to. The clock comes from the memory family's ``gp_sm_clock`` kernel (a
short %clock64 spin over %globaltimer), used only where its SASS contract held on this arch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuprobe.families.base import Measured, ProbeFailure
from gpuprobe.families.measuring import Kernels
from gpuprobe.gpu import Launcher
from gpuprobe.results import ProbeOutcome

CLOCK_KERNEL = "gp_sm_clock"
CLOCK_PROBE = "memory.clock"  # the probe whose contract vouches for CLOCK_KERNEL
SPIN_CYCLES = 2_000_000  # about a millisecond: long enough for the timer, short beside any probe


@dataclass
class ConditionRecorder:
    """Measures a probe with the clock and NVML read before and after it (the clock only if usable)."""

    launcher: Launcher
    parameters: dict[str, list[tuple[str, str]]]
    clock_usable: bool
    _out: Any = field(default=None, init=False)

    def sm_mhz(self) -> float | None:
        """The SM clock over a short spin of the device's own timers; None where it cannot be read."""
        if not self.clock_usable or CLOCK_KERNEL not in self.parameters:
            return None
        if self._out is None:
            self._out = self.launcher.alloc(16)
        kernels = Kernels(self.launcher, self.parameters)
        cycles, ns = (int(v) for v in kernels.run(CLOCK_KERNEL, [np.uint64(SPIN_CYCLES), self._out], self._out, 2))
        return cycles / ns * 1000.0 if ns else None

    def snapshot(self, when: str) -> dict[str, Any]:
        return {f"sm_mhz_{when}": self.sm_mhz(), f"nvml_{when}": self.launcher.nvml()}

    def measure(self, name: str, run: Callable[[], Measured]) -> Measured:
        """``run()`` between two snapshots; a failed self-check (ProbeFailure) is the outcome "failed"."""
        conditions: dict[str, Any] = {}
        try:
            conditions.update(self.snapshot("before"))
            measured = run()
            conditions.update(self.snapshot("after"))
        except ProbeFailure as exc:
            measured = Measured(name, ProbeOutcome("failed", str(exc)))
        measured.outcome.conditions = conditions
        return measured
