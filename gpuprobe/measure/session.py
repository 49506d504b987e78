"""One measured run of the suite: build for the local arch and check, plan, measure, judge, write.

:func:`run_suite` is those five steps, in the design's data flow: :func:`build_and_check`, :func:`select`
(the families, their settings, plans and probes), :func:`measure_families` (each fact judged as its probe
ends), :func:`judge_run` (the clock each absolute rate ran at, the invariants over them all),
:func:`write_pages`. The cubin built and contract-checked here is the cubin the measuring child processes
load (each checks its SHA-256 before loading it, and the results record it). Results are saved atomically
as probes end (:class:`Recording`), so an interrupted run keeps all it measured (the file says ``partial`` until the run
completes, and stays so when the run's deadline cut it).

Two stages: "full", every probe; and "smoke", a first contact with new hardware: each family's
cheapest probes once with minimal settings, each under a short limit, written up per family in
``first-contact.md`` (ran and passed its self-check, failed it, crashed, timed out, skipped and why; any
value outside physics flagged).
For every family the results record its planned seconds (:mod:`gpuprobe.measure.plan`) and what it took.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import os
import statistics
import time
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuprobe.core.arch import parse_arch
from gpuprobe.core.files import make_dirs, write_atomic
from gpuprobe.core.results import DeclaredProbe, Device, ProbeOutcome, Results, code_record, host_record, save
from gpuprobe.families import catalog, instruction_peak
from gpuprobe.families.base import Family, Measured
from gpuprobe.families.catalog import BY_NAME, OPT_IN
from gpuprobe.judge.expectations import ModelExpectations, match_model
from gpuprobe.judge.verdicts import current_models, device_facts, judge_fact, judge_measured, judge_together
from gpuprobe.kernels.check import CheckResult, check_probe, checked_module
from gpuprobe.kernels.cubin import BuiltModule
from gpuprobe.kernels.registry import CLOCK_PROBE, all_probes, declared_probes
from gpuprobe.kernels.toolchain import toolkit_description
from gpuprobe.measure.child import file_sha256
from gpuprobe.measure.conditions import REFERENCE_KEY
from gpuprobe.measure.isolation import (
    ChildPolicy,
    FailureStreak,
    MeasuringProcess,
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
from gpuprobe.output.factsheet import gpu_slug, write_report
from gpuprobe.output.first_contact import render_first_contact
from gpuprobe.runner.device import software_versions
from gpuprobe.runner.launcher import LauncherSpec
from gpuprobe.runner.nvml import device_record, nvml_snapshot
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


def may_measure(family: str, inject_fault: bool) -> bool:
    """Whether a run may measure ``family``: any but the opt-in ones, and the self-test with ``inject_fault``."""
    return family not in OPT_IN or (family == "selftest" and inject_fault)


def chosen_families(families: Collection[str] | None, inject_fault: bool) -> dict[str, Family]:
    """The catalog's families a run measures: those named (None: every one) that it may (:func:`may_measure`)."""
    return {
        family: measurement
        for family, measurement in BY_NAME.items()
        if may_measure(family, inject_fault) and (families is None or family in families)
    }


# ---------------------------------------------------------------- build and check


@dataclass(frozen=True)
class Build:
    """What a run measures with: the device (its memory type from its model's datasheet), the GPU model its facts
    are held to (None: discovery mode), the cubin built for its arch, each probe's SASS contract check (the
    probes that target the arch), and every probe declared."""

    device: Device
    model: ModelExpectations | None
    module: BuiltModule
    checks: dict[str, CheckResult]
    declared: dict[str, DeclaredProbe]

    def passed(self, probe: str) -> bool:
        """Whether ``probe`` targets the arch and its contract held: only such a probe is measured."""
        check = self.checks.get(probe)
        return check is not None and check.status == "ok"

    @property
    def clock_fact(self) -> str | None:
        """The fact the clock probe declares (the SM clock), which the results' ``clocks`` repeat."""
        clock = self.declared.get(CLOCK_PROBE)
        return clock.facts[0] if clock is not None and clock.facts else None

    @property
    def datasheet(self) -> dict[str, float]:
        """The model's datasheet figures (empty when the GPU model is not known)."""
        return {key: entry.value for key, entry in self.model.datasheet.items()} if self.model else {}


