"""Running a family's measurements in child processes, so a faulting or hanging probe costs only itself.

:func:`run_family` starts :mod:`gpuprobe.child` with a spec, reads its event lines as they come,
and turns them into :class:`~gpuprobe.families.base.Measured` outcomes:

* a probe whose child dies (a CUDA fault poisons the context, a segfault, an abort) is "crashed",
  with the exit status, the child's last stderr lines and any stray output; a fresh child
  measures the probes that were still to come;
* a probe that runs past ``probe_time_limit_s`` is "timeout": the child's whole process group is
  killed, and a fresh child goes on;
* lines that are not events (a library printing) never break the protocol; they are kept as
  evidence when something goes wrong.

A probe measured while the GPU throttled or had other tenants (see :func:`gpu_conditions`) is
measured again after a cool-down; if it stays so, its facts are marked rather than judged.
"""

from __future__ import annotations

import contextlib
import json
import os
import queue
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gpuprobe.child import MARKER
from gpuprobe.families.base import Measured
from gpuprobe.registry import REPO_ROOT
from gpuprobe.results import Fact, ProbeOutcome

# NVML clock-event reasons that mean the clock was held down: SW power cap, HW slowdown,
# SW thermal, HW thermal, HW power brake. Idle, application-clock settings and sync boost are not.
THROTTLE_REASONS = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
CLOCK_DROP = 0.05  # an SM clock this much below the run's own first reading is throttling too


@dataclass(frozen=True)
class ChildPolicy:
    probe_time_limit_s: float = 300.0
    attempts: int = 2  # measurements of a probe that ran throttled or shared, before its facts are marked
    cooldown_s: float = 10.0
    stderr_tail: int = 1500
    exit_wait_s: float = 20.0  # how long a child that reported a crash may take to exit
    python: str = sys.executable


