"""2:4 sparsity on the host: patterns, compression, and the metadata registers, against the PTX ISA's and a
published kernel's own statement of them."""

from __future__ import annotations

import numpy as np
import pytest

from gpuprobe.families.sparsity import PAIRS, expand, holders, metadata_words, nibbles, random_pattern


def test_a_pattern_keeps_two_ascending_places_in_every_chunk() -> None:
    pattern = random_pattern(16, 64, np.random.default_rng(1))
    assert pattern.shape == (16, 16, 2) and np.all(pattern[..., 0] < pattern[..., 1])
    assert {tuple(p) for p in pattern.reshape(-1, 2)} == {tuple(p) for p in PAIRS}  # all six pairs occur
    with pytest.raises(ValueError, match="chunks of 4"):
        random_pattern(1, 6, np.random.default_rng(1))


def test_expanding_puts_each_kept_element_at_its_place_and_zeros_elsewhere() -> None:
    kept = np.array([[1.0, 2.0, 3.0, 4.0]])
    pattern = np.array([[[0, 3], [1, 2]]])
    assert expand(kept, pattern).tolist() == [[1.0, 0.0, 0.0, 2.0, 0.0, 3.0, 4.0, 0.0]]


def test_nibbles_never_take_the_values_the_isa_calls_invalid() -> None:
    codes = set(nibbles(PAIRS[None, :, :]).ravel().tolist())
    assert codes.isdisjoint({0b0000, 0b0101, 0b1010, 0b1111}) and len(codes) == 6


def test_metadata_of_elements_at_places_0_and_2_is_0x8888_per_row_half() -> None:
    """LLVM's sparse-mma-2-4-f16 integration test (mlir/test/Integration/Dialect/SparseTensor/GPU/CUDA): with
    every chunk's elements at places 0 and 2, each 16-bit half of a metadata register is 0x8888."""
    pattern = np.tile(np.array([0, 2]), (16, 8, 1))
    words = metadata_words(pattern, np.zeros(4, dtype=np.int64), np.array([0, 1, 0, 1]))
    assert [hex(w) for w in words] == ["0x88888888"] * 4


def test_metadata_thread_p_holds_k_part_p_of_rows_q_and_q_plus_8() -> None:
    """The same test's statement for m16n8k32 f16: lane 4 q + p (p = 0, 1) holds the metadata of row q,
    K elements 16 p .. 16 p + 15, in its low 16 bits, and of row q + 8 in its high 16 bits."""
    rng = np.random.default_rng(3)
    pattern = random_pattern(16, 32, rng)
    codes = nibbles(pattern)
    lanes = np.arange(32)
    words = metadata_words(pattern, lanes // 4, (lanes % 4) % holders(32))
    for lane in range(32):
        q, p = lane // 4, lane % 2
        low = sum(int(codes[q, 4 * p + c]) << (4 * c) for c in range(4))
        high = sum(int(codes[q + 8, 4 * p + c]) << (4 * c) for c in range(4))
        assert int(words[lane]) == low | high << 16, lane


def test_metadata_holders_are_one_per_16_elements_of_k() -> None:
    assert [holders(k) for k in (16, 32, 64)] == [1, 2, 4]
