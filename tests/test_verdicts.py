"""The run's judgement: physics before expectations, a failed invariant marking the facts it holds, smoke facts
held to physics only, and a stored run judged again by this gpuprobe (the H200 runs the audit read)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from gpuprobe.core.results import Fact, Results, load, save
from gpuprobe.families import catalog
from gpuprobe.fleet.reading import changes_text, read_judged
from gpuprobe.judge.expectations import load_all
from gpuprobe.judge.invariants import Check
from gpuprobe.judge.physics import physics_checks
from gpuprobe.judge.verdicts import (
    IMPOSSIBLE,
    RAN_AT,
    SMOKE_DETAIL,
    VerdictChange,
    current_models,
    is_impossible,
    judge_again,
    judge_measured,
    judge_together,
    mark_impossible,
    model_of,
    remarks,
)
from tests.helpers.devices import H200

REPORTS = Path(__file__).resolve().parents[1] / "reports" / "nvidia-h200"


def _fact(fact_id: str, value: float, ci: tuple[float, float] | None = None, unit: str = "cycle") -> Fact:
    return Fact(fact_id, value, unit, ci or (value, value), [value])


def _failed(checks: list[Check]) -> dict[str, tuple[str, ...]]:
    return {c.name: c.facts for c in checks if not c.ok}


def test_a_noisy_fact_is_unstable_not_judged() -> None:
    h100 = load_all()["h100_sxm"]
    noisy = Fact("latency.l2", 280.0, "cycle", (200.0, 360.0), [200.0, 280.0, 360.0])
    assert judge_measured(noisy, h100).verdict == "unstable"
    quiet = Fact("latency.l2", 280.0, "cycle", (279.0, 281.0), [279.0, 280.0, 281.0])
    assert judge_measured(quiet, h100).verdict == "pass"


def test_a_fact_s_remarks_are_what_its_detail_adds_to_its_value_and_range_as_the_judge_wrote_them() -> None:
    """What a sheet's note under a row says: never the judge's restatement of the value and range the row shows."""
    h100 = load_all()["h100_sxm"]
    quiet = judge_measured(Fact("latency.l2", 280.0, "cycle", (279.0, 281.0), [279.0, 280.0, 281.0]), h100)
    assert quiet.detail.startswith("latency.l2 = 280") and remarks(quiet) == ""
    noisy = judge_measured(Fact("latency.l2", 285.0, "cycle", (250.0, 320.0), [250.0, 285.0, 320.0]), h100)
    assert remarks(noisy) == "UNSTABLE: CI 250–320 is wider than ±10% of the value, too noisy to judge"
    straddling = judge_measured(Fact("latency.l2", 325.0, "cycle", (320.0, 335.0), [320.0, 325.0, 335.0]), h100)
    assert remarks(straddling) == "its CI straddles an expected bound: too noisy to judge"
    unmeasured = judge_measured(Fact("latency.l2", None, "cycle", detail="its probe crashed"), h100)
    assert remarks(unmeasured) == "no value was measured (its probe crashed)"
    again = Results(H200, [Fact("latency.l2", 280.0, "cycle", (279.0, 281.0), [279.0, 280.0, 281.0], verdict="fail")])
    judge_again(again, h100, [])
    assert remarks(again.facts[0]) == "(stored verdict: fail; judged again by this gpuprobe)"


RATE = "tensor.wgmma.bf16.m64n256k16.ss"  # an absolute rate held to 800–1092 TFLOP/s on an H200, a warn


def test_an_absolute_rate_outside_its_range_warns_naming_the_clock_it_ran_at_once_however_often_judged() -> None:
    """An H200 wgmma at 1500 MHz, 720 TFLOP/s: under the 800 floor by its clock, not its tensor cores."""
    rate = Fact(f"{RATE}.tflops", 720.0, "TFLOP/s", (719.0, 721.0), [719.0, 720.0, 721.0], verdict="warn")
    clock = Fact(f"{RATE}.sm_clock", 1500.2, "MHz", (1499.0, 1501.0), [1499.0, 1500.2, 1501.0])
    results = Results(H200, [rate, clock])
    for _ in range(2):
        assert judge_again(results, load_all()["h200"], []) == []
    ran_at = f"; ran at 1500 MHz ({RATE}.sm_clock)"
    assert rate.verdict == "warn" and "OUTSIDE expected 800–1092 TFLOP/s (warn; " in rate.detail
    assert rate.detail.endswith(ran_at) and rate.detail.count(RAN_AT) == 1
    assert remarks(rate) == ran_at.removeprefix("; ")
    judge_together(results, [])  # the run's own end, after a reader judged it: still once
    assert rate.detail.count(RAN_AT) == 1 and RAN_AT not in clock.detail


def test_an_absolute_rate_without_its_clock_says_the_clock_was_not_measured() -> None:
    gemm = Fact("tensor.cublas.bf16.tflops", 801.8, "TFLOP/s", (800.0, 803.0), [800.0, 801.8, 803.0], verdict="pass")
    straddling = Fact(f"{RATE}.tflops", 801.0, "TFLOP/s", (790.0, 810.0), [790.0, 801.0, 810.0], verdict="unstable")
    results = Results(H200, [gemm, straddling])
    judge_again(results, load_all()["h200"], [])
    assert gemm.verdict == "pass"
    assert gemm.detail.endswith("; ran at a clock not measured (no tensor.cublas.bf16.sm_clock)")
    assert remarks(straddling) == (
        f"its CI straddles an expected bound: too noisy to judge; ran at a clock not measured (no {RATE}.sm_clock)"
    )


def test_only_a_rate_held_to_a_range_states_its_clock() -> None:
    """Discovery mode, a smoke run, and a rate throttled while measuring: nothing judged of the clock."""
    for model, stage, verdict in ((None, "full", "report"), (load_all()["h200"], "smoke", "report"),
                                  (load_all()["h200"], "full", "throttled")):  # fmt: skip
        rate = Fact(f"{RATE}.tflops", 720.0, "TFLOP/s", (719.0, 721.0), [719.0, 720.0, 721.0], verdict=verdict)
        judge_again(Results(H200, [rate], stage=stage), model, [])
        assert RAN_AT not in rate.detail, (model, stage, verdict)


def test_a_negative_quantity_breaks_physics_unless_its_ci_reaches_zero_or_it_is_a_difference() -> None:
    facts = {f.id: f for f in (
        _fact("launch.back_to_back_step", -20.64, unit="us"),  # the smoke's: one sample
        _fact("launch.graph.per_node.host", -0.041, (-0.0411, -0.0326), unit="us"),  # run 2's CI, wholly negative
        _fact("latency.dram.v16_minus_v8", -0.12, (-7.2, 6.8)),  # a difference: either sign
        _fact("sync.grid.latency", 1860.0),
        _fact("tensor.numerics.tf32.rounds_to_nearest", 0.0, unit="bool"),
        _fact("warp.shfl.latency", -1.0, (-2.0, 0.5)),  # noise around zero: no sign known, nothing impossible
    )}  # fmt: skip
    (check,) = [c for c in physics_checks(facts) if c.name == "physics.no_negative_quantity"]
    assert not check.ok and check.physics
    assert set(check.facts) == {"launch.back_to_back_step", "launch.graph.per_node.host"}


def test_a_fraction_of_peak_above_one_beyond_its_ci_breaks_physics() -> None:
    smoke = _fact("bandwidth.dram_read_fraction_of_peak", 1.019, unit="fraction")  # one sample: its CI is itself
    noisy = _fact("tensor.wgmma.bf16.fraction_of_peak", 1.004, (0.99, 1.01), unit="fraction")
    resolved = _fact("tensor.wgmma.bf16.m64n256k16.ss.zero_operands.fraction_of_peak", 1.003, unit="fraction")
    failed = _failed(physics_checks({f.id: f for f in (smoke, noisy, resolved)}))  # 0.3 % over: the clock's 1 %
    assert failed == {"physics.fraction_of_peak_at_most_1": (smoke.id,)}


def test_a_sustained_rate_above_its_burst_is_caught_and_names_both() -> None:
    burst = _fact("tensor.wgmma.bf16.burst.tflops", 940.0, (935.0, 945.0), unit="TFLOP/s")
    sustained = _fact("tensor.wgmma.bf16.sustained.tflops", 980.0, (975.0, 985.0), unit="TFLOP/s")
    failed = _failed(physics_checks({burst.id: burst, sustained.id: sustained}))
    assert failed == {f"physics.sustained_within_burst.{sustained.id}": (sustained.id, burst.id)}
    equal = dataclasses.replace(sustained, value=938.0, ci=(933.0, 943.0))
    assert not _failed(physics_checks({burst.id: burst, equal.id: equal}))
    # a burst's short launches pay their fixed costs in a shorter span: 1.5 % over its CI is within the allowance
    shorter = dataclasses.replace(sustained, value=957.0, ci=(955.0, 959.0))
    assert not _failed(physics_checks({burst.id: burst, shorter.id: shorter}))


def test_a_failed_check_marks_its_facts_and_keeps_what_conditions_decided() -> None:
    write = _fact("bandwidth.dram_write.v16", 4415.0, unit="GB/s")
    throttled = dataclasses.replace(_fact("bandwidth.l2_write.v16", 4141.0, unit="GB/s"), verdict="throttled")
    write.verdict = "pass"
    check = Check("bandwidth.l2_write_not_below_dram", False, "4141 < 4415", (write.id, throttled.id))
    mark_impossible([write, throttled], [check])
    assert write.verdict == "fail" and write.detail.startswith(f"{IMPOSSIBLE} (invariant.bandwidth.l2_write")
    assert throttled.verdict == "throttled"


def _judged(name: str) -> Results:
    results = load(REPORTS / name)
    judge_again(results, model_of(results), catalog.invariant_checks())
    return results


def test_the_h200_smoke_run_judged_again_passes_nothing_the_audit_calls_impossible() -> None:
    """The smoke stage of run 2 published a DRAM read above the pin rate, a negative launch step and host
    cost per graph node, cuBLAS at 30 TFLOP/s and a wgmma/cuBLAS ratio of 29.9, all as verified or PASS."""
    results = _judged("smoke-results.json")
    verdicts = {f.id: f.verdict for f in results.facts}
    impossible = ("bandwidth.dram_read.v16", "bandwidth.dram_read_fraction_of_peak", "launch.back_to_back_step",
                  "launch.graph.per_node.host", "tensor.wgmma.bf16.fraction_of_cublas")  # fmt: skip
    assert {fact_id: verdicts[fact_id] for fact_id in impossible} == dict.fromkeys(impossible, "fail")
    assert all(f.detail.startswith(IMPOSSIBLE) for f in results.facts if f.id in impossible)
    measured = [f for f in results.facts if not f.id.startswith("invariant.") and f.value is not None]
    assert {f.verdict for f in measured} <= {"report", "fail"}  # never held to the full run's expectations
    assert all(f.detail.startswith((SMOKE_DETAIL, IMPOSSIBLE)) for f in measured)


def test_the_h200_full_run_judged_again_marks_the_negative_cost_and_says_what_changed() -> None:
    results = _judged("results.json")
    host = results.fact("launch.graph.per_node.host")
    assert host is not None and host.verdict == "fail" and "no_negative_quantity" in host.detail
    assert "(stored verdict: report; judged again by this gpuprobe)" in host.detail
    again = results
    judge_again(again, model_of(again), catalog.invariant_checks())
    assert "stored verdict" not in next(f for f in again.facts if f.id == "latency.l2").detail  # unchanged: silent


def test_a_smoke_run_is_held_to_physics_and_never_to_expectations() -> None:
    h200 = load_all()["h200"]
    dram = _fact("bandwidth.dram_read.v16", 4547.0, unit="GB/s")
    one_warp = _fact("alu.ffma.throughput.ilp1", 7.585, unit="op/clk/SM")  # below any full-run floor
    results = Results(H200, [dram, one_warp], stage="smoke")
    judge_again(results, h200, catalog.invariant_checks())
    assert {f.id: f.verdict for f in results.facts if not f.id.startswith("invariant.")} == {
        dram.id: "report", one_warp.id: "report"}  # fmt: skip
    full = dataclasses.replace(results, stage="full", facts=[_fact(dram.id, 4547.0, unit="GB/s")])
    judge_again(full, h200, catalog.invariant_checks())
    assert full.fact(dram.id).verdict == "pass"


@pytest.mark.parametrize("stage", ["smoke", "full"])
def test_a_planted_impossible_value_on_the_simulated_gpu_never_passes(stage: str) -> None:
    """A simulated run's facts with one planted impossible value each: it fails, whatever the stage."""
    results = demo_results()
    planted = {"launch.graph.per_node.gpu": -0.5, "bandwidth.dram_read_fraction_of_peak": 1.2}
    for fact in results.facts:
        if fact.id in planted:
            fact.value, fact.ci, fact.samples = planted[fact.id], (planted[fact.id],) * 2, [planted[fact.id]]
    judged = dataclasses.replace(results, stage=stage)
    judge_again(judged, None, catalog.invariant_checks())
    assert {f.id: f.verdict for f in judged.facts if f.id in planted} == dict.fromkeys(planted, "fail")


