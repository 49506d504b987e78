"""Fleets: many GPUs' results side by side, outliers named.

Three pieces, documented for users in docs/fleet.md:

- **Aggregation** (``gpuprobe fleet DIR_OR_FILES...``): every results file is one GPU. Facts are
  compared only within one GPU model (``device.name``): per fact the distribution across GPUs
  (count, median, MAD, min, p5, p95, max), and per GPU a robust z-score for each fact,
  ``z = 0.6745 * (x - median) / MAD``. A GPU with any ``|z|`` beyond the threshold (3.5 by
  default) is an outlier and the command exits 1. Files that are not gpuprobe results are listed
  as skipped with the reason; only when none is readable is that an error.
- **One node, many GPUs** (``gpuprobe fleet-run OUT``, and the pytest-xdist form): see
  :mod:`gpuprobe.fleet.runs`.
- **Across nodes**: docs/slurm/gpuprobe-fleet.sbatch, one Slurm task per GPU, then
  ``gpuprobe fleet`` over the shared output directory.

Pure parts (:func:`aggregate`, :func:`aggregate_summaries`, :func:`render`) do no I/O; the file
reading around them is small.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuprobe.core.errors import GpuprobeError, require_count
from gpuprobe.core.results import Results, load

if TYPE_CHECKING:
    import numpy as np  # imported where used: `gpuprobe --help` stays quick

FLEET_SCHEMA = "gpuprobe.fleet.aggregate"
FLEET_SCHEMA_VERSION = 1

DEFAULT_THRESHOLD = 3.5  # Iglewicz and Hoaglin's cut-off for the modified z-score
MAD_TO_Z = 0.6745  # the 0.75 quantile of the standard normal: MAD / 0.6745 estimates sigma
MAD_FLOOR = 1e-3  # the MAD is never taken below 0.1% of |median| (see robust_z)
MIN_GPUS_TO_JUDGE = 3  # fewer GPUs of a model: distributions shown, no outliers judged
WORST_SHOWN = 10
FACTS_PER_GPU = 3
FORMATS = ("text", "md", "json")
RESULTS_NAME = "results.json"
GPU_DIR = re.compile(r"^(?P<host>.+)-gpu(?P<index>\d+)$")  # <hostname>-gpu<K>, as fleet-run and Slurm write
PARALLEL_FROM = 400  # files; below this a process pool costs more than it saves

# ---------------------------------------------------------------- identities and summaries ---


@dataclass(frozen=True)
class GpuIdentity:
    """Which GPU a results file speaks for: the file, and the identity recorded inside it."""

    file: str
    model: str
    uuid: str = ""
    hostname: str = ""
    gpu_index: int | None = None
    cuda_visible_devices: str | None = None
    partial: bool = False

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class FileSummary:
    """What aggregation needs from one results file: the GPU and its facts as (id, unit, value)."""

    gpu: GpuIdentity
    facts: tuple[tuple[str, str, float], ...]


@dataclass(frozen=True)
class Skipped:
    """A file that is not (readable) gpuprobe results, and why."""

    path: str
    reason: str


def _placement_from_path(source: str) -> tuple[str, int | None]:
    """``.../<hostname>-gpu<K>/results.json`` names the node and GPU when the file itself does not."""
    match = GPU_DIR.match(Path(source).parent.name)
    return (match["host"], int(match["index"])) if match else ("", None)


def identify(source: str, results: Results) -> GpuIdentity:
    """The GPU identity of one results file; placement fields come from ``results.device`` where it
    has them (see :func:`placement`), else from the ``<hostname>-gpu<K>`` directory name."""
    device = results.device
    host_from_path, index_from_path = _placement_from_path(source)
    index = getattr(device, "gpu_index", None)
    return GpuIdentity(
        file=source,
        model=device.name.strip() or "(unnamed GPU)",
        uuid=device.uuid,
        hostname=getattr(device, "hostname", "") or host_from_path,
        gpu_index=index if isinstance(index, int) else index_from_path,
        cuda_visible_devices=getattr(device, "cuda_visible_devices", None),
        partial=results.partial,
    )


def summarize(source: str, results: Results) -> FileSummary:
    """Reduce one results file to its identity and finite fact values (first occurrence of an id wins)."""
    seen: set[str] = set()
    facts = []
    for fact in results.facts:
        if fact.value is None or not math.isfinite(fact.value) or fact.id in seen:
            continue
        seen.add(fact.id)
        facts.append((fact.id, fact.unit, fact.value))
    return FileSummary(identify(source, results), tuple(facts))


def _reason(source: str, error: GpuprobeError) -> str:
    text = str(error)
    return text[len(source) + 2 :] if text.startswith(f"{source}: ") else text


def read_summary(path: str) -> FileSummary | Skipped:
    """One file, validated exactly as :func:`gpuprobe.core.results.load` validates it, then reduced."""
    try:
        return summarize(path, load(Path(path)))
    except GpuprobeError as exc:
        return Skipped(path, _reason(path, exc))


def _read_chunk(paths: Sequence[str]) -> list[FileSummary | Skipped]:
    return [read_summary(p) for p in paths]


def discover(paths: Iterable[str | Path]) -> tuple[list[str], list[Skipped]]:
    """Results files named by ``paths``: files as given, directories searched recursively for ``*.json``."""
    found: list[str] = []
    missing: list[Skipped] = []
    seen: set[Path] = set()
    for given in paths:
        path = Path(given)
        if path.is_dir():
            candidates = sorted(p for p in path.rglob("*.json") if p.is_file())
        elif path.is_file():
            candidates = [path]
        else:
            missing.append(Skipped(str(given), "no such file or directory"))
            continue
        for candidate in candidates:
            key = candidate.resolve()
            if key not in seen:
                seen.add(key)
                found.append(str(candidate))
    return found, missing


def load_summaries(files: Sequence[str], jobs: int | None = None) -> tuple[list[FileSummary], list[Skipped]]:
    """Read every file, in a process pool when there are many; summaries and skips keep file order."""
    jobs = jobs if jobs is not None else (os.cpu_count() or 1)
    if jobs <= 1 or len(files) < PARALLEL_FROM:
        outcomes = _read_chunk(files)
    else:
        size = max(1, math.ceil(len(files) / (jobs * 4)))
        chunks = [files[i : i + size] for i in range(0, len(files), size)]
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            outcomes = [o for chunk in pool.map(_read_chunk, chunks) for o in chunk]
    summaries = [o for o in outcomes if isinstance(o, FileSummary)]
    skipped = [o for o in outcomes if isinstance(o, Skipped)]
    return summaries, skipped


# ---------------------------------------------------------------- statistics ---------------


@dataclass(frozen=True)
class RobustZ:
    """The centre, spread and z-scores of one fact's values across GPUs."""

    median: float
    mad: float
    scale: float  # the MAD used: max(MAD, MAD_FLOOR * |median|)
    floored: bool  # the floor replaced the MAD
    z: np.ndarray


