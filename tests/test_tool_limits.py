"""Every tool runs under a stated, settable limit, and its whole process group goes at the limit, on Ctrl-C
or on failure (issue 25 item 4; trial cases n67, n68, n69); a cold check says how it goes, a warm one not.

No test here measures time: a limit is proven by what it leaves (the message naming it, a process that is
gone, a tool that ran once), never by how long anything took.
"""

from __future__ import annotations

import operator
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuprobe.core import workers
from gpuprobe.kernels import tool_limits, toolchain
from gpuprobe.kernels.check import check_all
from gpuprobe.kernels.tool_limits import Deadline, Limit, ToolTimedOut, run_tool, within
from gpuprobe.kernels.toolchain import TOOLKIT_VARIABLE, locate_tool
from tests.test_check_cache import SM80, SM90, probes, tree  # noqa: F401 (a fixture)
from tests.test_cli import REPO, run, user_error
from tests.test_toolchain import (  # noqa: F401 (the fixtures)
    GOOD_KERNEL,
    fresh_lookup,
    make_executable,
    own_toolkit,
    private_cache,
    ptx_text,
    talking_tool,
)

REAL_TOOLS = locate_tool("ptxas").path.parent
SHORT = "0.5"  # seconds, for a tool that never ends: the outcome is the same however long anything takes
SETTLE_S = 30.0  # how long a killed process may take to be gone before a test calls it left behind


def gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (it is not there, or only a zombie waiting to be reaped)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return True
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


def settled_gone(pid: int) -> bool:
    """Whether ``pid`` ends soon after a SIGKILL (delivery is not instantaneous); a bound on failure only."""
    give_up = time.monotonic() + SETTLE_S
    while not gone(pid):
        if time.monotonic() > give_up:
            return False
        time.sleep(0.05)
    return True


def wrapper_script(tmp_path: Path) -> tuple[Path, Path]:
    """A tool that starts a child (a ``sleep`` under a name of its own), writes the child's PID, and waits for
    it: a wrapper script, as a toolkit's ptxas may be. Returns the script and the file the PID goes to."""
    sleeper = tmp_path / "sleeper"
    sleeper.symlink_to(shutil.which("sleep") or "/bin/sleep")
    pid_file = tmp_path / "child.pid"
    script = tmp_path / "wrapper" / "ptxas"
    talking_tool(script, f"'{sleeper}' 100000 &\necho $! > '{pid_file}'\nwait")
    return script, pid_file


# ---------------------------------------------------------------- the settings ----------


