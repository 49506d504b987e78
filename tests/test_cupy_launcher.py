"""The CuPy launch path against a stand-in CuPy that records every call: each Launcher method runs,
asks CUDA for what it means to, and hands back what it read.

No GPU is involved. The stand-in shows what the runner asks for and does with the answers (which
module a cooperative launch goes through, what it refuses, what it computes from occupancy); that the
names and arguments are CuPy's, cuda-bindings' and NVML's own is shown against the installed packages
in tests/test_cuda_api.py. cuda-bindings is the real module's types with answering functions
(:class:`tests.test_cuda_api.DriverDouble`).
"""

from __future__ import annotations

import ctypes
import itertools
import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.kernels.registry import CLOCK_KERNEL
from gpuprobe.runner import cupy_launcher
from gpuprobe.runner.cupy_launcher import DYNAMIC_SHARED_DEFAULT, CupyLauncher
from gpuprobe.runner.driver import CudaDriverError
from gpuprobe.runner.launcher import HOLD_CYCLES_PER_LAUNCH, CooperativeGridTooLarge, GemmShape, LaunchPathUnavailable
from tests.test_cuda_api import DriverDouble, driver_double

SMS = 4  # the stand-in GPU's SM count
# The stand-in cubin's kernels: gp_k takes nothing, gp_k_args a count and a buffer.
SIGNATURES = {"gp_k": [], "gp_k_args": [("u32", "n"), ("u64", "out")]}


class StubArray:
    """A CuPy array stand-in over host memory: ``data.ptr`` is its address."""

    def __init__(self, host: np.ndarray) -> None:
        self.host = host
        self.data = types.SimpleNamespace(ptr=host.ctypes.data)

    def fill(self, value: int) -> None:
        self.host[:] = value

    def view(self, dtype: Any) -> StubArray:
        return StubArray(self.host.view(dtype))

    def __getitem__(self, index: Any) -> StubArray:
        return StubArray(self.host[index])


class PinnedMemory(bytearray):
    """cupy.cuda.alloc_pinned_memory's stand-in: a buffer with a ``ptr``."""

    @property
    def ptr(self) -> int:
        return ctypes.addressof((ctypes.c_char * len(self)).from_buffer(self))


class StubKernel:
    def __init__(self, cupy: StubCupy, name: str, cooperative: bool) -> None:
        self.cupy, self.name, self.cooperative = cupy, name, cooperative
        self.max_dynamic_shared_size_bytes = 0
        self.preferred_shared_memory_carveout = -1
        self.kernel = types.SimpleNamespace(ptr=id(self))

    def __call__(self, grid: tuple, block: tuple, args: tuple, shared_mem: int = 0) -> None:
        assert all(isinstance(d, int) for d in (*grid, *block)), (grid, block)
        self.cupy.calls.append(("launch", self.name, grid, block, args, shared_mem, self.cooperative))


