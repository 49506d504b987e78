"""Launching the bandwidth kernels: checked launches, flushes, and the two ways a sample is timed.

Both are a :class:`~gpuprobe.families.differencing.Difference` (long launch minus short launch, so launch
costs and the ramp up and down cancel; a difference its timer does not resolve is widened, then fails):

* :func:`~gpuprobe.families.differencing.event_gbps` — GB/s from CUDA events around each launch; before
  each, the L2 is flushed by reading a scratch buffer of at least twice its size (:func:`timed_launch`);
* :func:`cycle_rates` — bytes per clock per SM from the kernels' own %clock64 records: per SM, the span
  from its first block's start to its last block's end, the median over the SMs that ran the blocks
  planned for each (:func:`span_cycles`).

Every launch poisons its outputs first and is checked afterwards (:class:`Launch.check`); a wrong
result raises :class:`~gpuprobe.families.base.ProbeFailure`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuprobe.families.base import ProbeFailure
from gpuprobe.families.differencing import CLOCK64, Difference, Lengths
from gpuprobe.families.measuring import POISON_BYTE, Kernels, Stopping, check_arguments, unwritten
from gpuprobe.runner.gpu import Launcher

RECORD_WORDS = 3  # per block: start clock, end clock, SM id


@dataclass
class Launch:
    """One kernel launch and what it must have done: ``check(first)`` raises ProbeFailure when the
    results are wrong (``first``: the first check of this launch's footprint, which may look harder)."""

    kernel: str
    args: list[object]
    blocks: int
    threads: int
    check: Callable[[bool], None]
    shared: int = 0
    prepare: Callable[[], None] = lambda: None  # e.g. poison a destination
    uses_sums: bool = True  # the kernel's last two parameters are (sums, out); else only out
    checked: bool = field(default=False, init=False)


@dataclass
class Runner:
    """Checked, timed launches on one device, with the buffers every launch writes its records to."""

    launcher: Launcher
    parameters: dict[str, list[tuple[str, str]]]
    flush: Launch | None = None
    sums: Any = None  # per-thread sums
    out: Any = None  # per-block records
    sums_bytes: int = 0
    out_bytes: int = 0

    @property
    def kernels(self) -> Kernels:
        return Kernels(self.launcher, self.parameters)

    def _fit(self, launch: Launch) -> None:
        """Grow the output buffers when a launch has more threads or blocks than they hold."""
        if self.sums_bytes < 4 * launch.blocks * launch.threads:
            self.sums_bytes = 4 * launch.blocks * launch.threads
            self.sums = self.launcher.alloc(self.sums_bytes)
        if self.out_bytes < 8 * RECORD_WORDS * launch.blocks:
            self.out_bytes = 8 * RECORD_WORDS * launch.blocks
            self.out = self.launcher.alloc(self.out_bytes)

    def _poison(self) -> None:
        self.launcher.fill(self.sums, POISON_BYTE)
        self.launcher.fill(self.out, POISON_BYTE)

    def records(self, launch: Launch) -> np.ndarray:
        """The launch's per-block records (start, end, SM), checked to be written and ordered."""
        raw = self.launcher.read(self.out, "uint64", launch.blocks * RECORD_WORDS)
        if unwritten(raw):
            raise ProbeFailure(f"{launch.kernel} did not write all of its {launch.blocks} block records")
        records = np.asarray(raw, dtype=np.uint64).reshape(launch.blocks, RECORD_WORDS)
        if np.any(records[:, 1] <= records[:, 0]):
            raise ProbeFailure(f"{launch.kernel}: a block's end clock is not after its start clock")
        return records

    def sums_of(self, launch: Launch) -> np.ndarray:
        return np.asarray(self.launcher.read(self.sums, "uint32", launch.blocks * launch.threads))

    def flush_l2(self) -> None:
        """Read the scratch buffer of twice the L2 or more (checked): what a launch reads next comes from
        DRAM, and what the last one left dirty in L2 is written back before the next is timed."""
        if self.flush is None:
            raise ProbeFailure("no L2 flush is set up")
        self.run(self.flush)

    def run(self, launch: Launch, flush: bool = False) -> float:
        """Launch once (after a flush of the L2 when asked), check it, and return its GPU ms."""
        launch.prepare()
        self._fit(launch)
        self._poison()
        if flush:
            self.flush_l2()
            self._poison()
        launch.args[-1] = self.out
        if launch.uses_sums:
            launch.args[-2] = self.sums
        check_arguments(launch.kernel, launch.args, self.kernels.signature(launch.kernel))
        ms = self.kernels.time(
            launch.kernel, launch.args, grid=launch.blocks, block=launch.threads, shared=launch.shared
        )
        launch.check(not launch.checked)
        launch.checked = True
        return ms


def check_sums(kernel: str, got: np.ndarray, expected: np.ndarray) -> None:
    """Every thread's sum equals the host's; the first difference named when not."""
    wrong = np.flatnonzero(got != expected)
    if len(wrong):
        first = int(wrong[0])
        raise ProbeFailure(
            f"{kernel}: {len(wrong)} of {len(expected)} thread sums differ from the host's "
            f"(thread {first}: {int(got[first]):#010x}, expected {int(expected[first]):#010x})"
        )


def made_once(launch_of: Callable[[int], Launch]) -> Callable[[int], Launch]:
    """``launch_of`` (the launch of ``n`` passes or iterations over one footprint), each ``n``'s launch made
    once and kept, so its expected results are computed once; only the first launch made is checked in
    full the first time (the others cover the same bytes), later checks read a part (:class:`Launch`)."""
    made: dict[int, Launch] = {}

    def launch(n: int) -> Launch:
        if n not in made:
            made[n] = launch_of(n)
            made[n].checked = len(made) > 1
        return made[n]

    return launch


def timed_launch(runner: Runner, launch_of: Callable[[int], Launch]) -> Callable[[int], float]:
    """``n`` -> GPU ms of ``launch_of(n)``, run after an L2 flush: what
    :class:`~gpuprobe.families.differencing.Difference` launches."""
    launch = made_once(launch_of)
    return lambda n: runner.run(launch(n), True)


def per_sm(records: np.ndarray) -> dict[int, tuple[int, float]]:
    """Per SM id: (blocks it ran, span in cycles from its first block's start to its last block's end)."""
    spans: dict[int, tuple[int, float]] = {}
    for sm in np.unique(records[:, 2]):
        mine = records[records[:, 2] == sm]
        spans[int(sm)] = (len(mine), float(mine[:, 1].max() - mine[:, 0].min()))
    return spans


def span_cycles(runner: Runner, launch_of: Callable[[int], Launch], blocks_per_sm: int) -> Callable[[int], float]:
    """``n`` -> cycles of ``launch_of(n)`` on one SM: the median, over the SMs that ran ``blocks_per_sm``
    blocks, of the span from an SM's first block's start to its last block's end."""
    made = made_once(launch_of)

    def run(n: int) -> float:
        launch = made(n)
        runner.run(launch)
        spans = [span for blocks, span in per_sm(runner.records(launch)).values() if blocks == blocks_per_sm]
        if not spans:
            raise ProbeFailure(f"{launch.kernel}: no SM ran the {blocks_per_sm} blocks planned for each")
        return float(np.median(spans))

    return run


def cycle_rates(
    run: Callable[[int], float], lengths: Lengths, unit_bytes: int, what: str, stop: Stopping
) -> list[float]:
    """Bytes per clock per SM: ``unit_bytes`` (what one SM's blocks move per iteration) over the cycles an
    iteration adds to an SM's span (``run(n)``: :func:`span_cycles`)."""
    difference = Difference(run, lengths, what, CLOCK64)
    return [unit_bytes / cycles for cycles in difference.samples(stop)]
