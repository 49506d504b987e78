"""What every family measures with: checked launches, poisoned outputs, stopping rules, facts.

* :class:`Kernels` launches a kernel of the checked cubin with its arguments held against the
  kernel's PTX signature, after filling its output with all-ones bytes, and reads the output back:
  a kernel that did not write every word it must is caught (:data:`POISON`), not read as zero.
* :func:`sample_until_stable` takes samples until the median is known well enough and a comparison
  with another run could detect a 5 % change, the repeats run out or the time budget does.
* :func:`fact` turns samples into a :class:`~gpuprobe.core.results.Fact` (median and its CI).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuprobe.core.detection import RUN_TO_RUN_PCT, detection
from gpuprobe.core.results import Fact
from gpuprobe.families.base import ProbeFailure
from gpuprobe.judge.analysis import median_ci
from gpuprobe.runner.gpu import Launcher

TIMER_TICK_NS = 1000  # how often %globaltimer moves on current GPUs (about 1 us; every 32 ns only under a profiler)


def clock_window_ns(precision: float) -> float:
    """The shortest %globaltimer window that reads the SM clock to ``precision`` (a fraction): each
    window's reading is off from the true time by less than one tick."""
    return TIMER_TICK_NS / precision


def clock_mhz(cycles: float, ns: float, window_ns: float) -> float | None:
    """The SM clock, ``cycles`` of %clock64 over ``ns`` of %globaltimer, from a window of at least
    ``window_ns``; None from a shorter one (a window under a tick may even read 0 ns)."""
    return float(cycles) / float(ns) * 1000.0 if ns >= window_ns else None


POISON_BYTE = 0xFF  # every output byte before a launch; a word still all-ones was never written

# PTX parameter type -> the NumPy scalar types a launch may pass for it (a buffer passes for .u64/.b64).
SCALARS: dict[str, tuple[type, ...]] = {
    "u32": (np.uint32,), "s32": (np.int32,), "b32": (np.uint32, np.int32), "f32": (np.float32,),
    "u64": (np.uint64,), "s64": (np.int64,), "b64": (np.uint64, np.int64), "f64": (np.float64,),
}  # fmt: skip
POINTER_TYPES = ("u64", "b64")
TENSOR_MAP_TYPE = "b8[128]"  # a TMA tensor map passed by value (PTX ISA: .param .align 64 .b8 name[128])


def check_arguments(kernel: str, args: Sequence[object], parameters: list[tuple[str, str]]) -> None:
    """The arguments match the kernel's PTX parameters in number and type (a buffer is a 64-bit pointer,
    a tensor map the 128 bytes ``Launcher.tensor_map`` encoded)."""
    if len(args) != len(parameters):
        names = ", ".join(name for _, name in parameters)
        raise ProbeFailure(f"{kernel} takes {len(parameters)} parameters ({names}), given {len(args)}")
    for arg, (ptx_type, name) in zip(args, parameters, strict=True):
        if ptx_type == TENSOR_MAP_TYPE:
            if not (isinstance(arg, np.void) and arg.dtype.itemsize == 128):
                raise ProbeFailure(f"{kernel}: parameter {name} is a tensor map, given {type(arg).__name__}")
            continue
        if ptx_type not in SCALARS:
            raise ProbeFailure(f"{kernel}: parameter {name} has PTX type .{ptx_type}, which gpuprobe cannot pass")
        scalar = isinstance(arg, np.generic)
        if (scalar and not isinstance(arg, SCALARS[ptx_type])) or (not scalar and ptx_type not in POINTER_TYPES):
            raise ProbeFailure(f"{kernel}: parameter {name} is .{ptx_type}, given {type(arg).__name__}")


def unwritten(values: np.ndarray) -> bool:
    """Whether any value still holds the poison (all bits set): its word was never written."""
    raw = np.ascontiguousarray(values).view(np.uint8).reshape(len(values), -1)
    return bool(np.any(np.all(raw == POISON_BYTE, axis=1)))


@dataclass
class OutputBuffers:
    """Output buffers of 64-bit words, each size allocated once and reused across launches (a launch poisons
    its output before it runs, so any large enough buffer serves): ``get(words)`` is one of at least ``words``."""

    launcher: Launcher
    by_words: dict[int, Any] = field(default_factory=dict)

    def get(self, words: int) -> Any:
        size = min((w for w in self.by_words if w >= words), default=words)
        if size not in self.by_words:
            self.by_words[size] = self.launcher.alloc(size * 8)
        return self.by_words[size]