def robust_z(values: np.ndarray) -> RobustZ:
    """Modified z-scores ``0.6745 * (x - median) / MAD`` with the MAD floored.

    When more than half the GPUs agree exactly the MAD is 0 and every other value would be
    infinitely far; so the MAD is never taken below ``MAD_FLOOR`` (0.1%) of ``|median|``, or, for
    a median of 0, of the largest deviation. All values equal: every z is 0.
    """
    import numpy as np

    median = float(np.median(values))
    deviations = np.abs(values - median)
    mad = float(np.median(deviations))
    floor = MAD_FLOOR * (abs(median) or float(deviations.max()))
    scale = max(mad, floor)
    z = np.zeros_like(values) if scale == 0 else MAD_TO_Z * (values - median) / scale
    return RobustZ(median, mad, scale, mad < floor, z)


@dataclass(frozen=True)
class FactStats:
    """One fact's distribution across the GPUs of one model."""

    fact_id: str
    unit: str
    count: int
    median: float
    mad: float
    scale: float
    floored: bool
    minimum: float
    p5: float
    p95: float
    maximum: float
    judged: bool  # enough GPUs to call outliers
    outliers: int

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.fact_id,
            "unit": self.unit,
            "count": self.count,
            "median": self.median,
            "mad": self.mad,
            "mad_used": self.scale,
            "mad_floored": self.floored,
            "min": self.minimum,
            "p5": self.p5,
            "p95": self.p95,
            "max": self.maximum,
            "judged": self.judged,
            "outliers": self.outliers,
        }


