"""The cache-geometry family's host side: analysis on synthetic curves, planning, the budget, the
end-to-end run against the simulated GPU, self-checks that catch wrong results, and the contracts
catching broken kernels."""

from __future__ import annotations

import dataclasses
import itertools
import json
from pathlib import Path

import numpy as np
import pytest

from gpuprobe.core.arch import parse_arch
from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Fact
from gpuprobe.families import cache_geometry
from gpuprobe.families.cache_geometry import (
    CONST_ROW_BYTES,
    CONST_ROWS,
    CONST_SELF,
    INVARIANTS,
    PARTNERS,
    PROBES,
    SECTIONS,
    Settings,
    cold_nodes,
    constant_end,
    l1_sweep_bytes,
    line_bytes_from_capacities,
    line_node_counts,
    sequential_cycle,
    tlb_cap_bytes,
    tlb_sweeps,
    width_footprints,
)
from gpuprobe.families.cache_geometry.analysis import (
    TlbSweep,
    candidate_units,
    fit_unit,
    miss_fraction,
    read_tlb,
    slope,
    tlb_levels,
)
from gpuprobe.families.cache_geometry.simulated import FAST_SETTINGS, Model, const_array
from gpuprobe.judge.analysis import Level
from gpuprobe.kernels.check import check_probe
from gpuprobe.kernels.cubin import build_ptx
from gpuprobe.kernels.registry import PTX_DIR, find_probe, unroll_of
from gpuprobe.measure.plan import family_seconds
from gpuprobe.simulated.gpu import KIB, MIB, measure_family, simulated_gpu
from tests.helpers.devices import H100_SXM

GIB = 2**30


def _run(gpu, runnable=frozenset(PROBES), settings=FAST_SETTINGS, device=None):
    return measure_family(cache_geometry, gpu, runnable, settings, device=device)


def _facts(measured) -> dict:
    return {f.id: f for m in measured.values() for f in m.facts}


# ---- analysis --------------------------------------------------------------------------------


def _sweep(unit: int, hit: float = 33.0, miss: float = 260.0, noise: float = 0.0, seed: int = 0):
    strides = list(Settings().strides)
    rng = np.random.default_rng(seed)
    latencies = hit + (miss - hit) * miss_fraction(strides, unit)
    return strides, list(latencies * (1 + noise * rng.standard_normal(len(strides))))


@pytest.mark.parametrize("unit", [16, 32, 64, 128])
def test_the_fill_unit_is_the_knee_of_a_stride_sweep(unit: int) -> None:
    for seed in range(5):
        strides, latencies = _sweep(unit, noise=0.02, seed=seed)
        fit = fit_unit(strides, latencies)
        assert fit is not None and fit.unit_bytes == unit, (unit, seed)
        if unit >= 32:  # with one stride below the knee, the hit level is an extrapolation
            assert fit.hit == pytest.approx(33.0, rel=0.15)
        assert fit.miss == pytest.approx(260.0, rel=0.05)


def test_a_stride_sweep_that_does_not_rise_shows_no_unit() -> None:
    strides = list(Settings().strides)
    assert fit_unit(strides, [100.0 + 0.5 * (i % 2) for i in range(len(strides))]) is None
    assert fit_unit(strides, list(np.linspace(300.0, 100.0, len(strides)))) is None  # falling: no miss level
    with pytest.raises(ValueError, match="at least 4"):
        fit_unit([8, 16, 32], [1.0, 2.0, 3.0])


def test_candidate_units_are_the_knees_the_sweep_can_place() -> None:
    assert candidate_units([8, 16, 24, 32, 48, 64, 96, 128, 192, 256]) == [16, 32, 64, 128]
    assert candidate_units([16, 32, 64, 128, 256, 512]) == [32, 64, 128, 256]


def test_slope_is_the_cost_per_distinct_address() -> None:
    lanes = [1, 2, 4, 8, 16, 32]
    assert slope(lanes, [20.0 + 6.0 * (k - 1) for k in lanes]) == pytest.approx(6.0)
    with pytest.raises(ValueError, match="two distinct"):
        slope([4, 4], [1.0, 2.0])


