"""What a streaming kernel's sums are checked against: the source pattern and the sums of its chunks.

The streaming kernels (host_transfer's SM copy, async_copy's global->shared streams; the bandwidth
family checks its own reads' sums with :func:`check_sums` too) read a source
whose 32-bit word i holds i x PATTERN_MULTIPLIER (+ an offset), modulo 2**32, so every 16-byte chunk
differs, and each thread reports the sum of the words it moved; chunk t + k x threads belongs to
thread t. A chunk moved twice or not at all changes some thread's sum.
"""

from __future__ import annotations

import numpy as np

from gpuprobe.core.errors import ProbeFailure

PATTERN_MULTIPLIER = 0x9E3779B1


def pattern(words: int, offset: int = 0) -> np.ndarray:
    """Source words: word i holds i x PATTERN_MULTIPLIER + offset, modulo 2**32 (computed in place: a
    source of hundreds of MiB is one buffer, not three)."""
    values = np.arange(words, dtype=np.uint32)
    values *= np.uint32(PATTERN_MULTIPLIER)
    values += np.uint32(offset)
    return values


def chunk_sums(words: np.ndarray) -> np.ndarray:
    """What a kernel adds to its 64-bit sum for each 16-byte chunk (w0, w1, w2, w3): as every streaming
    kernel does it, (w0 + w1) and (w2 + w3) each in 32 bits (wrapping), the two widened and added."""
    pairs = words.reshape(-1, 2, 2).sum(axis=2, dtype=np.uint32)  # wraps at 2**32, as add.u32 does
    return pairs.sum(axis=1, dtype=np.uint64)


def stream_sums(chunks: np.ndarray, threads: int) -> np.ndarray:
    """Per thread, the sum of its 16-byte chunks (t + k x threads) given each chunk's sum (``chunk_sums``)."""
    return chunks.reshape(-1, threads).sum(axis=0, dtype=np.uint64)


def check_sums(kernel: str, got: np.ndarray, expected: np.ndarray, what: str = "thread") -> None:
    """Every ``what``'s (thread's, block's) sum is the host's; ProbeFailure counting those that are not and
    naming the first."""
    wrong = np.flatnonzero(got != expected)
    if wrong.size:
        i = int(wrong[0])
        raise ProbeFailure(
            f"{kernel}: {wrong.size} of {len(expected)} {what} sums differ from the host's "
            f"({what} {i}: {int(got[i]):#x}, expected {int(expected[i]):#x})"
        )
