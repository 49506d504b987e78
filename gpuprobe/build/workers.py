"""Running independent CPU-bound jobs side by side, in processes, as many as this process has CPUs."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor
from typing import Any, TypeVar

Result = TypeVar("Result")


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the platform says, else the machine's)."""
    process_cpu_count = getattr(os, "process_cpu_count", None)  # Python 3.13+
    if process_cpu_count is not None:
        return process_cpu_count() or 1
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def map_in_processes(function: Callable[..., Result], jobs: Sequence[tuple[Any, ...]]) -> list[Result]:
    """``function(*job)`` for each job, in order, in at most :func:`usable_cpus` processes.

    One job, or one CPU, runs here without starting a process. ``function`` and the jobs must pickle;
    the processes are started fresh (spawned), never forked from a caller that may hold threads."""
    workers = min(len(jobs), usable_cpus())
    if workers <= 1:
        return [function(*job) for job in jobs]
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return list(pool.map(function, *zip(*jobs, strict=True)))
