"""What the GPU was like around each probe: the SM clock and NVML's readings, just before and after.

The measuring child wraps every probe of every family in :class:`ConditionRecorder`, so a probe
measured while the GPU throttled or had other tenants is caught (:func:`gpuprobe.measure.isolation.gpu_conditions`)
whatever family it belongs to. The clock comes from the memory family's ``gp_sm_clock`` kernel (a
short %clock64 spin over %globaltimer), used only where its SASS contract held on this arch.

A GPU left idle (between families a new measuring process starts, which takes seconds) drops to its
idle clock (an H200 idles near 345 MHz) and takes a moment to ramp back. So the reading before a probe
is *settled*: when no clock is known yet, or the reading is below the run's reference clock (the
highest settled reading so far, carried from probe to probe and process to process in the family
state as :data:`REFERENCE_KEY`), the GPU is kept busy with a longer spin and read again, a bounded
number of times. A GPU that stays slow after that is throttling, and the reading says so; a GPU that
was only idle is measured at its working clock. The reading after a probe is taken at once (it shows
what the probe ran at).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuprobe.core.results import ProbeOutcome
from gpuprobe.families.base import Measured, ProbeFailure
from gpuprobe.families.measuring import Kernels
from gpuprobe.runner.gpu import CooperativeGridTooLarge, Launcher, probe_range

CLOCK_KERNEL = "gp_sm_clock"
CLOCK_PROBE = "memory.clock"  # the probe whose contract vouches for CLOCK_KERNEL
SPIN_CYCLES = 2_000_000  # about a millisecond: long enough for the timer, short beside any probe
SETTLE_CYCLES = 40_000_000  # a spin to wake an idle GPU: ~20 ms at 2 GHz, ~115 ms at an idle 345 MHz
SETTLE_TRIES = 4  # settling spins at most, before a reading that stays slow is taken as it is
CLOCK_DROP = 0.05  # a reading this far below the reference is not settled (and, after settling, throttled)
REFERENCE_KEY = "sm_mhz_reference"  # in the family state: the highest settled SM clock of the run so far


@dataclass
class ConditionRecorder:
    """Measures a probe with the clock and NVML read before and after it (the clock only if usable).

    ``state`` is the family's state: the run's reference clock is read from it and raised in it."""

    launcher: Launcher
    parameters: dict[str, list[tuple[str, str]]]
    clock_usable: bool
    state: dict[str, Any] = field(default_factory=dict)
    _out: Any = field(default=None, init=False)

    def _spin(self, cycles: int) -> float | None:
        if self._out is None:
            self._out = self.launcher.alloc(16)
        kernels = Kernels(self.launcher, self.parameters)
        spun, ns = (int(v) for v in kernels.run(CLOCK_KERNEL, [np.uint64(cycles), self._out], self._out, 2))
        return spun / ns * 1000.0 if ns else None

    def sm_mhz(self, settle: bool = False) -> float | None:
        """The SM clock over a short spin of the device's own timers; None where it cannot be read.
        ``settle``: first wake the GPU if it is idle or below the run's reference clock (see the module)."""
        if not self.clock_usable or CLOCK_KERNEL not in self.parameters:
            return None
        reference = self.state.get(REFERENCE_KEY)
        if settle and not reference:
            self._spin(SETTLE_CYCLES)  # nothing known yet: the GPU may be idle
        mhz = self._spin(SPIN_CYCLES)
        tries = 0
        while settle and reference and tries < SETTLE_TRIES and (mhz is None or mhz < (1 - CLOCK_DROP) * reference):
            self._spin(SETTLE_CYCLES)
            mhz, tries = self._spin(SPIN_CYCLES), tries + 1
        if settle and mhz is not None:
            self.state[REFERENCE_KEY] = max(mhz, reference or 0.0)
        return mhz

    def snapshot(self, when: str) -> dict[str, Any]:
        mhz = self.sm_mhz(settle=when == "before")
        return {f"sm_mhz_{when}": mhz, f"nvml_{when}": self.launcher.nvml()}

    def measure(self, name: str, run: Callable[[], Measured]) -> Measured:
        """``run()`` between two snapshots, inside the NVTX range naming the probe (:func:`probe_range`: a
        profiler wrapping the process tells the probe's launches from the snapshots'); a failed self-check
        (ProbeFailure), or a cooperative launch the launcher refused before running anything, is the outcome
        "failed".
        The conditions also keep the reference clock the readings are judged against."""
        conditions: dict[str, Any] = {}
        try:
            conditions.update(self.snapshot("before"))
            conditions[REFERENCE_KEY] = self.state.get(REFERENCE_KEY)
            with self.launcher.nvtx_range(probe_range(name)):
                measured = run()
            conditions.update(self.snapshot("after"))
        except (ProbeFailure, CooperativeGridTooLarge) as exc:  # nothing ran wrong on the GPU: the process is sound
            measured = Measured(name, ProbeOutcome("failed", str(exc)))
        measured.outcome.conditions = conditions
        return measured
