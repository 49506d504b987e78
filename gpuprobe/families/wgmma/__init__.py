"""The wgmma family (sm_90a): latency and throughput of wgmma.mma_async, checked against NumPy, and cuBLAS's
GEMM beside it, each at the SM clock it ran at.

On Hopper every wgmma configuration issues at its per-clock peak, give or take a percent; what moves a
TFLOP/s figure is the clock, which the power the operands draw sets (zero operands least, random bf16
more, random e4m3 bytes most: an H200 ran them at 1800, 1751 and 1610 MHz). So every rate comes with its
clock and its fraction of the peak per clock, and comparisons are made per clock.

Order of measurement:

1. ``wgmma.throughput.bf16.ss`` first, while the GPU is coolest of this family's work: every SM
   runs a block of three warpgroups (no second fits), each warpgroup issuing batches of 16 m64n256k16
   wgmmas with one wait per batch; TFLOP/s over the GPU from the kernel's own %globaltimer (first
   start to last end), the SM clock from %clock64 over %globaltimer in the same kernel, and the rate
   over the dense flop per clock per SM x SMs x that clock (``fraction_of_peak``). Zero and random
   operands both (the power effect).
2. ``wgmma.cublas.bf16``: cuBLAS's 8192^3 bf16 GEMM in the same process, its SM clock witnessed by a
   clock-stamp kernel on the same stream right before and right after the batch
   (:func:`~gpuprobe.families.library_timing.bracket_mhz`); the bf16 wgmma rate over cuBLAS's, per clock.
3. The other throughput probes (bf16 RS, f16, tf32, e4m3, s8; SS and RS; smaller N; sparse), the same way.
4. Latency, per type, N and A source: one warpgroup, wgmma + commit + wait 0 per iteration, each
   accumulating onto the last; a sample is a long minus a short loop's cycles over the difference in
   iterations (:class:`~gpuprobe.families.differencing.Difference`), so everything paid once cancels.
   The SM clock (for the latency in ns) is read over the long loops only where they last
   ``min_clock_window_ns``: %globaltimer moves in ticks of about a microsecond, so a window of W ns
   reads the clock to a tick in W; the short loop, under a microsecond at small N, may read 0 ns, and
   its ns are not used. An e4m3 chain also measures its accumulator: where its sums stopped being
   exact (:func:`~gpuprobe.families.wgmma.operands.check_chain`).

Every launch reads back every warpgroup's D registers, maps them to rows and columns by the
PTX ISA's D-fragment layout (:mod:`gpuprobe.families.wgmma.layout`) and holds them to
``times x A @ B`` from NumPy within the type's tolerance (int8 exactly; a chain in Hopper's fp8
accumulator to the width it measured); a wrong D fails the probe and gives no facts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.families import instruction_peak, library_timing
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.differencing import Difference, Lengths
from gpuprobe.families.library_timing import STAMP_WORDS, STAMPS_PER_SM, GemmTiming
from gpuprobe.families.measuring import TIMER_TICK_NS, clock_mhz, clock_window_ns, fact, require_counts, unmeasured
from gpuprobe.families.planning import CHECKED_LAUNCH_CALLS, MAX_THREADS_PER_SM, cycles_s, held_batch_s, readback_host_s
from gpuprobe.families.sampling import ONE_SAMPLE, Stopping, sample_until_stable
from gpuprobe.families.sparsity import not_below_beyond_noise
from gpuprobe.families.stepping import probe_steps
from gpuprobe.families.wgmma.layout import (
    LEADING_BYTES,
    WARPGROUP,
    M,
    a_fragments,
    core_matrix_bytes,
    d_from_fragments,
    layout_bits,
)
from gpuprobe.families.wgmma.operands import (
    Operands,
    SparseOperands,
    check_chain,
    make_operands,
    make_sparse_operands,
)
from gpuprobe.families.wgmma.plot import latency_png, sparse_png
from gpuprobe.families.wgmma.ptx import (
    A_BYTES,
    CLOCK_STAMP_KERNEL,
    LATENCY_THREADS,
    THROUGHPUT_N,
    Kernel,
    kernels,
)
from gpuprobe.judge.invariants import Check
from gpuprobe.judge.physics import bounds
from gpuprobe.output.sections import Plot, Section
from gpuprobe.runner.launcher import GEMM_DRAWN_ROWS, GemmShape, LaunchPathUnavailable

RECORD_WORDS = 8  # uint32 words per warpgroup record: cycles, ns, start, end (u64 each)
DENSE_RATES = "wgmma_dense_tflops"  # state: each dense throughput probe's TFLOP/s, by shape, for the sparse ones
BF16_PER_CLOCK = "wgmma_bf16_fraction_of_peak"  # state: the bf16 SS random-operand rate per clock, for cuBLAS's
SPARSE_GAIN = 2  # the datasheets' sparse peak over the dense one (H100: 1979 vs 989 bf16 TFLOP/s)
GEMM_DTYPE = "bf16"
# Dense flop per clock per SM of Hopper's tensor cores (docs/datasheets.md: the H100 whitepaper's dense
# rates over 132 SMs at 1830 MHz).
HOPPER_FLOP_PER_CLK_PER_SM = {"bf16": 4096, "f16": 4096, "tf32": 2048, "e4m3": 8192, "s8": 8192}
TIMER_ALLOWANCE = 1.02  # a rate may read this far over its per-clock peak for timer noise, no further
CUBLAS_FRACTION_MIN = 0.95
# The least of the per-clock peak cuBLAS's bf16 GEMM reaches at 8192^3 (and at >= GEMM_MIN_N): the 550
# TFLOP/s floor of tensor.cublas.bf16.tflops (0.7 x the best published H100 SXM figure, 794.5, stas00/
# ml-engineering MAMF) at the highest clock the part runs, 1980 MHz: 550 / (132 x 4096 x 1980 MHz) = 0.51;
# under mma.sync's own ceiling on Hopper (1365 of 2048 multiply-adds per clock per SM: 0.67), so even a
# cuBLAS fallen back to pre-Hopper kernels stays above it. wgmma, at most TIMER_ALLOWANCE of the same
# peak, can therefore be at most TIMER_ALLOWANCE / CUBLAS_PER_CLOCK_FLOOR = 2.04 x cuBLAS per clock.
CUBLAS_PER_CLOCK_FLOOR = 0.5
CUBLAS_PROBE = "wgmma.cublas.bf16"
# A cuBLAS GEMM is a throughput only when it is large and long: a 4096^3 one gives a 132-SM part 512
# output tiles of 128 x 256, about four waves (a smaller one fewer), and a GEMM under half a millisecond is
# paid largely in its call and its last wave (an H200 smoke run's one 1024^3 GEMM read 29.85 TFLOP/s:
# 2.1 GFLOP in ~72 us).
GEMM_MIN_N = 4096
GEMM_MIN_MS = 0.5
CUBLAS_FACTS = (("tensor.cublas.bf16.tflops", "TFLOP/s"), ("tensor.cublas.bf16.sm_clock", "MHz"),
                ("tensor.cublas.bf16.fraction_of_peak", "fraction"),
                ("tensor.wgmma.bf16.fraction_of_cublas", "fraction"))  # fmt: skip


def probe_name(kernel: Kernel) -> str:
    family = "wgmma.sp" if kernel.sparse else "wgmma"
    if kernel.purpose == "lat":
        return f"{family}.latency.{kernel.wgmma.name}.{kernel.source}.n{kernel.n}"
    smaller = "" if kernel.n == THROUGHPUT_N else f".n{kernel.n}"
    return f"{family}.throughput.{kernel.wgmma.name}.{kernel.source}{smaller}"


def shape_id(kernel: Kernel) -> str:
    """e.g. ``tensor.wgmma.bf16.m64n256k16.ss``; a sparse wgmma's ``tensor.wgmma_sp.bf16.m64n256k32.ss``."""
    family = "wgmma_sp" if kernel.sparse else "wgmma"
    return f"tensor.{family}.{kernel.wgmma.name}.m64n{kernel.n}k{kernel.k}.{kernel.source}"