class StubCupy(types.ModuleType):
    """The parts of CuPy gpuprobe.runner.cupy_launcher uses, recording what is asked of them."""

    uint8, uint64 = np.uint8, np.uint64

    def __init__(self) -> None:
        super().__init__("cupy")
        self.calls: list[tuple] = []
        self.kernels: dict[tuple[str, bool], StubKernel] = {}
        calls = self.calls
        stub = self
        stream_ids = itertools.count(0x5000)

        class Event:
            def record(self, stream: Any = None) -> None:
                calls.append(("event.record",))

            def synchronize(self) -> None:
                calls.append(("event.synchronize",))

        class Stream:
            def __init__(self, non_blocking: bool = False) -> None:
                self.ptr = next(stream_ids)

            def __enter__(self) -> Stream:
                return self

            def __exit__(self, *exc: object) -> None:
                return None

            def synchronize(self) -> None:
                calls.append(("stream.synchronize", self.ptr))

            def begin_capture(self) -> None:
                calls.append(("capture.begin",))

            def end_capture(self) -> Any:
                calls.append(("capture.end",))
                return types.SimpleNamespace(
                    upload=lambda stream: calls.append(("graph.upload",)),
                    launch=lambda stream: calls.append(("graph.launch",)),
                )

        class RawModule:
            def __init__(self, path: str, enable_cooperative_groups: bool = False) -> None:
                assert Path(path).name == "probes.cubin"
                self.cooperative = enable_cooperative_groups

            def get_function(self, name: str) -> StubKernel:
                return stub.kernels.setdefault((name, self.cooperative), StubKernel(stub, name, self.cooperative))

        runtime = types.SimpleNamespace(
            getDeviceProperties=lambda index: {"multiProcessorCount": SMS},
            memcpyAsync=lambda dst, src, n, kind, stream: calls.append(("memcpy", dst, src, n, kind, stream)),
            memcpyDeviceToDevice=3, memcpyHostToDevice=1, memcpyDeviceToHost=2,
        )  # fmt: skip
        cublas = types.ModuleType("cupy.cuda.cublas")
        cublas.gemmEx = lambda *args: calls.append(("gemmEx", *args))
        self.cuda = types.ModuleType("cupy.cuda")
        self.cuda.__dict__.update(
            Device=lambda index=0: types.SimpleNamespace(use=lambda: None, synchronize=lambda: None),
            runtime=runtime,
            driver=types.SimpleNamespace(occupancyMaxActiveBlocksPerMultiprocessor=self._occupancy),
            cublas=cublas,
            device=types.SimpleNamespace(get_cublas_handle=lambda: 0xB1A5),
            Event=Event,
            Stream=Stream,
            get_current_stream=lambda: types.SimpleNamespace(ptr=0),
            get_elapsed_time=lambda start, stop: 2.5,
            alloc_pinned_memory=PinnedMemory,
            UnownedMemory=lambda ptr, size, owner, device: types.SimpleNamespace(ptr=ptr, owner=owner),
            MemoryPointer=lambda memory, offset: memory,
        )
        self.RawModule = RawModule

    def _occupancy(self, function_ptr: int, block: int, shared: int) -> int:
        kernel = next(k for k in self.kernels.values() if id(k) == function_ptr)
        assert shared <= DYNAMIC_SHARED_DEFAULT or kernel.max_dynamic_shared_size_bytes >= shared, "not opted in"
        self.calls.append(("occupancy", kernel.name, block, shared, kernel.cooperative))
        return 3

    def zeros(self, n: int, dtype: Any) -> StubArray:
        return StubArray(np.zeros(n, dtype=dtype))

    def asarray(self, array: np.ndarray, dtype: Any = None) -> StubArray:
        return StubArray(np.array(array, dtype=dtype))

    def tile(self, array: StubArray, reps: tuple[int, ...]) -> StubArray:
        return StubArray(np.tile(array.host, reps))

    def asnumpy(self, array: StubArray) -> np.ndarray:
        return array.host.copy()

    def dtype(self, name: str) -> np.dtype:
        return np.dtype(name)

    def ndarray(self, n: int, dtype: Any, memptr: Any) -> StubArray:
        return StubArray(np.ndarray(n, dtype=dtype, buffer=memptr.owner))


@pytest.fixture
def driver() -> Iterator[DriverDouble]:
    """cuda-bindings' driver module answering every call with success (no cluster, no UUID bytes)."""
    with driver_double(DriverDouble()) as double:
        yield double


@pytest.fixture
def stub(monkeypatch: pytest.MonkeyPatch, driver: DriverDouble) -> StubCupy:
    cupy = StubCupy()
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setitem(sys.modules, "cupy.cuda", cupy.cuda)
    monkeypatch.setitem(sys.modules, "cupy.cuda.cublas", cupy.cuda.cublas)
    return cupy


