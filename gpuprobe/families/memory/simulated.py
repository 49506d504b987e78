"""The memory family's kernels on the simulated GPU (see gpuprobe/simulated/gpu.py).

The chases follow the pointers really written into simulated memory, so a wrong cycle or a wrong
prediction is caught exactly as on a GPU, and are timed with the cache model
(:mod:`gpuprobe.simulated.cache_model`, the part's ``hierarchy_l1`` and ``hierarchy_l2``). L2 residency is
modelled just enough to catch a sweep that measures L2 where it means DRAM: lines written or visited since
the last flush (a write through a buffer of twice the L2) are still in L2. Nothing it produces is a
measurement.
"""

from __future__ import annotations

import numpy as np

from gpuprobe.families.memory import Settings
from gpuprobe.families.sampling import Stopping
from gpuprobe.kernels.registry import CLOCK_KERNEL, unroll_of
from gpuprobe.simulated.cache_model import curve
from gpuprobe.simulated.gpu import DEVICE_RUN_SD, KIB, SimulatedBuffer, SimulatedGpu, SimulatedLaunch
from gpuprobe.simulated.simulation import Simulation

# Short sweeps for the simulated part (512 KiB L2): cold footprints never revisit a line.
FAST_SETTINGS = Settings(
    sampling=Stopping(3, 4),
    short_iterations=4,
    long_iterations=20,
    l1_rewarm_bytes=64 * KIB,
    clock_settle_cycles=1000,
    clock_spin_cycles=100_000,
    overhead_sampling=Stopping(3, 5),
)


def _write(gpu: SimulatedGpu, out: SimulatedBuffer, cycles: float, ns: float, end: int | None = None) -> None:
    words = out.data.view(np.uint64)
    words[0], words[1] = round(cycles), round(ns)
    if end is not None:
        words[2] = end
        out.data.view(np.uint32)[6] = gpu.sm_id  # a 32-bit store: the word's upper half stays as it was


def _timed(gpu: SimulatedGpu, kernel: str, latency: float, iters: int) -> float:
    """The cycles of a timed chase of ``iters`` iterations at ``latency`` cycles a step."""
    return gpu.clock_read + gpu.edge + iters * unroll_of(kernel) * latency * gpu._jitter()


def sm_clock(gpu: SimulatedGpu, launch: SimulatedLaunch, spin: np.uint64, out: SimulatedBuffer) -> None:
    cycles = int(spin) + 40
    _write(gpu, out, cycles, cycles / (gpu.mhz * gpu._jitter("sm_clock", DEVICE_RUN_SD)) * 1000.0)


def clock_overhead(gpu: SimulatedGpu, launch: SimulatedLaunch, out: SimulatedBuffer) -> None:
    out.data.view(np.uint64)[0] = round(gpu.clock_read)


def loop_overhead(gpu: SimulatedGpu, launch: SimulatedLaunch, iters: np.uint32, out: SimulatedBuffer) -> None:
    out.data.view(np.uint64)[:2] = [round(gpu.clock_read + int(iters) * gpu.loop), 0]


def chase_shared(gpu: SimulatedGpu, launch: SimulatedLaunch, successors, nodes, stride, start, warm, iters,
                 out: SimulatedBuffer) -> None:  # fmt: skip
    kernel = "gp_chase_shared"
    succ = successors.data.view(np.uint32)[: int(nodes)] // int(stride)
    node = int(start)
    for _ in range(int(warm) + int(iters) * unroll_of(kernel)):
        node = int(succ[node])
    cycles = _timed(gpu, kernel, gpu.shared_latency, int(iters))
    _write(gpu, out, cycles, cycles / gpu.mhz * 1000.0, node * int(stride) + int(gpu.corrupt_chase))


def _chase_global(gpu: SimulatedGpu, kernel: str, hierarchy: list, start, warm, iters, out: SimulatedBuffer) -> None:
    pointer, latency = _walk(gpu, kernel, hierarchy, start, warm, iters)
    cycles = _timed(gpu, kernel, latency, int(iters))
    _write(gpu, out, cycles, cycles / gpu.mhz * 1000.0, pointer + 128 * int(gpu.corrupt_chase))


def _walk(gpu: SimulatedGpu, kernel: str, hierarchy: list, start, warm, iters) -> tuple[int, float]:
    """Follow the chase's pointers from ``start``: where it ends, and the cache model's latency of a step."""
    buffer, _ = gpu.buffer_at(int(start))
    words = buffer.data.view(np.uint64)
    pointer, timed = int(start), []
    for step in range(int(warm) + int(iters) * unroll_of(kernel)):
        if step >= int(warm):
            timed.append(pointer)
        pointer = int(words[(pointer - buffer.base) // 8])
    footprint = gpu.cycle_bytes
    latency = float(curve(hierarchy, [footprint], transition="sharp")[0])
    gpu.cycle_warmed |= int(warm) > 0
    if not gpu.cycle_warmed and footprint > gpu.l2_bytes and gpu.in_l2.intersection(timed):
        latency = float(curve(hierarchy, [gpu.l2_bytes / 2], transition="sharp")[0])  # lines left in L2
    gpu.in_l2.update(timed)
    return pointer, latency


def chase_global_ca(gpu: SimulatedGpu, launch: SimulatedLaunch, start, warm, iters, out: SimulatedBuffer) -> None:
    _chase_global(gpu, "gp_chase_global_ca", gpu.hierarchy_l1, start, warm, iters, out)


def chase_global_cg(gpu: SimulatedGpu, launch: SimulatedLaunch, start, warm, iters, out: SimulatedBuffer) -> None:
    _chase_global(gpu, "gp_chase_global_cg", gpu.hierarchy_l2, start, warm, iters, out)


V16_EXTRA = 2.0  # a 16-byte load over an 8-byte one (the H200's latency.l2.v16_minus_v8: 2.0 cycles)
# A warp's 512 bytes over one lane's 16: 16 sectors to return instead of one. A model, not a measurement.
WARP_EXTRA = 8.0
SLOT_BYTES = 16


def chase_warp_v16(gpu: SimulatedGpu, launch: SimulatedLaunch, start, warm, iters, out: SimulatedBuffer) -> None:
    """Every lane chases its own slot: lane 0's pointers are followed, and lane l ends SLOT_BYTES x l past
    it (as the host wrote the slots); ``gpu.corrupt_chase`` moves the last lane's end off its slot."""
    kernel, lanes = "gp_chase_warp_v16", launch.threads
    lane0 = int(start)
    pointer, latency = _walk(gpu, kernel, gpu.hierarchy_l2, lane0, warm, iters)
    cycles = _timed(gpu, kernel, latency + V16_EXTRA + (WARP_EXTRA if lanes > 1 else 0.0), int(iters))
    _write(gpu, out, cycles, cycles / gpu.mhz * 1000.0, pointer)
    ends = pointer + SLOT_BYTES * np.arange(lanes)
    ends[-1] += SLOT_BYTES * int(gpu.corrupt_chase)
    words = out.data.view(np.uint64)
    words[4 : 4 + 2 * lanes : 2], words[5 : 5 + 2 * lanes : 2] = ends.astype(np.uint64), 0


KERNELS = {
    CLOCK_KERNEL: sm_clock,
    "gp_clock_overhead": clock_overhead,
    "gp_loop_overhead": loop_overhead,
    "gp_chase_shared": chase_shared,
    "gp_chase_global_ca": chase_global_ca,
    "gp_chase_global_cg": chase_global_cg,
    "gp_chase_warp_v16": chase_warp_v16,
}

SIMULATION = Simulation(kernels=KERNELS, fast_settings=FAST_SETTINGS)
