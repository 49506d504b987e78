"""2:4 structured sparsity on the host: the pattern, the compressed operand, and the metadata the sparse
tensor-core instructions (mma.sp, wgmma.mma_async.sp) read.

PTX ISA, "Sparse matrix storage": a sparse A (M x K) keeps two of every four consecutive elements of a row
(a *chunk*), packed as M x K/2; the metadata gives each kept element's index within its chunk, 2 bits
each, the two indices of a chunk in its nibble (first index in the low two bits; ``::ordered_metadata``
and wgmma require the first below the second; 0b0000, 0b0101, 0b1010, 0b1111 are invalid). Each thread's
32-bit metadata register holds 8 nibbles; in a group of four consecutive threads the threads the
*sparsity selector* names hold the group's metadata, one per 8 chunks (32 elements) of a row pair's K
(one thread for K = 16, two for K = 32, all four for K = 64). Which nibble is where depends on the
element size (:func:`thread_metadata`):

* 16-bit types: a register covers four chunks (16 elements of K) of two rows 8 apart, row r in the low
  16 bits and row r + 8 in the high 16, chunk c of the four in bits 4c..4c+3; lane p of a group holds
  part p of K (LLVM's sparse-mma-2-4-f16 test states it for m16n8k32 f16; bf16 wgmma.sp and f16/bf16
  mma.sp were verified on an H200 with it);
* 8-bit types: a register covers eight chunks (32 elements of K) of one row, chunk c in bits 4c..4c+3;
  lanes 0 and 1 of a group hold rows r and r + 8 for K 0..31, lanes 2 and 3 the same rows for K 32..63.
  This was read off an H200's results (int8 mma.sp m16n8k32 and m16n8k64: the 16-bit arrangement gave
  wrong products, this one reproduced them exactly) where the ISA's figures could not be read here.

The kernels here use selector 0 and give every thread of a group the register of the thread (lane mod
that count) holds, so whichever of the group's threads the hardware reads holds its own part.
"""

from __future__ import annotations

import itertools

import numpy as np

from gpuprobe.core.results import Fact

CHUNK = 4  # elements of a chunk; two of them kept
CHUNKS_PER_HALF = 4  # chunks a 16-bit half of a metadata register covers
PAIRS = np.array(list(itertools.combinations(range(CHUNK), 2)))  # the six ordered index pairs


def random_pattern(rows: int, k: int, rng: np.random.Generator) -> np.ndarray:
    """For every chunk of a rows x k matrix, the (ascending) indices of its two kept elements: rows x k/4 x 2."""
    if k % CHUNK:
        raise ValueError(f"a 2:4 sparse row spans whole chunks of 4, not {k} elements")
    return PAIRS[rng.integers(0, len(PAIRS), size=(rows, k // CHUNK))]


def expand(compressed: np.ndarray, pattern: np.ndarray) -> np.ndarray:
    """The dense rows x k matrix (zeros elsewhere) of the rows x k/2 kept elements at ``pattern``'s places."""
    rows, half = compressed.shape
    dense = np.zeros((rows, 2 * half), dtype=compressed.dtype)
    chunk_start = CHUNK * np.arange(half // 2)[None, :, None]
    columns = (chunk_start + pattern).reshape(rows, half)
    dense[np.arange(rows)[:, None], columns] = compressed
    return dense


def nibbles(pattern: np.ndarray) -> np.ndarray:
    """Each chunk's metadata nibble: first index | second index << 2 (rows x k/4)."""
    return (pattern[..., 0] | pattern[..., 1] << 2).astype(np.uint32)


def metadata_words(pattern: np.ndarray, rows: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """Per thread, its 32-bit metadata register: chunks 4 g .. 4 g + 3 (g = ``groups``) of row ``rows`` in
    the low half, of row ``rows`` + 8 in the high half."""
    codes = nibbles(pattern)
    shifts = (4 * np.arange(CHUNKS_PER_HALF)).astype(np.uint32)
    chunks = CHUNKS_PER_HALF * groups[:, None] + np.arange(CHUNKS_PER_HALF)[None, :]

    def half(row: np.ndarray) -> np.ndarray:
        return np.bitwise_or.reduce(codes[row[:, None], chunks] << shifts, axis=1)

    return (half(rows) | half(rows + 8) << np.uint32(16)).astype(np.uint32)


def thread_metadata(pattern: np.ndarray, element_bits: int, rows: np.ndarray, lanes: np.ndarray) -> np.ndarray:
    """Per thread its metadata register (selector 0) for a sparse A of ``element_bits``-bit elements:
    ``rows`` the first row of the thread's group (q, or 16 w + q in a warpgroup), ``lanes`` its lane
    within the group of four (0..3)."""
    k = pattern.shape[1] * CHUNK
    if element_bits == 16:
        return metadata_words(pattern, rows, lanes % holders(k))
    if element_bits != 8:
        raise ValueError(f"no 2:4 metadata layout for {element_bits}-bit elements here")
    codes = nibbles(pattern)
    row = rows + 8 * (lanes % 2)
    first = 2 * CHUNKS_PER_HALF * ((lanes // 2) % max(1, k // 32))
    chunks = first[:, None] + np.arange(2 * CHUNKS_PER_HALF)[None, :]
    shifts = (4 * np.arange(2 * CHUNKS_PER_HALF)).astype(np.uint32)
    return np.bitwise_or.reduce(codes[row[:, None], chunks] << shifts, axis=1).astype(np.uint32)


def holders(k: int) -> int:
    """Threads of a group of four that hold metadata for a K-wide sparse A (one per 16 elements of K)."""
    return max(1, k // (CHUNK * CHUNKS_PER_HALF))


def not_below_beyond_noise(sparse: Fact, dense: Fact) -> bool:
    """Whether a sparse rate is at least its dense twin's as far as their noise can tell: false only when the
    sparse rate's confidence interval lies wholly under the dense one's (a fact without one is its value)."""
    sparse_high = sparse.ci[1] if sparse.ci else sparse.value
    dense_low = dense.ci[0] if dense.ci else dense.value
    return sparse_high >= dense_low