def build_and_check(device: Device, forced_model: str | None, inject_fault: bool) -> Build:
    """The cubin for ``device``'s arch, built from every probe that targets it (the very module ``gpuprobe check``
    builds for the arch, so a run after a check, or after another run of any families, builds nothing: an opt-in
    family's kernels in it are never launched unless asked), and each probe the run may measure checked against
    its contract (both read back from the check cache where it records them:
    :func:`~gpuprobe.kernels.check.checked_module`); ``device`` matched to its GPU model (``forced_model``: that
    one)."""
    model = match_model(device.name, forced_model, current_models())
    if model is not None and model.memory:
        device = dataclasses.replace(device, memory_type=model.memory)
    arch = parse_arch(device.arch)
    declared = all_probes()
    targeted = [p for p in declared if p.supports(arch)]
    module = checked_module(targeted, arch)
    checks = {p.name: check_probe(p, module) for p in targeted if may_measure(p.family, inject_fault)}
    return Build(device, model, module, checks, declared_probes(declared))


# ---------------------------------------------------------------- plan


@dataclass(frozen=True)
class Selection:
    """The families a run measures, in measuring order, each with its settings, its plan and the probes it
    measures (those of the stage that passed their check)."""

    families: dict[str, Family]
    settings: dict[str, Any]
    plans: dict[str, FamilyPlan]
    probes: dict[str, list[str]]


def select(
    build: Build,
    stage: Stage,
    settings: Mapping[str, Any] | None,
    families: Collection[str] | None,
    inject_fault: bool,
    say: ProgressSink,
) -> Selection:
    """The families a run measures (:func:`chosen_families`), in the stage's order, with the settings given (the
    stage's otherwise), each planned; ``say`` is told which none of whose probes runs on the arch."""
    chosen = chosen_families(families, inject_fault)
    selected = {family: chosen[family] for family in stage.family_order(chosen)}
    settings_of = {family: stage.settings(m, (settings or {}).get(family)) for family, m in selected.items()}
    arch, device = build.module.arch.name, build.device
    left_out = [family for family, m in selected.items() if not runs_on(m, arch)]
    if left_out:
        say.line(PREFIX + left_out_line(left_out, arch))
    return Selection(
        families=selected,
        settings=settings_of,
        plans={family: family_plan(family, m, stage, settings_of[family], device) for family, m in selected.items()},
        probes={family: [name for name in stage.probes(m) if build.passed(name)] for family, m in selected.items()},
    )


# ---------------------------------------------------------------- measure


SAVE_EVERY_S = 1.0  # while probes end faster than this, the results are written at most this often


@dataclass
class Recording:
    """A run's results as it measures: each fact judged as its probe ends, the SM clock the clock probe measured
    kept in the ``clocks`` too, the file saved as probes end and once more when the run ends.

    A probe's end writes the file at once when the last write is :data:`SAVE_EVERY_S` old, else within that time
    (:meth:`tick`, called while the run waits on its measuring process): each write encodes the whole results,
    a fifth of a second for a full run's on the build machine, which a write after each of several hundred
    probes made the run's largest cost. A run killed outright loses at most its last second's probes."""

    results: Results
    path: Path
    model: ModelExpectations | None
    clock_fact: str | None
    clock: Callable[[], float] = time.monotonic
    _saved_at: float = field(default=-math.inf, init=False)
    _unsaved: bool = field(default=False, init=False)

    def save(self) -> None:
        save(self.results, self.path)
        self._saved_at, self._unsaved = self.clock(), False

    def save_soon(self) -> None:
        """The results changed: written now if the last write is :data:`SAVE_EVERY_S` old, else by :meth:`tick`."""
        self._unsaved = True
        self.tick()

    def tick(self) -> None:
        """Write what is not written yet, if the last write is :data:`SAVE_EVERY_S` old."""
        if self._unsaved and self.clock() - self._saved_at >= SAVE_EVERY_S:
            self.save()

    def finish(self, launcher: LauncherSpec) -> None:
        """The run's end: the GPU as NVML saw it after, whether the run is partial (a family not measured to
        its end), saved."""
        results = self.results
        results.clocks["nvml_after"] = nvml_snapshot(launcher.device_index, results.device.uuid, {os.getpid()})
        results.partial = any(record.get("ended") != "measured" for record in results.families.values())
        self.save()

    def probe_ended(self, measured: Measured, publishes: bool) -> None:
        """One probe's outcome, and its facts judged; a probe that does not publish (the smoke stage's probes
        measured first) keeps its outcome and gives no facts."""
        results = self.results
        results.probes[measured.probe] = measured.outcome
        if not publishes and measured.facts:
            measured.outcome.detail = f"{SELF_CHECK_ONLY} {measured.outcome.detail}".strip()
            measured.facts = []
        results.facts.extend(judge_measured(f, self.model, results.stage) for f in measured.facts)
        clock = next((f for f in measured.facts if f.id == self.clock_fact), None)
        if clock is not None:
            results.clocks["sm_mhz_measured"] = clock.value
            results.clocks["samples"] = clock.samples


