"""Running families' measurements in a child process, so a faulting or hanging probe costs only itself.

A :class:`MeasuringProcess` is the run's measuring process: :mod:`gpuprobe.measure.child`, started on first use
and handed family after family (a spec each), so Python, CuPy, the CUDA context and the cubin's module are paid
for once a run, not once a family. It is replaced only when it ended: a crash, a timeout, a poisoned context
(the child ends itself when a family leaves its context unsound), the run's deadline, a retry after a cool-down.
Then the next probe, of the same family or the next, is measured in a fresh one, which is all a crash in one
family's last probe costs the next family (and a process that dies waiting between families blames no probe).
``ChildPolicy.process_per_family`` asks for a fresh process for every family instead, for isolation between
families at the cost of a process start each.

:func:`run_family` hands its family to that process, reads its event lines as they come, and turns them into
:class:`~gpuprobe.families.base.Measured` outcomes:

* a probe whose child dies (a CUDA fault poisons the context, a segfault, an abort) is "crashed",
  with the exit status, the child's last stderr lines and any stray output; a fresh child
  measures the probes that were still to come;
* a probe that runs past ``probe_time_limit_s`` is "timeout": the child's whole process group is
  killed, and a fresh child goes on;
* a circuit breaker stops the respawning: when two children in a row die on their first probe of the
  family the same way, or a family has used up ``max_children`` processes, the rest of the family is
  "crashed" with the reason (a broken driver or library would otherwise cost a respawn per probe);
* at the run's ``deadline`` the child is stopped and every probe not yet measured is "not_run"
  with the reason "deadline";
* both limits are read from the policy's ``clock`` (``time.monotonic`` unless a test gives its own),
  looked at every time an event comes and at least every :data:`CLOCK_POLL_S` seconds between them;
* lines that are not events (a library printing) never break the protocol; they are kept as
  evidence when something goes wrong.

Every launcher call the child makes is reported as it is made (:mod:`gpuprobe.runner.flight`); the last
:data:`~gpuprobe.runner.flight.FLIGHT_CALLS` are kept and written into the outcome of a probe that crashed,
timed out or failed its self-check.

A probe measured while the GPU throttled or had other tenants (see
:func:`~gpuprobe.measure.conditions.gpu_conditions`) is
measured again after a cool-down, in a fresh process; if it stays so, its facts are marked rather than judged.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import queue
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuprobe.core.errors import require_seconds
from gpuprobe.core.processes import kill_session
from gpuprobe.core.results import Fact, ProbeOutcome
from gpuprobe.core.tool_output import ENCODING, ERRORS
from gpuprobe.families.base import Measured
from gpuprobe.judge.verdicts import mark_disturbed
from gpuprobe.measure.child import MARKER
from gpuprobe.measure.conditions import gpu_conditions
from gpuprobe.runner.flight import FLIGHT_CALLS

IMPORT_ROOT = Path(__file__).resolve().parents[2]
"""The folder gpuprobe is imported from (a checkout, or site-packages), put first on a child's path."""
FLIGHT_STATUSES = ("crashed", "timeout", "failed")  # outcomes that keep the flight record
CLOCK_POLL_S = 0.25  # while a child is quiet, its limits are held to the clock at least this often
READERS_END_S = 10.0  # the pipe readers of a killed child end at once, unless something outside its group holds a pipe


@dataclass(frozen=True)
class ChildPolicy:
    """How measuring processes are run: limits, retries, and the run's deadline (a ``clock()`` instant;
    None: no deadline). ``clock`` is what every limit is measured by: a test gives one that jumps past
    them at a point it chooses, so no test depends on how fast the machine is."""

    probe_time_limit_s: float = 120.0
    attempts: int = 2  # measurements of a probe that ran throttled or shared, before its facts are marked
    cooldown_s: float = 3.0
    max_children: int = 8  # measuring processes one family may use (each crash or timeout starts one)
    deadline: float | None = None
    stderr_tail: int = 1500
    exit_wait_s: float = 20.0  # how long a child that reported a crash may take to exit
    python: str = sys.executable
    clock: Callable[[], float] = time.monotonic
    process_per_family: bool = False  # a fresh measuring process for every family (isolation between families)

    def seconds_left(self) -> float:
        return float("inf") if self.deadline is None else self.deadline - self.clock()


