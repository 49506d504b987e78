"""The bandwidth family: shared memory, L1, L2 and DRAM bandwidth with every SM busy; DRAM occupancy
and goodput; the DRAM figures held against the theoretical peak and the CUDA runtime's copy.

Order of measurement (``PROBES``): DRAM reads, writes and copies at 16, 8 and 4 bytes per access,
then L2 likewise, L1 reads, shared-memory reads, writes and copies, the DRAM occupancy sweep and the
goodput patterns. What each probe isolates and why its kernel is shaped so: ``ptx/bandwidth/bandwidth.toml``
and ``ptx/bandwidth/bandwidth.ptx``; launch shapes and predicted results: :mod:`gpuprobe.families.bandwidth.patterns`;
settings, launch shapes and the time budget: :mod:`gpuprobe.families.bandwidth.shapes`; timing:
:mod:`gpuprobe.families.bandwidth.runs`; the fact sheet and invariants:
:mod:`gpuprobe.families.bandwidth.report`.

* DRAM: footprint ``dram_l2_multiple`` x L2; a sample is a launch over all of it minus a launch
  over ``short_fraction`` of it, each after an L2 flush; GB/s.
* L2: footprint at most ``l2_fraction`` of the L2, warmed, re-read ``passes`` times; GB/s.
* L1 (reads only: global stores are not cached in L1) and shared memory (reads, writes, ping-pong
  copies): a per-warp tile re-read or rewritten; bytes per clock per SM from the kernels' clock records.

Every launch is checked (read sums, written values, copied bytes); a wrong one fails the probe.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np

from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.families.bandwidth import patterns
from gpuprobe.families.bandwidth.patterns import PATTERNS, PatternStream, SharedStream, Stream
from gpuprobe.families.bandwidth.report import INVARIANTS, SECTIONS
from gpuprobe.families.bandwidth.runs import Launch, Runner, check_sums, cycle_rate, event_rate
from gpuprobe.families.bandwidth.shapes import (
    MIB,
    OPS,
    SHARED_KERNELS,
    Settings,
    Work,
    cached_pair,
    dram_blocks,
    dram_pair,
    fit_l2_blocks,
    l2_pair,
    pattern_pair,
    planned_work,
    source_bytes,
    stream_kernel,
    sweep_points,
)
from gpuprobe.families.base import Measured, Plan, ProbeFailure, Probes, Request, Smoke
from gpuprobe.families.measuring import fact, sample_until_stable, unmeasured
from gpuprobe.families.planning import (
    compare_host_s,
    cycles_s,
    dram_peak_gbps,
    dram_s,
    generate_host_s,
    link_s,
    probe,
    resident_blocks,
    sum_host_s,
)
from gpuprobe.families.stepping import runs
from gpuprobe.runner.gpu import Launcher

__all__ = ["INVARIANTS", "PROBES", "SECTIONS", "SMOKE", "Settings", "measure", "plan"]


@dataclass
class _Context:
    """What every probe of one measuring process shares: the device, the buffers, cached plans."""

    launcher: Launcher
    device: Device
    settings: Settings
    runner: Runner
    datasheet: dict[str, float]
    words: np.ndarray  # the source buffer's contents
    src: Any
    dst: Any
    most_blocks: dict[tuple[str, int, int], int] = field(default_factory=dict)
    requests: np.ndarray | None = None  # the source's request sums, made once for every width's table
    tables: dict[int, np.ndarray] = field(default_factory=dict)
    values_stored: int = 0  # write launches so far: each stores a value of its own

    def table(self, width: int) -> np.ndarray:
        """The source's per-group sums for ``width``-byte reads, computed once."""
        if width not in self.tables:
            if self.requests is None:
                self.requests = patterns.request_sums(self.words)
            self.tables[width] = patterns.group_sums(self.requests, width)
        return self.tables[width]

    def blocks_per_sm(self, kernel: str, threads: int, shared: int = 0) -> int:
        key = (kernel, threads, shared)
        if key not in self.most_blocks:
            self.most_blocks[key] = self.launcher.max_active_blocks(kernel, threads, shared)
            if self.most_blocks[key] < 1:
                raise ProbeFailure(f"{kernel} cannot be resident with {threads} threads and {shared} bytes shared")
        return self.most_blocks[key]


