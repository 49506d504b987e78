"""The mma family: mma.sync latency and issue rate for every shape and type the arch has natively,
and the emulations ptxas substitutes where it has not.

Per variant (:data:`gpuprobe.families.mma.fragments.VARIANTS`), the probes
``mma.<type>.<shape>.ilp1`` .. ``ilp8`` run the chain kernel of ptx/common/mma_chain.ptxinc against its
twin, whose loop body is the kernel's 16 mma.sync twice over under the same loop control: the twin's
run less the kernel's, same iterations, is the mma.sync alone, the loop's IADD, ISETP and BRA
cancelled (:mod:`gpuprobe.families.issue_sweep`; timed alone, an f16 m16n8k8 chain read 16.875
cycles a step on an H200, 16 plus the branch's 14-cycle bubble over 16). The probe declares its twin
(``twin`` in ptx/mma/*.toml), whose SASS is held to the probe's contract with twice the mma.sync an
iteration: the probe is runnable only where both kernels' contracts hold.

1. ``ilp1`` measures the latency of one accumulator-dependent mma.sync: one warp, the kernel and its
   twin (:class:`~gpuprobe.families.issue_sweep.Sweeper`);
2. every ILP probe sweeps 1 to 32 warps per SM, one block per SM;
3. ``ilp8`` reports the sweep's plateau as ``.throughput``, multiply-adds per clock per SM (an
   mma.sync of shape mMnNkK is M N K of them): the per-clock figure, the one the expectations judge.
   ``.sm_clock`` is the SM clock the twins' runs read (%clock64 over %globaltimer, MHz), and
   ``.tflops`` the plateau at that clock: 2 flop per multiply-add, every SM. The clock moves with
   power and temperature (1787 to 1794 MHz on an H200 whose boost is 1980), so a TFLOP/s figure
   says as much about the board's clock as about its tensor cores.

Where the SASS shows ptxas emulating a type (int4 from sm_90, fp8 on sm_90 and sm_100a: the
contracts in ptx/mma/mma_int4_emulated.toml and ptx/mma/mma_fp8_emulated.toml), ``mma.<type>.<shape>.emulated``
runs the kernel once, checks its result, and reports ``tensor.mma_sync.<int4|fp8>.emulated = 1``
(where the type is native, the native probes' contracts are the evidence, and no flag is reported).

The ``mma.numerics.<type>`` probes run one untimed mma.sync per experiment of
:mod:`gpuprobe.families.mma.numerics` and report what the tensor core keeps (``tensor.numerics.*``).

``mma.sp.<type>.<shape>.ilp1`` and ``.ilp8`` measure mma.sp (2:4 sparse A, :mod:`gpuprobe.families.mma.sparse`)
the same way, each with its twin, at ILP 1 and 8 (``tensor.mma_sync_sp.*``), counting A's skipped zeros as the
datasheets count sparse work; the ILP-8 probe also reports its plateau over the dense instruction's of the same tile,
measured in the same run (``.over_dense``; the datasheets promise 2 x).

Every launch checks every lane's D (the sum of its 8 chains, each at C + A B) against the NumPy
reference, bit for bit: the operands are small integers, exact in every type.
"""

from __future__ import annotations

import dataclasses
import functools

import numpy as np

from gpuprobe.core.arch import parse_arch
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.families import instruction_peak
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.issue_sweep import (
    SMOKE_SETTINGS,
    Launch,
    Records,
    Settings,
    Sweeper,
    SweepPoint,
    chain_records,
    check_results,
    launchable_warps,
    launches_plan,
    plateau,
    sweep_plan,
    sweep_series,
    twin_kernel,
)
from gpuprobe.families.measuring import fact, unmeasured
from gpuprobe.families.mma.fragments import LANES, VARIANTS, Variant
from gpuprobe.families.mma.numerics import (
    NUMERIC_VARIANTS,
    Experiment,
    d_matrix,
    experiment_count,
    fragments,
    read_numerics,
)
from gpuprobe.families.mma.sparse import SPARSE_VARIANTS, SparseVariant
from gpuprobe.families.sparsity import not_below_beyond_noise
from gpuprobe.families.stepping import probe_steps
from gpuprobe.judge.invariants import Check
from gpuprobe.kernels.registry import find_probe
from gpuprobe.output.sections import Section

