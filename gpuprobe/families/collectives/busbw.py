"""nccl-tests' arithmetic for each collective: how a message size is laid out over the ranks, the
algorithm and bus bandwidth it reports, and what every element of every rank's output must hold.

Sizes and bandwidths follow nccl-tests (https://github.com/NVIDIA/nccl-tests, doc/PERFORMANCE.md and
each test's ``GetBw``): the size S is the per-rank buffer of its "size" column (the whole gathered
buffer for all-gather, the whole input for reduce-scatter and all-to-all), ``algbw = S / t``, and
``busbw = algbw x factor`` with the factor that makes the figure independent of the rank count n and
comparable with the hardware's link rate: all-reduce 2(n-1)/n (every element is reduced over n-1 links
and sent back over n-1), reduce-scatter, all-gather and all-to-all (n-1)/n, broadcast 1 (all the data
leaves the root).

Every rank's input is :func:`inputs`' pattern (small integers, exact in float32 and so are their sums);
:func:`expected` predicts any element of any rank's output from it, so the output is checked at the
indices :func:`check_indices` picks: all of them for a small buffer, a spread sample with both ends of
every rank's share for a large one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuprobe.runner.nccl import COLLECTIVES

ELEMENT = 4  # float32, as nccl-tests' default type
PERIOD = 65521  # the input pattern: (index + rank x RANK_OFFSET) mod PERIOD (a prime)
RANK_OFFSET = 7919  # each rank's pattern shifted by a prime: no two ranks' data alike

BUS_FACTORS: dict[str, Callable[[int], float]] = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
    "all_to_all": lambda n: (n - 1) / n,
}
"""nccl-tests' bus-bandwidth correction per collective (doc/PERFORMANCE.md, "Summary")."""


def algbw_gbps(size_bytes: int, seconds: float) -> float:
    """nccl-tests' algorithm bandwidth: the size over the time, GB/s (10^9 bytes)."""
    return size_bytes / seconds / 1e9


def busbw_gbps(collective: str, size_bytes: int, seconds: float, ranks: int) -> float:
    """nccl-tests' bus bandwidth: the algorithm bandwidth times the collective's factor for ``ranks``."""
    return algbw_gbps(size_bytes, seconds) * BUS_FACTORS[collective](ranks)


@dataclass(frozen=True)
class Layout:
    """One collective at one size over ``ranks`` ranks: NCCL's count argument and each rank's buffers
    (in elements); ``size_bytes`` is what nccl-tests reports as the size (S, rounded to whole shares)."""

    collective: str
    ranks: int
    count: int  # what is passed to NCCL: elements per rank's share (gather, scatter, all-to-all), else all
    send_elements: int
    recv_elements: int

    @property
    def size_bytes(self) -> int:
        return max(self.send_elements, self.recv_elements) * ELEMENT

    @property
    def share(self) -> int:
        """The elements each rank contributes or receives as its part (the whole buffer for all-reduce
        and broadcast)."""
        return self.count


def layout(collective: str, size_bytes: int, ranks: int) -> Layout | None:
    """The layout of ``collective`` at nccl-tests' size ``size_bytes`` (rounded down to whole elements,
    and to whole shares where the buffer is split over the ranks); None when that leaves nothing."""
    if collective not in BUS_FACTORS:
        raise ValueError(f"collective must be one of {', '.join(COLLECTIVES)}, not {collective!r}")
    elements = size_bytes // ELEMENT
    if collective in ("all_reduce", "broadcast"):
        return Layout(collective, ranks, elements, elements, elements) if elements else None
    share = elements // ranks
    if not share:
        return None
    if collective == "all_gather":
        return Layout(collective, ranks, share, share, share * ranks)
    if collective == "reduce_scatter":
        return Layout(collective, ranks, share, share * ranks, share)
    return Layout(collective, ranks, share, share * ranks, share * ranks)  # all_to_all


def sizes(min_bytes: int, max_bytes: int, factor: int) -> list[int]:
    """``min_bytes``, then times ``factor`` while at most ``max_bytes`` (nccl-tests' -b, -e and -f)."""
    if min_bytes < ELEMENT or max_bytes < min_bytes or factor < 2:
        raise ValueError(f"sizes: need {ELEMENT} <= min <= max and a factor of 2 or more")
    found, size = [], min_bytes
    while size <= max_bytes:
        found.append(size)
        size *= factor
    return found


def inputs(rank: int, indices: np.ndarray) -> np.ndarray:
    """Rank ``rank``'s input at ``indices``, as gp_coll_pattern writes it (float32)."""
    return ((indices.astype(np.int64) + rank * RANK_OFFSET) % PERIOD).astype(np.float32)


def pattern_offset(rank: int) -> int:
    return rank * RANK_OFFSET


def expected(plan: Layout, rank: int, indices: np.ndarray) -> np.ndarray:
    """What element ``indices`` of rank ``rank``'s output must hold after the collective."""
    n, share, k = plan.ranks, plan.share, indices.astype(np.int64)
    if plan.collective == "all_reduce":
        return np.sum([inputs(r, k) for r in range(n)], axis=0, dtype=np.float32)
    if plan.collective == "broadcast":
        return inputs(0, k)
    if plan.collective == "all_gather":  # rank q's share lands at q x share on every rank
        owner, within = np.divmod(k, share)
        return np.choose(owner, [inputs(r, within) for r in range(n)]).astype(np.float32)
    if plan.collective == "reduce_scatter":  # rank q gets share q of the sum
        return np.sum([inputs(r, rank * share + k) for r in range(n)], axis=0, dtype=np.float32)
    sender, within = np.divmod(k, share)  # all_to_all: share q of rank r lands as share r of rank q
    return np.choose(sender, [inputs(r, rank * share + within) for r in range(n)]).astype(np.float32)


def check_indices(plan: Layout, full_limit_bytes: int, samples: int, seed: int) -> np.ndarray:
    """The output elements to check: every one up to ``full_limit_bytes``; above, ``samples`` spread at
    random and the first and last element of every share (where a wrong offset or a short copy shows)."""
    total = plan.recv_elements
    if total * ELEMENT <= full_limit_bytes:
        return np.arange(total, dtype=np.int64)
    share = plan.share if plan.collective in ("all_gather", "all_to_all") else total
    starts = np.arange(0, total, share, dtype=np.int64)
    ends = np.minimum(starts + share, total) - 1
    spread = np.random.default_rng(seed).integers(0, total, size=samples, dtype=np.int64)
    return np.unique(np.concatenate([starts, ends, spread]))


def mismatch(plan: Layout, rank: int, indices: np.ndarray, got: np.ndarray) -> str | None:
    """Where rank ``rank``'s output ``got`` (at ``indices``) is not what :func:`expected` says; None when
    it is. A NaN is an element NCCL never wrote (the output is poisoned before)."""
    want = expected(plan, rank, indices)
    wrong = np.flatnonzero(~(got == want))
    if not wrong.size:
        return None
    first = int(wrong[0])
    what = "never written (still the poison)" if np.isnan(got[first]) else f"{float(got[first]):g}"
    return (f"{plan.collective} of {plan.size_bytes} B over {plan.ranks} ranks: rank {rank} element "
            f"{int(indices[first])} is {what}, expected {float(want[first]):g} ({wrong.size} of {indices.size} "
            "checked elements wrong)")  # fmt: skip
