"""The run's time plan: per family from its settings and the device, summed against the device check's deadline."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from gpuprobe.cli import main
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.results import Device, Results, load, save
from gpuprobe.families.base import Plan
from gpuprobe.judge.expectations import load_all
from gpuprobe.measure.plan import (
    BUILD_S,
    CHILD_START_S,
    DEVICE_CHECK_DEADLINE_S,
    FAMILY_WORK_FACTOR,
    FULL,
    REPORT_S,
    SMOKE,
    SMOKE_STAGE_S,
    WORK_FACTOR,
    calibration,
    family_plan,
    family_seconds,
    measured_families,
    model_device,
    probes_on,
    render_plan,
    run_plan,
    work_factor,
)
from gpuprobe.simulated.gpu import SimulatedGpu, suite_options
from tests.helpers.devices import A100_SXM, H100_SXM, H200

H200_RUN = Path(__file__).resolve().parents[1] / "reports" / "nvidia-h200" / "results.json"  # a real run
H200_SMOKE = H200_RUN.with_name("smoke-results.json")  # its smoke stage
ROOM = 0.85  # a plan may use at most this share of its budget: the rest is for what no plan foresees
# An H200 seeing one GPU: every family but the multi-GPU ones. Issue 29 asks 60 s and reached 76; issue 30's roofline,
# ladder and frameworks families and CUB twins add 8.7 s of planned work (the device check's deadline still holds them,
# test above).
ONE_GPU_MEASURING_S = 86.0


def test_the_smoke_stage_fits_its_budget_on_an_h200() -> None:
    plan = run_plan(H200, SMOKE)
    assert plan.total_s <= ROOM * SMOKE_STAGE_S, render_plan(plan)


def test_the_full_suite_fits_the_device_check_deadline_after_the_smoke_stage_on_an_h200() -> None:
    """The device check gives the full suite what its deadline leaves after the smoke stage
    (DEVICE_CHECK_DEADLINE_S less SMOKE_STAGE_S)."""
    plan = run_plan(H200)
    assert plan.total_s <= ROOM * (DEVICE_CHECK_DEADLINE_S - SMOKE_STAGE_S), render_plan(plan)


def test_an_h200_measures_the_families_one_gpu_runs_in_about_a_minute() -> None:
    """A full run seeing one GPU, as the device check's H200 did: one measuring process for every family, each
    family's work as the H200's run took it, the power family's windows as they are."""
    plan = run_plan(model_device(load_all()["h200"], visible_gpus=1))
    assert plan.short_of_gpus == ("p2p", "collectives") and plan.processes == 1
    assert plan.measuring_s <= ONE_GPU_MEASURING_S, render_plan(plan)


def test_a_run_starts_one_measuring_process_or_one_per_family_when_asked() -> None:
    shared, each = run_plan(H200), run_plan(H200, process_per_family=True)
    work = sum(row.seconds or 0.0 for row in shared.families)
    assert shared.processes == 1 and shared.measuring_s == pytest.approx(CHILD_START_S + work)
    assert each.processes == len(shared.families)  # every family of the node measures something
    assert each.measuring_s == pytest.approx(len(shared.families) * CHILD_START_S + work)
    assert "process starts        1" in render_plan(shared) and "(one for every family)" in render_plan(each)


def test_a_family_plans_its_work_as_a_real_run_took_it_and_its_waits_as_they_are() -> None:
    for name, family in measured_families().items():
        row = family_plan(name, family, FULL, family.settings(), H200)
        assert row.plan is not None and row.seconds is not None
        waits, work = row.plan.wait_s, family_seconds(row.plan, child_start=False) - row.plan.wait_s
        assert row.seconds == pytest.approx(waits + work_factor(name) * work), name
    power = measured_families()["power"].plan(measured_families()["power"].settings(), H200)
    assert power.wait_s > 20.0  # its nine sustained runs, their rests and the idle window


