"""Where the probe sources live, and how messages name a file in them.

Its own module, importing nothing of gpuprobe: the readers of sources (PTX expansion, NVRTC, the include
rules) need these paths, and the probe registry, which needs them too, imports the tools those readers serve.
"""

from __future__ import annotations

from pathlib import Path

PTX_DIR = (Path(__file__).resolve().parents[1] / "ptx").resolve()
"""The kernels and their declarations: the checkout's ``ptx/`` (``gpuprobe/ptx`` links to it), or the
copy an installed wheel carries as package data."""
SOURCE_ROOT = PTX_DIR.parent
"""What source paths are shown relative to: ``ptx/alu/alu.ptx`` from a checkout and a wheel alike."""
SOURCE_SUFFIXES = (".ptx", ".cu")  # hand-written PTX, or CUDA C++ that NVRTC compiles to PTX


def shown_path(path: Path) -> str:
    """``path`` as messages show it: relative to ``SOURCE_ROOT`` when it lies below it."""
    return str(path.relative_to(SOURCE_ROOT)) if path.is_relative_to(SOURCE_ROOT) else str(path)