def test_tlb_levels_are_the_steps_of_the_page_sweep() -> None:
    levels = [Level(8 * MIB, 300.0, 4 * MIB, 6 * MIB), Level(64 * MIB, 420.0, 12 * MIB, 48 * MIB),
              Level(None, 800.0, 96 * MIB, 4 * GIB)]  # fmt: skip
    found = tlb_levels(levels, reference=290.0)
    assert found is not None
    assert found.reaches == {1: 8 * MIB, 2: 64 * MIB}
    assert found.miss_cycles(290.0) == 510.0
    assert tlb_levels(levels[:1], reference=290.0) is None


def test_a_sweep_that_starts_beyond_the_first_tlb_names_its_first_step_the_second_level() -> None:
    levels = [Level(64 * MIB, 420.0, 4 * MIB, 48 * MIB), Level(None, 800.0, 96 * MIB, 4 * GIB)]
    found = tlb_levels(levels, reference=290.0)  # the first plateau is already well above a no-miss chase
    assert found is not None and found.reaches == {2: 64 * MIB}


def test_a_plateau_that_falls_is_no_tlb_level() -> None:
    """A few nodes homed in the far L2 partition can make the first plateau the slower one: no translation
    step, and a later rise from the reference's latency is still the first level's."""
    falling = [Level(64 * MIB, 350.0, 16 * MIB, 48 * MIB), Level(None, 280.0, 96 * MIB, 4 * GIB)]
    assert tlb_levels(falling, reference=280.0) is None
    fall_then_rise = [*falling[:1], Level(1 * GIB, 280.0, 96 * MIB, 768 * MIB), Level(None, 600.0, 2 * GIB, 4 * GIB)]
    found = tlb_levels(fall_then_rise, reference=280.0)
    assert found is not None and found.reaches == {1: 1 * GIB} and found.last.latency == 600.0


