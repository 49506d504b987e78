"""Goodput of the access patterns ML kernels make, at DRAM and L2, reads and writes.

Fact ids: ``bandwidth.goodput.<pattern>.{useful,moved,efficiency}`` for DRAM reads (as the 4-byte stride sweep's
probes), ``bandwidth.goodput.<level_op>.<pattern>.{useful,moved,efficiency}`` for ``level_op`` in ``l2_read``,
``dram_write``, ``l2_write``; GB/s, GB/s, fraction. Each level/op other than DRAM reads also has its granule,
``bandwidth.goodput.<level_op>.granule_bytes``, fitted from its own 4-byte stride sweep as
:mod:`~gpuprobe.families.bandwidth.granule` fits the DRAM's.

Patterns (a :class:`Walk` each; element ``j`` of a pass, lane ``j % 32`` of warp request ``j // 32``):

* ``v2.stride1``, ``v4.strideS``, ``v16.stride1``: 2-, 4- and 16-byte elements, lanes ``S`` elements apart;
  ``v4.stride8`` stores 4 bytes in each 32-byte sector: the partial-sector write;
* ``column.fp32``: a column of a row-major fp32 matrix of 4 KiB rows, one 4-byte element per row (the warp
  reads 32 rows of one column, then the next column, a line further on);
* ``misaligned``: rows of 32 fp32 with a pitch of 33 (132 bytes, as a padded matrix): each warp reads a
  row that starts 4 bytes further past a sector boundary than the last;
* ``gather.N``: whole rows of N bytes (64, 256, 1024, 4096) at random row indices (a permutation: an
  embedding lookup or a paged KV cache), 16-byte lanes, the row index loaded per lane;
* ``transposed``: 32x32 fp32 tiles read column-wise, as a naive transpose reads them.

Matrix (:data:`MATRIX`): DRAM and L2 reads every pattern; DRAM and L2 writes ``v4.stride1``, ``v16.stride1``,
``v4.stride8`` (partial sector), ``column.fp32`` and ``gather.256`` (a scatter of rows). The ``v4.strideS`` sweep
of each level/op but DRAM reads is measured once, by its ``v4.stride1`` probe, and reused.

Launches (:func:`plan_pair`): at DRAM a sweep of ``pattern_moved_l2_multiple`` L2 sizes (as far as the source
buffer reaches), one pass against more, each after an L2 flush; at L2 every SM's blocks re-read a footprint within
``l2_fraction`` of the L2, the walk wrapped onto it (a power of two of its rows or tiles) so that a wide stride
still keeps every warp's requests in flight. Samples: ``sampling`` (3 to 7, until stable), as every stream of the
family. A first contact (``goodput_walks`` off) measures and plans none.

"Moved" is derived from the granule the suite measured for that level and direction (``moved_from`` in the
probe's ``goodput`` series says so; the ``launch`` series holds the bytes per launch for ``gpuprobe witness``):
at L2, the granules each warp request touches (the L2 serves every request, L1 bypassed); at DRAM, the
distinct granules a pass touches (what neighbouring requests share the L2 serves once). A gather adds its
row indices' bytes once a pass (they load through L1, where an L2 pass's re-reads find them). Guards: useful <=
moved, efficiency in (0, 1], a DRAM figure wholly above the DRAM's peak or an L2 one above :data:`L2_MARGIN` x
the L2 stream's measured rate fails the probe; every read's per-thread sums are checked, and each write's first
``FIRST_CHECKS`` x ``check_words`` words (then ``check_words``): every stored word and every word it must leave
alone.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device, Fact, ProbeOutcome, Results
from gpuprobe.families.bandwidth.granule import Granule, granule_from_rates
from gpuprobe.families.bandwidth.launches import Launch, Timer, timed_launch
from gpuprobe.families.bandwidth.patterns import ACCESSES, STRIDES, WORD
from gpuprobe.families.bandwidth.shapes import Settings, Work, extra_passes
from gpuprobe.families.base import Measured
from gpuprobe.families.differencing import Lengths, event_gbps
from gpuprobe.families.measuring import fact, unmeasured
from gpuprobe.families.sampling import stop_text, stops_recorded
from gpuprobe.families.streams import check_sums
from gpuprobe.judge.invariants import Check
from gpuprobe.output.plots import COLORS, DEFAULT_DPI, new_figure, png_bytes
from gpuprobe.runner.checked import POISON_BYTE
from gpuprobe.runner.launcher import probe_range

WARP = 32
REQUEST_ELEMENTS = WARP * ACCESSES  # elements a warp covers per iteration: four requests of 32 lanes
L2_SECTOR_BYTES = 32  # the least a request can move: what the pass lengths are sized from
L2_MARGIN = 1.2  # an L2 moved rate may exceed the L2 stream's measured 16-byte rate by this much: the stream is
# a lower bound on what the L2 serves (its 4- and 16-byte reads differ by up to ~10 % on H200, audit run 2), and a
# pattern touching more sectors per request can load the slices harder; 20 % above it is no longer noise
FIRST_CHECKS = 4  # a write launch's first check reads back this many check_words (16 MiB by default), later ones one
UNBOUNDED = 32  # a shift of 32 clears a 32-bit index (PTX clamps the shift): no further level


@dataclass(frozen=True)
class Walk:
    """Where element ``j`` of a pass lies: row ``u = j // elements``, at ``(u % rows) * pitch + ((u // rows) %
    columns) * column_step + (u // (rows * columns)) * tile_step + (j % elements) * width`` bytes, or (a gather)
    at ``index[u] * pitch + (j % elements) * width``. Counts are powers of two; ``rows`` 0 is unbounded."""

    name: str
    width: int
    pitch: int
    elements: int = 1  # per row
    rows: int = 0
    columns: int = 1
    column_step: int = 0
    tile_step: int = 0
    gather: bool = False

    def __post_init__(self) -> None:
        counts = (self.elements, self.rows or 1, self.columns)
        if self.width not in (2, 4, 16) or any(n & (n - 1) or n < 1 for n in counts):
            raise ValueError(f"Walk {self.name}: width 2, 4 or 16, counts powers of two")

    @property
    def block(self) -> tuple[int, int]:
        """(elements, bytes) of the unit the walk repeats: a row, or (bounded rows) a tile of rows x columns."""
        if self.rows:
            return self.elements * self.rows * self.columns, self.tile_step
        return self.elements, self.pitch

    def offsets(self, j: np.ndarray, index: np.ndarray | None = None, wrap: int = 0) -> np.ndarray:
        """Byte offsets of elements ``j`` (int64), a gather's rows from ``index``; ``wrap`` (a power of two, 0:
        none) blocks after the first, the walk starts over (block ``b`` is block ``b % wrap``)."""
        u, e = j // self.elements, j % self.elements
        if self.gather:
            if index is None:
                raise ValueError(f"Walk {self.name}: a gather needs its row indices")
            return index[u].astype(np.int64) * self.pitch + e * self.width
        if not self.rows:
            return (u % wrap if wrap else u) * self.pitch + e * self.width
        tiles = u // (self.rows * self.columns)
        return (
            (u % self.rows) * self.pitch
            + (u // self.rows) % self.columns * self.column_step
            + (tiles % wrap if wrap else tiles) * self.tile_step
            + e * self.width
        )

    def shape_args(self, wrap: int = 0) -> list[np.uint32]:
        """The kernel's shifts and masks: row shift, element mask, row mask, column shift and mask, tile shift and
        mask (a ``wrap`` of blocks: the rows of a walk of unbounded rows, else its tiles)."""
        every = 0xFFFFFFFF
        if not self.rows:
            values = (self.elements.bit_length() - 1, self.elements - 1, wrap - 1 if wrap else every, UNBOUNDED, 0,
                      UNBOUNDED, 0)  # fmt: skip
        else:
            row_bits, column_bits = self.rows.bit_length() - 1, self.columns.bit_length() - 1
            values = (self.elements.bit_length() - 1, self.elements - 1, self.rows - 1, row_bits, self.columns - 1,
                      row_bits + column_bits, wrap - 1 if wrap else every)  # fmt: skip
        return [np.uint32(v) for v in values]

    def period(self, granule: int) -> int:
        """Elements after which the walk's layout repeats on ``granule``-aligned units, in whole requests."""
        elements, nbytes = self.block
        blocks = granule // math.gcd(nbytes, granule)
        return math.lcm(elements * blocks, WARP)

    def _units(self, granule: int, per_request: bool) -> tuple[int, int]:
        """(elements, granules) of one period: the granules its requests touch, each request counted apart
        (``per_request``) or each granule once."""
        n = self.period(granule)
        if self.gather:  # rows at random, ``pitch``-aligned: none shares a granule with another
            return n, n // self.elements * -(-self.elements * self.width // granule)
        j = np.arange(n, dtype=np.int64)
        starts = self.offsets(j) // granule
        ends = (self.offsets(j) + self.width - 1) // granule
        owners = j // WARP if per_request else np.zeros(n, dtype=np.int64)
        return n, len({(int(r), int(g)) for r, a, b in zip(owners, starts, ends, strict=True) for g in (a, b)})

    def index_bytes(self, elements: int, granule: int) -> int:
        """A gather's row indices (4 bytes a row, contiguous) in whole granules, each granule once: the indices
        load through L1 (ld.global.nc), which serves the lanes and requests that share a row's index."""
        return -(-(elements // self.elements) * 4 // granule) * granule if self.gather else 0

    def moved_bytes(self, elements: int, granule: int, per_request: bool) -> int:
        """Bytes a pass of ``elements`` (whole periods) makes the level move in ``granule``-byte units for the
        elements alone (a gather's indices: :meth:`index_bytes`)."""
        n, units = self._units(granule, per_request)
        return elements // n * units * granule

    def useful_bytes(self, elements: int) -> int:
        return elements * self.width

    def footprint(self, elements: int) -> int:
        n, nbytes = self.block
        return -(-elements // n) * nbytes


def _sweep(width: int) -> dict[str, Walk]:
    return {f"v{width}.stride{s}": Walk(f"v{width}.stride{s}", width, width * s) for s in STRIDES}


WALKS: dict[str, Walk] = {
    w.name: w
    for w in [
        Walk("v2.stride1", 2, 2),
        *_sweep(4).values(),
        Walk("v16.stride1", 16, 16),
        Walk("column.fp32", 4, 4096, rows=32, columns=32, column_step=128, tile_step=32 * 4096),
        Walk("misaligned", 4, 132, elements=32),
        *(Walk(f"gather.{n}", 16, n, elements=n // 16, gather=True) for n in (64, 256, 1024, 4096)),
        Walk("transposed", 4, 128, rows=32, columns=32, column_step=4, tile_step=4096),
    ]
}
SWEEP = tuple(_sweep(4))
READS = ("v2.stride1", "v4.stride1", "v16.stride1", "column.fp32", "misaligned", "gather.64", "gather.256",
         "gather.1024", "gather.4096", "transposed")  # fmt: skip
WRITES = ("v4.stride1", "v16.stride1", "v4.stride8", "column.fp32", "gather.256")
EXISTING = ("v4.stride1", "v16.stride1")  # DRAM reads the older pattern kernels measure (bandwidth.goodput.<p>)
MATRIX: dict[str, tuple[str, ...]] = {
    "dram_read": tuple(p for p in READS if p not in EXISTING),
    "l2_read": READS,
    "dram_write": WRITES,
    "l2_write": WRITES,
}
STREAM_FIGURE = {"l2_read": "bandwidth.l2_read.v16", "l2_write": "bandwidth.l2_write.v16"}


def probe_name(level_op: str, pattern: str) -> str:
    """``bandwidth.goodput.<pattern>`` for DRAM reads, else ``bandwidth.goodput.<level_op>.<pattern>``."""
    return f"bandwidth.goodput.{pattern}" if level_op == "dram_read" else f"bandwidth.goodput.{level_op}.{pattern}"


def granule_probe(level_op: str) -> str:
    """The probe that reports a level/op's granule (its unit-stride 4-byte walk, which measures the sweep)."""
    return probe_name(level_op, "v4.stride1")


def kernel_of(walk: Walk, op: str) -> str:
    if walk.gather:
        return "gp_bw_gather_v16" if op == "read" else "gp_bw_scatter_b128"
    return f"gp_bw_walk_v{walk.width}" if op == "read" else f"gp_bw_walk_store_b{8 * walk.width}"


def split(level_op: str) -> tuple[str, str]:
    level, op = level_op.split("_")
    return level, op


# ---- one launch's plan ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class WalkStream:
    """One launch of a walk kernel: ``iters`` iterations of four requests per warp make a pass; each iteration
    goes on to the next elements (a DRAM sweep) or re-reads the same (``repeat``: the L2, whose footprint is one
    iteration, so that every SM's blocks fit in it whatever the pattern's spread)."""

    walk: Walk
    blocks: int
    threads: int
    iters: int
    passes: int = 1
    repeat: bool = False
    wrap: int = 0  # blocks (rows or tiles) after which the walk starts over: 0, none

    @property
    def warps(self) -> int:
        return self.blocks * self.threads // WARP

    @property
    def jump(self) -> int:
        """Elements the kernel advances per iteration: the whole grid's, or none."""
        return 0 if self.repeat else self.warps * REQUEST_ELEMENTS

    @property
    def distinct_iters(self) -> int:
        return 1 if self.repeat else self.iters

    @property
    def elements(self) -> int:
        """Distinct elements of one pass."""
        return self.warps * REQUEST_ELEMENTS * self.distinct_iters

    @property
    def accesses(self) -> int:
        """Elements one pass accesses, repeats counted."""
        return self.warps * REQUEST_ELEMENTS * self.iters

    @property
    def footprint(self) -> int:
        if self.wrap:
            return min(self.walk.footprint(self.elements), self.wrap * self.walk.block[1])
        return self.walk.footprint(self.elements)

    @property
    def useful_bytes(self) -> int:
        """Bytes one pass delivers to (or takes from) the threads."""
        return self.walk.useful_bytes(self.accesses)

    def moved_bytes(self, granule: int, per_request: bool) -> int:
        """Bytes one pass makes the level move: its elements' (:meth:`Walk.moved_bytes`), each repeat of the
        footprint counted, and a gather's row indices once (a repeat finds them in L1)."""
        repeats = self.iters // self.distinct_iters
        return self.walk.moved_bytes(self.elements, granule, per_request) * repeats + self.walk.index_bytes(
            self.elements, granule
        )


def fit_stream(walk: Walk, sms: int, threads: int, most_per_sm: int, room: int, least_iters: int) -> WalkStream:
    """A DRAM sweep over at most ``room`` bytes with the most blocks per SM (up to ``most_per_sm``) that still
    makes ``least_iters`` iterations, else one block per SM with as many iterations as fit (at least two)."""
    for per_sm in range(most_per_sm, 0, -1):
        one = WalkStream(walk, sms * per_sm, threads, 1)
        iters = room // one.footprint if one.footprint else 0
        while iters and WalkStream(walk, one.blocks, threads, iters).footprint > room:
            iters -= 1
        if iters >= least_iters or (per_sm == 1 and iters >= 2):
            return WalkStream(walk, one.blocks, threads, iters)
    raise ProbeFailure(f"goodput {walk.name}: {room} bytes hold under two iterations of one block per SM")


def fit_resident(walk: Walk, sms: int, threads: int, most_per_sm: int, room: int, iters: int) -> WalkStream:
    """An L2 pass: ``iters`` re-reads of one iteration of every SM's ``most_per_sm`` blocks, the walk wrapped onto
    the most blocks (rows or tiles, a power of two) that fit in ``room`` bytes, so every SM keeps its requests in
    flight whatever the pattern's spread."""
    stream = WalkStream(walk, sms * most_per_sm, threads, iters, repeat=True)
    block_elements, block_bytes = walk.block
    fitting = room // block_bytes
    if fitting < 1:
        raise ProbeFailure(f"goodput {walk.name}: {room} bytes hold not one {block_bytes}-byte block")
    needed = -(-stream.elements // block_elements)
    return replace(stream, wrap=min(1 << (fitting.bit_length() - 1), 1 << (needed - 1).bit_length()))


def element_view(walk: Walk, base: np.ndarray, first: int, count: int, index: np.ndarray | None) -> np.ndarray:
    """Elements ``first`` to ``first + count`` (whole blocks of the walk) of ``base`` (a byte buffer) as a view in
    element order, [element, word] (a 2-byte element one uint16): the walk's mixed-radix index (tile, column, row,
    element) turned into strides, no index arrays; a gather's rows picked by ``index`` (a copy)."""
    words = 1 if walk.width == 2 else walk.width // WORD.itemsize
    dtype = np.uint16 if walk.width == 2 else np.uint32
    data = base.view(dtype)
    item = data.itemsize
    if walk.gather:
        rows = data[: len(data) // (walk.pitch // item) * (walk.pitch // item)].reshape(-1, walk.pitch // item)
        picked = rows[index[first // walk.elements : (first + count) // walk.elements]]
        return picked[:, : walk.elements * walk.width // item].reshape(count, words)
    block_elements, block_bytes = walk.block
    blocks = count // block_elements
    origin = first // block_elements * block_bytes
    if walk.rows:
        shape = (blocks, walk.columns, walk.rows, walk.elements, words)
        strides = (walk.tile_step, walk.column_step, walk.pitch, walk.width, item)
    else:
        shape, strides = (blocks, walk.elements, words), (walk.pitch, walk.width, item)
    view = np.lib.stride_tricks.as_strided(data[origin // item :], shape=shape, strides=strides, writeable=True)
    return view.reshape(count, words) if view.flags.c_contiguous else view


def _chunks(stream: WalkStream, most: int = 1 << 24) -> list[tuple[int, int]]:
    """(first element, count) of a pass's distinct elements in chunks of whole iterations, at most ``most`` each."""
    per = stream.warps * REQUEST_ELEMENTS
    step = max(1, most // per) * per
    return [(f, min(step, stream.elements - f)) for f in range(0, stream.elements, step)]


def expected_sums(words: np.ndarray, stream: WalkStream, index: np.ndarray | None) -> np.ndarray:
    """Each thread's 32-bit sum of one pass (as the kernel adds: a 2-byte load widened, a 16-byte one as four
    words), from the source's words; a launch's sums are this times its passes. Element j of an iteration is
    thread ``32 (j // 128) + j % 32``'s access ``(j // 32) % 4``."""
    total = np.zeros((stream.warps, WARP), dtype=np.uint64)
    for first, count in _chunks(stream):
        distinct = min(count, stream.wrap * stream.walk.block[0]) if stream.wrap and not stream.walk.gather else count
        view = element_view(stream.walk, words.view(np.uint8), first, distinct, index)
        per_element = np.resize(view.reshape(-1, view.shape[-1]).sum(axis=1, dtype=np.uint64), count)  # wrapped
        total += per_element.reshape(-1, stream.warps, ACCESSES, WARP).sum(axis=(0, 2), dtype=np.uint64)
    total *= np.uint64(stream.iters // stream.distinct_iters)
    return (total.reshape(-1) & np.uint64(0xFFFFFFFF)).astype(np.uint32)


def written_words(stream: WalkStream, index: np.ndarray | None, value: np.ndarray, count: int) -> np.ndarray:
    """The destination's first ``count`` words after a write pass: ``value`` where an element is stored, the poison
    elsewhere (a partial-sector write must leave its sectors' other words alone). Only the blocks (rows, tiles)
    that reach into those words are predicted."""
    walk = stream.walk
    block_elements, block_bytes = walk.block
    blocks = min(-(-count * WORD.itemsize // block_bytes), stream.elements // block_elements, stream.wrap or 1 << 62)
    poison = np.uint32(int.from_bytes(bytes([POISON_BYTE]) * 4, "little"))
    expected = np.full(max(count, blocks * block_bytes // WORD.itemsize), poison)
    per = walk.width // WORD.itemsize
    if walk.gather:  # a view cannot pick rows: store through the row indices that land in the words
        rows = expected[: len(expected) // (walk.pitch // WORD.itemsize) * (walk.pitch // WORD.itemsize)]
        rows = rows.reshape(-1, walk.pitch // WORD.itemsize)
        picked = index[index < len(rows)]
        rows[picked, : walk.elements * per] = np.tile(value[:per], walk.elements)
    else:
        view = element_view(walk, expected.view(np.uint8), 0, blocks * block_elements, None)
        view[...] = value[: view.shape[-1]]
    return expected[:count]


# ---- measuring -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class MeasuredWalk:
    """One walk measured at one level/op: useful GB/s samples, its pass, the passes of its two launches."""

    useful: list[float]
    once: WalkStream
    lengths: Lengths
    stopped: str


@dataclass
class Walks:
    """What the goodput walks of one measuring process keep: each (level/op, pattern) measured once, each
    level/op's granule once, the row indices of each gather."""

    measured: dict[tuple[str, str], MeasuredWalk] = field(default_factory=dict)
    granules: dict[str, Granule] = field(default_factory=dict)
    indices: dict[tuple[str, str], tuple[np.ndarray, Any]] = field(default_factory=dict)
    values_stored: int = 0


@dataclass(frozen=True)
class Bench:
    """What the family's bench lends the walks: its request, timer, buffers, occupancy, the DRAM read granule,
    the DRAM peak guard and peak, and the L2 stream rates measured so far."""

    request: Any
    timer: Timer
    words: np.ndarray
    src: Any
    settings: Settings
    blocks_per_sm: Callable[[str, int], int]
    dram_read_granule: Callable[[], Granule]
    within_peak: Callable[[Fact], Fact]
    peak_gbps: float | None
    l2_rates: dict[str, float]
    walks: Walks


def _rows(bench: Bench, level_op: str, stream: WalkStream) -> tuple[np.ndarray, Any] | tuple[None, None]:
    """A gather's row indices (a random permutation of the table's rows: none read twice in a pass), uploaded."""
    if not stream.walk.gather:
        return None, None
    key = (level_op, stream.walk.name)
    if key not in bench.walks.indices:
        rows = stream.elements // stream.walk.elements
        distinct = min(rows, stream.wrap) if stream.wrap else rows  # an L2 gather's table: the rows that fit
        order = np.random.default_rng(bench.settings.seed).permutation(distinct).astype(np.uint32)
        index = np.resize(order, rows)
        bench.walks.indices[key] = (index, bench.request.launcher.upload(index))
    return bench.walks.indices[key]


def _shape_args(stream: WalkStream) -> list[object]:
    w = stream.walk
    if w.gather:
        return [np.uint32(w.elements.bit_length() - 1), np.uint32(w.elements - 1), np.uint32(w.pitch)]
    return [*w.shape_args(stream.wrap), np.uint32(w.pitch), np.uint32(w.column_step), np.uint32(w.tile_step)]


def _read_launch(bench: Bench, level_op: str, stream: WalkStream, per_pass: np.ndarray) -> Launch:
    kernel = kernel_of(stream.walk, "read")
    _, index_buffer = _rows(bench, level_op, stream)
    rows = [index_buffer] if stream.walk.gather else []
    args = [bench.src, *rows, *_shape_args(stream), np.uint32(stream.jump), np.uint32(stream.iters),
            np.uint32(stream.passes), None, None]  # fmt: skip
    expected = (per_pass.astype(np.uint64) * np.uint64(stream.passes) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
    launch = Launch(kernel, args, stream.blocks, stream.threads, lambda first: None)
    launch.check = lambda first: check_sums(kernel, bench.timer.sums_of(launch), expected)
    return launch


def _write_launch(bench: Bench, level_op: str, stream: WalkStream, dst: Any) -> Launch:
    """A store to ``dst`` (the footprint's size) of a value that changes every launch; the host reads back its first
    ``FIRST_CHECKS`` x ``check_words`` words (the first time; later ``check_words``) and compares every word: stored
    where predicted, the poison elsewhere."""
    kernel = kernel_of(stream.walk, "write")
    index, index_buffer = _rows(bench, level_op, stream)
    rows = [index_buffer] if stream.walk.gather else []
    args: list[object] = [dst, None, *rows, *_shape_args(stream), np.uint32(stream.jump),
                          np.uint32(stream.iters), np.uint32(stream.passes), None]  # fmt: skip
    state: dict[str, Any] = {}

    def prepare() -> None:
        bench.walks.values_stored += 1
        value = np.arange(4, dtype=np.uint32) + np.uint32(0x5EED0000 + bench.walks.values_stored)
        state["value"] = value
        args[1] = bench.request.launcher.upload(value)
        bench.request.launcher.fill(dst, POISON_BYTE)

    def check(first: bool) -> None:
        count = min(stream.footprint // WORD.itemsize, (FIRST_CHECKS if first else 1) * bench.settings.check_words)
        expected = written_words(stream, index, state["value"], count)
        got = np.asarray(bench.request.launcher.read(dst, "uint32", count))
        wrong = np.flatnonzero(got != expected[:count])
        if len(wrong):
            raise ProbeFailure(
                f"{kernel} ({stream.walk.name}): {len(wrong)} of {count} words differ from the host's prediction "
                f"(first at byte {int(wrong[0]) * 4}: {int(got[wrong[0]]):#x}, expected {int(expected[wrong[0]]):#x})"
            )

    return Launch(kernel, args, stream.blocks, stream.threads, check, prepare=prepare, uses_sums=False)


def plan_pair(walk: Walk, level_op: str, device: Device, settings: Settings, most: Callable[[int], int],
              buffer_bytes: int, peak_gbps: float | None) -> tuple[WalkStream, Lengths]:  # fmt: skip
    """One pass and the passes of the short and the long launch (``most(threads)``: blocks an SM holds). DRAM: the
    sweep that moves ``pattern_moved_l2_multiple`` L2 sizes (counted in 32-byte sectors, the least a pass moves) as
    far as the buffer reaches, one pass against as many more as the DRAM's peak needs to resolve; L2:
    ``pattern_iterations`` re-reads of a footprint within ``l2_fraction`` of the L2, passes until the long launch
    moves ``l2_long_bytes``."""
    level, sms = split(level_op)[0], device.sm_count
    if level == "dram":  # as far as the buffer reaches, a pass moves pattern_moved_l2_multiple L2 sizes of sectors
        whole = fit_stream(
            walk, sms, settings.threads, most(settings.threads), buffer_bytes, settings.pattern_iterations
        )
        per_iteration = whole.moved_bytes(L2_SECTOR_BYTES, per_request=False) / whole.iters
        wanted = math.ceil(settings.pattern_moved_l2_multiple * device.l2_bytes / per_iteration)
        once = replace(whole, iters=min(whole.iters, max(settings.pattern_iterations, wanted)))
        return once, extra_passes(once.moved_bytes(L2_SECTOR_BYTES, per_request=False), peak_gbps)
    room = int(settings.l2_fraction * device.l2_bytes)
    once = fit_resident(walk, sms, settings.threads, most(settings.threads), room, settings.pattern_iterations)
    least = once.moved_bytes(L2_SECTOR_BYTES, per_request=True)
    passes = max(2, math.ceil(settings.l2_long_bytes / least))
    return once, Lengths(min(passes - 1, max(1, int(passes * settings.short_fraction))), passes, 1)


def _measure(bench: Bench, level_op: str, pattern: str) -> MeasuredWalk:
    walk, op = WALKS[pattern], split(level_op)[1]
    device = bench.request.device
    kernel = kernel_of(walk, op)
    most = partial(bench.blocks_per_sm, kernel)
    once, lengths = plan_pair(walk, level_op, device, bench.settings, most, 4 * len(bench.words), bench.peak_gbps)
    if op == "read":
        index, _ = _rows(bench, level_op, once)
        per_pass = expected_sums(bench.words, once, index)
        ms_of = timed_launch(bench.timer, lambda n: _read_launch(bench, level_op, replace(once, passes=n), per_pass))
    else:
        dst = bench.request.launcher.alloc(once.footprint)  # its own: poisoned whole before every launch
        ms_of = timed_launch(bench.timer, lambda n: _write_launch(bench, level_op, replace(once, passes=n), dst))
    what = probe_name(level_op, pattern)
    with bench.request.launcher.nvtx_range(probe_range(what)), stops_recorded() as stops:
        useful, lengths = event_gbps(ms_of, lengths, once.useful_bytes, what, bench.settings.sampling)
    return MeasuredWalk(useful, once, lengths, stop_text(stops))


def measured(bench: Bench, level_op: str, pattern: str) -> MeasuredWalk:
    key = (level_op, pattern)
    if key not in bench.walks.measured:
        bench.walks.measured[key] = _measure(bench, level_op, pattern)
    return bench.walks.measured[key]


def granule(bench: Bench, level_op: str) -> Granule:
    """The level/op's granule: DRAM reads from the family's pattern sweep, others from their own walk sweep."""
    if level_op == "dram_read":
        return bench.dram_read_granule()
    if level_op not in bench.walks.granules:
        rates = {WALKS[p].pitch // 4: float(np.median(measured(bench, level_op, p).useful)) for p in SWEEP}
        bench.walks.granules[level_op] = granule_from_rates(rates)
    return bench.walks.granules[level_op]


def _granule_fact(bench: Bench, level_op: str, name: str) -> Fact:
    found = granule(bench, level_op)
    fact_id = f"bandwidth.goodput.{level_op}.granule_bytes"
    if found.bytes is None:
        return unmeasured(fact_id, "byte", name, found.why)
    useful = {WALKS[p].pitch // 4: measured(bench, level_op, p).useful for p in SWEEP}
    rounds = min(len(s) for s in useful.values())
    refits = [granule_from_rates({s: u[r] for s, u in useful.items()}).bytes for r in range(rounds)]
    result = fact(fact_id, [float(b) for b in refits if b] or [float(found.bytes)], "byte", name)
    result.value = float(found.bytes)
    return result


def guard_moved(useful: Fact, moved: Fact, efficiency: float) -> None:
    """Physics: useful <= moved and efficiency in (0, 1]; ProbeFailure otherwise (a model or a kernel is wrong)."""
    if not 0 < efficiency <= 1 or useful.value is None or moved.value is None or useful.value > moved.value * 1.000001:
        raise ProbeFailure(
            f"{moved.id}: useful {useful.value} GB/s against moved {moved.value} GB/s, efficiency {efficiency:.4f}: "
            "a level cannot deliver more than it moves"
        )


def guard_l2(moved: Fact, ceiling: float | None, stream_id: str) -> Fact:
    """An L2 moved figure whose CI lies wholly above ``L2_MARGIN`` x the L2 stream's measured rate fails."""
    if ceiling is not None and moved.ci is not None and moved.ci[0] > L2_MARGIN * ceiling:
        raise ProbeFailure(
            f"{moved.id} = {moved.value:.0f} GB/s (CI from {moved.ci[0]:.0f}) lies wholly above {L2_MARGIN:g} x "
            f"{stream_id} = {ceiling:.0f} GB/s: more than the L2 serves, so the timing or the granule is wrong"
        )
    return moved


def measure(bench: Bench, level_op: str, pattern: str) -> Measured:
    """Useful GB/s of ``pattern`` at ``level_op``, and what the level moved for it by the measured granule."""
    name = probe_name(level_op, pattern)
    if not bench.settings.goodput_walks:
        raise ProbeFailure(f"{name}: these settings measure no goodput walk (goodput_walks is off)")
    run, found = measured(bench, level_op, pattern), granule(bench, level_op)
    level, op = split(level_op)
    useful = fact(f"{name}.useful", run.useful, "GB/s", name)
    useful.stopped = run.stopped
    facts = [bench.within_peak(useful) if level == "dram" else useful]
    once = run.once
    if found.bytes is None:
        why = f"no {level_op} granule from its stride sweep: {found.why}"
        facts += [
            unmeasured(f"{name}.moved", "GB/s", name, why),
            unmeasured(f"{name}.efficiency", "fraction", name, why),
        ]
        moved_bytes = 0
    else:
        moved_bytes = once.moved_bytes(found.bytes, per_request=level == "l2")
        efficiency = once.useful_bytes / moved_bytes
        moved = fact(f"{name}.moved", [u / efficiency for u in run.useful], "GB/s", name)
        moved.stopped = run.stopped
        guard_moved(useful, moved, efficiency)
        if level == "dram":
            moved = bench.within_peak(moved)
        else:
            moved = guard_l2(moved, bench.l2_rates.get(op), STREAM_FIGURE[level_op])
        facts += [moved, Fact(f"{name}.efficiency", efficiency, "fraction", (efficiency,) * 2, [efficiency], {}, name)]
    if level_op != "dram_read" and pattern == "v4.stride1":
        facts.append(_granule_fact(bench, level_op, name))
    series = walk_series(run, level_op, found, moved_bytes)
    return Measured(name, ProbeOutcome("ok", _note(run, level_op, found, moved_bytes), series), facts)


def _note(run: MeasuredWalk, level_op: str, found: Granule, moved_bytes: int) -> str:
    once, level = run.once, split(level_op)[0]
    counted = "each warp request's granules" if level == "l2" else "the distinct granules of a pass"
    moved = (
        f"moved derived from the measured {found.bytes}-byte {level_op} granule ({counted}: {moved_bytes} bytes a pass"
        f"{', the row indices included' if once.walk.gather else ''}; a model, not a counter)"
        if found.bytes
        else "no moved bytes"
    )
    return (
        f"{once.useful_bytes} useful bytes a pass over {once.footprint} bytes; {moved}; "
        f"{found.describe()}; {once.blocks} blocks of {once.threads}, {once.iters} iterations a pass, "
        f"passes {run.lengths.short} against {run.lengths.long}"
    )


def walk_series(run: MeasuredWalk, level_op: str, found: Granule, moved_bytes: int) -> dict[str, dict[str, list]]:
    """``goodput``: the median useful rate, the granule, where moved came from (``moved_from``); ``launch``: per
    launch (the short and the long) its passes, grid, useful bytes and moved bytes as ``<level>_<read|write>_bytes``
    (0 without a granule), the quantity ``gpuprobe witness`` holds that level's counter to."""
    passes = [run.lengths.short, run.lengths.long]
    useful = run.once.useful_bytes
    return {
        "goodput": {
            "useful_gbps": [float(np.median(run.useful))],
            "granule_bytes": [float(found.bytes or 0)],
            "moved_from": ["granule"],
            "level_op": [level_op],
        },
        "launch": {
            "passes": [float(n) for n in passes],
            "useful_bytes": [float(n * useful) for n in passes],
            f"{level_op}_bytes": [float(n * moved_bytes) for n in passes],
            "blocks": [float(run.once.blocks)] * 2,
            "threads": [float(run.once.threads)] * 2,
        },
    }


# ---- the plan ----------------------------------------------------------------------------------------------


def steps() -> list[tuple[str, str, str]]:
    """(probe, level/op, pattern) of every walk probe, in measuring order."""
    return [(probe_name(lo, p), lo, p) for lo, patterns in MATRIX.items() for p in patterns]


def planned_work(device: Device, settings: Settings, most_blocks: Callable[[str, int], int], buffer_bytes: int,
                 peak_gbps: float | None) -> list[Work]:  # fmt: skip
    """Every walk probe's work at its most repeats (its sweep's patterns for the probe that measures the sweep):
    bytes at its level (at whole 128-byte lines, the most a pass moves), read back and checked, summed by the host."""
    repeats, flush = settings.sampling.max_repeats, int(settings.flush_l2_multiple * device.l2_bytes)
    work: list[Work] = []
    if not settings.goodput_walks:
        return work
    measured: set[tuple[str, str]] = set()
    for name, level_op, pattern in steps():
        level, op = split(level_op)
        swept = pattern == "v4.stride1" and level_op != "dram_read"  # this probe measures its level/op's sweep
        for p in [q for q in dict.fromkeys([pattern, *SWEEP] if swept else [pattern]) if (level_op, q) not in measured]:
            measured.add((level_op, p))
            walk = WALKS[p]
            most = partial(most_blocks, kernel_of(walk, op))
            once, lengths = plan_pair(walk, level_op, device, settings, most, buffer_bytes, peak_gbps)
            moved = once.moved_bytes(128, per_request=True)
            launches = 2 * repeats + 1
            total = (repeats * (lengths.short + lengths.long) + lengths.short) * moved + launches * flush
            work.append(Work(name, level, total, 2 * launches))
            if op == "read":  # the pass's sums, once: the elements' strided view, added
                work.append(Work(name, "add", walk.useful_bytes(once.elements), 0))
            else:  # the prediction over the footprint, and the checks' reads and compares
                first = min(once.footprint, 4 * FIRST_CHECKS * settings.check_words)
                later = 2 * repeats * min(once.footprint, 4 * settings.check_words)
                work.append(Work(name, "add", first + later, 0))  # each check's prediction
                work.append(Work(name, "check", first + later, 0))
    return work


# ---- the sheet ---------------------------------------------------------------------------------------------


def l2_moved_checks(facts: dict[str, Fact], device: Device) -> list[Check]:
    """Physics: no L2 moved figure's CI lies wholly above ``L2_MARGIN`` x the L2 stream of the same direction."""
    checks = []
    for level_op, stream_id in STREAM_FIGURE.items():
        stream = facts.get(stream_id)
        if stream is None or stream.value is None:
            continue
        for pattern in MATRIX[level_op]:
            moved = facts.get(f"{probe_name(level_op, pattern)}.moved")
            if moved is None or moved.value is None:
                continue
            low = moved.ci[0] if moved.ci else moved.value
            ok = low <= L2_MARGIN * stream.value
            detail = (
                f"{moved.id} = {moved.value:.0f} GB/s, CI from {low:.0f} against {L2_MARGIN:g} x {stream_id} = "
                f"{stream.value:.0f} GB/s"
            )
            name = "bandwidth." + moved.id.removeprefix("bandwidth.").replace(".", "_") + "_within_l2"
            checks.append(Check(name, ok, detail, (moved.id,), physics=True))
    return checks


PLOT_ORDER = (
    "v2.stride1",
    "v4.stride1",
    "v16.stride1",
    "v4.stride2",
    "v4.stride8",
    "v4.stride32",
    "column.fp32",
    "misaligned",
    "gather.64",
    "gather.256",
    "gather.1024",
    "gather.4096",
    "transposed",
)


def goodput_png(results: Results, dpi: int = DEFAULT_DPI) -> bytes | None:
    """Useful against moved GB/s per pattern, one panel per level/op, the level's peak or stream rate dashed."""
    panels = []
    for level_op in ("dram_read", "l2_read", "dram_write", "l2_write"):
        rows = []
        for pattern in PLOT_ORDER:
            base = probe_name(level_op, pattern)
            useful, moved = results.fact(f"{base}.useful"), results.fact(f"{base}.moved")
            if useful is not None and useful.value is not None:
                rows.append((pattern, useful.value, moved.value if moved is not None and moved.value else 0.0))
        if rows:
            panels.append((level_op, rows))
    if not panels:
        return None
    fig = new_figure((9.0, 2.6 * len(panels)), dpi)
    for number, (level_op, rows) in enumerate(panels):
        ax = fig.add_subplot(len(panels), 1, number + 1)
        x = np.arange(len(rows))
        ax.bar(x - 0.2, [r[2] for r in rows], 0.4, color=COLORS[1 % len(COLORS)], label="moved")
        ax.bar(x + 0.2, [r[1] for r in rows], 0.4, color=COLORS[0], label="useful")
        ceiling_id = "bandwidth.dram_theoretical" if level_op.startswith("dram") else STREAM_FIGURE[level_op]
        ceiling = results.fact(ceiling_id)
        if ceiling is not None and ceiling.value:
            ax.axhline(ceiling.value, color="#555555", linestyle="--", linewidth=1, label=f"{ceiling_id}")
        ax.set_xticks(x, [r[0] for r in rows], fontsize=7, rotation=20)
        ax.set_ylabel(f"{level_op} GB/s", fontsize=8)
        ax.set_ylim(bottom=0)
        ax.grid(True, axis="y", alpha=0.3)
        ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    return png_bytes(fig)
