"""The coop family: what cooperative groups and libcu++ cost, beside the instructions they wrap.

Every probe is CUDA C++ (ptx/coop/*.cu, compiled by NVRTC into the one cubin per arch, its SASS held
to a contract that pins what each abstraction compiles to on each arch) and is measured side by side
with its hand-written PTX twin, the kernel of another family's probe doing what the abstraction wraps
(:mod:`gpuprobe.families.coop.pairs`): a sample of the C++ kernel, then one of the twin, until the
ratio of the two is known. Each C++ kernel has its twin's interface and check, so one sampler runs
both (:mod:`gpuprobe.families.coop.samplers`), and both results are held to the host's prediction.

Facts per pair: ``coop.<what>.latency`` (the C++ cost, cycles), ``coop.<what>.ptx_latency`` (the twin
measured beside it) and ``coop.<what>.ratio`` (C++ over twin: the median of the sample-by-sample ratios,
derived, the two costs keeping the samples). A probe whose arch has no twin (cp.async before sm_80)
gives its C++ cost alone; one whose twin's contract does not hold here does too, and says why. Each
probe's outcome records what both kernels compiled to, per step, read from the cubin that ran
(:mod:`gpuprobe.families.coop.lowering`): its note says it in words, its series ``sass_cpp`` and
``sass_ptx`` count each opcode, and the fact sheet's figure shows them beside the costs.

Cycles only, but for the grid barrier (whose long launches read the SM clock, as grid_sync does).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuprobe.build.registry import find_probe
from gpuprobe.build.sass import Listing
from gpuprobe.core.arch import Arch, parse_arch
from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.families.base import Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.chase import latencies_plan
from gpuprobe.families.coop import chains, lowering, samplers
from gpuprobe.families.coop.pairs import Twin, twin_of, twin_refusal
from gpuprobe.families.coop.plot import PAIRS_PLOT
from gpuprobe.families.differencing import SMOKE_SAMPLING, UNROLL, DifferencedSettings, samples_plan
from gpuprobe.families.grid_sync import Settings as GridSettings
from gpuprobe.families.grid_sync import barrier_difference, plan_grids
from gpuprobe.families.measuring import Kernels, fact, sample_until_stable
from gpuprobe.families.planning import cycles_s, probe
from gpuprobe.families.stepping import runs
from gpuprobe.families.warp import TILES, plan_chain
from gpuprobe.judge.analysis import median_ci
from gpuprobe.judge.invariants import Check
from gpuprobe.judge.ordering import not_below
from gpuprobe.output.sections import Section

BLOCK_SIZES = (32, 256, 1024)  # a warp, the barrier family's middle size, the largest block
CLUSTER_SIZES = (2, 4, 8)  # as the cluster family's
COPY_STEPS = 4  # chase steps per timed iteration of the C++ copy kernels (ptx/coop/async.cu's GP_COPY_STEPS)
TWIN_COPY_STEPS = 16  # ... of the hand-written cp.async chase
BARRIER_COPY_BYTES = 256  # what gp_coop_barrier_memcpy_chase copies per step (ptx/coop/async.cu)

PROBES = [
    "coop.tile.shfl",
    "coop.tile.shfl_down",
    *(f"coop.reduce.add.{tile}" for tile in TILES),
    "coop.reduce.min",
    "coop.reduce.and",
    "coop.reduce.fadd",
    "coop.scan.add",
    "coop.tile.sync",
    "coop.coalesced.shfl",
    "coop.labeled.reduce",
    "coop.binary.reduce",
    *(f"coop.block.sync.{threads}" for threads in BLOCK_SIZES),
    "coop.grid.sync",
    *(f"coop.cluster.sync.{size}" for size in CLUSTER_SIZES),
    "coop.cluster.dsmem",
    "coop.memcpy_async.cg",
    "coop.memcpy_async.barrier",
    "coop.pipeline",
    "coop.atomic_ref.device",
    "coop.atomic_ref.block",
    "coop.atomic_ref.shared",
]

SECTIONS = (
    Section(
        "C++ abstractions vs the instructions they wrap",
        ("coop.",),
        ("coop.",),
        plot=PAIRS_PLOT,
        blurb="Cooperative groups and libcu++ (CUDA C++ compiled by NVRTC into the same cubin), each measured beside "
        "the hand-written PTX that does what it wraps: `.latency` is the C++ cost, `.ptx_latency` the twin's, "
        "`.ratio` C++ over PTX sample by sample. The figure gives both per pair with what each compiled to, per "
        "step, on this GPU's arch; where the C++ holds the twin's instructions and more, the cross-generation "
        "invariants hold it above the twin.",
    ),
)


@dataclass(frozen=True)
class Settings(DifferencedSettings):
    clusters: int = 16  # clusters per launch of the cluster barriers
    grid_block: int = 256  # threads per block of the grid barriers
    grid_short_syncs: int = 1
    grid_long_syncs: int = 201
    grid_checks: int = 2  # check rounds before every timed phase
    chase_nodes: int = 64  # the copy chases' cycle (warmed: every copy an L2 hit, as the cp.async twin's)
    chase_stride: int = 128
    copy_iterations: tuple[int, int] = (16, 80)  # short and long, 4 steps each (the cp.async twin: a quarter, 16 each)
    bulk_iterations: tuple[int, int] = (32, 320)  # the bulk twin's, one step each
    dsm_nodes: int = 256
    dsm_stride: int = 32
    dsm_threads: int = 128
    first_increment: int = 1  # the atomic chains' first increment
    seed: int = 20250611

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("copy_iterations", "bulk_iterations"):
            short, long = getattr(self, name)
            if not 1 <= short < long:
                raise ValueError(f"Settings.{name}: need 1 <= short < long, got {short}, {long}")
        if self.clusters < 1 or self.grid_block % 32 or self.grid_checks < 1 or self.chase_nodes < 2:
            raise ValueError("Settings: clusters and grid_checks at least 1, grid_block whole warps, two nodes")
        if self.chase_stride < 16 or self.chase_stride % 16 or self.dsm_stride < 8 or self.dsm_stride % 8:
            raise ValueError("Settings: a chase node holds an aligned 16-byte copy, a DSM node an 8-byte address")

    def grid(self) -> GridSettings:
        """The grid barriers' settings, in grid_sync's terms (its kernel runs as the twin)."""
        return GridSettings(block=self.grid_block, short_syncs=self.grid_short_syncs, long_syncs=self.grid_long_syncs,
                            checks=self.grid_checks, min_repeats=self.min_repeats, max_repeats=self.max_repeats,
                            target_noise=self.target_noise, point_budget_s=self.probe_budget_s)  # fmt: skip


@dataclass
class _Context:
    kernels: Kernels
    device: Device
    arch: Arch
    settings: Settings
    listing: Listing | None  # the loaded cubin's, for what each kernel compiled to
    rng: np.random.Generator

    def twin(self, name: str) -> tuple[Twin | None, str]:
        """The probe's twin if it can be measured here, else None and why not."""
        twin = twin_of(name, self.arch)
        if twin is None:
            return None, f"{self.arch} has nothing hand-written to stand beside it"
        refusal = twin_refusal(twin, self.listing, self.arch)
        return (None, refusal) if refusal else (twin, "")


