"""A simulated node of several GPUs for CPU tests: the :class:`~gpuprobe.runner.peers.PeerGroup` of
``gpuprobe/simulated/gpu.py``'s GPUs, with a configurable link matrix, and NCCL's collectives done in NumPy.

The GPUs share one address space (each allocates in its own 64 GiB range, so an address says which GPU
owns it), as unified addressing gives a real node: a kernel on one GPU given a peer's address reads the
peer's memory, and faults, as on a GPU, where peer access was never enabled. Copies and collectives move
the real bytes, so a wrong layout or a wrong prediction fails here as it would on a GPU; their time
comes from the link matrix. ``SimulatedNode`` says what the node is like, and what to break.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuprobe.families.p2p.pairs import Pair
from gpuprobe.runner.launcher import LaunchPathUnavailable
from gpuprobe.runner.nccl import COLLECTIVES
from gpuprobe.runner.peers import GpuPorts, PeerCopy, PeerLink

ADDRESS_BASE, ADDRESS_SPAN = 0x7F0000000000, 1 << 36  # GPU d allocates from BASE + d x SPAN
COPY_FIXED_MS = 0.0005  # what a copy-engine copy costs on top of its bytes (a real one: a few us)
BUSBW_FACTOR = {"all_reduce": lambda n: 2 * (n - 1) / n, "broadcast": lambda n: 1.0}  # the rest: (n - 1) / n


def owner_of(address: int) -> int:
    """The GPU whose range holds ``address``."""
    return (int(address) - ADDRESS_BASE) // ADDRESS_SPAN


@dataclass
class SimulatedNode:
    """What a simulated node is like: ``count`` GPUs, every pair joined by ``link`` at ``link_gbps`` one way
    (``joined`` overrides a pair's link and path, ``slow`` scales a pair's rate: a degraded link),
    pairs without peer access, the SMs' share of a link's rate, a load's round trip, NVLinks per GPU, NCCL."""

    count: int = 4
    link: str = "nvlink"
    link_gbps: float = 380.0
    joined: dict[Pair, tuple[str, str, float]] = field(default_factory=dict)  # pair -> (link, path, GB/s)
    slow: dict[Pair, float] = field(default_factory=dict)  # pair -> factor on its rate
    no_access: set[Pair] = field(default_factory=set)  # (device, peer): device's kernels cannot address peer
    sm_read_share: float = 1.05
    sm_write_share: float = 0.95
    both_ways_share: float = 0.97  # each direction's rate while the other runs
    local_gbps: float = 2000.0  # a copy within one GPU's memory
    load_cycles: dict[str, float] = field(default_factory=lambda: {"nvlink": 1500.0, "pcie": 3200.0})
    nvlinks: int = 18
    nvlinks_down: dict[int, int] = field(default_factory=dict)  # GPU -> links down
    nccl: bool = True
    nccl_busbw_gbps: float = 360.0
    nccl_latency_us: float = 18.0
    corrupt: str = ""  # "ce": a copy drops a chunk; "sm_write": peer stores land short; "nccl:<collective>"

    def __post_init__(self) -> None:
        """Pairs may come as JSON gives them (the options of a measuring process): [[1, 2, 0.3]], [[0, 3]]."""
        if isinstance(self.slow, list):
            self.slow = {(int(s), int(d)): float(f) for s, d, f in self.slow}
        self.no_access = {(int(s), int(d)) for s, d in self.no_access}
        self.nvlinks_down = {int(k): v for k, v in self.nvlinks_down.items()}

    def rate(self, pair: Pair) -> float:
        base = self.joined[pair][2] if pair in self.joined else self.link_gbps
        return base * self.slow.get(pair, 1.0)

    def kind(self, pair: Pair) -> tuple[str, str]:
        return self.joined[pair][:2] if pair in self.joined else (self.link, "SYS (across CPU sockets)")


