"""The roofline family's host side on the simulated GPU: the FP32 sweep recovers the simulated ceilings, a wrong
result and an impossible rate or bandwidth fail their probe, the analysis reports a ceiling only where the sweep
reached its regime, the invariant against the bandwidth family, the plot and the sheet, the committed PTX and its
contracts on every arch, and the time the plan needs."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from gpuprobe.core.arch import SUPPORTED_ARCHS, parse_arch
from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Fact, Results
from gpuprobe.families import roofline
from gpuprobe.families.roofline import fp32, fp32_ptx, report, simulated, sweep, tensor
from gpuprobe.families.roofline.sweep import Point, Sweep
from gpuprobe.families.sampling import Stopping
from gpuprobe.kernels.check import check_probe
from gpuprobe.kernels.cubin import build_ptx
from gpuprobe.kernels.registry import PTX_DIR, all_probes, find_probe
from gpuprobe.measure.plan import family_seconds
from gpuprobe.output.report import render_markdown
from gpuprobe.simulated.gpu import measure_family, simulated_gpu, suite_options
from tests.helpers.checked import contract_results
from tests.helpers.devices import H200

FAST = roofline.Settings(sampling=Stopping(2, 2, 0.02, 0.5), tensor=simulated.FAST_TENSOR)
SMS = 4
FP32_PROBES = {name for name in roofline.PROBES if name.startswith("roofline.fp32.")}
BUDGET_S = 8.0  # the family's share of the device check on an H200: the FP32 sweeps about 2 s, the tensor ones 4.5 s
SM_90A = {p.name for p in all_probes() if p.family == "roofline" and p.supports(parse_arch("sm_90a"))}


def _gpu(**options):
    return simulated_gpu(**suite_options(sm_count=SMS, **options))  # the suite's memory: the tensor sweeps' DRAM


def _run(gpu, runnable=None, state=None):
    names = FP32_PROBES if runnable is None else runnable
    return measure_family(roofline, gpu, names, FAST, state)


def _facts(measured) -> dict[str, Fact]:
    return {f.id: f for m in measured.values() for f in m.facts}


@pytest.fixture(scope="module")
def measured():
    """One run of every probe the simulated part (an sm_90a) runs, FP32 and tensor, on a quiet part (the tests
    below read it, none changes it)."""
    return _run(_gpu(noise=0.0), SM_90A, state={"datasheet": {"fp32_tflops": 66.9, "fp32_clock_mhz": 1980.0,
                                                      "dram_gbps": 4800.0}})  # fmt: skip


def test_the_probe_order_is_the_declared_family() -> None:
    assert set(roofline.PROBES) == {p.name for p in all_probes() if p.family == "roofline"}
    assert [name for name in roofline.PROBES if name in FP32_PROBES] == roofline.PROBES[: len(FP32_PROBES)]
    assert len(FP32_PROBES) == 3 * len(fp32_ptx.FFMAS_PER_LOAD)
    assert roofline.PROBES[len(FP32_PROBES)] == tensor.FILL_PROBE  # the tensor sweeps' region, filled before them


def test_the_committed_ptx_is_what_the_generator_writes() -> None:
    assert (PTX_DIR / "roofline" / "fp32.ptx").read_text() == fp32_ptx.text()


def test_the_simulated_ceilings_are_recovered(measured) -> None:
    assert {n: m.outcome.status for n, m in measured.items()} == dict.fromkeys(SM_90A, "ok")
    facts = _facts(measured)
    gpu = _gpu()
    compute = simulated.DEFAULTS["roof_fp32_share"] * 256 * SMS * gpu.mhz * 1e6 / 1e12
    bandwidths = {"dram": simulated.DEFAULTS["roof_dram_gbps"] * SMS / 132, "l2": simulated.DEFAULTS["roof_l2_gbps"]
                  * SMS / 132, "shared": simulated.DEFAULTS["roof_shared_bpc"] * SMS * gpu.mhz / 1e3}  # fmt: skip
    for level, gbps in bandwidths.items():
        stem = f"roofline.fp32.{level}"
        assert facts[f"{stem}.bandwidth"].value == pytest.approx(gbps, rel=0.01), level
        assert facts[f"{stem}.compute"].value == pytest.approx(compute, rel=0.01), level
        assert facts[f"{stem}.ridge"].value == pytest.approx(compute * 1e3 / gbps, rel=0.02), level
        assert facts[f"{stem}.sm_clock"].value == pytest.approx(gpu.mhz, rel=0.001), level
    assert "memory ceiling at" in measured["roofline.fp32.dram.ffma512"].outcome.detail


def test_every_point_is_in_its_probes_series_with_the_datasheet_beside_it(measured) -> None:
    row = measured["roofline.fp32.dram.ffma64"].outcome.series[sweep.SERIES]
    assert row["type"] == ["fp32"] and row["level"] == ["dram"] and row["intensity"] == [8.0]
    assert row["datasheet_gbps"] == [4800.0]
    assert row["datasheet_tflops"][0] == pytest.approx(66.9 * row["mhz"][0] / 1980.0)
    assert row["gbps"][0] == pytest.approx(row["tflops"][0] * 1e3 / 8.0)
    assert measured["roofline.fp32.l2.ffma64"].outcome.series[sweep.SERIES]["datasheet_gbps"] == [0.0]


def test_a_wrong_sum_fails_every_probe() -> None:
    measured = _run(_gpu(family_options={"roof_corrupt": True}))
    for name, m in measured.items():
        assert m.outcome.status == "failed" and m.facts == [], name
        assert "threads' sums are wrong (thread 0" in m.outcome.detail, name


def test_a_rate_above_the_per_clock_peak_fails_the_probe() -> None:
    measured = _run(_gpu(family_options={"roof_speedup": 3.0}), runnable={"roofline.fp32.shared.ffma512"})
    outcome = measured["roofline.fp32.shared.ffma512"].outcome
    assert outcome.status == "failed" and "above the peak at that clock" in outcome.detail


def test_bytes_beyond_the_dram_peak_fail_the_probe() -> None:
    """The simulated DRAM moves 109 GB/s on 4 SMs: a datasheet peak of 50 GB/s makes that impossible."""
    measured = _run(_gpu(), runnable={"roofline.fp32.dram.ffma4"}, state={"datasheet": {"dram_gbps": 50.0}})
    outcome = measured["roofline.fp32.dram.ffma4"].outcome
    assert outcome.status == "failed" and "above what the level moves at most, 50 GB/s (datasheet)" in outcome.detail


def test_bytes_beyond_what_an_sm_takes_in_fail_the_probe() -> None:
    """Shared memory feeds an SM 128 bytes per clock at most: a simulated 200 is impossible."""
    measured = _run(_gpu(family_options={"roof_shared_bpc": 200.0}), runnable={"roofline.fp32.shared.ffma4"})
    outcome = measured["roofline.fp32.shared.ffma4"].outcome
    assert outcome.status == "failed" and "128 B/clk/SM x 4 SMs" in outcome.detail


def _point(intensity: float, tflops: float) -> Point:
    return Point(f"p{intensity:g}", intensity, (tflops, tflops * 1.001), (1800.0, 1801.0))


def _sweep() -> Sweep:
    return Sweep("fp32", "dram", ("a", "b"), lambda request, probe: _point(1.0, 1.0), lambda request: 256.0)


def test_the_ceilings_are_the_best_bytes_and_the_best_rate() -> None:
    points = [_point(0.5, 0.9), _point(2.0, 4.0), _point(8.0, 10.0), _point(32.0, 11.0)]
    facts, note = sweep.sweep_facts(_sweep(), points, "b")
    values = {f.id: f.value for f in facts}
    assert values["roofline.fp32.dram.bandwidth"] == pytest.approx(2000.5, rel=1e-3)  # 4 TFLOP/s at 2 flop/B
    assert values["roofline.fp32.dram.compute"] == pytest.approx(11.0055)
    assert values["roofline.fp32.dram.ridge"] == pytest.approx(11.0055e3 / 2000.5, rel=1e-3)
    assert values["roofline.fp32.dram.sm_clock"] == pytest.approx(1800.5)
    assert "memory ceiling at 2 flop/B" in note and "compute at 32 flop/B" in note


def test_a_ceiling_the_sweep_did_not_reach_is_unmeasured_with_the_reason() -> None:
    memory_only = [_point(0.5, 1.0), _point(1.0, 2.0), _point(2.0, 4.0)]  # bytes/s never fell
    facts = {f.id: f for f in sweep.sweep_facts(_sweep(), memory_only, "b")[0]}
    assert facts["roofline.fp32.dram.compute"].value is None
    assert "no point was compute-bound" in facts["roofline.fp32.dram.compute"].detail
    assert facts["roofline.fp32.dram.bandwidth"].value is not None and facts["roofline.fp32.dram.ridge"].value is None
    compute_only = [_point(8.0, 10.0), _point(16.0, 10.1)]  # the rate never fell
    facts = {f.id: f for f in sweep.sweep_facts(_sweep(), compute_only, "b")[0]}
    assert "no point was memory-bound" in facts["roofline.fp32.dram.bandwidth"].detail
    assert facts["roofline.fp32.dram.compute"].value is not None


def test_the_point_past_the_knee_winning_the_plateau_by_noise_does_not_unmeasure_the_ceiling() -> None:
    """The demo's bf16 DRAM sweep: at 410 flop/B the rate is already the ceiling's, its bytes/s still 81 % of the
    best, and the timer made it the best rate by 0.2 %; the point at 819 flop/B, on the same plateau, is
    compute-bound, so the ceiling is."""
    points = [_point(51.2, 8.4), _point(102.4, 16.8), _point(204.8, 33.5), _point(409.6, 54.6), _point(819.2, 54.5)]
    facts = {f.id: f for f in sweep.sweep_facts(_sweep(), points, "b")[0]}
    assert facts["roofline.fp32.dram.compute"].value == pytest.approx(54.6 * 1.0005)
    assert facts["roofline.fp32.dram.ridge"].value is not None
    no_plateau = [*points[:3], _point(409.6, 54.6), _point(819.2, 50.0)]  # the last point 8 % under: off it
    facts = {f.id: f for f in sweep.sweep_facts(_sweep(), no_plateau, "b")[0]}
    assert "no point was compute-bound" in facts["roofline.fp32.dram.compute"].detail


def test_the_host_predicts_what_the_kernel_semantics_give() -> None:
    """The host's per-thread sums (reshaped words) are the simulation's (address by address)."""
    words = fp32.source_words(3 * 2 * fp32_ptx.ITERATION_BYTES // 4)
    shape = fp32.Shape(blocks=3, iters=2)
    gpu = _gpu()
    src = gpu.upload(words.astype(np.float32))
    assert np.array_equal(fp32.thread_sums(words, shape), simulated._thread_sums(src, 3, 2))
    assert fp32.predicted(np.array([5]), passes=3, ffmas=16)[0] == 28 + 3 * 4 * 5
    with pytest.raises(ProbeFailure, match="past what f32 holds exactly"):
        fp32.predicted(np.array([2**20]), passes=10, ffmas=512)


def test_a_launch_lasts_the_least_the_clock_needs_at_the_fastest_the_level_could_go() -> None:
    shape = fp32.Shape(blocks=132 * 8, iters=1)
    for level, gbps in (("dram", 4800.0), ("shared", None)):
        for ffmas in fp32_ptx.FFMAS_PER_LOAD:
            passes = fp32.passes_for(level, shape, ffmas, H200, gbps, 0.25)
            fastest = max(shape.footprint * passes / ((gbps or 128 * 132 * 1.98) * 1e9),
                          shape.footprint * passes / 16 * 2 * ffmas / (256 * 132 * 1980e6))  # fmt: skip
            assert fastest >= 0.25e-3, (level, ffmas)


def test_a_block_too_short_to_read_the_clock_fails_the_probe() -> None:
    records = np.array([[1000, 500, 0], [1000, 500, 1]], dtype=np.uint64)
    with pytest.raises(ProbeFailure, match="too short to read the SM clock"):
        fp32.block_clock("k", records, 100_000.0)
    long = np.array([[180_000, 100_000, 0], [175_000, 100_000, 1], [10, 5, 2]], dtype=np.uint64)
    assert fp32.block_clock("k", long, 100_000.0) == pytest.approx(1775.0)


def _gbps(fact_id: str, value: float, unit: str = "GB/s") -> Fact:
    return Fact(fact_id, value, unit, (value * 0.99, value * 1.01))


def test_the_l2_and_shared_ceilings_are_held_to_the_bandwidth_family() -> None:
    facts = {f.id: f for f in (
        _gbps("roofline.fp32.l2.bandwidth", 9000.0), _gbps("bandwidth.l2_read.v16", 9500.0),
        _gbps("roofline.fp32.shared.bandwidth", 30000.0), _gbps("bandwidth.shared_read.v16", 120.0, "byte/clk/SM"),
        _gbps("roofline.fp32.shared.sm_clock", 1980.0, "MHz"), _gbps("roofline.fp32.dram.bandwidth", 3700.0),
    )}  # fmt: skip
    checks = report.level_checks(facts, H200)
    assert [c.name for c in checks] == ["roofline.fp32.l2_within_bandwidth_stream",
                                        "roofline.fp32.shared_within_bandwidth_stream"]  # fmt: skip
    assert all(c.ok and c.physics for c in checks)
    facts["roofline.fp32.shared.bandwidth"] = _gbps("roofline.fp32.shared.bandwidth", 40000.0)  # 120 x 132 x 1.98 GHz
    failed = report.level_checks(facts, H200)[1]  # is 31.4 TB/s: 40 is beyond 1.1 x its CI
    assert not failed.ok and "roofline.fp32.shared.sm_clock" in failed.facts
    del facts["bandwidth.l2_read.v16"]
    assert [c.name for c in report.level_checks(facts, H200)] == ["roofline.fp32.shared_within_bandwidth_stream"]


def _results(measured) -> Results:
    results = Results(_gpu().device())
    results.facts = list(_facts(measured).values())
    results.probes = {name: m.outcome for name, m in measured.items()}
    return results


def test_the_plot_draws_each_level_and_nothing_without_a_sweep(measured) -> None:
    (section,) = report.SECTIONS
    assert section.plot.png(_results(measured), 40).startswith(b"\x89PNG")
    points = report.sweep_points(_results(measured))
    assert set(points) == {"fp32", *(t for t, _ in tensor.TENSOR_SWEEPS["sm_90a"])}  # the simulated part's
    assert all(set(points[t]) == set(sweep.LEVELS) for t in points)
    assert [p["intensity"] for p in points["fp32"]["l2"]] == [fp32.intensity(f) for f in fp32_ptx.FFMAS_PER_LOAD]
    assert section.plot.png(Results(_gpu().device()), 40) is None


def test_the_sheet_holds_the_roofline_section_with_every_fact(measured) -> None:
    text = render_markdown(_results(measured), {"roofline": "roofline.png"}, sections=report.SECTIONS)
    assert "### Measured roofline" in text and "](roofline.png)" in text
    rows = [re.escape(row).replace(r"\*", "[^.]+") for row in re.findall(r"^\| `(roofline\.[^`]+)` \|", text, re.M)]
    for fact_id in _facts(measured):  # every fact on a row of its own or of its group (by type, level or point)
        assert any(re.fullmatch(row, fact_id) for row in rows), fact_id
    for level in sweep.LEVELS:
        assert f"| `roofline.fp32.{level}.*.rate` | ffma4 " in text, level


@pytest.mark.parametrize("change", [{"short_launches": 3}, {"min_launch_ms": 0.0}, {"l2_fraction": 1.5},
                                    {"dram_l2_multiple": 1.0}])  # fmt: skip
def test_settings_that_mean_nothing_are_refused(change: dict) -> None:
    with pytest.raises(ValueError, match="Settings"):
        dataclasses.replace(roofline.Settings(), **change)


def test_the_fp32_contracts_hold_on_every_supported_arch() -> None:
    results = contract_results([p for p in all_probes() if p.name in FP32_PROBES], SUPPORTED_ARCHS)
    assert len(results) == len(FP32_PROBES) * len(SUPPORTED_ARCHS)
    assert all(r.status == "ok" for r in results), [(r.probe, r.arch, r.detail) for r in results if r.status != "ok"]


def test_one_ffma_less_breaks_the_contract(tmp_path: Path) -> None:
    """The host divides by the FFMAs the contract counts: a loop with one fewer is not the probe."""
    text = (PTX_DIR / "roofline" / "fp32.ptx").read_text()
    start = text.index(".entry gp_roofline_fp32_global_ffma16(")
    line = "\tfma.rn.f32 %a7, %f15, %c, %a7;\n"
    cut = text.index(line, start)
    path = tmp_path / "fp32_mutated.ptx"
    path.write_text(text[:cut] + text[cut + len(line) :])
    result = check_probe(find_probe("roofline.fp32.dram.ffma16"), build_ptx([path], parse_arch("sm_90a")))
    assert result.status == "violated" and "FFMA" in result.detail


def test_the_planned_work_fits_the_time_budget() -> None:
    """Worst case on an H200 (``roofline.plan``): every sample, every launch at the planned shares of the limits."""
    plan = roofline.plan(roofline.Settings(), H200)
    assert plan.probes == len(SM_90A)  # an H200 runs the FP32 sweeps, the fill and wgmma's
    total = family_seconds(plan, child_start=False)
    assert total < BUDGET_S, f"the roofline family could take {total:.2f} s"
    greedy = roofline.plan(dataclasses.replace(roofline.Settings(), min_launch_ms=20.0), H200)
    assert family_seconds(greedy, child_start=False) > BUDGET_S  # the bound counts the kernels: it can fail
    fp32_only = roofline.plan(roofline.Settings(), dataclasses.replace(H200, cc="7.5"))
    assert fp32_only.probes == len(FP32_PROBES)  # a part with no tensor sweep plans none
