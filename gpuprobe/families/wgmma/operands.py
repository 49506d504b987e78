"""wgmma operands on the host: values of each type, as raw bits and as exact float64, and the check
of a result against the NumPy reference.

Three kinds of operands: ``zero`` (all zero bits: the least power), ``random`` (random values over
much of each type's range: the honest power draw) and ``ternary`` (-1, 0, 1, which every type
holds exactly, so each element of A @ B is a small integer; for latency chains). A chain's sums stay
exact while they fit the accumulator; an fp8 chain on Hopper stops being exact far short of f32's 24
bits (``WgmmaType.narrow_accumulator``), and its check (:func:`check_chain`) measures the width at which
it stopped, holding every element to what an accumulator of that width can do.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import NamedTuple

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


class ChainCheck(NamedTuple):
    """What one launch's D says: why it is wrong (None when it is right) and, for a chain that stopped
    being exact in a narrow accumulator, the accumulator's width in bits (None where D stayed exact)."""

    problem: str | None
    accumulator_bits: int | None = None


def check_chain(d: np.ndarray, operands: Operands, times: int) -> ChainCheck:
    """Whether D is ``times`` x A @ B^T within the type's tolerance, and where it is not because a narrow
    accumulator stopped a ternary chain, the width that accumulator measured (:func:`_stalled`)."""
    product = operands.product()
    expected = times * product
    if d.shape != expected.shape:
        return ChainCheck(f"D has shape {d.shape}, expected {expected.shape}")
    got = d.astype(np.float64)
    allowed = operands.wgmma.tolerance * times * operands.magnitude() + 1e-30
    bad = ~(np.abs(got - expected) <= allowed)  # NaN counts as bad
    bits, why = None, ""
    if operands.wgmma.narrow_accumulator and operands.kind == "ternary" and np.any(got != expected):
        bits, bad, why = _stalled(got, expected, product)
    if not bad.any():
        return ChainCheck(None, bits)
    row, col = np.argwhere(bad)[0]
    what = f"{int(bad.sum())} of {bad.size} elements wrong{why}; {times} x A @ B, {operands.wgmma.name}"
    what += f", {operands.kind} operands"
    return ChainCheck(f"D[{row},{col}] = {d[row, col]!r}, expected {expected[row, col]!r} ({what})", bits)


def mismatch(d: np.ndarray, operands: Operands, times: int) -> str | None:
    """Why D is not ``times`` x A @ B^T within the type's tolerance, allowing a narrow accumulator's
    stalled chain (:func:`check_chain`); None when it is."""
    return check_chain(d, operands, times).problem


def _stalled(got: np.ndarray, expected: np.ndarray, term: np.ndarray) -> tuple[int | None, np.ndarray, str]:
    """A ternary chain's D in a narrow accumulator: (the width it measured, the wrong elements, why).

    Every product of -1/0/1 operands is a unit, so each element of A @ B is an integer term t and the
    chain's partial sums are exact while they fit the accumulator. Where D is not the exact sum, the
    chain stopped growing: the smallest such |D| is 2**b of a b-bit accumulator (Hopper's fp8 wgmma drops a
    unit product once the running sum reaches 2**14, DeepSeek-V3, arXiv:2412.19437, section 3.5.2). The
    measured b holds the rest of D to what any b-bit accumulator allows, whether it truncates each
    product or rounds each sum: a stopped element keeps its term's sign, grew at least to 2**b and at most
    to twice its exact sum; no element exceeds 2**(b+1) x |t| (an accumulator of b bits cannot add t
    beyond that); and elements of one term end at one value (one term, one sequence of sums). A term of 0
    must stay 0, and a D under 1 never grew."""
    inexact = got != expected
    grown = inexact & (term != 0) & np.isfinite(got) & (np.abs(got) >= 1.0)
    bad = inexact & ~grown
    if not grown.any():
        return None, bad, "; the chain never grew where it should"
    bits = int(np.floor(np.log2(np.abs(got[grown]).min())))
    reasons = {
        "grew the wrong way": grown & (np.sign(got) != np.sign(expected)),
        "grew past twice the exact sum": grown & (np.abs(got) > 2.0 * np.abs(expected)),
        f"grew past 2**{bits + 1} x the term": (term != 0) & (np.abs(got) >= 2.0 ** (bits + 1) * np.abs(term)),
        "ended apart from elements of the same term": _apart_from_their_term(got, term, grown),
    }
    found = [f"{name} ({int(mask.sum())})" for name, mask in reasons.items() if mask.any()]
    for mask in reasons.values():
        bad |= mask
    why = f"; the chain stopped being exact at 2**{bits}" + (": " + ", ".join(found) if found else "")
    return bits, bad, why


def _apart_from_their_term(got: np.ndarray, term: np.ndarray, grown: np.ndarray) -> np.ndarray:
    """Elements whose term has a stopped element among them and that do not all hold one value."""
    terms, index = np.unique(term, return_inverse=True)
    index = index.reshape(term.shape)
    low, high = np.full(len(terms), np.inf), np.full(len(terms), -np.inf)
    np.minimum.at(low, index, got)
    np.maximum.at(high, index, got)
    stopped = np.zeros(len(terms), dtype=bool)
    stopped[np.unique(index[grown])] = True
    return (stopped & (low != high))[index]
