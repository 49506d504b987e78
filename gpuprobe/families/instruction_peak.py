"""The tensor cores' instruction peak as this run measured it, per input type, for a library's rate to be set
against at the clock the library ran at.

The wgmma family (sm_90a) and the mma family (mma.sync, every arch with tensor cores) each measure, per input
type, the dense rate their best kernel reaches per SM per clock. Each records it here (:func:`record`) in the
run's state, which crosses into later measuring processes; the best of the two per type is the instruction peak
(on Hopper, wgmma's: mma.sync reaches about two thirds of it). A library measured later (the ladder family's
cuBLAS, cuBLASLt, PyTorch, Triton) reads the peak at its own witnessed SM clock (:func:`at_clock`): its fraction
of the instruction peak is then the same clock's work against the same clock's work, whatever the clock was.

Types carry the wgmma family's names: ``bf16``, ``f16``, ``tf32``, ``e4m3``, ``s8`` (mma.sync's ``int8`` is
``s8`` here). A flop counts a multiply-add as 2, an integer multiply-add as 2 ops.
"""

from __future__ import annotations

from collections.abc import Iterable, MutableMapping
from dataclasses import dataclass
from typing import Any

import numpy as np

STATE_KEY = "instruction_peak"  # state: {type: {"flop_per_clock_per_sm": [...], "source": probe name}}
TYPES = ("bf16", "f16", "tf32", "e4m3", "s8")
MMA_SYNC_TYPES = {"f16": "f16", "bf16": "bf16", "tf32": "tf32", "int8": "s8", "e4m3": "e4m3"}  # its dense
# f32- (or s32-) accumulating types, by the mma family's variant name


@dataclass(frozen=True)
class Peak:
    """The instruction peak of one type at one clock: TFLOP/s (TOP/s for s8), and the probe that measured it."""

    tflops: float
    flop_per_clock_per_sm: float
    source: str


def record(state: MutableMapping[str, Any], dtype: str, flop_per_clock_per_sm: Iterable[float], source: str) -> None:
    """Keep ``source``'s samples of ``dtype``'s dense flop per clock per SM as the type's instruction peak,
    unless a probe already recorded a higher median (the best instruction is the peak)."""
    if dtype not in TYPES:
        raise ValueError(f"instruction_peak.record: {dtype!r} is none of {', '.join(TYPES)}")
    samples = [float(v) for v in flop_per_clock_per_sm]
    if not samples or not all(np.isfinite(samples)) or min(samples) <= 0:
        raise ValueError(f"instruction_peak.record: {source} gave {dtype} no positive finite samples: {samples}")
    peaks = state.setdefault(STATE_KEY, {})
    held = peaks.get(dtype)
    if held is None or float(np.median(samples)) > float(np.median(held["flop_per_clock_per_sm"])):
        peaks[dtype] = {"flop_per_clock_per_sm": samples, "source": source}


def at_clock(state: MutableMapping[str, Any], dtype: str, sm_count: int, mhz: float) -> Peak | None:
    """``dtype``'s instruction peak on ``sm_count`` SMs at ``mhz``; None where no probe of this run measured
    it (the wgmma and mma families were not run, or their probe of this type did not hold its contract)."""
    held = state.get(STATE_KEY, {}).get(dtype)
    if not held:
        return None
    per_clock = float(np.median(held["flop_per_clock_per_sm"]))
    return Peak(per_clock * sm_count * mhz * 1e6 / 1e12, per_clock, str(held["source"]))


def missing_reason(dtype: str) -> str:
    """Why a fraction of ``dtype``'s instruction peak is not measured when :func:`at_clock` finds none."""
    return (f"no {dtype} instruction peak was measured in this run (the wgmma family on sm_90a, or the mma "
            "family's dense mma.sync, must run before the ladder)")  # fmt: skip
