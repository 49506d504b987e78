"""The streaming kernels' checksum arithmetic, as their PTX does it, for the simulated kernels.

gp_ac_copy_*, gp_ac_bulk_stream, gp_ac_dsm_stream and gp_ht_sm_copy add each 16-byte chunk's words in
pairs with ``add.u32`` (wrapping at 2**32), widen the two pair sums with ``cvt.u64.u32`` and add them to
a 64-bit total. Written here from the PTX, apart from the host's prediction, so that a host that
predicts another arithmetic fails here as it failed on the H200.
"""

from __future__ import annotations

import numpy as np


def chunk_totals(words: np.ndarray) -> np.ndarray:
    """Per 16-byte chunk of ``words`` (uint32): (w0 + w1 mod 2**32) + (w2 + w3 mod 2**32), in 64 bits."""
    w = words.reshape(-1, 4).astype(np.uint32, copy=False)  # the pair sums wrap at 2**32 as add.u32 does
    return (w[:, 0] + w[:, 1]).astype(np.uint64) + (w[:, 2] + w[:, 3]).astype(np.uint64)


def thread_totals(words: np.ndarray, threads: int) -> np.ndarray:
    """Per thread of a grid of ``threads``, the total of its chunks (chunk t + k x threads is thread t's)."""
    return chunk_totals(words).reshape(-1, threads).sum(axis=0, dtype=np.uint64)
