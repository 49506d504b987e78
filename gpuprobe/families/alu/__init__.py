"""The ALU family: dependent-chain latency and issue rate of FFMA, DFMA, HFMA2, IMAD and MUFU.

Per instruction, the probes ``alu.<op>.ilp1`` .. ``alu.<op>.ilp8`` run the same chain kernel
with 1, 2, 4 and 8 independent chains per thread (ptx/alu/alu.ptx, ptx/alu/alu_sm80.ptx), each
against its twin, whose loop body is the kernel's twice over under the same loop control: the
twin's run less the kernel's, for the same iterations, is the instructions alone, the loop's IADD,
ISETP and BRA cancelled (:mod:`gpuprobe.families.issue_sweep` says why that, and what a loop timed
alone reads: 115.8 FFMA per clock per SM on an H200 where the SM does 128). The probe declares its twin
(``twin`` in ptx/alu/alu.toml), whose SASS is held to the probe's contract with 64 instructions an
iteration: the probe is runnable only where both kernels' contracts hold.

1. ``ilp1`` first measures the latency of one step: one thread, the kernel and its twin
   (:meth:`gpuprobe.families.issue_sweep.Sweeper.latency`), the SM clock read over the twin's runs;
2. every ILP probe then sweeps 1 to 32 warps per SM, one block per SM, and records each
   configuration's issue rate (:meth:`~gpuprobe.families.issue_sweep.Sweeper.point`);
3. each reports its row's plateau as ``alu.<op>.throughput.ilp<k>``, and ``ilp8``, the last, the
   plateau of the whole ILP x warps sweep as ``alu.<op>.throughput``, in lane operations per
   clock per SM: an FMA (FFMA, DFMA, IMAD) counts one per lane, an HFMA2 two (its two halves), a
   MUFU one — the convention of the CUDA Programming Guide's arithmetic throughput table, which
   the expectations cite. The sin.approx step is two FMULs and MUFU.SIN: its latency fact is the
   whole step's, FMULs included (nothing assumed is subtracted).

Every launch checks every thread's result. Ternary chains step x <- a x + b with a = -1, b = 1, so
each chain ends at exactly 1 - x0 after the untimed first step and an even number of timed ones;
the kernel XORs its 8 chains and the host predicts the bits. MUFU chains contract onto a fixed
point; the host iterates the exact function in float64 and allows the approximation's error.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.issue_sweep import (
    SMOKE_SETTINGS,
    Launch,
    Records,
    Settings,
    Sweeper,
    SweepPoint,
    body_of,
    chain_records,
    check_results,
    launchable_warps,
    plateau,
    sweep_plan,
    sweep_series,
    twin_kernel,
)
from gpuprobe.families.measuring import fact
from gpuprobe.families.stepping import probe_steps
from gpuprobe.judge.invariants import Check
from gpuprobe.output.sections import Section

CHAINS = 8  # chain registers per thread, whatever the ILP (ptx/alu/alu.ptx)
ILPS = (1, 2, 4, 8)
MUFU_TOLERANCE = 1e-4  # on the sum of 8 chains at their fixed point: each within ~3 x 2^-21


@dataclass(frozen=True)
class Op:
    """One instruction's chain: its register width, lane operations per instruction, and how the
    kernel's result is predicted (``ternary``: exact XOR of the chains; else the MUFU function)."""

    name: str
    width: int
    lane_ops: int
    mufu: Callable[[float], float] | None = None
    fma_steps: int = 0  # FMA-pipe instructions in each step besides the one the probe is about (reported)


OPS: tuple[Op, ...] = (
    Op("ffma", 32, 1),
    Op("dfma", 64, 1),
    Op("hfma2", 32, 2),
    Op("hfma2_bf16", 32, 2),
    Op("imad", 32, 1),
    Op("mufu_rsqrt", 32, 1, lambda x: 1.0 / math.sqrt(x)),
    Op("mufu_ex2", 32, 1, lambda x: 2.0**-x),
    Op("mufu_sin", 32, 1, lambda x: math.sin(2.0 * x), fma_steps=2),
)


def probe_name(op: Op, ilp: int) -> str:
    """The probe of ``op``'s chain kernel with ``ilp`` chains per thread (timed against its twin)."""
    return f"alu.{op.name}.ilp{ilp}"


def kernel_name(op: Op, ilp: int) -> str:
    """``op``'s chain kernel with ``ilp`` chains per thread."""
    return f"gp_alu_{op.name}_ilp{ilp}"


PROBES = [probe_name(op, ilp) for op in OPS for ilp in ILPS]

SECTIONS = (
    Section(
        "CUDA-core instructions",
        ("alu.",),
        ("alu.",),
        blurb="Dependent-chain latency (cycles, one thread) and the best issue rate of an ILP x warps sweep, in "
        "lane operations per clock per SM (an FMA counts one per lane, an HFMA2 two), next to the CUDA "
        "Programming Guide's arithmetic-throughput table.",
    ),
)
ISSUE_WIDTH = 128  # lanes an SM issues per clock at most: 4 schedulers x 32 lanes