@dataclass
class Side:
    """One kernel of a pair: its sampler, and its timed region's steps per iteration (for its SASS summary)."""

    kernel: str
    sample: samplers.Sample
    steps: float


def ratio_fact(fact_id: str, ratios: list[float], name: str) -> Fact:
    """C++ over twin: the median of the sample-by-sample ratios and its CI. Derived from the two cost
    facts' paired samples, which the results keep, so it carries none of its own: a comparison of two
    runs judges the costs, not their ratio again with the noise of both."""
    value, low, high = median_ci(ratios)
    return Fact(fact_id, value, "ratio", (low, high), [], {}, name)


def _sass(ctx: _Context, side: Side) -> dict[str, float]:
    if ctx.listing is None or side.kernel not in ctx.listing.kernels:
        return {}
    return lowering.per_step(ctx.listing.kernel(side.kernel), side.steps)


def measure_pair(ctx: _Context, name: str, cpp: Side, ptx: Side | None, why: str,
                 facts: tuple[str, ...], mhz: Callable[[], float | None] = lambda: None) -> Measured:  # fmt: skip
    """A sample of the C++ side, then one of its twin, until their ratio is known: three facts (the C++
    cost, the twin's, the ratio), or the C++ cost alone without a twin; the note and series say what
    each kernel compiled to."""
    cost, twin_cost, ratio = [], [], []

    def take() -> None:
        cost.append(cpp.sample())
        if ptx is not None:
            twin_cost.append(ptx.sample())
            ratio.append(cost[-1] / twin_cost[-1])

    sample_until_stable(take, ratio if ptx else cost, ctx.settings.stopping())
    clock = mhz()
    found = [fact(facts[0], cost, "cycle", name, clock)]
    if ptx is not None:
        found += [fact(facts[1], twin_cost, "cycle", name, clock), ratio_fact(facts[2], ratio, name)]
    sass_cpp = _sass(ctx, cpp)
    note = f"{ctx.arch} SASS per step: C++ {cpp.kernel}: {lowering.summary(sass_cpp)}"
    series = {"sass_cpp": {op: [n] for op, n in sass_cpp.items()}}
    if ptx is not None:
        sass_ptx = _sass(ctx, ptx)
        note += f"; PTX {ptx.kernel}: {lowering.summary(sass_ptx)}"
        series["sass_ptx"] = {op: [n] for op, n in sass_ptx.items()}
    else:
        note += f"; no twin measured: {why}"
    return Measured(name, ProbeOutcome("ok", note, series), found)


