"""What a family gets from a GPU: the :class:`Launcher` every family may use, and the capabilities
(:class:`HostCopies`, :class:`TensorMaps`, :class:`DeviceCopies`, :class:`Gemm`, :class:`LaunchPaths`) that
only the family needing one asks for (:func:`capability`).

:class:`~gpuprobe.runner.cupy_launcher.CupyLauncher` implements all of them with CuPy; the simulated GPU
(:mod:`gpuprobe.simulated.gpu`) implements them in NumPy. Every launch either makes is checked against the
kernel's PTX signature before it runs (:func:`gpuprobe.runner.checked.check_launch`).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, TypeVar, cast

import numpy as np

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.results import Device
from gpuprobe.runner.tensor_map import TileMap
from gpuprobe.runner.trajectory import Trajectory

Dims = int | tuple[int, ...]  # a grid or block: x, or (x, y, z)
Signatures = dict[str, list[tuple[str, str]]]  # kernel -> its PTX parameters, (type, name) each
Stamp = tuple[str, int, Any]  # a clock-stamp kernel of the cubin, its blocks and its output buffer (Gemm.time_gemm)


def xyz(value: Dims) -> tuple[int, int, int]:
    """A grid or block as (x, y, z), the missing dimensions 1."""
    values = (value,) if isinstance(value, int) else tuple(value)
    return (*values, 1, 1)[:3]  # type: ignore[return-value]


# Every probe's measurement is marked with an NVTX push/pop range of this name (gpuprobe.measure.conditions),
# so a profiler that wraps the measuring process (Nsight Compute, gpuprobe.measure.witness) can tell whose launches
# it counted; a family may mark a part of its work as the probe it measures for (bandwidth's goodput patterns).
NVTX_PREFIX = "gpuprobe:"


def probe_range(probe: str) -> str:
    """The NVTX range name marking ``probe``'s measurement: ``gpuprobe:<probe name>``."""
    return NVTX_PREFIX + probe


# What holds the GPU while timed work is enqueued: the clock kernel's %clock64 spin (every cubin has it,
# gpuprobe.kernels.registry.CLOCK_KERNEL), long enough per launch to outlast the host's enqueueing of one
# (tens of us; 100k cycles is 50 us at 2 GHz).
HOLD_CYCLES_PER_LAUNCH = 100_000
HOLD_MAX_CYCLES = 1_000_000_000
GEMM_DRAWN_ROWS = 1024  # random rows of each GEMM operand drawn on the host (time_gemm), repeated down to its rows
GEMM_VALUE_RANGE = 4  # integers in [-4, 4]: exact in every GEMM type, every product and every sum of K <= 2^16 of
# them exact in float32 (|sum| <= 16 x 2^16 < 2^24), the result rounded once to the output type


class GemmType(NamedTuple):
    """How a GEMM type runs: the library that has it, the type it writes C in (its result is rounded to), and the
    widest integers its operands are drawn from (``value_range``: [-r, r]) that keep every product and sum exact."""

    library: str
    output: str
    value_range: int


# The value ranges: as many significant bits as the type holds, for the power (and so the clock) of random operands,
# within exactness: bf16 and tf32 +-255 (8 bits; a sum of K = 8192 products has a standard deviation of 2.0e6,
# under 2^24 by 8 of them), f16 +-16 (its C overflows past 65504: the sum's standard deviation is 8.1e3), e4m3 +-16
# (every integer to 16 is exact in e4m3, and a 128-deep partial sum stays far under the 2^14 Hopper's fp8
# accumulator keeps exact), s8 every value (int32 holds any sum of K <= 2^17).
GEMM_TYPES: dict[str, GemmType] = {
    "bf16": GemmType("cuBLAS", "bf16", 255),
    "f16": GemmType("cuBLAS", "f16", 16),
    "tf32": GemmType("cuBLAS", "f32", 255),
    "f32": GemmType("cuBLAS", "f32", 255),
    "s8": GemmType("cuBLAS", "s32", 127),
    "e4m3": GemmType("cuBLASLt", "bf16", 16),  # cuBLAS's GEMM has no fp8
}


def hold_cycles(launches: int) -> int:
    """Cycles the holding spin keeps the GPU busy while ``launches`` launches are enqueued behind it."""
    return min(HOLD_MAX_CYCLES, HOLD_CYCLES_PER_LAUNCH * max(1, launches))


class LaunchPathUnavailable(GpuprobeError):
    """A launch path (a binding) or library that cannot be used on this machine: pycuda not installed,
    cuda-bindings that cannot be imported, cannot find the driver library, or takes other argument
    types than gpuprobe passes (another version's API), or a cuBLAS CuPy cannot load; or a launcher
    without the capability a family asks for. Never a CUDA error: the family leaves what needs it out
    (``not_run`` with this reason) and measures the rest."""


class CooperativeGridTooLarge(GpuprobeError):
    """A cooperative launch of more blocks than fit on the GPU at once: refused, never shrunk."""


