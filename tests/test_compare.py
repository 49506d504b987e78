"""``gpuprobe compare``: labels relative to the measured noise, warnings, tables, exit statuses.

Every run here is made up in the test from samples of known distributions (test data, never a
real measurement).
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import itertools
import json
import math
import random
import re
import statistics
from pathlib import Path
from statistics import NormalDist

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuprobe.cli.compare import add_commands
from gpuprobe.core.detection import FACT_ALPHA, RUN_TO_RUN_PCT
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.results import SCHEMA, SCHEMA_VERSION, Device, Fact, Results, save
from gpuprobe.fleet.compare import (
    HIGHER_IS_BETTER,
    LOWER_IS_BETTER,
    NO_DIRECTION,
    Comparison,
    Label,
    baseline_failure,
    baseline_message,
    compare,
    direction,
    render,
)
from gpuprobe.judge.analysis import median_ci

DEVICE = Device(
    name="Test GPU", cc="9.0", arch="sm_90", sm_count=132, l2_bytes=50 * 2**20,
    driver="570.86", cuda_runtime="12.8", toolkit="12.8", uuid="0" * 32, serial="1650000000001", hostname="node1",
)  # fmt: skip
HOST = {"hostname": "node1", "machine_id": "0123456789abcdef", "boot_id": "5e3c0000-0000-4000-8000-000000000001"}
CODE = {"version": "0.1.0", "commit": "c" * 40, "dirty": False}


def normal_samples(center: float, noise_pct: float, n: int, seed: int) -> list[float]:
    """Normal samples that are the same on every Python and NumPy version (``random.random`` is
    guaranteed reproducible for a seed; ``NormalDist.inv_cdf`` is a fixed formula)."""
    rng, dist = random.Random(seed), NormalDist(center, center * noise_pct / 100.0)
    return [dist.inv_cdf(1.0 - rng.random()) for _ in range(n)]  # 1 - [0, 1) avoids inv_cdf(0)


def measured(fact_id: str, center: float, noise_pct: float, n: int = 40, seed: int = 0, unit: str = "cycle") -> Fact:
    """A fact as a probe makes it: normal samples around ``center``, their median and its CI."""
    samples = normal_samples(center, noise_pct, n, seed)
    value, low, high = median_ci(samples)
    return Fact(fact_id, value, unit, (low, high), samples, probe="test")


def exact(fact_id: str, value: float, unit: str = "count") -> Fact:
    return Fact(fact_id, value, unit, probe="device")


def capacity(value: float, low: float, high: float) -> Fact:
    return Fact("capacity.l2", value, "byte", (low, high), [], probe="test")


def invariant(ok: bool, name: str = "latency_order.l1_below_l2") -> Fact:
    detail = (
        "latency.l1 = 30 cycle < latency.l2 = 250 cycle" if ok else "latency.l1 = 300 cycle ≥ latency.l2 = 250 cycle"
    )
    return Fact(f"invariant.{name}", 1.0 if ok else 0.0, "bool", verdict="pass" if ok else "fail", detail=detail)


def run(
    *facts: Fact,
    device: Device = DEVICE,
    mhz: float | None = 1755.0,
    partial: bool = False,
    host: dict[str, str] | None = None,
    code: dict[str, object] | None = None,
    stage: str = "full",
) -> Results:
    """A run of ``facts``; by default on one board, one host and one clean commit, so that nothing but the
    facts differs between two of them."""
    clocks = {} if mhz is None else {"sm_mhz_measured": mhz}
    return Results(device, list(facts), clocks=clocks, partial=partial, created="2025-01-01T00:00:00+00:00",
                   stage=stage, environment={"host": HOST if host is None else host},
                   build={"gpuprobe": CODE if code is None else code, "cubin_sha256": "d" * 64})  # fmt: skip


def labels(base: Results, new: Results, threshold_pct: float = 0.0) -> dict[str, str]:
    return {row.fact_id: str(row.label) for row in compare(base, new, threshold_pct).rows}


def a_full_run(seed: int = 0, latency_scale: float = 1.0, bandwidth_scale: float = 1.0) -> Results:
    return run(
        measured("latency.l1", 33.0 * latency_scale, 1.0, seed=seed),
        measured("latency.l2", 250.0 * latency_scale, 1.0, seed=seed + 1),
        measured("bandwidth.dram_read", 3.9e12 * bandwidth_scale, 1.0, seed=seed + 2, unit="byte/s"),
        measured("overhead.clock_read", 40.0, 2.0, n=15, seed=seed + 3),
        capacity(50 * 2**20, 48 * 2**20, 53 * 2**20),
        exact("device.sm_count", 132.0),
        exact("device.l2_bytes", 50.0 * 2**20, unit="byte"),
        invariant(True),
    )


# ---------------------------------------------------------------- labels ---------


def test_identical_runs_are_all_same() -> None:
    comparison = compare(a_full_run(), a_full_run())
    assert {row.label for row in comparison.rows} == {Label.SAME}
    assert comparison.worse() == [] and comparison.warnings == []
    assert comparison.failures(strict=True) == []


def test_two_unchanged_runs_with_fresh_noise_are_all_same() -> None:
    assert set(labels(a_full_run(seed=0), a_full_run(seed=100)).values()) == {"SAME"}


def test_a_latency_five_percent_slower_with_one_percent_noise_is_worse_and_the_reverse_better() -> None:
    base = run(measured("latency.l2", 250.0, 1.0, seed=1))
    slower = run(measured("latency.l2", 262.5, 1.0, seed=2))
    row = compare(base, slower).rows[0]
    assert row.label == Label.WORSE
    assert row.change_pct == pytest.approx(5.0, abs=1.0)
    assert "lower is better" in row.reason and "beyond the noise" in row.reason
    assert compare(slower, base).rows[0].label == Label.BETTER


def test_a_half_percent_shift_in_five_percent_noise_is_same() -> None:
    base = run(measured("latency.l2", 250.0, 5.0, seed=3))
    new = run(measured("latency.l2", 251.25, 5.0, seed=4))
    row = compare(base, new).rows[0]
    assert row.label == Label.SAME and "within the noise" in row.reason


def test_bandwidth_is_better_higher() -> None:
    base = run(measured("bandwidth.dram_read", 3.9e12, 1.0, seed=5, unit="byte/s"))
    faster = run(measured("bandwidth.dram_read", 3.9e12 * 1.05, 1.0, seed=6, unit="byte/s"))
    assert labels(base, faster) == {"bandwidth.dram_read": "BETTER"}
    assert labels(faster, base) == {"bandwidth.dram_read": "WORSE"}


def test_the_threshold_turns_a_small_significant_change_same() -> None:
    base = run(measured("latency.l2", 250.0, 0.2, seed=7))
    new = run(measured("latency.l2", 257.5, 0.2, seed=8))  # +3 %, far beyond 0.2 % noise
    assert labels(base, new) == {"latency.l2": "WORSE"}
    assert labels(base, new, threshold_pct=2.0) == {"latency.l2": "WORSE"}
    row = compare(base, new, threshold_pct=5.0).rows[0]
    assert row.label == Label.SAME and "under the 5 % threshold" in row.reason


def test_the_comparison_states_how_many_false_worse_an_unchanged_gpu_costs() -> None:
    facts = [(f"latency.f{i}", 100.0 + i) for i in range(50)]
    base = run(*(measured(fid, c, 2.0, n=20, seed=i) for i, (fid, c) in enumerate(facts)), exact("device.sm_count", 1))
    comparison = compare(base, base)
    assert comparison.tested == 50 and comparison.fact_alpha == FACT_ALPHA
    assert comparison.expected_false_worse() == pytest.approx(50 * FACT_ALPHA / 2)
    assert "p < 0.001" in comparison.method() and "0.025 false WORSE on average" in comparison.method()


def test_invariants_compare_by_verdict() -> None:
    assert labels(run(invariant(True)), run(invariant(False))) == {"invariant.latency_order.l1_below_l2": "WORSE"}
    assert labels(run(invariant(False)), run(invariant(True))) == {"invariant.latency_order.l1_below_l2": "BETTER"}
    assert labels(run(invariant(False)), run(invariant(False))) == {"invariant.latency_order.l1_below_l2": "SAME"}
    row = compare(run(invariant(True)), run(invariant(False))).rows[0]
    assert "held before, fails now" in row.reason and "300 cycle" in row.reason


def test_facts_without_samples_compare_by_their_intervals_or_exact_values() -> None:
    base = run(capacity(50e6, 48e6, 53e6), exact("device.sm_count", 132.0), Fact("latency.x", 10.0, "cycle"))
    same = run(capacity(51e6, 50e6, 55e6), exact("device.sm_count", 132.0), Fact("latency.x", 10.0, "cycle"))
    assert set(labels(base, same).values()) == {"SAME"}

    moved = run(capacity(40e6, 38e6, 42e6), exact("device.sm_count", 114.0), Fact("latency.x", 12.0, "cycle"))
    rows = {row.fact_id: row for row in compare(base, moved).rows}
    assert rows["capacity.l2"].label == Label.CHANGED and "no better or worse" in rows["capacity.l2"].reason
    assert rows["device.sm_count"].label == Label.CHANGED and "132 -> 114 count" in rows["device.sm_count"].reason
    assert rows["latency.x"].label == Label.UNKNOWN and "no noise estimate" in rows["latency.x"].reason


def test_a_latency_without_samples_but_with_disjoint_intervals_has_a_direction() -> None:
    base = run(Fact("latency.l2", 250.0, "cycle", (248.0, 252.0)))
    new = run(Fact("latency.l2", 270.0, "cycle", (266.0, 274.0)))
    assert labels(base, new) == {"latency.l2": "WORSE"}
    assert labels(new, base) == {"latency.l2": "BETTER"}


def test_samples_on_one_side_only_fall_back_on_the_stored_intervals() -> None:
    base = run(measured("latency.l2", 250.0, 1.0, seed=9))
    new_fact = measured("latency.l2", 250.0, 1.0, seed=10)
    new_fact.samples = []
    row = compare(base, run(new_fact)).rows[0]
    assert row.label == Label.SAME and "stored intervals" in row.reason


def test_three_samples_a_side_decide_a_change_far_beyond_their_noise() -> None:
    base = run(Fact("device.sm_clock", 1755.0, "MHz", (1750.0, 1760.0), [1750.0, 1755.0, 1760.0]))
    new = run(Fact("device.sm_clock", 1985.0, "MHz", (1980.0, 1990.0), [1980.0, 1985.0, 1990.0]))
    row = compare(base, new).rows[0]
    assert row.label == Label.BETTER and "beyond the noise" in row.reason and "n=3/3" in row.reason
    overlapping = run(Fact("device.sm_clock", 1757.0, "MHz", (1752.0, 1770.0), [1752.0, 1757.0, 1770.0]))
    assert labels(base, overlapping) == {"device.sm_clock": "SAME"}


def test_a_five_percent_change_the_noise_explains_is_unknown_and_says_what_would_tell() -> None:
    base = run(Fact("latency.l2", 100.0, "cycle", None, [99.0, 101.0]))
    new = run(Fact("latency.l2", 105.0, "cycle", None, [104.0, 106.0]))
    row = compare(base, new).rows[0]
    assert row.label == Label.UNKNOWN and "cannot tell: a change of 5 % or more" in row.reason
    assert "not 5 %: too few samples (" in row.reason and "a side would do)" in row.reason
    assert row.detects_pct is not None and row.detects_pct > 15.0
    noisy = compare(base, run(Fact("latency.l2", 130.0, "cycle", None, [110.0, 150.0]))).rows[0]
    assert noisy.label == Label.UNKNOWN and "a noisy quantity (over 50 a side)" in noisy.reason
    small = compare(base, run(Fact("latency.l2", 103.0, "cycle", None, [102.0, 104.0]))).rows[0]
    assert small.label == Label.SAME and "within the noise" in small.reason  # disjoint ranges alone: no evidence
    assert "not 5 %: too few samples" in small.reason


def test_a_single_sample_has_no_noise_to_judge_by() -> None:
    base = run(Fact("latency.l2", 100.0, "cycle", None, [100.0]))
    assert labels(base, run(Fact("latency.l2", 140.0, "cycle", None, [140.0, 141.0]))) == {"latency.l2": "UNKNOWN"}
    assert labels(base, run(Fact("latency.l2", 100.0, "cycle", None, [100.0]))) == {"latency.l2": "SAME"}
    row = compare(base, run(Fact("latency.l2", 140.0, "cycle", None, [140.0]))).rows[0]
    assert "too few samples to tell" in row.reason and "1/1" in row.reason


def _scaled(fact: Fact, factor: float) -> Fact:
    """The issue's copy: value, interval and every sample scaled."""
    ci = None if fact.ci is None else (fact.ci[0] * factor, fact.ci[1] * factor)
    return dataclasses.replace(fact, value=fact.value * factor, ci=ci, samples=[s * factor for s in fact.samples])


