"""mma.sync operands on the host: the PTX ISA's fragment layouts, element encodings, the reference.

Each variant is one ``mma.sync.aligned.<shape>.row.col.<d>.<a>.<b>.<c>`` of ptx/common/mma_chain.ptxinc.
Lane ``l`` of the warp holds, with ``g = l // 4`` and ``t = l % 4`` (PTX ISA, "Matrix fragments for
mma.m16n8k*" and "mma.m8n8k*"), for ``e`` elements per 32-bit register (2 for f16/bf16, 1 for
tf32, 4 for 8-bit types, 8 for int4):

* A (m x k, row-major), register r, element j: row ``g + 8 (r % 2)`` (m = 16; ``g`` for m = 8),
  column ``e t + j + (k / 2) (r // 2)``;
* B (k x n, column-major), register r, element j: row ``e t + j + (k / R) r`` for R B registers
  (R = 2 but for m16n8k8 and m8n8k*, which have one), column ``g``;
* C and D, element i (the 32-bit registers in order, or the f16 halves of the f16x2 registers):
  row ``g + 8 (i // 2)`` (m = 16; ``g`` for m = 8), column ``2 t + i % 2``.

Element j of a register sits in bits ``[j b, (j + 1) b)`` for b-bit elements. Operands are small
integers (A, B in [-2, 2], C in [-4, 4]), exact in every input and accumulator type, so the kernel's
chains, whatever order the hardware sums in, must reproduce ``C + A B`` bit for bit.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

LANES = 32
LANE_WORDS = 16  # 32-bit words per lane in the fragments buffer: A 0-3, -A 4-7, B 8-9, C 12-15
CHAINS = 8  # accumulator chains per thread: the kernel writes the sum of their D

_BITS = {"f16": 16, "bf16": 16, "tf32": 32, "int8": 8, "int4": 4, "e4m3": 8, "e5m2": 8}


@dataclass(frozen=True)
class Variant:
    """One mma.sync shape and type: its fact id stem, kernels, and fragment geometry."""

    name: str  # f16 (f32 accumulate), f16_f16acc, bf16, tf32, int8, int4, e4m3, e5m2
    shape: str  # m16n8k16 ...

    @property
    def m(self) -> int:
        return self._dims()[0]

    @property
    def n(self) -> int:
        return self._dims()[1]

    @property
    def k(self) -> int:
        return self._dims()[2]

    def _dims(self) -> tuple[int, int, int]:
        match = re.fullmatch(r"m(\d+)n(\d+)k(\d+)", self.shape)
        assert match, self.shape
        return int(match[1]), int(match[2]), int(match[3])

    @property
    def input_type(self) -> str:
        return self.name.removesuffix("_f16acc")

    @property
    def accumulator(self) -> str:
        if self.name.endswith("_f16acc"):
            return "f16"
        return "s32" if self.input_type in ("int8", "int4") else "f32"

    @property
    def per_register(self) -> int:
        return 32 // _BITS[self.input_type]

    @property
    def a_registers(self) -> int:
        return self.m * self.k // LANES // self.per_register

    @property
    def b_registers(self) -> int:
        return self.k * self.n // LANES // self.per_register

    @property
    def d_words(self) -> int:
        """32-bit accumulator registers per lane (f16 accumulate packs two per register)."""
        elements = self.m * self.n // LANES
        return elements // 2 if self.accumulator == "f16" else elements

    @property
    def fmas(self) -> int:
        """Multiply-adds one mma.sync does (per warp)."""
        return self.m * self.n * self.k

    @property
    def fact_stem(self) -> str:
        return f"tensor.mma_sync.{self.name}.{self.shape}"

    def kernel(self, ilp: int) -> str:
        return f"gp_mma_{self.name}_{self.shape}_ilp{ilp}"

    def probe(self, ilp: int) -> str:
        return f"mma.{self.name}.{self.shape}.ilp{ilp}"

    def fragments_and_prediction(self, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """The fragments buffer the chain kernel reads (lanes x words) and what each lane must write."""
        operands = make_operands(self, seed)
        return operands.fragments, predicted_words(self, operands)


VARIANTS: tuple[Variant, ...] = (
    Variant("f16", "m16n8k8"),
    Variant("f16_f16acc", "m16n8k8"),
    Variant("f16", "m16n8k16"),
    Variant("f16_f16acc", "m16n8k16"),
    Variant("bf16", "m16n8k16"),
    Variant("tf32", "m16n8k8"),
    Variant("int8", "m8n8k16"),
    Variant("int8", "m16n8k32"),
    Variant("int4", "m8n8k32"),
    Variant("int4", "m16n8k64"),
    Variant("e4m3", "m16n8k32"),
    Variant("e5m2", "m16n8k32"),
)


def _lane_parts(lane: int) -> tuple[int, int]:
    return lane // 4, lane % 4


def a_position(v: Variant, lane: int, register: int, element: int) -> tuple[int, int]:
    g, t = _lane_parts(lane)
    row = g + 8 * (register % 2) if v.m == 16 else g
    return row, v.per_register * t + element + (v.k // 2) * (register // 2)


def b_position(v: Variant, lane: int, register: int, element: int) -> tuple[int, int]:
    """B's registers split K evenly: register r starts at row (K / registers) x r (K / 2 for the dense
    shapes with two B registers; K / 4 for a sparse m16n8k32 16-bit or m16n8k64 8-bit B, with four)."""
    g, t = _lane_parts(lane)
    return v.per_register * t + element + (v.k // v.b_registers) * register, g


def c_position(v: Variant, lane: int, element: int) -> tuple[int, int]:
    g, t = _lane_parts(lane)
    row = g + 8 * (element // 2) if v.m == 16 else g
    return row, 2 * t + element % 2


def decode(kind: str, bits: int) -> float:
    """The value of an element's bits (tf32: the f32 bits as the tensor core gets them)."""
    if kind == "f16":
        return float(np.uint16(bits).view(np.float16))
    if kind == "bf16":
        return float(np.uint32(bits << 16).view(np.float32))
    if kind in ("tf32", "f32"):
        return float(np.uint32(bits).view(np.float32))
    if kind in ("int8", "int4", "s32"):
        width = _BITS.get(kind, 32)
        return float(bits - (1 << width) if bits >> (width - 1) else bits)
    exponent_bits, bias = (4, 7) if kind == "e4m3" else (5, 15)
    mantissa_bits = 7 - exponent_bits
    sign = -1.0 if bits & 0x80 else 1.0
    exponent, mantissa = (bits >> mantissa_bits) & ((1 << exponent_bits) - 1), bits & ((1 << mantissa_bits) - 1)
    if exponent == 0:
        return sign * mantissa * 2.0 ** (1 - bias - mantissa_bits)
    return sign * (1 + mantissa / (1 << mantissa_bits)) * 2.0 ** (exponent - bias)


