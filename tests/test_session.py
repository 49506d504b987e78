"""A whole measured run against the simulated GPU in child processes: build, check, measure, judge, write."""

from __future__ import annotations

import dataclasses
import json
import re
from pathlib import Path
from typing import Any

import pytest

from gpuprobe.core.arch import parse_arch
from gpuprobe.core.detection import TARGET_PCT, Spread, detects_pct, run_to_run_pct
from gpuprobe.core.results import Fact, Results, load
from gpuprobe.families import catalog
from gpuprobe.families.sampling import Stopping
from gpuprobe.fleet.compare import NO_DIRECTION, Label, baseline_failure, compare, direction
from gpuprobe.judge.expectations import load_all
from gpuprobe.kernels.check import CheckResult
from gpuprobe.kernels.registry import all_probes
from gpuprobe.measure import session
from gpuprobe.measure.child import file_sha256
from gpuprobe.measure.isolation import ChildPolicy
from gpuprobe.measure.plan import SMOKE, measured_families
from gpuprobe.output import report
from gpuprobe.runner.launcher import LauncherSpec
from gpuprobe.runner.peers import ONE_GPU
from gpuprobe.simulated.demo import run_demo
from gpuprobe.simulated.gpu import SUITE_MEMORY, SimulatedGpu, fast_settings, suite_options
from tests.helpers.families import families_cut_to
from tests.helpers.processes import clock_jumping_while_hung

SIMULATED = "Simulated GPU"
POLICY = ChildPolicy(probe_time_limit_s=60, cooldown_s=0.0)


def simulated(**options) -> LauncherSpec:
    return LauncherSpec("gpuprobe.simulated.gpu:open_simulated", 0, suite_options(**{"name": SIMULATED, **options}))


def device(name: str = SIMULATED):
    return SimulatedGpu(**suite_options(name=name)).device()


def run(tmp_path: Path, launcher: LauncherSpec | None = None, name: str = SIMULATED, **kwargs):
    return session.run_suite(
        device(name), launcher or simulated(name=name), tmp_path, settings=fast_settings(), policy=POLICY, **kwargs
    )


def measure_only(monkeypatch: pytest.MonkeyPatch, *families: str) -> None:
    """Let this test's run measure ``families`` alone, in catalog order. The parent walks the families and
    each measuring child looks its own up by name, so a test about one mechanism (a fault, a contract, a
    model) measures the families its point needs in a few seconds, not all of them in half a minute."""
    assert set(families) <= set(catalog.BY_NAME), families
    only = {name: family for name, family in catalog.BY_NAME.items() if name in families}
    monkeypatch.setattr(session, "BY_NAME", only)


def measure_only_probes(monkeypatch: pytest.MonkeyPatch, *probes: str) -> None:
    """Let this test's run measure ``probes`` alone: :func:`measure_only` of their families, each cut to those
    probes, so a test about a few facts measures their probes, not their families' every one."""
    monkeypatch.setattr(session, "BY_NAME", families_cut_to(probes))


@pytest.fixture(scope="module")
def clean_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Results]:
    """One whole simulated run (every family, unknown GPU, no fault), its output folder and results, shared
    by the tests that each read a different thing from it: the run costs about half a minute, and none of
    these tests changes the results or the files (they only read them)."""
    out = tmp_path_factory.mktemp("clean")
    return out, run_demo(out)  # what `gpuprobe demo` runs


