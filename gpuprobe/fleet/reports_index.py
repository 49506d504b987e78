"""``reports/README.md``: every GPU's headline facts side by side, regenerated from the results files.

Each folder of ``reports/`` holds one GPU's ``results.json`` written by a real run (the rule:
only real runs go there). The index reads those files and nothing else that carries a number;
it lists each GPU once with its memory latencies in cycles and ns, the L2 capacity the latency
curve found, the measured SM clock, driver and run date, and links its fact sheet. A partial
run is marked; a folder whose results cannot be read (a FIFO or a device named ``results.json``
too) is listed with the reason; a folder with no results file is skipped. Each file is read as every
reader reads it (:func:`gpuprobe.fleet.reading.read_judged`): the verdicts counted are this gpuprobe's
judgement of the values, and the facts whose stored verdict differs are listed under the table. The
output has no timestamp, so regenerating it from the same files gives the same bytes.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.files import write_atomic
from gpuprobe.core.numbers import fmt_bytes, fmt_num
from gpuprobe.core.results import Fact, Results
from gpuprobe.core.tables import NONE, md_markup_table
from gpuprobe.core.text import md_text, shown
from gpuprobe.fleet.reading import changes_text, read_judged
from gpuprobe.output.factsheet import FACTSHEET_HTML_NAME, FACTSHEET_NAME
from gpuprobe.output.plots import measured_sm_mhz

INDEX_NAME = "README.md"
RESULTS_NAME = "results.json"

#: The latency columns: (fact id, column title).
LATENCY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("latency.l1", "L1"),
    ("latency.l2", "L2"),
    ("latency.l2_far", "L2 far"),
    ("latency.dram", "DRAM"),
)
HEADER = (
    "GPU",
    "Arch",
    "SMs",
    *(f"{title} latency" for _, title in LATENCY_COLUMNS),
    "L2 capacity (measured / device)",
    "SM clock (measured)",
    "Driver",
    "Run date",
    "Verdicts",
)
PARTIAL_MARK = "**(partial)**"
JUDGED_AGAIN = (
    "The verdicts above are this gpuprobe's judgement of each run's values; these runs' files stored others."
)


@dataclass(frozen=True)
class Run:
    """One GPU folder: its name, and its results or why they could not be read."""

    folder: str
    results: Results | None
    error: str = ""
    verdict_changes: str = ""  # stored verdicts this gpuprobe judges otherwise (gpuprobe.fleet.reading.changes_text)


def find_runs(reports_dir: Path) -> list[Run]:
    """Every sub-folder of ``reports_dir`` holding a results file, sorted by folder name."""
    reports_dir = Path(reports_dir)
    if not reports_dir.is_dir():
        return []
    runs = []
    for folder in sorted(p for p in reports_dir.iterdir() if p.is_dir() and not p.name.startswith(".")):
        path = folder / RESULTS_NAME
        if not os.path.lexists(path) and os.access(folder, os.X_OK):  # a folder shut to us: listed as unreadable
            continue  # anything else named so (a FIFO, a device, a dangling link) is read, and listed with why not
        try:
            results, changes = read_judged(path)
        except GpuprobeError as exc:  # named relative to the index, so the page reads the same anywhere
            runs.append(Run(folder.name, None, str(exc).replace(str(path), f"{folder.name}/{RESULTS_NAME}")))
            continue
        if results.device.simulated:  # reports/ holds real runs: a demo's output is refused, and says so
            refused = f"{folder.name}/{RESULTS_NAME} is SIMULATED (gpuprobe demo), not a real run: not listed"
            runs.append(Run(folder.name, None, refused))
        else:
            runs.append(Run(folder.name, results, verdict_changes=changes_text(changes)))
    return runs


def sheet_link(reports_dir: Path, folder: str) -> str:
    """Relative link to a folder's fact sheet: Markdown if present, else HTML, else the results file."""
    for name in (FACTSHEET_NAME, FACTSHEET_HTML_NAME, RESULTS_NAME):
        if (Path(reports_dir) / folder / name).is_file():
            return f"{quote(folder, errors='surrogateescape')}/{quote(name)}"  # a name's stray bytes as %XX
    return quote(folder, errors="surrogateescape") + "/"


def _measured(fact: Fact | None) -> Fact | None:
    """The fact if it carries a value."""
    return fact if fact is not None and fact.value is not None else None