@pytest.fixture
def launcher(stub: StubCupy, tmp_path: Path) -> CupyLauncher:
    cubin = tmp_path / "probes.cubin"
    cubin.write_bytes(b"\x7fELF")
    return CupyLauncher(cubin, 0, SIGNATURES)


def launches(stub: StubCupy) -> list[tuple]:
    return [c for c in stub.calls if c[0] == "launch"]


def test_a_launch_passes_dims_arguments_and_opts_in_to_large_shared_memory(stub, launcher) -> None:
    out = launcher.alloc(16)
    launcher.launch("gp_k_args", 4, (32, 2), [np.uint32(7), out], shared_bytes=100 * 1024)
    ((_, name, grid, block, args, shared, cooperative),) = launches(stub)
    assert (name, grid, block, shared, cooperative) == ("gp_k_args", (4, 1, 1), (32, 2, 1), 100 * 1024, False)
    assert args == (np.uint32(7), out)
    assert stub.kernels["gp_k_args", False].max_dynamic_shared_size_bytes == 100 * 1024


@pytest.mark.parametrize(
    ("kernel", "args", "refusal"),
    [
        ("gp_k_args", lambda out: [np.uint64(7), out], r"parameter n is \.u32, given uint64"),
        ("gp_k_args", lambda out: [np.uint32(7)], r"takes 2 parameters \(n, out\), given 1"),
        ("gp_no_such_kernel", lambda out: [], "not in the checked cubin"),
    ],
)
def test_every_launch_path_checks_the_arguments_before_cupy_sees_them(stub, launcher, kernel, args, refusal) -> None:
    given = args(launcher.alloc(16))
    calls = {
        "launch": lambda: launcher.launch(kernel, 1, 32, given),
        "time_launches": lambda: launcher.time_launches(kernel, 1, 32, given, count=3),
        "enqueue_seconds": lambda: launcher.enqueue_seconds(kernel, 1, 32, given, count=3),
        "graph_replay": lambda: launcher.graph_replay(kernel, 1, 32, given, nodes=2, replays=2),
    }
    for call in calls.values():
        with pytest.raises(ProbeFailure, match=refusal):
            call()
    assert not launches(stub) and not [c for c in stub.calls if c[0] == "capture.begin"]


def test_a_cooperative_launch_goes_through_a_cooperative_load_of_the_same_cubin(stub, launcher) -> None:
    launcher.launch("gp_k", 2, 64, [], cooperative=True)
    assert launches(stub)[0][-1] is True and ("gp_k", True) in stub.kernels


def test_occupancy_asks_for_the_kernel_opted_in_to_its_shared_memory(stub, launcher) -> None:
    assert launcher.max_active_blocks("gp_k", 256, 64 * 1024) == 3
    assert ("occupancy", "gp_k", 256, 64 * 1024, False) in stub.calls


def test_a_cooperative_grid_that_cannot_be_co_resident_is_refused_never_shrunk(stub, launcher) -> None:
    launcher.launch("gp_k", 3 * SMS, (32, 2), [], shared_bytes=64 * 1024, cooperative=True)  # 3 per SM fit
    assert ("occupancy", "gp_k", 64, 64 * 1024, True) in stub.calls  # the cooperative load's, opted in
    with pytest.raises(CooperativeGridTooLarge, match=r"13 blocks .* at most 12 \(3 per SM x 4 SMs\); refused"):
        launcher.launch("gp_k", (13, 1, 1), 64, [], shared_bytes=64 * 1024, cooperative=True)
    assert len(launches(stub)) == 1  # CuPy never saw the grid it would have shrunk
    launcher.launch("gp_k", 13, 64, [])  # an ordinary launch of as many blocks as it likes


