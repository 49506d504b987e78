"""The cluster family (sm_90+): what a thread-block cluster's barrier costs as the cluster grows, and what
one mbarrier phase costs, every launch checked.

Each kernel (ptx/cluster/cluster.ptx) isolates the synchronization: its timed loop holds ``unroll`` barriers
or phases per iteration and nothing else but a once-per-iteration check (the count is declared in
ptx/cluster/cluster.toml, and the SASS contract holds the kernel to it), between two %clock64 reads. A sample
is a long minus a short launch (:class:`~gpuprobe.families.differencing.Difference`), so the clock reads and
the loop's edges cancel.

* ``cluster.bar.<size>`` (``sync.cluster.latency.<size>``): clusters of ``size`` one-warp blocks (the cluster
  barrier is all a block waits for), formed by the PTX's .reqnctapercluster from a plain launch of a
  multiple of ``size`` blocks. Once per iteration each
  block writes the iteration's number into its slot in block 0's shared memory and, after the barriers,
  adds its neighbour's slot to a sum: 1 + 2 + ... + iterations in every block only if no block passed a
  barrier early. The host checks every sum, and every block's rank in its cluster.
* ``cluster.mbarrier.*`` (``sync.mbarrier.*``): one warp whose every arrival is predicated on the previous
  phase's test, so the steps are one dependent chain and a phase not complete when tested shifts the phase
  count; the host checks the parities the kernel tests at the end (and, with a transaction count, that
  pending bytes held a phase open).

Cycles only: this family does not measure the SM clock.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.families.barrier import triangle
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.differencing import SMOKE_SAMPLING, Difference, DifferencedSettings, samples_plan
from gpuprobe.families.measuring import fact
from gpuprobe.families.planning import combined, probe
from gpuprobe.families.stepping import probe_steps
from gpuprobe.judge.invariants import Check
from gpuprobe.judge.ordering import pair_not_below
from gpuprobe.kernels.registry import unroll_of
from gpuprobe.output.sections import Section

CLUSTER_SIZES = (2, 4, 8)
CLUSTER_WORDS = 4  # per block: cycles, SM id, sum, rank in the cluster
MBAR_WORDS = 4  # cycles, previous phase complete, current phase complete, complete before the bytes
MBARRIERS = {  # probe: (kernel, fact, untimed phases before its loop)
    "cluster.mbarrier.arrive_wait": ("gp_mbar_arrive_wait", "sync.mbarrier.arrive_wait.latency", 0),
    "cluster.mbarrier.tx": ("gp_mbar_tx", "sync.mbarrier.tx.latency", 1),
}

PROBES = [*(f"cluster.bar.{size}" for size in CLUSTER_SIZES), *MBARRIERS]


SECTIONS = (
    Section(
        "Clusters and mbarriers",
        ("sync.cluster.", "sync.mbarrier."),
        ("cluster.",),
        blurb="Cycles per cluster.sync() (release/acquire arrive + wait) vs cluster size, and per mbarrier phase of "
        "one warp, without and with a transaction count (sm_90+).",
    ),
)


@dataclass(frozen=True)
class Settings(DifferencedSettings):
    clusters: int = 16  # clusters per launch

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.clusters < 1:
            raise ValueError(f"Settings.clusters must be at least 1, not {self.clusters}")


def check_cluster(kernel: str, table: np.ndarray, size: int, iterations: int) -> None:
    """Every block's rank is its place in its cluster and its sum is 1 + ... + iterations."""
    for block, (_, _, total, rank) in enumerate(table):
        if int(rank) != block % size:
            raise ProbeFailure(f"{kernel}: block {block} has rank {int(rank)} in its cluster, not {block % size}")
        if int(total) != triangle(iterations):
            raise ProbeFailure(
                f"{kernel}: block {block} summed {int(total)}, the host predicts {triangle(iterations)}: "
                "a block left a cluster barrier before every block had arrived"
            )


# What the mbarrier kernels' tests must read after the loop: the phase before the current one is
# complete, the current one is not, and no phase completed while bytes were pending.
PHASE_TESTS = [1, 0, 0]


