"""The launch path: the one small runner every probe measurement goes through.

Everything a probe needs from a GPU is in :class:`Launcher`: allocate, fill, launch a kernel of
the inspected cubin, read results, and describe the device. :class:`CupyLauncher` implements it
with CuPy (``cupy.RawModule(path=...)`` loads exactly the cubin gpuprobe compiled and checked);
tests implement it with a simulated device. Nothing else in gpuprobe imports CuPy.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

import numpy as np

from gpuprobe.errors import GpuprobeError
from gpuprobe.results import Device


class Launcher(Protocol):
    def alloc(self, nbytes: int) -> Any: ...

    def address(self, buffer: Any) -> int: ...

    def upload(self, array: np.ndarray) -> Any: ...

    def write_chain(self, buffer: Any, successor: np.ndarray, stride: int) -> None:
        """Store, at byte ``i * stride`` of ``buffer``, the 64-bit address of node ``successor[i]``."""

    def launch(self, kernel: str, grid: int, block: int, args: list[Any], shared_bytes: int = 0) -> None:
        """Run ``kernel`` to completion; numpy scalars give parameter widths, buffers pass pointers."""

    def read_u64(self, buffer: Any, count: int) -> np.ndarray: ...

    def device(self) -> Device: ...

    def nvml(self) -> dict[str, Any] | None:
        """Clocks, temperature, power, throttle reasons and other processes, where NVML is present."""


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
        return f"no GPU: the CUDA driver reports none ({exc})"
    return None if count > 0 else "no GPU: the CUDA driver reports 0 devices"


def _version_text(number: int) -> str:
    return f"{number // 1000}.{(number % 1000) // 10}"


class CupyLauncher:
    """A :class:`Launcher` over CuPy for one device and one cubin."""

    def __init__(self, cubin: Path, device_index: int = 0) -> None:
        import cupy

        self._cp = cupy
        self._device_index = device_index
        cupy.cuda.Device(device_index).use()
        self._module = cupy.RawModule(path=str(cubin))
        self._kernels: dict[str, Any] = {}

    def alloc(self, nbytes: int) -> Any:
        return self._cp.zeros(nbytes, dtype=self._cp.uint8)

    def address(self, buffer: Any) -> int:
        return int(buffer.data.ptr)

    def upload(self, array: np.ndarray) -> Any:
        return self._cp.asarray(array)

    def write_chain(self, buffer: Any, successor: np.ndarray, stride: int) -> None:
        cp = self._cp
        words = buffer.view(cp.uint64)
        nodes = cp.arange(len(successor), dtype=cp.uint64)
        targets = cp.asarray(successor, dtype=cp.uint64)
        words[nodes * (stride // 8)] = cp.uint64(self.address(buffer)) + targets * cp.uint64(stride)
        cp.cuda.Device().synchronize()

    def launch(self, kernel: str, grid: int, block: int, args: list[Any], shared_bytes: int = 0) -> None:
        function = self._kernels.get(kernel)
        if function is None:
            function = self._kernels[kernel] = self._module.get_function(kernel)
        function((grid,), (block,), tuple(args), shared_mem=shared_bytes)
        self._cp.cuda.Device().synchronize()

    def read_u64(self, buffer: Any, count: int) -> np.ndarray:
        return self._cp.asnumpy(buffer.view(self._cp.uint64)[:count])

    def device(self) -> Device:
        return device_identity(self._device_index)

    def nvml(self) -> dict[str, Any] | None:
        return nvml_snapshot(self._device_index)


def device_identity(device_index: int = 0) -> Device:
    """What CUDA says about the device, and which tools compiled the probes."""
    import cupy

    from gpuprobe.arch import arch_for_device
    from gpuprobe.toolchain import toolkit_description

    runtime = cupy.cuda.runtime
    props = runtime.getDeviceProperties(device_index)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    major, minor = int(props["major"]), int(props["minor"])
    return Device(
        name=name,
        cc=f"{major}.{minor}",
        arch=arch_for_device(major, minor).name,
        sm_count=int(props["multiProcessorCount"]),
        l2_bytes=int(props["l2CacheSize"]),
        sm_clock_nominal_mhz=_khz_to_mhz(props.get("clockRate")),
        mem_clock_mhz=_khz_to_mhz(props.get("memoryClockRate")),
        mem_bus_bits=props.get("memoryBusWidth"),
        mem_bytes=int(props["totalGlobalMem"]),
        shared_per_sm_bytes=props.get("sharedMemPerMultiprocessor"),
        shared_per_block_optin_bytes=props.get("sharedMemPerBlockOptin"),
        driver=_version_text(runtime.driverGetVersion()),
        cuda_runtime=_version_text(runtime.runtimeGetVersion()),
        toolkit=toolkit_description(),
        uuid=_uuid_text(props.get("uuid")),
    )


def _khz_to_mhz(value: Any) -> float | None:
    return None if not value else float(value) / 1000.0


def _uuid_text(raw: Any) -> str:
    if isinstance(raw, bytes | bytearray) and len(raw) == 16:
        return raw.hex()
    return ""


def nvml_snapshot(device_index: int) -> dict[str, Any] | None:
    """Clocks, temperature, power, throttle reasons and other processes, via NVML (None if absent)."""
    try:
        import pynvml
    except ImportError:
        return None
    try:
        pynvml.nvmlInit()
    except Exception:
        return None
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(device_index)
        readings: dict[str, Any] = {
            "sm_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "mem_clock_mhz": pynvml.nvmlDeviceGetClockInfo(handle, pynvml.NVML_CLOCK_MEM),
            "sm_clock_max_mhz": pynvml.nvmlDeviceGetMaxClockInfo(handle, pynvml.NVML_CLOCK_SM),
            "temperature_c": pynvml.nvmlDeviceGetTemperature(handle, pynvml.NVML_TEMPERATURE_GPU),
            "power_w": pynvml.nvmlDeviceGetPowerUsage(handle) / 1000.0,
            "throttle_reasons": int(pynvml.nvmlDeviceGetCurrentClocksEventReasons(handle)),
            "driver": _text(pynvml.nvmlSystemGetDriverVersion()),
        }
        processes = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
        readings["compute_processes"] = len(processes)
        return readings
    except Exception as exc:  # a reading NVML refuses on this part: record why, measure anyway
        return {"error": f"{type(exc).__name__}: {exc}"}
    finally:
        pynvml.nvmlShutdown()


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def require_gpu() -> None:
    reason = gpu_unavailable_reason()
    if reason:
        raise GpuprobeError(reason)
