"""The run's time plan: what each family expects to cost on a device, in seconds, before any GPU time is spent.

Every family counts its own work (:class:`~gpuprobe.families.base.Plan`: probes, launcher calls, GPU
and host seconds, windows waited out) from its settings and the device's properties; one cost model here
turns the counts into seconds, so the families are comparable: a bound on each family's work, scaled by
what a real run took of it (:func:`work_factor`, fitted to the H200's runs under ``reports/``), and one
measuring process's start for the run (the process serves every family; ``process_per_family``: one each).
Each run records, per family, the seconds planned and the seconds taken (``families`` in the results), and
:func:`calibration` reads them back as the factor to plan the next run with.

``gpuprobe run --plan`` prints the plan for the local GPU (the GPUs its run sees), or, with ``--model KEY``,
for a model whose expectations file says what the part reports (its ``[device]`` table), with no GPU at all,
for a run that sees ``--gpus N`` GPUs (default 1: the multi-GPU families then measure nothing).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuprobe.core.arch import arch_for_device, parse_arch
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.results import STAGES, Device, Results, fact_matches, load
from gpuprobe.families.base import Family, Plan
from gpuprobe.families.catalog import BY_NAME, OPT_IN
from gpuprobe.judge.expectations import DEVICE_RECORD_FIELDS, ModelExpectations
from gpuprobe.kernels.registry import all_probes

# The cost model, fitted to the H200's runs in reports/nvidia-h200/ (measured at commit 14614e6, whose plans
# counted CHILD_START_S = 3.0 for every family and each family's work as family_seconds still counts it):
#
# * A measuring process's start: Python, NumPy, CuPy and gpuprobe imported, the CUDA context made, the cubin loaded,
#   its first probe's clock settled. smoke-results.json's 15 families each took 1.65-3.23 s (actual_s) for work
#   planned at 0.05-2.2 s (planned_s - 3.0); actual less planned work has a median of 2.06 s. A run pays it once
#   (one process serves every family), and again after each crash or timeout.
CHILD_START_S = 2.0
# * The work: results.json's families took actual_s - CHILD_START_S for planned_s - 3.0 of planned work. The plans
#   count every sampling at its most repeats, at pessimistic speeds (gpuprobe.families.planning); that run stopped
#   most samplings at their least (3 samples for 100 of 100 wgmma facts). A family's ratio is its own where its
#   seconds were its own work: replaying that commit's parent, which encoded the whole results again after every
#   probe (indented, 0.4-0.7 s for the last of them on the build machine; compact since 61c4c5c, and written at most
#   once a second now), its writes for the family's probes took under 60 % of the family's seconds (memory 0.05 s,
#   bandwidth 0.9, cache_geometry 0.3, l2_partition 0.4, host_transfer 1.5, async_copy 2.6, grid_sync 1.0, launch
#   1.7). WORK_FACTOR is those eight pooled: 24.5 s taken for 42.7 s planned. The families whose seconds the writes
#   explain (alu 9.7 s of writes for 9.7 s taken, mma 11.6 for 11.2, warp 8.1 for 5.9, barrier 4.4 for 4.6, cluster
#   2.7 for 2.9, atomics 2.1 for 2.6) left their work unmeasured: at most their ratio (atomics, 0.17), else the pooled
#   factor. wgmma took 39.3 s for 16.7 s planned, most of it in work since removed (the unwritten-word check of 2.2 GB
#   of D registers, 13 s at the build machine's 5.7 ns a byte; its cuBLAS operands drawn whole for every timing):
#   the pooled factor. Windows a plan waits out (Plan.wait_s: the power family's sustained runs, rests and idle
#   window) take what they are, unscaled.
WORK_FACTOR = 0.58
FAMILY_WORK_FACTOR = {
    "memory": 0.45, "bandwidth": 0.57, "cache_geometry": 0.45, "l2_partition": 0.18, "host_transfer": 1.09,
    "async_copy": 1.21, "grid_sync": 0.91, "launch": 0.23, "atomics": 0.17,
}  # fmt: skip
CALL_S = 250e-6  # one launcher call that waits for the GPU: enqueue, synchronize, a fill or a read-back
SNAPSHOT_S = 0.02  # the clock spin (settled) and the NVML readings around a probe, before or after it
BUILD_S = 15.0  # the local arch's module assembled, disassembled and every contract checked, cold
REPORT_S = 20.0  # the fact sheet and its plots written at the end

# The device check (scripts/device-check.sh) inside one 10-minute job on the GPU machine, each stage's end counted
# from the script's start: the smoke stage, the full suite, the counters' witness, then the suite again on the
# same board for as long as is left (its compare with the first says what run-to-run noise is worth).
SMOKE_STAGE_S = 60.0  # the smoke stage's whole budget, which comes first (its plan: ~30 s, build and check included)
DEVICE_CHECK_DEADLINE_S = 355.0  # the full suite stops measuring this long after the script starts
WITNESS_STAGE_S = 90.0  # ncu's count of the bytes the goodput, bandwidth and copy probes moved, at most
REPEAT_DEADLINE_S = 560.0  # the second run stops measuring this long after the script starts
DEVICE_CHECK_END_S = 590.0  # every stage is held to end by then, within the device tool's 600 s command


def family_seconds(plan: Plan, child_start: bool = True) -> float:
    """Wall seconds a family's ``plan`` counts, uncalibrated, with (by default) a measuring process's start: the
    bound the families' own tests hold their plans to."""
    overhead = plan.launches * CALL_S + 2 * plan.probes * SNAPSHOT_S
    return (CHILD_START_S if child_start else 0.0) + plan.gpu_s + plan.host_s + plan.wait_s + overhead


