"""``gpuprobe check``: compile every probe for every arch and hold its SASS to its contract.

Each arch's outcome is cached by content (:mod:`gpuprobe.kernels.outcomes`): a warm check reads one
record per arch. The archs that miss are built side by side, one process per CPU at most.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuprobe.core.arch import Arch
from gpuprobe.core.cache import CacheUnwritable, entry_lock, usable_cache_dir
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.workers import map_in_processes
from gpuprobe.kernels import outcomes, tool_limits
from gpuprobe.kernels.contracts import Rule, Violation, check
from gpuprobe.kernels.cubin import BuiltModule, build_for, module_of, probe_sources
from gpuprobe.kernels.includes import IncludeRefused
from gpuprobe.kernels.registry import Probe, all_probes

STATUSES = ("ok", "violated", "unsupported", "error")


@dataclass
class CheckResult:
    probe: str
    arch: str
    status: str
    detail: str = ""
    violations: list[Violation] = field(default_factory=list)
    resources: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "probe": self.probe,
            "arch": self.arch,
            "status": self.status,
            "detail": self.detail,
            "violations": [{"rule": v.rule, "message": v.message, "sass": v.lines} for v in self.violations],
            "resources": self.resources,
        }

    @classmethod
    def from_json(cls, data: Any) -> CheckResult:
        """The inverse of :meth:`to_json`; anything not of its shape is a ValueError."""
        if not isinstance(data, dict) or set(data) != {"probe", "arch", "status", "detail", "violations", "resources"}:
            raise ValueError("not a check result")
        texts = [data[k] for k in ("probe", "arch", "status", "detail")]
        if not all(isinstance(t, str) for t in texts) or data["status"] not in STATUSES:
            raise ValueError("not a check result")
        violations, resources = data["violations"], data["resources"]
        if not isinstance(violations, list) or not all(_is_violation(v) for v in violations):
            raise ValueError("bad violations")
        if not isinstance(resources, dict) or not all(
            isinstance(k, str) and (v is None or type(v) is int) for k, v in resources.items()
        ):
            raise ValueError("bad resources")
        found = [Violation(v["rule"], v["message"], list(v["sass"])) for v in violations]
        return cls(*texts, found, dict(resources))


def _is_violation(data: Any) -> bool:
    """Whether ``data`` is a violation as :meth:`CheckResult.to_json` writes one."""
    return (
        isinstance(data, dict)
        and set(data) == {"rule", "message", "sass"}
        and isinstance(data["rule"], str)
        and isinstance(data["message"], str)
        and isinstance(data["sass"], list)
        and all(isinstance(line, str) for line in data["sass"])
    )


def check_probe(probe: Probe, module: BuiltModule) -> CheckResult:
    """``probe``'s kernel held to its contract, and its twin (if it has one) to the twin's: ok only if both hold.
    A module read back from the check cache (:func:`checked_module`) answers with the outcome it records for the
    probe's declaration, the check of this very cubin."""
    recorded = module.recorded.get(probe.declaration)
    if recorded is not None:
        return dataclasses.replace(recorded)
    result = check_kernel(probe.name, probe.kernel, probe.contract, module)
    if probe.twin is None or result.status != "ok":
        return result
    twin = check_kernel(probe.name, probe.twin.kernel, probe.twin.contract, module)
    if twin.status != "ok":
        return dataclasses.replace(twin, detail=f"its twin {probe.twin.kernel}: {twin.detail}")
    return dataclasses.replace(result, detail=f"{result.detail}; its twin's {twin.detail}")


def check_kernel(name: str, kernel_name: str, contract: Sequence[Rule], module: BuiltModule) -> CheckResult:
    """One kernel of ``module`` held to ``contract``, reported under the probe ``name``."""
    kernel = module.listing.kernels.get(kernel_name)
    if kernel is None:
        return CheckResult(name, module.arch.name, "error", f"kernel {kernel_name} missing from the cubin")
    resources = {
        "registers": kernel.registers,
        "shared_bytes": kernel.shared_bytes,
        "local_bytes": kernel.local_bytes,
        "spill_store_bytes": kernel.spill_store_bytes,
        "spill_load_bytes": kernel.spill_load_bytes,
        "instructions": len(kernel.instructions),
    }
    rules = [rule for rule in contract if rule.applies_to(module.arch)]  # some hold on some archs only
    violations = check(kernel, rules)
    if violations:
        detail = "\n".join(str(v) for v in violations)
        return CheckResult(name, module.arch.name, "violated", detail, violations, resources)
    return CheckResult(name, module.arch.name, "ok", f"{len(rules)} rules hold", [], resources)


