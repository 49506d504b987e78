"""The tcgen05 kernels on a simulated B200-class part: D computed from the operands as the shared-memory
descriptors say they lie and the instruction descriptor says what they are, written back as the kernel
writes tensor memory's rows; tensor-memory round trips and allocations; with a timing model.

An MMA kernel refuses an instruction descriptor that is not its own shape and types (as a real one would
compute something else) and a shared-memory descriptor without the sm_100 version bits. Flags on the
SimulatedGpu: ``tcgen05_corrupt`` (one element of the last block's D is one more than it should be),
``tcgen05_alloc_misaligned`` (an allocation returns a column that is not 128-aligned).
"""

from __future__ import annotations

import numpy as np

from gpuprobe.families.sampling import Stopping
from gpuprobe.families.tcgen05 import ALLOC_CHAIN, BLACKWELL_FLOP_PER_CLK_PER_SM, TMEM_CHAIN, Settings
from gpuprobe.families.tcgen05.layout import A_TYPE_CODES, MMAS, Mma, decode_instruction
from gpuprobe.families.wgmma.operands import decode
from gpuprobe.families.wgmma.simulated import _operand
from gpuprobe.kernels.registry import unroll_of
from gpuprobe.simulated.simulation import Simulation
from gpuprobe.simulated.timer import at_launch

SMOKE_PART = {"arch": "sm_100a", "cc": "10.0", "name": "NVIDIA B200"}  # the smoke check's part: tcgen05 is sm_100a's
FAST_SETTINGS = Settings(long_iterations=2048, sampling=Settings().sampling.at_most(3),
                         throughput_sampling=Stopping(2, 2))  # fmt: skip
COMMIT_AND_WAIT = 70.0  # cycles a latency step pays beyond the MMA's work at the SM's rate
EFFICIENCY = 0.94  # of the datasheet rate, for a throughput run
TMEM_STEP = 38.0  # a tensor-memory store, wait, load and wait
ALLOC_STEP = 310.0  # an allocation and its free


def _product(mma: Mma, a, b, layout: int, idesc: int) -> np.ndarray:
    fields = decode_instruction(idesc)
    code = A_TYPE_CODES[mma.type_name]
    assert (fields["m"], fields["n"], fields["a"], fields["b"], fields["d"]) == (mma.m, mma.n, code, code, 1), fields
    assert (layout >> 46) & 7 == 1, "a shared-memory descriptor without the sm_100 version field"
    element = np.dtype(f"u{mma.wgmma.element_bytes}")
    a_bits = _operand(a.data, mma.m, layout).copy().view(element)
    b_bits = _operand(b.data, mma.n, layout).copy().view(element)
    return decode(a_bits, mma.wgmma) @ decode(b_bits, mma.wgmma).T


def simulate_mma(mma: Mma):
    def execute(gpu, launch, a, b, layout, idesc, iters, out) -> float:
        blocks, iterations = launch.blocks, int(iters)
        assert launch.threads == 128 and blocks % mma.group == 0, "whole block groups of one warpgroup"
        d = (1 + mma.batch * iterations) * _product(mma, a, b, int(layout), int(idesc))
        rows = np.tile(d.astype(np.float32), (blocks // mma.group, 1))
        if getattr(gpu, "tcgen05_corrupt", False):
            rows[-1, 3] += 1
        rate = BLACKWELL_FLOP_PER_CLK_PER_SM[mma.type_name] * mma.group
        if mma.purpose == "lat":
            per = mma.flop() / rate + COMMIT_AND_WAIT
        else:
            per = mma.batch * mma.flop() / (rate * EFFICIENCY)
        cycles = np.full(blocks, gpu.clock_read + gpu.edge + iterations * per * gpu._jitter())
        true_start = np.arange(blocks) % 5
        true_end = true_start + cycles / gpu.mhz * 1000.0
        timer = at_launch(gpu)
        start, end = timer.read(true_start), timer.read(true_end)
        records = np.stack([cycles.round().astype(np.uint64), end - start, start, end], axis=1)
        words = out.data.view(np.uint64)
        words[: blocks * 4] = records.reshape(-1)
        out.data[blocks * 32 : blocks * 32 + rows.nbytes] = rows.view(np.uint8).ravel()
        return float(true_end.max() / 1e6)

    return execute


def tmem_chain(gpu, launch, iters, out) -> None:
    iterations, steps = int(iters), unroll_of(TMEM_CHAIN)
    cycles = gpu.clock_read + gpu.edge + iterations * steps * TMEM_STEP * gpu._jitter()
    words = out.data.view(np.uint64)
    words[0], words[1] = round(cycles), round(cycles / gpu.mhz * 1000.0)
    out.data[16 : 16 + 128] = (np.arange(32, dtype=np.uint32) + np.uint32(steps * (iterations + 1))).view(np.uint8)


def alloc_chain(gpu, launch, iters, out) -> None:
    iterations = int(iters)
    cycles = gpu.clock_read + gpu.edge + iterations * ALLOC_STEP * gpu._jitter()
    words = out.data.view(np.uint64)
    words[0], words[1] = round(cycles), round(cycles / gpu.mhz * 1000.0)
    addresses = np.zeros(iterations, dtype=np.uint32)
    if getattr(gpu, "tcgen05_alloc_misaligned", False):
        addresses[-1] = 32
    out.data[16 : 16 + addresses.nbytes] = addresses.view(np.uint8)


KERNELS = {
    **{m.kernel: simulate_mma(m) for m in MMAS},
    TMEM_CHAIN: tmem_chain,
    ALLOC_CHAIN: alloc_chain,
}

SIMULATION = Simulation(kernels=KERNELS, fast_settings=FAST_SETTINGS, smoke_part=SMOKE_PART)
