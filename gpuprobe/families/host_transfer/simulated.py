"""The simulated SM-driven host copy (gp_ht_sm_copy): it copies, reports each thread's sums, and
takes the time the host link (or device memory) would."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from gpuprobe.families.host_transfer import CHASE_KERNEL, CHUNK, KERNEL, Settings
from gpuprobe.families.sampling import Stopping
from gpuprobe.kernels.registry import unroll_of
from gpuprobe.simulated.kernel_sums import thread_totals
from gpuprobe.simulated.simulation import Simulation

# Settings sized for the simulated GPU: 4 x 32 threads move 8 KiB per iteration, copies of 1 and 4 MiB (the
# difference, 3 MiB, takes over 50 us, 100 ticks of the CUDA events, at the fastest simulated link).
FAST_SETTINGS = Settings(
    small_bytes=1 << 20, large_bytes=4 << 20, blocks=4, threads=32, latency_copies=4, sampling=Stopping(3, 5, 0.02, 0.0)
)
LAUNCH_MS = 0.005  # what every simulated launch costs on top of its bytes


@dataclass
class HostLink:
    """The simulated link's rates for SM-driven copies, and a fault to inject."""

    read_gbps: float = 24.0  # SMs loading host memory
    write_gbps: float = 26.0  # SMs storing to host memory
    both_gbps: float = 40.0  # host memory to host memory: every byte crosses the link both ways
    device_gbps: float = 2000.0
    load_cycles: float = 2600.0  # one SM load's round trip to host memory
    corrupt: str = ""  # "sums": a wrong thread sum; "data": a wrong destination word; "chase": a wrong end


def link(gpu) -> HostLink:
    """The link settings of one simulated GPU (made on first use)."""
    return gpu.__dict__.setdefault("host_link", HostLink())


def sm_copy(gpu, launch, src, dst, iters, out) -> float:
    threads = launch.blocks * launch.threads
    nbytes = int(iters) * threads * unroll_of(KERNEL) * CHUNK
    dst.data[:nbytes] = src.data[:nbytes]
    words = src.data[:nbytes].view(np.uint32)
    sums = thread_totals(words, threads)
    settings = link(gpu)
    if settings.corrupt == "sums":
        sums[threads // 2] += np.uint64(1)
    if settings.corrupt == "data":
        dst.data[nbytes // 2] ^= 0x10
    out.data.view(np.uint64)[:threads] = sums
    host_src, host_dst = src.base in gpu.pinned, dst.base in gpu.pinned
    if host_src and host_dst:
        gbps = settings.both_gbps
    else:
        gbps = settings.read_gbps if host_src else settings.write_gbps if host_dst else settings.device_gbps
    return (nbytes / (gbps * 1e9) * 1e3 + LAUNCH_MS) * gpu._jitter()


def sm_chase(gpu, launch, start, warm, iters, out) -> None:
    """Follow the addresses stored at each node, as the one-thread chase through host memory does."""
    buffer, _ = gpu.buffer_at(int(start))
    assert buffer.base in gpu.pinned, "the chase runs through pinned host memory"
    words, pointer = buffer.data.view(np.uint64), int(start)
    steps = int(iters) * unroll_of(CHASE_KERNEL)
    for _ in range(int(warm) + steps):
        pointer = int(words[(pointer - buffer.base) // 8])
    settings = link(gpu)
    cycles = 40.0 + steps * settings.load_cycles * gpu._jitter()
    result = out.data.view(np.uint64)
    result[0], result[1] = round(cycles), round(cycles / gpu.mhz * 1000.0)
    result[2] = pointer + (256 if settings.corrupt == "chase" else 0)
    out.data.view(np.uint32)[6] = gpu.sm_id


KERNELS = {KERNEL: sm_copy, CHASE_KERNEL: sm_chase}

SIMULATION = Simulation(kernels=KERNELS, fast_settings=FAST_SETTINGS)
