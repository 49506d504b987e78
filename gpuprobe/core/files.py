"""Reading and writing the files users hand gpuprobe: one-line errors in, atomic writes out."""

from __future__ import annotations

import os
import stat
import tempfile
import tomllib
from pathlib import Path
from typing import Any

from gpuprobe.core.errors import GpuprobeError


def read_text(path: Path | str) -> str:
    """The file's text, or a one-line GpuprobeError saying why it cannot be read. A named pipe, device or
    socket is refused before it is opened: reading one could wait for ever."""
    file = Path(path)
    if file.exists() and not (file.is_file() or file.is_dir()):
        raise GpuprobeError(f"{path}: cannot read (not a regular file)")
    try:
        return file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise GpuprobeError(f"{path}: no such file") from None
    except UnicodeDecodeError:
        raise GpuprobeError(f"{path}: cannot read (not UTF-8 text)") from None
    except OSError as exc:
        raise GpuprobeError(f"{path}: cannot read ({os_reason(exc)})") from None


def read_toml(path: Path, shown: str | None = None) -> dict[str, Any]:
    """The TOML document in ``path``, or a one-line GpuprobeError naming it (as ``shown``, by default the path)
    and saying why it cannot be read or parsed."""
    text = read_text(path)
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise GpuprobeError(f"{shown or path}: (TOML syntax): {exc}") from None
    except RecursionError:  # tomllib parses nested arrays and inline tables recursively
        raise GpuprobeError(f"{shown or path}: (TOML syntax): arrays or tables nested too deeply") from None


def make_dirs(path: Path) -> Path:
    """``path`` as a folder (made, with its parents, if it is not one), or a one-line GpuprobeError saying why
    it cannot be."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise GpuprobeError(f"{path}: cannot make this folder ({os_reason(exc)})") from None
    return path


def require_writable_folder(path: Path) -> None:
    """``path`` is a folder this process can write in, or one it could make, checked before any work is
    done and without making it: a one-line GpuprobeError saying why not (a file is in the way, no
    permission, a place that holds no folders such as /proc)."""
    existing = path
    while not os.path.lexists(existing) and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        what = "not a folder" if existing == path else f"cannot make this folder ({existing} is not a folder)"
        raise GpuprobeError(f"{path}: {what}")
    try:
        os.rmdir(tempfile.mkdtemp(prefix=".gpuprobe-writable-", dir=existing))
    except OSError as exc:
        what = "cannot write in this folder" if existing == path else "cannot make this folder"
        raise GpuprobeError(f"{path}: {what} ({os_reason(exc)})") from None


def os_reason(exc: OSError) -> str:
    """Why a file operation failed, in a few words: "Not a directory", "Permission denied"."""
    return exc.strerror or str(exc) or type(exc).__name__


def write_atomic(path: Path, content: str | bytes) -> None:
    """Write ``content`` (text as UTF-8, a character UTF-8 cannot hold, such as a stray byte of a file name, as
    ``?``) to ``path`` so that readers see the old file or the new one, never half; a one-line GpuprobeError when
    it cannot be written."""
    make_dirs(path.parent)
    try:
        replace_atomically(path, content.encode("utf-8", "replace") if isinstance(content, str) else content)
    except OSError as exc:
        raise GpuprobeError(f"{path}: cannot write ({os_reason(exc)})") from None


def replace_atomically(path: Path, data: bytes) -> None:
    """``data`` into ``path`` through a temporary file beside it, removed when the write fails (a full disk
    leaves nothing behind): readers see the old file or the new one, never half. Raises the OSError."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as handle:  # closes the file whatever fails in it
            os.fchmod(fd, 0o644)  # a report or a cache entry others read, not a secret (mkstemp creates 0600)
            handle.write(data)
            handle.flush()
            os.fsync(handle.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def read_regular(path: Path, limit: int, shown: str | None = None) -> bytes:
    """The bytes of the regular file ``path``, or a one-line GpuprobeError naming it (as ``shown``, by default the
    path) and saying why not. A device, pipe, socket or folder is refused without reading it: its type is checked
    before the open, and again on what was opened (opened non-blocking, so that a pipe cannot stall the open); a
    file of more than ``limit`` bytes is refused having read at most one byte more."""
    name = shown or str(path)
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):
            raise GpuprobeError(f"{name}: not a regular file")
        with open(os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as handle:
            if not stat.S_ISREG(os.fstat(handle.fileno()).st_mode):
                raise GpuprobeError(f"{name}: not a regular file")
            data = handle.read(limit + 1)
    except FileNotFoundError:
        raise GpuprobeError(f"{name}: no such file") from None
    except OSError as exc:
        raise GpuprobeError(f"{name}: cannot read ({os_reason(exc)})") from None
    if len(data) > limit:
        raise GpuprobeError(f"{name}: larger than {limit:,} bytes")
    return data
