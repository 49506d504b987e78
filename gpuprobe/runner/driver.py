"""Calls into the CUDA driver through cuda-bindings, each call's CUresult checked."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class CudaDriverError(RuntimeError):
    """A driver API call made through cuda-bindings returned an error (e.g. ``cuLaunchKernel:
    CUDA_ERROR_INVALID_CONTEXT``). Like any CUDA error it may leave the context unusable, so it is not
    :class:`~gpuprobe.runner.launcher.LaunchPathUnavailable`: the probe crashes and a fresh process
    measures the rest."""


def driver_call(function: Callable[..., tuple[Any, ...]], *args: Any) -> Any:
    """A cuda.bindings driver call's result (its one value, or a tuple of them), its CUresult checked."""
    error, *result = function(*args)
    if error:  # any CUresult but CUDA_SUCCESS (0)
        raise CudaDriverError(f"{function.__name__}: {getattr(error, 'name', error)}")
    return result[0] if len(result) == 1 else tuple(result)
