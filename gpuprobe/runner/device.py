"""Which GPU this is: whether one can be used at all, what CUDA says about it (:func:`device_identity`), its
UUID, where the run measured it (:func:`placement`), and the software it was measured with."""

from __future__ import annotations

import importlib
import importlib.metadata
import os
import platform
import socket
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.results import Device
from gpuprobe.runner.driver import driver_call
from gpuprobe.runner.nvml import as_text, board_serial, cuda_version, nvml_library_version, recorded, version_text

DRIVER_LIBRARY = {"Windows": "nvcuda.dll", "Darwin": "libcuda.dylib"}.get(platform.system(), "libcuda.so.1")


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


def driver_missing_reason() -> str | None:
    """Why the NVIDIA driver's library cannot be loaded (it is not installed), or None when it loads."""
    import ctypes

    try:
        ctypes.CDLL(DRIVER_LIBRARY)
    except OSError as exc:
        return f"{DRIVER_LIBRARY} cannot be loaded: {str(exc).removeprefix(DRIVER_LIBRARY + ': ')}"
    return None


def require_gpu() -> None:
    reason = gpu_unavailable_reason()
    if reason:
        raise GpuprobeError(reason)


def device_identity(device_index: int = 0) -> Device:
    """What CUDA says about the device, its board's serial number (NVML), and which tools compiled the probes."""
    import cupy

    from gpuprobe.core.arch import arch_for_device
    from gpuprobe.kernels.toolchain import toolkit_description

    runtime = cupy.cuda.runtime
    props = runtime.getDeviceProperties(device_index)
    name = as_text(props["name"])
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
        driver=version_text(runtime.driverGetVersion()),
        cuda_runtime=version_text(runtime.runtimeGetVersion()),
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

        driver_call(driver.cuInit, 0)
        uuid = driver_call(driver.cuDeviceGetUuid, driver_call(driver.cuDeviceGet, device_index))
        return _uuid_text(uuid.bytes)
    except Exception:  # no driver, or a binding that cannot ask: the UUID only names the device
        return ""


def _uuid_text(raw: bytes) -> str:
    if isinstance(raw, bytes | bytearray) and len(raw) == 16:
        return raw.hex()
    return ""


# ---- where the run measured ---------------------------------------------------------------------


def visible_entries(value: str | None) -> list[str] | None:
    """``CUDA_VISIBLE_DEVICES`` as a list of entries; None when unset (every GPU visible)."""
    if value is None:
        return None
    return [entry.strip() for entry in value.split(",") if entry.strip()]


def entry_index(text: str | None) -> int | None:
    """A ``CUDA_VISIBLE_DEVICES`` entry's GPU index where it is a number; None for a UUID or nothing."""
    return int(text) if text is not None and text.strip().isdecimal() else None


def placement(
    device_index: int = 0, env: Mapping[str, str] | None = None, hostname: str | None = None
) -> dict[str, Any]:
    """Where a measurement ran, for ``results.Device``: ``hostname``, ``gpu_index`` and ``cuda_visible_devices``.

    ``gpu_index`` is the GPU's index on its node: ``GPUPROBE_GPU_INDEX`` where the fleet tooling set
    it (fleet-run, the xdist pin, the Slurm recipe), else the ``CUDA_VISIBLE_DEVICES`` entry the
    process's device ``device_index`` maps to when that entry is a number, else ``device_index``.
    """
    env = os.environ if env is None else env
    visible = env.get("CUDA_VISIBLE_DEVICES")
    index = entry_index(env.get("GPUPROBE_GPU_INDEX"))
    if index is None:
        entries = visible_entries(visible)
        if entries is None:
            index = device_index
        elif device_index < len(entries):
            index = entry_index(entries[device_index])
    return {"hostname": hostname or socket.gethostname(), "gpu_index": index, "cuda_visible_devices": visible}


# ---- the software it measured with --------------------------------------------------------------


def _tool(name: str) -> str:
    """A CUDA tool's release line and where it was found (NVRTC: the version gpuprobe compiles with)."""
    from gpuprobe.kernels.toolchain import find_tool, tool_version

    return tool_version(name) if name == "nvrtc" else f"{tool_version(name)} ({find_tool(name)})"


def _toolkit() -> str:
    from gpuprobe.kernels.toolchain import toolkit_description

    return toolkit_description()


def _cublas() -> str:
    """Whether CuPy finds and loads cuBLAS (``time_gemm`` needs it; it is looked up only when first used)."""
    from cupy.cuda import cublas

    return f"loads ({cublas.__name__})"


_SOFTWARE: dict[str, Callable[[], Any]] = {
    "python": lambda: f"{platform.python_implementation()} {platform.python_version()}",
    "numpy": lambda: np.__version__,
    "cupy": lambda: importlib.import_module("cupy").__version__,
    "cupy_cuda_build": lambda: cuda_version(importlib.import_module("cupy").cuda.driver.get_build_version()),
    # the CUDA runtime CuPy links statically, the one installed beside it, the driver's CUDA version
    "cuda_runtime": lambda: cuda_version(importlib.import_module("cupy").cuda.runtime.runtimeGetVersion()),
    "cuda_runtime_local": lambda: cuda_version(importlib.import_module("cupy").cuda.get_local_runtime_version()),
    "cuda_driver": lambda: cuda_version(importlib.import_module("cupy").cuda.runtime.driverGetVersion()),
    "cupy_nvrtc": lambda: ".".join(str(v) for v in importlib.import_module("cupy").cuda.nvrtc.getVersion()),
    "cublas": _cublas,
    "cuda_bindings": lambda: importlib.import_module("cuda.bindings").__version__,
    "cuda_pathfinder": lambda: importlib.import_module("cuda.pathfinder").__version__,
    "nvidia_ml_py": lambda: importlib.metadata.version("nvidia-ml-py"),
    "nvml": nvml_library_version,
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
    return {name: recorded(read) for name, read in _SOFTWARE.items()}
