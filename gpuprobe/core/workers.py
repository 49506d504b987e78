"""Running independent CPU-bound jobs side by side, in processes, as many as this process has CPUs."""

from __future__ import annotations

import multiprocessing
import os
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from typing import Any, TypeVar

from gpuprobe.core.errors import GpuprobeError

Result = TypeVar("Result")


def usable_cpus() -> int:
    """The CPUs this process may run on (its affinity where the platform says, else the machine's)."""
    process_cpu_count = getattr(os, "process_cpu_count", None)  # Python 3.13+
    if process_cpu_count is not None:
        return process_cpu_count() or 1
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0)) or 1
    return os.cpu_count() or 1


def map_in_processes(
    function: Callable[..., Result],
    jobs: Sequence[tuple[Any, ...]],
    on_done: Callable[[int], None] = lambda index: None,
) -> list[Result]:
    """``function(*job)`` for each job, in order, in at most :func:`usable_cpus` processes; ``on_done(i)`` is
    called here as job ``i`` finishes (in the order they finish), for a progress line.

    One job, or one CPU, runs here without starting a process. ``function`` and the jobs must pickle;
    the processes are started fresh (spawned), never forked from a caller that may hold threads. The
    first job to fail (or an interruption) cancels the jobs not yet started, waits for those running,
    and is raised here; a worker process that dies (the OOM killer, a ``kill``) is a one-line GpuprobeError."""
    workers = min(len(jobs), usable_cpus())
    if workers <= 1:
        results: list[Result] = []
        for index, job in enumerate(jobs):
            results.append(function(*job))
            on_done(index)
        return results
    with ProcessPoolExecutor(max_workers=workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        futures = {pool.submit(function, *job): index for index, job in enumerate(jobs)}
        try:
            for future in as_completed(futures):
                future.result()  # a job's failure is raised here
                on_done(futures[future])
        except BrokenProcessPool:
            pool.shutdown(cancel_futures=True)
            raise GpuprobeError("a worker process died before its job ended (killed, or out of memory)") from None
        except BaseException:
            pool.shutdown(cancel_futures=True)
            raise
        return [future.result() for future in futures]
