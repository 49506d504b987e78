"""What the tensor core's arithmetic keeps: experiments of one mma.sync each, and how to read them.

Each experiment fills A, B and C with exact powers of two (and sums of them) so that every cell of
D has one question to answer: was a term of relative size 2^-k kept, or lost? The answers, cell by
cell against a float64 reference, give (Fasi et al., "Numerical behavior of NVIDIA tensor cores",
PeerJ CS 7:e330, 2021, ask the same questions with the same kind of inputs):

* ``mantissa`` (tf32 only): A[i][0] = 1 + 2^-k_i, B[0][j] = 1, C = 0: D[i][j] is the value the
  tensor core read for A, so the largest k kept is the input's mantissa bits (tf32: 10);
* ``rounding`` (tf32 only): A = +-(1 + 0.75 ulp) of that mantissa: rounded to nearest it becomes
  1 + ulp, truncated it stays 1;
* ``accumulator``: C[i][j] = 2^(2i), A[i][0] = 1, B[0][j] = 2^-j: D = 2^(2i) + 2^-j keeps the
  product only if the sum with C holds 2i + j fraction bits;
* ``alignment``: C = 0, A[i] = (2^s_i, 1), B[:, j] = (1, 2^-2j): two products in one dot product,
  kept only if their alignment holds s_i + 2j bits.

A cell whose inputs the type cannot represent exactly is left out (fp8 reaches fewer bits); a
fact is then "at least" the largest k tested, which the probe's note says.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.families.mma.fragments import (
    LANE_WORDS,
    LANES,
    Variant,
    a_position,
    b_position,
    c_position,
    decode,
    encodable,
    encode,
)

NUMERIC_VARIANTS = (Variant("f16", "m16n8k16"), Variant("bf16", "m16n8k16"), Variant("tf32", "m16n8k8"),
                    Variant("e4m3", "m16n8k32"))  # fmt: skip


@dataclass(frozen=True)
class Experiment:
    """A, B, C (float64, exact), and the cells that answer the question: (row, column) -> k."""

    name: str
    a: np.ndarray
    b: np.ndarray
    c: np.ndarray
    cells: dict[tuple[int, int], int]
    big: np.ndarray  # D if every small term is lost

    def reference(self) -> np.ndarray:
        """D in float64: exact, every term kept."""
        return self.c + self.a @ self.b

    def kept(self, d: np.ndarray, kernel: str) -> dict[int, bool]:
        """Per k, whether every cell asking about k kept its small term. Every cell must be the exact
        result or the big term alone, and every other cell exact: anything else is a wrong mma."""
        reference = self.reference()
        asked = np.zeros(d.shape, dtype=bool)
        for cell in self.cells:
            asked[cell] = True
        wrong = (~asked & (d != reference)) | (asked & (d != reference) & (d != self.big))
        if np.any(wrong):
            i, j = np.argwhere(wrong)[0]
            raise ProbeFailure(
                f"{kernel} ({self.name}): D[{i}][{j}] = {float(d[i, j])!r}, neither {float(reference[i, j])!r} "
                f"nor {float(self.big[i, j])!r}"
            )
        result: dict[int, bool] = {}
        for cell, k in self.cells.items():
            result[k] = result.get(k, True) and bool(d[cell] == reference[cell])
        return result


def _zeros(v: Variant) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    return np.zeros((v.m, v.k)), np.zeros((v.k, v.n)), np.zeros((v.m, v.n))


def _usable(v: Variant, *values: float) -> bool:
    return all(encodable(v.input_type, x) for x in values)


def mantissa_experiment(v: Variant) -> Experiment:
    a, b, c = _zeros(v)
    b[0, :] = 1.0
    cells = {}
    for i in range(v.m):
        k = 5 + i
        a[i, 0] = 1.0 + 2.0**-k
        cells.update({(i, j): k for j in range(v.n)})
    big = np.zeros_like(c)
    big[:, :] = 1.0
    return Experiment("mantissa", a, b, c, cells, big)


def rounding_experiment(v: Variant, mantissa_bits: int) -> Experiment:
    """Rows 0 and 1: +-(1 + 0.75 ulp); the cells ask "was it rounded to nearest" (k = 1 for all)."""
    a, b, c = _zeros(v)
    b[0, :] = 1.0
    ulp = 2.0**-mantissa_bits
    a[0, 0], a[1, 0] = 1.0 + 0.75 * ulp, -(1.0 + 0.75 * ulp)
    big = np.zeros_like(c)
    big[0, :], big[1, :] = 1.0, -1.0  # truncated (toward zero)
    return Experiment("rounding", a, b, c, {(i, j): 1 for i in (0, 1) for j in range(v.n)}, big)


def rounds_to_nearest(exp: Experiment, d: np.ndarray, mantissa_bits: int, kernel: str) -> bool:
    """Whether +-(1 + 0.75 ulp) became +-(1 + ulp) (rounded to nearest) rather than +-1 (truncated)."""
    ulp = 2.0**-mantissa_bits
    rows = d[:2, :]
    if np.all(rows == exp.big[:2, :]):
        return False
    if np.all(rows[0] == 1.0 + ulp) and np.all(rows[1] == -(1.0 + ulp)):
        return True
    raise ProbeFailure(f"{kernel} (rounding): rows {rows[:, 0].tolist()} are neither truncated nor rounded to nearest")


def accumulator_experiment(v: Variant) -> Experiment:
    a, b, c = _zeros(v)
    a[:, 0] = 1.0
    cells = {}
    for j in range(v.n):
        if _usable(v, 2.0**-j):
            b[0, j] = 2.0**-j
            for i in range(v.m):
                c[i, j] = 2.0 ** (2 * i)
                cells[(i, j)] = 2 * i + j
    return Experiment("accumulator", a, b, c, cells, c.copy())


def alignment_experiment(v: Variant) -> Experiment:
    a, b, c = _zeros(v)
    cells = {}
    rows = [i for i in range(v.m) if _usable(v, 2.0**i)]
    columns = [j for j in range(v.n) if _usable(v, 2.0 ** (-2 * j))]
    b[0, columns] = 1.0
    for j in columns:
        b[1, j] = 2.0 ** (-2 * j)
    for i in rows:
        a[i, 0], a[i, 1] = 2.0**i, 1.0
        cells.update({(i, j): i + 2 * j for j in columns})
    big = np.zeros_like(c)
    for i in rows:
        big[i, columns] = 2.0**i
    return Experiment("alignment", a, b, c, cells, big)


def fragments(v: Variant, exp: Experiment) -> np.ndarray:
    """The experiment's A, B and C in each lane's registers (the chain kernels' buffer layout)."""
    words = np.zeros((LANES, LANE_WORDS), dtype=np.uint32)
    bits = 32 // v.per_register
    for lane in range(LANES):
        for r in range(v.a_registers):
            cells = (a_position(v, lane, r, j) for j in range(v.per_register))
            words[lane, r] = sum(encode(v.input_type, exp.a[p]) << (bits * j) for j, p in enumerate(cells))
        for r in range(v.b_registers):
            cells = (b_position(v, lane, r, j) for j in range(v.per_register))
            words[lane, 8 + r] = sum(encode(v.input_type, exp.b[p]) << (bits * j) for j, p in enumerate(cells))
        for i in range(4):
            words[lane, 12 + i] = encode("f32", exp.c[c_position(v, lane, i)])
    return words


def d_matrix(v: Variant, lanes: np.ndarray) -> np.ndarray:
    """D (m x n, float64) from each lane's four f32 registers."""
    d = np.zeros((v.m, v.n))
    for lane in range(LANES):
        for i in range(4):
            d[c_position(v, lane, i)] = decode("f32", int(lanes[lane, i]))
    return d


def bits_kept(kept: dict[int, bool]) -> tuple[int, bool]:
    """The largest k below which every tested k was kept, and whether that is only a lower bound
    (every tested k was kept). No k kept at all is an impossible reading: ProbeFailure."""
    tested = sorted(kept)
    lost = [k for k in tested if not kept[k]]
    if not lost:
        return tested[-1], True
    if lost[0] == tested[0]:
        raise ProbeFailure(f"not even a term 2^-{tested[0]} was kept: the mma's arithmetic or operands are broken")
    return max(k for k in tested if k < lost[0]), False


def fact_prefix(v: Variant) -> str:
    return f"tensor.numerics.{'fp8' if v.input_type in ('e4m3', 'e5m2') else v.input_type}"


@dataclass(frozen=True)
class Reading:
    """One numeric fact: its value, and whether it is only a lower bound (every tested k kept)."""

    fact_id: str
    value: float
    unit: str
    at_least: bool = False


def experiment_count(v: Variant) -> int:
    """The experiments :func:`read_numerics` runs for ``v``: mantissa and rounding for tf32, then
    accumulator and alignment."""
    return 4 if v.input_type == "tf32" else 2


def read_numerics(v: Variant, run: Callable[[Experiment], np.ndarray], kernel: str) -> list[Reading]:
    """Run the variant's experiments (``run`` gives D for an experiment) and read their facts."""
    prefix = fact_prefix(v)
    readings = []
    if v.input_type == "tf32":
        exp = mantissa_experiment(v)
        bits, at_least = bits_kept(exp.kept(run(exp), kernel))
        readings.append(Reading(f"{prefix}.mantissa_bits", float(bits), "count", at_least))
        rounding = rounding_experiment(v, bits)
        nearest = rounds_to_nearest(rounding, run(rounding), bits, kernel)
        readings.append(Reading(f"{prefix}.rounds_to_nearest", float(nearest), "bool"))
    for exp in (accumulator_experiment(v), alignment_experiment(v)):
        bits, at_least = bits_kept(exp.kept(run(exp), kernel))
        readings.append(Reading(f"{prefix}.{exp.name}_bits", float(bits), "count", at_least))
    return readings
