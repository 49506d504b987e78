"""A random cycle chased across launches by a one-thread latency kernel, and the latency it shows.

A chase kernel takes where to start, untimed ("warm") steps and timed iterations of ``unroll``
dependent steps, and writes four words: cycles and nanoseconds of the timed part, where it ended,
and its SM. :class:`Chase` keeps the chain going from launch to launch, checks that every launch
ended on the node the host predicts, and turns a short and a long launch into the latency of one
step (their difference over the steps between, so once-per-launch costs cancel). Long launches also
give the SM clock (cycles over nanoseconds), so latencies come in cycles and nanoseconds.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuprobe.families.base import Plan, ProbeFailure
from gpuprobe.families.chain import Chain
from gpuprobe.families.differencing import Difference, Lengths
from gpuprobe.families.measuring import Kernels, Stopping
from gpuprobe.families.planning import chain_host_s, kernel_runs

OUT_WORDS = 4  # a chase's results: cycles, nanoseconds, end, SM id
MIN_CLOCK_WINDOW_NS = 100_000  # a timed chase this long gives the SM clock to 1 % at 1 us timer resolution


def node_of(offset: int, stride: int, nodes: int, kernel: str) -> int:
    """The node at byte ``offset`` of a chain laid out one node every ``stride`` bytes."""
    node, rest = divmod(offset, stride)
    if rest or not 0 <= node < nodes:
        raise ProbeFailure(f"{kernel}: chase ended at offset {offset:#x}, not on a node")
    return node


@dataclass
class Chase:
    """A chain chased across launches: where the next launch starts, and how to launch it.

    ``launch(start node, warm steps, iterations)`` returns the kernel's four output words;
    ``end_node`` turns the end word into a node; ``unroll`` steps run per timed iteration; each
    launch first takes ``warm_laps`` untimed laps of the cycle. Each launch's SM clock (where its window is long
    enough to read it) and SM id are kept."""

    chain: Chain
    launch: Callable[[int, int, int], np.ndarray]
    end_node: Callable[[int], int]
    unroll: int
    kernel: str
    warm_laps: int = 1
    step: int = 0
    clock_mhz: list[float] = field(default_factory=list)
    sms: list[int] = field(default_factory=list)

    def run(self, iterations: int) -> float:
        """One launch, its end checked; the cycles of its timed part."""
        warm = self.warm_laps * self.chain.nodes
        cycles, ns, end, sm = (int(v) for v in self.launch(self.chain.node_after(self.step), warm, iterations))
        self.sms.append(sm & 0xFFFFFFFF)
        self.step += warm + iterations * self.unroll
        expected = self.chain.node_after(self.step)
        if self.end_node(end) != expected:
            raise ProbeFailure(
                f"{self.kernel}: chase of {self.chain.nodes} nodes ended on node {self.end_node(end)}, "
                f"host predicted node {expected}"
            )
        if ns >= MIN_CLOCK_WINDOW_NS:
            self.clock_mhz.append(cycles / ns * 1e3)
        return float(cycles)

    def difference(self, short: int, long: int) -> Difference:
        """Short and long launches of ``short`` and ``long`` iterations, each continuing the cycle."""
        return Difference(self.run, Lengths(short, long, self.unroll), self.kernel)

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
    chain: Chain,
    stride: int,
    unroll: int,
    out: Any,
    extra: Sequence[object] = (),
    shared: int = 0,
    warm_laps: int = 1,
) -> Chase:
    """A chase through ``chain``, written (``Launcher.write_chain``) one node every ``stride`` bytes of
    ``buffer``, by a kernel taking (start address, *extra, warm, iters, out). The chase holds the
    buffer: the kernel gets only raw addresses into it, which must not outlive it."""

    def launch(start: int, warm: int, iterations: int) -> np.ndarray:
        first = np.uint64(kernels.launcher.address(buffer) + start * stride)
        args = [first, *extra, np.uint32(warm), np.uint32(iterations), out]
        return kernels.run(kernel, args, out, OUT_WORDS, shared=shared)

    def end_node(end: int) -> int:
        return node_of(end - kernels.launcher.address(buffer), stride, chain.nodes, kernel)

    return Chase(chain, launch, end_node, unroll, kernel, warm_laps)


def latencies_plan(nodes: int, unroll: int, short: int, long: int, repeats: int, step_s: float) -> Plan:
    """What a chase through a fresh cycle of ``nodes`` costs: its chain built and written, and
    :meth:`Chase.latencies` at ``repeats`` samples, every launch warming one lap and every step taking
    ``step_s`` seconds at most."""
    steps = repeats * (2 * nodes + (short + long) * unroll)
    return Plan(0, 1, 0.0, chain_host_s(nodes)) + kernel_runs(2 * repeats, steps * step_s)