class Launcher(Protocol):
    """Allocate, fill, launch a kernel of the inspected cubin (its arguments checked against the kernel's
    PTX signature: :class:`~gpuprobe.core.errors.ProbeFailure` if they do not match), read results, and
    describe the device."""

    def alloc(self, nbytes: int) -> Any: ...

    def address(self, buffer: Any) -> int: ...

    def upload(self, array: np.ndarray) -> Any: ...

    def fill(self, buffer: Any, value: int) -> None:
        """Set every byte of ``buffer`` to ``value`` on the device (through the L2, evicting what it held)."""

    def prefer_l1(self, kernel: str) -> None:
        """Ask for the largest L1 (smallest shared-memory carve-out) when ``kernel`` runs."""

    def write_cycle(self, buffer: Any, successor: np.ndarray, stride: int) -> None:
        """Store, at byte ``i * stride`` of ``buffer``, the 64-bit address of node ``successor[i]``."""

    def launch(
        self, kernel: str, grid: Dims, block: Dims, args: list[Any], shared_bytes: int = 0, cooperative: bool = False
    ) -> None:
        """Run ``kernel`` to completion; numpy scalars give parameter widths, buffers pass pointers.

        ``cooperative``: a cooperative launch (all blocks co-resident, or the launch fails); dynamic
        shared memory above 48 KiB is opted into for the kernel."""

    def read(self, buffer: Any, dtype: str, count: int) -> np.ndarray:
        """The first ``count`` elements of ``buffer`` viewed as NumPy ``dtype`` (e.g. "uint64")."""

    def time_launches(
        self, kernel: str, grid: Dims, block: Dims, args: list[Any], shared_bytes: int = 0, count: int = 1,
        cooperative: bool = False,
    ) -> float:  # fmt: skip
        """GPU milliseconds of ``count`` back-to-back launches, between two CUDA events."""

    def max_active_blocks(self, kernel: str, block: int, shared_bytes: int = 0) -> int:
        """Blocks of ``kernel`` that fit on one SM at once (the occupancy API). For a kernel with a
        required cluster size, the clusters co-resident on the whole GPU in blocks, over the SMs: so
        that ``max_active_blocks * SMs`` blocks still fit at once."""

    def device(self) -> Device: ...

    def nvml(self) -> dict[str, Any] | None:
        """Clocks, temperature, power, throttle reasons and other processes, where NVML is present
        (see :func:`gpuprobe.runner.nvml.nvml_snapshot`)."""

    def nvtx_range(self, name: str) -> contextlib.AbstractContextManager[None]:
        """A context in which the launches lie inside the NVTX push/pop range ``name`` (:func:`probe_range`),
        for a profiler wrapping this process to see; a cheap no-op when no tool listens."""

    def idle(self, seconds: float) -> None:
        """Leave the GPU idle for ``seconds``: nothing launched, this process waiting (the power family's idle
        window)."""

    def sampling(self) -> contextlib.AbstractContextManager[Trajectory]:
        """A context over which the clocks, power, temperature and clock-event reasons are sampled every few ms
        and the energy counter read at both ends (:mod:`gpuprobe.runner.trajectory`); its Trajectory stays
        empty where NVML is absent."""


class HostCopies(Launcher, Protocol):
    """Host memory and copies between host and device (the host_transfer family)."""

    def alloc_pinned(self, nbytes: int) -> Any:
        """``nbytes`` of page-locked host memory that kernels address directly (unified addressing);
        the buffer works with ``address``, ``fill`` and ``read`` like a device buffer."""

    def time_host_copy(self, nbytes: int, direction: str, pinned: bool, count: int = 1) -> float:
        """Host wall-clock milliseconds of ``count`` copies of ``nbytes`` between host and device, each
        waited for: ``direction`` "h2d", "d2h" or "both" (one each way at once, on two streams)."""


class TensorMaps(Launcher, Protocol):
    """TMA tensor maps (the tma family)."""

    def tensor_map(self, buffer: Any, tiles: TileMap) -> np.void:
        """A TMA tensor map of ``buffer`` as ``tiles`` describes it: the 128 bytes a kernel takes by value
        (``.param .align 64 .b8 name[128]``), to pass among a launch's arguments."""


class DeviceCopies(Launcher, Protocol):
    """The CUDA runtime's own device-to-device copy (the bandwidth family)."""

    def time_device_copy(self, dst: Any, src: Any, nbytes: int, count: int = 1) -> float:
        """GPU milliseconds of ``count`` device-to-device copies of ``nbytes`` by the CUDA runtime's memcpy."""


