"""NVML: one session per process, the snapshots taken around every probe (clocks, temperature, power,
clock-event (throttle) reasons, other tenants), and the device record of a run (what ``nvidia-smi -q`` says).

Every reading is a diagnostic: a query the part refuses is recorded as its error (:func:`recorded`), and
no NVML at all is None, never an exception.
"""

from __future__ import annotations

import atexit
import contextlib
from collections.abc import Callable, Collection
from typing import Any

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.tool_output import decoded


class _NvmlUnavailable(GpuprobeError):
    """NVML cannot be used in this process (no driver library, or nvmlInit refused)."""


_NVML_STATE: dict[str, Any] = {}  # "module": the pynvml this process initialised; "error": why nvmlInit failed


def nvml_session() -> Any:
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


def as_text(value: str | bytes) -> str:
    """A name or version the driver or NVML gave, as text (bytes decoded tolerantly)."""
    return decoded(value) if isinstance(value, bytes) else str(value)


def version_text(number: int) -> str:
    """A CUDA version number as CUDA writes it: 13000 is "13.0"."""
    return f"{number // 1000}.{(number % 1000) // 10}"


def cuda_version(number: int) -> dict[str, Any]:
    """A CUDA version number (e.g. 13000) with its text ("13.0"; "none" for 0, which means no driver)."""
    return {"number": int(number), "text": version_text(int(number)) if number else "none"}


def _failure(exc: Exception) -> str:
    """How a reading that failed is recorded: "not installed" for a missing package, else the error."""
    if isinstance(exc, ModuleNotFoundError):
        return f"not installed ({exc.name})"
    if isinstance(exc, GpuprobeError):  # gpuprobe's own one-line reason
        return f"unavailable ({exc})"
    return f"unavailable ({type(exc).__name__}: {exc})"


def recorded(read: Callable[..., Any], *args: Any) -> Any:
    """``read(*args)``, or the reading's failure (:func:`_failure`): a diagnostic never raises."""
    try:
        return read(*args)
    except Exception as exc:  # NVML raises its own error per query the part refuses
        return _failure(exc)


_NVML_READINGS: dict[str, Callable[[Any, Any], Any]] = {
    "sm_clock_mhz": lambda nv, h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
    "mem_clock_mhz": lambda nv, h: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM),
    "sm_clock_max_mhz": lambda nv, h: nv.nvmlDeviceGetMaxClockInfo(h, nv.NVML_CLOCK_SM),
    "temperature_c": lambda nv, h: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
    "power_w": lambda nv, h: nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
    "clock_event_reasons": lambda nv, h: int(_clock_reasons(nv)(h)),
    "driver": lambda nv, h: as_text(nv.nvmlSystemGetDriverVersion()),
}

# What nvidia-smi -q reports about the part and its settings, once per run (see device_record).
_DEVICE_RECORD: dict[str, Callable[[Any, Any], Any]] = {
    "name": lambda nv, h: as_text(nv.nvmlDeviceGetName(h)),
    "uuid": lambda nv, h: as_text(nv.nvmlDeviceGetUUID(h)),
    "serial": lambda nv, h: _serial(nv, h),  # "" for a board without one
    "pci_bus_id": lambda nv, h: as_text(nv.nvmlDeviceGetPciInfo(h).busId),
    "vbios": lambda nv, h: as_text(nv.nvmlDeviceGetVbiosVersion(h)),
    "cuda_driver": lambda nv, h: cuda_version(nv.nvmlSystemGetCudaDriverVersion()),
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
    """The clock-event (throttle) reasons query, under its name in an older nvidia-ml-py where it has no other."""
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
        nv = nvml_session()
    except (ImportError, _NvmlUnavailable):
        return None
    try:
        handle = _nvml_handle(nv, device_index, uuid)
    except Exception as exc:
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {name: recorded(read, nv, handle) for name, read in readers.items()}


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


# What the sampler reads every few milliseconds while a probe measures (gpuprobe.runner.trajectory): the cheap
# queries alone, under the names a trajectory's readings take.
_SAMPLED: dict[str, Callable[[Any, Any], Any]] = {
    "sm_mhz": _NVML_READINGS["sm_clock_mhz"],
    "mem_mhz": _NVML_READINGS["mem_clock_mhz"],
    "power_w": _NVML_READINGS["power_w"],
    "temperature_c": _NVML_READINGS["temperature_c"],
    "reasons": _NVML_READINGS["clock_event_reasons"],
}


def _cached_handle(device_index: int, uuid: str) -> tuple[Any, Any]:
    """pynvml and the NVML handle of the device, found once per process (finding it by UUID lists every device)."""
    nv = nvml_session()
    handles = _NVML_STATE.setdefault("handles", {})
    if (device_index, uuid) not in handles:
        handles[(device_index, uuid)] = _nvml_handle(nv, device_index, uuid)
    return nv, handles[(device_index, uuid)]


def nvml_sample(device_index: int, uuid: str = "") -> dict[str, Any] | None:
    """The SM and memory clocks, power, temperature and clock-event reasons, for the sampler; None without NVML
    or the device, a refused query recorded as its error."""
    try:
        nv, handle = _cached_handle(device_index, uuid)
    except Exception:  # no NVML, or no such device: the trajectory has no readings
        return None
    return {name: recorded(read, nv, handle) for name, read in _SAMPLED.items()}


def nvml_energy_mj(device_index: int, uuid: str = "") -> float | None:
    """The device's total-energy counter (mJ since the driver loaded, Volta and later); None where it cannot be
    read."""
    try:
        nv, handle = _cached_handle(device_index, uuid)
        return float(nv.nvmlDeviceGetTotalEnergyConsumption(handle))
    except Exception:  # a part without the counter, or no NVML
        return None


def device_record(device_index: int, uuid: str = "") -> dict[str, Any] | None:
    """The device as ``nvidia-smi -q`` would describe it, for the results: name, UUID, serial and PCI bus id,
    VBIOS, driver and NVML's CUDA driver version; current, maximum, application and default
    application SM and memory clocks (MHz); power draw, limit, default and enforced limits (W); ECC
    and MIG modes (current and pending), persistence and compute modes, performance state; PCIe link
    generation and width (current and maximum); temperature and clock-event (throttle) reasons.

    Found by CUDA's ``uuid`` (32 hex digits, as :func:`gpuprobe.runner.device.cuda_uuid`) where given, else
    by NVML index. JSON-able; each reading the part refuses is recorded as its error; None without NVML."""
    return _read_device(device_index, uuid, _DEVICE_RECORD)


def board_serial(device_index: int, uuid: str = "") -> str:
    """The board's serial number, as ``nvidia-smi -q`` says it ("Serial Number"): with the UUID, which board
    measured (two boards of one model in one VM slot differ in both). Found by CUDA's ``uuid`` where given;
    "" without NVML, or for a part that has none (consumer boards refuse the query)."""
    record = _read_device(device_index, uuid, {"serial": _serial}) or {}
    serial = record.get("serial", "")
    return serial if isinstance(serial, str) else ""


def _serial(nv: Any, handle: Any) -> str:
    try:
        return as_text(nv.nvmlDeviceGetSerial(handle))
    except Exception:  # NVML's NotSupported on a board without a serial: no identity to record
        return ""


def nvml_library_version() -> str:
    """NVML's own library version (raises where NVML cannot start: :func:`recorded` records why)."""
    nv = nvml_session()
    return as_text(nv.nvmlSystemGetNVMLVersion())
