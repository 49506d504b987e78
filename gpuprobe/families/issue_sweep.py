"""Latency and issue rate from timed chain kernels: the records they write and what they mean.

A chain kernel (ptx/alu*.ptx, ptx/mma*.ptx) runs ``iters`` iterations of an unrolled loop of
dependent chains and writes, per thread, :data:`RECORD_WORDS` 64-bit words: %clock64 just before
and just after the timed loop, %globaltimer around those, the SM id, and the thread's result.

* Latency: one thread, one chain; a short and a long run. The cycles between them over the chain
  steps between them: what a timed region pays once cancels.
* Issue rate: one block per SM (grid = SM count), 1 to 32 warps, ``ILP`` chains per thread. An SM's
  span is its first thread's start to its last thread's end (%clock64 is one counter per SM); a
  short and a long run, and the rate is the work between them over the median span between them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from gpuprobe.families.base import ProbeFailure

RECORD_WORDS = 6  # clock start, clock end, globaltimer start, globaltimer end, SM id, result
MIN_CLOCK_WINDOW_NS = 50_000  # a span this long reads the SM clock to 2 % at 1 us timer resolution


@dataclass(frozen=True)
class Records:
    """One launch's per-thread records, as columns."""

    start: np.ndarray
    end: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    sm: np.ndarray
    result: np.ndarray

    @classmethod
    def from_words(cls, words: np.ndarray, kernel: str) -> Records:
        table = np.asarray(words, dtype=np.uint64).reshape(-1, RECORD_WORDS)
        start, end = table[:, 0].astype(np.int64), table[:, 1].astype(np.int64)
        if np.any(end <= start):
            raise ProbeFailure(f"{kernel}: a thread's timed loop ended at or before its start (clock {start[0]})")
        return cls(start, end, table[:, 2].astype(np.int64), table[:, 3].astype(np.int64), table[:, 4], table[:, 5])

    def span(self) -> float:
        """The median over SMs of each SM's span, first start to last end, in cycles."""
        spans = [self.end[self.sm == sm].max() - self.start[self.sm == sm].min() for sm in np.unique(self.sm)]
        return float(np.median(spans))

    def threads_per_sm(self) -> float:
        return float(np.median(np.unique(self.sm, return_counts=True)[1]))

    def mhz(self) -> float | None:
        """The SM clock over the longest thread's loop (cycles over timer ns), if long enough to read."""
        longest = int(np.argmax(self.end_ns - self.start_ns))
        ns = int(self.end_ns[longest] - self.start_ns[longest])
        if ns < MIN_CLOCK_WINDOW_NS:
            return None
        return float(self.end[longest] - self.start[longest]) / ns * 1000.0


def step_latency(short: Records, long: Records, steps_between: int) -> float:
    """Cycles per chain step: one thread's long loop less its short loop, over the steps between."""
    cycles = float((long.end - long.start)[0] - (short.end - short.start)[0])
    if cycles <= 0:
        raise ProbeFailure(f"the long chain took {cycles:+.0f} cycles more than the short one")
    return cycles / steps_between


def issue_rate(short: Records, long: Records, work_per_thread_between: float) -> float:
    """Work per clock per SM: each SM's threads' work between the runs over the span between them."""
    cycles = long.span() - short.span()
    if cycles <= 0:
        raise ProbeFailure(f"the long run's SM span was {cycles:+.0f} cycles longer than the short one's")
    return long.threads_per_sm() * work_per_thread_between / cycles


def iterations_for(short_iterations: int, short_span: float, target_cycles: float, most: int) -> int:
    """Long-run iterations: enough for ``target_cycles`` more than the short run, at most ``most``."""
    per_iteration = max(short_span / short_iterations, 1.0)
    return int(min(most, short_iterations + max(1, round(target_cycles / per_iteration))))


@dataclass(frozen=True)
class SweepPoint:
    """One (ILP, warps) configuration's rate samples."""

    ilp: int
    warps: int
    rates: list[float]

    @property
    def rate(self) -> float:
        return float(np.median(self.rates))


SATURATED = 0.03  # points within this fraction of the best rate are the plateau


def plateau(points: Sequence[SweepPoint]) -> tuple[SweepPoint, list[float]]:
    """The best point, and the samples of every point within :data:`SATURATED` of it: the peak
    rate is the plateau's median, not the luckiest point's (a maximum over noisy medians is biased up)."""
    if not points:
        raise ProbeFailure("no point of the sweep was measured")
    top = max(points, key=lambda p: p.rate)
    return top, [r for p in points if p.rate >= (1.0 - SATURATED) * top.rate for r in p.rates]


def sweep_series(points: Sequence[SweepPoint]) -> dict[str, list]:
    return {
        "ilp": [p.ilp for p in points],
        "warps_per_sm": [p.warps for p in points],
        "rate": [p.rate for p in points],
    }


def check_results(results: np.ndarray, predicted: Callable[[np.ndarray], np.ndarray], kernel: str, what: str) -> None:
    """Every thread's result against the host's prediction; ``predicted`` gives a mask of matches."""
    good = predicted(results)
    if not np.all(good):
        bad = int(np.argmin(good))
        raise ProbeFailure(
            f"{kernel}: thread {bad} computed {int(results[bad]):#x}, not {what} ({int(np.sum(~good))} threads wrong)"
        )