# ---- global streams ---------------------------------------------------------------------------------


def _summing_launch(
    ctx: _Context, kernel: str, args: list[object], blocks: int, threads: int, nbytes: int, expected: np.ndarray,
    shared: int = 0,
) -> Launch:  # fmt: skip
    """A launch of a read kernel whose check is that every thread's sum is the host's ``expected``."""
    launch = Launch(kernel, args, blocks, threads, nbytes, lambda first: None, shared=shared)
    launch.check = lambda first: check_sums(kernel, ctx.runner.sums_of(launch), expected)
    return launch


def _read_launch(ctx: _Context, kernel: str, stream: Stream, src: Any, expected: np.ndarray | None = None) -> Launch:
    """A read of ``src`` (the uploaded source unless given, with the sums it must give)."""
    if expected is None and stream.footprint > 4 * len(ctx.words):
        raise ProbeFailure(f"{kernel}: {stream.footprint} bytes to read, the source holds {4 * len(ctx.words)}")
    if expected is None:
        expected = patterns.stream_sums(ctx.table(stream.width), stream)
    args = [
        src,
        np.uint32(stream.width),
        np.uint64(stream.step),
        np.uint32(stream.iters),
        np.uint32(stream.passes),
        None,
        None,
    ]
    return _summing_launch(ctx, kernel, args, stream.blocks, stream.threads, stream.bytes_accessed, expected)


def _written_words(ctx: _Context, buffer: Any, count: int, first: bool) -> np.ndarray:
    return np.asarray(ctx.launcher.read(buffer, "uint32", count if first else min(count, ctx.settings.check_words)))