@pytest.mark.parametrize(("n", "noise_pct"), [(2, 0.1), *itertools.product([3, 4, 9], [0.1, 0.5, 1.0])])
def test_forty_percent_slower_with_disjoint_ranges_is_worse_never_unknown(n: int, noise_pct: float) -> None:
    """The issue's report: ``latency.shared`` 40 % slower in a scaled copy, at the suite's default sample
    counts and the noise levels the simulated GPU shows (about 1 %); the sample ranges are far apart.
    (Two samples a side at 0.5 % noise, or three at 2 %, are too few for a test that allows one false
    alarm in a thousand: they are UNKNOWN, saying how many samples would do.)"""
    for seed in range(20):
        base = measured("latency.shared", 29.0, noise_pct, n=n, seed=seed)
        slower = _scaled(base, 1.4)
        assert max(base.samples) < min(slower.samples)
        row = compare(run(base), run(slower)).rows[0]
        assert row.label == Label.WORSE, row.reason
        assert row.change_pct == pytest.approx(40.0)


def test_quantised_samples_that_never_vary_still_show_a_one_cycle_change() -> None:
    base = run(Fact("latency.l1", 33.0, "cycle", (33.0, 33.0), [33.0] * 20))
    new = run(Fact("latency.l1", 34.0, "cycle", (34.0, 34.0), [34.0] * 20))
    assert labels(base, new) == {"latency.l1": "WORSE"}
    assert labels(base, new, threshold_pct=5.0) == {"latency.l1": "SAME"}


