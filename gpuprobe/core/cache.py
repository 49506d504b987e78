"""A content-addressed on-disk cache for compiler and disassembler outputs and the static check's outcomes.

Keys are hashes of everything that determines the output (source text, options, the identity
and version of the tool), so a stale entry can never be returned; entries are written atomically.
``GPUPROBE_CACHE`` overrides the directory.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def cache_dir() -> Path:
    override = os.environ.get("GPUPROBE_CACHE")
    if override:
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "gpuprobe"


def content_key(*parts: str | bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        data = part.encode() if isinstance(part, str) else part
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


def cached_file(key: str, suffix: str, produce: Callable[[], bytes]) -> Path:
    """Return the path of the cache entry ``key``, calling ``produce`` to fill it on a miss."""
    path = entry_path(key, suffix)
    if path.is_file():
        return path
    return write_entry(key, suffix, produce())
