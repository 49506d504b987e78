"""One measuring run per GPU: an exclusive lock per device, waited for or refused, never shared.

Two runs measuring one GPU at once would each see the other as noise. The lock is an ``flock`` on
a file per GPU (by UUID where known) in ``GPUPROBE_LOCK_DIR`` (default: the system temp dir); the
kernel releases it when the holder exits, however it exits, so a crashed run never leaves the GPU
locked.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

from gpuprobe.core.errors import GpuprobeError


def lock_path(gpu_key: str) -> Path:
    """The GPU's lock file, in a directory every user of the machine can lock in (sticky, like /tmp)."""
    directory = Path(os.environ.get("GPUPROBE_LOCK_DIR") or Path(tempfile.gettempdir()) / "gpuprobe-locks")
    if not directory.is_dir():
        directory.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(OSError):
            directory.chmod(0o1777)
    return directory / f"gpu-{re.sub(r'[^A-Za-z0-9_.-]', '_', gpu_key)}.lock"


@contextlib.contextmanager
def gpu_lock(gpu_key: str, wait_s: float, poll_s: float = 0.2) -> Iterator[None]:
    """Hold the GPU's lock for the block; wait up to ``wait_s`` for another run to finish, else refuse."""
    path = lock_path(gpu_key)
    try:
        handle = open(path, "a+", encoding="utf-8", errors="replace")  # noqa: SIM115 -- held for the whole block below
        with contextlib.suppress(OSError):
            path.chmod(0o666)
    except OSError as exc:
        raise GpuprobeError(f"cannot open the GPU lock {path} ({exc.strerror}); set GPUPROBE_LOCK_DIR") from None
    with handle:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    handle.seek(0)
                    holder = handle.read().strip() or "another process"
                    raise GpuprobeError(
                        f"GPU {gpu_key} is being measured by {holder}; waited {wait_s:g} s, refusing to measure "
                        "alongside it (--lock-wait to wait longer)"
                    ) from None
                time.sleep(poll_s)
        handle.seek(0)
        handle.truncate()
        handle.write(f"gpuprobe pid {os.getpid()} since {time.strftime('%Y-%m-%dT%H:%M:%S')}")
        handle.flush()
        try:
            yield
        finally:
            handle.seek(0)
            handle.truncate()
            fcntl.flock(handle, fcntl.LOCK_UN)
