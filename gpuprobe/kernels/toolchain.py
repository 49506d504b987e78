"""Finding and running the CUDA compiler pieces: ptxas, nvdisasm, cuobjdump and NVRTC.

Search order for each tool: ``GPUPROBE_TOOLKIT`` if set (it wins over everything and never falls
back), then the PyPI wheels (through ``cuda.pathfinder``), then ``CUDA_HOME`` / ``CUDA_PATH``, then
``PATH``. NVRTC is a library, found the same way (:mod:`gpuprobe.kernels.nvrtc`); CUDA C++ becomes
PTX there and a cubin here, by the same ptxas as the hand-written PTX. Every compile and disassembly
is cached by content (:mod:`gpuprobe.core.cache`), keyed by the tool's version and path, so a warm
check runs no tool. Each tool call runs under a stated limit, its whole process group killed at it
(:mod:`gpuprobe.kernels.tool_limits`).
"""

from __future__ import annotations

import functools
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from gpuprobe.core.arch import Arch
from gpuprobe.core.cache import cached_file, content_key, read_entry
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.tool_output import ENCODING, decoded
from gpuprobe.kernels import nvrtc
from gpuprobe.kernels.outputs import cubin_problem, listing_problem
from gpuprobe.kernels.tool_limits import BrokenTool, run_tool, tool_limit, version_limit
from gpuprobe.kernels.toolkit_choice import TOOLKIT_VARIABLE, chosen_directories, described

_INSTALL_HINT = {
    "ptxas": "nvidia-cuda-nvcc",
    "nvdisasm": "nvidia-cuda-nvdisasm",
    "cuobjdump": "nvidia-cuda-cuobjdump",
}


@dataclass(frozen=True)
class Tool:
    """A located CUDA binary utility and which step of the search found it."""

    name: str
    path: Path
    found_by: str  # GPUPROBE_TOOLKIT, cuda.pathfinder, CUDA_HOME, CUDA_PATH or PATH


def _in_directory(directory: Path, name: str) -> Path | None:
    """``name`` directly in ``directory`` or in its ``bin/``, if either is a file."""
    for candidate in (directory / name, directory / "bin" / name):
        if candidate.is_file():
            return candidate
    return None


def _from_override(name: str, directories: list[Path]) -> Path:
    """The tool from the first directory of ``GPUPROBE_TOOLKIT`` that has it; anything else is an error.

    The override is what the user chose, so it never falls back to another toolkit: a directory that
    does not exist, or a list in which no directory has the tool, is a one-line error. A list may
    name a ptxas from one place and an nvdisasm from another.
    """
    for directory in directories:
        found = _in_directory(directory, name)
        if found:
            return found
    raise GpuprobeError(
        f"{name} not found in {TOOLKIT_VARIABLE} ({described(directories)}): looked for {name} and bin/{name} in each"
    )


@functools.cache
def locate_tool(name: str) -> Tool:
    """Locate a CUDA binary utility, or raise a one-line error saying how to get it.

    ``GPUPROBE_TOOLKIT`` (directories separated by ``os.pathsep``, each searched for the tool
    directly and in its ``bin/``) wins over everything; then the PyPI wheels through
    ``cuda.pathfinder``, ``CUDA_HOME`` / ``CUDA_PATH``, and ``PATH``. The path is resolved (no
    symbolic links), so that it names the file that runs.
    """
    path, found_by = _search(name)
    return Tool(name, path.resolve(), found_by)


def _search(name: str) -> tuple[Path, str]:
    chosen = chosen_directories()  # None when unset or empty, as for GPUPROBE_CACHE
    if chosen is not None:
        return _from_override(name, chosen), TOOLKIT_VARIABLE
    try:
        from cuda.pathfinder import find_nvidia_binary_utility

        found = find_nvidia_binary_utility(name)
        if found:
            return Path(found), "cuda.pathfinder"
    except ImportError:
        pass
    for var in TOOLKIT_HOMES:
        root = os.environ.get(var)
        if root and (Path(root) / "bin" / name).is_file():
            return Path(root) / "bin" / name, var
    on_path = shutil.which(name)
    if on_path:
        return Path(on_path), "PATH"
    hint = _INSTALL_HINT.get(name, "the CUDA toolkit")
    raise GpuprobeError(
        f"{name} not found: pip install {hint}, or set {TOOLKIT_VARIABLE} (or CUDA_HOME) to a CUDA toolkit"
    )


TOOLKIT_HOMES = ("CUDA_HOME", "CUDA_PATH")


def ignored_toolkit_homes() -> list[str]:
    """A line for each of ``CUDA_HOME`` / ``CUDA_PATH`` that is set but names no CUDA toolkit (neither
    bin/ptxas nor bin/nvdisasm in it): the search passes over it, and the user is told so rather than
    left to believe that toolkit builds the probes."""
    lines = []
    for var in TOOLKIT_HOMES:
        root = os.environ.get(var)
        if root and not any((Path(root) / "bin" / tool).is_file() for tool in ("ptxas", "nvdisasm")):
            lines.append(f"{var}={root} is not a CUDA toolkit (no bin/ptxas or bin/nvdisasm in it): ignored")
    return lines