@dataclass(frozen=True)
class Deviation:
    """One fact of one GPU against its model's median."""

    fact_id: str
    unit: str
    value: float
    median: float
    z: float

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.fact_id, "unit": self.unit, "value": self.value, "median": self.median, "z": self.z}

    def text(self) -> str:
        return f"{self.fact_id} z={self.z:+.1f} ({_num(self.value)} vs {_num(self.median)} {self.unit})"


@dataclass
class GpuScore:
    """A GPU's largest deviations, worst first."""

    gpu: GpuIdentity
    deviations: list[Deviation]
    max_abs_z: float

    def is_outlier(self, threshold: float) -> bool:
        return self.max_abs_z > threshold

    def to_dict(self, threshold: float) -> dict[str, Any]:
        return {
            **self.gpu.to_dict(),
            "max_abs_z": self.max_abs_z,
            "outlier": self.is_outlier(threshold),
            "worst_facts": [d.to_dict() for d in self.deviations],
        }


@dataclass
class ModelGroup:
    model: str
    gpus: int
    facts: list[FactStats]


@dataclass
class FleetReport:
    """Everything ``gpuprobe fleet`` says; :func:`render` turns it into text, Markdown or JSON."""

    threshold: float
    models: list[ModelGroup]
    ranking: list[GpuScore]  # every GPU, worst first
    skipped: list[Skipped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def gpus(self) -> int:
        return len(self.ranking)

    @property
    def outliers(self) -> list[GpuScore]:
        return [s for s in self.ranking if s.is_outlier(self.threshold)]

    @property
    def exit_status(self) -> int:
        return 1 if self.outliers else 0

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": FLEET_SCHEMA,
            "schema_version": FLEET_SCHEMA_VERSION,
            "threshold": self.threshold,
            "z": "0.6745 * (x - median) / max(MAD, 0.001 * |median|), per GPU model and fact",
            "gpus": self.gpus,
            "model_count": len(self.models),
            "outlier_count": len(self.outliers),
            "exit_status": self.exit_status,
            "models": [
                {"model": m.model, "gpus": m.gpus, "facts": [f.to_dict() for f in m.facts]} for m in self.models
            ],
            "ranking": [s.to_dict(self.threshold) for s in self.ranking],
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.skipped],
            "notes": self.notes,
        }


@dataclass
class _Group:
    """The values of one (model, fact, unit), and which GPU each came from."""

    values: list[float] = field(default_factory=list)
    owners: list[int] = field(default_factory=list)


def _collect(summaries: Sequence[FileSummary]) -> dict[str, dict[tuple[str, str], _Group]]:
    by_model: dict[str, dict[tuple[str, str], _Group]] = defaultdict(lambda: defaultdict(_Group))
    for owner, summary in enumerate(summaries):
        groups = by_model[summary.gpu.model]
        for fact_id, unit, value in summary.facts:
            group = groups[(fact_id, unit)]
            group.values.append(value)
            group.owners.append(owner)
    return by_model


def _fact_stats(key: tuple[str, str], group: _Group, threshold: float) -> tuple[FactStats, RobustZ, np.ndarray]:
    import numpy as np

    values = np.asarray(group.values, dtype=float)
    stats = robust_z(values)
    judged = len(values) >= MIN_GPUS_TO_JUDGE
    p5, p95 = (float(v) for v in np.percentile(values, [5, 95]))
    outliers = int(np.count_nonzero(np.abs(stats.z) > threshold)) if judged else 0
    fact = FactStats(
        fact_id=key[0], unit=key[1], count=len(values), median=stats.median, mad=stats.mad, scale=stats.scale,
        floored=stats.floored, minimum=float(values.min()), p5=p5, p95=p95, maximum=float(values.max()),
        judged=judged, outliers=outliers,
    )  # fmt: skip
    return fact, stats, values


