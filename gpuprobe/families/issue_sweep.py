"""Latency and issue rate from timed chain kernels: the records they write and what they mean.

A chain kernel (ptx/alu*.ptx, ptx/mma*.ptx) runs ``iters`` iterations of an unrolled loop of
dependent chains and writes every thread's result words, then per warp (ptx/chain_records.ptxinc)
:data:`TIMING_WORDS` 64-bit words: %clock64 just before and just after the timed loop,
%globaltimer around those, and the SM id.

* Latency: one thread, one chain; a short and a long run. The cycles between them over the chain
  steps between them: what a timed region pays once cancels.
* Issue rate: one block per SM (grid = SM count), 1 to 32 warps, ``ILP`` chains per thread. An SM's
  span is its first thread's start to its last thread's end (%clock64 is one counter per SM); a
  short and a long run, and the rate is the work between them over the median span between them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpuprobe.families.base import ProbeFailure
from gpuprobe.families.measuring import Stopping, sample_until_stable

TIMING_WORDS = 5  # per warp, after all threads' results: clock start, clock end, timer start, timer end, SM id
MIN_CLOCK_WINDOW_NS = 50_000  # a span this long reads the SM clock to 2 % at 1 us timer resolution


def output_words(threads: int, result_words: int) -> int:
    """The 64-bit words a launch of ``threads`` writes: every thread's result, then each warp's timing."""
    return threads * result_words + -(-threads // 32) * TIMING_WORDS


@dataclass(frozen=True)
class Records:
    """One launch's output: per warp its timing (as columns), per thread its result words."""

    start: np.ndarray
    end: np.ndarray
    start_ns: np.ndarray
    end_ns: np.ndarray
    sm: np.ndarray
    result: np.ndarray  # one row per thread, the kernel's result words
    lanes: int  # threads per warp: 32, or the one thread of a latency run

    @classmethod
    def from_output(cls, words: np.ndarray, threads: int, result_words: int, kernel: str) -> Records:
        words = np.asarray(words, dtype=np.uint64)
        result = words[: threads * result_words].reshape(threads, result_words)
        timing = words[threads * result_words : output_words(threads, result_words)].reshape(-1, TIMING_WORDS)
        start, end = timing[:, 0].astype(np.int64), timing[:, 1].astype(np.int64)
        if np.any(end <= start):
            raise ProbeFailure(f"{kernel}: a warp's timed loop ended at or before its start (clock {start[0]})")
        ns = timing[:, 2].astype(np.int64), timing[:, 3].astype(np.int64)
        return cls(start, end, ns[0], ns[1], timing[:, 4], result, min(threads, 32))

    def span(self) -> float:
        """The median over SMs of each SM's span, first start to last end, in cycles."""
        order = np.argsort(self.sm, kind="stable")
        firsts = np.flatnonzero(np.r_[True, np.diff(self.sm[order]) != 0])  # each SM's first row in ``order``
        spans = np.maximum.reduceat(self.end[order], firsts) - np.minimum.reduceat(self.start[order], firsts)
        return float(np.median(spans))

    def threads_per_sm(self) -> float:
        """Threads on each SM; every SM must hold as many (a rate per SM from uneven SMs would mix loads)."""
        counts = np.unique(self.sm, return_counts=True)[1]
        if counts.min() != counts.max():
            raise ProbeFailure(
                f"the blocks were not spread evenly over the SMs ({counts.min()} to {counts.max()} warps on one SM)"
            )
        return float(counts[0]) * self.lanes

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
        got = " ".join(f"{int(w):#x}" for w in np.atleast_1d(results[bad]))
        raise ProbeFailure(f"{kernel}: thread {bad} computed {got}, not {what} ({int(np.sum(~good))} threads wrong)")


