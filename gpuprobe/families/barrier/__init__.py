"""The barrier family: the cost of block barriers, each run checking that the barrier ordered.

Every kernel (ptx/barrier/barrier.ptx) runs a loop of 32 barriers (or 32 producer/consumer rounds) per
iteration between %clock64 reads in thread 0, and a sample is a long minus a short launch
(:mod:`gpuprobe.families.differencing`). The check rides along: each warp writes the iteration's
number into its slot before the iteration's barriers and reads the next warp's slot after them,
summing what it read; only barriers that held every warp until all had written make every sum
1 + 2 + ... + iterations, which the host checks for every warp of every block.

Cycles only: this family does not measure the SM clock.

Cross-generation invariant (:data:`INVARIANTS`): a barrier that waits for more warps costs no
less, i.e. ``sync.block.latency.<threads>`` does not fall as ``threads`` grows (within the
samples' confidence intervals).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.differencing import SMOKE_SAMPLING, Difference, DifferencedSettings, samples_plan
from gpuprobe.families.measuring import fact
from gpuprobe.families.planning import probe
from gpuprobe.families.stepping import probe_steps
from gpuprobe.judge.invariants import Check
from gpuprobe.judge.ordering import non_decreasing
from gpuprobe.kernels.registry import unroll_of
from gpuprobe.output.sections import Section

BLOCK_SIZES = (32, 64, 128, 256, 512, 1024)
PER_SM_BLOCKS = (1, 2, 4, 8)
GROUP_THREADS = 128  # the named-barrier kernel's group size: fixed by the PTX (bar.sync id, 128)
FULL = 0xFFFFFFFF

PROBES = [
    *(f"barrier.block.{threads}" for threads in BLOCK_SIZES),
    "barrier.per_sm",
    "barrier.named",
    "barrier.split",
]


SECTIONS = (
    Section(
        "Block barriers",
        ("sync.block.",),
        ("barrier.",),
        blurb="Cycles per __syncthreads vs threads per block and with 8 blocks per SM, per named-barrier sync and "
        "per producer/consumer round (bar.arrive + bar.sync), each with a once-per-32-barriers ordering check.",
    ),
)


@dataclass(frozen=True)
class Settings(DifferencedSettings):
    per_sm_threads: int = 256
    named_threads: int = 256
    split_threads: int = 256

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.named_threads % GROUP_THREADS or not 0 < self.named_threads <= 1024:
            raise ValueError(f"Settings.named_threads: 1 to 8 groups of {GROUP_THREADS}, not {self.named_threads}")
        if self.split_threads % 64 or not 0 < self.split_threads <= 1024:
            raise ValueError(f"Settings.split_threads must be pairs of warps up to 1024, not {self.split_threads}")
        if self.per_sm_threads % 32 or not 0 < self.per_sm_threads <= 1024:
            raise ValueError(f"Settings.per_sm_threads must be whole warps up to 1024, not {self.per_sm_threads}")


def triangle(count: int) -> int:
    """1 + 2 + ... + count, mod 2^32: what a warp's sum must be after ``count`` checked rounds."""
    return (count * (count + 1) // 2) & FULL


def expected_sums(kernel: str, threads: int, iterations: int) -> np.ndarray:
    """Each warp's sum as the host predicts it (producers of the split kernel write 0)."""
    warps = threads // 32
    if kernel == "gp_bar_split":
        rounds = iterations * unroll_of(kernel)
        return np.array([triangle(rounds) if w % 2 else 0 for w in range(warps)], dtype=np.uint64)
    return np.full(warps, triangle(iterations), dtype=np.uint64)


@dataclass
class Launch:
    """One checked launch: every block's cycles and SM id."""

    cycles: np.ndarray
    sms: np.ndarray


def checked_launch(request: Request, kernel: str, iterations: int, blocks: int, threads: int) -> Launch:
    """Run ``kernel`` and check every warp's sum; ProbeFailure naming the first wrong one."""
    warps = threads // 32
    words = 2 + warps  # per block: cycles, SM id, one sum per warp
    out = request.outputs.get(blocks * words)
    args = [np.uint32(iterations), out]
    values = request.kernels.results(kernel, args, out, blocks * words, grid=blocks, block=threads)
    table = values.reshape(blocks, words)
    expected = expected_sums(kernel, threads, iterations)
    for block, row in enumerate(table):
        wrong = np.flatnonzero(row[2 : 2 + warps] != expected)
        if wrong.size:
            warp = int(wrong[0])
            raise ProbeFailure(
                f"{kernel}: block {block} warp {warp} summed {int(row[2 + warp])}, the host predicts "
                f"{int(expected[warp])} after {iterations} iterations: a barrier let a read pass a write"
            )
    return Launch(table[:, 0].astype(np.float64), table[:, 1].astype(np.int64))


def measure_single(
    request: Request, settings: Settings, probe: str, kernel: str, threads: int, fact_id: str
) -> Measured:
    def launch(iterations: int) -> float:
        return float(checked_launch(request, kernel, iterations, 1, threads).cycles[0])

    samples = Difference(launch, settings.lengths(unroll_of(kernel)), kernel).samples(settings.sampling)
    return Measured(probe, ProbeOutcome("ok", f"{threads} threads"), [fact(fact_id, samples, "cycle", probe)])


def measure_per_sm(request: Request, settings: Settings) -> Measured:
    """Blocks of ``per_sm_threads`` at 1, 2, 4 and 8 per SM; the median block's cost at each."""
    kernel, threads = "gp_bar_block", settings.per_sm_threads
    lengths = settings.lengths(unroll_of(kernel))
    medians: list[float] = []
    placements: list[int] = []
    samples: dict[int, list[float]] = {}
    for per_sm in PER_SM_BLOCKS:
        blocks = per_sm * request.device.sm_count

        def launch(iterations: int, blocks: int = blocks) -> float:
            run = checked_launch(request, kernel, iterations, blocks, threads)
            placements.append(int(np.bincount(run.sms).max()))
            return float(np.median(run.cycles))

        samples[per_sm] = Difference(launch, lengths, f"{kernel} ({per_sm} per SM)").samples(settings.sampling)
        medians.append(float(np.median(samples[per_sm])))
    series = {"per_sm": {"blocks_per_sm": [float(k) for k in PER_SM_BLOCKS], "cycles_per_barrier": medians}}
    note = f"{threads} threads per block; at most {max(placements)} blocks seen on one SM"
    facts = [fact("sync.block.latency.per_sm_8", samples[PER_SM_BLOCKS[-1]], "cycle", "barrier.per_sm")]
    return Measured("barrier.per_sm", ProbeOutcome("ok", note, series), facts)


def measure(request: Request) -> Probes:
    """The family's runnable probes in order, each as (name, step); ``state`` is not used."""
    s = request.settings or Settings()
    singles = {  # probe: (kernel, threads, fact)
        **{f"barrier.block.{t}": ("gp_bar_block", t, f"sync.block.latency.{t}") for t in BLOCK_SIZES},
        "barrier.named": ("gp_bar_named", s.named_threads, "sync.block.named.latency"),
        "barrier.split": ("gp_bar_split", s.split_threads, "sync.block.split.latency"),
    }
    steps: dict[str, Callable[[], Measured]] = {
        name: functools.partial(measure_single, request, s, name, *single) for name, single in singles.items()
    }
    steps["barrier.per_sm"] = functools.partial(measure_per_sm, request, s)
    return probe_steps(PROBES, steps, request.runnable)


BARRIER_CYCLES = 300.0  # one barrier with its share of the ordering check, at most (tens of cycles measured)


def plan(settings: Settings, device: Device) -> Plan:
    """Every probe at its most repeats (see :mod:`gpuprobe.families.planning`): the per-SM probe's blocks
    counted as taking turns on their SM."""
    unroll = unroll_of("gp_bar_block")  # as gp_bar_named's and gp_bar_split's
    single = probe(samples_plan(settings, device, BARRIER_CYCLES, unroll))
    per_sm = probe(*(samples_plan(settings, device, BARRIER_CYCLES, unroll, serial=k) for k in PER_SM_BLOCKS))
    return sum([single] * (len(PROBES) - 1), per_sm)


# A first contact: one block of 8 warps (each warp's check reads another warp's slot), one sample.
SMOKE = Smoke(probes=("barrier.block.256",), settings=Settings(**SMOKE_SAMPLING))


def barrier_monotonic(facts: dict[str, Fact], device: Device) -> list[Check]:
    """``sync.block.latency.<threads>`` does not fall as the block grows (a barrier waiting for more
    warps costs no less), within the facts' confidence intervals."""
    ordered = [(str(t), f"sync.block.latency.{t}") for t in BLOCK_SIZES]
    return non_decreasing(facts, ordered, "barrier_cost_grows")


INVARIANTS = (barrier_monotonic,)


FAMILY = Family(
    name="barrier",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
    sections=SECTIONS,
    invariants=INVARIANTS,
)
