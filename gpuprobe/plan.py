"""The run's time plan: what each family expects to cost on a device, in seconds, before any GPU time is spent.

Every family counts its own work (:class:`~gpuprobe.families.base.Plan`: probes, launcher calls, GPU
and host seconds) from its settings and the device's properties; one cost model here turns the
counts into seconds, so the families are comparable and a real run can correct the model once.
"""

from __future__ import annotations

from gpuprobe.families.base import Plan

# The cost model. Guesses until a real run records planned against actual seconds per family.
CHILD_START_S = 4.0  # a measuring process: Python, NumPy and CuPy imported, the context made, the cubin loaded
CALL_S = 250e-6  # one launcher call that waits for the GPU: enqueue, synchronize, a fill or a read-back
SNAPSHOT_S = 0.02  # the clock spin (settled) and the NVML readings around a probe, before or after it


def family_seconds(plan: Plan, child_start: bool = True) -> float:
    """Wall seconds a family's ``plan`` is expected to take, with (by default) its measuring process's start."""
    overhead = plan.launches * CALL_S + 2 * plan.probes * SNAPSHOT_S
    return (CHILD_START_S if child_start else 0.0) + plan.gpu_s + plan.host_s + overhead
