"""A library's work timed at a witnessed SM clock: what the wgmma, power and ladder families (and any family timing
work it did not write: cuBLAS, cuBLASLt, a framework's matmul) share.

A library's kernels cannot read %clock64 for us, so the clock they ran at is witnessed from outside: a clock-stamp
kernel (:func:`clock_stamp_text`, one copy per family's cubin, under the family's own name) is launched on the same
stream right before the timed batch (slot 0) and right after it (slot 1), two blocks per SM of one thread each.
Per SM that ran a stamp of each, its cycles between its two stamps over the ns between them is the clock it ran the
batch at (:func:`bracket_mhz`; %clock64 counts per SM and is never compared across SMs). The batch is timed by CUDA
events inside the stamps; :func:`bracket` does the poisoning, the read-back and the check around any launcher call
that takes a stamp, :func:`time_gemms` around the launcher's GEMMs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.families.base import Request
from gpuprobe.families.measuring import TIMER_TICK_NS, clock_mhz
from gpuprobe.runner.checked import POISON_BYTE, unwritten
from gpuprobe.runner.launcher import Gemm, GemmShape, Stamp, capability

STAMP_WORDS = 4  # u64 per block of a stamp: %clock64, %globaltimer, %smid, slot
STAMPS_PER_SM = 2  # clock-stamp blocks per SM, so that every SM likely runs one before and one after


def clock_stamp_text(name: str) -> str:
    """The clock stamp kernel ``name(slot, out)``: each block's first thread stores its SM's %clock64 and the
    %globaltimer, read back to back, with its %smid and ``slot`` at ``out + 32 x (slot x blocks + block)``.
    Launched right before a batch of work (slot 0) and right after it (slot 1) on the same stream, an SM's cycles
    between its two stamps over the ns between them is the clock the SM ran the batch at."""
    return "\n".join([
        "// The SM clock around work written elsewhere (cuBLAS's GEMMs): %clock64, %globaltimer, %smid, slot a block.",
        f".visible .entry {name}(.param .u32 slot, .param .u64 out)",
        ".maxntid 32, 1, 1",
        "{",
        "\t.reg .pred %p<2>;",
        "\t.reg .b32 %r<6>;",
        "\t.reg .b64 %rd<8>;",
        "\tmov.u32 %r1, %tid.x;",
        "\tsetp.ne.u32 %p1, %r1, 0;",
        "\t@%p1 bra DONE;",
        "\tld.param.u32 %r2, [slot];",
        "\tld.param.u64 %rd1, [out];",
        "\tcvta.to.global.u64 %rd1, %rd1;",
        "\tmov.u64 %rd2, %clock64;",
        "\tmov.u64 %rd3, %globaltimer;",
        "\tmov.u32 %r3, %smid;",
        "\tmov.u32 %r4, %ctaid.x;",
        "\tmov.u32 %r5, %nctaid.x;",
        "\tmad.lo.u32 %r4, %r2, %r5, %r4;  // this stamp's record: slot x blocks + block",
        f"\tmul.wide.u32 %rd4, %r4, {8 * STAMP_WORDS};",
        "\tadd.u64 %rd5, %rd1, %rd4;",
        "\tcvt.u64.u32 %rd6, %r3;",
        "\tcvt.u64.u32 %rd7, %r2;",
        "\tst.global.v2.u64 [%rd5], {%rd2, %rd3};",
        "\tst.global.v2.u64 [%rd5+16], {%rd6, %rd7};",
        "DONE:",
        "\tret;",
        "}",
        "",
    ])  # fmt: skip


@dataclass(frozen=True)
class GemmTiming:
    """One timed batch of GEMMs: its event ms, TFLOP/s (TOP/s for integers) and the SM clock it ran at."""

    ms: float
    tflops: float
    mhz: float


def bracket_mhz(stamps: np.ndarray, batch_ms: float, window_ns: float, kernel: str) -> float:
    """The SM clock over a batch of work between two clock stamps (``stamps``: 2 x blocks x STAMP_WORDS of
    %clock64, %globaltimer, %smid, slot; slot 0 right before the batch, slot 1 right after): per SM that ran
    a stamp of each, its cycles from its last stamp before to its first after over the ns between them
    (%clock64 counts per SM, never comparable across SMs); the median over those SMs. ProbeFailure where no
    SM ran both, a record is another slot's, or an SM's stamps do not enclose the batch's ``batch_ms``."""
    if np.any(stamps[0, :, 3] != 0) or np.any(stamps[1, :, 3] != 1):
        raise ProbeFailure(f"{kernel}: a stamp wrote into another slot's records")
    before = {int(sm): (int(c), int(t)) for c, t, sm, _ in sorted(stamps[0].tolist(), key=lambda r: r[1])}
    after = {int(sm): (int(c), int(t)) for c, t, sm, _ in sorted(stamps[1].tolist(), key=lambda r: -r[1])}
    shared = sorted(set(before) & set(after))
    if not shared:
        raise ProbeFailure(f"{kernel}: no SM ran a stamp both before and after the GEMMs")
    clocks = []
    for sm in shared:
        cycles, ns = after[sm][0] - before[sm][0], after[sm][1] - before[sm][1]
        mhz = clock_mhz(cycles, ns, window_ns) if cycles > 0 else None
        if ns < batch_ms * 1e6 - TIMER_TICK_NS or mhz is None:
            raise ProbeFailure(f"{kernel}: SM {sm}'s stamps span {cycles} cycles in {ns} ns, which "
                               f"do not enclose the {batch_ms:.3f} ms the GEMMs took")  # fmt: skip
        clocks.append(mhz)
    return float(np.median(clocks))


def bracket(request: Request, stamp: str, timed: Callable[[Stamp], float], window_ns: float) -> tuple[float, float]:
    """(ms, MHz) of one batch of work: ``timed(stamp)`` enqueues it between the two stamps of ``stamp`` (a clock
    stamp kernel of the family's cubin, its output poisoned first and read back after; the launcher checks its
    arguments as every launch's) and returns the batch's event ms; the clock is :func:`bracket_mhz`'s."""
    blocks = STAMPS_PER_SM * request.device.sm_count
    words = 2 * blocks * STAMP_WORDS
    out = request.outputs.get(words)
    launcher = request.launcher
    launcher.fill(out, POISON_BYTE)
    ms = timed((stamp, blocks, out))
    stamps = launcher.read(out, "uint64", words)
    if unwritten(stamps):
        raise ProbeFailure(f"{stamp} did not write all of its {words} words")
    return ms, bracket_mhz(stamps.reshape(2, blocks, STAMP_WORDS), ms, window_ns, stamp)


def time_gemms(request: Request, shape: GemmShape, dtype: str, count: int, window_ns: float, stamp: str) -> GemmTiming:
    """``count`` library GEMMs of ``shape`` and ``dtype`` (the launcher's :class:`~gpuprobe.runner.launcher.Gemm`)
    timed by CUDA events between clock stamps (:func:`bracket`); LaunchPathUnavailable where the launcher has no
    such library."""
    gemm = capability(request.launcher, Gemm)
    ms, mhz = bracket(request, stamp, lambda s: gemm.time_gemm(shape, dtype, count, stamp=s), window_ns)
    return GemmTiming(ms, shape.flop * count / (ms * 1e9), mhz)
