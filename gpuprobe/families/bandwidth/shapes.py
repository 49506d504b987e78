"""The bandwidth family's settings and launch shapes: how big, how many blocks, how many iterations.

Each probe's short and long launch (the pair a sample differences) is planned here from the device
(SM count, L2 size, DRAM peak) and the occupancy the CUDA API allows, so :func:`planned_work` can bound
the family's whole run from the very plans :mod:`gpuprobe.families.bandwidth` launches.

A DRAM probe's two launches cover the same footprint of several L2 sizes, the short one pass over it and
the long one more passes: both end having just streamed that footprint, so they leave the L2 in the
same state (the same lines in it, as many of them dirty), and every byte of the long launch's extra
passes went to or came from DRAM. (A short launch over part of the footprint, as before issue 24, leaves
fewer dirty lines behind than the long one: their write-backs, never timed, made DRAM writes look faster
than the L2's.) The extra passes are as many as make the difference span :data:`RESOLVED_TICKS` event
ticks, with :data:`MARGIN` to spare, at the DRAM's peak: no faster DRAM could leave it unresolved.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device
from gpuprobe.families.bandwidth import patterns
from gpuprobe.families.bandwidth.patterns import PATTERNS, PatternStream, Stream
from gpuprobe.families.differencing import EVENTS, MARGIN, RESOLVED_TICKS, Lengths
from gpuprobe.families.measuring import require_counts
from gpuprobe.families.sampling import Stopping

MIB = 1 << 20


@dataclass(frozen=True)
class Settings:
    """How much each probe moves and how often it samples (JSON-able: it crosses into the child)."""

    threads: int = 256  # per block, for the global streams
    dram_l2_multiple: float = 4.0  # DRAM footprint, in L2 sizes: a pass streams it, and the next re-reads none of it
    short_fraction: float = 0.25  # the short launch's share of the long one (L2, L1 and shared memory)
    flush_l2_multiple: float = 2.0  # the scratch read that flushes the L2 (at least 2: one L2 of reads leaves
    # lines of what it displaced behind on a part whose replacement is not LRU)
    l2_fraction: float = 0.25  # the L2 probes' footprint (source and destination together), of the L2: on a
    # split L2 (A100, H100) a line read by an SM on the far side is also kept near it, so half the L2 is its reach
    l2_long_bytes: int = 4 << 30  # bytes a long L2 launch moves
    cached_tile_per_sm: int = 32 * 1024  # L1 and shared: bytes each SM's blocks re-read
    cached_long_bytes_per_sm: int = 32 * MIB  # bytes per SM in a long L1 / shared launch
    pattern_moved_l2_multiple: float = 4.0  # a goodput pass moves at least this many L2 sizes, counted in 32-byte
    # sectors (the least it can), as far as the buffer reaches: the next pass, which re-reads it, finds as little
    # of it left in L2 as a DRAM stream's does (a line survives 4 L2 sizes of reads about e^-4 = 2 % of the time
    # under random replacement, 2 L2 sizes e^-2 = 14 %, and every such hit would count in the difference)
    pattern_iterations: int = 8  # and makes at least this many iterations of every SM's blocks
    sweep_threads: tuple[int, ...] = (128, 256, 512, 1024)
    sweep_blocks: tuple[int, ...] = (1, 2, 4, 8, 16)  # blocks per SM tried (up to the occupancy limit, which is added)
    saturation: float = 0.9  # the occupancy sweep's saturation: this fraction of the best
    goodput_walks: bool = True  # measure the goodput walks (gpuprobe.families.bandwidth.goodput): not in a first
    # contact, whose one probe is no walk (its plan, a bound over every probe, then counts none)
    check_words: int = 1 << 20  # after a launch shape's first full check, written words checked per launch
    sampling: Stopping = Stopping(3, 7, 0.01, 1.0)  # a probe's samples: 3 to 7, 1 s at most
    sweep_sampling: Stopping = Stopping(3, 3, 0.01, 1.0)  # each point of the occupancy sweep: 3
    seed: int = 20240917

    def __post_init__(self) -> None:
        for name in ("sweep_threads", "sweep_blocks"):
            object.__setattr__(self, name, tuple(getattr(self, name)))  # JSON hands lists back
        if self.threads & (self.threads - 1):
            raise ValueError(
                f"Settings: threads must be a power of two (shared halves flip by xor), not {self.threads}"
            )
        counts = (
            "threads",
            "l2_long_bytes",
            "cached_tile_per_sm",
            "cached_long_bytes_per_sm",
            "check_words",
        )
        require_counts(self, counts)
        if self.threads % 128 or self.threads > 1024 or any(t % 128 or t > 1024 for t in self.sweep_threads):
            raise ValueError("Settings: threads per block must be multiples of 128, at most 1024")
        if not 0 < self.short_fraction < 1 or not 0 < self.l2_fraction <= 1 or not 0 < self.saturation <= 1:
            raise ValueError("Settings: short_fraction in (0, 1), l2_fraction and saturation in (0, 1]")
        if self.pattern_iterations < 2 or self.pattern_moved_l2_multiple < 0:
            raise ValueError("Settings: pattern_iterations must be at least 2, pattern_moved_l2_multiple at least 0")
        if self.dram_l2_multiple < 2 or self.flush_l2_multiple < 2:
            raise ValueError(
                f"Settings: dram_l2_multiple >= 2 and flush_l2_multiple >= 2 (L2 sizes; given {self.dram_l2_multiple:g}"
                f" and {self.flush_l2_multiple:g})"
            )


OPS = ("read", "write", "copy")
STREAM_WIDTHS = (16, 8, 4)  # bytes per access of the stream probes, in measuring order
STREAM_KERNELS = {
    "read": "gp_bw_read_cg_v{w}",
    "write": "gp_bw_write_b{bits}",
    "copy": "gp_bw_copy_b{bits}",
}


def stream_kernel(op: str, width: int) -> str:
    return STREAM_KERNELS[op].format(w=width, bits=8 * width)


def fit_blocks(width: int, threads: int, most_per_sm: int, sm_count: int, footprint: int) -> int:
    """Blocks per SM (at most ``most_per_sm``) whose tile fits in ``footprint``: all SMs busy, as full
    as the footprint allows; ProbeFailure when not even one block per SM fits."""
    for per_sm in range(most_per_sm, 0, -1):
        if sm_count * per_sm * threads * width * patterns.ACCESSES <= footprint:
            return per_sm
    raise ProbeFailure(f"{footprint} bytes is less than one {threads}-thread block per SM of {width}-byte accesses")


WARP = 32


def fit_l2_blocks(
    width: int, threads: int, most: Callable[[int], int], sm_count: int, footprint: int
) -> tuple[int, int]:
    """Threads per block and blocks per SM for an L2 stream whose tile fits in ``footprint``: ``threads``
    while one such block per SM fits, else halved down to a warp (a small L2 with many SMs, as a T4's 4 MiB
    for 40 SMs: every SM stays busy and the footprint stays in L2); ``most(threads)`` is the occupancy."""
    while threads > WARP and sm_count * threads * width * patterns.ACCESSES > footprint:
        threads //= 2
    return threads, fit_blocks(width, threads, most(threads), sm_count, footprint)


def source_bytes(device: Device, settings: Settings) -> int:
    """The source buffer: the DRAM footprint, or every SM's L1 tile if that is more, in whole groups."""
    wanted = max(int(settings.dram_l2_multiple * device.l2_bytes), device.sm_count * settings.cached_tile_per_sm)
    return -(-wanted // patterns.GROUP_BYTES) * patterns.GROUP_BYTES


MIN_DRAM_TILES = 4  # a DRAM footprint holds at least this many tiles of the grid


def dram_blocks(width: int, threads: int, most_per_sm: int, sm_count: int, l2_bytes: int, settings: Settings) -> int:
    """Blocks per SM for a DRAM stream: as many as resident (``most_per_sm``) while the footprint still
    holds ``MIN_DRAM_TILES`` of their tiles (always all of them on a real GPU, whose L2 is large)."""
    footprint = int(settings.dram_l2_multiple * l2_bytes)
    return fit_blocks(width, threads, most_per_sm, sm_count, footprint // MIN_DRAM_TILES)


def resolved_bytes(peak_gbps: float | None) -> int:
    """Bytes a difference of event-timed launches must move so that, even at the DRAM's peak, it spans
    ``RESOLVED_TICKS`` ticks of the events with ``MARGIN`` to spare; 0 when the peak is unknown (the
    difference then widens itself)."""
    if not peak_gbps:
        return 0
    return math.ceil(MARGIN * RESOLVED_TICKS * EVENTS.tick * 1e-3 * peak_gbps * 1e9)


def extra_passes(pass_bytes: int, peak_gbps: float | None) -> Lengths:
    """One pass against one plus as many passes as move :func:`resolved_bytes` (each moving ``pass_bytes``)."""
    return Lengths(1, 1 + max(1, math.ceil(resolved_bytes(peak_gbps) / pass_bytes)), 1)


def dram_stream(width: int, blocks: int, threads: int, l2_bytes: int, settings: Settings) -> Stream:
    """One pass of a DRAM sweep over ``dram_l2_multiple`` L2 sizes (:func:`extra_passes` makes the pair)."""
    stream = patterns.sweep_for(width, blocks, threads, int(settings.dram_l2_multiple * l2_bytes))
    if stream.iters < MIN_DRAM_TILES:
        raise ProbeFailure(f"a DRAM footprint of {stream.footprint} bytes holds under {MIN_DRAM_TILES} tiles")
    return stream


def l2_pair(
    width: int, blocks: int, threads: int, footprint: int, factor: int, settings: Settings
) -> tuple[Stream, Lengths]:
    """One pass of an L2 launch over ``footprint``, and the passes of the short and the long launch: the
    long moves ``l2_long_bytes``, the short ``short_fraction`` of that (at any L2 rate below 40 TB/s the
    default 4 GiB differ by over 50 us, 100 event ticks)."""
    once = patterns.sweep_for(width, blocks, threads, footprint)
    passes = max(2, math.ceil(settings.l2_long_bytes / (factor * once.footprint)))
    short_passes = min(passes - 1, max(1, int(passes * settings.short_fraction)))
    return once, Lengths(short_passes, passes, 1)


def cached_pair(width: int, blocks_per_sm: int, threads: int, settings: Settings) -> tuple[int, int]:
    """Iterations of the short and the long L1 / shared launch."""
    per_iteration = blocks_per_sm * threads * width * patterns.ACCESSES
    long = max(8, settings.cached_long_bytes_per_sm // per_iteration)
    return max(2, int(long * settings.short_fraction)) // 2 * 2, long // 2 * 2


SHARED_KERNELS = {
    "read": "gp_bw_shared_read_v{w}",
    "write": "gp_bw_shared_write_b{bits}",
    "copy": "gp_bw_shared_copy_b{bits}",
}


def sweep_points(settings: Settings, most: Callable[[int], int], sm_count: int, l2_bytes: int) -> list[tuple[int, int]]:
    """(threads per block, blocks per SM) pairs of the occupancy sweep: each block size at the
    settings' block counts up to the occupancy limit ``most(threads)``, and at the limit itself, as far
    as the DRAM footprint holds ``MIN_DRAM_TILES`` tiles of 4-byte reads (on a real GPU, all of them)."""
    footprint = int(settings.dram_l2_multiple * l2_bytes)
    points = []
    for threads in settings.sweep_threads:
        limit = most(threads)
        for per_sm in sorted({*(b for b in settings.sweep_blocks if b < limit), limit}):
            if per_sm >= 1 and MIN_DRAM_TILES * sm_count * per_sm * threads * 4 * patterns.ACCESSES <= footprint:
                points.append((threads, per_sm))
    return points


def pattern_pair(
    pattern: patterns.Pattern,
    most_per_sm: int,
    sm_count: int,
    threads: int,
    l2_bytes: int,
    buffer_bytes: int,
    settings: Settings,
    peak_gbps: float | None,
) -> tuple[PatternStream, Lengths]:
    """One pass of a goodput launch and the passes of the short and long launch. Blocks per SM: as many as
    resident (``most_per_sm``) while the buffer holds ``pattern_iterations`` of them, else the fewest
    (one), if it holds two of those. A pass moves ``pattern_moved_l2_multiple`` L2 sizes, as far as the
    buffer reaches, so that the next pass finds nothing of it left in L2. Counted in whole 32-byte L2
    sectors, the least a pass can move (a larger DRAM granule only makes it move more): the extra passes
    are sized as a DRAM probe's (:func:`extra_passes`) from that too."""
    shapes = [PatternStream(pattern, sm_count * per_sm, threads, 1) for per_sm in range(most_per_sm, 0, -1)]
    one = next((o for o in shapes if buffer_bytes // o.footprint >= settings.pattern_iterations), shapes[-1])
    room = buffer_bytes // one.footprint
    if room < 2:
        raise ProbeFailure(
            f"pattern {pattern.name}: a {buffer_bytes}-byte buffer holds under two iterations of one block per SM"
        )
    least = one.moved_bytes(patterns.L2_SECTOR_BYTES)
    wanted = math.ceil(settings.pattern_moved_l2_multiple * l2_bytes / least)
    once = PatternStream(pattern, one.blocks, threads, min(room, max(settings.pattern_iterations, wanted)))
    return once, extra_passes(once.moved_bytes(patterns.L2_SECTOR_BYTES), peak_gbps)


# ---- the planned work, for the time budget -------------------------------------------------------------


@dataclass(frozen=True)
class Work:
    """What one probe plans at most: bytes through each level and launches (timed, flush, warm-up)."""

    probe: str
    level: str  # "dram", "l2", "cached" (L1 and shared: bytes per SM), "check" (read back to the host and
    # compared), or what the host does to predict results: "generate" (the source, then uploaded), "add"
    # (the source's request sums and each width's group sums: elementwise adds), "gather" (the words a
    # goodput pattern reads, summed)
    bytes: int
    launches: int  # kernel launches: timed, flushes, warm-ups


def _differenced(probe: str, level: str, unit_bytes: int, lengths: Lengths, repeats: int, flush: int) -> Work:
    """A :class:`~gpuprobe.families.differencing.Difference` of event-timed launches at its most repeats:
    each sample a short and a long launch of ``unit_bytes`` per pass or iteration, one short launch
    first (the events' warm-up), each launch after a flush of ``flush`` bytes (0: none)."""
    launches = 2 * repeats + 1
    moved = (repeats * (lengths.short + lengths.long) + lengths.short) * unit_bytes + launches * flush
    return Work(probe, level, moved, launches * (2 if flush else 1))


def planned_work(
    device: Device, settings: Settings, most_blocks: Callable[[str, int], int], peak_gbps: float | None
) -> list[Work]:
    """Every probe's work at ``max_repeats`` samples, from the same plans ``measure`` launches;
    ``most_blocks(kernel, threads)`` stands for the occupancy API, ``peak_gbps`` is the DRAM's peak."""
    s, sms, l2, repeats = settings, device.sm_count, device.l2_bytes, settings.sampling.max_repeats
    flush = int(s.flush_l2_multiple * l2)
    buffer = source_bytes(device, s)
    # the source generated and uploaded once, its request sums made once (a pass over it), and from them
    # (a quarter of its bytes) each access width's group sums
    work = [Work("bandwidth.dram.read.v16", "generate", buffer, 0),
            Work("bandwidth.dram.read.v16", "add", buffer + len(patterns.WIDTHS) * buffer // 4, 0)]  # fmt: skip
    for op in OPS:
        factor = 2 if op == "copy" else 1
        for width in STREAM_WIDTHS:
            name, kernel = f"bandwidth.dram.{op}.v{width}", stream_kernel(op, width)
            per_sm = dram_blocks(width, s.threads, most_blocks(kernel, s.threads), sms, l2, s)
            stream = dram_stream(width, sms * per_sm, s.threads, l2, s)
            lengths = extra_passes(factor * stream.footprint, peak_gbps)
            work.append(_differenced(name, "dram", factor * stream.footprint, lengths, repeats, flush))
            if op == "copy" and width == 16:  # the runtime's copy of the same footprint, sampled as often
                work.append(_differenced(name, "dram", factor * stream.footprint, lengths, repeats, flush))
            # the first launch's first check reads all it wrote, every other check at most check_words
            later = 2 * repeats * min(4 * s.check_words, stream.footprint)
            work.append(Work(name, "check", stream.footprint + later if op != "read" else 0, 0))
            footprint = int(s.l2_fraction * l2) // factor
            threads, per_sm = fit_l2_blocks(width, s.threads, partial(most_blocks, kernel), sms, footprint)
            once, lengths = l2_pair(width, sms * per_sm, threads, footprint, factor, s)
            work.append(
                _differenced(f"bandwidth.l2.{op}.v{width}", "l2", factor * once.footprint, lengths, repeats, flush)
            )
    cached = [("l1.read", "gp_bw_read_ca_v{w}")] + [(f"shared.{op}", SHARED_KERNELS[op]) for op in OPS]
    for level, kernel in cached:
        for width in STREAM_WIDTHS:
            wanted = max(1, s.cached_tile_per_sm // (s.threads * width * patterns.ACCESSES))
            per_sm = min(wanted, most_blocks(kernel.format(w=width, bits=8 * width), s.threads))
            short_iters, long_iters = cached_pair(width, per_sm, s.threads, s)
            per_iteration = per_sm * s.threads * width * patterns.ACCESSES
            work.append(
                Work(
                    f"bandwidth.{level}.v{width}",
                    "cached",
                    repeats * per_iteration * (short_iters + long_iters) * (2 if level == "shared.copy" else 1),
                    2 * repeats,
                )
            )
    for threads, per_sm in sweep_points(s, lambda t: most_blocks("gp_bw_read_cg_v4", t), sms, l2):
        stream = dram_stream(4, sms * per_sm, threads, l2, s)
        lengths = extra_passes(stream.footprint, peak_gbps)
        work.append(
            _differenced(
                "bandwidth.dram.occupancy.v4", "dram", stream.footprint, lengths, s.sweep_sampling.max_repeats, flush
            )
        )
    for name, pattern in PATTERNS.items():
        most = most_blocks(f"gp_bw_pattern_v{pattern.width}", s.threads)
        once, lengths = pattern_pair(pattern, most, sms, s.threads, l2, buffer, s, peak_gbps)
        moved = once.moved_bytes(patterns.LINE_BYTES)  # the most a pass can move: whole lines
        work.append(_differenced(f"bandwidth.goodput.{name}", "dram", moved, lengths, repeats, flush))
        work.append(Work(f"bandwidth.goodput.{name}", "gather", once.useful_bytes, 0))  # the pass's sums, once
    return work
