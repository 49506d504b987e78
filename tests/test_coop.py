"""The coop family: CUDA C++ probes' contracts on every arch (and lowerings that changed, caught), the
twins chosen per arch, the host's replays, the side-by-side run against the simulated GPU with its
self-checks and floors, what each kernel compiled to, the figure, and the plan."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest

from gpuprobe.core.arch import SUPPORTED_ARCHS, parse_arch
from gpuprobe.core.results import Device, Fact, ProbeOutcome, Results
from gpuprobe.families import coop
from gpuprobe.families.coop import chains, lowering, pairs, plot
from gpuprobe.families.coop.simulated import FAST_SETTINGS
from gpuprobe.kernels.contracts import check
from gpuprobe.kernels.registry import PTX_DIR, all_probes, find_probe
from gpuprobe.kernels.sass import Listing, read_cubin
from gpuprobe.kernels.toolchain import compile_cuda
from gpuprobe.measure.plan import family_seconds
from gpuprobe.simulated.gpu import SimulatedGpu, _module, measure_family, suite_options
from tests.helpers.devices import H200

COOP_DIR = PTX_DIR / "coop"


def _run(gpu: SimulatedGpu, runnable: set[str]) -> dict:
    return measure_family(coop, gpu, runnable, FAST_SETTINGS)


def _device(arch: str) -> Device:
    return dataclasses.replace(SimulatedGpu().device(), arch=arch)


@pytest.fixture(scope="module")
def whole_run() -> dict:
    """Every coop probe measured once on the simulated sm_90a part (a few seconds), shared by the tests
    that read it."""
    return _run(SimulatedGpu(**suite_options()), set(coop.PROBES))


# ---- declarations and contracts ----------------------------------------------------------------


def test_the_probe_order_is_the_declared_family_and_every_source_is_cuda() -> None:
    declared = [p for p in all_probes() if p.family == "coop"]
    assert set(coop.PROBES) == {p.name for p in declared}
    assert {p.source.suffix for p in declared} == {".cu"}


def test_cluster_probes_target_hopper_and_newer_and_the_rest_every_arch() -> None:
    """Each probe's contract on every arch it targets is probes/test_coop.py's static part."""
    for probe in (p for p in all_probes() if p.family == "coop"):
        expected = [a for a in SUPPORTED_ARCHS if a.number >= 90 or probe.source.name != "cluster.cu"]
        assert list(probe.archs) == expected, probe.name


@functools.cache
def _listing(source: str, arch: str, text: str | None = None) -> Listing:
    """What ``gpuprobe sass ptx/coop/SOURCE --arch ARCH`` shows (``text`` in place of the file's own):
    NVRTC's PTX assembled by ptxas, both cached by content."""
    compiled = compile_cuda(text or (COOP_DIR / source).read_text(), parse_arch(arch), source, (COOP_DIR,))
    return read_cubin(compiled.cubin)


@pytest.mark.parametrize(("probe", "built", "judged", "rule"), [
    # CG lowered a 32-lane reduction to a shuffle butterfly on sm_80 (as on sm_75): REDUX missing
    ("coop.reduce.add.32", "sm_75", "sm_80", "count C?REDUX"),
    # ... or to REDUX on sm_75, which has none: the butterfly missing
    ("coop.reduce.min", "sm_80", "sm_75", "count SHFL"),
    # libcu++ stopped using the bulk copy on sm_90 (cp.async instead, as on sm_86)
    ("coop.memcpy_async.barrier", "sm_86", "sm_90a", "count UBLKCP"),
    # ... or used it on sm_86, which has none
    ("coop.memcpy_async.barrier", "sm_90a", "sm_86", "count LDGSTS"),
    # CUB's warp reduction stopped using redux.sync on sm_80 (the shuffles of sm_75)
    ("coop.cub.warp_reduce", "sm_75", "sm_90a", "count C?REDUX"),
    # ptxas loaded CUB's raking segment twice on sm_90a too, as before sm_90
    ("coop.cub.block_scan", "sm_80", "sm_90a", "count LDS"),
    # ... or peeled the radix sort's last pass on sm_80, as on sm_90a
    ("coop.cub.radix_sort", "sm_90a", "sm_80", "count BAR"),
])  # fmt: skip
def test_a_lowering_that_changed_is_caught(probe: str, built: str, judged: str, rule: str) -> None:
    """Each arch's real SASS of a kernel held to the rules of another arch: what a compiler or CCCL
    change that lowered the abstraction another way would look like, caught on CPU."""
    declared = find_probe(probe)
    kernel = _listing(declared.source.name, built).kernel(declared.kernel)
    assert check(kernel, [r for r in declared.contract if r.applies_to(parse_arch(built))]) == []
    violations = check(kernel, [r for r in declared.contract if r.applies_to(parse_arch(judged))])
    assert any(v.rule.startswith(rule) for v in violations), [v.rule for v in violations]


def test_an_atomic_ref_rewritten_to_the_shared_space_is_caught() -> None:
    """atomicAdd on the __shared__ word compiles to ATOMS: the contract pins libcu++'s generic ATOM."""
    text = (COOP_DIR / "atomics.cu").read_text()
    fetch_adds = "ref.fetch_add(a, cuda::memory_order_relaxed)", "ref.fetch_add(b, cuda::memory_order_relaxed)"
    assert all(text.count(call) == 1 for call in fetch_adds)
    mutant = text.replace(fetch_adds[0], "atomicAdd(counter, a)").replace(fetch_adds[1], "atomicAdd(counter, b)")
    probe = find_probe("coop.atomic_ref.shared")
    violations = check(_listing("atomics.cu", "sm_90a", mutant).kernel(probe.kernel), list(probe.contract))
    assert {v.rule.split(" ")[0] for v in violations} == {"forbid", "count", "only"}
    assert any("ATOMS" in line for v in violations for line in v.lines)


# ---- twins -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("probe", "arch", "twin", "floor"), [
    ("coop.reduce.add.32", "sm_80", "warp.redux.add", True),
    ("coop.reduce.add.16", "sm_90a", "warp.redux.add", True),
    ("coop.reduce.add.16", "sm_75", "warp.tile16.reduce", True),
    ("coop.reduce.add.8", "sm_90a", "warp.tile8.reduce", True),
    ("coop.reduce.min", "sm_80", "warp.redux.add", False),
    ("coop.reduce.fadd", "sm_90a", "warp.tile32.reduce", False),
    ("coop.memcpy_async.barrier", "sm_90a", "async_copy.bulk.latency", True),
    ("coop.memcpy_async.barrier", "sm_86", "async_copy.cp_async.latency.cg", True),
    ("coop.memcpy_async.barrier", "sm_75", None, None),
    ("coop.block.sync.256", "sm_75", "barrier.block.256", True),
    ("coop.cluster.sync.4", "sm_90", "cluster.bar.4", False),
    ("coop.atomic_ref.shared", "sm_120", "atomics.latency.shared", False),
    ("coop.cub.warp_reduce", "sm_90a", "warp.redux.add", True),
    ("coop.cub.warp_reduce", "sm_75", "warp.tile32.reduce", False),
    ("coop.cub.warp_scan", "sm_80", "warp.shfl.up", True),
    ("coop.cub.block_reduce", "sm_90a", "coop.cub.block_reduce", False),
    ("coop.cub.block_scan", "sm_75", "coop.cub.block_scan", True),
    ("coop.cub.radix_sort", "sm_90a", None, None),
])  # fmt: skip
def test_the_twin_is_chosen_per_arch(probe: str, arch: str, twin: str | None, floor: bool | None) -> None:
    found = pairs.twin_of(probe, parse_arch(arch))
    assert (found and (found.probe, found.floor)) == (twin and (twin, floor))


