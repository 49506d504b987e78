"""The measuring processes the tests start, found by the lock folder their run gave them."""

from __future__ import annotations

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
    marker = f"GPUPROBE_LOCK_DIR={lock_dir}".encode()
    found: list[int] = []
    if not Path("/proc").is_dir():  # no process table to read (not Linux): nothing can be found
        return found
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            environ = (entry / "environ").read_bytes().split(b"\0")
            state = (entry / "stat").read_text().split(") ", 1)[1][0]
        except OSError:
            continue
        if b"gpuprobe.measure.child" in cmdline and marker in environ and state != "Z":
            found.append(int(entry.name))
    return found


def wait_until(condition: Callable[[], bool], seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)
    return condition()
