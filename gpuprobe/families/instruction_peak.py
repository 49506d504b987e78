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

from collections.abc import Iterable, MutableMapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Fact
from gpuprobe.families.measuring import fact, unmeasured

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


TIMER_ALLOWANCE = 1.02  # a library's rate may read this far over the peak at its clock for timer noise, no further


def shares(state: MutableMapping[str, Any], dtype: str, sm_count: int, tflops: Sequence[float], mhz: Sequence[float],
           what: str) -> list[float] | None:  # fmt: skip
    """Each timing's rate (``tflops``) over ``dtype``'s instruction peak at that timing's clock (``mhz``); None where
    this run measured no peak of the type. ProbeFailure naming ``what`` (the library call timed) where one exceeds
    the peak beyond :data:`TIMER_ALLOWANCE`: a library runs the same tensor cores, so its rate cannot."""
    peaks = [at_clock(state, dtype, sm_count, clock) for clock in mhz]
    if any(peak is None for peak in peaks):
        return None
    found = [rate / peak.tflops for rate, peak in zip(tflops, peaks, strict=True) if peak]
    worst = int(np.argmax(found))
    if found[worst] > TIMER_ALLOWANCE:
        peak = peaks[worst]
        raise ProbeFailure(f"{what}: {tflops[worst]:.1f} at {mhz[worst]:.0f} MHz is {found[worst]:.3f} x the {dtype} "
                           f"instruction peak at that clock ({peak.tflops if peak else 0:.1f}, "
                           f"{peak.source if peak else ''}): impossible on the same tensor cores (a wrong clock, "
                           "timing or peak)")  # fmt: skip
    return found


def share_fact(fact_id: str, found: list[float] | None, probe: str, dtype: str) -> Fact:
    """The fraction fact of :func:`shares`' values, or unmeasured with :func:`missing_reason` where there were none."""
    if found is None:
        return unmeasured(fact_id, "fraction", probe, missing_reason(dtype))
    return fact(fact_id, found, "fraction", probe)