def user_policy(
    probe_time_limit_s: float | None = None, cooldown_s: float | None = None, process_per_family: bool = False
) -> ChildPolicy:
    """The default policy with the ``--probe-time-limit``, ``--cooldown`` and ``--process-per-family`` a user
    gave (None: the default), each checked."""
    require_seconds(probe_time_limit_s, "--probe-time-limit")
    require_seconds(cooldown_s, "--cooldown", zero_ok=True)
    defaults = ChildPolicy()
    return ChildPolicy(
        probe_time_limit_s=defaults.probe_time_limit_s if probe_time_limit_s is None else probe_time_limit_s,
        cooldown_s=defaults.cooldown_s if cooldown_s is None else cooldown_s,
        process_per_family=process_per_family,
    )


DEADLINE = "deadline: "


def deadline_outcome(what: str = "") -> ProbeOutcome:
    """A probe the run's deadline left unmeasured."""
    return ProbeOutcome("not_run", f"{DEADLINE}the run's time ran out{what}; not measured")


def cut_by_deadline(outcome: ProbeOutcome) -> bool:
    """Whether the run's deadline left this probe unmeasured (not a probe that is not run for a reason
    of its own, such as a multi-GPU probe in a process that sees one GPU)."""
    return outcome.status == "not_run" and outcome.detail.startswith(DEADLINE)


