"""The simulated GPU's clock and power while it works: what NVML would read, and the clock its kernels run at.

The part has a power limit. Each kind of work draws its own power at the part's nominal clock (:data:`DRAW_W`):
tensor-core work on random operands the most, above the limit; on zero operands less (fewer bits toggle);
memory streams less; anything else (latency chases, barriers, spins) little; an idle part :data:`IDLE_W`.
Work of one kind back to back is a stretch: a stretch drawing more than :data:`POWER_LIMIT_W` runs at the
nominal clock for :data:`RAMP_S`, then the power controller lowers the clock until the draw meets the limit
(dynamic power taken as proportional to the clock) and NVML names the SW power cap. Work of another kind
starts a new stretch at the nominal clock.

:class:`PowerState` follows the work as the simulated GPU launches it (``advance``), keeps the energy counter,
tells a kernel the clock it runs at (``clock``: the power family's simulated kernels time themselves by it),
and gives every open :meth:`PowerState.sampling` context the readings NVML would have given over its work,
every :data:`~gpuprobe.runner.trajectory.SAMPLE_PERIOD_S` of simulated time and at both ends. The other
families' kernels time themselves at the part's fixed clock: their launches are short beside :data:`RAMP_S`.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from gpuprobe.runner.trajectory import SAMPLE_PERIOD_S, Reading, Trajectory

IDLE_W = 90.0
POWER_LIMIT_W = 700.0
RAMP_S = 0.01  # how long a draw above the limit lasts before the controller acts
DRAW_W = {"tensor": 780.0, "tensor_zero": 560.0, "memory": 420.0, "other": 220.0, "idle": IDLE_W}
MEM_MHZ = 2619.0
SW_POWER_CAP = 0x4
TENSOR_PREFIXES = ("gp_wg", "gp_mma", "gp_tc", "gp_pw_wg", "cublas")
MEMORY_PREFIXES = ("gp_bw_", "gp_ac_", "gp_tma", "gp_loaded", "gp_l2p", "gp_pw_stream", "gp_pw_shared")
DEGREES_PER_J = 1 / 50.0  # the simulated die warms by a degree per 50 J spent, up to 40 above its 40 °C


def kind(kernel: str) -> str:
    """What a kernel's work draws like: "tensor", "memory" or "other"."""
    if kernel.startswith(TENSOR_PREFIXES):
        return "tensor"
    return "memory" if kernel.startswith(MEMORY_PREFIXES) else "other"


def state(work: str, sustained_s: float, mhz: float, scale: float = 1.0) -> tuple[float, float, int]:
    """(SM clock, power, reason bits) ``sustained_s`` into a stretch of ``work`` at a nominal ``mhz``, on a part
    drawing ``scale`` times :data:`DRAW_W`."""
    draw = DRAW_W[work]
    if draw <= POWER_LIMIT_W or sustained_s < RAMP_S:
        return mhz, draw * scale, 0
    return mhz * (POWER_LIMIT_W - IDLE_W) / (draw - IDLE_W), POWER_LIMIT_W * scale, SW_POWER_CAP


def energy_j(work: str, start_s: float, end_s: float) -> float:
    """Joules a stretch of ``work`` spends from ``start_s`` to ``end_s`` into it: its draw until the controller
    acts, the limit after."""
    draw = DRAW_W[work]
    if draw <= POWER_LIMIT_W:
        return draw * (end_s - start_s)
    before = max(0.0, min(end_s, RAMP_S) - start_s)
    return draw * before + POWER_LIMIT_W * (end_s - start_s - before)


@dataclass(frozen=True)
class Segment:
    """A launch's work: its kind, how far into its stretch it starts, its seconds."""

    work: str
    into_s: float
    seconds: float


@dataclass
class PowerState:
    """The part's power and clock as its work goes on (see the module)."""

    energy_mj: float = 1.0e9  # the energy counter: mJ since the simulated driver loaded
    scale: float = 1.0  # the part's power over :data:`DRAW_W`'s (a part of fewer SMs draws less)
    work: str = "other"
    sustained_s: float = 0.0  # how long the current stretch has run
    _open: list[list[Segment]] = field(default_factory=list)

    def clock(self, work: str, mhz: float) -> float:
        """The SM clock a launch of ``work`` starts at, on a part whose nominal clock is ``mhz``."""
        return state(work, self.sustained_s if work == self.work else 0.0, mhz)[0]

    def advance(self, work: str, ms: float) -> None:
        """``ms`` of ``work`` done: the stretch, the counter and every open sampling follow."""
        if work != self.work:
            self.work, self.sustained_s = work, 0.0
        seconds = ms / 1e3
        segment = Segment(work, self.sustained_s, seconds)
        self.energy_mj += 1e3 * self.scale * energy_j(work, self.sustained_s, self.sustained_s + seconds)
        self.sustained_s += seconds
        for segments in self._open:
            segments.append(segment)

    @contextmanager
    def sampling(self, mhz: float) -> Iterator[Trajectory]:
        """The readings (at a nominal clock of ``mhz``) and the counter over the work done inside (contexts may
        nest)."""
        segments: list[Segment] = []
        self._open.append(segments)
        before = self.energy_mj
        trajectory = Trajectory()
        try:
            yield trajectory
        finally:
            self._open.remove(segments)
            trajectory.readings[:] = self._readings(segments, before, mhz)
            trajectory.energy_mj = (before, self.energy_mj)

    def _readings(self, segments: list[Segment], energy_mj: float, mhz: float) -> list[Reading]:
        """A reading at the start, every sample period and at the end of ``segments``, back to back."""
        readings: list[Reading] = []
        start, spent = 0.0, (energy_mj - 1.0e9) / 1e3 / self.scale
        for segment in segments or [Segment(self.work, self.sustained_s, 0.0)]:
            count = int(segment.seconds / SAMPLE_PERIOD_S)
            ticks = [k * SAMPLE_PERIOD_S for k in range(count + 1)] + [segment.seconds]
            for t in sorted(set(ticks)):
                if readings and readings[-1].t_s >= start + t:
                    continue
                clock, power, bits = state(segment.work, segment.into_s + t, mhz, self.scale)
                warm = spent + energy_j(segment.work, segment.into_s, segment.into_s + t)
                temperature = 40.0 + min(40.0, warm * DEGREES_PER_J)
                readings.append(Reading(start + t, round(clock, 1), MEM_MHZ, power, round(temperature, 1), bits))
            spent += energy_j(segment.work, segment.into_s, segment.into_s + segment.seconds)
            start += segment.seconds
        return readings
