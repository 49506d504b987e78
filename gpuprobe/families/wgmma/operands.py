"""wgmma operands on the host: values of each type, as raw bits and as exact float64, and the check
of a result against the NumPy reference.

Three kinds of operands: ``zero`` (all zero bits: the least power), ``random`` (random values over
much of each type's range: the honest power draw) and ``ternary`` (-1, 0, 1, which every type
holds exactly, so each element of A @ B is a small integer; for latency chains). A chain's sums stay
exact while they fit the accumulator's significant bits (``WgmmaType.chain_bits``): past that, an
fp8 chain on Hopper stalls, and the check holds it to the bounds a narrower accumulator allows.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpuprobe.families.sparsity import expand, random_pattern, thread_metadata
from gpuprobe.families.wgmma.layout import WARPGROUP, M, WgmmaType

OPERAND_KINDS = ("zero", "random", "ternary")


def _e4m3_values() -> np.ndarray:
    """Every e4m3 byte's value (1 sign, 4 exponent bits biased by 7, 3 mantissa bits; S.1111.111 is NaN)."""
    bits = np.arange(256)
    sign = np.where(bits & 0x80, -1.0, 1.0)
    exponent, mantissa = (bits >> 3) & 0xF, bits & 0x7
    normal = (1.0 + mantissa / 8.0) * np.exp2(exponent - 7.0)
    subnormal = mantissa / 8.0 * 2.0**-6
    values = sign * np.where(exponent == 0, subnormal, normal)
    values[(bits & 0x7F) == 0x7F] = np.nan
    return values


E4M3 = _e4m3_values()


def _bf16_bits(values: np.ndarray) -> np.ndarray:
    """float32 -> bf16 bits, rounded to nearest even (the values here are finite)."""
    raw = values.astype(np.float32).view(np.uint32)
    rounded = raw + 0x7FFF + ((raw >> 16) & 1)
    return (rounded >> 16).astype(np.uint16)


def encode(values: np.ndarray, wgmma: WgmmaType) -> np.ndarray:
    """Raw element bits (uint8/uint16/uint32 per type) of values the type holds exactly."""
    if wgmma.name == "bf16":
        return _bf16_bits(values)
    if wgmma.name == "f16":
        return values.astype(np.float16).view(np.uint16)
    if wgmma.name == "tf32":  # tf32 is an f32 whose 13 low mantissa bits the tensor core ignores
        return (values.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)).astype(np.uint32)
    if wgmma.name == "e4m3":
        finite = np.where(np.isnan(E4M3), np.inf, E4M3)
        return np.abs(values[..., None] - finite).argmin(axis=-1).astype(np.uint8)
    return values.astype(np.int8).view(np.uint8)