def dense_twin(kernel: Kernel) -> Kernel:
    """The dense wgmma of a sparse one's type, N, A source and purpose: the same M x N tile, half its K."""
    return dataclasses.replace(kernel, sparse=False)


def is_cublas_reference(kernel: Kernel) -> bool:
    """The wgmma set against cuBLAS: dense bf16 m64n256k16 from shared memory, the throughput probe."""
    return (kernel.purpose, kernel.wgmma.name, kernel.source, kernel.n, kernel.sparse) == (
        "tput", GEMM_DTYPE, "ss", THROUGHPUT_N, False)  # fmt: skip


def publishes_accumulator(kernel: Kernel) -> bool:
    """The chain of a narrow accumulator's type that publishes its width: dense, A from shared memory,
    N = 256 (the most elements, so the most terms); every other chain of the type checks it alike."""
    return (kernel.purpose, kernel.source, kernel.n, kernel.sparse) == ("lat", "ss", THROUGHPUT_N, False) and (
        kernel.wgmma.narrow_accumulator)  # fmt: skip


_THROUGHPUT = sorted(  # dense first: a sparse wgmma's rate is set against its dense twin's
    (k for k in kernels() if k.purpose == "tput"),
    key=lambda k: (k.sparse, k.wgmma.name != "bf16", k.source != "ss", k.n != THROUGHPUT_N, k.n),
)
_LATENCY = [k for k in kernels() if k.purpose == "lat"]
KERNELS: dict[str, Kernel] = {probe_name(k): k for k in [*_THROUGHPUT, *_LATENCY]}
# cuBLAS right after the bf16 wgmma it is set against (the first throughput probe), before the GPU warms
PROBES = [probe_name(_THROUGHPUT[0]), CUBLAS_PROBE, *(probe_name(k) for k in [*_THROUGHPUT[1:], *_LATENCY])]


@dataclass(frozen=True)
class Settings:
    short_iterations: int = 64  # a latency sample: the long loop minus the short one
    long_iterations: int = 32768  # x >= 8 cycles (a wgmma, its commit and wait) at <= 2 GHz: >= 130 us
    sampling: Stopping = Stopping(3, 7, 0.01, 0.5)  # a latency probe's samples
    warpgroups_per_block: int = 3
    # Throughput blocks per SM: at most this many of those that fit (occupancy API); 0: all that fit. On
    # sm_90a a second block of three warpgroups never fits (154-158 registers x 384 threads).
    blocks_per_sm: int = 1
    calibration_iterations: int = 8  # a first throughput launch, to size the timed ones
    throughput_ms: float = 4.0  # each timed throughput launch lasts about this long
    throughput_sampling: Stopping = Stopping(3, 3)  # timed launches per operand kind: three
    gemm_n: int = 8192
    gemm_count: int = 10  # GEMMs per cuBLAS timing
    gemm_sampling: Stopping = Stopping(3, 3)  # cuBLAS timings: three
    min_clock_window_ns: float = clock_window_ns(0.01)  # 100 us: a run this long reads the SM clock to 1 %
    seed: int = 20250901

    def __post_init__(self) -> None:
        require_counts(self, ("short_iterations", "calibration_iterations", "gemm_n", "gemm_count"))
        if self.long_iterations <= self.short_iterations:
            raise ValueError("Settings: long_iterations must exceed short_iterations (their difference is timed)")
        if self.blocks_per_sm < 0:
            raise ValueError(f"Settings.blocks_per_sm must be 0 (as many as fit) or more, got {self.blocks_per_sm}")
        if not 1 <= self.warpgroups_per_block <= 3:
            raise ValueError(f"Settings.warpgroups_per_block must be 1 to 3, got {self.warpgroups_per_block}")
        if self.throughput_ms * 1e6 < 2 * self.min_clock_window_ns:
            raise ValueError(
                f"Settings.throughput_ms must be at least {2 * self.min_clock_window_ns / 1e6:g} ms (twice "
                f"min_clock_window_ns: each timed run reads the SM clock), got {self.throughput_ms}"
            )
        if self.gemm_n < GEMM_MIN_N:
            raise ValueError(f"Settings.gemm_n must be at least {GEMM_MIN_N} (a smaller GEMM measures its call "
                             f"and its last wave, not cuBLAS's throughput), got {self.gemm_n}")  # fmt: skip

    def lengths(self, steps: int) -> Lengths:
        """A latency sample's two loops, of ``steps`` dependent wgmmas (each with its commit and wait) an
        iteration."""
        return Lengths(self.short_iterations, self.long_iterations, steps)