def test_the_cost_model_is_the_one_the_h200_runs_recorded() -> None:
    """The process start and the work factors are what reports/nvidia-h200/ gives, by the rule plan.py states: a
    refit is due when those files change (their plans counted 3.0 s of process start per family)."""
    import statistics

    smoke, full = load(H200_SMOKE).families, load(H200_RUN).families
    start = statistics.median(r["actual_s"] - (r["planned_s"] - 3.0) for r in smoke.values())
    assert abs(start - CHILD_START_S) <= 0.1, start
    ratio = {name: (r["actual_s"] - CHILD_START_S) / (r["planned_s"] - 3.0) for name, r in full.items()}
    own = ("memory", "bandwidth", "cache_geometry", "l2_partition", "host_transfer", "async_copy", "grid_sync",
           "launch")  # fmt: skip
    assert {name: round(ratio[name], 2) for name in own} == {name: FAMILY_WORK_FACTOR[name] for name in own}
    taken = sum(full[name]["actual_s"] - CHILD_START_S for name in own)
    assert round(taken / sum(full[name]["planned_s"] - 3.0 for name in own), 2) == WORK_FACTOR
    assert FAMILY_WORK_FACTOR["atomics"] == round(ratio["atomics"], 2) < WORK_FACTOR
    assert set(FAMILY_WORK_FACTOR) == {*own, "atomics"}


@pytest.mark.parametrize(
    ("device", "left_out"),
    [(H200, ("tcgen05",)), (H100_SXM, ("tcgen05",)), (A100_SXM, ("tma", "wgmma", "tcgen05", "cluster"))],
    ids=lambda d: getattr(d, "name", ""),
)
def test_a_plan_counts_only_the_families_and_probes_the_arch_runs(device: Device, left_out: tuple[str, ...]) -> None:
    plan = run_plan(device)
    assert plan.left_out == left_out
    assert [row.family for row in plan.families] == [f for f in measured_families() if f not in left_out]
    assert f"{', '.join(left_out)}: no probe of" in render_plan(plan)
    rows = {row.family: row for row in plan.families}
    for family, row in rows.items():  # each counts the probes its arch runs: the A100 half of async_copy's
        assert row.plan is not None and row.plan.probes == len(probes_on(measured_families()[family], device.arch))
    assert plan.total_s > BUILD_S + REPORT_S


def test_a_family_with_no_probe_on_the_arch_costs_a_run_nothing() -> None:
    row = family_plan("wgmma", measured_families()["wgmma"], FULL, None, A100_SXM)
    assert row.seconds == 0.0 and row.plan is not None and row.plan.probes == 0


def test_a_plan_grows_with_its_settings_and_the_cost_model_counts_every_part() -> None:
    small, large = Plan(1, 10, 0.5, 0.1), Plan(2, 1000, 2.0, 1.0)
    assert family_seconds(small) < family_seconds(large)
    assert family_seconds(small + large) == pytest.approx(family_seconds(small) + family_seconds(large, False))
    with pytest.raises(ValueError, match="at least 0"):
        Plan(1, -1, 0.0)


def test_an_earlier_run_calibrates_the_next_plan() -> None:
    results = Results(Device("x", "9.0", "sm_90a", 132, 1))
    results.families = {
        "memory": {"planned_s": 10.0, "actual_s": 15.0, "ended": "measured"},
        "alu": {"planned_s": 10.0, "actual_s": 25.0, "ended": "measured"},
        "wgmma": {"planned_s": 50.0, "actual_s": 3.0, "ended": "deadline"},  # cut short: says nothing
    }
    assert calibration(results) == pytest.approx(2.0)
    assert calibration(Results(results.device)) is None
    plan = run_plan(H200, calibration=2.0)
    assert plan.measuring_s == pytest.approx(2 * run_plan(H200).measuring_s)