def decode(bits: np.ndarray, wgmma: WgmmaType) -> np.ndarray:
    """Exact float64 values of raw element bits."""
    if wgmma.name == "bf16":
        return (bits.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if wgmma.name == "f16":
        return bits.view(np.float16).astype(np.float64)
    if wgmma.name == "tf32":
        return bits.view(np.float32).astype(np.float64)
    if wgmma.name == "e4m3":
        return E4M3[bits]
    return bits.view(np.int8).astype(np.float64)


def draw_values(shape: tuple[int, int], wgmma: WgmmaType, kind: str, rng: np.random.Generator) -> np.ndarray:
    """Values of ``kind`` (see the module's docstring) that the type holds exactly, as float64."""
    if kind == "zero":
        return np.zeros(shape)
    if kind == "ternary":
        return rng.integers(-1, 2, size=shape).astype(np.float64)
    if kind != "random":
        raise ValueError(f"operand kind {kind!r} is not one of {', '.join(OPERAND_KINDS)}")
    if wgmma.name == "s8":
        return rng.integers(-128, 128, size=shape).astype(np.float64)
    if wgmma.name == "e4m3":  # every finite byte, so all the bits toggle
        finite = np.flatnonzero(~np.isnan(E4M3))
        return E4M3[rng.choice(finite, size=shape)]
    return rng.standard_normal(shape)


@dataclass(frozen=True)
class Operands:
    """A (64 x K) and B (N x K, stored K-major) as raw bits and exact values, for one wgmma."""

    wgmma: WgmmaType
    kind: str
    a_bits: np.ndarray
    b_bits: np.ndarray

    @property
    def a(self) -> np.ndarray:
        return decode(self.a_bits, self.wgmma)

    @property
    def b(self) -> np.ndarray:
        return decode(self.b_bits, self.wgmma)

    def product(self) -> np.ndarray:
        """A @ B^T (64 x N) in float64: exact for every type here (K <= 32 products of short mantissas)."""
        return self.a @ self.b.T

    def magnitude(self) -> np.ndarray:
        """|A| @ |B|^T: the scale each element's rounding is measured against."""
        return np.abs(self.a) @ np.abs(self.b).T


def make_operands(wgmma: WgmmaType, n: int, kind: str, seed: int) -> Operands:
    rng = np.random.default_rng(seed)
    a = encode(draw_values((M, wgmma.k), wgmma, kind, rng), wgmma)
    b = encode(draw_values((n, wgmma.k), wgmma, kind, rng), wgmma)
    return Operands(wgmma, kind, a, b)


@dataclass(frozen=True)
class SparseOperands(Operands):
    """A sparse wgmma's operands: A (64 x 2K, 2:4 sparse) held as its 64 x K kept elements (``a_bits``) and
    their places (``pattern``, :mod:`gpuprobe.families.sparsity`), and B (N x 2K)."""

    pattern: np.ndarray = field(default_factory=lambda: np.zeros((M, 0, 2), dtype=np.int64))

    @property
    def a(self) -> np.ndarray:
        return expand(decode(self.a_bits, self.wgmma), self.pattern)

    def metadata(self) -> np.ndarray:
        """The metadata register of each of the warpgroup's 128 threads (selector 0): warp w holds rows
        16 w .. 16 w + 15, the group of lane l rows 16 w + l / 4 and + 8 (:func:`thread_metadata`)."""
        thread = np.arange(WARPGROUP)
        rows = 16 * (thread // 32) + (thread % 32) // 4
        return thread_metadata(self.pattern, 8 * self.wgmma.element_bytes, rows, thread % 4)


def make_sparse_operands(wgmma: WgmmaType, n: int, kind: str, seed: int) -> SparseOperands:
    """Operands of a sparse m64nNk(2K) wgmma of ``wgmma``'s type: A's kept elements and B as make_operands
    draws them, A's pattern at random (every chunk's two places, ascending)."""
    rng = np.random.default_rng(seed)
    a = encode(draw_values((M, wgmma.k), wgmma, kind, rng), wgmma)
    b = encode(draw_values((n, 2 * wgmma.k), wgmma, kind, rng), wgmma)
    return SparseOperands(wgmma, kind, a, b, random_pattern(M, 2 * wgmma.k, rng))


def beyond_exact(operands: Operands, times: int) -> np.ndarray:
    """The elements of a ternary chain whose sums leave the accumulator's exact range: every partial
    sum k x t (t an integer) is exact while ``times`` x |t| < 2**(chain_bits - 1)."""
    if operands.kind != "ternary":
        return np.zeros(operands.product().shape, dtype=bool)
    return times * np.abs(operands.product()) >= 2.0 ** (operands.wgmma.chain_bits - 1)


def mismatch(d: np.ndarray, operands: Operands, times: int) -> str | None:
    """Why D is not ``times`` x A @ B^T within the type's tolerance (None when it is). Where a ternary
    chain leaves the accumulator's exact range (:func:`beyond_exact`), D must instead have grown with
    the term's sign at least to the precision wall, 2**(chain_bits - 2) x |t|, and at most to twice
    the exact sum (rounding may carry a sum past the term it added, never that far)."""
    expected = times * operands.product()
    allowed = operands.wgmma.tolerance * times * operands.magnitude() + 1e-30
    if d.shape != expected.shape:
        return f"D has shape {d.shape}, expected {expected.shape}"
    got = d.astype(np.float64)
    error = np.abs(got - expected)
    bad = ~(error <= allowed)  # NaN counts as bad
    walled = beyond_exact(operands, times)
    if walled.any():
        term = np.abs(operands.product())
        floor = np.minimum(times * term, 2.0 ** (operands.wgmma.chain_bits - 2) * term)
        held = (np.sign(got) == np.sign(expected)) & (np.abs(got) >= floor) & (np.abs(got) <= 2 * times * term)
        bad = np.where(walled, ~held, bad)
    if not bad.any():
        return None
    row, col = np.argwhere(bad)[0]
    wrong = f"{int(bad.sum())} of {bad.size} elements wrong"
    what = f"{wrong}; {times} x A @ B, {operands.wgmma.name}, {operands.kind} operands"
    return f"D[{row},{col}] = {d[row, col]!r}, expected {expected[row, col]!r} ({what})"