_DEMO: list[Results] = []


def demo_results() -> Results:
    """One simulated run of the probes of the planted facts (launch.graph's per-node cost, the DRAM read's fraction
    of its peak), made once per test process."""
    if not _DEMO:
        import tempfile

        from gpuprobe.measure import session
        from gpuprobe.simulated.demo import run_demo
        from tests.helpers.families import families_cut_to

        with tempfile.TemporaryDirectory() as out, pytest.MonkeyPatch.context() as monkeypatch:
            monkeypatch.setattr(session, "BY_NAME", families_cut_to(("launch.graph", "bandwidth.dram.read.v16")))
            _DEMO.append(run_demo(Path(out)))
    return Results.from_dict(_DEMO[0].to_dict())  # a copy to plant values in


def test_report_renders_a_stored_smoke_run_judged_again_under_its_banner(tmp_path: Path) -> None:
    """``gpuprobe report`` of the first H200 smoke stage: the banner says what a smoke figure is, and the DRAM
    read above the pin rate is a FAIL with why, where the stored file said WARN."""
    from gpuprobe.cli import main

    assert main(["report", str(REPORTS / "smoke-results.json"), "-o", str(tmp_path), "--format", "html"]) == 0
    page = (tmp_path / "factsheet.html").read_text()
    assert "SMOKE STAGE" in page and '<div class="banner" role="alert">' in page
    assert main(["report", str(REPORTS / "smoke-results.json"), "-o", str(tmp_path)]) == 0
    sheet = (tmp_path / "factsheet.md").read_text()
    assert "> **SMOKE STAGE" in sheet
    dram = next(line for line in sheet.splitlines() if line.startswith("| DRAM read bandwidth |"))
    assert dram.endswith("| **FAIL** |"), dram