# What one family's state carries to every later family's: the run's reference clock, and the instruction peak per
# type the wgmma and mma families measured, which the ladder and frameworks families set their libraries against.
RUN_KEYS = (REFERENCE_KEY, instruction_peak.STATE_KEY)


def record_family(
    recording: Recording,
    family: str,
    spec: dict[str, Any],
    order: list[str],
    process: MeasuringProcess,
    run_state: dict[str, Any],
    progress: RunProgress,
    publishes: Callable[[str], bool],
) -> None:
    """One family's probes (``order``) measured in the run's measuring ``process`` into the recording, its seconds
    recorded (and why its process ended itself after it, if it did), and what the run carries from family to family
    (:data:`RUN_KEYS`) carried on in ``run_state``; ``progress`` is told of each probe as it ends, and a probe
    ``publishes`` refuses gives no facts."""
    record = recording.results.families[family]
    record["ended"] = "interrupted"  # until it ends: what a run stopped from outside leaves
    state = {**spec["state"], **run_state}
    started = time.monotonic()
    for measured in run_family(spec, order, process.policy, state=state, process=process, waiting=recording.tick):
        progress.probe_ended(family, measured.probe, measured.outcome)
        recording.probe_ended(measured, publishes(measured.probe))
        record["actual_s"] = round(time.monotonic() - started, 3)
        recording.save_soon()
    cut = any(cut_by_deadline(recording.results.probes[name]) for name in order)
    record.update(actual_s=round(time.monotonic() - started, 3), ended="deadline" if cut else "measured")
    if process.notes:
        record["process_ended"] = "; ".join(process.notes)
        process.notes.clear()
    run_state.update({key: state[key] for key in RUN_KEYS if key in state})
    recording.save()


def measure_families(
    recording: Recording,
    build: Build,
    selection: Selection,
    launcher: LauncherSpec,
    stage: Stage,
    policy: ChildPolicy,
    say: ProgressSink,
) -> bool:
    """Each selected family measured in turn (:func:`record_family`), until the run's deadline, or until family
    after family died the same way; ``say`` is told where the run stands. True when Ctrl-C stopped it: what it
    never measured is recorded ``interrupted``."""
    results, families = recording.results, selection.families
    tracker = RunProgress(
        say, [(family, len(selection.probes[family]), selection.plans[family].seconds) for family in families],
        report_s=REPORT_S if stage.name == "full" else 0.0, deadline=policy.deadline, clock=policy.clock,
    )  # fmt: skip
    run_state: dict[str, Any] = {}  # carried from family to family (RUN_KEYS)
    dying = _SameDeath()
    try:
        with MeasuringProcess(policy) as process:  # one process serves family after family while it lives
            for family, measured in families.items():
                order = selection.probes[family]
                if policy.seconds_left() <= 0 or dying.reason:
                    not_started(results, family, order, dying.reason)
                    recording.save()
                    tracker.family_skipped(family, dying.reason or "the run's deadline came first")
                    continue
                if not order:  # none of its probes runs on this arch, or passed its check: nothing to measure
                    results.families[family].update(actual_s=0.0, ended="measured")
                    recording.save()
                    continue
                if too_few_gpus(measured, build.device):  # what the measuring process would say, without asking it
                    results.probes.update({name: ProbeOutcome("not_run", ONE_GPU) for name in order})
                    results.families[family].update(actual_s=0.0, ended="measured")
                    recording.save()
                    tracker.family_skipped(family, ONE_GPU)
                    continue
                spec = child_spec(build.module, build.device, launcher, family, selection.settings[family],
                                  build.datasheet, build.passed(CLOCK_PROBE))  # fmt: skip
                tracker.family_started(family)
                record_family(recording, family, spec, order, process, run_state, tracker,
                              functools.partial(stage.publishes, measured))  # fmt: skip
                tracker.family_ended(family)
                dying.family_ended([results.probes[name] for name in order])
    except KeyboardInterrupt:
        interrupted(results, selection.probes, selection.plans)
        return True
    finally:
        tracker.close()
    return False


