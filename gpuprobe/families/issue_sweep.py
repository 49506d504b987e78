"""Latency and issue rate from timed chain kernels and their twins: the records they write and what they mean.

A chain kernel writes every thread's result words and, per warp, :data:`TIMING_WORDS` clock and timer
words. Its twin (:data:`TWIN_SUFFIX`) runs the same body :data:`TWIN_PASSES` times over under the same
loop control, so twin less kernel holds the instructions' cost alone. docs/issue_sweep.md says how
latency, issue rate and the SM clock are read from them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device
from gpuprobe.families.base import Plan, Request
from gpuprobe.families.differencing import Difference, Lengths
from gpuprobe.families.measuring import clock_mhz, clock_window_ns
from gpuprobe.families.planning import CHECKED_LAUNCH_CALLS, cycles_s, readback_host_s
from gpuprobe.families.sampling import ONE_SAMPLE, Stopping
from gpuprobe.kernels.registry import unroll_of
from gpuprobe.runner.launcher import Launcher

TIMING_WORDS = 5  # per warp, after all threads' results: clock start, clock end, timer start, timer end, SM id
MIN_CLOCK_WINDOW_NS = clock_window_ns(0.02)  # 50 us: a chain launch's clock to 2 %
TWIN_PASSES = 2  # a twin's loop body is its kernel's this many times over (ptx/alu/alu.ptx says why not more)
TWIN_SUFFIX = "_x2"  # a twin kernel's name is its kernel's and this (its probe declares it: ``twin`` in ptx/*/*.toml)


def twin_kernel(kernel: str, passes: int = TWIN_PASSES) -> str:
    """The kernel whose loop body is ``kernel``'s ``passes`` times over: itself, or its twin."""
    if passes not in (1, TWIN_PASSES):
        raise ValueError(f"a chain kernel's body runs once or {TWIN_PASSES} times, not {passes}")
    return kernel if passes == 1 else f"{kernel}{TWIN_SUFFIX}"


@functools.cache
def body_of(kernel: str) -> int:
    """The instructions per thread in one pass of a chain kernel's loop: the unroll its probe declares, found
    through its twin (which only that probe names; the kernel alone may also serve a probe that times nothing)."""
    return unroll_of(twin_kernel(kernel))


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
    lanes: int  # threads per warp: 32, or the one thread of a latency launch

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


def thread_cycles(records: Records) -> float:
    """A latency launch's reading: its one thread's (or warp's) loop, in cycles."""
    return float((records.end - records.start)[0])


def sm_cycles(records: Records, warps: int) -> float:
    """A sweep launch's reading: the median span of the SMs that held one block of ``warps`` warps, in
    cycles; a launch in which fewer than half of the blocks had an SM to themselves fails."""
    blocks = len(records.sm) // warps
    if 2 * records.alone(warps) < blocks:
        raise ProbeFailure(
            f"only {records.alone(warps)} of {blocks} blocks of {warps} warps had an SM to themselves: "
            "the block scheduler doubled up the others"
        )
    return records.span(warps)


@dataclass(frozen=True)
class Depths(Lengths):
    """A kernel and its twin as a :class:`~gpuprobe.families.differencing.Lengths`: ``short`` and ``long``
    are their instructions per thread per iteration, ``steps`` the iterations both run, so the cost per
    step is the cost of one instruction. The twin cannot grow deeper, so a difference too short to
    resolve widens by running more iterations."""

    def widened(self, factor: int) -> Depths:
        return replace(self, steps=self.steps * factor)


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
    """How a chain family samples: the sweep's warps, the launches' lengths, when to stop (each point)."""

    warps: tuple[int, ...] = (1, 2, 4, 8, 16, 32)  # warps per SM in the sweep (one block per SM)
    short_iterations: int = 8  # the kernel's sizing launch, from which the pair's iterations are set
    latency_target_cycles: float = 300_000.0  # twin minus kernel, for the one-warp latency launches
    sweep_target_cycles: float = 150_000.0  # twin minus kernel, for each sweep point
    max_iterations: int = 1 << 20
    # an H200's chain cycles repeat to 0.01 %: every point settled at its first 2 samples
    sampling: Stopping = Stopping(2, 3, 0.01, 0.5)

    def __post_init__(self) -> None:
        if self.short_iterations < 1 or self.max_iterations <= self.short_iterations:
            raise ValueError("Settings: need 1 <= short_iterations < max_iterations")
        if not self.warps or any(not 1 <= w <= 32 for w in self.warps):
            raise ValueError(f"Settings.warps must be 1 to 32 warps per SM, got {self.warps}")

    def planned_launches(self, configurations: int) -> int:
        """The most launches a latency or one ILP's sweep takes: per configuration a sizing launch, then per
        sample a launch of the kernel and one of its twin."""
        return configurations * (1 + 2 * self.sampling.max_repeats)


# A first contact's sweep: the full run's shape (one block per SM, every warp count, so each fact it
# publishes means what the full run's does), every sample taken once, launches of a few thousand cycles (the
# families' checks hold for any trip count; such launches are too short to read the SM clock).
SMOKE_SETTINGS = Settings(short_iterations=1, latency_target_cycles=2000.0, sweep_target_cycles=2000.0,
                          sampling=ONE_SAMPLE)  # fmt: skip

Launch = Callable[[int, int, int, int, int], Records]  # (passes, ILP, iterations, blocks, threads) -> checked records