def _declared(name: str) -> tuple[str, ...]:
    return find_probe(name).facts


# ---- warp tiles and groups ---------------------------------------------------------------------


def _reduce_add(tile: int, rng: np.random.Generator) -> chains.LaneChain:
    return chains.reduce_chain(f"gp_coop_reduce_add_{tile}_lat", tile, "add", rng)


_CPP_CHAINS: dict[str, Callable[[np.random.Generator], chains.LaneChain]] = {
    "coop.tile.shfl": lambda rng: chains.like_twin("gp_coop_tile_shfl_lat", "warp.shfl.idx", rng),
    "coop.tile.shfl_down": lambda rng: chains.like_twin("gp_coop_tile_shfl_down_lat", "warp.shfl.down", rng),
    **{f"coop.reduce.add.{t}": functools.partial(_reduce_add, t) for t in TILES},
    "coop.reduce.min": lambda rng: chains.reduce_chain("gp_coop_reduce_min_32_lat", 32, "min", rng),
    "coop.reduce.and": lambda rng: chains.reduce_chain("gp_coop_reduce_and_32_lat", 32, "and", rng),
    "coop.reduce.fadd": lambda rng: chains.fadd_chain("gp_coop_reduce_fadd_32_lat", rng),
    "coop.scan.add": lambda rng: chains.scan_chain("gp_coop_scan_add_32_lat", rng),
    "coop.tile.sync": lambda rng: chains.like_twin("gp_coop_tile_sync_lat", "warp.syncwarp", rng),
    "coop.coalesced.shfl": lambda rng: chains.coalesced_chain("gp_coop_coalesced_shfl_lat", rng),
    "coop.labeled.reduce": lambda rng: chains.group_chain("gp_coop_labeled_reduce_lat", chains.labeled_step, rng),
    "coop.binary.reduce": lambda rng: chains.group_chain("gp_coop_binary_reduce_lat", chains.binary_step, rng),
}


