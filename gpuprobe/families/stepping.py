"""Yielding a family's probes as (name, run) pairs, for families whose probes are independent steps.

The measuring child measures each ``run()`` between clock and NVML snapshots and turns a failed
self-check (:class:`~gpuprobe.families.base.ProbeFailure`) into the outcome "failed"
(:mod:`gpuprobe.measure.conditions`); any other exception (a CUDA error) is its isolation's to record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from gpuprobe.families.base import Measured


def runs(
    order: Sequence[str], steps: Mapping[str, Callable[[], Measured]], runnable: set[str]
) -> Iterator[tuple[str, Callable[[], Measured]]]:
    """The runnable probes of ``order`` as (name, run), ``steps[name]`` measuring each."""
    for name in order:
        if name in runnable:
            yield name, steps[name]
