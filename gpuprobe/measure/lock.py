"""One measuring run per GPU, and one run per output folder: exclusive locks, waited for or refused, never shared.

Two runs measuring one GPU at once would each see the other as noise; two runs writing one folder would
leave a results file from one and a fact sheet from the other. Each lock is an ``flock`` on a file in
``GPUPROBE_LOCK_DIR`` (default: the system temp dir): one per GPU (by UUID where known), one per output folder
(by a hash of its resolved path, so the folder holds only what the run writes); the kernel releases it when
the holder exits, however it exits, so a crashed run never leaves a GPU or a folder locked. The holder's pid
is written in the file, for the refusal to name.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from gpuprobe.core.errors import GpuprobeError


def lock_path(key: str) -> Path:
    """The lock file of ``key`` (``gpu-<uuid>``, ``folder-<hash>``), in a directory every user of the machine can
    lock in (sticky, like /tmp)."""
    directory = Path(os.environ.get("GPUPROBE_LOCK_DIR") or Path(tempfile.gettempdir()) / "gpuprobe-locks")
    if not directory.is_dir():
        try:
            directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:  # a file in its way, a folder shut to us: one line, under pytest too
            reason = f"cannot make the lock folder {directory} ({exc.strerror}); set GPUPROBE_LOCK_DIR"
            raise GpuprobeError(reason) from None
        with contextlib.suppress(OSError):
            directory.chmod(0o1777)
    return directory / f"{re.sub(r'[^A-Za-z0-9_.-]', '_', key)}.lock"


@contextlib.contextmanager
def gpu_lock(gpu_key: str, wait_s: float, poll_s: float = 0.2) -> Iterator[None]:
    """Hold the GPU's lock for the block; wait up to ``wait_s`` for another run to finish, else refuse."""

    def refusal(holder: str) -> str:
        return (f"GPU {gpu_key} is being measured by {holder}; waited {wait_s:g} s, refusing to measure "
                "alongside it (--lock-wait to wait longer)")  # fmt: skip

    with exclusive_lock(lock_path(f"gpu-{gpu_key}"), wait_s, refusal, poll_s):
        yield


@contextlib.contextmanager
def folder_lock(out_dir: Path) -> Iterator[None]:
    """Hold the lock of the folder ``out_dir`` (made already) for the block, a run writing into it; another run
    holding it is refused at once."""

    def refusal(holder: str) -> str:
        return f"{out_dir} is being written by {holder}: give another output folder (-o), or wait for it to end"

    where = hashlib.sha256(os.fsencode(out_dir.resolve())).hexdigest()[:32]
    with exclusive_lock(lock_path(f"folder-{where}"), 0.0, refusal):
        yield


@contextlib.contextmanager
def exclusive_lock(path: Path, wait_s: float, refusal: Callable[[str], str], poll_s: float = 0.2) -> Iterator[None]:
    """Hold an ``flock`` on ``path`` for the block, with this process named in the file; wait up to ``wait_s``
    for its holder, else a GpuprobeError saying ``refusal(holder)``. A file that cannot be opened is a
    GpuprobeError too."""
    try:  # never through a link: in a folder every user writes in, one could point at a file of ours to truncate
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        with contextlib.suppress(OSError):
            os.fchmod(fd, 0o666)
        handle = open(fd, "a+", encoding="utf-8", errors="replace")  # noqa: SIM115 -- held for the whole block below
    except OSError as exc:
        raise GpuprobeError(f"cannot open the lock {path} ({exc.strerror}); set GPUPROBE_LOCK_DIR") from None
    with handle:
        deadline = time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    handle.seek(0)
                    raise GpuprobeError(refusal(handle.read().strip() or "another process")) from None
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
