"""NVRTC: CUDA C++ probes compiled to PTX, with the cooperative-groups and libcu++ headers they use.

NVRTC here is a front end only: it writes PTX (for ``compute_XX``, so it runs no assembler of its
own), and that PTX is assembled by the same ptxas, into the same cubin, as the hand-written probes
(:mod:`gpuprobe.kernels.cubin`). So one ptxas decides every probe's SASS, and the toolkit description
names it.

The library is found as the binary tools are: ``GPUPROBE_TOOLKIT`` (its directories' ``lib64/``,
``lib/`` or the directory itself; never falling back), else the PyPI wheel through
``cuda.pathfinder`` (``nvidia-cuda-nvrtc``), else ``CUDA_HOME`` / ``CUDA_PATH``. It is called through
ctypes, so any release's library can be used (a CUDA 12.8 toolkit's ``libnvrtc.so.12`` beside this
environment's CUDA 13 Python bindings). The headers: ``cooperative_groups.h`` comes with the CUDA
runtime's headers (``nvidia-cuda-runtime``), ``cuda/barrier`` and the rest of libcu++ with CCCL
(``nvidia-cuda-cccl``, or a toolkit's ``include/cccl``); ``GPUPROBE_TOOLKIT`` chooses them too.

Every compile is cached by content: the source, the options, the library's file and version, and what
identifies the headers (the cooperative-groups headers' bytes, the runtime API header, CCCL's version
header), so another NVRTC or another CCCL never reuses a compile.

NVRTC opens whatever a source includes (an absolute path, a ``..``, a device), so the includes are judged
here first (:func:`local_inputs`, :mod:`gpuprobe.kernels.includes`): every file an include may name, looked
for as NVRTC looks, must be a regular file of at most 4 MiB inside the probe tree (or the folder of a file
given to ``gpuprobe sass``), or one of the CUDA headers. Includes are found in every spelling NVRTC acts on
(``#include``, ``%:include``, ``#include_next``, ``__has_include``, across backslash-newlines and comments); an
include through a macro cannot be checked, so it is refused.
"""

from __future__ import annotations

import ctypes
import functools
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuprobe.core.arch import Arch
from gpuprobe.core.cache import cached_file, content_key
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.tool_output import decoded
from gpuprobe.kernels.includes import IncludeRefused, include_root, lies_inside, read_include
from gpuprobe.kernels.outputs import ptx_problem
from gpuprobe.kernels.source_tree import shown_path
from gpuprobe.kernels.toolkit_choice import TOOLKIT_VARIABLE, chosen_directories, described

_LIBRARY_NAME = re.compile(r"^libnvrtc\.so(\.\d+)*$")
_INSTALL_HINT = "pip install nvidia-cuda-nvrtc, or set GPUPROBE_TOOLKIT (or CUDA_HOME) to a CUDA toolkit"

COOPERATIVE_GROUPS = "cooperative_groups.h"  # with the CUDA runtime's headers
LIBCUDACXX = "cuda/std/version"  # with CCCL
_CCCL_VERSION_HEADER = "cuda/std/__cccl/version.h"
_CCCL_VERSION = re.compile(r"^#\s*define\s+CCCL_VERSION\s+(\d+)", re.MULTILINE)


@dataclass(frozen=True)
class Nvrtc:
    """A located NVRTC library: its file (resolved), which step of the search found it, its version."""

    path: Path
    found_by: str
    version: tuple[int, int]

    def describe(self) -> str:
        return f"NVRTC {self.version[0]}.{self.version[1]} ({self.path}, found by {self.found_by})"


def _library_in(directory: Path) -> Path | None:
    """The NVRTC library in ``directory``'s ``lib64/``, ``lib/`` or itself (the shortest name: the soname)."""
    for folder in (directory / "lib64", directory / "lib", directory):
        if folder.is_dir():
            names = sorted((p for p in folder.iterdir() if _LIBRARY_NAME.match(p.name)), key=lambda p: len(p.name))
            if names:
                return names[0]
    return None