def _score(gpu: GpuIdentity, deviations: list[Deviation], threshold: float) -> GpuScore:
    deviations.sort(key=lambda d: (-abs(d.z), d.fact_id))
    beyond = sum(abs(d.z) > threshold for d in deviations)
    kept = deviations[: max(beyond, FACTS_PER_GPU)]
    return GpuScore(gpu, kept, abs(kept[0].z) if kept else 0.0)


def _model_notes(model: str, facts: list[FactStats], gpus: int) -> list[str]:
    notes = []
    if gpus < MIN_GPUS_TO_JUDGE:
        notes.append(
            f"{model}: only {gpus} GPU(s); distributions shown, no outliers judged (needs {MIN_GPUS_TO_JUDGE})"
        )
        return notes
    exact = [f.fact_id for f in facts if f.judged and f.mad == 0]
    if exact:
        notes.append(
            f"{model}: MAD is 0 for {', '.join(exact)} (most GPUs agree exactly); z uses 0.1% of |median| "
            f"instead, so any departure from the majority stands out"
        )
    tight = [f.fact_id for f in facts if f.judged and f.floored and f.mad > 0]
    if tight:
        notes.append(f"{model}: MAD is below 0.1% of the median for {', '.join(tight)}; z uses 0.1% of |median|")
    units = Counter(f.fact_id for f in facts)
    for fact_id, count in units.items():
        if count > 1:
            shown = ", ".join(f.unit for f in facts if f.fact_id == fact_id)
            notes.append(f"{model}: {fact_id} comes in {count} units ({shown}); each is compared on its own")
    return notes


def _fleet_notes(summaries: Sequence[FileSummary]) -> list[str]:
    notes = []
    uuids: dict[str, list[str]] = defaultdict(list)
    for s in summaries:
        if s.gpu.uuid:
            uuids[s.gpu.uuid].append(s.gpu.file)
    for uuid, files in sorted(uuids.items()):
        if len(files) > 1:
            shown = ", ".join(files[:3]) + (", ..." if len(files) > 3 else "")
            notes.append(f"GPU {uuid} appears in {len(files)} files ({shown}): one GPU measured twice counts twice")
    partial = sum(s.gpu.partial for s in summaries)
    if partial:
        notes.append(f"{partial} results file(s) are partial (the run did not finish): their missing facts are absent")
    empty = sum(not s.facts for s in summaries)
    if empty:
        notes.append(f"{empty} results file(s) hold no measured fact")
    return notes


def aggregate_summaries(
    summaries: Sequence[FileSummary], threshold: float = DEFAULT_THRESHOLD, skipped: Iterable[Skipped] = ()
) -> FleetReport:
    """The fleet report over already-read files: distributions and robust z per model and fact."""
    if not threshold > 0:
        raise GpuprobeError(f"fleet: the outlier threshold must be a positive z-score, not {threshold}")
    per_gpu: list[list[Deviation]] = [[] for _ in summaries]
    models: list[ModelGroup] = []
    notes: list[str] = []
    for model, groups in _collect(summaries).items():
        facts = []
        for key in sorted(groups):
            fact, stats, values = _fact_stats(key, groups[key], threshold)
            facts.append(fact)
            if fact.judged:
                for owner, value, z in zip(groups[key].owners, values.tolist(), stats.z.tolist(), strict=True):
                    per_gpu[owner].append(Deviation(key[0], key[1], value, stats.median, z))
        gpus = sum(s.gpu.model == model for s in summaries)
        models.append(ModelGroup(model, gpus, facts))
        notes.extend(_model_notes(model, facts, gpus))
    models.sort(key=lambda m: (-m.gpus, m.model))
    ranking = [_score(s.gpu, per_gpu[i], threshold) for i, s in enumerate(summaries)]
    ranking.sort(key=lambda s: (-s.max_abs_z, s.gpu.file))
    return FleetReport(threshold, models, ranking, list(skipped), notes + _fleet_notes(summaries))


