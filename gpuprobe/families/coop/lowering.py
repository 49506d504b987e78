"""What a kernel compiled to, per step of its timed region: the opcode summary the fact sheet shows.

Read from the listing of the cubin the measuring process loaded (the one whose contracts held), so it
is the SASS that ran. A probe's timed region runs ``steps`` steps per loop iteration (32 collectives, 8
of the long ones, 4 copy round trips, 32 / log2(T) reductions of a hand-written T-lane butterfly, one
grid barrier per round); each opcode's count in the region is divided by them, so a summary reads
"REDUX.SUM.S32 1, MOV 1" per step. Loop control and what runs once per iteration
(under one per step) is left out of the summary and counted apart.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Collection
from pathlib import Path

from gpuprobe.kernels.contracts import MEMORY_OPCODES, KernelRegions
from gpuprobe.kernels.sass import Kernel, Listing, read_cubin

MAX_SHOWN = 6  # opcodes named in a summary, the most frequent first


def per_step(kernel: Kernel, steps: float) -> dict[str, float]:
    """Each opcode of the timed region (between the clock reads) per step, those at least once a step."""
    timed, _ = KernelRegions(kernel).region("timed")
    counts = Counter(ins.opcode for ins in timed)
    return {opcode: count / steps for opcode, count in counts.most_common() if count >= steps}


# What a reader looks for first: the instructions an abstraction is about (warp collectives, barriers,
# fences, atomics, asynchronous copies and their completion), then the other memory accesses (a
# library's paths for what it cannot prove, such as a source outside global memory, counted though not
# taken), then the rest (addresses, loop and branch bookkeeping). Constant loads count as the rest.
KEY = frozenset(
    {"SHFL", "REDUX", "CREDUX", "MATCH", "VOTE", "VOTEU", "BAR", "WARPSYNC", "UCGABAR_ARV", "UCGABAR_WAIT",
     "MEMBAR", "CCTL", "ATOM", "ATOMG", "ATOMS", "RED", "REDG", "UBLKCP", "SYNCS", "LDGSTS", "LDGDEPBAR",
     "DEPBAR", "ARRIVES", "NANOSLEEP", "ELECT", "FADD", "POPC", "FLO", "BREV"}
)  # fmt: skip
OTHER_MEMORY = MEMORY_OPCODES - KEY - {"LDC", "ULDC", "LDCU"}


def rank(opcode: str, count: float) -> tuple[int, float]:
    """Where an opcode goes in a summary: key instructions, other memory accesses, the rest; most first."""
    base = opcode.split(".", 1)[0]
    return (0 if base in KEY else 1 if base in OTHER_MEMORY else 2, -count)


def summary(counts: dict[str, float]) -> str:
    """``REDUX.SUM.S32 1, MOV 1`` (per step): the opcodes in :func:`rank` order, and how many others."""
    ordered = sorted(counts.items(), key=lambda item: rank(*item))
    shown = [f"{opcode} {count:.3g}" for opcode, count in ordered[:MAX_SHOWN]]
    rest = len(counts) - MAX_SHOWN
    return ", ".join(shown) + (f" and {rest} other opcodes" if rest > 0 else "") if shown else "none"


def listing_of(cubin: Path | None, kernels: Collection[str]) -> Listing | None:
    """The listing of the cubin the launcher loaded, the code of ``kernels`` alone parsed (the family's
    and its twins': a whole listing is 100,000 lines); None when the caller gave no cubin."""
    return _listing(cubin, frozenset(kernels)) if cubin is not None else None


@functools.lru_cache(maxsize=2)
def _listing(cubin: Path, kernels: frozenset[str]) -> Listing:
    """Parsed once per process, cubin and kernels (a cubin in the cache is never rewritten: its name is its
    content's hash); a second measurement in the same process (a test's) reads it again for free."""
    return read_cubin(cubin, kernels)