def chain_records(
    request: Request, kernel: str, operands: Any, iterations: int, blocks: int, threads: int, result_words: int
) -> Records:
    """One checked launch of a chain kernel taking (iters, operands, out): ``blocks`` of ``threads``, each
    thread writing ``result_words``; its records (the caller checks the results)."""
    count = output_words(blocks * threads, result_words)
    out = request.outputs.get(count)
    args = [np.uint32(iterations), operands, out]
    words = request.kernels.results(kernel, args, out, count, grid=blocks, block=threads)
    return Records.from_output(words, blocks * threads, result_words, kernel)


@dataclass
class Sweeper:
    """Latency and sweep points of one chain kernel and its twin, through ``launch`` (which checks results).
    ``body``: the instructions per thread in one pass of the kernel's loop (:func:`body_of`: 32 ALU steps,
    16 mma.sync)."""

    launch: Launch
    settings: Settings
    sm_count: int
    kernel: str
    body: int = field(init=False)
    clocks: list[float] = field(default_factory=list)  # SM MHz read over the twins' launches

    def __post_init__(self) -> None:
        self.body = body_of(self.kernel)

    def latency(self, threads: int) -> list[float]:
        """Cycles per dependent step of one chain (ILP 1, one block of ``threads``: 1 thread or 1 warp)."""
        pair = self._pair(1, 1, threads, self.settings.latency_target_cycles, thread_cycles)
        return pair.samples(self.settings.sampling)

    def point(self, ilp: int, warps: int, work_per_instruction: float) -> SweepPoint:
        """The rate at ``warps`` per SM (one block per SM), ``work_per_instruction`` per thread: the SM's
        threads' work over the SM cycles each instruction of theirs takes."""
        read = functools.partial(sm_cycles, warps=warps)
        pair = self._pair(ilp, self.sm_count, 32 * warps, self.settings.sweep_target_cycles, read)
        cycles = pair.samples(self.settings.sampling)
        return SweepPoint(ilp, warps, [32 * warps * work_per_instruction / c for c in cycles])

    def mhz(self) -> float | None:
        return float(np.median(self.clocks)) if self.clocks else None

    def _pair(self, ilp: int, blocks: int, threads: int, target: float, read: Callable[[Records], float]) -> Difference:
        """The kernel and its twin as one :class:`Difference`, sized so that the twin takes ``target``
        cycles more; ``read`` turns a launch's records into its reading."""
        s = self.settings

        def reading(depth: int) -> float:
            iterations = pair.lengths.steps
            if iterations > s.max_iterations:
                raise ProbeFailure(f"{self.kernel}: its twin's difference needs over {s.max_iterations} iterations")
            records = self.launch(depth // self.body, ilp, iterations, blocks, threads)
            if depth > self.body and (mhz := records.mhz()):
                self.clocks.append(mhz)
            return read(records)

        depths = Depths(self.body, TWIN_PASSES * self.body, self._iterations(ilp, blocks, threads, target))
        what = f"{self.kernel} and {twin_kernel(self.kernel)}, ILP {ilp}, {threads} threads x {blocks} blocks"
        pair = Difference(reading, depths, what)
        return pair

    def _iterations(self, ilp: int, blocks: int, threads: int, target: float) -> int:
        """Iterations for the twin to take about ``target`` cycles more than the kernel, from a short launch of
        the kernel (its cycles per iteration, which its twin's extra passes each take again)."""
        s = self.settings
        short = self.launch(1, ilp, s.short_iterations, blocks, threads)
        per_pass = max(short.span() / s.short_iterations, 1.0)
        return int(min(s.max_iterations, max(1, round(target / ((TWIN_PASSES - 1) * per_pass)))))


def launchable_warps(launcher: Launcher, kernel: str, settings: Settings) -> list[int]:
    """The sweep's warps per SM whose block the kernel and its twin's resources allow (occupancy API)."""
    return [w for w in settings.warps
            if min(launcher.max_active_blocks(k, 32 * w) for k in (kernel, twin_kernel(kernel))) >= 1]  # fmt: skip


def launches_plan(launches: int, target_cycles: float, threads: int, result_words: int, device: Device) -> Plan:
    """What ``launches`` checked launches of ``threads`` threads cost at most: each at most three times
    ``target_cycles`` at the device's nominal clock (a margin that also covers a clock down to a third
    of it), and its output read back and checked. No probe: the caller counts those."""
    output = output_words(threads, result_words) * 8
    gpu_s = launches * cycles_s(3 * target_cycles, device)
    return Plan(0, launches * CHECKED_LAUNCH_CALLS, gpu_s, launches * readback_host_s(output))


def pair_launch_cycles(target_cycles: float) -> float:
    """The mean length of a kernel's and its twin's launches when the twin takes ``target_cycles`` more: the
    kernel ``target / (TWIN_PASSES - 1)``, the twin ``TWIN_PASSES`` times that (a sizing launch is shorter)."""
    return target_cycles * (1 + TWIN_PASSES) / (2 * (TWIN_PASSES - 1))


def sweep_plan(settings: Settings, device: Device, kernels: int, ilps: int, result_words: int) -> Plan:
    """What ``kernels`` chain kernels (each with its twin) measured at ``ilps`` ILPs each cost at most: one
    probe per kernel and ILP; per kernel a latency (one warp) and every ILP's sweep over the warps, every
    sample at its most repeats (:func:`launches_plan` for each launch)."""
    s = settings
    latency = pair_launch_cycles(s.latency_target_cycles)
    per_kernel = launches_plan(s.planned_launches(1), latency, 32, result_words, device)
    for warps in s.warps:
        per_kernel += launches_plan(s.planned_launches(ilps), pair_launch_cycles(s.sweep_target_cycles),
                                    device.sm_count * 32 * warps, result_words, device)  # fmt: skip
    k = kernels
    return Plan(k * ilps, k * per_kernel.launches, k * per_kernel.gpu_s, k * per_kernel.host_s)
