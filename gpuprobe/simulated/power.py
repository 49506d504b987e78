"""The simulated GPU's clock and power while it works, for the trajectory the measuring process samples.

The simulated GPU keeps a timeline of the work it did while a probe measured (each launch's kernel and its
simulated milliseconds, back to back), and turns it into readings as NVML would give them, every
:data:`~gpuprobe.runner.trajectory.SAMPLE_PERIOD_S` of simulated time and at both ends, with the energy counter
at both ends. The model is a part with a power limit:

* each kind of work draws its own power at the part's clock (:data:`DRAW_W`): tensor-core work the most,
  more than the limit; memory streams less; anything else (latency chases, barriers, spins) little;
* work drawing more than :data:`POWER_LIMIT_W` runs at full clock for :data:`RAMP_S`, then the power
  controller lowers the clock until the draw meets the limit (dynamic power taken as proportional to the
  clock), and NVML names the SW power cap;
* the clock comes back once the heavy work stops; the temperature climbs with the energy spent.

What the kernels' simulated timings assume (the clock of ``SimulatedGpu.mhz``) does not follow this model
yet: it shapes the trajectory alone.
"""

from __future__ import annotations

from collections.abc import Iterable

from gpuprobe.runner.trajectory import SAMPLE_PERIOD_S, Reading, Trajectory

IDLE_W = 90.0
POWER_LIMIT_W = 700.0
RAMP_S = 0.01  # how long a draw above the limit lasts before the controller acts
DRAW_W = {"tensor": 780.0, "memory": 420.0, "other": 220.0}
MEM_MHZ = 2619.0
SW_POWER_CAP = 0x4
TENSOR_PREFIXES = ("gp_wg", "gp_wgsp", "gp_mma", "gp_tc", "cublas")
MEMORY_PREFIXES = ("gp_bw_", "gp_ac_", "gp_tma", "gp_loaded", "gp_l2p")


def kind(kernel: str) -> str:
    """What a kernel's work draws like: "tensor", "memory" or "other"."""
    if kernel.startswith(TENSOR_PREFIXES):
        return "tensor"
    return "memory" if kernel.startswith(MEMORY_PREFIXES) else "other"


def state(work: str, sustained_s: float, mhz: float) -> tuple[float, float, int]:
    """(SM clock, power, reason bits) ``sustained_s`` into a stretch of ``work`` at a nominal ``mhz``."""
    draw = DRAW_W[work]
    if draw <= POWER_LIMIT_W or sustained_s < RAMP_S:
        return mhz, draw, 0
    return mhz * (POWER_LIMIT_W - IDLE_W) / (draw - IDLE_W), POWER_LIMIT_W, SW_POWER_CAP


def trajectory(work: Iterable[tuple[str, float]], mhz: float, energy_mj: float) -> tuple[Trajectory, float]:
    """The readings over ``work`` ((kernel, ms) back to back) on a part whose counter stood at ``energy_mj``,
    and the counter after it."""
    stretches: list[tuple[str, float]] = []  # (kind, seconds), a run of one kind of work merged
    for kernel, ms in work:
        what = kind(kernel)
        if stretches and stretches[-1][0] == what:
            stretches[-1] = (what, stretches[-1][1] + ms / 1e3)
        else:
            stretches.append((what, ms / 1e3))
    readings, start, spent = [], 0.0, 0.0
    for what, seconds in stretches or [("other", 0.0)]:
        ticks = [0.0, *(k * SAMPLE_PERIOD_S for k in range(1, int(seconds / SAMPLE_PERIOD_S) + 1)), seconds]
        for t in sorted(set(ticks)):
            if t == 0.0 and readings and readings[-1].t_s == start:
                continue
            clock, power, bits = state(what, t, mhz)
            temperature = 40.0 + min(40.0, (spent + _energy(what, t)) / 50.0)
            readings.append(Reading(start + t, round(clock, 1), MEM_MHZ, power, round(temperature, 1), bits))
        spent += _energy(what, seconds)
        start += seconds
    after = energy_mj + spent * 1e3
    return Trajectory(readings, (energy_mj, after)), after


def _energy(work: str, seconds: float) -> float:
    """Joules ``seconds`` of ``work`` spend: its draw until the controller acts, the limit after."""
    draw = DRAW_W[work]
    if draw <= POWER_LIMIT_W:
        return draw * seconds
    return draw * min(seconds, RAMP_S) + POWER_LIMIT_W * max(0.0, seconds - RAMP_S)