def _search() -> tuple[Path, str]:
    chosen = chosen_directories()
    if chosen is not None:
        for directory in chosen:
            found = _library_in(directory)
            if found:
                return found, TOOLKIT_VARIABLE
        raise GpuprobeError(
            f"NVRTC not found in {TOOLKIT_VARIABLE} ({described(chosen)}): looked for libnvrtc.so in each "
            "one's lib64/, lib/ and itself"
        )
    try:
        from cuda.pathfinder import load_nvidia_dynamic_lib

        return Path(load_nvidia_dynamic_lib("nvrtc").abs_path), "cuda.pathfinder"
    except Exception:  # ImportError, or pathfinder's own not-found errors
        pass
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        found = _library_in(Path(root)) if root and Path(root).is_dir() else None
        if found:
            return found, var
    raise GpuprobeError(f"NVRTC not found: {_INSTALL_HINT}")


_BUILTINS = re.compile(r"^libnvrtc-builtins\.so(\.\d+)+$")


@functools.cache
def _library(path: Path) -> ctypes.CDLL:
    """NVRTC loaded from ``path``, its builtins library beside it loaded first: NVRTC opens that one by
    name, which a library outside the loader's search path (a toolkit's lib64, a wheel) is not on."""
    try:
        for builtins in sorted(p for p in path.parent.iterdir() if _BUILTINS.match(p.name)):
            ctypes.CDLL(str(builtins))
        library = ctypes.CDLL(str(path))
    except OSError as exc:
        raise GpuprobeError(f"{path}: cannot load it as NVRTC ({exc})") from None
    for function in ("nvrtcVersion", "nvrtcCreateProgram", "nvrtcCompileProgram", "nvrtcGetPTX"):
        if not hasattr(library, function):
            raise GpuprobeError(f"{path}: not an NVRTC library (no {function})")
    library.nvrtcGetErrorString.restype = ctypes.c_char_p
    return library


def _environment() -> tuple[str | None, ...]:
    """What the searches depend on besides the files: a changed variable searches again."""
    return tuple(os.environ.get(var) for var in (TOOLKIT_VARIABLE, "CUDA_HOME", "CUDA_PATH"))


def locate_nvrtc() -> Nvrtc:
    """The NVRTC library (see the module docstring for the search order), loaded and asked its version."""
    return _locate(_environment())


@functools.cache
def _locate(environment: tuple[str | None, ...]) -> Nvrtc:
    path, found_by = _search()
    path = path.resolve()
    library = _library(path)
    major, minor = ctypes.c_int(), ctypes.c_int()
    _check(library, library.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor)), "nvrtcVersion")
    return Nvrtc(path, found_by, (major.value, minor.value))


def _check(library: ctypes.CDLL, result: int, what: str) -> None:
    if result != 0:
        text = library.nvrtcGetErrorString(result)
        raise GpuprobeError(f"{what}: {decoded(text) if text else f'NVRTC error {result}'}")


# ---------------------------------------------------------------- the headers ----


def _holds_headers(directory: Path) -> bool:
    return (directory / COOPERATIVE_GROUPS).is_file() or (directory / LIBCUDACXX).is_file()


def _pathfinder_headers(name: str) -> Path | None:
    try:
        from cuda.pathfinder import locate_nvidia_header_directory

        located = locate_nvidia_header_directory(name)
    except Exception:  # ImportError, or pathfinder's own not-found errors
        return None
    return Path(located.abs_path) if located is not None else None


def _search_headers() -> list[Path]:
    chosen = chosen_directories()
    if chosen is not None:
        return [d for root in chosen for d in (root / "include" / "cccl", root / "include") if _holds_headers(d)]
    found = [d for d in (_pathfinder_headers("cccl"), _pathfinder_headers("cudart")) if d is not None]
    for var in ("CUDA_HOME", "CUDA_PATH"):
        root = os.environ.get(var)
        if root:
            found += [d for d in (Path(root) / "include" / "cccl", Path(root) / "include") if _holds_headers(d)]
    return found


def include_dirs() -> tuple[Path, ...]:
    """Where ``#include <cooperative_groups.h>`` and ``<cuda/barrier>`` are found, CCCL's folder first (so
    the chosen libcu++ wins over an older copy beside the runtime's headers in a CUDA 12 toolkit)."""
    return _include_dirs(_environment())


