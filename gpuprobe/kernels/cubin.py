"""Building the probe module for an arch: one cubin holding every probe that targets it.

All PTX families for an arch are combined into one module, assembled once, disassembled once and
(on a GPU) loaded once: the cubin that is inspected is the cubin that runs. The CUDA C++ probes
(``.cu`` sources) join it as PTX: NVRTC compiles all of an arch's ``.cu`` files as one translation
unit (:mod:`gpuprobe.kernels.cudasource`), and its PTX is assembled with the hand-written PTX by the
same ptxas, so there is still one cubin per arch, one ptxas and one disassembly. If the combined
module does not assemble, each source is assembled alone so the error names the file that broke.
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuprobe.core.arch import Arch
from gpuprobe.core.cache import cached_file, read_entry
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.tool_output import decoded
from gpuprobe.kernels.cudasource import cuda_module
from gpuprobe.kernels.ptxsource import combine, entry_parameters
from gpuprobe.kernels.registry import Probe
from gpuprobe.kernels.sass import Listing, apply_compile_log, read_cubin
from gpuprobe.kernels.source_tree import SOURCE_ROOT
from gpuprobe.kernels.toolchain import LOG_SUFFIX, assemble_ptx


@dataclass(frozen=True)
class BuiltModule:
    arch: Arch
    cubin: Path
    read_listing: Callable[[], Listing] = field(repr=False, compare=False)  # its SASS listing: see ``listing``
    sources: tuple[Path, ...]
    parameters: dict[str, list[tuple[str, str]]]  # kernel -> [(PTX type, name)], to check launches against
    # each probe's check of this cubin, by the probe's declaration, as the check cache recorded it (a check's
    # outcome, :class:`gpuprobe.kernels.check.CheckResult`): ``check_probe`` answers from it
    recorded: Mapping[str, Any] = field(default_factory=dict, repr=False, compare=False)

    @functools.cached_property
    def listing(self) -> Listing:
        """The cubin's SASS listing, read when first asked for (a module read back for a run whose checks are
        recorded needs none, and a measuring process may need none)."""
        return self.read_listing()


def probe_sources(probes: list[Probe] | tuple[Probe, ...], arch: Arch) -> list[Path]:
    """The sources of ``probes`` that target ``arch``, in the order a module of them is built from."""
    return sorted({p.source for p in probes if p.supports(arch)})


CUDA_SUFFIX = ".cu"


def build_ptx(sources: list[Path], arch: Arch) -> BuiltModule:
    """Assemble PTX sources, and NVRTC's PTX of the CUDA C++ (``.cu``) ones, into one cubin for ``arch``; read
    its SASS. (The name is the PTX's: everything reaches ptxas as PTX.)"""
    cuda = [path for path in sources if path.suffix == CUDA_SUFFIX]
    generated = [cuda_module(cuda, arch, SOURCE_ROOT)] if cuda else []
    module = combine([path for path in sources if path.suffix != CUDA_SUFFIX], arch, SOURCE_ROOT, generated)
    try:
        compiled = assemble_ptx(module.text, arch, f"probes-{arch}", module.origins)
    except GpuprobeError:
        if len(sources) > 1:
            for source in sources:  # find the source that broke, for a precise message
                build_ptx([source], arch)
        raise
    listing = _listing_of(compiled.cubin, compiled.log)
    parameters = entry_parameters(module.text)
    record_parameters(compiled.cubin, parameters)
    return BuiltModule(arch, compiled.cubin, lambda: listing, tuple(sources), parameters)


PARAMETERS_SUFFIX = ".parameters.json"


def record_parameters(cubin: Path, parameters: dict[str, list[tuple[str, str]]]) -> None:
    """The kernels' parameters beside the (cached) cubin, as an entry of the cubin's key (its file's stem), once:
    a process handed the cubin then reads its module back (``module_of``) instead of combining every
    source again to find them."""
    cached_file(cubin.stem, PARAMETERS_SUFFIX, json.dumps(parameters).encode)


def module_of(cubin: Path, arch: Arch, sources: tuple[Path, ...] = ()) -> BuiltModule | None:
    """The module ``build_ptx`` built for ``arch`` from ``sources`` (default: unknown, empty) as ``cubin``, read
    back from the cubin and the entries beside it, building nothing, its listing read when first asked for; None
    where those entries are missing or damaged (:mod:`gpuprobe.core.cache` verifies each)."""
    recorded, log = read_entry(cubin.stem, PARAMETERS_SUFFIX), read_entry(cubin.stem, LOG_SUFFIX)
    if recorded is None or log is None:
        return None
    parameters = {kernel: [(kind, name) for kind, name in pairs] for kernel, pairs in json.loads(recorded).items()}
    return BuiltModule(arch, cubin, functools.partial(_listing_of, cubin, decoded(log)), sources, parameters)


def _listing_of(cubin: Path, log: str) -> Listing:
    """``cubin``'s listing, with its compile ``log``'s figures and notes."""
    listing = read_cubin(cubin)
    apply_compile_log(listing, log)
    return listing


def build_for(probes: list[Probe] | tuple[Probe, ...], arch: Arch) -> BuiltModule:
    targeted = probe_sources(probes, arch)
    if not targeted:
        raise GpuprobeError(f"no probe targets {arch}")
    return build_ptx(targeted, arch)