def test_a_cluster_kernels_blocks_per_sm_are_its_co_resident_clusters_over_the_sms(stub, launcher, driver) -> None:
    real = driver._real
    ok = real.CUresult.CUDA_SUCCESS
    configs = []
    driver._answers.update(
        cuFuncGetAttribute=lambda which, function: (ok, 2 if which.name.endswith("WIDTH") else 1),
        cuOccupancyMaxActiveClusters=lambda function, config: configs.append(config) or (ok, 10),
    )
    assert launcher.max_active_blocks("gp_ac_dsm_stream", 128, 4096) == 10 * 2 // SMS
    (config,) = configs
    assert (config.gridDimX, config.gridDimY, config.gridDimZ) == (2, 1, 1)  # one cluster of the required shape
    assert (config.blockDimX, config.sharedMemBytes) == (128, 4096)
    assert not [c for c in stub.calls if c[0] == "occupancy"]  # the per-SM API is not asked about a cluster kernel


def test_the_cuda_bindings_path_launches_the_same_cubin_with_integer_pointers(stub, launcher, driver) -> None:
    out = launcher.alloc(16)
    launcher.enqueue_seconds("gp_k_args", 4, (32, 2), [np.uint32(7), out], count=3, via="cuda-bindings")
    launcher.enqueue_seconds("gp_k_args", 4, (32, 2), [np.uint32(7), out], count=1, via="cuda-bindings")
    called = [name for name, _ in driver.calls]
    assert called.count("cuModuleLoadData") == 1  # the cubin is loaded once per process
    launched = [args for name, args in driver.calls if name == "cuLaunchKernel"]
    assert len(launched) == 4
    _, *dims, shared, _, params, extra = launched[0]
    assert dims == [4, 1, 1, 32, 2, 1] and shared == 0
    assert isinstance(params, int) and params and extra == 0  # addresses, never None (cuda-bindings refuses it)


def test_a_binding_that_takes_other_arguments_is_an_unavailable_path(stub, launcher, driver) -> None:
    def other_api(*args: Any) -> tuple:
        raise TypeError("an integer is required")

    driver._answers["cuLaunchKernel"] = other_api
    with pytest.raises(LaunchPathUnavailable, match=r"cuda-bindings .* cannot launch here \(TypeError"):
        launcher.enqueue_seconds("gp_k", 1, 1, [], count=1, via="cuda-bindings")


def test_a_driver_error_is_a_cuda_error_not_an_unavailable_path(stub, launcher, driver) -> None:
    error = driver._real.CUresult.CUDA_ERROR_INVALID_CONTEXT
    driver._answers["cuLaunchKernel"] = lambda *args: (error,)
    with pytest.raises(CudaDriverError, match="cuLaunchKernel: CUDA_ERROR_INVALID_CONTEXT"):
        launcher.enqueue_seconds("gp_k", 1, 1, [], count=1, via="cuda-bindings")
    assert not issubclass(CudaDriverError, LaunchPathUnavailable)


def test_cuda_bindings_missing_is_an_unavailable_path(stub, launcher, monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "cuda.bindings", None)
    with pytest.raises(LaunchPathUnavailable, match="cuda-bindings cannot be imported"):
        launcher.enqueue_seconds("gp_k", 1, 1, [], count=1, via="cuda-bindings")


def test_the_launchers_snapshot_counts_its_own_context(stub, launcher, monkeypatch) -> None:
    asked = []
    monkeypatch.setattr(cupy_launcher, "nvml_snapshot", lambda *args, **kwargs: asked.append((args, kwargs)) or {})
    launcher.nvml()
    ((args, kwargs),) = asked
    assert os.getpid() in args[2] and kwargs == {"holds_context": True}


def test_timed_launches_are_enqueued_behind_a_hold_between_two_events(stub, launcher) -> None:
    assert launcher.time_launches("gp_k", 1, 32, [], count=3) == 2.5
    kinds = [c[0] if c[0] != "launch" else c[1] for c in stub.calls]
    assert kinds == [CLOCK_KERNEL, "event.record", "gp_k", "gp_k", "gp_k", "event.record", "event.synchronize"]
    hold = launches(stub)[0]
    assert hold[4][0] == np.uint64(3 * HOLD_CYCLES_PER_LAUNCH)