@functools.cache
def _include_dirs(environment: tuple[str | None, ...]) -> tuple[Path, ...]:
    found = list(dict.fromkeys(d.resolve() for d in _search_headers()))
    for header, package in ((COOPERATIVE_GROUPS, "nvidia-cuda-runtime"), (LIBCUDACXX, "nvidia-cuda-cccl")):
        if not any((d / header).is_file() for d in found):
            where = f" in {TOOLKIT_VARIABLE}'s include/ and include/cccl" if chosen_directories() else ""
            raise GpuprobeError(f"CUDA header {header} not found{where}: pip install {package}")
    found.sort(key=lambda d: not (d / LIBCUDACXX).is_file())
    return tuple(found)


def _header_bytes(directory: Path) -> list[bytes]:
    """What identifies one header folder: the bytes of its cooperative-groups headers and runtime API
    header, or of CCCL's version header (its thousands of files move together with that one)."""
    files = [*sorted((directory / "cooperative_groups").rglob("*.h")), directory / COOPERATIVE_GROUPS,
             directory / "cuda_runtime_api.h", directory / _CCCL_VERSION_HEADER]  # fmt: skip
    return [str(path).encode() + b"\0" + path.read_bytes() for path in files if path.is_file()]


def headers_identity() -> bytes:
    """The chosen headers, as a cache key sees them (see :func:`_header_bytes`)."""
    return _headers_identity(include_dirs())


@functools.cache
def _headers_identity(directories: tuple[Path, ...]) -> bytes:
    return b"\0".join(part for directory in directories for part in _header_bytes(directory))


def cccl_version() -> str:
    """CCCL's version as ``3.5.0`` (from ``CCCL_VERSION`` in its version header), or "unknown"."""
    for directory in include_dirs():
        header = directory / _CCCL_VERSION_HEADER
        if header.is_file() and (match := _CCCL_VERSION.search(header.read_text(errors="replace"))):
            number = int(match.group(1))
            return f"{number // 1000000}.{number // 1000 % 1000}.{number % 1000}"
    return "unknown"


def describe() -> str:
    """``NVRTC 13.5 (/.../libnvrtc.so.13, found by cuda.pathfinder), CCCL 3.5.0 (/.../include/cccl)``."""
    library = locate_nvrtc().describe()
    cccl = next((d for d in include_dirs() if (d / LIBCUDACXX).is_file()), None)
    return f"{library}, CCCL {cccl_version()} ({cccl})"


def identity() -> bytes:
    """Everything about NVRTC and its headers that decides what it writes, for cache keys."""
    nvrtc = locate_nvrtc()
    return f"{nvrtc.path} {nvrtc.version}".encode() + b"\0" + headers_identity()


# ---------------------------------------------------------------- compiling -----


def options(arch: Arch, extra_include_dirs: Sequence[Path] = ()) -> list[str]:
    """NVRTC's options: PTX for the virtual arch of ``arch`` (compute_90a for sm_90a), C++17, functions
    device code by default, the probe folders and then the CUDA headers on the include path."""
    return [
        f"--gpu-architecture=compute_{arch.number}{arch.suffix}",
        "-std=c++17",
        "-default-device",
        *(f"--include-path={d}" for d in (*extra_include_dirs, *include_dirs())),
    ]


# ---------------------------------------------------------------- the files a source includes ----

_SPLICE = re.compile(r"\\\r?$")
# Literals kept whole (a ``/*`` in one starts nothing), comments, and the ends of lines.
_TOKEN = re.compile(r'"(?:\\.|[^"\\\n])*"|\'(?:\\.|[^\'\\\n])*\'|//[^\n]*|/\*.*?(?:\*/|\Z)|\n', re.DOTALL)
# Blanks, and comments within the line; possessive, so a failed match never re-splits a run of comments (with
# ``*`` alone, ``/**/`` written 40 times would take days).
_GAP = r"(?:\s|/\*.*?\*/)*+"
_DIRECTIVE = re.compile(rf"{_GAP}(?:#|%:){_GAP}include(?:_next)?\b{_GAP}(?P<operand>.*)")
_HAS_INCLUDE = re.compile(rf"__has_include(?:_next)?{_GAP}\({_GAP}(?P<operand>[^)]*)")
_HEADER_NAME = re.compile(r'"[^"\n]*"|<[^>\n]*>')


