"""Reading hand-written PTX: three comment directives, and combining files into one module.

PTX has no macros, so ``//@repeat``, ``//@for`` and ``//@include``, written as PTX comments, expand a
probe's source; every expanded line remembers where it came from, for ptxas's errors. All probe files
for one arch become one module under one header. docs/ptx.md says what each directive does.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuprobe.core.arch import Arch
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.files import read_text
from gpuprobe.kernels.includes import include_root, read_include, source_bytes
from gpuprobe.kernels.source_tree import shown_path

Origin = tuple[str, int]  # (file, 1-based line)

_REPEAT = re.compile(r"^\s*//@repeat\s+(\d+)\s*$")
_FOR = re.compile(r"^\s*//@for\s+(\w+(?::\w+)*)\s+in\s+(.+?)\s*$")
_ENDFOR = re.compile(r"^\s*//@endfor\s*$")
_INCLUDE = re.compile(r"^\s*//@include\s+([\w./-]+)\s*$")
MAX_INCLUDE_DEPTH = 4
#: The most lines one file may expand to: every probe file expands to under 12,000, and a ``//@repeat`` or a nest
#: of ``//@for`` that asks for more (a count mistyped with extra digits) is an error, not a machine out of memory.
MAX_EXPANDED_LINES = 200_000
#: The most characters one file may expand to, counting each include's as read again (every probe file comes to
#: under 600,000): a 4 MiB include in a ``//@for`` of many values is an error, not gigabytes of copies or reads.
MAX_EXPANDED_CHARS = 64 * 2**20
#: The most steps one expansion may take (a line read, a loop's pass): every probe file takes under 14,000, and a
#: nest of ``//@for`` whose body writes nothing, or includes an empty file, is an error, not a loop for days.
MAX_EXPANSION_STEPS = 500_000
_DIRECTIVE = re.compile(r"^\s*//@")
_HEADER = re.compile(r"^\s*\.(version|target|address_size)\b")
_VERSION = re.compile(r"^\s*\.version\s+(\d+)\.(\d+)")


@dataclass(frozen=True)
class Expanded:
    lines: list[str]
    origins: list[Origin]


def expand(text: str, path: str, directory: Path | None = None) -> Expanded:
    """Apply ``//@repeat``, ``//@for`` and ``//@include`` (from ``directory``, by default the
    directory of ``path``) to a PTX file, keeping each line's origin."""
    directory = directory if directory is not None else Path(path).parent
    lines = text.splitlines()
    out: list[str] = []
    origins: list[Origin] = []
    where = _Where(path, directory, include_root(directory), _Work())
    _expand_block(lines, 0, len(lines), {}, where, out, origins)
    return Expanded(out, origins)


@dataclass
class _Work:
    """What one expansion has done so far, each against its limit (:data:`MAX_EXPANSION_STEPS`,
    :data:`MAX_EXPANDED_CHARS`)."""

    steps: int = 0
    chars: int = 0


@dataclass(frozen=True)
class _Where:
    """The file being expanded (as shown in messages), where its includes are, the folder they must stay
    inside, the work of the whole expansion so far, and how deep."""

    path: str
    directory: Path
    root: Path
    work: _Work
    depth: int = 0

    def count_step(self, line: int) -> None:
        """Count one step of the expansion at ``line``; past :data:`MAX_EXPANSION_STEPS`, an error."""
        self.work.steps += 1
        if self.work.steps > MAX_EXPANSION_STEPS:
            raise GpuprobeError(f"{self}:{line}: takes more than {MAX_EXPANSION_STEPS:,} steps to expand")

    def count_chars(self, line: int, chars: int) -> None:
        """Count ``chars`` more characters read or written at ``line``; past :data:`MAX_EXPANDED_CHARS`, an error."""
        self.work.chars += chars
        if self.work.chars > MAX_EXPANDED_CHARS:
            raise GpuprobeError(f"{self}:{line}: expands to more than {MAX_EXPANDED_CHARS:,} characters")

    def __str__(self) -> str:
        return self.path