def test_device_copy_is_the_runtimes_memcpy(stub, launcher) -> None:
    src, dst = launcher.alloc(64), launcher.alloc(64)
    assert launcher.time_device_copy(dst, src, 64, count=2) == 2.5
    copies = [c for c in stub.calls if c[0] == "memcpy"]
    assert copies == [("memcpy", dst.data.ptr, src.data.ptr, 64, 3, 0)] * 2


@pytest.mark.parametrize(("direction", "kinds"), [("h2d", [1]), ("d2h", [2]), ("both", [1, 2])])
def test_host_copies_use_the_right_kinds_and_streams(stub, launcher, direction: str, kinds: list[int]) -> None:
    assert launcher.time_host_copy(1024, direction, pinned=True, count=2) >= 0
    copies = [c for c in stub.calls if c[0] == "memcpy"]
    assert [c[4] for c in copies] == kinds * 2 and all(c[3] == 1024 for c in copies)
    assert len({c[5] for c in copies}) == len(kinds)  # both at once: one stream each way


def test_pinned_memory_is_filled_and_read_by_the_host(stub, launcher) -> None:
    pinned = launcher.alloc_pinned(32)
    launcher.fill(pinned, 0xAB)
    assert launcher.read(pinned, "uint8", 32).tolist() == [0xAB] * 32
    assert launcher.read(pinned, "uint32", 1).tolist() == [0xABABABAB]


def test_gemm_is_cublas_gemmex_with_the_types_asked_for(stub, launcher) -> None:
    assert launcher.time_gemm(GemmShape(16, 64, 32), "bf16", count=2) == 2.5
    gemms = [c for c in stub.calls if c[0] == "gemmEx"]
    assert len(gemms) == 3  # one untimed (the algorithm is chosen, its kernels loaded), two timed
    handle, transa, transb, m, n, k = gemms[0][1:7]
    # row-major C (16 x 64) = A . B^T as cuBLAS's column-major C^T = op_T(B) . A: TN, m and n swapped, ld k, k, n
    assert (handle, transa, transb, m, n, k) == (0xB1A5, 1, 0, 64, 16, 32)
    assert (gemms[0][10], gemms[0][13], gemms[0][17]) == (32, 32, 64)
    assert gemms[0][9] == 14 and gemms[0][-2:] == (68, -1)  # CUDA_R_16BF, CUBLAS_COMPUTE_32F, default algorithm
    launcher.time_gemm(GemmShape(16, 64, 32), "s8")
    int8 = [c for c in stub.calls if c[0] == "gemmEx"][-1]
    assert (int8[9], int8[16], int8[-2]) == (3, 10, 72)  # CUDA_R_8I in, CUDA_R_32I out, CUBLAS_COMPUTE_32I


def test_graph_replay_captures_the_nodes_and_replays_behind_a_hold(stub, launcher) -> None:
    host_s, gpu_s = launcher.graph_replay("gp_k", 1, 1, [], nodes=3, replays=4)
    assert gpu_s == pytest.approx(2.5e-3) and host_s >= 0
    kinds = [c[0] if c[0] != "launch" else c[1] for c in stub.calls]
    captured = kinds[kinds.index("capture.begin") + 1 : kinds.index("capture.end")]
    assert captured == ["gp_k"] * 3
    assert kinds[kinds.index(CLOCK_KERNEL) + 1] == "event.record" and kinds.count("graph.launch") == 4


def test_prefer_l1_asks_for_the_smallest_carve_out(stub, launcher) -> None:
    launcher.prefer_l1("gp_k")
    assert stub.kernels["gp_k", False].preferred_shared_memory_carveout == 0


def test_event_costs_records_and_waits_for_each(stub, launcher) -> None:
    costs = launcher.event_costs(3)
    assert set(costs) == {"record", "synchronize"} and all(v >= 0 for v in costs.values())
    assert [c[0] for c in stub.calls].count("event.record") == 3