@pytest.mark.parametrize(
    ("seconds", "message"),
    [
        ({"actual_s": "fast"}, "families.alu.actual_s: 'fast' is not a number of seconds"),
        ({"planned_s": -5.0, "actual_s": -1.0}, "families.alu.planned_s: -5.0 is not a number of seconds"),
        ({"actual_s": float("nan")}, "families.alu.actual_s: nan is not a number of seconds"),
        ({"actual_s": True}, "families.alu.actual_s: True is not a number of seconds"),
        (
            {"planned_s": 1e-9, "actual_s": 1e9},
            "its families took x1e+18 the seconds planned, outside the plausible x0.1 to x10",
        ),
        ({"planned_s": 100.0, "actual_s": 1.0}, "its families took x0.01 the seconds planned"),
    ],
)
def test_a_calibration_from_seconds_that_are_not_seconds_is_refused(seconds: dict, message: str) -> None:
    results = Results(Device("x", "9.0", "sm_90a", 132, 1))
    results.families = {"alu": {"planned_s": 10.0, "actual_s": 12.0, "ended": "measured", **seconds}}
    with pytest.raises(GpuprobeError, match=re.escape(f"earlier.json: {message}")):
        calibration(results, "earlier.json")


def test_the_plan_command_refuses_a_broken_calibration_in_one_line_and_says_when_there_is_none(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    results = load(H200_RUN)
    results.families = {"alu": {"planned_s": 10.0, "actual_s": "fast", "ended": "measured"}}
    save(results, tmp_path / "broken.json")
    assert main(["run", "--plan", "--model", "h200", "--calibrate", str(tmp_path / "broken.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "actual_s: 'fast' is not a number of seconds" in err
    results.families = {}
    save(results, tmp_path / "none.json")
    assert main(["run", "--plan", "--model", "h200", "--calibrate", str(tmp_path / "none.json")]) == 0
    out, err = capsys.readouterr()
    assert "records no family measured to the end: the plan is not calibrated" in err and "calibrated x" not in out


@pytest.mark.parametrize(("key", "expected"), [("h200", H200), ("h100_sxm", H100_SXM), ("a100", A100_SXM)])
def test_a_model_device_record_describes_the_part_to_plan_for(key: str, expected: Device) -> None:
    device = model_device(load_all()[key])
    fields = ("cc", "arch", "sm_count", "l2_bytes", "mem_bus_bits", "shared_per_sm_bytes")
    assert {f: getattr(device, f) for f in fields} == {f: getattr(expected, f) for f in fields}
    assert device.mem_clock_mhz == pytest.approx(expected.mem_clock_mhz)


def test_the_plan_command_needs_no_gpu_with_a_model(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--plan", "--model", "h200", "--deadline", str(DEVICE_CHECK_DEADLINE_S)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("time plan (full stage) for NVIDIA H200 SXM: 132 SMs, L2 60 MiB, 1 GPU visible")
    assert all(f"\n{row.family} " in out for row in run_plan(H200).families if row.family not in ("p2p", "collectives"))
    assert "\ntcgen05: no probe of it runs on sm_90a, left out\n" in out
    assert "\np2p, collectives: need 2 GPUs, 1 visible: not measured\n" in out
    assert f"fits a {DEVICE_CHECK_DEADLINE_S:.0f} s deadline" in out
    assert main(["run", "--plan", "--model", "h200", "--gpus", "8"]) == 0
    out = capsys.readouterr().out
    assert ", 8 GPUs visible" in out and "\np2p " in out and "need 2 GPUs" not in out
    assert main(["run", "--plan", "--smoke", "--model", "h200"]) == 0
    assert capsys.readouterr().out.startswith("time plan (smoke stage)")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["run", "--plan"], "give --model KEY to plan for a GPU model"),
        (["run", "--plan", "--model", "t4"], "model 't4' has no [device] table"),
        (["run", "--plan", "--model", "nope"], "no GPU model matches"),
        (["run", "--plan", "--model", "h200", "--deadline", "-3"], "--deadline must be a positive number"),
        (["run", "--plan", "--model", "h200", "--calibrate", "/no/such/results.json"], "no such file"),
        (["run", "--smoke", "--cooldown", "-2"], "--cooldown must be at least 0 seconds"),
        (["run", "--smoke", "--probe-time-limit", "0"], "--probe-time-limit must be a positive number"),
        (["run", "--plan", "--model", "h200", "--gpus", "0"], "--gpus must be at least 1"),
        (["run", "--plan", "--gpus", "2"], "--gpus: give it with --plan --model KEY"),
    ],
)
def test_the_plan_command_errors_are_one_line(argv: list[str], message: str, capsys) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and err.count("\n") == 1


def test_a_device_without_a_record_cannot_be_planned_silently() -> None:
    model = dataclasses.replace(load_all()["h200"], device={})
    with pytest.raises(Exception, match="no \\[device\\] table"):
        model_device(model)


def test_a_family_that_cannot_plan_for_a_device_says_why_and_the_plan_goes_on() -> None:
    # 8 SMs and a 64 KiB L2: too small for the bandwidth shapes, even with one warp per block
    device = dataclasses.replace(SimulatedGpu(**suite_options()).device(), l2_bytes=64 * 1024)
    plan = run_plan(device)
    rows = {row.family: row for row in plan.families}
    assert rows["bandwidth"].plan is None and rows["bandwidth"].error.startswith("ProbeFailure")
    assert rows["memory"].seconds is not None
    assert "bandwidth        no plan: ProbeFailure" in render_plan(plan)


# ---- the smoke stage measures first what no real run has proven ----------------------------------------


def _run_of(device: Device, outcomes: dict[str, str], facts: dict[str, float | None]) -> Results:
    from gpuprobe.core.results import Fact, ProbeOutcome

    return Results(device, [Fact(i, v, "cycle") for i, v in facts.items()],
                   {name: ProbeOutcome(status) for name, status in outcomes.items()})  # fmt: skip


def test_a_probe_is_proven_only_by_a_real_run_that_gave_every_fact_it_declares() -> None:
    from gpuprobe.measure.plan import proven_by

    declared = {"cache_geometry.tlb": ("tlb.l1.reach_bytes", "tlb.miss_cycles"), "p2p.ce": ("p2p.ce.bandwidth.*",),
                "wgmma.latency.e4m3.ss.n8": ("tensor.wgmma.e4m3.m64n8k32.ss.latency",)}  # fmt: skip
    run = _run_of(H200, {"cache_geometry.tlb": "ok", "p2p.ce": "ok", "wgmma.latency.e4m3.ss.n8": "failed"},
                  {"tlb.l1.reach_bytes": 1.0, "tlb.miss_cycles": None, "p2p.ce.bandwidth.0_1": 380.0})  # fmt: skip
    assert proven_by(run, declared) == {"p2p.ce"}  # the TLB probe ran "ok" but wrote no miss cost
    assert proven_by(dataclasses.replace(run, device=dataclasses.replace(H200, simulated=True)), declared) == set()


def test_unproven_probes_read_every_real_results_file_and_skip_a_broken_one(tmp_path) -> None:
    from gpuprobe.core.results import save
    from gpuprobe.kernels.registry import all_probes
    from gpuprobe.measure.plan import unproven_probes

    probe = next(p for p in all_probes() if p.name == "warp.shfl.idx")
    save(_run_of(H200, {probe.name: "ok"}, dict.fromkeys(probe.facts, 30.0)), tmp_path / "h200" / "results.json")
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "smoke-results.json").write_text("{not json")
    unproven = unproven_probes(tmp_path)
    assert probe.name not in unproven and "cache_geometry.tlb" in unproven
    assert unproven_probes(tmp_path / "missing") == {p.name for p in all_probes()}


def test_a_smoke_stage_measures_the_unproven_probes_first() -> None:
    from gpuprobe.families import catalog
    from gpuprobe.measure.plan import Stage

    stage = Stage("smoke", frozenset({"cache_geometry.tlb", "tma.latency.none"}))
    order = stage.family_order(catalog.BY_NAME)
    assert order[:2] == ["cache_geometry", "tma"] and order[2:] == [f for f in catalog.BY_NAME if f not in order[:2]]
    tma = catalog.BY_NAME["tma"]
    assert stage.probes(tma) == ["tma.latency.none", *[p for p in tma.smoke.probes if p != "tma.latency.none"]]
    assert Stage("full", stage.first).probes(tma) == list(tma.probes)