class SimulatedPeerGroup:
    """The :class:`~gpuprobe.runner.peers.PeerGroup` of a simulated node; GPU 0 is the launcher it was opened from."""

    def __init__(self, home: Any, node: SimulatedNode) -> None:
        self.node, self.gpus = node, [home]
        home.node, home.node_index = self, 0
        for index in range(1, node.count):  # GPUs of home's kind, sharing its address space
            gpu = type(home)(seed=home.seed + index, noise=home.noise, mhz=home.mhz, name=home.name,
                             buffers=home.buffers, signatures=home.signatures)  # fmt: skip
            gpu._next_base = ADDRESS_BASE + index * ADDRESS_SPAN
            gpu.node, gpu.node_index = self, index
            self.gpus.append(gpu)
        self.enabled: set[Pair] = set()
        self._communicator: SimulatedCommunicator | None = None

    def count(self) -> int:
        return self.node.count

    def ports(self) -> list[GpuPorts]:
        n = self.node.nvlinks
        return [GpuPorts(i, f"{i:032x}", f"0000:{i:02x}:00.0", n, n - self.node.nvlinks_down.get(i, 0))
                for i in range(self.node.count)]  # fmt: skip

    def links(self) -> list[PeerLink]:
        return [PeerLink(s, d, (s, d) not in self.node.no_access, *self.node.kind((s, d)))
                for s in range(self.node.count) for d in range(self.node.count) if s != d]  # fmt: skip

    def on(self, device: int) -> Any:
        return self.gpus[device]

    def enable_peer_access(self, device: int, peer: int) -> None:
        if (device, peer) in self.node.no_access:
            raise RuntimeError(f"cudaErrorPeerAccessUnsupported: GPU {device} cannot address GPU {peer}")
        self.enabled.add((device, peer))

    def require_access(self, device: int, address: int) -> None:
        """A kernel on ``device`` touching ``address``: a peer's memory faults unless access was enabled."""
        owner = owner_of(address)
        if owner != device and (device, owner) not in self.enabled:
            raise RuntimeError(f"CUDA_ERROR_ILLEGAL_ADDRESS: GPU {device} used GPU {owner}'s memory, no peer access")

    def time_copies(self, copies: Sequence[PeerCopy], nbytes: int) -> list[float]:
        pairs = [(owner_of(c.src.base), owner_of(c.dst.base)) for c in copies]
        times = []
        for copy, pair in zip(copies, pairs, strict=True):
            copy.dst.data[:nbytes] = copy.src.data[:nbytes]
            if self.node.corrupt == "ce":
                copy.dst.data[nbytes // 3 : nbytes // 3 + 16] = 0
            both = (pair[1], pair[0]) in pairs
            gbps = self.node.rate(pair) * (self.node.both_ways_share if both else 1.0)
            jitter = self.gpus[0]._jitter(f"ce.{pair}.{both}", 0.005)
            times.append((nbytes / (gbps * 1e9) * 1e3 + COPY_FIXED_MS) * jitter)
        return times

    def sample(self, buffer: Any, dtype: str, indices: np.ndarray) -> np.ndarray:
        return buffer.data.view(np.dtype(dtype))[np.asarray(indices)].copy()

    def communicator(self) -> SimulatedCommunicator:
        if not self.node.nccl:
            raise LaunchPathUnavailable("the NCCL library is not installed (pip install 'gpuprobe[nccl]')")
        if self._communicator is None:
            self._communicator = SimulatedCommunicator(self)
        return self._communicator


class SimulatedCommunicator:
    """NCCL's collectives done in NumPy over the node's buffers (sum, float32, root 0), timed by a model:
    a fixed latency plus the bytes over the bus bandwidth, as nccl-tests' busbw defines it; its log says
    what NCCL 2.27's INFO log would."""

    def __init__(self, group: SimulatedPeerGroup) -> None:
        self.group = group
        self.lines = ["node:1:1 [0] NCCL INFO NCCL version 2.27.7+cuda13.0"]
        self.lines += [f"node:1:2 [{r}] NCCL INFO Channel 00/0 : {r}[{r}] -> {(r + 1) % group.count()}"
                       f"[{(r + 1) % group.count()}] via P2P/CUMEM/read" for r in range(group.count())]  # fmt: skip

    def version(self) -> str:
        return "2.27.7"

    def _view(self, address: int, elements: int) -> np.ndarray:
        buffer, offset = self.group.gpus[0].buffer_at(address)
        return buffer.data[offset : offset + 4 * elements].view(np.float32)

    def call(self, collective: str, sends: Sequence[int], recvs: Sequence[int], count: int) -> None:
        n = self.group.count()
        if collective == "all_reduce":
            total = np.sum([self._view(s, count) for s in sends], axis=0, dtype=np.float32)
            results = [total] * n
        elif collective == "broadcast":
            results = [self._view(sends[0], count).copy()] * n
        elif collective == "all_gather":
            results = [np.concatenate([self._view(s, count) for s in sends])] * n
        elif collective == "reduce_scatter":
            total = np.sum([self._view(s, count * n) for s in sends], axis=0, dtype=np.float32)
            results = [total[q * count : (q + 1) * count] for q in range(n)]
        elif collective == "all_to_all":
            inputs = [self._view(s, count * n) for s in sends]
            results = [np.concatenate([inputs[r][q * count : (q + 1) * count] for r in range(n)]) for q in range(n)]
        else:
            raise ValueError(collective)
        for rank, (recv, result) in enumerate(zip(recvs, results, strict=True)):
            out = self._view(recv, len(result))
            out[:] = result
            if self.group.node.corrupt == f"nccl:{collective}" and rank == n - 1:
                out[len(out) // 2] += 1.0  # one element wrong on the last rank
            if self.group.node.corrupt == f"nccl-short:{collective}" and rank == 1:
                out[-1:] = np.nan  # the last element never written
        nccl_bytes = 4 * count
        algo, proto = ("RING", "LL") if nccl_bytes < 65536 else ("RING", "SIMPLE")
        name = {"all_reduce": "AllReduce", "broadcast": "Broadcast", "all_gather": "AllGather",
                "reduce_scatter": "ReduceScatter", "all_to_all": ""}[collective]  # fmt: skip
        if name:
            self.lines.append(f"node:1:1 [0] NCCL INFO {name}: {nccl_bytes} Bytes -> Algo {algo} proto {proto} "
                              "channel{Lo..Hi}={0..0}")  # fmt: skip

    def time(self, collective: str, sends: Sequence[int], recvs: Sequence[int], count: int, calls: int) -> float:
        assert collective in COLLECTIVES
        self.call(collective, sends, recvs, count)
        n, node = self.group.count(), self.group.node
        size = 4 * count * (n if collective in ("all_gather", "reduce_scatter", "all_to_all") else 1)
        factor = BUSBW_FACTOR.get(collective, lambda ranks: (ranks - 1) / ranks)(n)
        seconds = node.nccl_latency_us * 1e-6 + size * factor / (node.nccl_busbw_gbps * 1e9)
        return seconds * 1e3 * self.group.gpus[0]._jitter(f"nccl.{collective}", 0.005)

    def log(self) -> str:
        return "\n".join(self.lines)