def test_facts_on_one_side_only_are_unknown_and_listed() -> None:
    base = run(measured("latency.l1", 33.0, 1.0), measured("latency.l2", 250.0, 1.0))
    new = run(measured("latency.l2", 250.0, 1.0), measured("latency.dram", 600.0, 1.0))
    comparison = compare(base, new, base_name="old.json", new_name="new.json")
    assert comparison.only_in_base() == ["latency.l1"] and comparison.only_in_new() == ["latency.dram"]
    assert comparison.row("latency.l1").label == Label.UNKNOWN
    assert comparison.row("latency.l1").reason == "only in old.json"
    assert [r.fact_id for r in comparison.failures(strict=True)] == ["latency.l1"]  # a new fact is no failure
    assert comparison.failures() == []
    text = render(comparison)
    assert "only in base (old.json): latency.l1" in text and "only in new (new.json): latency.dram" in text


def test_other_unknowns() -> None:
    base = run(Fact("latency.l2", 250.0, "cycle", (248.0, 252.0)), Fact("latency.dram", 600.0, "cycle"))
    new = run(Fact("latency.l2", 140.0, "ns", (139.0, 141.0)), Fact("latency.dram", None, "cycle"))
    rows = {row.fact_id: row for row in compare(base, new).rows}
    assert rows["latency.l2"].label == Label.UNKNOWN and "unit changed" in rows["latency.l2"].reason
    assert rows["latency.dram"].label == Label.UNKNOWN and rows["latency.dram"].reason == "no value in NEW"


def test_an_exact_count_that_changed_is_changed_never_unknown() -> None:
    """Run 1 -> run 2 of the H200: ``l2.partition_count`` 1 -> 2, one sample a side, was "UNKNOWN (too few
    samples)"; an exact result has no noise, so the change is real."""
    base = run(Fact("l2.partition_count", 1.0, "count", (1.0, 1.0), [1.0]), exact("cache.l2.sector_bytes", 32, "byte"))
    new = run(Fact("l2.partition_count", 2.0, "count", (2.0, 2.0), [2.0]), exact("cache.l2.sector_bytes", 32, "byte"))
    comparison = compare(base, new)
    row = comparison.row("l2.partition_count")
    assert row.label == Label.CHANGED and "an exact result, 1 -> 2 count: any difference is real" in row.reason
    assert comparison.row("cache.l2.sector_bytes").label == Label.SAME
    assert comparison.tested == 0  # exact results are not t-tested: the promise counts no false alarm for them
    assert [r.fact_id for r in comparison.failures(strict=True)] == ["l2.partition_count"] and not comparison.worse()
    lines = render(comparison).splitlines()
    changed = lines.index("CHANGED (1):")
    assert lines[changed + 3].split()[0] == "l2.partition_count" and "an exact result: no noise" in lines[changed + 3]


def test_a_fitted_size_goes_by_its_intervals_not_its_single_refit() -> None:
    """``cache.l1.line_bytes`` keeps one sample (the raw ratio of two knees) and an interval from the knees'
    grid points: overlapping intervals are the fit's own uncertainty, disjoint ones a change."""
    base = run(Fact("cache.l1.line_bytes", 128.0, "byte", (107.6, 152.2), [138.9]))
    near = run(Fact("cache.l1.line_bytes", 128.0, "byte", (110.0, 160.0), [131.0]))
    far = run(Fact("cache.l1.line_bytes", 64.0, "byte", (55.0, 80.0), [70.0]))
    assert labels(base, near) == {"cache.l1.line_bytes": "SAME"}
    row = compare(base, far).rows[0]
    assert row.label == Label.CHANGED and "stored intervals 107.6–152.2 and 55–80 byte differ" in row.reason


def _host_run(latency_us: float, host: dict[str, str] | None = None) -> Results:
    return run(measured("launch.stream.host_latency.cupy", latency_us, 2.0, n=7, seed=int(latency_us)), host=host)


OTHER_VM = {**HOST, "machine_id": "fedcba9876543210", "boot_id": "5e3c0000-0000-4000-8000-000000000002"}


def test_a_host_cost_that_moved_with_the_host_is_different_host_not_worse() -> None:
    """Run 1 -> run 2: ``launch.stream.host_latency.cupy`` 5.0 -> 8.8 us on two VMs, both named "vm"."""
    base, slower = _host_run(5.0), _host_run(8.8, OTHER_VM)
    row = compare(base, slower).rows[0]
    assert row.label == Label.DIFFERENT_HOST and row.reason.startswith("changed on another host: beyond the noise")
    assert compare(base, slower).failures() == [] and compare(base, slower).failures(strict=True) == [row]
    unnamed = {"hostname": "node1", "machine_id": "", "boot_id": ""}
    row = compare(base, _host_run(8.8, unnamed)).rows[0]
    assert row.label == Label.UNKNOWN and "the host is not known to be the same" in row.reason
    rebooted = {**HOST, "boot_id": "5e3c0000-0000-4000-8000-000000000009"}  # a reboot, or a VM cloned from one image
    assert compare(base, _host_run(8.8, rebooted)).rows[0].label == Label.UNKNOWN  # the files cannot tell which
    assert compare(base, _host_run(8.8)).rows[0].label == Label.WORSE
    elsewhere = run(measured("latency.l2", 275.0, 1.0), host=OTHER_VM)
    assert compare(run(measured("latency.l2", 250.0, 1.0)), elsewhere).rows[0].label == Label.WORSE  # the GPU's own


def _first_lines(base: Results, new: Results) -> list[str]:
    comparison = compare(base, new, base_name="a", new_name="b")
    lines = render(comparison).splitlines()
    return lines[: lines.index("gpuprobe compare: a -> b")]


