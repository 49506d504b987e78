"""When to stop sampling, and why it stopped: one :class:`Stopping` value per kind of sample in a family's
``Settings``, one loop that applies it, and the reason it ended written beside each fact.

The order of the checks is fixed, as nvbench's ``is_finished`` fixes its own: a sample is taken; under
``min_repeats`` sampling goes on; once the median is known to ``target_noise`` and the samples would detect
a 5 % change against a run like them, it stops (``stable``); at ``max_repeats`` it stops (``max_repeats``);
past ``budget_s`` it stops (``budget``).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from typing import Literal

from gpuprobe.core.detection import RUN_TO_RUN_PCT, detection
from gpuprobe.core.results import Fact
from gpuprobe.judge.analysis import median_ci

StopReason = Literal["stable", "max_repeats", "budget"]


@dataclass(frozen=True)
class Stopping:
    """When to stop sampling: at least ``min_repeats``, at most ``max_repeats``, stopping early once the
    median's CI half-width is ``target_noise`` of it and the samples detect a change of
    :data:`~gpuprobe.core.detection.TARGET_PCT` against a run like them (``run_to_run_pct`` allowed
    between the runs), or once ``budget_s`` seconds went into the samples.

    Three samples of 1 % noise bound the median to about 1 %, yet a comparison of two such runs
    catches a 5 % change about one time in two; five catch it nearly always. One sample more costs
    one more launch of the probe's kernel, a few milliseconds for most facts, and the time plan
    already counts every probe at ``max_repeats``."""

    min_repeats: int = 3
    max_repeats: int = 9
    target_noise: float = 0.01
    budget_s: float = 3.0
    run_to_run_pct: float = RUN_TO_RUN_PCT["device"]

    def __post_init__(self) -> None:
        if self.min_repeats < 1 or self.max_repeats < self.min_repeats:
            raise ValueError(
                f"Stopping: need 1 <= min_repeats <= max_repeats, not {self.min_repeats}, {self.max_repeats}"
            )
        if not self.target_noise >= 0 or not self.budget_s >= 0:
            raise ValueError(f"Stopping: target_noise and budget_s must be at least 0, not {self}")

    def at_most(self, repeats: int) -> Stopping:
        """The same rule, taking at most ``repeats`` samples (and at least as few, if fewer)."""
        return replace(self, min_repeats=min(self.min_repeats, repeats), max_repeats=repeats)


ONE_SAMPLE = Stopping(1, 1)  # a first contact's sampling: one sample, no noise test


_STOPS: list[StopReason] | None = None  # the reasons sampling stopped during the probe now measuring


def sample_until_stable(take_sample: Callable[[], None], samples: list[float], stop: Stopping) -> StopReason:
    """Call ``take_sample`` (which appends to ``samples``) until ``stop`` says enough; why it stopped."""
    started = time.monotonic()
    while True:
        take_sample()
        reason = _stop_reason(samples, stop, time.monotonic() - started)
        if reason is not None:
            if _STOPS is not None:
                _STOPS.append(reason)
            return reason


def _stop_reason(samples: list[float], stop: Stopping, elapsed_s: float) -> StopReason | None:
    if len(samples) < stop.min_repeats:
        return None
    if _enough(samples, stop):
        return "stable"
    if len(samples) >= stop.max_repeats:
        return "max_repeats"
    return "budget" if elapsed_s > stop.budget_s else None


def _enough(samples: list[float], stop: Stopping) -> bool:
    """The median is known to ``stop.target_noise`` and the samples detect a ``TARGET_PCT`` change."""
    median, low, high = median_ci(samples)
    if (high - low) / 2 > stop.target_noise * abs(median):
        return False
    found = detection(samples, run_to_run=stop.run_to_run_pct)
    return found is not None and not found.limit


@contextmanager
def stops_recorded() -> Iterator[list[StopReason]]:
    """The reasons every sampling inside the block stopped, in order (one probe's run, or a part of it whose
    samples a later probe reuses); they count for an enclosing block too."""
    global _STOPS
    outer, inner = _STOPS, []
    _STOPS = inner
    try:
        yield inner
    finally:
        _STOPS = outer
        if outer is not None:
            outer.extend(inner)


def stop_text(stops: Sequence[str]) -> str:
    """Why samplings stopped, as a fact records it: the one reason, or every distinct one joined by "+"."""
    return "+".join(sorted(set(stops)))


def stamp_stops(facts: Sequence[Fact], stops: Sequence[StopReason]) -> None:
    """Write beside each sampled fact that does not say already (a family reusing samples an earlier probe
    took gives their reason) why the probe's sampling stopped (:func:`stop_text`)."""
    for fact in facts:
        if fact.samples and stops and not fact.stopped:
            fact.stopped = stop_text(stops)