def find_tool(name: str) -> Path:
    """The path of a CUDA binary utility (see :func:`locate_tool` for the search order)."""
    return locate_tool(name).path


def tool_version(name: str) -> str:
    """The tool's release line, e.g. ``Cuda compilation tools, release 13.5, V13.5.37``."""
    if name == "nvrtc":
        major, minor = nvrtc.locate_nvrtc().version
        return f"NVRTC {major}.{minor}"
    return _version_line(find_tool(name), name)


@functools.cache
def _version_line(path: Path, name: str) -> str:
    """What ``path --version`` says, cached by the tool's path (never by its name alone)."""
    out = run_tool([str(path), "--version"], f"{path} --version", version_limit()).stdout
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    release = [line for line in lines if "release" in line]
    if not lines:
        raise GpuprobeError(f"{path} --version printed nothing: is it a CUDA {name}?")
    return release[-1] if release else lines[-1]


_EXACT_VERSION = re.compile(r"\bV\d+(?:\.\d+)+\b")


def _describe_tool(name: str) -> str:
    """``ptxas V13.0.88 (/usr/local/cuda/bin/ptxas, found by PATH)``: exact version, file, search step.

    A tool whose release line has no ``V<major>.<minor>.<patch>`` is named by the whole line.
    """
    tool = locate_tool(name)
    line = tool_version(name)
    exact = _EXACT_VERSION.search(line)
    return f"{name} {exact[0] if exact else line} ({tool.path}, found by {tool.found_by})"


def toolkit_description() -> str:
    """One line naming the tools that compiled and inspected the probes (for results files): ptxas and
    nvdisasm, then NVRTC and the CCCL headers the CUDA C++ probes were compiled with (or why none were)."""
    try:
        cuda = nvrtc.describe()
    except GpuprobeError as exc:
        cuda = f"NVRTC unusable ({exc})"
    return "; ".join([*(_describe_tool(name) for name in ("ptxas", "nvdisasm")), cuda])


def _run(args: list[str], what: str) -> subprocess.CompletedProcess[str]:
    """Run a tool under ``GPUPROBE_TOOL_TIMEOUT`` (:func:`gpuprobe.kernels.tool_limits.run_tool`)."""
    return run_tool(args, what, tool_limit())


def _printable(text: str) -> str:
    """``text`` on one line for a message: blanks closed up, anything unprintable (such as the bytes of a
    corrupt cubin a tool echoes) shown as U+FFFD."""
    return "".join(c if c.isprintable() else "\ufffd" for c in " ".join(text.split()))


def _failure(proc: subprocess.CompletedProcess[str]) -> str:
    """What a failed tool said, for a one-line error: its first line of stderr (:func:`_printable`), or how
    it ended when it said nothing."""
    for line in proc.stderr.splitlines():
        if line.strip():
            return _printable(line)
    code = proc.returncode
    return f"killed by signal {-code}, no message" if code < 0 else f"exit status {code}, no message"


EXCERPT_CHARS = 200  # of a tool's output, quoted in a message about what it did wrong


def _excerpt(proc: subprocess.CompletedProcess[str]) -> str:
    """What a tool printed (stdout, then stderr), quoted on one line (:func:`_printable`), cut at
    :data:`EXCERPT_CHARS` characters; or that it printed nothing."""
    said = _printable(proc.stdout + "\n" + proc.stderr)
    if not said:
        return "nothing"
    if len(said) <= EXCERPT_CHARS:
        return f'"{said}"'
    return f'"{said[:EXCERPT_CHARS]}..." ({len(said)} characters)'


# ---------------------------------------------------------------- PTX ----------

_PTXAS_DIAG = re.compile(
    r"^ptxas\s+(?P<file>.+?), line (?P<line>\d+); (?P<kind>error|warning|fatal)\s*:\s*(?P<msg>.*)$"
)
# A diagnostic that gives its line in the message: "ptxas fatal : Unexpected non-ASCII character encountered on line 6"
_PTXAS_FATAL_ON_LINE = re.compile(r"^ptxas\s+(?P<kind>fatal)\s*:\s*(?P<msg>.*?)\s+on line (?P<line>\d+)\s*$")


def _locate(line: int, origins: list[tuple[str, int]], fallback: str) -> str:
    """Where module line ``line`` came from; past the end (ptxas's "end of input"), the module's last line."""
    if origins and line >= 1:
        path, path_line = origins[min(line, len(origins)) - 1]
        return f"{path}:{path_line}"
    return f"{fallback}:{line}"


def _ptxas_error(
    proc: subprocess.CompletedProcess[str], origins: list[tuple[str, int]], name: str, arch: Arch
) -> GpuprobeError:
    """Turn ptxas's diagnostics into one line: the first error at its original file and line."""
    errors = []
    for raw in proc.stderr.splitlines():
        match = _PTXAS_DIAG.match(raw.strip()) or _PTXAS_FATAL_ON_LINE.match(raw.strip())
        if match and match["kind"] in ("error", "fatal"):
            errors.append(f"{_locate(int(match['line']), origins, name)}: ptxas error: {match['msg'].strip()}")
    if not errors:
        errors = [f"{name}: ptxas failed: {_failure(proc)}"]
    more = f" (and {len(errors) - 1} more)" if len(errors) > 1 else ""
    return GpuprobeError(f"{errors[0]} [{arch}]{more}")


