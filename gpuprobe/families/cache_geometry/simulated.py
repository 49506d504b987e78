"""The cache-geometry kernels on the simulated GPU (see gpuprobe/simulated/gpu.py).

The global chases follow the pointers really written into simulated memory; the constant chase
follows the .const array parsed from ptx/cache_geometry/cache_geometry.ptx itself, so a host prediction that
disagrees with the PTX's initializer is caught. Timing model, per load (``Model``): an L1 hit when
the load's L1 fill unit is the previous load's or when a warm-up lap in the same launch covered a
cycle that fits the L1 (ca kernels); otherwise an L2 hit when its L2 fill unit was written or
visited since the last flush (``gpu.in_l2``, which a write through twice the L2 clears), else a
DRAM access; plus, off L1, a translation penalty per TLB level whose entries are fewer than the
distinct pages (``Model.tlb_page``) the chased cycle touches, so a chase of one line per page stride
steps at a level's reach (entries x page) while the stride is at most the page, and at entries x
stride beyond; plus the 16-byte kernels' extra cost per level. Nothing it produces is a measurement.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache

import numpy as np

from gpuprobe.families.cache_geometry import CONSTANT_KERNEL, Settings
from gpuprobe.families.sampling import Stopping
from gpuprobe.kernels.ptxsource import expand
from gpuprobe.kernels.registry import unroll_of
from gpuprobe.kernels.source_tree import PTX_DIR
from gpuprobe.simulated.gpu import SimulatedBuffer, SimulatedGpu, SimulatedLaunch
from gpuprobe.simulated.simulation import Simulation

KIB, MIB = 2**10, 2**20

# Short sweeps for the simulated part (16 KiB L1, 512 KiB L2, 64 KiB pages): the TLB strides are a real
# part's (2 MiB, 32 MiB, 512 MiB) scaled as the page is; a session test can pass them as the family's
# settings ({"cache_geometry": FAST_SETTINGS}).
FAST_SETTINGS = Settings(
    short_iterations=2,
    long_iterations=6,
    sampling=Stopping(3, 4, 0.01, 0.3),
    l1_sweep_bytes=64 * KIB,
    tlb_strides=(64 * KIB, 1 * MIB, 16 * MIB),
    tlb_max_bytes=256 * MIB,
    line_min_bytes=2 * KIB,
    line_max_bytes=64 * KIB,
    line_points_per_octave=3,
)


@dataclass(frozen=True)
class Model:
    l1_bytes: int = 16 * KIB
    l1_unit: int = 32
    l1_line: int = 128
    l2_unit: int = 64  # not the L1's, so a test can tell the two fits apart
    l1: float = 33.0
    l2: float = 260.0
    dram: float = 700.0
    wide_extra: dict[str, float] = field(default_factory=lambda: {"l1": 2.0, "l2": 4.0, "dram": 8.0})
    tlb_page: int = 64 * KIB  # the page the simulated driver maps (a real part's 2 MiB, scaled)
    # per TLB level (entries, extra cycles when the cycle's pages outnumber them): reaches of 4 and 32 MiB
    tlb: tuple[tuple[int, float], ...] = ((64, 120.0), (512, 380.0))
    const_hit: float = 18.0
    const_miss: float = 105.0
    const_lines: int = 32  # 64-byte lines the constant L1 holds
    const_divergent: float = 6.0  # extra cycles per further distinct address in a warp load
    corrupt_const: bool = False


def model(gpu: SimulatedGpu) -> Model:
    return getattr(gpu, "cache_geometry", Model())


def _timed(gpu: SimulatedGpu, latencies: list[float], quantity: str) -> float:
    """The cycles of a timed chase: its loads' latencies, off by the run's factor for ``quantity`` (one for
    every global chase, whatever its width: one buffer's pages, whose placement a run shares) and noise."""
    return gpu.clock_read + gpu.edge + float(np.sum(latencies)) * gpu._jitter(quantity)


def _write(gpu: SimulatedGpu, out: SimulatedBuffer, words: list[int]) -> None:
    out.data.view(np.uint64)[: len(words)] = words


def _cycle_pages(gpu: SimulatedGpu, buffer: SimulatedBuffer, start: int, page: int) -> int:
    """The distinct pages of the cycle through ``start``: walked once per cycle, remembered for the next
    launch of the same one (the same buffer, footprint and page, holding ``start`` and its successor)."""
    words = buffer.data.view(np.uint64)
    key = (buffer.base, gpu.cycle_bytes, page, int(words[(start - buffer.base) // 8]))
    known = getattr(gpu, "cache_geometry_cycle", None)
    if known is not None and known[0] == key and start in known[1]:
        return known[2]
    nodes, pointer = set(), start
    while pointer not in nodes:
        nodes.add(pointer)
        pointer = int(words[(pointer - buffer.base) // 8])
    pages = len({node // page for node in nodes})
    gpu.cache_geometry_cycle = (key, nodes, pages)
    return pages


def _translation(m: Model, pages: int) -> float:
    """The extra cycles of a load whose cycle touches ``pages`` pages: every level with fewer entries misses."""
    return sum(extra for entries, extra in m.tlb if pages > entries)


def _chase(gpu: SimulatedGpu, kernel: str, cache_op: str, wide: bool, start, warm, iters, out: SimulatedBuffer) -> None:
    m = model(gpu)
    buffer, _ = gpu.buffer_at(int(start))
    words = buffer.data.view(np.uint64)
    translation = _translation(m, _cycle_pages(gpu, buffer, int(start), m.tlb_page))
    pointer, previous, latencies, warm_lines = int(start), -1, [], set()
    for step in range(int(warm) + int(iters) * unroll_of(kernel)):
        if step < int(warm):
            warm_lines.add(pointer // m.l1_line)
        l1_warm = cache_op == "ca" and int(warm) > 0 and len(warm_lines) * m.l1_line <= m.l1_bytes
        unit = pointer - pointer % m.l2_unit
        in_l1 = cache_op == "ca" and (pointer // m.l1_unit == previous // m.l1_unit or l1_warm)
        level = "l1" if in_l1 else "l2" if unit in gpu.in_l2 else "dram"
        gpu.in_l2.add(unit)
        if step >= int(warm):
            extra = m.wide_extra[level] if wide else 0.0
            latencies.append(getattr(m, level) + extra + (0.0 if in_l1 else translation))
        previous, pointer = pointer, int(words[(pointer - buffer.base) // 8])
    cycles = _timed(gpu, latencies, "cache_geometry.global")
    end = pointer + 128 * int(gpu.corrupt_chase)
    _write(gpu, out, [round(cycles), round(cycles / gpu.mhz * 1000.0), end, 0, 0])
    out.data.view(np.uint32)[6] = gpu.sm_id


def _chaser(cache_op: str, width: str):
    kernel = f"gp_cg_chase_{cache_op}_{width}"

    def simulate(gpu: SimulatedGpu, launch: SimulatedLaunch, start, warm, iters, out) -> None:
        _chase(gpu, kernel, cache_op, width == "v16", start, warm, iters, out)

    return kernel, simulate


@cache
def const_array() -> np.ndarray:
    """gp_cg_const as ptx/cache_geometry/cache_geometry.ptx initializes it, as 32-bit words."""
    path = PTX_DIR / "cache_geometry" / "cache_geometry.ptx"
    text = "\n".join(expand(path.read_text(), str(path)).lines)
    match = re.search(r"\.const\s+\.align\s+\d+\s+\.u32\s+gp_cg_const\[(\d+)\]\s*=\s*\{([^}]*)\}", text)
    assert match, "gp_cg_const is not initialized in ptx/cache_geometry/cache_geometry.ptx"
    values = [int(v) for v in match.group(2).replace("\n", " ").split(",") if v.strip()]
    array = np.zeros(int(match.group(1)), dtype=np.uint32)
    array[: len(values)] = values
    return array


def _const_chase(gpu: SimulatedGpu, launch: SimulatedLaunch, start, lanes, warm, iters, out: SimulatedBuffer) -> None:
    m = model(gpu)
    words = const_array()
    offsets = [int(start) + 4 * (t % int(lanes)) for t in range(launch.threads)]
    distinct_lines: set[int] = set()
    unroll = unroll_of(CONSTANT_KERNEL)
    for _ in range(int(warm) + int(iters) * unroll):
        distinct_lines.update(o // 64 for o in offsets)
        offsets = [int(words[o // 4]) for o in offsets]
    per_load = m.const_miss if len(distinct_lines) > m.const_lines else m.const_hit
    per_load += m.const_divergent * (min(int(lanes), launch.threads) - 1)
    cycles = _timed(gpu, [per_load] * (int(iters) * unroll), "cache_geometry.constant")
    ends = [o + 4 * int(m.corrupt_const) for o in offsets]
    _write(gpu, out, [round(cycles), round(cycles / gpu.mhz * 1000.0), *ends])


KERNELS = {
    **dict(_chaser(c, w) for c in ("ca", "cg") for w in ("v8", "v16")),
    CONSTANT_KERNEL: _const_chase,
}

SIMULATION = Simulation(kernels=KERNELS, fast_settings=FAST_SETTINGS)
