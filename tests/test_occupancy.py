"""Bytes in flight (gpuprobe.families.bandwidth.occupancy): the DRAM and L2 occupancy sweeps on the simulated
GPU, their facts, guards, plan and plot."""

from __future__ import annotations

import dataclasses

import pytest

from gpuprobe.core.results import Fact, Results
from gpuprobe.families import bandwidth as bw
from gpuprobe.families.bandwidth import occupancy
from gpuprobe.families.bandwidth.report import occupancy_png
from gpuprobe.families.bandwidth.simulated import FAST_SETTINGS
from gpuprobe.families.planning import dram_peak_gbps
from gpuprobe.kernels.registry import find_probe
from gpuprobe.simulated.gpu import MIB, measure_family, simulated_gpu
from tests.helpers.devices import H100_SXM

KIB = 1024
PROBES = list(occupancy.PROBES.values())


def _measured(**options: object) -> dict:
    """Both sweeps on a 4-SM simulated part whose DRAM saturates at 32 KiB in flight per SM and L2 at 12 KiB."""
    gpu = simulated_gpu(sm_count=4, l2_bytes=MIB)
    for name, value in {"bw_inflight_bytes": 32 * KIB, "bw_l2_inflight_bytes": 12 * KIB, **options}.items():
        setattr(gpu, name, value)
    return measure_family(bw, gpu, set(PROBES), FAST_SETTINGS, {"datasheet": {"dram_gbps": 4800.0}})


def _facts(measured: dict) -> dict[str, Fact]:
    return {f.id: f for m in measured.values() for f in m.facts}


def _checks(facts: dict[str, Fact]) -> dict:
    return {c.name: c for invariant in occupancy.INVARIANTS for c in invariant(facts, None)}


def test_each_thread_keeps_the_kernels_declared_loads_in_flight() -> None:
    assert occupancy.LOADS == 4 and occupancy.THREAD_BYTES == 16
    for probe in PROBES:
        assert find_probe(probe).kernel == occupancy.KERNEL and find_probe(probe).unroll == occupancy.LOADS


def test_both_levels_give_the_bytes_in_flight_at_50_and_90_percent_the_warps_and_littles_law() -> None:
    """The simulated levels are linear in bytes in flight up to where they saturate: 50 % of DRAM's best from
    16 KiB per SM, 90 % from 32 KiB; the L2's (12 KiB) 50 % from 8 KiB, 90 % from 16 KiB (the sweep's doubling
    steps); Little's law from the stream's unloaded latency gives each level's saturating bytes."""
    measured = _measured()
    assert {name: m.outcome.status for name, m in measured.items()} == dict.fromkeys(PROBES, "ok")
    facts = _facts(measured)
    expected = {"dram": (16 * KIB, 32 * KIB, 32 * KIB), "l2": (8 * KIB, 16 * KIB, 12 * KIB)}
    for level, (p50, p90, little) in expected.items():
        assert facts[f"bandwidth.{level}.bytes_in_flight_per_sm.p50"].value == p50
        assert facts[f"bandwidth.{level}.bytes_in_flight_per_sm.p90"].value == p90
        assert facts[f"bandwidth.{level}.bytes_in_flight_per_sm.p90"].ci == (p90 / 2, p90)  # the point below missed
        assert facts[f"bandwidth.{level}.warps_per_sm.p90"].value == p90 / occupancy.THREAD_BYTES / 32
        assert facts[f"bandwidth.{level}.little_bytes_per_sm"].value == pytest.approx(little, rel=0.02)
        assert facts[f"bandwidth.{level}.bytes_in_flight_per_sm.p90"].unit == "byte"
        columns = measured[occupancy.PROBES[level]].outcome.series["occupancy"]
        assert columns["bytes_in_flight_per_sm"] == [t * 16 for t in columns["threads_per_sm"]]
    assert facts["bandwidth.dram_read_saturation.v4"].value == 2048  # what the DRAM sweep always gave
    assert facts["bandwidth.dram_read_best.v4"].value == pytest.approx(3000.0, rel=0.02)
    assert {name: check.ok for name, check in _checks(facts).items()} == {
        "bandwidth.dram_in_flight_ordered": True,
        "bandwidth.l2_in_flight_ordered": True,
        "bandwidth.dram_in_flight_matches_little": True,
        "bandwidth.l2_in_flight_matches_little": True,
    }
    note = measured["bandwidth.l2.occupancy.v4"].outcome.detail
    assert "32 warps x 4 loads x 4 B = 16384 B in flight per SM" in note