def work_factor(family: str) -> float:
    """What a real run took of ``family``'s planned work (:data:`FAMILY_WORK_FACTOR`, else :data:`WORK_FACTOR`)."""
    return FAMILY_WORK_FACTOR.get(family, WORK_FACTOR)


@dataclass(frozen=True)
class Stage:
    """What a run measures: the whole suite ("full"), or each family's cheapest probes once ("smoke").

    ``first``: probes a smoke stage measures before the rest, beside its families' cheapest ones: those no
    real run has proven yet (:func:`unproven_probes`), so a first contact finds out whether they run and pass
    their self-checks on this hardware. Their facts are left out (:meth:`publishes`)."""

    name: str = "full"
    first: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        if self.name not in STAGES:
            raise GpuprobeError(f"unknown stage {self.name!r} (use one of: {', '.join(STAGES)})")

    def probes(self, family: Family) -> list[str]:
        if self.name != "smoke":
            return list(family.probes)
        first = [name for name in family.probes if name in self.first]
        return first + [name for name in family.smoke.probes if name not in first]

    def publishes(self, family: Family, probe: str) -> bool:
        """Whether ``probe``'s facts go into the results: every probe's in a full run; in a smoke run only the
        cheapest probes', whose smoke settings were chosen so their facts mean what the full run's do. A probe
        measured first for want of proof ran at settings made for others: its self-check is what it shows."""
        return self.name != "smoke" or probe in family.smoke.probes

    def family_order(self, families: Mapping[str, Family]) -> list[str]:
        """The families in measuring order: in a smoke stage, those with a ``first`` probe before the rest."""
        return sorted(families, key=lambda name: not self.first.intersection(families[name].probes))

    def settings(self, family: Family, given: Any = None) -> Any:
        """The family's settings: those given, else its smoke settings (smoke) or its defaults."""
        if given is not None:
            return given
        return family.smoke.settings if self.name == "smoke" else family.settings()


FULL, SMOKE = Stage("full"), Stage("smoke")


def proven_by(results: Results, declared: Mapping[str, tuple[str, ...]]) -> set[str]:
    """The probes a real run proved: each ended ok and gave every fact it declares (``declared``: probe ->
    fact ids; a pattern ``*`` matches any one more part)."""
    if results.device.simulated:
        return set()
    measured = [f.id for f in results.facts if f.value is not None]
    return {
        name
        for name, outcome in results.probes.items()
        if outcome.status == "ok" and all(any(fact_matches(d, m) for m in measured) for d in declared.get(name, ()))
    }


def unproven_probes(reports: Path) -> frozenset[str]:
    """Every probe no real run under ``reports`` proved (:func:`proven_by`): never ran on hardware, failed,
    or ran without giving what it declares. A file that cannot be read proves nothing."""
    probes = all_probes()
    declared = {probe.name: probe.facts for probe in probes}
    proven: set[str] = set()
    for path in sorted(reports.glob("**/*results.json")) if reports.is_dir() else []:
        try:
            proven |= proven_by(load(path), declared)
        except GpuprobeError:
            continue
    return frozenset(probe.name for probe in probes) - proven


@dataclass(frozen=True)
class FamilyPlan:
    """One family's plan and its seconds; a plan that could not be made says why (``error``), and its
    seconds are None: a plan's own bug must never cost a measurement, so it is recorded instead."""

    family: str
    plan: Plan | None
    seconds: float | None
    error: str = ""


def too_few_gpus(family: Family, device: Device) -> bool:
    """Whether the run's process sees fewer GPUs than a multi-GPU family needs (its ``min_gpus``): its probes
    are then ``not_run`` ("1 GPU visible"), as its own measuring process would find, and the run starts
    none for it (a run pinned to one GPU, as fleet-run's are, saves a process per such family)."""
    return device.visible_gpus is not None and device.visible_gpus < family.min_gpus


