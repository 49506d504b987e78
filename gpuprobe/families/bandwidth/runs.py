"""Launching the bandwidth kernels: checked launches, flushes, and the two ways a sample is timed.

* :func:`event_rate` — GB/s from CUDA events: a long launch minus a short one, so launch costs and
  the ramp up and down cancel; before each, optionally, the L2 is flushed by reading a scratch
  buffer of twice its size (clean lines: no write-back lands in the timed launch).
* :func:`cycle_rate` — bytes per clock per SM from the kernels' own %clock64 records: per SM, the
  bytes its blocks moved over the span from its first block's start to its last block's end, long
  launch minus short launch, the median over SMs.

Every launch poisons its outputs first and is checked afterwards (:class:`Launch.check`); a wrong
result raises :class:`~gpuprobe.families.base.ProbeFailure`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuprobe.families.base import ProbeFailure
from gpuprobe.families.measuring import POISON_BYTE, Kernels, check_arguments, unwritten
from gpuprobe.runner.gpu import Launcher

RECORD_WORDS = 3  # per block: start clock, end clock, SM id


@dataclass
class Launch:
    """One kernel launch and what it must have done: ``check(first)`` raises ProbeFailure when the
    results are wrong (``first``: the first check of this launch shape, which may look harder)."""

    kernel: str
    args: list[object]
    blocks: int
    threads: int
    bytes: int  # bytes moved, as the fact counts them
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
        """Read the scratch buffer of twice the L2 (checked): what a launch reads next comes from DRAM."""
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


def event_rate(runner: Runner, short: Launch, long: Launch, flush: bool) -> float:
    """GB/s of the bytes between a short and a long launch, timed with events."""
    short_ms = runner.run(short, flush)
    long_ms = runner.run(long, flush)
    if not long_ms > short_ms:
        raise ProbeFailure(f"{long.kernel}: the long launch took {long_ms:.4f} ms, the short one {short_ms:.4f} ms")
    return (long.bytes - short.bytes) / ((long_ms - short_ms) * 1e-3) / 1e9


def per_sm(records: np.ndarray) -> dict[int, tuple[int, float]]:
    """Per SM id: (blocks it ran, span in cycles from its first block's start to its last block's end)."""
    spans: dict[int, tuple[int, float]] = {}
    for sm in np.unique(records[:, 2]):
        mine = records[records[:, 2] == sm]
        spans[int(sm)] = (len(mine), float(mine[:, 1].max() - mine[:, 0].min()))
    return spans


def cycle_rate(runner: Runner, short: Launch, long: Launch, bytes_per_block: tuple[int, int]) -> float:
    """Bytes per clock per SM: per SM, (long bytes - short bytes) / (long span - short span), over the
    SMs that ran as many blocks in both launches; the median over SMs."""
    runner.run(short)
    first = per_sm(runner.records(short))
    runner.run(long)
    second = per_sm(runner.records(long))
    rates = []
    for sm, (blocks, span) in second.items():
        if sm in first and first[sm][0] == blocks and span > first[sm][1]:
            rates.append(blocks * (bytes_per_block[1] - bytes_per_block[0]) / (span - first[sm][1]))
    if not rates:
        raise ProbeFailure(f"{long.kernel}: no SM ran the same blocks in both launches with a longer span")
    return float(np.median(rates))
