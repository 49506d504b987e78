"""The loaded-latency kernel on the simulated GPU: the chase follows the pointers really written into simulated
memory (a wrong prediction is caught as on a GPU), and the background follows a closed queueing model, so the
demo draws a real curve. Nothing it produces is a measurement.

``N`` streaming warps, each with 2 KiB in flight per round trip, offer ``a = N x 2048 B / (idle latency x
peak)`` of the level's peak (``memory_read_gbps``, the bandwidth simulation's: one memory system per simulated
part, shared out over the SMs that stream, and below what their L1s could take in). A closed queue carries
``u = a / (1 + a)`` of the peak, and its waiting time grows as ``u / (1 - u) = a``: the chase takes ``idle x
(1 + GROWTH x a)`` cycles a step, at most ``CAP`` times idle.

``gpu.loaded_fault`` breaks one thing the host checks: "sums" (a lane summed a wrong word), "sm" (a streamer
on the chaser's SM), "late" (a warp started after the chase began); ``gpu.corrupt_chase`` moves the chase's end.
"""

from __future__ import annotations

import numpy as np

from gpuprobe.families.bandwidth.simulated import memory_read_gbps
from gpuprobe.families.loaded_latency import KERNEL, L1_FILL_BYTES_PER_CLOCK, RECORD_WORDS, WARP_BYTES, Settings
from gpuprobe.families.sampling import Stopping
from gpuprobe.kernels.registry import unroll_of
from gpuprobe.simulated.cache_model import curve
from gpuprobe.simulated.gpu import SimulatedBuffer, SimulatedGpu, SimulatedLaunch
from gpuprobe.simulated.simulation import Simulation

GROWTH = 0.25  # the chase's added wait per unit of offered load, of its idle latency
CAP = 3.0  # the most a step's latency grows, of its idle latency
L1_SHARE = 0.8  # the simulated peak at most this share of what the streaming SMs' L1s take in

# Timed windows of 100 us and more (the chaser's clock reads the SM clock), over a DRAM cycle long enough for them.
FAST_SETTINGS = Settings(iterations=24, run_up_steps=64, dram_chase_l2_multiple=8.0, sampling=Stopping(3, 3, 0.01, 1.0))


def background(gpu: SimulatedGpu, level: str, streaming_sms: int, warps: int, idle_ns: float) -> tuple[float, float]:
    """The background GB/s ``warps`` streaming warps reach, and the factor the chase's latency grows by."""
    if not warps:
        return 0.0, 1.0
    ceiling = L1_SHARE * streaming_sms * L1_FILL_BYTES_PER_CLOCK * gpu.mhz / 1000.0
    peak = min(memory_read_gbps(gpu, level) * streaming_sms / gpu.sm_count, ceiling)
    offered = warps * WARP_BYTES / (idle_ns * peak)
    return peak * offered / (1 + offered), min(CAP, 1 + GROWTH * offered)


def loaded_latency(gpu: SimulatedGpu, launch: SimulatedLaunch, start, warm, iters, src, mask, step, polls, word,
                   flag: SimulatedBuffer, ticket, out: SimulatedBuffer) -> float:  # fmt: skip
    chain, _ = gpu.buffer_at(int(start))
    nodes, pointer = chain.data.view(np.uint64), int(start)
    for _ in range(int(warm) + int(iters) * unroll_of(KERNEL)):
        pointer = int(nodes[(pointer - chain.base) // 8])
    level = "l2" if int(mask) + 1 <= gpu.l2_bytes else "dram"
    idle = float(curve(gpu.hierarchy_l2, [gpu.cycle_bytes], transition="sharp")[0])
    streaming_sms, warps = launch.blocks - 1, launch.threads // 32 * (launch.blocks > 1)
    gbps, growth = background(gpu, level, streaming_sms, streaming_sms * warps, idle / gpu.mhz * 1000.0)
    latency = idle * growth * gpu._jitter()
    cycles = gpu.clock_read + gpu.edge + int(iters) * unroll_of(KERNEL) * latency
    begin = gpu.timer_ns + int(warm) * latency / gpu.mhz * 1000.0 + 1.0
    end = begin + cycles / gpu.mhz * 1000.0
    fault = getattr(gpu, "loaded_fault", None)
    chaser_sm = gpu.sm_id % gpu.sm_count
    records = out.data.view(np.uint64)
    records[:RECORD_WORDS] = [round(cycles), round(begin), round(end), pointer + 128 * int(gpu.corrupt_chase),
                              chaser_sm]  # fmt: skip
    others = [sm for sm in range(gpu.sm_count) if sm != chaser_sm]
    for index in range(streaming_sms * warps):
        first, last = (begin + 1.0 if fault == "late" and index == 0 else gpu.timer_ns), end + 100.0
        iterations = round(gbps / (streaming_sms * warps) * (last - first) / WARP_BYTES)
        sm = chaser_sm if fault == "sm" and index == 0 else others[index // warps]
        wrong = 1 if fault == "sums" and index == 0 else 0
        row = (1 + index) * RECORD_WORDS
        records[row : row + RECORD_WORDS] = [iterations, round(first), round(last), sm, wrong]
    flag.data.view(np.uint64)[0] = int(ticket)
    gpu.timer_ns = end + 200.0
    return (end - begin) / 1e6


SIMULATION = Simulation(kernels={KERNEL: loaded_latency}, fast_settings=FAST_SETTINGS)