def test_every_twin_is_a_declared_probe_on_every_arch_of_its_pair() -> None:
    for probe in (p for p in all_probes() if p.family == "coop"):
        for arch in probe.archs:
            twin = pairs.twin_of(probe.name, arch)
            if twin is not None:
                assert find_probe(twin.probe).supports(arch), (probe.name, arch, twin.probe)


def test_a_twin_is_refused_where_its_contract_does_not_hold_or_the_listing_is_unknown() -> None:
    sm90a = parse_arch("sm_90a")
    listing = _module().listing
    twin = pairs.twin_of("coop.tile.shfl", sm90a)
    assert pairs.twin_refusal(twin, listing, sm90a) is None
    assert "listing is unknown" in pairs.twin_refusal(twin, None, sm90a)
    swapped = dataclasses.replace(
        listing, kernels={**listing.kernels, twin.kernel: listing.kernel("gp_warp_shfl_up_lat")}
    )
    assert "contract does not hold" in pairs.twin_refusal(twin, swapped, sm90a)


# ---- the host's replays ----------------------------------------------------------------------------


def test_a_cub_block_twin_is_the_kernel_its_probe_declares_and_held_to_that_kernel_s_rules() -> None:
    """The hand-written block twins are the probes' own (cub.cu), held to the twin's vars: on sm_90a the twin
    loads the eight warp totals in two loads where CUB loads seven in three."""
    sm90a, listing = parse_arch("sm_90a"), _module().listing
    twin = pairs.twin_of("coop.cub.block_reduce", sm90a)
    assert twin.kernel == "gp_coop_ptx_block_reduce_lat" and pairs.twin_refusal(twin, listing, sm90a) is None
    loads = [r for r in twin.contract(sm90a) if r.opcode and r.opcode.startswith("LDS")]
    assert [r.count for r in loads] == [16]
    swapped = dataclasses.replace(listing, kernels={**listing.kernels, twin.kernel: listing.kernel(
        "gp_coop_cub_block_reduce_lat")})  # fmt: skip
    assert "contract does not hold" in pairs.twin_refusal(twin, swapped, sm90a)


