"""The GPUs one process sees, for the multi-GPU families (p2p, collectives): how they are joined, copies
between them, and a :class:`~gpuprobe.runner.launcher.Launcher` on each.

A measuring process opens one launcher, on the run's device. The multi-GPU families need every GPU the
process sees (CUDA numbers them 0 .. count-1 after ``CUDA_VISIBLE_DEVICES``), so they open a
:class:`PeerGroup` from that launcher (:func:`open_peer_group`): :class:`CupyPeerGroup` over CuPy, or a
simulated node where the launcher is a simulation that brings its own (``peer_group()``). A process
pinned to one GPU (``gpuprobe fleet-run``, the Slurm recipe, an xdist worker) sees a group of one, and
the families report their probes ``not_run`` with :data:`ONE_GPU`: one GPU cannot measure a link.

Like the launcher, this is the only code that touches the GPUs for these families: NVML's topology
queries, peer access, copy-engine copies between GPUs, and (:mod:`gpuprobe.runner.nccl`) NCCL.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from gpuprobe.runner.cupy_launcher import CupyLauncher
from gpuprobe.runner.device import cuda_uuid
from gpuprobe.runner.flight import RecordingLauncher
from gpuprobe.runner.launcher import Launcher
from gpuprobe.runner.nvml import as_text, nvml_session, nvml_uuid

if TYPE_CHECKING:  # CuPy is the measuring side's dependency (the "gpu" extra): imported where it is used
    import cupy

    from gpuprobe.runner.nccl import Communicator

Marks = list[tuple["cupy.cuda.Event", "cupy.cuda.Event"]]  # (start, stop) per stream

ONE_GPU = "1 GPU visible"
"""Why a multi-GPU probe is not run in a process that sees one GPU (never a failure: nothing to measure)."""

# NVML's common PCIe ancestor of two GPUs (nvmlDeviceGetTopologyCommonAncestor), as nvidia-smi topo -m names it
CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED = 704  # cudaErrorPeerAccessAlreadyEnabled (CuPy does not name it)
PCIE_PATHS = {0: "same board", 10: "PIX (one PCIe switch)", 20: "PXB (several PCIe switches)",
              30: "PHB (a host bridge)", 40: "NODE (one NUMA node)", 50: "SYS (across CPU sockets)"}  # fmt: skip


@dataclass(frozen=True)
class PeerLink:
    """What CUDA and NVML say about GPU ``src`` reaching GPU ``dst`` (CUDA's numbering in this process).

    ``link``: "nvlink" where NVML reports an NVLink path between them (directly or through NVSwitch),
    "pcie" where it does not, "unknown" without NVML; ``path``: the PCIe path's common ancestor
    (:data:`PCIE_PATHS`), "" where NVML cannot say."""

    src: int
    dst: int
    can_access: bool  # cudaDeviceCanAccessPeer(src, dst): src's kernels may address dst's memory
    link: str
    path: str = ""
    detail: str = ""  # why NVML could not say, where it could not


@dataclass(frozen=True)
class GpuPorts:
    """One GPU's identity and NVLinks: ``nvlinks_active`` of the ``nvlinks`` it has (None without NVML;
    0 of 0 on a part without NVLink)."""

    index: int
    uuid: str
    pci_bus_id: str
    nvlinks: int | None
    nvlinks_active: int | None


@dataclass(frozen=True)
class PeerCopy:
    """One copy-engine copy between GPUs: ``src`` into ``dst`` (buffers of any GPUs of the group)."""

    dst: Any
    src: Any


class PeerGroup(Protocol):
    """Every GPU this process sees."""

    def count(self) -> int: ...

    def ports(self) -> list[GpuPorts]:
        """Each GPU's identity and NVLink count (NVML)."""

    def links(self) -> list[PeerLink]:
        """Every ordered pair of different GPUs."""

    def on(self, device: int) -> Launcher:
        """The launcher of GPU ``device``: its buffers live there, its kernels run there (the home
        device's is the launcher the group was opened from)."""

    def enable_peer_access(self, device: int, peer: int) -> None:
        """Let GPU ``device``'s kernels address GPU ``peer``'s memory (already enabled: nothing to do)."""

    def time_copies(self, copies: Sequence[PeerCopy], nbytes: int) -> list[float]:
        """GPU milliseconds of each of ``copies`` (``nbytes`` each, the copy engine's cudaMemcpyPeerAsync),
        all started together, each on a stream of its destination GPU: from the common start to its end."""

    def sample(self, buffer: Any, dtype: str, indices: np.ndarray) -> np.ndarray:
        """The elements of ``buffer`` (viewed as ``dtype``) at ``indices``, read back."""

    def communicator(self) -> Communicator:
        """NCCL over every GPU of the group, opened once (:class:`LaunchPathUnavailable` without NCCL)."""