def test_report_of_a_smoke_file_never_overwrites_the_sheet_beside_it(tmp_path: Path) -> None:
    """The device check leaves ``smoke-results.json`` beside the full run's ``factsheet.md``: its sheet goes to a
    folder named after it."""
    import shutil

    from gpuprobe.cli import main

    shutil.copy(REPORTS / "smoke-results.json", tmp_path / "smoke-results.json")
    (tmp_path / "factsheet.md").write_text("the full run's sheet")
    assert main(["report", str(tmp_path / "smoke-results.json")]) == 0
    assert (tmp_path / "factsheet.md").read_text() == "the full run's sheet"
    assert "SMOKE STAGE" in (tmp_path / "smoke-results" / "factsheet.md").read_text()


def test_the_first_contact_page_names_every_impossible_value_even_beside_a_probe_that_never_ran() -> None:
    from gpuprobe.output.first_contact import OUTCOMES, family_rows

    results = _judged("smoke-results.json")
    smoke_probes = catalog.probes_by_family(smoke=True)
    never_ran = "launch.event"  # meant to be measured, but the deadline came first
    results.families["launch"]["probe_names"] = [*smoke_probes["launch"], never_ran]
    row = {r[0]: r for r in family_rows(results, smoke_probes)}["launch"]
    assert row[2] == OUTCOMES["impossible"] and "launch.graph.per_node.host = -1.4" in row[4]
    assert f"{never_ran}: never ran" in row[4]