def measure_chain_pair(ctx: _Context, name: str) -> Measured:
    """A chain of 32 steps per iteration (8 for formed groups and sub-warp tiles, whose steps are long)
    beside its twin of 32: each side's iteration counts scaled to the same number of steps."""
    s = ctx.settings
    chain = _CPP_CHAINS[name](ctx.rng)
    scale = UNROLL // chain.unroll
    cpp_sample = samplers.lane_chain(ctx.kernels, chain, s.short_iterations * scale, s.long_iterations * scale)
    cpp = Side(chain.kernel, cpp_sample, chain.unroll)
    twin, why = ctx.twin(name)
    ptx = None
    if twin is not None:
        plan = plan_chain(twin.probe, ctx.rng)
        twin_sample = samplers.lane_chain(ctx.kernels, plan, s.short_iterations, s.long_iterations)
        ptx = Side(plan.kernel, twin_sample, UNROLL * plan.per_fact)
    return measure_pair(ctx, name, cpp, ptx, why, _declared(name))


# ---- block, grid, cluster --------------------------------------------------------------------------


def measure_block_pair(ctx: _Context, name: str) -> Measured:
    threads, lengths, kernel = int(name.rsplit(".", 1)[1]), ctx.settings.lengths, "gp_coop_block_sync"
    cpp = Side(kernel, samplers.block_barrier(ctx.kernels, kernel, threads, lengths), UNROLL)
    twin, why = ctx.twin(name)
    ptx = None
    if twin is not None:
        ptx = Side(twin.kernel, samplers.block_barrier(ctx.kernels, twin.kernel, threads, lengths), UNROLL)
    measured = measure_pair(ctx, name, cpp, ptx, why, _declared(name))
    measured.outcome.detail = f"{threads} threads; {measured.outcome.detail}"
    return measured


def measure_cluster_pair(ctx: _Context, name: str) -> Measured:
    size, s = int(name.rsplit(".", 1)[1]), ctx.settings
    kernel = f"gp_coop_cluster_sync_{size}"
    cpp = Side(kernel, samplers.cluster_barrier(ctx.kernels, kernel, size, s.clusters, s.lengths), UNROLL)
    twin, why = ctx.twin(name)
    ptx = None
    if twin is not None:
        ptx = Side(twin.kernel, samplers.cluster_barrier(ctx.kernels, twin.kernel, size, s.clusters, s.lengths), UNROLL)
    return measure_pair(ctx, name, cpp, ptx, why, _declared(name))


def measure_grid_pair(ctx: _Context, name: str) -> Measured:
    """One grid barrier at one block per SM and at the most blocks both kernels can keep co-resident."""
    s, sms = ctx.settings, ctx.device.sm_count
    grid_settings = s.grid()
    per_sm = ctx.kernels.launcher.max_active_blocks("gp_coop_grid_sync", s.grid_block, 0)
    twin, why = ctx.twin(name)
    opened = samplers.twin_grid(ctx.kernels, ctx.device, grid_settings) if twin is not None else None
    if opened is not None:
        per_sm = min(per_sm, opened.per_sm)
    full = plan_grids(sms, per_sm)[-1]
    cg = samplers.CgGrid.open(ctx.kernels, s.grid_block, s.grid_checks, full)
    clocks: list[float] = []
    facts = _declared(name)
    found: list[Fact] = []
    for blocks, ids in ((sms, facts[:3]), (full, facts[3:])):  # (cost, twin, ratio) at each size
        cpp = Side(cg.kernel, barrier_difference(cg.timed, blocks, grid_settings, clocks, cg.kernel).sample, 1)
        ptx = None
        if opened is not None and twin is not None:
            ptx = Side(
                twin.kernel, barrier_difference(opened.timed, blocks, grid_settings, clocks, twin.kernel).sample, 1
            )
        pair = measure_pair(ctx, name, cpp, ptx, why, ids, lambda: float(np.median(clocks)) if clocks else None)
        found += pair.facts
    note = f"{sms} and {full} blocks of {s.grid_block} threads ({per_sm} per SM co-resident); {pair.outcome.detail}"
    return Measured(name, ProbeOutcome("ok", note, pair.outcome.series), found)


