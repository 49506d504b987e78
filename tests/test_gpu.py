"""The launch path's host-side pieces, against stand-in CuPy and NVML modules."""

from __future__ import annotations

import sys
import types

import pytest

from gpuprobe import gpu


class _NvmlError(Exception):
    pass


def _fake_pynvml(refuse: set[str]) -> types.ModuleType:
    nv = types.ModuleType("pynvml")
    nv.NVML_CLOCK_SM, nv.NVML_CLOCK_MEM, nv.NVML_TEMPERATURE_GPU = 0, 1, 0

    def reading(name, value):
        def read(*_args):
            if name in refuse:
                raise _NvmlError(name)
            return value

        return read

    nv.nvmlInit = nv.nvmlShutdown = lambda: None
    nv.nvmlDeviceGetHandleByIndex = lambda index: f"handle{index}"
    nv.nvmlDeviceGetClockInfo = lambda h, which: 1980 if which == 0 else 2619
    nv.nvmlDeviceGetMaxClockInfo = reading("max", 1980)
    nv.nvmlDeviceGetTemperature = reading("temperature", 41)
    nv.nvmlDeviceGetPowerUsage = reading("power", 123_000)
    nv.nvmlDeviceGetCurrentClocksThrottleReasons = reading("reasons", 0)  # an older nvidia-ml-py
    nv.nvmlDeviceGetComputeRunningProcesses = reading("processes", [types.SimpleNamespace(pid=p) for p in (7, 8, 9)])
    nv.nvmlDeviceGetHandleByUUID = lambda uuid: f"handle-{uuid}"
    nv.nvmlSystemGetDriverVersion = reading("driver", b"580.159.03")
    return nv


def test_nvml_readings_survive_a_refused_query(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", _fake_pynvml(refuse={"power"}))
    snapshot = gpu.nvml_snapshot(0, own_pids={7, 8})  # the measuring child and its parent are not tenants
    assert snapshot["sm_clock_mhz"] == 1980 and snapshot["temperature_c"] == 41
    assert snapshot["power_w"].startswith("unavailable")
    assert snapshot["clock_event_reasons"] == 0 and snapshot["compute_processes"] == 1
    assert snapshot["driver"] == "580.159.03"


def test_nvml_finds_the_gpu_by_uuid_whatever_cuda_visible_devices_says(monkeypatch) -> None:
    nv = _fake_pynvml(refuse=set())
    seen = []
    nv.nvmlDeviceGetHandleByUUID = lambda uuid: seen.append(uuid) or "handle"
    monkeypatch.setitem(sys.modules, "pynvml", nv)
    gpu.nvml_snapshot(0, uuid="0123456789abcdef0123456789abcdef")
    assert seen == ["GPU-01234567-89ab-cdef-0123-456789abcdef"]


def test_no_nvml_means_no_snapshot(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert gpu.nvml_snapshot(0) is None


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
    monkeypatch.setattr("gpuprobe.toolchain.toolkit_description", lambda: "ptxas test")
    device = gpu.device_identity(0)
    assert (device.name, device.cc, device.arch, device.sm_count) == ("NVIDIA H200", "9.0", "sm_90a", 132)
    assert device.sm_clock_nominal_mhz == 1980.0 and device.mem_clock_mhz == 3201.0 and device.mem_bus_bits == 6144
    assert device.driver == "13.0" and device.toolkit == "ptxas test"


def test_an_unsupported_compute_capability_is_a_clear_error(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy({**H200_PROPS, "major": 7, "minor": 0}, {}))
    with pytest.raises(gpu.GpuprobeError, match=r"compute capability 7\.0 is not a supported arch"):
        gpu.device_identity(0)


def test_gpu_unavailable_reasons(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)
    assert "CuPy is not installed" in gpu.gpu_unavailable_reason()
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(H200_PROPS, {}, devices=0))
    assert gpu.gpu_unavailable_reason() == "no GPU: the CUDA driver reports 0 devices"
    monkeypatch.setitem(sys.modules, "cupy", _fake_cupy(H200_PROPS, {}, devices=1))
    assert gpu.gpu_unavailable_reason() is None
