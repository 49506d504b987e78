"""The launcher over CuPy: ``cupy.RawModule(path=...)`` loads exactly the cubin gpuprobe compiled and checked,
and every launch of it is checked against its kernels' PTX signatures first. Nothing else in gpuprobe
launches through CuPy."""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from gpuprobe.core.results import Device
from gpuprobe.kernels.registry import CLOCK_KERNEL
from gpuprobe.runner.checked import check_launch
from gpuprobe.runner.device import cuda_uuid, device_identity
from gpuprobe.runner.driver import driver_call
from gpuprobe.runner.launch_paths import DriverLaunch, pycuda_launch
from gpuprobe.runner.launcher import (
    GEMM_DRAWN_ROWS,
    GEMM_TYPES,
    CooperativeGridTooLarge,
    Dims,
    GemmSample,
    GemmShape,
    LaunchPathUnavailable,
    Signatures,
    Stamp,
    hold_cycles,
    xyz,
)
from gpuprobe.runner.nvml import nvml_energy_mj, nvml_sample, nvml_snapshot
from gpuprobe.runner.tensor_map import TileMap, encode_tensor_map
from gpuprobe.runner.trajectory import NvmlSampler, Trajectory

if TYPE_CHECKING:  # CuPy is the measuring side's dependency (the "gpu" extra): imported where it is used
    import cupy

DYNAMIC_SHARED_DEFAULT = 48 * 1024  # above this a kernel must opt in to more dynamic shared memory

# GEMM types: (cudaDataType of A and B, of C, cublasComputeType, NumPy dtype holding A's and B's values, C's)
_GEMM_TYPES: dict[str, tuple[int, int, int, str, str]] = {
    "f16": (2, 2, 68, "float16", "float16"),  # CUDA_R_16F, CUBLAS_COMPUTE_32F
    "bf16": (14, 14, 68, "uint16", "uint16"),  # CUDA_R_16BF (NumPy has no bfloat16: the bits travel as uint16)
    "tf32": (0, 0, 77, "float32", "float32"),  # CUDA_R_32F, CUBLAS_COMPUTE_32F_FAST_TF32
    "f32": (0, 0, 68, "float32", "float32"),
    "s8": (3, 10, 72, "int8", "int32"),  # CUDA_R_8I in, CUDA_R_32I out, CUBLAS_COMPUTE_32I (int32 alpha, beta)
    "e4m3": (28, 14, 68, "uint8", "uint16"),  # CUDA_R_8F_E4M3 in, bf16 out, through cuBLASLt
}


def e4m3_values() -> np.ndarray:
    """Every e4m3 (OCP FP8, e4m3fn) byte's value: sign, 4 exponent bits (bias 7), 3 mantissa bits; 0x7F and 0xFF are
    NaN (no infinities)."""
    bits = np.arange(256)
    exponent, mantissa = (bits >> 3) & 0xF, bits & 7
    magnitude = np.where(exponent == 0, mantissa / 8 * 2.0**-6, (1 + mantissa / 8) * 2.0 ** (exponent - 7))
    magnitude[(exponent == 15) & (mantissa == 7)] = np.nan
    return np.where(bits & 0x80, -magnitude, magnitude)


