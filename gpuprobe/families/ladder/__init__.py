"""The ladder family: how much of the tensor cores' instruction peak a library reaches, at the clock it ran at.

The wgmma family (sm_90a) and the mma family (mma.sync) measure each type's dense flop per clock per SM with their
own kernels and record it (:mod:`gpuprobe.families.instruction_peak`). This family times cuBLAS's GEMMs of the same
types (bf16, f16 and tf32 with float32 accumulation and s8 with int32 through cublasGemmEx; e4m3 with float32
accumulation through cuBLASLt's cublasLtMatmul, cuBLAS's GEMM having no fp8) over a small sweep of shapes, each
timed batch between the family's clock stamps on the same stream (:mod:`gpuprobe.families.library_timing`), and
sets each rate against the instruction peak at the clock that batch ran at: the same clock's work against the same
clock's work, whatever the clock was. The library runs the same tensor cores, so a fraction above 1 (beyond the
timer's allowance) is impossible and fails the probe.

The sweep (:data:`SQUARES`, :data:`SKINNY_M`): three squares, 2048^3 to 8192^3 (the reference, :data:`REFERENCE`,
the shape the wgmma family's cuBLAS probe times), and the skinny GEMMs of inference, C (M x 8192) = A (M x 8192) .
B (8192 x 8192)^T for M = 1, 16, 64, 256 (a token batch through one large layer). Those are bound by the bytes of B
and by the call, not by the tensor cores, and say so in their facts' notes; they are reported, not set against the
peak. Each timing runs as many GEMMs as :data:`PLAN_TFLOPS` (or the bytes, or the call) fill ``batch_ms`` with, so
every batch is a clock window; the operands are small random integers drawn once per size and type, and the result
of each shape's GEMMs is checked against NumPy on sampled rows and columns (every product and sum is exact, the
result rounded once to the output type; a bf16 or f16 C may be one unit off in its last place where a split-K GEMM
reduced through C's type): a wrong result fails the probe.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device, ProbeOutcome
from gpuprobe.families import instruction_peak
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.library_timing import STAMP_WORDS, STAMPS_PER_SM, GemmTiming, clock_stamp_text, time_gemms
from gpuprobe.families.measuring import clock_window_ns, fact, unmeasured
from gpuprobe.families.planning import CHECKED_LAUNCH_CALLS, held_batch_s, readback_host_s
from gpuprobe.families.sampling import ONE_SAMPLE, Stopping, sample_until_stable
from gpuprobe.families.stepping import probe_steps
from gpuprobe.output.sections import Section
from gpuprobe.runner.launcher import (
    GEMM_DRAWN_ROWS,
    Gemm,
    GemmShape,
    LaunchPathUnavailable,
    capability,
    output_spacing,
    round_to_output,
)

TYPES = ("bf16", "f16", "tf32", "e4m3", "s8")
LIBRARY = "cublas"  # the rung's name in the fact ids (cuBLASLt's e4m3 is cuBLAS's library too)
CLOCK_STAMP = "gp_ld_clock_stamp"
SQUARES = (2048, 4096, 8192)
REFERENCE = GemmShape(8192, 8192, 8192)
SKINNY_M = (1, 16, 64, 256)
SKINNY_NK = 8192
SHAPES = (*(GemmShape(n, n, n) for n in SQUARES), *(GemmShape(m, SKINNY_NK, SKINNY_NK) for m in SKINNY_M))
# A GEMM under half a millisecond is paid largely in its call and its last wave (the wgmma family's bound: an H200
# smoke run's one 1024^3 GEMM read 29.85 TFLOP/s); its rate is the library's launch path as much as its kernels.
LAUNCH_BOUND_MS = 0.5
# Planned rates, per 132 SMs (H100-class): a little under what cuBLAS reaches (stas00/ml-engineering MAMF: bf16
# 794.5, fp8 1402.6 TFLOP/s on an H100 SXM), so that a timing's GEMMs last at least most of batch_ms and the plan
# bounds them; the bytes a skinny GEMM streams at PLAN_GBPS (under an H100 SXM's 3350 GB/s); each GEMM's call.
PLAN_TFLOPS = {"bf16": 600.0, "f16": 600.0, "tf32": 300.0, "e4m3": 1200.0, "s8": 1200.0}
PLAN_GBPS = 2000.0
PLAN_CALL_US = 5.0
ELEMENT_BYTES = {"bf16": (2, 2), "f16": (2, 2), "tf32": (4, 4), "e4m3": (1, 2), "s8": (1, 4)}  # (A and B, C)
OPERAND_HOST_S_PER_DRAWN = 15e-9  # an operand's value drawn (int16), encoded and uploaded
SAMPLED = 8  # rows of C and columns checked per shape (the last row and column among them)


@dataclass(frozen=True)
class Settings:
    types: tuple[str, ...] = TYPES
    batch_ms: float = 2.0  # each timing's GEMMs last about this long at the planned rates: a clock window
    sampling: Stopping = Stopping(3, 5, 0.01, 1.0)  # timings per shape
    min_clock_window_ns: float = clock_window_ns(0.01)  # the clock to 1 % over a batch

    def __post_init__(self) -> None:
        unknown = set(self.types) - set(TYPES)
        if unknown:
            raise ValueError(f"Settings.types: {sorted(unknown)} are none of {', '.join(TYPES)}")
        if not self.batch_ms > 0:
            raise ValueError(f"Settings.batch_ms must be positive, not {self.batch_ms}")


def probe_name(dtype: str) -> str:
    return f"ladder.{LIBRARY}.{dtype}"


PROBES = [probe_name(dtype) for dtype in TYPES]


def fact_ids(dtype: str) -> list[tuple[str, str]]:
    """Every fact of ``dtype``'s probe with its unit (TOP/s for s8: an integer multiply-add counts 2)."""
    rate = "TOP/s" if dtype == "s8" else "TFLOP/s"
    base = f"library.{LIBRARY}.{dtype}"
    return [(f"{base}.best.tflops", rate), (f"{base}.best.fraction_of_peak", "fraction"),
            (f"{base}.reference.tflops", rate), (f"{base}.reference.fraction_of_peak", "fraction"),
            (f"{base}.sm_clock", "MHz"), *((f"{base}.m{m}.tflops", rate) for m in SKINNY_M)]  # fmt: skip


