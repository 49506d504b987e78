"""The coop family's lane chains: the operands, starting values and the host's replay of each warp-tile
and group kernel (ptx/coop/tiles.cu, groups.cu), in the warp family's :class:`LaneChain` form, so that
one launch-and-check path (:func:`gpuprobe.families.warp.chain_launch`) runs the C++ kernels and their
hand-written twins alike.

Every replay follows the CUDA C++ semantics of the abstraction (cooperative groups' and CUB's
documentation), not the SASS: a reduction gives every lane of its group the group's total (CUB's, the
first thread alone), a scan the total of the lanes up to its own, a group formed from a label holds the
lanes with that label, a radix sort its keys in ascending order. CUB's block collectives (cub.cu) are
replayed over the block's 256 threads by the same functions.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from gpuprobe.families.warp import FULL, LANES, LaneChain, chain_for

_LANE = np.arange(LANES)
MASK = np.uint64(FULL)


def replay(step: Callable[[np.ndarray], np.ndarray], start: np.ndarray) -> Callable[[int], np.ndarray]:
    """The lanes' values after ``n`` steps of ``step`` from ``start``."""

    def after(n: int) -> np.ndarray:
        value = start
        for _ in range(n):
            value = step(value)
        return value

    return after


def group_sums(values: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Each lane gets the total (mod 2^32) of the lanes in its group (``groups``: a group id per lane)."""
    totals = {int(g): int(np.sum(values[groups == g], dtype=np.uint64)) & FULL for g in np.unique(groups)}
    return np.array([totals[int(g)] for g in groups], dtype=np.uint64)


def tile_reduce(values: np.ndarray, tile: int, combine: str = "add") -> np.ndarray:
    """cg::reduce over tiles of ``tile`` lanes: every lane gets its tile's sum, minimum or AND."""
    tiles = values.astype(np.uint64).reshape(LANES // tile, tile)
    if combine == "add":
        reduced = tiles.sum(axis=1) & MASK
    elif combine == "min":
        reduced = tiles.min(axis=1)
    else:
        reduced = np.bitwise_and.reduce(tiles, axis=1)
    return np.repeat(reduced, tile)


def inclusive_scan(values: np.ndarray) -> np.ndarray:
    """cg::inclusive_scan with plus over the whole warp: lane i gets lanes 0..i's sum, mod 2^32."""
    return np.cumsum(values.astype(np.uint64)) & MASK


def float_reduce(values: np.ndarray) -> np.ndarray:
    """cg::reduce with plus<float> over the warp, in float32 (the values' bits in and out, as uint32)."""
    floats = values.astype(np.uint32).view(np.float32)
    with np.errstate(over="ignore"):
        total = np.float32(np.sum(floats, dtype=np.float32))
    return np.full(LANES, total, dtype=np.float32).view(np.uint32).astype(np.uint64)


def labeled_step(values: np.ndarray) -> np.ndarray:
    """labeled_partition by v & 3, then each lane gets its group's sum."""
    return group_sums(values, values & np.uint64(3))


def binary_step(values: np.ndarray) -> np.ndarray:
    """binary_partition by v & 1, then each lane gets its half's sum."""
    return group_sums(values, values & np.uint64(1))


def reduce_chain(kernel: str, tile: int, combine: str, rng: np.random.Generator) -> LaneChain:
    """cg::reduce over tiles of ``tile`` lanes fed back as often per iteration as the kernel declares (32, or 8
    below a whole warp); the check word is the untimed first reduction of lane 0's tile."""
    start = rng.integers(0, 2**32, LANES, dtype=np.uint64)
    after = replay(lambda v: tile_reduce(v, tile, combine), start)
    first = int(tile_reduce(start, tile, combine)[0])
    return LaneChain(kernel, np.zeros(LANES, dtype=np.uint64), start, [], after, check_word=lambda: first)


def fadd_chain(kernel: str, rng: np.random.Generator) -> LaneChain:
    """cg::reduce with plus<float>: whole numbers below 1024 as the starting values, so every sum is exact
    in any order (the kernel converts them to float; the lanes come back as float bits)."""
    start = rng.integers(0, 1024, LANES).astype(np.uint64)
    as_float = start.astype(np.float32).view(np.uint32).astype(np.uint64)
    after = replay(float_reduce, as_float)
    first = int(float_reduce(as_float)[0])
    return LaneChain(kernel, np.zeros(LANES, dtype=np.uint64), start, [], after, check_word=lambda: first)


def scan_chain(kernel: str, rng: np.random.Generator) -> LaneChain:
    start = rng.integers(0, 2**32, LANES, dtype=np.uint64)
    return LaneChain(kernel, np.zeros(LANES, dtype=np.uint64), start, [], replay(inclusive_scan, start))


def group_chain(kernel: str, step: Callable[[np.ndarray], np.ndarray], rng: np.random.Generator) -> LaneChain:
    """A group formed from each step's values (labeled or binary), its sum fed back."""
    start = rng.integers(0, 2**32, LANES, dtype=np.uint64)
    return LaneChain(kernel, np.zeros(LANES, dtype=np.uint64), start, [], replay(step, start))


ACTIVE = 16  # lanes that take the coalesced kernel's branch (the twin's block of 16 threads)


def coalesced_chain(kernel: str, rng: np.random.Generator) -> LaneChain:
    """Lanes 0..15 take the branch and read, each step, the group rank (= lane, the group being lanes
    0..15) ``source[lane]``, never rank 0 (see ptx/coop/groups.cu); lanes 16..31 keep their value."""
    source = np.concatenate([rng.integers(1, ACTIVE, ACTIVE), np.zeros(LANES - ACTIVE, dtype=np.int64)])
    start = rng.integers(0, 2**32, LANES, dtype=np.uint64)

    def step(values: np.ndarray) -> np.ndarray:
        moved = values.copy()
        moved[:ACTIVE] = values[source[:ACTIVE]]
        return moved

    return LaneChain(kernel, source.astype(np.uint64), start, [np.uint32(ACTIVE)], replay(step, start))


def like_twin(kernel: str, twin_probe: str, rng: np.random.Generator) -> LaneChain:
    """The chain of a warp-family probe (its operands, starting values and replay) run by the C++
    ``kernel``, which takes no clamp operand: tile.shfl and shfl_down clamp at lane 31, as the twin's
    idx and down chains do."""
    twin = chain_for(twin_probe, rng)
    return LaneChain(kernel, twin.operands, twin.start, [], twin.predict, twin.per_fact, twin.check_word)


# ---- CUB (ptx/coop/cub.cu) ----------------------------------------------------------------------


def first_takes_total(values: np.ndarray) -> np.ndarray:
    """cub::WarpReduce / BlockReduce Sum as the kernels use it: the total (mod 2^32) is defined in the first
    thread alone, which takes it; every other thread keeps its value."""
    after = values.astype(np.uint64).copy()
    after[0] = np.sum(after, dtype=np.uint64) & MASK
    return after


RADIX_MULTIPLIER = np.uint64(2654435761)  # cub.cu's map of each sorted key: k * this + 1 (odd: a bijection)


def sort_and_map(keys: np.ndarray) -> np.ndarray:
    """cub::BlockRadixSort::Sort into a blocked arrangement (thread t's keys t * KEYS ..., so the flattened
    keys are in ascending order), then cub.cu's map of each key, mod 2^32."""
    return (np.sort(keys.astype(np.uint64)) * RADIX_MULTIPLIER + np.uint64(1)) & MASK


def first_reduce_chain(kernel: str, rng: np.random.Generator) -> LaneChain:
    """cub::WarpReduce Sum fed back through lane 0 (the only lane its total is defined in); the check word
    is the untimed first sum."""
    start = rng.integers(0, 2**32, LANES, dtype=np.uint64)
    first = int(np.sum(start, dtype=np.uint64) & MASK)
    after = replay(first_takes_total, start)
    return LaneChain(kernel, np.zeros(LANES, dtype=np.uint64), start, [], after, check_word=lambda: first)