@dataclass(frozen=True)
class Compiled:
    """A cubin on disk (in the cache) and the compiler's resource report."""

    cubin: Path
    log: str


CUBIN_SUFFIX = ".cubin"  # a cubin's cache entry; the key (its file's stem) keys the entries beside it too
LOG_SUFFIX = ".log"  # the compiler's report, cached beside each cubin under the cubin's key


def _with_log(key: str, log: str, cubin: bytes) -> bytes:
    """Cache the compiler's report before its cubin, so that a cached cubin always has its report."""
    cached_file(key, LOG_SUFFIX, log.encode)
    return cubin


def _compiled(key: str, produce: Callable[[], bytes]) -> Compiled:
    """The cubin cached under ``key`` (``produce`` makes it on a miss) with its compiler's report."""
    cubin = cached_file(key, CUBIN_SUFFIX, produce)
    log = read_entry(key, LOG_SUFFIX)
    if log is None:  # a cubin cached without its report (by an older gpuprobe), or a damaged report: compile again
        cubin.unlink(missing_ok=True)
        cubin = cached_file(key, CUBIN_SUFFIX, produce)
        log = read_entry(key, LOG_SUFFIX) or b""
    return Compiled(cubin=cubin, log=decoded(log))


def assemble_ptx(ptx: str, arch: Arch, name: str, origins: list[tuple[str, int]] | None = None) -> Compiled:
    """Assemble PTX text for ``arch`` with ptxas -v; errors name the original file and line."""
    ptxas = find_tool("ptxas")
    options = ["-v", f"-arch={arch.name}", "-O3"]
    key = content_key("ptxas", str(ptxas), tool_version("ptxas"), " ".join(options), ptx)

    def produce() -> bytes:
        with tempfile.TemporaryDirectory(prefix="gpuprobe-") as tmp:
            src, out = Path(tmp) / "input.ptx", Path(tmp) / "output.cubin"
            src.write_text(ptx, encoding="utf-8")
            proc = _run([str(ptxas), *options, str(src), "-o", str(out)], name)
            if proc.returncode != 0:
                raise _ptxas_error(proc, origins or [], name, arch)
            if not out.is_file():
                raise BrokenTool(f"{name}: ptxas exited 0 but wrote no cubin; it printed {_excerpt(proc)} [{arch}]")
            cubin = out.read_bytes()
            if (problem := cubin_problem(cubin)) is not None:  # judged before it is cached (outputs)
                raise BrokenTool(
                    f"{name}: ptxas exited 0 but wrote no cubin ({problem}); it printed {_excerpt(proc)} [{arch}]"
                )
            return _with_log(key, proc.stdout + proc.stderr, cubin)

    return _compiled(key, produce)


# ---------------------------------------------------------------- CUDA C++ -----


def compile_cuda(source: str, arch: Arch, name: str, include_dirs: tuple[Path, ...] = ()) -> Compiled:
    """CUDA C++ to a cubin for ``arch``: NVRTC's PTX (:func:`gpuprobe.kernels.nvrtc.cuda_to_ptx`, with
    ``include_dirs`` searched before the CUDA headers), assembled by ptxas as any probe's PTX is."""
    ptx = nvrtc.cuda_to_ptx(source, arch, name, include_dirs)
    origins = [(f"{name} (NVRTC's PTX)", line) for line in range(1, ptx.count("\n") + 2)]
    return assemble_ptx(ptx, arch, name, origins)


# ---------------------------------------------------------------- disassembly --


def disassemble(cubin: Path) -> str:
    """nvdisasm's full listing of a cubin (code, resource attributes, shared sections), cached."""
    nvdisasm = find_tool("nvdisasm")
    try:
        data = Path(cubin).read_bytes()
    except FileNotFoundError:
        raise GpuprobeError(f"{cubin}: no such file") from None
    if (problem := cubin_problem(data)) is not None:
        raise GpuprobeError(f"{cubin}: not a cubin ({problem})")
    key = content_key("nvdisasm", str(nvdisasm), tool_version("nvdisasm"), data)

    def produce() -> bytes:
        proc = _run([str(nvdisasm), str(cubin)], str(cubin))
        if proc.returncode != 0:
            raise GpuprobeError(f"{cubin}: nvdisasm cannot read it: {_failure(proc)}")
        if (problem := listing_problem(proc.stdout, data)) is not None:  # judged before it is cached (outputs)
            raise BrokenTool(
                f"{cubin}: nvdisasm exited 0 but what it printed is not its SASS ({problem}): {_excerpt(proc)}"
            )
        return proc.stdout.encode(ENCODING)

    return decoded(cached_file(key, ".sass", produce).read_bytes())
