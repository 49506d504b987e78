"""The self-test's kernel on the simulated GPU: its null-pointer load faults, as it does on a GPU."""

from __future__ import annotations

from typing import Any

from gpuprobe.simulated.simulation import Simulation


def fault_illegal_address(gpu: Any, launch: Any, out: Any) -> None:
    raise RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered")


KERNELS = {"gp_fault_illegal_address": fault_illegal_address}

SIMULATION = Simulation(kernels=KERNELS)
