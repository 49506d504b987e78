"""The frameworks family on the simulated GPU: its clock stamp (the wgmma family's model of the same record), and
PyTorch, Triton and cuDNN as :class:`SimulatedFrameworks`, the :class:`~gpuprobe.runner.frameworks.Frameworks` the
simulated GPU opens (``SimulatedGpu.frameworks()``).

A work runs at :data:`SHARES` of Hopper's dense per-clock peak of its type (the part's SMs at the clock the
simulated GPU runs libraries at, :func:`~gpuprobe.families.wgmma.simulated.cublas_mhz`), between its two clock
stamps as the simulated cuBLAS's GEMMs run (:func:`~gpuprobe.families.wgmma.simulated.bracket_gemm`). What a test
plants, as attributes of the simulated GPU (or its ``family_options``):

* ``frameworks_missing``: {library: reason}, a library ("torch", "triton", "cudnn", "flash") missing here: its
  works raise LaunchPathUnavailable with the reason (PyTorch missing takes every work with it);
* ``frameworks_corrupt``: every result wrong (a matmul's first row is its last row's, attention reads v shifted by
  one key);
* ``frameworks_share``: {work key: share} replacing :data:`SHARES` (e.g. one above the peak).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from gpuprobe.families.frameworks import attention_reference
from gpuprobe.families.wgmma import HOPPER_FLOP_PER_CLK_PER_SM
from gpuprobe.families.wgmma.simulated import bracket_gemm, clock_stamp, cublas_mhz
from gpuprobe.runner.frameworks import TORCH_MISSING, Work
from gpuprobe.runner.launcher import GEMM_TYPES, LaunchPathUnavailable, Stamp, round_to_output
from gpuprobe.simulated.simulation import Simulation

# Each work's rate over the dense per-clock peak of its type at the clock it runs at (H100 SXM, published: torch.matmul
# bf16 0.80 of the datasheet's 989 (MAMF 794.5), e4m3 0.71; FlashAttention-3's cuDNN bars about 0.6 non-causal at
# head dim 128; the Triton and FlashAttention-2 rungs below them).
SHARES = {"torch.bf16": 0.80, "torch.f16": 0.80, "torch.e4m3": 0.71, "triton.bf16": 0.62, "cudnn.bf16": 0.60,
          "cudnn.bf16.causal": 0.52, "flash.bf16": 0.42}  # fmt: skip


def work_key(work: Work) -> str:
    """``work``'s key in :data:`SHARES`: library, type, and ".causal" with the mask."""
    return f"{work.library}.{work.dtype}" + (".causal" if work.causal else "")


def _bf16(values: np.ndarray) -> np.ndarray:
    """``values`` truncated to bf16 (as PyTorch's operands hold them), as float64."""
    return (values.astype(np.float32).view(np.uint32) & np.uint32(0xFFFF0000)).view(np.float32).astype(np.float64)


class SimulatedFrameworks:
    """PyTorch, Triton and cuDNN on the simulated GPU ``gpu``: rates from :data:`SHARES`, results from NumPy."""

    def __init__(self, gpu: Any) -> None:
        self.gpu = gpu

    def _require(self, work: Work) -> None:
        missing: dict[str, str] = getattr(self.gpu, "frameworks_missing", {})
        if "torch" in missing:
            raise LaunchPathUnavailable(missing["torch"] or TORCH_MISSING)
        if work.library in missing:
            raise LaunchPathUnavailable(missing[work.library])

    def time_framework(self, work: Work, count: int, stamp: Stamp) -> float:
        self._require(work)
        gpu = self.gpu
        share = {**SHARES, **getattr(gpu, "frameworks_share", {})}[work_key(work)]
        tflops = share * HOPPER_FLOP_PER_CLK_PER_SM[work.dtype] * gpu.sm_count * cublas_mhz(gpu) / 1e6
        ms = count * work.flop / (tflops * 1e9) * gpu._jitter(f"frameworks.{work_key(work)}", 0.005)
        bracket_gemm(gpu, stamp, ms)
        gpu.power_state.advance("tensor", ms)
        return ms

    def framework_sample(self, work: Work, rows: list[int], cols: list[int]) -> dict[str, np.ndarray]:
        self._require(work)
        rng = np.random.default_rng([len(rows), *work.shape])
        corrupt = getattr(self.gpu, "frameworks_corrupt", False)
        if not work.attention:
            n, span = work.shape[0], GEMM_TYPES[work.dtype].value_range
            a, b = (rng.integers(-span, span + 1, shape).astype(np.float64)
                    for shape in ((len(rows), n), (n, len(cols))))  # fmt: skip
            c = round_to_output(a @ b, work.dtype)
            return {"a": a, "b": b, "c": np.vstack([c[-1:], c[1:]]) if corrupt else c}
        sequence, dim = work.shape[2], work.shape[3]
        k, v = (_bf16(rng.standard_normal((sequence, dim))) for _ in range(2))
        q = _bf16(rng.standard_normal((len(rows), dim)))
        o = attention_reference(q, k, np.roll(v, 1, axis=0) if corrupt else v, rows, work.causal)
        return {"q": q, "k": k, "v": v, "o": _bf16(o)}


SIMULATION = Simulation(kernels={"gp_fw_clock_stamp": clock_stamp})