ILPS = (1, 2, 4, 8)
SPARSE_ILPS = (1, 8)  # the sparse chains' latency and their issue rate at full ILP
RESULT_WORDS = 2  # per thread: D's four 32-bit sums
SEED = 20241202
EMULATED = {"int4": "tensor.mma_sync.int4.emulated", "e4m3": "tensor.mma_sync.fp8.emulated"}
EMULATED_PROBES = {"mma.int4.m16n8k64.emulated": Variant("int4", "m16n8k64"),
                   "mma.e4m3.m16n8k32.emulated": Variant("e4m3", "m16n8k32")}  # fmt: skip

NUMERICS_PROBES = {f"mma.numerics.{v.name}": v for v in NUMERIC_VARIANTS}


def _chain_probes(variants: tuple[Variant, ...], ilps: tuple[int, ...]) -> list[str]:
    """Each variant's ILP probes."""
    return [v.probe(ilp) for v in variants for ilp in ilps]


PROBES = _chain_probes(VARIANTS, ILPS) + list(EMULATED_PROBES)
PROBES += list(NUMERICS_PROBES)
PROBES += _chain_probes(SPARSE_VARIANTS, SPARSE_ILPS)  # after the dense: set against them

SECTIONS = (
    Section(
        "Tensor cores: mma.sync",
        ("tensor.mma_sync.",),
        ("mma.",),
        blurb="Latency of one accumulator-dependent mma.sync (one warp), and the best issue rate of an ILP x warps "
        "sweep in multiply-adds per clock per SM (what is judged), with the SM clock it ran at and TFLOP/s at that "
        "clock; each figure against a twin kernel of twice the mma.sync under the same loop control, so the loop's "
        "own instructions cancel. Types ptxas emulates on this arch are flagged, not timed.",
    ),
    Section(
        "Tensor-core numerics",
        ("tensor.numerics.",),
        blurb="What the tensor core keeps: tf32's mantissa bits and rounding, and the fraction bits of the sum with C "
        "and of aligned products, from exact powers of two checked against float64.",
    ),
)


def larger_k_is_not_faster(facts: dict[str, Fact], device: Device) -> list[Check]:
    """An f16 mma.sync with twice the k takes at least as long (m16n8k16 against m16n8k8)."""
    small, large = (facts.get(f"tensor.mma_sync.f16.{shape}.latency") for shape in ("m16n8k8", "m16n8k16"))
    if small is None or large is None or small.value is None or large.value is None:
        return []
    detail = f"m16n8k16 {large.value:.1f} vs m16n8k8 {small.value:.1f} cycles"
    ok = large.value >= small.value * 0.95
    return [Check("tensor.mma_sync.f16.latency_grows_with_k", ok, detail, (small.id, large.id))]


def sparse_at_least_dense(facts: dict[str, Fact], device: Device) -> list[Check]:
    """An mma.sp does at least the multiply-adds per clock of the dense mma.sync of the same tile (its
    skipped zeros counted, as the datasheets count them), beyond the noise."""
    checks = []
    for v in SPARSE_VARIANTS:
        sparse, dense = (facts.get(f"{stem}.throughput") for stem in (v.fact_stem, v.dense_twin.fact_stem))
        if sparse is None or dense is None or sparse.value is None or dense.value is None:
            continue
        ratio = sparse.value / dense.value
        detail = f"mma.sp {sparse.value:.0f} vs mma.sync {dense.value:.0f} op/clk/SM ({ratio:.2f} x)"
        ok = not_below_beyond_noise(sparse, dense)
        checks.append(Check(f"tensor.mma_sync_sp.{v.name}.{v.shape}.at_least_dense", ok, detail, (sparse.id, dense.id)))
    return checks


INVARIANTS = (larger_k_is_not_faster, sparse_at_least_dense)


def check_launch(v: Variant, records: Records, expected: np.ndarray, kernel: str) -> None:
    """Every thread's four D sums are its lane's prediction (threads are whole warps)."""
    got = np.ascontiguousarray(records.result, dtype=np.uint64).view(np.uint32).reshape(-1, 4)
    want = expected[np.arange(len(got)) % LANES]
    good = np.all(got == want, axis=1)
    first_bad = int(np.argmin(good))
    check_results(records.result, lambda _: good, kernel, " ".join(f"{int(w):#x}" for w in want[first_bad]))


def variant_launch(request: Request, v: Variant) -> Launch:
    """Checked launches of the variant's ILP kernels (``passes`` 1) and their twins (:data:`TWIN_PASSES`), its
    fragments uploaded once."""
    fragments, expected = v.fragments_and_prediction(SEED)
    uploaded = request.launcher.upload(fragments.ravel())

    def launch(passes: int, ilp: int, iterations: int, blocks: int, threads: int) -> Records:
        kernel = twin_kernel(v.kernel(ilp), passes)
        records = chain_records(request, kernel, uploaded, iterations, blocks, threads, RESULT_WORDS)
        check_launch(v, records, expected, kernel)
        return records

    return launch


