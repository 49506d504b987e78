"""The runner's host-side pieces: NVML snapshots and records (gpuprobe.runner.nvml), software versions, the
device's identity and UUID (gpuprobe.runner.device), against stand-in CuPy, NVML and cuda-bindings answers (the
real modules cannot answer without a GPU; that the runner calls them as they are is tests/test_cuda_api.py's
matter), and against the real modules where they can answer on a machine without a GPU."""

from __future__ import annotations

import atexit
import ctypes
import json
import sys
import types
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.runner import device as gpu_device
from gpuprobe.runner import nvml as gpu_nvml
from tests.test_cuda_api import DriverDouble, driver_double


class _NvmlError(Exception):
    pass


# What each NVML query of the stand-in answers (a callable gets the query's arguments).
NVML_ANSWERS: dict[str, Any] = {
    "nvmlDeviceGetClockInfo": lambda h, which: 1980 if which == 0 else 2619,
    "nvmlDeviceGetMaxClockInfo": lambda h, which: 1980 if which == 0 else 3201,
    "nvmlDeviceGetApplicationsClock": lambda h, which: 1755 if which == 0 else 3201,
    "nvmlDeviceGetDefaultApplicationsClock": lambda h, which: 1755 if which == 0 else 3201,
    "nvmlDeviceGetTemperature": 41,
    "nvmlDeviceGetPowerUsage": 123_000,
    "nvmlDeviceGetPowerManagementLimit": 700_000,
    "nvmlDeviceGetPowerManagementDefaultLimit": 700_000,
    "nvmlDeviceGetEnforcedPowerLimit": 690_000,
    "nvmlDeviceGetCurrentClocksEventReasons": 0x1,
    "nvmlSystemGetDriverVersion": b"580.95.05",
    "nvmlSystemGetCudaDriverVersion": 13000,
    "nvmlDeviceGetName": "NVIDIA H200",
    "nvmlDeviceGetUUID": "GPU-01234567-89ab-cdef-0123-456789abcdef",
    "nvmlDeviceGetPciInfo": types.SimpleNamespace(busId="00000000:1B:00.0"),
    "nvmlDeviceGetVbiosVersion": "96.00.A5.00.01",
    "nvmlDeviceGetEccMode": [1, 0],
    "nvmlDeviceGetMigMode": [0, 0],
    "nvmlDeviceGetPersistenceMode": 1,
    "nvmlDeviceGetComputeMode": 0,
    "nvmlDeviceGetPerformanceState": 0,
    "nvmlDeviceGetCurrPcieLinkGeneration": 5,
    "nvmlDeviceGetMaxPcieLinkGeneration": 5,
    "nvmlDeviceGetCurrPcieLinkWidth": 16,
    "nvmlDeviceGetMaxPcieLinkWidth": 16,
    "nvmlSystemGetNVMLVersion": "13.580.95.05",
    "nvmlDeviceGetTotalEnergyConsumption": 1_234_567,
}


def _fake_pynvml(refuse: set[str] = frozenset(), pids: tuple[int, ...] = (7, 8, 9)) -> types.ModuleType:
    """pynvml answering ``NVML_ANSWERS``; a query named in ``refuse`` raises as NVML does for a part
    that does not support it. ``inits`` counts nvmlInit calls."""
    nv = types.ModuleType("pynvml")
    nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM, nv.NVML_TEMPERATURE_GPU = 0, 1, 0
    nv.inits = 0

    def query(name: str, answer: Any) -> Callable[..., Any]:
        def read(*args: Any) -> Any:
            if name in refuse:
                raise _NvmlError(f"{name}: Not Supported")
            return answer(*args) if callable(answer) else answer

        return read

    for name, answer in {
        **NVML_ANSWERS,
        "nvmlDeviceGetComputeRunningProcesses": [types.SimpleNamespace(pid=p) for p in pids],
        "nvmlDeviceGetHandleByIndex": lambda index: f"handle{index}",
        "nvmlDeviceGetHandleByUUID": lambda uuid: f"handle-{uuid}",
    }.items():
        setattr(nv, name, query(name, answer))

    def init() -> None:
        nv.inits += 1
        if "nvmlInit" in refuse:
            raise _NvmlError("NVML Shared Library Not Found")

    nv.nvmlInit, nv.nvmlShutdown = init, lambda: None
    return nv