def latency_text(results: Results, fact_id: str) -> str:
    """``"262.4 cyc / 149.5 ns"``; ns as recorded, else at the measured SM clock; "—" if not measured."""
    fact = _measured(results.fact(fact_id))
    if fact is None:
        return NONE
    text = f"{fmt_num(fact.value)} cyc" if fact.unit == "cycle" else f"{fmt_num(fact.value)} {fact.unit}"
    ns = fact.converted.get("ns")
    mhz = measured_sm_mhz(results)
    if ns is None and fact.unit == "cycle" and mhz:
        ns = fact.value / mhz * 1000
    return text if ns is None else f"{text} / {fmt_num(ns)} ns"


def l2_capacity_text(results: Results) -> str:
    """``"50 MiB / 50 MiB"``: the knee the latency curve found, then the size the device reports."""
    fact = _measured(results.fact("capacity.l2"))
    measured = NONE if fact is None else fmt_bytes(fact.value)
    device = fmt_bytes(results.device.l2_bytes) if results.device.l2_bytes > 0 else NONE
    return f"{measured} / {device}"


def verdicts_text(results: Results) -> str:
    """``"12 pass, 1 warn"``: counts of the judged verdicts (report-only facts left out)."""
    counts: dict[str, int] = {}
    for fact in results.facts:
        if fact.verdict != "report":
            counts[fact.verdict] = counts.get(fact.verdict, 0) + 1
    order = ("fail", "warn", "unstable", "not_run", "throttled", "shared", "pass")
    keys = [k for k in order if k in counts] + sorted(k for k in counts if k not in order)
    return ", ".join(f"{counts[k]} {k.replace('_', ' ')}" for k in keys) or NONE


def run_row(reports_dir: Path, folder: str, results: Results) -> list[str]:
    """One table row for the readable run in ``folder``."""
    dev = results.device
    name = md_text(dev.name.strip() or folder)
    gpu = f"[{name}]({sheet_link(reports_dir, folder)})"
    if results.partial:
        gpu += f" {PARTIAL_MARK}"
    mhz = measured_sm_mhz(results)
    return [
        gpu,
        md_text(f"{dev.arch} ({dev.cc})"),
        str(dev.sm_count),
        *(md_text(latency_text(results, fact_id)) for fact_id, _ in LATENCY_COLUMNS),
        l2_capacity_text(results),
        NONE if mhz is None else f"{fmt_num(mhz)} MHz",
        md_text(dev.driver),
        md_text(results.created[:10]),
        md_text(verdicts_text(results)),
    ]


def _sort_key(run: Run) -> tuple[str, str]:
    """GPUs by device name (case-insensitive), then folder."""
    name = run.results.device.name if run.results is not None else run.folder
    return (name.lower(), run.folder)


def render_index(reports_dir: Path) -> str:
    """The index of ``reports_dir`` as Markdown (an empty or missing folder gives an index saying so)."""
    runs = find_runs(reports_dir)
    readable = sorted((r for r in runs if r.results is not None), key=_sort_key)
    rows = [run_row(reports_dir, r.folder, r.results) for r in readable if r.results is not None]
    broken = [r for r in runs if r.results is None]
    lines = [
        "# gpuprobe reports",
        "",
        "One folder per GPU, each written by a real `gpuprobe run` (or `pytest probes/ --gpuprobe-out`). This page is "
        "generated from the `results.json` in each folder; do not edit it by hand.",
        "",
    ]
    if not readable:
        lines += ["No GPU runs recorded yet.", ""]
    else:
        lines += [
            "Latencies are medians of dependent pointer-chase loads, in SM clock cycles and in ns at the SM clock "
            "measured during the run. L2 capacity is where the latency curve steps up, beside the size the device "
            f"reports. {PARTIAL_MARK} marks a run that did not finish; its numbers may be incomplete.",
            "",
            *md_markup_table(HEADER, rows),
            "",
        ]
    if broken:
        lines += ["## Unreadable results", ""]
        lines += [f"- {md_text(r.folder)}: {md_text(r.error)}" for r in broken]
        lines.append("")
    changed = [r for r in readable if r.verdict_changes]
    if changed:
        lines += ["## Verdicts judged again", "", JUDGED_AGAIN, ""]
        lines += [f"- {md_text(r.folder)}: {md_text(r.verdict_changes)}" for r in changed]
        lines.append("")
    return "\n".join(shown(line) for line in lines).rstrip("\n") + "\n"


def write_index(reports_dir: Path) -> Path:
    """Write ``README.md`` into ``reports_dir`` (which must exist); return its path."""
    reports_dir = Path(reports_dir)
    if not reports_dir.is_dir():
        raise GpuprobeError(f"{reports_dir}: reports directory not found")
    path = reports_dir / INDEX_NAME
    write_atomic(path, render_index(reports_dir))
    return path
