"""The loaded-latency family's host side: the run against the simulated GPU and its queueing model, every check a
launch is held to, the facts read from a sweep, the invariants, the plot, the contracts and the time plan."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from gpuprobe.core.arch import SUPPORTED_ARCHS, parse_arch
from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Fact, ProbeOutcome, Results
from gpuprobe.families import loaded_latency as ll
from gpuprobe.families.loaded_latency import report, simulated
from gpuprobe.families.loaded_latency.plot import loaded_png
from gpuprobe.kernels.check import check_probe
from gpuprobe.kernels.cubin import build_ptx
from gpuprobe.kernels.registry import PTX_DIR, all_probes, find_probe, unroll_of
from gpuprobe.measure.plan import family_seconds
from gpuprobe.simulated.gpu import measure_family, simulated_gpu
from tests.helpers.checked import contract_results
from tests.helpers.devices import H200

FAST = simulated.FAST_SETTINGS
MHZ = 1755.0


def _run(gpu=None, runnable=None, settings=FAST):
    gpu = gpu or simulated_gpu(sm_count=8, noise=0.0)
    return measure_family(ll, gpu, set(runnable or ll.PROBES), settings, state={"mhz": MHZ})


def _facts(measured) -> dict[str, Fact]:
    return {f.id: f for m in measured.values() for f in m.facts}


def test_the_probe_order_is_the_declared_family() -> None:
    assert set(ll.PROBES) == {p.name for p in all_probes() if p.family == "loaded_latency"}
    assert all(unroll_of(find_probe(name).kernel) == 32 for name in ll.PROBES)


def test_the_simulated_curve_is_recovered() -> None:
    gpu = simulated_gpu(sm_count=8, noise=0.0)
    measured = _run(gpu)
    assert {n: m.outcome.status for n, m in measured.items()} == dict.fromkeys(ll.PROBES, "ok")
    facts = _facts(measured)
    for level, idle in (("l2", 260.0), ("dram", 700.0)):  # the simulated hierarchy's near L2 and DRAM
        prefix = f"latency.{level}.loaded"
        assert facts[f"{prefix}.idle"].value == pytest.approx(idle, rel=0.01)
        assert facts[f"{prefix}.idle"].converted["ns"] == pytest.approx(idle / MHZ * 1000, rel=0.01)
        assert facts[f"{prefix}.idle"].value < facts[f"{prefix}.p50"].value < facts[f"{prefix}.p90"].value
        assert facts[f"{prefix}.p90"].value <= simulated.CAP * idle
        ratio = facts[f"{prefix}.p90"].value / facts[f"{prefix}.idle"].value
        assert facts[f"{prefix}.p90_over_idle"].value == pytest.approx(ratio)
        top, _ = simulated.background(gpu, level, 7, 7 * 32, idle / MHZ * 1000)
        assert facts[f"{prefix}.max_bandwidth"].value == pytest.approx(top, rel=0.01)
        curve = measured[f"loaded_latency.{level}"].outcome.series["curve"]
        assert curve["warps_per_sm"] == list(FAST.warps) and curve["background_gbps"][0] == 0.0
        assert np.all(np.diff(curve["background_gbps"]) > 0) and np.all(np.diff(curve["latency_cycles"]) > 0)
    assert "nearest point above" in measured["loaded_latency.l2"].outcome.detail


def test_cycles_convert_to_ns_at_the_clock_the_chaser_read() -> None:
    gpu = simulated_gpu(sm_count=8, noise=0.0, mhz=1500.0)
    measured = measure_family(ll, gpu, {"loaded_latency.l2"}, FAST, state={"mhz": 9999.0})  # not the chase's
    idle = _facts(measured)["latency.l2.loaded.idle"]
    assert idle.converted["ns"] == pytest.approx(idle.value / 1500.0 * 1000.0, rel=1e-3)


def test_every_launch_streams_on_every_sm_but_the_chasers() -> None:
    gpu = simulated_gpu(sm_count=8, noise=0.0)
    _run(gpu, {"loaded_latency.l2"})
    launches = gpu.launches.count(ll.KERNEL)
    assert launches == 1 + len(FAST.warps) * FAST.sampling.max_repeats  # the warm lap, then every sample


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("sums", "streaming lanes summed words the buffer does not hold"),
        ("sm", "a streaming warp ran on the chaser's SM"),
        ("late", "the stream does not cover the chase window"),
        ("chase", "host predicted node"),
    ],
)
def test_a_launch_that_breaks_a_check_fails_the_probe(fault: str, message: str) -> None:
    gpu = simulated_gpu(sm_count=8, noise=0.0)
    if fault == "chase":
        gpu.corrupt_chase = True
    else:
        gpu.loaded_fault = fault
    measured = _run(gpu, {"loaded_latency.l2"})["loaded_latency.l2"]
    assert measured.outcome.status == "failed" and measured.facts == []
    assert message in measured.outcome.detail


def test_a_background_above_the_levels_ceiling_fails_the_probe() -> None:
    """The L2 ceiling is what the streaming SMs' L1s take in at the clock the run measured: told a 100 MHz clock,
    7 SMs take in 90 GB/s, and the simulated streams' 900 GB/s break it (timed windows too short to read the
    clock of their own, so the run's is used)."""
    gpu, short = simulated_gpu(sm_count=8, noise=0.0), dataclasses.replace(FAST, iterations=4)
    measured = measure_family(ll, gpu, {"loaded_latency.l2"}, short, state={"mhz": 100.0})["loaded_latency.l2"]
    assert measured.outcome.status == "failed"
    assert "above its ceiling 90 GB/s (128 bytes a clock per streaming SM)" in measured.outcome.detail