@pytest.fixture
def nvml(monkeypatch: pytest.MonkeyPatch) -> Callable[..., types.ModuleType]:
    """Install a stand-in pynvml (a fresh one per call, as a fresh process would first meet NVML)."""

    def install(**options: Any) -> types.ModuleType:
        nv = _fake_pynvml(**options)
        monkeypatch.setitem(sys.modules, "pynvml", nv)
        return nv

    monkeypatch.setattr(atexit, "register", lambda *args: None)  # no stand-in shutdowns at exit
    return install


def test_the_sampler_reads_the_cheap_queries_under_a_trajectorys_names_and_the_energy_counter(nvml) -> None:
    nv = nvml(refuse={"nvmlDeviceGetTemperature"})
    sample = gpu_nvml.nvml_sample(0)
    assert {k: sample[k] for k in ("sm_mhz", "mem_mhz", "power_w", "reasons")} == {
        "sm_mhz": 1980, "mem_mhz": 2619, "power_w": 123.0, "reasons": 1}  # fmt: skip
    assert sample["temperature_c"].startswith("unavailable (")  # refused: recorded, the rest still read
    assert gpu_nvml.nvml_energy_mj(0) == 1_234_567.0
    handles = len(gpu_nvml._NVML_STATE["handles"])
    gpu_nvml.nvml_sample(0)
    assert len(gpu_nvml._NVML_STATE["handles"]) == handles == 1 and nv.inits == 1  # found once per process


def test_no_energy_counter_or_no_nvml_is_none_never_an_exception(nvml, monkeypatch) -> None:
    nvml(refuse={"nvmlDeviceGetTotalEnergyConsumption"})
    assert gpu_nvml.nvml_energy_mj(0) is None
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert gpu_nvml.nvml_sample(0) is None and gpu_nvml.nvml_energy_mj(0) is None


def test_nvml_readings_survive_a_refused_query(nvml) -> None:
    nvml(refuse={"nvmlDeviceGetPowerUsage"})
    snapshot = gpu_nvml.nvml_snapshot(0, own_pids={7, 8})  # the measuring child and its parent are not tenants
    assert snapshot["sm_clock_mhz"] == 1980 and snapshot["temperature_c"] == 41
    assert snapshot["power_w"] == "unavailable (_NvmlError: nvmlDeviceGetPowerUsage: Not Supported)"
    assert snapshot["clock_event_reasons"] == 1 and snapshot["compute_processes"] == 1
    assert snapshot["driver"] == "580.95.05"


def test_an_older_nvidia_ml_py_gives_the_throttle_reasons_under_their_old_name(nvml) -> None:
    nv = nvml()
    del nv.nvmlDeviceGetCurrentClocksEventReasons
    nv.nvmlDeviceGetCurrentClocksThrottleReasons = lambda handle: 0x40
    assert gpu_nvml.nvml_snapshot(0)["clock_event_reasons"] == 0x40


def test_nvml_is_initialised_once_per_process_and_shut_down_at_exit(nvml, monkeypatch) -> None:
    registered = []
    monkeypatch.setattr(atexit, "register", lambda *args: registered.append(args))
    nv = nvml()
    for _ in range(3):
        gpu_nvml.nvml_snapshot(0)
    gpu_nvml.device_record(0)
    assert nv.inits == 1
    ((shutdown, module),) = registered
    assert module is nv
    shutdown(module)  # what runs at exit, and it must not raise even if NVML is already gone
    nv.nvmlShutdown = lambda: (_ for _ in ()).throw(_NvmlError("Uninitialized"))
    shutdown(module)


