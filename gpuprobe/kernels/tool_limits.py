"""How long a CUDA tool may run, and running it so: every limit is stated, settable and enforced.

Each call of a tool (ptxas, nvdisasm) may take ``GPUPROBE_TOOL_TIMEOUT`` seconds (300 by default: ptxas
takes minutes on a long module). A tool's ``--version`` answers at once, so asking it has at most
:data:`VERSION_LIMIT_S` (or the tool limit, if that is shorter). A whole ``gpuprobe check`` has
``GPUPROBE_CHECK_TIMEOUT`` seconds (1800 by default): a :class:`Deadline` that each tool call it makes,
in whichever worker process, ends by (``pytest probes/`` checks under it too). NVRTC is a library that
compiles in gpuprobe's own process: nothing stops one compile midway, and the deadline binds the next
tool call after it. A setting that is not a number of seconds (above 0, at most a week) is a one-line
error naming it, and a message about a limit names the setting that states it.

A tool runs in a session of its own (a process group of its own, away from the terminal's), so that at
its limit, or when gpuprobe is interrupted (Ctrl-C, SIGTERM) or fails while waiting for it, the whole
group is killed: a wrapper script's children go with it, none is left running. A tool that ran out its
limit is not run again by the same command (a check tells its worker processes): the same error comes
back at once, so that a hung ptxas costs one limit, not one per build (a check assembles a module per
arch, then each source alone to find a broken one), nor one per test of ``pytest probes/``, which checks
until it can.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from gpuprobe.core.errors import GpuprobeError, require_seconds
from gpuprobe.core.processes import kill_session
from gpuprobe.core.tool_output import ENCODING, ERRORS

TOOL_TIMEOUT_VARIABLE = "GPUPROBE_TOOL_TIMEOUT"
CHECK_TIMEOUT_VARIABLE = "GPUPROBE_CHECK_TIMEOUT"
DEFAULT_TOOL_TIMEOUT_S = 300.0
DEFAULT_CHECK_TIMEOUT_S = 1800.0
VERSION_LIMIT_S = 30.0
LONGEST_S = 7 * 24 * 3600.0  # a week: more than any build, and less than the OS's waits can hold


class BrokenTool(GpuprobeError):
    """A tool that did not do its job, whatever it was given (it hung, or said it succeeded and wrote nothing):
    the machine's trouble, not the source's, so a check stops at it with one line instead of reporting it as
    the build error of each probe."""


class ToolTimedOut(BrokenTool):
    """A tool (``tool``, its path) that did not finish within its limit."""

    def __init__(self, message: str, tool: str) -> None:
        super().__init__(message, tool)  # both in args, so that it crosses from a worker process whole
        self.tool = tool

    def __str__(self) -> str:
        return self.args[0]


@dataclass(frozen=True)
class Limit:
    """How long to wait, and how a message states that limit (``300 s (GPUPROBE_TOOL_TIMEOUT)``)."""

    seconds: float
    stated: str


@dataclass(frozen=True)
class Deadline:
    """When a whole check must be done by: a ``time.time()`` instant, the same in each of its processes."""

    at: float
    limit: Limit


def seconds_setting(variable: str, default: float) -> float:
    """The seconds that environment ``variable`` sets (``default`` when unset or empty); a value that is not a
    number of seconds above 0 and at most :data:`LONGEST_S` is a one-line error naming the variable."""
    text = os.environ.get(variable, "").strip()
    if not text:
        return default
    try:
        seconds = float(text)
    except ValueError:
        raise GpuprobeError(f"{variable} must be a positive number of seconds, got {text!r}") from None
    require_seconds(seconds, variable)
    if seconds > LONGEST_S:
        raise GpuprobeError(f"{variable} must be at most {LONGEST_S:g} seconds (a week), got {text}")
    return seconds


def tool_limit() -> Limit:
    """The limit of one tool call: ``GPUPROBE_TOOL_TIMEOUT``."""
    seconds = seconds_setting(TOOL_TIMEOUT_VARIABLE, DEFAULT_TOOL_TIMEOUT_S)
    return Limit(seconds, f"{seconds:g} s ({TOOL_TIMEOUT_VARIABLE})")


def version_limit() -> Limit:
    """The limit of asking a tool its version: :data:`VERSION_LIMIT_S`, or the tool limit if shorter."""
    tool = tool_limit()
    if tool.seconds <= VERSION_LIMIT_S:
        return tool
    return Limit(VERSION_LIMIT_S, f"{VERSION_LIMIT_S:g} s (the limit of a tool's --version)")


def check_deadline(now: float | None = None) -> Deadline:
    """The deadline of a ``gpuprobe check`` starting ``now`` (``time.time()`` if not given):
    ``GPUPROBE_CHECK_TIMEOUT`` seconds later."""
    seconds = seconds_setting(CHECK_TIMEOUT_VARIABLE, DEFAULT_CHECK_TIMEOUT_S)
    start = time.time() if now is None else now
    return Deadline(start + seconds, Limit(seconds, f"{seconds:g} s ({CHECK_TIMEOUT_VARIABLE})"))


_deadline: Deadline | None = None  # the check's, while :func:`within` holds it
_timed_out: dict[str, str] = {}  # a tool's path -> the message of its call that ran out its limit


@contextlib.contextmanager
def within(deadline: Deadline | None, known_timed_out: Mapping[str, str] | None = None) -> Iterator[None]:
    """Every tool call inside ends by ``deadline`` (None: by its own limit alone), or raises ToolTimedOut; a
    tool of ``known_timed_out`` (:func:`timed_out` of the process that started this one) is not run at all."""
    global _deadline
    _timed_out.update(known_timed_out or {})
    outer, _deadline = _deadline, deadline
    try:
        yield
    finally:
        _deadline = outer


def remember(timed_out: ToolTimedOut) -> None:
    """Run the tool that timed out no more in this process: each call of it is ``timed_out`` again at once
    (a worker's, told here, spares the next check in this process, pytest's, another wait on it)."""
    _timed_out[timed_out.tool] = str(timed_out)


def timed_out() -> dict[str, str]:
    """The tools that ran out their limit in this process (path: message), for :func:`within` elsewhere."""
    return dict(_timed_out)


def _bounded(limit: Limit, what: str, path: str) -> Limit:
    """``limit``, or what is left of the check's deadline where that is shorter; past it, an error."""
    if _deadline is None:
        return limit
    left = _deadline.at - time.time()
    if left <= 0:
        raise ToolTimedOut(f"{what}: {Path(path).name} not run: the check's {_deadline.limit.stated} ran out", path)
    return limit if limit.seconds <= left else Limit(left, f"the check's {_deadline.limit.stated}")


