"""One verified sample of one kernel's cost, for every kind of coop probe and its twin.

A C++ kernel of ptx/coop/ has the interface and the check of the hand-written kernel it stands beside,
so each sampler here runs either: it launches the kernel it is given, holds every launch's result to
what the host predicts (a ProbeFailure otherwise), and returns the cost of one step (one collective,
barrier, copy round trip or add), in cycles. Most are a long minus a short launch
(:mod:`gpuprobe.families.differencing`), so what a timed region pays once cancels.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.families.atomics import check_chain
from gpuprobe.families.barrier import expected_sums
from gpuprobe.families.base import Request
from gpuprobe.families.chase import OUT_WORDS, Chase, memory_chase, node_of, random_cycle
from gpuprobe.families.cluster import CLUSTER_WORDS, check_cluster
from gpuprobe.families.differencing import Difference, DifferencedSettings, Lengths
from gpuprobe.families.grid_sync import GridBarrier
from gpuprobe.families.grid_sync import Settings as GridSettings
from gpuprobe.families.warp import LaneChain, chain_launch
from gpuprobe.kernels.registry import unroll_of

Sample = Callable[[], float]  # one verified sample of one step's cost, in cycles


def lane_chain(request: Request, chain: LaneChain, short: int, long: int) -> Sample:
    """A warp-family chain (C++ or PTX), ``short`` and ``long`` iterations of its ``unroll`` steps: cycles
    per fact unit (one collective, or one whole reduction where the twin's step is one butterfly stage)."""
    launch = chain_launch(request, chain)
    lengths = Lengths(short, long, chain.unroll)
    difference = Difference(launch, lengths, chain.kernel)
    return lambda: difference.sample() / chain.per_fact


def block_barrier(request: Request, kernel: str, threads: int, settings: DifferencedSettings) -> Sample:
    """One block of ``threads`` running the kernel's block barriers per iteration (gp_bar_block's layout and
    check: every warp's sum of its neighbour's slot is 1 + ... + iterations)."""
    warps = threads // 32
    out = request.outputs.get(2 + warps)

    def launch(iterations: int) -> float:
        values = request.kernels.results(kernel, [np.uint32(iterations), out], out, 2 + warps, block=threads)
        expected = expected_sums("gp_bar_block", threads, iterations)
        wrong = np.flatnonzero(values[2:] != expected)
        if wrong.size:
            warp = int(wrong[0])
            raise ProbeFailure(
                f"{kernel}: warp {warp} summed {int(values[2 + warp])}, the host predicts {int(expected[warp])} "
                f"after {iterations} iterations: a barrier let a read pass a write"
            )
        return float(values[0])

    return Difference(launch, settings.lengths(unroll_of(kernel)), kernel).sample


BLOCK_THREADS = 256  # the CUB block kernels' block (cub.cu's GP_CUB_THREADS)


def block_chain(request: Request, kernel: str, start: np.ndarray, predict: Callable[[int], np.ndarray],
                settings: DifferencedSettings) -> Sample:  # fmt: skip
    """One block of 256 threads running the kernel's collectives per iteration (cub.cu's block interface:
    ``start`` in, out (u64) [thread 0's cycles, every value after the last step]), every value held to
    ``predict(steps)``, the host's replay (once per length)."""
    values_in = request.launcher.upload(start.astype(np.uint32))
    out = request.outputs.get(1 + start.size)
    predicted: dict[int, np.ndarray] = {}
    unroll = unroll_of(kernel)

    def launch(iterations: int) -> float:
        args = [values_in, np.uint32(iterations), out]
        values = request.kernels.results(kernel, args, out, 1 + start.size, block=BLOCK_THREADS)
        steps = iterations * unroll
        if steps not in predicted:
            predicted[steps] = predict(steps)
        wrong = np.flatnonzero(values[1:].astype(np.uint64) != predicted[steps])
        if wrong.size:
            at = int(wrong[0])
            raise ProbeFailure(
                f"{kernel}: value {at} is {int(values[1 + at]):#x} after {steps} steps, the host predicts "
                f"{int(predicted[steps][at]):#x}"
            )
        return float(values[0])

    return Difference(launch, settings.lengths(unroll), kernel).sample


def cluster_barrier(request: Request, kernel: str, size: int, clusters: int, settings: DifferencedSettings) -> Sample:
    """Clusters of ``size`` one-warp blocks, the kernel's cluster barriers per iteration (gp_cluster_bar's
    layout and check); the median block's cycles."""
    blocks = size * clusters
    count = blocks * CLUSTER_WORDS
    out = request.outputs.get(count)

    def launch(iterations: int) -> float:
        values = request.kernels.results(kernel, [np.uint32(iterations), out], out, count, grid=blocks, block=32)
        table = values.reshape(blocks, CLUSTER_WORDS)
        check_cluster(kernel, table, size, iterations)
        return float(np.median(table[:, 0].astype(np.float64)))

    return Difference(launch, settings.lengths(unroll_of(kernel)), kernel).sample


def chase_sample(chase: Chase, short: int, long: int) -> Sample:
    """A short and a long launch of a chase continuing its cycle: cycles per step."""
    return chase.difference(short, long).sample


def global_chase(
    request: Request, kernel: str, nodes: int, stride: int, seed: int, extra: list[object], shared: int
) -> Chase:
    """A chase of a fresh random cycle of ``nodes`` nodes every ``stride`` bytes in global memory, by a
    kernel taking (start address, *extra, warm, iters, out) (gpuprobe.families.chase), its steps per
    iteration as the kernel declares them."""
    cycle = random_cycle(nodes, seed)
    buffer = request.launcher.alloc(nodes * stride)
    request.launcher.write_cycle(buffer, cycle.successor, stride)
    out = request.outputs.get(OUT_WORDS)
    return memory_chase(request.kernels, kernel, buffer, cycle, stride, unroll_of(kernel), out, extra, shared)


@dataclass(frozen=True)
class DsmShape:
    """The distributed-shared-memory chase's cycle: nodes, bytes between them, threads per block."""

    nodes: int
    stride: int
    threads: int


def dsm_chase(request: Request, kernel: str, target: int, shape: DsmShape, seed: int) -> Chase:
    """A chase of a random cycle in the shared memory of cluster rank ``target`` (gp_ac_dsm_chase's
    interface): rank 0's thread 0 chases, the end a byte offset in the target block."""
    cycle = random_cycle(shape.nodes, seed)
    successors = request.launcher.upload((cycle.successor * shape.stride).astype(np.uint32))
    out = request.outputs.get(OUT_WORDS)
    shared = shape.nodes * shape.stride

    def launch(start: int, warm: int, iterations: int) -> np.ndarray:
        fixed = [successors, np.uint32(shape.nodes), np.uint32(shape.stride), np.uint32(start), np.uint32(target)]
        args = [*fixed, np.uint32(warm), np.uint32(iterations), out]
        return request.kernels.results(kernel, args, out, OUT_WORDS, grid=2, block=shape.threads, shared=shared)

    def end_node(end: int) -> int:
        return node_of(end, shape.stride, shape.nodes, kernel)

    return Chase(cycle, launch, end_node, unroll_of(kernel), kernel)


def atomic_chain(request: Request, kernel: str, shared: bool, first: int, settings: DifferencedSettings) -> Sample:
    """One lane's self-feeding chain of returning adds (gp_at_lat_global / _shared's interface), the kernel's adds
    per iteration: the returned values and the counter's final value held to the sequence the host predicts;
    cycles per add."""
    lengths = settings.lengths(unroll_of(kernel))
    out = request.outputs.get(8)
    counters = None if shared else request.launcher.alloc(128)

    def launch(iterations: int) -> float:
        fixed: list[object] = [np.uint32(0), np.uint32(first), np.uint32(iterations)]
        args = [*fixed, out] if shared else [counters, *fixed, out]
        if counters is not None:
            request.launcher.fill(counters, 0)
        values = [int(v) for v in request.kernels.results(kernel, args, out, 5 if shared else 4, block=1)]
        final = values[4] if shared else int(request.launcher.read(counters, "uint32", 1)[0])
        check_chain(kernel, first, iterations * lengths.steps, [values[2]], [values[3]], [final])
        return float(values[0])

    return Difference(launch, lengths, kernel).sample


@dataclass
class CgGrid:
    """Cooperative launches of gp_coop_grid_sync (cg::this_grid().sync()): its slots, error count and
    output, and the check of every launch."""

    request: Request
    block: int
    checks: int
    slots: Any
    errors: Any
    out: Any
    kernel: str = "gp_coop_grid_sync"

    @classmethod
    def open(cls, request: Request, block: int, checks: int, max_blocks: int) -> CgGrid:
        alloc = request.launcher.alloc
        return cls(request, block, checks, alloc(8 * max_blocks), alloc(8), request.outputs.get(2 + max_blocks))

    def timed(self, blocks: int, syncs: int) -> tuple[int, int]:
        """One checked launch of ``blocks`` blocks: block 0's (cycles, ns) of ``syncs`` barriers."""
        launcher = self.request.launcher
        launcher.fill(self.slots, 0)
        launcher.fill(self.errors, 0)
        args = [self.slots, self.errors, np.uint32(self.checks), np.uint32(syncs), self.out]
        values = self.request.kernels.results(self.kernel, args, self.out, 2 + blocks, grid=blocks, block=self.block,
                                          cooperative=True)  # fmt: skip
        errors = int(launcher.read(self.errors, "uint32", 1)[0])
        if errors:
            raise ProbeFailure(f"{self.kernel}: {errors} tag(s) read after grid.sync() were not the round's")
        passed = values[2:]
        wrong = np.flatnonzero(passed != self.checks + syncs)
        if wrong.size:
            block = int(wrong[0])
            raise ProbeFailure(
                f"{self.kernel}: block {block} passed {int(passed[block])} barriers, not {self.checks + syncs}"
            )
        if int(values[0]) <= 0:
            raise ProbeFailure(f"{self.kernel}: the timed phase took {int(values[0])} cycles")
        return int(values[0]), int(values[1])


def twin_grid(request: Request, settings: GridSettings) -> GridBarrier:
    """The hand-written grid barrier's launches (gpuprobe.families.grid_sync), for the same grid sizes."""
    return GridBarrier.open(request, settings)