@dataclass(frozen=True)
class Settings:
    """How a chain family samples: the sweep's warps, the runs' lengths, when to stop."""

    warps: tuple[int, ...] = (1, 2, 4, 8, 16, 32)  # warps per SM in the sweep (one block per SM)
    short_iterations: int = 8
    latency_target_cycles: float = 300_000.0  # long minus short, for the one-warp latency runs
    sweep_target_cycles: float = 150_000.0  # long minus short, for each sweep point
    max_iterations: int = 1 << 20
    min_repeats: int = 2
    max_repeats: int = 5
    target_noise: float = 0.01
    point_budget_s: float = 0.5

    def __post_init__(self) -> None:
        if self.short_iterations < 1 or self.max_iterations <= self.short_iterations:
            raise ValueError("Settings: need 1 <= short_iterations < max_iterations")
        if not self.warps or any(not 1 <= w <= 32 for w in self.warps):
            raise ValueError(f"Settings.warps must be 1 to 32 warps per SM, got {self.warps}")
        if self.min_repeats < 1 or self.max_repeats < self.min_repeats:
            raise ValueError("Settings: need 1 <= min_repeats <= max_repeats")

    def stopping(self) -> Stopping:
        return Stopping(self.min_repeats, self.max_repeats, self.target_noise, self.point_budget_s)

    def planned_runs(self, configurations: int) -> int:
        """The most launches a latency or one ILP's sweep takes: a short and a long run per sample."""
        return configurations * self.max_repeats * 2


Launch = Callable[[int, int, int, int], Records]  # (ILP, iterations, blocks, threads per block) -> checked records


@dataclass
class Sweeper:
    """Latency and sweep points of one chain kernel family, through ``launch`` (which checks results)."""

    launch: Launch
    settings: Settings
    sm_count: int
    clocks: list[float] = field(default_factory=list)  # SM MHz read over the long runs

    def pair(self, ilp: int, blocks: int, threads: int, target: float) -> tuple[Records, Records, int]:
        """A short run and a long one sized from it to ``target`` cycles more, and its iterations."""
        s = self.settings
        short = self.launch(ilp, s.short_iterations, blocks, threads)
        iterations = iterations_for(s.short_iterations, short.span(), target, s.max_iterations)
        long = self.launch(ilp, iterations, blocks, threads)
        mhz = long.mhz()
        if mhz:
            self.clocks.append(mhz)
        return short, long, iterations - s.short_iterations

    def latency(self, steps_per_iteration: int, threads: int) -> list[float]:
        """Cycles per dependent step of one chain (ILP 1, one block of ``threads``: 1 thread or 1 warp)."""
        samples: list[float] = []

        def take() -> None:
            short, long, between = self.pair(1, 1, threads, self.settings.latency_target_cycles)
            samples.append(step_latency(short, long, between * steps_per_iteration))

        sample_until_stable(take, samples, self.settings.stopping())
        return samples

    def point(self, ilp: int, warps: int, work_per_iteration: float) -> SweepPoint:
        """The rate at ``warps`` per SM (one block per SM), ``work_per_iteration`` per thread."""
        rates: list[float] = []

        def take() -> None:
            short, long, between = self.pair(ilp, self.sm_count, 32 * warps, self.settings.sweep_target_cycles)
            rates.append(issue_rate(short, long, between * work_per_iteration))

        sample_until_stable(take, rates, self.settings.stopping())
        return SweepPoint(ilp, warps, rates)

    def mhz(self) -> float | None:
        return float(np.median(self.clocks)) if self.clocks else None


def launchable_warps(launcher, kernel: str, settings: Settings) -> list[int]:
    """The sweep's warps per SM whose block the kernel's resources allow (occupancy API)."""
    return [w for w in settings.warps if launcher.max_active_blocks(kernel, 32 * w) >= 1]


LAUNCH_S = 100e-6  # a launch, its poisoning fill and its read-back call, besides the bytes (generous)


def sweep_seconds(settings: Settings, sm_count: int, mhz: float, ilps: int, result_words: int) -> float:
    """An upper bound on one kernel family's GPU time (latency and all ILPs' sweeps): every sample at
    its maximum repeats, each run at most three times its target cycles, every run's records read
    back at 10 GB/s."""
    s = settings

    def run_s(target: float, threads: int) -> float:
        return 3 * target / (mhz * 1e6) + output_words(threads, result_words) * 8 / 10e9 + LAUNCH_S

    latency = s.planned_runs(1) * run_s(s.latency_target_cycles, 32)
    sweep = sum(s.planned_runs(ilps) * run_s(s.sweep_target_cycles, sm_count * 32 * w) for w in s.warps)
    return latency + sweep
