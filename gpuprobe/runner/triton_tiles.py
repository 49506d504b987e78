"""The Triton matmul's one configuration (:mod:`gpuprobe.runner.triton_matmul`), readable without Triton: its tiles,
warps and pipeline stages, and whether a GPU's blocks can hold them (:func:`triton_refusal`)."""

from __future__ import annotations

BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M = 128, 256, 64, 8
WARPS, STAGES = 8, 3
TRITON_SHARED_BYTES = STAGES * (BLOCK_M + BLOCK_N) * BLOCK_K * 2  # A's and B's bf16 tiles a stage: 144 KiB


def triton_refusal(shared_per_block_optin: int) -> str:
    """Why the Triton matmul's tiles cannot run on a GPU giving a block ``shared_per_block_optin`` bytes of shared
    memory (an sm_86 or sm_89 gives 99 KiB: Triton would refuse the launch), else ''."""
    if shared_per_block_optin >= TRITON_SHARED_BYTES:
        return ""
    need, given = TRITON_SHARED_BYTES >> 10, shared_per_block_optin >> 10
    return (
        f"the Triton matmul's {BLOCK_M} x {BLOCK_N} x {BLOCK_K} tiles in {STAGES} stages need {need} KiB of "
        f"shared memory a block; this GPU gives {given} KiB"
    )
