"""Where a probe source's includes may lead, and how much of each is read.

A probe file (one in a pull request, say) must not be able to make gpuprobe, or a tool it runs, read the
machine's secrets, a device that never ends or a pipe that never answers. So every file an include names
(``//@include`` in PTX, ``#include`` in CUDA C++) is judged before it is read, and before any tool sees it:

* it lies, symlinks followed and ``..`` applied, inside the *include root* of the source that includes it:
  the probe tree (``ptx/``) for a probe file, else the folder of the source itself (a file given to
  ``gpuprobe sass``); CUDA C++ may also include the CUDA headers on NVRTC's include path (the toolkit's,
  trusted and not read here);
* it is a regular file: not a device, a pipe, a socket or a folder (checked before it is opened, and again
  on what was opened, which is opened non-blocking so that a pipe cannot stall the open);
* it holds at most :data:`MAX_INCLUDE_BYTES` (4 MiB; the largest probe source is under 600 KB), and no more
  than one byte past that is ever read.

An include that breaks a rule is an :class:`IncludeRefused`: one line naming the including file and line,
the include as written and why, and exit 2, for ``gpuprobe sass``, ``gpuprobe check``, ``pytest probes/``
and the demo alike (the source tree is broken: no per-probe ERROR row says that as plainly). An include
of a name that is nowhere is left to the expansion or the compile, which say so.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.files import read_regular
from gpuprobe.kernels.source_tree import PTX_DIR, shown_path

MAX_INCLUDE_BYTES = 4 * 2**20


class IncludeRefused(GpuprobeError):
    """An include that leads outside its source's include root, to no regular file, or to too large a file."""


def include_root(folder: Path) -> Path:
    """The folder (resolved) that the includes of a source in ``folder`` must stay inside: the probe tree
    (``ptx/``) for a probe file, else ``folder`` itself."""
    folder = folder.resolve()
    return PTX_DIR if folder.is_relative_to(PTX_DIR) else folder


def lies_inside(path: Path, roots: Sequence[Path]) -> bool:
    """Whether ``path``, symlinks followed and ``..`` applied, is in one of the (resolved) folders ``roots`` (a
    link in a loop is where it is: reading it will fail)."""
    resolved = Path(os.path.realpath(path))
    return any(resolved.is_relative_to(root) for root in roots)


def source_bytes(path: Path) -> bytes | None:
    """The bytes of a probe source, as a cache key reads them: None when there is no such file (the build will
    say so); a GpuprobeError when it is no regular file or over :data:`MAX_INCLUDE_BYTES` (then nothing is
    keyed by it, and the build says what is wrong, if anything)."""
    return read_regular(path, MAX_INCLUDE_BYTES) if os.path.lexists(path) else None


def read_include(path: Path, roots: Sequence[Path], shown: str) -> bytes:
    """The bytes of the file ``path`` that an include (``shown``: ``file:line: //@include NAME``) names, or an
    :class:`IncludeRefused` saying why it may not be read (see the module docstring)."""
    if not lies_inside(path, roots):
        if not roots:  # a source compiled with no folder of its own (a string given to NVRTC): the CUDA headers only
            raise IncludeRefused(f"{shown}: leads outside the CUDA headers, where its includes must stay")
        places = " and ".join(shown_path(root) for root in roots)
        raise IncludeRefused(f"{shown}: leads outside {places}, the folder its includes must stay in")
    try:
        return read_regular(Path(os.path.realpath(path)), MAX_INCLUDE_BYTES, shown)
    except GpuprobeError as exc:
        raise IncludeRefused(str(exc)) from None
