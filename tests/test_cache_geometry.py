"""The cache-geometry family's host side: analysis on synthetic curves, planning, the budget, the
end-to-end run against the simulated GPU, self-checks that catch wrong results, and the contracts
catching broken kernels."""

from __future__ import annotations

import dataclasses
import itertools
from pathlib import Path

import numpy as np
import pytest

from gpuprobe.build.check import check_probe
from gpuprobe.build.cubin import build_ptx
from gpuprobe.build.registry import PTX_DIR, find_probe
from gpuprobe.core.arch import parse_arch
from gpuprobe.core.results import Fact
from gpuprobe.families import cache_geometry
from gpuprobe.families.base import ProbeFailure
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
    tlb_node_counts,
    tlb_stride,
    width_footprints,
)
from gpuprobe.families.cache_geometry.analysis import candidate_units, fit_unit, miss_fraction, slope, tlb_levels
from gpuprobe.families.memory_latency import UNROLL
from gpuprobe.judge.analysis import Level
from gpuprobe.measure.plan import family_seconds
from gpuprobe.simulated.gpu import KIB, MIB, fake_gpu, measure_family
from gpuprobe.simulated.kernels.cache_geometry import FAST_SETTINGS, Model, const_array
from tests.devices import H100_SXM

GIB = 2**30


def _run(gpu, runnable=frozenset(PROBES), settings=FAST_SETTINGS):
    return measure_family(cache_geometry, gpu, runnable, settings)


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


# ---- planning --------------------------------------------------------------------------------


def test_the_l1_sweep_fits_the_l2_and_the_cold_chains_are_never_revisited() -> None:
    s = Settings()
    assert l1_sweep_bytes(s, 50 * MIB) == 1 * MIB
    assert l1_sweep_bytes(s, 1 * MIB) == 512 * KIB
    assert cold_nodes(s) > s.max_repeats * (s.short_iterations + s.long_iterations) * UNROLL
    assert width_footprints(s, 50 * MIB)["dram"] == 200 * MIB
    assert width_footprints(s, 1 * MIB)["dram"] // 128 >= 2 * cold_nodes(s)  # a small L2: still two cold halves


def test_tlb_footprints_reach_the_cap_and_respect_the_device_memory() -> None:
    s = Settings()
    counts = tlb_node_counts(s, 80 * GIB)
    assert counts[0] == 2 and 19 * GIB < counts[-1] * tlb_stride(s) <= 20 * GIB
    assert tlb_node_counts(s, 141 * GIB)[-1] * tlb_stride(s) <= 32 * GIB
    small = tlb_node_counts(s, 16 * GIB)
    assert small[-1] * tlb_stride(s) <= 4 * GIB
    assert tlb_node_counts(s, None)[-1] * tlb_stride(s) <= 256 * MIB  # unknown memory: stay small
    assert all(b > a for a, b in itertools.pairwise(counts))
    assert tlb_stride(s) % 128 == 0 and tlb_stride(s) % s.tlb_page_bytes != 0
    with pytest.raises(ProbeFailure, match="at least 8 pages"):
        tlb_node_counts(s, 32 * MIB)


def test_the_line_is_the_ratio_of_the_dense_and_the_sparse_capacity() -> None:
    assert line_bytes_from_capacities(256 * KIB, 2048) == 128
    assert line_bytes_from_capacities(256 * KIB, 1800) == 128  # knees read off a grid: rounded to a power of two
    assert line_bytes_from_capacities(64 * KIB, 1024) == 64
    counts = line_node_counts(Settings())
    assert counts[0] * 32 == 8 * KIB and counts[-1] * 32 == 512 * KIB


def test_sequential_cycle_walks_the_nodes_in_address_order() -> None:
    chain = sequential_cycle(5)
    assert list(chain.successor) == [1, 2, 3, 4, 0]
    assert chain.node_after(7) == 2


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
    [{"short_iterations": 0}, {"long_iterations": 2}, {"max_repeats": 1}, {"strides": (8, 16, 32)},
     {"strides": (4, 8, 16, 32)}, {"line_sparse_stride": 32},
     {"line_max_bytes": 16 * 1024}, {"divergent_lanes": (1,)}, {"divergent_lanes": (1, 64)}, {"tlb_skew_bytes": 100},
     {"tlb_reference_nodes": 1}],
)  # fmt: skip
def test_settings_that_would_hang_or_mean_nothing_are_refused(change: dict) -> None:
    with pytest.raises(ValueError, match="Settings"):
        dataclasses.replace(Settings(), **change)


def test_settings_survive_a_json_round_trip() -> None:
    as_json = {k: list(v) if isinstance(v, tuple) else v for k, v in dataclasses.asdict(Settings()).items()}
    assert Settings(**as_json) == Settings()


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
    measured = _run(fake_gpu(noise=0.0002))
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
    measured = _run(fake_gpu(noise=0.001), runnable={"cache_geometry.constant.latency"}, settings=odd)
    assert measured["cache_geometry.constant.latency"].outcome.status == "ok"
    assert _facts(measured)["latency.constant.miss"].value == pytest.approx(105.0, rel=0.05)