def test_the_first_lines_say_which_board_host_driver_and_code_differ() -> None:
    assert _first_lines(run(), run()) == []
    other_board = dataclasses.replace(DEVICE, uuid="1" * 32, serial="1650000000002", driver="580.65")
    other_code = {"version": "0.1.0", "commit": "e" * 40, "dirty": False}
    assert _first_lines(run(), run(device=other_board, host=OTHER_VM, code=other_code)) == [
        f"WARNING: DIFFERENT BOARDS: a uuid {'0' * 32}, serial 1650000000001; b uuid {'1' * 32}, serial 1650000000002: "
        "another physical GPU, so a change may be the board's",
        "WARNING: DIFFERENT HOSTS: a node1 (machine 0123456789abcdef, boot 5e3c0000); b node1 (machine "
        "fedcba9876543210, boot 5e3c0000): host costs (host.*, launch.*) that changed are DIFFERENT HOST, not WORSE",
        "WARNING: DIFFERENT DRIVERS: a CUDA 570.86; b CUDA 580.65: a change may be the driver's",
        f"WARNING: DIFFERENT GPUPROBE CODE: a gpuprobe 0.1.0 at {'c' * 12}; b gpuprobe 0.1.0 at {'e' * 12}: a change "
        "may be the code's; the probes' cubin is the same (sha256 dddddddddddd)",
    ]
    dirty = _first_lines(run(), run(code={**CODE, "dirty": True}))
    assert dirty == [f"WARNING: GPUPROBE CODE MAY DIFFER: a gpuprobe 0.1.0 at {'c' * 12}; b gpuprobe 0.1.0 at "
                     f"{'c' * 12}, uncommitted changes: uncommitted changes, or a checkout git could not read; the "
                     "probes' cubin is the same (sha256 dddddddddddd)"]  # fmt: skip
    copied = {"version": "0.1.0", "commit": None, "dirty": None}  # a wheel, or a checkout copied without .git
    assert _first_lines(run(code=copied), run(code=copied)) == [
        "WARNING: GPUPROBE CODE MAY DIFFER: a gpuprobe 0.1.0 (no commit: not a git checkout); b gpuprobe 0.1.0 (no "
        "commit: not a git checkout): a version names no code (a wheel or a copied checkout records no commit: "
        "GPUPROBE_COMMIT names it); the probes' cubin is the same (sha256 dddddddddddd)"]  # fmt: skip
    renamed = _first_lines(run(), run(device=dataclasses.replace(DEVICE, hostname="node2")))
    assert renamed == []  # one boot of one machine, whatever it was named
    moved = run(device=dataclasses.replace(DEVICE, hostname="node2"), host={**HOST, "boot_id": "6f"})
    assert _first_lines(run(), moved) == [
        "WARNING: DIFFERENT HOSTS: a node1 (machine 0123456789abcdef, boot 5e3c0000); b node2 (machine "
        "0123456789abcdef, boot 6f): host costs (host.*, launch.*) that changed are DIFFERENT HOST, not WORSE",
    ]


def test_a_run_on_another_stage_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The smoke stage's facts (one warp, one sample, a 1024-cubed GEMM) share the full run's ids."""
    with pytest.raises(GpuprobeError, match="BASE is a smoke-stage run and NEW a full-stage run"):
        compare(run(stage="smoke"), run())
    from gpuprobe.cli import main

    smoke, full = _files(tmp_path, run(*a_full_run().facts, stage="smoke"), a_full_run())
    assert main(["compare", smoke, full]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1 and "compare two runs of one stage" in captured.err
    assert main(["compare", smoke, smoke]) == 0  # two smoke runs compare


DATA = Path(__file__).resolve().parent / "data"
H200_RUN_1 = DATA / "h200_first_run_results.json"  # board 1d3b46dd…, before the partition rule changed
H200_RUN_2 = DATA.parents[1] / "reports" / "nvidia-h200" / "results.json"  # board e492ee3d…, 11 commits later


def test_the_two_h200_runs_open_with_their_two_boards_and_show_the_partition_count_changed(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The audit's pair: two boards, two VMs both called "vm", neither file recording gpuprobe's commit."""
    from gpuprobe.cli import main

    assert main(["compare", str(H200_RUN_1), str(H200_RUN_2)]) == 0  # nothing WORSE: the host costs moved with a VM
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("WARNING: DIFFERENT BOARDS: ")
    assert "uuid 1d3b46dd6c3cac095dbad6c62b2b9261" in lines[0] and "uuid e492ee3d0fe5e2f94b859506e7392a1e" in lines[0]
    assert lines[1].startswith("WARNING: HOST NOT KNOWN TO BE THE SAME: ") and lines[1].count("vm (no machine id") == 2
    assert lines[2].startswith("WARNING: GPUPROBE CODE NOT RECORDED in ") and "cubin is the same" in lines[2]
    assert lines[3].startswith("gpuprobe compare: ") and "0 worse, 2 changed" in lines[4]
    [count] = [line for line in lines if line.startswith("l2.partition_count ")]
    assert "CHANGED" in count.split() and "an exact result, 1 -> 2 count" in count
    hosts = [line for line in lines if line.startswith(("launch.event.record ", "launch.stream.host_latency.cupy "))]
    assert len(hosts) == 2 and all("the host is not known to be the same" in line for line in hosts)


def test_a_change_measured_while_throttled_is_unknown() -> None:
    base = run(measured("latency.l2", 250.0, 1.0, seed=1))
    throttled = measured("latency.l2", 300.0, 1.0, seed=2)
    throttled.verdict = "throttled"
    row = compare(base, run(throttled)).rows[0]
    assert row.label == Label.UNKNOWN and "NEW was measured throttled" in row.reason


@pytest.mark.parametrize(
    ("fact_id", "unit", "expected"),
    [
        ("latency.l2", "cycle", LOWER_IS_BETTER),
        ("alu.ffma.latency", "cycle", LOWER_IS_BETTER),
        ("overhead.loop", "cycle", LOWER_IS_BETTER),
        ("bandwidth.dram_read", "byte/s", HIGHER_IS_BETTER),
        ("tensor.wgmma.bf16.m64n256k16.throughput", "flop/cycle", HIGHER_IS_BETTER),
        ("tensor.peak_tflops", "TFLOP/s", HIGHER_IS_BETTER),
        ("device.sm_clock", "MHz", HIGHER_IS_BETTER),
        ("device.sm_count", "count", NO_DIRECTION),
        ("device.l2_bytes", "byte", NO_DIRECTION),
        ("capacity.l1", "byte", NO_DIRECTION),
        ("warp.shfl.cost", "ns", LOWER_IS_BETTER),
        ("copy.rate", "GB/s", HIGHER_IS_BETTER),
        ("mystery.fact", "widget", NO_DIRECTION),
    ],
)
def test_direction(fact_id: str, unit: str, expected: int) -> None:
    assert direction(fact_id, unit) == expected