def test_nvml_that_cannot_start_means_no_snapshot_and_is_not_retried(nvml) -> None:
    nv = nvml(refuse={"nvmlInit"})
    assert gpu_nvml.nvml_snapshot(0) is None and gpu_nvml.device_record(0) is None
    assert nv.inits == 1


def test_no_nvml_means_no_snapshot(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert gpu_nvml.nvml_snapshot(0) is None and gpu_nvml.device_record(0) is None


def test_nvml_finds_the_gpu_by_uuid_whatever_cuda_visible_devices_says(nvml) -> None:
    nv = nvml()
    seen = []
    nv.nvmlDeviceGetHandleByUUID = lambda uuid: seen.append(uuid) or "handle"
    gpu_nvml.nvml_snapshot(0, uuid="0123456789abcdef0123456789abcdef")
    assert seen == ["GPU-01234567-89ab-cdef-0123-456789abcdef"]


def test_a_device_nvml_cannot_find_is_an_error_record(nvml) -> None:
    nv = nvml()
    nv.nvmlDeviceGetHandleByIndex = lambda index: (_ for _ in ()).throw(_NvmlError("Invalid Argument"))
    assert gpu_nvml.nvml_snapshot(3) == {"error": "_NvmlError: Invalid Argument"}


@pytest.mark.parametrize(
    ("pids", "own", "holds_context", "others"),
    [
        ((7, 8, 9), {7, 8}, True, 1),  # NVML sees this run's pids: all but them
        ((7,), {7, 8}, True, 0),
        ((4101, 4102), {7, 8}, True, 1),  # a container: NVML's pids are the host's; one context is ours
        ((4101,), {7, 8}, True, 0),
        ((), {7, 8}, True, 0),
        ((4101, 4102), {7}, False, 2),  # the session's own process holds no context
    ],
)
def test_compute_processes_are_the_other_tenants_of_the_gpu(nvml, pids, own, holds_context, others) -> None:
    nvml(pids=pids)
    assert gpu_nvml.nvml_snapshot(0, own_pids=own, holds_context=holds_context)["compute_processes"] == others


def test_the_device_record_is_what_nvidia_smi_reports(nvml) -> None:
    nvml(refuse={"nvmlDeviceGetApplicationsClock", "nvmlDeviceGetMigMode"})
    record = gpu_nvml.device_record(0, uuid="0123456789abcdef0123456789abcdef")
    assert json.loads(json.dumps(record, allow_nan=False)) == record
    assert (record["name"], record["uuid"], record["pci_bus_id"]) == (
        "NVIDIA H200",
        "GPU-01234567-89ab-cdef-0123-456789abcdef",
        "00000000:1B:00.0",
    )
    assert (record["driver"], record["cuda_driver"], record["vbios"]) == (
        "580.95.05",
        {"number": 13000, "text": "13.0"},
        "96.00.A5.00.01",
    )
    clocks = {k: v for k, v in record.items() if "_clock_" in k}
    assert clocks == {
        "sm_clock_mhz": 1980,
        "mem_clock_mhz": 2619,
        "sm_clock_max_mhz": 1980,
        "mem_clock_max_mhz": 3201,
        "sm_clock_application_mhz": "unavailable (_NvmlError: nvmlDeviceGetApplicationsClock: Not Supported)",
        "mem_clock_application_mhz": "unavailable (_NvmlError: nvmlDeviceGetApplicationsClock: Not Supported)",
        "sm_clock_default_application_mhz": 1755,
        "mem_clock_default_application_mhz": 3201,
    }
    assert (record["power_w"], record["power_limit_w"], record["power_default_limit_w"]) == (123.0, 700.0, 700.0)
    assert record["power_enforced_limit_w"] == 690.0
    assert (record["ecc_mode_current"], record["ecc_mode_pending"]) == (1, 0)
    assert record["mig_mode_current"].startswith("unavailable") and record["mig_mode_pending"].startswith("unavailable")
    assert (record["persistence_mode"], record["compute_mode"], record["performance_state"]) == (1, 0, 0)
    assert [record[f"pcie_{k}"] for k in ("generation", "generation_max", "width", "width_max")] == [5, 5, 16, 16]
    assert (record["temperature_c"], record["clock_event_reasons"]) == (41, 1)
    assert "compute_processes" not in record  # a snapshot's matter, with whose processes they are


def test_the_diagnostics_answer_on_a_machine_without_a_gpu() -> None:
    """The real modules, here (no driver, no NVML library): sensible answers, JSON-able, never raising."""
    import cuda.bindings
    import cupy

    record = gpu_nvml.device_record(0)
    assert record is None or "error" in record or "name" in record
    versions = gpu_device.software_versions()
    assert json.loads(json.dumps(versions, allow_nan=False)) == versions
    assert set(versions) == {
        "python", "numpy", "cupy", "cupy_cuda_build", "cuda_runtime", "cuda_runtime_local", "cuda_driver",
        "cupy_nvrtc", "cublas", "cuda_bindings", "cuda_pathfinder", "nvidia_ml_py", "nvml", "nvrtc", "ptxas",
        "nvdisasm", "toolkit",
    }  # fmt: skip
    assert versions["numpy"] == np.__version__ and versions["python"].endswith(sys.version.split()[0])
    assert versions["cupy"] == cupy.__version__ and versions["cuda_bindings"] == cuda.bindings.__version__
    assert versions["cupy_cuda_build"]["number"] == cupy.cuda.driver.get_build_version()
    assert versions["toolkit"].startswith("ptxas ") and "release" in versions["ptxas"]


def test_a_missing_package_is_recorded_as_not_installed(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)
    monkeypatch.setitem(sys.modules, "pynvml", None)
    versions = gpu_device.software_versions()
    assert versions["cupy"] == versions["cuda_runtime"] == "not installed (cupy)"
    assert versions["nvml"] == "not installed (pynvml)"
    assert versions["numpy"] == np.__version__


def test_software_versions_read_cuda_versions_as_numbers_and_text(monkeypatch) -> None:
    runtime = types.SimpleNamespace(runtimeGetVersion=lambda: 13000, driverGetVersion=lambda: 0)
    cupy = types.ModuleType("cupy")
    cupy.__version__ = "14.2.0"
    cupy.cuda = types.SimpleNamespace(
        runtime=runtime,
        driver=types.SimpleNamespace(get_build_version=lambda: 13020),
        get_local_runtime_version=lambda: 13050,
        nvrtc=types.SimpleNamespace(getVersion=lambda: (13, 0)),
    )
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    versions = gpu_device.software_versions()
    assert versions["cuda_runtime"] == {"number": 13000, "text": "13.0"}
    assert versions["cupy_cuda_build"] == {"number": 13020, "text": "13.2"}
    assert versions["cuda_runtime_local"]["text"] == "13.5" and versions["cupy_nvrtc"] == "13.0"
    assert versions["cuda_driver"] == {"number": 0, "text": "none"}  # CUDA's way of saying: no driver
    assert versions["cublas"].startswith("unavailable")


def _uuid_answer(driver: DriverDouble, raw: bytes) -> Callable[..., tuple]:
    def answer(device: Any) -> tuple:
        uuid = driver._real.CUuuid()
        ctypes.memmove(int(uuid.getPtr()), raw, 16)
        return driver._real.CUresult.CUDA_SUCCESS, uuid

    return answer


def test_the_uuid_keeps_every_byte_even_a_zero_one() -> None:
    """cuda-bindings' own CUuuid (real, its bytes set in memory) with 0x00 bytes: all 16 are kept. CuPy's
    getDeviceProperties()["uuid"] would have ended at the first of them."""
    raw = bytes.fromhex("00a1b2c3d4e5f60718293a4b5c6d7e00")
    with driver_double(DriverDouble()) as driver:
        driver._answers["cuDeviceGetUuid"] = _uuid_answer(driver, raw)
        assert gpu_device.cuda_uuid(0) == raw.hex()
    assert gpu_nvml.nvml_uuid(raw.hex()) == "GPU-00a1b2c3-d4e5-f607-1829-3a4b5c6d7e00"


def test_a_uuid_the_driver_cannot_give_is_empty() -> None:
    with driver_double(DriverDouble()) as driver:
        driver._answers["cuDeviceGet"] = lambda index: (driver._real.CUresult.CUDA_ERROR_NO_DEVICE, 0)
        assert gpu_device.cuda_uuid(0) == ""


def _fake_cupy(props: dict, attributes: dict[int, int], devices: int = 1) -> types.ModuleType:
    runtime = types.SimpleNamespace(
        getDeviceCount=lambda: devices,
        getDeviceProperties=lambda index: props,
        deviceGetAttribute=lambda attribute, index: attributes[attribute],
        driverGetVersion=lambda: 13000,
        runtimeGetVersion=lambda: 13000,
    )
    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(runtime=runtime)
    return cupy


H200_PROPS = {
    "name": b"NVIDIA H200",
    "major": 9,
    "minor": 0,
    "multiProcessorCount": 132,
    "l2CacheSize": 62914560,
    "totalGlobalMem": 150_000_000_000,
    "sharedMemPerMultiprocessor": 233472,
    "sharedMemPerBlockOptin": 232448,
}  # CUDA 13 dropped clockRate and memoryClockRate from cudaDeviceProp


def test_device_identity_reads_properties_and_falls_back_to_attributes(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(H200_PROPS, {13: 1980000, 36: 3201000, 37: 6144}))
    monkeypatch.setattr("gpuprobe.kernels.toolchain.toolkit_description", lambda: "ptxas test")
    with driver_double(DriverDouble()) as driver:
        driver._answers["cuDeviceGetUuid"] = _uuid_answer(driver, bytes(range(16)))
        device = gpu_device.device_identity(0)
    assert (device.name, device.cc, device.arch, device.sm_count) == ("NVIDIA H200", "9.0", "sm_90a", 132)
    assert device.sm_clock_nominal_mhz == 1980.0 and device.mem_clock_mhz == 3201.0 and device.mem_bus_bits == 6144
    assert device.driver == "13.0" and device.toolkit == "ptxas test"
    assert device.uuid == bytes(range(16)).hex()


def test_an_unsupported_compute_capability_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy({**H200_PROPS, "major": 7, "minor": 0}, {}))
    with pytest.raises(GpuprobeError, match=r"compute capability 7\.0 is not a supported arch"):
        gpu_device.device_identity(0)