@dataclass
class _Child:
    process: subprocess.Popen[str]
    events: queue.Queue[tuple[str, Any]]
    stderr: list[str] = field(default_factory=list)
    stray: list[str] = field(default_factory=list)
    readers: list[threading.Thread] = field(default_factory=list)

    @classmethod
    def start(cls, spec: dict[str, Any], policy: ChildPolicy) -> _Child:
        process = subprocess.Popen(
            [policy.python, "-m", "gpuprobe.child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            start_new_session=True,  # its own process group: a timeout kills everything it started
            env=_child_environment(),
        )
        child = cls(process, queue.Queue())
        for reader in (child._read_stdout, child._read_stderr):
            thread = threading.Thread(target=reader, daemon=True)
            thread.start()
            child.readers.append(thread)
        assert process.stdin is not None
        process.stdin.write(json.dumps(spec))
        process.stdin.close()
        return child

    def _read_stdout(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(MARKER):
                try:
                    self.events.put(("event", json.loads(line[len(MARKER) :])))
                    continue
                except json.JSONDecodeError:
                    pass
            self.stray.append(line.rstrip("\n")[:200])
        self.events.put(("eof", None))

    def _read_stderr(self) -> None:
        assert self.process.stderr is not None
        for line in self.process.stderr:
            self.stderr.append(line.rstrip("\n"))
            del self.stderr[:-200]

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait()

    def evidence(self, policy: ChildPolicy) -> str:
        """How the child ended, its last stderr lines and any stray output (waited for, never forever)."""
        try:
            code = self.process.wait(timeout=policy.exit_wait_s)
        except subprocess.TimeoutExpired:  # stuck tearing down a broken context: end it
            self.kill()
            code = self.process.returncode
        for reader in self.readers:
            reader.join(timeout=2.0)
        status = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        parts = [f"child {status}"]
        if self.stderr:
            parts.append("stderr: " + " | ".join(self.stderr)[-policy.stderr_tail :])
        if self.stray:
            parts.append(f"{len(self.stray)} stray stdout line(s), first: {self.stray[0]!r}")
        return "; ".join(parts)


def _child_environment() -> dict[str, str]:
    """The parent's environment, unbuffered, with this checkout importable whatever the cwd."""
    path = os.pathsep.join(p for p in (str(REPO_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}


def _measured(event: dict[str, Any]) -> Measured:
    outcome = event["outcome"]
    return Measured(
        event["probe"],
        ProbeOutcome(
            status=str(outcome["status"]),
            detail=str(outcome.get("detail", "")),
            series=dict(outcome.get("series", {})),
            conditions=dict(outcome.get("conditions", {})),
        ),
        [Fact.from_dict(f) for f in event.get("facts", [])],
    )


def _run_children(
    spec: dict[str, Any], order: list[str], policy: ChildPolicy, state: dict[str, Any]
) -> Iterator[Measured]:
    """Measure ``order`` (probe names), respawning after each crash or timeout, until all ended.

    ``state`` (what later probes need from earlier ones, e.g. the measured clock) is handed to every
    child and updated from what they report, so a respawned or retrying child starts from it.
    """
    remaining = list(order)
    while remaining:
        child = _Child.start({**spec, "runnable": remaining, "state": state}, policy)
        try:
            yield from _follow(child, remaining, state, policy)
        finally:
            child.kill()  # whatever happened (an interrupt, a crash in here), leave no child measuring


def _follow(child: _Child, remaining: list[str], state: dict[str, Any], policy: ChildPolicy) -> Iterator[Measured]:
    """One child's events until it ends or times out; ``remaining`` and ``state`` are updated in place."""
    in_flight: str | None = None
    started_any = reported_crash = False
    deadline = time.monotonic() + policy.probe_time_limit_s
    while True:
        try:
            kind, event = child.events.get(timeout=max(0.0, deadline - time.monotonic()))
        except queue.Empty:
            child.kill()
            finished = _drained_measurement(child, in_flight)
            if finished is not None:  # it finished as the limit struck: keep the measurement
                yield finished
                remaining.remove(finished.probe)
                return
            victim = in_flight or remaining[0]
            limit = f"ran past its {policy.probe_time_limit_s:g} s limit and was killed"
            yield Measured(victim, ProbeOutcome("timeout", f"{victim} {limit}; {child.evidence(policy)}"))
            remaining.remove(victim)
            return
        if kind == "eof":
            if remaining and not reported_crash:  # it died (or ended early) without saying why
                victim = in_flight or remaining[0]
                yield Measured(victim, ProbeOutcome("crashed", child.evidence(policy)))
                remaining.remove(victim)
                if not started_any:  # died before any probe started: the rest would die the same way
                    for name in list(remaining):
                        yield Measured(name, ProbeOutcome("crashed", f"not measured: {child.evidence(policy)}"))
                    remaining.clear()
            return
        if event["event"] == "start":
            in_flight, started_any = event["probe"], True
            deadline = time.monotonic() + policy.probe_time_limit_s
        elif event["event"] == "measured":
            measured = _measured(event)
            if measured.outcome.status == "crashed":  # the child says so, then exits: wait for it
                reported_crash = True
                measured.outcome.detail += f"; {child.evidence(policy)}"
            yield measured
            remaining.remove(measured.probe)
            in_flight = None
        elif event["event"] == "state":
            state.update(event["state"])


def gpu_conditions(conditions: dict[str, Any], reference_mhz: float | None) -> str | None:
    """Why a measurement's conditions make it unfit to judge, or None when they were clean."""
    reasons = []
    for when in ("before", "after"):
        nvml = conditions.get(f"nvml_{when}") or {}
        bits = nvml.get("clock_event_reasons")
        if isinstance(bits, int) and bits & THROTTLE_REASONS:
            reasons.append(f"throttled {when} (NVML clock-event reasons {bits:#x})")
        processes = nvml.get("compute_processes")
        if isinstance(processes, int) and processes > 1:
            reasons.append(f"shared {when} ({processes} compute processes on the GPU)")
        mhz = conditions.get(f"sm_mhz_{when}")
        if reference_mhz and isinstance(mhz, float | int) and mhz < (1 - CLOCK_DROP) * reference_mhz:
            reasons.append(f"throttled {when} (SM clock {mhz:.0f} MHz, run started at {reference_mhz:.0f})")
    return "; ".join(reasons) or None


def _drained_measurement(child: _Child, probe: str | None) -> Measured | None:
    """A measurement of ``probe`` that reached the queue between the timeout and the kill, if any."""
    for reader in child.readers:
        reader.join(timeout=2.0)
    while True:
        try:
            kind, event = child.events.get_nowait()
        except queue.Empty:
            return None
        if kind == "event" and event.get("event") == "measured" and event.get("probe") == probe:
            return _measured(event)


def _settled_clock(measured: Measured) -> float | None:
    """The run's reference SM clock: a measured ``device.sm_clock`` (taken after a settling spin), else the
    clock just after the first clean probe, when the GPU has left its idle clocks behind."""
    clock = next((f.value for f in measured.facts if f.id == "device.sm_clock"), None)
    return clock if clock is not None else measured.outcome.conditions.get("sm_mhz_after")


def _mark(measured: Measured, reason: str, attempts: int) -> Measured:
    verdict = "shared" if reason.startswith("shared") and "throttled" not in reason else "throttled"
    for fact in measured.facts:
        fact.verdict = verdict
        fact.detail = f"{fact.id}: measured {verdict} after {attempts} attempt(s), not judged: {reason}"
    measured.outcome.detail = f"{verdict} after {attempts} attempt(s): {reason}"
    measured.outcome.conditions["attempts"] = attempts
    return measured


def run_family(
    spec: dict[str, Any],
    order: list[str],
    policy: ChildPolicy | None = None,
    sleep: Callable[[float], None] = time.sleep,
) -> Iterator[Measured]:
    """Every probe of ``order`` measured in child processes, each yielded as soon as it is final.

    A probe measured under bad conditions is measured again (after ``cooldown_s``) up to
    ``attempts`` times; if it never gets clean conditions its facts are marked throttled or shared.
    """
    policy = policy or ChildPolicy()
    pending, attempt, reference = list(order), 1, None
    state = dict(spec.get("state", {}))
    while pending:
        retry: list[str] = []
        for measured in _run_children(spec, pending, policy, state):
            if reference is None and measured.outcome.status == "ok":
                reference = _settled_clock(measured)
            reason = gpu_conditions(measured.outcome.conditions, reference)
            if reason and measured.outcome.status == "ok" and attempt < policy.attempts:
                retry.append(measured.probe)
                continue
            if reason and measured.outcome.status == "ok":
                measured = _mark(measured, reason, attempt)
            yield measured
        pending, attempt = retry, attempt + 1
        if pending:
            sleep(policy.cooldown_s)