# --------------------------------------------------------------------------- one launch


def shared_bytes(kernel: Kernel) -> int:
    """A, then B: the dynamic shared memory a kernel's block takes."""
    return A_BYTES + kernel.n * kernel.b_row_bytes


@dataclass(frozen=True)
class Launched:
    """What one launch measured: per warpgroup cycles, ns, start and end (%globaltimer ns after the first
    start), and, for a chain a narrow accumulator stopped, the width its D showed (None where D was exact)."""

    cycles: np.ndarray
    ns: np.ndarray
    start: np.ndarray
    end: np.ndarray
    accumulator_bits: int | None = None

    @property
    def span_ns(self) -> float:
        """First start to last end over every warpgroup: the time the whole GPU took."""
        return float(self.end.max() - self.start.min())

    def mhz(self, window_ns: float) -> float | None:
        """The SM clock the warpgroups ran at (the median of their cycles over ns), from windows of at
        least ``window_ns``; None from shorter ones."""
        return clock_mhz(float(np.median(self.cycles)), float(np.median(self.ns)), window_ns)


def split_output(words: np.ndarray, warpgroups: int, registers: int) -> tuple[np.ndarray, np.ndarray]:
    """Raw output (uint32) -> records (warpgroups x 4 uint64) and D registers (warpgroups x 128 x N/2)."""
    head = warpgroups * RECORD_WORDS
    records = np.ascontiguousarray(words[:head]).view(np.uint64).reshape(warpgroups, 4)
    fragments = np.ascontiguousarray(words[head:]).reshape(warpgroups, WARPGROUP, registers)
    return records, fragments


def check_result(fragments: np.ndarray, kernel: Kernel, operands: Operands, times: int) -> int | None:
    """Every warpgroup's D is bit-identical, and it is ``times`` x A @ B (a chain a narrow accumulator
    stopped held to the width it shows): else ProbeFailure. Returns that width, None where D was exact."""
    differing = np.flatnonzero(np.any(fragments != fragments[:1], axis=(1, 2)))
    if len(differing):
        raise ProbeFailure(
            f"{kernel.name}: warpgroup {int(differing[0])}'s D differs from warpgroup 0's "
            f"({len(differing)} of {len(fragments)} warpgroups)"
        )
    dtype = np.float32 if kernel.wgmma.accumulator == "f32" else np.int32
    d = d_from_fragments(fragments[0].view(dtype), kernel.n)
    checked = check_chain(d, operands, times)
    if checked.problem:
        raise ProbeFailure(f"{kernel.name}: {checked.problem}")
    return checked.accumulator_bits


