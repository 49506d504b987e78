"""What the fake ncu counts: each kernel launch of the simulated GPU, as Nsight Compute's counters would.

Installed in a process the fake ncu wraps (``inject/sitecustomize.py``), it logs every launch of the simulated
GPU (:class:`gpuprobe.simulated.gpu.SimulatedGpu`) with the NVTX push/pop ranges open around it and its counters,
one JSON line each, into ``$FAKE_NCU_LOG_DIR/<pid>.jsonl``. The counters come from the launch itself (its
kernel, grid and arguments), not from any probe's claim:

* a goodput pattern (``gp_bw_pattern_v*``) makes DRAM move every ``G``-byte unit each warp request touches, ``G``
  the hardware's granule (``$FAKE_NCU_DRAM_GRANULE``, else the simulated part's ``bw_dram_granule``), and the L2
  serve every 32-byte sector it touches;
* a stream read, write or copy (``gp_bw_{read,write,copy}_*``) moves its bytes through the L2, and to or from
  DRAM when its footprint outgrows the L2 (else DRAM serves a read's first pass, and writes stay in L2);
* a goodput walk or gather (``gp_bw_walk_v*``, ``gp_bw_gather_v16``, and their stores ``gp_bw_walk_store_b*``,
  ``gp_bw_scatter_b128``) makes the L2 serve every 32-byte sector each warp request touches, and a gather's row
  indices once a pass (L1 keeps them); a footprint beyond the L2 makes DRAM read every ``G``-byte unit a pass
  touches (``G`` as above) or write back every 32-byte sector it dirtied, each pass;
* a global->shared copy (``gp_ac_copy_*``) reads its source through the L2 every pass, from DRAM when the source
  outgrows half the L2; its shared-memory wavefronts and bank conflicts are those of its PTX's addresses (the
  simulated kernel's own model: :func:`gpuprobe.families.async_copy.simulated.wavefronts`), loads and stores
  counted apart, cp.async's writes in neither (ncu counts them as LDGSTS);
* anything else moves nothing the witness asks about.
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from gpuprobe.families.async_copy import STREAM_CHUNK_BYTES, WARP
from gpuprobe.families.async_copy.simulated import probe_ptx, shared_accesses, wavefronts
from gpuprobe.families.bandwidth.simulated import DEFAULTS, walk_accesses
from gpuprobe.runner.launcher import xyz
from gpuprobe.simulated import gpu as simulated

SECTOR = 32
WAVEFRONT_BYTES = 128
ACCESSES = 4  # a bandwidth kernel's accesses per thread per iteration
_ranges: list[str] = []  # this thread's NVTX push/pop stack, outermost first


def zero() -> dict[str, float]:
    return {
        "dram__bytes_read.sum": 0.0,
        "dram__bytes_write.sum": 0.0,
        "lts__t_sectors_srcunit_tex_op_read.sum": 0.0,
        "lts__t_sectors_srcunit_tex_op_write.sum": 0.0,
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum": 0.0,
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum": 0.0,
        "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum": 0.0,
        "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum": 0.0,
    }


def granule(gpu: Any) -> int:
    planted = os.environ.get("FAKE_NCU_DRAM_GRANULE")
    return int(planted) if planted else int(getattr(gpu, "bw_dram_granule", DEFAULTS["bw_dram_granule"]))


def units(offset: int, lane_stride: int, width: int, unit: int) -> int:
    """Distinct ``unit``-byte units one warp request of a pattern touches."""
    starts = offset + np.arange(WARP) * lane_stride
    return len({int(b) // unit for s in starts for b in (s, s + width - 1)})


def pattern(gpu: Any, launch: Any, p: dict[str, Any], width: int) -> dict[str, float]:
    requests = launch.blocks * launch.threads // WARP * ACCESSES * int(p["iters"]) * int(p["passes"])
    offset, stride, g = int(p["src"]) % 128, int(p["lane_stride"]), granule(gpu)
    counted = zero()
    counted["dram__bytes_read.sum"] = float(requests * units(offset, stride, width, g) * g)
    counted["lts__t_sectors_srcunit_tex_op_read.sum"] = float(requests * units(offset, stride, width, SECTOR))
    return counted


def touched(offsets: np.ndarray, width: int, unit: int, owners: np.ndarray | None = None) -> int:
    """The ``unit``-byte units accesses of ``width`` bytes at ``offsets`` touch, each owner's counted apart (a warp
    request, a row; None: each unit once)."""
    flat = offsets.reshape(-1).astype(np.int64)
    owner = np.zeros_like(flat) if owners is None else owners.reshape(-1).astype(np.int64) << 32  # units < 2**32
    keys = np.sort(np.concatenate([owner + flat // unit, owner + (flat + width - 1) // unit]))
    return int(1 + np.count_nonzero(np.diff(keys))) if keys.size else 0


def walk(gpu: Any, launch: Any, p: dict[str, Any], width: int, gather: bool, store: bool) -> dict[str, float]:
    offsets, rows = walk_accesses(gpu, launch, p, width, gather)
    passes, way = int(p["passes"]), "write" if store else "read"
    requests = np.arange(offsets.size) // WARP  # offsets are [iteration, access, thread]: a request's lanes adjacent
    counted = zero()
    counted[f"lts__t_sectors_srcunit_tex_op_{way}.sum"] = float(passes * touched(offsets, width, SECTOR, requests))
    if gather:  # the row indices, each sector once a pass
        counted["lts__t_sectors_srcunit_tex_op_read.sum"] += passes * touched(rows * 4, 4, SECTOR)
    if int(offsets.max()) + width > gpu.l2_bytes:  # beyond the L2: DRAM moves each unit every pass
        unit = SECTOR if store else granule(gpu)
        # a gather's rows lie at random, far apart in time: none finds its neighbour's unit still in the L2
        counted[f"dram__bytes_{way}.sum"] = float(passes * touched(offsets, width, unit, rows) * unit)
        if gather:
            counted["dram__bytes_read.sum"] += passes * touched(rows * 4, 4, granule(gpu)) * granule(gpu)
    return counted


def stream(gpu: Any, launch: Any, p: dict[str, Any], width: int, ways: tuple[str, ...]) -> dict[str, float]:
    tile = launch.blocks * launch.threads * width * ACCESSES
    footprint = int(p["step"]) * int(p["iters"]) or tile
    moved = float(tile * int(p["iters"]) * int(p["passes"]))
    counted = zero()
    for way in ways:
        counted[f"lts__t_sectors_srcunit_tex_op_{way}.sum"] = moved / SECTOR
    beyond = footprint > gpu.l2_bytes
    if "read" in ways:
        counted["dram__bytes_read.sum"] = moved if beyond else float(footprint)
    if "write" in ways:
        counted["dram__bytes_write.sum"] = moved if beyond else 0.0
    return counted


def global_to_shared(gpu: Any, launch: Any, p: dict[str, Any], kernel: str) -> dict[str, float]:
    steps = int(p["iters"]) * int(p["passes"])
    read = float(steps * launch.blocks * launch.threads * STREAM_CHUNK_BYTES)
    source = int(p["iters"]) * launch.blocks * launch.threads * STREAM_CHUNK_BYTES
    counted = zero()
    counted["lts__t_sectors_srcunit_tex_op_read.sum"] = read / SECTOR
    counted["dram__bytes_read.sum"] = read if source > gpu.l2_bytes // 2 else 0.0
    for access in shared_accesses(probe_ptx(kernel), kernel, launch.threads):
        way = "ld" if access.text.startswith("ld.") else "st" if access.text.startswith("st.") else None
        if way is None:
            continue
        ideal = math.ceil(WARP * access.width / WAVEFRONT_BYTES)
        taken = [wavefronts(access.addresses[w : w + WARP], access.width) for w in range(0, launch.threads, WARP)]
        counted[f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{way}.sum"] += launch.blocks * steps * sum(taken)
        conflicts = sum(t - ideal for t in taken)
        counted[f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{way}.sum"] += launch.blocks * steps * conflicts
    return counted


def count(gpu: Any, kernel: str, launch: Any, p: dict[str, Any]) -> dict[str, float]:
    """What ncu would count of one launch of ``kernel`` (its PTX parameters ``p``)."""
    if match := re.fullmatch(r"gp_bw_pattern_v(\d+)", kernel):
        return pattern(gpu, launch, p, int(match.group(1)))
    if match := re.fullmatch(r"gp_bw_read_c[ag]_v(\d+)", kernel):
        return stream(gpu, launch, p, int(match.group(1)), ("read",))
    if match := re.fullmatch(r"gp_bw_(write|copy)_b(\d+)", kernel):
        ways = ("write",) if match.group(1) == "write" else ("read", "write")
        return stream(gpu, launch, p, int(match.group(2)) // 8, ways)
    if match := re.fullmatch(r"gp_bw_walk_v(\d+)|gp_bw_walk_store_b(\d+)", kernel):
        return walk(gpu, launch, p, int(match.group(1) or int(match.group(2)) // 8), False, match.group(2) is not None)
    if kernel in ("gp_bw_gather_v16", "gp_bw_scatter_b128"):
        return walk(gpu, launch, p, 16, True, kernel == "gp_bw_scatter_b128")
    if kernel.startswith("gp_ac_copy_"):
        return global_to_shared(gpu, launch, p, kernel)
    return zero()


def install(log_dir: Path) -> None:
    """Log every launch of the simulated GPU in this process, with its ranges and counters (see the module)."""
    launched = simulated.SimulatedGpu._launch
    log = log_dir / f"{os.getpid()}.jsonl"

    def counted_launch(self: Any, kernel: str, grid: Any, block: Any, args: list[Any], *rest: Any) -> float:
        ms = launched(self, kernel, grid, block, args, *rest)
        launch = simulated.SimulatedLaunch(xyz(grid), xyz(block))
        names = [name for _, name in simulated.ptx_parameters(self.arch)[kernel]]
        values = [arg.base if isinstance(arg, simulated.SimulatedBuffer) else arg for arg in args]
        bound = dict(zip(names, values, strict=True))
        record = {"t": time.time_ns(), "pid": os.getpid(), "tid": threading.get_native_id(), "kernel": kernel,
                  "grid": list(launch.grid), "block": list(launch.block), "ranges": list(_ranges),
                  "counters": count(self, kernel, launch, bound)}  # fmt: skip
        with open(log, "a", encoding="utf-8") as sink:
            sink.write(json.dumps(record) + "\n")
        return ms

    @contextlib.contextmanager
    def nvtx_range(self: Any, name: str) -> Iterator[None]:
        _ranges.append(name)
        try:
            yield
        finally:
            _ranges.pop()

    simulated.SimulatedGpu._launch = counted_launch
    simulated.SimulatedGpu.nvtx_range = nvtx_range