def test_a_run_writes_complete_results_fact_sheet_and_plot(clean_run) -> None:
    out, results = clean_run
    assert not results.partial
    on_disk = load(out / "results.json")
    assert on_disk.partial is False
    assert {f.id for f in on_disk.facts} >= {
        "latency.l1",
        "latency.l2",
        "latency.dram",
        "capacity.l2",
        "device.sm_count",
    }
    assert (out / "factsheet.md").read_text().startswith("# gpuprobe fact sheet: Simulated GPU")
    assert (out / "latency_vs_footprint.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert results.clocks["sm_mhz_during_chases"] == pytest.approx(1755.0, rel=0.01)
    assert results.clocks["sm_mhz_measured"] == pytest.approx(1755.0, rel=0.02)


def test_a_library_is_set_against_the_instruction_peak_an_earlier_family_measured(clean_run) -> None:
    """The wgmma family's per-clock rate reaches the ladder's process-later family through the run's state
    (session.RUN_KEYS): every library fraction of a type wgmma measured is a measurement, not 'no peak measured'."""
    _, results = clean_run
    facts = {f.id: f for f in results.facts}
    fractions = [f for i, f in facts.items() if i.startswith("library.") and i.endswith(".reference.fraction_of_peak")]
    assert {f.id for f in fractions} >= {f"library.cublas.{t}.reference.fraction_of_peak" for t in ("bf16", "e4m3")}
    for measured in fractions:
        assert measured.value is not None and 0 < measured.value <= 1.02, (measured.id, measured.detail)


def test_the_whole_runs_sheet_is_short_and_carries_its_conditions(clean_run) -> None:
    out, results = clean_run
    sheet = (out / "factsheet.md").read_text()
    # every family's facts, each once and briefly: 80.6 KB for 1170 facts before issue 30's families, 94.7 KB for 1403
    # after (69 and 68 bytes a fact): a fact shown twice, or a row grown long, breaks the bound
    assert len(sheet.encode()) < 72 * len(results.facts)
    assert "## Headline" in sheet and sheet.index("## Headline") < sheet.index("## Details")
    conditions = sheet.split("## Run conditions", 1)[1].split("## Details", 1)[0]
    # the simulated GPU's NVML, per probe
    assert re.search(r"\| GPU temperature \(NVML, around the probes\) \| 40 – \d\d °C \|", conditions)
    readings = 2 * sum(1 for p in results.probes.values() if p.conditions)  # NVML before and after each probe measured
    assert f"| Clock-event (throttle) reasons | none in {readings} readings around the probes" in conditions
    ran = sum(1 for p in results.probes.values() if p.status == "ok")
    not_run = len(results.probes) - ran  # the multi-GPU families' probes, on one simulated GPU
    assert f"{ran} of {len(results.probes)} probes ran: {ran} ok; {not_run} never ran." in sheet


def test_a_run_stopped_from_outside_leaves_a_sheet_naming_the_probes_it_never_ran(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    measure_only(monkeypatch, "memory", "warp")

    def stopped(*args: Any, **kwargs: Any) -> Any:
        raise KeyboardInterrupt  # Ctrl-C as the first family starts

    monkeypatch.setattr(session, "run_family", stopped)
    with pytest.raises(KeyboardInterrupt):
        run(tmp_path)
    left = load(tmp_path / "results.json")
    planned = [name for family in ("memory", "warp") for name in left.families[family]["probe_names"]]
    assert planned and left.partial
    assert all(left.probes[name].status == "not_run" for name in planned)  # recorded as never run
    sheet = report.render_markdown(left, {}, sections=catalog.sections())
    assert f"0 of {len(planned)} probes ran; {len(planned)} never ran." in sheet
    assert all(f"`{name}`" in sheet.split("## Probe status", 1)[1] for name in planned)


def test_every_probe_records_the_conditions_it_ran_under(clean_run) -> None:
    _, results = clean_run
    for name, outcome in results.probes.items():
        if outcome.status == "not_run":  # never ran: the links of one GPU (see below)
            continue
        assert {"sm_mhz_before", "sm_mhz_after", "nvml_before", "nvml_after"} <= set(outcome.conditions), name
        assert outcome.conditions["sm_mhz_after"] == pytest.approx(1755.0, rel=0.05), name


def test_an_unknown_gpu_is_measured_in_discovery_mode(clean_run) -> None:
    _, results = clean_run
    measured = [f for f in results.facts if f.id.startswith(("latency.", "capacity."))]
    assert measured and all(f.verdict == "report" for f in measured)
    invariants = [f for f in results.facts if f.id.startswith("invariant.")]
    assert invariants and all(f.verdict == "pass" for f in invariants), [f.detail for f in invariants]
    assert results.clocks["model"].startswith("unknown")


def test_a_known_gpu_is_judged_against_its_model(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the L2 latency judged (with the SM clock); the device facts and datasheet need no probe
    measure_only_probes(monkeypatch, "memory.clock", "memory.latency.global_cg")
    results = run(tmp_path, name="NVIDIA H100 80GB HBM3")  # an H100 SXM's name, with a tiny simulated L2
    verdicts = {f.id: f.verdict for f in results.facts}
    assert verdicts["latency.l2"] == "pass"
    assert verdicts["device.l2_bytes"] == "fail"  # 512 KiB is not an H100's L2: the assert catches it
    assert "OUTSIDE" in results.fact("device.l2_bytes").detail
    assert results.device.memory_type == "HBM3"  # from the model's datasheet: CUDA does not say
    assert "HBM3 (datasheet)" in (tmp_path / "factsheet.md").read_text()


def test_a_forced_model_replaces_detection(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    measure_only_probes(monkeypatch, "memory.clock")  # the model and the device facts need no other probe
    results = run(tmp_path, forced_model="a100")
    assert results.clocks["model"] == "a100"
    assert results.fact("device.sm_count").verdict == "fail"  # 132 SMs is not an A100


def test_a_probe_whose_contract_fails_reports_the_violation_and_no_number(tmp_path: Path, monkeypatch) -> None:
    real = session.check_probe

    def check(probe, module):
        if probe.name == "memory.latency.global_ca":
            return CheckResult(probe.name, module.arch.name, "violated", "rule 'count' violated: found 31")
        return real(probe, module)

    monkeypatch.setattr(session, "check_probe", check)
    measure_only(monkeypatch, "memory")
    results = run(tmp_path)
    outcome = results.probes["memory.latency.global_ca"]
    assert outcome.status == "violated" and "found 31" in outcome.detail
    assert results.fact("latency.l1") is None
    assert results.fact("latency.l2") is not None


def test_an_interrupted_run_keeps_what_it_measured(tmp_path: Path, monkeypatch) -> None:
    real = session.run_family

    def interrupted(spec, order, policy, **kwargs):
        for measured in real(spec, order, policy, **kwargs):
            yield measured
            if measured.probe == "memory.latency.shared":
                raise KeyboardInterrupt

    monkeypatch.setattr(session, "run_family", interrupted)
    measure_only(monkeypatch, "memory", "launch")
    with pytest.raises(session.RunInterrupted) as stopped:
        run(tmp_path)
    assert stopped.value.paths == (tmp_path / "results.json", tmp_path / "factsheet.md")
    assert "partial" in (tmp_path / "factsheet.md").read_text().lower()  # the partial sheet is written too
    data = json.loads((tmp_path / "results.json").read_text())
    assert data["partial"] is True
    ids = {f["id"] for f in data["facts"]}
    assert {"device.sm_clock", "overhead.clock_read", "latency.shared"} <= ids
    assert "latency.l2" not in ids
    assert {family: record["ended"] for family, record in data["families"].items()} == {
        "memory": "interrupted", "launch": "interrupted",
    }  # fmt: skip
    never = {name: p["detail"] for name, p in data["probes"].items() if p["status"] == "not_run"}
    assert set(never) == {"memory.latency.global_ca", "memory.latency.global_cg", "memory.latency.warp_v16.l2",
                          "memory.latency.warp_v16.dram", "launch.stream", "launch.graph", "launch.event"}  # fmt: skip
    assert set(never.values()) == {session.INTERRUPTED_DETAIL}


def test_an_injected_fault_is_recorded_and_the_run_goes_on(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # the faulting self-test first, then a family that goes on (its probes of the SM clock and the DRAM latency)
    measure_only_probes(monkeypatch, "selftest.fault_isolation", "memory.clock", "memory.latency.global_cg")
    results = run(tmp_path, inject_fault=True)
    fault = results.probes["selftest.fault_isolation"]
    assert fault.status == "crashed" and "CUDA_ERROR_ILLEGAL_ADDRESS" in fault.detail
    assert {n: p.status for n, p in results.probes.items() if n.startswith("memory.")} == {
        n: "ok" for n in results.probes if n.startswith("memory.")
    }
    assert results.fact("latency.dram") is not None


def test_the_faulting_self_test_runs_only_when_asked(clean_run) -> None:
    _, results = clean_run
    assert "selftest.fault_isolation" not in results.probes


def test_the_model_datasheet_reaches_the_measuring_children(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    specs: list[dict] = []
    real = session.run_family

    def spy(spec, order, policy, **kwargs):
        specs.append(spec)
        return real(spec, order, policy, **kwargs)

    monkeypatch.setattr(session, "run_family", spy)
    # two families (memory's first probe); loaded_latency reads the datasheet's DRAM
    measure_only_probes(monkeypatch, "memory.clock", *catalog.BY_NAME["loaded_latency"].probes)
    run(tmp_path, forced_model="h100_sxm")
    expected = {key: entry.value for key, entry in session.match_model("", "h100_sxm").datasheet.items()}
    assert specs and all(spec["state"] == {"datasheet": expected} for spec in specs)
    assert all(spec["device"]["name"] == SIMULATED for spec in specs)


def test_every_probe_yields_exactly_the_facts_it_declares(clean_run) -> None:
    _, results = clean_run
    declared = {p.name: set(p.facts) for p in all_probes()}
    produced: dict[str, set[str]] = {}
    for fact in results.facts:
        produced.setdefault(fact.probe, set()).add(fact.id)
    for name, outcome in results.probes.items():
        if outcome.status == "ok" and name in declared:
            assert produced.get(name, set()) == declared[name], name


def test_every_expectation_is_of_a_fact_some_probe_declares() -> None:
    declared = {f for p in all_probes() for f in p.facts} | {"device.sm_count", "device.l2_bytes"}
    for key, model in load_all().items():
        assert not set(model.facts) - declared, f"{key}: expectations for facts no probe declares"


def test_a_run_records_its_build_environment_and_each_family_planned_and_actual_seconds(clean_run) -> None:
    on_disk = load(clean_run[0] / "results.json")
    assert on_disk.stage == "full"
    assert on_disk.build["cubin_sha256"] == file_sha256(Path(on_disk.build["cubin"]))
    assert on_disk.build["arch"] == "sm_90a" and "ptxas" in on_disk.build["toolkit"]
    assert set(on_disk.environment) == {"device_record", "software", "host"}
    assert set(on_disk.families) == set(measured_families())
    for family, record in on_disk.families.items():
        assert record["ended"] == "measured", family
        idle = family in ("p2p", "collectives", "tcgen05")  # one GPU, sm_100a's alone: planned and run as nothing
        assert (
            (record["planned_s"] == record["actual_s"] == 0.0)
            if idle
            else (record["planned_s"] > 0 and (record["actual_s"] > 0) == (record["probes"] > 0))
        ), family
    assert [f for f, record in on_disk.families.items() if not record["probes"]] == ["tcgen05"]  # sm_100a's alone


def test_the_multi_gpu_families_measure_no_link_on_one_gpu_and_the_run_is_complete(clean_run) -> None:
    """One simulated GPU: the p2p and collectives probes are not run ("1 GPU visible"), never failed, no
    process is started for them, and no probe the run's deadline did not cut makes the results partial."""
    _, results = clean_run
    multi = [o for n, o in results.probes.items() if n.startswith(("p2p.", "collectives."))]
    assert multi and {(o.status, o.detail) for o in multi} == {("not_run", ONE_GPU)}
    assert not results.partial
    assert results.device.visible_gpus == 1  # so no measuring process was started for them
    p2p = {key: value for key, value in results.families["p2p"].items() if key != "probe_names"}
    assert p2p == {"planned_s": 0.0, "actual_s": 0.0, "probes": 6, "ended": "measured"}


def test_a_measuring_process_refuses_a_cubin_that_is_not_the_one_checked(tmp_path: Path, monkeypatch) -> None:
    real = session.child_spec

    def tampered(*args, **kwargs):
        return {**real(*args, **kwargs), "cubin_sha256": "0" * 64}

    monkeypatch.setattr(session, "child_spec", tampered)
    results = run(tmp_path)
    outcome = results.probes["memory.clock"]
    assert outcome.status == "crashed" and "is not the cubin that was checked" in outcome.detail


def test_the_deadline_ends_the_run_with_the_rest_not_run_and_the_sheet_partial(tmp_path: Path) -> None:
    """The deadline passes while memory.overhead.clock_read hangs (the run's clock jumps then), whatever
    the machine's speed."""
    hang_file = tmp_path / "hanging"
    policy = dataclasses.replace(POLICY, clock=clock_jumping_while_hung(hang_file))
    launcher = simulated(faults={"gp_clock_overhead": "hang"}, hang_file=str(hang_file))
    results = session.run_suite(device(), launcher, tmp_path, settings=fast_settings(), policy=policy, deadline_s=60)
    assert results.partial and load(tmp_path / "results.json").partial
    ended = {family: record["ended"] for family, record in results.families.items()}
    assert ended["memory"] == "deadline" and ended["launch"] == "not_started"
    assert results.probes["memory.clock"].status == "ok"
    cut = [name for name, outcome in results.probes.items() if outcome.status == "not_run"]
    assert "memory.overhead.clock_read" in cut
    assert all(results.probes[name].detail.startswith("deadline") for name in cut)
    assert "partial" in (tmp_path / "factsheet.md").read_text().lower()


def test_a_smoke_run_measures_each_family_cheapest_probes_and_writes_the_first_contact_page(tmp_path: Path) -> None:
    """On GPU 0 of a simulated node of two, so that the multi-GPU families have a link to measure too."""
    node = {"peer_node": {"count": 2}}
    two = SimulatedGpu(**suite_options(name=SIMULATED, **node)).device()
    results = session.run_suite(two, simulated(**node), tmp_path, policy=POLICY, stage=SMOKE)
    assert results.stage == "smoke" and not results.partial
    smoke = {p for family in measured_families().values() for p in family.smoke.probes}
    measured = set(results.probes) - {n for n, p in results.probes.items() if p.status in ("violated", "error")}
    assert measured == smoke & {p.name for p in all_probes() if p.supports(parse_arch("sm_90a"))}
    assert {p.status for name, p in results.probes.items() if name in smoke} == {"ok"}
    page = (tmp_path / "first-contact.md").read_text()
    runnable = [f for f in measured_families() if set(measured_families()[f].smoke.probes) & measured]
    verdict = (f"**{len(runnable)} of {len(measured_families())} families ran, passed their self-checks, every value "
               "within physics.**")  # fmt: skip
    assert verdict + " Not: tcgen05 (skipped: arch lacks it)." in page  # the simulated sm_90a has no tcgen05
    assert not (tmp_path / "factsheet.md").exists()


def test_a_run_whose_families_all_die_the_same_way_stops_after_three(tmp_path: Path) -> None:
    results = run(tmp_path, launcher=simulated(faults={"gp_sm_clock": "raise"}))  # every probe's clock read fails
    ended = [record["ended"] for record in results.families.values()]
    assert ended[:3] == ["measured"] * 3 and set(ended[3:]) == {"not_started"}
    stopped = [o for n, o in results.probes.items() if n.startswith("launch.")]
    assert stopped and all("the last 3 families' processes all died the same way" in o.detail for o in stopped)
    assert results.partial


# ---- regression checks on the simulated GPU: a second run of it, and changed hardware -----------------
#
# The simulated GPU has noise between runs (gpuprobe/simulated/gpu.py: a factor per simulated quantity drawn from
# the seed), so a second run with another seed is what a second run of an unchanged GPU is, and a run of
# a part with changed options is a changed GPU. clean_run is the baseline of both.

CHANGED_FACTS = (
    "latency.l2",  # L2 latency +5 %
    "bandwidth.dram_read.v16",  # DRAM bandwidth -5 %
    "tensor.mma_sync.f16.m16n8k16.throughput",  # one tensor-core rate -5 %
    "launch.stream.host_latency.cupy",  # launch overhead +10 %
)
#: The probes that measure them (and the SM clock the memory latencies are converted by).
CHANGED_PROBES = ("memory.clock", "memory.latency.global_cg", "bandwidth.dram.read.v16", "mma.f16.m16n8k16.ilp8",
                  "launch.stream")  # fmt: skip


def changed_hardware() -> dict[str, Any]:
    """The simulated part's options with its L2 latency 5 % longer, its DRAM bandwidth 5 % lower, its f16
    m16n8k16 mma peak 5 % lower and its CuPy launch overhead 10 % longer, measured with another seed."""
    part = SimulatedGpu()
    l2 = part.hierarchy_l2[0][1]

    def slower_l2(hierarchy: list) -> list:
        return [(size, cycles * 1.05 if cycles == l2 else cycles) for size, cycles in hierarchy]

    return {
        "seed": 9,
        "hierarchy_l1": slower_l2(part.hierarchy_l1),
        "hierarchy_l2": slower_l2(part.hierarchy_l2),
        "family_options": {
            **SUITE_MEMORY,
            "bw_dram_gbps": SUITE_MEMORY["bw_dram_gbps"] * 0.95,
            "mma_peak": {"f16.m16n8k16": 0.95},
        },
        "enqueue_us": {via: us * 1.10 if via == "cupy" else us for via, us in part.enqueue_us.items()},
    }


#: The families the second run measures: those with the most sampled facts per second of simulation (about
#: half of all such facts, in a third of a whole run's time), of every kind: latencies, bandwidths, rates.
SECOND_RUN_FAMILIES = ("bandwidth", "atomics", "tma", "alu", "mma", "warp")


@pytest.fixture(scope="module")
def second_run(tmp_path_factory: pytest.TempPathFactory) -> Results:
    """Another run of the unchanged simulated GPU, of ``SECOND_RUN_FAMILIES``: another seed, so other
    run-to-run factors."""
    with pytest.MonkeyPatch.context() as monkeypatch:
        measure_only(monkeypatch, *SECOND_RUN_FAMILIES)
        return run(tmp_path_factory.mktemp("second"), simulated(seed=8))


def test_a_second_run_of_the_unchanged_simulated_gpu_has_at_most_one_false_worse(clean_run, second_run) -> None:
    comparison = compare(clean_run[1], second_run)
    assert comparison.tested >= 250  # every fact with samples of the second run's families, in both runs
    assert len(comparison.worse()) <= 1, [baseline_failure(r) for r in comparison.worse()]


def test_changed_simulated_hardware_is_worse_in_each_changed_fact(clean_run, tmp_path: Path, monkeypatch) -> None:
    measure_only_probes(monkeypatch, *CHANGED_PROBES)  # the changed facts' probes: the assertions read no other
    changed = run(tmp_path, simulated(**changed_hardware()))
    comparison = compare(clean_run[1], changed)
    for fact_id in CHANGED_FACTS:
        row = comparison.row(fact_id)
        assert row is not None and row.label == Label.WORSE, baseline_failure(row) if row else fact_id


DETECTING_SHARE = 0.8
"""The share of the simulated run's facts with samples that default sampling lets detect a 5 % change."""


def detecting_shares(results: Results) -> tuple[float, float]:
    """Of the facts with samples (two or more: a fact of one sample is a count or a constant derived from the
    others, such as a goodput efficiency, with no noise to detect anything by): the share whose samples detect
    ``TARGET_PCT`` in this run, and the share whose noise would let them at default sampling's most repeats
    (:class:`Stopping`)."""
    sampled = [f for f in results.facts if len(f.samples) > 1 and f.value is not None]
    most = Stopping().max_repeats

    def at_most(fact: Fact) -> bool:
        noise = Spread.of(fact.samples).noise_pct
        if noise is None:
            return False
        found = detects_pct(Spread(most, 1.0, (noise / 100.0) ** 2), run_to_run=run_to_run_pct(fact.id, fact.unit))
        return found is not None and found <= TARGET_PCT

    def detects(fact: Fact) -> bool:
        return fact.detection is not None and fact.detection.detects_pct is not None and not fact.detection.limit

    return sum(map(detects, sampled)) / len(sampled), sum(map(at_most, sampled)) / len(sampled)


def test_default_sampling_lets_most_facts_detect_a_five_percent_change(clean_run) -> None:
    now, at_default = detecting_shares(load(clean_run[0] / "results.json"))
    print(f"facts detecting 5 %: {now:.0%} in this run, {at_default:.0%} at default sampling")
    assert at_default >= DETECTING_SHARE


SHIFTS_PCT = (2.0, 5.0, 10.0)


def caught_share(base: Results, new: Results, shift_pct: float) -> float:
    """Of the facts with a direction sampled in both runs, the share labelled WORSE once ``new``'s samples
    are made ``shift_pct`` % worse, on top of what moved between the two runs of the simulated GPU."""
    shifted, ids = [], set()
    for fact in new.facts:
        sign = direction(fact.id, fact.unit)
        if not (fact.samples and fact.value is not None and base.fact(fact.id) and sign != NO_DIRECTION):
            shifted.append(fact)
            continue
        factor = 1.0 - sign * shift_pct / 100.0  # higher is better: lower; lower is better: higher
        ids.add(fact.id)
        shifted.append(dataclasses.replace(fact, value=fact.value * factor, samples=[s * factor for s in fact.samples]))
    comparison = compare(base, dataclasses.replace(new, facts=shifted))
    return sum(comparison.row(i).label == Label.WORSE for i in ids) / len(ids)


def test_a_regression_of_five_percent_is_caught_in_most_facts_of_the_simulated_gpu(clean_run, second_run) -> None:
    caught = {shift: caught_share(clean_run[1], second_run, shift) for shift in SHIFTS_PCT}
    print("caught: " + ", ".join(f"{shift:g} % worse: {share:.0%}" for shift, share in caught.items()))
    assert caught[2.0] <= caught[5.0] <= caught[10.0]
    assert caught[5.0] >= DETECTING_SHARE - 0.2 and caught[10.0] >= DETECTING_SHARE


def test_results_are_written_as_probes_end_at_most_once_a_second(tmp_path: Path) -> None:
    """A probe's end writes the results at once when the last write is a second old, else within that second (the
    run ticks while it waits on its measuring process): a full run's hundreds of probes pay a few writes a second,
    not one each, and a run killed outright loses at most its last second's probes."""
    from gpuprobe.core.results import ProbeOutcome

    now = [0.0]
    results = Results(device())
    path = tmp_path / "results.json"
    recording = session.Recording(results, path, None, None, clock=lambda: now[0])

    def written() -> set[str]:
        return set(json.loads(path.read_text())["probes"])

    results.probes["a"] = ProbeOutcome("ok")
    recording.save_soon()
    assert written() == {"a"}  # the first probe's end: at once
    now[0] = 0.6
    results.probes["b"] = ProbeOutcome("ok")
    recording.save_soon()
    recording.tick()
    assert written() == {"a"}  # within the second of the last write: not yet
    now[0] = 1.0
    recording.tick()
    assert written() == {"a", "b"}
    path.unlink()
    now[0] = 5.0
    recording.tick()  # nothing unwritten: no write
    assert not path.exists()
