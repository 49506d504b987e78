"""The grid_sync family's kernels on the simulated GPU: the grid barrier's semantics and a timing model.

A cooperative launch larger than the occupancy API allows fails as CUDA fails it; a plain launch of
the barrier kernel would deadlock on hardware, so it fails here. ``gpu.corrupt_grid_sync`` breaks a
result on purpose: "order" (a block reads a stale tag after the barrier), "passed" (a block reports one
barrier short), "counter" (the arrive word ends on the wrong sense), "work" (the persistent kernel's
threads count one step short). Block 0 reads %globaltimer as it moves, in ticks (:mod:`gpuprobe.simulated.timer`).
"""

from __future__ import annotations

import numpy as np

from gpuprobe.simulated.simulation import Simulation
from gpuprobe.simulated.timer import at_launch

SYNC_BASE_CYCLES = 1200.0  # one grid barrier: the arrival and release round trips through L2,
SYNC_CYCLES_PER_BLOCK = 1.5  # plus the serialised arrivals
WORK_NS = 300.0  # one step of the persistent kernel's work
COOPERATIVE_LAUNCH_NS = 4000.0


def sync_cycles(blocks: int) -> float:
    return SYNC_BASE_CYCLES + SYNC_CYCLES_PER_BLOCK * blocks


def _grid(gpu, launch, counter, slots, data, checks, syncs, steps, out) -> float:
    if not launch.cooperative:
        raise RuntimeError("gp_gs_grid launched without cooperative=True: the grid barrier would deadlock")
    corrupt = getattr(gpu, "corrupt_grid_sync", "")
    barriers = int(checks) + int(syncs) + int(steps)
    words = counter.data.view(np.uint32)
    words[0] = (int(words[0]) + (barriers + (corrupt == "counter")) * 0x80000000) & 0xFFFFFFFF
    words[1] += corrupt == "order"
    done = int(steps) - (corrupt == "work" and int(steps) > 0)
    data.data.view(np.uint32)[: launch.blocks * launch.threads] += np.uint32(done)
    per_sync = sync_cycles(launch.blocks)
    cycles = int(syncs) * per_sync * gpu._jitter() + 2 * gpu.clock_read
    checked_ns = int(checks) * per_sync / gpu.mhz * 1000.0  # the check phase runs before the timed one
    result = out.data.view(np.uint64)
    result[0] = round(cycles)
    result[1] = at_launch(gpu).window(checked_ns, checked_ns + cycles / gpu.mhz * 1000.0)
    result[2 : 2 + launch.blocks] = barriers
    if corrupt == "passed":
        result[1 + launch.blocks] = barriers - 1
    sync_ns = per_sync / gpu.mhz * 1000.0
    return (COOPERATIVE_LAUNCH_NS + barriers * sync_ns + int(steps) * WORK_NS) * gpu._jitter() / 1e6


def _step(gpu, launch, out) -> float:
    out.data.view(np.uint32)[: launch.blocks * launch.threads] += np.uint32(1)
    return (gpu.stream_spacing_ns + WORK_NS) * gpu._jitter() / 1e6


KERNELS = {"gp_gs_grid": _grid, "gp_gs_step": _step}

SIMULATION = Simulation(kernels=KERNELS)