_FP8_CODES = {
    kind: {decode(kind, code): code for code in range(256) if code not in (0x80,)} for kind in ("e4m3", "e5m2")
}


def encode(kind: str, value: float) -> int:
    """The bits of an element of type ``kind`` holding ``value`` (f16 rounds, bf16 truncates the f32
    bits, tf32 keeps all f32 bits: what the tensor core drops is what the numerics probes ask)."""
    if kind in ("f16", "f16_f16acc"):
        return int(np.float16(value).view(np.uint16))
    if kind == "bf16":
        return int(np.float32(value).view(np.uint32)) >> 16
    if kind in ("tf32", "f32"):
        return int(np.float32(value).view(np.uint32))
    if kind in ("int8", "s32", "int4"):
        return int(value) & ((1 << _BITS.get(kind, 32)) - 1)
    return _FP8_CODES[kind].get(float(value), 0x7F)  # 0x7F: NaN in e4m3, a huge value in e5m2: never equal


def encodable(kind: str, value: float) -> bool:
    """Whether ``value`` is exactly an element of type ``kind`` (tf32: of its 10-bit mantissa)."""
    if kind == "tf32":
        return encodable("f32", value) and int(np.float32(value).view(np.uint32)) & 0x1FFF == 0
    return decode(kind, encode(kind, value)) == value


def _register(v: Variant, values: list[float]) -> int:
    bits = _BITS[v.input_type]
    return sum(encode(v.input_type, x) << (bits * j) for j, x in enumerate(values))


@dataclass(frozen=True)
class Operands:
    """A (m x k), B (k x n), C (m x n) (integers, or binary fractions every sum of which is exact), and their
    fragments in the kernel's buffer layout."""

    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    fragments: np.ndarray  # uint32, LANES x LANE_WORDS

    def reference(self) -> np.ndarray:
        """D = C + A B, exactly (int64, or float64 for exact fractions)."""
        return self.c + self.a @ self.b


def make_operands(v: Variant, seed: int) -> Operands:
    """Small integers in A, B and C: exact in every type, whatever the iteration count."""
    rng = np.random.default_rng(seed)
    a = rng.integers(-2, 3, size=(v.m, v.k))
    b = rng.integers(-2, 3, size=(v.k, v.n))
    c = rng.integers(-4, 5, size=(v.m, v.n))
    return operands_of(v, a, b, c)


def operands_of(v: Variant, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> Operands:
    """A, B and C (each element exact in its type) with their fragments in the kernel's buffer layout."""
    words = np.zeros((LANES, LANE_WORDS), dtype=np.uint32)
    e = v.per_register
    for lane in range(LANES):
        for r in range(v.a_registers):
            row_col = [a_position(v, lane, r, j) for j in range(e)]
            words[lane, r] = _register(v, [a[i, j] for i, j in row_col])
            words[lane, 4 + r] = _register(v, [-a[i, j] for i, j in row_col])
        for r in range(v.b_registers):
            words[lane, 8 + r] = _register(v, [b[i, j] for i, j in (b_position(v, lane, r, j) for j in range(e))])
        words[lane, 12 : 12 + v.d_words] = accumulator_words(v, [c[p] for p in c_positions(v, lane)])
    return Operands(a, b, c, words)


def c_positions(v: Variant, lane: int) -> list[tuple[int, int]]:
    return [c_position(v, lane, i) for i in range(v.m * v.n // LANES)]


def accumulator_words(v: Variant, values: list[float]) -> list[int]:
    """One lane's C or D elements as its 32-bit accumulator registers."""
    if v.accumulator == "f16":
        return [encode("f16", values[i]) | (encode("f16", values[i + 1]) << 16) for i in range(0, len(values), 2)]
    return [encode(v.accumulator, x) for x in values]


def predicted_words(v: Variant, operands: Operands) -> np.ndarray:
    """What each lane writes: the sum of its 8 chains, each at C + A B, as 4 words (zeros beyond D)."""
    d = operands.reference() * CHAINS
    words = np.zeros((LANES, 4), dtype=np.uint32)
    for lane in range(LANES):
        words[lane, : v.d_words] = accumulator_words(v, [d[p] for p in c_positions(v, lane)])
    return words