def module_text() -> str:
    """ptx/ladder/ladder.ptx: the family's clock stamp (:func:`~gpuprobe.families.library_timing.clock_stamp_text`)."""
    return HEADER + "\n" + clock_stamp_text(CLOCK_STAMP)


HEADER = """\
// The ladder family's clock stamp: the SM clock around cuBLAS's and cuBLASLt's GEMMs, which gpuprobe does not write.
// GENERATED by gpuprobe/families/ladder/__init__.py (module_text, from gpuprobe.families.library_timing's
// clock_stamp_text): edit that, not this file.
.version 8.7
.target sm_80
.address_size 64
"""


# --------------------------------------------------------------------------- planning a shape's timings


def planned_ms(shape: GemmShape, dtype: str, sm_count: int) -> float:
    """One GEMM's ms at the planned rates on ``sm_count`` SMs: its flop or its bytes, whichever is slower, and its
    call."""
    in_bytes, out_bytes = ELEMENT_BYTES[dtype]
    moved = (shape.m + shape.n) * shape.k * in_bytes + shape.m * shape.n * out_bytes
    compute_s = shape.flop / (PLAN_TFLOPS[dtype] * 1e12 * sm_count / 132)
    return max(compute_s, moved / (PLAN_GBPS * 1e9)) * 1e3 + PLAN_CALL_US / 1e3


def gemm_count(shape: GemmShape, dtype: str, settings: Settings, sm_count: int) -> int:
    """GEMMs a timing of ``shape`` runs: enough to fill ``batch_ms`` at the planned rates."""
    return max(1, math.ceil(settings.batch_ms / planned_ms(shape, dtype, sm_count)))


# --------------------------------------------------------------------------- measuring


@dataclass
class ShapeRate:
    """One shape's timings: TFLOP/s and the clock of each, the GEMMs a timing ran, and each GEMM's ms."""

    shape: GemmShape
    count: int
    tflops: list[float] = dataclasses.field(default_factory=list)
    mhz: list[float] = dataclasses.field(default_factory=list)
    gemm_ms: list[float] = dataclasses.field(default_factory=list)

    def take(self, timing: GemmTiming) -> None:
        self.tflops.append(timing.tflops)
        self.mhz.append(timing.mhz)
        self.gemm_ms.append(timing.ms / self.count)

    @property
    def launch_bound(self) -> bool:
        return float(np.median(self.gemm_ms)) < LAUNCH_BOUND_MS

    def series(self) -> dict[str, object]:
        return {"shape": str(self.shape), "count": self.count, "tflops": self.tflops, "mhz": self.mhz,
                "gemm_ms": self.gemm_ms, "launch_bound": self.launch_bound}  # fmt: skip


def sampled_indices(size: int, picked: int, seed: int) -> np.ndarray:
    """``picked`` distinct indices below ``size`` (all of them if fewer), the last always among them."""
    rng = np.random.default_rng(seed)
    chosen = rng.choice(size - 1, min(picked, size) - 1, replace=False) if size > 1 else np.array([], int)
    return np.sort(np.append(chosen, size - 1)).astype(np.int64)


