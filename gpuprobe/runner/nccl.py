"""NCCL through CuPy's binding (``cupy.cuda.nccl``): one communicator per GPU of the process, made at once
(ncclCommInitAll), every collective issued as one group of per-GPU calls.

The NCCL library is optional (``pip install 'gpuprobe[nccl]'`` brings ``nvidia-nccl-cu13``, which CuPy
loads): without it, :class:`~gpuprobe.runner.launcher.LaunchPathUnavailable` says so and the collectives
family records its probes ``not_run`` with the reason. NCCL writes what it decides (its version, the
transports between GPUs, the network across nodes, and with the TUNING subsystem the algorithm and
protocol of each call) to its debug log: the communicator asks for it in a file of its own
(``NCCL_DEBUG=INFO``, ``NCCL_DEBUG_SUBSYS=INIT,ENV,TUNING``, ``NCCL_DEBUG_FILE``) unless the user set
these, and hands the text back as it is (:meth:`Communicator.log`); reading it is the family's job.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from gpuprobe.runner.launcher import LaunchPathUnavailable

if TYPE_CHECKING:  # CuPy is the measuring side's dependency (the "gpu" extra): imported where it is used
    import cupy

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast", "all_to_all")
DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,ENV,TUNING"}


class Communicator(Protocol):
    """NCCL over every GPU of a :class:`~gpuprobe.runner.peers.PeerGroup`, rank r on GPU r. Buffers are
    addresses (``Launcher.address``) of float32 elements; ``count`` is NCCL's count argument (elements
    per rank's share for all_gather, reduce_scatter and all_to_all, the whole buffer otherwise)."""

    def version(self) -> str:
        """NCCL's version, e.g. "2.27.7"."""

    def call(self, collective: str, sends: Sequence[int], recvs: Sequence[int], count: int) -> None:
        """One ``collective`` (one of :data:`COLLECTIVES`: sum, float32, root 0) over every rank, waited for."""

    def time(self, collective: str, sends: Sequence[int], recvs: Sequence[int], count: int, calls: int) -> float:
        """GPU milliseconds per call of ``calls`` back-to-back collectives: on each GPU, between events
        around them on its stream (held by a clock spin while the host enqueues them all), the slowest
        GPU's time."""

    def log(self) -> str:
        """NCCL's debug log so far ("" where the user sent it elsewhere)."""


class GroupStreams(Protocol):
    """What the communicator uses of its GPUs' group (a ``CupyPeerGroup``): a stream per GPU, and starting
    and timing work on several streams at one moment."""

    def stream(self, device: int) -> cupy.cuda.Stream: ...

    def start_together(
        self, streams: Sequence[tuple[int, cupy.cuda.Stream]], launches: int
    ) -> list[tuple[cupy.cuda.Event, cupy.cuda.Event]]: ...

    def elapsed_ms(
        self, streams: Sequence[tuple[int, cupy.cuda.Stream]], marks: list[tuple[cupy.cuda.Event, cupy.cuda.Event]]
    ) -> list[float]: ...


class CupyCommunicator:
    """A :class:`Communicator` over CuPy, for the GPUs of ``group`` (ranks 0 .. ``ranks`` - 1).
    :class:`LaunchPathUnavailable` where CuPy cannot load the NCCL library."""

    def __init__(self, group: GroupStreams, ranks: int) -> None:
        import cupy

        try:
            from cupy.cuda import nccl
        except ImportError as exc:
            raise LaunchPathUnavailable(f"CuPy's NCCL binding cannot be imported ({exc})") from None
        if not nccl.available:
            raise LaunchPathUnavailable("the NCCL library is not installed (pip install 'gpuprobe[nccl]')")
        self._nccl, self._cp, self._group = nccl, cupy, group
        self._log_path = _debug_log()
        self._comms = nccl.NcclCommunicator.initAll(list(range(ranks)))
        self._streams = [group.stream(rank) for rank in range(ranks)]

    def version(self) -> str:
        number = int(self._nccl.get_version())  # e.g. 22707: major x 10000 + minor x 100 + patch (2.9 and later)
        return f"{number // 10000}.{number // 100 % 100}.{number % 100}"

    def _issue(self, collective: str, sends: Sequence[int], recvs: Sequence[int], count: int) -> None:
        """One grouped collective over every rank, enqueued on each rank's stream."""
        nccl = self._nccl
        if collective not in COLLECTIVES:
            raise ValueError(f"collective must be one of {', '.join(COLLECTIVES)}, not {collective!r}")
        nccl.groupStart()
        try:
            for rank, comm in enumerate(self._comms):
                with self._cp.cuda.Device(rank):  # each rank's call made with its GPU current, as NCCL's examples do
                    self._call(comm, collective, sends[rank], recvs[rank], count, self._streams[rank].ptr)
        finally:
            nccl.groupEnd()

    def _call(
        self, comm: cupy.cuda.nccl.NcclCommunicator, collective: str, send: int, recv: int, count: int, stream: int
    ) -> None:
        """One rank's part of ``collective`` (sum, float32, root 0), inside the group."""
        nccl = self._nccl
        f32 = nccl.NCCL_FLOAT32
        if collective == "all_reduce":
            comm.allReduce(send, recv, count, f32, nccl.NCCL_SUM, stream)
        elif collective == "all_gather":
            comm.allGather(send, recv, count, f32, stream)
        elif collective == "reduce_scatter":
            comm.reduceScatter(send, recv, count, f32, nccl.NCCL_SUM, stream)
        elif collective == "broadcast":
            comm.broadcast(send, recv, count, f32, 0, stream)
        else:  # all_to_all, as nccl-tests: a send and a receive of one share per peer
            for peer in range(len(self._comms)):
                comm.send(send + 4 * count * peer, count, f32, peer, stream)
                comm.recv(recv + 4 * count * peer, count, f32, peer, stream)

    def call(self, collective: str, sends: Sequence[int], recvs: Sequence[int], count: int) -> None:
        self._issue(collective, sends, recvs, count)
        for rank in range(len(self._streams)):
            self._streams[rank].synchronize()

    def time(self, collective: str, sends: Sequence[int], recvs: Sequence[int], count: int, calls: int) -> float:
        streams = list(enumerate(self._streams))
        marks = self._group.start_together(streams, calls * len(streams))
        for _ in range(calls):
            self._issue(collective, sends, recvs, count)
        for rank in range(len(streams)):
            with self._cp.cuda.Device(rank):
                marks[rank][1].record(self._streams[rank])
        return max(self._group.elapsed_ms(streams, marks)) / calls

    def log(self) -> str:
        if self._log_path is None or not self._log_path.exists():
            return ""
        return self._log_path.read_text(encoding="utf-8", errors="replace")


def _debug_log() -> Path | None:
    """Ask NCCL (before its first communicator) for its INFO log with the TUNING lines, in a file of this
    process's own; None where the user chose where NCCL logs (their settings are left as they are)."""
    if "NCCL_DEBUG_FILE" in os.environ or "NCCL_DEBUG" in os.environ:
        return None
    path = Path(tempfile.gettempdir()) / f"gpuprobe-nccl-{os.getpid()}.log"
    path.unlink(missing_ok=True)
    os.environ.update({**DEBUG_ENV, "NCCL_DEBUG_FILE": str(path)})
    return path
