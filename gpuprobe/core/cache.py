"""A content-addressed on-disk cache for compiler and disassembler outputs.

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


def cached_file(key: str, suffix: str, produce: Callable[[], bytes]) -> Path:
    """Return the path of the cache entry ``key``, calling ``produce`` to fill it on a miss."""
    directory = cache_dir() / key[:2]
    path = directory / f"{key}{suffix}"
    if path.is_file():
        return path
    data = produce()
    directory.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".tmp-", dir=directory)
    with os.fdopen(fd, "wb") as handle:
        handle.write(data)
    os.replace(tmp, path)
    return path
