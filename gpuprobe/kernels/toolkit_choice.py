"""Which CUDA toolkit the user chose: ``GPUPROBE_TOOLKIT``, a list of directories.

The variable wins over every other way of finding a compiler piece (ptxas, nvdisasm, NVRTC and the
CUDA headers) and never falls back: a directory that does not exist is a one-line error, and so is a
list in which no directory holds the piece looked for. Unset or empty means no choice was made.
"""

from __future__ import annotations

import os
from pathlib import Path

from gpuprobe.core.errors import GpuprobeError

TOOLKIT_VARIABLE = "GPUPROBE_TOOLKIT"


def chosen_directories() -> list[Path] | None:
    """The directories ``GPUPROBE_TOOLKIT`` names, in order (separated by ``os.pathsep``); None when it
    is unset or empty. A name that is not a directory is a one-line error."""
    value = os.environ.get(TOOLKIT_VARIABLE)
    if not value:
        return None
    directories = [Path(part) for part in value.split(os.pathsep) if part]
    for directory in directories:
        if not directory.is_dir():
            raise GpuprobeError(f"{TOOLKIT_VARIABLE} names {directory}, which is not a directory")
    return directories


def described(directories: list[Path]) -> str:
    """The chosen directories as one text, for a message saying where something was not found."""
    return ", ".join(str(d) for d in directories)
