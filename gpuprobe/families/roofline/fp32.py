"""The CUDA-core FP32 roofline: its kernels' launch shapes, what the host predicts of them, and one point's
measurement (:func:`measure_point`, a :data:`~gpuprobe.families.roofline.sweep.MeasurePoint`).

A point is one kernel of ptx/roofline/fp32.ptx (:mod:`~gpuprobe.families.roofline.fp32_ptx`: F FFMAs per 16-byte
load, F / 8 flop/B) over one level's footprint:

* DRAM: every resident block streams its chunk, the chunks ``dram_l2_multiple`` L2 sizes in all, so each byte
  comes from DRAM once a pass (the L2 holds a fraction of what the pass read last, none of what it reads next);
* L2: fewer chunks, at most ``l2_fraction`` of the L2 in all, re-read pass after pass (ld.global.cg: L1 bypassed);
  the launches before a timed batch warm it, and the batch's long-minus-short cancels the first launch;
* shared memory: every resident block re-reads its 16 KiB tile.

A launch makes as many passes as last ``min_launch_ms`` at the most the level and the FP32 units could do (so the
SM clock the blocks read over %globaltimer is read to 1 %), and a sample is a batch of ``long_launches`` minus one
of ``short_launches`` back-to-back launches between CUDA events
(:class:`~gpuprobe.families.differencing.Difference`): the rate is the flop of a launch over its milliseconds.
Every launch's per-thread sums are held to the host's exact prediction, and the SM clock is the median over the
blocks of the launch of their %clock64 over %globaltimer.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuprobe.core.arch import parse_arch
from gpuprobe.core.errors import ProbeFailure
from gpuprobe.families.base import Request
from gpuprobe.families.differencing import EVENTS, Difference, Lengths
from gpuprobe.families.measuring import clock_mhz, clock_window_ns
from gpuprobe.families.planning import sm_mhz
from gpuprobe.families.roofline.fp32_ptx import (
    ACCUMULATORS,
    FFMAS_PER_LOAD,
    ITERATION_BYTES,
    LOAD_BYTES,
    LOADS,
    RECORD_WORDS,
    THREADS,
)
from gpuprobe.families.roofline.sweep import LEVELS, SM_INGEST_BYTES_PER_CLOCK, Point, Sweep, dram_peak
from gpuprobe.families.sampling import sample_until_stable
from gpuprobe.runner.checked import POISON_BYTE, OutputBuffers, unwritten

WORDS_PER_LOAD = LOAD_BYTES // 4
EXACT_F32 = 2**24  # every integer up to this is exact in f32: no result may reach it
INITIAL_SUM = sum(range(ACCUMULATORS))  # the accumulators start at 0 .. 7
PATTERN_WORDS = 65521  # the source's words repeat with this prime period (drawn once, tiled)
MOST_WORD = 3  # every word is 0, 1, 2 or 3
CLOCK_PRECISION = 0.01  # a block's window reads the SM clock to 1 %
# FP32 lanes per SM (an FFMA is 2 flop a lane): CUDA C++ Programming Guide, "Arithmetic Instructions", throughput
# of 32-bit floating-point add, multiply, multiply-add: 64 for compute capability 7.5 and 8.0, 128 for 8.6 and later.
FP32_LANES = {75: 64, 80: 64}
FP32_LANES_DEFAULT = 128


def flop_per_clock(request: Request) -> float:
    """The FP32 peak per clock per SM of the device's arch: its FFMA lanes x 2 flop."""
    return 2.0 * FP32_LANES.get(parse_arch(request.device.arch).number, FP32_LANES_DEFAULT)


def probe_name(level: str, ffmas: int) -> str:
    return f"roofline.fp32.{level}.ffma{ffmas}"


def kernel_name(level: str, ffmas: int) -> str:
    return f"gp_roofline_fp32_{'shared' if level == 'shared' else 'global'}_ffma{ffmas}"


def intensity(ffmas: int) -> float:
    """Flop per byte of ``ffmas`` FFMAs per 16-byte load."""
    return 2.0 * ffmas / LOAD_BYTES


def ffmas_of(probe: str) -> int:
    return int(probe.rsplit(".ffma", 1)[1])