def test_a_different_l1_line_is_seen() -> None:
    gpu = fake_gpu(noise=0.001)
    gpu.cache_geometry = Model(l1_line=64)
    measured = _run(gpu, runnable={"cache_geometry.line.l1"})
    assert measured["cache_geometry.line.l1"].facts[0].value == 64


def test_a_first_tlb_smaller_than_the_smallest_footprint_is_not_mistaken_for_it() -> None:
    gpu = fake_gpu(noise=0.001)
    gpu.cache_geometry = Model(tlb=((64 * KIB, 120.0), (32 * MIB, 380.0)))  # two pages already miss the first
    facts = _facts(_run(gpu, runnable={"cache_geometry.tlb"}))
    assert "tlb.l1.reach_bytes" not in facts
    assert 16 * MIB <= facts["tlb.l2.reach_bytes"].value <= 64 * MIB
    assert facts["tlb.miss_cycles"].value == pytest.approx(500.0, rel=0.05)


def test_a_chase_that_ends_on_the_wrong_node_fails_its_probe_and_gives_no_number() -> None:
    measured = _run(fake_gpu(corrupt_chase=True), runnable=set(PROBES) - {"cache_geometry.sector.l1"})
    for name in set(PROBES) - {"cache_geometry.sector.l1", "cache_geometry.width.l1"}:
        if "constant" in name:
            assert measured[name].outcome.status == "ok"
            continue
        assert measured[name].outcome.status == "failed", name
        detail = measured[name].outcome.detail
        assert "host predicted" in detail or "not on a node" in detail
        assert measured[name].facts == []


def test_a_constant_chase_that_ends_on_the_wrong_word_fails() -> None:
    gpu = fake_gpu()
    gpu.cache_geometry = Model(corrupt_const=True)
    measured = _run(gpu, runnable={"cache_geometry.constant.latency", "cache_geometry.constant.divergent"})
    for outcome in (m.outcome for m in measured.values()):
        assert outcome.status == "failed"
        assert "host predicted" in outcome.detail


def test_a_stride_sweep_without_a_knee_fails_instead_of_inventing_a_unit() -> None:
    gpu = fake_gpu()
    gpu.cache_geometry = Model(l1=260.0)  # L1 hits cost what L2 hits do: no knee to see
    measured = _run(gpu, runnable={"cache_geometry.sector.l1"})
    outcome = measured["cache_geometry.sector.l1"].outcome
    assert outcome.status == "failed" and "does not rise with the stride" in outcome.detail


def test_a_width_probe_needs_its_8_byte_partner_kernel_to_hold_its_contract() -> None:
    gpu = fake_gpu()
    measured = _run(gpu, runnable={"cache_geometry.width.l1", "cache_geometry.width.l2"} | {"cache_geometry.sector.l2"})
    assert measured["cache_geometry.width.l1"].outcome.status == "skipped"
    assert "cache_geometry.sector.l1" in measured["cache_geometry.width.l1"].outcome.detail
    assert measured["cache_geometry.width.l2"].outcome.status == "ok"
    assert set(PARTNERS.values()) <= set(PROBES)


def test_probes_whose_contract_failed_are_not_launched() -> None:
    gpu = fake_gpu()
    measured = _run(gpu, runnable={"cache_geometry.constant.latency"})
    assert set(measured) == {"cache_geometry.constant.latency"}
    assert set(gpu.launches) - {"gp_sm_clock"} == {"gp_cg_const_chase"}  # the clock is read around every probe


def test_the_l1_kernels_ask_for_the_largest_l1() -> None:
    gpu = fake_gpu()
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
    facts = _facts(_run(fake_gpu(noise=0.001)))
    checks = [result for check in INVARIANTS for result in check(facts, fake_gpu().device())]
    assert {name for name, _, _ in checks} == {
        "cache.l1_sector_divides_line", "constant.hit_below_miss", "tlb.l1_reach_below_l2_reach"
    }  # fmt: skip
    assert all(ok for _, ok, *_ in checks), checks
    broken = {"latency.constant.hit": _fact("latency.constant.hit", 120.0, "cycle"),
              "latency.constant.miss": _fact("latency.constant.miss", 100.0, "cycle"),
              "cache.l1.sector_bytes": _fact("cache.l1.sector_bytes", 48.0, "byte"),
              "cache.l1.line_bytes": _fact("cache.l1.line_bytes", 128.0, "byte")}  # fmt: skip
    results = {name: ok for check in INVARIANTS for name, ok, *_ in check(broken, fake_gpu().device())}
    assert results == {"cache.l1_sector_divides_line": False, "constant.hit_below_miss": False}
    assert SECTIONS[0].fact_prefixes == ("cache.", "tlb.", "constant.")
