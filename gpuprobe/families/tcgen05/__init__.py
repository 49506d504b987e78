"""The tcgen05 family (sm_100a): Blackwell's fifth-generation tensor cores, their tensor memory, and the
instructions that move data in and out of it. Built and held to its SASS contracts for sm_100a on any
machine, measured on a B200-class part, and unsupported elsewhere (an H200 included: the arch gating of
ptx/tcgen05/tcgen05.toml).

As the wgmma family does:

1. Throughput first: ``tcgen05.throughput.<type>.m128n256`` (one block a SM) and
   ``tcgen05.pair.throughput.<type>.m256n256`` (block pairs, a cluster of two, the first block of each
   issuing cta_group::2 MMAs): thread 0 of a block issues 8 MMAs onto one D in tensor memory, commits
   them to an mbarrier, every thread waits; TFLOP/s over the GPU from the kernel's own %globaltimer
   (first start to last end), the SM clock from %clock64 over %globaltimer in the same kernel, the
   launches calibrated to ``throughput_ms``.
2. Latency: ``tcgen05.latency.<type>.m128n<N>`` and ``tcgen05.pair.latency.bf16.m256n256``: one MMA, its
   commit and the wait per iteration, each adding onto the last one's D; a sample is a long minus a short
   loop's cycles over the difference in iterations.
3. Tensor memory: ``tcgen05.tmem.ld_st.latency`` (a dependent store-wait-load-wait chain through tensor
   memory) and ``tcgen05.tmem.alloc.latency`` (allocate and free 128 columns).

Every MMA launch reads every block's D back from tensor memory (tcgen05.ld) and holds it to
``times x A @ B`` from NumPy (:mod:`gpuprobe.families.wgmma.operands`' types and tolerances): a wrong D
fails the probe and gives no facts. A round trip checks every lane's final value, an allocation every
address it returned.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device, Fact, ProbeOutcome, Results
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.differencing import Difference, Lengths
from gpuprobe.families.measuring import TIMER_TICK_NS, clock_mhz, clock_window_ns, fact, require_counts
from gpuprobe.families.planning import CHECKED_LAUNCH_CALLS, cycles_s, readback_host_s
from gpuprobe.families.sampling import ONE_SAMPLE, Stopping, sample_until_stable
from gpuprobe.families.stepping import probe_steps
from gpuprobe.families.tcgen05.layout import BLOCK_ROWS, MMAS, Mma, descriptor_bits, instruction_descriptor
from gpuprobe.families.wgmma import TIMER_ALLOWANCE, Launched, peak_tflops
from gpuprobe.families.wgmma.layout import core_matrix_bytes
from gpuprobe.families.wgmma.operands import Operands, draw_values, encode, mismatch
from gpuprobe.judge.invariants import Check
from gpuprobe.kernels.registry import unroll_of
from gpuprobe.output.plots import new_figure, png_bytes
from gpuprobe.output.sections import Plot, Section

THREADS = 128
RECORD_WORDS = 4  # u64 per block: cycles, ns, start, end
TMEM_CHAIN, ALLOC_CHAIN = "gp_tc_tmem_chain", "gp_tc_alloc_chain"
ALLOC_COLUMNS, TMEM_COLUMNS = 128, 512
A_AND_B = 4096 + 256 * 32  # dynamic shared memory: A's 128 rows, then B (at most 256 rows) 4096 bytes on
# The B200's dense tensor rate per SM per clock: NVIDIA's 2250 bf16 / 4500 fp8 TFLOP/s (HGX B200, dense)
# over 148 SMs at the 1856 MHz they imply, twice Hopper's per-SM rates (docs/datasheets.md, b200).
BLACKWELL_FLOP_PER_CLK_PER_SM = {"bf16": 8192, "e4m3": 16384}
MMA_BY_PROBE: dict[str, Mma] = {mma.probe: mma for mma in MMAS}
TMEM_PROBES = ("tcgen05.tmem.ld_st.latency", "tcgen05.tmem.alloc.latency")
PROBES = [*MMA_BY_PROBE, *TMEM_PROBES]


@dataclass(frozen=True)
class Settings:
    short_iterations: int = 64
    long_iterations: int = 8192
    sampling: Stopping = Stopping(3, 7, 0.01, 0.5)  # a latency probe's samples
    calibration_iterations: int = 8
    throughput_ms: float = 4.0
    throughput_sampling: Stopping = Stopping(3, 3)  # timed launches: three
    min_clock_window_ns: float = clock_window_ns(0.01)
    seed: int = 20250918

    def __post_init__(self) -> None:
        require_counts(self, ("short_iterations", "calibration_iterations"))
        if self.long_iterations <= self.short_iterations:
            raise ValueError("Settings: long_iterations must exceed short_iterations (their difference is timed)")

    def lengths(self, steps: int) -> Lengths:
        """A latency sample's two loops, of ``steps`` dependent operations an iteration."""
        return Lengths(self.short_iterations, self.long_iterations, steps)


