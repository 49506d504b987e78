"""Long-minus-short timing of an unrolled loop, shared by the warp, barrier and cluster families.

A probe kernel runs ``iterations`` of a loop of ``steps`` identical operations between two
%clock64 reads. Whatever the timed region pays once (the clock reads, entering and leaving the
loop, the last operation's drain) is the same in a short and a long launch, so

    cycles per step = (cycles_long - cycles_short) / ((long - short) x steps)

holds the operation's cost alone. Every launch verifies its own result before its cycles are used.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpuprobe.core.results import Device
from gpuprobe.families.base import Plan, ProbeFailure
from gpuprobe.families.measuring import Stopping, sample_until_stable
from gpuprobe.families.planning import cycles_s, kernel_runs

UNROLL = 32  # operations per loop iteration in every differenced kernel: fixed by their PTX (//@repeat 32)


@dataclass(frozen=True)
class Lengths:
    """The short and long iteration counts of one difference, and the operations per iteration."""

    short: int
    long: int
    steps: int

    def __post_init__(self) -> None:
        if self.short < 1 or self.long <= self.short or self.steps < 1:
            raise ValueError(f"Lengths: need 1 <= short < long and steps >= 1, not {self}")

    def per_step(self, short_cycles: float, long_cycles: float) -> float:
        return (long_cycles - short_cycles) / ((self.long - self.short) * self.steps)


# A first contact's sampling: one sample, its long launch 32 steps longer than its short one.
SMOKE_SAMPLING = {"short_iterations": 1, "long_iterations": 2, "min_repeats": 1, "max_repeats": 1}


@dataclass(frozen=True)
class DifferencedSettings:
    """What a long-minus-short family samples: its two loop lengths, and when to stop sampling.
    A family's ``Settings`` extends it (and calls ``super().__post_init__()`` from its own)."""

    short_iterations: int = 8  # a sample: (40 - 8) x 32 = 1024 operations
    long_iterations: int = 40
    min_repeats: int = 3
    max_repeats: int = 9
    target_noise: float = 0.01
    probe_budget_s: float = 0.5

    def __post_init__(self) -> None:
        self.stopping()  # each validates itself
        _ = self.lengths

    def stopping(self) -> Stopping:
        return Stopping(self.min_repeats, self.max_repeats, self.target_noise, self.probe_budget_s)

    @property
    def lengths(self) -> Lengths:
        return Lengths(self.short_iterations, self.long_iterations, UNROLL)


def step_sample(launch: Callable[[int], float], lengths: Lengths, what: str) -> float:
    """One sample of the cost of one step: ``launch(iterations)`` runs (and verifies) the kernel and
    returns the timed region's cycles. A step that does not cost more in the long launch is a
    ProbeFailure (a loop the compiler emptied, or a clock that did not advance)."""
    short = launch(lengths.short)
    long = launch(lengths.long)
    step = lengths.per_step(short, long)
    if not step > 0:
        raise ProbeFailure(f"{what}: {lengths.long} iterations took {long:g} cycles, {lengths.short} {short:g}")
    return step


def per_step_samples(launch: Callable[[int], float], lengths: Lengths, stop: Stopping, what: str) -> list[float]:
    """Samples of :func:`step_sample` until ``stop`` says enough."""
    samples: list[float] = []
    sample_until_stable(lambda: samples.append(step_sample(launch, lengths, what)), samples, stop)
    return samples


def samples_plan(
    settings: DifferencedSettings, device: Device, step_cycles: float, lengths: Lengths | None = None, serial: int = 1
) -> Plan:
    """What :func:`per_step_samples` costs at its most repeats: each sample a short and a long checked
    launch of ``lengths`` (default: the settings'), each step ``step_cycles`` at most, ``serial`` times
    over (blocks that take turns on an SM)."""
    lengths = lengths or settings.lengths
    steps = settings.max_repeats * (lengths.short + lengths.long) * lengths.steps
    return kernel_runs(2 * settings.max_repeats, cycles_s(serial * steps * step_cycles, device))