def issue_bound(facts: dict[str, Fact], device: Device) -> list[Check]:
    """No instruction issues faster than 4 warps' worth of lanes per clock per SM (times its lane ops):
    the SM's own peak, so physics (it holds at any settings)."""
    checks = []
    for op in OPS:
        measured = facts.get(f"alu.{op.name}.throughput")
        if measured is not None and measured.value is not None:
            bound = ISSUE_WIDTH * op.lane_ops * 1.05
            ok = measured.value <= bound
            detail = f"{measured.value:.1f} op/clk/SM vs at most {bound:.0f}"
            checks.append(Check(f"alu.{op.name}.issue_bound", ok, detail, (measured.id,), physics=True))
    return checks


def mufu_slower_than_ffma(facts: dict[str, Fact], device: Device) -> list[Check]:
    """A special-function step takes longer than an FFMA step on every architecture."""
    ffma = facts.get("alu.ffma.latency")
    if ffma is None or ffma.value is None:
        return []
    checks = []
    for name in ("mufu_rsqrt", "mufu_ex2"):
        mufu = facts.get(f"alu.{name}.latency")
        if mufu is not None and mufu.value is not None:
            ok = mufu.value > ffma.value
            detail = f"{mufu.value:.1f} vs FFMA {ffma.value:.1f} cycles"
            checks.append(Check(f"alu.{name}.slower_than_ffma", ok, detail, (mufu.id, ffma.id)))
    return checks


INVARIANTS = (issue_bound, mufu_slower_than_ffma)


# ---- operands and predictions -------------------------------------------------------------------


def _f16(values: list[float]) -> int:
    return int(np.array(values, dtype=np.float16).view(np.uint16).astype(np.uint32) @ np.array([1, 1 << 16]))


def _bf16(values: list[float]) -> int:
    bits = np.array(values, dtype=np.float32).view(np.uint32) >> 16  # exact: the values fit in bf16
    return int(bits[0] | (bits[1] << 16))


def _pair(op: Op, low: float, high: float) -> int:
    return _f16([low, high]) if op.name == "hfma2" else _bf16([low, high])


def initial_values(op: Op) -> list[float]:
    """Chain c's starting value (MUFU: inside the function's domain and basin)."""
    starts = {
        "mufu_rsqrt": lambda c: 0.5 + c,
        "mufu_ex2": lambda c: 0.25 * c - 1.0,
        "mufu_sin": lambda c: 0.1 * (c + 1),
    }
    # ternary: 1 - x0 all of one sign, so the 8 results never cancel in the XOR
    return [starts.get(op.name, lambda c: 1.5 + 0.25 * c)(c) for c in range(CHAINS)]


def _encode(op: Op, value: float, chain: int) -> int:
    """One operand slot's bits: packed pairs get a distinct high half, IMAD an integer."""
    if op.name == "ffma" or op.mufu:
        return int(np.float32(value).view(np.uint32))
    if op.name == "dfma":
        return int(np.float64(value).view(np.uint64))
    if op.name == "imad":
        return int(value) & 0xFFFFFFFF
    return _pair(op, value, -0.5 - 0.25 * chain)


def operands(op: Op) -> np.ndarray:
    """The kernel's operand slots: a = -1, b = 1, then each chain's x0."""
    if op.name == "imad":
        a, b, starts = 0xFFFFFFFF, 1, [0x01234567 * (c + 1) for c in range(CHAINS)]
        return np.array([a, b, *(s & 0xFFFFFFFF for s in starts)], dtype=np.uint64)
    if op.name in ("hfma2", "hfma2_bf16"):
        a, b = _pair(op, -1.0, -1.0), _pair(op, 1.0, 1.0)
    else:
        a, b = _encode(op, -1.0, 0), _encode(op, 1.0, 0)
    return np.array([a, b, *(_encode(op, x, c) for c, x in enumerate(initial_values(op)))], dtype=np.uint64)


def predicted_ternary(op: Op) -> int:
    """The XOR of the 8 chains, each at 1 - x0 after an odd number of x <- -x + 1 steps."""
    slots = operands(op)
    result = 0
    for c in range(CHAINS):
        x0 = int(slots[2 + c])
        if op.name == "imad":
            value = (1 - x0) & 0xFFFFFFFF
        elif op.name == "ffma":
            value = _encode(op, 1.0 - float(np.uint32(x0).view(np.float32)), c)
        elif op.name == "dfma":
            value = _encode(op, 1.0 - float(np.uint64(x0).view(np.float64)), c)
        else:
            value = _pair(op, 1.0 - initial_values(op)[c], 1.0 - (-0.5 - 0.25 * c))
        result ^= value
    return result


MUFU_CONVERGED_STEPS = 200  # |f'| <= 0.64 at every fixed point: after 200 steps a chain is there to 1e-38


