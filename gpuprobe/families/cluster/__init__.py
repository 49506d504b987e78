"""The cluster family (sm_90+): cluster.sync() vs cluster size, and mbarrier phases, each checked.

Every kernel (ptx/cluster/cluster.ptx) runs 32 barriers (or mbarrier phases) per loop iteration between
%clock64 reads; a sample is a long minus a short launch (:mod:`gpuprobe.families.differencing`).

* ``cluster.bar.<size>`` (fact ``sync.cluster.latency.<size>``): clusters of ``size`` one-warp
  blocks, declared in the PTX (.reqnctapercluster), so a plain launch of a grid that is a multiple
  of ``size`` runs clusters. Each block sums, once per iteration, the number its neighbour wrote
  into block 0's shared memory before the barriers: 1 + 2 + ... + iterations in every block, else
  a block passed a barrier before all had arrived. The host also checks every block's rank.
* ``cluster.mbarrier.*`` (facts ``sync.mbarrier.*``): one warp, the arrival of each step
  predicated on the previous phase test, so a phase not complete when tested throws the phase
  count off; the host checks the parities the kernel tests at the end (and, for the
  transaction-count kernel, that pending bytes held a phase open).

Cycles only: this family does not measure the SM clock.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.families.barrier import triangle
from gpuprobe.families.base import Measured, Plan, ProbeFailure, Probes, Request, Smoke
from gpuprobe.families.differencing import (
    SMOKE_SAMPLING,
    UNROLL,
    Difference,
    DifferencedSettings,
    samples_plan,
)
from gpuprobe.families.measuring import Kernels, fact
from gpuprobe.families.planning import combined, probe
from gpuprobe.families.stepping import runs
from gpuprobe.judge.invariants import Check
from gpuprobe.judge.ordering import pair_not_below
from gpuprobe.output.sections import Section
from gpuprobe.runner.gpu import Launcher

CLUSTER_SIZES = (2, 4, 8)
CLUSTER_WORDS = 4  # per block: cycles, SM id, sum, rank in the cluster
MBAR_WORDS = 4  # cycles, previous phase complete, current phase complete, complete before the bytes
MBAR_PROLOGUE_PHASES = {"gp_mbar_arrive_wait": 0, "gp_mbar_tx": 1}  # untimed phases before the loop

PROBES = [*(f"cluster.bar.{size}" for size in CLUSTER_SIZES), "cluster.mbarrier.arrive_wait", "cluster.mbarrier.tx"]


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


@dataclass
class _Context:
    launcher: Launcher
    parameters: dict[str, list[tuple[str, str]]]
    settings: Settings

    @property
    def kernels(self) -> Kernels:
        return Kernels(self.launcher, self.parameters)


def measure_cluster(ctx: _Context, size: int) -> Measured:
    kernel, probe = f"gp_cluster_bar_{size}", f"cluster.bar.{size}"
    blocks = size * ctx.settings.clusters
    out = ctx.launcher.alloc(blocks * CLUSTER_WORDS * 8)
    sms: set[int] = set()

    def launch(iterations: int) -> float:
        count = blocks * CLUSTER_WORDS
        values = ctx.kernels.run(kernel, [np.uint32(iterations), out], out, count, grid=blocks, block=32)
        table = values.reshape(blocks, CLUSTER_WORDS)
        check_cluster(kernel, table, size, iterations)
        sms.update(int(sm) for sm in table[:, 1])
        return float(np.median(table[:, 0].astype(np.float64)))

    samples = Difference(launch, ctx.settings.lengths, kernel).samples(ctx.settings.stopping())
    note = f"{ctx.settings.clusters} clusters of {size} blocks over {len(sms)} SMs"
    return Measured(probe, ProbeOutcome("ok", note), [fact(f"sync.cluster.latency.{size}", samples, "cycle", probe)])


def measure_mbarrier(ctx: _Context, probe: str, kernel: str, fact_id: str) -> Measured:
    out = ctx.launcher.alloc(MBAR_WORDS * 8)

    def launch(iterations: int) -> float:
        values = [int(v) for v in ctx.kernels.run(kernel, [np.uint32(iterations), out], out, MBAR_WORDS, block=32)]
        if values[1:] != PHASE_TESTS:
            phases = MBAR_PROLOGUE_PHASES[kernel] + iterations * UNROLL
            raise ProbeFailure(
                f"{kernel}: after {phases} phases the tests read (previous complete, current complete, "
                f"complete with bytes pending) = {tuple(values[1:])}, the host predicts {tuple(PHASE_TESTS)}"
            )
        return float(values[0])

    samples = Difference(launch, ctx.settings.lengths, kernel).samples(ctx.settings.stopping())
    return Measured(probe, ProbeOutcome("ok"), [fact(fact_id, samples, "cycle", probe)])


def measure(request: Request) -> Probes:
    """The family's runnable probes in order, each as (name, run) (see :mod:`gpuprobe.families.stepping`).
    ``state`` is not used."""
    launcher, parameters, runnable, settings = request.launcher, request.parameters, request.runnable, request.settings
    ctx = _Context(launcher, parameters, settings or Settings())
    steps: dict[str, Callable[[], Measured]] = {
        f"cluster.bar.{size}": (lambda size=size: measure_cluster(ctx, size)) for size in CLUSTER_SIZES
    }
    steps["cluster.mbarrier.arrive_wait"] = lambda: measure_mbarrier(
        ctx, "cluster.mbarrier.arrive_wait", "gp_mbar_arrive_wait", "sync.mbarrier.arrive_wait.latency"
    )
    steps["cluster.mbarrier.tx"] = lambda: measure_mbarrier(
        ctx, "cluster.mbarrier.tx", "gp_mbar_tx", "sync.mbarrier.tx.latency"
    )

    return runs(PROBES, steps, runnable)


CLUSTER_BARRIER_CYCLES = 2000.0  # one cluster barrier at most (a GPU-scope release and its wait)
MBARRIER_PHASE_CYCLES = 500.0  # one mbarrier phase at most


def plan(settings: Settings, device: Device) -> Plan:
    """Every probe at its most repeats (see :mod:`gpuprobe.families.planning`); a launch's clusters run
    side by side, each on SMs of its own."""
    bars = [probe(samples_plan(settings, device, CLUSTER_BARRIER_CYCLES)) for _ in CLUSTER_SIZES]
    mbarriers = [probe(samples_plan(settings, device, MBARRIER_PHASE_CYCLES)) for _ in range(2)]
    return combined([*bars, *mbarriers])


# A first contact: the smallest cluster, one of them, one sample (a cluster launch and its checked ranks and sums).
SMOKE = Smoke(probes=("cluster.bar.2",), settings=Settings(clusters=1, **SMOKE_SAMPLING))


def cluster_above_block(facts: dict[str, Fact], device: Device) -> list[Check]:
    """cluster.sync() of the smallest cluster (a GPU-scope release, blocks on other SMs) costs no
    less than a one-warp __syncthreads (the barrier family's sync.block.latency.32)."""
    smallest = f"sync.cluster.latency.{CLUSTER_SIZES[0]}"
    return pair_not_below(facts, "cluster_sync_above_block_sync", "sync.block.latency.32", smallest)


INVARIANTS = (cluster_above_block,)
