"""Yielding a family's probes as (name, step) pairs, the one way every family hands its probes over.

The measuring child measures each ``step()`` between clock and NVML snapshots and turns a failed
self-check (:class:`~gpuprobe.core.errors.ProbeFailure`) into the outcome "failed"
(:mod:`gpuprobe.measure.conditions`); any other exception (a CUDA error) is its isolation's to record.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

from gpuprobe.families.base import Measured, Probes


def probe_steps(order: Sequence[str], steps: Mapping[str, Callable[[], Measured]], runnable: set[str]) -> Probes:
    """The runnable probes of ``order`` as (name, step), ``steps[name]`` measuring each."""
    for name in order:
        if name in runnable:
            yield name, steps[name]
