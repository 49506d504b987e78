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

CUB (ptx/coop/cub.cu, CCCL's cub/ headers): WarpReduce and WarpScan stand beside the warp family's PTX
chains as the cooperative-groups tiles do; BlockReduce and BlockScan beside small hand-written kernels of
their own file (warp collectives, one shared-memory exchange, bar.sync), which each probe declares as its
twin; BlockRadixSort is measured alone (``no twin measured``). CUB's warp collectives also have a
cooperative-groups kernel of the same operation (cg::reduce, cg::inclusive_scan), measured as that probe's:
``coop.cub.<what>.cg_ratio`` is CUB over cg, derived from the two cost facts of the run (the ratio of their
medians, its CI the ratio of the CIs' far ends: :func:`cg_ratio`), no sample of its own.

Cycles only, but for the grid barrier (whose long launches read the SM clock, as grid_sync does).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from gpuprobe.core.arch import SUPPORTED_ARCHS, Arch, parse_arch
from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.chase import latencies_plan
from gpuprobe.families.coop import chains, lowering, samplers
from gpuprobe.families.coop.pairs import CG_TWINS, NO_TWIN, Twin, twin_of, twin_refusal
from gpuprobe.families.coop.plot import PAIRS_PLOT
from gpuprobe.families.differencing import SMOKE_SAMPLING, DifferencedSettings, samples_plan
from gpuprobe.families.grid_sync import Settings as GridSettings
from gpuprobe.families.grid_sync import barrier_difference, grid_sizes
from gpuprobe.families.measuring import fact, unmeasured
from gpuprobe.families.planning import cycles_s, probe
from gpuprobe.families.sampling import sample_until_stable
from gpuprobe.families.stepping import probe_steps
from gpuprobe.families.warp import TILES, chain_for
from gpuprobe.judge.analysis import median_ci
from gpuprobe.judge.invariants import Check
from gpuprobe.judge.ordering import not_below
from gpuprobe.kernels.registry import find_probe, unroll_of
from gpuprobe.kernels.sass import Listing
from gpuprobe.output.sections import Section

BLOCK_SIZES = (32, 256, 1024)  # a warp, the barrier family's middle size, the largest block
ATOMIC_SCOPES = ("device", "block", "shared")  # cuda::atomic_ref on a global word at two scopes, on a shared one
CLUSTER_SIZES = (2, 4, 8)  # as the cluster family's
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
    *(f"coop.atomic_ref.{scope}" for scope in ATOMIC_SCOPES),
    "coop.cub.warp_reduce",  # after the cg probes its cg_ratio is derived from
    "coop.cub.warp_scan",
    "coop.cub.block_reduce",
    "coop.cub.block_scan",
    "coop.cub.radix_sort",
]

SECTIONS = (
    Section(
        "C++ abstractions vs the instructions they wrap",
        ("coop.",),
        ("coop.",),
        plot=PAIRS_PLOT,
        blurb="Cooperative groups, libcu++ and CUB (CUDA C++ compiled by NVRTC into the same cubin), each measured "
        "beside the hand-written PTX that does what it wraps: `.latency` is the C++ cost, `.ptx_latency` the twin's, "
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
    copy_iterations: tuple[int, int] = (16, 80)  # short and long (the cp.async twin, 4 times the steps each: a quarter)
    bulk_iterations: tuple[int, int] = (32, 320)  # the bulk twin's, one step each
    dsm_nodes: int = 256
    dsm_stride: int = 32
    dsm_threads: int = 128
    first_increment: int = 1  # the atomic chains' first increment
    seed: int = 20250611

    def __post_init__(self) -> None:
        super().__post_init__()
        chases = {"copy_iterations": self.copy_iterations, "bulk_iterations": self.bulk_iterations}
        for name, (short, long) in chases.items():
            if not 1 <= short < long:
                raise ValueError(f"Settings.{name}: need 1 <= short < long, got {short}, {long}")
        if self.clusters < 1 or self.grid_block % 32 or self.grid_checks < 1 or self.chase_nodes < 2:
            raise ValueError("Settings: clusters and grid_checks at least 1, grid_block whole warps, two nodes")
        if self.chase_stride < 16 or self.chase_stride % 16 or self.dsm_stride < 8 or self.dsm_stride % 8:
            raise ValueError("Settings: a chase node holds an aligned 16-byte copy, a DSM node an 8-byte address")

    def grid(self) -> GridSettings:
        """The grid barriers' settings, in grid_sync's terms (its kernel runs as the twin)."""
        return GridSettings(block=self.grid_block, short_syncs=self.grid_short_syncs, long_syncs=self.grid_long_syncs,
                            checks=self.grid_checks, sampling=self.sampling)  # fmt: skip


@dataclass
class Side:
    """One kernel of a pair: its sampler, and its timed region's steps per iteration (for its SASS summary)."""

    kernel: str
    sample: samplers.Sample
    steps: float


@dataclass
class Pairing:
    """What measuring the pairs shares beyond the request: the arch, the loaded cubin's SASS (what each
    kernel compiled to, and whether a twin's contract holds in it), and the seeded draws of the chains."""

    arch: Arch
    listing: Listing | None
    rng: np.random.Generator
    measured: dict[str, Fact] = field(default_factory=dict)  # the facts of the probes measured so far

    def twin(self, name: str) -> tuple[Twin | None, str]:
        """The probe's twin if it can be measured here, else None and why not."""
        twin = twin_of(name, self.arch)
        if twin is None:
            return None, NO_TWIN.get(name, f"{self.arch} has nothing hand-written to stand beside it")
        refusal = twin_refusal(twin, self.listing, self.arch)
        return (None, refusal) if refusal else (twin, "")

    def sass(self, side: Side) -> dict[str, float]:
        """What ``side``'s kernel compiled to, per step (nothing where the listing is unknown)."""
        if self.listing is None or side.kernel not in self.listing.kernels:
            return {}
        return lowering.per_step(self.listing.kernel(side.kernel), side.steps)


def ratio_fact(fact_id: str, ratios: list[float], name: str) -> Fact:
    """C++ over twin: the median of the sample-by-sample ratios and its CI. Derived from the two cost
    facts' paired samples, which the results keep, so it carries none of its own: a comparison of two
    runs judges the costs, not their ratio again with the noise of both."""
    value, low, high = median_ci(ratios)
    return Fact(fact_id, value, "ratio", (low, high), [], {}, name)


def measure_pair(settings: Settings, pairing: Pairing, name: str, cpp: Side, ptx: Side | None, why: str,
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

    sample_until_stable(take, ratio if ptx else cost, settings.sampling)
    clock = mhz()
    found = [fact(facts[0], cost, "cycle", name, clock)]
    if ptx is not None:
        found += [fact(facts[1], twin_cost, "cycle", name, clock), ratio_fact(facts[2], ratio, name)]
    sass_cpp = pairing.sass(cpp)
    note = f"{pairing.arch} SASS per step: C++ {cpp.kernel}: {lowering.summary(sass_cpp)}"
    series = {"sass_cpp": {op: [n] for op, n in sass_cpp.items()}}
    if ptx is not None:
        sass_ptx = pairing.sass(ptx)
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
    "coop.cub.warp_reduce": lambda rng: chains.first_reduce_chain("gp_coop_cub_warp_reduce_lat", rng),
    "coop.cub.warp_scan": lambda rng: chains.scan_chain("gp_coop_cub_warp_scan_lat", rng),
}


def chain_steps(name: str) -> int:
    """Steps per iteration both sides of chain pair ``name`` run: its twin's declared unroll (the most over the
    archs); a C++ kernel of fewer steps per iteration runs as many times more iterations."""
    return max(unroll_of(twin.kernel) for arch in SUPPORTED_ARCHS if (twin := twin_of(name, arch)))


def measure_chain_pair(request: Request, settings: Settings, pairing: Pairing, name: str) -> Measured:
    """A chain of the C++ kernel's steps per iteration beside its twin of more (32 against 8 for formed groups
    and sub-warp tiles, whose steps are long): the C++ side's iteration counts scaled to the twin's steps."""
    s = settings
    chain = _CPP_CHAINS[name](pairing.rng)
    scale = chain_steps(name) // chain.unroll
    cpp_sample = samplers.lane_chain(request, chain, s.short_iterations * scale, s.long_iterations * scale)
    cpp = Side(chain.kernel, cpp_sample, chain.unroll)
    twin, why = pairing.twin(name)
    ptx = None
    if twin is not None:
        replayed = chain_for(twin.probe, pairing.rng)
        twin_sample = samplers.lane_chain(request, replayed, s.short_iterations, s.long_iterations)
        ptx = Side(replayed.kernel, twin_sample, replayed.unroll * replayed.per_fact)
    return measure_pair(s, pairing, name, cpp, ptx, why, _declared(name))


# ---- block, grid, cluster --------------------------------------------------------------------------


def measure_alike(settings: Settings, pairing: Pairing, name: str, kernel: str,
                  sample: Callable[[str], samplers.Sample]) -> Measured:  # fmt: skip
    """A pair whose C++ kernel has its twin's interface and check, so one sampler serves both sides:
    ``sample(kernel)``, each side's steps per iteration as its kernel declares them."""
    twin, why = pairing.twin(name)
    cpp = Side(kernel, sample(kernel), unroll_of(kernel))
    ptx = Side(twin.kernel, sample(twin.kernel), unroll_of(twin.kernel)) if twin is not None else None
    return measure_pair(settings, pairing, name, cpp, ptx, why, _declared(name))


def measure_block_pair(request: Request, settings: Settings, pairing: Pairing, name: str) -> Measured:
    threads = int(name.rsplit(".", 1)[1])

    def sample(kernel: str) -> samplers.Sample:
        return samplers.block_barrier(request, kernel, threads, settings)

    measured = measure_alike(settings, pairing, name, "gp_coop_block_sync", sample)
    measured.outcome.detail = f"{threads} threads; {measured.outcome.detail}"
    return measured


def measure_cluster_pair(request: Request, settings: Settings, pairing: Pairing, name: str) -> Measured:
    size = int(name.rsplit(".", 1)[1])

    def sample(kernel: str) -> samplers.Sample:
        return samplers.cluster_barrier(request, kernel, size, settings.clusters, settings)

    return measure_alike(settings, pairing, name, f"gp_coop_cluster_sync_{size}", sample)


def measure_grid_pair(request: Request, settings: Settings, pairing: Pairing, name: str) -> Measured:
    """One grid barrier at one block per SM and at the most blocks both kernels can keep co-resident."""
    s, sms = settings, request.device.sm_count
    grid_settings = s.grid()
    per_sm = request.launcher.max_active_blocks("gp_coop_grid_sync", s.grid_block, 0)
    twin, why = pairing.twin(name)
    opened = samplers.twin_grid(request, grid_settings) if twin is not None else None
    if opened is not None:
        per_sm = min(per_sm, opened.per_sm)
    full = grid_sizes(sms, per_sm)[-1]
    cg = samplers.CgGrid.open(request, s.grid_block, s.grid_checks, full)
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
        pair = measure_pair(s, pairing, name, cpp, ptx, why, ids, lambda: float(np.median(clocks)) if clocks else None)
        found += pair.facts
    note = f"{sms} and {full} blocks of {s.grid_block} threads ({per_sm} per SM co-resident); {pair.outcome.detail}"
    return Measured(name, ProbeOutcome("ok", note, pair.outcome.series), found)


# ---- chases: distributed shared memory, asynchronous copies -----------------------------------------


def measure_dsm_pair(request: Request, settings: Settings, pairing: Pairing, name: str) -> Measured:
    """The chase of the peer block's shared memory, then of the own block's, each beside the twin's."""
    s = settings
    shape = samplers.DsmShape(s.dsm_nodes, s.dsm_stride, s.dsm_threads)
    twin, why = pairing.twin(name)
    facts = _declared(name)
    found: list[Fact] = []
    for index, target in enumerate((1, 0)):  # the peer block's memory, then the own block's
        chases = [samplers.dsm_chase(request, "gp_coop_dsm_chase", target, shape, s.seed + target)]
        if twin is not None:
            chases.append(samplers.dsm_chase(request, twin.kernel, target, shape, s.seed + target))
        sides = [
            Side(c.kernel, samplers.chase_sample(c, s.short_iterations, s.long_iterations), c.unroll) for c in chases
        ]
        ids = facts[3 * index : 3 * index + 3]
        pair = measure_pair(s, pairing, name, sides[0], sides[1] if twin else None, why, ids)
        found += pair.facts
    return Measured(name, ProbeOutcome("ok", f"peer, then own block; {pair.outcome.detail}", pair.outcome.series),
                    found)  # fmt: skip


_COPY_KERNELS = {
    "coop.memcpy_async.cg": "gp_coop_cg_memcpy_chase",
    "coop.memcpy_async.barrier": "gp_coop_barrier_memcpy_chase",
    "coop.pipeline": "gp_coop_pipeline_chase",
}


def measure_copy_pair(request: Request, settings: Settings, pairing: Pairing, name: str) -> Measured:
    """A chase whose every step is one copy round trip, beside the cp.async or bulk-copy chase."""
    s = settings
    stride = BARRIER_COPY_BYTES if name == "coop.memcpy_async.barrier" else s.chase_stride
    kernel = _COPY_KERNELS[name]
    chase = samplers.global_chase(request, kernel, s.chase_nodes, stride, s.seed, [], 0)
    cpp = Side(kernel, samplers.chase_sample(chase, *s.copy_iterations), chase.unroll)
    twin, why = pairing.twin(name)
    ptx = None
    if twin is not None and twin.kernel == "gp_ac_bulk_chase":  # one bulk copy of the whole node per step
        extra = [np.uint32(stride)]
        bulk = samplers.global_chase(request, twin.kernel, s.chase_nodes, stride, s.seed + 1, extra, stride)
        ptx = Side(twin.kernel, samplers.chase_sample(bulk, *s.bulk_iterations), bulk.unroll)
    elif twin is not None:
        copy = samplers.global_chase(request, twin.kernel, s.chase_nodes, s.chase_stride, s.seed + 1, [], 0)
        # the twin's iterations hold more steps: as many steps as the C++ chase's (at least one iteration more long)
        short, long = (n * chase.unroll // copy.unroll or 1 for n in s.copy_iterations)
        ptx = Side(twin.kernel, samplers.chase_sample(copy, short, max(long, short + 1)), copy.unroll)
    return measure_pair(s, pairing, name, cpp, ptx, why, _declared(name))


# ---- CUB's block collectives --------------------------------------------------------------------

# Each CUB block probe's step as the host replays it, and the values per thread it starts from.
_CUB_BLOCK: dict[str, tuple[Callable[[np.ndarray], np.ndarray], int]] = {
    "coop.cub.block_reduce": (chains.first_takes_total, 1),
    "coop.cub.block_scan": (chains.inclusive_scan, 1),
    "coop.cub.radix_sort": (chains.sort_and_map, 4),  # cub.cu's GP_CUB_KEYS
}


def measure_cub_block(request: Request, settings: Settings, pairing: Pairing, name: str) -> Measured:
    """One block of 256 threads, a chain of the CUB collective beside its twin (the probe's own hand-written
    kernel) from the same random values, every value of both held to the host's replay; the radix sort alone."""
    step, per_thread = _CUB_BLOCK[name]
    start = pairing.rng.integers(0, 2**32, samplers.BLOCK_THREADS * per_thread, dtype=np.uint64)
    predict = chains.replay(step, start)

    def sample(kernel: str) -> samplers.Sample:
        return samplers.block_chain(request, kernel, start, predict, settings)

    measured = measure_alike(settings, pairing, name, find_probe(name).kernel, sample)
    if name == "coop.cub.radix_sort":  # its steps hold a loop: the SASS per step counts the loop's code once
        detail = measured.outcome.detail
        measured.outcome.detail = f"{start.size} keys; the pass loop's code counted once (it runs per 4 bits); {detail}"
    return measured


def cg_ratio(name: str, facts: dict[str, Fact]) -> Fact:
    """CUB over the cooperative-groups kernel of the same operation (:data:`CG_TWINS`), derived from the two
    cost facts this run measured: the ratio of their medians, its CI the ratio of the CIs' far ends (CUB's
    low over cg's high, CUB's high over cg's low); unmeasured, saying why, where either is missing."""
    fact_id, cg_probe = f"{name}.cg_ratio", CG_TWINS[name]
    cub, cg = _measured(facts, f"{name}.latency"), _measured(facts, find_probe(cg_probe).facts[0])
    if cub is None or cg is None:
        return unmeasured(fact_id, "ratio", name, f"{cg_probe} or {name} was not measured in this run")
    ci = (cub.ci[0] / cg.ci[1], cub.ci[1] / cg.ci[0]) if cub.ci and cg.ci else None
    return Fact(fact_id, cub.value / cg.value, "ratio", ci, [], {}, name)


# ---- atomics ------------------------------------------------------------------------------------


def measure_atomic_pair(request: Request, settings: Settings, pairing: Pairing, name: str) -> Measured:
    scope = name.rsplit(".", 1)[1]

    def sample(kernel: str) -> samplers.Sample:
        return samplers.atomic_chain(request, kernel, scope == "shared", settings.first_increment, settings)

    return measure_alike(settings, pairing, name, f"gp_coop_atomic_ref_{scope}_lat", sample)


def _step(name: str) -> Callable[[Request, Settings, Pairing, str], Measured]:
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
    if name in _CUB_BLOCK:
        return measure_cub_block
    return measure_atomic_pair


def recorded(pairing: Pairing, name: str, step: Callable[[], Measured]) -> Measured:
    """``step``'s measurement, its facts kept for the probes after it (CUB over cg: :func:`cg_ratio`)."""
    measured = step()
    if name in CG_TWINS:
        measured.facts.append(cg_ratio(name, {**pairing.measured, **{f.id: f for f in measured.facts}}))
    pairing.measured.update((f.id, f) for f in measured.facts)
    return measured


def kernels_read(arch: Arch) -> set[str]:
    """The kernels whose SASS the family reads on ``arch``: its own and their twins'."""
    twins = (twin_of(name, arch) for name in PROBES)
    return {find_probe(name).kernel for name in PROBES} | {twin.kernel for twin in twins if twin is not None}


def measure(request: Request) -> Probes:
    """The family's runnable probes in order, each as (name, step); ``state`` is not used. What each
    kernel compiled to is read from ``request.cubin``, the cubin the launcher loaded."""
    settings = request.settings or Settings()
    arch = parse_arch(request.device.arch)
    listing = lowering.listing_of(request.cubin, kernels_read(arch))
    pairing = Pairing(arch, listing, np.random.default_rng(settings.seed))
    steps = {name: functools.partial(_step(name), request, settings, pairing, name) for name in PROBES}
    kept = {name: functools.partial(recorded, pairing, name, step) for name, step in steps.items()}
    return probe_steps(PROBES, kept, request.runnable)


# ---- the time plan ---------------------------------------------------------------------------------

CHAIN_STEP_CYCLES = 2000.0  # one step of a chain at most (a formed group's __fns and convergence tests)
BARRIER_STEP_CYCLES = 800.0  # one block or cluster barrier at most, the check included
ATOMIC_STEP_CYCLES = 1500.0  # one returning add to global memory at most
COPY_STEP_CYCLES = 3000.0  # one copy round trip through L2 at most
GRID_BARRIER_S = 5e-6  # one grid barrier at most (as grid_sync plans it)
GRID_TIMED_CALLS = 6  # one grid launch: two fills, the checked run (fill, launch, read), the error read
BLOCK_STEP_CYCLES = 2000.0  # one block collective of 256 threads at most (a raking scan: two barriers, the raking)
SORT_STEP_CYCLES = 40000.0  # one block radix sort of 1024 keys at most (8 passes of a ranking and a scatter)
LISTING_S = 0.5  # the loaded cubin's listing read once, its kernels' and twins' code parsed (0.2 s on 2 cores)


def plan(settings: Settings, device: Device) -> Plan:
    """Every pair at its most repeats, both sides: each chain and barrier a long and a short launch per
    sample, the chases also their cycles built, the grid barrier at two sizes; and the listing read once."""
    s, repeats = settings, settings.sampling.max_repeats

    def pair(step_cycles: float, steps: int) -> Plan:  # both sides, ``steps`` per iteration each
        side = samples_plan(s, device, step_cycles, steps)
        return probe(side, side)

    chains_plan = [pair(CHAIN_STEP_CYCLES, chain_steps(name)) for name in _CPP_CHAINS]
    barriers = [pair(BARRIER_STEP_CYCLES, unroll_of("gp_coop_block_sync")) for _ in BLOCK_SIZES]
    barriers += [pair(BARRIER_STEP_CYCLES, unroll_of(f"gp_coop_cluster_sync_{size}")) for size in CLUSTER_SIZES]
    atomics = [pair(ATOMIC_STEP_CYCLES, unroll_of(f"gp_coop_atomic_ref_{scope}_lat")) for scope in ATOMIC_SCOPES]
    cub_steps = {name: unroll_of(find_probe(name).kernel) for name in _CUB_BLOCK}
    cub_blocks = [pair(BLOCK_STEP_CYCLES, steps) for name, steps in cub_steps.items() if name not in NO_TWIN]
    cub_blocks += [probe(samples_plan(s, device, SORT_STEP_CYCLES, cub_steps[name])) for name in NO_TWIN]
    step_s = cycles_s(COPY_STEP_CYCLES, device)

    def chase(nodes: int, kernel: str, iterations: tuple[int, int]) -> Plan:
        return latencies_plan(nodes, unroll_of(kernel), *iterations, repeats, step_s)

    copy_side = chase(s.chase_nodes, "gp_coop_cg_memcpy_chase", s.copy_iterations)  # as each C++ copy chase's
    bulk_side = chase(s.chase_nodes, "gp_ac_bulk_chase", s.bulk_iterations)
    dsm_side = chase(s.dsm_nodes, "gp_coop_dsm_chase", (s.short_iterations, s.long_iterations))
    chases = [probe(copy_side, copy_side), probe(copy_side, bulk_side), probe(copy_side, copy_side),
              probe(dsm_side, dsm_side, dsm_side, dsm_side)]  # fmt: skip
    barriers_per_launch = s.grid_checks + s.grid_long_syncs
    grid_runs = 2 * 2 * 2 * repeats  # sizes x sides x launches x samples
    grid = probe(Plan(0, grid_runs * GRID_TIMED_CALLS, grid_runs * barriers_per_launch * GRID_BARRIER_S))
    return sum([*chains_plan, *barriers, *atomics, *cub_blocks, *chases], grid + Plan(0, 0, 0.0, LISTING_S))


OPTIONAL_FACTS = {  # the twin and the ratio of a copy measured alone where the arch has no cp.async (sm_75)
    **{
        f"{name}.{kind}": "the arch has no cp.async: nothing hand-written stands beside it"
        for name in ("coop.memcpy_async.cg", "coop.memcpy_async.barrier", "coop.pipeline")
        for kind in ("ptx_latency", "ratio")
    },
    **{
        f"{name}.cg_ratio": f"derived from {cg}'s cost, which a run of {name} alone does not measure"
        for name, cg in CG_TWINS.items()
    },
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


def cost_and_twin(declared: tuple[str, ...]) -> list[tuple[str, str]]:
    """(C++ cost, twin's cost) fact ids of a probe's declared facts: one pair per grid size or DSM target."""
    twins = [fact_id for fact_id in declared if ".ptx_latency" in fact_id]
    return [(twin_id.replace(".ptx_latency", ".latency", 1), twin_id) for twin_id in twins]


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
        for cost_id, twin_id in cost_and_twin(find_probe(name).facts):
            cost, measured_twin = _measured(facts, cost_id), _measured(facts, twin_id)
            if cost is not None and measured_twin is not None:
                bound = _scaled(measured_twin, twin.scale * (1 - FLOOR_SLACK))
                checks.append(not_below(f"coop_not_below_ptx.{cost_id.removeprefix('coop.')}", bound, cost))
    return checks


INVARIANTS = (abstraction_not_below_instruction,)


FAMILY = Family(
    name="coop",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
    sections=SECTIONS,
    invariants=INVARIANTS,
    optional_facts=OPTIONAL_FACTS,
)