def _flag(fact_id: str, value: float, probe: str) -> Fact:
    return Fact(fact_id, value, "bool", (value, value), [value], {}, probe)


def measure_chain(request: Request, launch: Launch, v: Variant, ilp: int) -> Measured:
    """Latency (ILP 1), the ILP's sweep, and at ILP 8 the plateau, its SM clock and TFLOP/s."""
    settings: Settings = request.settings
    name = v.probe(ilp)
    facts: list[Fact] = []
    notes: list[str] = []
    sweeper = Sweeper(launch, settings, request.device.sm_count, v.kernel(ilp))
    if ilp == 1:
        samples = sweeper.latency(threads=LANES)
        facts.append(fact(f"{v.fact_stem}.latency", samples, "cycle", name, sweeper.mhz()))
    sweeps = request.state.setdefault("mma_sweeps", {}).setdefault(v.fact_stem, {"points": [], "mhz": []})
    for warps in launchable_warps(request.launcher, v.kernel(ilp), settings):
        point = sweeper.point(ilp, warps, v.fmas / LANES)
        sweeps["points"].append([point.ilp, point.warps, point.rates])
    sweeps["mhz"].extend(sweeper.clocks)
    points = [SweepPoint(i, w, r) for i, w, r in sweeps["points"]]
    row = [p for p in points if p.ilp == ilp]
    facts.append(fact(f"{v.fact_stem}.throughput.ilp{ilp}", plateau(row)[1], "op/clk/SM", name))
    if ilp == ILPS[-1]:
        top, rates = plateau(points)
        facts.append(fact(f"{v.fact_stem}.throughput", rates, "op/clk/SM", name))
        if not isinstance(v, SparseVariant) and v.name in instruction_peak.MMA_SYNC_TYPES:
            dtype = instruction_peak.MMA_SYNC_TYPES[v.name]
            instruction_peak.record(request.state, dtype, [2 * r for r in rates], name)  # 2 flop a multiply-add
        clock_facts, note = at_clock(v, rates, sweeps["mhz"], request.device.sm_count, name)
        facts += clock_facts
        notes.append(note)
        notes.append(f"plateau from the sweep's best point, ILP {top.ilp} with {top.warps} warps per SM")
        if isinstance(v, SparseVariant):
            facts.append(over_dense(request, v, rates, name))
    series = {"sweep": sweep_series(row)}
    return Measured(name, ProbeOutcome("ok", "; ".join(notes), series), facts)


def at_clock(v: Variant, rates: list[float], clocks: list[float], sm_count: int, name: str) -> tuple[list[Fact], str]:
    """The SM clock the sweep's twins ran at (``.sm_clock``, MHz) and the plateau at it (``.tflops``: 2 flop
    per multiply-add, every SM), and a note; both unmeasured where no run was long enough to read the clock."""
    if not clocks:
        why = "no run was long enough to read the SM clock (%clock64 over %globaltimer)"
        facts = [unmeasured(f"{v.fact_stem}.sm_clock", "MHz", name, why),
                 unmeasured(f"{v.fact_stem}.tflops", "TFLOP/s", name, why)]  # fmt: skip
        return facts, why
    mhz = float(np.median(clocks))
    tflops = [2.0 * r * sm_count * mhz * 1e6 / 1e12 for r in rates]
    facts = [
        fact(f"{v.fact_stem}.sm_clock", clocks, "MHz", name),
        fact(f"{v.fact_stem}.tflops", tflops, "TFLOP/s", name),
    ]
    return facts, f"TFLOP/s at {mhz:.0f} MHz, the SM clock of the sweep's twin runs"


def over_dense(request: Request, v: SparseVariant, rates: list[float], name: str) -> Fact:
    """A sparse variant's plateau over its dense twin's, measured in the same run (the twin's sweep in the
    run's state); not measured, with the reason, where the twin was not."""
    twin = request.state.get("mma_sweeps", {}).get(v.dense_twin.fact_stem)
    fact_id = f"{v.fact_stem}.over_dense"
    if not twin or not twin["points"]:
        why = f"the dense {v.dense_twin.name} {v.dense_twin.shape} was not measured in this run"
        return unmeasured(fact_id, "ratio", name, why)
    dense = float(np.median(plateau([SweepPoint(i, w, r) for i, w, r in twin["points"]])[1]))
    return fact(fact_id, [r / dense for r in rates], "ratio", name)


