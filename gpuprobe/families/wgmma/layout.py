"""What wgmma's operands and results look like in memory and registers, per the PTX ISA (sm_90a).

* Element types (:data:`TYPES`): each wgmma ``.atype`` with its K (always 32 bytes of it), its
  accumulator, and how the host encodes and decodes its values.
* Shared-memory operands, no swizzle (PTX ISA, "Shared Memory Matrix Layout" and "Matrix
  Descriptor Format"): a matrix is tiled into *core matrices* of 8 rows x 16 bytes, each stored as
  128 contiguous bytes (row r at byte 16 r). A (64 x K) and B (stored N x K, "K-major": row n of the
  stored block is column n of B) both have two core matrices along K. Core matrix (row block i, K
  block j) sits at byte ``(2 i + j) x 128``: the *leading-dimension byte offset* (between core
  matrices adjacent in K) is 128, the *stride-dimension byte offset* (adjacent in M or N) 256.
* The 64-bit descriptor (:func:`descriptor`): bits 0-13 start address >> 4, 16-29 leading byte
  offset >> 4, 32-45 stride byte offset >> 4, 49-51 base offset (0: no swizzle pattern to align),
  62-63 swizzle mode (0: none). The kernel ORs its shared address >> 4 (14 bits) into the layout
  bits the host passes (:func:`layout_bits`).
* Register fragments (:func:`a_fragment_index`, :func:`d_fragment_index`): warp w of the warpgroup
  holds rows 16 w .. 16 w + 15; within a warp, lane l is in group g = l // 4 (rows g and g + 8)
  and has t = l % 4 (columns 2 t, 2 t + 1 of each 8-column block of D, and the matching K columns
  of A, as in mma.sync's m16n8k16 layout).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

M = 64
WARPGROUP = 128
CORE_ROWS, CORE_BYTES = 8, 16
K_BYTES = 32  # every wgmma shape spans 32 bytes of K: k16 for 16-bit types, k8 tf32, k32 8-bit
LEADING_BYTES = CORE_ROWS * CORE_BYTES  # next core matrix along K
STRIDE_BYTES = 2 * LEADING_BYTES  # next core matrix along M or N
SHARED_ALIGN = 16  # descriptor offsets drop their 4 low bits
OFFSET_BITS = 14


@dataclass(frozen=True)
class WgmmaType:
    """One wgmma operand type: its name in fact ids and kernels, element bytes, and accumulator."""

    name: str  # "bf16", "f16", "tf32", "e4m3", "s8"
    element_bytes: int
    accumulator: str  # "f32" or "s32"
    tolerance: float  # |D - ref| <= tolerance x (|A| @ |B|), per element; 0 is exact
    # Whether a long chain D += A @ B may stop being exact short of the f32 accumulator's 24 bits, at a
    # width the check measures (:func:`gpuprobe.families.wgmma.operands.check_chain`): Hopper's fp8
    # wgmma keeps about 14 bits (DeepSeek-V3 Technical Report, arXiv:2412.19437, sections 3.3.2 and
    # 3.5.2; an H200's e4m3 chain of 32768 x (-2) stopped at -2**14, reports/nvidia-h200/results.json).
    narrow_accumulator: bool = False

    @property
    def k(self) -> int:
        return K_BYTES // self.element_bytes

    def flop(self, n: int) -> int:
        """Operations of one m64nNk wgmma (a multiply and an add per product)."""
        return 2 * M * n * self.k


TYPES: dict[str, WgmmaType] = {
    t.name: t
    for t in (
        WgmmaType("bf16", 2, "f32", 2.0**-10),
        WgmmaType("f16", 2, "f32", 2.0**-10),
        WgmmaType("tf32", 4, "f32", 2.0**-10),
        WgmmaType("e4m3", 1, "f32", 2.0**-7, narrow_accumulator=True),
        WgmmaType("s8", 1, "s32", 0.0),
    )
}
N_VALUES = (8, 16, 32, 64, 128, 256)


def check_n(n: int) -> None:
    if n < 8 or n > 256 or n % 8:
        raise ValueError(f"wgmma N must be a multiple of 8 from 8 to 256, not {n}")


# --------------------------------------------------------------------------- descriptors


def layout_bits(leading_bytes: int = LEADING_BYTES, stride_bytes: int = STRIDE_BYTES, swizzle: int = 0) -> int:
    """The descriptor without its start address: offsets >> 4 in bits 16-29 and 32-45, swizzle in 62-63."""
    for name, value in (("leading", leading_bytes), ("stride", stride_bytes)):
        if value % SHARED_ALIGN or not 0 <= value >> 4 < 1 << OFFSET_BITS:
            raise ValueError(f"{name} byte offset {value} must be a multiple of 16 below {16 << OFFSET_BITS}")
    if swizzle not in range(4):
        raise ValueError(f"swizzle mode {swizzle} is not one of 0 (none), 1 (128 B), 2 (64 B), 3 (32 B)")
    return (leading_bytes >> 4) << 16 | (stride_bytes >> 4) << 32 | swizzle << 62


def decode_descriptor(value: int) -> dict[str, int]:
    """The descriptor's fields, in bytes: start, leading, stride; and base_offset, swizzle."""
    field = lambda shift, width: (value >> shift) & ((1 << width) - 1)  # noqa: E731
    return {
        "start": field(0, 14) << 4,
        "leading": field(16, 14) << 4,
        "stride": field(32, 14) << 4,
        "base_offset": field(49, 3),
        "swizzle": field(62, 2),
    }