def predicted_mufu(op: Op, iterations: int, ilp: int, passes: int = 1) -> float:
    """The sum of the 8 chains: one untimed step each, then the loop body's 32 / ILP per pass and
    iteration on chains < ILP (a chain past :data:`MUFU_CONVERGED_STEPS` steps sits at the fixed
    point, to float64 precision)."""
    assert op.mufu is not None
    total = 0.0
    body = body_of(kernel_name(op, ilp))
    for c, x in enumerate(initial_values(op)):
        steps = 1 + (iterations * passes * body // ilp if c < ilp else 0)
        for _ in range(min(steps, MUFU_CONVERGED_STEPS)):
            x = op.mufu(x)
        total += x
    return total


def check_launch(op: Op, records: Records, iterations: int, ilp: int, passes: int, kernel: str) -> None:
    """Every thread's result is the one the host predicts (ternary chains: whatever the steps)."""
    if op.mufu is None:
        mask = (1 << op.width) - 1
        expected = predicted_ternary(op)
        results = records.result[:, 0]
        check_results(results, lambda r: (r & np.uint64(mask)) == np.uint64(expected), kernel, hex(expected))
        return
    expected_sum = predicted_mufu(op, iterations, ilp, passes)
    results = records.result[:, 0]
    sums = (results & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.float32).astype(np.float64)
    check_results(results, lambda _: np.abs(sums - expected_sum) <= MUFU_TOLERANCE, kernel, f"{expected_sum:.6f}")


def plan(settings: Settings, device: Device) -> Plan:
    """What measuring every probe costs at most on ``device`` (:func:`~gpuprobe.families.issue_sweep.sweep_plan`)."""
    return sweep_plan(settings, device, len(OPS), len(ILPS), 1)


# First contact: FFMA's latency and its ILP-1 sweep (the full run's warps per SM: the facts mean what the
# full run's do) against its twin, each sample once and short (the ternary check holds for any trip count).
SMOKE = Smoke(probes=("alu.ffma.ilp1",), settings=SMOKE_SETTINGS)


# ---- launching --------------------------------------------------------------------------------------


def op_launch(request: Request, op: Op) -> Launch:
    """Checked launches of ``op``'s ILP kernels (``passes`` 1) and their twins (:data:`TWIN_PASSES`), its
    operands uploaded once."""
    uploaded = request.launcher.upload(operands(op))

    def launch(passes: int, ilp: int, iterations: int, blocks: int, threads: int) -> Records:
        kernel = twin_kernel(kernel_name(op, ilp), passes)
        records = chain_records(request, kernel, uploaded, iterations, blocks, threads, 1)
        check_launch(op, records, iterations, ilp, passes, kernel)
        return records

    return launch


def measure_probe(request: Request, launch: Launch, op: Op, ilp: int) -> Measured:
    """Latency (ILP 1), the ILP's sweep, and at ILP 8 the plateau of the whole sweep: each against the twin."""
    settings: Settings = request.settings
    name = probe_name(op, ilp)
    facts = []
    notes = []
    kernel = kernel_name(op, ilp)
    sweeper = Sweeper(launch, settings, request.device.sm_count, kernel)
    if ilp == 1:
        samples = sweeper.latency(threads=1)
        mhz = sweeper.mhz()
        if op.fma_steps:
            notes.append(f"a step is MUFU and {op.fma_steps} FMULs (range reduction): its latency is theirs together")
        latency = fact(f"alu.{op.name}.latency", samples, "cycle", name, mhz)
        request.state[latency.id] = latency.value
        facts.append(latency)
    sweeps = request.state.setdefault("alu_sweeps", {}).setdefault(op.name, [])
    for warps in launchable_warps(request.launcher, kernel, settings):
        point = sweeper.point(ilp, warps, op.lane_ops)
        sweeps.append([point.ilp, point.warps, point.rates])
    points = [SweepPoint(i, w, r) for i, w, r in sweeps]
    row = [p for p in points if p.ilp == ilp]
    facts.append(fact(f"alu.{op.name}.throughput.ilp{ilp}", plateau(row)[1], "op/clk/SM", name))
    if ilp == ILPS[-1]:
        top, samples = plateau(points)
        facts.append(fact(f"alu.{op.name}.throughput", samples, "op/clk/SM", name))
        notes.append(f"plateau from the sweep's best point, ILP {top.ilp} with {top.warps} warps per SM")
    series = {"sweep": sweep_series(row)}
    return Measured(name, ProbeOutcome("ok", "; ".join(notes), series), facts)


def measure(request: Request) -> Probes:
    """The family's runnable probes in order, each as (name, step); see the module docstring."""
    request = dataclasses.replace(request, settings=request.settings or Settings())
    launches = functools.cache(functools.partial(op_launch, request))  # an op's operands uploaded once
    steps = {probe_name(op, ilp): lambda op=op, ilp=ilp: measure_probe(request, launches(op), op, ilp)
             for op in OPS for ilp in ILPS}  # fmt: skip
    return probe_steps(PROBES, steps, request.runnable)


FAMILY = Family(
    name="alu",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
    sections=SECTIONS,
    invariants=INVARIANTS,
)
