"""Fleets: many GPUs' results side by side, outliers named (``gpuprobe fleet DIR_OR_FILES...``).

Every results file is one GPU; facts are compared only within one GPU model and one stage, each GPU's
value scored by a robust z (:mod:`gpuprobe.fleet.spread`), and a GPU beyond the threshold is an outlier
(exit 1). docs/fleet.md documents the report, its formats and the runs behind it. The pure parts
(:func:`aggregate`, :func:`aggregate_summaries`, :func:`render`) do no I/O.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuprobe.core.detection import percent_text
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.files import os_reason
from gpuprobe.core.numbers import fmt_bound
from gpuprobe.core.results import WITNESS_PREFIX, Provenance, Results, provenance
from gpuprobe.core.results_index import is_index
from gpuprobe.core.tables import md_table, text_table
from gpuprobe.core.text import md_code, md_text, shown
from gpuprobe.core.workers import map_in_processes, usable_cpus
from gpuprobe.fleet.compare import allowance_text, md_warnings
from gpuprobe.fleet.provenance import fleet_lines, hosts_text
from gpuprobe.fleet.reading import changes_text, read_for_fleet
from gpuprobe.fleet.spread import (
    EXACT,
    EXACT_FLOOR,
    FLEET_ALPHA,
    PRACTICAL,
    SOURCES,
    RobustZ,
    measured_noise,
    noise_floor,
    noise_quantile,
    robust_z,
)

if TYPE_CHECKING:
    import numpy as np  # imported where used: `gpuprobe --help` stays quick

FLEET_SCHEMA = "gpuprobe.fleet.aggregate"
FLEET_SCHEMA_VERSION = 4  # 2: z over a scale with noise and practical floors, facts carry noise, scale, scale_from;
# 3: "warnings" (what the files differ in besides the GPUs), ranking entries carry serial, driver, code, stage;
# 4: "library_gaps" (GPUs whose library rates are low while their instruction rates are normal)

DEFAULT_THRESHOLD = 3.5  # Iglewicz and Hoaglin's cut-off for the modified z-score
DEFAULT_MIN_DEVIATION_PCT = 3.0  # the practical threshold: above the 1-2 % real runs move, below the 5 % to catch
MIN_GPUS_TO_JUDGE = 3  # fewer GPUs of a model: distributions shown, no outliers judged
WORST_SHOWN = 10
FACTS_PER_GPU = 3
NAMED_IN_A_NOTE = 3  # a note names this many ids at most, then counts the rest
FORMATS = ("text", "md", "json")
RESULTS_NAME = "results.json"
GPU_DIR = re.compile(r"^(?P<host>.+)-gpu(?P<index>\d+)$")  # <hostname>-gpu<K>, as fleet-run and Slurm write
PARALLEL_FROM = 400  # files; below this a process pool costs more than it saves
# A library gap (:func:`library_gaps`): a library's rate (the ladder's cuBLAS, the frameworks' rungs) against the
# rates of the tensor-core instructions it is made of (the wgmma and mma families' throughput probes)
LIBRARY_RATES = ("library.",)
INSTRUCTION_RATES = ("tensor.wgmma.", "tensor.mma_sync.")
RATE_SUFFIXES = (".tflops", ".fraction_of_peak")

# ---------------------------------------------------------------- identities and summaries ---


@dataclass(frozen=True)
class GpuIdentity:
    """Which GPU a results file speaks for: the file, and the identity recorded inside it."""

    file: str
    model: str  # the GPU model, "(smoke stage)" after it for a smoke run: compared only with its own kind
    uuid: str = ""
    hostname: str = ""
    gpu_index: int | None = None
    cuda_visible_devices: str | None = None
    partial: bool = False
    simulated: bool = False  # from gpuprobe's simulated GPU: flagged, never a real GPU of the fleet
    serial: str = ""
    driver: str = ""  # as gpuprobe.core.results.Provenance.driver_text says it
    code: str = ""  # the gpuprobe that measured, as Provenance.code_text says it
    stage: str = "full"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass(frozen=True)
class FileSummary:
    """What aggregation needs from one results file: the GPU and its facts as (id, unit, value,
    half-width of the fact's confidence interval, ``None`` without one)."""

    gpu: GpuIdentity
    facts: tuple[tuple[str, str, float, float | None], ...]
    origin: Provenance  # where the file came from: board, host (named by its path where it names none), driver, code
    verdict_changes: str = ""  # stored verdicts this gpuprobe judges otherwise (gpuprobe.fleet.reading.changes_text)


@dataclass(frozen=True)
class Skipped:
    """A file that is not (readable) gpuprobe results, and why."""

    path: str
    reason: str


def _placement_from_path(source: str) -> tuple[str, int | None]:
    """``.../<hostname>-gpu<K>/results.json`` names the node and GPU when the file itself does not."""
    match = GPU_DIR.match(Path(source).parent.name)
    return (match["host"], int(match["index"])) if match else ("", None)


def identify(source: str, results: Results, origin: Provenance | None = None) -> GpuIdentity:
    """The GPU identity of one results file; placement fields come from ``results.device`` where it
    has them (see :func:`placement`), else from the ``<hostname>-gpu<K>`` directory name. ``origin``: the
    file's provenance, where the caller has it."""
    device, origin = results.device, origin or provenance(results)
    host_from_path, index_from_path = _placement_from_path(source)
    index = getattr(device, "gpu_index", None)
    model = device.name.strip() or "(unnamed GPU)"
    return GpuIdentity(
        file=source,
        model=model + (f" ({results.stage} stage)" if results.stage != "full" else ""),
        uuid=device.uuid,
        hostname=origin.hostname or host_from_path,
        gpu_index=index if isinstance(index, int) else index_from_path,
        cuda_visible_devices=getattr(device, "cuda_visible_devices", None),
        partial=results.partial,
        simulated=results.device.simulated,
        serial=origin.serial,
        driver=origin.driver_text(),
        code=origin.code_text(),
        stage=results.stage,
    )


def _half_width(ci: tuple[float, float] | None) -> float | None:
    if ci is None:
        return None
    half = abs(ci[1] - ci[0]) / 2.0
    return half if math.isfinite(half) else None


def summarize(source: str, results: Results, verdict_changes: str = "") -> FileSummary:
    """Reduce one results file to its identity and finite fact values with their intervals' half-widths
    (the file's ids are unique: :func:`gpuprobe.core.results.validate` refuses one given twice)."""
    measured = [f for f in results.facts if f.value is not None and math.isfinite(f.value)]
    # ids and units interned: one string each across a fleet's files, pickled once by a reading process, not 2,000 times
    facts = tuple((sys.intern(f.id), sys.intern(f.unit), f.value, _half_width(f.ci))
                  for f in measured if not f.id.startswith(WITNESS_PREFIX))  # fmt: skip
    origin = provenance(results)
    gpu = identify(source, results, origin)
    return FileSummary(gpu, facts, dataclasses.replace(origin, hostname=gpu.hostname), verdict_changes)


def _reason(source: str, error: GpuprobeError) -> str:
    text = str(error)
    return text[len(source) + 2 :] if text.startswith(f"{source}: ") else text


def read_summary(path: str) -> FileSummary | Skipped:
    """One file, read as a fleet reads it (from its facts index where it has one; validated, judged again:
    :func:`read_for_fleet`), then reduced."""
    try:
        results, changes = read_for_fleet(Path(path))
        return summarize(path, results, changes_text(changes))
    except GpuprobeError as exc:
        return Skipped(path, _reason(path, exc))


def _read_chunk(paths: Sequence[str]) -> list[FileSummary | Skipped]:
    return [read_summary(p) for p in paths]


def _json_files(folder: Path, skipped: list[Skipped]) -> list[Path]:
    """Every ``*.json`` file below ``folder`` but the facts indexes beside results files, sorted; a subfolder that
    cannot be listed (a node's results folder with the wrong permissions) is added to ``skipped`` with why, not
    passed over in silence."""

    def unlisted(error: OSError) -> None:
        skipped.append(Skipped(str(error.filename), f"cannot list this folder ({os_reason(error)})"))

    found = [Path(root) / name for root, _, names in os.walk(folder, onerror=unlisted) for name in names]
    return sorted(path for path in found if path.suffix == ".json" and not is_index(path))  # a FIFO too: it says why


def discover(paths: Iterable[str | Path]) -> tuple[list[str], list[Skipped]]:
    """Results files named by ``paths``: files as given, directories searched recursively for ``*.json``."""
    found: list[str] = []
    missing: list[Skipped] = []
    seen: set[Path] = set()
    for given in paths:
        path = Path(given)
        if path.is_dir():
            candidates = _json_files(path, missing)
        elif path.exists():  # not only a regular file: reading a FIFO or a device says why it cannot
            candidates = [path]
        else:
            missing.append(Skipped(str(given), "no such file or directory"))
            continue
        for candidate in candidates:
            key = Path(os.path.realpath(candidate))  # a link loop too (resolve() raises); reading it says why
            if key not in seen:
                seen.add(key)
                found.append(str(candidate))
    return found, missing


def load_summaries(files: Sequence[str], jobs: int | None = None) -> tuple[list[FileSummary], list[Skipped]]:
    """Read every file, in ``jobs`` processes (default: the CPUs this process may use) when there are many;
    summaries and skips keep file order. Each process reads every ``jobs``-th file (:func:`map_in_processes`, one
    chunk each: a process started costs ~1 s of imports and expectations), so that a run of files without an index
    falls to all of them alike."""
    jobs = jobs if jobs is not None else usable_cpus()
    if jobs <= 1 or len(files) < PARALLEL_FROM:
        outcomes = _read_chunk(files)
    else:
        chunks = map_in_processes(_read_chunk, [(files[i::jobs],) for i in range(jobs)])
        outcomes = [chunks[k % jobs][k // jobs] for k in range(len(files))]
    summaries = [o for o in outcomes if isinstance(o, FileSummary)]
    skipped = [o for o in outcomes if isinstance(o, Skipped)]
    return summaries, skipped


# ---------------------------------------------------------------- statistics ---------------


@dataclass(frozen=True)
class FactStats:
    """One fact's distribution across the GPUs of one model."""

    fact_id: str
    unit: str
    count: int
    median: float
    mad: float
    noise: float  # the fact's measured noise, a standard deviation (0: exact)
    scale: float  # what z divides by
    source: str  # where the scale came from (gpuprobe.fleet.spread.SOURCES)
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
            "noise": self.noise,
            "scale": self.scale,
            "scale_from": self.source,
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

    @property
    def pct(self) -> float | None:
        """How far from the median, in percent of it; ``None`` for a median of 0."""
        return (self.value - self.median) / abs(self.median) * 100.0 if self.median else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "id": self.fact_id, "unit": self.unit, "value": self.value, "median": self.median,
            "deviation_pct": self.pct, "z": self.z,
        }  # fmt: skip

    def text(self) -> str:
        off = "" if self.pct is None else f" {self.pct:+.1f} %"
        return f"{self.fact_id}{off} z={self.z:+.1f} ({_num(self.value)} vs {_num(self.median)} {self.unit})"


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


@dataclass(frozen=True)
class LibraryGap:
    """A GPU whose library rates are low beyond the threshold while every instruction rate of its tensor cores is
    within it: it passes every diagnostic of its tensor cores and still runs its GEMMs (and trains) slowly."""

    gpu: GpuIdentity
    library: list[Deviation]  # its library rates below the threshold, worst first
    instruction: Deviation  # its lowest instruction rate, within the threshold
    instructions: int  # instruction rates of it judged

    def text(self) -> str:
        gpu = self.gpu
        where = f" ({gpu.hostname} gpu {gpu.gpu_index})" if gpu.hostname and gpu.gpu_index is not None else ""
        library = "; ".join(d.text() for d in self.library[:FACTS_PER_GPU])
        more = f" and {len(self.library) - FACTS_PER_GPU} more" if len(self.library) > FACTS_PER_GPU else ""
        return (f"{gpu.file}{where}: library rate low while its instruction rate is normal: {library}{more}; its "
                f"{self.instructions} tensor-core instruction rates are within the fleet (lowest: "
                f"{self.instruction.text()}): the tensor cores pass, the library path is slow (its kernels' clock "
                "under load, memory, the library or driver build): the GPU that passes every diagnostic and still "
                "trains slowly")  # fmt: skip

    def to_dict(self) -> dict[str, Any]:
        return {**self.gpu.to_dict(), "library_facts": [d.to_dict() for d in self.library],
                "lowest_instruction_fact": self.instruction.to_dict(),
                "instruction_facts": self.instructions}  # fmt: skip


@dataclass
class ModelGroup:
    model: str
    gpus: int
    facts: list[FactStats]


@dataclass(frozen=True)
class Rule:
    """What makes an outlier: ``|z| > threshold``, over a scale no smaller than the noise floor (Bonferroni
    over ``values_judged``) nor the practical floor (``min_deviation_pct``); see :mod:`gpuprobe.fleet.spread`."""

    threshold: float = DEFAULT_THRESHOLD
    min_deviation_pct: float = DEFAULT_MIN_DEVIATION_PCT
    values_judged: int = 0  # every judged fact of every GPU

    @property
    def noise_quantile(self) -> float:
        return noise_quantile(self.values_judged, FLEET_ALPHA)


@dataclass
class FleetReport:
    """Everything ``gpuprobe fleet`` says; :func:`render` turns it into text, Markdown or JSON."""

    rule: Rule
    models: list[ModelGroup]
    ranking: list[GpuScore]  # every GPU, worst first
    skipped: list[Skipped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # what the files differ in besides the GPUs: said first
    hosts: str = ""  # on how many hosts the files ran (gpuprobe.fleet.provenance.hosts_text)
    library_gaps: list[LibraryGap] = field(default_factory=list)  # library slow, tensor cores normal (worst first)

    @property
    def threshold(self) -> float:
        return self.rule.threshold

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
            "min_deviation_pct": self.rule.min_deviation_pct,
            "values_judged": self.rule.values_judged,
            "noise_quantile": self.rule.noise_quantile,
            "z": " ".join(line.strip() for line in method_lines(self.rule)),
            "gpus": self.gpus,
            "warnings": self.warnings,
            "hosts": self.hosts,
            "model_count": len(self.models),
            "outlier_count": len(self.outliers),
            "exit_status": self.exit_status,
            "models": [
                {"model": m.model, "gpus": m.gpus, "facts": [f.to_dict() for f in m.facts]} for m in self.models
            ],
            "ranking": [s.to_dict(self.threshold) for s in self.ranking],
            "library_gaps": [g.to_dict() for g in self.library_gaps],
            "skipped": [{"path": s.path, "reason": s.reason} for s in self.skipped],
            "notes": self.notes,
        }


@dataclass
class _Group:
    """The values of one (model, fact, unit), and which GPU each came from."""

    values: list[float] = field(default_factory=list)
    owners: list[int] = field(default_factory=list)
    half_widths: list[float] = field(default_factory=list)  # of the GPUs that recorded an interval


def _collect(summaries: Sequence[FileSummary]) -> dict[str, dict[tuple[str, str], _Group]]:
    by_model: dict[str, dict[tuple[str, str], _Group]] = defaultdict(lambda: defaultdict(_Group))
    for owner, summary in enumerate(summaries):
        groups = by_model[summary.gpu.model]
        for fact_id, unit, value, half_width in summary.facts:
            group = groups[(fact_id, unit)]
            group.values.append(value)
            group.owners.append(owner)
            if half_width is not None:
                group.half_widths.append(half_width)
    return by_model


def _fact_stats(key: tuple[str, str], group: _Group, rule: Rule) -> tuple[FactStats, RobustZ, np.ndarray]:
    import numpy as np

    values = np.asarray(group.values, dtype=float)
    threshold = rule.threshold
    noise = measured_noise(float(np.median(values)), group.half_widths, *key)
    floor = noise_floor(noise, len(values), rule.noise_quantile, threshold)
    stats = robust_z(values, floor, rule.min_deviation_pct / 100.0 / threshold)
    judged = len(values) >= MIN_GPUS_TO_JUDGE
    p5, p95 = (float(v) for v in np.percentile(values, [5, 95]))
    outliers = int(np.count_nonzero(np.abs(stats.z) > threshold)) if judged else 0
    fact = FactStats(
        fact_id=key[0], unit=key[1], count=len(values), median=stats.median, mad=stats.mad, noise=noise,
        scale=stats.scale, source=stats.source, minimum=float(values.min()), p5=p5, p95=p95,
        maximum=float(values.max()),
        judged=judged, outliers=outliers,
    )  # fmt: skip
    return fact, stats, values


@dataclass(frozen=True)
class _Scored:
    """One judged (fact, unit) of one model: which GPUs have it, their values, and their z against the median."""

    key: tuple[str, str]
    owners: list[int]
    values: np.ndarray
    stats: RobustZ


def _worst(scored: Sequence[_Scored], gpus: int, threshold: float) -> list[list[Deviation]]:
    """Each GPU's deviations worth naming, worst first (by |z|, then fact id and unit): all beyond the threshold, or
    its :data:`FACTS_PER_GPU` worst. Picked over arrays, a Deviation made only for what is kept: a fleet holds
    a million values (2,000 GPUs of 590 facts), each a Python object otherwise."""
    import numpy as np

    if not scored:
        return [[] for _ in range(gpus)]
    # each GPU is one model's: ``which`` (the position in ``scored``, sorted by key within a model) breaks ties
    which = np.concatenate([np.full(len(s.owners), i) for i, s in enumerate(scored)])
    owners = np.concatenate([np.asarray(s.owners, dtype=np.intp) for s in scored])
    z = np.concatenate([s.stats.z for s in scored])
    order = np.lexsort((which, -np.abs(z), owners))
    in_order = owners[order]
    rank = np.arange(len(order)) - np.searchsorted(in_order, in_order)  # the place within its GPU's deviations
    beyond = np.bincount(owners[np.abs(z) > threshold], minlength=gpus)
    kept = order[rank < np.maximum(beyond, FACTS_PER_GPU)[in_order]]
    values, zs, owned, facts = (np.concatenate([s.values for s in scored]).tolist(), z.tolist(), owners.tolist(),
                                which.tolist())  # fmt: skip
    worst: list[list[Deviation]] = [[] for _ in range(gpus)]
    for i in kept.tolist():
        fact = scored[facts[i]]
        worst[owned[i]].append(Deviation(*fact.key, values[i], fact.stats.median, zs[i]))
    return worst


def library_gaps(scored: Sequence[_Scored], summaries: Sequence[FileSummary], threshold: float) -> list[LibraryGap]:
    """Each GPU with a library rate (:data:`LIBRARY_RATES`) below its model's median beyond the threshold while none
    of its tensor-core instruction rates (:data:`INSTRUCTION_RATES`; at least one judged) is: worst library rate
    first. A rate both ways (TFLOP/s and its fraction of the peak at its clock): a library slow at a normal clock
    is low per clock, one whose clock sags under its load is low in TFLOP/s alone."""
    low: dict[int, list[Deviation]] = defaultdict(list)
    lowest: dict[int, Deviation] = {}
    judged: Counter[int] = Counter()
    for rated in (s for s in scored if s.key[0].endswith(RATE_SUFFIXES)):
        fact_id, unit = rated.key
        library, instruction = fact_id.startswith(LIBRARY_RATES), fact_id.startswith(INSTRUCTION_RATES)
        if not (library or instruction):
            continue
        for owner, value, z in zip(rated.owners, rated.values.tolist(), rated.stats.z.tolist(), strict=True):
            if library and z < -threshold:
                low[owner].append(Deviation(fact_id, unit, value, rated.stats.median, z))
            elif instruction:
                judged[owner] += 1
                if owner not in lowest or z < lowest[owner].z:
                    lowest[owner] = Deviation(fact_id, unit, value, rated.stats.median, z)
    gaps = [LibraryGap(summaries[o].gpu, sorted(low[o], key=lambda d: (d.z, d.fact_id)), lowest[o], judged[o])
            for o in low if o in lowest and lowest[o].z >= -threshold]  # fmt: skip
    return sorted(gaps, key=lambda g: (g.library[0].z, g.gpu.file))


def _some(names: Sequence[str]) -> str:
    """``a, b, c and 12 more``: a list a note can hold."""
    named = ", ".join(names[:NAMED_IN_A_NOTE])
    rest = len(names) - NAMED_IN_A_NOTE
    return f"{named} and {rest} more" if rest > 0 else named


def _model_notes(model: str, facts: list[FactStats], gpus: int, min_deviation_pct: float) -> list[str]:
    """At most three lines for one model, however many facts it has."""
    if gpus < MIN_GPUS_TO_JUDGE:
        return [f"{model}: only {gpus} GPU(s); distributions shown, no outliers judged (needs {MIN_GPUS_TO_JUDGE})"]
    judged = [f for f in facts if f.judged]
    counts = Counter(f.source for f in judged)
    words = {
        "spread": "the GPUs' spread",
        "noise": "the facts' measured noise",
        PRACTICAL: f"the {min_deviation_pct:g} % practical floor",
        EXACT: "exactness (no noise: any difference counts)",
    }
    parts = [f"{words[source]} for {counts[source]}" for source in SOURCES if counts[source]]
    notes = [f"{model}: the z scale came from {'; '.join(parts)} of {len(judged)} facts"] if parts else []
    units = Counter(f.fact_id for f in facts)
    split = sorted(fact_id for fact_id, count in units.items() if count > 1)
    if split:
        notes.append(f"{model}: {len(split)} fact(s) come in several units ({_some(split)}); each unit on its own")
    return notes


def _fleet_notes(summaries: Sequence[FileSummary]) -> list[str]:
    notes = []
    partial = sum(s.gpu.partial for s in summaries)
    if partial:
        notes.append(
            f"{partial} results file(s) are partial (the run did not finish, marked so in the ranking): "
            f"their missing facts are absent"
        )
    simulated = [s.gpu.file for s in summaries if s.gpu.simulated]
    if simulated:
        notes.append(
            f"{len(simulated)} results file(s) are SIMULATED (gpuprobe demo; marked so in the ranking): no GPU was "
            f"measured in {_some(simulated)}"
        )
    empty = sum(not s.facts for s in summaries)
    if empty:
        notes.append(f"{empty} results file(s) hold no measured fact")
    changed = [s for s in summaries if s.verdict_changes]
    notes += [f"{s.gpu.file}: {s.verdict_changes}" for s in changed[:NAMED_IN_A_NOTE]]
    if len(changed) > NAMED_IN_A_NOTE:
        notes.append(f"{len(changed) - NAMED_IN_A_NOTE} more results file(s) hold stored verdicts judged otherwise now")
    return notes


def aggregate_summaries(
    summaries: Sequence[FileSummary],
    threshold: float = DEFAULT_THRESHOLD,
    skipped: Iterable[Skipped] = (),
    min_deviation_pct: float = DEFAULT_MIN_DEVIATION_PCT,
) -> FleetReport:
    """The fleet report over already-read files: distributions and robust z per model and fact."""
    if not (threshold > 0 and math.isfinite(threshold)):
        raise GpuprobeError(f"fleet: the outlier threshold must be a positive z-score, not {threshold}")
    if not (min_deviation_pct >= 0 and math.isfinite(min_deviation_pct)):
        raise GpuprobeError(f"fleet: the smallest deviation must be a percentage >= 0, not {min_deviation_pct}")
    scored: list[_Scored] = []
    models: list[ModelGroup] = []
    notes: list[str] = []
    collected = _collect(summaries)
    judged = sum(len(g.values) for groups in collected.values() for g in groups.values()
                 if len(g.values) >= MIN_GPUS_TO_JUDGE)  # fmt: skip
    rule = Rule(threshold, min_deviation_pct, judged)
    for model, groups in collected.items():
        facts = []
        for key in sorted(groups):
            fact, stats, values = _fact_stats(key, groups[key], rule)
            facts.append(fact)
            if fact.judged:
                scored.append(_Scored(key, groups[key].owners, values, stats))
        gpus = sum(s.gpu.model == model for s in summaries)
        models.append(ModelGroup(model, gpus, facts))
        notes.extend(_model_notes(model, facts, gpus, min_deviation_pct))
    models.sort(key=lambda m: (-m.gpus, m.model))
    worst = _worst(scored, len(summaries), threshold)
    ranking = [GpuScore(s.gpu, kept, abs(kept[0].z) if kept else 0.0) for s, kept in zip(summaries, worst, strict=True)]
    ranking.sort(key=lambda s: (-s.max_abs_z, s.gpu.file))
    notes += _fleet_notes(summaries)
    origins = [(s.gpu.file, s.origin) for s in summaries]
    gaps = library_gaps(scored, summaries, threshold)
    return FleetReport(rule, models, ranking, list(skipped), notes, fleet_lines(origins), hosts_text(origins), gaps)


def aggregate(
    results: Iterable[tuple[str, Results]],
    threshold: float = DEFAULT_THRESHOLD,
    min_deviation_pct: float = DEFAULT_MIN_DEVIATION_PCT,
) -> FleetReport:
    """The fleet report over ``(source, Results)`` pairs, one per GPU; pure, no I/O."""
    summaries = [summarize(source, r) for source, r in results]
    return aggregate_summaries(summaries, threshold, min_deviation_pct=min_deviation_pct)


def aggregate_paths(
    paths: Iterable[str | Path],
    threshold: float = DEFAULT_THRESHOLD,
    jobs: int | None = None,
    min_deviation_pct: float = DEFAULT_MIN_DEVIATION_PCT,
) -> FleetReport:
    """Discover, read and aggregate; unreadable files are skipped, and none readable is an error."""
    files, skipped = discover(paths)
    summaries, unreadable = load_summaries(files, jobs)
    skipped += unreadable
    if not summaries:
        detail = "; ".join(f"{s.path}: {s.reason}" for s in skipped[:3]) + ("; ..." if len(skipped) > 3 else "")
        raise GpuprobeError(f"fleet: no readable gpuprobe results ({detail or 'no .json files found'})")
    return aggregate_summaries(summaries, threshold, skipped, min_deviation_pct)


# ---------------------------------------------------------------- rendering ----------------


def _num(value: float | None) -> str:
    return "-" if value is None else fmt_bound(value)


def _identity_cells(gpu: GpuIdentity) -> list[str]:
    return [
        gpu.file + (" (partial)" if gpu.partial else "") + (" (SIMULATED)" if gpu.simulated else ""),
        gpu.model,
        gpu.hostname or "-",
        "-" if gpu.gpu_index is None else str(gpu.gpu_index),
        gpu.uuid or "-",
    ]


FACT_HEADERS = ("fact", "unit", "n", "median", "MAD", "noise", "z scale", "min", "p5", "p95", "max", "outliers")
WORST_HEADERS = ("#", "max |z|", "file", "model", "host", "gpu", "uuid", "worst facts")
NUMERIC = {"n", "median", "MAD", "noise", "min", "p5", "p95", "max", "outliers", "#", "max |z|", "gpu"}


def _relative(value: float, median: float) -> str:
    """``0.52 %`` of the median; the number itself for a median of 0."""
    return f"{percent_text(value / abs(median) * 100.0)} %" if median else _num(value)


def _fact_row(f: FactStats) -> list[str]:
    return [
        f.fact_id,
        f.unit,
        str(f.count),
        _num(f.median),
        _num(f.mad),
        "-" if f.source == EXACT else _relative(f.noise, f.median),
        f"{_relative(f.scale, f.median)} {f.source}" if f.judged else "-",
        _num(f.minimum),
        _num(f.p5),
        _num(f.p95),
        _num(f.maximum),
        str(f.outliers) if f.judged else "-",
    ]


def _worst_rows(report: FleetReport, top: int) -> list[list[str]]:
    rows = []
    for rank, score in enumerate(report.ranking[:top], start=1):
        facts = "; ".join(d.text() for d in score.deviations[:FACTS_PER_GPU]) or "-"
        rows.append([str(rank), f"{score.max_abs_z:.1f}", *_identity_cells(score.gpu), facts])
    return rows


def _summary_line(report: FleetReport) -> str:
    models = len(report.models)
    hosts = f", {report.hosts}" if report.hosts else ""
    text = (
        f"{report.gpus} GPU(s) from {report.gpus} results file(s){hosts}, {models} GPU model(s); "
        f"{len(report.outliers)} outlier GPU(s) with |z| > {report.threshold:g}"
    )
    return text + (f"; {len(report.skipped)} file(s) skipped" if report.skipped else "")


def method_lines(rule: Rule) -> list[str]:
    """How z is computed and what makes an outlier: the lines under the report's summary (a head line, the
    three scales indented, a tail line)."""
    threshold, pct = f"{rule.threshold:g}", f"{rule.min_deviation_pct:g}"
    return [
        f"z = (x - median) / scale within each GPU model; a GPU with any |z| > {threshold} is an outlier. "
        f"The scale is the largest of:",
        "  the GPUs' spread: MAD / 0.6745;",
        f"  the fact's noise (its confidence interval, and {allowance_text()} between runs) times "
        f"{rule.noise_quantile:.2f} / {threshold}: noise alone then makes an outlier in {FLEET_ALPHA * 100:g} % of "
        f"reports on identical GPUs (Bonferroni over the {rule.values_judged} values judged);",
        f"  the practical floor: {pct} % of the median / {threshold}, so an outlier is more than {pct} % off "
        f"(--min-deviation).",
        f"Exact facts (counts, sizes, invariants: no noise) count any difference: their scale is at least "
        f"{EXACT_FLOOR * 100:g} % of the median.",
    ]


def _worst_title(report: FleetReport, top: int) -> str:
    listed = min(top, report.gpus)
    return f"worst GPUs ({listed} of {report.gpus} shown; {len(report.outliers)} beyond |z| > {report.threshold:g})"


_GAPS_TITLE = "library slower than its tensor cores ({})"


def _render_text(report: FleetReport, top: int) -> str:
    warnings = [f"WARNING: {line}" for line in report.warnings]
    out = [*warnings, f"gpuprobe fleet: {_summary_line(report)}", *method_lines(report.rule)]
    for m in report.models:
        rows = [_fact_row(f) for f in m.facts]
        out += ["", f"== {m.model}: {m.gpus} GPU(s) ==", *text_table(FACT_HEADERS, rows, NUMERIC)]
    out += ["", _worst_title(report, top), *text_table(WORST_HEADERS, _worst_rows(report, top), NUMERIC)]
    if report.library_gaps:
        out += ["", _GAPS_TITLE.format(len(report.library_gaps)), *(f"  {g.text()}" for g in report.library_gaps)]
    if report.skipped:
        out += ["", f"skipped files ({len(report.skipped)})", *(f"  {s.path}: {s.reason}" for s in report.skipped)]
    if report.notes:
        out += ["", "notes", *(f"  - {n}" for n in report.notes)]
    return "\n".join(shown(line) for line in out) + "\n"  # a model name's line break too


def _md_method(rule: Rule) -> list[str]:
    """The method lines as a paragraph, a list of the three scales, and a paragraph."""
    head, *scales, tail = method_lines(rule)
    return [md_text(head), *(f"- {md_text(line.strip())}" for line in scales), "", md_text(tail)]


def _render_md(report: FleetReport, top: int) -> str:
    warnings = md_warnings([f"WARNING: {line}" for line in report.warnings])
    out = [
        *warnings,
        *([""] if warnings else []),
        "# gpuprobe fleet",
        "",
        _summary_line(report) + ".",
        "",
        *_md_method(report.rule),
    ]
    for m in report.models:
        rows = [_fact_row(f) for f in m.facts]
        out += ["", f"## {md_text(m.model)} ({m.gpus} GPUs)", "", *md_table(FACT_HEADERS, rows, NUMERIC)]
    worst = md_table(WORST_HEADERS, _worst_rows(report, top), NUMERIC)
    title = _worst_title(report, top)
    out += ["", f"## {title[0].upper()}{title[1:]}", "", *worst]
    if report.library_gaps:
        title = _GAPS_TITLE.format(len(report.library_gaps))
        out += ["", f"## {title[0].upper()}{title[1:]}", "", *(f"- {md_text(g.text())}" for g in report.library_gaps)]
    if report.skipped:
        out += ["", f"## Skipped files ({len(report.skipped)})", ""]
        out += [f"- {md_code(s.path)}: {md_text(s.reason)}" for s in report.skipped]
    if report.notes:
        out += ["", "## Notes", "", *(f"- {md_text(n)}" for n in report.notes)]
    return "\n".join(shown(line) for line in out) + "\n"


def render(report: FleetReport, fmt: str = "text", top: int = WORST_SHOWN) -> str:
    """The report as ``text`` (aligned columns), ``md`` (Markdown tables) or ``json`` (everything)."""
    if fmt == "json":
        return json.dumps(report.to_dict(), indent=1) + "\n"
    if fmt == "md":
        return _render_md(report, top)
    if fmt == "text":
        return _render_text(report, top)
    raise GpuprobeError(f"fleet: unknown format {fmt!r} (choose from {', '.join(FORMATS)})")
