"""Long minus short: the one way a cost is read out of two timed launches, with its physics guards.

A probe kernel runs ``iterations`` of a loop of ``steps`` identical operations between two timer reads
(%clock64 in the kernel, CUDA events around launches, %globaltimer). Whatever the timed region pays once
(the timer reads, entering and leaving the loop, the last operation's drain, a launch's own cost) is
the same in a short and a long launch, so

    cost per step = (reading_long - reading_short) / ((long - short) x steps)

holds the operation's cost alone. Every launch verifies its own result before its reading is used.

A difference is only as good as the timer that reads it. :class:`Difference` refuses one that spans
fewer than :data:`RESOLVED_TICKS` ticks of its timer, or that is not positive (a loop the compiler
emptied, a clock that did not advance, a first launch that paid for loading the kernel): it widens
the gap between the two lengths and tries again, up to :data:`WIDENINGS` times, and then fails the
probe with the numbers. A widened gap is kept for the samples after it. A timer read from the host
(CUDA events) first runs one untimed launch, so that no sample pays a kernel's first-use cost.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, replace

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device
from gpuprobe.families.base import Plan
from gpuprobe.families.planning import cycles_s, kernel_runs
from gpuprobe.families.sampling import ONE_SAMPLE, Stopping, sample_until_stable


@dataclass(frozen=True)
class Lengths:
    """The short and long iteration counts of one difference, and the operations per iteration."""

    short: int
    long: int
    steps: int

    def __post_init__(self) -> None:
        if self.short < 1 or self.long <= self.short or self.steps < 1:
            raise ValueError(f"Lengths: need 1 <= short < long and steps >= 1, not {self}")

    def per_step(self, short_reading: float, long_reading: float) -> float:
        return (long_reading - short_reading) / ((self.long - self.short) * self.steps)

    def widened(self, factor: int) -> Lengths:
        """The same short length, the gap to the long one ``factor`` times as wide."""
        return replace(self, long=self.short + factor * (self.long - self.short))


@dataclass(frozen=True)
class Timer:
    """What a difference is read with: the timer's name, the unit of its readings, the smallest step it
    resolves, and whether a first launch is run untimed (a timer read from the host sees a kernel's
    first-use cost: lazy module loading, the launch path's first touch)."""

    name: str
    unit: str
    tick: float
    warm_up: bool = False

    @property
    def least(self) -> float:
        """The least difference this timer resolves to within 1 %: :data:`RESOLVED_TICKS` of its ticks."""
        return RESOLVED_TICKS * self.tick


CLOCK64 = Timer("%clock64", "cycles", 1.0)
# cudaEventElapsedTime resolves about 0.5 us (CUDA Runtime API, cudaEventElapsedTime)
EVENTS = Timer("CUDA events", "ms", 0.0005, warm_up=True)
HOST_CLOCK = Timer("time.perf_counter", "s", time.get_clock_info("perf_counter").resolution, warm_up=True)

RESOLVED_TICKS = 100  # the least a difference may span, in ticks of its timer: quantisation within 1 %
WIDENINGS = 4  # a difference too short (or not positive) is retried with a wider gap, at most this often
MARGIN = 1.5  # a gap widened to resolve a difference aims this far past the least it needs


@dataclass
class Difference:
    """Samples of one step's cost, each a short and a long run of ``launch`` (which runs and verifies the
    kernel for that many iterations and returns the timer's reading), guarded as the module says.

    ``longest``: the most iterations ``launch`` can take (a chain's nodes, a buffer's size); None: no bound.
    ``warmed``: the kernel already ran (a checked or sizing launch), so no untimed first launch is needed.
    ``lengths`` grows when a sample needed a wider gap, and the samples after it keep it."""

    launch: Callable[[int], float]
    lengths: Lengths
    what: str
    timer: Timer = CLOCK64
    longest: int | None = None
    warmed: bool = False

    def sample(self) -> float:
        """One sample of the cost of one step, in the timer's unit per step."""
        if self.timer.warm_up and not self.warmed:
            self.launch(self.lengths.short)
            self.warmed = True
        tried: list[str] = []
        while True:
            lengths = self.lengths
            short, long = self.launch(lengths.short), self.launch(lengths.long)
            difference = long - short
            if difference >= self.timer.least:
                return lengths.per_step(short, long)
            tried.append(f"{lengths.long} took {long:g}, {lengths.short} {short:g}")
            # a positive difference says how much wider the gap must be; otherwise double it
            factor = max(2, math.ceil(MARGIN * self.timer.least / difference)) if difference > 0 else 2
            wider = lengths.widened(factor)
            stopped = (
                f"widened {WIDENINGS} times" if len(tried) > WIDENINGS
                else f"it takes at most {self.longest}" if self.longest is not None and wider.long > self.longest
                else None
            )  # fmt: skip
            if stopped:
                raise ProbeFailure(unresolved(self.what, self.timer, difference, tried, stopped))
            self.lengths = wider

    def samples(self, stop: Stopping) -> list[float]:
        """Samples of :meth:`sample` until ``stop`` says enough."""
        taken: list[float] = []
        sample_until_stable(lambda: taken.append(self.sample()), taken, stop)
        return taken


def step_gbps(step_bytes: float, step_ms: float) -> float:
    """GB/s of ``step_bytes`` moved in ``step_ms`` milliseconds."""
    return step_bytes / (step_ms * 1e-3) / 1e9


def event_gbps(
    run: Callable[[int], float], lengths: Lengths, unit_bytes: int, what: str, stop: Stopping, warmed: bool = False
) -> tuple[list[float], Lengths]:
    """GB/s samples of the bytes between a short and a long event-timed launch (``run(n)``: the GPU ms of
    ``n`` passes, iterations or steps of ``unit_bytes`` each), and the lengths they ended with (widened or not);
    ``warmed`` as :class:`Difference` says."""
    difference = Difference(run, lengths, what, EVENTS, warmed=warmed)
    return [step_gbps(unit_bytes, ms) for ms in difference.samples(stop)], difference.lengths


def unresolved(what: str, timer: Timer, difference: float, tried: list[str], stopped: str) -> str:
    """Why a difference gives no number: its value, what it lacks, why it was not widened, every try's readings."""
    under = f"under {RESOLVED_TICKS} ticks of {timer.name} ({timer.least:g} {timer.unit})"
    why = "not positive" if not difference > 0 else under
    return (
        f"{what}: long minus short is {difference:g} {timer.unit}, {why}; the gap cannot widen further "
        f"({stopped}; readings: {'; '.join(tried)} {timer.unit})"
    )


def resolved_step(lengths: Lengths, short: float, long: float, timer: Timer, what: str) -> float:
    """The cost per step of two readings whose lengths cannot widen (a copy of a buffer's whole size, two
    copies timed together), under :class:`Difference`'s guard: ProbeFailure when ``timer`` does not resolve it."""
    if long - short >= timer.least:
        return lengths.per_step(short, long)
    tried = [f"{lengths.long} took {long:g}, {lengths.short} {short:g}"]
    raise ProbeFailure(unresolved(what, timer, long - short, tried, "its lengths are fixed"))


# A first contact's sampling: one sample, its long launch one iteration longer than its short one.
SMOKE_SAMPLING = {"short_iterations": 1, "long_iterations": 2, "sampling": ONE_SAMPLE}


@dataclass(frozen=True)
class DifferencedSettings:
    """What a long-minus-short family samples: its two loop lengths, and when to stop sampling.
    A family's ``Settings`` extends it (and calls ``super().__post_init__()`` from its own)."""

    short_iterations: int = 8  # a sample: (40 - 8) iterations of the kernel's unrolled loop
    long_iterations: int = 40
    sampling: Stopping = Stopping(3, 9, 0.01, 0.5)

    def __post_init__(self) -> None:
        self.lengths(1)  # the lengths validate themselves, as the Stopping does

    def lengths(self, steps: int) -> Lengths:
        """The two lengths, for a kernel of ``steps`` operations per iteration (its declared unroll)."""
        return Lengths(self.short_iterations, self.long_iterations, steps)


def samples_plan(
    settings: DifferencedSettings, device: Device, step_cycles: float, steps: int, serial: int = 1
) -> Plan:
    """What :class:`Difference` costs at its most repeats (no widening): each sample a short and a long checked
    launch of the settings' lengths of ``steps`` operations per iteration, each step ``step_cycles`` at most,
    ``serial`` times over (blocks that take turns on an SM)."""
    lengths, repeats = settings.lengths(steps), settings.sampling.max_repeats
    cycles = serial * repeats * (lengths.short + lengths.long) * lengths.steps * step_cycles
    return kernel_runs(2 * repeats, cycles_s(cycles, device))