def test_the_l2_sweep_takes_each_count_of_threads_per_sm_once_within_its_footprint() -> None:
    settings = bw.Settings()
    points = occupancy.l2_sweep_points(settings, lambda threads: 2048 // threads, 132, H100_SXM.l2_bytes)
    assert points == [(128, 1), (128, 2), (128, 4), (128, 8), (128, 16)]
    small = occupancy.l2_sweep_points(settings, lambda threads: 2048 // threads, 132, 4 * MIB)  # a T4-sized L2
    assert all(132 * t * b * occupancy.THREAD_BYTES <= settings.l2_fraction * 4 * MIB for t, b in small)


def test_the_l2_sweep_is_planned_point_by_point_and_cheaply() -> None:
    peak = dram_peak_gbps(H100_SXM.mem_clock_mhz, H100_SXM.mem_bus_bits, {})[0]
    work = occupancy.planned_work(H100_SXM, bw.Settings(), lambda kernel, threads: 2048 // threads, peak)
    assert [w.probe for w in work] == ["bandwidth.l2.occupancy.v4"] * 5 and {w.level for w in work} == {"l2"}
    assert sum(w.bytes for w in work) < 20e9  # a few ms at the L2's rate


def test_a_curve_that_breaks_littles_law_or_orders_its_shares_wrongly_is_refused() -> None:
    facts = _facts(_measured())
    p50 = facts["bandwidth.l2.bytes_in_flight_per_sm.p50"]
    swapped = dataclasses.replace(p50, value=64 * KIB)
    assert not _checks({**facts, p50.id: swapped})["bandwidth.l2_in_flight_ordered"].ok
    little = facts["bandwidth.dram.little_bytes_per_sm"]
    for off in (little.value * 20, little.value / 20):  # a latency twenty times longer or shorter than the curve's
        changed = {**facts, little.id: dataclasses.replace(little, value=off)}
        assert not _checks(changed)["bandwidth.dram_in_flight_matches_little"].ok


def test_the_bytes_in_flight_plot_shows_both_levels_and_the_dram_plot_still_draws() -> None:
    results = Results(H100_SXM)
    assert occupancy.in_flight_png(results) is None
    measured = _measured()
    for name, m in measured.items():
        results.probes[name] = m.outcome
    results.facts.extend(_facts(measured).values())
    png = occupancy.in_flight_png(results, dpi=50)
    assert png is not None and png.startswith(b"\x89PNG")
    dram = occupancy_png(results, dpi=50)  # the headline's dram_occupancy, from the same series
    assert dram is not None and dram.startswith(b"\x89PNG")
    results.probes.pop("bandwidth.l2.occupancy.v4")
    assert occupancy.in_flight_png(results, dpi=50) is not None


def test_the_new_facts_are_on_their_own_section_of_the_sheet() -> None:
    section = occupancy.SECTION
    for fact_id in _facts(_measured()):
        if fact_id.startswith(("bandwidth.dram.", "bandwidth.l2.")):
            assert fact_id.startswith(section.fact_prefixes), fact_id
    assert section.plot_key == "bytes_in_flight" and section in bw.FAMILY.sections
    assert "dram_occupancy" in {s.plot_key for s in bw.FAMILY.sections}


def test_the_dram_sweeps_best_is_still_held_to_the_peak() -> None:
    """A best above the DRAM's peak fails the DRAM sweep (a timing error), not the L2's."""
    measured = _measured(bw_dram_gbps=9000.0)
    outcome = measured["bandwidth.dram.occupancy.v4"].outcome
    assert outcome.status == "failed" and "wholly above" in outcome.detail
    assert measured["bandwidth.l2.occupancy.v4"].outcome.status == "ok"
