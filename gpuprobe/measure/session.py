"""One measured run of the suite: build for the local arch, check, measure, judge, write.

The order is the design's data flow. The cubin built and contract-checked here is the cubin the
measuring child processes load (each checks its SHA-256 before loading it, and the results record
it). Results are saved atomically after every probe, so an interrupted run keeps all it measured
(the file says ``partial`` until the run completes, and stays so when the run's deadline cut it).

Two stages: "full", every probe; and "smoke", a first contact with new hardware: each family's
cheapest probes once with minimal settings, each under a short limit, written up per family in
``first-contact.md`` (ran and passed its self-check, failed it, crashed, timed out, skipped and why; any
value outside physics flagged).
For every family the results record its planned seconds (:mod:`gpuprobe.measure.plan`) and what it took.
"""

from __future__ import annotations

import dataclasses
import functools
import os
import statistics
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from gpuprobe.build.check import CheckResult, check_probe
from gpuprobe.build.cubin import BuiltModule, build_for
from gpuprobe.build.registry import all_probes
from gpuprobe.build.toolchain import toolkit_description
from gpuprobe.core.arch import parse_arch
from gpuprobe.core.files import make_dirs, write_atomic
from gpuprobe.core.results import Device, ProbeOutcome, Results, code_record, host_record, save
from gpuprobe.families import catalog
from gpuprobe.families.catalog import FAMILIES, OPT_IN
from gpuprobe.judge.expectations import ModelExpectations, match_model
from gpuprobe.judge.verdicts import device_facts, judge_fact, judge_invariants, judge_measured
from gpuprobe.measure.child import file_sha256
from gpuprobe.measure.conditions import CLOCK_PROBE, REFERENCE_KEY
from gpuprobe.measure.isolation import (
    ChildPolicy,
    FailureStreak,
    cut_by_deadline,
    deadline_outcome,
    death_signature,
    run_family,
)
from gpuprobe.measure.lock import folder_lock, gpu_lock
from gpuprobe.measure.plan import (
    FULL,
    REPORT_S,
    FamilyPlan,
    Stage,
    family_plan,
    left_out_line,
    runs_on,
    too_few_gpus,
)
from gpuprobe.measure.progress import PREFIX, ProgressSink, QuietSink, RunProgress
from gpuprobe.output.factsheet import write_report
from gpuprobe.output.first_contact import render_first_contact
from gpuprobe.output.report import gpu_slug
from gpuprobe.runner.gpu import LauncherSpec, device_record, nvml_snapshot, software_versions
from gpuprobe.runner.peers import ONE_GPU

RESULTS_NAME = "results.json"


def clock_during_chases(results: Results) -> float | None:
    """The median SM clock over the long timed regions of the latency sweeps (None if none was long)."""
    values = [
        mhz
        for outcome in results.probes.values()
        for mhz in outcome.series.get("curve", {}).get("sm_mhz", [])
        if isinstance(mhz, float | int)
    ]
    return float(statistics.median(values)) if values else None


def default_out_dir(device: Device, smoke: bool = False) -> Path:
    """Where a run writes when told nowhere: ``reports/<gpu-slug>/`` (a smoke run in its ``first-contact/``)."""
    return Path("reports") / gpu_slug(device.name) / ("first-contact" if smoke else "")


def child_spec(
    module: BuiltModule,
    device: Device,
    launcher: LauncherSpec,
    family: str,
    settings: Any = None,
    datasheet: Mapping[str, float] | None = None,
    clock_usable: bool = False,
) -> dict:
    """What a measuring child needs: the family, the checked cubin, the kernels' signatures, how to launch,
    in its starting state the model's datasheet figures (``state["datasheet"]``, empty when unknown),
    and whether the clock kernel's contract held (the clock read around every probe)."""
    return {
        "family": family,
        "launcher": launcher.factory,
        "launcher_options": launcher.options,
        "device_index": launcher.device_index,
        "cubin": str(module.cubin),
        "cubin_sha256": file_sha256(module.cubin),
        "parameters": module.parameters,
        "device": asdict(device),
        "settings": None if settings is None else asdict(settings),
        "state": {"datasheet": dict(datasheet or {})},
        "clock_usable": clock_usable,
    }


SMOKE_PROBE_LIMIT_S = 20.0  # a smoke probe measures once with minimal settings: seconds, not minutes
FIRST_CONTACT_NAME = "first-contact.md"