def _spliced(text: str) -> list[tuple[int, str]]:
    """``text``'s lines as the preprocessor first reads them, each with the number of the line it starts on:
    a backslash at the end of a line joins the next line to it."""
    lines: list[tuple[int, str]] = []
    start, joined = 1, ""
    for number, line in enumerate(text.split("\n"), start=1):
        if _SPLICE.search(line):
            joined += _SPLICE.sub("", line)
            continue
        lines.append((start, joined + line))
        start, joined = number + 1, ""
    return [*lines, (start, joined)] if joined else lines


def _uncommented(lines: list[tuple[int, str]], comment_ends_line: bool) -> list[tuple[int, str]]:
    """The spliced ``lines`` with each comment made a blank: a comment across lines either joins them (as the
    standard says) or, where ``comment_ends_line``, ends the line it starts on (as NVRTC also reads a ``#``
    after one); each line with the number of the line it starts on."""
    numbers = [number for number, _ in lines]
    text = "\n".join(line for _, line in lines)
    out: list[tuple[int, str]] = []
    piece: list[str] = []
    index = start = position = 0
    for match in _TOKEN.finditer(text):
        token = match.group()
        piece.append(text[position : match.start()])
        position = match.end()
        if token == "\n" or (comment_ends_line and token.startswith("/") and "\n" in token):
            out.append((numbers[start], "".join(piece)))
            piece = []
            index += max(token.count("\n"), 1)
            start = index
        elif token.startswith("/"):
            piece.append(" ")
            index += token.count("\n")
        else:
            piece.append(token)
    piece.append(text[position:])
    return [*out, (numbers[start], "".join(piece))]


def _included_names(text: str, shown: str) -> list[tuple[int, str, str]]:
    """Every file name an ``#include`` (or ``#include_next``, or ``__has_include``) of ``text`` gives, as
    (line, the directive, the name with its quotes or angle brackets), found wherever NVRTC might read one:
    in the lines as written (comments within a line allowed) and with comments removed both ways (see
    :func:`_uncommented`). An include whose name is not written out (a macro) cannot be checked: it is an
    IncludeRefused naming ``shown`` (the file) and the line."""
    spliced = _spliced(text)
    found: dict[tuple[int, str, str], None] = {}
    for number, line in [*spliced, *_uncommented(spliced, False), *_uncommented(spliced, True)]:
        directive = _DIRECTIVE.match(line)
        operands = [("#include", directive.group("operand"))] if directive else []
        operands += [("__has_include", match.group("operand")) for match in _HAS_INCLUDE.finditer(line)]
        for what, operand in operands:
            name = _HEADER_NAME.match(operand)
            if name:
                found[number, what, name.group()] = None
            elif operand.strip() and not operand.startswith(("/*", "//")):  # a comment on: judged uncommented
                raise IncludeRefused(
                    f"{shown}:{number}: {what} {operand.strip()}: names no file in quotes or angle brackets "
                    "(an include through a macro cannot be checked)"
                )
    return list(found)


def _places(name: str, beside: Path, search: Sequence[Path]) -> list[Path]:
    """Where NVRTC looks for an include of ``name`` (with its quotes or angle brackets): a quoted name beside
    the file that includes it, then on the include path ``search``; an angle-bracket name on the include path
    only; an absolute name is itself."""
    bare = name[1:-1]
    if os.path.isabs(bare):
        return [Path(bare)]
    return [folder / bare for folder in ([beside] if name.startswith('"') else []) + list(search)]