@dataclass(frozen=True)
class Shape:
    """One level's launches: ``blocks`` of 256 threads, each over ``iters`` 16 KiB iterations of its chunk."""

    blocks: int
    iters: int

    @property
    def footprint(self) -> int:
        return self.blocks * self.iters * ITERATION_BYTES

    @property
    def threads(self) -> int:
        return self.blocks * THREADS


def level_shape(level: str, resident_blocks: int, l2_bytes: int, settings: Any) -> Shape:
    """``level``'s launch shape from the blocks the GPU holds at once and its L2 size (module docstring)."""
    chunk = ITERATION_BYTES
    if level == "dram":
        iters = math.ceil(settings.dram_l2_multiple * l2_bytes / (resident_blocks * chunk))
        return Shape(resident_blocks, max(1, iters))
    if level == "l2":
        blocks = max(1, min(resident_blocks, int(settings.l2_fraction * l2_bytes // chunk)))
        return Shape(blocks, max(1, int(settings.l2_fraction * l2_bytes // (blocks * chunk))))
    return Shape(resident_blocks, 1)


def passes_for(level: str, shape: Shape, ffmas: int, device: Any, dram_gbps: float | None, min_launch_ms: float) -> int:
    """Passes that take at least ``min_launch_ms`` at the most the level (the DRAM peak, else 128 B/clk/SM) and
    the FP32 units (128 lanes per SM) could do at the nominal clock."""
    mhz = sm_mhz(device)
    ingest = SM_INGEST_BYTES_PER_CLOCK * device.sm_count * mhz * 1e6 / 1e9
    gbps = dram_gbps if level == "dram" and dram_gbps else ingest
    pass_bytes = shape.footprint
    pass_flop = pass_bytes / LOAD_BYTES * 2 * ffmas
    fastest_s = max(pass_bytes / (gbps * 1e9), pass_flop / (2 * FP32_LANES_DEFAULT * device.sm_count * mhz * 1e6))
    return max(1, math.ceil(min_launch_ms * 1e-3 / fastest_s))


def predicted(per_thread: np.ndarray, passes: int, ffmas: int) -> np.ndarray:
    """Each thread's result: 0 + 1 + ... + 7, plus each loaded word F / 4 times a load, ``passes`` times over."""
    total = INITIAL_SUM + passes * (ffmas // WORDS_PER_LOAD) * per_thread.astype(np.int64)
    if total.size and int(total.max()) >= EXACT_F32:
        raise ProbeFailure(f"a thread's sum would reach {int(total.max())}, past what f32 holds exactly ({EXACT_F32})")
    return total.astype(np.float32)


def thread_sums(words: np.ndarray, shape: Shape) -> np.ndarray:
    """The sum of the words each thread loads in one pass (thread order: block, then thread in block)."""
    chunk = words[: shape.footprint // 4].reshape(shape.blocks, shape.iters * LOADS, THREADS, WORDS_PER_LOAD)
    return chunk.sum(axis=(1, 3), dtype=np.int64).reshape(-1)


def source_words(count: int, seed: int = 30) -> np.ndarray:
    """``count`` words of 0..3 (uint8; uploaded as f32): a random pattern of a prime period, tiled."""
    pattern = np.random.default_rng(seed).integers(0, MOST_WORD + 1, PATTERN_WORDS, dtype=np.uint8)
    return np.resize(pattern, count)


def check_sums(kernel: str, got: np.ndarray, expected: np.ndarray) -> None:
    """Every thread's result is the host's prediction, exactly."""
    wrong = np.flatnonzero(got != expected)
    if wrong.size:
        first = int(wrong[0])
        raise ProbeFailure(f"{kernel}: {wrong.size} of {got.size} threads' sums are wrong (thread {first}: "
                           f"{float(got[first]):g}, the host predicts {float(expected[first]):g})")  # fmt: skip


def block_clock(kernel: str, records: np.ndarray, window_ns: float) -> float:
    """The SM clock of a launch: the median over its blocks of their cycles over ns (records: cycles, ns, SM);
    ProbeFailure where fewer than half the blocks ran long enough to read it."""
    clocks = [mhz for cycles, ns, _ in records if (mhz := clock_mhz(float(cycles), float(ns), window_ns)) is not None]
    if 2 * len(clocks) < len(records):
        longest = float(records[:, 1].max()) / 1e3
        raise ProbeFailure(f"{kernel}: its blocks ran at most {longest:.0f} us, too short to read the SM clock "
                           f"({window_ns / 1e3:.0f} us)")  # fmt: skip
    return float(np.median(clocks))


@dataclass
class Bench:
    """What every FP32 point of one measuring process measures with: the source (uploaded once, as large as the
    DRAM level needs), each level's shape and per-thread sums (worked out once), the output buffers."""

    request: Request
    words: np.ndarray
    src: Any
    shapes: dict[str, Shape]
    records: OutputBuffers
    sums: dict[str, np.ndarray] = field(default_factory=dict)

    def thread_sums(self, level: str) -> np.ndarray:
        if level not in self.sums:
            self.sums[level] = thread_sums(self.words, self.shapes[level])
        return self.sums[level]


def resident(request: Request, level: str) -> int:
    """Blocks of every kernel of ``level`` the whole GPU holds at once (the least of its kernels)."""
    launcher = request.launcher
    per_sm = min(launcher.max_active_blocks(kernel_name(level, f), THREADS) for f in FFMAS_PER_LOAD)
    return max(1, per_sm) * request.device.sm_count


def make_bench(request: Request) -> Bench:
    settings = request.settings
    l2_bytes = request.device.l2_bytes
    shapes = {level: level_shape(level, resident(request, level), l2_bytes, settings) for level in LEVELS}
    words = source_words(max(s.footprint for s in shapes.values()) // 4)
    src = request.launcher.upload(words.astype(np.float32))
    return Bench(request, words, src, shapes, OutputBuffers(request.launcher))


def arguments(level: str, shape: Shape, passes: int, src: Any, sums: Any, out: Any) -> list[Any]:
    one = np.float32(1.0)
    if level == "shared":
        return [src, np.uint32(passes), np.uint32(0), one, sums, out]
    return [src, np.uint32(shape.iters), np.uint32(passes), one, sums, out]


def measure_point(bench_of: Callable[[Request], Bench], level: str, request: Request, probe: str) -> Point:
    """One FP32 point: its kernel's long-minus-short batches, every launch checked and its clock read."""
    bench, settings = bench_of(request), request.settings
    ffmas, shape = ffmas_of(probe), bench.shapes[level]
    kernel = kernel_name(level, ffmas)
    peak = dram_peak(request)
    passes = passes_for(level, shape, ffmas, request.device, peak[0] if peak else None, settings.min_launch_ms)
    expected = predicted(bench.thread_sums(level), passes, ffmas)
    sums = request.outputs.get(-(-shape.threads // 2))
    out = bench.records.get(RECORD_WORDS * shape.blocks)
    args = arguments(level, shape, passes, bench.src, sums, out)
    window = clock_window_ns(CLOCK_PRECISION)
    clocks: list[float] = []

    def batch(launches: int) -> float:
        for buffer in (sums, out):
            request.launcher.fill(buffer, POISON_BYTE)
        ms = request.kernels.time(kernel, args, grid=shape.blocks, block=THREADS, count=launches)
        got = request.launcher.read(sums, "float32", shape.threads)
        records = request.launcher.read(out, "uint64", RECORD_WORDS * shape.blocks)
        if unwritten(got) or unwritten(records):
            raise ProbeFailure(f"{kernel} did not write all of its {shape.threads} sums and {shape.blocks} records")
        check_sums(kernel, got, expected)
        clocks.append(block_clock(kernel, records.reshape(shape.blocks, RECORD_WORDS), window))
        return ms

    difference = Difference(batch, Lengths(settings.short_launches, settings.long_launches, 1), probe, EVENTS)
    flop = shape.footprint * passes / LOAD_BYTES * 2 * ffmas
    tflops: list[float] = []
    mhz: list[float] = []

    def take() -> None:
        ms = difference.sample()
        tflops.append(flop / (ms * 1e-3) / 1e12)
        mhz.append(clocks[-1])  # the long batch's last launch

    sample_until_stable(take, tflops, settings.sampling)
    return Point(probe, intensity(ffmas), tuple(tflops), tuple(mhz))


def sweeps(bench_of: Callable[[Request], Bench]) -> tuple[Sweep, ...]:
    """The FP32 sweeps, one per level, their points this module's kernels."""
    return tuple(
        Sweep("fp32", level, tuple(probe_name(level, f) for f in FFMAS_PER_LOAD),
              functools.partial(measure_point, bench_of, level), flop_per_clock, ("fp32_tflops", "fp32_clock_mhz"))
        for level in LEVELS
    )  # fmt: skip