def _request_with(gpu, state):
    from gpuprobe.families.base import Request

    return Request(gpu, {}, gpu.device(), set(), None, state)


def test_the_dram_ceiling_is_the_theoretical_peak() -> None:
    gpu = simulated_gpu(sm_count=8)
    assert ll.level_ceiling("dram", _request_with(gpu, {}), 7, MHZ) is None  # no clock, bus or datasheet
    assert ll.level_ceiling("dram", _request_with(gpu, {"datasheet": {"dram_gbps": 100.0}}), 7, MHZ) == (
        100.0, "datasheet")  # fmt: skip
    measured = measure_family(ll, gpu, {"loaded_latency.dram"}, FAST, state={"datasheet": {"dram_gbps": 100.0}})
    assert measured["loaded_latency.dram"].outcome.status == "failed"
    assert "above its ceiling 100 GB/s (datasheet)" in measured["loaded_latency.dram"].outcome.detail


def _records(spans: list[tuple[int, int, int]], sm: int = 3, wrong: int = 0) -> np.ndarray:
    return np.array([[iterations, first, last, sm, wrong] for iterations, first, last in spans], dtype=np.uint64)


def test_the_background_is_the_sum_of_each_warps_rate() -> None:
    chaser = np.array([1000, 100, 1100, 0, 5], dtype=np.uint64)
    streams = _records([(500, 0, 2048), (1000, 90, 1114)])  # 500 GB/s and 2000 GB/s
    assert ll.background_gbps("k", chaser, streams) == pytest.approx(500.0 + 2000.0)
    with pytest.raises(ProbeFailure, match="1 warps started after it began, 0 ended"):
        ll.background_gbps("k", chaser, _records([(500, 101, 2048)]))
    with pytest.raises(ProbeFailure, match="0 warps started after it began, 1 ended"):
        ll.background_gbps("k", chaser, _records([(500, 0, 1099)]))
    with pytest.raises(ProbeFailure, match="chaser's SM 5"):
        ll.background_gbps("k", chaser, _records([(500, 0, 2048)], sm=5))
    with pytest.raises(ProbeFailure, match="2 streaming lanes"):
        ll.background_gbps("k", chaser, _records([(500, 0, 2048)], wrong=2))


