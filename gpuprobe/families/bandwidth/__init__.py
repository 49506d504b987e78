"""The bandwidth family: shared memory, L1, L2 and DRAM bandwidth with every SM busy; DRAM occupancy
and goodput; the DRAM figures held against the theoretical peak and the CUDA runtime's copy.

Order of measurement (``PROBES``): DRAM reads, writes and copies at 16, 8 and 4 bytes per access,
then L2 likewise, L1 reads, shared-memory reads, writes and copies, the DRAM occupancy sweep and the
goodput patterns. What each probe isolates and why its kernel is shaped so: ``ptx/bandwidth/bandwidth.toml``
and ``ptx/bandwidth/bandwidth.ptx``; launch shapes and predicted results: :mod:`gpuprobe.families.bandwidth.patterns`;
settings, launch shapes and the time budget: :mod:`gpuprobe.families.bandwidth.shapes`; timing:
:mod:`gpuprobe.families.bandwidth.launches`; the fact sheet and invariants:
:mod:`gpuprobe.families.bandwidth.report`.

* DRAM: footprint ``dram_l2_multiple`` x L2; a sample is a launch of more passes over it minus a
  launch of one, each after an L2 flush, so both leave the L2 as they found it plus the same dirty lines
  (:mod:`~gpuprobe.families.bandwidth.shapes`); GB/s, and a figure whose CI lies wholly above the DRAM's
  peak (the pin rate the CUDA API's clock and bus give, else the datasheet's) fails its probe.
* L2: footprint at most ``l2_fraction`` of the L2, re-read ``passes`` times after a flush (the first,
  cold, pass is in the short launch and the long alike); GB/s.
* L1 (reads only: global stores are not cached in L1) and shared memory (reads, writes, ping-pong
  copies): a per-warp tile re-read or rewritten; bytes per clock per SM from the kernels' clock records.
* Goodput: useful GB/s of strided and misaligned reads from DRAM; "moved" is derived from the DRAM access
  granule the 4-byte stride sweep measures (:mod:`~gpuprobe.families.bandwidth.granule`), so the sweep is
  measured once, by the first goodput probe that needs the granule, and every later one reuses it. The ML
  access patterns (2-, 4- and 16-byte unit stride, a matrix column, misaligned rows, row gathers of 64 B to
  4 KiB, a transposed tile) at DRAM and L2, reads and writes: :mod:`~gpuprobe.families.bandwidth.goodput`.
  Ids: ``bandwidth.goodput.<pattern>.{useful,moved,efficiency}`` for DRAM reads (GB/s, GB/s, fraction),
  ``bandwidth.goodput.<level_op>.<pattern>.{useful,moved,efficiency}`` for ``level_op`` in ``l2_read``,
  ``dram_write``, ``l2_write``, and ``bandwidth.goodput.<level_op>.granule_bytes``; the matrix of patterns per
  level/op is :data:`~gpuprobe.families.bandwidth.goodput.MATRIX`, and each probe's ``goodput`` series says
  where its moved bytes came from (``moved_from``).

The DRAM and L2 streams and the goodput patterns record per launch (the short and the long) the bytes it says
each level moved (series ``launch``), for ``gpuprobe witness`` to hold Nsight Compute's counters to; a pattern
measured for another probe (the stride sweep) is marked with its own probe's NVTX range.

Every long-minus-short is a :class:`~gpuprobe.families.differencing.Difference`
(:mod:`~gpuprobe.families.bandwidth.launches`), and every launch is checked (read sums, written values, copied
bytes); a wrong one fails the probe.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cached_property, partial
from typing import Any

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.families.bandwidth import goodput, occupancy, patterns
from gpuprobe.families.bandwidth.granule import Granule, granule_from_rates
from gpuprobe.families.bandwidth.launches import Launch, Timer, cycle_rates, span_cycles, timed_launch
from gpuprobe.families.bandwidth.patterns import PATTERNS, STRIDE_SWEEP, PatternStream, SharedStream, Stream
from gpuprobe.families.bandwidth.report import INVARIANTS, SECTIONS
from gpuprobe.families.bandwidth.shapes import (
    MIB,
    OPS,
    SHARED_KERNELS,
    STREAM_WIDTHS,
    Settings,
    Work,
    cached_pair,
    dram_blocks,
    dram_stream,
    extra_passes,
    fit_l2_blocks,
    l2_pair,
    pattern_pair,
    planned_work,
    source_bytes,
    stream_kernel,
)
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.differencing import Lengths, event_gbps
from gpuprobe.families.measuring import fact, unmeasured
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
from gpuprobe.families.sampling import ONE_SAMPLE, stop_text, stops_recorded
from gpuprobe.families.stepping import probe_steps
from gpuprobe.families.streams import check_sums
from gpuprobe.runner.launcher import DeviceCopies, capability, probe_range


@dataclass
class _Bench:
    """What every probe of one measuring process measures with: the timer, the source (its words uploaded
    once) and destination buffers and what the host predicts of them, and what earlier probes found that
    later ones reuse."""

    request: Request
    timer: Timer
    words: np.ndarray  # the source buffer's contents
    src: Any
    dst: Any
    most_blocks: dict[tuple[str, int, int], int] = field(default_factory=dict)
    requests: np.ndarray | None = None  # the source's request sums, made once for every width's table
    tables: dict[int, np.ndarray] = field(default_factory=dict)
    values_stored: int = 0  # write launches so far: each stores a value of its own
    goodput: dict[str, MeasuredPattern] = field(default_factory=dict)  # each pattern measured once
    granule: Granule | None = None  # from the 4-byte stride sweep, once it was measured
    l2_rates: dict[str, float] = field(default_factory=dict)  # the 16-byte L2 read and write GB/s, once measured

    @cached_property
    def settings(self) -> Settings:
        return self.request.settings or Settings()

    @property
    def peak(self) -> tuple[float, str] | None:
        """The DRAM's peak GB/s and where it came from (the pin rate the CUDA API's figures give, else the
        datasheet's, ``state["datasheet"]``), None when neither is known."""
        device = self.request.device
        return dram_peak_gbps(device.mem_clock_mhz, device.mem_bus_bits, self.request.state.get("datasheet", {}))

    @property
    def peak_gbps(self) -> float | None:
        return self.peak[0] if self.peak else None

    @cached_property
    def walk_bench(self) -> goodput.Bench:
        """What the goodput walks measure with (:mod:`~gpuprobe.families.bandwidth.goodput`)."""
        return goodput.Bench(self.request, self.timer, self.words, self.src, self.settings, self.blocks_per_sm,
                             partial(_granule, self), partial(_within_peak, self), self.peak_gbps, self.l2_rates,
                             goodput.Walks())  # fmt: skip

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
            self.most_blocks[key] = self.request.launcher.max_active_blocks(kernel, threads, shared)
            if self.most_blocks[key] < 1:
                raise ProbeFailure(f"{kernel} cannot be resident with {threads} threads and {shared} bytes shared")
        return self.most_blocks[key]


