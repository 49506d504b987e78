"""The wgmma family (sm_90a): latency and throughput of wgmma.mma_async, checked against NumPy.

Order of measurement:

1. ``wgmma.throughput.bf16.ss`` first, while the GPU is coolest of this family's work: every SM
   runs a block of three warpgroups (no second fits), each warpgroup issuing batches of 16 m64n256k16
   wgmmas with one wait per batch; TFLOP/s over the GPU from the kernel's own %globaltimer (first
   start to last end), the SM clock from %clock64 over %globaltimer in the same kernel. Zero and
   random operands both (the power effect). Then cuBLAS's 8192^3 bf16 GEMM in the same process:
   the wgmma rate over cuBLAS's, and over the datasheet dense peak scaled to the measured clock.
2. The other throughput probes (bf16 RS, f16, tf32, e4m3, s8; SS and RS), the same way.
3. Latency, per type, N and A source: one warpgroup, wgmma + commit + wait 0 per iteration, each
   accumulating onto the last; a sample is a long minus a short loop's cycles over the difference
   in iterations, so everything paid once cancels. The SM clock (for the latency in ns) is read over
   the long loops only where they last ``min_clock_window_ns``: %globaltimer moves in ticks of about
   a microsecond, so a window of W ns reads the clock to a tick in W; the short loop, under a
   microsecond at small N, may read 0 ns, and its ns are not used.

Every launch reads back every warpgroup's D registers, maps them to rows and columns by the
PTX ISA's D-fragment layout (:mod:`gpuprobe.families.wgmma.layout`) and holds them to
``times x A @ B`` from NumPy within the type's tolerance (int8 exactly); a wrong D fails the
probe and gives no facts.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.families.base import Measured, Plan, ProbeFailure, Probes, Request, Smoke
from gpuprobe.families.measuring import (
    TIMER_TICK_NS,
    Kernels,
    Stopping,
    clock_mhz,
    clock_window_ns,
    fact,
    require_counts,
    require_long_after_short,
    sample_until_stable,
    unmeasured,
)
from gpuprobe.families.planning import KERNEL_RUN_CALLS, MAX_THREADS_PER_SM, cycles_s, held_batch_s, readback_host_s
from gpuprobe.families.sparsity import not_below_beyond_noise
from gpuprobe.families.stepping import runs
from gpuprobe.families.wgmma.layout import (
    LEADING_BYTES,
    WARPGROUP,
    M,
    a_fragments,
    core_matrix_bytes,
    d_from_fragments,
    layout_bits,
)
from gpuprobe.families.wgmma.operands import Operands, SparseOperands, make_operands, make_sparse_operands, mismatch
from gpuprobe.families.wgmma.plot import latency_png, sparse_png
from gpuprobe.families.wgmma.ptx import A_BYTES, LATENCY_THREADS, THROUGHPUT_N, Kernel, kernels
from gpuprobe.output.sections import Plot, Section
from gpuprobe.runner.gpu import Launcher, LaunchPathUnavailable

RECORD_WORDS = 8  # uint32 words per warpgroup record: cycles, ns, start, end (u64 each)
DENSE_RATES = "wgmma_dense_tflops"  # state: each dense throughput probe's TFLOP/s, by shape, for the sparse ones
SPARSE_GAIN = 2  # the datasheets' sparse peak over the dense one (H100: 1979 vs 989 bf16 TFLOP/s)
GEMM_DTYPE = "bf16"
# Dense flop per clock per SM of Hopper's tensor cores (docs/datasheets.md: the H100 whitepaper's dense
# rates over 132 SMs at 1830 MHz).
HOPPER_FLOP_PER_CLK_PER_SM = {"bf16": 4096, "f16": 4096, "tf32": 2048, "e4m3": 8192, "s8": 8192}
CUBLAS_FRACTION_MIN = 0.95


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


_THROUGHPUT = sorted(  # dense first: a sparse wgmma's rate is set against its dense twin's
    (k for k in kernels() if k.purpose == "tput"),
    key=lambda k: (k.sparse, k.wgmma.name != "bf16", k.source != "ss", k.n != THROUGHPUT_N, k.n),
)
_LATENCY = [k for k in kernels() if k.purpose == "lat"]
KERNELS: dict[str, Kernel] = {probe_name(k): k for k in [*_THROUGHPUT, *_LATENCY]}
PROBES = list(KERNELS)


@dataclass(frozen=True)
class Settings:
    short_iterations: int = 64  # a latency sample: the long loop minus the short one
    long_iterations: int = 32768  # x >= 8 cycles (a wgmma, its commit and wait) at <= 2 GHz: >= 130 us
    min_repeats: int = 3
    max_repeats: int = 7
    target_noise: float = 0.01
    latency_budget_s: float = 0.5  # per latency probe
    warpgroups_per_block: int = 3
    # Throughput blocks per SM: at most this many of those that fit (occupancy API); 0: all that fit. On
    # sm_90a a second block of three warpgroups never fits (154-158 registers x 384 threads).
    blocks_per_sm: int = 1
    calibration_iterations: int = 8  # a first throughput launch, to size the timed ones
    throughput_ms: float = 4.0  # each timed throughput launch lasts about this long
    throughput_repeats: int = 3  # timed launches per operand kind
    gemm_n: int = 8192
    gemm_count: int = 10  # GEMMs per cuBLAS timing
    gemm_repeats: int = 3
    min_clock_window_ns: float = clock_window_ns(0.01)  # 100 us: a run this long reads the SM clock to 1 %
    seed: int = 20250901

    def __post_init__(self) -> None:
        counts = ("short_iterations", "min_repeats", "calibration_iterations", "throughput_repeats", "gemm_n",
                  "gemm_count", "gemm_repeats")  # fmt: skip
        require_counts(self, counts)
        require_long_after_short(self)
        if self.blocks_per_sm < 0:
            raise ValueError(f"Settings.blocks_per_sm must be 0 (as many as fit) or more, got {self.blocks_per_sm}")
        if not 1 <= self.warpgroups_per_block <= 3:
            raise ValueError(f"Settings.warpgroups_per_block must be 1 to 3, got {self.warpgroups_per_block}")
        if self.throughput_ms * 1e6 < 2 * self.min_clock_window_ns:
            raise ValueError(
                f"Settings.throughput_ms must be at least {2 * self.min_clock_window_ns / 1e6:g} ms (twice "
                f"min_clock_window_ns: each timed run reads the SM clock), got {self.throughput_ms}"
            )

    def stopping(self) -> Stopping:
        return Stopping(self.min_repeats, self.max_repeats, self.target_noise, self.latency_budget_s)


# --------------------------------------------------------------------------- one launch


def shared_bytes(kernel: Kernel) -> int:
    """A, then B: the dynamic shared memory a kernel's block takes."""
    return A_BYTES + kernel.n * kernel.b_row_bytes


