"""Clock and power while a probe measures: NVML read every few milliseconds in the measuring process, the
energy counter before and after, kept with the probe as a compact trajectory.

NVML read only around the probes misses what the probes ran at: on the first H200 run the snapshots said
1890-1980 MHz and at most 163 W while every wgmma configuration ran at 1610-1800 MHz inside its kernels
(``../shared/review/h200_results_audit.md``, defect 4), because a 4 ms burst ends before the next snapshot.
So :class:`NvmlSampler` reads the SM and memory clocks, the power, the temperature and the clock-event
(throttle) reasons on a thread of its own from the probe's start to its end, plus one reading at each end,
and the total-energy counter (millijoules since the driver loaded) just before and just after. The launcher
gives the readings (:meth:`gpuprobe.runner.launcher.Launcher.sampling`); the simulated GPU gives the same
record from its own timeline and power model (:mod:`gpuprobe.simulated.power`).

A trajectory is kept as :meth:`Trajectory.record`: the number of readings, the span in seconds, the SM clock's
minimum, median and maximum, the mean and largest power, the hottest temperature, every clock-event reason
seen (their bits joined), the energy the counter moved and the mean power it implies, and a series of at most
:data:`MAX_POINTS` points (each the slowest clock and the largest power of its share of the readings, so an
excursion survives the thinning).

NVML's power reading is itself an average on many parts (over up to a second on pre-Hopper boards): the
energy counter is what energy facts use; the power series shows the shape.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import numpy as np

SAMPLE_PERIOD_S = 0.005  # NVML's clock and power queries take tens of microseconds: 5 ms costs the host ~1 %
MAX_POINTS = 24  # the series kept per probe: a results file holds hundreds of probes
JOIN_TIMEOUT_S = 2.0  # the sampling thread ends within one reading of being told; this bounds a hung NVML call
FIELDS = ("sm_mhz", "mem_mhz", "power_w", "temperature_c")


@dataclass(frozen=True)
class Reading:
    """One sample: seconds since the probe started, the clocks (MHz), power (W), temperature (°C) and the
    clock-event reason bits; None for what the part would not say."""

    t_s: float
    sm_mhz: float | None = None
    mem_mhz: float | None = None
    power_w: float | None = None
    temperature_c: float | None = None
    reasons: int | None = None


def reading(t_s: float, values: dict[str, Any] | None) -> Reading:
    """A :class:`Reading` from a launcher's sample (numbers by :data:`FIELDS` name, ``reasons`` an int); a value
    that is not a number (NVML's refusal, recorded as text) is None."""
    values = values or {}

    def number(name: str) -> float | None:
        value = values.get(name)
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

    bits = values.get("reasons")
    return Reading(t_s, *(number(name) for name in FIELDS), bits if isinstance(bits, int) else None)


@dataclass
class Trajectory:
    """The readings of one probe's measurement and the energy counter (mJ) at its start and end."""

    readings: list[Reading] = field(default_factory=list)
    energy_mj: tuple[float, float] | None = None

    def _column(self, name: str) -> list[float]:
        return [v for v in (getattr(r, name) for r in self.readings) if v is not None]

    @property
    def seconds(self) -> float:
        return self.readings[-1].t_s - self.readings[0].t_s if self.readings else 0.0

    @property
    def energy_j(self) -> float | None:
        """What the energy counter moved over the probe; None without the counter, or when it went backwards."""
        if self.energy_mj is None or self.energy_mj[1] < self.energy_mj[0]:
            return None
        return (self.energy_mj[1] - self.energy_mj[0]) / 1000.0

    @property
    def watts(self) -> float | None:
        """The mean power the energy counter gives over the readings' span; None without it or without a span."""
        energy = self.energy_j
        return energy / self.seconds if energy is not None and self.seconds > 0 else None

    def series(self, points: int = MAX_POINTS) -> dict[str, list[float | None]]:
        """At most ``points`` points: each the first time, the slowest clocks and the largest power and
        temperature of its share of the readings."""
        shares = np.array_split(np.arange(len(self.readings)), min(points, len(self.readings)))
        out: dict[str, list[float | None]] = {"t_ms": []} | {name: [] for name in FIELDS}
        for share in shares:
            chunk = [self.readings[k] for k in share]
            out["t_ms"].append(round(chunk[0].t_s * 1e3, 3))
            for name in FIELDS:
                values = [v for v in (getattr(r, name) for r in chunk) if v is not None]
                pick = min if name.endswith("mhz") else max
                out[name].append(round(pick(values), 1) if values else None)
        return out

    def record(self) -> dict[str, Any] | None:
        """The compact, JSON-able record kept with the probe (see the module); None with no reading at all."""
        if not self.readings:
            return None
        clocks, power = self._column("sm_mhz"), self._column("power_w")
        temperatures, bits = self._column("temperature_c"), [r.reasons for r in self.readings if r.reasons is not None]
        energy = self.energy_j
        return {
            "readings": len(self.readings),
            "seconds": round(self.seconds, 6),
            "sm_mhz": {"min": min(clocks), "median": float(np.median(clocks)), "max": max(clocks)} if clocks else None,
            "mem_mhz": min(self._column("mem_mhz"), default=None),
            "power_w": {"mean": round(float(np.mean(power)), 2), "max": max(power)} if power else None,
            "temperature_c": max(temperatures, default=None),
            "reasons": int(np.bitwise_or.reduce(bits)) if bits else None,
            "energy_j": None if energy is None else round(energy, 6),
            "energy_w": None if self.watts is None else round(self.watts, 2),
            "series": self.series(),
        }


@dataclass
class NvmlSampler:
    """Reads ``read()`` every ``period_s`` on a thread while :meth:`sampling` is entered, and once at each end;
    ``energy()`` (the counter in mJ, or None) just before the first reading and just after the last. ``clock``
    (seconds) and ``wait`` (an :class:`threading.Event`'s wait: True once told to stop) are the real ones unless a
    test gives its own."""

    read: Callable[[], dict[str, Any] | None]
    energy: Callable[[], float | None]
    period_s: float = SAMPLE_PERIOD_S
    clock: Callable[[], float] = time.monotonic

    @contextmanager
    def sampling(self) -> Iterator[Trajectory]:
        trajectory = Trajectory()
        before = self.energy()
        start = self.clock()
        stop = threading.Event()

        def take() -> None:
            trajectory.readings.append(reading(self.clock() - start, self.read()))

        def loop() -> None:
            while not stop.wait(self.period_s):
                take()

        take()
        thread = threading.Thread(target=loop, name="gpuprobe-nvml-sampler", daemon=True)
        thread.start()
        try:
            yield trajectory
        finally:
            stop.set()
            thread.join(JOIN_TIMEOUT_S)
            take()
            after = self.energy()
            if before is not None and after is not None:
                trajectory.energy_mj = (before, after)
