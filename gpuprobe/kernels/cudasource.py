"""CUDA C++ probe sources: one translation unit per arch, compiled once, and the files it reads.

The ``.cu`` probes of an arch are compiled together (NVRTC with the cooperative-groups headers costs a
second or two per compile, whatever the file count): the translation unit is one ``#include`` line per
file, named from the probes' root, so NVRTC's messages name the file and line that was written. What
NVRTC writes is PTX, which :mod:`gpuprobe.kernels.cubin` joins to the hand-written PTX of the same arch.
A probe file may include files beside it (``#include "coop.cuh"``); :func:`source_inputs` finds them,
without compiling, for the static check's cache key. Every include must lead to a regular file of at most
4 MiB inside the probe tree (``ptx/``), or to the CUDA headers (:mod:`gpuprobe.kernels.includes`): it is
checked before NVRTC runs, and the check's key refuses what the compile would.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gpuprobe.core.arch import Arch
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.kernels.includes import include_root, source_bytes
from gpuprobe.kernels.nvrtc import cuda_to_ptx, local_inputs
from gpuprobe.kernels.ptxsource import Generated
from gpuprobe.kernels.source_tree import SOURCE_ROOT


def source_inputs(path: Path) -> dict[Path, bytes | None]:
    """The raw bytes of a CUDA C++ file and of every file its includes name, transitively, found as the
    compile of :func:`cuda_module` (with ``SOURCE_ROOT`` on the include path) finds them (None for a name that
    is nowhere: the compile will say so). An include the compile would refuse is refused here too; a source
    that cannot be read is a GpuprobeError."""
    data = source_bytes(path)
    text = (data or b"").decode("utf-8", errors="replace")
    return {path: data, **local_inputs(text, str(path), (SOURCE_ROOT,), (include_root(path.parent),))}


def _shown(path: Path, root: Path) -> str:
    return str(path.relative_to(root)) if path.is_relative_to(root) else str(path)


def translation_unit(files: Sequence[Path], root: Path) -> str:
    """One ``#include`` line per file, each named from ``root`` (which NVRTC gets on its include path)."""
    return "".join(f'#include "{_shown(path, root)}"\n' for path in files)


def cuda_module(files: Sequence[Path], arch: Arch, root: Path) -> Generated:
    """NVRTC's PTX of the CUDA C++ ``files`` for ``arch``, compiled as one translation unit."""
    if not files:
        raise GpuprobeError(f"no CUDA C++ sources to build for {arch}")
    for path in files:
        if not path.is_file():
            raise GpuprobeError(f"{_shown(path, root)}: no such file")
    names = ", ".join(_shown(path, root) for path in files)
    roots = sorted({include_root(path.parent) for path in files})
    ptx = cuda_to_ptx(translation_unit(files, root), arch, f"<{names}>", (root,), roots)
    return Generated(f"NVRTC's PTX of {names}", ptx)
