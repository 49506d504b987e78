"""The simulated p2p kernels: the SM copy (gp_p2p_copy) and the chase (gp_p2p_chase) run on one GPU of a
simulated node (gpuprobe/simulated/peers.py) and reach the others' memory by address, faulting where peer access
was never enabled, as a GPU does; they take the time the link between the two would."""

from __future__ import annotations

import numpy as np

from gpuprobe.families.p2p import CHASE_KERNEL, CHUNK, COPY_KERNEL, Settings
from gpuprobe.families.sampling import Stopping
from gpuprobe.kernels.registry import unroll_of
from gpuprobe.simulated.kernel_sums import thread_totals
from gpuprobe.simulated.peers import owner_of
from gpuprobe.simulated.simulation import Simulation

# Settings sized for the simulated node: 4 x 32 threads move 8 KiB per iteration, copies of 8 and 32 MiB (the
# difference, 24 MiB, takes over 50 us, 100 ticks of the CUDA events, on the fastest simulated link).
FAST_SETTINGS = Settings(small_bytes=8 << 20, large_bytes=32 << 20, blocks=4, threads=32,
                         sampling=Stopping(3, 5, 0.02, 0.0), chase_nodes=64, chase_iterations=(2, 8))  # fmt: skip
LAUNCH_MS = 0.0005  # what a simulated launch costs on top of its bytes (kept small: the copies are small)


def _device(gpu) -> int:
    return gpu.node_index


def sm_copy(gpu, launch, src, dst, iters, out) -> float:
    device, node = _device(gpu), gpu.node
    threads = launch.blocks * launch.threads
    nbytes = int(iters) * threads * unroll_of(COPY_KERNEL) * CHUNK
    source, src_offset = gpu.buffer_at(src)
    target, dst_offset = gpu.buffer_at(dst)
    reader, writer = owner_of(source.base), owner_of(target.base)
    if node is not None:
        node.require_access(device, source.base)
        node.require_access(device, target.base)
    words = source.data[src_offset : src_offset + nbytes]
    landed = nbytes // 2 if node is not None and node.node.corrupt == "sm_write" and writer != device else nbytes
    target.data[dst_offset : dst_offset + landed] = words[:landed]
    out.data.view(np.uint64)[:threads] = thread_totals(words.view(np.uint32), threads)
    if reader == writer or node is None:
        gbps = node.node.local_gbps if node is not None else 2000.0
    else:
        share = node.node.sm_read_share if writer == device else node.node.sm_write_share
        gbps = node.node.rate((reader, writer)) * share
    return (nbytes / (gbps * 1e9) * 1e3 + LAUNCH_MS) * gpu._jitter()


def chase(gpu, launch, start, warm, iters, out) -> None:
    """Follow the addresses stored at each node, in whichever GPU's memory they are."""
    node, device = gpu.node, _device(gpu)
    buffer, _ = gpu.buffer_at(int(start))
    owner = owner_of(buffer.base)
    node.require_access(device, buffer.base)
    words, pointer, timed = buffer.data.view(np.uint64), int(start), int(iters) * unroll_of(CHASE_KERNEL)
    for _ in range(int(warm) + timed):
        pointer = int(words[(pointer - buffer.base) // 8])
    link = node.node.kind((owner, device))[0]
    cycles = 40.0 + timed * node.node.load_cycles[link] * gpu._jitter()
    result = out.data.view(np.uint64)
    result[0], result[1] = round(cycles), round(cycles / gpu.mhz * 1000.0)
    result[2] = pointer
    out.data.view(np.uint32)[6] = gpu.sm_id


KERNELS = {"gp_p2p_copy": sm_copy, "gp_p2p_chase": chase}

SIMULATION = Simulation(kernels=KERNELS, fast_settings=FAST_SETTINGS)
