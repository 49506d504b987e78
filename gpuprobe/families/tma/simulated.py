"""The simulated TMA kernels: tile chases that follow the indices written in the tensor, streams that add up
the tiles a correct kernel receives, stores that write the swizzled tile back through the map, and the
cluster streams, each taking the time a simple model gives.

A kernel finds its tensor and box through the simulated tensor map it was given (``SimulatedGpu.mapped``), and
lays a tile into "shared memory" as the TMA does (``Tile.to_shared``: the swizzle the map names). A
launch without a warm lap reads DRAM (the family flushes the L2 before each such launch), one with a lap
reads L2; a stream's tensor that fits half the L2 is read from it. ``model(gpu).corrupt`` breaks one
thing on purpose: "swizzle" (tiles laid in without their swizzle), "chase" (a chase ends one tile on),
"sums" (a block's sum off by one), "store" (a store misses its last row). Nothing it produces is a
measurement.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from gpuprobe.families.bandwidth.simulated import memory_read_gbps
from gpuprobe.families.tma import Settings
from gpuprobe.families.tma.tiles import ROW_BYTES, TILE_COLS, Tile, tile_word_sums
from gpuprobe.families.tma.tiles import tiles as split_tiles
from gpuprobe.simulated.simulation import Simulation

FAST_SETTINGS = Settings(
    l2_tiles=8,
    dram_tiles=64,
    chase_steps=(4, 32),
    dram_min_bytes=1 << 20,
    dram_l2_multiple=2.0,
    dram_passes=(2.0, 16.0),
    sampling=Settings().sampling.at_most(6),
)

EDGE = 40.0
LAUNCH_MS = 0.004
SWIZZLES = {0: "none", 64: "sw64", 128: "sw128"}


@dataclass
class TmaModel:
    """Cycles per tile (a round trip plus the tile's bytes at a rate) and GB/s of the simulated part."""

    latency: dict[str, float] = field(default_factory=lambda: {"l2": 650.0, "dram": 1150.0})
    bytes_per_cycle: float = 64.0
    no_promotion_cost: float = 1.08  # a DRAM tile without L2 promotion takes this much longer
    second_box_cycles: float = 25.0
    read_share: dict[str, float] = field(default_factory=lambda: {"l2": 0.78, "dram": 0.95})  # of the memory's reads
    store_gbps: dict[str, float] = field(default_factory=lambda: {"l2": 6000.0, "dram": 3000.0})
    multicast_gain: dict[int, float] = field(default_factory=lambda: {2: 1.6, 4: 2.4})
    corrupt: str = ""

    def read_gbps(self, gpu, level: str) -> float:
        """A stream of tile loads from ``level``: its share of the simulated memory's read rate there."""
        return self.read_share[level] * memory_read_gbps(gpu, level)


def model(gpu) -> TmaModel:
    return gpu.__dict__.setdefault("tma_model", TmaModel())


def _mapped(gpu, tmap, rows: int, boxes: int, box_rows: int | None = None) -> tuple[np.ndarray, Tile, bool]:
    """The map's tensor (rows x 64 bf16 bits), its tile, and its L2 promotion, after checking the map
    describes what the kernel moves."""
    buffer, tiles_map = gpu.mapped(tmap)
    tile = Tile(int(rows), SWIZZLES[tiles_map.swizzle_bytes])
    assert tiles_map.box_rows == (box_rows or tile.rows), "the map's box is not the kernel's"
    assert tiles_map.box_cols == TILE_COLS // boxes == tile.box_cols, "a box row wider than the swizzle span"
    values = buffer.data[: tiles_map.rows * ROW_BYTES].view(np.uint16).reshape(tiles_map.rows, TILE_COLS)
    return values, tile, tiles_map.l2_promotion_bytes > 0


def _shared(gpu, tile: Tile, values: np.ndarray) -> np.ndarray:
    if model(gpu).corrupt == "swizzle":
        return np.ascontiguousarray(values).view(np.uint8).ravel()  # laid in without the swizzle
    return tile.to_shared(values)


def chase(boxes: int):
    def simulate(gpu, launch, tmap, rows, start, warm, iters, out) -> None:
        m = model(gpu)
        values, tile, promotion = _mapped(gpu, tmap, rows, boxes)
        assert launch.shared_bytes >= tile.bytes + 1024, "the tile (aligned) must fit the dynamic shared memory"
        by_tile = split_tiles(values, tile.rows)
        node = last = int(start)
        for _ in range(int(warm) + int(iters)):
            last, node = node, int(by_tile[node, 0, 0])
        level = "l2" if int(warm) else "dram"
        step = m.latency[level] + tile.bytes / m.bytes_per_cycle + (boxes - 1) * m.second_box_cycles
        step *= m.no_promotion_cost if level == "dram" and not promotion else 1.0
        cycles = EDGE + int(iters) * step * gpu._jitter()
        words = out.data.view(np.uint64)
        words[0], words[1] = round(cycles), round(cycles / gpu.mhz * 1000.0)
        words[2] = node + (1 if m.corrupt == "chase" else 0)
        words[3] = gpu.sm_id
        out.data[32 : 32 + tile.bytes] = _shared(gpu, tile, by_tile[last])

    return simulate


def _level(gpu, values: np.ndarray) -> str:
    return "l2" if values.nbytes <= gpu.l2_bytes // 2 else "dram"


def _block_sums(gpu, values: np.ndarray, rows: int, owners: np.ndarray, groups: int, tile_count: int, steps: int):
    index = (owners[:, None] + np.arange(steps)[None, :] * groups) % tile_count
    sums = tile_word_sums(values, rows)[index].sum(axis=1, dtype=np.uint64)
    if model(gpu).corrupt == "sums":
        sums[len(sums) // 2] += np.uint64(1)
    return sums


def stream(boxes: int):
    def simulate(gpu, launch, tmap, rows, stages, tiles, steps, out) -> float:
        m = model(gpu)
        values, tile, promotion = _mapped(gpu, tmap, rows, boxes)
        blocks, threads, steps, count = launch.blocks, launch.threads, int(steps), int(tiles)
        assert launch.shared_bytes >= int(stages) * tile.bytes + 1024
        per_thread = np.zeros((blocks, threads), dtype=np.uint64)
        per_thread[:, 0] = _block_sums(gpu, values, tile.rows, np.arange(blocks), blocks, count, steps)
        words = out.data.view(np.uint64)
        words[: blocks * threads] = per_thread.ravel()
        last = ((steps - 1) * blocks) % count
        start = blocks * threads * 8
        out.data[start : start + tile.bytes] = _shared(gpu, tile, split_tiles(values, tile.rows)[last])
        level = _level(gpu, values)
        gbps = m.read_gbps(gpu, level) / (m.no_promotion_cost if level == "dram" and not promotion else 1.0)
        return (blocks * steps * tile.bytes / (gbps * 1e9) * 1e3 + LAUNCH_MS) * gpu._jitter()

    return simulate


def store(boxes: int):
    def simulate(gpu, launch, tmap, rows, tiles, steps, out) -> float:
        m = model(gpu)
        values, tile, _ = _mapped(gpu, tmap, rows, boxes)
        blocks, steps, count = launch.blocks, int(steps), int(tiles)
        written = np.unique((np.arange(blocks)[:, None] + np.arange(steps)[None, :] * blocks) % count)
        stored = tile.stored()
        if m.corrupt == "store":
            stored = stored.copy()
            stored[-1] = 0
        by_tile = values.reshape(count, tile.rows, TILE_COLS)
        by_tile[written] = stored
        out.data.view(np.uint64)[:blocks] = steps
        gbps = m.store_gbps[_level(gpu, values)]
        return (blocks * steps * tile.bytes / (gbps * 1e9) * 1e3 + LAUNCH_MS) * gpu._jitter()

    return simulate


def cast(kind: str, size: int):
    def simulate(gpu, launch, tmap, rows, stages, tiles, steps, out) -> float:
        m = model(gpu)
        box_rows = int(rows) // size if kind == "multicast" else int(rows)
        values, tile, _ = _mapped(gpu, tmap, rows, 1, box_rows)
        blocks, threads, steps = launch.blocks, launch.threads, int(steps)
        assert blocks % size == 0, f"whole clusters of {size}"
        per_thread = np.zeros((blocks, threads), dtype=np.uint64)
        owners = np.arange(blocks) // size
        per_thread[:, 0] = _block_sums(gpu, values, tile.rows, owners, blocks // size, int(tiles), steps)
        out.data.view(np.uint64)[: blocks * threads] = per_thread.ravel()
        gbps = m.read_gbps(gpu, _level(gpu, values)) * (m.multicast_gain[size] if kind == "multicast" else 1.0)
        return (blocks * steps * tile.bytes / (gbps * 1e9) * 1e3 + LAUNCH_MS) * gpu._jitter()

    return simulate


KERNELS = {
    **{f"gp_tma_chase_x{boxes}": chase(boxes) for boxes in (1, 2)},
    **{f"gp_tma_stream_x{boxes}": stream(boxes) for boxes in (1, 2)},
    **{f"gp_tma_store_x{boxes}": store(boxes) for boxes in (1, 2)},
    **{f"gp_tma_{kind}_c{c}": cast(kind, c) for kind in ("unicast", "multicast") for c in (2, 4)},
}

SIMULATION = Simulation(kernels=KERNELS, fast_settings=FAST_SETTINGS)
