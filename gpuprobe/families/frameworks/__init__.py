"""The frameworks family: the optional rungs above cuBLAS on the library ladder (issue 30), each as a fraction of
the instruction peak at the SM clock its own batch ran at.

* ``frameworks.torch_matmul.<type>``: ``torch.matmul`` of two n x n matrices (bf16, f16), e4m3 through
  ``torch._scaled_mm`` (unit scales, bf16 out, FP32 accumulation), what a PyTorch user's GEMM reaches (cuBLAS or
  cuBLASLt behind PyTorch's own choices: the MAMF tables' rung).
* ``frameworks.triton_matmul.bf16``: a Triton matmul of gpuprobe's own (:mod:`gpuprobe.runner.triton_matmul`: one
  fixed 128 x 256 x 64 tile, no autotuning), what a plain Triton kernel reaches.
* ``frameworks.sdpa.bf16``: cuDNN's fused attention through ``scaled_dot_product_attention`` restricted to the
  cuDNN backend, without and with the causal mask; ``frameworks.sdpa_flash.bf16`` the same through PyTorch's
  FlashAttention backend. Counted at the FLOPs attention must do: 4 x B x H x S^2 x D (its two matmuls), halved
  with the causal mask (FlashAttention-3's count); the softmax is not counted.

Every rate is timed by CUDA events around a batch of calls (after an untimed first call: the algorithm picked, the
kernel compiled), between two clock stamps of this family's cubin on the same stream
(:func:`gpuprobe.families.library_timing.bracket`), so each sample carries the SM clock its batch ran at, and its
fraction of the instruction peak the wgmma or mma family measured in this run at that clock
(:func:`gpuprobe.families.instruction_peak.at_clock`; ``unmeasured`` with the reason where none was). A rate above
the peak at its clock (beyond the timer's allowance) fails the probe. Each probe checks its own result: a matmul's C
at sampled rows and columns against NumPy's product of the same operands read back, attention's output at a few
query rows of one head against NumPy's softmax(q k^T / sqrt(D)) v.

PyTorch, cuDNN and Triton are never required: where one is missing (or has no such type or backend) the probe is
``not_run``, its facts ``unmeasured``, with the reason (:mod:`gpuprobe.runner.frameworks`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.families import instruction_peak
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.library_timing import STAMP_WORDS, STAMPS_PER_SM, Stamp, bracket
from gpuprobe.families.measuring import clock_window_ns, fact, require_counts, unmeasured
from gpuprobe.families.planning import CHECKED_LAUNCH_CALLS, combined, held_batch_s, probe, readback_host_s
from gpuprobe.families.sampling import ONE_SAMPLE, Stopping, sample_until_stable
from gpuprobe.families.stepping import probe_steps
from gpuprobe.output.sections import Section
from gpuprobe.runner.frameworks import HOLD_PER_CALL, Frameworks, Work, open_frameworks
from gpuprobe.runner.launcher import GEMM_TYPES, LaunchPathUnavailable

STAMP_KERNEL = "gp_fw_clock_stamp"
MATMUL_TYPES = ("bf16", "f16", "e4m3")
TORCH_PROBES = {f"frameworks.torch_matmul.{dtype}": dtype for dtype in MATMUL_TYPES}
TRITON_PROBE = "frameworks.triton_matmul.bf16"
SDPA_PROBE = "frameworks.sdpa.bf16"
FLASH_PROBE = "frameworks.sdpa_flash.bf16"
PROBES = [*TORCH_PROBES, TRITON_PROBE, SDPA_PROBE, FLASH_PROBE]
RATE_FACTS = (("tflops", "TFLOP/s"), ("fraction_of_peak", "fraction"), ("sm_clock", "MHz"))
OUTPUT_EPS = {"bf16": 2.0**-8, "f16": 2.0**-11, "e4m3": 2.0**-8}  # each matmul's C type's (e4m3's is bf16) ulp at 1
ATTENTION_EPS = 2.0**-6  # bf16 P and output, FP32 sums: a wrong mask or scale is off by far more
MIN_MATMUL_N = 1024  # the Triton kernel's tiles are 128 x 256 x 64; cuBLAS's largest is 256 wide
MIN_SEQUENCE = 256


@dataclass(frozen=True)
class Settings:
    """``matmul_n``: every matmul is n x n x n (8192: the wgmma family's cuBLAS GEMM, about 1.5 ms at 700
    TFLOP/s); ``attention_shape``: batch, heads, sequence, head dim (4 x 16 x 4096 x 128: 16k tokens of hidden
    2048, FlashAttention-3's benchmark setting); ``calls`` per timed batch; ``sampling``: timed batches per case;
    ``check_rows``: rows (and columns) of a result checked against NumPy."""

    matmul_n: int = 8192
    attention_shape: tuple[int, int, int, int] = (4, 16, 4096, 128)
    calls: int = 10
    sampling: Stopping = Stopping(3, 3)
    check_rows: int = 8
    min_clock_window_ns: float = clock_window_ns(0.01)  # 100 us: a batch this long reads the SM clock to 1 %

    def __post_init__(self) -> None:
        require_counts(self, ("calls", "check_rows"))
        if self.matmul_n < MIN_MATMUL_N or self.matmul_n % 256:
            raise ValueError(f"Settings.matmul_n must be a multiple of 256, at least {MIN_MATMUL_N} (whole tiles "
                             f"of the Triton kernel), not {self.matmul_n}")  # fmt: skip
        if len(self.attention_shape) != 4 or min(self.attention_shape) < 1 or self.attention_shape[2] < MIN_SEQUENCE:
            raise ValueError(f"Settings.attention_shape must be (batch, heads, sequence >= {MIN_SEQUENCE}, head dim), "
                             f"not {self.attention_shape}")  # fmt: skip


@dataclass(frozen=True)
class Case:
    """One timed work of a probe and the facts it gives: ``<prefix>.tflops``, ``.fraction_of_peak``, ``.sm_clock``."""

    prefix: str
    work: Work

    @property
    def label(self) -> str:
        if not self.work.attention:
            return f"{self.work.shape[0]}^3"
        return "x".join(map(str, self.work.shape)) + (" causal" if self.work.causal else "")


def cases(settings: Settings, name: str) -> tuple[Case, ...]:
    """The works probe ``name`` times, each with its facts' prefix."""
    matmul, attention = (settings.matmul_n,), settings.attention_shape
    if name in TORCH_PROBES:
        dtype = TORCH_PROBES[name]
        return (Case(f"library.torch_matmul.{dtype}", Work("torch", dtype, matmul)),)
    if name == TRITON_PROBE:
        return (Case("library.triton_matmul.bf16", Work("triton", "bf16", matmul)),)
    if name == SDPA_PROBE:
        return (Case("library.sdpa.bf16", Work("cudnn", "bf16", attention)),
                Case("library.sdpa.bf16.causal", Work("cudnn", "bf16", attention, causal=True)))  # fmt: skip
    if name == FLASH_PROBE:
        return (Case("library.sdpa_flash.bf16", Work("flash", "bf16", attention)),)
    raise KeyError(name)


# --------------------------------------------------------------------------- the checks


def sampled(extent: int, count: int) -> list[int]:
    """``count`` indices spread over ``extent`` from the first to the last (edge tiles included)."""
    return sorted({int(i) for i in np.linspace(0, extent - 1, min(count, extent))})


def term_spread(dtype: str, depth: int) -> float:
    """The standard deviation of a sum of ``depth`` products of integers drawn uniformly from ``dtype``'s value range
    [-r, r] (GEMM_TYPES): sqrt(depth) x their mean square, r (r + 1) / 3."""
    span = GEMM_TYPES[dtype].value_range
    return float(np.sqrt(depth) * span * (span + 1) / 3)


def check_matmul(case: Case, parts: dict[str, np.ndarray]) -> None:
    """C at the sampled rows and columns against NumPy's product of the operands read back: within 4 ulps of C's
    type at the size of the sum and its terms' spread (a reduced-precision split-K reduction allowed), far below
    what a wrong row, column or operand gives (the terms' spread: sqrt(K) x the mean square of the integers the
    type's operands are drawn from, :func:`term_spread`)."""
    a, b, c = parts["a"], parts["b"], parts["c"]
    exact = a @ b
    tolerance = 4 * OUTPUT_EPS[case.work.dtype] * (np.abs(exact) + term_spread(case.work.dtype, a.shape[1]))
    wrong = np.argwhere(~(np.abs(c - exact) <= tolerance))
    if len(wrong):
        i, j = wrong[0]
        raise ProbeFailure(f"{case.prefix}: C[{i}, {j}] of the sampled rows and columns is {c[i, j]:g}, NumPy's "
                           f"product of the same operands {exact[i, j]:g} ({len(wrong)} of {c.size} sampled "
                           "elements off)")  # fmt: skip


def attention_reference(q: np.ndarray, k: np.ndarray, v: np.ndarray, rows: list[int], causal: bool) -> np.ndarray:
    """softmax(q k^T / sqrt(D)) v for query rows ``rows`` of one head (float64), keys after a row masked if causal."""
    scores = q @ k.T / np.sqrt(q.shape[1])
    if causal:
        scores = np.where(np.arange(k.shape[0])[None, :] > np.array(rows)[:, None], -np.inf, scores)
    weights = np.exp(scores - scores.max(axis=1, keepdims=True))
    return weights / weights.sum(axis=1, keepdims=True) @ v


def check_attention(case: Case, parts: dict[str, np.ndarray], rows: list[int]) -> None:
    """The output at the sampled query rows of the last batch and head against NumPy's attention of the same q, k and
    v: within 2^-6 of the output and v's RMS (bf16 probabilities and output)."""
    reference = attention_reference(parts["q"], parts["k"], parts["v"], rows, case.work.causal)
    tolerance = ATTENTION_EPS * (np.abs(reference) + np.sqrt(np.mean(parts["v"] ** 2)))
    wrong = np.argwhere(~(np.abs(parts["o"] - reference) <= tolerance))
    if len(wrong):
        i, j = wrong[0]
        raise ProbeFailure(f"{case.prefix} ({case.label}): the output at query row {rows[i]}, column {j} is "
                           f"{parts['o'][i, j]:g}, NumPy's attention {reference[i, j]:g} ({len(wrong)} of "
                           f"{reference.size} sampled elements off)")  # fmt: skip


# --------------------------------------------------------------------------- one case


@dataclass
class Rate:
    """A case's timed batches: TFLOP/s and the SM clock of each."""

    tflops: list[float] = dataclasses.field(default_factory=list)
    mhz: list[float] = dataclasses.field(default_factory=list)


def measure_case(request: Request, case: Case) -> Rate:
    """The case's batches, each between clock stamps; its result checked once, after the first batch."""
    settings: Settings = request.settings
    frameworks = open_frameworks(request.launcher)
    rate = Rate()

    def timed(stamp: Stamp) -> float:
        return frameworks.time_framework(case.work, settings.calls, stamp)

    def take() -> None:
        ms, mhz = bracket(request, STAMP_KERNEL, timed, settings.min_clock_window_ns)
        rate.tflops.append(case.work.flop * settings.calls / (ms * 1e9))
        rate.mhz.append(mhz)
        if len(rate.tflops) == 1:
            check(frameworks, case, settings)

    sample_until_stable(take, rate.tflops, settings.sampling)
    return rate


def check(frameworks: Frameworks, case: Case, settings: Settings) -> None:
    """The last call's result, sampled, against NumPy's."""
    extent = case.work.shape[2] if case.work.attention else case.work.shape[0]
    rows = sampled(extent, settings.check_rows)
    parts = frameworks.framework_sample(case.work, rows, rows)
    if case.work.attention:
        check_attention(case, parts, rows)
    else:
        check_matmul(case, parts)


def case_facts(request: Request, name: str, case: Case, rate: Rate) -> list[Fact]:
    """TFLOP/s, the fraction of the instruction peak at the same clock, and the clock."""
    shares = instruction_peak.shares(request.state, case.work.dtype, request.device.sm_count, rate.tflops, rate.mhz,
                                     f"{case.prefix} ({case.label})")  # fmt: skip
    share = instruction_peak.share_fact(f"{case.prefix}.fraction_of_peak", shares, name, case.work.dtype)
    return [fact(f"{case.prefix}.tflops", rate.tflops, "TFLOP/s", name), share,
            fact(f"{case.prefix}.sm_clock", rate.mhz, "MHz", name)]  # fmt: skip


def measure_probe(request: Request, name: str) -> Measured:
    """Every case of the probe; ``not_run`` (every fact unmeasured, with the reason) where its library, type or
    backend is missing here."""
    measured = cases(request.settings, name)
    try:
        rates = [measure_case(request, case) for case in measured]
    except LaunchPathUnavailable as exc:
        why = str(exc)
        facts = [unmeasured(f"{case.prefix}.{what}", unit, name, why) for case in measured for what, unit in RATE_FACTS]
        return Measured(name, ProbeOutcome("not_run", why), facts)
    facts = [f for case, rate in zip(measured, rates, strict=True) for f in case_facts(request, name, case, rate)]
    notes = [f"{case.label}: {np.median(rate.tflops):.1f} TFLOP/s at {np.median(rate.mhz):.0f} MHz"
             for case, rate in zip(measured, rates, strict=True)]  # fmt: skip
    series = {case.prefix: {"tflops": rate.tflops, "mhz": rate.mhz} for case, rate in zip(measured, rates, strict=True)}
    return Measured(name, ProbeOutcome("ok", "; ".join(notes), series), facts)


def measure(request: Request) -> Probes:
    """The family's runnable probes in order, each as (name, step)."""
    request = dataclasses.replace(request, settings=request.settings or Settings())
    steps: dict[str, Callable[[], Measured]] = {name: lambda name=name: measure_probe(request, name) for name in PROBES}
    return probe_steps(PROBES, steps, request.runnable)


# --------------------------------------------------------------------------- the plan

# What a run pays besides the GPU's work, at most (guesses until a real run records them): PyTorch's import and CUDA
# start in the measuring process (its libraries loaded, its context on CuPy's), Triton's compile of the matmul (its
# cache empty), each work's operands made and its first call (an algorithm picked, cuDNN's graph built).
TORCH_START_S = 2.0
TRITON_COMPILE_S = 1.0
FIRST_CALL_S = 0.1
PLANNED_TFLOPS = {"bf16": 300.0, "f16": 300.0, "e4m3": 600.0}  # at least, on an H100-class part (about 0.4 x MAMF)


def plan(settings: Settings, device: Device) -> Plan:
    """Every probe at its most batches: each batch's calls at :data:`PLANNED_TFLOPS` (the first call's too) behind
    the hold the runner spins while they are enqueued, the stamps poisoned, launched and read back, each case's first
    call and the check's read-back; PyTorch's start once and Triton's compile."""
    s, words = settings, 2 * STAMPS_PER_SM * device.sm_count * STAMP_WORDS
    batches = s.sampling.max_repeats
    stamps = Plan(0, batches * (CHECKED_LAUNCH_CALLS + 1), 0.0, batches * readback_host_s(words * 8))  # and the batch

    def one(case: Case) -> Plan:
        call_s = case.work.flop / (PLANNED_TFLOPS[case.work.dtype] * 1e12)
        batch_s = held_batch_s(HOLD_PER_CALL * s.calls + 2, 0.0, device) + s.calls * call_s
        return stamps + Plan(0, 0, batches * batch_s + call_s, FIRST_CALL_S)

    probes = [probe(*(one(case) for case in cases(s, name))) for name in PROBES]
    return combined(probes) + Plan(0, 0, 0.0, TORCH_START_S + TRITON_COMPILE_S)


# A first contact: torch.matmul's bf16 GEMM, one batch of two calls at the full size (a smaller one would time its
# call, not its throughput), its clock and its check.
SMOKE = Smoke(probes=("frameworks.torch_matmul.bf16",), settings=Settings(calls=2, sampling=ONE_SAMPLE))

SECTIONS = (
    Section(
        "Framework rungs: PyTorch, Triton, cuDNN attention",
        ("library.torch_matmul.", "library.triton_matmul.", "library.sdpa.", "library.sdpa_flash."),
        ("frameworks.",),
        blurb="torch.matmul, a plain Triton matmul and scaled-dot-product attention (cuDNN's, PyTorch's flash) at the "
        "SM clock each batch ran at, as a fraction of the instruction peak at that clock; not run where the library "
        "is missing.",
    ),
)

FAMILY = Family(
    name="frameworks",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
    sections=SECTIONS,
)