def test_the_replays_follow_the_documented_semantics() -> None:
    values = np.arange(1, 33, dtype=np.uint64)
    assert list(chains.tile_reduce(values, 4)[:8]) == [10] * 4 + [26] * 4
    assert list(chains.tile_reduce(values, 32, "min")) == [1] * 32
    assert list(chains.inclusive_scan(values)[:4]) == [1, 3, 6, 10]
    assert list(chains.binary_step(values)[:2]) == [256, 272]  # odd values sum to 256, even ones to 272
    labels = chains.labeled_step(values)
    assert labels[0] == sum(v for v in range(1, 33) if v % 4 == 1)
    floats = np.array([3.0] * 32, dtype=np.float32).view(np.uint32).astype(np.uint64)
    assert chains.float_reduce(floats).astype(np.uint32).view(np.float32)[0] == 96.0
    assert list(chains.first_takes_total(values)[:3]) == [528, 2, 3]  # CUB's Sum: defined in the first lane
    wrapped = chains.first_takes_total(np.full(256, 2**31, dtype=np.uint64))
    assert wrapped[0] == 0 and wrapped[1] == 2**31  # mod 2^32
    keys = np.array([7, 2**32 - 1, 0, 3], dtype=np.uint64)
    assert list(chains.sort_and_map(keys)) == [1, (3 * 2654435761 + 1) % 2**32, (7 * 2654435761 + 1) % 2**32,
                                               ((2**32 - 1) * 2654435761 + 1) % 2**32]  # fmt: skip


def test_a_coalesced_chain_never_reads_rank_0_and_leaves_the_other_lanes_alone() -> None:
    chain = chains.coalesced_chain("k", np.random.default_rng(1))
    active = chains.ACTIVE
    assert 0 not in chain.operands[:active] and chain.scalars == [np.uint32(active)]
    after = chain.predict(64)
    assert list(after[active:]) == list(chain.start[active:])


# ---- measured on the simulated GPU ----------------------------------------------------------------


def test_every_probe_measures_its_pair_and_verifies_both(whole_run: dict) -> None:
    assert list(whole_run) == coop.PROBES
    for name, measured in whole_run.items():
        assert measured.outcome.status == "ok", (name, measured.outcome.detail)
        assert [f.id for f in measured.facts] == list(find_probe(name).facts), name
        facts = {f.id: f for f in measured.facts}
        for cost_id, twin_id in coop.cost_and_twin(find_probe(name).facts):
            cost, twin, ratio = facts[cost_id], facts[twin_id], facts[twin_id.replace(".ptx_latency", ".ratio", 1)]
            assert ratio.value == pytest.approx(np.median([c / t for c, t in zip(cost.samples, twin.samples,
                                                                               strict=True)]))  # fmt: skip


def test_each_probe_records_what_both_kernels_compiled_to(whole_run: dict) -> None:
    outcome = whole_run["coop.reduce.add.32"].outcome
    assert outcome.series["sass_cpp"]["REDUX.SUM.S32"] == [1.0] and "REDUX.SUM" in outcome.series["sass_ptx"]
    assert outcome.detail.startswith("sm_90a SASS per step: C++ gp_coop_reduce_add_32_lat: REDUX.SUM.S32 1")
    grid = whole_run["coop.grid.sync"].outcome
    assert (
        grid.series["sass_cpp"]["ATOM.E.ADD.STRONG.GPU"] == [1.0] and "REDG.E.ADD.STRONG.GPU" in grid.series["sass_ptx"]
    )


