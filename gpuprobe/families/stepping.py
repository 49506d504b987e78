"""Yielding a family's probes as (name, run) pairs, for families whose probes are independent steps.

``run()`` measures one probe and records the NVML readings before and after; a probe whose own
check fails (:class:`~gpuprobe.families.base.ProbeFailure`) comes back "failed" with no facts. Any
other exception (a CUDA error) propagates, for the caller's isolation to record.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence

from gpuprobe.families.base import Measured, ProbeFailure
from gpuprobe.gpu import Launcher
from gpuprobe.results import ProbeOutcome


def runs(
    order: Sequence[str], steps: Mapping[str, Callable[[], Measured]], runnable: set[str], launcher: Launcher
) -> Iterator[tuple[str, Callable[[], Measured]]]:
    """The runnable probes of ``order`` as (name, run), ``steps[name]`` measuring each."""

    def run(name: str) -> Measured:
        conditions = {"nvml_before": launcher.nvml()}
        try:
            measured = steps[name]()
        except ProbeFailure as exc:
            measured = Measured(name, ProbeOutcome("failed", str(exc)))
        conditions["nvml_after"] = launcher.nvml()
        measured.outcome.conditions = conditions
        return measured

    for name in order:
        if name in runnable:
            yield name, lambda name=name: run(name)