#: Errors that are not one probe's: a tool that hangs or writes nothing and a cache that cannot be written (the
#: machine's), an include that leads where none may (the source tree's). The whole check stops at one, in one line.
STOPS_THE_CHECK = (tool_limits.BrokenTool, CacheUnwritable, IncludeRefused)


def build_and_check(probes: list[Probe], arch: Arch) -> tuple[list[CheckResult], Path | None]:
    """Build the module of ``probes`` (all targeting ``arch``) and check each; a build error is each one's error
    (but one of :data:`STOPS_THE_CHECK`). With the results, the cubin they judged (None when the build failed)."""
    try:
        module = build_for(probes, arch)
    except STOPS_THE_CHECK:
        raise
    except GpuprobeError as exc:
        return [CheckResult(p.name, arch.name, "error", str(exc)) for p in probes], None
    return [check_probe(p, module) for p in probes], module.cubin


def checked_and_recorded(
    probes: list[Probe],
    arch: Arch,
    key: str | None,
    deadline: tool_limits.Deadline | None = None,
    timed_out: Mapping[str, str] | None = None,
) -> list[CheckResult]:
    """``build_and_check``, its outcome recorded under ``key`` unless it has an error; under the entry's lock,
    so a process checking the same module at the same time (another test worker) waits and reads it. Each
    tool call ends by ``deadline`` (the whole check's), and no tool that ``timed_out`` in the process that
    started the check runs again, in whichever process this runs."""
    with tool_limits.within(deadline, timed_out):
        return _checked_and_recorded(probes, arch, key)


def _checked_and_recorded(probes: list[Probe], arch: Arch, key: str | None) -> list[CheckResult]:
    if key is None:
        return build_and_check(probes, arch)[0]
    with entry_lock(key, outcomes.SUFFIX):
        recorded = _recorded(key, probes, arch)
        if recorded is not None:
            return recorded
        results, cubin = build_and_check(probes, arch)
        if cubin is not None and all(r.status != "error" for r in results):
            outcomes.store(key, [r.to_json() for r in results], cubin)
        return results


def _recorded(key: str | None, probes: list[Probe], arch: Arch) -> list[CheckResult] | None:
    """The cached outcome of checking ``probes`` on ``arch``, if a record of it is there and sound."""
    stored = outcomes.load(key) if key else None
    return _results_of(stored, probes, arch) if stored is not None else None


def _results_of(stored: list[Any], probes: list[Probe], arch: Arch) -> list[CheckResult] | None:
    """A record's results, if they are sound check results of ``probes`` on ``arch``, in order."""
    try:
        results = [CheckResult.from_json(data) for data in stored]
    except ValueError:
        return None
    if [(r.probe, r.arch) for r in results] != [(p.name, arch.name) for p in probes]:
        return None
    return results


def checked_module(probes: list[Probe], arch: Arch) -> BuiltModule:
    """The module a run measures with: that of ``probes`` (all targeting ``arch``), each one's check recorded in it
    (``check_probe`` answers from it); a build error raised. Where the check cache records this outcome (its key
    covers every input: a changed source is rebuilt) and the module's entries are beside its cubin, the module is
    read back, nothing combined, disassembled or checked again; else it is built and checked, and the outcome
    recorded as ``gpuprobe check`` records one."""
    key = _key(probes, arch, outcomes.inputs_of) if probes else None
    if key is None:
        return _with_checks(build_for(probes, arch), probes)
    with entry_lock(key, outcomes.SUFFIX):
        recorded = _recorded_module(key, probes, arch)
        if recorded is not None:
            return recorded
        module = _with_checks(build_for(probes, arch), probes)
        results = list(module.recorded.values())
        if all(r.status != "error" for r in results):
            outcomes.store(key, [r.to_json() for r in results], module.cubin)
        return module


def arch_module(arch: Arch) -> BuiltModule:
    """The module of every probe that targets ``arch``: the one ``gpuprobe check`` builds for the arch and a run
    measures with (:func:`checked_module`: read back where the check cache records it)."""
    return checked_module([p for p in all_probes() if p.supports(arch)], arch)


def _with_checks(module: BuiltModule, probes: list[Probe], results: list[CheckResult] | None = None) -> BuiltModule:
    """``module`` with the check of each of ``probes`` recorded in it: ``results`` (in order), else checked now."""
    checked = [check_probe(p, module) for p in probes] if results is None else results
    return dataclasses.replace(module, recorded={p.declaration: r for p, r in zip(probes, checked, strict=True)})