@pytest.mark.parametrize("value", ["abc", "0", "-1", "nan", "inf", "1e300", "5 s"])
@pytest.mark.parametrize("variable", ["GPUPROBE_TOOL_TIMEOUT", "GPUPROBE_CHECK_TIMEOUT"])
def test_a_limit_that_is_not_seconds_is_one_line_naming_it(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    assert user_error(capsys, "check", "--arch", "sm_80").startswith(f"{variable} must be ")


def test_the_limits_are_their_settings_or_the_stated_defaults(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("GPUPROBE_TOOL_TIMEOUT", raising=False)
    monkeypatch.delenv("GPUPROBE_CHECK_TIMEOUT", raising=False)
    assert tool_limits.tool_limit() == Limit(300, "300 s (GPUPROBE_TOOL_TIMEOUT)")
    assert tool_limits.version_limit() == Limit(30, "30 s (the limit of a tool's --version)")
    assert tool_limits.check_deadline(now=1000.0) == Deadline(2800.0, Limit(1800, "1800 s (GPUPROBE_CHECK_TIMEOUT)"))
    monkeypatch.setenv("GPUPROBE_TOOL_TIMEOUT", "2.5")
    monkeypatch.setenv("GPUPROBE_CHECK_TIMEOUT", " 60 ")
    assert tool_limits.tool_limit() == tool_limits.version_limit() == Limit(2.5, "2.5 s (GPUPROBE_TOOL_TIMEOUT)")
    assert tool_limits.check_deadline(now=0.0).at == 60.0


# ---------------------------------------------------------------- one tool call ---------


def test_a_tool_at_its_limit_is_stopped_with_its_children(tmp_path: Path) -> None:
    """n67: the whole process group goes at the limit, a wrapper's child with it (no orphan left running)."""
    script, pid_file = wrapper_script(tmp_path)
    with pytest.raises(ToolTimedOut) as excinfo:
        run_tool([str(script), "in.ptx"], "k.ptx", Limit(float(SHORT), f"{SHORT} s (GPUPROBE_TOOL_TIMEOUT)"))
    assert str(excinfo.value) == f"k.ptx: ptxas did not finish within {SHORT} s (GPUPROBE_TOOL_TIMEOUT); stopped"
    if pid_file.is_file():  # the child had started before the limit: it is gone too
        assert settled_gone(int(pid_file.read_text()))


def signal_once_the_child_runs(pid_file: Path, send: Callable[[], None]) -> threading.Thread:
    """A thread that calls ``send`` once the wrapper's child is running (its PID written): the signal then
    lands on a tool that has a child to kill, however slowly anything starts."""

    def wait_then_send() -> None:
        give_up = time.monotonic() + SETTLE_S
        while not (pid_file.is_file() and pid_file.read_text().strip()) and time.monotonic() < give_up:
            time.sleep(0.05)
        send()

    thread = threading.Thread(target=wait_then_send)
    thread.start()
    return thread


def test_an_interrupted_tool_is_stopped_with_its_children(tmp_path: Path) -> None:
    """Ctrl-C while a tool runs (the tool, in a session of its own, does not get the terminal's SIGINT):
    gpuprobe kills the tool's group before the interruption goes on."""
    script, pid_file = wrapper_script(tmp_path)
    main = threading.main_thread().ident
    assert main is not None
    # Ctrl-C armed, as in tests/helpers/processes.py: a test run started in the background inherits SIGINT ignored
    armed = signal.signal(signal.SIGINT, signal.default_int_handler)
    sender = signal_once_the_child_runs(pid_file, lambda: signal.pthread_kill(main, signal.SIGINT))
    try:
        with pytest.raises(KeyboardInterrupt):  # a signal that never came is the limit's ToolTimedOut, not a hang
            run_tool([str(script), "in.ptx"], "k.ptx", Limit(SETTLE_S * 4, "a bound on the test"))
    finally:
        sender.join()
        signal.signal(signal.SIGINT, armed)
    assert settled_gone(int(pid_file.read_text()))


def test_a_terminated_gpuprobe_stops_its_tool_first(tmp_path: Path) -> None:
    """SIGTERM (a CI job's timeout) while a tool runs: the process ends of it as it always did, but only once
    it has killed the tool's group, which the signal does not reach. In a process of its own, as it ends."""
    script, pid_file = wrapper_script(tmp_path)
    call = f"run_tool([{str(script)!r}, 'in.ptx'], 'k.ptx', Limit(3600, 'an hour'))"
    program = f"from gpuprobe.kernels.tool_limits import Limit, run_tool\n{call}\n"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    gpuprobe = subprocess.Popen([sys.executable, "-c", program], env=env)
    sender = signal_once_the_child_runs(pid_file, gpuprobe.terminate)
    try:
        assert gpuprobe.wait(timeout=SETTLE_S * 4) == -signal.SIGTERM
    finally:
        sender.join()
        gpuprobe.kill()
        gpuprobe.wait()
    assert settled_gone(int(pid_file.read_text()))


@pytest.fixture
def started(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The command line of each process gpuprobe starts from here on, as it starts it."""
    lines: list[list[str]] = []
    real = subprocess.Popen

    def recorded(args: list[str], *rest: Any, **options: Any) -> subprocess.Popen[str]:
        lines.append(list(args))
        return real(args, *rest, **options)

    monkeypatch.setattr(subprocess, "Popen", recorded)
    return lines


def test_a_tool_that_timed_out_is_not_run_again(tmp_path: Path, started: list[list[str]]) -> None:
    """A hung tool costs one limit per command, not one per build: the next call is the same error at once."""
    script = talking_tool(tmp_path / "hung" / "ptxas", "exec sleep 100000")
    limit = Limit(float(SHORT), f"{SHORT} s (GPUPROBE_TOOL_TIMEOUT)")
    errors = []
    for what in ("first.ptx", "second.ptx"):
        with pytest.raises(ToolTimedOut) as excinfo:
            run_tool([str(script), what], what, limit)
        errors.append(str(excinfo.value))
    assert errors == [f"first.ptx: ptxas did not finish within {SHORT} s (GPUPROBE_TOOL_TIMEOUT); stopped"] * 2
    assert started == [[str(script), "first.ptx"]]


def test_a_check_past_its_deadline_runs_no_tool(tmp_path: Path, started: list[list[str]]) -> None:
    script = talking_tool(tmp_path / "late" / "ptxas", "exit 0")
    past = Deadline(0.0, Limit(60, "60 s (GPUPROBE_CHECK_TIMEOUT)"))
    with within(past), pytest.raises(ToolTimedOut) as excinfo:
        run_tool([str(script), "x.ptx"], "x.ptx", Limit(300, "300 s (GPUPROBE_TOOL_TIMEOUT)"))
    assert str(excinfo.value) == "x.ptx: ptxas not run: the check's 60 s (GPUPROBE_CHECK_TIMEOUT) ran out"
    assert started == []


# ---------------------------------------------------------------- the commands ----------


@pytest.fixture
def short_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GPUPROBE_TOOL_TIMEOUT", SHORT)


@pytest.mark.parametrize("version_hangs", [False, True], ids=["n67-hangs", "n68-version-hangs"])
def test_sass_with_a_hung_ptxas_is_one_line_naming_the_limit(
    capsys: pytest.CaptureFixture[str],
    own_toolkit: Path,  # noqa: F811
    short_limit: None,
    tmp_path: Path,
    version_hangs: bool,
) -> None:
    """n67, n68: whichever call hangs (``--version``, whose limit is the shorter of 30 s and the tool limit, or
    the assembly), ``sass`` ends with one line naming the limit and the setting that states it."""
    if version_hangs:
        make_executable(own_toolkit / "ptxas", "#!/bin/sh\nexec sleep 100000\n")
    else:
        talking_tool(own_toolkit / "ptxas", "exec sleep 100000")
    source = tmp_path / "k.ptx"
    source.write_text(ptx_text(*GOOD_KERNEL))
    message = user_error(capsys, "sass", str(source))
    assert f"ptxas did not finish within {SHORT} s (GPUPROBE_TOOL_TIMEOUT); stopped" in message


def toy_toolkit(monkeypatch: pytest.MonkeyPatch, folder: Path, action: str) -> None:
    """A toolkit of a fake ptxas (answering ``--version``, then running ``action``) and the real other tools;
    their versions asked already (under the default limits), so that a test's short limit binds on ``action``."""
    talking_tool(folder / "ptxas", action)
    monkeypatch.setenv(TOOLKIT_VARIABLE, f"{folder}:{REAL_TOOLS}")
    locate_tool.cache_clear()
    toolchain._version_line.cache_clear()
    for tool in ("ptxas", "nvdisasm"):
        toolchain.tool_version(tool)


def test_a_check_with_a_hung_ptxas_stops_at_it_with_one_line(
    tree: Path,  # noqa: F811
    fresh_lookup: None,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
    started: list[list[str]],
) -> None:
    """n69: a check stops at a hung tool with its one line, having said what it builds under which limits; it
    does not report the hang as every probe's build error, nor wait out the limit once per source."""
    toy_toolkit(monkeypatch, tree / "hung", "exec sleep 100000")
    monkeypatch.setenv("GPUPROBE_TOOL_TIMEOUT", SHORT)
    monkeypatch.setattr(workers, "usable_cpus", lambda: 1)
    said: list[str] = []
    with pytest.raises(ToolTimedOut) as excinfo:
        check_all(probes(tree), [SM80], said.append)
    assert str(excinfo.value) == f"probes-sm_80: ptxas did not finish within {SHORT} s (GPUPROBE_TOOL_TIMEOUT); stopped"
    assert said == [
        "building sm_80: 2 probe checks not in the cache "
        f"(limits: {SHORT} s (GPUPROBE_TOOL_TIMEOUT) a tool call, 1800 s (GPUPROBE_CHECK_TIMEOUT) in all)"
    ]
    assemblies = [line for line in started if line[0].startswith(str(tree / "hung")) and "--version" not in line]
    assert len(assemblies) == 1  # not again for each of the two sources


def test_a_tool_that_timed_out_in_a_worker_is_not_run_by_the_next_check(
    tree: Path,  # noqa: F811
    fresh_lookup: None,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Archs built side by side: a worker's time-out reaches this process, and the next check here (pytest
    checks once per test until one succeeds) stops at once, starting the tool in no worker again."""
    calls = tree / "calls"
    toy_toolkit(monkeypatch, tree / "hung", f"echo called >> '{calls}'\nexec sleep 100000")
    monkeypatch.setenv("GPUPROBE_TOOL_TIMEOUT", SHORT)
    monkeypatch.setattr(workers, "usable_cpus", lambda: 2)
    with pytest.raises(ToolTimedOut) as first:
        check_all(probes(tree), [SM80, SM90])
    started_then = calls.read_text() if calls.exists() else ""
    with pytest.raises(ToolTimedOut) as second:
        check_all(probes(tree), [SM80, SM90])
    assert str(second.value) == str(first.value)
    assert (calls.read_text() if calls.exists() else "") == started_then


def test_a_check_past_its_own_limit_names_it(
    tree: Path,  # noqa: F811
    fresh_lookup: None,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The whole check's limit binds before a tool's: its message names GPUPROBE_CHECK_TIMEOUT."""
    toy_toolkit(monkeypatch, tree / "hung", "exec sleep 100000")
    monkeypatch.setenv("GPUPROBE_CHECK_TIMEOUT", SHORT)
    with pytest.raises(ToolTimedOut) as excinfo:
        check_all(probes(tree), [SM80])
    assert f"the check's {SHORT} s (GPUPROBE_CHECK_TIMEOUT)" in str(excinfo.value)


def test_a_cold_check_says_how_it_goes_and_a_warm_one_says_nothing(
    tree: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(workers, "usable_cpus", lambda: 1)
    said: list[str] = []
    check_all(probes(tree), [SM80, SM90], said.append)
    assert said == [
        "building sm_80, sm_90: 3 probe checks not in the cache "
        "(limits: 300 s (GPUPROBE_TOOL_TIMEOUT) a tool call, 1800 s (GPUPROBE_CHECK_TIMEOUT) in all)",
        "sm_80 built and checked (1 of 2)",
        "sm_90 built and checked (2 of 2)",
    ]
    said.clear()
    check_all(probes(tree), [SM80, SM90], said.append)
    assert said == []


def test_check_prints_what_it_checked_first_and_what_no_probe_targets_last(
    capsys: pytest.CaptureFixture[str],
    tree: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The "unsupported" lines come after the checked ones (a full check has hundreds of them), and the
    progress goes to stderr, prefixed, on a cold cache alone."""
    from gpuprobe.kernels import registry

    monkeypatch.setattr(registry, "all_probes", lambda: probes(tree))
    monkeypatch.setattr(workers, "usable_cpus", lambda: 1)
    code, out, err = run(capsys, "check", "--arch", "sm_90,sm_80")
    assert code == 0
    assert [line.split()[:3] for line in out.splitlines()[:-1]] == [
        ["ok", "sm_90", "toy.two"],
        ["ok", "sm_80", "toy.one"],
        ["ok", "sm_80", "toy.two"],
        ["unsupported", "sm_90", "toy.one"],
    ]
    assert [line.split(":")[0] for line in err.splitlines()] == ["gpuprobe check"] * 3
    assert run(capsys, "check", "--arch", "sm_90,sm_80")[1:] == (out, "")


def test_jobs_side_by_side_are_said_as_they_finish_and_a_failure_is_raised_here(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(workers, "usable_cpus", lambda: 2)
    done: list[int] = []
    assert workers.map_in_processes(operator.add, [(1, 2), (3, 4)], done.append) == [3, 7]
    assert sorted(done) == [0, 1]
    done.clear()
    with pytest.raises(ZeroDivisionError):
        workers.map_in_processes(operator.truediv, [(1, 0), (1, 1)], done.append)
    assert set(done) <= {1}


def test_a_sigterm_while_the_tool_starts_waits_until_its_group_can_be_killed(tmp_path: Path) -> None:
    """A SIGTERM that lands while ``Popen`` is still returning (the tool already running, its process not yet
    known) is held, then acted on first thing: the tool's group is killed before the process ends of it."""
    from gpuprobe.kernels import tool_limits

    script, pid_file = wrapper_script(tmp_path)
    tool_limits._SIGTERM.spawning, tool_limits._SIGTERM.arrived = True, False
    tool_limits._raise_terminated(signal.SIGTERM, None)  # held: no exception while spawning
    assert tool_limits._SIGTERM.arrived
    proc = subprocess.Popen([str(script)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    signal_once_the_child_runs(pid_file, lambda: None).join()
    with proc, pytest.raises(tool_limits._Terminated):
        tool_limits._output(proc, str(script), "k.ptx", Limit(3600, "an hour"))
    assert not tool_limits._SIGTERM.spawning and settled_gone(int(pid_file.read_text()))