# ---- global streams ---------------------------------------------------------------------------------


def _summing_launch(
    bench: _Bench, kernel: str, args: list[object], blocks: int, threads: int, expected: np.ndarray, shared: int = 0
) -> Launch:
    """A launch of a read kernel whose check is that every thread's sum is the host's ``expected``."""
    launch = Launch(kernel, args, blocks, threads, lambda first: None, shared=shared)
    launch.check = lambda first: check_sums(kernel, bench.timer.sums_of(launch), expected)
    return launch


def _read_launch(bench: _Bench, kernel: str, stream: Stream, src: Any, expected: np.ndarray | None = None) -> Launch:
    """A read of ``src`` (the uploaded source unless given, with the sums it must give)."""
    if expected is None and stream.footprint > 4 * len(bench.words):
        raise ProbeFailure(f"{kernel}: {stream.footprint} bytes to read, the source holds {4 * len(bench.words)}")
    if expected is None:
        expected = patterns.stream_sums(bench.table(stream.width), stream)
    args = [
        src,
        np.uint32(stream.width),
        np.uint64(stream.step),
        np.uint32(stream.iters),
        np.uint32(stream.passes),
        None,
        None,
    ]
    return _summing_launch(bench, kernel, args, stream.blocks, stream.threads, expected)


def _written_words(bench: _Bench, buffer: Any, count: int, first: bool) -> np.ndarray:
    return np.asarray(
        bench.request.launcher.read(buffer, "uint32", count if first else min(count, bench.settings.check_words))
    )