def open_peer_group(launcher: Any) -> PeerGroup:
    """The group of every GPU the process of ``launcher`` sees. A simulated launcher brings its own
    (``peer_group()``); a CuPy one is joined by the other GPUs. Under the flight recorder the group's
    calls, and those of each GPU's launcher, are recorded like the launcher's own."""
    recorder = launcher if isinstance(launcher, RecordingLauncher) else None
    inner = recorder.wrapped if recorder else launcher
    own = getattr(inner, "peer_group", None)
    group = own() if own is not None else CupyPeerGroup(inner)
    return recorder.recording(group, "peers") if recorder else group


class _OnDevice:
    """A launcher whose every call runs with its GPU current (CuPy allocates, fills and launches on the
    current device)."""

    def __init__(self, launcher: CupyLauncher, device: int) -> None:
        self._launcher, self._device = launcher, device

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._launcher, name)
        if not callable(attribute):
            return attribute

        @functools.wraps(attribute)
        def on_device(*args: Any, **kwargs: Any) -> Any:
            with self._launcher._cp.cuda.Device(self._device):
                return attribute(*args, **kwargs)

        return on_device


class CupyPeerGroup:
    """A :class:`PeerGroup` over CuPy: one :class:`CupyLauncher` per GPU (the home one is ``home``),
    each opened when first used, each call made with its GPU current."""

    def __init__(self, home: CupyLauncher) -> None:
        import cupy

        self._cp = cupy
        self._cubin, self._signatures = home.cubin, home.signatures
        self._count = int(self._cp.cuda.runtime.getDeviceCount())
        self._launchers: dict[int, CupyLauncher] = {home.device_index: home}
        self._streams: dict[int, list[cupy.cuda.Stream]] = {}
        self._communicator: Any = None

    def count(self) -> int:
        return self._count

    def _launcher(self, device: int) -> CupyLauncher:
        """GPU ``device``'s launcher, opened on first use (the previous current device restored after)."""
        if device not in self._launchers:
            with self._cp.cuda.Device(device):
                self._launchers[device] = CupyLauncher(Path(self._cubin), device, self._signatures)
        return self._launchers[device]

    def on(self, device: int) -> Launcher:
        return _OnDevice(self._launcher(device), device)

    def ports(self) -> list[GpuPorts]:
        return [_ports(index, cuda_uuid(index)) for index in range(self._count)]

    def links(self) -> list[PeerLink]:
        runtime = self._cp.cuda.runtime
        uuids = [cuda_uuid(index) for index in range(self._count)]
        return [
            PeerLink(src, dst, bool(runtime.deviceCanAccessPeer(src, dst)), *_nvml_link(src, dst, uuids))
            for src in range(self._count)
            for dst in range(self._count)
            if src != dst
        ]

    def enable_peer_access(self, device: int, peer: int) -> None:
        runtime = self._cp.cuda.runtime
        with self._cp.cuda.Device(device):
            try:
                runtime.deviceEnablePeerAccess(peer)
            except runtime.CUDARuntimeError as exc:
                if exc.status != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED:
                    raise

    def _device_streams(self, device: int) -> list[cupy.cuda.Stream]:
        """Two streams of GPU ``device`` (a copy each way may start on one GPU at once), made once."""
        if device not in self._streams:
            with self._cp.cuda.Device(device):
                self._streams[device] = [self._cp.cuda.Stream(non_blocking=True) for _ in range(2)]
        return self._streams[device]

    def stream(self, device: int) -> cupy.cuda.Stream:
        """GPU ``device``'s first stream (NCCL's rank on it uses this one)."""
        return self._device_streams(device)[0]

    def start_together(self, streams: Sequence[tuple[int, cupy.cuda.Stream]], launches: int) -> Marks:
        """Start events recorded on each (device, stream), all passed at one moment: a clock spin on the
        first stream (long enough for the host to enqueue ``launches`` calls) then an event every other
        stream waits for. Returns (start, stop) per stream; record each stop after the work."""
        cp = self._cp
        first_device, first_stream = streams[0]
        with cp.cuda.Device(first_device):
            self._launcher(first_device)._hold(launches, first_stream)  # the launcher's spin, on this stream
            gate = cp.cuda.Event(disable_timing=True)
            gate.record(first_stream)
        marks = []
        for device, stream in streams:
            with cp.cuda.Device(device):
                stream.wait_event(gate)
                start = cp.cuda.Event()
                start.record(stream)
                marks.append((start, cp.cuda.Event()))
        return marks

    def elapsed_ms(self, streams: Sequence[tuple[int, cupy.cuda.Stream]], marks: Marks) -> list[float]:
        """Each stream's milliseconds from its start to its stop (both recorded), waited for."""
        cp, elapsed = self._cp, []
        for (device, _), (start, stop) in zip(streams, marks, strict=True):
            with cp.cuda.Device(device):
                stop.synchronize()
                elapsed.append(float(cp.cuda.get_elapsed_time(start, stop)))
        return elapsed

    def time_copies(self, copies: Sequence[PeerCopy], nbytes: int) -> list[float]:
        """Each copy on a stream of its own on its destination GPU (see :meth:`start_together`)."""
        streams, used = [], {}
        for copy in copies:
            device = _device_of(copy.dst)
            streams.append((device, self._device_streams(device)[used.get(device, 0)]))
            used[device] = used.get(device, 0) + 1
        marks = self.start_together(streams, len(copies))
        for index, copy in enumerate(copies):
            self._copy(copy.dst, copy.src, nbytes, streams[index][1], marks[index][1])
        return self.elapsed_ms(streams, marks)

    def _copy(self, dst: cupy.ndarray, src: cupy.ndarray, nbytes: int, stream: cupy.cuda.Stream,
              stop: cupy.cuda.Event) -> None:  # fmt: skip
        """``nbytes`` of ``src`` into ``dst`` by the copy engine on ``stream``, ``stop`` recorded after."""
        device = _device_of(dst)
        with self._cp.cuda.Device(device):
            self._cp.cuda.runtime.memcpyPeerAsync(dst.data.ptr, device, src.data.ptr, _device_of(src), nbytes,
                                                  stream.ptr)  # fmt: skip
            stop.record(stream)

    def sample(self, buffer: cupy.ndarray, dtype: str, indices: np.ndarray) -> np.ndarray:
        cp = self._cp
        with cp.cuda.Device(_device_of(buffer)):
            return cp.asnumpy(buffer.view(cp.dtype(dtype))[cp.asarray(indices)])

    def communicator(self) -> Communicator:
        if self._communicator is None:
            from gpuprobe.runner.nccl import CupyCommunicator

            self._communicator = CupyCommunicator(self, self._count)
        return self._communicator


