"""Nsight Compute's command-line profiler (``ncu``): found, checked, and run around the witness measurement.

What this relies on, from the Nsight Compute CLI manual (docs.nvidia.com/nsight-compute/NsightComputeCli,
sections "Multi-Process Support", "NVTX Filtering", "Output Pages", "Metrics and Units" and the option
tables), and from ncu's own output as public issue threads quote it:

* ``--target-processes all`` profiles the wrapped process and every process it starts (the witness run's
  measuring children); ``--nvtx`` records each kernel's NVTX push/pop stack, printed in the CSV.
* ``--csv --page raw --print-units base``: one CSV row per profiled kernel, one column per metric, a second
  row with each column's unit, values in base units (byte, sector, nsecond); parsed by
  :mod:`gpuprobe.measure.witness.counters`. ``--log-file`` sends the tool's output there, apart from the program's.
* ``--kernel-name regex:^(k1|k2)$`` profiles the witnessed probes' kernels alone (not the flushes, the clock
  spins or CuPy's fills: each profiled launch costs ncu's replay, the others run as usual); ``--clock-control none``
  leaves the clocks as the run found them; ``--cache-control none`` keeps ncu from flushing the caches
  before each kernel (an L2 probe's footprint stays warm). A kernel replayed for several metric passes starts
  each pass after ncu restored its memory, not as the probe's flush left the L2: what such leftovers add to a
  short launch they add to its long one, and the witness compares the long launch's count less the short's.
* A user without access to the counters gets, from ncu, ``==ERROR== ERR_NVGPUCTRPERM - The user does not have
  permission to access NVIDIA GPU Performance Counters on the target device 0. ...`` (quoted in
  HazyResearch/ThunderKittens#73, deepseek-ai/DeepGEMM#46, NVIDIA/TensorRT-LLM#183): the stage is skipped.
* ``ncu --version`` prints "NVIDIA (R) Nsight Compute Command Line Profiler" and its version: a program
  that says otherwise is not ncu.

Every run of a tool is bounded in time; a tool that overruns is killed with its process group (the measuring
processes it started run in sessions of their own and end when their parent is gone, within a second).
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
from gpuprobe.core.tool_output import ENCODING, ERRORS
from gpuprobe.measure.isolation import kill_session
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