def stage_policy(stage: Stage, policy: ChildPolicy) -> ChildPolicy:
    """Smoke probes run once (no retry) under a short limit: a first contact reports, it does not judge."""
    if stage.name != "smoke":
        return policy
    return dataclasses.replace(policy, probe_time_limit_s=min(policy.probe_time_limit_s, SMOKE_PROBE_LIMIT_S),
                               attempts=1)  # fmt: skip


def environment_record(device_index: int, uuid: str) -> dict[str, Any]:
    """What the first run on a machine needs on record: the NVML device record, every software version, and
    the machine (host name, machine id hash, boot id: :func:`gpuprobe.core.results.host_record`)."""
    return {"device_record": device_record(device_index, uuid), "software": software_versions(),
            "host": host_record()}  # fmt: skip


def build_record(module: BuiltModule) -> dict[str, Any]:
    """The cubin the run measures: the one built and checked here, by hash (each measuring process checks it);
    and the gpuprobe that measures: version, commit, uncommitted changes (:func:`gpuprobe.core.results.code_record`)."""
    return {"arch": module.arch.name, "cubin": str(module.cubin), "cubin_sha256": file_sha256(module.cubin),
            "toolkit": toolkit_description(), "gpuprobe": code_record()}  # fmt: skip


STOP_AFTER_FAMILIES = 3  # families in a row whose every probe died the same way end the run


@dataclass
class _SameDeath:
    """Notices when family after family dies the same way (a broken driver or library): the run stops."""

    streak: FailureStreak = field(default_factory=FailureStreak)
    reason: str | None = None

    def family_ended(self, outcomes: list[ProbeOutcome]) -> None:
        deaths = {death_signature(o) for o in outcomes}
        signature = death_signature(outcomes[0]) if outcomes and None not in deaths else None
        if self.streak.see(signature) >= STOP_AFTER_FAMILIES:
            self.reason = f"the last {self.streak.count} families' processes all died the same way ({signature})"


def not_started(results: Results, family: str, order: list[str], stopped: str | None) -> None:
    """A family the run did not reach: its probes ``not_run`` for the deadline, or ``crashed`` when the run
    stopped because family after family died the same way (``stopped``, the reason)."""
    results.families[family]["ended"] = "not_started"
    for name in order:
        stopped_outcome = ProbeOutcome("crashed", f"not measured: {stopped}") if stopped else None
        results.probes[name] = stopped_outcome or deadline_outcome(" before this family started")


INTERRUPTED_DETAIL = "interrupted: the run was stopped before this probe was measured"
SELF_CHECK_ONLY = "self-check only: measured first, at the smoke stage's settings, its facts left out."


def family_record(planned: FamilyPlan, order: list[str]) -> dict[str, Any]:
    """A family's entry in the results' ``families``, before it is measured: its plan and its probes."""
    record: dict[str, Any] = {"planned_s": planned.seconds, "actual_s": None, "probes": len(order),
                              "probe_names": order, "ended": "not_started"}  # fmt: skip
    return {**record, "plan_error": planned.error} if planned.error else record


def interrupted(results: Results, orders: Mapping[str, list[str]], plans: Mapping[str, FamilyPlan]) -> None:
    """The run was stopped (Ctrl-C): each selected family (``orders``: its probes to measure) it had not
    measured to the end is recorded ``interrupted``, and each of its probes with no outcome ``not_run``, so
    the partial results say what was never measured."""
    for family, order in orders.items():
        record = results.families.setdefault(family, family_record(plans[family], order))
        if record.get("ended") in (None, "not_started"):
            record["ended"] = "interrupted"
        for name in order:
            if name not in results.probes:
                results.probes[name] = ProbeOutcome("not_run", INTERRUPTED_DETAIL)


class RunInterrupted(KeyboardInterrupt):
    """A run stopped by Ctrl-C after its partial results (and fact sheet, where it could be written) were
    saved: ``paths``, what it wrote, for the user to be told where they are."""

    def __init__(self, paths: Sequence[Path]) -> None:
        super().__init__("interrupted; partial results in " + ", ".join(str(p) for p in paths))
        self.paths = tuple(paths)