def run_tool(args: list[str], what: str, limit: Limit) -> subprocess.CompletedProcess[str]:
    """Run a tool in a session of its own, its output decoded tolerantly (:mod:`gpuprobe.core.tool_output`).

    A tool that does not finish within ``limit`` (or the check's deadline) has its whole process group
    killed, and is a :class:`ToolTimedOut` naming the limit, now and for each later call of the same tool
    in this process; one that cannot run is a one-line error. Interrupted (Ctrl-C, SIGTERM) or failing
    while it waits, gpuprobe kills the group too before it goes on."""
    if args[0] in _timed_out:
        raise ToolTimedOut(_timed_out[args[0]], args[0])
    limit = _bounded(limit, what, args[0])
    with _killed_group_first_on_sigterm():
        _SIGTERM.spawning, _SIGTERM.arrived = True, False  # a SIGTERM now waits until the tool's group is known
        try:
            proc = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    encoding=ENCODING, errors=ERRORS, start_new_session=True)  # fmt: skip
        except OSError as exc:
            _SIGTERM.spawning = False
            raise GpuprobeError(f"{what}: cannot run {args[0]} ({exc.strerror or exc})") from None
        with proc:
            stdout, stderr = _output(proc, args[0], what, limit)
    return subprocess.CompletedProcess(args, proc.returncode, stdout, stderr)


def _output(proc: subprocess.Popen[str], tool: str, what: str, limit: Limit) -> tuple[str, str]:
    """What ``tool`` (running as ``proc``) printed by the time it ended; its group killed if it does not end
    within ``limit`` (a :class:`ToolTimedOut`, remembered) or if anything stops the wait."""
    try:
        _SIGTERM.spawning = False
        if _SIGTERM.arrived:  # it came while the tool was being started
            raise _Terminated
        return proc.communicate(timeout=limit.seconds)
    except subprocess.TimeoutExpired:
        kill_session(proc)
        error = ToolTimedOut(f"{what}: {Path(tool).name} did not finish within {limit.stated}; stopped", tool)
        remember(error)
        raise error from None
    except BaseException:  # Ctrl-C, SIGTERM, anything: no tool outlives gpuprobe's wait for it
        kill_session(proc)
        raise


class _Terminated(BaseException):
    """SIGTERM arrived while a tool ran."""


@dataclass
class _SigtermState:
    """Whether a tool is being started (its process not known yet, so a SIGTERM is held until it is: the
    group it would leave behind is killed first), and whether one arrived meanwhile."""

    spawning: bool = False
    arrived: bool = False


_SIGTERM = _SigtermState()


@contextlib.contextmanager
def _killed_group_first_on_sigterm() -> Iterator[None]:
    """Inside, SIGTERM (a CI job's timeout, ``timeout``, ``kill``) still ends this process as it would have,
    but only once the tool's group is killed (by :func:`run_tool`, as on Ctrl-C): the tool, in a session of
    its own, gets neither signal. Python sets handlers in the main thread alone (each worker process of a
    check runs its jobs there); a handler someone else set is left alone."""
    if threading.current_thread() is not threading.main_thread() or signal.getsignal(signal.SIGTERM) != signal.SIG_DFL:
        yield
        return
    signal.signal(signal.SIGTERM, _raise_terminated)
    try:
        yield
    except _Terminated:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)  # end of it now, as without the handler
        raise
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _raise_terminated(signum: int, frame: object) -> None:
    if _SIGTERM.spawning:
        _SIGTERM.arrived = True
        return
    raise _Terminated
