"""The power family: burst against sustained, and what an operation costs in energy.

A probe of any other family is a burst of milliseconds; a training step runs for seconds, long enough for the
power controller to act. On the first H200 run every wgmma configuration issued at 99-100 % of its per-clock
peak and all of its variation was the clock (1610-1800 MHz, random operands drawing more power than zeros;
``../shared/review/h200_results_audit.md``, defect 4); Triton's and FlashInfer's maintainers found back-to-back
timing pulls a B200 from 1965 to about 1580 MHz. So each run here keeps one kind of work going on every SM at
full occupancy for ``sustained_s`` seconds of launches of about ``launch_ms`` each, every launch timed over its
warps' own %globaltimer span and reading the SM clock it ran at (%clock64 over %globaltimer), its results checked
in the sizing and burst launches and one more after the run (:func:`sustain`),
while NVML samples power and clocks (:mod:`gpuprobe.runner.trajectory`) and the energy counter brackets the
steady part (the last ``steady_share`` of the run):

* ``power.wgmma.bf16.random`` / ``.zero`` (sm_90a; ptx/power/power_wgmma.ptx, the wgmma family's throughput
  kernel under a name of its own): bf16 m64n256k16 at its peak, three warpgroups an SM, D held to NumPy
  (:func:`wgmma_load`);
* ``power.cublas.bf16`` (sm_90a): cuBLAS's bf16 8192^3 GEMM in batches, each between the wgmma family's clock
  stamps (:func:`cublas_load`): what a library GEMM costs beside the wgmma stream it is made of;
* ``power.mma.bf16.random`` / ``.zero`` (ptx/power/power.ptx's copy of the mma chain kernel): bf16 m16n8k16
  mma.sync with f32 accumulate, 8 chains a thread, on random operands (signs and all 7 mantissa bits drawn;
  exponents fixed so that every product and sum is exact in f32, and the result is checked bit for bit) or
  on zeros: the bits that toggle are the power the datapath draws;
* ``power.ffma``: FP32 FMA chains with random operands, each back at its start after every iteration, exactly;
* ``power.dram_read`` / ``power.l2_read``: a 16-byte ld.global.cg stream over 4 L2 sizes (DRAM) or half the
  L2 (L2), and ``power.shared_read``: 16-byte shared-memory reads of a block's 16 KB; every thread's word sums
  checked;
* ``power.idle``: the energy counter over ``idle_s`` with nothing running, for the runs' energy above idle.

Facts of a run ``power.<run>``: ``burst`` (the rate of its first ``burst_launches`` launches, of about ``burst_ms``
each, after ``rest_s`` of rest) and ``sustained`` (the steady part's), TFLOP/s or GB/s; ``sustained_fraction``;
``sustained_mhz``; ``settle_ms`` (GPU time until every later launch's clock stays within ``settle_tolerance`` of the
steady clock); ``busy_share`` (the steady launches' GPU time over the steady part's wall time: what the host's gaps
leave); for arithmetic, ``flop_per_clock`` (per SM, each steady launch at its own clock) and, where the unit has a
peak per clock (wgmma's and cuBLAS's 4096 bf16 FLOP, FFMA's FP32 lanes), ``fraction_of_peak``: judged per clock,
whatever the power state; ``watts`` (the counter's energy over the steady part's wall time); ``pj_per_op`` (that
energy over the FLOP or bytes the steady launches did: pJ/FLOP, pJ/byte) and ``pj_per_op_above_idle`` (idle power
over the same time taken off). Without an energy counter those three are ``not_run`` with the reason; the rates and
clocks stand. A run drawing less than the idle power fails (physics), as does a sustained rate above its burst
beyond the burst's allowance (:mod:`gpuprobe.judge.physics`). Invariants: the DRAM stream within the DRAM's
theoretical peak (physics); zero operands draw no more than random ones (within NVML's resolution) and are not
slower; every run busy at least ``BUSY_MIN`` of its steady window; mma.sync and FFMA per clock within their
issue-rate probes', the DRAM and L2 bursts within the bandwidth family's streams of the same loads.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.issue_sweep import Records, output_words
from gpuprobe.families.measuring import TIMER_TICK_NS, clock_window_ns, fact, unmeasured
from gpuprobe.families.mma.fragments import Variant, operands_of, predicted_words
from gpuprobe.families.power.plot import SUSTAINED_PLOT
from gpuprobe.families.power.wgmma import CLOCK_STAMP, WGMMA
from gpuprobe.families.stepping import probe_steps
from gpuprobe.families.wgmma import (
    HOPPER_FLOP_PER_CLK_PER_SM,
    RECORD_WORDS,
    check_result,
    shared_bytes,
    split_output,
    time_gemms,
    timed,
    upload_operands,
)
from gpuprobe.families.wgmma.layout import WARPGROUP
from gpuprobe.judge.invariants import Check
from gpuprobe.judge.ordering import pair_not_below
from gpuprobe.judge.physics import RESOLUTION, bounds
from gpuprobe.output.sections import Section
from gpuprobe.runner.checked import POISON_BYTE, unwritten
from gpuprobe.runner.launcher import LaunchPathUnavailable
from gpuprobe.runner.trajectory import Trajectory

VARIANT = Variant("bf16", "m16n8k16")
MMA_KERNEL = "gp_pw_bf16_m16n8k16_ilp8"
STREAM_KERNEL = "gp_pw_stream"
FFMA_KERNEL = "gp_pw_ffma"
SHARED_KERNEL = "gp_pw_shared"
RESULT_WORDS = 2  # 64-bit words a thread writes: four 32-bit sums
MMA_FLOP_PER_WARP_ITERATION = 16 * 2 * 16 * 8 * 16  # 16 mma.sync of m16n8k16, 2 m n k FLOP each
FFMA_PER_THREAD_ITERATION = 64  # 8 rounds of 8 chains
FFMA_CHAINS = 8
FP32_LANES = 128  # an SM's FP32 lanes (4 schedulers x 32), GA100's (sm_80) excepted:
GA100_FP32_LANES = 64
BYTES_PER_THREAD_ITERATION = 4 * 16  # four 16-byte vectors, global or shared
SHARED_THREADS = 256  # gp_pw_shared's block (.reqntid): it copies 4 x 256 16-byte vectors, its 16 KB
SHARED_BYTES = 4 * SHARED_THREADS * 16
FRACTION = 2.0**-14  # the random operands' grid: a bf16 of 8 significant bits at exponent 0, squared
FIRST_ITERATIONS = 256  # an mma or FFMA launch's iterations before it is sized to ``launch_ms`` (others: fewer)
WGMMA_FIRST_ITERATIONS = 8
NO_COUNTER = "no energy counter where it ran (NVML absent, or the part has none)"


@dataclass(frozen=True)
class Settings:
    idle_s: float = 1.0  # the idle window: long beside the energy counter's update period
    sustained_s: float = 2.0  # GPU seconds of launches per run
    launch_ms: float = 20.0  # about this long each launch
    burst_launches: int = 3  # the run's first launches, shorter ones, before the power controller acts: the burst
    burst_ms: float = 2.0  # about this long each burst launch
    steady_share: float = 0.5  # the run's last share: the sustained rate, clock and energy
    settle_tolerance: float = 0.02  # a launch's clock within this of the steady clock is settled
    rest_s: float = 0.25  # idle between sizing the launches and the run: its burst starts from a rested part
    threads: int = 256
    wgmma_warpgroups: int = 3  # a wgmma block's: three fill an sm_90a SM's registers, one block an SM
    dram_l2_multiple: float = 4.0  # the DRAM stream's buffer, in L2 sizes
    l2_fraction: float = 0.5  # the L2 stream's buffer, of the L2
    gemm_n: int = 8192  # cuBLAS's GEMMs: n^3, as the wgmma family's
    min_clock_window_ns: float = clock_window_ns(0.01)  # a launch this long reads the SM clock to 1 %
    seed: int = 11

    def __post_init__(self) -> None:
        positive = ("idle_s", "sustained_s", "launch_ms", "burst_ms", "dram_l2_multiple", "l2_fraction", "rest_s")
        if any(not getattr(self, name) > 0 for name in positive) or self.burst_launches < 1 or self.threads % 32:
            raise ValueError(f"power Settings: {', '.join(positive)} above 0, burst_launches 1 or more, whole warps")
        if not 0 < self.steady_share < 1 or not 0 < self.settle_tolerance < 1:
            raise ValueError("power Settings: steady_share and settle_tolerance between 0 and 1")
        if not 1 <= self.wgmma_warpgroups <= 3:
            raise ValueError(f"power Settings: wgmma_warpgroups 1 to 3, got {self.wgmma_warpgroups}")


SECTIONS = (
    Section(
        "Power, clock and energy",
        ("power.",),
        ("power.",),
        plot=SUSTAINED_PLOT,
        blurb="Seconds of one kind of work on every SM: the rate of the first launches (burst) and of the last "
        "half (sustained), the SM clock each launch ran at, NVML's power and the energy counter: energy per "
        "FLOP and per byte, with and without the idle power.",
    ),
)


# ---- the work ------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Timed:
    """One checked launch of a run: its event ms, its warps' own timed span (ms) and the SM clock it ran at."""

    ms: float
    span_ms: float
    mhz: float | None