def test_gpu_unavailable_reasons(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)
    assert "CuPy is not installed" in gpu_device.gpu_unavailable_reason()
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(H200_PROPS, {}, devices=0))
    assert gpu_device.gpu_unavailable_reason() == "no GPU: the CUDA driver reports 0 devices"
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(H200_PROPS, {}, devices=1))
    assert gpu_device.gpu_unavailable_reason() is None


def test_no_driver_at_all_is_said_so_not_as_a_driver_to_upgrade(monkeypatch) -> None:
    """The CUDA runtime calls a machine without any NVIDIA driver "driver version is insufficient"; the
    reason says no GPU/driver was found, and keeps the runtime's words as the detail."""
    insufficient = "cudaErrorInsufficientDriver: CUDA driver version is insufficient for CUDA runtime version"
    cupy = _fake_cupy(H200_PROPS, {})

    def no_count() -> int:
        raise RuntimeError(insufficient)

    cupy.cuda.runtime.getDeviceCount = no_count
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setattr(gpu_device, "DRIVER_LIBRARY", "libgpuprobe-no-such-driver.so.1")
    reason = gpu_device.gpu_unavailable_reason()
    assert reason.startswith("no GPU: no NVIDIA GPU/driver found (libgpuprobe-no-such-driver.so.1 cannot be loaded")
    assert reason.endswith(f"the CUDA runtime says: {insufficient})")
    monkeypatch.setattr(gpu_device, "DRIVER_LIBRARY", "libc.so.6")  # a library that loads: the driver is there
    assert gpu_device.gpu_unavailable_reason() == f"no GPU: the CUDA driver reports none ({insufficient})"