def measure_family(
    results: Results,
    path: Path,
    family: str,
    spec: dict[str, Any],
    order: list[str],
    policy: ChildPolicy,
    run_state: dict[str, Any],
    model: ModelExpectations | None,
    progress: RunProgress,
    publishes: Callable[[str], bool],
) -> None:
    """One family's probes measured into ``results`` (saved after each), its seconds recorded, and the
    run's reference clock carried on in ``run_state``; ``progress`` is told of each probe as it ends. A probe
    ``publishes`` refuses keeps its outcome and gives no facts (the smoke stage's probes measured first)."""
    record = results.families[family]
    record["ended"] = "interrupted"  # until it ends: what a run stopped from outside leaves
    state = {**spec["state"], **run_state}
    started = time.monotonic()
    for measured in run_family(spec, order, policy, state=state):
        results.probes[measured.probe] = measured.outcome
        progress.probe_ended(family, measured.probe, measured.outcome)
        if not publishes(measured.probe) and measured.facts:
            measured.outcome.detail = f"{SELF_CHECK_ONLY} {measured.outcome.detail}".strip()
            measured.facts = []
        results.facts.extend(judge_measured(f, model, results.stage) for f in measured.facts)
        clock = next((f for f in measured.facts if f.id == "device.sm_clock"), None)
        if clock is not None:
            results.clocks["sm_mhz_measured"] = clock.value
            results.clocks["samples"] = clock.samples
        record["actual_s"] = round(time.monotonic() - started, 3)
        save(results, path)
    cut = any(cut_by_deadline(results.probes[name]) for name in order)
    record.update(actual_s=round(time.monotonic() - started, 3), ended="deadline" if cut else "measured")
    if REFERENCE_KEY in state:
        run_state[REFERENCE_KEY] = state[REFERENCE_KEY]


def may_measure(family: str, inject_fault: bool) -> bool:
    """Whether a run may measure ``family``: any but the opt-in ones, and the self-test with ``inject_fault``."""
    return family not in OPT_IN or (family == "selftest" and inject_fault)


def chosen_families(families: Collection[str] | None, inject_fault: bool) -> dict[str, ModuleType]:
    """The catalog's families a run measures: those named (None: every one) that it may (:func:`may_measure`)."""
    return {
        family: measurement
        for family, measurement in FAMILIES.items()
        if may_measure(family, inject_fault) and (families is None or family in families)
    }


