"""Launching the bandwidth kernels: checked launches, flushes, and the two ways a sample is timed.

Both are a :class:`~gpuprobe.families.differencing.Difference` (long launch minus short launch, so launch
costs and the ramp up and down cancel; a difference its timer does not resolve is widened, then fails):

* :func:`~gpuprobe.families.differencing.event_gbps` — GB/s from CUDA events around each launch; before
  each, the L2 is flushed by reading a scratch buffer of at least twice its size (:func:`timed_launch`);
* :func:`cycle_rates` — bytes per clock per SM from the kernels' own %clock64 records: per SM, the span
  from its first block's start to its last block's end, the median over the SMs that ran the blocks
  planned for each (:func:`span_cycles`).

Every launch poisons its outputs first and is checked afterwards (:class:`Launch.check`); a wrong
result raises :class:`~gpuprobe.core.errors.ProbeFailure`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.families.base import Request
from gpuprobe.families.differencing import CLOCK64, Difference, Lengths
from gpuprobe.families.sampling import Stopping
from gpuprobe.runner.checked import POISON_BYTE, OutputBuffers, unwritten

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
class Timer:
    """Checked, timed launches on the requested device. Every launch writes its per-thread sums to one of the
    request's output buffers and its per-block records to one of its own (two outputs of one launch, so two
    buffers); ``sums`` and ``records`` are the last launch's."""

    request: Request
    flush: Launch | None = None
    sums: Any = None  # per-thread sums
    out: Any = None  # per-block records
    record_buffers: OutputBuffers = field(init=False)

    def __post_init__(self) -> None:
        self.record_buffers = OutputBuffers(self.request.launcher)

    def _outputs(self, launch: Launch) -> tuple[Any, Any]:
        """Buffers for ``launch``'s sums and records, each large enough, both poisoned."""
        sums = self.request.outputs.get(-(-launch.blocks * launch.threads // 2))  # 32-bit sums in 64-bit words
        out = self.record_buffers.get(RECORD_WORDS * launch.blocks)
        for buffer in (sums, out):
            self.request.launcher.fill(buffer, POISON_BYTE)
        return sums, out

    def records(self, launch: Launch) -> np.ndarray:
        """The launch's per-block records (start, end, SM), checked to be written and ordered."""
        raw = self.request.launcher.read(self.out, "uint64", launch.blocks * RECORD_WORDS)
        if unwritten(raw):
            raise ProbeFailure(f"{launch.kernel} did not write all of its {launch.blocks} block records")
        records = np.asarray(raw, dtype=np.uint64).reshape(launch.blocks, RECORD_WORDS)
        if np.any(records[:, 1] <= records[:, 0]):
            raise ProbeFailure(f"{launch.kernel}: a block's end clock is not after its start clock")
        return records

    def sums_of(self, launch: Launch) -> np.ndarray:
        return np.asarray(self.request.launcher.read(self.sums, "uint32", launch.blocks * launch.threads))

    def flush_l2(self) -> None:
        """Read the scratch buffer of twice the L2 or more (checked): what a launch reads next comes from
        DRAM, and what the last one left dirty in L2 is written back before the next is timed."""
        if self.flush is None:
            raise ProbeFailure("no L2 flush is set up")
        self.time(self.flush)

    def time(self, launch: Launch, flush: bool = False) -> float:
        """Launch once (after a flush of the L2 when asked), check it, and return its GPU ms."""
        launch.prepare()
        if flush:
            self.flush_l2()
        self.sums, self.out = self._outputs(launch)
        launch.args[-1] = self.out
        if launch.uses_sums:
            launch.args[-2] = self.sums
        ms = self.request.kernels.time(
            launch.kernel, launch.args, grid=launch.blocks, block=launch.threads, shared=launch.shared
        )
        launch.check(not launch.checked)
        launch.checked = True
        return ms


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


def timed_launch(timer: Timer, launch_of: Callable[[int], Launch]) -> Callable[[int], float]:
    """``n`` -> GPU ms of ``launch_of(n)``, run after an L2 flush: what
    :class:`~gpuprobe.families.differencing.Difference` launches."""
    launch = made_once(launch_of)
    return lambda n: timer.time(launch(n), True)


def per_sm(records: np.ndarray) -> dict[int, tuple[int, float]]:
    """Per SM id: (blocks it ran, span in cycles from its first block's start to its last block's end)."""
    spans: dict[int, tuple[int, float]] = {}
    for sm in np.unique(records[:, 2]):
        mine = records[records[:, 2] == sm]
        spans[int(sm)] = (len(mine), float(mine[:, 1].max() - mine[:, 0].min()))
    return spans


def span_cycles(timer: Timer, launch_of: Callable[[int], Launch], blocks_per_sm: int) -> Callable[[int], float]:
    """``n`` -> cycles of ``launch_of(n)`` on one SM: the median, over the SMs that ran ``blocks_per_sm``
    blocks, of the span from an SM's first block's start to its last block's end."""
    made = made_once(launch_of)

    def cycles(n: int) -> float:
        launch = made(n)
        timer.time(launch)
        spans = [span for blocks, span in per_sm(timer.records(launch)).values() if blocks == blocks_per_sm]
        if not spans:
            raise ProbeFailure(f"{launch.kernel}: no SM ran the {blocks_per_sm} blocks planned for each")
        return float(np.median(spans))

    return cycles


def cycle_rates(
    cycles_of: Callable[[int], float], lengths: Lengths, unit_bytes: int, what: str, stop: Stopping
) -> list[float]:
    """Bytes per clock per SM: ``unit_bytes`` (what one SM's blocks move per iteration) over the cycles an
    iteration adds to an SM's span (``cycles_of(n)``: :func:`span_cycles`)."""
    difference = Difference(cycles_of, lengths, what, CLOCK64)
    return [unit_bytes / cycles for cycles in difference.samples(stop)]