def _point(warps: int, latency: float, gbps: float) -> ll.Point:
    return ll.Point(warps, [latency * k for k in (0.99, 1.0, 1.01)], [gbps * k for k in (0.99, 1.0, 1.01)])


SWEEP = [_point(0, 200.0, 0.0), _point(1, 205.0, 1000.0), _point(4, 230.0, 4000.0), _point(8, 300.0, 6000.0),
         _point(16, 420.0, 9200.0), _point(32, 520.0, 10000.0)]  # fmt: skip


def test_p50_and_p90_are_the_points_nearest_above_the_share_of_the_top() -> None:
    facts, note = ll.level_facts("l2", SWEEP, "loaded_latency.l2", 2000.0)
    by_id = {f.id: f for f in facts}
    assert by_id["latency.l2.loaded.idle"].value == 200.0
    assert by_id["latency.l2.loaded.p50"].value == 300.0  # 6000 is the least at or above 5000
    assert by_id["latency.l2.loaded.p90"].value == 420.0  # 9200 is the least at or above 9000
    assert by_id["latency.l2.loaded.max_bandwidth"].value == 10000.0
    assert by_id["latency.l2.loaded.max_bandwidth"].unit == "GB/s"
    ratio = by_id["latency.l2.loaded.p90_over_idle"]
    assert ratio.value == pytest.approx(2.1) and ratio.ci[0] < 2.1 < ratio.ci[1] and ratio.unit == "ratio"
    assert by_id["latency.l2.loaded.p90"].converted["ns"] == pytest.approx(210.0)
    assert "p50 from 8 warps/SM at 60%" in note and "p90 from 16 warps/SM at 92%" in note


def test_a_loaded_point_faster_than_idle_fails() -> None:
    ll.check_not_below_idle("l2", SWEEP)
    with pytest.raises(ProbeFailure, match=r"4 streaming warps per SM gave 150\.0 cycles"):
        ll.check_not_below_idle("l2", [*SWEEP[:2], _point(4, 150.0, 4000.0)])
    ll.check_not_below_idle("l2", [SWEEP[0], _point(1, 197.5, 1000.0)])  # within the CIs and one cycle


