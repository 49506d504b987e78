"""The static check's outcome per arch, cached by everything that decides it.

A warm ``gpuprobe check`` reads one record per arch instead of expanding, assembling, disassembling,
parsing and checking again. An arch's key hashes:

* the arch;
* the raw bytes of the PTX and CUDA C++ files of the probes that target it and of every file they
  include (what the expansion or the compile reads: cheap to hash, where compiling is not);
* those probes' declarations, in order: name, kernel, source and contract rules;
* the toolchain: ptxas's and nvdisasm's paths and versions, and (when a CUDA C++ probe targets the
  arch) NVRTC's and what identifies its headers, so that switching toolkits (``GPUPROBE_TOOLKIT``)
  never reads another toolkit's outcome;
* gpuprobe's own code that decides the outcome: the source of every module of ``gpuprobe/kernels/``.

A record holds its format and its key beside the results, and the cubin it judged: that cubin's cache
key and SHA-256. One that cannot be read, does not match its recorded hash (:mod:`gpuprobe.core.cache`),
is not JSON, names another format or key, or whose cubin is no longer in the cache with those bytes
(damaged, deleted, rebuilt) is no record (the caller checks the results themselves): a corrupt or
foreign file is rebuilt, never trusted, and a record is never "ok" for a cubin other than the one that
will run.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gpuprobe.core.arch import Arch
from gpuprobe.core.cache import content_key, entry_path, read_entry, write_entry
from gpuprobe.kernels import nvrtc
from gpuprobe.kernels.cubin import CUDA_SUFFIX
from gpuprobe.kernels.cudasource import source_inputs
from gpuprobe.kernels.ptxsource import expansion_inputs
from gpuprobe.kernels.registry import Probe
from gpuprobe.kernels.toolchain import CUBIN_SUFFIX, find_tool, tool_version

RECORD_FORMAT = "gpuprobe-check-outcome/2"
SUFFIX = ".check.json"
_TOOLS = ("ptxas", "nvdisasm")


def require_tools() -> None:
    """Find each tool a check's outcome depends on, and its version: a toolkit that is not there (a
    ``GPUPROBE_TOOLKIT`` that names no folder, no ptxas anywhere) is one GpuprobeError, before any build,
    not one error per probe."""
    for tool in _TOOLS:
        tool_version(tool)


@functools.cache
def code_version() -> str:
    """A hash of the source of the modules that decide a check's outcome (all of ``gpuprobe/kernels/``)."""
    modules = sorted(Path(__file__).parent.glob("*.py"))
    return content_key(*(part for path in modules for part in (path.name, path.read_bytes())))


def _file_part(path: Path, data: bytes | None) -> bytes:
    """One input file for the key: its path and bytes, or that it does not exist."""
    return str(path).encode() + (b"\0+" + data if data is not None else b"\0-")


Inputs = Callable[[Path], dict[Path, bytes | None]]


def inputs_of(source: Path) -> dict[Path, bytes | None]:
    """Every file a probe source's build reads (itself, and what it includes), and their bytes."""
    return source_inputs(source) if source.suffix == CUDA_SUFFIX else expansion_inputs(source)


def outcome_key(probes: Sequence[Probe], arch: Arch, inputs: Inputs = inputs_of) -> str:
    """The key of the outcome of checking ``probes`` (all of them targeting ``arch``) on ``arch``; ``inputs``
    reads a source's files (a check keying every arch passes one that reads each source once).

    Raises GpuprobeError when a tool cannot be found or run: then there is nothing to key by."""
    parts: list[str | bytes] = [RECORD_FORMAT, arch.name, code_version()]
    parts += [f"{find_tool(tool)} {tool_version(tool)}" for tool in _TOOLS]
    sources = sorted({p.source for p in probes})
    if any(source.suffix == CUDA_SUFFIX for source in sources):
        parts.append(nvrtc.identity())
    for source in sources:
        parts += [_file_part(path, data) for path, data in sorted(inputs(source).items())]
    parts += [p.declaration for p in probes]
    return content_key(*parts)


def load(key: str) -> list[Any] | None:
    """The results stored under ``key``, as written; None when there is no readable record of this key, or the
    cubin it judged is not in the cache as it was judged."""
    judged = load_judged(key)
    return judged[0] if judged is not None else None


def load_judged(key: str) -> tuple[list[Any], Path] | None:
    """The results stored under ``key``, as written, and the cached cubin they judged; None as :func:`load` says."""
    raw = read_entry(key, SUFFIX)
    if raw is None:
        return None
    try:
        record = json.loads(raw)
    except (ValueError, RecursionError):  # not JSON, not UTF-8, or nested deeper than json follows
        return None
    if not isinstance(record, dict) or record.get("format") != RECORD_FORMAT or record.get("key") != key:
        return None
    results = record.get("results")
    if not isinstance(results, list) or not _judged_cubin_intact(record):
        return None
    return results, entry_path(record["cubin"], CUBIN_SUFFIX)


def _judged_cubin_intact(record: dict[str, Any]) -> bool:
    """Whether the cubin ``record`` judged is in the cache, its bytes those it judged."""
    cubin_key, judged = record.get("cubin"), record.get("cubin_sha256")
    cubin = read_entry(cubin_key, CUBIN_SUFFIX) if isinstance(cubin_key, str) and cubin_key else None
    return cubin is not None and hashlib.sha256(cubin).hexdigest() == judged


def store(key: str, results: list[Any], cubin: Path) -> None:
    """Record ``results`` (JSON data), the outcome of checking the cached ``cubin``, under ``key``; where that
    cannot be written (something else holds its place), the outcome is simply not recorded, and the next
    check builds it again."""
    with contextlib.suppress(OSError):
        judged = hashlib.sha256(cubin.read_bytes()).hexdigest()
        record = {"format": RECORD_FORMAT, "key": key, "cubin": cubin.stem, "cubin_sha256": judged,
                  "results": results}  # fmt: skip
        write_entry(key, SUFFIX, json.dumps(record).encode())