def _write_launch(ctx: _Context, stream: Stream) -> Launch:
    kernel = stream_kernel("write", stream.width)
    words = stream.footprint // patterns.WORD.itemsize
    args: list[object] = [
        ctx.dst,
        None,  # the value's address, set before each launch
        np.uint32(stream.width),
        np.uint64(stream.step),
        np.uint32(stream.iters),
        np.uint32(stream.passes),
        None,
    ]
    pattern: dict[str, Any] = {}

    def prepare() -> None:  # a new value every launch: a launch that stored nothing is caught
        ctx.values_stored += 1
        pattern["value"] = patterns.source_words(4, ctx.settings.seed + ctx.values_stored)
        pattern["buffer"] = ctx.launcher.upload(pattern["value"])
        args[1] = pattern["buffer"]

    def check(first: bool) -> None:
        per_value = stream.width // patterns.WORD.itemsize
        got = _written_words(ctx, ctx.dst, words, first).reshape(-1, per_value)
        wrong = np.unique(np.flatnonzero(got != pattern["value"][:per_value]) // per_value)  # values with a bad word
        if len(wrong):
            raise ProbeFailure(
                f"{kernel}: {len(wrong)} of {len(got)} stored {stream.width}-byte values are wrong "
                f"(first at byte {int(wrong[0]) * stream.width})"
            )

    return Launch(
        kernel, args, stream.blocks, stream.threads, stream.bytes_accessed, check, prepare=prepare, uses_sums=False
    )


def _copy_launch(ctx: _Context, stream: Stream, dst: Any) -> Launch:
    """A copy from the source to ``dst``, which is poisoned before each launch and checked after."""
    kernel = stream_kernel("copy", stream.width)
    words = stream.footprint // patterns.WORD.itemsize
    args = [
        ctx.src,
        dst,
        np.uint32(stream.width),
        np.uint64(stream.step),
        np.uint32(stream.iters),
        np.uint32(stream.passes),
        None,
    ]

    def check(first: bool) -> None:
        got = _written_words(ctx, dst, words, first)
        wrong = np.flatnonzero(got != ctx.words[: len(got)])
        if len(wrong):
            raise ProbeFailure(
                f"{kernel}: {len(wrong)} of {len(got)} copied words differ from the source "
                f"(first at byte {int(wrong[0]) * 4})"
            )

    def prepare() -> None:  # a launch that copied nothing would leave the poison
        ctx.launcher.fill(dst, 0xFF)

    return Launch(
        kernel, args, stream.blocks, stream.threads, 2 * stream.bytes_accessed, check, prepare=prepare, uses_sums=False
    )


def _launches(ctx: _Context, op: str, short: Stream, long: Stream, dst: Any = None) -> tuple[Launch, Launch]:
    """The short and long launch of ``op``; copies go to ``dst`` (default: the shared destination)."""
    if op == "read":
        kernel = stream_kernel("read", long.width)
        return _read_launch(ctx, kernel, short, ctx.src), _read_launch(ctx, kernel, long, ctx.src)
    if op == "write":
        return _write_launch(ctx, short), _write_launch(ctx, long)
    dst = ctx.dst if dst is None else dst
    return _copy_launch(ctx, short, dst), _copy_launch(ctx, long, dst)


def _rates(ctx: _Context, short: Launch, long: Launch, flush: bool, sweep: bool = False) -> list[float]:
    samples: list[float] = []
    sample_until_stable(
        lambda: samples.append(event_rate(ctx.runner, short, long, flush)), samples, ctx.settings.stopping(sweep)
    )
    return samples


def _peak(ctx: _Context) -> tuple[float, str] | None:
    return dram_peak_gbps(ctx.device.mem_clock_mhz, ctx.device.mem_bus_bits, ctx.datasheet)


def measure_dram(ctx: _Context, op: str, width: int) -> Measured:
    name = f"bandwidth.dram.{op}.v{width}"
    kernel = stream_kernel(op, width)
    s = ctx.settings
    sms, l2 = ctx.device.sm_count, ctx.device.l2_bytes
    blocks = sms * dram_blocks(width, s.threads, ctx.blocks_per_sm(kernel, s.threads), sms, l2, s)
    short, long = dram_pair(width, blocks, s.threads, l2, s)
    samples = _rates(ctx, *_launches(ctx, op, short, long), flush=True)
    facts = [fact(f"bandwidth.dram_{op}.v{width}", samples, "GB/s", name)]
    note = f"{long.footprint / MIB:.0f} MiB, {blocks} blocks of {s.threads}"
    if width == 16:
        peak = _peak(ctx)
        if peak is None:
            why = "no memory clock, bus width or datasheet figure: no theoretical peak"
            note += f"; {why}"
            facts.append(unmeasured(f"bandwidth.dram_{op}_fraction_of_peak", "fraction", name, why))
            if op == "read":
                facts.append(unmeasured("bandwidth.dram_theoretical", "GB/s", name, why))
        else:
            value, source = peak
            facts.append(fact(f"bandwidth.dram_{op}_fraction_of_peak", [x / value for x in samples], "fraction", name))
            if op == "read":
                facts.append(Fact("bandwidth.dram_theoretical", value, "GB/s", (value, value), [value], {}, name))
            note += f"; peak {value:.0f} GB/s from the {source}"
        if op == "copy":
            facts += _memcpy_facts(ctx, short, long, samples, name)
    series = {"stream": {"footprint_bytes": [float(long.footprint)], "gbps": [facts[0].value]}}
    return Measured(name, ProbeOutcome("ok", note, series), facts)


def _memcpy_facts(ctx: _Context, short: Stream, long: Stream, probe_samples: list[float], name: str) -> list[Fact]:
    """The CUDA runtime's device-to-device copy of the same bytes, flushed and differenced as the probe."""

    def copy_ms(nbytes: int) -> float:
        ctx.runner.flush_l2()
        return ctx.launcher.time_device_copy(ctx.dst, ctx.src, nbytes, 1)

    samples: list[float] = []

    def take() -> None:
        short_ms, long_ms = copy_ms(short.footprint), copy_ms(long.footprint)
        if not long_ms > short_ms:
            raise ProbeFailure(
                f"cudaMemcpy of {long.footprint} bytes took {long_ms} ms, of {short.footprint} {short_ms} ms"
            )
        samples.append(2 * (long.footprint - short.footprint) / ((long_ms - short_ms) * 1e-3) / 1e9)

    sample_until_stable(take, samples, ctx.settings.stopping())
    memcpy = fact("bandwidth.dram_copy_cuda_memcpy", samples, "GB/s", name)
    ratios = [p / m for p in probe_samples for m in samples]  # every pair: the samples were not taken together
    return [memcpy, fact("bandwidth.dram_copy_fraction_of_memcpy", ratios, "fraction", name)]


def measure_l2(ctx: _Context, op: str, width: int) -> Measured:
    name = f"bandwidth.l2.{op}.v{width}"
    kernel = stream_kernel(op, width)
    s = ctx.settings
    buffers = 2 if op == "copy" else 1
    footprint = int(s.l2_fraction * ctx.device.l2_bytes) // buffers
    sms = ctx.device.sm_count
    threads, per_sm = fit_l2_blocks(width, s.threads, partial(ctx.blocks_per_sm, kernel), sms, footprint)
    short, long = l2_pair(width, sms * per_sm, threads, footprint, buffers, s)
    # a copy's own destination, no larger than its footprint: poisoning it before each launch stays in L2
    dst = ctx.launcher.alloc(long.footprint) if op == "copy" else None
    first, second = _launches(ctx, op, short, long, dst)
    ctx.runner.run(second)  # warm: the footprint into L2
    samples = _rates(ctx, first, second, flush=False)
    note = f"{long.footprint / MIB:.1f} MiB x {long.passes} passes, {long.blocks} blocks of {threads}"
    return Measured(name, ProbeOutcome("ok", note), [fact(f"bandwidth.l2_{op}.v{width}", samples, "GB/s", name)])


# ---- L1 and shared memory: bytes per clock per SM ----------------------------------------------------


def measure_l1(ctx: _Context, width: int) -> Measured:
    name, kernel = f"bandwidth.l1.read.v{width}", f"gp_bw_read_ca_v{width}"
    s = ctx.settings
    ctx.launcher.prefer_l1(kernel)
    wanted = max(1, s.cached_tile_per_sm // (s.threads * width * patterns.ACCESSES))
    per_sm = min(wanted, ctx.blocks_per_sm(kernel, s.threads))
    short_iters, long_iters = cached_pair(width, per_sm, s.threads, s)
    blocks = ctx.device.sm_count * per_sm
    streams = [Stream(width, blocks, s.threads, n, sweep=False) for n in (short_iters, long_iters)]
    short, long = (_read_launch(ctx, kernel, st, ctx.src) for st in streams)
    per_block = tuple(st.threads * width * patterns.ACCESSES * st.iters for st in streams)
    samples: list[float] = []
    sample_until_stable(lambda: samples.append(cycle_rate(ctx.runner, short, long, per_block)), samples, s.stopping())  # type: ignore[arg-type]
    tile_kib = per_sm * s.threads * width * patterns.ACCESSES // 1024
    note = f"{per_sm} blocks of {s.threads} per SM, {tile_kib} KiB tile per SM"
    return Measured(name, ProbeOutcome("ok", note), [fact(f"bandwidth.l1_read.v{width}", samples, "byte/clk/SM", name)])


def _shared_read_launch(ctx: _Context, kernel: str, stream: SharedStream) -> Launch:
    expected = patterns.shared_sums(ctx.words, stream)
    args = [
        ctx.src,
        np.uint32(stream.width),
        np.uint32(stream.iters),
        np.uint32(stream.half_bytes),
        None,
        None,
    ]
    bytes_moved = stream.blocks * stream.bytes_per_block
    return _summing_launch(
        ctx, kernel, args, stream.blocks, stream.threads, bytes_moved, expected, shared=stream.shared_bytes
    )


def _shared_store_launch(ctx: _Context, kernel: str, op: str, stream: SharedStream, dst: Any) -> Launch:
    """A shared write or copy; afterwards every block's two halves, written back to ``dst``, must hold
    the stored value (write) or twice the source's first half (copy)."""
    half_words = stream.half_bytes // patterns.WORD.itemsize
    if op == "write":
        value = patterns.source_words(4, ctx.settings.seed + 1)
        expected = np.tile(value[: stream.width // patterns.WORD.itemsize], 2 * half_words * 4 // stream.width)
        source = ctx.launcher.upload(value)
    else:
        expected, source = np.tile(ctx.words[:half_words], 2), ctx.src
    args = [
        source,
        np.uint32(stream.width),
        np.uint32(stream.iters),
        np.uint32(stream.half_bytes),
        dst,
        None,
    ]

    def check(first: bool) -> None:
        got = np.asarray(ctx.launcher.read(dst, "uint32", stream.blocks * 2 * half_words)).reshape(stream.blocks, -1)
        wrong = np.flatnonzero(np.any(got != expected[None, :], axis=1))
        if len(wrong):
            raise ProbeFailure(
                f"{kernel}: the shared memory of {len(wrong)} of {stream.blocks} blocks holds wrong "
                f"bytes after the {op} (first: block {int(wrong[0])})"
            )

    factor = 2 if op == "copy" else 1
    launch = Launch(
        kernel,
        args,
        stream.blocks,
        stream.threads,
        factor * stream.blocks * stream.bytes_per_block,
        check,
        shared=stream.shared_bytes,
        prepare=lambda: ctx.launcher.fill(dst, 0xFF),
        uses_sums=False,
    )
    return launch


def measure_shared(ctx: _Context, op: str, width: int) -> Measured:
    name, kernel = f"bandwidth.shared.{op}.v{width}", SHARED_KERNELS[op].format(w=width, bits=8 * width)
    s = ctx.settings
    shared_bytes = SharedStream(width, 1, s.threads, 2).shared_bytes
    wanted = max(1, s.cached_tile_per_sm // (s.threads * width * patterns.ACCESSES))
    per_sm = min(wanted, ctx.blocks_per_sm(kernel, s.threads, shared_bytes))
    short_iters, long_iters = cached_pair(width, per_sm, s.threads, s)
    streams = [SharedStream(width, ctx.device.sm_count * per_sm, s.threads, n) for n in (short_iters, long_iters)]
    if op == "read":
        short, long = (_shared_read_launch(ctx, kernel, st) for st in streams)
    else:
        dst = ctx.launcher.alloc(streams[0].blocks * streams[0].shared_bytes)
        short, long = (_shared_store_launch(ctx, kernel, op, st, dst) for st in streams)
    factor = 2 if op == "copy" else 1
    per_block = (factor * streams[0].bytes_per_block, factor * streams[1].bytes_per_block)
    samples: list[float] = []
    sample_until_stable(lambda: samples.append(cycle_rate(ctx.runner, short, long, per_block)), samples, s.stopping())
    note = f"{per_sm} blocks of {s.threads} per SM, {shared_bytes // 1024} KiB shared each"
    facts = [fact(f"bandwidth.shared_{op}.v{width}", samples, "byte/clk/SM", name)]
    return Measured(name, ProbeOutcome("ok", note), facts)


# ---- occupancy and goodput --------------------------------------------------------------------------


def measure_occupancy(ctx: _Context) -> Measured:
    name, kernel, width = "bandwidth.dram.occupancy.v4", "gp_bw_read_cg_v4", 4
    s, sms = ctx.settings, ctx.device.sm_count
    columns: dict[str, list[float]] = {"threads_per_block": [], "blocks_per_sm": [], "threads_per_sm": [], "gbps": []}
    medians: list[tuple[float, int, list[float]]] = []
    points = sweep_points(s, lambda t: ctx.blocks_per_sm(kernel, t), sms, ctx.device.l2_bytes)
    if not points:
        raise ProbeFailure(
            f"the DRAM footprint holds too few tiles of even one {min(s.sweep_threads)}-thread block per SM"
        )
    for threads, per_sm in points:
        short, long = dram_pair(width, sms * per_sm, threads, ctx.device.l2_bytes, s)
        samples = _rates(ctx, *_launches(ctx, "read", short, long), flush=True, sweep=True)
        median = float(np.median(samples))
        medians.append((median, threads * per_sm, samples))
        for key, value in zip(columns, (threads, per_sm, threads * per_sm, median), strict=True):
            columns[key].append(float(value))
    best = max(medians, key=lambda m: m[0])
    saturated = min((m for m in medians if m[0] >= s.saturation * best[0]), key=lambda m: m[1])
    facts = [
        Fact(
            "bandwidth.dram_read_saturation.v4",
            float(saturated[1]),
            "count",
            (float(saturated[1]),) * 2,
            [float(saturated[1])],
            {},
            name,
        ),
        fact("bandwidth.dram_read_best.v4", best[2], "GB/s", name),
    ]
    note = f"{s.saturation:.0%} of the best {best[0]:.0f} GB/s from {saturated[1]} resident threads per SM"
    return Measured(name, ProbeOutcome("ok", note, {"occupancy": columns}), facts)


def _pattern_launch(ctx: _Context, stream: PatternStream, per_iteration: np.ndarray) -> Launch:
    """A pattern read whose threads must each sum what ``per_iteration`` (the sums of a launch at least
    as long, per iteration: :func:`~gpuprobe.families.bandwidth.patterns.pattern_iteration_sums`) says its
    first ``stream.iters`` iterations read."""
    p = stream.pattern
    kernel = f"gp_bw_pattern_v{p.width}"
    expected = per_iteration[: stream.iters].sum(axis=0, dtype=np.uint32)  # wrapping, as the kernel's sums
    args = [
        np.uint64(ctx.launcher.address(ctx.src) + p.offset),
        np.uint32(p.lane_stride),
        np.uint64(p.slot),
        np.uint64(stream.step),
        np.uint32(stream.iters),
        None,
        None,
    ]
    return _summing_launch(ctx, kernel, args, stream.blocks, stream.threads, stream.useful_bytes, expected)


def measure_goodput(ctx: _Context, pattern_name: str) -> Measured:
    pattern = PATTERNS[pattern_name]
    name, kernel = f"bandwidth.goodput.{pattern_name}", f"gp_bw_pattern_v{pattern.width}"
    s = ctx.settings
    most = ctx.blocks_per_sm(kernel, s.threads)
    short, long = pattern_pair(
        pattern, most, ctx.device.sm_count, s.threads, ctx.device.l2_bytes, len(ctx.words) * 4, s
    )
    per_iteration = patterns.pattern_iteration_sums(ctx.words, long)  # the short launch reads its first iterations
    launches = (_pattern_launch(ctx, stream, per_iteration) for stream in (short, long))
    useful = _rates(ctx, *launches, flush=True)
    ratio = 1.0 / pattern.efficiency
    prefix = f"bandwidth.goodput.{pattern_name}"
    facts = [
        fact(f"{prefix}.useful", useful, "GB/s", name),
        fact(f"{prefix}.moved", [u * ratio for u in useful], "GB/s", name),
        Fact(
            f"{prefix}.efficiency",
            pattern.efficiency,
            "fraction",
            (pattern.efficiency,) * 2,
            [pattern.efficiency],
            {},
            name,
        ),
    ]
    note = (
        f"{pattern.useful_bytes} useful bytes per warp request in {pattern.sectors} sectors "
        f"({pattern.moved_bytes} bytes moved); {long.blocks} blocks of {s.threads}, {long.iters} iterations"
    )
    series = {
        "goodput": {"useful_gbps": [facts[0].value], "moved_gbps": [facts[1].value], "efficiency": [pattern.efficiency]}
    }
    return Measured(name, ProbeOutcome("ok", note, series), facts)


# ---- the family -------------------------------------------------------------------------------------

STEPS: list[tuple[str, Callable[[_Context], Measured]]] = [
    *((f"bandwidth.dram.{op}.v{w}", lambda c, op=op, w=w: measure_dram(c, op, w)) for op in OPS for w in (16, 8, 4)),
    *((f"bandwidth.l2.{op}.v{w}", lambda c, op=op, w=w: measure_l2(c, op, w)) for op in OPS for w in (16, 8, 4)),
    *((f"bandwidth.l1.read.v{w}", lambda c, w=w: measure_l1(c, w)) for w in (16, 8, 4)),
    *(
        (f"bandwidth.shared.{op}.v{w}", lambda c, op=op, w=w: measure_shared(c, op, w))
        for op in OPS
        for w in (16, 8, 4)
    ),
    ("bandwidth.dram.occupancy.v4", measure_occupancy),
    *((f"bandwidth.goodput.{p}", lambda c, p=p: measure_goodput(c, p)) for p in PATTERNS),
]

PROBES = [name for name, _ in STEPS]


# ---- the time plan ----------------------------------------------------------------------------------

CACHED_BYTES_PER_CLOCK = 32.0  # per SM, the least the L1 or shared memory moves (about 128 measured on Hopper)
# Launcher calls of one Runner.run: both outputs poisoned, the launch prepared (a value uploaded or a
# destination poisoned), the timed batch, its sums or stores read back, its block records read.
RUN_CALLS = 6


def _work_plan(work: Work, device: Device) -> Plan:
    """One :class:`Work` entry in seconds: GPU levels at the planning rates (an L2 moves at least what
    DRAM does), what is read back over the link and compared, what the host generates, adds, gathers."""
    nbytes = work.bytes
    gpu = {
        "dram": dram_s(nbytes, device),
        "l2": dram_s(nbytes, device),
        "cached": cycles_s(nbytes / CACHED_BYTES_PER_CLOCK, device),
        "check": link_s(nbytes, pinned=False),
        "generate": link_s(nbytes, pinned=False),  # the source uploaded
    }
    host = {
        "check": compare_host_s(nbytes),
        "generate": generate_host_s(nbytes),
        "add": compare_host_s(nbytes),
        "gather": sum_host_s(nbytes),  # strided views reduced
    }
    return Plan(0, RUN_CALLS * work.launches, gpu.get(work.level, 0.0), host.get(work.level, 0.0))


def plan(settings: Settings, device: Device) -> Plan:
    """Every probe at its most repeats (:func:`~gpuprobe.families.bandwidth.shapes.planned_work`, the very
    plans ``measure`` launches, at the most blocks an SM could hold; see
    :mod:`gpuprobe.families.planning`), plus the source, destination and flush buffers zeroed."""
    work = planned_work(device, settings, lambda kernel, threads: resident_blocks(device, threads))
    flush = int(settings.flush_l2_multiple * device.l2_bytes)
    total = Plan(0, 0, dram_s(2 * source_bytes(device, settings) + flush, device))
    for name in PROBES:
        total += probe(*(_work_plan(w, device) for w in work if w.probe == name))
    return total


# A first contact: the DRAM read at 16 bytes per access (its flushes, event timing and every thread's sum
# checked), one sample, the DRAM footprint at its smallest; every other probe at its shortest too.
SMOKE = Smoke(
    probes=("bandwidth.dram.read.v16",),
    settings=Settings(
        dram_l2_multiple=2.0,
        short_fraction=0.1,
        flush_l2_multiple=1.0,
        l2_long_bytes=64 << 20,
        cached_long_bytes_per_sm=1 << 20,
        pattern_moved_l2_multiple=0.0,
        pattern_iterations=2,
        sweep_threads=(256,),
        sweep_blocks=(1,),
        min_repeats=1,
        max_repeats=1,
        sweep_repeats=1,
    ),
)


def _context(
    launcher: Launcher,
    parameters: dict[str, list[tuple[str, str]]],
    device: Device,
    settings: Settings,
    state: dict[str, Any],
) -> _Context:
    """Buffers shared by every probe: the source (uploaded once), destination, L2 flush scratch, outputs."""
    buffer_bytes = source_bytes(device, settings)
    words = patterns.source_words(buffer_bytes // 4, settings.seed)
    runner = Runner(launcher, parameters)
    ctx = _Context(
        launcher,
        device,
        settings,
        runner,
        dict(state.get("datasheet", {})),
        words,
        launcher.upload(words),
        launcher.alloc(buffer_bytes),
    )
    runner.flush = _flush_launch(ctx, launcher, device, settings)
    return ctx


def _flush_launch(ctx: _Context, launcher: Launcher, device: Device, settings: Settings) -> Launch:
    """A read of a zeroed scratch buffer of ``flush_l2_multiple`` L2 sizes: every sum must be 0."""
    footprint = int(settings.flush_l2_multiple * device.l2_bytes)
    stream = patterns.sweep_for(16, device.sm_count * 4, settings.threads, footprint)
    scratch = launcher.alloc(stream.footprint)
    return _read_launch(ctx, "gp_bw_read_cg_v16", stream, scratch, np.zeros(stream.total_threads, dtype=np.uint32))


def measure(request: Request) -> Probes:
    """The family's runnable probes in order, each as (name, run). ``state["datasheet"]`` may hold the
    model's ``dram_gbps``, the peak used when the device reports no memory clock or bus width."""
    launcher, parameters, device = request.launcher, request.parameters, request.device
    runnable, settings, state = request.runnable, request.settings, request.state
    steps = [(name, step) for name, step in STEPS if name in runnable]
    if not steps:
        return
    ctx = _context(launcher, parameters, device, settings or Settings(), state)

    yield from runs([name for name, _ in steps], {name: lambda step=step: step(ctx) for name, step in steps}, runnable)
