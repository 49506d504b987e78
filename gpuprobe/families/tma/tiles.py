"""The TMA family's tiles on the host: their shapes and boxes, the tensor maps that describe them, the
shared-memory swizzle decoded, and the tensors the probes read (and the tiles they must find).

* A tensor is a row-major array of bf16 elements, :data:`TILE_COLS` (64) columns wide: 128-byte rows. A
  tile is ``rows`` x 64 of it (64 x 64 = 8 KiB or 128 x 64 = 16 KiB); tile t is rows t x rows onwards.
* A TMA box row may not be wider than the swizzle span (``cuTensorMapEncodeTiled``: "the bounding box
  inner dimension must be <= the swizzle size"), so under the 64-byte swizzle a tile is two boxes of 32
  columns (as CUTLASS moves it), else one box of 64. Box b lands at b x box bytes in shared memory, its
  rows one after the other.
* The swizzle permutes the 16-byte chunks of shared memory by address bits (CUDA C++ Programming Guide,
  "TMA Swizzle"; CUTLASS ``Swizzle<B, 4, 3>``): byte offset o (from a base aligned to the pattern's
  repeat) lands at o XOR (((o >> 7) & mask) << 4), mask 7 for 128 B, 3 for 64 B, 1 for 32 B. An XOR that
  leaves the bits it reads alone: the same map puts a tile in place and takes it out again.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuprobe.families.chase import Cycle
from gpuprobe.families.streams import chunk_sums
from gpuprobe.runner.tensor_map import TileMap

ELEMENT_BYTES = 2  # bf16
TILE_COLS = 64
ROW_BYTES = TILE_COLS * ELEMENT_BYTES
TILE_ROWS = (64, 128)  # the tile shapes: 64 x 64 and 128 x 64
SWIZZLE_BYTES = {"none": 0, "sw64": 64, "sw128": 128}  # the swizzle modes, by the name facts carry
L2_PROMOTION_BYTES = 256  # "L2 promotion on": the L2 fills a box's lines from DRAM 256 bytes at a time
CHUNK = 16  # the swizzle moves 16-byte chunks
STORE_WORD = (0x9E3779B1, 0x5BD1E995)  # word i of the store kernels' shared tile: i x the first + the second


def swizzle_mask(span: int) -> int:
    """The address bits (above bit 7) a swizzle of ``span`` bytes XORs into the chunk index (bits 4..6)."""
    if span not in (0, 32, 64, 128):
        raise ValueError(f"a TMA swizzle spans 0 (none), 32, 64 or 128 bytes, not {span}")
    return max(span // CHUNK - 1, 0)


def swizzled_offsets(nbytes: int, span: int) -> np.ndarray:
    """Where each logical byte of an ``nbytes`` box lies in shared memory under a ``span``-byte swizzle."""
    offsets = np.arange(nbytes, dtype=np.int64)
    return offsets ^ (((offsets >> 7) & swizzle_mask(span)) << 4)


@dataclass(frozen=True)
class Tile:
    """One tile shape moved under one swizzle mode."""

    rows: int
    swizzle: str  # a key of SWIZZLE_BYTES

    def __post_init__(self) -> None:
        if self.rows not in TILE_ROWS or self.swizzle not in SWIZZLE_BYTES:
            raise ValueError(f"no such tile: {self.rows} rows, swizzle {self.swizzle!r}")

    @property
    def name(self) -> str:
        return f"{self.rows}x{TILE_COLS}"

    @property
    def span(self) -> int:
        return SWIZZLE_BYTES[self.swizzle]

    @property
    def boxes(self) -> int:
        """Boxes per tile: as many as it takes to keep a box row within the swizzle span."""
        return ROW_BYTES // self.span if self.span and self.span < ROW_BYTES else 1

    @property
    def box_cols(self) -> int:
        return TILE_COLS // self.boxes

    @property
    def box_bytes(self) -> int:
        return self.rows * self.box_cols * ELEMENT_BYTES

    @property
    def bytes(self) -> int:
        return self.rows * ROW_BYTES

    def tensor_map(self, tensor_rows: int, promotion: bool = True, box_rows: int | None = None) -> TileMap:
        """The map of a ``tensor_rows`` x 64 tensor moved in this tile's boxes (``box_rows`` rows each:
        by default the tile's, fewer for a slice), with the L2 promotion on or off."""
        return TileMap(tensor_rows, TILE_COLS, box_rows or self.rows, self.box_cols, self.span,
                       L2_PROMOTION_BYTES if promotion else 0)  # fmt: skip

    def from_shared(self, raw: np.ndarray) -> np.ndarray:
        """The tile (rows x 64 bf16 bits) from its bytes as the TMA left them in shared memory."""
        raw = np.ascontiguousarray(raw).view(np.uint8)
        if raw.size != self.bytes:
            raise ValueError(f"a {self.name} tile is {self.bytes} bytes, not {raw.size}")
        where = swizzled_offsets(self.box_bytes, self.span)
        boxes = [raw[b * self.box_bytes : (b + 1) * self.box_bytes][where] for b in range(self.boxes)]
        columns = [box.view(np.uint16).reshape(self.rows, self.box_cols) for box in boxes]
        return np.concatenate(columns, axis=1)

    def to_shared(self, tile: np.ndarray) -> np.ndarray:
        """The bytes a TMA load of ``tile`` (rows x 64 bf16 bits) leaves in shared memory."""
        tile = np.ascontiguousarray(tile, dtype=np.uint16)
        where = swizzled_offsets(self.box_bytes, self.span)
        out = np.empty(self.bytes, dtype=np.uint8)
        for b in range(self.boxes):
            box = np.ascontiguousarray(tile[:, b * self.box_cols : (b + 1) * self.box_cols]).view(np.uint8).ravel()
            placed = np.empty_like(box)
            placed[where] = box
            out[b * self.box_bytes : (b + 1) * self.box_bytes] = placed
        return out

    def stored(self) -> np.ndarray:
        """What a store kernel's tile (32-bit word i of shared memory: i x 0x9E3779B1 + 0x5BD1E995) is in
        global memory once the TMA has read it through the swizzle: rows x 64 bf16 bits."""
        words = np.arange(self.bytes // 4, dtype=np.uint32) * np.uint32(STORE_WORD[0]) + np.uint32(STORE_WORD[1])
        return self.from_shared(words)


def tiles(tensor: np.ndarray, rows: int) -> np.ndarray:
    """A tensor (total rows x 64 bf16 bits) as its tiles of ``rows`` rows: (tiles, rows, 64)."""
    return tensor.reshape(-1, rows, TILE_COLS)


def tensor_values(total_rows: int, seed: int) -> np.ndarray:
    """A tensor of ``total_rows`` x 64 bf16 bit patterns in which every 16-byte chunk of a 1024-byte span
    differs (a swizzle decoded wrongly moves one chunk onto another's values): element (r, c) holds
    (r x 64 + c) x an odd multiplier + a seed, modulo 2^16."""
    index = np.arange(total_rows * TILE_COLS, dtype=np.uint32)
    values = (index * np.uint32(0x9E37) + np.uint32(seed)) & np.uint32(0xFFFF)
    return values.astype(np.uint16).reshape(total_rows, TILE_COLS)


def chase_tensor(cycle: Cycle, rows: int, seed: int) -> np.ndarray:
    """A tensor of one tile per node of ``cycle`` whose tile t holds, at element (0, 0), the index of the
    tile after it (a 16-bit index: at most 65536 tiles)."""
    if cycle.nodes > 1 << 16:
        raise ValueError(f"a chase of {cycle.nodes} tiles cannot name its tiles in 16 bits")
    tensor = tensor_values(cycle.nodes * rows, seed)
    tiles(tensor, rows)[:, 0, 0] = cycle.successor.astype(np.uint16)
    return tensor


def tile_word_sums(tensor: np.ndarray, rows: int) -> np.ndarray:
    """Per tile of ``rows`` rows, what the stream kernels add up of it (every 16-byte chunk as
    :func:`gpuprobe.families.streams.chunk_sums` counts it: a swizzle moves chunks, never splits them)."""
    chunks = chunk_sums(np.ascontiguousarray(tensor).view(np.uint32).ravel())
    return chunks.reshape(-1, rows * ROW_BYTES // CHUNK).sum(axis=1, dtype=np.uint64)