class GemmShape(NamedTuple):
    """A GEMM's shape: C (m x n) = A (m x k) . B (n x k)^T, every operand row-major with k contiguous (the TN
    layout of inference's y = x W^T, the one cuBLAS's int8 and fp8 kernels require)."""

    m: int
    n: int
    k: int

    @property
    def flop(self) -> int:
        """A multiply-add counted as two."""
        return 2 * self.m * self.n * self.k

    def __str__(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"


@dataclass(frozen=True)
class GemmSample:
    """Rows of a GEMM's C read back, with the operand rows that made them: ``c`` (len(a) x len(b)) should be
    ``a @ b.T`` rounded to the GEMM's output type. All as float64, exactly the values on the device."""

    a: np.ndarray
    b: np.ndarray
    c: np.ndarray


def round_to_output(exact: np.ndarray, dtype: str) -> np.ndarray:
    """A GEMM's exact sums (float64) rounded once, to nearest even, to ``dtype``'s output type (:data:`GEMM_TYPES`):
    what its C holds when it accumulated exactly."""
    out = GEMM_TYPES[dtype].output
    if out == "bf16":
        bits = exact.astype(np.float32).view(np.uint32)
        rounded = (bits + np.uint32(0x7FFF) + ((bits >> np.uint32(16)) & np.uint32(1))) & np.uint32(0xFFFF0000)
        return rounded.view(np.float32).astype(np.float64)
    if out == "f16":
        return exact.astype(np.float16).astype(np.float64)
    return exact


SIGNIFICAND_BITS = {"bf16": 7, "f16": 10}  # the 16-bit output types' stored significand bits


def output_spacing(values: np.ndarray, dtype: str) -> np.ndarray:
    """The spacing of ``dtype``'s output type (:data:`GEMM_TYPES`) at each of ``values`` (its rounded C): one unit
    in the last place of a 16-bit C, which a split-K GEMM whose partial sums pass through C's type may be off by
    (cublasLtReductionScheme_t OUTPUT_TYPE); 0 for an f32 or s32 C, whose partial sums of exact integers stay exact."""
    bits = SIGNIFICAND_BITS.get(GEMM_TYPES[dtype].output)
    magnitude = np.abs(np.asarray(values, dtype=np.float64))
    if bits is None:
        return np.zeros_like(magnitude)
    exponent = np.floor(np.log2(np.where(magnitude > 0, magnitude, 1.0)))
    return np.where(magnitude > 0, 2.0 ** (exponent - bits), 0.0)


class Gemm(Launcher, Protocol):
    """A BLAS library's GEMMs (cuBLAS, cuBLASLt: the wgmma, power and ladder families)."""

    def time_gemm(self, shape: GemmShape, dtype: str, count: int = 1, stamp: Stamp | None = None) -> float:
        """GPU milliseconds of ``count`` GEMMs of ``shape`` (:data:`GEMM_TYPES`: ``dtype`` "bf16", "f16", "tf32" or
        "f32" through cublasGemmEx with float32 accumulation, "s8" with int32, "e4m3" through cuBLASLt's
        cublasLtMatmul with float32 accumulation), on random integers of the type's value range (every product and
        sum exact) drawn once per operand size and type and kept on the device, the algorithm picked by an untimed
        first GEMM, between two CUDA events. :class:`LaunchPathUnavailable` when the library cannot be
        loaded here, with the reason.

        ``stamp`` = (kernel, blocks, out): a kernel of the cubin taking ``(.u32 slot, .u64 out)``, launched
        with ``blocks`` blocks of one thread on the same stream right before the timed GEMMs (slot 0) and
        right after them (slot 1), outside the events and inside the hold, so that what it records (the
        SM clock's witnesses) brackets the GEMMs alone. The caller reads ``out`` afterwards."""

    def gemm_sample(self, shape: GemmShape, dtype: str, rows: np.ndarray, cols: np.ndarray) -> GemmSample:
        """C's ``rows`` x ``cols`` as the last GEMM of ``shape`` and ``dtype`` left it (one is run first if
        none was), with A's ``rows`` and B's ``cols`` (rows of the n x k B) read back from the device."""


class LaunchPaths(Launcher, Protocol):
    """What launching costs, through each launch path (the launch family)."""

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


CAPABILITIES: tuple[type, ...] = (HostCopies, TensorMaps, DeviceCopies, Gemm, LaunchPaths)

C = TypeVar("C", bound=Launcher)


def capability(launcher: Launcher, kind: type[C]) -> C:
    """``launcher`` as one with the calls of ``kind`` (a capability above); :class:`LaunchPathUnavailable`,
    in one line, for a launcher without them."""
    own = [name for name, value in vars(kind).items() if callable(value) and not name.startswith("_")]
    missing = [name for name in own if not callable(getattr(launcher, name, None))]
    if missing:
        raise LaunchPathUnavailable(f"this launcher has no {kind.__name__} (no {', '.join(missing)})")
    return cast(C, launcher)


@dataclass(frozen=True)
class LauncherSpec:
    """How a measuring child process opens its launcher: ``module:factory(cubin, device_index, signatures,
    **options)``, ``signatures`` being the PTX parameters of the cubin's kernels (every launch is checked
    against them)."""

    factory: str = "gpuprobe.runner.cupy_launcher:CupyLauncher"
    device_index: int = 0
    options: dict[str, Any] = field(default_factory=dict)