# ---------------------------------------------------------------- the statistics ---


@pytest.mark.parametrize("shape", ["normal", "lognormal", "exponential"])
def test_false_alarms_stay_at_alpha_whatever_the_distribution(shape: str) -> None:
    """At ``alpha`` 5 % (so that 400 trials can see it), unchanged facts of skewed distributions and
    unequal sample counts are called changed about 5 % of the time, not more."""
    rng, unit_normal = random.Random(42), NormalDist()
    draw = {
        "normal": lambda: 250.0 + 2.5 * unit_normal.inv_cdf(1.0 - rng.random()),
        "lognormal": lambda: 250.0 * math.exp(0.05 * unit_normal.inv_cdf(1.0 - rng.random())),
        "exponential": lambda: 250.0 - 5.0 * math.log(1.0 - rng.random()),
    }[shape]

    def fact(n: int) -> Fact:
        samples = [draw() for _ in range(n)]
        return Fact("latency.l2", statistics.median(samples), "cycle", None, samples)

    trials = 400
    changed = (Label.WORSE, Label.BETTER)
    alarms = sum(compare(run(fact(3)), run(fact(9)), alpha=0.05).rows[0].label in changed for _ in range(trials))
    assert alarms / trials <= 0.05 + 2 * (0.05 * 0.95 / trials) ** 0.5


# ---------------------------------------------------------------- warnings ---------


def test_warnings_name_what_differs_between_the_runs() -> None:
    other = Device(
        name="Other GPU", cc="8.0", arch="sm_80", sm_count=108, l2_bytes=40 * 2**20,
        driver="560.35", cuda_runtime="12.6", toolkit="12.9",
    )  # fmt: skip
    comparison = compare(run(mhz=1755.0), run(device=other, mhz=1410.0, partial=True), base_name="a", new_name="b")
    text = "\n".join(comparison.warnings)
    assert "different GPU models: a Test GPU (cc 9.0), b Other GPU (cc 8.0)" in text
    assert "different CUDA runtimes: a 12.8, b 12.6" in text
    assert "different CUDA toolkits: a 12.8, b 12.9" in text
    assert "SM clocks differ by -19.7 % (a 1755 MHz, b 1410 MHz)" in text
    assert "b is a partial run" in text
    assert len(comparison.different_gpus) == 2  # the model and the clock; the software is no other GPU
    assert comparison.provenance == [
        "BOARD NOT KNOWN TO BE THE SAME: a uuid 00000000000000000000000000000000, serial 1650000000001; "
        "b no uuid recorded, serial not recorded: cannot tell whether one GPU was measured",
        "DIFFERENT DRIVERS: a CUDA 570.86; b CUDA 560.35: a change may be the driver's",
    ]
    lines = render(comparison).splitlines()
    loud = "WARNING: DIFFERENT GPUS OR CLOCKS: different GPU models"
    assert lines[0].startswith(f"{loud}: a Test GPU (cc 9.0), b Other GPU")
    assert "SM clocks differ by -19.7 %" in lines[0]
    assert lines[1].startswith("WARNING: BOARD NOT KNOWN") and lines[2].startswith("WARNING: DIFFERENT DRIVERS: a CUDA")
    assert lines[3] == "gpuprobe compare: a -> b"
    assert not any(line.startswith("warning: different GPU models") for line in lines)  # said once, first
    md = render(comparison, "md").splitlines()
    assert md[0].startswith(f"> **{loud}") and md[1] == ">" and md[2].startswith("> **WARNING: BOARD NOT KNOWN")
    assert md[6].startswith("## gpuprobe")


def test_small_clock_differences_and_missing_clocks_draw_no_warning() -> None:
    assert compare(run(mhz=1755.0), run(mhz=1780.0)).warnings == []
    assert compare(run(mhz=1755.0), run(mhz=None)).warnings == []
    assert not render(compare(run(mhz=1755.0), run(mhz=1780.0))).startswith("WARNING")


def test_the_same_model_with_fewer_sms_is_a_warning() -> None:
    mig = Device(**{**DEVICE.__dict__, "sm_count": 16})
    comparison = compare(run(), run(device=mig))
    assert any("MIG" in w for w in comparison.warnings)
    assert render(comparison).startswith("WARNING: DIFFERENT GPUS OR CLOCKS: same model, different configuration (MIG")


def test_other_nominal_clocks_are_another_gpu() -> None:
    fast = Device(**{**DEVICE.__dict__, "sm_clock_nominal_mhz": 1980.0, "mem_clock_mhz": 3201.0})
    slow = Device(**{**DEVICE.__dict__, "sm_clock_nominal_mhz": 1755.0, "mem_clock_mhz": 2619.0})
    assert compare(run(device=fast), run(device=slow)).different_gpus == [
        "different nominal SM clocks: BASE 1980 MHz, NEW 1755 MHz",
        "different memory clocks: BASE 3201 MHz, NEW 2619 MHz",
    ]
    assert compare(run(device=fast), run(device=DEVICE)).different_gpus == []  # a clock not recorded: nothing to say