@dataclass
class Load:
    """One kind of work at full occupancy: a launch of a number of iterations (its timing record always checked, its
    results too where asked: every launch outside the steady window), what one iteration of the whole grid does,
    and its shape."""

    launch: Callable[[int, bool], Timed]  # (iterations, check): a launch; checked in full where asked
    ops_per_iteration: float
    unit_ops: float  # operations per second in one unit of the rate: 1e12 (TFLOP/s) or 1e9 (GB/s)
    first_iterations: int  # the first sizing launch's
    shape: str  # "132 blocks of 256"


def chain_launch(request: Request, kernel: str, blocks: int, threads: int, args: Callable[[int], list[Any]],
                 expected: Callable[[int], np.ndarray]) -> Callable[[int], Timed]:  # fmt: skip
    """Launches of a kernel that writes four 32-bit words a thread and a timing record a warp
    (ptx/common/chain_records.ptxinc): a checked launch's words compared with the host's ``expected`` (kept per
    iteration count: a DRAM stream's sums cost a pass over its buffer), every launch's clock read and its span over
    its warps' own %globaltimer (a short launch's fixed cost stays out of its rate)."""
    count = output_words(blocks * threads, RESULT_WORDS)
    out = request.outputs.get(count)
    predicted = functools.cache(expected)

    def run(iterations: int, check: bool) -> Timed:
        request.launcher.fill(out, POISON_BYTE)  # a launch that writes nothing cannot pass on the last one's words
        ms = request.kernels.time(kernel, [out if a is None else a for a in args(iterations)], grid=blocks,
                                  block=threads)  # fmt: skip
        records = Records.from_output(request.launcher.read(out, "uint64", count), blocks * threads, RESULT_WORDS,
                                      kernel)  # fmt: skip
        got = np.ascontiguousarray(records.result).view(np.uint32).reshape(-1, 4)
        want = predicted(iterations) if check else got
        wrong = np.flatnonzero(np.any(got != want, axis=1))
        if len(wrong):
            t = int(wrong[0])
            raise ProbeFailure(f"{kernel}: thread {t} of {len(got)} wrote {[hex(int(w)) for w in got[t]]}, the host "
                               f"predicts {[hex(int(w)) for w in want[t]]} ({len(wrong)} threads differ)")  # fmt: skip
        span_ms = float(records.end_ns.max() - records.start_ns.min()) * 1e-6
        return Timed(ms, span_ms if span_ms > 0 else ms, records.mhz())

    return run


