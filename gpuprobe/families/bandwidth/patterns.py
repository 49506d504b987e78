"""The bandwidth family's plans: launch shapes, the bytes they move, and what a correct kernel returns.

Every stream kernel (ptx/bandwidth/bandwidth.ptx) maps thread ``t`` of the launch to 2 KiB group
``t // (512 / width)`` at byte ``(t % (512 / width)) * width``, and makes four accesses per
iteration at +0, +512, +1024 and +1536 bytes; the pointer then advances by ``step``. So a launch of
``T`` threads covers ``T * width * 4`` bytes per iteration (its *tile*), contiguously, and with
``step == tile`` a pass of ``iters`` iterations sweeps ``iters * tile`` bytes once.

The predictions here (per-thread sums, memory units touched) are computed from that layout alone, with
NumPy reshapes of the host-known source words, so a kernel that skipped, repeated or misplaced an
access is caught.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

ACCESSES = 4  # accesses per thread per iteration (fixed by the PTX)
REQUEST_BYTES = 512  # the immediate offset between a thread's accesses
GROUP_BYTES = ACCESSES * REQUEST_BYTES  # 2 KiB: the bytes a group of 512 / width threads covers per iteration
L2_SECTOR_BYTES = 32  # the least an NVIDIA L2 allocates and fetches: a lower bound on what a request moves
LINE_BYTES = 128
WIDTHS = (4, 8, 16)
WORD = np.dtype(np.uint32)


def source_words(count: int, seed: int) -> np.ndarray:
    """Deterministic, non-repeating 32-bit words for a source buffer (fast for hundreds of MB)."""
    words = np.arange(seed & 0xFFFF, (seed & 0xFFFF) + count, dtype=np.uint32)
    words *= np.uint32(0x9E3779B1)  # a bijection of the index: every word differs from its neighbours
    return words


@dataclass(frozen=True)
class Stream:
    """One launch of a stream kernel: its grid, access width and how far it goes."""

    width: int
    blocks: int
    threads: int  # per block
    iters: int
    passes: int = 1
    sweep: bool = True  # step == tile (a contiguous sweep), else step == 0 (re-read one tile)

    def __post_init__(self) -> None:
        if self.width not in WIDTHS:
            raise ValueError(f"Stream: width must be one of {WIDTHS}, not {self.width}")
        if min(self.blocks, self.threads, self.iters, self.passes) < 1:
            raise ValueError("Stream: blocks, threads, iters and passes must be at least 1")
        if self.tile % GROUP_BYTES:
            raise ValueError(f"Stream: {self.total_threads} threads x {self.width} B do not fill whole 2 KiB groups")

    @property
    def total_threads(self) -> int:
        return self.blocks * self.threads

    @property
    def tile(self) -> int:
        """Bytes the whole launch reads (or writes) per iteration."""
        return self.total_threads * self.width * ACCESSES

    @property
    def step(self) -> int:
        return self.tile if self.sweep else 0

    @property
    def footprint(self) -> int:
        """Distinct bytes touched."""
        return self.tile * (self.iters if self.sweep else 1)

    @property
    def bytes_accessed(self) -> int:
        """Bytes the launch loads (or stores), counting repeats."""
        return self.tile * self.iters * self.passes


def sweep_for(width: int, blocks: int, threads: int, footprint: int, passes: int = 1) -> Stream:
    """The contiguous sweep of at most ``footprint`` bytes (at least one tile) by this grid."""
    tile = blocks * threads * width * ACCESSES
    return Stream(width, blocks, threads, max(1, footprint // tile), passes)


def request_sums(words: np.ndarray) -> np.ndarray:
    """Per 2 KiB group of ``words``, at each word offset of a 512-byte request, the sum of the group's
    four words there (one per access): [groups, 128], 32-bit and wrapping as the kernels' sums do. One
    pass over the source serves every width's :func:`group_sums`."""
    usable = len(words) // (GROUP_BYTES // WORD.itemsize) * (GROUP_BYTES // WORD.itemsize)
    accesses = words[:usable].reshape(-1, ACCESSES, REQUEST_BYTES // WORD.itemsize)
    return accesses[:, 0] + accesses[:, 1] + accesses[:, 2] + accesses[:, 3]


def group_sums(requests: np.ndarray, width: int) -> np.ndarray:
    """Per 2 KiB group and per thread slot in it, the 32-bit sum of the words that thread loads from
    the group: [groups, 512 / width], from the groups' :func:`request_sums` (a thread's ``width`` bytes
    are adjacent offsets). Computed once per width and source, it turns the prediction for any launch
    shape into a small reshape (see :func:`stream_sums`)."""
    per_thread = width // WORD.itemsize
    sums = requests[:, ::per_thread].copy()
    for word in range(1, per_thread):
        sums += requests[:, word::per_thread]
    return sums


def stream_sums(table: np.ndarray, stream: Stream) -> np.ndarray:
    """Each thread's 32-bit sum of every word it loads, for a read from offset 0 of the words whose
    :func:`group_sums` for the stream's width is ``table``."""
    groups = stream.tile // GROUP_BYTES
    rows = table[: groups * (stream.iters if stream.sweep else 1)]
    sums = rows.reshape(-1, groups * table.shape[1]).sum(axis=0, dtype=np.uint64)
    repeat = stream.passes * (1 if stream.sweep else stream.iters)
    return ((sums * np.uint64(repeat)) & np.uint64(0xFFFFFFFF)).astype(np.uint32)


@dataclass(frozen=True)
class SharedStream:
    """One launch of a shared-memory kernel: every block reads, writes or copies between two halves,
    alternating (the offset xor the half size, so the halves must be a power of two: threads are)."""

    width: int
    blocks: int
    threads: int
    iters: int

    @property
    def half_bytes(self) -> int:
        return self.threads * self.width * ACCESSES

    @property
    def shared_bytes(self) -> int:
        """Dynamic shared memory per block: two halves."""
        return 2 * self.half_bytes

    @property
    def bytes_per_block(self) -> int:
        return self.half_bytes * self.iters


def shared_sums(words: np.ndarray, plan: SharedStream) -> np.ndarray:
    """Each thread's 32-bit sum: iteration i reads half i % 2."""
    one_block = Stream(plan.width, 1, plan.threads, 1, sweep=False)
    half_words = plan.half_bytes // WORD.itemsize
    halves = (request_sums(words[k * half_words : (k + 1) * half_words]) for k in (0, 1))
    first, second = (stream_sums(group_sums(half, plan.width), one_block).astype(np.uint64) for half in halves)
    in_second = plan.iters // 2
    block = first * np.uint64(plan.iters - in_second) + second * np.uint64(in_second)
    return np.tile((block & np.uint64(0xFFFFFFFF)).astype(np.uint32), plan.blocks)


@dataclass(frozen=True)
class Pattern:
    """A strided or misaligned read: lane ``l`` reads ``width`` bytes at ``offset + l * lane_stride``
    of its request's slot; slots are ``slot`` bytes apart (whole 128-byte lines), so two requests never
    share a memory unit of up to 128 bytes and none is served from what another fetched."""

    name: str
    width: int
    lane_stride: int
    offset: int = 0

    def __post_init__(self) -> None:
        if self.width not in WIDTHS or self.lane_stride < self.width or (self.lane_stride | self.offset) % 4:
            raise ValueError(f"Pattern {self.name}: lanes of {WIDTHS} bytes, apart by at least that, in whole words")

    @property
    def slot(self) -> int:
        span = self.offset + 31 * self.lane_stride + self.width
        return math.ceil(span / LINE_BYTES) * LINE_BYTES

    @property
    def useful_bytes(self) -> int:
        """Bytes one warp request delivers to the threads."""
        return 32 * self.width

    def units(self, unit_bytes: int) -> int:
        """Distinct ``unit_bytes``-aligned units of memory one warp request touches (a power of two up to 128)."""
        if unit_bytes & (unit_bytes - 1) or not 0 < unit_bytes <= LINE_BYTES:
            raise ValueError(f"Pattern {self.name}: a memory unit is a power of two up to {LINE_BYTES} bytes")
        starts = self.offset + np.arange(32) * self.lane_stride
        return len({int(b) // unit_bytes for s in starts for b in (s, s + self.width - 1)})

    def moved_bytes(self, unit_bytes: int) -> int:
        """Bytes one warp request makes the memory move, when it moves whole ``unit_bytes`` units."""
        return self.units(unit_bytes) * unit_bytes

    def efficiency(self, unit_bytes: int) -> float:
        """Useful over moved bytes, when the memory moves whole ``unit_bytes`` units."""
        return self.useful_bytes / self.moved_bytes(unit_bytes)


STRIDES = (1, 2, 4, 8, 16, 32)  # lane strides of the 4-byte sweep, in words: 4 to 128 bytes apart
STRIDE_SWEEP = tuple(f"v4.stride{s}" for s in STRIDES)  # the patterns the DRAM access granule is read from
PATTERNS: dict[str, Pattern] = {
    p.name: p
    for p in [
        *(Pattern(name, 4, 4 * s) for name, s in zip(STRIDE_SWEEP, STRIDES, strict=True)),
        Pattern("v4.offset4", 4, 4, offset=4),
        Pattern("v16.stride1", 16, 16),
        Pattern("v16.offset16", 16, 16, offset=16),
    ]
}


@dataclass(frozen=True)
class PatternStream:
    """One launch of a pattern kernel: ``passes`` times ``iters`` iterations of four requests per warp."""

    pattern: Pattern
    blocks: int
    threads: int
    iters: int
    passes: int = 1

    @property
    def warps(self) -> int:
        return self.blocks * self.threads // 32

    @property
    def requests(self) -> int:
        return self.warps * ACCESSES * self.iters * self.passes

    @property
    def step(self) -> int:
        return self.warps * ACCESSES * self.pattern.slot

    @property
    def footprint(self) -> int:
        return self.step * self.iters

    @property
    def useful_bytes(self) -> int:
        return self.requests * self.pattern.useful_bytes

    def moved_bytes(self, unit_bytes: int) -> int:
        """Bytes the launch makes the memory move, when it moves whole ``unit_bytes`` units."""
        return self.requests * self.pattern.moved_bytes(unit_bytes)


def pattern_iteration_sums(words: np.ndarray, plan: PatternStream) -> np.ndarray:
    """Per iteration, each thread's 32-bit sum for a pattern read of ``words`` (the buffer as the kernel
    sees it, from the unshifted base: the pattern's offset is applied here): [iters, threads]; a launch of
    fewer iterations reads the first rows. The words each lane reads are strided views of the slots,
    lanes 0-30 one ``lane_stride`` apart (the last lane's stride may reach past the slot), summed without
    copying them out, wrapping at 32 bits as the kernel's sums do."""
    p = plan.pattern
    first, stride, width = (n // WORD.itemsize for n in (p.offset, p.lane_stride, p.width))
    slots = words[: plan.footprint // WORD.itemsize].reshape(plan.iters, plan.warps, ACCESSES, -1)
    last = first + 31 * stride
    lanes = slots[..., first:last].reshape(plan.iters, plan.warps, ACCESSES, 31, stride)[..., :width]
    sums = np.empty((plan.iters, plan.warps, 32), dtype=np.uint32)
    sums[..., :31] = lanes.sum(axis=(2, 4), dtype=np.uint32)
    sums[..., 31] = slots[..., last : last + width].sum(axis=(2, 3), dtype=np.uint32)
    return sums.reshape(plan.iters, -1)
