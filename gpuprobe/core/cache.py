"""A content-addressed on-disk cache for compiler and disassembler outputs and the static check's outcomes.

Keys are hashes of everything that determines the output (source text, options, the identity
and version of the tool), so a stale entry can never be returned; entries are written atomically.
``GPUPROBE_CACHE`` overrides the directory.

Each entry ``<key><suffix>`` has the SHA-256 of its bytes beside it (``<key><suffix>.sha256``, written
after the entry), and is read only when the two agree: a damaged entry (a flipped bit, a truncated
file, a hash that is itself damaged) is no entry and is made again, saying so once on stderr (whoever
replaces it says so). An entry without its hash (an older gpuprobe's, or a write cut short between the
two files) is made again silently. A tool's output is judged by its caller before it is stored here.
"""

from __future__ import annotations

import hashlib
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.files import os_reason, replace_atomically


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


DIGEST_SUFFIX = ".sha256"


def _digest_path(path: Path) -> Path:
    return path.with_name(path.name + DIGEST_SUFFIX)


def _digest(data: bytes) -> bytes:
    return hashlib.sha256(data).hexdigest().encode()


def _verified(path: Path) -> bytes | None:
    """The bytes of the entry at ``path`` when they match the hash recorded beside them, else None."""
    try:
        data = path.read_bytes()
        recorded = _digest_path(path).read_bytes()
    except OSError:
        return None
    return data if recorded == _digest(data) else None


def _damaged(path: Path) -> bool:
    """Whether ``path`` holds an entry and a hash that disagree (an entry without a hash is only unverified)."""
    return path.is_file() and _digest_path(path).is_file() and _verified(path) is None


def read_entry(key: str, suffix: str) -> bytes | None:
    """The bytes of the cache entry ``key``, or None when there is none, it cannot be read, or it does not
    match its recorded hash."""
    return _verified(entry_path(key, suffix))


def write_entry(key: str, suffix: str, data: bytes) -> Path:
    """Store ``data`` as the cache entry ``key``, atomically (a reader sees all of it or nothing), then its
    hash; raises the OSError of a write that failed, leaving no temporary file and no entry without its hash.
    Replacing a damaged entry says so, in one line on stderr."""
    path = entry_path(key, suffix)
    path.parent.mkdir(parents=True, exist_ok=True)
    if _damaged(path):
        print(f"gpuprobe: warning: cache entry {path} does not match its recorded SHA-256 (damaged): made again",
              file=sys.stderr)  # fmt: skip
    replace_atomically(path, data)
    try:
        replace_atomically(_digest_path(path), _digest(data))
    except OSError:
        path.unlink(missing_ok=True)
        raise
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
    """Return the path of the cache entry ``key``, its bytes verified, calling ``produce`` to fill it on a miss
    (or in place of a damaged entry); a one-line CacheUnwritable when the cache cannot be written (the file is
    what the caller goes on to use)."""
    path = entry_path(key, suffix)
    if _verified(path) is not None:
        return path
    with entry_lock(key, suffix):
        if _verified(path) is not None:  # made while this process waited
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


class CacheUnwritable(GpuprobeError):
    """The cache cannot be written: one line for the whole command, never one per probe it was building."""


def _unwritable(exc: OSError) -> CacheUnwritable:
    return CacheUnwritable(
        f"cannot write the cache in {cache_dir()} ({os_reason(exc)}): set GPUPROBE_CACHE to a folder gpuprobe may write"
    )