def aggregate(results: Iterable[tuple[str, Results]], threshold: float = DEFAULT_THRESHOLD) -> FleetReport:
    """The fleet report over ``(source, Results)`` pairs, one per GPU; pure, no I/O."""
    return aggregate_summaries([summarize(source, r) for source, r in results], threshold)


def aggregate_paths(
    paths: Iterable[str | Path], threshold: float = DEFAULT_THRESHOLD, jobs: int | None = None
) -> FleetReport:
    """Discover, read and aggregate; unreadable files are skipped, and none readable is an error."""
    files, skipped = discover(paths)
    summaries, unreadable = load_summaries(files, jobs)
    skipped += unreadable
    if not summaries:
        detail = "; ".join(f"{s.path}: {s.reason}" for s in skipped[:3]) + ("; ..." if len(skipped) > 3 else "")
        raise GpuprobeError(f"fleet: no readable gpuprobe results ({detail or 'no .json files found'})")
    return aggregate_summaries(summaries, threshold, skipped)


# ---------------------------------------------------------------- rendering ----------------


def _num(value: float | None) -> str:
    if value is None:
        return "-"
    if value == int(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"


def _identity_cells(gpu: GpuIdentity) -> list[str]:
    return [
        gpu.file,
        gpu.model,
        gpu.hostname or "-",
        "-" if gpu.gpu_index is None else str(gpu.gpu_index),
        gpu.uuid or "-",
    ]


FACT_HEADERS = ("fact", "unit", "n", "median", "MAD", "min", "p5", "p95", "max", "outliers")
WORST_HEADERS = ("#", "max |z|", "file", "model", "host", "gpu", "uuid", "worst facts")
NUMERIC = {"n", "median", "MAD", "min", "p5", "p95", "max", "outliers", "#", "max |z|", "gpu"}


def _fact_row(f: FactStats) -> list[str]:
    mad = _num(f.mad) + ("*" if f.judged and f.floored else "")
    outliers = str(f.outliers) if f.judged else "-"
    return [
        f.fact_id,
        f.unit,
        str(f.count),
        _num(f.median),
        mad,
        _num(f.minimum),
        _num(f.p5),
        _num(f.p95),
        _num(f.maximum),
        outliers,
    ]


def _worst_rows(report: FleetReport, top: int) -> list[list[str]]:
    rows = []
    for rank, score in enumerate(report.ranking[:top], start=1):
        shown = score.deviations[:FACTS_PER_GPU]
        facts = "; ".join(d.text() for d in shown) or "-"
        rows.append([str(rank), f"{score.max_abs_z:.1f}", *_identity_cells(score.gpu), facts])
    return rows


def _summary_line(report: FleetReport) -> str:
    models = len(report.models)
    text = (
        f"{report.gpus} GPU(s) from {report.gpus} results file(s), {models} GPU model(s); "
        f"{len(report.outliers)} outlier GPU(s) with |z| > {report.threshold:g}"
    )
    return text + (f"; {len(report.skipped)} file(s) skipped" if report.skipped else "")


def _text_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]

    def line(cells: Sequence[str]) -> str:
        parts = [c.rjust(w) if h in NUMERIC else c.ljust(w) for c, w, h in zip(cells, widths, headers, strict=True)]
        return "  ".join(parts).rstrip()

    return [line(headers), *(line(r) for r in rows)]


def _md_cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _md_table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> list[str]:
    align = ["---:" if h in NUMERIC else "---" for h in headers]
    return [
        "| " + " | ".join(_md_cell(h) for h in headers) + " |",
        "| " + " | ".join(align) + " |",
        *("| " + " | ".join(_md_cell(c) for c in r) + " |" for r in rows),
    ]


def _worst_title(report: FleetReport, top: int) -> str:
    shown = min(top, report.gpus)
    return f"worst GPUs ({shown} of {report.gpus} shown; {len(report.outliers)} beyond |z| > {report.threshold:g})"


