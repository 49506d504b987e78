"""The measuring processes the tests start, found by the lock folder their run gave them, and a clock
that moves on when one of them reaches a point the test chose."""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path

CTRL_C_ARMED = "import signal; signal.signal(signal.SIGINT, signal.default_int_handler)\n"
"""Put before a child's code: its Ctrl-C raises KeyboardInterrupt even where the tests run with SIGINT
ignored (a shell's background job), whose SIG_IGN the child would inherit and Python would keep."""

PYTEST_ARMED = CTRL_C_ARMED + "import sys, pytest; sys.exit(pytest.main(sys.argv[1:]))"
"""``python -c PYTEST_ARMED ARGS``: pytest as ``python -m pytest ARGS`` runs it, Ctrl-C armed."""


def measuring_children(lock_dir: str | Path) -> list[int]:
    """Live gpuprobe child processes (zombies excluded) of the runs whose lock folder is ``lock_dir``.

    Every child inherits its run's ``GPUPROBE_LOCK_DIR``, and that is what tells the runs apart: under
    xdist another worker's run has children measuring at the same time, and a killed run's children are
    no longer its children in the process tree."""
    return processes_with(f"GPUPROBE_LOCK_DIR={lock_dir}", "gpuprobe.measure.child")


def processes_with(variable: str, command: str = "") -> list[int]:
    """Live processes (zombies excluded) other than this one whose environment holds ``variable``
    (``NAME=value``) and whose command line holds ``command``: what a test started, wherever it went in
    the process tree."""
    marker = variable.encode()
    found: list[int] = []
    if not Path("/proc").is_dir():  # no process table to read (not Linux): nothing can be found
        return found
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().split(") ", 1)[1][0]
        except OSError:
            continue
        if command.encode() in cmdline and marker in environ and state != "Z":
            found.append(int(entry.name))
    return found


def clock_jumping_while_hung(hang_file: Path) -> Callable[[], float]:
    """``time.monotonic``, jumping a million seconds at each reading while a simulated kernel hangs (its
    process, whose id it wrote to ``hang_file``, is alive: see ``FaultyGpu.hang_file``). Every limit
    measured by it passes while the kernel hangs, however busy the machine, whenever the limit was
    set; at other times it is the real clock, so a generous limit still ends a test whose code is broken."""
    ahead = 0.0

    def clock() -> float:
        nonlocal ahead
        ahead += 1e6 * hung(hang_file)
        return time.monotonic() + ahead

    return clock


def hung(hang_file: Path) -> bool:
    """Whether the process whose id ``hang_file`` holds (a hanging kernel's) is still alive."""
    try:
        os.kill(int(hang_file.read_text()), 0)
    except (OSError, ValueError):  # no file yet, being written, or the process is gone
        return False
    return True


def wait_until(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()
