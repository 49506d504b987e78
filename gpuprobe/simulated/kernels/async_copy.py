"""The simulated async-copy kernels: chases that walk the chain they are given, and streams that
report the sums a correct kernel reports, each taking the time a simple model gives."""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpuprobe.families.async_copy import Settings
from gpuprobe.families.streams import PATTERN_MULTIPLIER
from gpuprobe.simulated.kernels.kernel_sums import chunk_totals, thread_totals

# Settings sized for the simulated GPU: small grids and sources, many passes over them so that the copy
# time dwarfs the simulated launches' jitter.
FAST_SETTINGS = Settings(
    stream_threads=32,
    bulk_threads=32,
    dsm_stream_threads=32,
    dram_min_bytes=1 << 20,
    dram_passes=(1, 20),
    l2_passes=(8, 400),
    bulk_points=((1024, 8), (4096, 2), (16384, 4)),
    budget_s=0.0,
    max_repeats=4,
)

EDGE = 40.0  # cycles a timed chase pays once (pipeline fill and drain)
LAUNCH_MS = 0.004


@dataclass
class AsyncModel:
    """Latencies (cycles per step) and rates (GB/s) of the simulated part, and a fault to inject."""

    cp_async: dict[str, float] = field(default_factory=lambda: {"ca": 60.0, "cg": 300.0})
    bulk_base: float = 500.0  # a bulk copy's round trip: this plus its bytes at bulk_bytes_per_cycle
    bulk_bytes_per_cycle: float = 64.0
    dsm: dict[int, float] = field(default_factory=lambda: {0: 32.0, 1: 190.0})  # by target rank
    copy_gbps: dict[str, float] = field(default_factory=lambda: {"dram": 3000.0, "l2": 9000.0})
    cp_async_gain: float = 1.1  # cp.async's rate over the plain path's
    bulk_gbps: float = 3200.0  # reached with 64 KiB or more in flight per block
    dsm_gbps: dict[int, float] = field(default_factory=lambda: {0: 30000.0, 1: 12000.0})
    corrupt: str = ""  # "chase": a chase ends one node off; "sums": a stream reports a wrong sum


def model(gpu) -> AsyncModel:
    """The async-copy model of one simulated GPU (made on first use)."""
    return gpu.__dict__.setdefault("async_model", AsyncModel())


def _finish_chase(gpu, out, cycles_per_step: float, steps: int, end: int) -> None:
    cycles = EDGE + steps * cycles_per_step * gpu._jitter()
    words = out.data.view(np.uint64)
    words[0], words[1] = round(cycles), round(cycles / gpu.mhz * 1000.0)
    words[2] = end
    out.data.view(np.uint32)[6] = gpu.sm_id


