"""The p2p family: GPU-to-GPU links, every pair of the GPUs one process sees, as matrices.

What nvbandwidth measures, held to the model's NVLink and PCIe figures like any other fact:

* ``p2p.access``: for every ordered pair, whether CUDA grants peer access and how NVML says the two are
  joined (NVLink or PCIe, and the PCIe path), each GPU's NVLinks active of those it has; every pair
  granted access is proven by a small SM copy from the peer's memory, its thread sums checked;
* ``p2p.ce`` and ``p2p.ce_bidirectional``: the copy engine (``PeerGroup.time_copies``, cudaMemcpyPeerAsync
  on a stream of the destination), one way and both ways at once, the bandwidth the extra bytes over the
  extra time between a small and a large copy (as the host-transfer family's); every pair's copy checked
  on the destination GPU once, by the copy kernel's thread sums over the bytes that arrived;
* ``p2p.sm_read`` and ``p2p.sm_write``: the SMs of one GPU pulling from or pushing to another's memory
  through peer access (the host-transfer family's copy kernel, ``ptx/common/sm_copy.ptxinc``), timed the
  same way, each launch's sums checked and, for writes, the bytes that landed checked on the peer;
* ``p2p.latency``: one load's round trip to a peer's memory, a one-thread chase through a random cycle
  written there (``ptx/common/sm_chase.ptxinc``).

Per-pair facts end in ``<src>_<dst>`` (:mod:`gpuprobe.families.p2p.pairs`); the copy engine's also as a
fraction of the pairs joined the same way, so a link far below its peers is warned about. With one GPU
visible (a process pinned to its GPU, as ``fleet-run`` and the Slurm recipe pin theirs) every probe is
``not_run`` with the reason :data:`~gpuprobe.runner.peers.ONE_GPU`: one GPU has no link to measure.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.chase import OUT_WORDS, latencies_plan, memory_chase, random_cycle
from gpuprobe.families.host_transfer import check_copy_settings, rate_gbps
from gpuprobe.families.measuring import fact, unmeasured
from gpuprobe.families.p2p import pairs
from gpuprobe.families.p2p.pairs import Pair
from gpuprobe.families.p2p.plot import MATRICES_PLOT
from gpuprobe.families.planning import GEN4_LINK, compare_host_s, generate_host_s, kernel_runs, probe, sum_host_s
from gpuprobe.families.sampling import ONE_SAMPLE, Stopping, sample_until_stable
from gpuprobe.families.stepping import probe_steps
from gpuprobe.families.streams import check_sums, chunk_sums, pattern, stream_sums
from gpuprobe.kernels.registry import unroll_of
from gpuprobe.output.sections import Section
from gpuprobe.runner.checked import Kernels
from gpuprobe.runner.peers import ONE_GPU, PeerCopy, PeerGroup, PeerLink, open_peer_group

PROBES = ["p2p.access", "p2p.ce", "p2p.ce_bidirectional", "p2p.sm_read", "p2p.sm_write", "p2p.latency"]
MIN_GPUS = 2  # a link needs two ends: with fewer visible every probe is not run (ONE_GPU)
COPY_KERNEL = "gp_p2p_copy"
CHASE_KERNEL = "gp_p2p_chase"
CHUNK = 16  # bytes per load and store (a thread moves its kernel's declared unroll of them per iteration)
PEER_STEP_S = 5e-6  # the most one load from a peer's memory is expected to take, for the time plan
MIB = 1 << 20


@dataclass(frozen=True)
class Settings:
    small_bytes: int = 32 * MIB  # each bandwidth: the extra bytes over the extra time between these two copies
    large_bytes: int = 128 * MIB
    blocks: int = 1024  # the SM copy's grid: 1024 x 256 threads, four 16-byte chunks each per iteration
    threads: int = 256
    sampling: Stopping = Stopping(3, 5, 0.02, 0.3)  # per pair: its bandwidth, or its latency
    max_gbps: float = 2000.0  # no GPU link moves more one way (NVLink 5: 900 GB/s): a faster reading is broken
    chase_nodes: int = 256  # the latency chase: 256 nodes, 256 bytes apart, in the peer's memory
    chase_stride: int = 256
    chase_iterations: tuple[int, int] = (2, 12)  # short and long timed iterations (16 loads each)
    seed: int = 20240903
    planned_gpus: int = 8  # what the time plan counts on where the device record does not say how many GPUs

    def __post_init__(self) -> None:
        check_copy_settings(self)
        if self.planned_gpus < 2:
            raise ValueError(f"Settings.planned_gpus must be at least 2, got {self.planned_gpus}")

    @property
    def iteration_bytes(self) -> int:
        """Bytes the SM copy moves per loop iteration of the whole grid."""
        return self.blocks * self.threads * unroll_of(COPY_KERNEL) * CHUNK


# ---- the time plan ----------------------------------------------------------------------------


def plan(settings: Settings, device: Device, link_gbps: float = GEN4_LINK.pinned_gbps) -> Plan:
    """Every probe at its most repeats on the GPUs the device record says the process sees (else a node of
    ``settings.planned_gpus``), every pair joined at ``link_gbps``
    (a PCIe Gen4 link's pinned rate: an NVLink node is an order of magnitude faster). Each GPU holds a
    source, a destination and a scratch buffer; each checked copy is read back on its destination."""
    s, r = settings, settings.sampling.max_repeats
    gpus = s.planned_gpus if device.visible_gpus is None else device.visible_gpus
    if gpus < MIN_GPUS:  # one GPU visible: every probe is not run
        return Plan(len(PROBES), 0, 0.0)
    ordered = gpus * (gpus - 1)

    def over_link(nbytes: float) -> float:
        return nbytes / (link_gbps * 1e9)

    made = generate_host_s(s.large_bytes) + sum_host_s(s.large_bytes) + gpus * over_link(s.large_bytes)
    checked = kernel_runs(1, over_link(s.large_bytes), compare_host_s(s.threads * s.blocks * 8))
    access = probe(Plan(0, 3 * ordered, 0.0, made), kernel_runs(ordered, ordered * over_link(s.iteration_bytes)))
    timed_pair = Plan(0, 2 * r + 1, r * over_link(s.small_bytes + s.large_bytes))  # the fill, then a pair per sample
    ce = probe(*[timed_pair + checked] * ordered)
    both = probe(*[timed_pair + checked + checked] * (ordered // 2))
    sm = probe(*[timed_pair + checked + checked] * ordered)
    chase = latencies_plan(s.chase_nodes, unroll_of(CHASE_KERNEL), *s.chase_iterations, r, PEER_STEP_S)
    latency = probe(*[chase] * ordered)
    return access + ce + both + sm + sm + latency


# ---- measuring ------------------------------------------------------------------------------


@dataclass
class _Node:
    """The GPUs of the process and what the probes share: each GPU's buffers, the pattern and its sums."""

    group: PeerGroup
    kernels: Kernels  # the request's checked launches, on its own GPU
    settings: Settings
    links: dict[Pair, PeerLink] = field(default_factory=dict)
    buffers: dict[tuple[str, int], Any] = field(default_factory=dict)
    words: np.ndarray | None = None
    sums: dict[int, np.ndarray] = field(default_factory=dict)  # bytes copied -> each thread's expected sum
    enabled: set[Pair] = field(default_factory=set)

    @property
    def count(self) -> int:
        return self.group.count()

    def joined(self, pair: Pair) -> str:
        """How a pair is joined, as its peers are chosen: NVLink, or PCIe by its path (a pair under one
        switch and a pair across the sockets are not peers)."""
        link = self.links.get(pair)
        if link is None:
            return "unknown"
        return "nvlink" if link.link == "nvlink" else f"{link.link} {link.path}".strip()

    def can_address(self, device: int, peer: int) -> bool:
        """Whether GPU ``device``'s kernels may address GPU ``peer``'s memory (cudaDeviceCanAccessPeer)."""
        return (device, peer) in self.links and self.links[(device, peer)].can_access

    def pattern(self) -> np.ndarray:
        if self.words is None:
            self.words = pattern(self.settings.large_bytes // 4)
        return self.words

    def expected_sums(self, nbytes: int) -> np.ndarray:
        if nbytes not in self.sums:
            threads = self.settings.blocks * self.settings.threads
            self.sums[nbytes] = stream_sums(chunk_sums(self.pattern()[: nbytes // 4]), threads)
        return self.sums[nbytes]

    def buffer(self, name: str, device: int) -> Any:
        """GPU ``device``'s "source" (the pattern), "target" (copies land here), "scratch" (checks copy
        into it) or "out" (the copy kernel's thread sums), made once."""
        key = (name, device)
        if key not in self.buffers:
            launcher, s = self.group.on(device), self.settings
            if name == "source":
                self.buffers[key] = launcher.upload(self.pattern())
            elif name == "out":
                self.buffers[key] = launcher.alloc(s.blocks * s.threads * 8)
            else:
                self.buffers[key] = launcher.alloc(s.large_bytes)
        return self.buffers[key]

    def kernels_on(self, device: int) -> Kernels:
        """The request's checked launches, through GPU ``device``'s launcher."""
        return Kernels(self.group.on(device))

    def peer_access(self, device: int, peer: int) -> None:
        if (device, peer) not in self.enabled:
            self.group.enable_peer_access(device, peer)
            self.enabled.add((device, peer))

    def copy_kernel(self, device: int, src: Any, dst: Any, nbytes: int) -> tuple[Kernels, list[Any]]:
        """The copy kernel on GPU ``device`` from ``src`` to ``dst`` (buffers of any GPU, passed by address:
        a peer's buffer is only an address to this GPU's kernels), and its arguments."""
        launcher, s = self.group.on(device), self.settings
        args = [np.uint64(launcher.address(src)), np.uint64(launcher.address(dst)),
                np.uint32(nbytes // s.iteration_bytes), self.buffer("out", device)]  # fmt: skip
        return self.kernels_on(device), args

    def checked_copy(self, device: int, src: Any, dst: Any, nbytes: int, what: str) -> None:
        """The copy kernel on ``device`` moving ``nbytes`` of the pattern from ``src``: every thread's sum
        of the words it loaded held to the host's (ProbeFailure naming ``what`` otherwise)."""
        s = self.settings
        kernels, args = self.copy_kernel(device, src, dst, nbytes)
        got = kernels.results(COPY_KERNEL, args, args[-1], s.blocks * s.threads, grid=s.blocks, block=s.threads)
        check_sums(f"{COPY_KERNEL} ({what})", got, self.expected_sums(nbytes), "thread")

    def holds_pattern(self, device: int, buffer: Any, what: str) -> None:
        """``buffer`` on GPU ``device`` holds the whole pattern: read there by the copy kernel into scratch."""
        self.checked_copy(device, buffer, self.buffer("scratch", device), self.settings.large_bytes, what)


def _samples(take: Callable[[], float], settings: Settings) -> list[float]:
    samples: list[float] = []
    sample_until_stable(lambda: samples.append(take()), samples, settings.sampling)
    return samples


def _rate(node: _Node, small_ms: float, large_ms: float, what: str) -> float:
    s = node.settings
    return rate_gbps(s.small_bytes, small_ms, s.large_bytes, large_ms, s.max_gbps, what)


def measure_access(node: _Node, probe_name: str) -> Measured:
    """The topology, and a checked SM pull across every pair granted peer access."""
    links, ports = node.group.links(), node.group.ports()
    node.links = {(link.src, link.dst): link for link in links}
    for link in links:  # link.src's kernels may address link.dst's memory: prove it with a pull
        if link.can_access:
            node.peer_access(link.src, link.dst)
            nbytes, what = node.settings.iteration_bytes, f"GPU {link.src} reading GPU {link.dst}"
            node.checked_copy(link.src, node.buffer("source", link.dst), node.buffer("target", link.src), nbytes, what)
    count = float(node.count)
    facts = [
        Fact("p2p.gpus", count, "count", probe=probe_name),
        Fact("p2p.peer_pairs", float(sum(link.can_access for link in links)), "count", probe=probe_name),
        Fact("p2p.nvlink_pairs", float(sum(link.link == "nvlink" for link in links)), "count", probe=probe_name),
    ]
    facts += [Fact(f"p2p.nvlinks.{p.index}", float(p.nvlinks_active), "count", probe=probe_name,
                   detail=f"{p.nvlinks_active} of {p.nvlinks} NVLinks active") for p in ports if p.nvlinks]  # fmt: skip
    series = {
        "links": {"src": [link.src for link in links], "dst": [link.dst for link in links],
                  "can_access": [int(link.can_access) for link in links], "link": [link.link for link in links],
                  "path": [link.path for link in links]},
        "gpus": {"index": [p.index for p in ports], "pci_bus_id": [p.pci_bus_id for p in ports],
                 "nvlinks": [p.nvlinks for p in ports], "nvlinks_active": [p.nvlinks_active for p in ports]},
    }  # fmt: skip
    kinds = sorted({link.link for link in links})
    joined = ", ".join(f"{sum(link.link == k for link in links)} {k}" for k in kinds)
    note = f"{node.count} GPUs, {int(facts[1].value or 0)} of {len(links)} ordered pairs with peer access; {joined}"
    return Measured(probe_name, ProbeOutcome("ok", note, series), facts)  # type: ignore[arg-type]


def _ce_pair(node: _Node, pair: Pair) -> list[float]:
    """The copy engine's rate src -> dst: a small and a large copy per sample, the first checked on dst."""
    src, dst = pair
    source, target = node.buffer("source", src), node.buffer("target", dst)
    node.group.on(dst).fill(target, 0)  # a copy that moved nothing cannot pass on an earlier one's bytes
    checked = False

    def take() -> float:
        nonlocal checked
        small = node.group.time_copies([PeerCopy(target, source)], node.settings.small_bytes)[0]
        large = node.group.time_copies([PeerCopy(target, source)], node.settings.large_bytes)[0]
        if not checked:
            node.holds_pattern(dst, target, f"copy engine GPU {src} -> GPU {dst}, checked on GPU {dst}")
            checked = True
        return _rate(node, small, large, f"copy engine GPU {src} -> GPU {dst}")

    return _samples(take, node.settings)


def _bidirectional_pair(node: _Node, pair: Pair) -> tuple[list[float], list[float]]:
    """Both copies of a pair at once: the rate of each direction while the other runs."""
    a, b = pair
    copies = [PeerCopy(node.buffer("target", b), node.buffer("source", a)),
              PeerCopy(node.buffer("target", a), node.buffer("source", b))]  # fmt: skip
    for copy, device in zip(copies, (b, a), strict=True):
        node.group.on(device).fill(copy.dst, 0)
    forward: list[float] = []
    backward: list[float] = []

    def take() -> None:
        small = node.group.time_copies(copies, node.settings.small_bytes)
        large = node.group.time_copies(copies, node.settings.large_bytes)
        if not forward:
            node.holds_pattern(b, copies[0].dst, f"copy engine GPU {a} -> GPU {b} (both ways), checked on GPU {b}")
            node.holds_pattern(a, copies[1].dst, f"copy engine GPU {b} -> GPU {a} (both ways), checked on GPU {a}")
        backward.append(_rate(node, small[1], large[1], f"copy engine GPU {b} -> GPU {a} (both ways)"))
        forward.append(_rate(node, small[0], large[0], f"copy engine GPU {a} -> GPU {b} (both ways)"))

    sample_until_stable(take, forward, node.settings.sampling)
    return forward, backward


def _sm_pair(node: _Node, pair: Pair, push: bool) -> list[float]:
    """The copy kernel moving src's pattern into dst's target: run on dst (a pull) or on src (a push)."""
    src, dst = pair
    device, peer = (src, dst) if push else (dst, src)
    node.peer_access(device, peer)
    source, target = node.buffer("source", src), node.buffer("target", dst)
    node.group.on(dst).fill(target, 0)
    way = f"GPU {src} -> GPU {dst} by GPU {device}'s SMs"
    node.checked_copy(device, source, target, node.settings.large_bytes, way)
    if push:
        node.holds_pattern(dst, target, f"{way}, checked on GPU {dst}")
    s = node.settings

    def take() -> float:
        def ms(nbytes: int) -> float:
            kernels, args = node.copy_kernel(device, source, target, nbytes)
            return kernels.time(COPY_KERNEL, args, grid=s.blocks, block=s.threads)

        small = ms(s.small_bytes)
        return _rate(node, small, ms(s.large_bytes), way)

    return _samples(take, s)


def _pair_facts(node: _Node, probe_name: str, measured: dict[str, dict[Pair, list[float]]]) -> list[Fact]:
    """Each pair's bandwidth facts, and the copy engine's fraction of its peers; unmeasured pairs said why."""
    facts = []
    for kind, by_pair in measured.items():
        for pair in pairs.ordered_pairs(node.count):
            if pair in by_pair:
                facts.append(fact(pairs.bandwidth_id(kind, pair), by_pair[pair], "GB/s", probe_name))
            else:
                why = f"no peer access between GPU {pair[0]} and GPU {pair[1]} this way (cudaDeviceCanAccessPeer)"
                facts.append(unmeasured(pairs.bandwidth_id(kind, pair), "GB/s", probe_name, why))
        if kind == "ce":
            medians = {f_pair: float(np.median(v)) for f_pair, v in by_pair.items()}
            fractions = pairs.fraction_of_peers(medians, {p: node.joined(p) for p in medians})
            facts += [Fact(pairs.peers_id(kind, pair), value, "fraction", probe=probe_name,
                           detail=f"of the median of the {node.joined(pair)} pairs")
                      for pair, value in sorted(fractions.items())]  # fmt: skip
    return facts


def _matrix_series(node: _Node, facts: list[Fact]) -> dict[str, dict[str, list]]:
    """The probe's matrix as the results keep it: one row per measured pair (source, destination, the
    median, and how the two are joined); the heatmaps draw it from the facts alike."""
    rows = []
    for f in facts:
        parsed = pairs.parse(f.id)
        if parsed is not None and f.value is not None:
            rows.append((parsed[1], f))
    return {"matrix": {"src": [p[0] for p, _ in rows], "dst": [p[1] for p, _ in rows],
                       "value": [float(f.value) for _, f in rows], "unit": [f.unit for _, f in rows],
                       "joined": [node.joined(p) for p, _ in rows]}}  # fmt: skip


def _bandwidth_outcome(node: _Node, probe_name: str, facts: list[Fact]) -> Measured:
    values = [f.value for f in facts if f.unit == "GB/s" and f.value is not None]
    note = (f"{len(values)} pairs, {min(values):.1f} to {max(values):.1f} GB/s" if values
            else "no pair could be measured")  # fmt: skip
    return Measured(probe_name, ProbeOutcome("ok", note, _matrix_series(node, facts)), facts)


def measure_bandwidth(node: _Node, probe_name: str) -> Measured:
    """Every ordered pair's bandwidth by ``probe_name``'s way."""
    measured: dict[str, dict[Pair, list[float]]] = {}
    if probe_name == "p2p.ce":
        measured["ce"] = {pair: _ce_pair(node, pair) for pair in pairs.ordered_pairs(node.count)}
    elif probe_name == "p2p.ce_bidirectional":
        both: dict[Pair, list[float]] = {}
        for a, b in pairs.unordered_pairs(node.count):
            both[(a, b)], both[(b, a)] = _bidirectional_pair(node, (a, b))
        measured["ce_bidir"] = both
    else:
        push = probe_name == "p2p.sm_write"  # the kernel runs on src (a push) or on dst (a pull)
        usable = [(s, d) for s, d in pairs.ordered_pairs(node.count) if node.can_address(*((s, d) if push else (d, s)))]
        measured["sm_write" if push else "sm_read"] = {pair: _sm_pair(node, pair, push) for pair in usable}
    return _bandwidth_outcome(node, probe_name, _pair_facts(node, probe_name, measured))


def measure_latency(node: _Node, probe_name: str) -> Measured:
    """One load's round trip from each GPU to each peer's memory, by a chase written there."""
    s = node.settings
    cycle = random_cycle(s.chase_nodes, s.seed)
    facts = []
    for reader, owner in pairs.ordered_pairs(node.count):
        if not node.can_address(reader, owner):
            why = f"no peer access from GPU {reader} to GPU {owner}'s memory (cudaDeviceCanAccessPeer)"
            facts.append(unmeasured(pairs.latency_id((reader, owner)), "cycle", probe_name, why))
            continue
        node.peer_access(reader, owner)
        if ("cycle", owner) not in node.buffers:
            buffer = node.group.on(owner).alloc(s.chase_nodes * s.chase_stride)
            node.group.on(owner).write_cycle(buffer, cycle.successor, s.chase_stride)
            node.buffers[("cycle", owner)] = buffer
        kernels = node.kernels_on(reader)
        out = kernels.launcher.alloc(OUT_WORDS * 8)
        chase = memory_chase(kernels, CHASE_KERNEL, node.buffers[("cycle", owner)], cycle, s.chase_stride,
                             unroll_of(CHASE_KERNEL), out)  # fmt: skip
        samples = chase.latencies(*s.chase_iterations, s.sampling)
        facts.append(fact(pairs.latency_id((reader, owner)), samples, "cycle", probe_name, chase.mhz))
    measured = [f.value for f in facts if f.value is not None]
    note = f"{len(measured)} pairs, {min(measured):.0f} to {max(measured):.0f} cycles per load" if measured else ""
    return Measured(probe_name, ProbeOutcome("ok", note or "no pair could be measured", _matrix_series(node, facts)),
                    facts)  # fmt: skip


_MEASURES: dict[str, Callable[[_Node, str], Measured]] = {
    "p2p.access": measure_access,
    "p2p.ce": measure_bandwidth,
    "p2p.ce_bidirectional": measure_bandwidth,
    "p2p.sm_read": measure_bandwidth,
    "p2p.sm_write": measure_bandwidth,
    "p2p.latency": measure_latency,
}


def measure(request: Request) -> Probes:
    """The family's runnable probes in order; with fewer than two GPUs each is ``not_run`` (ONE_GPU)."""
    settings = request.settings or Settings()
    node = _Node(open_peer_group(request.launcher), request.kernels, settings)

    def measure_probe(name: str) -> Measured:
        if node.count < MIN_GPUS:
            return Measured(name, ProbeOutcome("not_run", ONE_GPU))
        if not node.links:  # the topology, needed by every probe, read once however the probes were selected
            node.links = {(link.src, link.dst): link for link in node.group.links()}
        return _MEASURES[name](node, name)

    steps = {name: functools.partial(measure_probe, name) for name in PROBES}
    yield from probe_steps(PROBES, steps, request.runnable)  # the GPUs opened once the first probe is asked for


# A first contact: the topology with its checked pulls, and the copy engine one way over every pair,
# one sample each at small sizes: 24 MiB between them, 100 ticks of the CUDA events even over NVLink 4.
SMOKE = Smoke(
    probes=("p2p.access", "p2p.ce"),
    settings=Settings(
        small_bytes=8 * MIB, large_bytes=32 * MIB, blocks=64, sampling=ONE_SAMPLE, chase_iterations=(1, 2)
    ),
)

SECTIONS = (
    Section(
        "GPU-to-GPU links",
        ("p2p.",),
        ("p2p.",),
        plot=MATRICES_PLOT,
        blurb="Every ordered pair of the GPUs the run saw (ids end in <src>_<dst>): the copy engine one way "
        "and both ways at once, the SMs pulling and pushing through peer access (bandwidth from the "
        "difference of a 32 MiB and a 128 MiB copy), one load's round trip to a peer's memory, and each "
        "pair's copy-engine rate over the median of the pairs joined the same way (NVLink, PCIe).",
    ),
)


FAMILY = Family(
    name="p2p",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
    sections=SECTIONS,
    min_gpus=MIN_GPUS,
)