def probes_on(family: Family, arch: str) -> set[str]:
    """The probes of ``family`` that target ``arch``: the others are never measured on it."""
    target = parse_arch(arch)
    return {probe.name for probe in all_probes() if probe.name in family.probes and probe.supports(target)}


def runs_on(family: Family, arch: str) -> bool:
    """Whether any of ``family``'s probes targets ``arch``: a family with none is given no measuring process."""
    return bool(probes_on(family, arch))


def left_out_line(families: Sequence[str], arch: str) -> str:
    """What a plan or a run says of the ``families`` none of whose probes runs on ``arch``."""
    return f"{', '.join(families)}: no probe of {'it' if len(families) == 1 else 'theirs'} runs on {arch}, left out"


def family_plan(name: str, family: Family, stage: Stage, settings: Any, device: Device) -> FamilyPlan:
    """The family's plan at ``stage`` with ``settings`` on ``device``: every probe's work (at the smoke stage,
    at the smoke settings: a bound) and the condition snapshots of the probes the stage measures on the
    device's arch alone, in seconds: its work scaled by :func:`work_factor`, its waits as they are (its process's
    start is the run's
    :class:`RunPlan`). A family the device has too few GPUs for, or whose probes none runs on its arch,
    costs nothing: nothing is measured of it."""
    measured = len(set(stage.probes(family)) & probes_on(family, device.arch))
    if not measured or too_few_gpus(family, device):
        return FamilyPlan(name, Plan(measured, 0, 0.0), 0.0)
    try:
        plan = family.plan(settings, device)
    except Exception as exc:  # e.g. a launch shape this device cannot hold: the probe will say so itself
        return FamilyPlan(name, None, None, f"{type(exc).__name__}: {exc}")
    plan = dataclasses.replace(plan, probes=measured)
    return FamilyPlan(name, plan, plan.wait_s + work_factor(name) * (family_seconds(plan, False) - plan.wait_s))


@dataclass(frozen=True)
class RunPlan:
    """A run's plan: each measured family's, the measuring process's start, and the fixed costs around them."""

    device: Device
    stage: Stage
    families: tuple[FamilyPlan, ...]
    calibration: float = 1.0  # actual over planned seconds of an earlier run, applied to every family
    left_out: tuple[str, ...] = ()  # families none of whose probes runs on the device's arch
    short_of_gpus: tuple[str, ...] = ()  # families needing more GPUs than the device's run sees: not measured
    process_per_family: bool = False  # a fresh measuring process for every family (ChildPolicy's option)

    @property
    def processes(self) -> int:
        """Measuring processes the run starts: one for all its families, or one per family that measures anything
        (a family without a plan measures)."""
        measuring = sum(f.seconds is None or f.seconds > 0 for f in self.families)
        return measuring if self.process_per_family else min(1, measuring)

    @property
    def measuring_s(self) -> float:
        """The processes' starts and the families' seconds, calibrated; a family without a plan counts none."""
        work = sum(f.seconds or 0.0 for f in self.families)
        return (self.processes * CHILD_START_S + work) * self.calibration

    @property
    def total_s(self) -> float:
        return BUILD_S + self.measuring_s + (REPORT_S if self.stage.name == "full" else 0.0)


def measured_families() -> dict[str, Family]:
    return {name: family for name, family in BY_NAME.items() if name not in OPT_IN}


def run_plan(
    device: Device,
    stage: Stage = FULL,
    settings: Mapping[str, Any] | None = None,
    calibration: float = 1.0,
    process_per_family: bool = False,
) -> RunPlan:
    """Every measured family's plan on ``device`` at ``stage``, with its settings (or the stage's); the
    families none of whose probes runs on the device's arch are left out, by name, and those needing more GPUs
    than the device's run sees (``visible_gpus``; None: as many as any family needs) are named as such."""
    families = measured_families()
    runnable = {name: family for name, family in families.items() if runs_on(family, device.arch)}
    rows = tuple(
        family_plan(name, family, stage, stage.settings(family, (settings or {}).get(name)), device)
        for name, family in runnable.items()
    )
    left_out = tuple(name for name in families if name not in runnable)
    short = tuple(name for name, family in runnable.items() if too_few_gpus(family, device))
    return RunPlan(device, stage, rows, calibration, left_out, short, process_per_family)


CALIBRATION_LIMITS = (0.1, 10.0)  # actual over planned seconds outside these: a broken record, not the model's error


def recorded_seconds(record: Mapping[str, Any], key: str, where: str) -> float | None:
    """A family's recorded seconds (``planned_s`` or ``actual_s``; None: not recorded); anything but a finite
    number of 0 or more is a GpuprobeError naming ``where``."""
    value = record.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value) or value < 0:
        raise GpuprobeError(f"{where}.{key}: {value!r} is not a number of seconds (0 or more)")
    return float(value)


