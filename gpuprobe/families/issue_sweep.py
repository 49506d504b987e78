"""Latency and issue rate from timed chain kernels: the records they write and what they mean.

A chain kernel (ptx/alu*.ptx, ptx/mma*.ptx) runs ``iters`` iterations of an unrolled loop of
dependent chains and writes every thread's result words, then per warp (ptx/common/chain_records.ptxinc)
:data:`TIMING_WORDS` 64-bit words: %clock64 just before and just after the timed loop,
%globaltimer around those, and the SM id.

* Latency: one thread, one chain; a short and a long run. The cycles between them over the chain
  steps between them: what a timed region pays once cancels.
* Issue rate: one block per SM (grid = SM count), 1 to 32 warps, ``ILP`` chains per thread. An SM's
  span is its first thread's start to its last thread's end (%clock64 is one counter per SM); a
  short and a long run, and the rate is the work between them over the median span between them.
  The block scheduler does not promise one block per SM (a block that finished early, or one
  dispatched late, may share an SM with another), so the rate is taken over the SMs that held
  exactly one block: an SM holding two measures another load, and SMs do not share the units an
  issue rate is about. A run in which fewer than half of the blocks had an SM to themselves fails.
* The SM clock: %clock64 cycles over %globaltimer ns of one window. The timer moves in ticks of
  about a microsecond (:data:`TIMER_TICK_NS`), so a window of W ns reads it to a tick in W
  (:func:`clock_mhz`); a shorter window than the precision asks for gives no clock.

What a family's sweeps cost at most on a device (:func:`sweep_plan`) is counted from the settings;
:func:`run_plan` and :func:`held_batch_s` price the checked runs and timed batches that other families'
plans count too.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from gpuprobe.core.results import Device
from gpuprobe.families.base import Plan, ProbeFailure
from gpuprobe.families.measuring import Stopping, clock_mhz, clock_window_ns, sample_until_stable
from gpuprobe.families.planning import KERNEL_RUN_CALLS, cycles_s, readback_host_s

TIMING_WORDS = 5  # per warp, after all threads' results: clock start, clock end, timer start, timer end, SM id
MIN_CLOCK_WINDOW_NS = clock_window_ns(0.02)  # 50 us: a chain run's clock to 2 %


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

    def _per_sm(self) -> tuple[np.ndarray, np.ndarray]:
        """Each SM's span (first start to last end, cycles) and the warps it held."""
        order = np.argsort(self.sm, kind="stable")
        firsts = np.flatnonzero(np.r_[True, np.diff(self.sm[order]) != 0])  # each SM's first row in ``order``
        spans = np.maximum.reduceat(self.end[order], firsts) - np.minimum.reduceat(self.start[order], firsts)
        return spans, np.diff(np.r_[firsts, len(order)])

    def span(self, warps: int | None = None) -> float:
        """The median over SMs of each SM's span, first start to last end, in cycles; with ``warps``,
        over the SMs that held exactly that many warps only."""
        spans, held = self._per_sm()
        return float(np.median(spans if warps is None else spans[held == warps]))

    def alone(self, warps: int) -> int:
        """The SMs that held exactly ``warps`` warps: with blocks of that many, one block each."""
        return int(np.sum(self._per_sm()[1] == warps))

    def mhz(self) -> float | None:
        """The SM clock over the longest thread's loop (cycles over timer ns), if long enough to read."""
        longest = int(np.argmax(self.end_ns - self.start_ns))
        ns = int(self.end_ns[longest] - self.start_ns[longest])
        return clock_mhz(float(self.end[longest] - self.start[longest]), ns, MIN_CLOCK_WINDOW_NS)


def step_latency(short: Records, long: Records, steps_between: int) -> float:
    """Cycles per chain step: one thread's long loop less its short loop, over the steps between."""
    cycles = float((long.end - long.start)[0] - (short.end - short.start)[0])
    if cycles <= 0:
        raise ProbeFailure(f"the long chain took {cycles:+.0f} cycles more than the short one")
    return cycles / steps_between


def issue_rate(short: Records, long: Records, work_per_thread_between: float, warps: int) -> float:
    """Work per clock per SM holding one block of ``warps`` warps: its threads' work between the runs
    over its span between them (medians over such SMs). An SM the block scheduler gave two blocks is
    left out; a run in which fewer than half of the blocks had an SM to themselves fails."""
    for run in (short, long):
        blocks = len(run.sm) // warps
        if 2 * run.alone(warps) < blocks:
            raise ProbeFailure(
                f"only {run.alone(warps)} of {blocks} blocks of {warps} warps had an SM to themselves: "
                "the block scheduler doubled up the others"
            )
    cycles = long.span(warps) - short.span(warps)
    if cycles <= 0:
        raise ProbeFailure(f"the long run's SM span was {cycles:+.0f} cycles longer than the short one's")
    return warps * long.lanes * work_per_thread_between / cycles


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


# A first contact's sweep: one warp per SM, every sample taken once, runs of a few thousand cycles (the
# families' checks hold for any trip count; such runs are too short to read the SM clock).
SMOKE_SETTINGS = Settings(warps=(1,), short_iterations=1, latency_target_cycles=2000.0, sweep_target_cycles=2000.0,
                          min_repeats=1, max_repeats=1)  # fmt: skip

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
            rates.append(issue_rate(short, long, between * work_per_iteration, warps))

        sample_until_stable(take, rates, self.settings.stopping())
        return SweepPoint(ilp, warps, rates)

    def mhz(self) -> float | None:
        return float(np.median(self.clocks)) if self.clocks else None


def launchable_warps(launcher, kernel: str, settings: Settings) -> list[int]:
    """The sweep's warps per SM whose block the kernel's resources allow (occupancy API)."""
    return [w for w in settings.warps if launcher.max_active_blocks(kernel, 32 * w) >= 1]


def run_plan(runs: int, target_cycles: float, threads: int, result_words: int, device: Device) -> Plan:
    """What ``runs`` checked runs of ``threads`` threads cost at most: each at most three times
    ``target_cycles`` at the device's nominal clock (a margin that also covers a clock down to a third
    of it), and its output read back and checked. No probe: the caller counts those."""
    output = output_words(threads, result_words) * 8
    return Plan(0, runs * KERNEL_RUN_CALLS, runs * cycles_s(3 * target_cycles, device), runs * readback_host_s(output))


def sweep_plan(settings: Settings, device: Device, kernels: int, ilps: int, result_words: int) -> Plan:
    """What ``kernels`` chain kernels measured at ``ilps`` ILPs each cost at most: one probe per kernel
    and ILP; per kernel a latency (one warp) and every ILP's sweep over the warps, every sample at its
    most repeats (:func:`run_plan` for each run)."""
    s = settings
    per_kernel = run_plan(s.planned_runs(1), s.latency_target_cycles, 32, result_words, device)
    for warps in s.warps:
        per_kernel += run_plan(s.planned_runs(ilps), s.sweep_target_cycles, device.sm_count * 32 * warps,
                               result_words, device)  # fmt: skip
    return Plan(kernels * ilps, kernels * per_kernel.launches, kernels * per_kernel.gpu_s, kernels * per_kernel.host_s)