# ---- chases: distributed shared memory, asynchronous copies -----------------------------------------


def measure_dsm_pair(ctx: _Context, name: str) -> Measured:
    """The chase of the peer block's shared memory, then of the own block's, each beside the twin's."""
    s = ctx.settings
    shape = samplers.DsmShape(s.dsm_nodes, s.dsm_stride, s.dsm_threads)
    twin, why = ctx.twin(name)
    facts = _declared(name)
    found: list[Fact] = []
    for index, target in enumerate((1, 0)):  # the peer block's memory, then the own block's
        chases = [samplers.dsm_chase(ctx.kernels, "gp_coop_dsm_chase", target, shape, s.seed + target)]
        if twin is not None:
            chases.append(samplers.dsm_chase(ctx.kernels, twin.kernel, target, shape, s.seed + target))
        sides = [
            Side(c.kernel, samplers.chase_sample(c, s.short_iterations, s.long_iterations), UNROLL) for c in chases
        ]
        pair = measure_pair(ctx, name, sides[0], sides[1] if twin else None, why, facts[3 * index : 3 * index + 3])
        found += pair.facts
    return Measured(name, ProbeOutcome("ok", f"peer, then own block; {pair.outcome.detail}", pair.outcome.series),
                    found)  # fmt: skip


_COPY_KERNELS = {
    "coop.memcpy_async.cg": "gp_coop_cg_memcpy_chase",
    "coop.memcpy_async.barrier": "gp_coop_barrier_memcpy_chase",
    "coop.pipeline": "gp_coop_pipeline_chase",
}


