"""Ending a process that leads its own session (started with ``start_new_session=True``) with all it started."""

from __future__ import annotations

import contextlib
import os
import signal
from typing import Any


def kill_session(process: Any) -> None:
    """Kill ``process`` (a ``subprocess.Popen``) and everything it started, then reap it: its session's group
    id is its pid. A process without a real pid (a test's stand-in) is only killed itself, never group 0 or -1."""
    with contextlib.suppress(ProcessLookupError):  # every process of it ended already
        if isinstance(process.pid, int) and process.pid > 1:
            os.killpg(process.pid, signal.SIGKILL)
        else:
            process.kill()
    process.wait()
