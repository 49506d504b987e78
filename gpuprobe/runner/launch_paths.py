"""The launch paths besides CuPy's own, for the launch family's comparison of what launching costs:
cuLaunchKernel through cuda-bindings (:class:`DriverLaunch`) and PyCUDA (:func:`pycuda_launch`), each of
the same cubin in the device's primary context (CuPy's), prepared once and then launched many times."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np

from gpuprobe.runner.driver import CudaDriverError, driver_call
from gpuprobe.runner.launcher import Dims, LaunchPathUnavailable, xyz


class Loaded(Protocol):
    """The launcher a launch path launches beside: the cubin it loaded, on which device, and its buffers'
    addresses (:class:`~gpuprobe.runner.cupy_launcher.CupyLauncher`)."""

    cubin: str
    device_index: int

    def address(self, buffer: Any) -> int: ...


_DRIVER_MODULES: dict[str, Any] = {}  # cubin path (pycuda: "pycuda:" + path) -> its module, loaded once per process


def _argument_block(launcher: Loaded, args: list[Any]) -> tuple[list[np.ndarray], np.ndarray]:
    """``void* kernelParams[]`` for cuLaunchKernel: one host array per argument (a buffer as its 64-bit
    address, a NumPy scalar as itself) and the array of their addresses; keep both alive while launching."""
    holders = [np.array([a]) if isinstance(a, np.generic) else np.array([launcher.address(a)], np.uint64) for a in args]
    return holders, np.array([h.ctypes.data for h in holders], dtype=np.uint64)


class DriverLaunch:
    """cuLaunchKernel (cuda.bindings.driver) of a kernel of the same cubin, loaded with cuModuleLoadData
    into CuPy's context (the device's primary context), on ``stream`` (CuPy's current one).

    :class:`LaunchPathUnavailable` where the binding cannot be used (not importable, no driver library
    found, or a call it converts with a TypeError: argument types of another version of its API, which
    shows on the first launch at the latest); :class:`CudaDriverError` where the driver refuses a call."""

    def __init__(self, launcher: Loaded, stream: int, kernel: str, grid: Dims, block: Dims, args: list[Any]) -> None:
        try:
            from cuda.bindings import driver
            from cuda.pathfinder import DynamicLibNotFoundError
        except ImportError as exc:
            raise LaunchPathUnavailable(f"cuda-bindings cannot be imported ({exc})") from None
        self._unusable: tuple[type[Exception], ...] = (TypeError, DynamicLibNotFoundError)
        try:
            if launcher.cubin not in _DRIVER_MODULES:  # once per process: the context retained, the cubin loaded
                driver_call(driver.cuInit, 0)
                device = driver_call(driver.cuDeviceGet, launcher.device_index)
                context = driver_call(driver.cuDevicePrimaryCtxRetain, device)
                driver_call(driver.cuCtxSetCurrent, context)
                image = Path(launcher.cubin).read_bytes()
                _DRIVER_MODULES[launcher.cubin] = driver_call(driver.cuModuleLoadData, image)
            function = driver_call(driver.cuModuleGetFunction, _DRIVER_MODULES[launcher.cubin], kernel.encode())
            h_stream = driver.CUstream(stream)
        except self._unusable as exc:
            raise _binding_unusable(exc) from exc
        self._holders, self._pointers = _argument_block(launcher, args)  # kept alive while launching
        # cuLaunchKernel(f, grid xyz, block xyz, sharedMemBytes, hStream, kernelParams, extra): both pointers
        # are integers to cuda-bindings (an address, and 0 for no ``extra``), never None
        self._call = driver.cuLaunchKernel
        self._arguments = (function, *xyz(grid), *xyz(block), 0, h_stream, int(self._pointers.ctypes.data), 0)

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


def pycuda_launch(launcher: Loaded, kernel: str, grid: Dims, block: Dims, args: list[Any]) -> Callable[[], None]:
    """One launch through PyCUDA (optional: ``pip install 'gpuprobe[pycuda]'``) of the same cubin, loaded once
    into the device's primary context (CuPy's, current on this thread), on the legacy default stream."""
    try:
        import pycuda.driver as pycuda
    except ImportError:
        raise LaunchPathUnavailable("pycuda is not installed (pip install 'gpuprobe[pycuda]')") from None
    key = f"pycuda:{launcher.cubin}"
    if key not in _DRIVER_MODULES:
        pycuda.init()
        context = pycuda.Device(launcher.device_index).retain_primary_context()
        context.push()
        try:
            _DRIVER_MODULES[key] = (context, pycuda.module_from_buffer(Path(launcher.cubin).read_bytes()))
        finally:
            pycuda.Context.pop()
    function = _DRIVER_MODULES[key][1].get_function(kernel)
    values = [a if isinstance(a, np.generic) else np.uint64(launcher.address(a)) for a in args]
    grid3, block3 = xyz(grid), xyz(block)
    return lambda: function(*values, grid=grid3, block=block3)