def _include(
    name: str, bindings: dict[str, str], where: _Where, line: int, out: list[str], origins: list[Origin]
) -> None:
    if where.depth >= MAX_INCLUDE_DEPTH:
        raise GpuprobeError(f"{where}:{line}: //@include {name}: includes nested too deep")
    source, shown = _include_path(where.directory, name), f"{where}:{line}: //@include {name}"
    if not os.path.lexists(source):
        raise GpuprobeError(f"{shown}: no such file beside it")
    data = read_include(source, (where.root,), shown)
    where.count_chars(line, len(data))
    try:
        lines = data.decode("utf-8").splitlines()
    except UnicodeDecodeError:
        raise GpuprobeError(f"{shown}: not UTF-8 text") from None
    inner = _Where(str(Path(where.path).parent / name), where.directory, where.root, where.work, where.depth + 1)
    _expand_block(lines, 0, len(lines), bindings, inner, out, origins)


def _include_path(directory: Path, name: str) -> Path:
    """The file ``//@include NAME`` reads: NAME relative to the probe file's folder, at any depth."""
    return directory / name


def expansion_inputs(path: Path) -> dict[Path, bytes | None]:
    """The raw bytes of a PTX file and of every file its ``//@include`` lines name, transitively:
    all that its expansion reads, found without expanding it (None for a name that is nowhere: the
    expansion will say so). An include the expansion would refuse is refused here too
    (:class:`IncludeRefused`), before it is read; a PTX file that cannot be read is a GpuprobeError.

    Cheap to hash, so a cache keyed by it costs a read of each file rather than an expansion."""
    root = (include_root(path.parent),)
    found: dict[Path, bytes | None] = {path: source_bytes(path)}
    pending = [path]
    while pending:
        current = pending.pop()
        text = (found[current] or b"").decode("utf-8", errors="replace")
        for number, line in enumerate(text.splitlines(), start=1):
            if not (match := _INCLUDE.match(line)):
                continue
            included = _include_path(path.parent, match.group(1))
            if included not in found:
                shown = f"{shown_path(current)}:{number}: //@include {match.group(1)}"
                found[included] = read_include(included, root, shown) if os.path.lexists(included) else None
                pending.append(included)
    return found


def _block_end(lines: list[str], start: int, path: str) -> int:
    depth = 1
    for index in range(start, len(lines)):
        if _FOR.match(lines[index]):
            depth += 1
        elif _ENDFOR.match(lines[index]):
            depth -= 1
            if depth == 0:
                return index
    raise GpuprobeError(f"{path}:{start}: //@for without //@endfor")


def _substitute(line: str, bindings: dict[str, str]) -> str:
    if "{" not in line:  # most lines: nothing to fill, and no value can bring a brace in
        return line
    for name, value in bindings.items():
        line = line.replace("{" + name + "}", value)
    return line


def _expand_block(
    lines: list[str],
    start: int,
    stop: int,
    bindings: dict[str, str],
    path: _Where,
    out: list[str],
    origins: list[Origin],
) -> None:
    index = start
    while index < stop:
        path.count_step(index + 1)
        line = lines[index]
        repeat = 1
        if match := _REPEAT.match(line):
            repeat = int(match.group(1))
            index += 1
            if index >= stop or any(p.match(lines[index]) for p in (_REPEAT, _FOR, _ENDFOR)):
                raise GpuprobeError(f"{path}:{index}: //@repeat must be followed by the PTX line to repeat")
            line = lines[index]
        if match := _FOR.match(line):
            end = _block_end(lines, index + 1, path)
            names = match.group(1).split(":")
            for value in _substitute(match.group(2), bindings).split():
                path.count_step(index + 1)
                values = value.split(":") if len(names) > 1 else [value]
                if len(values) != len(names):
                    raise GpuprobeError(
                        f"{path}:{index + 1}: //@for {match.group(1)}: {value!r} is not {len(names)} values"
                    )
                inner = {**bindings, **dict(zip(names, values, strict=True))}
                _expand_block(lines, index + 1, end, inner, path, out, origins)
            index = end + 1
            continue
        if match := _INCLUDE.match(line):
            _include(match.group(1), bindings, path, index + 1, out, origins)
            index += 1
            continue
        if _ENDFOR.match(line):
            raise GpuprobeError(f"{path}:{index + 1}: //@endfor without //@for")
        if _DIRECTIVE.match(line):
            raise GpuprobeError(f"{path}:{index + 1}: malformed directive {line.strip()!r}")
        if len(out) + repeat > MAX_EXPANDED_LINES:
            raise GpuprobeError(f"{path}:{index + 1}: expands to more than {MAX_EXPANDED_LINES:,} lines")
        text = _substitute(line, bindings)
        path.count_chars(index + 1, len(text) * repeat)
        out.extend([text] * repeat)
        origins.extend([(path.path, index + 1)] * repeat)
        index += 1


