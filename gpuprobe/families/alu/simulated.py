"""The ALU chain kernels and their twins on the simulated GPU: their arithmetic in NumPy, their time from a model.

Each thread's result is computed from the operand buffer the host uploaded, step by step as the
kernel does (one untimed step per chain, then 32 / ILP steps per pass of the loop body and
iteration on chains below the ILP; a twin's body is two passes); a chain that falls into a cycle is
jumped ahead. Time per iteration on an SM is :func:`~gpuprobe.simulated.chain_output.iteration_cycles`:
the chain's latency bound (its dependent steps, and the loop branch's bubble), the issue bound (each
warp's instructions and its IADD, ISETP and BRA) and the pipe bound (the SM's lane operations over
the peak rate). A loop of one pass timed alone so reads FFMA at 128 x 32 / 35 = 117 lane operations
a clock and (32 x 4 + 7) / 32 = 4.22 cycles a step, as an H200 did; the twin's difference reads 128
and 4. (The H200's DFMA lost the same 32 / 35; the model has no cause for that and keeps DFMA, like
IMAD, behind its half-rate pipe.) ``gpu.alu_corrupt = True`` makes one thread's result wrong.
Blocks are placed on SMs, and their timer read, as :mod:`gpuprobe.simulated.chain_output` says (now and then
two blocks on one SM). Nothing it produces is a measurement.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from gpuprobe.families.alu import ILPS, Settings
from gpuprobe.families.issue_sweep import TWIN_PASSES, body_of, twin_kernel
from gpuprobe.simulated.chain_output import iteration_cycles, place_blocks, warps_on_sm, write
from gpuprobe.simulated.simulation import Simulation

FAST_SETTINGS = Settings(warps=(1, 4, 32), latency_target_cycles=100_000, sweep_target_cycles=100_000)

# op: (latency of one chain step in cycles, peak lane operations per clock per SM, lane ops per instruction)
TIMING: dict[str, tuple[float, float, int]] = {
    "ffma": (4.0, 128.0, 1),
    "dfma": (8.0, 64.0, 1),
    "hfma2": (6.0, 256.0, 2),
    "hfma2_bf16": (6.0, 256.0, 2),
    "imad": (4.5, 64.0, 1),
    "mufu_rsqrt": (18.0, 16.0, 1),
    "mufu_ex2": (18.0, 16.0, 1),
    "mufu_sin": (26.0, 16.0, 1),  # FMUL + FMUL.RZ + MUFU.SIN: 4 + 4 + 18
}
MUFU = {
    "mufu_rsqrt": lambda x: 1.0 / math.sqrt(x),
    "mufu_ex2": lambda x: 2.0**-x,
    "mufu_sin": lambda x: math.sin(2 * x),
}


def _halves(bits: int, bf16: bool) -> list[float]:
    low, high = bits & 0xFFFF, bits >> 16
    if bf16:
        return [float(np.uint32(h << 16).view(np.float32)) for h in (low, high)]
    return [float(np.uint16(h).view(np.float16)) for h in (low, high)]


def _pack(values: list[float], bf16: bool) -> int:
    if bf16:
        bits = [int(np.float32(v).view(np.uint32)) >> 16 for v in values]
    else:
        bits = [int(np.float16(v).view(np.uint16)) for v in values]
    return bits[0] | (bits[1] << 16)


def _ternary_step(op: str, a: int, b: int) -> Callable[[int], int]:
    """x <- a * x + b on the raw bits of one chain register, in the kernel's type."""
    if op == "imad":
        return lambda x: (a * x + b) & 0xFFFFFFFF
    if op == "ffma":
        fa, fb = (float(np.uint32(v).view(np.float32)) for v in (a, b))
        return lambda x: int(np.float32(fa * float(np.uint32(x).view(np.float32)) + fb).view(np.uint32))
    if op == "dfma":
        da, db = (float(np.uint64(v).view(np.float64)) for v in (a, b))
        return lambda x: int(np.float64(da * float(np.uint64(x).view(np.float64)) + db).view(np.uint64))
    bf16 = op == "hfma2_bf16"
    pa, pb = _halves(a, bf16), _halves(b, bf16)
    return lambda x: _pack([pa[i] * v + pb[i] for i, v in enumerate(_halves(x, bf16))], bf16)


def _iterate(step: Callable, x, steps: int):
    """``steps`` applications of ``step``, jumping ahead once the chain repeats (period 1 or 2)."""
    history = [x]
    for done in range(1, steps + 1):
        x = step(x)
        if len(history) >= 2 and x == history[-2]:  # period 2 from here on
            return history[-1] if (steps - done) % 2 else x
        if x == history[-1]:
            return x
        history.append(x)
    return x


def thread_result(op: str, slots: np.ndarray, iterations: int, ilp: int, passes: int = 1) -> int:
    """What one thread writes: the XOR (ternary) or float sum (MUFU) of its 8 chains."""
    body = body_of(f"gp_alu_{op}_ilp{ilp}")
    steps = [1 + (iterations * passes * body // ilp if c < ilp else 0) for c in range(8)]
    if op in MUFU:
        f = MUFU[op]
        values = [_iterate(lambda x: float(np.float32(f(x))), float(np.uint32(slots[2 + c]).view(np.float32)), n)
                  for c, n in enumerate(steps)]  # fmt: skip
        return int(np.float32(sum(values)).view(np.uint32))
    step = _ternary_step(op, int(slots[0]), int(slots[1]))
    result = 0
    for c, n in enumerate(steps):
        result ^= _iterate(step, int(slots[2 + c]), n)
    return result


def simulate(op: str, ilp: int, passes: int):
    def execute(gpu, launch, iters, operands, out) -> float:
        iterations = int(iters)
        sms = place_blocks(gpu, launch)
        width = 64 if op == "dfma" else 32
        slots = operands.data.view(np.uint64)[:10] if width == 64 else operands.data.view(np.uint64)[:10] & 0xFFFFFFFF
        result = thread_result(op, slots, iterations, ilp, passes)
        latency, peak, lane_ops = TIMING[op]
        instructions = passes * body_of(f"gp_alu_{op}_ilp{ilp}")
        warps = warps_on_sm(launch, sms)
        pipe = warps * 32 * instructions * lane_ops / peak
        per_iteration = iteration_cycles(instructions, latency * instructions / ilp, pipe, warps)
        results = np.full((launch.blocks * launch.threads, 1), result, dtype=np.uint64)
        if width == 32:  # a 32-bit store leaves the upper half of the result word as it was (poisoned)
            results |= np.uint64(0xFFFFFFFF << 32)
        if getattr(gpu, "alu_corrupt", False):
            results[-1, 0] ^= np.uint64(1 << 30)  # a high bit: far outside any tolerance
        return write(gpu, launch, sms, out, per_iteration, iterations, results)

    return execute


KERNELS = {twin_kernel(f"gp_alu_{op}_ilp{ilp}", passes): simulate(op, ilp, passes)
           for op in TIMING for ilp in ILPS for passes in (1, TWIN_PASSES)}  # fmt: skip

SIMULATION = Simulation(kernels=KERNELS, fast_settings=FAST_SETTINGS)
