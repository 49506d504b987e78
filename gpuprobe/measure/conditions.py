"""What the GPU was like around each probe: the SM clock and NVML's readings, just before and after, and NVML
sampled every few milliseconds while it measured (its trajectory, :mod:`gpuprobe.runner.trajectory`).

The measuring child wraps every probe of every family in :class:`ConditionRecorder`, so a probe
measured while the GPU throttled or had other tenants is caught (:func:`gpu_conditions`, which the parent
asks of every probe's readings) whatever family it belongs to. The clock comes from the memory family's
``gp_sm_clock`` kernel (a short %clock64 spin over %globaltimer), used only where its SASS contract held
on this arch.

A GPU left idle (between families a new measuring process starts, which takes seconds) drops to its
idle clock (an H200 idles near 345 MHz) and takes a moment to ramp back. So the reading before a probe
is *settled*: when no clock is known yet, or the reading is below the run's reference clock (the
highest settled reading so far, carried from probe to probe and process to process in the family
state as :data:`REFERENCE_KEY`), the GPU is kept busy with a longer spin and read again, a bounded
number of times. A GPU that stays slow after that is throttling, and the reading says so; a GPU that
was only idle is measured at its working clock. The reading after a probe is taken at once (it shows
what the probe ran at). A throttle reason NVML named while the probe measured marks it as throttled too.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import ProbeOutcome
from gpuprobe.families.base import Measured
from gpuprobe.families.measuring import clock_mhz
from gpuprobe.families.sampling import stamp_stops, stops_recorded
from gpuprobe.kernels.registry import CLOCK_KERNEL
from gpuprobe.runner.checked import Kernels
from gpuprobe.runner.launcher import CooperativeGridTooLarge, Launcher, probe_range

SPIN_CYCLES = 2_000_000  # about a millisecond: long enough for the timer, short beside any probe
SETTLE_CYCLES = 40_000_000  # a spin to wake an idle GPU: ~20 ms at 2 GHz, ~115 ms at an idle 345 MHz
SETTLE_TRIES = 4  # settling spins at most, before a reading that stays slow is taken as it is
CLOCK_DROP = 0.05  # a reading this far below the reference is not settled (and, after settling, throttled)
REFERENCE_KEY = "sm_mhz_reference"  # in the family state: the highest settled SM clock of the run so far
TRAJECTORY_KEY = "trajectory"  # the clocks and power sampled while the probe measured (gpuprobe.runner.trajectory)


@dataclass
class ConditionRecorder:
    """Measures a probe with the clock and NVML read before and after it (the clock only if usable), and NVML
    sampled all through it (:meth:`~gpuprobe.runner.launcher.Launcher.sampling`: its trajectory).

    ``state`` is the family's state: the run's reference clock is read from it and raised in it."""

    launcher: Launcher
    parameters: dict[str, list[tuple[str, str]]]
    clock_usable: bool
    state: dict[str, Any] = field(default_factory=dict)
    _out: Any = field(default=None, init=False)

    def _spin(self, cycles: int) -> float | None:
        if self._out is None:
            self._out = self.launcher.alloc(16)
        kernels = Kernels(self.launcher)
        spun, ns = (int(v) for v in kernels.results(CLOCK_KERNEL, [np.uint64(cycles), self._out], self._out, 2))
        return clock_mhz(spun, ns, window_ns=1.0)  # any window the timer moved in: the spin is long

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
        "failed". Each sampled fact is told why its sampling stopped (:func:`~gpuprobe.families.sampling.stamp_stops`).
        The conditions also keep the reference clock the readings are judged against."""
        conditions: dict[str, Any] = {}
        try:
            conditions.update(self.snapshot("before"))
            conditions[REFERENCE_KEY] = self.state.get(REFERENCE_KEY)
            sampling, ranged = self.launcher.sampling(), self.launcher.nvtx_range(probe_range(name))
            with sampling as trajectory, ranged, stops_recorded() as stops:
                measured = run()
            conditions[TRAJECTORY_KEY] = trajectory.record()
            stamp_stops(measured.facts, stops)
            conditions.update(self.snapshot("after"))
        except (ProbeFailure, CooperativeGridTooLarge) as exc:  # nothing ran wrong on the GPU: the process is sound
            measured = Measured(name, ProbeOutcome("failed", str(exc)))
        measured.outcome.conditions = conditions
        return measured


# NVML clock-event reasons that mean the clock was held down by something outside the measurement: HW
# slowdown, SW thermal, HW thermal, HW power brake. Idle, application-clock settings and sync boost are
# not. Nor is the SW power cap (0x4): a power-limited part lowers its clock under a full-chip load as
# designed, and the probes measure that clock themselves (rates per clock, TFLOP/s at the clock run).
THROTTLE_REASONS = 0x8 | 0x20 | 0x40 | 0x80
SW_POWER_CAP = 0x4


def gpu_conditions(conditions: dict[str, Any], reference_mhz: float | None = None) -> str | None:
    """Why a measurement's conditions make it unfit to judge, or None when they were clean.

    The SM clock readings are held to the reference clock the measuring process recorded with them
    (``sm_mhz_reference``: the run's highest settled reading), else to ``reference_mhz``. A clock
    below it while NVML names only the SW power cap is the part's own power management under load,
    measured as such, not a disturbance."""
    reasons = []
    reference = conditions.get(REFERENCE_KEY) or reference_mhz
    sampled = (conditions.get(TRAJECTORY_KEY) or {}).get("reasons")
    if isinstance(sampled, int) and sampled & THROTTLE_REASONS:
        reasons.append(f"throttled while measuring (NVML clock-event reasons {sampled & THROTTLE_REASONS:#x})")
    for when in ("before", "after"):
        nvml = conditions.get(f"nvml_{when}") or {}
        bits = nvml.get("clock_event_reasons")
        if isinstance(bits, int) and bits & THROTTLE_REASONS:
            reasons.append(f"throttled {when} (NVML clock-event reasons {bits:#x})")
        processes = nvml.get("compute_processes")
        if isinstance(processes, int) and processes >= 1:
            reasons.append(f"shared {when} ({processes} other compute process(es) on the GPU)")
        mhz = conditions.get(f"sm_mhz_{when}")
        power_capped = isinstance(bits, int) and bits & SW_POWER_CAP and not bits & THROTTLE_REASONS
        if reference and isinstance(mhz, float | int) and mhz < (1 - CLOCK_DROP) * reference and not power_capped:
            reasons.append(f"throttled {when} (SM clock {mhz:.0f} MHz, run started at {reference:.0f})")
    return "; ".join(reasons) or None
