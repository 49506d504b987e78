"""The launch family's kernels on the simulated GPU: each stamp launch moves the simulated %globaltimer
on by the spacing of the kind of launch now enqueued (``gpu.gap_ns``), stamps the next slot with the
timer as it reads, in whole ticks (:mod:`gpuprobe.simulated.timer`), and holds for ``hold`` ns.

``gpu.corrupt_launch`` breaks a result on purpose: "skip" (a launch does not count itself), "order"
(a stamp earlier than the one before it). :func:`busy_host` makes the host's enqueueing cost what it
costs on a real machine: spread from launch to launch, with now and then a stall.
"""

from __future__ import annotations

import itertools
from collections.abc import Collection
from typing import Any

import numpy as np

from gpuprobe.simulated.simulation import Simulation
from gpuprobe.simulated.timer import continuous

STALL_US = 2500.0  # an interrupt, a page fault or a GC pause on a busy host: longer than the default 2 ms hold
REALISTIC_ENQUEUE_US = {"cupy": 6.5, "cuda-bindings": 3.0}  # CuPy takes 5 to 8 us per launch from Python


def _stamp(gpu, launch, counter, capacity, hold, out) -> float:
    corrupt = getattr(gpu, "corrupt_launch", "")
    gap = gpu.gap_ns * gpu._jitter()
    gpu.timer_ns += gap
    words = counter.data.view(np.uint32)
    slot = int(words[0])
    words[0] += 0 if corrupt == "skip" and slot == 3 else 1
    if slot < int(capacity):
        stamp = gpu.timer_ns - (10 * gap if corrupt == "order" and slot == 5 else 0.0)
        out.data.view(np.uint64)[slot] = continuous(gpu).read(stamp)
    gpu.timer_ns += int(hold)
    return (gap + int(hold)) / 1e6


KERNELS = {"gp_launch_stamp": _stamp}


def busy_host(gpu: Any, stalls: Collection[int] = (), stall_us: float = STALL_US) -> Any:
    """``gpu`` with a host whose enqueue costs vary from launch to launch (75 to 125 % of
    ``gpu.enqueue_us``, uniformly) and whose enqueue calls numbered in ``stalls`` (from 1, every call
    counted: a holding launch's too) stall ``stall_us`` on top. The launches themselves still run."""
    enqueue = gpu.enqueue_seconds
    calls = itertools.count(1)

    def seconds(kernel, grid, block, args, count, via="cupy", wait=True) -> float:
        enqueue(kernel, grid, block, args, count, via, wait)  # runs them; refuses a path that is not installed
        spread = float(gpu._rng.uniform(0.75, 1.25, count).sum()) * gpu.enqueue_us[via] * 1e-6
        return spread + (stall_us * 1e-6 if next(calls) in stalls else 0.0)

    gpu.enqueue_seconds = seconds
    return gpu


SIMULATION = Simulation(kernels=KERNELS)
