"""gpuprobe's own Triton matmul (the frameworks family's ``frameworks.triton_matmul.bf16``): C = A @ B for row-major
A (M x K), B (K x N) and C (M x N), FP32 accumulation, C stored in its own type.

One program computes one BLOCK_M x BLOCK_N tile of C, walking K in steps of BLOCK_K through ``tl.dot`` (wgmma on
sm_90a, mma.sync before it, as Triton lowers it); the programs are numbered in groups of GROUP_M tile rows, so that
the programs running at once share A's rows and B's columns in the L2. One fixed configuration (128 x 256 x 64, 8
warps, 3 stages: about 144 KiB of shared memory a program, which an sm_80 or sm_90 SM holds), no autotuning: the
rung measures what a plain Triton kernel of the common shape reaches, in a budget of seconds. No masks: the host
refuses sizes that are not whole tiles.

Imported by :mod:`gpuprobe.runner.frameworks` only where Triton is installed: importing it needs Triton.
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

from gpuprobe.runner.triton_tiles import BLOCK_K, BLOCK_M, BLOCK_N, GROUP_M, STAGES, WARPS


@triton.jit
def _matmul_kernel(a, b, c, m, n, k, a_row, a_col, b_row, b_col, c_row, c_col, BLOCK_M: tl.constexpr,
                   BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr):  # fmt: skip
    program = tl.program_id(0)
    tile_rows, tile_cols = tl.cdiv(m, BLOCK_M), tl.cdiv(n, BLOCK_N)
    per_group = GROUP_M * tile_cols
    first_row = program // per_group * GROUP_M
    rows_in_group = min(tile_rows - first_row, GROUP_M)
    tile_row = first_row + program % per_group % rows_in_group
    tile_col = program % per_group // rows_in_group
    rows = tile_row * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = tile_col * BLOCK_N + tl.arange(0, BLOCK_N)
    steps = tl.arange(0, BLOCK_K)
    a_tile = a + rows[:, None] * a_row + steps[None, :] * a_col
    b_tile = b + steps[:, None] * b_row + cols[None, :] * b_col
    total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for _ in range(0, tl.cdiv(k, BLOCK_K)):
        total = tl.dot(tl.load(a_tile), tl.load(b_tile), total)
        a_tile += BLOCK_K * a_col
        b_tile += BLOCK_K * b_row
    tl.store(c + rows[:, None] * c_row + cols[None, :] * c_col, total.to(c.dtype.element_ty))


def matmul(a: Any, b: Any, c: Any) -> None:
    """Enqueue C = A @ B on PyTorch's current stream (torch tensors on one GPU); sizes must be whole tiles."""
    (m, k), (_, n) = a.shape, b.shape
    if m % BLOCK_M or n % BLOCK_N or k % BLOCK_K:
        raise ValueError(f"the Triton matmul takes whole {BLOCK_M} x {BLOCK_N} x {BLOCK_K} tiles, not {m} x {n} x {k}")
    grid = (triton.cdiv(m, BLOCK_M) * triton.cdiv(n, BLOCK_N),)
    _matmul_kernel[grid](a, b, c, m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), c.stride(0),
                         c.stride(1), BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
                         num_warps=WARPS, num_stages=STAGES)  # fmt: skip
