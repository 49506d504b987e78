"""A random pointer cycle chased across launches by a one-thread latency kernel, and the latency it shows.

:class:`Cycle` is a cycle through every node, built on the host, that knows where a chase of it must end.
A chase kernel takes where to start, untimed ("warm") steps and timed iterations of ``unroll``
dependent steps (its declared unroll), and writes four words: cycles and nanoseconds of the timed part,
where it ended, and its SM. :class:`Chase` keeps the cycle going from launch to launch, checks that every
launch ended on the node the host predicts, and turns a short and a long launch into the latency of one
step (their difference over the steps between, so once-per-launch costs cancel). Long launches also
give the SM clock (:func:`~gpuprobe.families.measuring.clock_mhz`), so latencies come in cycles and
nanoseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device
from gpuprobe.families.base import Plan
from gpuprobe.families.differencing import Difference, Lengths
from gpuprobe.families.measuring import clock_mhz, clock_window_ns
from gpuprobe.families.planning import cycle_host_s, cycles_s, kernel_runs
from gpuprobe.families.sampling import Stopping
from gpuprobe.runner.checked import Kernels

OUT_WORDS = 4  # a chase's results: cycles, nanoseconds, end, SM id
CLOCK_WINDOW_NS = clock_window_ns(0.01)  # 100 us: a timed chase this long gives the SM clock to 1 %


@dataclass(frozen=True)
class Cycle:
    """A cycle through ``nodes`` nodes that starts (and ends each lap) at node 0.

    ``order[k]`` is the node visited at step k; ``successor[i]`` the node after node i. A random cycle
    through every node defeats any prefetcher and makes every node of the footprint part of the
    chase, so the footprint is exactly ``nodes * stride``.
    """

    order: np.ndarray
    successor: np.ndarray

    @property
    def nodes(self) -> int:
        return len(self.order)

    def node_after(self, steps: int) -> int:
        """The node a chase that starts at node 0 reaches after ``steps`` loads."""
        return int(self.order[steps % self.nodes])


def random_cycle(nodes: int, seed: int) -> Cycle:
    """A random cycle through ``nodes`` nodes (at least 2), from node 0."""
    if nodes < 2:
        raise ValueError(f"a chase needs at least 2 nodes, got {nodes}")
    rng = np.random.default_rng(seed)
    order = np.concatenate(([0], rng.permutation(np.arange(1, nodes, dtype=np.int64)))).astype(np.int64)
    successor = np.empty(nodes, dtype=np.int64)
    successor[order] = np.roll(order, -1)
    return Cycle(order=order, successor=successor)


def node_of(offset: int, stride: int, nodes: int, kernel: str) -> int:
    """The node at byte ``offset`` of a cycle laid out one node every ``stride`` bytes."""
    node, rest = divmod(offset, stride)
    if rest or not 0 <= node < nodes:
        raise ProbeFailure(f"{kernel}: chase ended at offset {offset:#x}, not on a node")
    return node


@dataclass
class Chase:
    """A cycle chased across launches: where the next launch starts, and how to launch it.

    ``launch(start node, warm steps, iterations)`` returns the kernel's four output words;
    ``end_node`` turns the end word into a node; ``unroll`` steps run per timed iteration; each
    launch first takes ``warm_laps`` untimed laps of the cycle. Each launch's SM clock (where its window is long
    enough to read it) and SM id are kept."""

    cycle: Cycle
    launch: Callable[[int, int, int], np.ndarray]
    end_node: Callable[[int], int]
    unroll: int
    kernel: str
    warm_laps: int = 1
    step: int = 0
    clock_mhz: list[float] = field(default_factory=list)
    sms: list[int] = field(default_factory=list)

    def reading(self, iterations: int) -> float:
        """One launch, its end checked; the cycles of its timed part."""
        warm = self.warm_laps * self.cycle.nodes
        cycles, ns, end, sm = (int(v) for v in self.launch(self.cycle.node_after(self.step), warm, iterations))
        self.sms.append(sm & 0xFFFFFFFF)
        self.step += warm + iterations * self.unroll
        expected = self.cycle.node_after(self.step)
        if self.end_node(end) != expected:
            raise ProbeFailure(
                f"{self.kernel}: chase of {self.cycle.nodes} nodes ended on node {self.end_node(end)}, "
                f"host predicted node {expected}"
            )
        mhz = clock_mhz(cycles, ns, CLOCK_WINDOW_NS)
        if mhz is not None:
            self.clock_mhz.append(mhz)
        return float(cycles)

    def difference(self, short: int, long: int, longest: int | None = None) -> Difference:
        """Short and long launches of ``short`` and ``long`` iterations, each continuing the cycle; the long one
        at most ``longest`` iterations (None: no bound)."""
        return Difference(self.reading, Lengths(short, long, self.unroll), self.kernel, longest=longest)

    def latencies(self, short: int, long: int, stopping: Stopping) -> list[float]:
        """Samples of one step's latency (cycles), each a short and a long launch."""
        return self.difference(short, long).samples(stopping)

    @property
    def mhz(self) -> float | None:
        """The SM clock over the launches long enough to read it."""
        return float(np.median(self.clock_mhz)) if self.clock_mhz else None


def memory_chase(
    kernels: Kernels,
    kernel: str,
    buffer: Any,
    cycle: Cycle,
    stride: int,
    unroll: int,
    out: Any,
    extra: Sequence[object] = (),
    shared: int = 0,
    warm_laps: int = 1,
) -> Chase:
    """A chase through ``cycle``, written (``Launcher.write_cycle``) one node every ``stride`` bytes of
    ``buffer``, by a kernel taking (start address, *extra, warm, iters, out). The chase holds the
    buffer: the kernel gets only raw addresses into it, which must not outlive it."""

    def launch(start: int, warm: int, iterations: int) -> np.ndarray:
        first = np.uint64(kernels.launcher.address(buffer) + start * stride)
        args = [first, *extra, np.uint32(warm), np.uint32(iterations), out]
        return kernels.results(kernel, args, out, OUT_WORDS, shared=shared)

    def end_node(end: int) -> int:
        return node_of(end - kernels.launcher.address(buffer), stride, cycle.nodes, kernel)

    return Chase(cycle, launch, end_node, unroll, kernel, warm_laps)


def chase_plan(lengths: Lengths, repeats: int, device: Device, warm_up: int, lap: int, step: float) -> Plan:
    """Samples of one chase at their most (``repeats``, no widening): a warm-up launch lapping ``warm_up``
    steps if any (then a short launch's timed steps), then a short and a long launch of ``lengths`` per
    sample, each lapping ``lap`` steps first; every step ``step`` cycles at most."""
    timed = repeats * (lengths.short + lengths.long) * lengths.steps
    warming = warm_up + lengths.short * lengths.steps if warm_up else 0
    steps = warming + 2 * repeats * lap + timed
    return kernel_runs(2 * repeats + bool(warm_up), cycles_s(steps * step, device))


def latencies_plan(nodes: int, unroll: int, short: int, long: int, repeats: int, step_s: float) -> Plan:
    """What a chase through a fresh cycle of ``nodes`` costs: its cycle built and written, and
    :meth:`Chase.latencies` at ``repeats`` samples, every launch warming one lap and every step taking
    ``step_s`` seconds at most."""
    steps = repeats * (2 * nodes + (short + long) * unroll)
    return Plan(0, 1, 0.0, cycle_host_s(nodes)) + kernel_runs(2 * repeats, steps * step_s)
