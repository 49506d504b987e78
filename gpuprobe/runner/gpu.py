"""The launch path: the one small runner every probe measurement goes through.

Everything a probe needs from a GPU is in :class:`Launcher`: allocate, fill, launch a kernel of
the inspected cubin, read results, and describe the device. :class:`CupyLauncher` implements it
with CuPy (``cupy.RawModule(path=...)`` loads exactly the cubin gpuprobe compiled and checked);
tests implement it with a simulated device. Nothing else in gpuprobe imports CuPy.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.metadata
import math
import os
import platform
import time
from collections.abc import Callable, Collection, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import numpy as np

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.results import Device
from gpuprobe.core.tool_output import decoded

if TYPE_CHECKING:  # CuPy is the measuring side's dependency (the "gpu" extra): imported where it is used
    import cupy

Dims = int | tuple[int, ...]  # a grid or block: x, or (x, y, z)


def _dims(value: Dims) -> tuple[int, ...]:
    return (value,) if isinstance(value, int) else tuple(value)


DYNAMIC_SHARED_DEFAULT = 48 * 1024  # above this a kernel must opt in to more dynamic shared memory

TENSOR_MAP_DTYPE = np.dtype([("opaque", "<u8", (16,))])  # CUtensorMap: 128 opaque bytes, passed by value


@dataclass(frozen=True)
class TileMap:
    """What ``cuTensorMapEncodeTiled`` is told about a 2-D tensor of 16-bit elements: ``rows`` x ``cols``,
    row-major and densely packed, and the box (``box_rows`` x ``box_cols``) one TMA copy moves; the
    shared-memory swizzle span (0, 32, 64 or 128 bytes) and the L2 promotion (0, 64, 128 or 256 bytes:
    the granularity at which the L2 fetches the box's lines from DRAM). Whether a combination is legal,
    and what it puts where, is the families' business (gpuprobe.families.tma.tiles)."""

    rows: int
    cols: int
    box_rows: int
    box_cols: int
    swizzle_bytes: int = 0
    l2_promotion_bytes: int = 0


# What holds the GPU while timed work is enqueued: the memory family's %clock64 spin (every cubin has it),
# long enough per launch to outlast the host's enqueueing of one (tens of us; 100k cycles is 50 us at 2 GHz).
HOLD_KERNEL = "gp_sm_clock"
HOLD_CYCLES_PER_LAUNCH = 100_000
HOLD_MAX_CYCLES = 1_000_000_000


def hold_cycles(launches: int) -> int:
    """Cycles the holding spin keeps the GPU busy while ``launches`` launches are enqueued behind it."""
    return min(HOLD_MAX_CYCLES, HOLD_CYCLES_PER_LAUNCH * max(1, launches))

# cuBLAS GEMM inputs: (cudaDataType of A, B and C, cublasComputeType, NumPy dtype holding the values)
_GEMM_TYPES: dict[str, tuple[int, int, str]] = {
    "f16": (2, 68, "float16"),  # CUDA_R_16F, CUBLAS_COMPUTE_32F
    "bf16": (14, 68, "uint16"),  # CUDA_R_16BF (NumPy has no bfloat16: the bits are uploaded as uint16)
    "tf32": (0, 77, "float32"),  # CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32
    "f32": (0, 68, "float32"),
}


# Every probe's measurement is marked with an NVTX push/pop range of this name (gpuprobe.measure.conditions),
# so a profiler that wraps the measuring process (Nsight Compute, gpuprobe.measure.witness) can tell whose launches
# it counted; a family may mark a part of its work as the probe it measures for (bandwidth's goodput patterns).
NVTX_PREFIX = "gpuprobe:"
GEMM_DRAWN_ROWS = 1024  # random rows of each cuBLAS operand drawn on the host (time_gemm), repeated down to n


def probe_range(probe: str) -> str:
    """The NVTX range name marking ``probe``'s measurement: ``gpuprobe:<probe name>``."""
    return NVTX_PREFIX + probe


class Launcher(Protocol):
    def alloc(self, nbytes: int) -> Any: ...

    def alloc_pinned(self, nbytes: int) -> Any:
        """``nbytes`` of page-locked host memory that kernels address directly (unified addressing);
        the buffer works with ``address``, ``fill`` and ``read`` like a device buffer."""

    def address(self, buffer: Any) -> int: ...

    def upload(self, array: np.ndarray) -> Any: ...

    def fill(self, buffer: Any, value: int) -> None:
        """Set every byte of ``buffer`` to ``value`` on the device (through the L2, evicting what it held)."""

    def prefer_l1(self, kernel: str) -> None:
        """Ask for the largest L1 (smallest shared-memory carve-out) when ``kernel`` runs."""

    def write_chain(self, buffer: Any, successor: np.ndarray, stride: int) -> None:
        """Store, at byte ``i * stride`` of ``buffer``, the 64-bit address of node ``successor[i]``."""

    def launch(
        self, kernel: str, grid: Dims, block: Dims, args: list[Any], shared_bytes: int = 0, cooperative: bool = False
    ) -> None:
        """Run ``kernel`` to completion; numpy scalars give parameter widths, buffers pass pointers.

        ``cooperative``: a cooperative launch (all blocks co-resident, or the launch fails); dynamic
        shared memory above 48 KiB is opted into for the kernel."""

    def read(self, buffer: Any, dtype: str, count: int) -> np.ndarray:
        """The first ``count`` elements of ``buffer`` viewed as NumPy ``dtype`` (e.g. "uint64")."""

    def tensor_map(self, buffer: Any, tiles: TileMap) -> np.void:
        """A TMA tensor map of ``buffer`` as ``tiles`` describes it: the 128 bytes a kernel takes by value
        (``.param .align 64 .b8 name[128]``), to pass among a launch's arguments."""

    def time_launches(
        self, kernel: str, grid: Dims, block: Dims, args: list[Any], shared_bytes: int = 0, count: int = 1,
        cooperative: bool = False,
    ) -> float:  # fmt: skip
        """GPU milliseconds of ``count`` back-to-back launches, between two CUDA events."""

    def max_active_blocks(self, kernel: str, block: int, shared_bytes: int = 0) -> int:
        """Blocks of ``kernel`` that fit on one SM at once (the occupancy API). For a kernel with a
        required cluster size, the clusters co-resident on the whole GPU in blocks, over the SMs: so
        that ``max_active_blocks * SMs`` blocks still fit at once."""

    def time_device_copy(self, dst: Any, src: Any, nbytes: int, count: int = 1) -> float:
        """GPU milliseconds of ``count`` device-to-device copies of ``nbytes`` by the CUDA runtime's memcpy."""

    def time_host_copy(self, nbytes: int, direction: str, pinned: bool, count: int = 1) -> float:
        """Host wall-clock milliseconds of ``count`` copies of ``nbytes`` between host and device, each
        waited for: ``direction`` "h2d", "d2h" or "both" (one each way at once, on two streams)."""

    def time_gemm(self, n: int, dtype: str, count: int = 1, stamp: tuple[str, int, Any] | None = None) -> float:
        """GPU milliseconds of ``count`` n x n x n cuBLAS GEMMs (``dtype`` "f16", "bf16", "tf32" or "f32"
        inputs, float32 accumulation, random operands), between two CUDA events.

        ``stamp`` = (kernel, blocks, out): a kernel of the cubin taking ``(.u32 slot, .u64 out)``, launched
        with ``blocks`` blocks of one thread on the same stream right before the timed GEMMs (slot 0) and
        right after them (slot 1), outside the events and inside the hold, so that what it records (the
        SM clock's witnesses) brackets the GEMMs alone. The caller reads ``out`` afterwards."""

    def device(self) -> Device: ...

    def nvml(self) -> dict[str, Any] | None:
        """Clocks, temperature, power, throttle reasons and other processes, where NVML is present
        (see :func:`nvml_snapshot`)."""

    def nvtx_range(self, name: str) -> contextlib.AbstractContextManager[None]:
        """A context in which the launches lie inside the NVTX push/pop range ``name`` (:func:`probe_range`),
        for a profiler wrapping this process to see; a cheap no-op when no tool listens."""

    # ---- launch costs (the launch and grid_sync families) ------------------------------------
    def enqueue_seconds(
        self, kernel: str, grid: Dims, block: Dims, args: list[Any], count: int, via: str = "cupy", wait: bool = True
    ) -> float:
        """Host wall seconds (time.perf_counter) to enqueue ``count`` launches of ``kernel`` on the current
        stream through ``via``: "cupy", "cuda-bindings" (cuLaunchKernel on the same cubin, in CuPy's
        context) or "pycuda". Not waited for inside the timing; waited for after it unless ``wait`` is
        False. :class:`LaunchPathUnavailable` when ``via`` cannot be used here (pycuda not installed)."""

    def graph_replay(
        self, kernel: str, grid: Dims, block: Dims, args: list[Any], nodes: int, replays: int
    ) -> tuple[float, float]:
        """Capture ``nodes`` launches into a CUDA graph (CuPy stream capture), instantiate and upload it,
        replay it ``replays`` times: (host wall seconds to enqueue the replays, GPU seconds they took
        between two events), totals over all replays."""

    def event_costs(self, count: int) -> dict[str, float]:
        """Host wall seconds per CUDA event record ("record") and per synchronize on an event already
        complete ("synchronize"), each the mean over ``count`` events."""


@dataclass(frozen=True)
class LauncherSpec:
    """How a measuring child process opens its launcher: ``module:factory(cubin, device_index, **options)``."""

    factory: str = "gpuprobe.runner.gpu:CupyLauncher"
    device_index: int = 0
    options: dict[str, Any] = field(default_factory=dict)


def gpu_unavailable_reason() -> str | None:
    """None when a CUDA GPU can be used; else why not, in one line."""
    try:
        import cupy
    except ImportError:
        return "no GPU: CuPy is not installed (pip install 'gpuprobe[gpu]')"
    except Exception as exc:  # CuPy raises assorted errors when CUDA libraries are missing
        return f"no GPU: CuPy cannot load ({type(exc).__name__}: {exc})"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:
        missing = driver_missing_reason()
        if missing:  # the runtime then says "driver version is insufficient": no driver is the truth
            return f"no GPU: no NVIDIA GPU/driver found ({missing}; the CUDA runtime says: {exc})"
        return f"no GPU: the CUDA driver reports none ({exc})"
    return None if count > 0 else "no GPU: the CUDA driver reports 0 devices"


DRIVER_LIBRARY = {"Windows": "nvcuda.dll", "Darwin": "libcuda.dylib"}.get(platform.system(), "libcuda.so.1")


def driver_missing_reason() -> str | None:
    """Why the NVIDIA driver's library cannot be loaded (it is not installed), or None when it loads."""
    import ctypes

    try:
        ctypes.CDLL(DRIVER_LIBRARY)
    except OSError as exc:
        return f"{DRIVER_LIBRARY} cannot be loaded: {str(exc).removeprefix(DRIVER_LIBRARY + ': ')}"
    return None


def _version_text(number: int) -> str:
    return f"{number // 1000}.{(number % 1000) // 10}"


class CupyLauncher:
    """A :class:`Launcher` over CuPy for one device and one cubin."""

    def __init__(self, cubin: Path, device_index: int = 0) -> None:
        import cupy

        self._cp = cupy
        self._device_index = device_index
        cupy.cuda.Device(device_index).use()
        self._uuid = cuda_uuid(device_index)
        self._sm_count = int(cupy.cuda.runtime.getDeviceProperties(device_index)["multiProcessorCount"])
        self._cubin = str(cubin)
        self._modules: dict[bool, cupy.RawModule] = {False: cupy.RawModule(path=self._cubin)}
        self._kernels: dict[tuple[str, bool], cupy.RawKernel] = {}
        # (bytes, pinned, way) -> (host buffer, device buffer, their addresses): kept for reuse
        self._host_buffers: dict[tuple[int, bool, str], tuple[Any, cupy.ndarray, int, int]] = {}
        self._pinned: dict[int, np.ndarray] = {}  # device address of a pinned buffer -> its host view
        self._hold_out: Any = None
        self._co_resident: dict[tuple[str, int, int], int] = {}  # (kernel, threads, shared) -> blocks per SM

    def alloc(self, nbytes: int) -> cupy.ndarray:
        return self._cp.zeros(nbytes, dtype=self._cp.uint8)

    def alloc_pinned(self, nbytes: int) -> cupy.ndarray:
        cp = self._cp
        pinned = cp.cuda.alloc_pinned_memory(nbytes)  # under unified addressing, its host address is a device address
        memory = cp.cuda.UnownedMemory(pinned.ptr, nbytes, pinned, self._device_index)  # keeps ``pinned`` alive
        buffer = cp.ndarray(nbytes, dtype=cp.uint8, memptr=cp.cuda.MemoryPointer(memory, 0))
        self._pinned[pinned.ptr] = np.ndarray(nbytes, dtype=np.uint8, buffer=pinned)  # filled and read by the host
        return buffer

    def address(self, buffer: cupy.ndarray) -> int:
        return int(buffer.data.ptr)

    def upload(self, array: np.ndarray) -> cupy.ndarray:
        return self._cp.asarray(array)

    def fill(self, buffer: cupy.ndarray, value: int) -> None:
        host = self._pinned.get(self.address(buffer))
        self._cp.cuda.Device().synchronize()
        if host is not None:  # pinned host memory: the host writes it (no device memset on a host pointer)
            host[:] = value
            return
        buffer.fill(value)
        self._cp.cuda.Device().synchronize()

    def prefer_l1(self, kernel: str) -> None:
        for cooperative in (False, True):
            self._function(kernel, cooperative).preferred_shared_memory_carveout = 0  # CU_SHAREDMEM_CARVEOUT_MAX_L1

    def write_chain(self, buffer: cupy.ndarray, successor: np.ndarray, stride: int) -> None:
        cp = self._cp
        words = buffer.view(cp.uint64)
        nodes = cp.arange(len(successor), dtype=cp.uint64)
        targets = cp.asarray(successor, dtype=cp.uint64)
        words[nodes * (stride // 8)] = cp.uint64(self.address(buffer)) + targets * cp.uint64(stride)
        cp.cuda.Device().synchronize()

    def _function(self, kernel: str, cooperative: bool = False) -> cupy.RawKernel:
        """The kernel from the cubin; a cooperative one from a second load of the same cubin."""
        if (kernel, cooperative) not in self._kernels:
            if cooperative not in self._modules:
                self._modules[cooperative] = self._cp.RawModule(path=self._cubin, enable_cooperative_groups=True)
            self._kernels[kernel, cooperative] = self._modules[cooperative].get_function(kernel)
        return self._kernels[kernel, cooperative]

    def _with_shared(self, kernel: str, cooperative: bool, shared_bytes: int) -> cupy.RawKernel:
        """The kernel, opted in to ``shared_bytes`` of dynamic shared memory where that is above the default."""
        function = self._function(kernel, cooperative)
        if shared_bytes > DYNAMIC_SHARED_DEFAULT and function.max_dynamic_shared_size_bytes < shared_bytes:
            function.max_dynamic_shared_size_bytes = shared_bytes
        return function

    def _enqueue(
        self, kernel: str, grid: Dims, block: Dims, args: list[Any], shared_bytes: int, cooperative: bool
    ) -> None:
        function = self._with_shared(kernel, cooperative, shared_bytes)
        if cooperative:
            self._refuse_if_not_co_resident(kernel, function, grid, block, shared_bytes)
        function(_dims(grid), _dims(block), tuple(args), shared_mem=shared_bytes)

    def _refuse_if_not_co_resident(
        self, kernel: str, function: cupy.RawKernel, grid: Dims, block: Dims, shared: int
    ) -> None:
        """Refuse a cooperative grid larger than the blocks that fit at once. CuPy checks the same bound
        (occupancy x SMs) but *shrinks* a 1-D grid that exceeds it, with a warning: a probe would then
        run, and be judged, on fewer blocks than it asked for."""
        blocks, threads = math.prod(_dims(grid)), math.prod(_dims(block))
        key = (kernel, threads, shared)
        if key not in self._co_resident:
            occupancy = self._cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor
            self._co_resident[key] = int(occupancy(function.kernel.ptr, threads, shared))
        per_sm = self._co_resident[key]
        if blocks > per_sm * self._sm_count:
            raise CooperativeGridTooLarge(
                f"{kernel}: a cooperative grid of {blocks} blocks of {threads} threads cannot be co-resident: "
                f"at most {per_sm * self._sm_count} ({per_sm} per SM x {self._sm_count} SMs); refused, never shrunk"
            )

    def launch(
        self, kernel: str, grid: Dims, block: Dims, args: list[Any], shared_bytes: int = 0, cooperative: bool = False
    ) -> None:
        self._enqueue(kernel, grid, block, args, shared_bytes, cooperative)
        self._cp.cuda.Device().synchronize()

    def read(self, buffer: cupy.ndarray, dtype: str, count: int) -> np.ndarray:
        host = self._pinned.get(self.address(buffer))
        if host is not None:  # pinned host memory: read where it is, once the GPU is done with it
            self._cp.cuda.Device().synchronize()
            return host.view(np.dtype(dtype))[:count].copy()
        return self._cp.asnumpy(buffer.view(self._cp.dtype(dtype))[:count])

    def tensor_map(self, buffer: cupy.ndarray, tiles: TileMap) -> np.void:
        return encode_tensor_map(self.address(buffer), tiles)

    def _hold(self, launches: int, stream: cupy.cuda.Stream | None = None) -> None:
        """Keep the GPU busy (a %clock64 spin) while the host enqueues ``launches`` launches to be timed,
        so the events around them time the GPU's work, not the host's enqueueing of it."""
        if self._hold_out is None:
            self._hold_out = self._cp.zeros(16, dtype=self._cp.uint8)
        cycles = np.uint64(hold_cycles(launches))
        with stream if stream is not None else contextlib.nullcontext():
            self._function(HOLD_KERNEL)((1,), (1,), (cycles, self._hold_out))

    def _elapsed_ms(self, enqueue: Callable[[], None], launches: int) -> float:
        """GPU milliseconds between events recorded before and after ``enqueue`` (``launches`` launches or
        calls) on the current stream, the GPU held by a spin while the host enqueues them."""
        start, stop = self._cp.cuda.Event(), self._cp.cuda.Event()
        self._hold(launches)
        start.record()
        enqueue()
        stop.record()
        stop.synchronize()
        return float(self._cp.cuda.get_elapsed_time(start, stop))

    def time_launches(
        self, kernel: str, grid: Dims, block: Dims, args: list[Any], shared_bytes: int = 0, count: int = 1,
        cooperative: bool = False,
    ) -> float:  # fmt: skip
        def enqueue() -> None:
            for _ in range(count):
                self._enqueue(kernel, grid, block, args, shared_bytes, cooperative)

        return self._elapsed_ms(enqueue, count)

    def max_active_blocks(self, kernel: str, block: int, shared_bytes: int = 0) -> int:
        function = self._with_shared(kernel, False, shared_bytes)
        cluster = _required_cluster(function.kernel.ptr)
        if cluster is None:
            occupancy = self._cp.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor
            return int(occupancy(function.kernel.ptr, block, shared_bytes))
        stream = self._cp.cuda.get_current_stream().ptr
        clusters = _max_active_clusters(function.kernel.ptr, cluster, block, shared_bytes, stream)
        return clusters * math.prod(cluster) // self._sm_count

    def time_device_copy(self, dst: cupy.ndarray, src: cupy.ndarray, nbytes: int, count: int = 1) -> float:
        runtime = self._cp.cuda.runtime
        stream = self._cp.cuda.get_current_stream().ptr

        def enqueue() -> None:
            for _ in range(count):
                runtime.memcpyAsync(dst.data.ptr, src.data.ptr, nbytes, runtime.memcpyDeviceToDevice, stream)

        return self._elapsed_ms(enqueue, count)

    def _host_pair(self, nbytes: int, pinned: bool, way: str) -> tuple[int, int]:
        """Host and device addresses of ``nbytes`` buffers for copies ``way`` ("h2d"/"d2h"), kept for reuse:
        the host one pinned (page-locked) or ordinary pageable memory."""
        key = (nbytes, pinned, way)
        if key not in self._host_buffers:
            host = self._cp.cuda.alloc_pinned_memory(nbytes) if pinned else np.ones(nbytes, dtype=np.uint8)
            device = self._cp.zeros(nbytes, dtype=self._cp.uint8)
            self._host_buffers[key] = (host, device, host.ptr if pinned else host.ctypes.data, device.data.ptr)
        _, _, host_address, device_address = self._host_buffers[key]
        return host_address, device_address

    def time_host_copy(self, nbytes: int, direction: str, pinned: bool, count: int = 1) -> float:
        if direction not in ("h2d", "d2h", "both"):
            raise ValueError(f"direction must be h2d, d2h or both, not {direction!r}")
        cp, runtime = self._cp, self._cp.cuda.runtime
        ways = ("h2d", "d2h") if direction == "both" else (direction,)
        streams = [cp.cuda.Stream(non_blocking=True) for _ in ways]
        copies = []
        for way, stream in zip(ways, streams, strict=True):
            host, device = self._host_pair(nbytes, pinned, way)
            if way == "h2d":
                copies.append((device, host, runtime.memcpyHostToDevice, stream.ptr))
            else:
                copies.append((host, device, runtime.memcpyDeviceToHost, stream.ptr))
        cp.cuda.Device().synchronize()
        started = time.perf_counter()
        for _ in range(count):
            for dst, src, kind, stream_ptr in copies:
                runtime.memcpyAsync(dst, src, nbytes, kind, stream_ptr)
            for stream in streams:
                stream.synchronize()
        return (time.perf_counter() - started) * 1e3

    def time_gemm(self, n: int, dtype: str, count: int = 1, stamp: tuple[str, int, Any] | None = None) -> float:
        cp = self._cp
        try:
            from cupy.cuda import cublas
        except ImportError as exc:  # CuPy finds libcublas at first use: a machine may lack it
            reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            raise LaunchPathUnavailable(f"cuBLAS cannot be loaded here ({reason})") from None

        data_type, compute_type, holder = _GEMM_TYPES[dtype]
        # random rows (at most GEMM_DRAWN_ROWS an operand, drawn on the host: the draw, not the GEMMs, took a
        # timing's time), repeated down to n: every tile the tensor cores take is random, as the power draw needs
        rows = min(n, GEMM_DRAWN_ROWS)
        values = np.random.default_rng(1).standard_normal((2, rows, n), dtype=np.float32)
        drawn = (values.view(np.uint32) >> 16).astype(np.uint16) if dtype == "bf16" else values.astype(holder)
        host = np.tile(drawn, (1, -(-n // rows), 1))[:, :n]
        a, b = cp.asarray(host[0]), cp.asarray(host[1])
        c = cp.zeros((n, n), dtype=holder)
        alpha, beta = np.ones(1, dtype=np.float32), np.zeros(1, dtype=np.float32)
        handle = cp.cuda.device.get_cublas_handle()

        def enqueue() -> None:
            for _ in range(count):
                cublas.gemmEx(handle, 0, 0, n, n, n, alpha.ctypes.data, a.data.ptr, data_type, n, b.data.ptr,
                              data_type, n, beta.ctypes.data, c.data.ptr, data_type, n, compute_type, -1)  # fmt: skip

        enqueue()  # the first call picks the algorithm and loads its kernels: not timed
        if stamp is None:
            return self._elapsed_ms(enqueue, count)
        kernel, blocks, out = stamp
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        self._hold(count + 2)
        self._enqueue(kernel, blocks, 1, [np.uint32(0), out], 0, False)
        start.record()
        enqueue()
        stop.record()
        self._enqueue(kernel, blocks, 1, [np.uint32(1), out], 0, False)
        cp.cuda.Device().synchronize()
        return float(cp.cuda.get_elapsed_time(start, stop))

    def device(self) -> Device:
        return device_identity(self._device_index)

    def nvml(self) -> dict[str, Any] | None:
        return nvml_snapshot(self._device_index, self._uuid, {os.getpid(), os.getppid()}, holds_context=True)

    def nvtx_range(self, name: str) -> contextlib.AbstractContextManager[None]:
        if not self._cp.cuda.nvtx.available:  # a CuPy built without NVTX: nothing for a profiler to see
            return contextlib.nullcontext()
        return self._nvtx_pushed(name)

    @contextlib.contextmanager
    def _nvtx_pushed(self, name: str) -> Iterator[None]:
        """``name`` pushed as an NVTX range (no color: ``nvtxRangePushA``) for the body, popped however it ends."""
        self._cp.cuda.nvtx.RangePush(name)
        try:
            yield
        finally:
            self._cp.cuda.nvtx.RangePop()

    # ---- launch costs (the launch and grid_sync families) ------------------------------------
    def _enqueuer(self, kernel: str, grid: Dims, block: Dims, args: list[Any], via: str) -> Callable[[], None]:
        """One launch of ``kernel`` through ``via``, everything but the launch call prepared beforehand."""
        if via == "cupy":
            function, grid3, block3, values = self._function(kernel), _dims(grid), _dims(block), tuple(args)
            return lambda: function(grid3, block3, values)
        if via == "cuda-bindings":
            return _DriverLaunch(self, kernel, grid, block, args).launch
        if via == "pycuda":
            return _pycuda_launch(self, kernel, grid, block, args)
        raise ValueError(f"via must be cupy, cuda-bindings or pycuda, not {via!r}")

    def enqueue_seconds(
        self, kernel: str, grid: Dims, block: Dims, args: list[Any], count: int, via: str = "cupy", wait: bool = True
    ) -> float:
        launch = self._enqueuer(kernel, grid, block, args, via)
        started = time.perf_counter()
        for _ in range(count):
            launch()
        elapsed = time.perf_counter() - started
        if wait:
            self._cp.cuda.Device().synchronize()
        return elapsed

    def graph_replay(
        self, kernel: str, grid: Dims, block: Dims, args: list[Any], nodes: int, replays: int
    ) -> tuple[float, float]:
        cp = self._cp
        launch = self._enqueuer(kernel, grid, block, args, "cupy")
        stream = cp.cuda.Stream(non_blocking=True)
        with stream:
            stream.begin_capture()
            for _ in range(nodes):
                launch()
            graph = stream.end_capture()
        graph.upload(stream)  # so the first replay pays no upload
        stream.synchronize()
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        self._hold(replays, stream)
        start.record(stream)
        started = time.perf_counter()
        for _ in range(replays):
            graph.launch(stream)
        host = time.perf_counter() - started
        stop.record(stream)
        stop.synchronize()
        return host, float(cp.cuda.get_elapsed_time(start, stop)) / 1e3

    def event_costs(self, count: int) -> dict[str, float]:
        cp = self._cp
        stream = cp.cuda.get_current_stream()
        events = [cp.cuda.Event() for _ in range(count)]
        cp.cuda.Device().synchronize()
        started = time.perf_counter()
        for event in events:
            event.record(stream)
        recorded = time.perf_counter()
        events[-1].synchronize()
        waited = time.perf_counter()
        for event in events:
            event.synchronize()
        done = time.perf_counter()
        return {"record": (recorded - started) / count, "synchronize": (done - waited) / count}


class LaunchPathUnavailable(GpuprobeError):
    """A launch path (a binding) or library that cannot be used on this machine: pycuda not installed,
    cuda-bindings that cannot be imported, cannot find the driver library, or takes other argument
    types than gpuprobe passes (another version's API), or a cuBLAS CuPy cannot load. Never a CUDA
    error: the family leaves what needs it out (``not_run`` with this reason) and measures the rest."""


class CudaDriverError(RuntimeError):
    """A driver API call made through cuda-bindings returned an error (e.g. ``cuLaunchKernel:
    CUDA_ERROR_INVALID_CONTEXT``). Like any CUDA error it may leave the context unusable, so it is not
    :class:`LaunchPathUnavailable`: the probe crashes and a fresh process measures the rest."""


class CooperativeGridTooLarge(GpuprobeError):
    """A cooperative launch of more blocks than fit on the GPU at once: refused, never shrunk."""


def _driver_call(function: Callable[..., tuple[Any, ...]], *args: Any) -> Any:
    """A cuda.bindings driver call's result (its one value, or a tuple of them), its CUresult checked."""
    error, *result = function(*args)
    if error:  # any CUresult but CUDA_SUCCESS (0)
        raise CudaDriverError(f"{function.__name__}: {getattr(error, 'name', error)}")
    return result[0] if len(result) == 1 else tuple(result)


def _argument_block(launcher: CupyLauncher, args: list[Any]) -> tuple[list[np.ndarray], np.ndarray]:
    """``void* kernelParams[]`` for cuLaunchKernel: one host array per argument (a buffer as its 64-bit
    address, a NumPy scalar as itself) and the array of their addresses; keep both alive while launching."""
    holders = [np.array([a]) if isinstance(a, np.generic) else np.array([launcher.address(a)], np.uint64) for a in args]
    return holders, np.array([h.ctypes.data for h in holders], dtype=np.uint64)


_DRIVER_MODULES: dict[str, Any] = {}  # cubin path (pycuda: "pycuda:" + path) -> its module, loaded once per process


class _DriverLaunch:
    """cuLaunchKernel (cuda.bindings.driver) of a kernel of the same cubin, loaded with cuModuleLoadData
    into CuPy's context (the device's primary context), on CuPy's current stream.

    :class:`LaunchPathUnavailable` where the binding cannot be used (not importable, no driver library
    found, or a call it converts with a TypeError: argument types of another version of its API, which
    shows on the first launch at the latest); :class:`CudaDriverError` where the driver refuses a call."""

    def __init__(self, launcher: CupyLauncher, kernel: str, grid: Dims, block: Dims, args: list[Any]) -> None:
        try:
            from cuda.bindings import driver
            from cuda.pathfinder import DynamicLibNotFoundError
        except ImportError as exc:
            raise LaunchPathUnavailable(f"cuda-bindings cannot be imported ({exc})") from None
        self._unusable: tuple[type[Exception], ...] = (TypeError, DynamicLibNotFoundError)
        try:
            if launcher._cubin not in _DRIVER_MODULES:  # once per process: the context retained, the cubin loaded
                _driver_call(driver.cuInit, 0)
                device = _driver_call(driver.cuDeviceGet, launcher._device_index)
                context = _driver_call(driver.cuDevicePrimaryCtxRetain, device)
                _driver_call(driver.cuCtxSetCurrent, context)
                image = Path(launcher._cubin).read_bytes()
                _DRIVER_MODULES[launcher._cubin] = _driver_call(driver.cuModuleLoadData, image)
            function = _driver_call(driver.cuModuleGetFunction, _DRIVER_MODULES[launcher._cubin], kernel.encode())
            stream = driver.CUstream(launcher._cp.cuda.get_current_stream().ptr)
        except self._unusable as exc:
            raise _binding_unusable(exc) from exc
        self._holders, self._pointers = _argument_block(launcher, args)  # kept alive while launching
        grid3, block3 = (*_dims(grid), 1, 1)[:3], (*_dims(block), 1, 1)[:3]
        # cuLaunchKernel(f, grid xyz, block xyz, sharedMemBytes, hStream, kernelParams, extra): both pointers
        # are integers to cuda-bindings (an address, and 0 for no ``extra``), never None
        self._call = driver.cuLaunchKernel
        self._arguments = (function, *grid3, *block3, 0, stream, int(self._pointers.ctypes.data), 0)

    def launch(self) -> None:
        try:
            (error,) = self._call(*self._arguments)
        except self._unusable as exc:
            raise _binding_unusable(exc) from exc
        if error:
            raise CudaDriverError(f"cuLaunchKernel: {getattr(error, 'name', error)}")


def _binding_unusable(exc: Exception) -> LaunchPathUnavailable:
    from cuda import bindings

    version = getattr(bindings, "__version__", "?")
    return LaunchPathUnavailable(f"cuda-bindings {version} cannot launch here ({type(exc).__name__}: {exc})")


def _pycuda_launch(launcher: CupyLauncher, kernel: str, grid: Dims, block: Dims, args: list[Any]) -> Callable[[], None]:
    """One launch through PyCUDA (optional: ``pip install 'gpuprobe[pycuda]'``) of the same cubin, loaded once
    into the device's primary context (CuPy's, current on this thread), on the legacy default stream."""
    try:
        import pycuda.driver as pycuda
    except ImportError:
        raise LaunchPathUnavailable("pycuda is not installed (pip install 'gpuprobe[pycuda]')") from None
    key = f"pycuda:{launcher._cubin}"
    if key not in _DRIVER_MODULES:
        pycuda.init()
        context = pycuda.Device(launcher._device_index).retain_primary_context()
        context.push()
        try:
            _DRIVER_MODULES[key] = (context, pycuda.module_from_buffer(Path(launcher._cubin).read_bytes()))
        finally:
            pycuda.Context.pop()
    function = _DRIVER_MODULES[key][1].get_function(kernel)
    values = [a if isinstance(a, np.generic) else np.uint64(launcher.address(a)) for a in args]
    grid3, block3 = (*_dims(grid), 1, 1)[:3], (*_dims(block), 1, 1)[:3]
    return lambda: function(*values, grid=grid3, block=block3)


def device_identity(device_index: int = 0) -> Device:
    """What CUDA says about the device, its board's serial number (NVML), and which tools compiled the probes."""
    import cupy

    from gpuprobe.build.toolchain import toolkit_description
    from gpuprobe.core.arch import arch_for_device

    runtime = cupy.cuda.runtime
    props = runtime.getDeviceProperties(device_index)
    name = _text(props["name"])
    major, minor = int(props["major"]), int(props["minor"])
    uuid = cuda_uuid(device_index)
    return Device(
        name=name,
        cc=f"{major}.{minor}",
        arch=arch_for_device(major, minor).name,
        sm_count=int(props["multiProcessorCount"]),
        l2_bytes=int(props["l2CacheSize"]),
        sm_clock_nominal_mhz=_khz_to_mhz(_attribute(props.get("clockRate"), runtime, _ATTR_CLOCK_RATE, device_index)),
        mem_clock_mhz=_khz_to_mhz(_attribute(props.get("memoryClockRate"), runtime, _ATTR_MEM_CLOCK, device_index)),
        mem_bus_bits=_attribute(props.get("memoryBusWidth"), runtime, _ATTR_BUS_WIDTH, device_index),
        mem_bytes=int(props["totalGlobalMem"]),
        shared_per_sm_bytes=props.get("sharedMemPerMultiprocessor"),
        shared_per_block_optin_bytes=props.get("sharedMemPerBlockOptin"),
        driver=_version_text(runtime.driverGetVersion()),
        cuda_runtime=_version_text(runtime.runtimeGetVersion()),
        toolkit=toolkit_description(),
        uuid=uuid,
        serial=board_serial(device_index, uuid),
        visible_gpus=int(runtime.getDeviceCount()),
    )


# cudaDeviceAttr values; CUDA 13 dropped some of these fields from cudaDeviceProp.
_ATTR_CLOCK_RATE, _ATTR_MEM_CLOCK, _ATTR_BUS_WIDTH = 13, 36, 37


def _attribute(value: Any, runtime: Any, attribute: int, device_index: int) -> int | None:
    """A device property's ``value``, or where CuPy gives none (0 or missing), the device attribute."""
    if value:
        return int(value)
    try:
        return int(runtime.deviceGetAttribute(attribute, device_index)) or None
    except Exception:  # an attribute this driver no longer reports
        return None


def _khz_to_mhz(value: Any) -> float | None:
    return None if not value else float(value) / 1000.0


def cuda_uuid(device_index: int) -> str:
    """The device's 16-byte UUID as 32 hex digits, from the driver API (``cuDeviceGetUuid``, the device
    numbered as CUDA numbers it, after CUDA_VISIBLE_DEVICES); "" where it cannot be read (NVML then finds
    the device by index). Not CuPy's ``getDeviceProperties()["uuid"]``: CuPy converts that ``char[16]``
    as a C string, which stops at the first 0x00 byte (about 6 % of GPUs have one) or runs on into the
    next field; cuda-bindings' ``CUuuid.bytes`` is all 16 bytes."""
    try:
        from cuda.bindings import driver

        _driver_call(driver.cuInit, 0)
        uuid = _driver_call(driver.cuDeviceGetUuid, _driver_call(driver.cuDeviceGet, device_index))
        return _uuid_text(uuid.bytes)
    except Exception:  # no driver, or a binding that cannot ask: the UUID only names the device
        return ""


def board_serial(device_index: int, uuid: str = "") -> str:
    """The board's serial number, as ``nvidia-smi -q`` says it ("Serial Number"): with the UUID, which board
    measured (two boards of one model in one VM slot differ in both). Found by CUDA's ``uuid`` where given;
    "" without NVML, or for a part that has none (consumer boards refuse the query)."""
    record = _read_device(device_index, uuid, {"serial": _serial}) or {}
    serial = record.get("serial", "")
    return serial if isinstance(serial, str) else ""


def _serial(nv: Any, handle: Any) -> str:
    try:
        return _text(nv.nvmlDeviceGetSerial(handle))
    except Exception:  # NVML's NotSupported on a board without a serial: no identity to record
        return ""


def _uuid_text(raw: bytes) -> str:
    if isinstance(raw, bytes | bytearray) and len(raw) == 16:
        return raw.hex()
    return ""


def encode_tensor_map(address: int, tiles: TileMap) -> np.void:
    """``cuTensorMapEncodeTiled`` of the 16-bit tensor at device ``address`` (bf16 elements, no interleave,
    out-of-bounds elements zero), as the 128 bytes a kernel parameter holds (:data:`TENSOR_MAP_DTYPE`)."""
    from cuda.bindings import driver

    swizzle = driver.CUtensorMapSwizzle
    promotion = driver.CUtensorMapL2promotion
    swizzles = {0: swizzle.CU_TENSOR_MAP_SWIZZLE_NONE, 32: swizzle.CU_TENSOR_MAP_SWIZZLE_32B,
                64: swizzle.CU_TENSOR_MAP_SWIZZLE_64B, 128: swizzle.CU_TENSOR_MAP_SWIZZLE_128B}  # fmt: skip
    promotions = {0: promotion.CU_TENSOR_MAP_L2_PROMOTION_NONE, 64: promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_64B,
                  128: promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                  256: promotion.CU_TENSOR_MAP_L2_PROMOTION_L2_256B}  # fmt: skip
    _driver_call(driver.cuInit, 0)
    encoded = _driver_call(
        driver.cuTensorMapEncodeTiled,
        driver.CUtensorMapDataType.CU_TENSOR_MAP_DATA_TYPE_BFLOAT16,
        2,
        address,
        [driver.cuuint64_t(tiles.cols), driver.cuuint64_t(tiles.rows)],  # innermost dimension first
        [driver.cuuint64_t(2 * tiles.cols)],  # the row stride in bytes (the innermost stride is the element)
        [driver.cuuint32_t(tiles.box_cols), driver.cuuint32_t(tiles.box_rows)],
        [driver.cuuint32_t(1), driver.cuuint32_t(1)],
        driver.CUtensorMapInterleave.CU_TENSOR_MAP_INTERLEAVE_NONE,
        swizzles[tiles.swizzle_bytes],
        promotions[tiles.l2_promotion_bytes],
        driver.CUtensorMapFloatOOBfill.CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE,
    )
    value = np.zeros((), dtype=TENSOR_MAP_DTYPE)
    value["opaque"] = [int(word) for word in encoded.opaque]
    return value[()]


def _required_cluster(function_ptr: int) -> tuple[int, int, int] | None:
    """The cluster shape (blocks in x, y, z) a kernel requires (PTX ``.reqnctapercluster``, CUDA
    ``__cluster_dims__``); None when it requires none, or the driver cannot say (a part without clusters,
    or cuda-bindings unusable here: the per-SM occupancy is then all there is to go by)."""
    try:
        from cuda.bindings import driver

        function, attribute = driver.CUfunction(function_ptr), driver.CUfunction_attribute
        shape = [
            _driver_call(driver.cuFuncGetAttribute, which, function)
            for which in (
                attribute.CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_WIDTH,
                attribute.CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_HEIGHT,
                attribute.CU_FUNC_ATTRIBUTE_REQUIRED_CLUSTER_DEPTH,
            )
        ]
    except Exception:
        return None
    return (shape[0], shape[1], shape[2]) if min(shape) > 0 else None  # all 0: no required cluster


def _max_active_clusters(
    function_ptr: int, cluster: tuple[int, int, int], block: int, shared_bytes: int, stream_ptr: int
) -> int:
    """Clusters of a kernel with a required cluster shape that can be co-resident on the whole GPU
    (cuOccupancyMaxActiveClusters: the per-SM occupancy API is documented for kernels without clusters,
    and clusters are further bound by how the SMs group into GPCs)."""
    from cuda.bindings import driver

    config = driver.CUlaunchConfig()
    config.gridDimX, config.gridDimY, config.gridDimZ = cluster  # one cluster; its shape is the kernel's own
    config.blockDimX, config.blockDimY, config.blockDimZ = block, 1, 1
    config.sharedMemBytes = shared_bytes
    config.hStream = driver.CUstream(stream_ptr)
    return int(_driver_call(driver.cuOccupancyMaxActiveClusters, driver.CUfunction(function_ptr), config))


# ---- NVML ---------------------------------------------------------------------------------------


class _NvmlUnavailable(GpuprobeError):
    """NVML cannot be used in this process (no driver library, or nvmlInit refused)."""


_NVML_STATE: dict[str, Any] = {}  # "module": the pynvml this process initialised; "error": why nvmlInit failed


def _nvml_session() -> Any:
    """pynvml with NVML initialised, once per process (nvmlInit costs tens of ms, and every probe takes
    two snapshots), nvmlShutdown registered for exit. ModuleNotFoundError without nvidia-ml-py;
    :class:`_NvmlUnavailable` when nvmlInit failed (remembered, not retried)."""
    import pynvml

    if _NVML_STATE.get("module") is not pynvml:  # the first use in this process (tests swap the module in)
        _NVML_STATE.clear()
        _NVML_STATE["module"] = pynvml
        try:
            pynvml.nvmlInit()
        except Exception as exc:
            _NVML_STATE["error"] = f"{type(exc).__name__}: {exc}"
        else:
            atexit.register(_nvml_shutdown, pynvml)
    if "error" in _NVML_STATE:
        raise _NvmlUnavailable(f"NVML cannot start ({_NVML_STATE['error']})")
    return pynvml


def _nvml_shutdown(nv: Any) -> None:
    with contextlib.suppress(Exception):  # at exit: NVML's library may already be unloaded
        nv.nvmlShutdown()


def _failure(exc: Exception) -> str:
    """How a reading that failed is recorded: "not installed" for a missing package, else the error."""
    if isinstance(exc, ModuleNotFoundError):
        return f"not installed ({exc.name})"
    if isinstance(exc, GpuprobeError):  # gpuprobe's own one-line reason
        return f"unavailable ({exc})"
    return f"unavailable ({type(exc).__name__}: {exc})"


def _recorded(read: Callable[..., Any], *args: Any) -> Any:
    """``read(*args)``, or the reading's failure (:func:`_failure`): a diagnostic never raises."""
    try:
        return read(*args)
    except Exception as exc:  # NVML raises its own error per query the part refuses
        return _failure(exc)


def _cuda_version(number: int) -> dict[str, Any]:
    """A CUDA version number (e.g. 13000) with its text ("13.0"; "none" for 0, which means no driver)."""
    return {"number": int(number), "text": _version_text(int(number)) if number else "none"}


_NVML_READINGS: dict[str, Callable[[Any, Any], Any]] = {
    "sm_clock_mhz": lambda nv, h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
    "mem_clock_mhz": lambda nv, h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
    "sm_clock_max_mhz": lambda nv, h: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM),
    "temperature_c": lambda nv, h: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
    "power_w": lambda nv, h: nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
    "clock_event_reasons": lambda nv, h: int(_clock_reasons(nv)(h)),
    "driver": lambda nv, h: _text(nv.nvmlSystemGetDriverVersion()),
}

# What nvidia-smi -q reports about the part and its settings, once per run (see device_record).
_DEVICE_RECORD: dict[str, Callable[[Any, Any], Any]] = {
    "name": lambda nv, h: _text(nv.nvmlDeviceGetName(h)),
    "uuid": lambda nv, h: _text(nv.nvmlDeviceGetUUID(h)),
    "serial": lambda nv, h: _serial(nv, h),  # "" for a board without one
    "pci_bus_id": lambda nv, h: _text(nv.nvmlDeviceGetPciInfo(h).busId),
    "vbios": lambda nv, h: _text(nv.nvmlDeviceGetVbiosVersion(h)),
    "cuda_driver": lambda nv, h: _cuda_version(nv.nvmlSystemGetCudaDriverVersion()),
    **_NVML_READINGS,
    "mem_clock_max_mhz": lambda nv, h: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_MEM),
    "sm_clock_application_mhz": lambda nv, h: nv.nvmlDeviceGetApplicationsClock(h, nv.NVML_CLOCK_SM),
    "mem_clock_application_mhz": lambda nv, h: nv.nvmlDeviceGetApplicationsClock(h, nv.NVML_CLOCK_MEM),
    "sm_clock_default_application_mhz": lambda nv, h: nv.nvmlDeviceGetDefaultApplicationsClock(h, nv.NVML_CLOCK_SM),
    "mem_clock_default_application_mhz": lambda nv, h: nv.nvmlDeviceGetDefaultApplicationsClock(h, nv.NVML_CLOCK_MEM),
    "power_limit_w": lambda nv, h: nv.nvmlDeviceGetPowerManagementLimit(h) / 1000.0,
    "power_default_limit_w": lambda nv, h: nv.nvmlDeviceGetPowerManagementDefaultLimit(h) / 1000.0,
    "power_enforced_limit_w": lambda nv, h: nv.nvmlDeviceGetEnforcedPowerLimit(h) / 1000.0,
    "ecc_mode_current": lambda nv, h: nv.nvmlDeviceGetEccMode(h)[0],  # 1 enabled, 0 disabled
    "ecc_mode_pending": lambda nv, h: nv.nvmlDeviceGetEccMode(h)[1],  # what the next reset applies
    "mig_mode_current": lambda nv, h: nv.nvmlDeviceGetMigMode(h)[0],
    "mig_mode_pending": lambda nv, h: nv.nvmlDeviceGetMigMode(h)[1],
    "persistence_mode": lambda nv, h: nv.nvmlDeviceGetPersistenceMode(h),
    "compute_mode": lambda nv, h: nv.nvmlDeviceGetComputeMode(h),  # 0 default, 2 prohibited, 3 exclusive process
    "performance_state": lambda nv, h: nv.nvmlDeviceGetPerformanceState(h),  # 0 is P0, the fastest
    "pcie_generation": lambda nv, h: nv.nvmlDeviceGetCurrPcieLinkGeneration(h),
    "pcie_generation_max": lambda nv, h: nv.nvmlDeviceGetMaxPcieLinkGeneration(h),
    "pcie_width": lambda nv, h: nv.nvmlDeviceGetCurrPcieLinkWidth(h),
    "pcie_width_max": lambda nv, h: nv.nvmlDeviceGetMaxPcieLinkWidth(h),
}


def _clock_reasons(nv: Any) -> Callable[[Any], int]:
    return getattr(nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or nv.nvmlDeviceGetCurrentClocksThrottleReasons


def nvml_uuid(cuda_uuid_hex: str) -> str:
    """CUDA's 16-byte UUID (as hex) in NVML's spelling, ``GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx``."""
    h = cuda_uuid_hex
    return f"GPU-{h[0:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:32]}"


def _nvml_handle(nv: Any, device_index: int, uuid: str) -> Any:
    """The device by UUID (NVML's numbering ignores CUDA_VISIBLE_DEVICES), else by index."""
    if uuid:
        with contextlib.suppress(Exception):
            return nv.nvmlDeviceGetHandleByUUID(nvml_uuid(uuid))
    return nv.nvmlDeviceGetHandleByIndex(device_index)


def _other_processes(nv: Any, handle: Any, own_pids: Collection[int], holds_context: bool) -> int:
    """Compute processes on the GPU other than this run's own (see :func:`nvml_snapshot`)."""
    pids = [p.pid for p in nv.nvmlDeviceGetComputeRunningProcesses(handle)]
    if any(pid in own_pids for pid in pids):
        return sum(1 for pid in pids if pid not in own_pids)
    return max(0, len(pids) - int(holds_context))  # NVML's pids are of another pid namespace (a container)


def _read_device(device_index: int, uuid: str, readers: dict[str, Callable[[Any, Any], Any]]) -> dict[str, Any] | None:
    """Each of ``readers`` on the device through NVML, a reading the part refuses recorded as its error;
    None without NVML, {"error": ...} when the device cannot be found."""
    try:
        nv = _nvml_session()
    except (ImportError, _NvmlUnavailable):
        return None
    try:
        handle = _nvml_handle(nv, device_index, uuid)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {name: _recorded(read, nv, handle) for name, read in readers.items()}


def nvml_snapshot(
    device_index: int, uuid: str = "", own_pids: Collection[int] = (), holds_context: bool = False
) -> dict[str, Any] | None:
    """Clocks, temperature, power, clock-event (throttle) reasons and other processes, via NVML.

    ``compute_processes`` counts the compute processes on this GPU other than this run's own: the
    caller's ``own_pids`` (the measuring child and the run that started it) when NVML lists any of
    them. Inside a container NVML lists host pids, so none of ``own_pids`` matches; it then counts
    all of them but one when the caller ``holds_context`` (its own: a process holds one context per
    device, cuda-bindings and pycuda share CuPy's primary context), and assumes the run's other
    processes hold none (the session's process only reads properties). So 0 means the GPU is the
    run's alone, 1 or more that someone else computes on it.

    NVML is initialised once per process. None when NVML is absent; a reading this part refuses is
    recorded as its error, and the others are still taken.
    """
    own = frozenset(own_pids)
    readers = {
        **_NVML_READINGS,
        "compute_processes": lambda nv, h: _other_processes(nv, h, own, holds_context),
    }
    return _read_device(device_index, uuid, readers)


def device_record(device_index: int, uuid: str = "") -> dict[str, Any] | None:
    """The device as ``nvidia-smi -q`` would describe it, for the results: name, UUID, serial and PCI bus id,
    VBIOS, driver and NVML's CUDA driver version; current, maximum, application and default
    application SM and memory clocks (MHz); power draw, limit, default and enforced limits (W); ECC
    and MIG modes (current and pending), persistence and compute modes, performance state; PCIe link
    generation and width (current and maximum); temperature and clock-event (throttle) reasons.

    Found by CUDA's ``uuid`` (32 hex digits, as :func:`cuda_uuid`) where given, else by NVML index.
    JSON-able; each reading the part refuses is recorded as its error; None without NVML."""
    return _read_device(device_index, uuid, _DEVICE_RECORD)


def _nvml_library_version() -> str:
    nv = _nvml_session()
    return _text(nv.nvmlSystemGetNVMLVersion())


def _tool(name: str) -> str:
    """A CUDA tool's release line and where it was found (NVRTC: the version gpuprobe compiles with)."""
    from gpuprobe.build.toolchain import find_tool, tool_version

    return tool_version(name) if name == "nvrtc" else f"{tool_version(name)} ({find_tool(name)})"


def _toolkit() -> str:
    from gpuprobe.build.toolchain import toolkit_description

    return toolkit_description()


def _cublas() -> str:
    """Whether CuPy finds and loads cuBLAS (``time_gemm`` needs it; it is looked up only when first used)."""
    from cupy.cuda import cublas

    return f"loads ({cublas.__name__})"


_SOFTWARE: dict[str, Callable[[], Any]] = {
    "python": lambda: f"{platform.python_implementation()} {platform.python_version()}",
    "numpy": lambda: np.__version__,
    "cupy": lambda: importlib.import_module("cupy").__version__,
    "cupy_cuda_build": lambda: _cuda_version(importlib.import_module("cupy").cuda.driver.get_build_version()),
    # the CUDA runtime CuPy links statically, the one installed beside it, the driver's CUDA version
    "cuda_runtime": lambda: _cuda_version(importlib.import_module("cupy").cuda.runtime.runtimeGetVersion()),
    "cuda_runtime_local": lambda: _cuda_version(importlib.import_module("cupy").cuda.get_local_runtime_version()),
    "cuda_driver": lambda: _cuda_version(importlib.import_module("cupy").cuda.runtime.driverGetVersion()),
    "cupy_nvrtc": lambda: ".".join(str(v) for v in importlib.import_module("cupy").cuda.nvrtc.getVersion()),
    "cublas": _cublas,
    "cuda_bindings": lambda: importlib.import_module("cuda.bindings").__version__,
    "cuda_pathfinder": lambda: importlib.import_module("cuda.pathfinder").__version__,
    "nvidia_ml_py": lambda: importlib.metadata.version("nvidia-ml-py"),
    "nvml": _nvml_library_version,
    "nvrtc": lambda: _tool("nvrtc"),
    "ptxas": lambda: _tool("ptxas"),
    "nvdisasm": lambda: _tool("nvdisasm"),
    "toolkit": _toolkit,
}


def software_versions() -> dict[str, Any]:
    """The software the run measured with, for the results: Python, NumPy, CuPy and the CUDA version it
    was built for, the CUDA runtime (CuPy's own and the one installed), the driver's CUDA version,
    NVRTC (CuPy's, and the one gpuprobe compiles with), whether cuBLAS loads, cuda-bindings,
    cuda-pathfinder, nvidia-ml-py and NVML's own library version, and the ptxas and nvdisasm that
    compiled and inspected the probes (their release lines, where found, and ``toolkit`` as
    ``Device.toolkit`` states them). CUDA versions are ``{"number": 13000, "text": "13.0"}``. JSON-able; a missing
    package is recorded as "not installed (...)", any other failure as its error; never raises."""
    return {name: _recorded(read) for name, read in _SOFTWARE.items()}


def _text(value: str | bytes) -> str:
    """A name or version the driver or NVML gave, as text (bytes decoded tolerantly)."""
    return decoded(value) if isinstance(value, bytes) else str(value)


def require_gpu() -> None:
    reason = gpu_unavailable_reason()
    if reason:
        raise GpuprobeError(reason)