def measure_copy_pair(ctx: _Context, name: str) -> Measured:
    """A chase whose every step is one copy round trip, beside the cp.async or bulk-copy chase."""
    s = ctx.settings
    stride = BARRIER_COPY_BYTES if name == "coop.memcpy_async.barrier" else s.chase_stride
    kernel = _COPY_KERNELS[name]
    chase = samplers.global_chase(ctx.kernels, kernel, s.chase_nodes, stride, COPY_STEPS, s.seed, [], 0)
    cpp = Side(kernel, samplers.chase_sample(chase, *s.copy_iterations), COPY_STEPS)
    twin, why = ctx.twin(name)
    ptx = None
    if twin is not None and twin.kernel == "gp_ac_bulk_chase":  # one bulk copy of the whole node per step
        extra = [np.uint32(stride)]
        bulk = samplers.global_chase(ctx.kernels, twin.kernel, s.chase_nodes, stride, 1, s.seed + 1, extra, stride)
        ptx = Side(twin.kernel, samplers.chase_sample(bulk, *s.bulk_iterations), 1)
    elif twin is not None:
        copy = samplers.global_chase(ctx.kernels, twin.kernel, s.chase_nodes, s.chase_stride, TWIN_COPY_STEPS,
                                     s.seed + 1, [], 0)  # fmt: skip
        # the twin's iterations hold 16 steps: as many steps as the C++ chase's (at least one iteration more long)
        short, long = (n * COPY_STEPS // TWIN_COPY_STEPS or 1 for n in s.copy_iterations)
        ptx = Side(twin.kernel, samplers.chase_sample(copy, short, max(long, short + 1)), TWIN_COPY_STEPS)
    return measure_pair(ctx, name, cpp, ptx, why, _declared(name))


# ---- atomics ------------------------------------------------------------------------------------


def measure_atomic_pair(ctx: _Context, name: str) -> Measured:
    s, scope = ctx.settings, name.rsplit(".", 1)[1]
    shared = scope == "shared"
    kernel = f"gp_coop_atomic_ref_{scope}_lat"
    cpp = Side(kernel, samplers.atomic_chain(ctx.kernels, kernel, shared, s.first_increment, s.lengths), UNROLL)
    twin, why = ctx.twin(name)
    ptx = None
    if twin is not None:
        ptx = Side(twin.kernel, samplers.atomic_chain(ctx.kernels, twin.kernel, shared, s.first_increment, s.lengths),
                   UNROLL)  # fmt: skip
    return measure_pair(ctx, name, cpp, ptx, why, _declared(name))


def _step(name: str) -> Callable[[_Context, str], Measured]:
    if name in _CPP_CHAINS:
        return measure_chain_pair
    if name.startswith("coop.block.sync."):
        return measure_block_pair
    if name.startswith("coop.cluster.sync."):
        return measure_cluster_pair
    if name == "coop.grid.sync":
        return measure_grid_pair
    if name == "coop.cluster.dsmem":
        return measure_dsm_pair
    if name in _COPY_KERNELS:
        return measure_copy_pair
    return measure_atomic_pair


def kernels_read(arch: Arch) -> set[str]:
    """The kernels whose SASS the family reads on ``arch``: its own and their twins'."""
    twins = (twin_of(name, arch) for name in PROBES)
    return {find_probe(name).kernel for name in PROBES} | {twin.kernel for twin in twins if twin is not None}


def measure(request: Request) -> Probes:
    """The family's runnable probes in order, each as (name, run); ``state`` is not used. What each
    kernel compiled to is read from ``request.cubin``, the cubin the launcher loaded."""
    settings = request.settings or Settings()
    arch = parse_arch(request.device.arch)
    listing = lowering.listing_of(request.cubin, kernels_read(arch))
    ctx = _Context(Kernels(request.launcher, request.parameters), request.device, arch, settings, listing,
                   np.random.default_rng(settings.seed))  # fmt: skip
    steps = {name: (lambda name=name: _step(name)(ctx, name)) for name in PROBES}
    return runs(PROBES, steps, request.runnable)


# ---- the time plan ---------------------------------------------------------------------------------

CHAIN_STEP_CYCLES = 2000.0  # one step of a chain at most (a formed group's __fns and convergence tests)
BARRIER_STEP_CYCLES = 800.0  # one block or cluster barrier at most, the check included
ATOMIC_STEP_CYCLES = 1500.0  # one returning add to global memory at most
COPY_STEP_CYCLES = 3000.0  # one copy round trip through L2 at most
GRID_BARRIER_S = 5e-6  # one grid barrier at most (as grid_sync plans it)
GRID_TIMED_CALLS = 6  # one grid launch: two fills, the checked run (fill, launch, read), the error read
LISTING_S = 0.5  # the loaded cubin's listing read once, its kernels' and twins' code parsed (0.2 s on 2 cores)


def plan(settings: Settings, device: Device) -> Plan:
    """Every pair at its most repeats, both sides: each chain and barrier a long and a short launch per
    sample, the chases also their cycles built, the grid barrier at two sizes; and the listing read once."""
    s = settings
    side = samples_plan(s, device, CHAIN_STEP_CYCLES)
    chains_plan = [probe(side, side) for _ in _CPP_CHAINS]
    barrier_side = samples_plan(s, device, BARRIER_STEP_CYCLES)
    barriers = [probe(barrier_side, barrier_side) for _ in (*BLOCK_SIZES, *CLUSTER_SIZES)]
    atomic_side = samples_plan(s, device, ATOMIC_STEP_CYCLES)
    atomics = [probe(atomic_side, atomic_side) for _ in range(3)]
    step_s = cycles_s(COPY_STEP_CYCLES, device)
    copy_side = latencies_plan(s.chase_nodes, COPY_STEPS, *s.copy_iterations, s.max_repeats, step_s)
    bulk_side = latencies_plan(s.chase_nodes, 1, *s.bulk_iterations, s.max_repeats, step_s)
    dsm_side = latencies_plan(s.dsm_nodes, UNROLL, s.short_iterations, s.long_iterations, s.max_repeats, step_s)
    chases = [probe(copy_side, copy_side), probe(copy_side, bulk_side), probe(copy_side, copy_side),
              probe(dsm_side, dsm_side, dsm_side, dsm_side)]  # fmt: skip
    barriers_per_launch = s.grid_checks + s.grid_long_syncs
    grid_runs = 2 * 2 * 2 * s.max_repeats  # sizes x sides x launches x samples
    grid = probe(Plan(0, grid_runs * GRID_TIMED_CALLS, grid_runs * barriers_per_launch * GRID_BARRIER_S))
    return sum([*chains_plan, *barriers, *atomics, *chases], grid + Plan(0, 0, 0.0, LISTING_S))


OPTIONAL_FACTS = {  # the twin and the ratio of a copy measured alone where the arch has no cp.async (sm_75)
    f"{name}.{kind}": "the arch has no cp.async: nothing hand-written stands beside it"
    for name in ("coop.memcpy_async.cg", "coop.memcpy_async.barrier", "coop.pipeline")
    for kind in ("ptx_latency", "ratio")
}

# A first contact: a tile shuffle and a tile reduction, each beside its twin, one sample: NVRTC's code
# launched, checked and paired.
SMOKE = Smoke(probes=("coop.tile.shfl", "coop.reduce.add.32"), settings=Settings(**SMOKE_SAMPLING))


# ---- invariants ------------------------------------------------------------------------------------


def _measured(facts: dict[str, Fact], fact_id: str) -> Fact | None:
    found = facts.get(fact_id)
    return found if found is not None and found.value is not None else None


# How far below its twin a C++ cost may come out before that is more than noise. The two sides often
# compile to the same instructions (a ratio of 1 within noise), and with few samples a median CI is
# their range: sample by sample, dependent-chain cycle counts repeat to within about 1 % on a GPU
# (the simulated one draws 1 % per sample), so 5 % below the twin is beyond noise, while an
# abstraction that really undercut the instruction it wraps (a twin mis-measured, a lowering
# misread) is caught.
FLOOR_SLACK = 0.05


def _scaled(twin: Fact, scale: float) -> Fact:
    """The twin's fact times ``scale`` (its CI too), named for what it bounds."""
    ci = (twin.ci[0] * scale, twin.ci[1] * scale) if twin.ci else None
    return dataclasses.replace(twin, id=f"{scale:g} x {twin.id}", value=twin.value * scale, ci=ci)


def abstraction_not_below_instruction(facts: dict[str, Fact], device: Device) -> list[Check]:
    """Where a C++ abstraction compiles to its twin's instructions and more (its contract pins that on
    this arch), it costs no less than the twin measured beside it (times the twin's ``scale``), within
    their confidence intervals and :data:`FLOOR_SLACK`: one check per pair measured (both facts of each
    grid size, of each DSM target)."""
    try:
        arch = parse_arch(device.arch)
    except Exception:  # a device of an arch gpuprobe does not build for measured nothing of this family
        return []
    checks = []
    for name in PROBES:
        twin = twin_of(name, arch)
        if twin is None or not twin.floor:
            continue
        declared = find_probe(name).facts  # (cost, twin, ratio) per grid size or DSM target
        for cost_id, twin_id in zip(declared[0::3], declared[1::3], strict=True):
            cost, measured_twin = _measured(facts, cost_id), _measured(facts, twin_id)
            if cost is not None and measured_twin is not None:
                bound = _scaled(measured_twin, twin.scale * (1 - FLOOR_SLACK))
                checks.append(not_below(f"coop_not_below_ptx.{cost_id.removeprefix('coop.')}", bound, cost))
    return checks


INVARIANTS = (abstraction_not_below_instruction,)