def _render_text(report: FleetReport, top: int) -> str:
    out = [
        f"gpuprobe fleet: {_summary_line(report)}",
        "z = 0.6745 * (x - median) / MAD, within each GPU model; * marks a MAD raised to 0.1% of the median",
    ]
    for m in report.models:
        out += ["", f"== {m.model}: {m.gpus} GPU(s) ==", *_text_table(FACT_HEADERS, [_fact_row(f) for f in m.facts])]
    out += ["", _worst_title(report, top), *_text_table(WORST_HEADERS, _worst_rows(report, top))]
    if report.skipped:
        out += ["", f"skipped files ({len(report.skipped)})", *(f"  {s.path}: {s.reason}" for s in report.skipped)]
    if report.notes:
        out += ["", "notes", *(f"  - {n}" for n in report.notes)]
    return "\n".join(out) + "\n"


def _render_md(report: FleetReport, top: int) -> str:
    out = [
        "# gpuprobe fleet",
        "",
        _summary_line(report) + ".",
        "",
        "Robust z = 0.6745 (x − median) / MAD, within each GPU model; a MAD marked * was raised to 0.1% of the "
        "median (most GPUs agree exactly).",
    ]
    for m in report.models:
        out += [
            "",
            f"## {_md_cell(m.model)} ({m.gpus} GPUs)",
            "",
            *_md_table(FACT_HEADERS, [_fact_row(f) for f in m.facts]),
        ]
    out += ["", f"## {_worst_title(report, top).capitalize()}", "", *_md_table(WORST_HEADERS, _worst_rows(report, top))]
    if report.skipped:
        out += ["", f"## Skipped files ({len(report.skipped)})", ""]
        out += [f"- `{s.path}`: {_md_cell(s.reason)}" for s in report.skipped]
    if report.notes:
        out += ["", "## Notes", "", *(f"- {_md_cell(n)}" for n in report.notes)]
    return "\n".join(out) + "\n"


def render(report: FleetReport, fmt: str = "text", top: int = WORST_SHOWN) -> str:
    """The report as ``text`` (aligned columns), ``md`` (Markdown tables) or ``json`` (everything)."""
    if fmt == "json":
        return json.dumps(report.to_dict(), indent=1) + "\n"
    if fmt == "md":
        return _render_md(report, top)
    if fmt == "text":
        return _render_text(report, top)
    raise GpuprobeError(f"fleet: unknown format {fmt!r} (choose from {', '.join(FORMATS)})")


# ---------------------------------------------------------------- commands ------------------


def positive_number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a positive {what}, not {text}")
    return value


def z_threshold(text: str) -> float:
    return positive_number(text, "z-score")


def cmd_fleet(args: argparse.Namespace) -> int:
    require_count(args.top, "--top")
    require_count(args.jobs, "--jobs")
    report = aggregate_paths(args.paths, args.threshold, args.jobs)
    print(render(report, args.format, args.top), end="")
    return report.exit_status


def add_command(subparsers: Any) -> None:
    """Register ``fleet`` on the ``gpuprobe`` command's subparsers (``fleet-run``: gpuprobe.fleet.runs)."""
    p = subparsers.add_parser("fleet", help="compare many GPUs' results: distributions per model, robust outliers")
    p.add_argument("paths", nargs="+", metavar="DIR_OR_FILE", help="results files, or directories to search for *.json")
    p.add_argument(
        "--threshold",
        type=z_threshold,
        default=DEFAULT_THRESHOLD,
        metavar="Z",
        help=f"a GPU with any |robust z| above Z is an outlier: exit status 1 (default {DEFAULT_THRESHOLD})",
    )
    p.add_argument("--format", choices=FORMATS, default="text")
    p.add_argument("--top", type=int, default=WORST_SHOWN, metavar="N", help="worst GPUs shown (default 10)")
    p.add_argument("--jobs", type=int, default=None, metavar="N", help="processes reading files (default: CPUs)")
    p.set_defaults(func=cmd_fleet)
