"""The checked launch: every launcher holds a launch's arguments against the kernel's PTX signature before it
runs (:func:`check_launch`); :class:`Kernels` poisons the output before the kernel runs and reads it back
after, so a kernel that did not write every word it must is caught (:data:`POISON_BYTE`), not read as zero;
and output buffers are reused across launches.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.runner.launcher import Launcher, Signatures

POISON_BYTE = 0xFF  # every output byte before a launch; a word still all-ones was never written

# PTX parameter type -> the NumPy scalar types a launch may pass for it (a buffer passes for .u64/.b64).
SCALARS: dict[str, tuple[type, ...]] = {
    "u32": (np.uint32,), "s32": (np.int32,), "b32": (np.uint32, np.int32), "f32": (np.float32,),
    "u64": (np.uint64,), "s64": (np.int64,), "b64": (np.uint64, np.int64), "f64": (np.float64,),
}  # fmt: skip
POINTER_TYPES = ("u64", "b64")
TENSOR_MAP_TYPE = "b8[128]"  # a TMA tensor map passed by value (PTX ISA: .param .align 64 .b8 name[128])


def check_arguments(kernel: str, args: Sequence[object], parameters: list[tuple[str, str]]) -> None:
    """The arguments match the kernel's PTX parameters in number and type (a buffer is a 64-bit pointer,
    a tensor map the 128 bytes ``TensorMaps.tensor_map`` encoded)."""
    if len(args) != len(parameters):
        names = ", ".join(name for _, name in parameters)
        raise ProbeFailure(f"{kernel} takes {len(parameters)} parameters ({names}), given {len(args)}")
    for arg, (ptx_type, name) in zip(args, parameters, strict=True):
        if ptx_type == TENSOR_MAP_TYPE:
            if not (isinstance(arg, np.void) and arg.dtype.itemsize == 128):
                raise ProbeFailure(f"{kernel}: parameter {name} is a tensor map, given {type(arg).__name__}")
            continue
        if ptx_type not in SCALARS:
            raise ProbeFailure(f"{kernel}: parameter {name} has PTX type .{ptx_type}, which gpuprobe cannot pass")
        scalar = isinstance(arg, np.generic)
        if (scalar and not isinstance(arg, SCALARS[ptx_type])) or (not scalar and ptx_type not in POINTER_TYPES):
            raise ProbeFailure(f"{kernel}: parameter {name} is .{ptx_type}, given {type(arg).__name__}")


def signature(kernel: str, signatures: Signatures) -> list[tuple[str, str]]:
    """``kernel``'s PTX parameters; ProbeFailure for a kernel the checked cubin does not hold."""
    if kernel not in signatures:
        raise ProbeFailure(f"kernel {kernel} is not in the checked cubin")
    return signatures[kernel]


def check_launch(kernel: str, args: Sequence[object], signatures: Signatures) -> None:
    """What every launcher does before every launch: ``kernel`` is one of the cubin's, and ``args`` match
    its PTX signature (:func:`check_arguments`)."""
    check_arguments(kernel, args, signature(kernel, signatures))


def unwritten(values: np.ndarray) -> bool:
    """Whether any value still holds the poison (all bits set): its word was never written.

    Values of 1, 2, 4 or 8 bytes are compared whole, each as the unsigned word of its width (all bits set is
    its largest): a launch's read-back of megabytes is checked at memory speed, where a test of each value's
    bytes (``np.all`` over rows of 4 or 8) took 5.7 ns a byte, 0.15 s for one wgmma throughput launch's D."""
    raw = np.ascontiguousarray(values)
    width = raw.dtype.itemsize
    if raw.ndim == 1 and width in (1, 2, 4, 8):
        word = np.dtype(f"u{width}")
        return bool(np.any(raw.view(word) == np.iinfo(word).max))
    rows = raw.view(np.uint8).reshape(len(values), -1)
    return bool(np.any(np.all(rows == POISON_BYTE, axis=1)))


@dataclass
class Kernels:
    """Launches of the kernels of the cubin ``launcher`` loaded (it checks every launch's arguments against
    their PTX signatures), their outputs checked."""

    launcher: Launcher

    def results(
        self,
        kernel: str,
        args: Sequence[object],
        out: Any,
        count: int,
        *,
        dtype: str = "uint64",
        grid: int | tuple[int, ...] = 1,
        block: int | tuple[int, ...] = 1,
        shared: int = 0,
        cooperative: bool = False,
    ) -> np.ndarray:
        """Poison ``out``, launch ``kernel`` (the launcher checks its arguments), and read ``count`` values of
        ``dtype`` back; ProbeFailure if any of them was not written. ``out`` must be among ``args``."""
        self.launcher.fill(out, POISON_BYTE)
        self.launcher.launch(kernel, grid, block, list(args), shared, cooperative)
        values = self.launcher.read(out, dtype, count)
        if unwritten(values):
            raise ProbeFailure(f"{kernel} did not write all of its {count} results")
        return values

    def time(
        self,
        kernel: str,
        args: Sequence[object],
        *,
        grid: int | tuple[int, ...],
        block: int | tuple[int, ...],
        shared: int = 0,
        count: int = 1,
        cooperative: bool = False,
    ) -> float:
        """GPU milliseconds of ``count`` back-to-back launches (CUDA events), arguments checked by the launcher."""
        return self.launcher.time_launches(kernel, grid, block, list(args), shared, count, cooperative)


@dataclass
class OutputBuffers:
    """Output buffers of 64-bit words, each size allocated once and reused across launches (a launch poisons
    its output before it runs, so any large enough buffer serves): ``get(words)`` is one of at least ``words``."""

    launcher: Launcher
    by_words: dict[int, Any] = field(default_factory=dict)

    def get(self, words: int) -> Any:
        size = min((w for w in self.by_words if w >= words), default=words)
        if size not in self.by_words:
            self.by_words[size] = self.launcher.alloc(size * 8)
        return self.by_words[size]