def _write_launch(bench: _Bench, stream: Stream) -> Launch:
    kernel = stream_kernel("write", stream.width)
    words = stream.footprint // patterns.WORD.itemsize
    args: list[object] = [
        bench.dst,
        None,  # the value's address, set before each launch
        np.uint32(stream.width),
        np.uint64(stream.step),
        np.uint32(stream.iters),
        np.uint32(stream.passes),
        None,
    ]
    pattern: dict[str, Any] = {}

    def prepare() -> None:  # a new value every launch: a launch that stored nothing is caught
        bench.values_stored += 1
        pattern["value"] = patterns.source_words(4, bench.settings.seed + bench.values_stored)
        pattern["buffer"] = bench.request.launcher.upload(pattern["value"])
        args[1] = pattern["buffer"]

    def check(first: bool) -> None:
        per_value = stream.width // patterns.WORD.itemsize
        got = _written_words(bench, bench.dst, words, first).reshape(-1, per_value)
        wrong = np.unique(np.flatnonzero(got != pattern["value"][:per_value]) // per_value)  # values with a bad word
        if len(wrong):
            raise ProbeFailure(
                f"{kernel}: {len(wrong)} of {len(got)} stored {stream.width}-byte values are wrong "
                f"(first at byte {int(wrong[0]) * stream.width})"
            )

    return Launch(kernel, args, stream.blocks, stream.threads, check, prepare=prepare, uses_sums=False)


def _copy_launch(bench: _Bench, stream: Stream, dst: Any) -> Launch:
    """A copy from the source to ``dst``, which is poisoned before each launch and checked after."""
    kernel = stream_kernel("copy", stream.width)
    words = stream.footprint // patterns.WORD.itemsize
    args = [
        bench.src,
        dst,
        np.uint32(stream.width),
        np.uint64(stream.step),
        np.uint32(stream.iters),
        np.uint32(stream.passes),
        None,
    ]

    def check(first: bool) -> None:
        got = _written_words(bench, dst, words, first)
        wrong = np.flatnonzero(got != bench.words[: len(got)])
        if len(wrong):
            raise ProbeFailure(
                f"{kernel}: {len(wrong)} of {len(got)} copied words differ from the source "
                f"(first at byte {int(wrong[0]) * 4})"
            )

    def prepare() -> None:  # a launch that copied nothing would leave the poison
        bench.request.launcher.fill(dst, 0xFF)

    return Launch(kernel, args, stream.blocks, stream.threads, check, prepare=prepare, uses_sums=False)


def _stream_launch(bench: _Bench, op: str, stream: Stream, dst: Any = None) -> Launch:
    """The launch of ``op`` over ``stream``; a copy goes to ``dst`` (default: the shared destination)."""
    if op == "read":
        return _read_launch(bench, stream_kernel("read", stream.width), stream, bench.src)
    if op == "write":
        return _write_launch(bench, stream)
    return _copy_launch(bench, stream, bench.dst if dst is None else dst)


def _passes_of(bench: _Bench, op: str, once: Stream, dst: Any = None) -> Callable[[int], float]:
    """``n`` -> GPU ms of ``n`` passes of ``op`` over ``once``'s footprint, after an L2 flush."""
    return timed_launch(bench.timer, lambda n: _stream_launch(bench, op, replace(once, passes=n), dst))


NO_PEAK = "no memory clock, bus width or datasheet figure: no theoretical peak"


def _peak_label(bench: _Bench) -> str:
    """What the DRAM peak is, said as it is: the pin rate the CUDA API's figures give is not the datasheet's."""
    if bench.peak is None:
        return NO_PEAK
    value, source = bench.peak
    if source == "datasheet":
        return f"the datasheet's {value:.0f} GB/s"
    clock, bits = bench.request.device.mem_clock_mhz, bench.request.device.mem_bus_bits
    return (
        f"the pin rate {value:.0f} GB/s (2 x memory clock {clock:g} MHz x {bits}-bit bus / 8, as the CUDA API "
        "reports them; not the datasheet's figure)"
    )


def _within_peak(bench: _Bench, figure: Fact) -> Fact:
    """``figure`` (GB/s through DRAM), or ProbeFailure when its CI lies wholly above the DRAM's peak: more
    bytes than the DRAM can move in the time, so the timing, not the DRAM, made the number."""
    if bench.peak is not None and figure.ci is not None and figure.ci[0] > bench.peak[0]:
        low, high = figure.ci
        raise ProbeFailure(
            f"{figure.id} = {figure.value:.0f} GB/s (CI {low:.0f}-{high:.0f}, {len(figure.samples)} samples) lies "
            f"wholly above {_peak_label(bench)}: impossible, so the timing is wrong"
        )
    return figure


def _passes_note(lengths: Lengths, unit_bytes: int) -> str:
    return f"passes {lengths.short} against {lengths.long} ({unit_bytes / MIB:.1f} MiB moved a pass)"


def measure_dram(bench: _Bench, op: str, width: int) -> Measured:
    """DRAM ``op`` GB/s at ``width`` bytes per access: more passes minus one over several L2 sizes, flushed."""
    name = f"bandwidth.dram.{op}.v{width}"
    kernel = stream_kernel(op, width)
    s = bench.settings
    sms, l2 = bench.request.device.sm_count, bench.request.device.l2_bytes
    blocks = sms * dram_blocks(width, s.threads, bench.blocks_per_sm(kernel, s.threads), sms, l2, s)
    once = dram_stream(width, blocks, s.threads, l2, s)
    pass_bytes = (2 if op == "copy" else 1) * once.footprint
    lengths = extra_passes(pass_bytes, bench.peak_gbps)
    samples, lengths = event_gbps(_passes_of(bench, op, once), lengths, pass_bytes, name, s.sampling)
    facts = [_within_peak(bench, fact(f"bandwidth.dram_{op}.v{width}", samples, "GB/s", name))]
    note = f"{once.footprint / MIB:.0f} MiB, {blocks} blocks of {s.threads}, {_passes_note(lengths, pass_bytes)}"
    if width == 16:
        facts += _peak_facts(bench, op, samples, name)
        note += f"; peak: {_peak_label(bench)}"
        if op == "copy":
            facts += _memcpy_facts(bench, once, lengths, samples, name)
    series = {"stream": {"footprint_bytes": [float(once.footprint)], "gbps": [facts[0].value]},
              "launch": stream_claims(op, once, lengths, ("dram", "l2"))}  # fmt: skip
    return Measured(name, ProbeOutcome("ok", note, series), facts)


def stream_claims(op: str, once: Stream, lengths: Lengths, levels: tuple[str, ...]) -> dict[str, list[float]]:
    """Per launch (the short and the long), its passes, grid and the bytes it says each of ``levels`` moved
    (``<level>_read_bytes``, ``<level>_write_bytes``): each pass reads and/or writes the footprint once, through
    the L2, and (a DRAM stream) to and from DRAM. What a hardware counter is held to (``gpuprobe witness``)."""
    ways = {"read": ("read",), "write": ("write",), "copy": ("read", "write")}[op]
    passes = [float(lengths.short), float(lengths.long)]
    moved = {f"{level}_{way}_bytes": [n * once.footprint for n in passes] for level in levels for way in ways}
    useful = [n * once.footprint * len(ways) for n in passes]
    shape = {"blocks": [float(once.blocks)] * 2, "threads": [float(once.threads)] * 2}
    return {"passes": passes, "useful_bytes": useful, **moved, **shape}


def _peak_facts(bench: _Bench, op: str, samples: list[float], name: str) -> list[Fact]:
    """The fraction of the DRAM's peak, and (with the read) the peak itself (the probe's note says which)."""
    if bench.peak is None:
        facts = [unmeasured(f"bandwidth.dram_{op}_fraction_of_peak", "fraction", name, NO_PEAK)]
        return facts + ([unmeasured("bandwidth.dram_theoretical", "GB/s", name, NO_PEAK)] if op == "read" else [])
    value = bench.peak[0]
    facts = [fact(f"bandwidth.dram_{op}_fraction_of_peak", [x / value for x in samples], "fraction", name)]
    if op == "read":
        facts.append(Fact("bandwidth.dram_theoretical", value, "GB/s", (value, value), [value], {}, name))
    return facts


def _memcpy_facts(bench: _Bench, once: Stream, lengths: Lengths, probe_samples: list[float], name: str) -> list[Fact]:
    """The CUDA runtime's device-to-device copy of the same footprint, whole copies back to back as the
    probe's passes (after a flush), differenced as the probe. Each extra copy adds its call's own start to
    the difference (a few us against the ~100 us an H200 copies 240 MiB in), so the figure errs low."""

    def copies_ms(count: int) -> float:
        bench.timer.flush_l2()
        copies = capability(bench.request.launcher, DeviceCopies)
        return copies.time_device_copy(bench.dst, bench.src, once.footprint, count)

    what = f"{name}: cudaMemcpy of {once.footprint} bytes"
    samples, _ = event_gbps(copies_ms, lengths, 2 * once.footprint, what, bench.settings.sampling)
    memcpy = _within_peak(bench, fact("bandwidth.dram_copy_cuda_memcpy", samples, "GB/s", name))
    ratios = [p / m for p in probe_samples for m in samples]  # every pair: the samples were not taken together
    return [memcpy, fact("bandwidth.dram_copy_fraction_of_memcpy", ratios, "fraction", name)]


def measure_l2(bench: _Bench, op: str, width: int) -> Measured:
    """L2 ``op`` GB/s at ``width`` bytes per access: a footprint within the L2 re-read pass after pass, flushed."""
    name = f"bandwidth.l2.{op}.v{width}"
    kernel = stream_kernel(op, width)
    s = bench.settings
    factor = 2 if op == "copy" else 1
    footprint = int(s.l2_fraction * bench.request.device.l2_bytes) // factor
    sms = bench.request.device.sm_count
    threads, per_sm = fit_l2_blocks(width, s.threads, partial(bench.blocks_per_sm, kernel), sms, footprint)
    once, lengths = l2_pair(width, sms * per_sm, threads, footprint, factor, s)
    # a copy's own destination, no larger than its footprint (the flush after its poisoning evicts it)
    dst = bench.request.launcher.alloc(once.footprint) if op == "copy" else None
    pass_bytes = factor * once.footprint
    samples, lengths = event_gbps(_passes_of(bench, op, once, dst), lengths, pass_bytes, name, s.sampling)
    note = f"{once.footprint / MIB:.1f} MiB, {once.blocks} blocks of {threads}, {_passes_note(lengths, pass_bytes)}"
    series = {"launch": stream_claims(op, once, lengths, ("l2",))}
    facts = [fact(f"bandwidth.l2_{op}.v{width}", samples, "GB/s", name)]
    if width == 16:
        bench.l2_rates[op] = facts[0].value  # the goodput walks' L2 ceiling
    return Measured(name, ProbeOutcome("ok", note, series), facts)


# ---- L1 and shared memory: bytes per clock per SM ----------------------------------------------------


def _cached_rates(
    bench: _Bench, launch_of: Callable[[int], Launch], width: int, per_sm: int, unit: int, name: str
) -> list[float]:
    """Bytes per clock per SM of ``launch_of(n)`` (``n`` iterations of ``width``-byte accesses, ``unit`` bytes
    an SM's ``per_sm`` blocks move per iteration), long minus short launch, from the clock records."""
    s = bench.settings
    short_iters, long_iters = cached_pair(width, per_sm, s.threads, s)
    cycles_of = span_cycles(bench.timer, launch_of, per_sm)
    return cycle_rates(cycles_of, Lengths(short_iters, long_iters, 1), unit, name, s.sampling)


def measure_l1(bench: _Bench, width: int) -> Measured:
    """L1 read bytes per clock per SM: each warp re-reads its own tile with L1-cached loads."""
    name, kernel = f"bandwidth.l1.read.v{width}", f"gp_bw_read_ca_v{width}"
    s = bench.settings
    bench.request.launcher.prefer_l1(kernel)
    wanted = max(1, s.cached_tile_per_sm // (s.threads * width * patterns.ACCESSES))
    per_sm = min(wanted, bench.blocks_per_sm(kernel, s.threads))
    blocks = bench.request.device.sm_count * per_sm

    def launch_of(iters: int) -> Launch:
        return _read_launch(bench, kernel, Stream(width, blocks, s.threads, iters, sweep=False), bench.src)

    samples = _cached_rates(bench, launch_of, width, per_sm, per_sm * s.threads * width * patterns.ACCESSES, name)
    tile_kib = per_sm * s.threads * width * patterns.ACCESSES // 1024
    note = f"{per_sm} blocks of {s.threads} per SM, {tile_kib} KiB tile per SM"
    return Measured(name, ProbeOutcome("ok", note), [fact(f"bandwidth.l1_read.v{width}", samples, "byte/clk/SM", name)])


def _shared_read_launch(bench: _Bench, kernel: str, stream: SharedStream) -> Launch:
    expected = patterns.shared_sums(bench.words, stream)
    args = [
        bench.src,
        np.uint32(stream.width),
        np.uint32(stream.iters),
        np.uint32(stream.half_bytes),
        None,
        None,
    ]
    return _summing_launch(bench, kernel, args, stream.blocks, stream.threads, expected, shared=stream.shared_bytes)


def _shared_store_launch(bench: _Bench, kernel: str, op: str, stream: SharedStream, dst: Any) -> Launch:
    """A shared write or copy; afterwards every block's two halves, written back to ``dst``, must hold
    the stored value (write) or twice the source's first half (copy)."""
    half_words = stream.half_bytes // patterns.WORD.itemsize
    if op == "write":
        value = patterns.source_words(4, bench.settings.seed + 1)
        expected = np.tile(value[: stream.width // patterns.WORD.itemsize], 2 * half_words * 4 // stream.width)
        source = bench.request.launcher.upload(value)
    else:
        expected, source = np.tile(bench.words[:half_words], 2), bench.src
    args = [
        source,
        np.uint32(stream.width),
        np.uint32(stream.iters),
        np.uint32(stream.half_bytes),
        dst,
        None,
    ]

    def check(first: bool) -> None:
        got = np.asarray(bench.request.launcher.read(dst, "uint32", stream.blocks * 2 * half_words)).reshape(
            stream.blocks, -1
        )
        wrong = np.flatnonzero(np.any(got != expected[None, :], axis=1))
        if len(wrong):
            raise ProbeFailure(
                f"{kernel}: the shared memory of {len(wrong)} of {stream.blocks} blocks holds wrong "
                f"bytes after the {op} (first: block {int(wrong[0])})"
            )

    return Launch(
        kernel,
        args,
        stream.blocks,
        stream.threads,
        check,
        shared=stream.shared_bytes,
        prepare=lambda: bench.request.launcher.fill(dst, 0xFF),
        uses_sums=False,
    )


def measure_shared(bench: _Bench, op: str, width: int) -> Measured:
    """Shared-memory ``op`` bytes per clock per SM: each block reads, writes or copies its two halves."""
    name, kernel = f"bandwidth.shared.{op}.v{width}", SHARED_KERNELS[op].format(w=width, bits=8 * width)
    s = bench.settings
    shared_bytes = SharedStream(width, 1, s.threads, 2).shared_bytes
    wanted = max(1, s.cached_tile_per_sm // (s.threads * width * patterns.ACCESSES))
    per_sm = min(wanted, bench.blocks_per_sm(kernel, s.threads, shared_bytes))
    blocks = bench.request.device.sm_count * per_sm
    dst = bench.request.launcher.alloc(blocks * shared_bytes) if op != "read" else None

    def launch_of(iters: int) -> Launch:
        stream = SharedStream(width, blocks, s.threads, iters)
        if op == "read":
            return _shared_read_launch(bench, kernel, stream)
        return _shared_store_launch(bench, kernel, op, stream, dst)

    factor = 2 if op == "copy" else 1
    unit = factor * per_sm * s.threads * width * patterns.ACCESSES
    samples = _cached_rates(bench, launch_of, width, per_sm, unit, name)
    note = f"{per_sm} blocks of {s.threads} per SM, {shared_bytes // 1024} KiB shared each"
    facts = [fact(f"bandwidth.shared_{op}.v{width}", samples, "byte/clk/SM", name)]
    return Measured(name, ProbeOutcome("ok", note), facts)


# ---- occupancy and goodput --------------------------------------------------------------------------


def _sweeper(bench: _Bench) -> occupancy.Sweeper:
    """What the occupancy sweeps (:mod:`~gpuprobe.families.bandwidth.occupancy`) measure with."""
    most = partial(bench.blocks_per_sm, occupancy.KERNEL)
    passes_of = partial(_passes_of, bench, "read")
    return occupancy.Sweeper(
        bench.request, bench.settings, most, passes_of, partial(_within_peak, bench), bench.peak_gbps
    )


@dataclass(frozen=True)
class MeasuredPattern:
    """One goodput pattern measured: its useful GB/s samples, one pass of its launch, the passes of the
    short and the long launch, and why its sampling stopped (the probes that reuse it say so)."""

    useful: list[float]
    once: PatternStream
    lengths: Lengths
    stopped: str


def _pattern_launch(bench: _Bench, stream: PatternStream, per_iteration: np.ndarray) -> Launch:
    """A pattern read whose threads must each sum what ``per_iteration`` (the sums of one pass of at least
    as many iterations, per iteration: :func:`~gpuprobe.families.bandwidth.patterns.pattern_iteration_sums`)
    says its first ``stream.iters`` iterations read, ``stream.passes`` times over."""
    p = stream.pattern
    kernel = f"gp_bw_pattern_v{p.width}"
    once = per_iteration[: stream.iters].sum(axis=0, dtype=np.uint32)  # wrapping, as the kernel's sums
    expected = once * np.uint32(stream.passes)
    args = [
        np.uint64(bench.request.launcher.address(bench.src) + p.offset),
        np.uint32(p.lane_stride),
        np.uint64(p.slot),
        np.uint64(stream.step),
        np.uint32(stream.iters),
        np.uint32(stream.passes),
        None,
        None,
    ]
    return _summing_launch(bench, kernel, args, stream.blocks, stream.threads, expected)


def _measure_pattern(bench: _Bench, pattern: patterns.Pattern) -> MeasuredPattern:
    """Useful GB/s of ``pattern``: more passes minus one pass over its footprint, each after a flush."""
    s = bench.settings
    most = bench.blocks_per_sm(f"gp_bw_pattern_v{pattern.width}", s.threads)
    sms, l2, buffer = bench.request.device.sm_count, bench.request.device.l2_bytes, len(bench.words) * 4
    once, lengths = pattern_pair(pattern, most, sms, s.threads, l2, buffer, s, bench.peak_gbps)
    per_iteration = patterns.pattern_iteration_sums(bench.words, once)
    ms_of = timed_launch(bench.timer, lambda n: _pattern_launch(bench, replace(once, passes=n), per_iteration))
    what = f"bandwidth.goodput.{pattern.name}"
    with bench.request.launcher.nvtx_range(probe_range(what)), stops_recorded() as stops:  # its probe's launches
        useful, lengths = event_gbps(ms_of, lengths, once.useful_bytes, what, s.sampling)
    return MeasuredPattern(useful, once, lengths, stop_text(stops))


def _measured_pattern(bench: _Bench, pattern_name: str) -> MeasuredPattern:
    """``pattern_name`` measured, once (the stride sweep may have measured it for the granule)."""
    if pattern_name not in bench.goodput:
        bench.goodput[pattern_name] = _measure_pattern(bench, PATTERNS[pattern_name])
    return bench.goodput[pattern_name]


def _sweep_useful(bench: _Bench) -> dict[int, list[float]]:
    """The 4-byte stride sweep's useful-rate samples by stride in words (each pattern measured once)."""
    return {PATTERNS[p].lane_stride // 4: _measured_pattern(bench, p).useful for p in STRIDE_SWEEP}


def _granule(bench: _Bench) -> Granule:
    """The DRAM access granule from the 4-byte stride sweep's median useful rates."""
    if bench.granule is None:
        bench.granule = granule_from_rates({s: float(np.median(u)) for s, u in _sweep_useful(bench).items()})
    return bench.granule


def _granule_fact(bench: _Bench, name: str) -> Fact:
    """``bandwidth.goodput.granule_bytes``: the granule from the sweep's medians, and one refit per round of
    samples as its distribution."""
    found = _granule(bench)
    if found.bytes is None:
        return unmeasured(GRANULE_FACT, "byte", name, found.why)
    useful = _sweep_useful(bench)
    rounds = min(len(samples) for samples in useful.values())
    refits = [granule_from_rates({s: samples[r] for s, samples in useful.items()}).bytes for r in range(rounds)]
    result = fact(GRANULE_FACT, [float(b) for b in refits if b] or [float(found.bytes)], "byte", name)
    result.value = float(found.bytes)
    result.stopped = stop_text([r for p in STRIDE_SWEEP for r in _measured_pattern(bench, p).stopped.split("+") if r])
    return result


GRANULE_FACT = "bandwidth.goodput.granule_bytes"
GRANULE_PROBE = "bandwidth.goodput.v4.stride1"  # reports the granule (it measures the sweep in a full run)


def _moved_facts(bench: _Bench, measured: MeasuredPattern, granule: Granule, name: str) -> list[Fact]:
    """``.moved`` and ``.efficiency``: the useful rate over the share of what DRAM moved that the threads
    used, when the memory moves whole granules (unmeasured, with the sweep's reason, without one)."""
    if granule.bytes is None:
        why = f"no DRAM access granule from the stride sweep: {granule.why}"
        return [unmeasured(f"{name}.moved", "GB/s", name, why), unmeasured(f"{name}.efficiency", "fraction", name, why)]
    efficiency = measured.once.pattern.efficiency(granule.bytes)
    moved = fact(f"{name}.moved", [u / efficiency for u in measured.useful], "GB/s", name)
    moved.stopped = measured.stopped
    share = Fact(f"{name}.efficiency", efficiency, "fraction", (efficiency,) * 2, [efficiency], {}, name)
    return [_within_peak(bench, moved), share]


def measure_goodput(bench: _Bench, pattern_name: str) -> Measured:
    """Useful GB/s of a goodput pattern, and the bytes DRAM moved for them by the measured granule."""
    name = f"bandwidth.goodput.{pattern_name}"
    measured, granule = _measured_pattern(bench, pattern_name), _granule(bench)
    useful = fact(f"{name}.useful", measured.useful, "GB/s", name)
    useful.stopped = measured.stopped
    facts = [_within_peak(bench, useful)]
    facts += _moved_facts(bench, measured, granule, name)
    if name == GRANULE_PROBE:
        facts.append(_granule_fact(bench, name))
    outcome = ProbeOutcome("ok", _goodput_note(measured, granule), _goodput_series(measured, granule))
    return Measured(name, outcome, facts)


def _goodput_note(measured: MeasuredPattern, granule: Granule) -> str:
    once, p = measured.once, measured.once.pattern
    moved = (
        f"moved bytes derived from the measured {granule.bytes}-byte DRAM granule, {p.units(granule.bytes)} units "
        f"a request (a model, not a counter)"
        if granule.bytes
        else "no moved bytes"
    )
    return (
        f"{p.useful_bytes} useful bytes per warp request; {moved}; {granule.describe()}; "
        f"{once.blocks} blocks of {once.threads}, {once.iters} iterations a pass, "
        f"passes {measured.lengths.short} against {measured.lengths.long}"
    )


def _goodput_series(measured: MeasuredPattern, granule: Granule) -> dict[str, dict[str, list]]:
    """The rates, and per launch (the short and the long) its passes, the useful bytes and the bytes the
    granule says DRAM moved (0 without one): what a hardware counter (ncu dram__bytes_read.sum) is held to."""
    passes = [measured.lengths.short, measured.lengths.long]
    once = measured.once
    moved = once.moved_bytes(granule.bytes) if granule.bytes else 0
    return {
        "goodput": {"useful_gbps": [float(np.median(measured.useful))], "granule_bytes": [float(granule.bytes or 0)]},
        "launch": {
            "passes": [float(n) for n in passes],
            "useful_bytes": [float(n * once.useful_bytes) for n in passes],
            "moved_bytes": [float(n * moved) for n in passes],
        },
    }


# ---- the family -------------------------------------------------------------------------------------

STEPS: list[tuple[str, Callable[[_Bench], Measured]]] = [
    *((f"bandwidth.dram.{op}.v{w}", lambda c, op=op, w=w: measure_dram(c, op, w)) for op in OPS for w in STREAM_WIDTHS),
    *((f"bandwidth.l2.{op}.v{w}", lambda c, op=op, w=w: measure_l2(c, op, w)) for op in OPS for w in STREAM_WIDTHS),
    *((f"bandwidth.l1.read.v{w}", lambda c, w=w: measure_l1(c, w)) for w in STREAM_WIDTHS),
    *(
        (f"bandwidth.shared.{op}.v{w}", lambda c, op=op, w=w: measure_shared(c, op, w))
        for op in OPS
        for w in STREAM_WIDTHS
    ),
    *((occupancy.PROBES[lv], lambda c, lv=lv: occupancy.measure(_sweeper(c), lv)) for lv in occupancy.LEVELS),
    *((f"bandwidth.goodput.{p}", lambda c, p=p: measure_goodput(c, p)) for p in PATTERNS),
    *((name, lambda c, lo=lo, p=p: goodput.measure(c.walk_bench, lo, p)) for name, lo, p in goodput.steps()),
]

PROBES = [name for name, _ in STEPS]


# ---- the time plan ----------------------------------------------------------------------------------

CACHED_BYTES_PER_CLOCK = 32.0  # per SM, the least the L1 or shared memory moves (about 128 measured on Hopper)
# Launcher calls of one Timer.time: both outputs poisoned, the launch prepared (a value uploaded or a
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
    plans ``measure`` launches, at the most blocks an SM could hold and the DRAM peak the device's memory
    clock and bus give; see :mod:`gpuprobe.families.planning`), plus the source, destination and flush
    buffers zeroed."""
    peak = dram_peak_gbps(device.mem_clock_mhz, device.mem_bus_bits, {})

    def most(kernel: str, threads: int) -> int:
        return resident_blocks(device, threads)

    work = planned_work(device, settings, most, peak and peak[0])
    work += goodput.planned_work(device, settings, most, source_bytes(device, settings), peak and peak[0])
    work += occupancy.planned_work(device, settings, most, peak and peak[0])
    flush = int(settings.flush_l2_multiple * device.l2_bytes)
    total = Plan(0, 0, dram_s(2 * source_bytes(device, settings) + flush, device))
    for name in PROBES:
        total += probe(*(_work_plan(w, device) for w in work if w.probe == name))
    return total


# A first contact: the DRAM read at 16 bytes per access (its flushes, event timing and every thread's sum
# checked, its figure held to the DRAM's peak), one sample, the full run's DRAM footprint; every other
# probe at its shortest too. Every setting obeys the full run's rules (Settings validates both alike).
SMOKE = Smoke(
    probes=("bandwidth.dram.read.v16",),
    settings=Settings(
        dram_l2_multiple=4.0,  # the full run's footprint: every probe of the family fits it (goodput strides too)
        short_fraction=0.1,
        flush_l2_multiple=2.0,
        l2_long_bytes=64 << 20,
        cached_long_bytes_per_sm=1 << 20,
        pattern_moved_l2_multiple=0.0,
        pattern_iterations=2,
        goodput_walks=False,  # the smoke probe is no walk: its plan bounds none of them
        sweep_threads=(256,),
        sweep_blocks=(1,),
        sampling=ONE_SAMPLE,
        sweep_sampling=ONE_SAMPLE,
    ),
)


def _bench(request: Request) -> _Bench:
    """Buffers shared by every probe: the source (uploaded once), destination, L2 flush scratch."""
    launcher, settings = request.launcher, request.settings or Settings()
    buffer_bytes = source_bytes(request.device, settings)
    words = patterns.source_words(buffer_bytes // 4, settings.seed)
    timer = Timer(request)
    bench = _Bench(request, timer, words, launcher.upload(words), launcher.alloc(buffer_bytes))
    timer.flush = _flush_launch(bench)
    return bench


def _flush_launch(bench: _Bench) -> Launch:
    """A read of a zeroed scratch buffer of ``flush_l2_multiple`` L2 sizes (at least two): every sum must be 0."""
    settings, device = bench.settings, bench.request.device
    footprint = int(settings.flush_l2_multiple * device.l2_bytes)
    stream = patterns.sweep_for(16, device.sm_count * 4, settings.threads, footprint)
    scratch = bench.request.launcher.alloc(stream.footprint)
    return _read_launch(bench, "gp_bw_read_cg_v16", stream, scratch, np.zeros(stream.total_threads, dtype=np.uint32))


def measure(request: Request) -> Probes:
    """The family's runnable probes in order, each as (name, run). ``state["datasheet"]`` may hold the
    model's ``dram_gbps``, the peak used when the device reports no memory clock or bus width."""
    if request.runnable.isdisjoint(PROBES):
        return  # no buffers to make
    bench = _bench(request)
    yield from probe_steps(PROBES, {name: partial(step, bench) for name, step in STEPS}, request.runnable)


FAMILY = Family(
    name="bandwidth",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
    sections=(*SECTIONS, occupancy.SECTION),
    invariants=(*INVARIANTS, *occupancy.INVARIANTS),
)