def _device_of(buffer: cupy.ndarray) -> int:
    return int(buffer.data.device_id)


# ---- NVML: how two GPUs are joined ---------------------------------------------------------------


def _handle(nv: Any, index: int, uuid: str) -> Any:
    """A GPU's NVML handle by its CUDA UUID (NVML numbers GPUs ignoring CUDA_VISIBLE_DEVICES), else by index."""
    return nv.nvmlDeviceGetHandleByUUID(nvml_uuid(uuid)) if uuid else nv.nvmlDeviceGetHandleByIndex(index)


def _nvml_link(src: int, dst: int, uuids: Sequence[str]) -> tuple[str, str, str]:
    """(link, PCIe path, why unknown) from GPU ``src`` to GPU ``dst`` (CUDA's numbers and UUIDs), from NVML."""
    try:
        nv = nvml_session()
    except Exception as exc:  # no NVML here
        return "unknown", "", f"NVML cannot say ({type(exc).__name__}: {exc})"
    return _nvml_pair(nv, (src, uuids[src]), (dst, uuids[dst]))


def _nvml_pair(nv: Any, src: tuple[int, str], dst: tuple[int, str]) -> tuple[str, str, str]:
    try:
        a, b = _handle(nv, *src), _handle(nv, *dst)
        nvlink = nv.nvmlDeviceGetP2PStatus(a, b, nv.NVML_P2P_CAPS_INDEX_NVLINK) == nv.NVML_P2P_STATUS_OK
    except Exception as exc:  # a part or driver that refuses the query
        return "unknown", "", f"NVML cannot say ({type(exc).__name__}: {exc})"
    return ("nvlink" if nvlink else "pcie"), _pcie_path(nv, a, b), ""


def _pcie_path(nv: Any, a: Any, b: Any) -> str:
    """The two GPUs' common PCIe ancestor in nvidia-smi's words; "" where NVML cannot say."""
    with contextlib.suppress(Exception):
        level = int(nv.nvmlDeviceGetTopologyCommonAncestor(a, b))
        return PCIE_PATHS.get(level, f"level {level}")
    return ""


def _ports(index: int, uuid: str) -> GpuPorts:
    """One GPU's PCI bus id and NVLinks (each link NVML answers for, and those active)."""
    try:
        nv = nvml_session()
    except Exception:
        return GpuPorts(index, uuid, "", None, None)
    return _nvml_ports(nv, index, uuid)


def _nvml_ports(nv: Any, index: int, uuid: str) -> GpuPorts:
    try:
        handle = _handle(nv, index, uuid)
        bus_id = as_text(nv.nvmlDeviceGetPciInfo(handle).busId)
    except Exception:
        return GpuPorts(index, uuid, "", None, None)
    states = [_link_state(nv, handle, link) for link in range(nv.NVML_NVLINK_MAX_LINKS)]
    present = [s for s in states if s is not None]
    return GpuPorts(index, uuid, bus_id, len(present), sum(1 for s in present if s))


def _link_state(nv: Any, handle: Any, link: int) -> bool | None:
    """Whether NVLink ``link`` is up; None for a link the part does not have (NVML refuses the query)."""
    try:
        return int(nv.nvmlDeviceGetNvLinkState(handle, link)) == nv.NVML_FEATURE_ENABLED
    except Exception:
        return None