def _page_sweep(stride: int, page: int, tlb: tuple[tuple[int, float], ...], nodes: list[int]) -> TlbSweep:
    """A noiseless sweep of one line every ``stride`` bytes through a TLB of (entries, extra cycles) levels of
    ``page``-byte pages: a stride of at least a page touches a page per node, a smaller one every page."""
    samples = []
    for n in nodes:
        pages = n if stride >= page else max(1, n * stride // page)
        samples.append([290.0 + sum(extra for entries, extra in tlb if pages > entries)] * 3)
    return TlbSweep(stride, [float(n * stride) for n in nodes], samples)


NODES = [round(8 * 2 ** (k / 3)) for k in range(40)]  # 8 to about 8 million nodes, 3 per octave
HOPPERISH = ((16, 120.0), (4096, 380.0))  # 16 and 4096 entries


def test_a_reach_is_the_smallest_footprint_where_any_stride_steps() -> None:
    """With 2 MiB pages, the 2 MiB stride steps at the reaches (16 and 4096 pages); the 32 MiB stride, one
    page per node, steps at 16 and 4096 nodes, 16 times further out: the reach is the first's."""
    sweeps = [_page_sweep(s, 2 * MIB, HOPPERISH, NODES) for s in (2 * MIB, 32 * MIB)]
    reading = read_tlb(sweeps, reference=290.0)
    assert {level: step.sweep.stride for level, step in reading.steps.items()} == {1: 2 * MIB, 2: 2 * MIB}
    assert 16 * 2 * MIB <= reading.steps[1].plateau.size_bytes <= 2 * 16 * 2 * MIB
    assert 4096 * 2 * MIB <= reading.steps[2].plateau.size_bytes <= 2 * 4096 * 2 * MIB
    assert reading.miss_samples() == pytest.approx([500.0] * len(reading.miss_samples()))
    assert reading.swept_bytes == NODES[-1] * 2 * MIB


def test_pages_larger_than_a_stride_step_at_the_same_footprint_in_every_stride_up_to_the_page() -> None:
    """512 MiB pages: the 2 MiB and 32 MiB strides both touch every page and step at 16 x 512 MiB."""
    reach = 16 * 512 * MIB
    sweeps = [_page_sweep(s, 512 * MIB, HOPPERISH, [n for n in NODES if n * s <= 2**44]) for s in (2 * MIB, 32 * MIB)]
    steps = [read_tlb([sweep], reference=290.0).steps[1].plateau.size_bytes for sweep in sweeps]
    assert all(reach <= step <= 2 * reach for step in steps), steps


def test_no_step_in_any_sweep_says_how_far_the_sweeps_went() -> None:
    """512 MiB pages and 256 entries or more: 64 GiB is 128 pages, within every level."""
    big = ((256, 120.0), (4096, 380.0))
    sweeps = [_page_sweep(s, 512 * MIB, big, [n for n in NODES if n * s <= 64 * GIB]) for s in (2 * MIB, 512 * MIB)]
    reading = read_tlb(sweeps, reference=290.0)
    assert reading.steps == {} and reading.last is None and reading.miss_samples() == []
    assert reading.swept_bytes == sweeps[0].footprints[-1] <= 64 * GIB
    why = reading.why_unmeasured(1)
    assert why.startswith("no translation step in any sweep") and f"{reading.swept_bytes:,.0f} bytes" in why
    one_level = read_tlb([_page_sweep(2 * MIB, 2 * MIB, HOPPERISH, [n for n in NODES if n <= 1024])], 290.0)
    assert set(one_level.steps) == {1} and one_level.why_unmeasured(2).startswith("no step for TLB level 2")


# ---- planning --------------------------------------------------------------------------------


def test_the_l1_sweep_fits_the_l2_and_the_cold_chains_are_never_revisited() -> None:
    s = Settings()
    assert l1_sweep_bytes(s, 50 * MIB) == 1 * MIB
    assert l1_sweep_bytes(s, 1 * MIB) == 512 * KIB
    cold = cold_nodes(s, "gp_cg_chase_cg_v8")
    assert cold > s.sampling.max_repeats * (s.short_iterations + s.long_iterations) * unroll_of("gp_cg_chase_cg_v8")
    assert width_footprints(s, 50 * MIB)["dram"] == 200 * MIB
    assert width_footprints(s, 1 * MIB)["dram"] // 128 >= 2 * cold  # a small L2: still two cold halves


def test_tlb_sweeps_reach_half_the_device_memory_at_every_stride_and_keep_their_lines_in_l2() -> None:
    s = Settings()
    sweeps = tlb_sweeps(s, H100_SXM)
    assert [stride for stride, _ in sweeps] == [page + s.tlb_skew_bytes for page in s.tlb_strides]
    for stride, counts in sweeps:
        assert counts[0] == s.tlb_min_nodes and all(b > a for a, b in itertools.pairwise(counts))
        assert 0.95 * H100_SXM.mem_bytes / 2 < counts[-1] * stride <= H100_SXM.mem_bytes / 2
        assert counts[-1] * 128 <= H100_SXM.l2_bytes / 4
        assert stride % 128 == 0 and stride % (stride - s.tlb_skew_bytes) != 0
    assert tlb_cap_bytes(s, 1 << 40) == s.tlb_max_bytes and tlb_cap_bytes(s, None) == 256 * MIB  # unknown: small
    small_l2 = tlb_sweeps(s, dataclasses.replace(H100_SXM, l2_bytes=1 * MIB))  # 2048 lines at most
    assert [counts[-1] for _, counts in small_l2] == [2048, 1267, 79]
    t4 = tlb_sweeps(s, dataclasses.replace(H100_SXM, mem_bytes=16 * GIB))  # 8 GiB: 15 nodes of 512 MiB, too few
    assert [stride - s.tlb_skew_bytes for stride, _ in t4] == [2 * MIB, 32 * MIB]
    with pytest.raises(ProbeFailure, match="a TLB sweep needs 32 nodes"):
        tlb_sweeps(s, dataclasses.replace(H100_SXM, mem_bytes=64 * MIB))


def test_the_line_is_the_ratio_of_the_dense_and_the_sparse_capacity() -> None:
    assert line_bytes_from_capacities(256 * KIB, 2048) == 128
    assert line_bytes_from_capacities(256 * KIB, 1800) == 128  # knees read off a grid: rounded to a power of two
    assert line_bytes_from_capacities(64 * KIB, 1024) == 64
    counts = line_node_counts(Settings())
    assert counts[0] * 32 == 8 * KIB and counts[-1] * 32 == 512 * KIB


def test_sequential_cycle_walks_the_nodes_in_address_order() -> None:
    cycle = sequential_cycle(5)
    assert list(cycle.successor) == [1, 2, 3, 4, 0]
    assert cycle.node_after(7) == 2


def test_the_host_model_of_the_constant_chase_is_the_ptx_initializer() -> None:
    """constant_end (the host's prediction) follows the words ptx/cache_geometry/cache_geometry.ptx really holds."""
    words = const_array()
    assert len(words) * 4 == CONST_SELF + 32 * 4
    for start, lanes, thread in [(0, 1, 0), (CONST_ROW_BYTES * 5, 1, 0), (CONST_SELF, 32, 17), (CONST_SELF, 4, 9)]:
        offset = start + 4 * (thread % lanes)
        for steps in range(1, 3 * CONST_ROWS):
            offset = int(words[offset // 4])
            assert offset == constant_end(start, lanes, thread, steps)


@pytest.mark.parametrize(
    "change",
    [{"short_iterations": 0}, {"long_iterations": 2}, {"strides": (8, 16, 32)},
     {"strides": (4, 8, 16, 32)}, {"line_sparse_stride": 32},
     {"line_max_bytes": 16 * 1024}, {"divergent_lanes": (1,)}, {"divergent_lanes": (1, 64)}, {"tlb_skew_bytes": 100},
     {"tlb_reference_nodes": 1}, {"tlb_strides": (32 * MIB, 2 * MIB)}, {"tlb_strides": (2 * MIB + 8,)},
     {"tlb_strides": ()}, {"tlb_skew_bytes": 4 * MIB}, {"tlb_min_nodes": 1}, {"tlb_memory_fraction": 1.5}],
)  # fmt: skip
def test_settings_that_would_hang_or_mean_nothing_are_refused(change: dict) -> None:
    with pytest.raises(ValueError, match="Settings"):
        dataclasses.replace(Settings(), **change)


def test_settings_survive_a_json_round_trip() -> None:
    as_json = json.loads(json.dumps(dataclasses.asdict(Settings())))  # tuples come back as lists
    assert cache_geometry.FAMILY.settings_from(as_json) == Settings()


# ---- the budget: the whole family on an H100-class part within 8 s ----------------------------


def test_the_whole_family_fits_its_budget_on_an_h100() -> None:
    """An upper bound of every probe's time (``cache_geometry.plan``): every point at max_repeats, every
    load at its level's worst, every chain written and flush made, every launcher call's round trip."""
    plan = cache_geometry.plan(Settings(), H100_SXM)
    assert plan.probes == len(PROBES)
    assert family_seconds(plan, child_start=False) < 8.0, plan
    greedy = cache_geometry.plan(dataclasses.replace(Settings(), long_iterations=400), H100_SXM)
    assert family_seconds(greedy, child_start=False) > 8.0  # the bound counts every load: it can fail


# ---- end to end against the simulated GPU ----------------------------------------------------


def test_simulated_geometry_is_recovered() -> None:
    # quiet enough to see the few cycles a 16-byte load adds to a DRAM load of 700: at 0.1 % noise a sample of
    # their difference is off by 1.5 cycles, and the median of four misses 8 by more than 1.3 one seed in ten
    measured = _run(simulated_gpu(noise=0.0002))
    assert {n: m.outcome.status for n, m in measured.items()} == dict.fromkeys(PROBES, "ok"), {
        n: m.outcome.detail for n, m in measured.items()
    }
    facts = _facts(measured)
    assert facts["cache.l1.sector_bytes"].value == 32
    assert facts["cache.l2.sector_bytes"].value == 64
    assert facts["cache.l1.line_bytes"].value == 128
    low, high = facts["cache.l1.line_bytes"].ci
    assert low <= 128 <= high
    for level, extra in Model().wide_extra.items():
        assert facts[f"latency.{level}.v16_minus_v8"].value == pytest.approx(extra, abs=0.1 * extra + 0.5), level
    assert 2 * MIB <= facts["tlb.l1.reach_bytes"].value <= 8 * MIB
    assert 16 * MIB <= facts["tlb.l2.reach_bytes"].value <= 64 * MIB
    assert facts["tlb.miss_cycles"].value == pytest.approx(500.0, rel=0.05)
    assert facts["latency.constant.hit"].value == pytest.approx(18.0, rel=0.05)
    assert facts["latency.constant.miss"].value == pytest.approx(105.0, rel=0.05)
    assert facts["constant.divergent_cost"].value == pytest.approx(6.0, rel=0.05)
    assert all(f.unit in ("byte", "cycle") for f in facts.values())
    series = measured["cache_geometry.sector.l1"].outcome.series["stride"]
    assert len(series["stride_bytes"]) == len(series["latency_cycles"]) == len(FAST_SETTINGS.strides)


def test_every_constant_chase_starts_where_its_launch_says() -> None:
    """The constant chase restarts from its start every launch: with an odd number of iterations (a
    launch of 64 + 32 steps ends half way round the 64-row cycle) the ends are still the predicted ones."""
    odd = dataclasses.replace(FAST_SETTINGS, short_iterations=1, long_iterations=3)
    measured = _run(simulated_gpu(noise=0.001), runnable={"cache_geometry.constant.latency"}, settings=odd)
    assert measured["cache_geometry.constant.latency"].outcome.status == "ok"
    assert _facts(measured)["latency.constant.miss"].value == pytest.approx(105.0, rel=0.05)


def test_a_different_l1_line_is_seen() -> None:
    gpu = simulated_gpu(noise=0.001)
    gpu.cache_geometry = Model(l1_line=64)
    measured = _run(gpu, runnable={"cache_geometry.line.l1"})
    assert measured["cache_geometry.line.l1"].facts[0].value == 64


def _tlb(model: Model, settings: Settings = FAST_SETTINGS, mem_bytes: int | None = None):
    """The TLB probe alone on a simulated part with ``model``'s TLB (and ``mem_bytes`` of memory, if given)."""
    gpu = simulated_gpu(noise=0.001)
    gpu.cache_geometry = model
    device = dataclasses.replace(gpu.device(), mem_bytes=mem_bytes) if mem_bytes else None
    return _run(gpu, runnable={"cache_geometry.tlb"}, settings=settings, device=device)["cache_geometry.tlb"]


def test_a_first_tlb_smaller_than_the_smallest_footprint_is_not_mistaken_for_it() -> None:
    measured = _tlb(Model(tlb=((4, 120.0), (512, 380.0))))  # 8 pages (the smallest footprint) already miss the first
    facts = {f.id: f for f in measured.facts}
    assert facts["tlb.l1.reach_bytes"].value is None
    assert "already misses TLB level 1" in facts["tlb.l1.reach_bytes"].detail
    assert 16 * MIB <= facts["tlb.l2.reach_bytes"].value <= 64 * MIB
    assert facts["tlb.miss_cycles"].value == pytest.approx(500.0, rel=0.05)


def test_with_pages_of_the_smallest_stride_that_sweep_places_both_levels() -> None:
    """64 KiB pages (the simulated part's 2 MiB): the smallest stride steps at 64 and 512 pages; the 1 MiB
    stride steps at 64 nodes (64 MiB) only; the reach is the smaller footprint, the stride that showed it named."""
    measured = _tlb(Model())
    facts = {f.id: f for f in measured.facts}
    assert 2 * MIB <= facts["tlb.l1.reach_bytes"].value <= 8 * MIB
    assert 16 * MIB <= facts["tlb.l2.reach_bytes"].value <= 64 * MIB
    assert facts["tlb.no_step_below_bytes"].value == 1024 * (64 * KIB + 384)  # and no third level below it
    steps = measured.outcome.series["steps"]
    assert steps["stride_bytes"] == [64 * KIB + 384.0] * 2
    assert "stride 1,048,960 B to 255 MiB: plateaus 260, 380 cycles, ending at 72 MiB" in measured.outcome.detail
    assert "stride 16 MiB left out" in measured.outcome.detail  # 15 nodes within 256 MiB


LARGE_PAGES = Model(tlb_page=1 * MIB, tlb=((80, 120.0), (240, 380.0)))  # reaches of 80 and 240 MiB
HALF_GIB = dataclasses.replace(FAST_SETTINGS, tlb_max_bytes=512 * MIB)


def test_pages_larger_than_the_smallest_stride_show_their_steps_in_a_larger_strides_sweep() -> None:
    """1 MiB pages (a real part's 32 MiB): the 64 KiB sweep ends at 1024 nodes (a quarter of the L2), 64 MiB,
    short of the first reach; the 1 MiB stride reaches 512 MiB and steps at 80 and 240 pages. A probe
    sweeping the smallest stride alone (the H200 run's) finds nothing."""
    measured = _tlb(LARGE_PAGES, HALF_GIB, mem_bytes=1 * GIB)
    facts = {f.id: f for f in measured.facts}
    assert 64 * MIB <= facts["tlb.l1.reach_bytes"].value <= 128 * MIB
    assert 160 * MIB <= facts["tlb.l2.reach_bytes"].value <= 320 * MIB
    assert facts["tlb.miss_cycles"].value == pytest.approx(500.0, rel=0.05)
    assert measured.outcome.series["steps"]["stride_bytes"] == [1 * MIB + 384.0] * 2
    alone = _tlb(LARGE_PAGES, dataclasses.replace(HALF_GIB, tlb_strides=(64 * KIB,)), mem_bytes=1 * GIB)
    assert [f.id for f in alone.facts if f.value is not None] == ["tlb.no_step_below_bytes"]
    assert [f.id for f in measured.facts if f.value is None] == []


def test_no_step_within_what_the_device_allows_is_said_in_facts_not_a_note() -> None:
    """16 MiB pages (a real part's 512 MiB) and reaches of 1 and 8 GiB, beyond the 256 MiB the sweeps may take:
    the reach and miss facts are written without a value, each with the reason, and tlb.no_step_below_bytes
    is the largest footprint of the smallest stride's sweep."""
    measured = _tlb(Model(tlb_page=16 * MIB))
    assert measured.outcome.status == "ok"
    facts = {f.id: f for f in measured.facts}
    assert set(facts) == {"tlb.l1.reach_bytes", "tlb.l2.reach_bytes", "tlb.miss_cycles", "tlb.no_step_below_bytes"}
    bound = facts["tlb.no_step_below_bytes"]
    assert bound.value == 1024 * (64 * KIB + 384) and bound.unit == "byte"  # a quarter of the 512 KiB L2, in lines
    for fact_id in ("tlb.l1.reach_bytes", "tlb.l2.reach_bytes", "tlb.miss_cycles"):
        assert facts[fact_id].value is None
        assert facts[fact_id].detail.startswith("no translation step in any sweep"), fact_id
        assert f"beyond {bound.value:,.0f} bytes" in facts[fact_id].detail
    assert [c for check in INVARIANTS for c in check(facts, simulated_gpu().device())] == []  # nothing to compare


def test_a_constant_chase_whose_difference_is_not_positive_fails_through_the_sampler() -> None:
    """A constant load that costs nothing leaves long minus short at zero: Difference widens the gap, then
    fails the probe with the numbers, instead of a latency of 0."""
    gpu = simulated_gpu(noise=0.0)
    gpu.cache_geometry = Model(const_hit=0.0)
    outcome = _run(gpu, runnable={"cache_geometry.constant.latency"})["cache_geometry.constant.latency"].outcome
    assert outcome.status == "failed"
    assert "gp_cg_const_chase: long minus short is 0 cycles, not positive" in outcome.detail


def test_a_chase_that_ends_on_the_wrong_node_fails_its_probe_and_gives_no_number() -> None:
    measured = _run(simulated_gpu(corrupt_chase=True), runnable=set(PROBES) - {"cache_geometry.sector.l1"})
    for name in set(PROBES) - {"cache_geometry.sector.l1", "cache_geometry.width.l1"}:
        if "constant" in name:
            assert measured[name].outcome.status == "ok"
            continue
        assert measured[name].outcome.status == "failed", name
        detail = measured[name].outcome.detail
        assert "host predicted" in detail or "not on a node" in detail
        assert measured[name].facts == []


def test_a_constant_chase_that_ends_on_the_wrong_word_fails() -> None:
    gpu = simulated_gpu()
    gpu.cache_geometry = Model(corrupt_const=True)
    measured = _run(gpu, runnable={"cache_geometry.constant.latency", "cache_geometry.constant.divergent"})
    for outcome in (m.outcome for m in measured.values()):
        assert outcome.status == "failed"
        assert "host predicted" in outcome.detail


def test_a_stride_sweep_without_a_knee_fails_instead_of_inventing_a_unit() -> None:
    gpu = simulated_gpu()
    gpu.cache_geometry = Model(l1=260.0)  # L1 hits cost what L2 hits do: no knee to see
    measured = _run(gpu, runnable={"cache_geometry.sector.l1"})
    outcome = measured["cache_geometry.sector.l1"].outcome
    assert outcome.status == "failed" and "does not rise with the stride" in outcome.detail


def test_a_width_probe_needs_its_8_byte_partner_kernel_to_hold_its_contract() -> None:
    gpu = simulated_gpu()
    measured = _run(gpu, runnable={"cache_geometry.width.l1", "cache_geometry.width.l2"} | {"cache_geometry.sector.l2"})
    assert measured["cache_geometry.width.l1"].outcome.status == "skipped"
    assert "cache_geometry.sector.l1" in measured["cache_geometry.width.l1"].outcome.detail
    assert measured["cache_geometry.width.l2"].outcome.status == "ok"
    assert set(PARTNERS.values()) <= set(PROBES)


def test_probes_whose_contract_failed_are_not_launched() -> None:
    gpu = simulated_gpu()
    measured = _run(gpu, runnable={"cache_geometry.constant.latency"})
    assert set(measured) == {"cache_geometry.constant.latency"}
    assert set(gpu.launches) - {"gp_sm_clock"} == {"gp_cg_const_chase"}  # the clock is read around every probe


def test_the_l1_kernels_ask_for_the_largest_l1() -> None:
    gpu = simulated_gpu()
    _run(gpu, runnable={"cache_geometry.sector.l1", "cache_geometry.width.l1"})
    assert gpu.carveouts == dict.fromkeys(["gp_cg_chase_ca_v8", "gp_cg_chase_ca_v16"], "max L1")


# ---- the contracts catch broken kernels ------------------------------------------------------

SM90 = parse_arch("sm_90")


def _broken(tmp_path: Path, old: str, new: str):
    source = (PTX_DIR / "cache_geometry" / "cache_geometry.ptx").read_text()
    assert old in source
    path = tmp_path / "cache_geometry.ptx"
    path.write_text(source.replace(old, new))
    return build_ptx([path], SM90)


def test_a_16_byte_load_whose_second_half_is_unused_is_narrowed_and_caught(tmp_path: Path) -> None:
    module = _broken(tmp_path, "xor.b64 %rd10, %rd10, %rd9;", "")
    result = check_probe(find_probe("cache_geometry.width.l2"), module)
    assert result.status == "violated"
    assert any(v.rule.startswith("count LDG") and "found 0" in result.detail for v in result.violations)


def test_a_constant_chase_whose_address_is_computed_from_its_value_is_caught(tmp_path: Path) -> None:
    """An add between the load and the next address makes the chain time the add too."""
    step = "cvt.u64.u32 %rd3, %r7; add.u64 %rd4, %rd2, %rd3; ld.const.u32 %r7, [%rd4];"
    module = _broken(tmp_path, f"{step}\n\tsub.u32 %r4", f"{step} add.u32 %r7, %r7, 4;\n\tsub.u32 %r4")
    result = check_probe(find_probe("cache_geometry.constant.latency"), module)
    assert result.status == "violated"
    assert [v.rule for v in result.violations if v.rule.startswith("dependent_chain")]


# ---- invariants ------------------------------------------------------------------------------


def _fact(fact_id: str, value: float, unit: str) -> Fact:
    return Fact(fact_id, value, unit, (value, value), [value], {}, "cache_geometry.test")


def test_the_invariants_hold_on_the_simulated_part_and_catch_a_broken_order() -> None:
    facts = _facts(_run(simulated_gpu(noise=0.001)))
    checks = [result for check in INVARIANTS for result in check(facts, simulated_gpu().device())]
    assert {c.name for c in checks} == {
        "cache.l1_sector_divides_line", "constant.hit_below_miss", "tlb.l1_reach_below_l2_reach"
    }  # fmt: skip
    assert all(c.ok for c in checks), checks
    broken = {"latency.constant.hit": _fact("latency.constant.hit", 120.0, "cycle"),
              "latency.constant.miss": _fact("latency.constant.miss", 100.0, "cycle"),
              "cache.l1.sector_bytes": _fact("cache.l1.sector_bytes", 48.0, "byte"),
              "cache.l1.line_bytes": _fact("cache.l1.line_bytes", 128.0, "byte")}  # fmt: skip
    failed = [c for check in INVARIANTS for c in check(broken, simulated_gpu().device())]
    assert {c.name: c.ok for c in failed} == {"cache.l1_sector_divides_line": False, "constant.hit_below_miss": False}
    assert {c.name: c.facts for c in failed} == {  # a failed check marks the facts it compared
        "cache.l1_sector_divides_line": ("cache.l1.sector_bytes", "cache.l1.line_bytes"),
        "constant.hit_below_miss": ("latency.constant.hit", "latency.constant.miss"),
    }
    assert SECTIONS[0].fact_prefixes == ("cache.", "tlb.", "constant.")
