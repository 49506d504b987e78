"""What every family reports with: a fact from its samples (:func:`fact`, median and CI), a fact it could
not measure (:func:`unmeasured`), the SM clock read over a %globaltimer window (:func:`clock_mhz`), and the
checks of its settings' counts that a :class:`~gpuprobe.families.sampling.Stopping` does not cover.
"""

from __future__ import annotations

from collections.abc import Sequence

from gpuprobe.core.results import Fact
from gpuprobe.judge.analysis import median_ci

TIMER_TICK_NS = 1000  # how often %globaltimer moves on current GPUs (about 1 us; every 32 ns only under a profiler)


def clock_window_ns(precision: float) -> float:
    """The shortest %globaltimer window that reads the SM clock to ``precision`` (a fraction): each
    window's reading is off from the true time by less than one tick."""
    return TIMER_TICK_NS / precision


def clock_mhz(cycles: float, ns: float, window_ns: float) -> float | None:
    """The SM clock, ``cycles`` of %clock64 over ``ns`` of %globaltimer, from a window of at least
    ``window_ns``; None from a shorter one (a window under a tick may even read 0 ns)."""
    return float(cycles) / float(ns) * 1000.0 if ns >= window_ns else None


def require_counts(settings: object, names: Sequence[str]) -> None:
    """Each named setting is at least 1: a zero iteration count would make a PTX loop run 2**32 times."""
    for name in names:
        if getattr(settings, name) < 1:
            raise ValueError(f"Settings.{name} must be at least 1, got {getattr(settings, name)}")


def require_long_after_short(settings: object) -> None:
    """``long_iterations`` exceeds ``short_iterations``: their difference is what is timed."""
    if settings.long_iterations <= settings.short_iterations:
        raise ValueError("Settings: long_iterations must exceed short_iterations")


def fact(fact_id: str, samples: Sequence[float], unit: str, probe: str, mhz: float | None = None) -> Fact:
    """The median of ``samples`` with its CI; a cycle count also in ns when the SM clock ``mhz`` is known."""
    value, low, high = median_ci(list(samples))
    converted = {"ns": value / mhz * 1000.0} if unit == "cycle" and mhz else {}
    return Fact(fact_id, value, unit, (low, high), [float(s) for s in samples], converted, probe)


def unmeasured(fact_id: str, unit: str, probe: str, reason: str) -> Fact:
    """A fact the probe could not measure here for a reason outside the GPU (an optional binding not
    installed, no datasheet figure for an unknown model): no value, judged "not_run" with the reason."""
    return Fact(fact_id, None, unit, probe=probe, detail=reason)