def full_grid(request: Request, kernel: str, threads: int, shared: int = 0) -> int:
    """Blocks of ``threads`` that fill every SM at once (the occupancy API)."""
    return max(1, request.launcher.max_active_blocks(kernel, threads, shared)) * request.device.sm_count


def random_operands(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """A and B of +-(1 + m/128) (m random in 0..127: every mantissa bit and the sign drawn, the exponent fixed),
    C random multiples of :data:`FRACTION` within +-32: every product, sum and chain step exact in f32."""
    rng = np.random.default_rng(seed)

    def signed_mantissas(shape: tuple[int, int]) -> np.ndarray:
        return rng.choice([-1.0, 1.0], size=shape) * (1 + rng.integers(0, 128, size=shape) / 128)

    a, b = signed_mantissas((VARIANT.m, VARIANT.k)), signed_mantissas((VARIANT.k, VARIANT.n))
    c = rng.integers(-(2**19), 2**19, size=(VARIANT.m, VARIANT.n)) * FRACTION
    return a, b, c


def mma_load(request: Request, settings: Settings, operands: str) -> Load:
    """mma.sync bf16 chains (ptx/power/power.ptx) on ``operands``: every lane's words as the mma family predicts."""
    if operands == "random":
        made = operands_of(VARIANT, *random_operands(settings.seed))
    else:
        zero = np.zeros
        made = operands_of(VARIANT, zero((VARIANT.m, VARIANT.k)), zero((VARIANT.k, VARIANT.n)),
                           zero((VARIANT.m, VARIANT.n)))  # fmt: skip
    uploaded = request.launcher.upload(made.fragments.ravel())
    per_lane = predicted_words(VARIANT, made)  # every chain back at C + A B after each iteration, 8 chains summed
    blocks = full_grid(request, MMA_KERNEL, settings.threads)
    expected = np.tile(per_lane, (blocks * settings.threads // 32, 1))
    run = chain_launch(request, MMA_KERNEL, blocks, settings.threads, lambda n: [np.uint32(n), uploaded, None],
                       lambda n: expected)  # fmt: skip
    flop = blocks * settings.threads // 32 * MMA_FLOP_PER_WARP_ITERATION
    return Load(run, flop, 1e12, FIRST_ITERATIONS, f"{blocks} blocks of {settings.threads}")


def ffma_operands(seed: int) -> np.ndarray:
    """a and b of +-(1 + m/128) and starts x, random multiples of :data:`FRACTION` within +-32, 8 of each (f32):
    x + a b, its return to x, and any two chains' sum are exact in f32."""
    rng = np.random.default_rng(seed)
    a, b = (rng.choice([-1.0, 1.0], FFMA_CHAINS) * (1 + rng.integers(0, 128, FFMA_CHAINS) / 128) for _ in "ab")
    x = rng.integers(-(2**19), 2**19, FFMA_CHAINS) * FRACTION
    return np.concatenate([a, b, x]).astype(np.float32)


def ffma_load(request: Request, settings: Settings) -> Load:
    """FP32 FMA chains, every one back at its start after each iteration: every thread writes x_q + x_(q+4)."""
    operands = ffma_operands(settings.seed)
    x = operands[2 * FFMA_CHAINS :]
    words = (x[:4] + x[4:]).view(np.uint32)
    uploaded = request.launcher.upload(operands)
    blocks = full_grid(request, FFMA_KERNEL, settings.threads)
    expected = np.tile(words, (blocks * settings.threads, 1))
    run = chain_launch(request, FFMA_KERNEL, blocks, settings.threads, lambda n: [uploaded, np.uint32(n), None],
                       lambda n: expected)  # fmt: skip
    flop = blocks * settings.threads * FFMA_PER_THREAD_ITERATION * 2
    return Load(run, flop, 1e12, FIRST_ITERATIONS, f"{blocks} blocks of {settings.threads}")


def stream_load(request: Request, settings: Settings, level: str) -> Load:
    """A 16-byte ld.global.cg stream over 4 L2 sizes (DRAM) or half the L2: each thread's word sums."""
    device = request.device
    wanted = settings.dram_l2_multiple * device.l2_bytes if level == "dram" else settings.l2_fraction * device.l2_bytes
    per_block = BYTES_PER_THREAD_ITERATION * settings.threads  # a block's share of one iteration of the grid
    blocks = max(1, min(full_grid(request, STREAM_KERNEL, settings.threads), int(wanted) // per_block))
    threads = blocks * settings.threads
    quantum = blocks * per_block  # the buffer holds whole iterations of the grid (an L2 too small for a full
    span = max(1, int(wanted) // quantum) * quantum  # grid's gets fewer blocks)
    words = np.random.default_rng(settings.seed).integers(0, 2**32, size=span // 4, dtype=np.uint32)
    src = request.launcher.upload(words)
    rounds = words.reshape(-1, threads, 4)  # round r: vectors r T .. r T + T - 1, thread t's the (r T + t)-th
    per_pass = rounds.sum(axis=0, dtype=np.uint64)

    def expected(iterations: int) -> np.ndarray:
        """Thread t's sums after 4 x ``iterations`` loads: vectors t, t + T, ..., wrapping at the span."""
        passes, part = divmod(4 * iterations, len(rounds))
        sums = per_pass * np.uint64(passes) + rounds[:part].sum(axis=0, dtype=np.uint64)
        return (sums & np.uint64(0xFFFFFFFF)).astype(np.uint32)

    run = chain_launch(request, STREAM_KERNEL, blocks, settings.threads,
                       lambda n: [src, np.uint64(span), np.uint32(n), None], expected)  # fmt: skip
    return Load(run, threads * BYTES_PER_THREAD_ITERATION, 1e9, 1, f"{blocks} blocks of {settings.threads}")


def shared_load(request: Request, settings: Settings) -> Load:
    """Every block's 16 KB of random words in shared memory, each thread reading a neighbour warp's four vectors
    an iteration: its sums are the iterations times theirs."""
    words = np.random.default_rng(settings.seed).integers(0, 2**32, size=SHARED_BYTES // 4, dtype=np.uint32)
    src = request.launcher.upload(words)
    vectors = words.reshape(-1, 4).astype(np.uint64)
    lanes = np.arange(SHARED_THREADS) ^ 32
    per_iteration = sum(vectors[lanes + SHARED_THREADS * k] for k in range(4))
    blocks = full_grid(request, SHARED_KERNEL, SHARED_THREADS)

    def expected(iterations: int) -> np.ndarray:
        sums = (per_iteration * np.uint64(iterations)) & np.uint64(0xFFFFFFFF)
        return np.tile(sums.astype(np.uint32), (blocks, 1))

    run = chain_launch(request, SHARED_KERNEL, blocks, SHARED_THREADS, lambda n: [src, np.uint32(n), None],
                       expected)  # fmt: skip
    bytes_per_iteration = blocks * SHARED_THREADS * BYTES_PER_THREAD_ITERATION
    return Load(run, bytes_per_iteration, 1e9, FIRST_ITERATIONS, f"{blocks} blocks of {SHARED_THREADS}")


def wgmma_load(request: Request, settings: Settings, operands: str) -> Load:
    """bf16 wgmma m64n256k16 at its peak (ptx/power/power_wgmma.ptx, the wgmma family's throughput kernel): every
    launch's warpgroup records checked; a checked launch's D read back and held to NumPy (16 x A @ B): reading all
    of D (26 MB on an H200) after a steady launch would idle the tensor cores in the energy window."""
    made, given = upload_operands(request, WGMMA, operands)
    threads = settings.wgmma_warpgroups * WARPGROUP
    if request.launcher.max_active_blocks(WGMMA.name, threads, shared_bytes(WGMMA)) < 1:
        raise ProbeFailure(f"{WGMMA.name}: no block of {threads} threads fits on an SM")
    blocks = request.device.sm_count  # one block an SM: three warpgroups fill its registers, a second never fits
    warpgroups = blocks * threads // WARPGROUP
    records_only = warpgroups * RECORD_WORDS
    words = warpgroups * (RECORD_WORDS + WARPGROUP * WGMMA.registers)
    out = request.outputs.get(-(-words // 2))

    def run(iterations: int, full: bool) -> Timed:
        request.launcher.fill(out, POISON_BYTE)
        ms = request.kernels.time(WGMMA.name, [*given, np.uint32(iterations), out], grid=blocks, block=threads,
                                  shared=shared_bytes(WGMMA))  # fmt: skip
        values = request.launcher.read(out, "uint32", words if full else records_only)
        if unwritten(values):
            raise ProbeFailure(f"{WGMMA.name} did not write all of its {len(values)} words")
        records, fragments = split_output(values, warpgroups, WGMMA.registers if full else 0)
        if full:
            check_result(fragments, WGMMA, made, WGMMA.batch)
        launched = timed(WGMMA, records)
        return Timed(ms, max(launched.span_ns, TIMER_TICK_NS) * 1e-6, launched.mhz(settings.min_clock_window_ns))

    flop = WGMMA.flop() * WGMMA.batch * warpgroups
    return Load(run, flop, 1e12, WGMMA_FIRST_ITERATIONS, f"{blocks} blocks of {threads}")


def cublas_load(request: Request, settings: Settings) -> Load:
    """cuBLAS's bf16 n^3 GEMMs (the wgmma family's :func:`~gpuprobe.families.wgmma.time_gemms`), an iteration a
    GEMM, each batch between clock stamps (:data:`~gpuprobe.families.power.wgmma.CLOCK_STAMP`): its event time is
    its span, the stamps' cycles over their ns its clock. cuBLAS's result is not checked (the library's)."""

    def run(iterations: int, check: bool) -> Timed:  # cuBLAS's C is the library's: nothing of ours to check
        timing = time_gemms(request, settings.gemm_n, iterations, settings.min_clock_window_ns, CLOCK_STAMP)
        return Timed(timing.ms, timing.ms, timing.mhz)

    return Load(run, 2.0 * settings.gemm_n**3, 1e12, 1, f"{settings.gemm_n}^3 bf16 GEMMs (cuBLAS)")


@dataclass(frozen=True)
class Run:
    """One sustained run: its probe, rate unit, what one operation is, the work, and (for arithmetic) the unit's
    peak FLOP per clock per SM its sustained rate is held to (``fraction_of_peak``)."""

    probe: str
    unit: str
    per: str
    load: Callable[[Request, Settings], Load]
    flop_per_clock_per_sm: Callable[[Device], float] | None = None


def bf16_dense_peak(device: Device) -> float:
    """The dense bf16 tensor FLOP per clock per SM (sm_90a: wgmma's, the datasheet's per SM per clock)."""
    return HOPPER_FLOP_PER_CLK_PER_SM["bf16"]


def ffma_peak(device: Device) -> float:
    """FP32 FMA FLOP per clock per SM: 2 a lane, 64 lanes on GA100 (sm_80), 128 on every later SM (the CUDA
    Programming Guide's arithmetic throughput table)."""
    return 2.0 * (GA100_FP32_LANES if device.cc == "8.0" else FP32_LANES)


RUNS = {
    run.probe: run
    for run in (
        Run("power.wgmma.bf16.random", "TFLOP/s", "FLOP", functools.partial(wgmma_load, operands="random"),
            bf16_dense_peak),
        Run("power.wgmma.bf16.zero", "TFLOP/s", "FLOP", functools.partial(wgmma_load, operands="zero"),
            bf16_dense_peak),
        Run("power.cublas.bf16", "TFLOP/s", "FLOP", cublas_load, bf16_dense_peak),
        Run("power.mma.bf16.random", "TFLOP/s", "FLOP", functools.partial(mma_load, operands="random")),
        Run("power.mma.bf16.zero", "TFLOP/s", "FLOP", functools.partial(mma_load, operands="zero")),
        Run("power.ffma", "TFLOP/s", "FLOP", ffma_load, ffma_peak),
        Run("power.dram_read", "GB/s", "byte", functools.partial(stream_load, level="dram")),
        Run("power.l2_read", "GB/s", "byte", functools.partial(stream_load, level="l2")),
        Run("power.shared_read", "GB/s", "byte", shared_load),
    )
}  # fmt: skip
IDLE = "power.idle"
PROBES = [IDLE, *RUNS]
IDLE_KEY = "power_idle_watts"  # in the family state: what the runs' energy above idle takes off


@dataclass(frozen=True)
class Launched:
    """One launch of a run: when it started (GPU ms since the run began), its event ms, operations, rate (over its
    warps' timed span) and SM clock."""

    at_ms: float
    ms: float
    ops: float
    rate: float
    mhz: float | None


def launch(load: Load, iterations: int, at_ms: float = 0.0, check: bool = True) -> Launched:
    """One launch of ``load``, ``at_ms`` into its run, checked in full unless ``check`` is off: its rate over its
    warps' own timed span."""
    done = load.launch(iterations, check)
    ops = load.ops_per_iteration * iterations
    return Launched(at_ms, done.ms, ops, ops / (done.span_ms * 1e-3) / load.unit_ops, done.mhz)


SIZING_LAUNCHES = 2  # a launch's fixed cost dominates the first, short one: scale, then scale again
CHECK_S = 0.015  # a checked launch's words read back and compared: ~5 MB and a million words on an H200's grid
RECORDS_S = 0.002  # an unchecked launch's read-back: its records parsed (with the words, read, not compared)


def sized(settings: Settings, load: Load) -> int:
    """Iterations for a launch of about ``launch_ms``."""
    iterations = load.first_iterations
    for _ in range(SIZING_LAUNCHES):
        ms = launch(load, iterations).ms
        iterations = int(min(max(1, round(iterations * settings.launch_ms / max(ms, 1e-3))), 2**31 - 1))
    return iterations


@dataclass
class Sustained:
    """A run's launches, the index of the first steady one, and NVML's trajectories over all and the steady part."""

    launches: list[Launched] = field(default_factory=list)
    first_steady: int = 0
    whole: Trajectory = field(default_factory=Trajectory)
    steady: Trajectory = field(default_factory=Trajectory)

    def steady_launches(self) -> list[Launched]:
        return self.launches[self.first_steady :]


def sustain(request: Request, settings: Settings, load: Load, iterations: int) -> Sustained:
    """Launches back to back for ``sustained_s`` GPU seconds, the first ``burst_launches`` of about ``burst_ms``
    each, the last ``steady_share`` inside a sampling of its own (its energy is the steady part's). The burst
    launches are checked in full, and one more launch after the run: the others only read their timing records,
    so that no check's read-back idles the GPU between them."""
    run = Sustained()
    total_ms, steady_from = settings.sustained_s * 1e3, (1 - settings.steady_share) * settings.sustained_s * 1e3
    burst = max(1, round(iterations * settings.burst_ms / settings.launch_ms))
    elapsed = 0.0

    def once() -> None:
        nonlocal elapsed
        bursting = len(run.launches) < settings.burst_launches
        done = launch(load, burst if bursting else iterations, elapsed, check=bursting)
        run.launches.append(done)
        elapsed += done.ms

    with request.launcher.sampling() as whole:
        while elapsed < steady_from or len(run.launches) <= settings.burst_launches:
            once()
        run.first_steady = len(run.launches)
        with request.launcher.sampling() as steady:
            while elapsed < total_ms or len(run.launches) == run.first_steady:
                once()
    launch(load, iterations)  # the steady launches' work, checked once they are over
    run.whole, run.steady = whole, steady
    return run


# ---- facts ---------------------------------------------------------------------------------------------------


def settle_ms(run: Sustained, tolerance: float) -> float | None:
    """GPU ms from the run's start to the first launch after which every launch's clock stays within
    ``tolerance`` of the steady clock (the median of the steady launches'); None where no clock was read."""
    clocks = [x.mhz for x in run.steady_launches() if x.mhz]
    if not clocks:
        return None
    final = float(np.median(clocks))
    settled = len(run.launches)
    for index in range(len(run.launches) - 1, -1, -1):
        mhz = run.launches[index].mhz
        if mhz is None or abs(mhz - final) > tolerance * final:
            break
        settled = index
    return run.launches[settled].at_ms if settled < len(run.launches) else None


def energy_facts(stem: str, spec: Run, run: Sustained, ops: float, idle_w: float | None) -> list[Fact]:
    """Watts over the steady part, and its energy per operation, with and without the idle power."""
    energy, seconds, watts = run.steady.energy_j, run.steady.seconds, run.steady.watts
    per = f"pJ/{spec.per}"
    if energy is None or watts is None:
        why = NO_COUNTER if energy is None else "the steady part took no time NVML saw"
        return [unmeasured(f"{stem}.{name}", unit, spec.probe, why)
                for name, unit in (("watts", "W"), ("pj_per_op", per), ("pj_per_op_above_idle", per))]  # fmt: skip
    facts = [single(f"{stem}.watts", watts, "W", spec.probe),
             single(f"{stem}.pj_per_op", energy / ops * 1e12, per, spec.probe)]  # fmt: skip
    if idle_w is None:
        facts.append(unmeasured(f"{stem}.pj_per_op_above_idle", per, spec.probe, "no idle power measured (power.idle)"))
        return facts
    if watts < idle_w:  # physics: work on every SM cannot draw less than the idle part
        raise ProbeFailure(f"{stem}: {watts:.1f} W while working, below the {idle_w:.1f} W measured idle: the energy "
                           "counter or its windows are wrong")  # fmt: skip
    facts.append(single(f"{stem}.pj_per_op_above_idle", (energy - idle_w * seconds) / ops * 1e12, per, spec.probe))
    return facts


def single(fact_id: str, value: float, unit: str, probe: str) -> Fact:
    """A fact of one figure (a ratio, or one window's energy): no samples to spread."""
    return Fact(fact_id, value, unit, (value, value), [value], {}, probe)


def run_facts(spec: Run, run: Sustained, settings: Settings, idle_w: float | None, device: Device) -> list[Fact]:
    stem = spec.probe
    rates = [x.rate for x in run.launches]
    burst = fact(f"{stem}.burst", rates[: settings.burst_launches], spec.unit, spec.probe)
    sustained = fact(f"{stem}.sustained", [x.rate for x in run.steady_launches()], spec.unit, spec.probe)
    facts = [burst, sustained, single(f"{stem}.sustained_fraction", sustained.value / burst.value, "fraction",
                                      spec.probe)]  # fmt: skip
    clocks = [x.mhz for x in run.steady_launches() if x.mhz]
    settled = settle_ms(run, settings.settle_tolerance)
    if not clocks:
        why = "no SM clock read inside the launches (their timers did not move far enough)"
        facts += [unmeasured(f"{stem}.settle_ms", "ms", spec.probe, why),
                  unmeasured(f"{stem}.sustained_mhz", "MHz", spec.probe, why)]  # fmt: skip
    else:
        facts.append(fact(f"{stem}.sustained_mhz", clocks, "MHz", spec.probe))
        facts.append(single(f"{stem}.settle_ms", settled, "ms", spec.probe) if settled is not None else unmeasured(
            f"{stem}.settle_ms", "ms", spec.probe, f"the last launch's clock is {settings.settle_tolerance:.0%} or "
            "more from the steady clock: the clock never settled"))  # fmt: skip
    busy = sum(x.ms for x in run.steady_launches()) / (run.steady.seconds * 1e3) if run.steady.seconds else None
    facts.append(single(f"{stem}.busy_share", busy, "fraction", spec.probe) if busy is not None else unmeasured(
        f"{stem}.busy_share", "fraction", spec.probe, "the steady part took no time NVML saw"))  # fmt: skip
    if spec.per == "FLOP":
        facts += per_clock_facts(spec, run, device)
    ops = sum(x.ops for x in run.steady_launches())
    return facts + energy_facts(stem, spec, run, ops, idle_w)


def per_clock_facts(spec: Run, run: Sustained, device: Device) -> list[Fact]:
    """An arithmetic run's steady FLOP per clock per SM (each launch's rate at the clock it ran at), and that over
    the unit's peak per clock, where it has one (``fraction_of_peak``: judged per clock, whatever the power state)."""
    steady = [x for x in run.steady_launches() if x.mhz]
    names = [("flop_per_clock", "FLOP/clk/SM")] + ([("fraction_of_peak", "fraction")] if spec.flop_per_clock_per_sm
                                                   else [])  # fmt: skip
    if not steady:
        why = "no SM clock read inside the steady launches"
        return [unmeasured(f"{spec.probe}.{name}", unit, spec.probe, why) for name, unit in names]
    per_clock = [x.rate * 1e12 / (x.mhz * 1e6 * device.sm_count) for x in steady]
    facts = [fact(f"{spec.probe}.flop_per_clock", per_clock, "FLOP/clk/SM", spec.probe)]
    if spec.flop_per_clock_per_sm:
        peak = spec.flop_per_clock_per_sm(device)
        facts.append(fact(f"{spec.probe}.fraction_of_peak", [r / peak for r in per_clock], "fraction", spec.probe))
    return facts


SERIES_POINTS = 96  # NVML's readings over a run kept for its plot


def run_series(run: Sustained) -> dict[str, dict[str, list]]:
    """``launches``: each launch's start (GPU ms), rate and clock; ``steady``: the operations, wall seconds and
    joules the energy facts divide; ``nvml``: the run's readings (at most :data:`SERIES_POINTS`)."""
    launches = {
        "at_ms": [round(x.at_ms, 3) for x in run.launches],
        "rate": [x.rate for x in run.launches],
        "mhz": [x.mhz for x in run.launches],
        "steady": [k >= run.first_steady for k in range(len(run.launches))],
    }
    steady = {"ops": [sum(x.ops for x in run.steady_launches())], "seconds": [run.steady.seconds],
              "energy_j": [run.steady.energy_j]}  # fmt: skip
    nvml = {"nvml": run.whole.series(SERIES_POINTS)} if run.whole.readings else {}
    return {"launches": launches, "steady": steady, **nvml}


def fact_units(spec: Run) -> list[tuple[str, str]]:
    """A run's facts (names after ``power.<run>.``) and their units."""
    per = f"pJ/{spec.per}"
    arithmetic = [("flop_per_clock", "FLOP/clk/SM")] if spec.per == "FLOP" else []
    arithmetic += [("fraction_of_peak", "fraction")] if spec.flop_per_clock_per_sm else []
    rates = [("burst", spec.unit), ("sustained", spec.unit), ("sustained_fraction", "fraction"),
             ("sustained_mhz", "MHz"), ("settle_ms", "ms"), ("busy_share", "fraction")]  # fmt: skip
    return [*rates, *arithmetic, ("watts", "W"), ("pj_per_op", per), ("pj_per_op_above_idle", per)]


def measure_run(request: Request, settings: Settings, spec: Run) -> Measured:
    """One sustained run (see the module); not run, with the reason, where its launch path is missing (cuBLAS)."""
    try:
        load = spec.load(request, settings)
        iterations = sized(settings, load)
    except LaunchPathUnavailable as exc:
        facts = [unmeasured(f"{spec.probe}.{name}", unit, spec.probe, str(exc)) for name, unit in fact_units(spec)]
        return Measured(spec.probe, ProbeOutcome("not_run", str(exc)), facts)
    request.launcher.idle(settings.rest_s)  # the sizing launches may have started the power controller's response
    run = sustain(request, settings, load, iterations)
    facts = run_facts(spec, run, settings, request.state.get(IDLE_KEY), request.device)
    note = (f"{len(run.launches)} launches of {iterations} iterations, {load.shape}; steady from launch "
            f"{run.first_steady + 1}; NVML readings {len(run.whole.readings)}")  # fmt: skip
    return Measured(spec.probe, ProbeOutcome("ok", note, run_series(run)), facts)


def measure_idle(request: Request, settings: Settings) -> Measured:
    """The energy counter over ``idle_s`` with nothing running."""
    with request.launcher.sampling() as window:
        request.launcher.idle(settings.idle_s)
    watts = window.watts
    if watts is None:
        return Measured(IDLE, ProbeOutcome("ok", NO_COUNTER), [unmeasured("power.idle.watts", "W", IDLE, NO_COUNTER)])
    request.state[IDLE_KEY] = watts
    readings = len(window.readings)
    note = f"{window.energy_j:.3f} J over {window.seconds:.3f} s with nothing running ({readings} NVML readings)"
    return Measured(IDLE, ProbeOutcome("ok", note), [single("power.idle.watts", watts, "W", IDLE)])


def measure(request: Request) -> Probes:
    settings = request.settings or Settings()
    steps: dict[str, Callable[[], Measured]] = {IDLE: functools.partial(measure_idle, request, settings)}
    steps.update({name: functools.partial(measure_run, request, settings, spec) for name, spec in RUNS.items()})
    return probe_steps(PROBES, steps, request.runnable)


def plan(settings: Settings, device: Device) -> Plan:
    """The idle window and every run's rest and sustained seconds (waited out: ``wait_s``), its sizing launches and
    its last, checked one, each launch a fill, a timed launch and a read-back; the host's check of the checked
    launches' words, the others' records."""
    checked = SIZING_LAUNCHES + settings.burst_launches + 1
    steady = int(settings.sustained_s * 1e3 / settings.launch_ms)
    launches = len(RUNS) * (checked + steady)
    sizing_s = (SIZING_LAUNCHES + 1) * settings.launch_ms / 1e3
    wait_s = settings.idle_s + len(RUNS) * (settings.rest_s + settings.sustained_s)
    host_s = len(RUNS) * (CHECK_S * checked + RECORDS_S * steady)
    return Plan(probes=len(PROBES), launches=3 * launches, gpu_s=len(RUNS) * sizing_s, host_s=host_s, wait_s=wait_s)


# A first contact: a short L2 stream (its launch path and checked sums), of a tenth of a second.
SMOKE = Smoke(probes=("power.l2_read",), settings=Settings(idle_s=0.05, sustained_s=0.1, launch_ms=10.0, rest_s=0.01))


NVML_POWER_ALLOWANCE = 0.02  # what NVML's power readings resolve: two runs at one power limit differ by noise


def zero_operands_cost_no_more(facts: dict[str, Fact], device: Device) -> list[Check]:
    """Zero operands draw no more power than random ones (within :data:`NVML_POWER_ALLOWANCE`: at the power limit
    both draw it), and run no slower, on mma.sync and on wgmma."""
    checks = []
    for unit in ("mma", "wgmma"):
        random, zero, name = f"power.{unit}.bf16.random", f"power.{unit}.bf16.zero", f"power_zero_operands.{unit}"
        drawn, most = _measured(facts, f"{zero}.watts"), _measured(facts, f"{random}.watts")
        if drawn is not None and most is not None:
            bound = most.value * (1 + NVML_POWER_ALLOWANCE)
            detail = (f"{drawn.id} = {drawn.value:.1f} W against {most.id} = {most.value:.1f} W "
                      f"(+{NVML_POWER_ALLOWANCE:.0%}: {bound:.1f})")  # fmt: skip
            checks.append(Check(f"{name}.draw_no_more", drawn.value <= bound, detail, (drawn.id, most.id)))
        checks += pair_not_below(facts, f"{name}.not_slower", f"{random}.sustained", f"{zero}.sustained")
    return checks


BUSY_MIN = 0.8  # a steady window the GPU spent less of at work measures the host's gaps as much as the work


def runs_keep_the_gpu_busy(facts: dict[str, Fact], device: Device) -> list[Check]:
    """Each run's launches fill at least :data:`BUSY_MIN` of its steady window's wall time: its watts and energy per
    operation are the work's, not a duty-cycled load's."""
    checks = []
    for probe in RUNS:
        busy = _measured(facts, f"{probe}.busy_share")
        if busy is not None:
            detail = f"{busy.id} = {busy.value:.3f} of the steady window's wall time at work (at least {BUSY_MIN})"
            checks.append(Check(f"power_busy.{probe.removeprefix('power.')}", busy.value >= BUSY_MIN, detail,
                                (busy.id,)))  # fmt: skip
    return checks


def _measured(facts: dict[str, Fact], fact_id: str) -> Fact | None:
    found = facts.get(fact_id)
    return found if found is not None and found.value is not None else None


def streams_within_the_dram_peak(facts: dict[str, Fact], device: Device) -> list[Check]:
    """Physics: the DRAM stream's burst and sustained rates are within the DRAM's theoretical peak."""
    peak = _measured(facts, "bandwidth.dram_theoretical")
    checks = []
    for what in ("burst", "sustained"):
        rate = _measured(facts, f"power.dram_read.{what}")
        if peak is not None and rate is not None:
            low = bounds(rate)[0]
            detail = f"{rate.id} = {rate.value:.0f} GB/s (CI from {low:.0f}) against the peak {peak.value:.0f}"
            checks.append(Check(f"power_dram_within_peak.{what}", low <= peak.value, detail, (rate.id,),
                                physics=True))  # fmt: skip
    return checks


# (run's FLOP per clock per SM, the issue-rate probe of the same instruction in op/clk/SM, FLOP an op)
PER_CLOCK_REFERENCES = (
    ("power.mma.bf16.random.flop_per_clock", "tensor.mma_sync.bf16.m16n8k16.throughput", 2),
    ("power.mma.bf16.zero.flop_per_clock", "tensor.mma_sync.bf16.m16n8k16.throughput", 2),
    ("power.ffma.flop_per_clock", "alu.ffma.throughput", 2),
)
STREAM_REFERENCES = (
    ("power.dram_read.burst", "bandwidth.dram_read.v16"),
    ("power.l2_read.burst", "bandwidth.l2_read.v16"),
)
STREAM_TOLERANCE = 0.05  # two streams of the same 16-byte loads at full occupancy, minutes apart


def within_the_issue_and_bandwidth_probes(facts: dict[str, Fact], device: Device) -> list[Check]:
    """Consistency with the run's other facts: a sustained run's FLOP per clock per SM is within what the issue
    rate probe of the same instruction measured (its best over an ILP x warps sweep) and the timers' resolution;
    a burst stream within the bandwidth family's stream of the same loads and :data:`STREAM_TOLERANCE`."""
    checks = []
    for run_id, reference_id, flop in PER_CLOCK_REFERENCES:
        run, reference = _measured(facts, run_id), _measured(facts, reference_id)
        if run is not None and reference is not None:
            bound = flop * bounds(reference)[1] * (1 + RESOLUTION)
            detail = (f"{run_id} = {run.value:.1f} (CI from {bounds(run)[0]:.1f}) FLOP/clk/SM against {flop} x "
                      f"{reference_id} = {flop * reference.value:.1f} (+{RESOLUTION:.0%}: {bound:.1f})")  # fmt: skip
            name = f"power_within_issue_rate.{run_id.removeprefix('power.').removesuffix('.flop_per_clock')}"
            checks.append(Check(name, bounds(run)[0] <= bound, detail, (run_id, reference_id)))
    for run_id, reference_id in STREAM_REFERENCES:
        run, reference = _measured(facts, run_id), _measured(facts, reference_id)
        if run is not None and reference is not None:
            bound = bounds(reference)[1] * (1 + STREAM_TOLERANCE)
            detail = (f"{run_id} = {run.value:.0f} GB/s (CI from {bounds(run)[0]:.0f}) against {reference_id} = "
                      f"{reference.value:.0f} GB/s (+{STREAM_TOLERANCE:.0%}: at most {bound:.0f})")  # fmt: skip
            name = f"power_within_bandwidth.{run_id.removeprefix('power.').removesuffix('.burst')}"
            checks.append(Check(name, bounds(run)[0] <= bound, detail, (run_id, reference_id)))
    return checks


INVARIANTS = (zero_operands_cost_no_more, runs_keep_the_gpu_busy, streams_within_the_dram_peak,
              within_the_issue_and_bandwidth_probes)  # fmt: skip


FAMILY = Family(
    name="power",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
    sections=SECTIONS,
    invariants=INVARIANTS,
)