def test_the_floors_hold_on_the_simulated_run_and_catch_an_abstraction_cheaper_than_its_instruction(
    whole_run: dict,
) -> None:
    facts = {f.id: f for m in whole_run.values() for f in m.facts}
    checks = coop.abstraction_not_below_instruction(facts, _device("sm_90a"))
    floors = {p for p in coop.PROBES if (twin := pairs.twin_of(p, parse_arch("sm_90a"))) and twin.floor}
    assert len(checks) == len(floors) + 2  # the grid barrier at two sizes, the DSM chase at two targets
    assert all(ok for _, ok, *_ in checks), [d for _, ok, d, *_ in checks if not ok]
    assert "4.75 x coop.scan.add.ptx_latency" in next(c.detail for c in checks if c.name.endswith("scan.add.latency"))
    same = {
        f.id: f
        for f in (
            dataclasses.replace(facts["coop.tile.shfl.latency"], value=96.0, ci=(96.0, 96.0)),
            dataclasses.replace(facts["coop.tile.shfl.ptx_latency"], value=100.0, ci=(100.0, 100.0)),
        )
    }
    assert [ok for _, ok, *_ in coop.abstraction_not_below_instruction(same, _device("sm_90a"))] == [True]  # noise
    cheap = _run(
        SimulatedGpu(**suite_options(family_options={"coop_cheaper": "gp_coop_reduce_add_32_lat"})),
        {"coop.reduce.add.32"},
    )
    broken = coop.abstraction_not_below_instruction({f.id: f for f in cheap["coop.reduce.add.32"].facts},
                                                    _device("sm_90a"))  # fmt: skip
    assert [ok for _, ok, *_ in broken] == [False]


def test_cub_stands_beside_its_twins_and_cg_and_the_radix_sort_alone(whole_run: dict) -> None:
    """CUB over cg is the ratio of the two cost facts of the run; the block scan's note and series give both
    kernels' barriers per step; the radix sort says why it has no twin."""
    facts = {f.id: f for m in whole_run.values() for f in m.facts}
    for name, cg in pairs.CG_TWINS.items():
        derived, cost, cg_cost = facts[f"{name}.cg_ratio"], facts[f"{name}.latency"], facts[find_probe(cg).facts[0]]
        assert derived.value == pytest.approx(cost.value / cg_cost.value) and derived.samples == []
        assert derived.ci == pytest.approx((cost.ci[0] / cg_cost.ci[1], cost.ci[1] / cg_cost.ci[0]))
    scan = whole_run["coop.cub.block_scan"].outcome
    assert scan.series["sass_cpp"]["BAR.SYNC.DEFER_BLOCKING"] == [2.0]
    assert scan.series["sass_ptx"]["BAR.SYNC.DEFER_BLOCKING"] == [1.0]
    assert "PTX gp_coop_ptx_block_scan_lat: SHFL.UP 5" in scan.detail
    sort = whole_run["coop.cub.radix_sort"]
    assert [f.id for f in sort.facts] == ["coop.cub.radix_sort.latency"] and "sass_ptx" not in sort.outcome.series
    assert "no twin measured: a hand-written radix sort is a library of its own" in sort.outcome.detail


def test_cub_over_cg_is_unmeasured_without_the_cg_probe_and_says_why() -> None:
    name = "coop.cub.warp_scan"
    measured = _run(SimulatedGpu(**suite_options()), {name})[name]
    derived = measured.facts[-1]
    assert derived.id == f"{name}.cg_ratio" and derived.value is None and "coop.scan.add" in derived.detail
    assert derived.id in coop.OPTIONAL_FACTS


def test_a_cub_block_scan_cheaper_than_its_hand_written_twin_is_caught() -> None:
    name = "coop.cub.block_scan"
    cheap = _run(SimulatedGpu(**suite_options(family_options={"coop_cheaper": "gp_coop_cub_block_scan_lat"})), {name})
    checks = coop.abstraction_not_below_instruction({f.id: f for f in cheap[name].facts}, _device("sm_90a"))
    assert [(c.name, c.ok) for c in checks] == [("coop_not_below_ptx.cub.block_scan.latency", False)]


def test_ratios_without_a_floor_are_not_checked(whole_run: dict) -> None:
    facts = {f.id: f for m in whole_run.values() for f in m.facts}
    names = {c.name for c in coop.abstraction_not_below_instruction(facts, _device("sm_90a"))}
    assert not any("cluster.sync" in n or "atomic_ref" in n or "reduce.min" in n for n in names)


