"""mma.sp (2:4 sparse A) operands on the host, for ptx/mma/mma_sp_chain.ptxinc.

A sparse ``mma.sp::ordered_metadata.m16n8kK`` multiplies a 16 x K A of which every chunk of four
consecutive elements keeps two (:mod:`gpuprobe.families.sparsity`) by a dense K x 8 B. Per lane:

* A's kept elements (16 x K/2) lie in the registers as a dense A of shape m16n8k(K/2) would (PTX ISA,
  "Matrix fragments for sparse mma": e.g. the m16n8k32 16-bit A "is the same as for m16n8k16");
* B (K x 8) and C/D lie as for a dense m16n8kK (:func:`gpuprobe.families.mma.fragments.b_position`);
* the metadata register: selector 0, as :func:`gpuprobe.families.sparsity.thread_metadata` lays it out
  for the type's element size (16-bit and 8-bit types differ).

The fragments buffer holds per lane 20 words (80 bytes): A 0-3, -A 4-7, B 8-11, C 12-15, metadata 16. The
chain kernel runs a round with A and one with -A (same metadata), so every chain is back at C + A B after
each iteration, exactly: the operands are small integers, as the dense chains'.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuprobe.families.mma.fragments import (
    LANES,
    Operands,
    Variant,
    _register,
    a_position,
    accumulator_words,
    b_position,
    c_positions,
    predicted_words,
)
from gpuprobe.families.sparsity import expand, random_pattern, thread_metadata

SPARSE_LANE_WORDS = 20
METADATA_WORD = 16


@dataclass(frozen=True)
class SparseVariant(Variant):
    """One mma.sp shape and type: ``shape`` is the logical m16n8kK (K counting the zeros A skips)."""

    @property
    def compressed(self) -> Variant:
        """The dense shape whose A fragments A's kept elements take: m16n8k(K/2)."""
        return Variant(self.name, f"m{self.m}n{self.n}k{self.k // 2}")

    @property
    def a_registers(self) -> int:
        return self.compressed.a_registers

    @property
    def dense_twin(self) -> Variant:
        """The dense mma.sync its rate is set against: the same m16n8 tile and type at the largest dense K
        (m16n8k16 for 16-bit types, m16n8k32 for 8-bit ones)."""
        return Variant(self.name, f"m{self.m}n{self.n}k{8 * self.per_register}")

    @property
    def fact_stem(self) -> str:
        return f"tensor.mma_sync_sp.{self.name}.{self.shape}"

    def kernel(self, ilp: int) -> str:
        return f"gp_mma_sp_{self.name}_{self.shape}_ilp{ilp}"

    def probe(self, ilp: int) -> str:
        return f"mma.sp.{self.name}.{self.shape}.ilp{ilp}"

    def fragments_and_prediction(self, seed: int) -> tuple[np.ndarray, np.ndarray]:
        """The fragments buffer (lanes x 20 words) with A's kept elements, B, C and the metadata, and what
        each lane must write: the sum of its 8 chains, each at C + A B with A expanded from its pattern."""
        rng = np.random.default_rng(seed)
        pattern = random_pattern(self.m, self.k, rng)
        kept = rng.integers(-2, 3, size=(self.m, self.k // 2))
        b = rng.integers(-2, 3, size=(self.k, self.n))
        c = rng.integers(-4, 5, size=(self.m, self.n))
        words = np.zeros((LANES, SPARSE_LANE_WORDS), dtype=np.uint32)
        lanes = np.arange(LANES)
        words[:, METADATA_WORD] = thread_metadata(pattern, 32 // self.per_register, lanes // 4, lanes % 4)
        e = self.per_register
        for lane in range(LANES):
            for r in range(self.a_registers):
                places = [a_position(self.compressed, lane, r, j) for j in range(e)]
                words[lane, r] = _register(self, [int(kept[i, j]) for i, j in places])
                words[lane, 4 + r] = _register(self, [-int(kept[i, j]) for i, j in places])
            for r in range(self.b_registers):
                words[lane, 8 + r] = _register(self, [int(b[b_position(self, lane, r, j)]) for j in range(e)])
            words[lane, 12 : 12 + self.d_words] = accumulator_words(self, [int(c[p]) for p in c_positions(self, lane)])
        operands = Operands(expand(kept, pattern), b, c, words)
        return words, predicted_words(self, operands)


SPARSE_VARIANTS: tuple[SparseVariant, ...] = (
    SparseVariant("f16", "m16n8k16"),
    SparseVariant("f16", "m16n8k32"),
    SparseVariant("bf16", "m16n8k32"),
    SparseVariant("int8", "m16n8k32"),
    SparseVariant("int8", "m16n8k64"),
    SparseVariant("e4m3", "m16n8k64"),
)