def make_operands(mma: Mma, kind: str, seed: int) -> Operands:
    """A (M x K) and B (N x K) of ``kind`` ("ternary" for chains, "random" for throughput)."""
    rng = np.random.default_rng(seed)
    a = encode(draw_values((mma.m, mma.k), mma.wgmma, kind, rng), mma.wgmma)
    b = encode(draw_values((mma.n, mma.k), mma.wgmma, kind, rng), mma.wgmma)
    return Operands(mma.wgmma, kind, a, b)


def times(mma: Mma, iterations: int) -> int:
    """How many A B a launch's D holds: the untimed first MMA, then ``batch`` per iteration."""
    return 1 + mma.batch * iterations


def check_d(kernel: str, mma: Mma, operands: Operands, d_rows: np.ndarray, blocks: int, count: int) -> None:
    """Every group of blocks' D (M x N, the blocks' rows in order) is ``count`` x A @ B within the type's
    tolerance."""
    groups = d_rows.reshape(blocks // mma.group, mma.m, mma.n)
    for index, d in enumerate(groups):
        problem = mismatch(d, operands, count)
        if problem:
            raise ProbeFailure(f"{kernel}: block group {index}: {problem}")


def upload(request: Request, mma: Mma, kind: str) -> tuple[Operands, list[Any]]:
    """Operands of ``kind`` for ``mma``, and the arguments that hand them over (all but iters, out)."""
    operands = make_operands(mma, kind, request.settings.seed)
    a = request.launcher.upload(core_matrix_bytes(operands.a_bits.view(np.uint8).reshape(mma.m, -1)))
    b = request.launcher.upload(core_matrix_bytes(operands.b_bits.view(np.uint8).reshape(mma.n, -1)))
    idesc = instruction_descriptor(mma.type_name, mma.m, mma.n)
    return operands, [a, b, np.uint64(descriptor_bits()), np.uint32(idesc)]


def launch(request: Request, mma: Mma, operands: Operands, given: list[Any], iterations: int, blocks: int) -> Launched:
    """One checked launch of ``blocks`` blocks: its records, after every block's D was held to NumPy."""
    d_words = blocks * BLOCK_ROWS * mma.n // 2
    words = blocks * RECORD_WORDS + d_words
    out = request.outputs.get(words)
    args = [*given, np.uint32(iterations), out]
    got = request.kernels.results(mma.kernel, args, out, words, grid=blocks, block=THREADS, shared=A_AND_B)
    records = got[: blocks * RECORD_WORDS].reshape(blocks, RECORD_WORDS)
    d = np.ascontiguousarray(got[blocks * RECORD_WORDS :]).view(np.float32).reshape(blocks * BLOCK_ROWS, mma.n)
    check_d(mma.kernel, mma, operands, d, blocks, times(mma, iterations))
    cycles, ns, start, end = (records[:, i] for i in range(RECORD_WORDS))
    if np.any(cycles == 0) or np.any(end < start) or np.any(ns != end - start):
        raise ProbeFailure(f"{mma.kernel}: impossible timing (cycles {cycles.min()}, ns {ns.min()})")
    origin = start.min()
    return Launched(*(x.astype(np.float64) for x in (cycles, ns, start - origin, end - origin)))


def grid(request: Request, mma: Mma) -> int:
    """Blocks for a throughput launch: one per SM (whole pairs for a block pair), as many as fit at once."""
    fit = request.launcher.max_active_blocks(mma.kernel, THREADS, A_AND_B)
    if fit < 1:
        raise ProbeFailure(f"{mma.kernel}: no block of {THREADS} threads fits on an SM")
    return request.device.sm_count // mma.group * mma.group


def measure_latency(request: Request, name: str) -> Measured:
    mma, s = MMA_BY_PROBE[name], request.settings
    operands, given = upload(request, mma, "ternary")
    clocks: list[float] = []

    def cycles(iterations: int) -> float:
        launched = launch(request, mma, operands, given, iterations, mma.group)
        mhz = clock_mhz(float(launched.cycles[0]), float(launched.ns[0]), s.min_clock_window_ns)
        if mhz is not None:
            clocks.append(mhz)
        return float(launched.cycles[0])

    samples = Difference(cycles, s.lengths(mma.batch), mma.kernel).samples(s.sampling)
    mhz = float(np.median(clocks)) if clocks else None
    result = fact(f"{mma.fact_stem}.latency", samples, "cycle", name, mhz)
    note = f"{result.value:.1f} cycles per dependent MMA, its commit and wait" + (f" at {mhz:.0f} MHz" if mhz else "")
    return Measured(name, ProbeOutcome("ok", note, {"latency": {"cycles": samples, "mhz": clocks}}), [result])


def measure_throughput(request: Request, name: str) -> Measured:
    mma, s = MMA_BY_PROBE[name], request.settings
    operands, given = upload(request, mma, "random")
    blocks = grid(request, mma)
    flop_per_iteration = mma.flop() * mma.batch * blocks // mma.group
    first = launch(request, mma, operands, given, s.calibration_iterations, blocks)
    scale = s.throughput_ms * 1e6 / max(first.span_ns, TIMER_TICK_NS)
    iterations = int(min(max(1, round(s.calibration_iterations * scale)), 2**31 - 1))
    tflops: list[float] = []
    clocks: list[float] = []

    def take() -> None:
        timed = launch(request, mma, operands, given, iterations, blocks)
        mhz = clock_mhz(float(np.median(timed.cycles)), float(np.median(timed.ns)), s.min_clock_window_ns)
        if mhz is None:
            raise ProbeFailure(f"{mma.kernel}: a timed run was too short to read the SM clock")
        tflops.append(flop_per_iteration * iterations / timed.span_ns / 1e3)
        clocks.append(mhz)

    sample_until_stable(take, tflops, s.throughput_sampling)
    facts = [fact(f"{mma.fact_stem}.tflops", tflops, "TFLOP/s", name),
             fact(f"{mma.fact_stem}.sm_clock", clocks, "MHz", name)]  # fmt: skip
    note = f"{facts[0].value:.1f} TFLOP/s, {blocks} blocks" + (" (pairs)" if mma.group == 2 else "")
    return Measured(name, ProbeOutcome("ok", note, {"random": {"tflops": tflops, "mhz": clocks}}), facts)


def _chain_samples(request: Request, kernel: str, words: Callable[[int], int],
                   check: Callable[[np.ndarray, int], None]) -> tuple[list[float], list[float]]:  # fmt: skip
    """Cycles per step of a one-warp chain kernel taking (iters, out) and writing [cycles, ns], then ``words(iters)``
    - 2 words that ``check`` reads: the long launch minus the short one, over the steps its declaration unrolls."""
    s = request.settings
    clocks: list[float] = []

    def cycles(iterations: int) -> float:
        out = request.outputs.get(words(iterations))
        got = request.kernels.results(kernel, [np.uint32(iterations), out], out, words(iterations), block=32)
        check(got, iterations)
        mhz = clock_mhz(float(got[0]), float(got[1]), s.min_clock_window_ns)
        if mhz is not None:
            clocks.append(mhz)
        return float(got[0])

    return Difference(cycles, s.lengths(unroll_of(kernel)), kernel).samples(s.sampling), clocks


def measure_tmem(request: Request, name: str) -> Measured:
    kernel = TMEM_CHAIN

    def check(got: np.ndarray, iterations: int) -> None:
        values = np.ascontiguousarray(got[2:]).view(np.uint32)[:32]
        expected = np.arange(32, dtype=np.uint32) + np.uint32(unroll_of(kernel) * (iterations + 1))
        if not np.array_equal(values, expected):
            lane = int(np.argmax(values != expected))
            raise ProbeFailure(f"{kernel}: lane {lane} ended at {int(values[lane])}, expected {int(expected[lane])}")

    samples, clocks = _chain_samples(request, kernel, lambda n: 2 + 16, check)
    mhz = float(np.median(clocks)) if clocks else None
    result = fact("tensor.tcgen05.tmem.st_ld.latency", samples, "cycle", name, mhz)
    return Measured(name, ProbeOutcome("ok", "a tcgen05.st, its wait, a tcgen05.ld and its wait per step"), [result])


def measure_alloc(request: Request, name: str) -> Measured:
    kernel = ALLOC_CHAIN

    def check(got: np.ndarray, iterations: int) -> None:
        addresses = np.ascontiguousarray(got[2:]).view(np.uint32)[:iterations]
        lanes, columns = addresses >> 16, addresses & 0xFFFF
        wrong = np.flatnonzero((lanes != 0) | (columns % ALLOC_COLUMNS != 0) | (columns >= TMEM_COLUMNS))
        if wrong.size:
            raise ProbeFailure(f"{kernel}: allocation {int(wrong[0])} returned {int(addresses[wrong[0]]):#x}, "
                               f"not lane 0 of an aligned column of the {TMEM_COLUMNS}")  # fmt: skip

    samples, clocks = _chain_samples(request, kernel, lambda n: 2 + n // 2, check)
    mhz = float(np.median(clocks)) if clocks else None
    result = fact("tensor.tcgen05.tmem.alloc_dealloc.latency", samples, "cycle", name, mhz)
    return Measured(name, ProbeOutcome("ok", f"tcgen05.alloc of {ALLOC_COLUMNS} columns and its dealloc"), [result])


STEPS: dict[str, Callable[[Request, str], Measured]] = {
    **{m.probe: measure_latency if m.purpose == "lat" else measure_throughput for m in MMAS},
    "tcgen05.tmem.ld_st.latency": measure_tmem,
    "tcgen05.tmem.alloc.latency": measure_alloc,
}


# ---- the time plan -----------------------------------------------------------------------------

LATENCY_CYCLES_PER_MMA = 600.0  # an MMA, its commit and the wait, at most (a B200's m128n256 floor is 128)
CHAIN_CYCLES_PER_STEP = 1000.0  # a tensor-memory round trip or an allocation and free, at most


def plan(settings: Settings, device: Device) -> Plan:
    """Every probe at its most repeats, counted for a part with tcgen05 (elsewhere none runs): each latency
    sample's two runs at :data:`LATENCY_CYCLES_PER_MMA`, each timed throughput run (and the calibration) at
    most twice ``throughput_ms``, every launch's records and D read back and checked."""
    s, total = settings, Plan(len(PROBES), 0, 0.0)
    repeats = s.sampling.max_repeats
    iterations = s.short_iterations + s.long_iterations
    for mma in MMAS:
        if mma.purpose == "lat":
            words = mma.group * (RECORD_WORDS + BLOCK_ROWS * mma.n // 2)
            launches = 2 * repeats
            gpu_s = repeats * cycles_s(iterations * LATENCY_CYCLES_PER_MMA, device)
        else:
            words = device.sm_count * (RECORD_WORDS + BLOCK_ROWS * mma.n // 2)
            launches = 1 + s.throughput_sampling.max_repeats
            gpu_s = launches * 2 * s.throughput_ms / 1e3
        total += Plan(0, launches * CHECKED_LAUNCH_CALLS, gpu_s, launches * readback_host_s(words * 8))
    chains = 2 * 2 * repeats
    steps = iterations * (unroll_of(TMEM_CHAIN) + unroll_of(ALLOC_CHAIN))
    return total + Plan(0, chains * CHECKED_LAUNCH_CALLS, repeats * cycles_s(steps * CHAIN_CYCLES_PER_STEP, device))


# First contact: the cheapest latency chain (bf16 m128n64) and the tensor-memory round trip, once each.
SMOKE_SETTINGS = Settings(short_iterations=1, long_iterations=2, sampling=ONE_SAMPLE, throughput_ms=0.2,
                          throughput_sampling=ONE_SAMPLE)  # fmt: skip
SMOKE = Smoke(probes=("tcgen05.latency.bf16.m128n64", "tcgen05.tmem.ld_st.latency"), settings=SMOKE_SETTINGS)


# ---- invariants and the sheet ------------------------------------------------------------------


def _value(facts: dict[str, Fact], fact_id: str) -> float | None:
    found = facts.get(fact_id)
    return found.value if found is not None and found.value is not None else None


def short_id(mma: Mma) -> str:
    return mma.fact_stem.removeprefix("tensor.tcgen05.")


def rate_invariants(facts: dict[str, Fact], device: Device) -> list[Check]:
    """No tcgen05.mma stream runs faster than the B200's datasheet rate per SM at the clock it ran (2 % for
    the timer), and no MMA's latency is under its floor: its work over an SM's rate."""
    checks = []
    for mma in MMAS:
        rate = BLACKWELL_FLOP_PER_CLK_PER_SM[mma.type_name]
        if mma.purpose == "tput":
            tflops, mhz = _value(facts, f"{mma.fact_stem}.tflops"), _value(facts, f"{mma.fact_stem}.sm_clock")
            if tflops is not None and mhz is not None:
                ceiling = peak_tflops(rate, device.sm_count, mhz)
                detail = f"{tflops:.1f} TFLOP/s vs {ceiling:.1f} at {mhz:.0f} MHz"
                ids = (f"{mma.fact_stem}.tflops", f"{mma.fact_stem}.sm_clock")
                ok = tflops <= TIMER_ALLOWANCE * ceiling
                checks.append(Check(f"tcgen05.rate_below_peak.{short_id(mma)}", ok, detail, ids, physics=True))
        else:
            latency = _value(facts, f"{mma.fact_stem}.latency")
            if latency is not None:
                floor = mma.flop() / (rate * mma.group)
                detail = f"{latency:.1f} cycles vs a floor of {floor:.0f}"
                checks.append(Check(f"tcgen05.latency_floor.{short_id(mma)}", latency >= floor, detail,
                                    (f"{mma.fact_stem}.latency",), physics=True))  # fmt: skip
    return checks


INVARIANTS = (rate_invariants,)


def latency_series(results: Results) -> list[tuple[str, int, float]]:
    """(label, N, cycles) of every tcgen05.mma latency the run measured."""
    found = []
    for mma in (m for m in MMAS if m.purpose == "lat"):
        latency = results.fact(f"{mma.fact_stem}.latency")
        if latency is not None and latency.value is not None:
            label = f"{mma.type_name} m{mma.m}" + (", a block pair" if mma.group == 2 else "")
            found.append((label, mma.n, float(latency.value)))
    return found


def latency_png(results: Results, dpi: int) -> bytes | None:
    """tcgen05.mma latency vs N per type and block group, with the floor an SM's rate sets; None if unmeasured."""
    series = latency_series(results)
    if not series:
        return None
    figure = new_figure((6.5, 4), dpi)
    ax = figure.subplots()
    for label in dict.fromkeys(label for label, _, _ in series):
        points = [(n, v) for name, n, v in series if name == label]
        ax.plot([n for n, _ in points], [v for _, v in points], "o-", label=label)
    ax.plot([64, 256], [32, 128], ":", color="grey", label="bf16 floor: m128nN work at 8192 flop/clk")
    ax.set_xscale("log", base=2)
    ax.set(xlabel="N", ylabel="cycles per dependent MMA, commit and wait", title="tcgen05.mma latency")
    ax.legend(fontsize="small")
    figure.tight_layout()
    return png_bytes(figure)


SECTIONS = (
    Section(
        title="Tensor cores: tcgen05 and tensor memory (sm_100a)",
        fact_prefixes=("tensor.tcgen05.",),
        probe_prefixes=("tcgen05.",),
        plot=Plot("tcgen05_latency", "tcgen05_latency.png", "tcgen05.mma latency vs N", latency_png),
        blurb=(
            "Blackwell's tcgen05.mma from shared-memory descriptors into tensor memory, kind::f16 (bf16) and "
            "kind::f8f6f4 (e4m3), for one block (m128) and a block pair (cta_group::2, m256), committed to an "
            "mbarrier: latency (one warpgroup, each MMA adding onto the last) and throughput (every SM, 8 MMAs "
            "per commit), every D read back with tcgen05.ld and checked against NumPy; and tensor memory's "
            "store-load round trip and allocation. On other archs these probes are unsupported."
        ),
    ),
)


def measure(request: Request) -> Probes:
    """The family's runnable probes in order (throughput first, then latency, then tensor memory)."""
    request = replace(request, settings=request.settings or Settings())
    steps = {name: lambda name=name: STEPS[name](request, name) for name in PROBES}
    return probe_steps(PROBES, steps, request.runnable)


FAMILY = Family(
    name="tcgen05",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
    sections=SECTIONS,
    invariants=INVARIANTS,
)