# ---------------------------------------------------------------- the run


def start_results(build: Build, launcher: LauncherSpec, stage: Stage, selection: Selection) -> Results:
    """A run's results before it measures: the device and its own facts judged, the GPU as NVML saw it, the cubin,
    the machine, every probe declared, each probe whose check failed, and each family with the probes it will
    measure."""
    device, index = build.device, launcher.device_index
    before = nvml_snapshot(index, device.uuid, {os.getpid()})
    results = Results(device=device, clocks={"nvml_before": before}, stage=stage.name, build=build_record(build.module),
                      environment=environment_record(index, device.uuid), declared_probes=build.declared)  # fmt: skip
    results.clocks["model"] = build.model.key if build.model else "unknown (discovery mode)"
    results.facts.extend(judge_fact(f, build.model, stage.name) for f in device_facts(device))
    for name, check in build.checks.items():
        if check.status != "ok":
            results.probes[name] = ProbeOutcome(check.status, check.detail)
    for family in selection.families:  # every family's probes recorded before any is measured
        results.families[family] = family_record(selection.plans[family], selection.probes[family])
    return results


def judge_run(results: Results) -> None:
    """What the run says once measured: the SM clock over the latency chases, the clock each absolute rate ran at,
    and every invariant (the facts it fails marked); each fact was judged as its probe ended."""
    results.clocks["sm_mhz_during_chases"] = clock_during_chases(results)
    judge_together(results, catalog.invariant_checks())


def write_pages(results: Results, out_dir: Path, stage: Stage) -> list[Path]:
    """The fact sheet (a smoke run: the first-contact page) written beside the results; the paths written."""
    if stage.name == "smoke":
        page = out_dir / FIRST_CONTACT_NAME
        write_atomic(page, render_first_contact(results, catalog.probes_by_family(smoke=True)))
        return [page]
    return write_report(results, out_dir, sections=catalog.sections())


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

    The GPU is locked for the run; the families measure in a child process that serves one after another (a
    faulting or hanging probe is recorded, and the rest go on in a fresh one); results are saved as probes end.
    ``settings`` maps a family name to its ``Settings`` (each family's defaults otherwise). ``inject_fault`` adds the
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
    say = progress or QuietSink()
    with folder_lock(make_dirs(out_dir)):  # one run writes a folder at a time
        policy = stage_policy(stage, policy or ChildPolicy())
        if deadline_s is not None:
            policy = dataclasses.replace(policy, deadline=policy.clock() + deadline_s)
        build = build_and_check(device, forced_model, inject_fault)
        selection = select(build, stage, settings, families, inject_fault, say)
        with gpu_lock(lock_name(build.device, launcher), lock_wait_s):
            results = start_results(build, launcher, stage, selection)
            recording = Recording(results, out_dir / RESULTS_NAME, build.model, build.clock_fact)
            recording.save()
            stopped_by_user = measure_families(recording, build, selection, launcher, stage, policy, say)
            judge_run(results)
            recording.finish(launcher)
        written = write_pages(results, out_dir, stage)
        if stopped_by_user:
            raise RunInterrupted([recording.path, *(p for p in written if p.suffix in (".md", ".html"))])
        return results


def lock_name(device: Device, launcher: LauncherSpec) -> str:
    """What a run locks its GPU by: its UUID, else the host and the GPU's index."""
    index = device.gpu_index if device.gpu_index is not None else launcher.device_index
    return device.uuid or f"{device.hostname or 'local'}-gpu{index}"