def test_strict_refuses_runs_of_different_gpus_in_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """The newcomer trial's k07: an H200 run compared with a "Simulated GPU" run, silently, exit 0."""
    from gpuprobe.cli import main

    h200 = Device(**{**DEVICE.__dict__, "name": "NVIDIA H200", "sm_count": 132})
    simulated = Device(**{**DEVICE.__dict__, "name": "Simulated GPU", "sm_count": 8, "l2_bytes": 2**19})
    base, new = _files(tmp_path, run(*a_full_run().facts, device=h200), run(*a_full_run().facts, device=simulated))
    assert main(["compare", base, new]) == 1  # judged again, NEW's 50 MiB L2 knee fails on a 0.5 MiB L2: WORSE
    out = capsys.readouterr().out
    assert out.splitlines()[0].startswith("WARNING: DIFFERENT GPUS OR CLOCKS: different GPU models:")
    assert "NVIDIA H200" in out.splitlines()[0] and "Simulated GPU" in out.splitlines()[0]
    assert main(["compare", base, new, "--strict"]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err.count("\n") == 1
    assert captured.err.startswith("gpuprobe: error: compare --strict: different GPUs or clocks (different GPU models:")
    same, _ = _files(tmp_path, run(*a_full_run().facts, device=h200), run())
    assert main(["compare", same, same, "--strict"]) == 0  # one GPU: --strict compares as before


# ---------------------------------------------------------------- rendering --------


def _md_cells(line: str) -> list[str]:
    assert line.startswith("| ") and line.endswith(" |"), line
    return [cell.strip() for cell in re.split(r"(?<!\\)\|", line[1:-1])]


def _md_rule(line: str) -> bool:
    return re.fullmatch(r"\|(:?-+:?\|)+", line) is not None


def test_markdown_tables_are_well_formed_and_open_with_the_summary() -> None:
    broken = invariant(False)
    broken.detail = "a | b"  # a pipe in a cell must not split it
    comparison = compare(a_full_run(), run(*a_full_run(seed=7, latency_scale=1.05).facts[:-1], broken))
    md = render(comparison, "md")
    assert md.startswith("## gpuprobe compare") and md.splitlines()[2] == f"**{comparison.summary()}**"
    lines = md.splitlines()
    headline = lines[lines.index("### Worse (3)") + 2 :]
    assert _md_cells(headline[0]) == ["Fact", "Change", "Noise (base / new)"] and _md_rule(headline[1])
    assert {len(_md_cells(line)) for line in headline[2:5]} == {3}
    start = next(i for i, line in enumerate(lines) if line.startswith("| Fact ") and "| Reason " in line)
    table = lines[start:]
    assert _md_cells(table[0]) == ["Fact", "Base", "New", "Change", "Label", "Reason"] and _md_rule(table[1])
    assert table[1].count("|") == 7
    rows = [line for line in table if line.startswith("|")][2:]
    assert {len(_md_cells(line)) for line in rows} == {6}
    assert len(rows) == len(comparison.rows) - len(comparison.with_label(Label.SAME))
    assert "a \\| b" in md
    assert lines[-1] == f"_{len(comparison.with_label(Label.SAME))} SAME facts not listed (--all lists them)_"
    everything = render(comparison, "md", show_all=True)
    assert len([line for line in everything.splitlines() if line.startswith("| ")]) == (
        1 + 3 + 1 + len(comparison.rows)
    )


def _text_comparison() -> tuple[Comparison, list[str]]:
    comparison = compare(a_full_run(), a_full_run(seed=7, latency_scale=1.05), base_name="a.json", new_name="b.json")
    return comparison, render(comparison).splitlines()


def test_text_opens_with_the_counts_then_every_worse_fact_with_its_change_and_noise() -> None:
    comparison, lines = _text_comparison()
    assert lines[0] == "gpuprobe compare: a.json -> b.json"
    assert lines[1] == "summary: " + comparison.summary()
    assert comparison.summary() == "6 same, 0 better, 2 worse, 0 changed, 0 different host, 0 unknown"
    assert lines[3] == "WORSE (2):" and lines[4].split() == ["fact", "change", "noise", "(base", "/", "new)"]
    l1 = lines[6]
    assert l1.startswith("  latency.l1  +") and re.search(r"±\d\.\d+ % / ±\d\.\d+ %; detects changes ≥ ", l1)
    assert not any(line.startswith("BETTER") for line in lines)


def test_text_table_lists_what_is_not_same_unless_all_is_asked_for() -> None:
    comparison, lines = _text_comparison()
    header = next(i for i, line in enumerate(lines) if line.startswith("fact  ") and "label" in line)
    column = lines[header].index("label")
    body = lines[header + 2 :]
    assert [line[column:].split()[0] for line in body[:-1]] == ["WORSE", "WORSE"]
    assert body[-1] == "6 SAME facts not listed (--all lists them)"
    l2 = next(line for line in body if line.startswith("latency.l2 "))
    assert "%" in l2 and "cycle" in l2 and "beyond the noise" in l2
    assert any(line.startswith("method: facts with samples: two-sample t-test") for line in lines)
    everything = render(comparison, show_all=True).splitlines()
    header = next(i for i, line in enumerate(everything) if line.startswith("fact  ") and "label" in line)
    column = everything[header].index("label")
    body = everything[header + 2 :]
    assert (
        len(body) == len(comparison.rows) and "latency.l2" in "".join(body) and "SAME facts not listed" not in body[-1]
    )
    assert sorted(line[column:].split()[0] for line in body).count("SAME") == 6


def test_output_is_deterministic() -> None:
    first = render(compare(a_full_run(), a_full_run(seed=3, latency_scale=1.02)), "md")
    second = render(compare(a_full_run(), a_full_run(seed=3, latency_scale=1.02)), "md")
    assert first == second


def test_a_huge_change_is_written_in_a_few_digits() -> None:
    """The newcomer trial's k10: a value of 1e308 printed a percentage 300 digits long."""
    text = render(compare(run(exact("device.l2_bytes", 1.0, "byte")), run(exact("device.l2_bytes", 1e300, "byte"))))
    [row] = [line for line in text.splitlines() if line.startswith("device.l2_bytes")]
    assert "+1e+302 % (+1e+300 byte)" in row and len(row) < 200


def test_an_unknown_format_is_a_user_error() -> None:
    with pytest.raises(GpuprobeError, match="unknown format"):
        render(compare(run(), run()), "html")


# ---------------------------------------------------------------- pytest --baseline ---


def test_baseline_failure_says_before_now_noise_label_and_why() -> None:
    comparison = compare(
        run(measured("latency.l2", 250.0, 1.0, seed=1)), run(measured("latency.l2", 262.5, 1.0, seed=2))
    )
    message = baseline_message(comparison, "latency.l2")
    assert message is not None and message == baseline_failure(comparison.rows[0])
    assert message.startswith("latency.l2 is WORSE against the baseline: before 2")
    assert "now 26" in message and "40 samples" in message and "CI " in message and "±" in message
    assert "lower is better" in message and "\n" not in message
    assert re.search(r"; noise ±\d\.\d+ % / ±\d\.\d+ %; detects changes ≥ \d\.\d+ %\. Why: beyond the noise", message)
    assert baseline_message(compare(run(measured("latency.l2", 250.0, 1.0)), run(measured("latency.l2", 250.0, 1.0))),
                            "latency.l2") is None  # fmt: skip
    assert baseline_message(None, "latency.l2") is None


# ---------------------------------------------------------------- refusals ---------


@pytest.mark.parametrize("threshold", [-1.0, float("nan"), float("inf")])
def test_a_bad_threshold_is_refused(threshold: float) -> None:
    with pytest.raises(GpuprobeError, match="threshold"):
        compare(run(), run(), threshold)


@pytest.mark.parametrize("alpha", [0.0, 1.0, float("nan")])
def test_a_bad_alpha_is_refused(alpha: float) -> None:
    with pytest.raises(GpuprobeError, match="alpha"):
        compare(run(), run(), alpha=alpha)


def test_a_fact_twice_in_one_run_is_refused_not_guessed() -> None:
    with pytest.raises(GpuprobeError, match=r"'latency\.l2' appears twice"):
        compare(run(), run(measured("latency.l2", 250.0, 1.0), measured("latency.l2", 260.0, 1.0)))


# ---------------------------------------------------------------- the command ------


def _command(*argv: str) -> int:
    parser = argparse.ArgumentParser(prog="gpuprobe")
    add_commands(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["compare", *argv])
    return args.func(args)


def _files(tmp_path: Path, base: Results, new: Results) -> tuple[str, str]:
    save(base, tmp_path / "base.json")
    save(new, tmp_path / "new.json")
    return str(tmp_path / "base.json"), str(tmp_path / "new.json")


def test_exit_status_is_one_for_worse_else_zero(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, slower = _files(tmp_path, a_full_run(), a_full_run(seed=9, latency_scale=1.05))
    assert _command(base, slower) == 1
    assert "WORSE" in capsys.readouterr().out
    assert _command(slower, base) == 0
    assert _command(base, slower, "--threshold", "10") == 0


def test_markdown_output_through_the_command(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    base, new = _files(tmp_path, a_full_run(), a_full_run())
    assert _command(base, new, "--format", "md") == 0
    out = capsys.readouterr().out
    assert out.startswith("## gpuprobe compare") and "| latency.l2 " not in out
    assert "10 SAME facts not listed" in out  # 8 stored facts and 2 invariants judging them again adds
    assert _command(base, new, "--format", "md", "--all") == 0
    assert "| latency.l2 " in capsys.readouterr().out


def test_strict_fails_on_unknown_facts_of_the_base(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    lost = run(*a_full_run().facts[1:])
    base, new = _files(tmp_path, a_full_run(), lost)
    assert _command(base, new) == 0
    assert _command(base, new, "--strict") == 1
    assert "only in base" in capsys.readouterr().out


def _write(path: Path, content: str) -> str:
    path.write_text(content)
    return str(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "no such file"),
        ("{not json", "corrupt results file"),
        ('{"hello": 1}', "not a gpuprobe results file"),
        (json.dumps({"schema": SCHEMA, "schema_version": SCHEMA_VERSION + 1}), "newer than this gpuprobe reads"),
        (json.dumps({"schema": SCHEMA, "schema_version": 0}), "not supported"),
    ],
)
def test_unreadable_files_are_refused_clearly(tmp_path: Path, content: str | None, message: str) -> None:
    good, _ = _files(tmp_path, a_full_run(), a_full_run())
    bad = str(tmp_path / "bad.json") if content is None else _write(tmp_path / "bad.json", content)
    for argv in ((good, bad), (bad, good)):
        with pytest.raises(GpuprobeError) as info:
            _command(*argv)
        assert message in str(info.value) and "bad.json" in str(info.value) and "\n" not in str(info.value)


def test_cli_compare_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Through ``gpuprobe.cli.main``: exit 1 on WORSE, 0 otherwise, 2 and one stderr line for a bad file."""
    from gpuprobe.cli import main

    base, slower = _files(tmp_path, a_full_run(), a_full_run(seed=9, latency_scale=1.05))
    assert main(["compare", base, slower]) == 1
    out = capsys.readouterr().out
    assert "latency.l2" in out and "WORSE" in out
    assert main(["compare", slower, base, "--format", "md", "--threshold", "1"]) == 0
    assert capsys.readouterr().out.startswith("## gpuprobe compare")
    assert main(["compare", base, str(tmp_path / "absent.json")]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and captured.err == f"gpuprobe: error: {tmp_path / 'absent.json'}: no such file\n"


# ---------------------------------------------------------------- a property -------

_KINDS = ("latency.l2", "bandwidth.dram_read", "capacity.l2", "device.sm_count", "invariant.x")


@st.composite
def fact_pairs(draw: st.DrawFn) -> tuple[Fact, Fact]:
    kind = draw(st.sampled_from(_KINDS))
    values = st.floats(min_value=1.0, max_value=1000.0, allow_nan=False)

    def one() -> Fact:
        if kind == "invariant.x":
            ok = draw(st.booleans())
            return Fact(kind, 1.0 if ok else 0.0, "bool", verdict="pass" if ok else "fail")
        if kind == "device.sm_count":
            return Fact(kind, float(draw(st.integers(1, 200))), "count")
        samples = draw(st.lists(values, min_size=0, max_size=30))
        if not samples:
            value = draw(values)
            spread = draw(st.floats(0.0, 50.0))
            return Fact(kind, value, "byte", (value - spread, value + spread) if draw(st.booleans()) else None)
        value, low, high = median_ci(samples)
        return Fact(kind, value, "byte", (low, high), samples)

    return one(), one()


@settings(max_examples=150, deadline=None)
@given(pairs=st.lists(fact_pairs(), min_size=1, max_size=4, unique_by=lambda p: p[0].id))
def test_swapping_the_runs_swaps_better_and_worse(pairs: list[tuple[Fact, Fact]]) -> None:
    forward = compare(run(*(a for a, _ in pairs)), run(*(b for _, b in pairs)))
    backward = compare(run(*(b for _, b in pairs)), run(*(a for a, _ in pairs)))
    mirror = {
        Label.BETTER: Label.WORSE,
        Label.WORSE: Label.BETTER,
        Label.SAME: Label.SAME,
        Label.CHANGED: Label.CHANGED,
        Label.UNKNOWN: Label.UNKNOWN,
    }
    assert [mirror[r.label] for r in forward.rows] == [r.label for r in backward.rows]


def test_the_same_tool_versions_found_in_other_places_are_the_same_toolkit() -> None:
    from gpuprobe.fleet.compare import run_warnings, toolkit_versions

    here = "ptxas V13.0.88 (/usr/local/cuda/bin/ptxas, found by PATH); nvdisasm V13.2.86 (/x/nvdisasm, found by wheel)"
    there = "ptxas V13.0.88 (/opt/cuda/bin/ptxas, found by CUDA_HOME); nvdisasm V13.2.86 (/y/nvdisasm, found by wheel)"
    assert toolkit_versions(here) == toolkit_versions(there) == "ptxas V13.0.88; nvdisasm V13.2.86"
    base, new = Results(dataclasses.replace(DEVICE, toolkit=here)), Results(dataclasses.replace(DEVICE, toolkit=there))
    assert not any("toolkit" in w for w in run_warnings(base, new))
    newer = Results(dataclasses.replace(DEVICE, toolkit=there.replace("V13.0.88", "V13.5.37")))
    assert any("different CUDA toolkits" in w for w in run_warnings(base, newer))


# ---------------------------------------------------------------- what it promises ---
#
# The figures the README quotes come from here: a run of the shape a simulated run has (about 400
# facts with samples, mostly 3 a side, noise up to about 1.3 %, each fact off by 0.5 % between runs),
# compared with a second run of the same unchanged GPU, and facts shifted by 2, 5 and 10 % at typical
# noise. Seeded, so the same
# figures every time; test_the_readme_quotes_these_figures holds the README to them.

SUITE_FACTS = 400
SAMPLE_COUNTS = (2, 3, 3, 3, 3, 3, 4, 6, 7, 9, 13, 31)  # about the mix of a simulated run's facts
SAME_PAIRS = 200


def _suite(rng: random.Random, shape: list[tuple[int, float]]) -> Results:
    """One run: each fact off by its run's factor (the spread the comparison allows between runs), then
    its samples' noise."""
    unit = NormalDist()
    between = RUN_TO_RUN_PCT["device"] / 100.0
    facts = []
    for i, (n, noise_pct) in enumerate(shape):
        centre = 100.0 * (1.0 + between * unit.inv_cdf(1.0 - rng.random()))
        samples = [centre * (1.0 + noise_pct / 100.0 * unit.inv_cdf(1.0 - rng.random())) for _ in range(n)]
        facts.append(Fact(f"latency.f{i:03d}", statistics.median(samples), "cycle", None, samples))
    return run(*facts)


@functools.cache
def false_worse_per_comparison() -> tuple[int, ...]:
    """False WORSE in each of ``SAME_PAIRS`` comparisons of two unchanged ``SUITE_FACTS``-fact runs."""
    rng = random.Random(2026)
    shape = [(rng.choice(SAMPLE_COUNTS), rng.uniform(0.05, 1.3)) for _ in range(SUITE_FACTS)]
    return tuple(len(compare(_suite(rng, shape), _suite(rng, shape)).worse()) for _ in range(SAME_PAIRS))


def test_two_runs_of_an_unchanged_gpu_give_the_false_worse_the_method_line_states() -> None:
    counts = false_worse_per_comparison()
    promised = SUITE_FACTS * FACT_ALPHA / 2.0
    # a Poisson count of mean SAME_PAIRS * promised: its mean within three standard deviations
    assert sum(counts) <= SAME_PAIRS * promised + 3.0 * math.sqrt(SAME_PAIRS * promised)
    assert sum(c > 1 for c in counts) <= 0.05 * SAME_PAIRS  # more than one false WORSE: rare


DETECTION_TRIALS = 1000
DETECTION_CASES = ((0.3, 3), (1.0, 3), (1.0, 5), (1.0, 9))  # (noise %, samples a side)
SHIFTS_PCT = (2.0, 5.0, 10.0)


def detection_rate(noise_pct: float, n: int, shift_pct: float) -> float:
    """How often a latency ``shift_pct`` % slower is labelled WORSE, at ``noise_pct`` and ``n`` a side."""
    rng = random.Random(int(noise_pct * 1000) + 10 * n + int(shift_pct))
    shape = [(n, noise_pct)] * DETECTION_TRIALS
    base, new = _suite(rng, shape), _suite(rng, shape)
    slower = run(*(_scaled_mean(f, 1.0 + shift_pct / 100.0) for f in new.facts))
    return len(compare(base, slower).worse()) / DETECTION_TRIALS


def _scaled_mean(fact: Fact, factor: float) -> Fact:
    return dataclasses.replace(fact, samples=[s * factor for s in fact.samples], value=fact.value * factor)


def figures_text() -> str:
    """The README's table of what the comparison promises, as this module computes it."""
    counts = false_worse_per_comparison()
    lines = [
        f"False WORSE per comparison of two unchanged {SUITE_FACTS}-fact runs: {sum(counts) / SAME_PAIRS:.2f} on "
        f"average over {SAME_PAIRS} pairs (promised {SUITE_FACTS * FACT_ALPHA / 2:.2f}); more than one false "
        f"WORSE in {sum(c > 1 for c in counts)} of the {SAME_PAIRS}.",
        "",
        "| noise, samples a side | " + " | ".join(f"{s:g} % slower" for s in SHIFTS_PCT) + " |",
        "|---|" + "---|" * len(SHIFTS_PCT),
    ]
    for noise_pct, n in DETECTION_CASES:
        rates = (f"{detection_rate(noise_pct, n, s) * 100:.0f} %" for s in SHIFTS_PCT)
        lines.append(f"| ±{noise_pct:g} %, {n} | " + " | ".join(rates) + " |")
    return "\n".join(lines)


def test_a_five_percent_change_at_typical_noise_is_detected_once_enough_samples_are_taken() -> None:
    assert detection_rate(1.0, 9, 5.0) >= 0.95 and detection_rate(0.3, 3, 5.0) >= 0.8
    assert detection_rate(1.0, 3, 10.0) >= 0.5
    assert detection_rate(1.0, 3, 2.0) <= 0.1  # three samples at 1 %: a 2 % change is out of reach


def test_the_readme_quotes_these_figures() -> None:
    figures = figures_text()
    print(figures)
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    assert figures in readme, f"README.md should quote, as computed:\n{figures}"


def test_a_counters_witness_is_no_fact_of_the_gpu_and_is_not_compared() -> None:
    """``witness.*`` facts say whether one run's probe moved what it claims; bytes counted in two runs are not
    an exact result of the GPU (more bank conflicts would read BETTER, counter noise CHANGED)."""
    counted = [Fact("witness.bandwidth.dram.write.v16.dram_write_bytes.counted", c, "byte", (c, c), [c])
               for c in (1.000e9, 1.001e9)]  # fmt: skip
    rows = compare(run(measured("latency.l2", 250.0, 1.0), counted[0]), run(measured("latency.l2", 250.0, 1.0),
                                                                          counted[1])).rows  # fmt: skip
    assert [r.fact_id for r in rows] == ["latency.l2"]


def test_compare_judges_both_files_again_and_names_the_stored_verdicts_that_differ(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The newcomer trial 3's n33/n34: a stored verdict is not compared as stored. NEW's L2 chase above its DRAM
    chase, stored PASS, fails the latency order when judged again; a stored FAIL inside its range is named."""
    from tests.test_verdicts import stored_lie

    (tmp_path / "base").mkdir(), (tmp_path / "new").mkdir()
    base = stored_lie(tmp_path / "base", "latency.dram", verdict="fail")
    new = stored_lie(tmp_path / "new", "latency.l2", value=900.0, samples=[899.0, 900.0, 901.0], ci=[899.0, 901.0])
    assert _command(str(base), str(new), "--all") == 1
    out = capsys.readouterr().out
    order = next(line for line in out.splitlines() if line.startswith("invariant.latency_order.l2_below_dram "))
    assert "WORSE" in order and "invariant held before, fails now" in order
    assert f"warning: {base}: 1 stored verdict(s) differ from this gpuprobe's judgement of the values: " \
           "latency.dram (stored fail, judged pass)" in out  # fmt: skip
    assert f"warning: {new}: 2 stored verdict(s) differ" in out  # the two facts the failed invariant names
    assert "latency.l2 (stored pass, judged fail), latency.dram (stored pass, judged fail)" in out