@pytest.mark.parametrize("kernel", ["gp_coop_tile_shfl_lat", "gp_coop_reduce_fadd_32_lat", "gp_coop_labeled_reduce_lat",
                                    "gp_coop_block_sync", "gp_coop_grid_sync", "gp_coop_cluster_sync_4",
                                    "gp_coop_dsm_chase", "gp_coop_barrier_memcpy_chase",
                                    "gp_coop_atomic_ref_shared_lat", "gp_coop_cub_warp_reduce_lat",
                                    "gp_coop_cub_warp_scan_lat", "gp_coop_cub_block_reduce_lat",
                                    "gp_coop_ptx_block_scan_lat", "gp_coop_cub_radix_sort_lat"])  # fmt: skip
def test_a_wrong_result_fails_the_probe(kernel: str) -> None:
    """A value off by one in any kernel, C++ or its twin (a CUB block probe's own), fails its probe."""
    probe = next(p.name for p in all_probes() if p.family == "coop" and kernel in p.kernels)
    measured = _run(SimulatedGpu(**suite_options(family_options={"coop_corrupt": kernel})), {probe})[probe]
    assert measured.outcome.status == "failed" and kernel in measured.outcome.detail
    assert measured.facts == []


def test_without_a_twin_on_the_arch_the_cost_is_measured_alone() -> None:
    """A Turing part has no cp.async: cg::memcpy_async's cost stands alone, and the note says why."""
    gpu = SimulatedGpu(**suite_options())
    measured = measure_family(coop, gpu, {"coop.pipeline"}, FAST_SETTINGS, device=_device("sm_75"))["coop.pipeline"]
    assert [f.id for f in measured.facts] == ["coop.pipeline.latency"]
    assert "no twin measured: sm_75 has nothing hand-written" in measured.outcome.detail
    absent = set(find_probe("coop.pipeline").facts) - {"coop.pipeline.latency"}
    assert absent <= set(coop.OPTIONAL_FACTS)  # its measured test skips them, naming why


# ---- the summary, the figure, the plan ---------------------------------------------------------------


def test_a_summary_names_what_the_abstraction_is_about_first() -> None:
    counts = {"IADD3": 3.0, "LD.E.128": 16.0, "ULDC": 3.0, "BRA": 2.0, "UBLKCP.S.G": 1.0, "SHFL.BFLY": 2.0}
    assert lowering.summary(counts) == "SHFL.BFLY 2, UBLKCP.S.G 1, LD.E.128 16, IADD3 3, ULDC 3, BRA 2"
    assert lowering.summary({**counts, "MOV": 1.0}).endswith("BRA 2 and 1 other opcodes")
    assert lowering.summary({}) == "none"


def test_the_figure_draws_every_pair_with_its_sass(whole_run: dict) -> None:
    facts = [f for m in whole_run.values() for f in m.facts]
    results = Results(device=SimulatedGpu().device(), facts=facts, probes={n: m.outcome for n, m in whole_run.items()})
    rows = plot.pair_rows(results)
    assert len(rows) == sum(1 for f in facts if f.unit == "ratio" and not f.id.endswith(".cg_ratio"))
    assert (rows[5][0], rows[5][3]) == ("coop.reduce.add.latency.32", "REDUX.SUM.S32 1")
    assert plot.pairs_png(results, 60)[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot.pairs_png(Results(device=SimulatedGpu().device(), probes={"x": ProbeOutcome("ok")}), 60) is None


def test_the_plan_fits_and_counts_what_the_settings_ask() -> None:
    plan = coop.plan(coop.Settings(), H200)
    assert plan.probes == len(coop.PROBES) and family_seconds(plan, child_start=False) < 12.0
    greedy = coop.plan(dataclasses.replace(coop.Settings(), long_iterations=4000), H200)
    assert family_seconds(greedy, child_start=False) > family_seconds(plan, child_start=False) + 5.0


def test_settings_refuse_what_cannot_run() -> None:
    with pytest.raises(ValueError, match="copy_iterations"):
        coop.Settings(copy_iterations=(8, 8))
    with pytest.raises(ValueError, match="8-byte address"):
        coop.Settings(dsm_stride=12)
    with pytest.raises(ValueError, match="16-byte copy"):
        coop.Settings(chase_stride=24)


def test_a_ratio_is_derived_from_the_paired_samples_and_costs_are_cycles(whole_run: dict) -> None:
    units = {f.id: f.unit for m in whole_run.values() for f in m.facts}
    assert {u for i, u in units.items() if "ratio" in i} == {"ratio"}
    assert {u for i, u in units.items() if "ratio" not in i} == {"cycle"}
    ratios = [f for m in whole_run.values() for f in m.facts if f.unit == "ratio"]
    assert all(f.samples == [] and f.ci[0] <= f.value <= f.ci[1] for f in ratios)
    assert isinstance(ratios[0], Fact)