def check_result(request: Request, shape: GemmShape, dtype: str, name: str) -> None:
    """The GEMMs' C on sampled rows and columns against NumPy's A . B^T of the operand rows read back, rounded
    once to the output type: exact for an f32 or s32 C (every product and partial sum exact), within one unit in
    the last place of a bf16 or f16 C (a split-K reduction through C's type may round twice; a wrong operand, layout
    or transpose is off by far more); ProbeFailure naming the first difference."""
    gemm = capability(request.launcher, Gemm)
    rows, cols = (sampled_indices(size, SAMPLED, size + shape.k) for size in (shape.m, shape.n))
    sample = gemm.gemm_sample(shape, dtype, rows, cols)
    expected = round_to_output(sample.a @ sample.b.T, dtype)
    wrong = np.argwhere(~(np.abs(sample.c - expected) <= output_spacing(expected, dtype)))
    if len(wrong):
        i, j = wrong[0]
        raise ProbeFailure(f"{name}: the {shape} {dtype} GEMM's C[{rows[i]}, {cols[j]}] is {sample.c[i, j]}, "
                           f"NumPy predicts {expected[i, j]} ({len(wrong)} of {expected.size} sampled values "
                           "differ)")  # fmt: skip


def measure_shape(request: Request, shape: GemmShape, dtype: str, name: str) -> ShapeRate:
    """Timings of ``shape`` until the sampling settles, each between clock stamps; then its result checked."""
    s: Settings = request.settings
    rate = ShapeRate(shape, gemm_count(shape, dtype, s, request.device.sm_count))

    def take() -> None:
        rate.take(time_gemms(request, shape, dtype, rate.count, s.min_clock_window_ns, CLOCK_STAMP))

    sample_until_stable(take, rate.tflops, s.sampling)
    check_result(request, shape, dtype, name)
    return rate


def _launch_note(rate: ShapeRate) -> str:
    us = float(np.median(rate.gemm_ms)) * 1e3
    if rate.launch_bound:
        return (f"{rate.shape}: {us:.0f} us a GEMM, under {LAUNCH_BOUND_MS} ms: launch-bound (its call, its last wave "
                "and the bytes of B, not the tensor cores, set this rate)")  # fmt: skip
    return f"{rate.shape}: {us:.0f} us a GEMM"


def measure_type(request: Request, dtype: str, name: str) -> Measured:
    """One type's sweep: best and reference rates and their fractions of the instruction peak at their clocks,
    the reference's clock, each skinny M's rate; not run with the reason where the library cannot be loaded."""
    try:
        rates = {shape: measure_shape(request, shape, dtype, name) for shape in SHAPES}
    except LaunchPathUnavailable as exc:
        why = str(exc)
        return Measured(name, ProbeOutcome("not_run", why), [unmeasured(i, u, name, why) for i, u in fact_ids(dtype)])
    units = dict(fact_ids(dtype))
    base = f"library.{LIBRARY}.{dtype}"

    def guarded(shape: GemmShape, rate: ShapeRate) -> list[float] | None:  # every shape's timings guarded
        what = f"{name}: the {shape} GEMM"
        return instruction_peak.shares(request.state, dtype, request.device.sm_count, rate.tflops, rate.mhz, what)

    shares = {shape: guarded(shape, rate) for shape, rate in rates.items()}
    best = max(rates.values(), key=lambda r: float(np.median(r.tflops)))
    reference = rates[REFERENCE]
    facts = [
        dataclasses.replace(fact(f"{base}.best.tflops", best.tflops, units[f"{base}.best.tflops"], name),
                            detail=f"best of the sweep: {_launch_note(best)}"),
        instruction_peak.share_fact(f"{base}.best.fraction_of_peak", shares[best.shape], name, dtype),
        fact(f"{base}.reference.tflops", reference.tflops, units[f"{base}.reference.tflops"], name),
        instruction_peak.share_fact(f"{base}.reference.fraction_of_peak", shares[REFERENCE], name, dtype),
        fact(f"{base}.sm_clock", reference.mhz, "MHz", name),
    ]  # fmt: skip
    for m in SKINNY_M:
        skinny = rates[GemmShape(m, SKINNY_NK, SKINNY_NK)]
        measured = fact(f"{base}.m{m}.tflops", skinny.tflops, units[f"{base}.m{m}.tflops"], name)
        facts.append(dataclasses.replace(measured, detail=_launch_note(skinny)))
    share = f"{facts[1].value:.3f}" if facts[1].value is not None else "an unmeasured share"
    bound = "; ".join(_launch_note(r) for r in rates.values() if r.launch_bound)
    note = (f"best {facts[0].value:.1f} at {best.shape} ({share} of the instruction peak at "
            f"{np.median(best.mhz):.0f} MHz); reference {reference.shape} {facts[2].value:.1f} at "
            f"{facts[4].value:.0f} MHz" + (f"; {bound}" if bound else ""))  # fmt: skip
    series = {"shapes": [r.series() for r in rates.values()], "best": str(best.shape)}
    return Measured(name, ProbeOutcome("ok", note, series), facts)