def measure_cluster(request: Request, settings: Settings, size: int) -> Measured:
    """One cluster.sync() in clusters of ``size`` blocks: the median block's cycles per barrier."""
    kernel, probe = f"gp_cluster_bar_{size}", f"cluster.bar.{size}"
    blocks = size * settings.clusters
    count = blocks * CLUSTER_WORDS
    out = request.outputs.get(count)
    sms: set[int] = set()

    def launch(iterations: int) -> float:
        values = request.kernels.results(kernel, [np.uint32(iterations), out], out, count, grid=blocks, block=32)
        table = values.reshape(blocks, CLUSTER_WORDS)
        check_cluster(kernel, table, size, iterations)
        sms.update(int(sm) for sm in table[:, 1])
        return float(np.median(table[:, 0].astype(np.float64)))

    samples = Difference(launch, settings.lengths(unroll_of(kernel)), kernel).samples(settings.sampling)
    note = f"{settings.clusters} clusters of {size} blocks over {len(sms)} SMs"
    return Measured(probe, ProbeOutcome("ok", note), [fact(f"sync.cluster.latency.{size}", samples, "cycle", probe)])


def measure_mbarrier(request: Request, settings: Settings, probe: str) -> Measured:
    """One mbarrier phase of one warp: cycles per phase, the parities tested after the loop checked."""
    kernel, fact_id, prologue = MBARRIERS[probe]
    unroll = unroll_of(kernel)
    out = request.outputs.get(MBAR_WORDS)

    def launch(iterations: int) -> float:
        args = [np.uint32(iterations), out]
        values = [int(v) for v in request.kernels.results(kernel, args, out, MBAR_WORDS, block=32)]
        if values[1:] != PHASE_TESTS:
            raise ProbeFailure(
                f"{kernel}: after {prologue + iterations * unroll} phases the tests read (previous complete, "
                f"current complete, complete with bytes pending) = {tuple(values[1:])}, the host predicts "
                f"{tuple(PHASE_TESTS)}"
            )
        return float(values[0])

    samples = Difference(launch, settings.lengths(unroll), kernel).samples(settings.sampling)
    return Measured(probe, ProbeOutcome("ok"), [fact(fact_id, samples, "cycle", probe)])


def measure(request: Request) -> Probes:
    """The family's runnable probes in order, each as (name, step); ``state`` is not used."""
    settings = request.settings or Settings()
    steps: dict[str, Callable[[], Measured]] = {
        f"cluster.bar.{size}": functools.partial(measure_cluster, request, settings, size) for size in CLUSTER_SIZES
    }
    steps.update({name: functools.partial(measure_mbarrier, request, settings, name) for name in MBARRIERS})
    return probe_steps(PROBES, steps, request.runnable)


CLUSTER_BARRIER_CYCLES = 2000.0  # one cluster barrier at most (a GPU-scope release and its wait)
MBARRIER_PHASE_CYCLES = 500.0  # one mbarrier phase at most


def plan(settings: Settings, device: Device) -> Plan:
    """Every probe at its most repeats (see :mod:`gpuprobe.families.planning`); a launch's clusters run
    side by side, each on SMs of its own."""

    def one(kernel: str, step_cycles: float) -> Plan:
        return probe(samples_plan(settings, device, step_cycles, unroll_of(kernel)))

    bars = [one(f"gp_cluster_bar_{size}", CLUSTER_BARRIER_CYCLES) for size in CLUSTER_SIZES]
    return combined([*bars, *(one(kernel, MBARRIER_PHASE_CYCLES) for kernel, _, _ in MBARRIERS.values())])


# A first contact: the smallest cluster, one of them, one sample (a cluster launch and its checked ranks and sums).
SMOKE = Smoke(probes=("cluster.bar.2",), settings=Settings(clusters=1, **SMOKE_SAMPLING))


def cluster_above_block(facts: dict[str, Fact], device: Device) -> list[Check]:
    """cluster.sync() of the smallest cluster (a GPU-scope release, blocks on other SMs) costs no
    less than a one-warp __syncthreads (the barrier family's sync.block.latency.32)."""
    smallest = f"sync.cluster.latency.{CLUSTER_SIZES[0]}"
    return pair_not_below(facts, "cluster_sync_above_block_sync", "sync.block.latency.32", smallest)


INVARIANTS = (cluster_above_block,)


FAMILY = Family(
    name="cluster",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
    sections=SECTIONS,
    invariants=INVARIANTS,
)
