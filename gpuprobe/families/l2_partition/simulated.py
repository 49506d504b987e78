"""Simulated L2-partition kernel (ptx/l2_partition/l2_partition.ptx) for the simulated GPU.

The chase follows the pointers really written in the simulated memory. Each launch places its
blocks on the SMs in a random order (one per SM), and the SMs' ids (%smid) are not 0 to SM count - 1
but :func:`sm_ids`, with gaps and beyond the count, as on parts whose disabled SMs keep their numbers.
A split L2 is modelled as the parts behave:
SM ``s`` is on side ``(s // 2) % 2``, a line's home side is a hash of its address, a first read
from the home side is near, from the other side far, and once a side read a line it keeps a copy
(near from then on) until the L2 is flushed; a line not written since the last flush is a DRAM
miss. Two imperfections a real H200 showed (reports/nvidia-h200: 62% of the readings fast where a
two-sided model expects half) can be added to a split L2: ``both_sides``, the share of BLOCK-byte
address blocks whose lines read near from every SM (some address groups of its map read fast from
all SMs), and ``close_gpcs``, GPCs (of GPC_SMS SMs, by id) whose SMs read the far half at CLOSE_FAR,
inside the near cluster (its SMs 124-131 read every line at 255-316 cycles). Each SM reads the L2
SM_SPREAD nearer or farther than the next (its distance to the crossbar: the H200's SMs read their near
half at 258-303 cycles), so the SMs' near latencies spread as a real part's do. An unsplit L2 has
latencies that vary smoothly with the SM and the line (as measured on an L40), with no two clusters.
``configure(gpu, split=..., fault=..., both_sides=..., close_gpcs=...)`` picks the model and a
fault: "wrong_end", "duplicate_sm", "no_wait".
"""

from __future__ import annotations

from functools import cache
from typing import Any

import numpy as np

from gpuprobe.families.l2_partition import LOADS, RECORD_WORDS
from gpuprobe.simulated.simulation import Simulation

NEAR, FAR, DRAM = 265.0, 475.0, 700.0
UNSPLIT, UNSPLIT_SPREAD = 270.0, 0.1  # one partition: 270 x (1 +- 0.1 per SM +- 0.1 per line)
ISSUE = 6.0  # a load and a clock read issuing, nothing waited for
LINE = 128
BLOCK = 2048  # the address blocks ``both_sides`` picks from
CLOSE_FAR, GPC_SMS = 300.0, 4  # the far half as a close GPC reads it; SMs per simulated GPC
SM_SPREAD = 0.08  # a split L2's latencies from SM s: x (1 +- SM_SPREAD), fixed per SM (sm_distance)


def configure(
    gpu: Any, split: bool = True, fault: str = "", both_sides: float = 0.0, close_gpcs: tuple[int, ...] = ()
) -> Any:
    gpu.l2p_split, gpu.l2p_fault = split, fault
    gpu.l2p_both_sides, gpu.l2p_close_gpcs = both_sides, frozenset(close_gpcs)
    return gpu


@cache
def sm_ids(sm_count: int) -> tuple[int, ...]:
    """The %smid of each of ``sm_count`` SMs: a fixed choice out of ids up to an eighth beyond the count."""
    nsmid = sm_count + max(2, sm_count // 8)
    return tuple(sorted(np.random.default_rng(sm_count).choice(nsmid, sm_count, replace=False).tolist()))


def side_of(sm: int) -> int:
    return (sm // 2) % 2


def home_of(address: int) -> int:
    return bin((address // LINE) & 0x5B).count("1") % 2


@cache
def _unit(key: int, salt: int) -> float:
    """A fixed pseudo-random number in [-1, 1] for ``key``."""
    return float(np.random.default_rng([key, salt]).uniform(-1.0, 1.0))


def near_both_sides(gpu: Any, address: int) -> bool:
    """Whether the line at ``address`` reads near from every SM (its block is among ``both_sides``)."""
    return _unit(address // BLOCK, 3) < 2.0 * getattr(gpu, "l2p_both_sides", 0.0) - 1.0


def sm_distance(sm: int) -> float:
    """The factor SM ``sm``'s reads of a split L2 take: its distance to the L2, within 1 +- SM_SPREAD."""
    return 1.0 + SM_SPREAD * _unit(sm, 4)


def _latency(gpu: Any, sm: int, address: int) -> float:
    jitter = gpu._jitter()
    if address not in gpu.in_l2:
        return DRAM * jitter
    if not getattr(gpu, "l2p_split", True):
        return UNSPLIT * (1 + UNSPLIT_SPREAD * (_unit(sm, 1) + _unit(address // LINE, 2))) * jitter
    side = side_of(sm)
    near = home_of(address) == side or (side, address) in gpu.in_l2  # a copy made by an earlier read
    gpu.in_l2.add((side, address))  # copies live in the L2: a flush drops them
    if near or near_both_sides(gpu, address):
        return NEAR * sm_distance(sm) * jitter
    return (CLOSE_FAR if sm // GPC_SMS in getattr(gpu, "l2p_close_gpcs", ()) else FAR) * sm_distance(sm) * jitter


def touch(gpu: Any, launch: Any, lines: Any, groups: Any, group_bytes: Any, round: Any, out: Any) -> float:
    fault = getattr(gpu, "l2p_fault", "")
    words = lines.data.view(np.uint64)
    base = lines.base
    sms = np.array(sm_ids(gpu.sm_count))[gpu._rng.permutation(gpu.sm_count)[: launch.blocks]]
    if fault == "duplicate_sm":
        sms[1] = sms[0]
    records = out.data.view(np.uint64)
    for block in range(launch.blocks):
        group = (block + int(round)) % int(groups)
        zero = int(words[int(groups) * int(group_bytes) // 8])
        pointer = base + group * int(group_bytes) + zero
        clocks = [1000.0 + 50.0 * block]
        clocks.append(clocks[0] + ISSUE)
        for load in range(LOADS):
            latency = _latency(gpu, int(sms[block]), pointer)
            pointer = int(words[(pointer - base) // 8])
            if load < LOADS - 1:  # the last load's latency is not timed
                clocks.append(clocks[-1] + (ISSUE / 2 if fault == "no_wait" else latency))
        end = pointer + (LINE if fault == "wrong_end" else 0)
        records[block * RECORD_WORDS : (block + 1) * RECORD_WORDS] = [
            *np.round(clocks).astype(np.int64).tolist(),
            end,
            int(sms[block]),
        ]
    return None


KERNELS = {"gp_l2p_touch": touch}

SIMULATION = Simulation(kernels=KERNELS)