_ENTRY = re.compile(r"\.entry\s+(\w+)\s*\(([^)]*)\)")
# ``.param .u32 n``, or a byte array passed by value (a TMA tensor map: ``.param .align 64 .b8 tmap[128]``)
_PARAM = re.compile(r"\.param\s+(?:\.align\s+\d+\s+)?\.(\w+)\s+(\w+)(\[\d+\])?")


def entry_parameters(text: str) -> dict[str, list[tuple[str, str]]]:
    """Each kernel's parameters, in order, as (PTX type, name): ``{"k": [("u64", "out")]}``; an array
    passed by value has its length in its type: ``("b8[128]", "tmap")``."""
    return {
        name: [(kind + size, param) for kind, param, size in _PARAM.findall(params)]
        for name, params in _ENTRY.findall(text)
    }


def ptx_version(text: str, path: str) -> tuple[int, int]:
    for line in text.splitlines():
        if match := _VERSION.match(line):
            return int(match.group(1)), int(match.group(2))
    raise GpuprobeError(f"{path}: no .version directive")


def _header_origins(
    files: list[Path], texts: dict[Path, str], shown: dict[Path, str], version_from: Path
) -> list[Origin]:
    """Where each line of the module's header comes from, so that ptxas's complaint about one points at a file:
    ``.version`` at the file that asked for the newest, ``.target`` and ``.address_size`` at the first file
    that has one (``<header>`` where none has)."""
    origins = []
    for number, directive in enumerate(("version", "target", "address_size"), start=1):
        pattern = re.compile(rf"^\s*\.{directive}\b")
        found = ("<header>", number)
        for path in [version_from] if directive == "version" else files:
            line = next((i for i, text in enumerate(texts[path].splitlines(), start=1) if pattern.match(text)), None)
            if line is not None:
                found = (shown[path], line)
                break
        origins.append(found)
    return origins


@dataclass(frozen=True)
class Module:
    """PTX text ready for ptxas, and where each of its lines came from."""

    text: str
    origins: list[Origin]


@dataclass(frozen=True)
class Generated:
    """PTX a compiler wrote (no directives to expand), and the name its lines are shown under."""

    name: str
    text: str


def _as_written(generated: Generated) -> Expanded:
    """Compiler-written PTX as it is, each line's origin its own line number under the part's name."""
    lines = generated.text.splitlines()
    return Expanded(lines, [(generated.name, n) for n in range(1, len(lines) + 1)])


def _version_origin(text: str, name: str) -> Origin:
    """Where a part's ``.version`` line is: what the module's header line is shown as when ptxas refuses it."""
    line = next((n for n, line in enumerate(text.splitlines(), 1) if _VERSION.match(line)), 1)
    return name, line


def combine(files: list[Path], arch: Arch, root: Path | None = None, generated: Sequence[Generated] = ()) -> Module:
    """Expand and join PTX files, then the ``generated`` PTX, into one module targeting ``arch``. Its
    ``.version`` is the newest of theirs; where a generated part asked for it, the header's first line
    is shown as that part's (so a ptxas too old for NVRTC's PTX names NVRTC's output)."""
    if not files and not generated:
        raise GpuprobeError(f"no PTX sources to build for {arch}")
    texts = {path: read_text(path) for path in files}
    shown = {p: str(p.relative_to(root)) if root and p.is_relative_to(root) else str(p) for p in files}
    written = max((ptx_version(texts[p], shown[p]) for p in files), default=(0, 0))
    compiled = [(ptx_version(g.text, g.name), g) for g in generated]
    major, minor = max([written, *(version for version, _ in compiled)])
    lines = [f".version {major}.{minor}", f".target {arch.name}", ".address_size 64"]
    newest = next((g for version, g in compiled if version == (major, minor) and version > written), None)
    origins: list[Origin] = (
        _header_origins(files, texts, shown, max(files, key=lambda p: ptx_version(texts[p], shown[p])))
        if files
        else [("<header>", 1), ("<header>", 2), ("<header>", 3)]
    )
    if newest:
        origins[0] = _version_origin(newest.text, newest.name)
    expanded = [expand(texts[path], shown[path], path.parent) for path in files]
    expanded += [_as_written(g) for g in generated]
    for part in expanded:
        for line, origin in zip(part.lines, part.origins, strict=True):
            if not _HEADER.match(line):
                lines.append(line)
                origins.append(origin)
    return Module("\n".join(lines) + "\n", origins)
