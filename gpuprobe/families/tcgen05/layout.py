"""What tcgen05's operands, descriptors and results look like, per the PTX ISA (sm_100a).

* Shared-memory operands (A: M x 32 bytes, B: N x 32 bytes, K-major, no swizzle) lie in core matrices
  exactly as wgmma's do (:func:`gpuprobe.families.wgmma.layout.core_matrix_bytes`): the kernel copies
  a block's rows as they are uploaded. The shared-memory descriptor keeps wgmma's fields (start
  address, leading and stride byte offsets, swizzle mode 0) and adds the sm_100 version field: bits
  46-48 = 0b001 ("Shared memory descriptor", tcgen05).
* The instruction descriptor (PTX ISA, "Instruction descriptor format for .kind::tf32, .kind::f16,
  .kind::f8f6f4 and .kind::i8"): D type in bits 4-5 (F32 = 1), A and B types in bits 7-9 and 10-12
  (kind::f16: BF16 = 1; kind::f8f6f4: E4M3 = 0), no negation, no transpose (K-major A and B), N >> 3 in
  bits 17-22 and M >> 4 in bits 24-28; dense (bit 2 clear).
* D lies in tensor memory with row i of an M = 128 tile in lane i, column j of it in column j; a block
  pair's M = 256 tile gives each block its 128 rows. Warp w of a block reads lanes 32 w .. 32 w + 31
  (tcgen05.ld 32x32b): thread t gets row t of its block, columns in register order; the kernel writes
  the rows out in order, so the output is D row-major, the pair's rows one block after the other.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuprobe.families.wgmma.layout import TYPES, WgmmaType, layout_bits
from gpuprobe.kernels.registry import unroll_of

SM100_DESCRIPTOR_VERSION = 1 << 46
BLOCK_ROWS = 128  # the rows of A and D one block holds
A_TYPE_CODES = {"bf16": 1, "e4m3": 0}  # kind::f16 BF16, kind::f8f6f4 E4M3
D_F32 = 1


def descriptor_bits() -> int:
    """The shared-memory descriptor of a K-major core-matrix operand, less its start address."""
    return layout_bits() | SM100_DESCRIPTOR_VERSION


def instruction_descriptor(type_name: str, m: int, n: int) -> int:
    """The 32-bit instruction descriptor of a dense tcgen05.mma of ``type_name`` (bf16 or e4m3) m x n, f32 D."""
    if m not in (64, 128, 256) or n % 8 or not 8 <= n <= 256:
        raise ValueError(f"no tcgen05.mma shape m{m}n{n} here")
    code = A_TYPE_CODES[type_name]
    return D_F32 << 4 | code << 7 | code << 10 | (n >> 3) << 17 | (m >> 4) << 24


def decode_instruction(value: int) -> dict[str, int]:
    """The instruction descriptor's fields: sparse, d, a and b types, transposes, N and M."""
    field = lambda shift, width: (value >> shift) & ((1 << width) - 1)  # noqa: E731
    return {"sparse": field(2, 1), "d": field(4, 2), "a": field(7, 3), "b": field(10, 3),
            "transpose_a": field(15, 1), "transpose_b": field(16, 1), "n": field(17, 6) << 3,
            "m": field(24, 5) << 4}  # fmt: skip


@dataclass(frozen=True)
class Mma:
    """One tcgen05.mma kernel: purpose ("lat" or "tput"), type, N, and block group (1: one block, 2: a pair)."""

    purpose: str
    type_name: str
    n: int
    group: int = 1

    @property
    def wgmma(self) -> WgmmaType:
        """The element type (shared with wgmma's operand model: values, encoding, tolerance)."""
        return TYPES[self.type_name]

    @property
    def m(self) -> int:
        return BLOCK_ROWS * self.group

    @property
    def k(self) -> int:
        return self.wgmma.k

    @property
    def batch(self) -> int:
        """MMAs per iteration of the kernel's loop, each committed together: the unroll its probe declares."""
        return unroll_of(self.kernel)

    @property
    def kernel(self) -> str:
        return f"gp_tc_{self.purpose}_{self.type_name}_cg{self.group}_m{self.m}n{self.n}"

    def flop(self) -> int:
        """Operations of one MMA of this shape (a multiply and an add per product)."""
        return 2 * self.m * self.n * self.k

    @property
    def fact_stem(self) -> str:
        pair = ".pair" if self.group == 2 else ""
        return f"tensor.tcgen05.{self.type_name}.m{self.m}n{self.n}k{self.k}{pair}"

    @property
    def probe(self) -> str:
        pair = "pair." if self.group == 2 else ""
        what = "latency" if self.purpose == "lat" else "throughput"
        return f"tcgen05.{pair}{what}.{self.type_name}.m{self.m}n{self.n}"


MMAS: tuple[Mma, ...] = (
    Mma("tput", "bf16", 256),
    Mma("tput", "e4m3", 256),
    Mma("tput", "bf16", 256, 2),
    Mma("tput", "e4m3", 256, 2),
    Mma("lat", "bf16", 64),
    Mma("lat", "bf16", 128),
    Mma("lat", "bf16", 256),
    Mma("lat", "e4m3", 256),
    Mma("lat", "bf16", 256, 2),
)