# --------------------------------------------------------------------------- shared-memory operands


def core_matrix_bytes(rows: np.ndarray, k_bytes: int = K_BYTES) -> np.ndarray:
    """A (R x ``k_bytes``) K-major operand as it must lie in shared memory, no swizzle: core matrix
    (i, j) (rows 8 i.., bytes 16 j..) at byte (k_bytes / 16 x i + j) x 128, its rows 16 bytes apart:
    described by a leading byte offset of 128 and a stride byte offset of k_bytes / 16 x 128
    (:func:`layout_bits`; 256 for the 32 bytes of K every dense operand spans, 512 for the 64 bytes of
    a sparse wgmma's B)."""
    rows = np.ascontiguousarray(rows).view(np.uint8)
    count = rows.shape[0]
    if rows.shape != (count, k_bytes) or count % CORE_ROWS or k_bytes % CORE_BYTES:
        raise ValueError(f"operand must be a multiple of 8 rows of {k_bytes} bytes, got {rows.shape}")
    tiles = rows.reshape(count // CORE_ROWS, CORE_ROWS, k_bytes // CORE_BYTES, CORE_BYTES)  # (i, r, j, byte)
    return np.ascontiguousarray(tiles.transpose(0, 2, 1, 3)).reshape(-1)  # (i, j, r, byte)


def operand_offset(row: Any, byte: Any, descriptor_bits: int = layout_bits()) -> Any:
    """Where a descriptor with these offsets says byte ``byte`` of row ``row`` of a K-major operand lies
    (no swizzle), as what the tensor core reads; ints or NumPy arrays."""
    fields = decode_descriptor(descriptor_bits)
    i, r = row // CORE_ROWS, row % CORE_ROWS
    j, b = byte // CORE_BYTES, byte % CORE_BYTES
    return i * fields["stride"] + j * fields["leading"] + r * CORE_BYTES + b


# --------------------------------------------------------------------------- register fragments


def a_fragment_index(wgmma: WgmmaType) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of A for each thread's 16 bytes of A registers, shape (128, 4 x per-register).

    Per warp (rows 16 w..): register 0 holds row g, register 1 row g + 8, registers 2 and 3 the
    same rows K/2 further on; within a register, consecutive K elements from (32-bit t) x t."""
    per = 4 // wgmma.element_bytes  # elements per 32-bit register
    lane = np.arange(WARPGROUP)
    group, t = (lane % 32) // 4, lane % 4
    base_row = 16 * (lane // 32) + group
    rows = np.stack([base_row, base_row + 8, base_row, base_row + 8], axis=1)
    cols = np.stack([t * per + h * (wgmma.k // 2) for h in (0, 0, 1, 1)], axis=1)
    rows = np.repeat(rows, per, axis=1)
    cols = (np.repeat(cols, per, axis=1) + np.tile(np.arange(per), 4)).astype(np.int64)
    return rows, cols


def d_fragment_index(n: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of D for each thread's N/2 accumulator registers, shape (128, N/2): register
    4 j + h holds row g + 8 (h // 2), column 8 j + 2 t + h % 2 of the warp's 16 rows."""
    check_n(n)
    lane = np.arange(WARPGROUP)[:, None]
    reg = np.arange(n // 2)[None, :]
    group, t = (lane % 32) // 4, lane % 4
    j, h = reg // 4, reg % 4
    rows = 16 * (lane // 32) + group + 8 * (h // 2)
    cols = 8 * j + 2 * t + h % 2
    return np.broadcast_to(rows, cols.shape).copy(), cols


def a_fragments(a_bits: np.ndarray, wgmma: WgmmaType) -> np.ndarray:
    """The A registers of a warpgroup (128 x 4 uint32) from A's raw elements (64 x K)."""
    rows, cols = a_fragment_index(wgmma)
    return np.ascontiguousarray(a_bits[rows, cols]).view(np.uint32).reshape(WARPGROUP, 4)


def d_from_fragments(fragments: np.ndarray, n: int) -> np.ndarray:
    """D (64 x N) from a warpgroup's accumulator registers (128 x N/2, in register order)."""
    rows, cols = d_fragment_index(n)
    d = np.zeros((M, n), dtype=fragments.dtype)
    d[rows, cols] = fragments
    return d