@dataclass
class _Child:
    process: subprocess.Popen[str]
    events: queue.Queue[tuple[str, Any]]
    stderr: list[str] = field(default_factory=list)
    stray: list[str] = field(default_factory=list)
    readers: list[threading.Thread] = field(default_factory=list)
    flight: collections.deque[dict[str, Any]] = field(default_factory=lambda: collections.deque(maxlen=FLIGHT_CALLS))
    idle: bool = False  # it said it measured the family it was handed ("done"), and waits for the next
    writer: threading.Thread | None = None  # the thread writing it its last spec
    unsound: str | None = None  # why it ended itself after its family: the context failed its check
    reused: bool = False  # it was handed a family after measuring another
    ended_between: str | None = None  # how it ended (or hung) between families, before its next family's first probe

    @classmethod
    def start(cls, spec: dict[str, Any], policy: ChildPolicy) -> _Child:
        process = subprocess.Popen(
            [policy.python, "-m", "gpuprobe.measure.child"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            encoding=ENCODING,
            errors=ERRORS,  # what the child or the driver prints is decoded tolerantly, never a reader's crash
            start_new_session=True,  # its own process group: a timeout kills everything it started
            env=_child_environment(),
        )
        child = cls(process, queue.Queue())
        for reader in (child._read_stdout, child._read_stderr):
            thread = threading.Thread(target=reader, daemon=True)
            thread.start()
            child.readers.append(thread)
        child.send(spec)
        return child

    def send(self, spec: dict[str, Any]) -> None:
        """Hand the child a family to measure: its spec, a line on its stdin, written by a thread of its own so a
        child that no longer reads holds no one up (the probe's limit ends it, and the write with it)."""
        self.idle = False
        line = json.dumps(spec) + "\n"

        def write() -> None:
            with contextlib.suppress(OSError, ValueError):  # it died, or was killed: its probes tell the rest
                assert self.process.stdin is not None  # started with a pipe to it
                self.process.stdin.write(line)
                self.process.stdin.flush()

        self.writer = threading.Thread(target=write, daemon=True)
        self.writer.start()

    def close(self, policy: ChildPolicy) -> None:
        """End an idle child as a finished one ends: its input closed, it exits by itself (a profiler wrapping it
        keeps what it collected); killed if it has not within ``exit_wait_s``, with anything it started."""
        self._close_input()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.process.wait(timeout=policy.exit_wait_s)
        self.kill()
        self.end_reading()

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

    def record(self, event: dict[str, Any]) -> None:
        """A launcher call ("call") or its return ("ret") into the flight record."""
        if event["event"] == "call":
            self.flight.append({**event["record"], "elapsed_ms": None})
            return
        for call in reversed(self.flight):
            if call.get("n") == event["n"]:
                call["elapsed_ms"] = event["ms"]
                if event.get("error"):
                    call["error"] = event["error"]
                return

    def flight_record(self) -> list[dict[str, Any]]:
        """The calls kept, oldest first; a call still without ``elapsed_ms`` never returned."""
        return [dict(call) for call in self.flight]

    def kill(self) -> None:
        """End it and everything it started; its stdin closed once no spec is being written to it."""
        kill_session(self.process)
        if self.writer is not None:
            self.writer.join(timeout=READERS_END_S)  # a write to a dead child fails at once
        self._close_input()

    def _close_input(self) -> None:
        """Its stdin closed (what is still buffered for a dead child is dropped)."""
        with contextlib.suppress(OSError, ValueError):
            if self.process.stdin is not None:
                self.process.stdin.close()

    def end_reading(self) -> None:
        """Wait for the pipe readers of the ended child to read what it printed to its end (never forever)."""
        for reader in self.readers:
            reader.join(timeout=READERS_END_S)

    def evidence(self, policy: ChildPolicy) -> str:
        """How the child ended, its last stderr lines and any stray output (waited for, never forever)."""
        try:
            code = self.process.wait(timeout=policy.exit_wait_s)
        except subprocess.TimeoutExpired:  # stuck tearing down a broken context: end it
            self.kill()
            code = self.process.returncode
        self.end_reading()
        status = f"killed by signal {-code}" if code < 0 else f"exit status {code}"
        parts = [f"child {status}"]
        if self.stderr:
            parts.append("stderr: " + " | ".join(self.stderr)[-policy.stderr_tail :])
        if self.stray:
            parts.append(f"{len(self.stray)} stray stdout line(s), first: {self.stray[0]!r}")
        return "; ".join(parts)


def _child_environment() -> dict[str, str]:
    """The parent's environment, unbuffered, with this checkout importable whatever the cwd."""
    path = os.pathsep.join(p for p in (str(IMPORT_ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONUNBUFFERED": "1", "PYTHONPATH": path}


def _measured(event: dict[str, Any]) -> Measured:
    return Measured(
        event["probe"], ProbeOutcome.from_dict(event["probe"], event["outcome"]),
        [Fact.from_dict(f) for f in event.get("facts", [])],
    )  # fmt: skip


def _with_flight(measured: Measured, child: _Child) -> Measured:
    if measured.outcome.status in FLIGHT_STATUSES:
        measured.outcome.flight = child.flight_record()
    return measured


def failure_signature(detail: str) -> str:
    """A crash's message with what differs between probes (numbers, addresses, kernel names) taken out,
    so two crashes of the same cause compare equal."""
    text = detail.split("; child ", 1)[0]
    return re.sub(r"0x[0-9a-fA-F]+|\d+|\bgp_\w+", "#", text).strip()


def death_signature(outcome: ProbeOutcome) -> str | None:
    """How a probe's process died, comparable across probes (None if it did not die): a timeout, or a
    crash's :func:`failure_signature`."""
    if outcome.status == "timeout":
        return "timed out"
    return failure_signature(outcome.detail) if outcome.status == "crashed" else None


@dataclass
class FailureStreak:
    """How many times in a row the same failure was seen; anything else (None) ends the streak."""

    signature: str | None = None
    count: int = 0

    def see(self, signature: str | None) -> int:
        same = signature is not None and signature == self.signature
        self.signature, self.count = signature, self.count + 1 if same else int(signature is not None)
        return self.count


@dataclass
class _Breaker:
    """Counts a family's measuring processes and notices when fresh ones keep dying the same way."""

    policy: ChildPolicy
    children: int = 0
    first_deaths: FailureStreak = field(default_factory=FailureStreak)  # children dying on the family's first probe
    reason: str | None = None  # set once the rest of the family is not to be tried

    def started(self) -> None:
        self.children += 1

    def ended(self, first: Measured | None, only_first: bool) -> None:
        """A child ended; ``first`` is its first probe's outcome, ``only_first`` if it measured no other."""
        signature = death_signature(first.outcome) if first is not None and only_first else None
        if self.first_deaths.see(signature) >= 2:
            self.reason = f"two fresh processes in a row died on their first probe the same way ({signature})"
        elif self.children >= self.policy.max_children:
            self.reason = f"{self.children} measuring processes of this family ended early (the limit)"


class MeasuringProcess:
    """The run's measuring process, shared by its families: started when a family first needs it, handed each
    family in turn while it lives and waits for one, and replaced by a fresh one when it ended or had to be
    ended (a crash, a timeout, a poisoned context, an interrupt). ``started``: how many were started;
    ``notes``: what became of a process outside any probe (its context failed the check after a family; it ended
    or hung waiting for the next, which a fresh one then measured, its probes unblamed), for the caller to record.

    Use it as a context manager (or call :meth:`close`): a process still alive at the end is ended."""

    def __init__(self, policy: ChildPolicy) -> None:
        self.policy = policy
        self.started = 0
        self.notes: list[str] = []  # until the caller takes them
        self._child: _Child | None = None

    def serve(self, spec: dict[str, Any]) -> _Child:
        """The process to measure ``spec``'s family, handed it: the one waiting, else a fresh one."""
        if self._child is not None and self._child.idle:
            self._child.reused = True
            self._child.send(spec)
            return self._child
        self.discard()
        self._child = _Child.start(spec, self.policy)
        self.started += 1
        return self._child

    def release(self, child: _Child) -> None:
        """``child`` measured what it was handed, or stopped (it died, a limit passed, the caller stopped): one
        that says it is waiting is kept, any other ended, with all it started (no child is left measuring)."""
        if not child.idle:
            child.kill()
            if child.unsound:
                self.notes.append(f"its measuring process ended after its last probe: the context failed the check "
                                  f"({child.unsound})")  # fmt: skip
            if child.ended_between:
                self.notes.append(f"the measuring process that waited for it ended before its first probe "
                                  f"({child.ended_between}); a fresh one measured it")  # fmt: skip
            if child is self._child:
                self._child = None

    def discard(self) -> None:
        """End the process now (killed, with all it started), whatever it was doing."""
        if self._child is not None:
            self._child.kill()
            self._child = None

    def close(self) -> None:
        """End the process: one waiting for a family exits by itself (:meth:`_Child.close`), any other is killed."""
        child, self._child = self._child, None
        if child is not None and child.idle:
            child.close(self.policy)
        elif child is not None:
            child.kill()

    def __enter__(self) -> MeasuringProcess:
        return self

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        if kind is None:
            self.close()
        else:  # an interrupt, or a bug: no graceful wait
            self.discard()


def _run_children(
    spec: dict[str, Any],
    order: list[str],
    policy: ChildPolicy,
    state: dict[str, Any],
    process: MeasuringProcess,
    waiting: Callable[[], None] = lambda: None,
) -> Iterator[Measured]:
    """Measure ``order`` (probe names) in ``process``, respawning after each crash or timeout, until all ended.

    ``state`` (what later probes need from earlier ones, e.g. the measured clock) is handed to every
    child and updated from what they report, so a respawned or retrying child starts from it.
    """
    remaining = list(order)
    breaker = _Breaker(policy)
    while remaining:
        if policy.seconds_left() <= 0:
            yield from (Measured(name, deadline_outcome()) for name in remaining)
            return
        if breaker.reason:
            for name in remaining:
                yield Measured(name, ProbeOutcome("crashed", f"not measured: {breaker.reason}"))
            return
        child = process.serve({**spec, "runnable": remaining, "state": state})
        breaker.started()
        ended: list[Measured] = []
        try:
            for measured in _follow(child, remaining, state, policy, waiting):
                ended.append(measured)
                yield measured
        finally:
            process.release(child)  # whatever happened (an interrupt, a crash in here), leave no child measuring
        breaker.ended(ended[0] if ended else None, len(ended) == 1)


def _follow(
    child: _Child,
    remaining: list[str],
    state: dict[str, Any],
    policy: ChildPolicy,
    waiting: Callable[[], None] = lambda: None,
) -> Iterator[Measured]:
    """One child's events until it says it measured its family (``done``: it waits for the next), it ends, or a
    limit (the probe's, the run's deadline) passes; ``remaining`` and ``state`` are updated in place.

    When a limit passes the child is killed, and what it said before it died is still followed (on a busy
    machine its pipe may yet hold a measurement that finished as the limit struck, or the start of the
    probe it was stopped in); then the probe it was stopped in is cut by that limit."""
    in_flight: str | None = None
    started_any = reported_crash = stopped = measured_since_stopped = False
    probe_deadline = policy.clock() + policy.probe_time_limit_s

    def time_left() -> float:
        return min(probe_deadline - policy.clock(), policy.seconds_left())

    while True:
        waiting()
        try:
            kind, event = child.events.get(block=not stopped, timeout=min(max(0.0, time_left()), CLOCK_POLL_S))
        except queue.Empty:
            if stopped:  # all it said is read (unless something outside its group holds its pipe open)
                kind = "eof"
            elif time_left() > 0:  # neither limit has passed: look at the clock again
                continue
            else:  # a limit passed: end it, then read what it said before it died
                child.kill()
                child.end_reading()
                stopped = True
                continue
        if kind == "eof":
            if child.reused and not started_any and not reported_crash and policy.seconds_left() > 0:
                child.ended_between = child.evidence(policy)  # not this family's doing: a fresh process measures it
                return
            if stopped:
                yield from _cut(child, in_flight, remaining, policy, finished=measured_since_stopped)
            elif remaining and not reported_crash:  # it died (or ended early) without saying why
                victim = in_flight or remaining[0]
                yield _with_flight(Measured(victim, ProbeOutcome("crashed", child.evidence(policy))), child)
                remaining.remove(victim)
                if not started_any:  # died before any probe started: the rest would die the same way
                    for name in list(remaining):
                        yield Measured(name, ProbeOutcome("crashed", f"not measured: {child.evidence(policy)}"))
                    remaining.clear()
            return
        if event["event"] in ("call", "ret"):
            child.record(event)
        elif event["event"] == "start":
            in_flight, started_any = event["probe"], True
            probe_deadline = policy.clock() + policy.probe_time_limit_s
        elif event["event"] == "measured":
            measured = _measured(event)
            if measured.outcome.status == "crashed":  # the child says so, then exits: wait for it
                reported_crash = True
                measured.outcome.detail += f"; {child.evidence(policy)}"
            yield _with_flight(measured, child)
            remaining.remove(measured.probe)
            in_flight, measured_since_stopped = None, stopped
        elif event["event"] == "state":
            state.update(event["state"])
        elif event["event"] == "unsound":
            child.unsound = event["detail"]
        elif event["event"] == "done" and not stopped:
            if not remaining:
                child.idle = True
                return
            child.close(policy)  # it skipped a probe it was handed: the probe is blamed as when it exited


def _cut(
    child: _Child, in_flight: str | None, remaining: list[str], policy: ChildPolicy, finished: bool
) -> Iterator[Measured]:
    """What a limit stopped. At the run's deadline every probe still to measure is "not_run", the one in
    flight keeping what it was doing; at a probe's limit that probe (in flight, or the next if none was) is
    "timeout", unless it ``finished`` as the limit struck."""
    if policy.seconds_left() <= 0:  # the run's deadline, not the probe's limit
        for name in list(remaining):
            cut = deadline_outcome(f" while {in_flight} was measured" * bool(in_flight))
            if name == in_flight:  # what it was doing when stopped: a call that never returned?
                cut.flight = child.flight_record()
            yield Measured(name, cut)
        remaining.clear()
        return
    if finished or not remaining:
        return
    victim = in_flight or remaining[0]
    limit = f"ran past its {policy.probe_time_limit_s:g} s limit and was killed"
    outcome = ProbeOutcome("timeout", f"{victim} {limit}; {child.evidence(policy)}")
    yield _with_flight(Measured(victim, outcome), child)
    remaining.remove(victim)


def _mark(measured: Measured, reason: str, attempts: int) -> Measured:
    verdict = mark_disturbed(measured.facts, reason, attempts)
    measured.outcome.detail = f"{verdict} after {attempts} attempt(s): {reason}"
    measured.outcome.conditions["attempts"] = attempts
    return measured


def run_family(
    spec: dict[str, Any],
    order: list[str],
    policy: ChildPolicy | None = None,
    sleep: Callable[[float], None] = time.sleep,
    state: dict[str, Any] | None = None,
    process: MeasuringProcess | None = None,
    waiting: Callable[[], None] = lambda: None,
) -> Iterator[Measured]:
    """Every probe of ``order`` measured in ``process`` (the run's measuring process, respawned after a crash or
    timeout; None: one of the family's own, ended with it), each yielded as soon as it is final. With
    ``process_per_family`` the process is ended with the family, so the next starts a fresh one. ``waiting`` is
    called at every event and at least every :data:`CLOCK_POLL_S` while the process measures (the caller's
    moment to write what it has).

    A probe measured under bad conditions is measured again (after ``cooldown_s``) up to
    ``attempts`` times, while the deadline allows; if it never gets clean conditions its facts are
    marked throttled or shared. ``state`` (default: a copy of the spec's) is updated in place with
    what the children report, so a caller can carry it on (the run's reference clock, for one).
    """
    policy = policy or ChildPolicy()
    own = process is None
    process = process or MeasuringProcess(policy)
    try:
        yield from _measure_with_retries(spec, order, policy, sleep, state, process, waiting)
    finally:
        if own or policy.process_per_family:
            process.close()


def _measure_with_retries(
    spec: dict[str, Any],
    order: list[str],
    policy: ChildPolicy,
    sleep: Callable[[float], None],
    state: dict[str, Any] | None,
    process: MeasuringProcess,
    waiting: Callable[[], None],
) -> Iterator[Measured]:
    """:func:`run_family`'s measurements, and again those measured under bad conditions, as it says."""
    pending, attempt = list(order), 1
    state = dict(spec.get("state", {})) if state is None else state
    disturbed: dict[str, Measured] = {}  # a probe's last disturbed measurement, kept should its retry be cut
    while pending:
        retry: list[str] = []
        for measured in _run_children(spec, pending, policy, state, process, waiting):
            tries = attempt
            if cut_by_deadline(measured.outcome) and measured.probe in disturbed:
                measured, tries = disturbed[measured.probe], attempt - 1  # the deadline cut the retry: the try stands
            reason = gpu_conditions(measured.outcome.conditions)
            clean = not reason or measured.outcome.status != "ok"
            if not clean and attempt < policy.attempts and policy.seconds_left() > policy.cooldown_s:
                disturbed[measured.probe] = measured
                retry.append(measured.probe)
                continue
            if not clean:
                measured = _mark(measured, reason or "", tries)
            yield measured
        pending, attempt = retry, attempt + 1
        if pending:
            process.close()  # the retry starts afresh, as the first measurement did: nothing of that process in it
            sleep(policy.cooldown_s)
