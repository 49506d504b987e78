"""Nsight Compute's command-line profiler (``ncu``): found, checked, and run around the witness measurement.

The options relied on (the measuring children profiled, NVTX stacks, the raw CSV page in base units, only
the witnessed kernels, clocks and caches left as the run set them) and the output that says counters are
off-limits are in docs/witness.md ("Running ncu"). Every run of the tool is bounded in time.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.files import read_text
from gpuprobe.core.processes import kill_session
from gpuprobe.core.tool_output import ENCODING, ERRORS
from gpuprobe.measure.witness.counters import METRICS

NCU = "ncu"
TOOLKIT_HOMES = ("/usr/local/cuda",)  # searched after PATH and CUDA_HOME, in this order
NOT_PERMITTED = "ERR_NVGPUCTRPERM"
TOOL_NAME = "Nsight Compute"  # what ncu --version says it is
VERSION_TIMEOUT_S = 30.0


def find_ncu(given: str | None) -> Path | None:
    """The ncu to run: ``given`` (which must be an executable file), else the first of PATH, ``$CUDA_HOME/bin``
    and each of :data:`TOOLKIT_HOMES`' ``bin``; None when there is none."""
    if given is not None:
        path = Path(given)
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise GpuprobeError(f"--ncu {given}: {'not an executable file' if path.exists() else 'no such file'}")
        return path
    found = shutil.which(NCU)
    if found:
        return Path(found)
    homes = [h for h in (os.environ.get("CUDA_HOME"), *TOOLKIT_HOMES) if h]
    candidates = [Path(home) / "bin" / NCU for home in homes]
    return next((c for c in candidates if c.is_file() and os.access(c, os.X_OK)), None)


@dataclass(frozen=True)
class Ran:
    """A tool run to its end: its exit status and everything it printed (stdout and stderr together)."""

    returncode: int
    output: str


def run_bounded(command: Sequence[str], timeout_s: float, output: Path) -> Ran:
    """Run ``command`` in its own session with its output in ``output``; a GpuprobeError, after killing it
    and everything it started, when it runs past ``timeout_s`` seconds or cannot be started."""
    try:
        with open(output, "w", encoding=ENCODING, errors=ERRORS) as sink:
            process = subprocess.Popen(list(command), stdout=sink, stderr=subprocess.STDOUT,
                                       stdin=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
            try:
                returncode = process.wait(timeout=timeout_s)
            except subprocess.TimeoutExpired:
                kill_session(process)
                raise GpuprobeError(
                    f"{command[0]} ran past its {timeout_s:g} s limit: killed, with all it started"
                ) from None
    except OSError as exc:
        raise GpuprobeError(f"{command[0]}: cannot run it ({exc.strerror or exc})") from None
    return Ran(returncode, read_text(output))


def check_tool(ncu: Path, scratch: Path) -> str:
    """ncu's version line; a GpuprobeError when ``ncu`` does not say it is Nsight Compute's."""
    ran = run_bounded([str(ncu), "--version"], VERSION_TIMEOUT_S, scratch)
    lines = [line.strip() for line in ran.output.splitlines() if line.strip()]
    if ran.returncode != 0 or not any(TOOL_NAME in line for line in lines):
        said = lines[0] if lines else f"nothing, exit status {ran.returncode}"
        raise GpuprobeError(f"{ncu} is not Nsight Compute's ncu: --version said {said!r}")
    return next((line for line in lines if line.lower().startswith("version")), lines[-1])


def kernel_filter(kernels: Sequence[str]) -> str:
    """ncu's ``--kernel-name`` for exactly ``kernels`` (function names, as PTX ``.entry`` declares them)."""
    return "regex:^(" + "|".join(re.escape(k) for k in sorted(set(kernels))) + ")$"


def profile_command(ncu: Path, log: Path, kernels: Sequence[str], measuring: Sequence[str]) -> list[str]:
    """ncu wrapped around the ``measuring`` command, counting :data:`METRICS` of each launch of ``kernels`` in
    every process it starts, its CSV in ``log`` (see the module for each option)."""
    return [
        str(ncu),
        "--target-processes", "all",
        "--nvtx",
        "--csv", "--page", "raw", "--print-units", "base",
        "--metrics", ",".join(METRICS),
        "--kernel-name", kernel_filter(kernels),
        "--clock-control", "none",
        "--cache-control", "none",
        "--log-file", str(log),
        *measuring,
    ]  # fmt: skip


def refusal(text: str) -> str | None:
    """ncu's own line saying the counters may not be read here (ERR_NVGPUCTRPERM), None when it has none."""
    return next((line.strip() for line in text.splitlines() if NOT_PERMITTED in line), None)


def tool_errors(text: str) -> list[str]:
    """ncu's ``==ERROR==`` lines, and its warning that it profiled no kernel."""
    return [line.strip() for line in text.splitlines()
            if line.startswith("==ERROR==") or (line.startswith("==WARNING==") and "No kernels" in line)]  # fmt: skip
