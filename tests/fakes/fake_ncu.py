"""A stand-in for Nsight Compute's ``ncu`` in tests: it runs the command it wraps (the measuring process, on the
simulated GPU) and writes, for the kernels that process and its children launched, the CSV ncu writes.

``fake_ncu.py --version`` answers as ncu does. Otherwise it takes ncu's options (those gpuprobe passes:
``--target-processes``, ``--nvtx``, ``--csv``, ``--page``, ``--print-units``, ``--metrics``, ``--kernel-name``,
``--clock-control``, ``--cache-control``, ``--log-file``) up to the command, runs the command with
``inject/sitecustomize.py`` first on its PYTHONPATH (so every Python process it starts counts its launches:
:mod:`tests.fakes.counters`), then writes ``==PROF==`` lines and the raw page (``--csv --page raw
--print-units base``, every cell quoted, numbers with thousands separators, the NVTX push/pop stack as
``<tid>  "<default domain>:<range>:none:none:none:none:none:none"``) to the log file, and exits as the
command did. Only stdlib here: it runs under whatever Python the test names.

``FAKE_NCU_MODE`` misbehaves on purpose: ``refused`` (ncu's ERR_NVGPUCTRPERM line, exit 1, nothing run),
``garbage`` (a header, then rows that are not ncu's), ``hang`` (never returns; its pid in ``FAKE_NCU_PIDFILE``),
``failed`` (an ``==ERROR==`` line and no table). ``FAKE_NCU_DRAM_GRANULE`` makes the simulated hardware's DRAM
move units of that size (:func:`tests.fakes.counters.granule`).
"""

from __future__ import annotations

import csv
import io
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

VERSION = """NVIDIA (R) Nsight Compute Command Line Profiler
Copyright (c) 2018-2025 NVIDIA Corporation
Version 2025.3.1.0 (build 36398880) (public-release)"""
REFUSED = (
    "==ERROR== ERR_NVGPUCTRPERM - The user does not have permission to access NVIDIA GPU Performance Counters on "
    "the target device 0. For instructions on enabling permissions and to get more information see "
    "https://developer.nvidia.com/ERR_NVGPUCTRPERM"
)
FLAGS = {"--nvtx", "--csv"}
VALUED = {"--target-processes", "--page", "--print-units", "--metrics", "--kernel-name", "--clock-control",
          "--cache-control", "--log-file"}  # fmt: skip
IDENTITY = ["ID", "Process ID", "Process Name", "Host Name",
            "thread Domain:Push/Pop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg",
            "Id:Domain:Start/Stop_Range:PL_Type:PL_Value:CLR_Type:Color:Msg_Type:Msg",
            "Kernel Name", "Context", "Stream", "Block Size", "Grid Size", "Device", "CC"]  # fmt: skip
EXTRA = {"device__attribute_display_name": "", "launch__grid_size": "", "profiler__replayer_passes": ""}
INJECT = Path(__file__).resolve().parent / "inject"
REPO = Path(__file__).resolve().parents[2]


def options(argv: list[str]) -> tuple[dict[str, str], list[str]]:
    """ncu's options as given, and the command after them."""
    given: dict[str, str] = {}
    k = 0
    while k < len(argv) and argv[k].startswith("--"):
        if argv[k] in FLAGS:
            given[argv[k]] = ""
            k += 1
        elif argv[k] in VALUED and k + 1 < len(argv):
            given[argv[k]] = argv[k + 1]
            k += 2
        else:
            sys.exit(f"==ERROR== unrecognised option '{argv[k]}'")
    return given, argv[k:]


def unit(metric: str) -> str:
    if metric.startswith("dram__"):
        return "byte"
    if metric.startswith("lts__t_sectors"):
        return "sector"
    return ""


def nvtx_cell(record: dict) -> str:
    ranges = "  ".join(f'"<default domain>:{name}:none:none:none:none:none:none"' for name in record["ranges"])
    return f"{record['tid']}  {ranges}" if ranges else ""


def table(records: list[dict], metrics: list[str]) -> str:
    """The raw page of ``records`` (launches in profiling order), every cell quoted."""
    columns = sorted({*metrics, *EXTRA})
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL, lineterminator="\n")
    writer.writerow(IDENTITY + columns)
    writer.writerow([""] * len(IDENTITY) + [EXTRA.get(c, unit(c)) for c in columns])
    for number, record in enumerate(records):
        grid, block = (f"({x}, {y}, {z})" for x, y, z in (record["grid"], record["block"]))
        identity = [str(number), str(record["pid"]), "python3", "127.0.0.1", nvtx_cell(record), "",
                    record["kernel"], "1", "7", block, grid, "0", "9.0"]  # fmt: skip
        extra = {"device__attribute_display_name": "Rehearsal GPU", "profiler__replayer_passes": "1",
                 "launch__grid_size": str(record["grid"][0] * record["grid"][1] * record["grid"][2])}  # fmt: skip
        writer.writerow(identity + [extra.get(c) or f"{record['counters'][c]:,.0f}" for c in columns])
    return out.getvalue()


def counted(log_dir: Path, kernel_name: str) -> list[dict]:
    """Every launch the wrapped processes logged whose kernel ``--kernel-name`` selects, in launch order."""
    pattern = kernel_name.removeprefix("regex:") if kernel_name.startswith("regex:") else f"^{re.escape(kernel_name)}$"
    records = [json.loads(line) for path in log_dir.glob("*.jsonl") for line in path.read_text().splitlines()]
    return sorted((r for r in records if re.search(pattern, r["kernel"])), key=lambda r: r["t"])


def requested(given: dict[str, str]) -> list[str]:
    return [m for m in given.get("--metrics", "").split(",") if m]


def profile(given: dict[str, str], command: list[str], write: Callable[[str], None]) -> int:
    """Run ``command`` with its launches logged, then write what ncu would; its exit status."""
    with tempfile.TemporaryDirectory(prefix="fake-ncu-") as scratch:
        path = os.pathsep.join(p for p in (str(INJECT), str(REPO), os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, "FAKE_NCU_LOG_DIR": scratch, "PYTHONPATH": path}
        status = subprocess.run(command, env=env, check=False).returncode
        records = counted(Path(scratch), given.get("--kernel-name", "regex:."))
    metrics = requested(given)
    pids = sorted({r["pid"] for r in records})
    lines = [f"==PROF== Connected to process {pid} ({sys.executable})" for pid in pids]
    lines += [f'==PROF== Profiling "{r["kernel"]}" - {k}: 0%....50%....100% - 1 pass' for k, r in enumerate(records)]
    lines += [f"==PROF== Disconnected from process {pid}" for pid in pids]
    write("\n".join(lines) + "\n" + (table(records, metrics) if records else "==WARNING== No kernels were profiled.\n"))
    return status


def main(argv: list[str]) -> int:
    if argv == ["--version"]:
        print(VERSION)
        return 0
    given, command = options(argv)
    log = given.get("--log-file")

    def write(text: str) -> None:
        if log:
            Path(log).write_text(text, encoding="utf-8")
        else:
            sys.stdout.write(text)

    mode = os.environ.get("FAKE_NCU_MODE", "")
    if mode == "refused":
        write(REFUSED + "\n")
        return 1
    if mode == "hang":
        Path(os.environ["FAKE_NCU_PIDFILE"]).write_text(str(os.getpid()))
        time.sleep(3600)
    if mode == "failed":
        write("==ERROR== Failed to prepare kernel for profiling\n")
        return 1
    if mode == "garbage":
        write(table([], requested(given)) + '"0","1","x"\n"bogus"\n')
        return 0
    return profile(given, command, write)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
