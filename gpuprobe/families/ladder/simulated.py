"""Simulated ladder-family kernels: its clock stamp is the wgmma family's (each block's SM clock and timer, which a
simulated GEMM batch advances: :func:`gpuprobe.families.wgmma.simulated.bracket_gemm`). The GEMMs themselves are
the simulated GPU's (:meth:`gpuprobe.simulated.gpu.SimulatedGpu.time_gemm`, ``gemm_sample``): ``gemm_corrupt``
plants a wrong result, ``gemm_missing`` a library that cannot be loaded."""

from __future__ import annotations

from gpuprobe.families.ladder import CLOCK_STAMP, Settings
from gpuprobe.families.sampling import Stopping
from gpuprobe.families.wgmma.simulated import clock_stamp
from gpuprobe.simulated.simulation import Simulation

FAST_SETTINGS = Settings(sampling=Stopping(2, 2))

SIMULATION = Simulation(kernels={CLOCK_STAMP: clock_stamp}, fast_settings=FAST_SETTINGS)