@dataclass
class Kernels:
    """Checked launches of one cubin's kernels, whose PTX signatures are ``parameters``."""

    launcher: Launcher
    parameters: dict[str, list[tuple[str, str]]]

    def signature(self, kernel: str) -> list[tuple[str, str]]:
        if kernel not in self.parameters:
            raise ProbeFailure(f"kernel {kernel} is not in the checked cubin")
        return self.parameters[kernel]

    def run(
        self,
        kernel: str,
        args: Sequence[object],
        out: Any,
        count: int,
        *,
        dtype: str = "uint64",
        grid: int | tuple[int, ...] = 1,
        block: int | tuple[int, ...] = 1,
        shared: int = 0,
        cooperative: bool = False,
    ) -> np.ndarray:
        """Poison ``out``, launch ``kernel`` (its arguments checked), and read ``count`` values of
        ``dtype`` back; ProbeFailure if any of them was not written. ``out`` must be among ``args``."""
        check_arguments(kernel, args, self.signature(kernel))
        self.launcher.fill(out, POISON_BYTE)
        self.launcher.launch(kernel, grid, block, list(args), shared, cooperative)
        values = self.launcher.read(out, dtype, count)
        if unwritten(values):
            raise ProbeFailure(f"{kernel} did not write all of its {count} results")
        return values

    def time(
        self,
        kernel: str,
        args: Sequence[object],
        *,
        grid: int | tuple[int, ...],
        block: int | tuple[int, ...],
        shared: int = 0,
        count: int = 1,
        cooperative: bool = False,
    ) -> float:
        """GPU milliseconds of ``count`` back-to-back launches (CUDA events), arguments checked."""
        check_arguments(kernel, args, self.signature(kernel))
        return self.launcher.time_launches(kernel, grid, block, list(args), shared, count, cooperative)


def require_counts(settings: object, names: Sequence[str]) -> None:
    """Each named setting is at least 1: a zero iteration count would make a PTX loop run 2**32 times."""
    for name in names:
        if getattr(settings, name) < 1:
            raise ValueError(f"Settings.{name} must be at least 1, got {getattr(settings, name)}")


def require_long_after_short(settings: object) -> None:
    """``long_iterations`` exceeds ``short_iterations`` (their difference is what is timed), and
    ``max_repeats`` is at least ``min_repeats``."""
    long, short = settings.long_iterations, settings.short_iterations
    if long <= short or settings.max_repeats < settings.min_repeats:
        raise ValueError("Settings: long_iterations must exceed short_iterations, max_repeats >= min_repeats")


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


def sample_until_stable(take_sample: Callable[[], None], samples: list[float], stop: Stopping) -> None:
    """Call ``take_sample`` (which appends to ``samples``) until ``stop`` says enough."""
    started = time.monotonic()
    while len(samples) < stop.max_repeats:
        take_sample()
        if len(samples) < stop.min_repeats:
            continue
        if time.monotonic() - started > stop.budget_s or _enough(samples, stop):  # the cheap test first
            return


def _enough(samples: list[float], stop: Stopping) -> bool:
    """The median is known to ``stop.target_noise`` and the samples detect a ``TARGET_PCT`` change."""
    median, low, high = median_ci(samples)
    if (high - low) / 2 > stop.target_noise * abs(median):
        return False
    found = detection(samples, run_to_run=stop.run_to_run_pct)
    return found is not None and not found.limit


def fact(fact_id: str, samples: Sequence[float], unit: str, probe: str, mhz: float | None = None) -> Fact:
    """The median of ``samples`` with its CI; a cycle count also in ns when the SM clock ``mhz`` is known."""
    value, low, high = median_ci(list(samples))
    converted = {"ns": value / mhz * 1000.0} if unit == "cycle" and mhz else {}
    return Fact(fact_id, value, unit, (low, high), [float(s) for s in samples], converted, probe)


def unmeasured(fact_id: str, unit: str, probe: str, reason: str) -> Fact:
    """A fact the probe could not measure here for a reason outside the GPU (an optional binding not
    installed, no datasheet figure for an unknown model): no value, judged "not_run" with the reason."""
    return Fact(fact_id, None, unit, probe=probe, detail=reason)
