"""Building the probe module for an arch: one cubin holding every probe that targets it.

All PTX families for an arch are combined into one module, assembled once, disassembled once and
(on a GPU) loaded once: the cubin that is inspected is the cubin that runs. The CUDA C++ probes
(``.cu`` sources) join it as PTX: NVRTC compiles all of an arch's ``.cu`` files as one translation
unit (:mod:`gpuprobe.kernels.cudasource`), and its PTX is assembled with the hand-written PTX by the
same ptxas, so there is still one cubin per arch, one ptxas and one disassembly. If the combined
module does not assemble, each source is assembled alone so the error names the file that broke.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

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
    listing: Listing
    sources: tuple[Path, ...]
    parameters: dict[str, list[tuple[str, str]]]  # kernel -> [(PTX type, name)], to check launches against


def _sources(probes: list[Probe] | tuple[Probe, ...], arch: Arch) -> list[Path]:
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
    listing = read_cubin(compiled.cubin)
    apply_compile_log(listing, compiled.log)
    parameters = entry_parameters(module.text)
    record_parameters(compiled.cubin, parameters)
    return BuiltModule(arch, compiled.cubin, listing, tuple(sources), parameters)


PARAMETERS_SUFFIX = ".parameters.json"


def record_parameters(cubin: Path, parameters: dict[str, list[tuple[str, str]]]) -> None:
    """The kernels' parameters beside the (cached) cubin, as an entry of the cubin's key (its file's stem), once:
    a process handed the cubin then reads its module back (``module_of``) instead of combining every
    source again to find them."""
    cached_file(cubin.stem, PARAMETERS_SUFFIX, json.dumps(parameters).encode)


def module_of(cubin: Path, arch: Arch) -> BuiltModule | None:
    """The module ``build_ptx`` built for ``arch`` as ``cubin``, read back from the cubin and the entries
    beside it, building nothing (its ``sources`` unknown: empty); None where those entries are missing or
    damaged (:mod:`gpuprobe.core.cache` verifies each)."""
    recorded, log = read_entry(cubin.stem, PARAMETERS_SUFFIX), read_entry(cubin.stem, LOG_SUFFIX)
    if recorded is None or log is None:
        return None
    listing = read_cubin(cubin)
    apply_compile_log(listing, decoded(log))
    parameters = {kernel: [(kind, name) for kind, name in pairs] for kernel, pairs in json.loads(recorded).items()}
    return BuiltModule(arch, cubin, listing, (), parameters)


def build_for(probes: list[Probe] | tuple[Probe, ...], arch: Arch) -> BuiltModule:
    sources = _sources(probes, arch)
    if not sources:
        raise GpuprobeError(f"no probe targets {arch}")
    return build_ptx(sources, arch)