def encode_operand(values: np.ndarray, dtype: str) -> np.ndarray:
    """Integers of ``dtype``'s value range (GEMM_TYPES) as its operand bits or values, by a table of the range."""
    span = GEMM_TYPES[dtype].value_range
    integers = np.arange(-span, span + 1)
    if dtype == "bf16":
        table = (integers.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    elif dtype == "e4m3":
        table = np.array([np.flatnonzero(e4m3_values() == v)[0] for v in integers], np.uint8)  # +0 for 0
    else:
        table = integers.astype(_GEMM_TYPES[dtype][3])
    return table[values.astype(np.intp) + span]


def decode_values(data: np.ndarray, kind: str) -> np.ndarray:
    """A GEMM's operand or result as float64: ``kind`` is the dtype of an operand, or "c:<dtype>" for its C."""
    if kind in ("bf16", "c:bf16", "c:e4m3"):
        return (data.astype(np.uint32) << 16).view(np.float32).astype(np.float64)
    if kind == "e4m3":
        return e4m3_values()[data]
    return data.astype(np.float64)


@dataclass(frozen=True)
class GemmOperands:
    """A GEMM's A (m x k), B (n x k; random rows) and C (m x n) on the device, kept for every later GEMM of their
    shape and type."""

    a: cupy.ndarray
    b: cupy.ndarray
    c: cupy.ndarray


class CupyLauncher:
    """The :class:`~gpuprobe.runner.launcher.Launcher`, with every capability, over CuPy for one device and one
    cubin, whose kernels' PTX parameters are ``signatures``."""

    def __init__(self, cubin: Path, device_index: int, signatures: Signatures) -> None:
        import cupy

        self._cp = cupy
        self.device_index = device_index
        self.signatures = signatures
        cupy.cuda.Device(device_index).use()
        self._uuid = cuda_uuid(device_index)
        self._sm_count = int(cupy.cuda.runtime.getDeviceProperties(device_index)["multiProcessorCount"])
        self.cubin = str(cubin)
        self._modules: dict[bool, cupy.RawModule] = {False: cupy.RawModule(path=self.cubin)}
        self._kernels: dict[tuple[str, bool], cupy.RawKernel] = {}
        # (bytes, pinned, way) -> (host buffer, device buffer, their addresses): kept for reuse
        self._host_buffers: dict[tuple[int, bool, str], tuple[Any, cupy.ndarray, int, int]] = {}
        self._pinned: dict[int, np.ndarray] = {}  # device address of a pinned buffer -> its host view
        self._hold_out: Any = None
        self._co_resident: dict[tuple[str, int, int], int] = {}  # (kernel, threads, shared) -> blocks per SM
        self._gemm_operands: dict[tuple[str, int, int, str], cupy.ndarray] = {}  # (side, rows, k, dtype) -> operand
        self._gemm_results: dict[tuple[GemmShape, str], cupy.ndarray] = {}  # (shape, dtype) -> its C
        self._gemm_calls: dict[tuple[GemmShape, str], Callable[[], None]] = {}  # (shape, dtype) -> one GEMM's call
        self._cublaslt: Any = None  # gpuprobe.runner.cublaslt.CublasLt, made at the first cuBLASLt GEMM
        self._lt_workspace: Any = None

    def alloc(self, nbytes: int) -> cupy.ndarray:
        return self._cp.zeros(nbytes, dtype=self._cp.uint8)

    def alloc_pinned(self, nbytes: int) -> cupy.ndarray:
        cp = self._cp
        pinned = cp.cuda.alloc_pinned_memory(nbytes)  # under unified addressing, its host address is a device address
        memory = cp.cuda.UnownedMemory(pinned.ptr, nbytes, pinned, self.device_index)  # keeps ``pinned`` alive
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

    def write_cycle(self, buffer: cupy.ndarray, successor: np.ndarray, stride: int) -> None:
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
                self._modules[cooperative] = self._cp.RawModule(path=self.cubin, enable_cooperative_groups=True)
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
        """One launch enqueued, its arguments already checked (:func:`check_launch`)."""
        function = self._with_shared(kernel, cooperative, shared_bytes)
        if cooperative:
            self._refuse_if_not_co_resident(kernel, function, grid, block, shared_bytes)
        function(xyz(grid), xyz(block), tuple(args), shared_mem=shared_bytes)

    def _refuse_if_not_co_resident(
        self, kernel: str, function: cupy.RawKernel, grid: Dims, block: Dims, shared: int
    ) -> None:
        """Refuse a cooperative grid larger than the blocks that fit at once. CuPy checks the same bound
        (occupancy x SMs) but *shrinks* a 1-D grid that exceeds it, with a warning: a probe would then
        run, and be judged, on fewer blocks than it asked for."""
        blocks, threads = math.prod(xyz(grid)), math.prod(xyz(block))
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
        check_launch(kernel, args, self.signatures)
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
        """Keep the GPU busy (the clock kernel's %clock64 spin) while the host enqueues ``launches`` launches
        to be timed, so the events around them time the GPU's work, not the host's enqueueing of it."""
        if self._hold_out is None:
            self._hold_out = self._cp.zeros(16, dtype=self._cp.uint8)
        cycles = np.uint64(hold_cycles(launches))
        with stream if stream is not None else contextlib.nullcontext():
            self._function(CLOCK_KERNEL)((1,), (1,), (cycles, self._hold_out))

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
        check_launch(kernel, args, self.signatures)  # once, outside the timing

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

    def time_gemm(self, shape: GemmShape, dtype: str, count: int = 1, stamp: Stamp | None = None) -> float:
        first = (shape, dtype) not in self._gemm_calls
        call = self._gemm_call(shape, dtype)

        def enqueue(gemms: int = count) -> None:
            for _ in range(gemms):
                call()

        if first:
            enqueue(1)  # the first call picks the algorithm and loads its kernels: not timed
        if stamp is None:
            return self._elapsed_ms(enqueue, count)
        return self.stamped_ms(enqueue, count + 2, stamp)

    def stamped_ms(self, enqueue: Callable[[], None], launches: int, stamp: Stamp) -> float:
        """GPU milliseconds between events recorded before and after ``enqueue`` (work of a library's, on the current
        stream), the clock-stamp kernel ``stamp`` launched right before the first event (slot 0) and right after the
        second (slot 1), the GPU held by a spin while the host enqueues ``launches`` launches or calls' worth."""
        cp = self._cp
        kernel, blocks, out = stamp
        check_launch(kernel, [np.uint32(0), out], self.signatures)
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        self._hold(launches)
        self._enqueue(kernel, blocks, 1, [np.uint32(0), out], 0, False)
        start.record()
        enqueue()
        stop.record()
        self._enqueue(kernel, blocks, 1, [np.uint32(1), out], 0, False)
        cp.cuda.Device().synchronize()
        return float(cp.cuda.get_elapsed_time(start, stop))

    def gemm_sample(self, shape: GemmShape, dtype: str, rows: np.ndarray, cols: np.ndarray) -> GemmSample:
        if (shape, dtype) not in self._gemm_calls:
            self.time_gemm(shape, dtype)
        cp, operands = self._cp, self._operands(shape, dtype)
        cp.cuda.Device().synchronize()
        rows, cols = cp.asarray(rows), cp.asarray(cols)
        return GemmSample(decode_values(cp.asnumpy(operands.a[rows]), dtype),
                          decode_values(cp.asnumpy(operands.b[cols]), dtype),
                          decode_values(cp.asnumpy(operands.c[rows][:, cols]), f"c:{dtype}"))  # fmt: skip

    def _gemm_call(self, shape: GemmShape, dtype: str) -> Callable[[], None]:
        """One GEMM of ``shape`` and ``dtype`` enqueued on the current stream, made at its first use and kept."""
        if (shape, dtype) not in self._gemm_calls:
            library = GEMM_TYPES[dtype].library
            try:
                from cupy.cuda import cublas  # noqa: F401  (libcublas, which cuBLASLt's library comes with)
            except ImportError as exc:  # CuPy finds libcublas at first use: a machine may lack it
                reason = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
                raise LaunchPathUnavailable(f"{library} cannot be loaded here (cuBLAS: {reason})") from None
            make = self._cublaslt_call if library == "cuBLASLt" else self._cublas_call
            self._gemm_calls[shape, dtype] = make(shape, dtype, self._operands(shape, dtype))
        return self._gemm_calls[shape, dtype]

    def _cublas_call(self, shape: GemmShape, dtype: str, operands: GemmOperands) -> Callable[[], None]:
        """cublasGemmEx computing the row-major C = A . B^T as cuBLAS's column-major C^T = op_T(B) . A (m and n
        swapped, every leading dimension k or n: the TN layout int8 needs)."""
        from cupy.cuda import cublas

        in_type, out_type, compute_type, _, _ = _GEMM_TYPES[dtype]
        scalar = np.int32 if dtype == "s8" else np.float32
        alpha, beta = np.ones(1, dtype=scalar), np.zeros(1, dtype=scalar)
        handle = self._cp.cuda.device.get_cublas_handle()
        m, n, k = shape
        a, b, c = operands.a, operands.b, operands.c

        def call() -> None:
            cublas.gemmEx(handle, 1, 0, n, m, k, alpha.ctypes.data, b.data.ptr, in_type, k, a.data.ptr, in_type, k,
                          beta.ctypes.data, c.data.ptr, out_type, n, compute_type, -1)  # fmt: skip

        return call

    def _cublaslt_call(self, shape: GemmShape, dtype: str, operands: GemmOperands) -> Callable[[], None]:
        """cublasLtMatmul of the same layout (fp8 needs TN), on a workspace kept for every later one, enqueued on the
        stream current at each call (as CuPy's cuBLAS calls are); not run with the reason where libcublasLt (of the
        CUDA major CuPy runs, its libcublas's) is not found or has no algorithm for the type on this GPU."""
        from gpuprobe.runner import cublaslt

        cp = self._cp
        if self._cublaslt is None:
            self._cublaslt = cublaslt.CublasLt(cublaslt.load(cp.cuda.runtime.runtimeGetVersion() // 1000))
            self._lt_workspace = cp.empty(cublaslt.WORKSPACE_BYTES, dtype=cp.uint8)
        in_type, out_type, compute, _, _ = _GEMM_TYPES[dtype]
        pointers = (operands.a.data.ptr, operands.b.data.ptr, operands.c.data.ptr)
        try:
            matmul = self._cublaslt.matmul(shape, (in_type, out_type, compute), pointers, self._lt_workspace.data.ptr)
        except RuntimeError as exc:
            raise LaunchPathUnavailable(f"cuBLASLt cannot run a {dtype} GEMM here ({exc})") from None
        return lambda: matmul(cp.cuda.get_current_stream().ptr)

    def _operands(self, shape: GemmShape, dtype: str) -> GemmOperands:
        """A and B (:meth:`_operand`: kept per side, size and type, so a skinny GEMM shares its B with a square one,
        and a square GEMM's A is not its B, whose C = A . A^T would sum squares past exactness) and a C of its own."""
        a, b = self._operand("a", shape.m, shape.k, dtype), self._operand("b", shape.n, shape.k, dtype)
        if (shape, dtype) not in self._gemm_results:
            self._gemm_results[shape, dtype] = self._cp.zeros((shape.m, shape.n), dtype=_GEMM_TYPES[dtype][4])
        return GemmOperands(a, b, self._gemm_results[shape, dtype])

    def _operand(self, side: str, rows: int, k: int, dtype: str) -> cupy.ndarray:
        """A rows x k operand (``side`` "a" or "b") of random integers of the type's value range (every product and
        sum exact), at most GEMM_DRAWN_ROWS rows drawn on the host and uploaded (the draw, not the GEMMs, took a
        timing's time), repeated down to ``rows`` on the device, so every tile the tensor cores take is random; made
        at the first GEMM that needs it and kept for every later one (a sustained run calls back to back)."""
        if (side, rows, k, dtype) not in self._gemm_operands:
            cp, rng = self._cp, np.random.default_rng([ord(side), rows, k])
            span = GEMM_TYPES[dtype].value_range
            drawn = rng.integers(-span, span + 1, (min(rows, GEMM_DRAWN_ROWS), k), np.int16)
            uploaded = cp.asarray(encode_operand(drawn, dtype))
            self._gemm_operands[side, rows, k, dtype] = cp.tile(uploaded, (-(-rows // len(drawn)), 1))[:rows]
        return self._gemm_operands[side, rows, k, dtype]

    def device(self) -> Device:
        return device_identity(self.device_index)

    def nvml(self) -> dict[str, Any] | None:
        return nvml_snapshot(self.device_index, self._uuid, {os.getpid(), os.getppid()}, holds_context=True)

    def idle(self, seconds: float) -> None:
        self._cp.cuda.Device().synchronize()
        time.sleep(seconds)

    def sampling(self) -> contextlib.AbstractContextManager[Trajectory]:
        index, uuid = self.device_index, self._uuid
        return NvmlSampler(partial(nvml_sample, index, uuid), partial(nvml_energy_mj, index, uuid)).sampling()

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

    # ---- launch costs (LaunchPaths: the launch family) ----------------------------------------
    def _enqueuer(self, kernel: str, grid: Dims, block: Dims, args: list[Any], via: str) -> Callable[[], None]:
        """One launch of ``kernel`` through ``via``, its arguments checked and everything but the launch call
        prepared beforehand."""
        check_launch(kernel, args, self.signatures)
        if via == "cupy":
            function, grid3, block3, values = self._function(kernel), xyz(grid), xyz(block), tuple(args)
            return lambda: function(grid3, block3, values)
        if via == "cuda-bindings":
            return DriverLaunch(self, self._cp.cuda.get_current_stream().ptr, kernel, grid, block, args).launch
        if via == "pycuda":
            return pycuda_launch(self, kernel, grid, block, args)
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


def _required_cluster(function_ptr: int) -> tuple[int, int, int] | None:
    """The cluster shape (blocks in x, y, z) a kernel requires (PTX ``.reqnctapercluster``, CUDA
    ``__cluster_dims__``); None when it requires none, or the driver cannot say (a part without clusters,
    or cuda-bindings unusable here: the per-SM occupancy is then all there is to go by)."""
    try:
        from cuda.bindings import driver

        function, attribute = driver.CUfunction(function_ptr), driver.CUfunction_attribute
        shape = [
            driver_call(driver.cuFuncGetAttribute, which, function)
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
    return int(driver_call(driver.cuOccupancyMaxActiveClusters, driver.CUfunction(function_ptr), config))