@pytest.mark.parametrize("args", [["--unproven-first", "reports"], ["--smoke", "--unproven-first", "no-such-folder"]])
def test_unproven_first_needs_a_smoke_run_and_a_folder_of_results(args: list[str], capsys) -> None:
    from gpuprobe.cli import main

    assert main(["run", *args]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "needs --smoke and a folder of real runs' results" in err


# ---------------------------------------------------------------- stored verdicts are read, never trusted

EXTRACT = Path(__file__).parent / "data" / "fuzz" / "h200_extract_results.json"  # five facts of the H200's run


def stored_lie(tmp_path: Path, fact_id: str, **changes: object) -> Path:
    """The extract with one fact's stored fields changed as given, saved as ``results.json``; a changed value's
    conversions (its ns) changed with it, as a run would have written them."""
    data = json.loads(EXTRACT.read_text())
    fact = next(f for f in data["facts"] if f["id"] == fact_id)
    if "value" in changes and fact.get("converted"):
        scale = changes["value"] / fact["value"]
        fact["converted"] = {unit: value * scale for unit, value in fact["converted"].items()}
    fact.update(changes)
    path = tmp_path / "results.json"
    path.write_text(json.dumps(data))
    return path


NO_BOUNDS = {"low": None, "high": None, "unit": "cycle", "severity": "assert", "source": "", "note": ""}
IN_NS = {"low": 240.0, "high": 330.0, "unit": "ns", "severity": "warn", "source": "", "note": ""}


@pytest.mark.parametrize(
    ("case", "fact_id", "changes", "judged"),
    [
        ("n33 a PASS outside its range", "latency.l2", {"value": 1.0, "samples": [1.0] * 3, "ci": [1.0, 1.0]}, "warn"),
        ("n34 a FAIL inside its range", "latency.dram", {"verdict": "fail"}, "pass"),
        ("n26 an assert with no bound", "latency.l2", {"expectation": NO_BOUNDS}, "pass"),
        ("n37 an expectation in ns", "latency.l2", {"expectation": IN_NS}, "pass"),
    ],
)
def test_every_reader_judges_a_stored_fact_again_from_its_value_and_says_what_differs(
    tmp_path: Path, case: str, fact_id: str, changes: dict, judged: str
) -> None:
    """The newcomer trial 3's stored lies: the verdict is this gpuprobe's, against the model's expectation in the
    fact's own unit (never a stored range, none, or one in another unit), and a changed verdict is named."""
    results, changed = read_judged(stored_lie(tmp_path, fact_id, **changes))
    fact = results.fact(fact_id)
    assert fact.verdict == judged
    assert fact.expectation is not None and (fact.expectation["low"], fact.expectation["unit"]) == (
        {"latency.l2": 240.0, "latency.dram": 550.0}[fact_id], "cycle")  # fmt: skip
    stored = changes.get("verdict", "pass")
    assert changed == ([VerdictChange(fact_id, stored, judged)] if stored != judged else [])
    if changed:
        assert f"{fact_id} (stored {stored}, judged {judged})" in changes_text(changed)
        assert f"(stored verdict: {stored}; judged again by this gpuprobe)" in fact.detail


def test_a_stored_fact_of_a_gpu_no_model_knows_is_reported_never_passed(tmp_path: Path) -> None:
    """n26 in discovery mode: no expectation to judge against, so the stored PASS against none becomes a report."""
    data = json.loads(stored_lie(tmp_path, "latency.l2", expectation=NO_BOUNDS).read_text())
    data["device"]["name"], data["clocks"]["model"] = "Unknown GPU", None
    (tmp_path / "results.json").write_text(json.dumps(data))
    results, changed = read_judged(tmp_path / "results.json")
    fact = results.fact("latency.l2")
    assert (fact.verdict, fact.expectation) == ("report", None)
    assert VerdictChange("latency.l2", "pass", "report") in changed


def test_a_negative_bandwidth_is_impossible_and_set_against_no_peak(tmp_path: Path) -> None:
    """n35: the sheet read "-4547 GB/s | 94 % of the theoretical peak | PASS"."""
    from gpuprobe.output.headline import headline_rows

    results = load(REPORTS / "results.json")
    dram = results.fact("bandwidth.dram_read.v16")
    dram.value, dram.samples, dram.ci = -4547.0, [-4547.0] * 3, (-4548.0, -4546.0)
    path = tmp_path / "results.json"
    save(results, path)
    judged, _ = read_judged(path)
    row = next(r for r in headline_rows(judged) if r.fact_id == dram.id)
    assert is_impossible(row.fact) and row.fact.detail.startswith(f"{IMPOSSIBLE} (invariant.physics.no_negative")
    assert (row.verdict, row.compared) == ("fail", "")


def test_the_expectations_are_parsed_once_until_a_file_of_them_changes(tmp_path: Path, monkeypatch) -> None:
    """Every reader judges with :func:`current_models`: a fleet of a thousand files parses them once, and an edited
    expectation file is read again."""
    import shutil

    from gpuprobe.judge import expectations

    copy = tmp_path / "expectations"
    shutil.copytree(expectations.DEFAULT_DIRECTORY, copy)
    monkeypatch.setattr(expectations, "DEFAULT_DIRECTORY", copy)
    first = current_models()
    assert current_models() is first
    (copy / "h200.toml").write_text((copy / "h200.toml").read_text() + "\n# edited\n")
    assert current_models() is not first and current_models().keys() == first.keys()