def measure_emulated(request: Request, launch: Launch, name: str, v: Variant) -> Measured:
    """One checked launch of the emulated kernel: the emulation must still compute C + A B."""
    launch(1, 1, request.settings.short_iterations, 1, LANES)
    note = "ptxas emulates this type here (the SASS contract shows no native instruction); result verified"
    return Measured(name, ProbeOutcome("ok", note), [_flag(EMULATED[v.name], 1.0, name)])


def measure_numerics(request: Request, name: str, v: Variant) -> Measured:
    """The variant's arithmetic experiments, one untimed mma each; facts report what it keeps."""
    kernel = f"gp_mma_numerics_{v.name}_{v.shape}"

    def d_of(experiment: Experiment) -> np.ndarray:
        buffer = request.launcher.upload(fragments(v, experiment).ravel())
        out = request.outputs.get(LANES * 2)
        words = request.kernels.results(kernel, [buffer, out], out, LANES * 2, block=LANES)  # mma.sync: a whole warp
        return d_matrix(v, np.ascontiguousarray(words).view(np.uint32).reshape(LANES, 4))

    readings = read_numerics(v, d_of, kernel)
    facts = [Fact(r.fact_id, r.value, r.unit, (r.value, r.value), [r.value], {}, name) for r in readings]
    bounds = [r.fact_id for r in readings if r.at_least]
    note = f"every tested term kept, so at least: {', '.join(bounds)}" if bounds else ""
    return Measured(name, ProbeOutcome("ok", note), facts)


def targeted(variants: tuple[Variant, ...], device: Device) -> list[Variant]:
    """The variants whose chain probes target ``device``'s arch (every one where its arch is not known)."""
    try:
        arch = parse_arch(device.arch)
    except GpuprobeError:
        return list(variants)
    return [v for v in variants if find_probe(v.probe(1)).supports(arch)]


def plan(settings: Settings, device: Device) -> Plan:
    """What measuring every probe costs at most on ``device``: the chains of every variant native on its
    arch (:func:`~gpuprobe.families.issue_sweep.sweep_plan`); an emulated type's launch and each numerics
    experiment (an upload and a launch) cost at most a latency launch each; the sparse variants' sweeps at their
    two ILPs."""
    s = settings
    sweeps = sweep_plan(s, device, len(targeted(VARIANTS, device)), len(ILPS), RESULT_WORDS)
    sweeps += sweep_plan(s, device, len(targeted(SPARSE_VARIANTS, device)), len(SPARSE_ILPS), RESULT_WORDS)
    experiments = sum(experiment_count(v) for v in NUMERICS_PROBES.values())
    single = launches_plan(len(EMULATED_PROBES) + experiments, s.latency_target_cycles, LANES, RESULT_WORDS, device)
    return sweeps + single + Plan(len(EMULATED_PROBES) + len(NUMERICS_PROBES), experiments, 0.0)


# First contact: the f16 m16n8k8 chain (every arch has it) against its twin, timed once and short over the
# full run's warps per SM (its facts mean what the full run's do), and the f16 numerics' two untimed mma
# (sm_80 and later): the kernels' launches and their bit-exact checks against NumPy.
SMOKE = Smoke(probes=("mma.f16.m16n8k8.ilp1", "mma.numerics.f16"), settings=SMOKE_SETTINGS)


def measure(request: Request) -> Probes:
    """The family's runnable probes in order, each as (name, step); see the module docstring."""
    request = dataclasses.replace(request, settings=request.settings or Settings())
    launches = functools.cache(functools.partial(variant_launch, request))  # a variant's fragments uploaded once
    chains = [(v, ilp) for v in VARIANTS for ilp in ILPS] + [(v, ilp) for v in SPARSE_VARIANTS for ilp in SPARSE_ILPS]
    steps = {v.probe(ilp): lambda v=v, ilp=ilp: measure_chain(request, launches(v), v, ilp) for v, ilp in chains}
    steps |= {name: lambda name=name, v=v: measure_emulated(request, launches(v), name, v)
              for name, v in EMULATED_PROBES.items()}  # fmt: skip
    steps |= {name: lambda name=name, v=v: measure_numerics(request, name, v) for name, v in NUMERICS_PROBES.items()}
    return probe_steps(PROBES, steps, request.runnable)


FAMILY = Family(
    name="mma",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
    sections=SECTIONS,
    invariants=INVARIANTS,
)