def test_the_footprints_fit_their_levels() -> None:
    l2 = H200.l2_bytes
    near = ll.footprints("l2", l2, ll.Settings())
    assert near.warm and near.chase + near.stream <= l2 / 2  # within a near half of a split L2
    assert near.stream & (near.stream - 1) == 0
    far = ll.footprints("dram", l2, ll.Settings())
    assert not far.warm and far.stream >= 4 * l2 and far.stream & (far.stream - 1) == 0 and far.chase >= 2 * l2
    ll.check_no_revisit(far.chase // 128, ll.Settings())
    with pytest.raises(ProbeFailure, match="would revisit"):
        ll.check_no_revisit(far.chase // 128, dataclasses.replace(ll.Settings(), iterations=4096))


@pytest.mark.parametrize("change", [{"warps": (1, 2)}, {"warps": (0,)}, {"warps": (0, 8, 4)}, {"warps": (0, 64)},
                                    {"iterations": 0}, {"fill_byte": 256}])  # fmt: skip
def test_settings_that_mean_nothing_are_refused(change: dict) -> None:
    with pytest.raises(ValueError, match="Settings"):
        dataclasses.replace(ll.Settings(), **change)


def _fact(fact_id: str, value: float, unit: str = "cycle", spread: float = 0.01) -> Fact:
    return Fact(fact_id, value, unit, (value * (1 - spread), value * (1 + spread)))


def test_the_invariants_hold_the_loaded_facts_to_the_others() -> None:
    device = simulated_gpu().device()
    facts = {f.id: f for f in [
        _fact("latency.l2.loaded.idle", 260.0), _fact("latency.l2.loaded.p90", 400.0), _fact("latency.l2", 250.0),
        _fact("latency.dram.loaded.idle", 700.0), _fact("latency.dram.loaded.p90", 650.0),
        _fact("latency.dram", 1000.0), _fact("latency.l2.loaded.max_bandwidth", 9000.0, "GB/s"),
        _fact("bandwidth.l2_read.v16", 9100.0, "GB/s"), _fact("latency.dram.loaded.max_bandwidth", 4000.0, "GB/s"),
        _fact("bandwidth.dram_read.v16", 3000.0, "GB/s"), _fact("bandwidth.dram_theoretical", 4800.0, "GB/s"),
    ]}  # fmt: skip
    checks = {c.name: c for check in report.INVARIANTS for c in check(facts, device)}
    assert checks["loaded_latency.l2.p90_not_below_idle"].ok
    assert not checks["loaded_latency.dram.p90_not_below_idle"].ok
    assert checks["loaded_latency.l2.background_within_bandwidth"].ok
    assert not checks["loaded_latency.dram.background_within_bandwidth"].ok  # 4000 > 3000 x 1.05
    peak = checks["loaded_latency.dram.background_within_peak"]
    assert peak.ok and peak.physics
    assert checks["loaded_latency.l2.idle_matches_unloaded"].ok
    assert not checks["loaded_latency.dram.idle_matches_unloaded"].ok  # 30 % under the memory family's plateau
    assert report.p90_not_below_idle({}, device) == []  # nothing measured: nothing checked


def test_the_plot_draws_one_line_per_level() -> None:
    assert loaded_png(Results(H200), 40) is None
    series = ll.level_series(SWEEP, 2000.0)
    results = Results(H200, probes={name: ProbeOutcome("ok", series=series) for name in ll.PROBES})
    assert loaded_png(results, 40).startswith(b"\x89PNG")
    assert report.SECTIONS[0].plot.key == "loaded_latency"


def test_the_contracts_hold_on_every_arch() -> None:
    results = contract_results([p for p in all_probes() if p.family == "loaded_latency"], SUPPORTED_ARCHS)
    assert results and all(r.status == "ok" for r in results), [(r.probe, r.arch, r.detail) for r in results]


@pytest.mark.parametrize(
    ("old", "new", "rule"),
    [
        (
            "\tld.global.cg.u64 %rd20, [%rd20];\n\tsub.u32 %r41",
            "\tld.global.ca.u64 %rd20, [%rd20];\n\tsub.u32 %r41",
            "count LDG\\.E\\.64\\.STRONG\\.GPU in timed_loop",
        ),
        (
            "ld.global.cg.v4.u32 {%r28, %r29, %r30, %r31}",
            "ld.global.ca.v4.u32 {%r28, %r29, %r30, %r31}",
            "count LDG\\.E\\.128\\.STRONG\\.GPU in kernel",
        ),
    ],
    ids=["chase-through-l1", "stream-through-l1"],
)
def test_a_load_that_may_hit_the_l1_breaks_the_contract(tmp_path: Path, old: str, new: str, rule: str) -> None:
    """The level under test must serve every load: an L1-cached chase step or stream load is refused."""
    text = (PTX_DIR / "loaded_latency" / "loaded_latency.ptx").read_text()
    assert text.count(old) == 1, old
    path = tmp_path / "loaded_latency_mutated.ptx"
    path.write_text(text.replace(old, new))
    result = check_probe(find_probe("loaded_latency.l2"), build_ptx([path], parse_arch("sm_90a")))
    assert result.status == "violated" and rule in result.detail, result.detail


def test_the_plan_bounds_the_run_and_stays_cheap() -> None:
    plan = ll.plan(ll.Settings(), H200)
    assert plan.probes == len(ll.PROBES)
    total = family_seconds(plan, child_start=False)
    assert total < 2.0, f"the loaded-latency family could take {total:.2f} s on an H200"
    launches = 2 * (1 + len(ll.Settings().warps) * ll.Settings().sampling.max_repeats)  # both levels, warm lap
    assert plan.launches >= 3 * launches
    greedy = ll.plan(dataclasses.replace(ll.Settings(), iterations=20_000), H200)
    assert family_seconds(greedy, child_start=False) > 2.0  # the bound counts the chase: it can fail