def calibration(results: Results, source: str = "the results") -> float | None:
    """Actual over planned seconds, over the families an earlier run measured to the end (None: no family
    records both). Seconds that are not seconds, or a factor outside :data:`CALIBRATION_LIMITS`, are a
    GpuprobeError naming ``source``: a plan scaled by a broken record would be silently wrong."""
    planned = actual = 0.0
    for name, record in results.families.items():
        where = f"{source}: families.{name}"
        seconds = recorded_seconds(record, "planned_s", where), recorded_seconds(record, "actual_s", where)
        if record.get("ended") == "measured" and None not in seconds:
            planned, actual = planned + seconds[0], actual + seconds[1]
    if planned <= 0 or actual <= 0:
        return None
    low, high = CALIBRATION_LIMITS
    if not low <= actual / planned <= high:
        raise GpuprobeError(
            f"{source}: its families took x{actual / planned:.3g} the seconds planned, outside the plausible "
            f"x{low:g} to x{high:g}: not a run's record to calibrate by (plan without --calibrate)"
        )
    return actual / planned


def model_device(model: ModelExpectations, visible_gpus: int | None = None) -> Device:
    """The device a model's ``[device]`` table describes, to plan a run without the GPU, its run seeing
    ``visible_gpus`` GPUs (None: as many as any family needs; a model does not say how many a machine holds)."""
    if not model.device:
        raise GpuprobeError(
            f"model {model.key!r} has no [device] table (what the part reports): plan on the GPU itself, "
            "or add one to its expectations file"
        )
    major, minor = (int(x) for x in model.cc.split("."))
    values = {target: model.device[name] for name, target in DEVICE_RECORD_FIELDS.items()}
    integers = {k: int(v) for k, v in values.items() if k not in ("sm_clock_nominal_mhz", "mem_clock_mhz")}
    device = Device(name=model.name, cc=model.cc, arch=arch_for_device(major, minor).name, sm_count=0, l2_bytes=0,
                    visible_gpus=visible_gpus)  # fmt: skip
    return dataclasses.replace(device, **{**values, **integers})


def gpus_line(device: Device, families: Sequence[str]) -> str:
    """What a plan says of the ``families`` the device's run sees too few GPUs for."""
    most = max(BY_NAME[name].min_gpus for name in families)
    seen = f"{device.visible_gpus} visible" if device.visible_gpus is not None else "fewer visible"
    return f"{', '.join(families)}: need {most} GPUs, {seen}: not measured"


def render_plan(plan: RunPlan, deadline_s: float | None = None) -> str:
    """The plan as a table, one family per line (its seconds: its work, calibrated), the measuring processes'
    starts, and the totals (and how they sit against ``deadline_s``)."""
    d = plan.device
    gpus = "" if d.visible_gpus is None else f", {d.visible_gpus} GPU{'s' * (d.visible_gpus != 1)} visible"
    lines = [
        f"time plan ({plan.stage.name} stage) for {d.name}: {d.sm_count} SMs, L2 {d.l2_bytes / 2**20:g} MiB{gpus}"
        + (f", calibrated x{plan.calibration:.2f} from an earlier run" if plan.calibration != 1.0 else ""),
        f"{'family':16} {'probes':>6} {'launches':>9} {'GPU s':>8} {'host s':>8} {'total s':>8}",
    ]
    for row in plan.families:
        p = row.plan
        if row.family in plan.short_of_gpus:
            continue
        if p is None or row.seconds is None:
            lines.append(f"{row.family:16} no plan: {row.error}")
            continue
        seconds = row.seconds * plan.calibration
        gpu = p.gpu_s + p.wait_s
        lines.append(f"{row.family:16} {p.probes:6d} {p.launches:9d} {gpu:8.1f} {p.host_s:8.1f} {seconds:8.1f}")
    if plan.left_out:
        lines.append(left_out_line(plan.left_out, d.arch))
    if plan.short_of_gpus:
        lines.append(gpus_line(d, plan.short_of_gpus))
    each = "one for every family" if plan.process_per_family else "one serving every family"
    starts = plan.processes * CHILD_START_S * plan.calibration
    lines.append(f"{'process starts':16} {plan.processes:6d} {'':9} {'':8} {'':8} {starts:8.1f}  ({each})")
    lines.append(f"{'measuring':16} {'':6} {'':9} {'':8} {'':8} {plan.measuring_s:8.1f}")
    lines.append(f"build + check {BUILD_S:.0f} s, report {REPORT_S if plan.stage.name == 'full' else 0:.0f} s: "
                 f"{plan.total_s:.0f} s in all")  # fmt: skip
    if deadline_s is not None:
        verdict = "fits" if plan.total_s <= deadline_s else "does NOT fit"
        lines.append(f"{verdict} a {deadline_s:.0f} s deadline ({plan.total_s / deadline_s:.0%} of it)")
    return "\n".join(lines) + "\n"
