"""A content-addressed on-disk cache for compiler and disassembler outputs and the static check's outcomes.

Keys are hashes of everything that determines the output (source text, options, the identity
and version of the tool), so a stale entry can never be returned; entries are written atomically.
``GPUPROBE_CACHE`` overrides the directory.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.files import os_reason


def cache_dir() -> Path:
    override = os.environ.get("GPUPROBE_CACHE")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "gpuprobe"


def content_key(*parts: str | bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode("utf-8", "surrogateescape") if isinstance(part, str) else part  # a path's stray bytes too
        digest.update(len(data).to_bytes(8, "little"))
        digest.update(data)
    return digest.hexdigest()


def entry_path(key: str, suffix: str) -> Path:
    """Where the cache entry ``key`` (with ``suffix``) lives, whether or not it exists."""
    return cache_dir() / key[:2] / f"{key}{suffix}"


def read_entry(key: str, suffix: str) -> bytes | None:
    """The bytes of the cache entry ``key``, or None when there is none (or it cannot be read)."""
    try:
        return entry_path(key, suffix).read_bytes()
    except OSError:
        return None


def write_entry(key: str, suffix: str, data: bytes) -> Path:
    """Store ``data`` as the cache entry ``key``, atomically (a reader sees all of it or nothing)."""
    path = entry_path(key, suffix)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=path.parent)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)
    return path


@contextmanager
def entry_lock(key: str, suffix: str) -> Iterator[None]:
    """Held while the entry ``key`` with ``suffix`` is made: another process making the same entry (a second
    test worker, a second run) waits, then finds it made, instead of making it again beside it. One lock per
    entry, so making one entry may make another of the same key (a cubin its compiler's report). Where no
    lock can be taken (no ``fcntl``, a cache that cannot be written) the entry is made without one."""
    try:
        import fcntl

        path = entry_path(key, f"{suffix}.lock")
        path.parent.mkdir(parents=True, exist_ok=True)
        handle = path.open("ab")
    except (ImportError, OSError):
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_EX)  # released when the handle closes
        yield


def cached_file(key: str, suffix: str, produce: Callable[[], bytes]) -> Path:
    """Return the path of the cache entry ``key``, calling ``produce`` to fill it on a miss; a one-line
    GpuprobeError when the cache cannot be written (the file is what the caller goes on to use)."""
    path = entry_path(key, suffix)
    if path.is_file():
        return path
    with entry_lock(key, suffix):
        if path.is_file():  # made while this process waited
            return path
        data = produce()
        try:
            return write_entry(key, suffix, data)
        except OSError as exc:
            raise _unwritable(exc) from None


def usable_cache_dir() -> Path:
    """The cache folder, made if it is missing; a one-line GpuprobeError when it cannot be one gpuprobe writes
    in (a file, a path that cannot be made, a folder without write permission)."""
    directory = cache_dir()
    try:
        directory.mkdir(parents=True, exist_ok=True)
        if not os.access(directory, os.W_OK | os.X_OK):
            raise PermissionError(13, "Permission denied")
    except OSError as exc:
        raise _unwritable(exc) from None
    return directory


def _unwritable(exc: OSError) -> GpuprobeError:
    return GpuprobeError(
        f"cannot write the cache in {cache_dir()} ({os_reason(exc)}): set GPUPROBE_CACHE to a folder gpuprobe may write"
    )