@dataclass(frozen=True)
class Launched:
    """What one launch measured: per warpgroup cycles, ns, start and end (%globaltimer ns after the first start)."""

    cycles: np.ndarray
    ns: np.ndarray
    start: np.ndarray
    end: np.ndarray

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


def check_result(fragments: np.ndarray, kernel: Kernel, operands: Operands, times: int) -> None:
    """Every warpgroup's D is bit-identical, and it is ``times`` x A @ B: else ProbeFailure."""
    differing = np.flatnonzero(np.any(fragments != fragments[:1], axis=(1, 2)))
    if len(differing):
        raise ProbeFailure(
            f"{kernel.name}: warpgroup {int(differing[0])}'s D differs from warpgroup 0's "
            f"({len(differing)} of {len(fragments)} warpgroups)"
        )
    dtype = np.float32 if kernel.wgmma.accumulator == "f32" else np.int32
    d = d_from_fragments(fragments[0].view(dtype), kernel.n)
    problem = mismatch(d, operands, times)
    if problem:
        raise ProbeFailure(f"{kernel.name}: {problem}")


@dataclass
class _Context:
    launcher: Launcher
    device: Device
    settings: Settings
    kernels: Kernels
    datasheet: dict[str, float]
    outs: dict[int, Any] = field(default_factory=dict)  # output buffers by size, reused across launches
    state: dict[str, Any] = field(default_factory=dict)  # the run's state (request.state): the dense rates

    def upload_operands(self, kernel: Kernel, kind: str) -> tuple[Operands, list[Any]]:
        """Operands of ``kind`` for ``kernel``, and the arguments that hand them over (all but iters, out):
        A (its kept elements, for a sparse kernel) and B in core-matrix order, their layout bits, and a
        sparse kernel's metadata registers."""
        seed = self.settings.seed
        made = (make_sparse_operands if kernel.sparse else make_operands)(kernel.wgmma, kernel.n, kind, seed)
        if kernel.source == "ss":
            a = self.launcher.upload(core_matrix_bytes(made.a_bits.view(np.uint8).reshape(M, -1)))
        else:
            a = self.launcher.upload(a_fragments(made.a_bits, kernel.wgmma).reshape(-1))
        b_rows = made.b_bits.view(np.uint8).reshape(kernel.n, -1)
        b = self.launcher.upload(core_matrix_bytes(b_rows, kernel.b_row_bytes))
        args = [a, b, np.uint64(layout_bits())]
        if isinstance(made, SparseOperands):
            b_layout = layout_bits(stride_bytes=kernel.b_row_bytes // 16 * LEADING_BYTES)
            args += [np.uint64(b_layout), self.launcher.upload(made.metadata())]
        return made, args

    def launch(
        self, kernel: Kernel, operands: Operands, given: list[Any], iterations: int, blocks: int, threads: int
    ) -> Launched:
        """One checked launch: its records, after D was held to the NumPy reference."""
        warpgroups = blocks * threads // WARPGROUP
        words = warpgroups * (RECORD_WORDS + WARPGROUP * kernel.registers)
        if words not in self.outs:
            self.outs[words] = self.launcher.alloc(words * 4)
        out = self.outs[words]
        args = [*given, np.uint32(iterations), out]
        values = self.kernels.run(kernel.name, args, out, words, dtype="uint32", grid=blocks, block=threads,
                                  shared=shared_bytes(kernel))  # fmt: skip
        records, fragments = split_output(values, warpgroups, kernel.registers)
        check_result(fragments, kernel, operands, times=iterations if kernel.purpose == "lat" else kernel.batch)
        # %globaltimer readings are ns since the Unix epoch, past float64's exact integers: compared as
        # integers, and kept as floats only after the launch's first start is taken off
        cycles, ns, start, end = (records[:, i] for i in range(4))
        if np.any(cycles == 0) or np.any(end < start):
            raise ProbeFailure(f"{kernel.name}: impossible timing (cycles {cycles.min()}, ns {ns.min()})")
        if np.any(ns != end - start):
            raise ProbeFailure(f"{kernel.name}: a warpgroup's timer window is not its end reading minus its start")
        origin = start.min()
        return Launched(*(a.astype(np.float64) for a in (cycles, ns, start - origin, end - origin)))


# --------------------------------------------------------------------------- latency


def per_wgmma_cycles(short_cycles: float, long_cycles: float, settings: Settings) -> float:
    """One dependent wgmma (+ commit + wait): the long loop minus the short, over the iterations between."""
    return (long_cycles - short_cycles) / (settings.long_iterations - settings.short_iterations)


def measure_latency(ctx: _Context, name: str) -> Measured:
    kernel = KERNELS[name]
    s = ctx.settings
    operands, given = ctx.upload_operands(kernel, "ternary")
    samples: list[float] = []
    clocks: list[float] = []

    def take() -> None:
        short = ctx.launch(kernel, operands, given, s.short_iterations, 1, LATENCY_THREADS)
        long = ctx.launch(kernel, operands, given, s.long_iterations, 1, LATENCY_THREADS)
        latency = per_wgmma_cycles(float(short.cycles[0]), float(long.cycles[0]), s)
        if latency <= 0:
            raise ProbeFailure(f"{kernel.name}: the long loop took no longer than the short one")
        samples.append(latency)
        mhz = long.mhz(s.min_clock_window_ns)
        if mhz is not None:
            clocks.append(mhz)

    sample_until_stable(take, samples, s.stopping())
    mhz = float(np.median(clocks)) if clocks else None
    result = fact(f"{shape_id(kernel)}.latency", samples, "cycle", name, mhz)
    note = f"{result.value:.1f} cycles per dependent wgmma" + (f" at {mhz:.0f} MHz" if mhz else "")
    return Measured(name, ProbeOutcome("ok", note, {"latency": {"cycles": samples, "mhz": clocks}}), [result])


# --------------------------------------------------------------------------- throughput


@dataclass
class Rate:
    """One operand kind's timed launches: TFLOP/s and the SM clock of each."""

    tflops: list[float]
    mhz: list[float]


def _grid(ctx: _Context, kernel: Kernel) -> tuple[int, int]:
    threads = ctx.settings.warpgroups_per_block * WARPGROUP
    fit = ctx.launcher.max_active_blocks(kernel.name, threads, shared_bytes(kernel))
    if fit < 1:
        raise ProbeFailure(f"{kernel.name}: no block of {threads} threads fits on an SM")
    per_sm = min(fit, ctx.settings.blocks_per_sm) if ctx.settings.blocks_per_sm else fit
    return ctx.device.sm_count * per_sm, threads


def measure_rate(ctx: _Context, kernel: Kernel, kind: str) -> Rate:
    """Calibrate the trip count to ``throughput_ms``, then time ``throughput_repeats`` launches."""
    s = ctx.settings
    operands, given = ctx.upload_operands(kernel, kind)
    blocks, threads = _grid(ctx, kernel)
    flop_per_iteration = kernel.flop() * kernel.batch * blocks * threads // WARPGROUP
    first = ctx.launch(kernel, operands, given, s.calibration_iterations, blocks, threads)
    scale = s.throughput_ms * 1e6 / max(first.span_ns, TIMER_TICK_NS)  # a span under a tick may read 0
    iterations = int(min(max(1, round(s.calibration_iterations * scale)), 2**31 - 1))
    rate = Rate([], [])
    for _ in range(s.throughput_repeats):
        run = ctx.launch(kernel, operands, given, iterations, blocks, threads)
        mhz = run.mhz(s.min_clock_window_ns)
        if mhz is None:  # the calibration was off by more than half
            raise ProbeFailure(f"{kernel.name}: a timed run lasted {float(np.median(run.ns)) / 1e3:.0f} us, "
                               f"too short to read the SM clock ({s.min_clock_window_ns / 1e3:.0f} us)")  # fmt: skip
        rate.tflops.append(flop_per_iteration * iterations / run.span_ns / 1e3)
        rate.mhz.append(mhz)
    return rate


def cublas_tflops(ctx: _Context) -> list[float]:
    s = ctx.settings
    flop = 2.0 * s.gemm_n**3 * s.gemm_count
    return [flop / (ctx.launcher.time_gemm(s.gemm_n, GEMM_DTYPE, s.gemm_count) * 1e9) for _ in range(s.gemm_repeats)]


def peak_at_clock(datasheet: dict[str, float], mhz: float) -> float | None:
    """The datasheet's dense bf16 peak scaled from the clock it assumes to ``mhz`` (None if unknown)."""
    peak, clock = datasheet.get("bf16_dense_tflops"), datasheet.get("bf16_dense_clock_mhz")
    return peak * mhz / clock if peak and clock else None


def _cublas_facts(ctx: _Context, name: str, rate: Rate) -> tuple[list[Fact], str]:
    try:
        cublas = cublas_tflops(ctx)
    except LaunchPathUnavailable as exc:  # no cuBLAS here: the wgmma rate stands, the comparison is not run
        facts = [unmeasured("tensor.cublas.bf16.tflops", "TFLOP/s", name, str(exc)),
                 unmeasured("tensor.wgmma.bf16.fraction_of_cublas", "fraction", name, str(exc))]  # fmt: skip
        note = f"; {exc}"
    else:
        reference = float(np.median(cublas))
        facts = [
            fact("tensor.cublas.bf16.tflops", cublas, "TFLOP/s", name),
            fact("tensor.wgmma.bf16.fraction_of_cublas", [t / reference for t in rate.tflops], "fraction", name),
        ]
        note = f"; cuBLAS {reference:.1f} TFLOP/s"
    peaks = [peak_at_clock(ctx.datasheet, mhz) for mhz in rate.mhz]
    if all(peaks):
        facts.append(fact("tensor.wgmma.bf16.datasheet_peak_at_clock", peaks, "TFLOP/s", name))
        fractions = [t / p for t, p in zip(rate.tflops, peaks, strict=True) if p]
        facts.append(fact("tensor.wgmma.bf16.fraction_of_peak", fractions, "fraction", name))
        note += f", datasheet peak at the measured clock {float(np.median(peaks)):.1f}"
    else:
        why = "no datasheet bf16 peak and its clock for this GPU model (discovery mode)"
        facts += [unmeasured("tensor.wgmma.bf16.datasheet_peak_at_clock", "TFLOP/s", name, why),
                  unmeasured("tensor.wgmma.bf16.fraction_of_peak", "fraction", name, why)]  # fmt: skip
    return facts, note


def measure_throughput(ctx: _Context, name: str) -> Measured:
    kernel = KERNELS[name]
    base = shape_id(kernel)
    rates = {kind: measure_rate(ctx, kernel, kind) for kind in ("zero", "random")}
    facts = [
        fact(f"{base}.tflops", rates["random"].tflops, "TFLOP/s", name),
        fact(f"{base}.zero_operands.tflops", rates["zero"].tflops, "TFLOP/s", name),
        fact(f"{base}.sm_clock", rates["random"].mhz, "MHz", name),
        fact(f"{base}.zero_operands.sm_clock", rates["zero"].mhz, "MHz", name),
    ]
    note = f"{facts[0].value:.1f} TFLOP/s random, {facts[1].value:.1f} zero operands"
    dense_rates = ctx.state.setdefault(DENSE_RATES, {})
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
    if kernel.wgmma.name == GEMM_DTYPE and kernel.source == "ss" and kernel.n == THROUGHPUT_N and not kernel.sparse:
        more, extra = _cublas_facts(ctx, name, rates["random"])
        facts += more
        note += extra
    series = {kind: {"tflops": r.tflops, "mhz": r.mhz} for kind, r in rates.items()}
    return Measured(name, ProbeOutcome("ok", note, series), facts)


# --------------------------------------------------------------------------- the family


LATENCY_EXTRA_CYCLES = 64  # a dependent wgmma's issue, commit and wait beyond its floor, at most (generous)
GEMM_TFLOPS = 500.0  # cuBLAS's bf16 GEMM rate planned with (H100-class parts reach 600 to 800)
GEMM_HOST_S_PER_VALUE = 20e-9  # each cuBLAS timing draws its 2 n^2 random operands on the host, and converts them


def peak_flop_per_clock(kernel: Kernel) -> float:
    """An SM's flop per clock at the datasheet rate for ``kernel``: the dense rate, twice it for a sparse A."""
    return HOPPER_FLOP_PER_CLK_PER_SM[kernel.wgmma.name] * (SPARSE_GAIN if kernel.sparse else 1)


def latency_floor(kernel: Kernel) -> float:
    """The fewest cycles a wgmma of ``kernel`` can take: its work over an SM's peak rate (N/2)."""
    return kernel.flop() / peak_flop_per_clock(kernel)


def _checked_runs(runs: int, words: int) -> Plan:
    """``runs`` checked launches writing ``words`` uint32 each: the calls, and the read-back and check."""
    return Plan(0, runs * KERNEL_RUN_CALLS, 0.0, runs * readback_host_s(words * 4))


def plan(settings: Settings, device: Device) -> Plan:
    """What every probe costs at most on ``device`` (an sm_90a part: elsewhere none runs): each latency
    sample's two runs at twice the floor plus :data:`LATENCY_EXTRA_CYCLES` per iteration, each timed
    throughput run (and the calibration) at most twice ``throughput_ms``, two operand uploads per
    latency probe and per throughput operand kind, every launch's records and D read back and checked,
    and the cuBLAS timings (each runs its GEMMs twice, the first untimed, after drawing its operands)."""
    s = settings
    total = Plan(len(PROBES), 0, 0.0)
    for kernel in _LATENCY:
        cycles = (s.short_iterations + s.long_iterations) * (2 * latency_floor(kernel) + LATENCY_EXTRA_CYCLES)
        runs = _checked_runs(2 * s.max_repeats, RECORD_WORDS + WARPGROUP * kernel.registers)
        total += runs + Plan(0, 2, s.max_repeats * cycles_s(cycles, device))
    threads = s.warpgroups_per_block * WARPGROUP
    blocks = device.sm_count * (s.blocks_per_sm or max(1, MAX_THREADS_PER_SM // threads))
    for kernel in _THROUGHPUT:
        runs = 2 * (1 + s.throughput_repeats)  # per operand kind: the calibration, then the timed runs
        words = blocks * threads // WARPGROUP * (RECORD_WORDS + WARPGROUP * kernel.registers)
        total += _checked_runs(runs, words) + Plan(0, 2 * 2, runs * 2 * s.throughput_ms / 1e3)
    gemms = 2 * s.gemm_count * 2.0 * s.gemm_n**3 / (GEMM_TFLOPS * 1e12)
    gemm = held_batch_s(s.gemm_count, 0.0, device) + gemms
    operands_s = 2 * s.gemm_n**2 * GEMM_HOST_S_PER_VALUE
    return total + Plan(0, s.gemm_repeats, s.gemm_repeats * gemm, s.gemm_repeats * operands_s)


# First contact: the bf16 m64n256k16 throughput from shared memory (every SM, the calibration, zero and
# random operands, cuBLAS) and the cheapest latency chain (bf16, N = 8), each checked against NumPy: one
# warpgroup per block, timed runs just long enough to read the clock, one sample of each, a small GEMM.
SMOKE_SETTINGS = Settings(short_iterations=1, long_iterations=2, min_repeats=1, max_repeats=1,
                          warpgroups_per_block=1, throughput_ms=0.2, throughput_repeats=1, gemm_n=1024,
                          gemm_count=1, gemm_repeats=1)  # fmt: skip
SMOKE = Smoke(probes=("wgmma.throughput.bf16.ss", "wgmma.latency.bf16.ss.n8"), settings=SMOKE_SETTINGS)


def measure(request: Request) -> Probes:
    """The family's runnable probes in order, each as (name, run). A wrong D or an impossible timing
    raises ProbeFailure; anything else (a CUDA error) propagates for the caller to isolate."""
    launcher, parameters, device = request.launcher, request.parameters, request.device
    runnable, settings, state = request.runnable, request.settings, request.state
    datasheet = {k: float(v) for k, v in state.get("datasheet", {}).items()}
    ctx = _Context(launcher, device, settings or Settings(), Kernels(launcher, parameters), datasheet)

    def run(name: str) -> Measured:
        step = measure_latency if KERNELS[name].purpose == "lat" else measure_throughput
        return step(ctx, name)

    yield from runs(PROBES, {name: lambda name=name: run(name) for name in PROBES}, runnable)


# --------------------------------------------------------------------------- invariants and the sheet


def _measured(facts: dict[str, Fact], fact_id: str) -> Fact | None:
    found = facts.get(fact_id)
    return found if found is not None and found.value is not None else None


def check_suffix(fact_id: str) -> str:
    """What an invariant's name says of the fact it checks: ``bf16.m64n256k16.ss``; ``sp.bf16...`` if sparse."""
    family, rest = fact_id.split(".", 2)[1:]
    return f"sp.{rest}" if family == "wgmma_sp" else rest


def cublas_invariant(facts: dict[str, Fact], device: Device) -> list[tuple[str, bool, str]]:
    """The bf16 wgmma probe reaches at least 95 % of cuBLAS's bf16 GEMM rate measured in the same run."""
    fraction = _measured(facts, "tensor.wgmma.bf16.fraction_of_cublas")
    if fraction is None:
        return []
    ok = fraction.value >= CUBLAS_FRACTION_MIN
    return [
        ("wgmma.bf16_reaches_cublas", ok, f"wgmma bf16 at {fraction.value:.3f} x cuBLAS (>= {CUBLAS_FRACTION_MIN})")
    ]


def rate_invariants(facts: dict[str, Fact], device: Device) -> list[tuple[str, bool, str]]:
    """No wgmma runs faster than Hopper's dense rate per SM at the clock it ran (2 % for timer noise)."""
    checks = []
    for kernel in _THROUGHPUT:
        base = shape_id(kernel)
        for prefix in (base, f"{base}.zero_operands"):
            tflops, mhz = _measured(facts, f"{prefix}.tflops"), _measured(facts, f"{prefix}.sm_clock")
            if tflops is None or mhz is None:
                continue
            ceiling = device.sm_count * peak_flop_per_clock(kernel) * mhz.value / 1e6
            name = f"wgmma.rate_below_peak.{check_suffix(prefix)}"
            detail = f"{tflops.value:.1f} TFLOP/s vs {ceiling:.1f} at {mhz.value:.0f} MHz"
            checks.append((name, tflops.value <= 1.02 * ceiling, detail))
    return checks


def latency_floor_invariants(facts: dict[str, Fact], device: Device) -> list[tuple[str, bool, str]]:
    """A wgmma's latency is at least N/2 cycles: its 64 x N x 32 bytes of work over an SM's dense rate."""
    checks = []
    for kernel in _LATENCY:
        latency = _measured(facts, f"{shape_id(kernel)}.latency")
        if latency is not None:
            floor = latency_floor(kernel)
            checks.append((f"wgmma.latency_floor.{check_suffix(latency.id)}", latency.value >= floor,
                           f"{latency.value:.1f} cycles vs a floor of {floor:.0f}"))  # fmt: skip
    return checks


def mma_sync_below_wgmma(facts: dict[str, Fact], device: Device) -> list[tuple[str, bool, str]]:
    """On Hopper, mma.sync tops out well under the dense peak while wgmma reaches it: the bf16
    mma.sync rate (the mma family) stays below the bf16 wgmma rate measured in the same run."""
    sync = _measured(facts, "tensor.mma_sync.bf16.m16n8k16.tflops")
    wide = _measured(facts, "tensor.wgmma.bf16.m64n256k16.ss.tflops")
    if sync is None or wide is None:
        return []
    detail = f"mma.sync bf16 {sync.value:.1f} vs wgmma bf16 {wide.value:.1f} TFLOP/s"
    return [("wgmma.mma_sync_below_wgmma", sync.value < wide.value, detail)]


def sparse_at_least_dense(facts: dict[str, Fact], device: Device) -> list[tuple[str, bool, str]]:
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
        checks.append((f"wgmma.sparse_at_least_dense.{check_suffix(sparse.id)}", ok, detail))
    return checks


INVARIANTS = (cublas_invariant, rate_invariants, latency_floor_invariants, mma_sync_below_wgmma, sparse_at_least_dense)

SECTIONS = (
    Section(
        title="Tensor cores: wgmma (sm_90a)",
        fact_prefixes=("tensor.wgmma.", "tensor.cublas."),
        probe_prefixes=("wgmma.",),
        plot=Plot("wgmma_latency_vs_n", "wgmma_latency_vs_n.png", "wgmma latency vs N", latency_png),
        blurb=(
            "wgmma.mma_async per type (bf16, f16, tf32, e4m3, s8), N and A source (ss: shared memory, rs: "
            "registers). Latency: one warpgroup, each wgmma waiting for the last. Throughput: every SM, "
            "batches of 16 m64n256 wgmmas; TFLOP/s from the kernel's own global timer, at the SM clock "
            "measured in the same kernel, with random operands (the honest figure) and with zeros (less "
            "power, a higher clock). bf16 is set against cuBLAS's 8192^3 GEMM measured in the same run "
            "(fraction_of_cublas) and against the datasheet dense peak scaled to the measured clock "
            "(datasheet_peak_at_clock, fraction_of_peak). Every D was checked against NumPy."
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