def _recorded_module(key: str, probes: list[Probe], arch: Arch) -> BuiltModule | None:
    """The module and checks recorded under ``key``, if the record is sound and the module's entries are there."""
    judged = outcomes.load_judged(key)
    if judged is None:
        return None
    stored, cubin = judged
    results = _results_of(stored, probes, arch)
    module = module_of(cubin, arch, tuple(probe_sources(probes, arch))) if results is not None else None
    return _with_checks(module, probes, results) if module is not None else None


def _key(probes: list[Probe], arch: Arch, inputs: outcomes.Inputs) -> str | None:
    """The outcome's cache key; None when the toolchain cannot say (then the build reports why)."""
    try:
        return outcomes.outcome_key(probes, arch, inputs)
    except STOPS_THE_CHECK:
        raise
    except GpuprobeError:
        return None


def _checked(
    targeted: dict[Arch, list[Probe]], deadline: tool_limits.Deadline, progress: Callable[[str], None]
) -> dict[Arch, list[CheckResult]]:
    """Each arch's results: recorded ones read, the rest built side by side and recorded, a line said to
    ``progress`` before the first build and as each arch is done (nothing when every arch is recorded).

    An outcome with an error (a build that failed, a kernel missing) is not recorded: an error may
    come from the machine, and a broken tree is rebuilt until it is fixed."""
    with tool_limits.within(deadline):
        inputs = functools.cache(outcomes.inputs_of)  # each source read once for every arch's key
        keys = {arch: _key(probes, arch, inputs) for arch, probes in targeted.items()}
    done: dict[Arch, list[CheckResult]] = {}
    for arch, probes in targeted.items():
        recorded = _recorded(keys[arch], probes, arch)
        if recorded is not None:
            done[arch] = recorded
    # The biggest modules first, so that no long build starts last while the other processes idle.
    missing = sorted((arch for arch in targeted if arch not in done), key=lambda arch: -len(targeted[arch]))
    if missing:
        progress(_building(missing, targeted, deadline))
    jobs = [(targeted[arch], arch, keys[arch], deadline, tool_limits.timed_out()) for arch in missing]
    finished: list[Arch] = []

    def arch_done(index: int) -> None:
        arch = missing[index]
        finished.append(arch)
        progress(f"{arch} built and checked ({len(finished)} of {len(missing)})")

    try:
        done.update(zip(missing, map_in_processes(checked_and_recorded, jobs, arch_done), strict=True))
    except tool_limits.ToolTimedOut as timed_out:
        tool_limits.remember(timed_out)  # the next check in this process (pytest's, per test) stops at once
        raise
    return done


def _building(missing: list[Arch], targeted: dict[Arch, list[Probe]], deadline: tool_limits.Deadline) -> str:
    """The line said before building: how much, and the limits it runs under."""
    archs, probes = ", ".join(arch.name for arch in missing), sum(len(targeted[arch]) for arch in missing)
    limits = f"{tool_limits.tool_limit().stated} a tool call, {deadline.limit.stated} in all"
    return f"building {archs}: {probes} probe checks not in the cache (limits: {limits})"


def check_all(
    probes: Iterable[Probe], archs: Iterable[Arch], progress: Callable[[str], None] = lambda line: None
) -> list[CheckResult]:
    """Every probe on every arch, arch by arch: those it does not target ("unsupported"), then the rest.

    The builds end within ``GPUPROBE_CHECK_TIMEOUT`` (:mod:`gpuprobe.kernels.tool_limits`), and say how they go
    to ``progress``, a line at a time."""
    deadline = tool_limits.check_deadline()
    tool_limits.tool_limit()  # a bad setting is an error even where no tool runs (a warm check)
    usable_cache_dir()  # a cache it cannot write is one error, not one per probe
    probes = list(probes)
    archs = list(archs)
    targeted = {arch: [p for p in probes if p.supports(arch)] for arch in archs}
    checked = _checked({arch: found for arch, found in targeted.items() if found}, deadline, progress)
    results: list[CheckResult] = []
    for arch in archs:
        results.extend(
            CheckResult(probe.name, arch.name, "unsupported", f"{probe.family} does not target {arch}")
            for probe in probes
            if not probe.supports(arch)
        )
        results.extend(checked.get(arch, []))
    return results