def run_suite(
    device: Device,
    launcher: LauncherSpec,
    out_dir: Path,
    forced_model: str | None = None,
    settings: Mapping[str, Any] | None = None,
    policy: ChildPolicy | None = None,
    lock_wait_s: float = 60.0,
    inject_fault: bool = False,
    stage: Stage = FULL,
    deadline_s: float | None = None,
    families: Collection[str] | None = None,
    progress: ProgressSink | None = None,
) -> Results:
    """Measure every runnable probe on ``device``; write results and fact sheet to ``out_dir``.

    The GPU is locked for the run; each family measures in child processes (a faulting or hanging
    probe is recorded, and the rest go on); results are saved after every probe. ``settings`` maps a
    family name to its ``Settings`` (each family's defaults otherwise). ``inject_fault`` adds the
    self-test that faults on purpose, to show the run survives it. ``stage`` "smoke" measures each
    family's cheapest probes once and writes the first-contact report instead of the fact sheet.
    ``deadline_s``: seconds from now after which no more is measured; what is left is recorded
    ``not_run`` ("deadline"), and the results and fact sheet are written as partial. ``families``: the
    catalog names of the families to measure (``pytest probes/test_warp.py`` measures the warp family
    alone); None measures them all. ``progress``: where to say, while it measures, which family, how
    many probes done and the time left (:mod:`gpuprobe.measure.progress`); None says nothing.

    Another run writing into ``out_dir`` is refused with a GpuprobeError, before anything is built or measured.
    Stopped by Ctrl-C, it records what it never measured (``interrupted``), saves the partial results,
    writes their fact sheet (or first-contact page), and raises :class:`RunInterrupted` naming them.
    """
    with folder_lock(make_dirs(out_dir)):  # one run writes a folder at a time
        policy = stage_policy(stage, policy or ChildPolicy())
        if deadline_s is not None:
            policy = dataclasses.replace(policy, deadline=policy.clock() + deadline_s)
        model = match_model(device.name, forced_model)
        if model is not None and model.memory:
            device = dataclasses.replace(device, memory_type=model.memory)
        arch = parse_arch(device.arch)
        datasheet = {key: entry.value for key, entry in model.datasheet.items()} if model else {}
        probes = [p for p in all_probes() if may_measure(p.family, inject_fault)]
        module = build_for(probes, arch)
        checks: dict[str, CheckResult] = {p.name: check_probe(p, module) for p in probes if p.supports(arch)}
        chosen = chosen_families(families, inject_fault)
        selected = {family: chosen[family] for family in stage.family_order(chosen)}
        settings_of = {family: stage.settings(m, (settings or {}).get(family)) for family, m in selected.items()}
        plans = {family: family_plan(family, m, stage, settings_of[family], device) for family, m in selected.items()}
        orders = {
            family: [name for name in stage.probes(measurement) if checks.get(name) and checks[name].status == "ok"]
            for family, measurement in selected.items()
        }
        left_out = [family for family in selected if not runs_on(selected[family], arch.name)]
        if left_out:
            (progress or QuietSink()).line(PREFIX + left_out_line(left_out, arch.name))
        tracker = RunProgress(
            progress or QuietSink(), [(family, len(orders[family]), plans[family].seconds) for family in selected],
            report_s=REPORT_S if stage.name == "full" else 0.0, deadline=policy.deadline, clock=policy.clock,
        )  # fmt: skip
        index = device.gpu_index if device.gpu_index is not None else launcher.device_index
        path = out_dir / RESULTS_NAME
        stopped_by_user = False
        with gpu_lock(device.uuid or f"{device.hostname or 'local'}-gpu{index}", lock_wait_s):
            own = {os.getpid()}
            before = nvml_snapshot(launcher.device_index, device.uuid, own)
            results = Results(device=device, clocks={"nvml_before": before}, stage=stage.name,
                              build=build_record(module),
                              environment=environment_record(launcher.device_index, device.uuid))  # fmt: skip
            results.clocks["model"] = model.key if model else "unknown (discovery mode)"
            results.facts.extend(judge_fact(f, model, stage.name) for f in device_facts(device))
            for name, check in checks.items():
                if check.status != "ok":
                    results.probes[name] = ProbeOutcome(check.status, check.detail)
            clock_usable = checks.get(CLOCK_PROBE) is not None and checks[CLOCK_PROBE].status == "ok"
            run_state: dict[str, Any] = {}  # carried from family to family: the run's reference clock
            dying = _SameDeath()
            for family in selected:  # every family's probes recorded before any is measured
                results.families[family] = family_record(plans[family], orders[family])
            save(results, path)
            try:
                for family in selected:
                    order = orders[family]
                    if policy.seconds_left() <= 0 or dying.reason:
                        not_started(results, family, order, dying.reason)
                        save(results, path)
                        tracker.family_skipped(family, dying.reason or "the run's deadline came first")
                        continue
                    if not order:  # none of its probes runs on this arch, or passed its check: no process for it
                        results.families[family].update(actual_s=0.0, ended="measured")
                        save(results, path)
                        continue
                    if too_few_gpus(selected[family], device):  # what its own process would say, without starting one
                        results.probes.update({name: ProbeOutcome("not_run", ONE_GPU) for name in order})
                        results.families[family].update(actual_s=0.0, ended="measured")
                        save(results, path)
                        tracker.family_skipped(family, ONE_GPU)
                        continue
                    spec = child_spec(module, device, launcher, family, settings_of[family], datasheet, clock_usable)
                    tracker.family_started(family)
                    measure_family(results, path, family, spec, order, policy, run_state, model, tracker,
                                   functools.partial(stage.publishes, selected[family]))  # fmt: skip
                    tracker.family_ended(family)
                    dying.family_ended([results.probes[name] for name in order])
            except KeyboardInterrupt:
                stopped_by_user = True
                interrupted(results, orders, plans)
            finally:
                tracker.close()
            results.clocks["sm_mhz_during_chases"] = clock_during_chases(results)
            judge_invariants(results, catalog.invariant_checks())
            results.clocks["nvml_after"] = nvml_snapshot(launcher.device_index, device.uuid, own)
            results.partial = any(r.get("ended") != "measured" for r in results.families.values())
            save(results, path)
        if stage.name == "smoke":
            written = [out_dir / FIRST_CONTACT_NAME]
            write_atomic(written[0], render_first_contact(results, catalog.probes_by_family(smoke=True)))
        else:
            written = write_report(results, out_dir, sections=catalog.sections())
        if stopped_by_user:
            raise RunInterrupted([path, *(p for p in written if p.suffix in (".md", ".html"))])
        return results