def _walk_global(gpu, start: int, steps: int, stride: int) -> int:
    """Follow the 64-bit addresses stored at each node; ``stride`` bytes past the end when corrupt."""
    buffer, _ = gpu.buffer_at(int(start))
    words = buffer.data.view(np.uint64)
    pointer = int(start)
    for _ in range(steps):
        pointer = int(words[(pointer - buffer.base) // 8])
    return pointer + (stride if model(gpu).corrupt == "chase" else 0)


def _cp_async_chase(cache: str):
    def simulate(gpu, launch, start, warm, iters, out) -> None:
        steps = int(warm) + int(iters) * 16
        _finish_chase(gpu, out, model(gpu).cp_async[cache], int(iters) * 16, _walk_global(gpu, start, steps, 128))

    return simulate


def bulk_chase(gpu, launch, start, size, warm, iters, out) -> None:
    m = model(gpu)
    assert launch.shared_bytes >= int(size), "the node must fit the dynamic shared memory"
    latency = m.bulk_base + int(size) / m.bulk_bytes_per_cycle
    _finish_chase(gpu, out, latency, int(iters), _walk_global(gpu, start, int(warm) + int(iters), int(size)))


def dsm_chase(gpu, launch, successors, nodes, stride, start, target, warm, iters, out) -> None:
    assert launch.grid[0] % 2 == 0, "clusters of two"
    succ = successors.data.view(np.uint32)[: int(nodes)] // int(stride)
    node = int(start)
    for _ in range(int(warm) + int(iters) * 32):
        node = int(succ[node])
    end = node * int(stride) + (int(stride) if model(gpu).corrupt == "chase" else 0)
    _finish_chase(gpu, out, model(gpu).dsm[int(target)], int(iters) * 32, end)


def _corrupt(gpu, sums: np.ndarray) -> np.ndarray:
    if model(gpu).corrupt == "sums":
        sums[len(sums) // 3] += np.uint64(1)
    return sums


def _copy_stream(plain: bool):
    def simulate(gpu, launch, src, iters, passes, out) -> float:
        threads = launch.blocks * launch.threads
        nbytes = int(iters) * threads * 64
        sums = thread_totals(src.data[:nbytes].view(np.uint32), threads)
        out.data.view(np.uint64)[:threads] = _corrupt(gpu, sums[np.arange(threads) ^ 1] * np.uint64(int(passes)))
        m = model(gpu)
        gbps = m.copy_gbps["l2" if nbytes <= gpu.l2_bytes // 2 else "dram"] * (1.0 if plain else m.cp_async_gain)
        return (int(passes) * nbytes / (gbps * 1e9) * 1e3 + LAUNCH_MS) * gpu._jitter()

    return simulate


def bulk_stream(gpu, launch, src, size, stages, chunks, steps, out) -> float:
    size, steps, chunks, blocks = int(size), int(steps), int(chunks), launch.blocks
    chunk_sums = chunk_totals(src.data[: chunks * size].view(np.uint32)).reshape(chunks, -1).sum(axis=1)
    index = (np.arange(blocks)[:, None] + np.arange(steps)[None, :] * blocks) % chunks
    per_thread = np.zeros((blocks, launch.threads), dtype=np.uint64)
    per_thread[:, 0] = chunk_sums[index].sum(axis=1, dtype=np.uint64)  # only the block's total is checked
    out.data.view(np.uint64)[: per_thread.size] = _corrupt(gpu, per_thread.ravel())
    in_flight = size * int(stages)
    gbps = model(gpu).bulk_gbps * min(1.0, in_flight / 65536)
    return (blocks * steps * size / (gbps * 1e9) * 1e3 + LAUNCH_MS) * gpu._jitter()


def dsm_stream(gpu, launch, peer, iters, out) -> float:
    assert launch.grid[0] % 2 == 0, "clusters of two"
    threads = launch.threads
    rows = []
    for block in range(launch.blocks):
        rank_read = (block % 2) ^ int(peer)
        words = np.arange(threads * 16, dtype=np.uint32) * np.uint32(PATTERN_MULTIPLIER) + np.uint32(rank_read)
        rows.append(thread_totals(words.astype(np.uint32), threads) * np.uint64(int(iters)))
    out.data.view(np.uint64)[: launch.blocks * threads] = _corrupt(gpu, np.concatenate(rows))
    nbytes = launch.blocks * threads * 64 * int(iters)
    return (nbytes / (model(gpu).dsm_gbps[int(peer)] * 1e9) * 1e3 + LAUNCH_MS) * gpu._jitter()


KERNELS = {
    "gp_ac_cp_async_chase_ca": _cp_async_chase("ca"),
    "gp_ac_cp_async_chase_cg": _cp_async_chase("cg"),
    "gp_ac_bulk_chase": bulk_chase,
    "gp_ac_dsm_chase": dsm_chase,
    "gp_ac_copy_cp_async": _copy_stream(plain=False),
    "gp_ac_copy_plain": _copy_stream(plain=True),
    "gp_ac_bulk_stream": bulk_stream,
    "gp_ac_dsm_stream": dsm_stream,
}