def measure(request: Request) -> Probes:
    """The family's runnable probes in order, each as (name, step); a type not in the settings is not measured."""
    request = dataclasses.replace(request, settings=request.settings or Settings())
    chosen = [probe_name(dtype) for dtype in request.settings.types]
    steps: dict[str, Callable[[], Measured]] = {
        probe_name(dtype): lambda dtype=dtype: measure_type(request, dtype, probe_name(dtype))
        for dtype in request.settings.types
    }
    return probe_steps(chosen, steps, request.runnable)


# --------------------------------------------------------------------------- the plan


def operand_s(rows: int, k: int, dtype: str) -> tuple[float, float]:
    """(host, GPU) seconds to make one rows x k operand: its drawn rows drawn, encoded and uploaded, then repeated
    down to its rows on the device (read and written at PLAN_GBPS)."""
    drawn = min(rows, GEMM_DRAWN_ROWS) * k * OPERAND_HOST_S_PER_DRAWN
    return drawn, 2 * rows * k * ELEMENT_BYTES[dtype][0] / (PLAN_GBPS * 1e9)


def plan(settings: Settings, device: Device) -> Plan:
    """Per type and shape: each operand made once per side and size (a skinny GEMM's B is the 8192^3 GEMM's), an
    untimed first GEMM, every timing at the planned rates (its GEMMs behind a hold, its two clock stamps poisoned,
    launched and read back), and the result check."""
    total = Plan(len(settings.types), 0, 0.0)
    stamp_words = 2 * STAMPS_PER_SM * device.sm_count * 2 * STAMP_WORDS
    timings = settings.sampling.max_repeats
    for dtype in settings.types:
        operands = {(side, rows, shape.k) for shape in SHAPES for side, rows in (("a", shape.m), ("b", shape.n))}
        for _, rows, k in operands:
            host_s, gpu_s = operand_s(rows, k, dtype)
            total += Plan(0, 2, gpu_s, host_s)
        for shape in SHAPES:
            count = gemm_count(shape, dtype, settings, device.sm_count)
            one = planned_ms(shape, dtype, device.sm_count) / 1e3
            batch = held_batch_s(count + 2, 0.0, device) + count * one
            stamps = Plan(0, timings * CHECKED_LAUNCH_CALLS, 0.0, timings * readback_host_s(stamp_words * 4))
            total += stamps + Plan(0, 1 + timings + 1, one + timings * batch, readback_host_s(3 * SAMPLED * shape.k))
    return total


# First contact: bf16 alone, one timing of each shape, each checked.
SMOKE = Smoke(probes=(probe_name("bf16"),), settings=Settings(types=("bf16",), sampling=ONE_SAMPLE))

SECTIONS = (
    Section(
        title="Library ladder: cuBLAS and cuBLASLt against the instruction peak",
        fact_prefixes=(f"library.{LIBRARY}.",),
        probe_prefixes=("ladder.",),
        blurb=(
            "cuBLAS's GEMMs per type (bf16, f16, tf32 with FP32 accumulation and s8 with int32 through cublasGemmEx; "
            "e4m3 with FP32 accumulation through cuBLASLt), TN, over squares 2048^3 to 8192^3 and the skinny GEMMs of "
            "inference (M = 1, 16, 64, 256 against an 8192 x 8192 weight). Each batch is timed by CUDA events between "
            "clock stamps on the same stream, and its rate is set against the instruction peak this run measured "
            "(the wgmma or mma family's best kernel of the type, per clock per SM) at the clock the batch ran at: "
            "fraction_of_peak is the library's share of what the same tensor cores do at the same clock. best is the "
            "best shape of the sweep (named in its note), reference the fixed 8192^3, sm_clock the reference's clock. "
            "The skinny rates are bound by B's bytes and the call, not the tensor cores: reported, with their "
            "microseconds a GEMM. Every shape's result was checked against NumPy on sampled rows and columns."
        ),
    ),
)

FAMILY = Family(
    name="ladder",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
    sections=SECTIONS,
    invariants=(),
)