def upload_operands(request: Request, kernel: Kernel, kind: str) -> tuple[Operands, list[Any]]:
    """Operands of ``kind`` for ``kernel``, and the arguments that hand them over (all but iters, out):
    A (its kept elements, for a sparse kernel) and B in core-matrix order, their layout bits, and a
    sparse kernel's metadata registers."""
    launcher, seed = request.launcher, request.settings.seed
    made = (make_sparse_operands if kernel.sparse else make_operands)(kernel.wgmma, kernel.n, kind, seed)
    if kernel.source == "ss":
        a = launcher.upload(core_matrix_bytes(made.a_bits.view(np.uint8).reshape(M, -1)))
    else:
        a = launcher.upload(a_fragments(made.a_bits, kernel.wgmma).reshape(-1))
    b_rows = made.b_bits.view(np.uint8).reshape(kernel.n, -1)
    b = launcher.upload(core_matrix_bytes(b_rows, kernel.b_row_bytes))
    args = [a, b, np.uint64(layout_bits())]
    if isinstance(made, SparseOperands):
        b_layout = layout_bits(stride_bytes=kernel.b_row_bytes // 16 * LEADING_BYTES)
        args += [np.uint64(b_layout), launcher.upload(made.metadata())]
    return made, args


def launch(
    request: Request, kernel: Kernel, operands: Operands, given: list[Any], iterations: int, blocks: int, threads: int
) -> Launched:
    """One checked launch: its records, after D was held to the NumPy reference."""
    warpgroups = blocks * threads // WARPGROUP
    words = warpgroups * (RECORD_WORDS + WARPGROUP * kernel.registers)
    out = request.outputs.get(-(-words // 2))  # 64-bit words holding ``words`` 32-bit ones
    args = [*given, np.uint32(iterations), out]
    values = request.kernels.results(kernel.name, args, out, words, dtype="uint32", grid=blocks, block=threads,
                                 shared=shared_bytes(kernel))  # fmt: skip
    records, fragments = split_output(values, warpgroups, kernel.registers)
    bits = check_result(fragments, kernel, operands, times=iterations if kernel.purpose == "lat" else kernel.batch)
    return timed(kernel, records, bits)


def timed(kernel: Kernel, records: np.ndarray, accumulator_bits: int | None = None) -> Launched:
    """A launch's warpgroup records (cycles, ns, start, end), checked possible. %globaltimer readings are ns since
    the Unix epoch, past float64's exact integers: compared as integers, and kept as floats only after the
    launch's first start is taken off."""
    cycles, ns, start, end = (records[:, i] for i in range(4))
    if np.any(cycles == 0) or np.any(end < start):
        raise ProbeFailure(f"{kernel.name}: impossible timing (cycles {cycles.min()}, ns {ns.min()})")
    if np.any(ns != end - start):
        raise ProbeFailure(f"{kernel.name}: a warpgroup's timer window is not its end reading minus its start")
    origin = start.min()
    return Launched(*(a.astype(np.float64) for a in (cycles, ns, start - origin, end - origin)), accumulator_bits)


# --------------------------------------------------------------------------- latency


def measure_latency(request: Request, name: str) -> Measured:
    """One dependent wgmma's cycles, long minus short (:class:`Difference`), at the clock of the long loops;
    a narrow accumulator's chain also gives the width its checks measured."""
    kernel = KERNELS[name]
    s: Settings = request.settings
    operands, given = upload_operands(request, kernel, "ternary")
    clocks: list[float] = []
    widths: list[float] = []

    def cycles(iterations: int) -> float:
        launched = launch(request, kernel, operands, given, iterations, 1, LATENCY_THREADS)
        mhz = launched.mhz(s.min_clock_window_ns)
        clocks.extend([] if mhz is None else [mhz])
        widths.extend([] if launched.accumulator_bits is None else [float(launched.accumulator_bits)])
        return float(launched.cycles[0])

    samples = Difference(cycles, s.lengths(kernel.batch), f"{kernel.name}: one dependent wgmma").samples(s.sampling)
    mhz = float(np.median(clocks)) if clocks else None
    facts = [fact(f"{shape_id(kernel)}.latency", samples, "cycle", name, mhz)]
    note = f"{facts[0].value:.1f} cycles per dependent wgmma" + (f" at {mhz:.0f} MHz" if mhz else "")
    if widths:
        note += f"; the chain stopped being exact at 2^{int(np.median(widths))} (the accumulator's width)"
    if publishes_accumulator(kernel):
        facts.append(accumulator_fact(kernel, name, widths, s))
    series = {"latency": {"cycles": samples, "mhz": clocks, "accumulator_bits": widths}}
    return Measured(name, ProbeOutcome("ok", note, series), facts)


def accumulator_fact(kernel: Kernel, name: str, widths: list[float], settings: Settings) -> Fact:
    """``tensor.wgmma.<type>.accumulator_bits``: the width the chain's checks measured (one per launch a
    narrow accumulator stopped), unmeasured where no chain ran long enough to leave its exact range."""
    fact_id = f"tensor.wgmma.{kernel.wgmma.name}.accumulator_bits"
    if widths:
        return fact(fact_id, widths, "count", name)
    why = (f"no chain left the accumulator's exact range: {settings.long_iterations} x A @ B stayed exact, so "
           "the accumulator keeps more bits than that sum needs")  # fmt: skip
    return unmeasured(fact_id, "count", name, why)


# --------------------------------------------------------------------------- throughput


def peak_tflops(flop_per_clock_per_sm: float, sm_count: int, mhz: float) -> float:
    """What ``sm_count`` SMs at ``flop_per_clock_per_sm`` do at ``mhz``, in TFLOP/s: the per-clock peak."""
    return flop_per_clock_per_sm * sm_count * mhz / 1e6


@dataclass
class Rate:
    """One operand kind's timed launches: TFLOP/s and the SM clock of each."""

    tflops: list[float]
    mhz: list[float]

    def per_clock(self, flop_per_clock_per_sm: float, sm_count: int) -> list[float]:
        """Each launch's rate over the peak at the clock it ran at: its fraction of the peak per clock."""
        return [t / peak_tflops(flop_per_clock_per_sm, sm_count, m) for t, m in zip(self.tflops, self.mhz, strict=True)]


def _grid(request: Request, kernel: Kernel) -> tuple[int, int]:
    s: Settings = request.settings
    threads = s.warpgroups_per_block * WARPGROUP
    fit = request.launcher.max_active_blocks(kernel.name, threads, shared_bytes(kernel))
    if fit < 1:
        raise ProbeFailure(f"{kernel.name}: no block of {threads} threads fits on an SM")
    per_sm = min(fit, s.blocks_per_sm) if s.blocks_per_sm else fit
    return request.device.sm_count * per_sm, threads


def measure_rate(request: Request, kernel: Kernel, kind: str) -> Rate:
    """Calibrate the trip count to ``throughput_ms``, then time launches as ``throughput_sampling`` says."""
    s: Settings = request.settings
    operands, given = upload_operands(request, kernel, kind)
    blocks, threads = _grid(request, kernel)
    flop_per_iteration = kernel.flop() * kernel.batch * blocks * threads // WARPGROUP
    first = launch(request, kernel, operands, given, s.calibration_iterations, blocks, threads)
    scale = s.throughput_ms * 1e6 / max(first.span_ns, TIMER_TICK_NS)  # a span under a tick may read 0
    iterations = int(min(max(1, round(s.calibration_iterations * scale)), 2**31 - 1))
    rate = Rate([], [])

    def take() -> None:
        timed = launch(request, kernel, operands, given, iterations, blocks, threads)
        mhz = timed.mhz(s.min_clock_window_ns)
        if mhz is None:  # the calibration was off by more than half
            raise ProbeFailure(f"{kernel.name}: a timed run lasted {float(np.median(timed.ns)) / 1e3:.0f} us, "
                               f"too short to read the SM clock ({s.min_clock_window_ns / 1e3:.0f} us)")  # fmt: skip
        rate.tflops.append(flop_per_iteration * iterations / timed.span_ns / 1e3)
        rate.mhz.append(mhz)

    sample_until_stable(take, rate.tflops, s.throughput_sampling)
    return rate


def peak_at_clock(datasheet: dict[str, float], mhz: float) -> float | None:
    """The datasheet's dense bf16 peak scaled from the clock it assumes to ``mhz`` (None if unknown)."""
    peak, clock = datasheet.get("bf16_dense_tflops"), datasheet.get("bf16_dense_clock_mhz")
    return peak * mhz / clock if peak and clock else None


def _datasheet_facts(request: Request, name: str, rate: Rate) -> list[Fact]:
    """The bf16 rate against the datasheet's dense peak scaled to the clock it ran at (H100 SXM and H200:
    989.4 TFLOP/s at 1830 MHz, i.e. 132 SMs x 4096 flop per clock: the same as its fraction_of_peak)."""
    datasheet = {k: float(v) for k, v in request.state.get("datasheet", {}).items()}
    peaks = [peak_at_clock(datasheet, mhz) for mhz in rate.mhz]
    if not all(peaks):
        why = "no datasheet bf16 peak and its clock for this GPU model (discovery mode)"
        return [unmeasured("tensor.wgmma.bf16.datasheet_peak_at_clock", "TFLOP/s", name, why),
                unmeasured("tensor.wgmma.bf16.fraction_of_peak", "fraction", name, why)]  # fmt: skip
    fractions = [t / p for t, p in zip(rate.tflops, peaks, strict=True) if p]
    return [fact("tensor.wgmma.bf16.datasheet_peak_at_clock", peaks, "TFLOP/s", name),
            fact("tensor.wgmma.bf16.fraction_of_peak", fractions, "fraction", name)]  # fmt: skip


def measure_throughput(request: Request, name: str) -> Measured:
    """Random and zero operands' TFLOP/s, each at its clock and over the peak at that clock; a sparse
    wgmma's rate over its dense twin's; the bf16 reference's rate per clock kept for cuBLAS's probe."""
    kernel = KERNELS[name]
    base = shape_id(kernel)
    rates = {kind: measure_rate(request, kernel, kind) for kind in ("zero", "random")}
    sm_count = request.device.sm_count
    per_clock = {kind: rate.per_clock(peak_flop_per_clock(kernel), sm_count) for kind, rate in rates.items()}
    facts = [
        fact(f"{base}.tflops", rates["random"].tflops, "TFLOP/s", name),
        fact(f"{base}.zero_operands.tflops", rates["zero"].tflops, "TFLOP/s", name),
        fact(f"{base}.sm_clock", rates["random"].mhz, "MHz", name),
        fact(f"{base}.zero_operands.sm_clock", rates["zero"].mhz, "MHz", name),
        fact(f"{base}.fraction_of_peak", per_clock["random"], "fraction", name),
        fact(f"{base}.zero_operands.fraction_of_peak", per_clock["zero"], "fraction", name),
    ]
    random, zero, random_mhz, zero_mhz, random_peak, zero_peak = (f.value for f in facts)
    note = (f"{random:.1f} TFLOP/s random at {random_mhz:.0f} MHz ({random_peak:.3f} of the peak per clock), "
            f"{zero:.1f} zero operands at {zero_mhz:.0f} MHz ({zero_peak:.3f})")  # fmt: skip
    dense_rates = request.state.setdefault(DENSE_RATES, {})
    if kernel.sparse:
        twin = shape_id(dense_twin(kernel))
        if dense_rates.get(twin):
            reference = float(np.median(dense_rates[twin]))
            facts.append(fact(f"{base}.over_dense", [t / reference for t in rates["random"].tflops], "ratio", name))
            note += f"; {facts[-1].value:.2f} x the dense {twin.removeprefix('tensor.')} (datasheet: 2 x)"
        else:
            why = f"the dense twin ({twin}) was not measured in this run"
            facts.append(unmeasured(f"{base}.over_dense", "ratio", name, why))
    else:
        dense_rates[base] = rates["random"].tflops
        peak = peak_flop_per_clock(kernel)
        instruction_peak.record(request.state, kernel.wgmma.name, [f * peak for f in per_clock["random"]], name)
    if is_cublas_reference(kernel):
        request.state[BF16_PER_CLOCK] = per_clock["random"]
        facts += _datasheet_facts(request, name, rates["random"])
    series = {kind: {"tflops": r.tflops, "mhz": r.mhz} for kind, r in rates.items()}
    return Measured(name, ProbeOutcome("ok", note, series), facts)


# --------------------------------------------------------------------------- cuBLAS


def time_gemms(request: Request, n: int, count: int, window_ns: float, stamp: str = CLOCK_STAMP_KERNEL) -> GemmTiming:
    """``count`` cuBLAS bf16 n^3 GEMMs between clock stamps (``stamp``, a copy of :data:`CLOCK_STAMP_KERNEL`:
    :func:`gpuprobe.families.library_timing.time_gemms`), each at least :data:`GEMM_MIN_MS` (a shorter one is its
    call and last wave, not cuBLAS's throughput); LaunchPathUnavailable where the launcher has no cuBLAS."""
    timing = library_timing.time_gemms(request, GemmShape(n, n, n), GEMM_DTYPE, count, window_ns, stamp)
    if timing.ms / count < GEMM_MIN_MS:
        raise ProbeFailure(f"a {n}^3 GEMM took {timing.ms / count * 1e3:.0f} us, under {GEMM_MIN_MS} ms: its "
                           "call and last wave, not cuBLAS's throughput")  # fmt: skip
    return timing


def measure_cublas(request: Request, name: str) -> Measured:
    """cuBLAS's bf16 GEMM: TFLOP/s, the clock it ran at, its fraction of the peak per clock, and the bf16
    wgmma's rate per clock over it; not run (with the reason) where cuBLAS cannot be loaded."""
    rate = Rate([], [])

    def take() -> None:
        s: Settings = request.settings
        gemm = time_gemms(request, s.gemm_n, s.gemm_count, s.min_clock_window_ns)
        rate.tflops.append(gemm.tflops)
        rate.mhz.append(gemm.mhz)

    try:
        sample_until_stable(take, rate.tflops, request.settings.gemm_sampling)
    except LaunchPathUnavailable as exc:
        why = str(exc)
        return Measured(name, ProbeOutcome("not_run", why), [unmeasured(i, u, name, why) for i, u in CUBLAS_FACTS])
    fractions = rate.per_clock(HOPPER_FLOP_PER_CLK_PER_SM[GEMM_DTYPE], request.device.sm_count)
    facts = [fact("tensor.cublas.bf16.tflops", rate.tflops, "TFLOP/s", name),
             fact("tensor.cublas.bf16.sm_clock", rate.mhz, "MHz", name),
             fact("tensor.cublas.bf16.fraction_of_peak", fractions, "fraction", name)]  # fmt: skip
    note = (f"{facts[0].value:.1f} TFLOP/s at {facts[1].value:.0f} MHz ({facts[2].value:.3f} of the peak per clock), "
            f"{request.settings.gemm_count} x {request.settings.gemm_n}^3 a timing")  # fmt: skip
    wgmma = request.state.get(BF16_PER_CLOCK)
    if wgmma:
        reference = float(np.median(fractions))
        facts.append(fact("tensor.wgmma.bf16.fraction_of_cublas", [w / reference for w in wgmma], "fraction", name))
        note += f"; wgmma bf16 {facts[-1].value:.3f} x cuBLAS per clock"
    else:
        why = f"the bf16 wgmma rate ({PROBES[0]}) was not measured in this run"
        facts.append(unmeasured("tensor.wgmma.bf16.fraction_of_cublas", "fraction", name, why))
    return Measured(name, ProbeOutcome("ok", note, {"cublas": {"tflops": rate.tflops, "mhz": rate.mhz}}), facts)


# --------------------------------------------------------------------------- the family


LATENCY_EXTRA_CYCLES = 64  # a dependent wgmma's issue, commit and wait beyond its floor, at most (generous)
GEMM_TFLOPS = 500.0  # cuBLAS's bf16 GEMM rate planned with (H100-class parts reach 600 to 800)
GEMM_HOST_S_PER_VALUE = 20e-9  # each cuBLAS timing draws random operand values on the host, and converts them
GEMM_COPY_S_PER_VALUE = 1e-9  # the repeat and the upload, per value of the 2 n^2


def peak_flop_per_clock(kernel: Kernel) -> float:
    """An SM's flop per clock at the datasheet rate for ``kernel``: the dense rate, twice it for a sparse A."""
    return HOPPER_FLOP_PER_CLK_PER_SM[kernel.wgmma.name] * (SPARSE_GAIN if kernel.sparse else 1)


def latency_floor(kernel: Kernel) -> float:
    """The fewest cycles a wgmma of ``kernel`` can take: its work over an SM's peak rate (N/2)."""
    return kernel.flop() / peak_flop_per_clock(kernel)


def _checked_launches(launches: int, words: int) -> Plan:
    """``launches`` checked launches writing ``words`` uint32 each: the calls, and the read-back and check."""
    return Plan(0, launches * CHECKED_LAUNCH_CALLS, 0.0, launches * readback_host_s(words * 4))


def plan(settings: Settings, device: Device) -> Plan:
    """What every probe costs at most on ``device`` (an sm_90a part: elsewhere none runs): each latency
    sample's two runs at twice the floor plus :data:`LATENCY_EXTRA_CYCLES` per iteration, each timed
    throughput run (and the calibration) at most twice ``throughput_ms``, two operand uploads per
    latency probe and per throughput operand kind, every launch's records and D read back and checked,
    and the cuBLAS timings (each runs its GEMMs twice, the first untimed, after drawing its operands, and
    the timed ones between two clock stamps, read back)."""
    s = settings
    total = Plan(len(PROBES), 0, 0.0)
    for kernel in _LATENCY:
        cycles = (s.short_iterations + s.long_iterations) * (2 * latency_floor(kernel) + LATENCY_EXTRA_CYCLES)
        repeats = s.sampling.max_repeats
        checked = _checked_launches(2 * repeats, RECORD_WORDS + WARPGROUP * kernel.registers)
        total += checked + Plan(0, 2, repeats * cycles_s(cycles, device))
    threads = s.warpgroups_per_block * WARPGROUP
    blocks = device.sm_count * (s.blocks_per_sm or max(1, MAX_THREADS_PER_SM // threads))
    for kernel in _THROUGHPUT:
        launches = 2 * (1 + s.throughput_sampling.max_repeats)  # per operand kind: the calibration, then the timed
        words = blocks * threads // WARPGROUP * (RECORD_WORDS + WARPGROUP * kernel.registers)
        total += _checked_launches(launches, words) + Plan(0, 2 * 2, launches * 2 * s.throughput_ms / 1e3)
    gemms = 2 * s.gemm_count * 2.0 * s.gemm_n**3 / (GEMM_TFLOPS * 1e12)
    gemm = held_batch_s(s.gemm_count + 2, 0.0, device) + gemms  # the GEMMs and their two clock stamps
    drawn = min(s.gemm_n, GEMM_DRAWN_ROWS) * GEMM_HOST_S_PER_VALUE + s.gemm_n * GEMM_COPY_S_PER_VALUE
    operands_s = 2 * s.gemm_n * drawn
    timings = s.gemm_sampling.max_repeats
    stamps = _checked_launches(timings, 2 * STAMPS_PER_SM * device.sm_count * 2 * STAMP_WORDS)
    return total + stamps + Plan(0, 3 * timings, timings * gemm, timings * operands_s)


# First contact: the bf16 m64n256k16 throughput from shared memory (every SM, the calibration, zero and
# random operands), cuBLAS beside it and the cheapest latency chain (bf16, N = 8), each checked. Every
# fact they publish keeps its full-run meaning, with fewer samples: the full run's three warpgroups a
# block (one warpgroup an SM issues ~3 % under the peak per clock: an H200 smoke run read 0.964 where the
# full run read 0.993), timed runs of a millisecond, and cuBLAS's 8192^3 GEMM twice in one timing (2.7 ms
# at 800 TFLOP/s, not a 1024^3 GEMM's call overhead); one sample of each.
SMOKE_SETTINGS = Settings(short_iterations=1, long_iterations=64, sampling=ONE_SAMPLE, throughput_ms=1.0,
                          throughput_sampling=ONE_SAMPLE, gemm_count=2, gemm_sampling=ONE_SAMPLE)  # fmt: skip
SMOKE = Smoke(probes=(PROBES[0], CUBLAS_PROBE, "wgmma.latency.bf16.ss.n8"), settings=SMOKE_SETTINGS)


def measure(request: Request) -> Probes:
    """The family's runnable probes in order, each as (name, step). A wrong D or an impossible timing
    raises ProbeFailure; anything else (a CUDA error) propagates for the caller to isolate."""
    request = dataclasses.replace(request, settings=request.settings or Settings())
    steps = {name: lambda name=name: measure_probe(request, name) for name in PROBES}
    return probe_steps(PROBES, steps, request.runnable)


def measure_probe(request: Request, name: str) -> Measured:
    """One probe: cuBLAS's GEMM, or a wgmma kernel's latency or throughput."""
    if name == CUBLAS_PROBE:
        return measure_cublas(request, name)
    step = measure_latency if KERNELS[name].purpose == "lat" else measure_throughput
    return step(request, name)


# --------------------------------------------------------------------------- invariants and the sheet


def _measured(facts: dict[str, Fact], fact_id: str) -> Fact | None:
    found = facts.get(fact_id)
    return found if found is not None and found.value is not None else None


def check_suffix(fact_id: str) -> str:
    """What an invariant's name says of the fact it checks: ``bf16.m64n256k16.ss``; ``sp.bf16...`` if sparse."""
    family, rest = fact_id.split(".", 2)[1:]
    return f"sp.{rest}" if family == "wgmma_sp" else rest


def cublas_invariant(facts: dict[str, Fact], device: Device) -> list[Check]:
    """The bf16 wgmma rate per clock over cuBLAS's, both ways: at least :data:`CUBLAS_FRACTION_MIN` (the
    probe saturates the tensor cores: a consistency check, full runs only), and at most
    TIMER_ALLOWANCE / CUBLAS_PER_CLOCK_FLOOR (physics: wgmma cannot beat its own per-clock peak, nor
    cuBLAS fall under half of it on an 8192^3 GEMM; beyond that the cuBLAS figure is no throughput, as an
    H200 smoke run's 29.9 x was, and neither it nor the ratio may pass)."""
    fraction = _measured(facts, "tensor.wgmma.bf16.fraction_of_cublas")
    if fraction is None:
        return []
    low, high = bounds(fraction)
    ceiling = TIMER_ALLOWANCE / CUBLAS_PER_CLOCK_FLOOR
    cublas = tuple(i for i, _ in CUBLAS_FACTS if _measured(facts, i) is not None)
    return [
        Check("wgmma.bf16_reaches_cublas", high >= CUBLAS_FRACTION_MIN,
              f"wgmma bf16 at {fraction.value:.3f} x cuBLAS per clock (CI up to {high:.3f}; >= {CUBLAS_FRACTION_MIN})",
              (fraction.id,)),
        Check("wgmma.bf16_within_cublas_reach", low <= ceiling,
              f"wgmma bf16 at {fraction.value:.3f} x cuBLAS per clock (CI from {low:.3f}); at most {ceiling:.2f}: "
              f"wgmma at {TIMER_ALLOWANCE} of the peak per clock over cuBLAS at {CUBLAS_PER_CLOCK_FLOOR}",
              cublas, physics=True),
    ]  # fmt: skip


def rate_invariants(facts: dict[str, Fact], device: Device) -> list[Check]:
    """No wgmma runs faster than Hopper's dense rate per SM at the clock it ran (2 % for timer noise)."""
    checks = []
    for kernel in _THROUGHPUT:
        base = shape_id(kernel)
        for prefix in (base, f"{base}.zero_operands"):
            tflops, mhz = _measured(facts, f"{prefix}.tflops"), _measured(facts, f"{prefix}.sm_clock")
            if tflops is None or mhz is None:
                continue
            ceiling = peak_tflops(peak_flop_per_clock(kernel), device.sm_count, mhz.value)
            name = f"wgmma.rate_below_peak.{check_suffix(prefix)}"
            detail = f"{tflops.value:.1f} TFLOP/s vs {ceiling:.1f} at {mhz.value:.0f} MHz"
            ok = tflops.value <= TIMER_ALLOWANCE * ceiling
            checks.append(Check(name, ok, detail, (f"{prefix}.tflops", f"{prefix}.fraction_of_peak"), physics=True))
    return checks


def clock_invariants(facts: dict[str, Fact], device: Device) -> list[Check]:
    """No clock a wgmma or cuBLAS's GEMMs ran at exceeds the part's highest SM clock (the timer allowance
    over it): above it the reading is wrong (a kernel's own timers, or clock stamps paired across SMs), and
    so is every rate per clock computed from it."""
    top = device.sm_clock_nominal_mhz
    ran = ("tensor.wgmma", "tensor.cublas.")
    clocks = [f for i, f in facts.items() if i.startswith(ran) and i.endswith(".sm_clock")]
    checks = []
    for clock in (c for c in clocks if c.value is not None and top):
        what = clock.id.removeprefix("tensor.").removesuffix(".sm_clock")
        detail = f"{clock.value:.0f} MHz (CI from {bounds(clock)[0]:.0f}) vs the part's highest, {top:.0f} MHz"
        held = (clock.id, clock.id.removesuffix("sm_clock") + "fraction_of_peak")
        ok = bounds(clock)[0] <= TIMER_ALLOWANCE * top
        checks.append(Check(f"wgmma.clock_within_boost.{what}", ok, detail, held, physics=True))
    return checks


def latency_floor_invariants(facts: dict[str, Fact], device: Device) -> list[Check]:
    """A wgmma's latency is at least N/2 cycles: its 64 x N x 32 bytes of work over an SM's dense rate."""
    checks = []
    for kernel in _LATENCY:
        latency = _measured(facts, f"{shape_id(kernel)}.latency")
        if latency is not None:
            floor = latency_floor(kernel)
            detail = f"{latency.value:.1f} cycles vs a floor of {floor:.0f}"
            name = f"wgmma.latency_floor.{check_suffix(latency.id)}"
            checks.append(Check(name, latency.value >= floor, detail, (latency.id,), physics=True))
    return checks


def mma_sync_below_wgmma(facts: dict[str, Fact], device: Device) -> list[Check]:
    """On Hopper, mma.sync tops out well under the dense peak while wgmma reaches it: the bf16
    mma.sync rate (the mma family) stays below the bf16 wgmma rate measured in the same run."""
    sync = _measured(facts, "tensor.mma_sync.bf16.m16n8k16.tflops")
    wide = _measured(facts, "tensor.wgmma.bf16.m64n256k16.ss.tflops")
    if sync is None or wide is None:
        return []
    detail = f"mma.sync bf16 {sync.value:.1f} vs wgmma bf16 {wide.value:.1f} TFLOP/s"
    return [Check("wgmma.mma_sync_below_wgmma", sync.value < wide.value, detail, (sync.id, wide.id))]


def sparse_at_least_dense(facts: dict[str, Fact], device: Device) -> list[Check]:
    """A 2:4 sparse wgmma does at least the work per second of its dense twin (same tile, same A source),
    counting the skipped zeros as the datasheets do, beyond the noise: it fails only when the sparse
    rate's confidence interval lies wholly under the dense one's."""
    checks = []
    for kernel in (k for k in _THROUGHPUT if k.sparse):
        sparse, dense = (_measured(facts, f"{shape_id(k)}.tflops") for k in (kernel, dense_twin(kernel)))
        if sparse is None or dense is None:
            continue
        detail = f"sparse {sparse.value:.1f} vs dense {dense.value:.1f} TFLOP/s ({sparse.value / dense.value:.2f} x)"
        ok = not_below_beyond_noise(sparse, dense)
        checks.append(Check(f"wgmma.sparse_at_least_dense.{check_suffix(sparse.id)}", ok, detail, (sparse.id,)))
    return checks


INVARIANTS = (cublas_invariant, rate_invariants, clock_invariants, latency_floor_invariants, mma_sync_below_wgmma,
              sparse_at_least_dense)  # fmt: skip

SECTIONS = (
    Section(
        title="Tensor cores: wgmma (sm_90a)",
        fact_prefixes=("tensor.wgmma.", "tensor.cublas."),
        probe_prefixes=("wgmma.",),
        plot=Plot("wgmma_latency_vs_n", "wgmma_latency_vs_n.png", "wgmma latency vs N", latency_png),
        blurb=(
            "wgmma.mma_async per type (bf16, f16, tf32, e4m3, s8), N and A source (ss: shared memory, rs: "
            "registers). Latency: one warpgroup, each wgmma waiting for the last. Throughput: every SM, batches "
            "of 16 m64n256 wgmmas; TFLOP/s from the kernel's own global timer, at the SM clock measured in the "
            "same kernel, with random operands (the honest figure) and with zeros (less power, a higher clock). "
            "On Hopper every configuration issues at its peak per clock within a percent or two, and what moves "
            "TFLOP/s is the clock the operands' power draw allows: so each rate is judged per clock "
            "(fraction_of_peak: over 4096 flop per clock per SM for bf16, x SMs x its clock); its TFLOP/s is a "
            "warn, its verdict naming the clock it ran at. Random e4m3 operands are every finite byte in A and B,"
            " more power than a benchmark that randomizes A alone (Johnsonms/NVIDIA-Hopper-Benchmark's 'random "
            "A'), so they run at the lowest clock here: a legitimate worst case, not a slow tensor core. bf16 is "
            "set against cuBLAS's 8192^3 GEMM measured in the same run, at the clock that GEMM ran at (clock "
            "stamps from the same stream right before and after it), per clock (fraction_of_cublas), and against "
            "the datasheet dense peak scaled to the measured clock (datasheet_peak_at_clock, fraction_of_peak). "
            "Every D was checked against NumPy; e4m3 latency chains stop being exact where Hopper's fp8 "
            "accumulator drops a unit product, and the width at which they stop is measured (accumulator_bits)."
        ),
    ),
    Section(
        title="Tensor cores: 2:4 structured sparsity",
        fact_prefixes=("tensor.wgmma_sp.", "tensor.mma_sync_sp."),
        probe_prefixes=("wgmma.sp.", "mma.sp."),
        plot=Plot("sparse_vs_dense", "sparse_vs_dense.png", "sparse vs dense tensor-core throughput vs N", sparse_png),
        blurb=(
            "wgmma.mma_async.sp (sm_90a, bf16, A from shared memory) at N 64..256 and mma.sp (sm_80+) beside the "
            "dense instruction of the same M x N tile: latency, and throughput counting the skipped zeros as the "
            "datasheets do (a sparse m64nNk32 is 2 x 64 x N x 32 flop). over_dense is the sparse rate over the "
            "dense one measured in the same run; the datasheets promise 2 x. A's 2:4 pattern and metadata are "
            "built on the host and every D checked against NumPy applying the pattern."
        ),
    ),
)


FAMILY = Family(
    name="wgmma",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
    sections=SECTIONS,
    invariants=INVARIANTS,
)
