"""The bandwidth kernels on the simulated GPU: their semantics in NumPy, and a plausible timing model.

Semantics follow the PTX (ptx/bandwidth/bandwidth.ptx) address by address, independently of the host's
predictions in gpuprobe.families.bandwidth.patterns: reads sum every loaded word per thread, writes
store the value buffer's bytes, copies copy, and thread 0 of each block writes {start, end, SM} with
the block on SM ``block % sm_count``. L1 and shared memory deliver ``bw_cached_bpc`` bytes per clock
per SM to the clock records.

Timing of a global launch, pass by pass: a footprint that fits the L2 is served by the L2 once resident
(the previous launch left it there, or this launch's first pass brought it), else every pass goes to
DRAM, scaled down when too few bytes are in flight per SM. DRAM moves whole ``bw_dram_granule``-byte
units (a strided pattern pays for every unit it touches). Stores leave dirty lines in L2 that reach
DRAM only when evicted: a launch whose stores stream through DRAM ends with ``dirty(W)`` of the W bytes
it stored still in L2, written back during whatever evicts them next (a flush, untimed). ``dirty`` grows
as ``L2 x (1 - exp(-W / L2))``, as on a part whose replacement keeps some of the clean lines it held: so
a short launch writing one L2 leaves fewer dirty bytes than a long one writing four, and a difference of
the two counts their write-backs as stored bytes DRAM never moved in the time (issue 24: DRAM write read
faster than L2 write); two launches that end with the same footprint streamed leave the same.

Options, set as attributes on the SimulatedGpu: ``bw_dram_gbps``, ``bw_l2_gbps``, ``bw_l2_write_gbps`` (L2
stores; default ``bw_l2_gbps``), ``bw_cached_bpc``, ``bw_inflight_bytes`` (bytes in flight per SM that
saturate DRAM), ``bw_l2_inflight_bytes`` (bytes in flight per SM that saturate the L2's reads: fewer than
DRAM's, as its latency is shorter), ``bw_dram_granule`` (bytes), ``bw_l2_sector`` and ``bw_dram_write_granule``
(bytes: the goodput walks' L2 unit and DRAM write unit), ``bw_corrupt`` (a kernel name whose first result is
corrupted: a sum, a stored or copied word).
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from gpuprobe.families.bandwidth.shapes import Settings
from gpuprobe.families.sampling import Stopping
from gpuprobe.simulated.gpu import CLOCKED_RUN_SD, DEVICE_RUN_SD
from gpuprobe.simulated.simulation import Simulation

MIB = 1 << 20

# A quick run, on a simulated part of a few SMs (see gpuprobe.simulated.gpu.SUITE_SMS: the default part's 512 KiB
# L2 is too small for 132 SMs' worth of blocks).
FAST_SETTINGS = Settings(
    l2_fraction=0.5,
    l2_long_bytes=2048 * MIB,  # passes cost nothing to simulate: enough for 100 event ticks at the L2 rate
    cached_long_bytes_per_sm=MIB,
    sampling=Stopping(3, 3, 0.01, 1.0),
    sweep_sampling=Stopping(2, 2, 0.01, 1.0),
    check_words=4096,
    sweep_threads=(128, 256),
    sweep_blocks=(1, 2, 4),
)

ACCESSES, REQUEST, GROUP = 4, 512, 2048
DEFAULTS = {
    "bw_dram_gbps": 3000.0,
    "bw_l2_gbps": 9000.0,
    "bw_cached_bpc": 120.0,
    "bw_inflight_bytes": 32768.0,
    "bw_l2_inflight_bytes": 12288.0,  # under every L2 stream's 32 KiB per SM: only the occupancy sweep sees it
    "bw_dram_granule": 64,  # as the H200 of issue 24 measured (cache.l2.sector_bytes, and the goodput sweep)
    "bw_l2_sector": 32,  # what the L2 moves per request and sector touched, read or written
    "bw_dram_write_granule": 32,  # what DRAM writes back per dirty sector (the L2 keeps byte masks per sector)
}
LAUNCH_MS = 0.004
START_CLOCK = 10_000
BLOCK_CYCLES = 500  # a block's fixed cost, outside its accesses


def _option(gpu: Any, name: str) -> Any:
    return getattr(gpu, name, DEFAULTS.get(name))


def memory_read_gbps(gpu: Any, level: str) -> float:
    """The simulated memory's read rate at ``level`` ("dram" or "l2"), so that every family reading memory on
    one simulated part sees one memory system."""
    return float(_option(gpu, {"dram": "bw_dram_gbps", "l2": "bw_l2_gbps"}[level]))


def _region(gpu: Any, pointer: Any) -> tuple[Any, int]:
    return gpu.buffer_at(pointer)  # a buffer, or a raw address


def _thread_offsets(threads: int, width: int) -> np.ndarray:
    """Byte offset of each thread's first access: 2 KiB group, then width-byte slot in it."""
    t = np.arange(threads, dtype=np.int64)
    per_group = REQUEST // width
    return (t // per_group) * GROUP + (t % per_group) * width


def _access_offsets(threads: int, width: int, step: int, iters: int) -> np.ndarray:
    """Offsets [iteration, access, thread] of every access one pass makes."""
    base = _thread_offsets(threads, width)
    i = np.arange(iters, dtype=np.int64)[:, None, None] * step
    k = np.arange(ACCESSES, dtype=np.int64)[None, :, None] * REQUEST
    return i + k + base[None, None, :]


def _sum_words(data: np.ndarray, start: int, offsets: np.ndarray, width: int) -> np.ndarray:
    """Per thread (last axis), the 32-bit sum of the width-byte values at ``start + offsets``."""
    words = data.view(np.uint32)
    first = (start + offsets) // 4
    total = np.zeros(offsets.shape[-1], dtype=np.uint64)
    for j in range(width // 4):
        total += words[first + j].astype(np.uint64).reshape(-1, offsets.shape[-1]).sum(axis=0)
    return total & np.uint64(0xFFFFFFFF)


def _write_records(gpu: Any, launch: Any, out: Any, cycles_per_block: np.ndarray) -> None:
    blocks = launch.blocks
    sms = np.arange(blocks) % gpu.sm_count
    start = START_CLOCK + np.arange(blocks, dtype=np.uint64)
    end = start + np.asarray(cycles_per_block, dtype=np.uint64)
    buffer, offset = _region(gpu, gpu.address(out))
    records = buffer.data[offset:].view(np.uint64)
    records[: 3 * blocks : 3], records[1 : 3 * blocks : 3], records[2 : 3 * blocks : 3] = start, end, sms


def _cached_cycles(gpu: Any, launch: Any, bytes_per_block: int) -> np.ndarray:
    """Each block's cycles when its SM's blocks share the cached level's bytes per clock."""
    sms = np.arange(launch.blocks) % gpu.sm_count
    per_sm = np.bincount(sms, minlength=gpu.sm_count)[sms]
    per_clock = _option(gpu, "bw_cached_bpc") / _run_factor(gpu, "cached", CLOCKED_RUN_SD)
    return BLOCK_CYCLES + per_sm * bytes_per_block / per_clock


def _share(gpu: Any, launch: Any, moved_per_access: float, saturating: str) -> float:
    """The share of the DRAM's rate (``saturating="bw_inflight_bytes"``) or the L2 reads' (``"bw_l2_inflight_bytes"``)
    a launch reaches with the bytes it keeps in flight per SM: each thread's four accesses, each making the level
    move ``moved_per_access`` bytes (its width, or its share of the units a strided warp request touches)."""
    resident = min(launch.blocks / gpu.sm_count, gpu.blocks_per_sm) * launch.threads
    return min(1.0, resident * ACCESSES * moved_per_access / _option(gpu, saturating))


def _dirty_after(gpu: Any, stored: float) -> float:
    """Bytes still dirty in L2 after a launch streamed ``stored`` bytes of stores through it."""
    return gpu.l2_bytes * (1.0 - math.exp(-stored / gpu.l2_bytes))


def _level_ms(gpu: Any, launch: Any, touched: tuple[int, int, int], per_pass: tuple[float, float], passes: int,
              moved_per_access: float) -> float:  # fmt: skip
    """GPU ms of a global launch of ``passes`` passes over ``touched`` (buffer, low, high), each pass
    loading and storing ``per_pass`` bytes (as DRAM moves them). A footprint that fits the L2 is loaded
    from DRAM on its first pass unless resident, then served by the L2, which takes every store; a larger
    one streams every pass through DRAM, with the dirty lines the module docstring describes."""
    loaded, stored = per_pass
    cached = getattr(gpu, "bw_cached_range", None)
    base, low, high = touched
    fits = high - low <= gpu.l2_bytes
    resident = cached is not None and cached[0] == base and cached[1] <= low and high <= cached[2]
    gpu.bw_cached_range = touched if fits else None
    dirty = getattr(gpu, "bw_dirty_bytes", 0.0)  # what earlier launches left, written back once evicted
    if fits:
        cold = 0 if resident else 1
        dram, l2_passes = cold * loaded, passes - cold
        gpu.bw_dirty_bytes = float(high - low) if stored else dirty
    else:
        left = _dirty_after(gpu, stored * passes) if stored else 0.0
        dram, l2_passes = passes * loaded + dirty + stored * passes - left, 0
        gpu.bw_dirty_bytes = left
    l2_write = _option(gpu, "bw_l2_write_gbps") or _option(gpu, "bw_l2_gbps")
    l2_read = _option(gpu, "bw_l2_gbps") * _share(gpu, launch, moved_per_access, "bw_l2_inflight_bytes")
    l2_s = (l2_passes * loaded / l2_read + (passes * stored / l2_write if fits else 0.0)) / 1e9
    dram_s = dram / (_option(gpu, "bw_dram_gbps") * _share(gpu, launch, moved_per_access, "bw_inflight_bytes") * 1e9)
    factors = _run_factor(gpu, "l2", DEVICE_RUN_SD), _run_factor(gpu, "dram", DEVICE_RUN_SD)
    return LAUNCH_MS + (l2_s * factors[0] + dram_s * factors[1]) * 1e3


def _run_factor(gpu: Any, level: str, sd: float) -> float:
    """This run's factor for the kernel being simulated at ``level`` (the bandwidths have no within-run noise)."""
    return gpu.run_factor(f"{gpu._kernel}.{level}", sd)


def _corrupt(gpu: Any, kernel: str) -> bool:
    return getattr(gpu, "bw_corrupt", None) == kernel


def _read(kernel: str, w: int):
    def simulate(gpu: Any, launch: Any, src, width, step, iters, passes, sums, out) -> float:
        assert int(width) == w, f"{kernel} given width {int(width)}"
        width = w
        buffer, start = _region(gpu, src)
        # a tile re-read (step 0) is summed once and multiplied, so long L1 launches stay cheap
        walked = int(iters) if int(step) else 1
        offsets = _access_offsets(launch.blocks * launch.threads, width, int(step), walked)
        repeat = np.uint64(int(passes) * (int(iters) // walked))
        total = (_sum_words(buffer.data, start, offsets, width) * repeat) & np.uint64(0xFFFFFFFF)
        result = total.astype(np.uint32)
        if _corrupt(gpu, kernel):
            result[0] ^= 1
        sums.data[: 4 * len(result)] = result.view(np.uint8)
        per_pass = launch.blocks * launch.threads * width * ACCESSES * int(iters)
        per_block = launch.threads * width * ACCESSES * int(iters) * int(passes)
        _write_records(gpu, launch, out, _cached_cycles(gpu, launch, per_block))
        span = int(offsets.max()) + width
        return _level_ms(gpu, launch, (buffer.base, start, start + span), (per_pass, 0.0), int(passes), width)

    return simulate


def _store(kernel: str, width: int, copy: bool):
    def simulate(gpu: Any, launch: Any, dst, width_, step, iters, passes, out, src=None, value=None) -> float:
        assert int(width_) == width, f"{kernel} given width {int(width_)}"
        target, start = _region(gpu, dst)
        offsets = _access_offsets(launch.blocks * launch.threads, width, int(step), int(iters)).reshape(-1)
        lanes = (start + offsets)[:, None] + np.arange(width)[None, :]
        if copy:
            source, from_ = _region(gpu, src)
            target.data[lanes] = source.data[(from_ + offsets)[:, None] + np.arange(width)[None, :]]
        else:
            holder, at = _region(gpu, value)
            target.data[lanes] = holder.data[at : at + width][None, :]
        if _corrupt(gpu, kernel):
            target.data[start] ^= 1
        per_block = launch.threads * width * ACCESSES * int(iters) * int(passes)
        _write_records(gpu, launch, out, _cached_cycles(gpu, launch, per_block))
        per_pass = launch.blocks * per_block / int(passes)
        span = (target.base, start, start + int(offsets.max()) + width)
        return _level_ms(gpu, launch, span, (per_pass if copy else 0.0, per_pass), int(passes), width)

    return simulate


def _write(kernel: str, width: int):
    store = _store(kernel, width, copy=False)

    def simulate(gpu: Any, launch: Any, dst, value, width, step, iters, passes, out) -> float:
        return store(gpu, launch, dst, width, step, iters, passes, out, value=value)

    return simulate


def _copy(kernel: str, width: int):
    store = _store(kernel, width, copy=True)

    def simulate(gpu: Any, launch: Any, src, dst, width, step, iters, passes, out) -> float:
        return store(gpu, launch, dst, width, step, iters, passes, out, src=src)

    return simulate


def _shared(kernel: str, w: int):
    def simulate(gpu: Any, launch: Any, src, width, iters, toggle, sums, out) -> float:
        assert int(width) == w, f"{kernel} given width {int(width)}"
        width = w
        threads = launch.threads
        half = threads * width * ACCESSES
        assert launch.shared_bytes >= 2 * half, f"{kernel}: {launch.shared_bytes} bytes of shared memory for {2 * half}"
        buffer, start = _region(gpu, src)
        smem = buffer.data[start : start + 2 * half].copy()
        offsets = _access_offsets(threads, width, 0, 1)
        n = int(iters)
        second = n // 2 if int(toggle) else 0
        if int(toggle) not in (0, half):
            raise RuntimeError(f"{kernel}: toggle {int(toggle)} would leave the shared halves")
        block = _sum_words(smem, 0, offsets, width) * np.uint64(n - second)
        block += _sum_words(smem, half, offsets, width) * np.uint64(second)
        result = np.tile((block & np.uint64(0xFFFFFFFF)).astype(np.uint32), launch.blocks)
        if _corrupt(gpu, kernel):
            result[0] ^= 1
        sums.data[: 4 * len(result)] = result.view(np.uint8)
        _write_records(gpu, launch, out, _cached_cycles(gpu, launch, half * n))
        return LAUNCH_MS

    return simulate


def _shared_store(kernel: str, w: int, copy: bool):
    """Shared write (value stored everywhere) or ping-pong copy (both halves end as the source's
    first half), each block's two halves written back to dst."""

    def simulate(gpu: Any, launch: Any, width, iters, toggle, dst, out, src=None, value=None) -> float:
        assert int(width) == w, f"{kernel} given width {int(width)}"
        half = launch.threads * w * ACCESSES
        assert launch.shared_bytes >= 2 * half and int(toggle) == half and int(iters) >= 2
        if copy:
            buffer, start = _region(gpu, src)
            block = np.tile(buffer.data[start : start + half], 2)
        else:
            holder, at = _region(gpu, value)
            block = np.tile(holder.data[at : at + w], 2 * half // w)
        target, begin = _region(gpu, dst)
        target.data[begin : begin + launch.blocks * 2 * half] = np.tile(block, launch.blocks)
        if _corrupt(gpu, kernel):
            target.data[begin + 2 * half * (launch.blocks - 1)] ^= 1
        moved = half * int(iters) * (2 if copy else 1)
        _write_records(gpu, launch, out, _cached_cycles(gpu, launch, moved))
        return LAUNCH_MS

    return simulate


def _shared_write(kernel: str, w: int):
    store = _shared_store(kernel, w, copy=False)

    def simulate(gpu: Any, launch: Any, value, width, iters, toggle, dst, out) -> float:
        return store(gpu, launch, width, iters, toggle, dst, out, value=value)

    return simulate


def _shared_copy(kernel: str, w: int):
    store = _shared_store(kernel, w, copy=True)

    def simulate(gpu: Any, launch: Any, src, width, iters, toggle, dst, out) -> float:
        return store(gpu, launch, width, iters, toggle, dst, out, src=src)

    return simulate


def _pattern(kernel: str, width: int):
    def simulate(gpu: Any, launch: Any, src, lane_stride, request_stride, step, iters, passes, sums, out) -> float:
        buffer, start = _region(gpu, src)
        threads = launch.blocks * launch.threads
        t = np.arange(threads, dtype=np.int64)
        base = (t // 32) * ACCESSES * int(request_stride) + (t % 32) * int(lane_stride)
        i = np.arange(int(iters), dtype=np.int64)[:, None, None] * int(step)
        k = np.arange(ACCESSES, dtype=np.int64)[None, :, None] * int(request_stride)
        offsets = i + k + base[None, None, :]
        once = _sum_words(buffer.data, start, offsets, width)
        result = ((once * np.uint64(int(passes))) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
        if _corrupt(gpu, kernel):
            result[0] ^= 1
        sums.data[: 4 * len(result)] = result.view(np.uint8)
        _write_records(gpu, launch, out, np.full(launch.blocks, BLOCK_CYCLES))
        granule = int(_option(gpu, "bw_dram_granule"))
        # each unit an iteration touches, moved once (iterations cover disjoint, unit-aligned ranges; an access
        # never straddles a unit: widths and units are aligned powers of two)
        per_pass = int(iters) * len(np.unique((start + offsets[0]) // granule)) * granule
        per_access = per_pass / offsets.size
        span = (start, start + int(offsets.max()) + width)
        return _level_ms(gpu, launch, (buffer.base, *span), (float(per_pass), 0.0), int(passes), per_access)

    return simulate


def _shifted(values: np.ndarray, shift: int) -> np.ndarray:
    """``values >> shift`` as a 32-bit PTX shr: a shift of 32 or more clears."""
    return values >> shift if shift < 32 else np.zeros_like(values)


def _elements(threads: int, jump: int, iters: int) -> np.ndarray:
    """Element numbers [iteration, access, thread]: j = 128 w + 32 k + l + i jump for thread 32 w + l."""
    t = np.arange(threads, dtype=np.int64)
    k = np.arange(ACCESSES, dtype=np.int64)[None, :, None]
    i = np.arange(iters, dtype=np.int64)[:, None, None]
    return (t // 32 * 128 + t % 32)[None, None, :] + 32 * k + i * jump


def _walk_offsets(j: np.ndarray, shape: tuple[int, ...], width: int, index: np.ndarray | None) -> np.ndarray:
    """Byte offsets of elements ``j`` of a walk or gather kernel (ptx/bandwidth/bandwidth.ptx): row u = j >> row_shift;
    a walk's shape is (row_shift, element_mask, row_mask, column_shift, column_mask, tile_shift, tile_mask, pitch,
    column_step, tile_step), a gather's (row_shift, element_mask, pitch) with the row from ``index``."""
    row_shift, element_mask = shape[0], shape[1]
    u, e = _shifted(j, row_shift), j & element_mask
    if index is not None:
        pitch = shape[2]
        return index[u].astype(np.int64) * pitch + e * 16
    row_mask, column_shift, column_mask, tile_shift, tile_mask, pitch, column_step, tile_step = shape[2:]
    c, tile = _shifted(u, column_shift) & column_mask, _shifted(u, tile_shift) & tile_mask
    return (u & row_mask) * pitch + c * column_step + tile * tile_step + e * width


def _distinct_per_row(units: np.ndarray) -> int:
    """The sum over rows of ``units`` (2-D) of the distinct values in each row."""
    ordered = np.sort(units, axis=1)
    return int(units.shape[0] + np.count_nonzero(np.diff(ordered, axis=1), axis=1).sum())


def _distinct(*units: np.ndarray) -> int:
    """How many distinct integers ``units`` hold between them: one mark per value over their range, which here is
    at most the buffer's bytes over a granule's (sorting millions of offsets, as np.unique does, takes ten times as
    long and a walk's simulation most of its time)."""
    flat = [u.reshape(-1) for u in units]
    low = min(int(u.min()) for u in flat)
    marks = np.zeros(max(int(u.max()) for u in flat) - low + 1, dtype=bool)
    for u in flat:
        marks[u - low] = True
    return int(np.count_nonzero(marks))


def _walk_moved(
    offsets: np.ndarray, width: int, units: tuple[int, int], l2_bytes: int, rows: np.ndarray | None
) -> float:
    """Bytes one pass makes the level move: at L2 (a footprint within ``l2_bytes``) the sectors each warp request
    touches, else the distinct DRAM granules of the pass (reads) or the dirty sectors written back (stores); a
    gather's row indices (``rows``: the index each access loaded), each index unit once, too. ``units``: the L2's
    sector and what DRAM moves (:func:`_units`)."""
    if int(offsets.max()) + width <= l2_bytes:
        unit = units[0]
        requests = offsets.reshape(-1, 32)  # [iteration, access, warp, lane]: a request's lanes are adjacent
        moved = _distinct_per_row(np.concatenate([requests // unit, (requests + width - 1) // unit], axis=1)) * unit
        if rows is not None:  # through L1 (ld.global.nc): each index sector once
            moved += _distinct(rows * 4 // unit) * unit
        return float(moved)
    unit = units[1]
    moved = _distinct(offsets // unit, (offsets + width - 1) // unit) * unit
    if rows is not None:
        moved += _distinct(rows * 4 // unit) * unit
    return float(moved)


def _store_at(data: np.ndarray, start: int, offsets: np.ndarray, value: np.ndarray) -> None:
    """The bytes ``value`` stored at each of ``start + offsets`` in ``data``: as one element of their width each where
    every offset is a multiple of it (a walk's), else byte by byte (an index array of a byte per stored byte is
    most of a store walk's time)."""
    width = len(value)
    if start % width == 0 and not (offsets % width).any():
        element = np.dtype((np.void, width))
        end = start + (int(offsets.max()) // width + 1) * width
        data[start:end].view(element)[offsets // width] = value.view(element)
    else:
        data[(start + offsets)[:, None] + np.arange(width)[None, :]] = value[None, :]


WALK_SHAPE = ("row_shift", "element_mask", "row_mask", "column_shift", "column_mask", "tile_shift", "tile_mask",
              "pitch", "column_step", "tile_step")  # fmt: skip


def walk_accesses(gpu: Any, launch: Any, params: dict[str, Any], width: int, gather: bool) -> tuple[np.ndarray, Any]:
    """One pass of a walk or gather launch (its PTX parameters ``params``): the byte offsets of its accesses
    [iteration, access, thread] from the buffer's start, and (a gather) the row each access loaded the index of."""
    shape = tuple(int(params[n]) for n in (("row_shift", "element_mask", "pitch") if gather else WALK_SHAPE))
    j = _elements(launch.blocks * launch.threads, int(params["jump"]), int(params["iters"]))
    if not gather:
        return _walk_offsets(j, shape, width, None), None
    holder, at = _region(gpu, params["index"])
    return _walk_offsets(j, shape, width, holder.data[at:].view(np.uint32)), _shifted(j, shape[0])


def _units(gpu: Any, store: bool) -> tuple[int, int]:
    """The L2's sector and what DRAM moves a pass in: whole granules read, dirty sectors written back."""
    return int(_option(gpu, "bw_l2_sector")), int(_option(gpu, "bw_dram_write_granule" if store else "bw_dram_granule"))


@functools.lru_cache(maxsize=2)
def _walk_pass(
    threads: int, shape: tuple[int, ...], jump: int, iters: int, width: int, units: tuple[int, int], l2_bytes: int
) -> tuple[np.ndarray, float]:
    """One pass of a walk (not a gather, whose offsets follow its index buffer): its offsets, read-only, and the bytes
    it moves. Kept for the launch after it: a probe's samples launch one walk in a row, and a pass is millions of
    offsets to work out and count."""
    offsets = _walk_offsets(_elements(threads, jump, iters), shape, width, None)
    offsets.setflags(write=False)
    return offsets, _walk_moved(offsets, width, units, l2_bytes, None)


def _walk_geometry(
    gpu: Any, launch: Any, params: dict[str, Any], width: int, gather: bool, store: bool
) -> tuple[np.ndarray, float]:
    """A walk's or gather's pass: its offsets (:func:`walk_accesses`) and the bytes it moves (:func:`_walk_moved`)."""
    units = _units(gpu, store)
    if gather:
        offsets, rows = walk_accesses(gpu, launch, params, width, gather)
        return offsets, _walk_moved(offsets, width, units, gpu.l2_bytes, rows)
    shape = tuple(int(params[n]) for n in WALK_SHAPE)
    threads, jump, iters = launch.blocks * launch.threads, int(params["jump"]), int(params["iters"])
    return _walk_pass(threads, shape, jump, iters, width, units, gpu.l2_bytes)


def _walk(kernel: str, width: int, gather: bool, store: bool):
    """A walk or gather read (sums every loaded word, 2-byte loads widened) or store (the value buffer's bytes)."""

    def simulate(gpu: Any, launch: Any, **params: Any) -> float:
        passes = int(params["passes"])
        buffer, start = _region(gpu, params["dst" if store else "src"])
        offsets, moved = _walk_geometry(gpu, launch, params, width, gather, store)
        if store:
            holder, at = _region(gpu, params["value"])
            _store_at(buffer.data, start, offsets.reshape(-1), holder.data[at : at + width])
            if _corrupt(gpu, kernel):
                buffer.data[start + int(offsets.min())] ^= 1  # the lowest stored byte: the first the host checks
        else:
            data = buffer.data[start:]
            if width == 2:
                values = data.view(np.uint16)[offsets // 2].astype(np.uint64)
            else:
                words = data.view(np.uint32)
                values = sum(words[offsets // 4 + q].astype(np.uint64) for q in range(width // 4))
            once = values.reshape(-1, offsets.shape[-1]).sum(axis=0)
            result = ((once * np.uint64(passes)) & np.uint64(0xFFFFFFFF)).astype(np.uint32)
            if _corrupt(gpu, kernel):
                result[0] ^= 1
            params["sums"].data[: 4 * len(result)] = result.view(np.uint8)
        _write_records(gpu, launch, params["out"], np.full(launch.blocks, BLOCK_CYCLES))
        span = (buffer.base, start, start + int(offsets.max()) + width)
        per_pass = (0.0, moved) if store else (moved, 0.0)
        return _level_ms(gpu, launch, span, per_pass, passes, moved / offsets.size)

    return simulate


KERNELS = {
    **{f"gp_bw_read_{c}_v{w}": _read(f"gp_bw_read_{c}_v{w}", w) for c in ("ca", "cg") for w in (4, 8, 16)},
    **{f"gp_bw_write_b{8 * w}": _write(f"gp_bw_write_b{8 * w}", w) for w in (4, 8, 16)},
    **{f"gp_bw_copy_b{8 * w}": _copy(f"gp_bw_copy_b{8 * w}", w) for w in (4, 8, 16)},
    **{f"gp_bw_shared_read_v{w}": _shared(f"gp_bw_shared_read_v{w}", w) for w in (4, 8, 16)},
    **{f"gp_bw_shared_write_b{8 * w}": _shared_write(f"gp_bw_shared_write_b{8 * w}", w) for w in (4, 8, 16)},
    **{f"gp_bw_shared_copy_b{8 * w}": _shared_copy(f"gp_bw_shared_copy_b{8 * w}", w) for w in (4, 8, 16)},
    **{f"gp_bw_pattern_v{w}": _pattern(f"gp_bw_pattern_v{w}", w) for w in (4, 16)},
    **{f"gp_bw_walk_v{w}": _walk(f"gp_bw_walk_v{w}", w, gather=False, store=False) for w in (2, 4, 16)},
    **{f"gp_bw_walk_store_b{8 * w}": _walk(f"gp_bw_walk_store_b{8 * w}", w, gather=False, store=True) for w in (4, 16)},
    "gp_bw_gather_v16": _walk("gp_bw_gather_v16", 16, gather=True, store=False),
    "gp_bw_scatter_b128": _walk("gp_bw_scatter_b128", 16, gather=True, store=True),
}

SIMULATION = Simulation(kernels=KERNELS, fast_settings=FAST_SETTINGS)