def local_inputs(text: str, name: str, directories: Sequence[Path], roots: Sequence[Path]) -> dict[Path, bytes | None]:
    """The files the includes of ``text`` (the source NVRTC compiles as ``name``) may read, transitively, and
    their bytes, each judged (:mod:`gpuprobe.kernels.includes`) before it is read: a name is looked for as NVRTC
    looks (:func:`_places`: beside the including file, for ``text`` the folder of ``name``; then in
    ``directories``, then in the CUDA headers), and every place it is found must be inside ``roots`` or the CUDA
    headers (whose files :func:`headers_identity` covers: not read here). A name found nowhere maps to None
    (the compile will say so)."""
    headers = include_dirs()
    search = [*directories, *headers]
    found: dict[Path, bytes | None] = {}
    pending = [(text, Path(name).parent, shown_path(Path(name)))]
    while pending:
        source, beside, shown = pending.pop()
        for line, what, included in _included_names(source, shown):
            places = _places(included, beside, search)
            there = [place for place in places if os.path.lexists(place)]
            if not there:
                found.setdefault(places[0], None)
            for place in there:
                if place in found or lies_inside(place, headers):
                    continue
                found[place] = read_include(place, roots, f"{shown}:{line}: {what} {included}")
                # Its includes are looked for in its folder as the OS resolves it (``x/../x`` is ``x``), so a file
                # that includes itself through ``..`` is read twice at most, not once per ``../x`` a path can hold.
                beside_it = Path(os.path.realpath(place.parent))
                pending.append((found[place].decode("utf-8", errors="replace"), beside_it, shown_path(place)))
    return found


def cuda_to_ptx(
    source: str,
    arch: Arch,
    name: str,
    extra_include_dirs: Sequence[Path] = (),
    roots: Sequence[Path] | None = None,
) -> str:
    """NVRTC's PTX for CUDA C++ ``source`` (its file named ``name`` in messages) targeting ``arch``,
    cached by content: the source, the bytes of the files it includes (:func:`local_inputs`: each must lie
    inside ``roots``, by default the include roots of ``extra_include_dirs``, or the CUDA headers; checked
    before NVRTC runs), the options and NVRTC's :func:`identity`. A compile error is one line: NVRTC's
    first error, at its file and line, and the arch."""
    nvrtc = locate_nvrtc()
    opts = options(arch, extra_include_dirs)
    if roots is None:
        roots = [include_root(folder) for folder in extra_include_dirs]
    inputs = local_inputs(source, name, extra_include_dirs, roots)
    included = [os.fsencode(path) + b"\0" + (b"\0-" if data is None else data) for path, data in sorted(inputs.items())]
    key = content_key("nvrtc-ptx", identity(), "\0".join(opts), source, *included)

    def produce() -> bytes:
        ptx = _compile(_library(nvrtc.path), source, name, opts, arch)
        if (problem := ptx_problem(decoded(ptx))) is not None:  # judged before it is cached (outputs)
            raise GpuprobeError(f"{name}: NVRTC ({nvrtc.path}) succeeded but wrote no PTX ({problem}) [{arch}]")
        return ptx

    return cached_file(key, ".ptx", produce).read_text()


def _compile(library: ctypes.CDLL, source: str, name: str, opts: list[str], arch: Arch) -> bytes:
    program = ctypes.c_void_p()
    _check(library, library.nvrtcCreateProgram(ctypes.byref(program), source.encode(), os.fsencode(name), 0, None,
                                               None), name)  # fmt: skip
    try:
        encoded = (ctypes.c_char_p * len(opts))(*(o.encode() for o in opts))
        result = library.nvrtcCompileProgram(program, len(opts), encoded)
        log = _program_text(library, program, "nvrtcGetProgramLogSize", "nvrtcGetProgramLog")
        if result != 0:
            raise GpuprobeError(f"{_first_error(log, name, result)} [{arch}]")
        return _program_text(library, program, "nvrtcGetPTXSize", "nvrtcGetPTX").encode()
    finally:
        library.nvrtcDestroyProgram(ctypes.byref(program))


def _first_error(log: str, name: str, result: int) -> str:
    """NVRTC's first error, at the file and line it names (``name(3): error: ...``); the file is named where
    NVRTC names none ("At end of source: error: ...")."""
    first = next((line for line in log.splitlines() if "error" in line), log.strip()[:200]).strip()
    if not first:
        return f"{name}: NVRTC error {result}, no message"
    return first if first.startswith(decoded(os.fsencode(name))) else f"{name}: {first}"


def _program_text(library: ctypes.CDLL, program: ctypes.c_void_p, size_call: str, get_call: str) -> str:
    size = ctypes.c_size_t()
    _check(library, getattr(library, size_call)(program, ctypes.byref(size)), size_call)
    buffer = ctypes.create_string_buffer(size.value)
    _check(library, getattr(library, get_call)(program, buffer), get_call)
    return decoded(buffer.value)
