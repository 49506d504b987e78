"""What each GPU model is expected to measure: data files, their strict loader, and the judge.

Expectations are data, not code: a model file per GPU model (``gpuprobe/expectations/<model>.toml``:
``[model]``, ``[device]``, the device facts) and one file per family holding every model's expectations of
its facts (``gpuprobe/families/<family>/expectations.toml``), merged on load. docs/expectations.md gives
the TOML format and the rules a file is held to.
"""

from __future__ import annotations

import difflib
import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.files import read_toml
from gpuprobe.core.numbers import fmt_bound
from gpuprobe.core.results import Fact, fact_matches

SEVERITIES = ("assert", "warn", "report")
# A tensor-core or ALU rate: a per-clock peak times the SM clock it ran at. A range of one judges that clock as much
# as the part, so it is a warn at most, and its verdict states the clock (gpuprobe.judge.verdicts.state_clocks);
# what is judged of the part is its per-clock figure (op/clk/SM, fraction_of_peak).
ABSOLUTE_RATE_UNITS = frozenset({"TFLOP/s", "TOP/s", "GFLOP/s"})

#: Units of the fact ids this module knows; a file may expect other facts (any a probe declares), with any unit.
KNOWN_UNITS: dict[str, str] = {
    "latency.shared": "cycle",
    "latency.l1": "cycle",
    "latency.l2": "cycle",
    "latency.l2_far": "cycle",
    "latency.dram": "cycle",
    "capacity.l1": "byte",
    "capacity.l2": "byte",
    "device.sm_count": "count",
    "device.l2_bytes": "byte",
}

DEFAULT_DIRECTORY = Path(__file__).resolve().parents[1] / "expectations"  # the models: [model], [device], device facts
FAMILIES_DIRECTORY = Path(__file__).resolve().parents[1] / "families"  # <family>/expectations.toml

_MODEL_FIELDS = frozenset({"name", "match", "exclude", "cc", "memory"})
_FACT_FIELDS = frozenset({"min", "max", "value", "tolerance", "unit", "severity", "source", "note", "published"})
_PUBLISHED_FIELDS = frozenset({"min", "max", "value", "unit", "part", "method", "source"})
_TOP_FIELDS = frozenset({"model", "facts", "datasheet", "device"})
# [device]: what the part reports, field -> the Device field it fills (all but ``source`` required)
DEVICE_RECORD_FIELDS: dict[str, str] = {
    "sm_count": "sm_count", "l2_bytes": "l2_bytes", "mem_bytes": "mem_bytes", "sm_clock_mhz": "sm_clock_nominal_mhz",
    "mem_clock_mhz": "mem_clock_mhz", "mem_bus_bits": "mem_bus_bits", "shared_per_sm_bytes": "shared_per_sm_bytes",
    "shared_per_block_optin_bytes": "shared_per_block_optin_bytes",
}  # fmt: skip
_FAMILY_FILE_FIELDS = frozenset({"facts", "datasheet"})
_DATASHEET_FIELDS = frozenset({"value", "unit", "source", "note"})
_KEY_RE = re.compile(r"^[a-z0-9][a-z0-9_]*$")
_FACT_ID_RE = re.compile(r"^[a-z0-9_]+(\.[a-z0-9_]+)*\.([a-z0-9_]+|\*)$")
_CC_RE = re.compile(r"^\d+\.\d+$")


@dataclass(frozen=True)
class Expectation:
    """The expected range of one fact on one GPU model, with its severity and citation."""

    fact_id: str
    low: float | None
    high: float | None
    unit: str
    severity: str
    source: str
    note: str = ""

    def contains(self, value: float) -> bool:
        """True when ``value`` lies within the bounds (inclusive)."""
        return (self.low is None or value >= self.low) and (self.high is None or value <= self.high)

    def range_text(self) -> str:
        """The bounds in words, e.g. ``200–320 cycle``, ``≥ 16384 byte`` or ``no range``."""
        if self.low is not None and self.high is not None:
            if self.low == self.high:
                return f"{fmt_bound(self.low)} {self.unit}"
            return f"{fmt_bound(self.low)}–{fmt_bound(self.high)} {self.unit}"
        if self.low is not None:
            return f"≥ {fmt_bound(self.low)} {self.unit}"
        if self.high is not None:
            return f"≤ {fmt_bound(self.high)} {self.unit}"
        return "no range"

    def describe(self) -> str:
        """One line for reports and failure messages, e.g. ``200–320 cycle (warn; Luo et al. ...)``."""
        return f"{self.range_text()} ({self.severity}; {self.source})"


@dataclass(frozen=True)
class ModelExpectations:
    """Everything expected of one GPU model, keyed by fact id."""

    key: str
    name: str
    match: tuple[str, ...]
    cc: str
    facts: dict[str, Expectation]
    exclude: tuple[str, ...] = ()
    memory: str = ""  # the memory type, from the datasheet (CUDA does not report it)
    datasheet: dict[str, DatasheetValue] = field(default_factory=dict)  # peaks the probes are held against
    device: dict[str, float] = field(default_factory=dict)  # [device]: what the part reports (empty if not given)
    published: dict[str, tuple[Published, ...]] = field(default_factory=dict)  # fact id -> measurements, cited

    def expectation_for(self, fact_id: str) -> Expectation | None:
        """What ``fact_id`` is held to: its own expectation, else the one of its prefix and ``.*``
        (:func:`~gpuprobe.core.results.fact_matches`)."""
        return self.facts.get(fact_id) or self.facts.get(f"{fact_id.rsplit('.', 1)[0]}.*")

    def published_for(self, fact_id: str) -> tuple[Published, ...]:
        """The published measurements of ``fact_id`` on this model (those of its ``.*`` pattern otherwise)."""
        return self.published.get(fact_id) or self.published.get(f"{fact_id.rsplit('.', 1)[0]}.*", ())

    def matching_pattern(self, device_name: str) -> str | None:
        """The longest of this model's patterns that matches ``device_name``, or None."""
        if any(_occurs(pattern, device_name) for pattern in self.exclude):
            return None
        hits = [pattern for pattern in self.match if _occurs(pattern, device_name)]
        return max(hits, key=len) if hits else None


def _occurs(pattern: str, name: str) -> bool:
    """Case-insensitive occurrence of ``pattern`` in ``name``, not glued to a letter or digit."""
    regex = r"(?<![0-9a-z])" + re.escape(pattern.lower()) + r"(?![0-9a-z])"
    return re.search(regex, name.lower()) is not None


# --- loading -------------------------------------------------------------------------------------


def _bad(path: Path, key: str, problem: str) -> GpuprobeError:
    """The one-line error for a bad expectations file."""
    return GpuprobeError(f"{path}: {key}: {problem}")


def _is_number(value: Any) -> bool:
    """A finite number a float can hold (an integer of 400 digits is not one)."""
    if not isinstance(value, int | float) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def _text(path: Path, key: str, value: Any, *, required: bool = True) -> str:
    """A non-empty string field (or "" when optional and absent)."""
    if value is None and not required:
        return ""
    if not isinstance(value, str) or not value.strip():
        raise _bad(path, key, "must be a non-empty string")
    return value.strip()


def _patterns(path: Path, key: str, value: Any, *, required: bool) -> tuple[str, ...]:
    """A list of non-empty device-name patterns."""
    if value is None and not required:
        return ()
    if not isinstance(value, list) or (required and not value):
        raise _bad(path, key, "must be a non-empty list of device-name substrings")
    if not all(isinstance(item, str) and item.strip() for item in value):
        raise _bad(path, key, "every pattern must be a non-empty string")
    return tuple(item.strip() for item in value)


@dataclass(frozen=True)
class DatasheetValue:
    """A vendor figure a probe is measured against (a peak bandwidth, a peak rate), with its source."""

    key: str
    value: float
    unit: str
    source: str
    note: str = ""


@dataclass(frozen=True)
class Published:
    """One published measurement of a fact on a model (``published = [{...}]`` under its expectation): a value
    or a spread (``low`` to ``high``), on which part, by which method, and where it is published."""

    low: float
    high: float
    unit: str
    part: str
    method: str
    source: str

    def value_text(self) -> str:
        """ "29" or "279–282", without the unit."""
        return fmt_bound(self.low) if self.low == self.high else f"{fmt_bound(self.low)}–{fmt_bound(self.high)}"

    def distance(self, value: float) -> float:
        """How far ``value`` lies from this measurement, relative to it (0 inside its spread)."""
        gap = max(self.low - value, value - self.high, 0.0)
        return gap / max(abs(self.low), abs(self.high), 1e-300)


def _parse_published(path: Path, key: str, value: Any, unit: str) -> tuple[Published, ...]:
    """An expectation's ``published`` list, validated: each entry a value (``value``, or ``min`` and ``max``) in
    the expectation's ``unit``, with its ``part``, ``method`` and ``source``."""
    if value is None:
        return ()
    if not isinstance(value, list) or not value:
        raise _bad(path, f"{key}.published", "must be a non-empty list of tables {value, unit, part, method, source}")
    entries = []
    for index, entry in enumerate(value):
        where = f"{key}.published[{index}]"
        entry = _check_fields(path, where, entry, _PUBLISHED_FIELDS)
        if "value" in entry and ("min" in entry or "max" in entry):
            raise _bad(path, where, "give either value or min and max, not both")
        names = ("value",) if "value" in entry or not ("min" in entry or "max" in entry) else ("min", "max")
        for name in names:
            if not _is_number(entry.get(name)):
                raise _bad(path, f"{where}.{name}", "must be a finite number")
        low, high = (float(entry["value"]),) * 2 if "value" in entry else (float(entry["min"]), float(entry["max"]))
        if low > high:
            raise _bad(path, where, f"min {fmt_bound(low)} > max {fmt_bound(high)}")
        shown = _text(path, f"{where}.unit", entry.get("unit"))
        if shown != unit:
            raise _bad(path, f"{where}.unit", f"unit mismatch: the expectation is in {unit!r}, not {shown!r}")
        texts = [_text(path, f"{where}.{name}", entry.get(name)) for name in ("part", "method", "source")]
        entries.append(Published(low, high, unit, *texts))
    return tuple(entries)


def _parse_datasheet(path: Path, data: dict[str, Any]) -> dict[str, DatasheetValue]:
    """The ``[datasheet."<key>"]`` tables of a model file, validated."""
    table = _table(path, "datasheet", data.get("datasheet", {}))
    return {name: _datasheet_entry(path, name, entry) for name, entry in table.items()}


def _datasheet_entry(path: Path, name: str, entry: Any, model: str = "") -> DatasheetValue:
    """One datasheet figure (``[datasheet."<key>"]``, in a family file ``[datasheet."<key>".<model>]``), validated."""
    key = f'datasheet."{name}"' + (f".{model}" if model else "")
    if not _KEY_RE.match(name):
        raise _bad(path, key, "datasheet key must be lower case letters, digits and underscores")
    entry = _check_fields(path, key, entry, _DATASHEET_FIELDS)
    if not _is_number(entry.get("value")) or float(entry["value"]) <= 0:
        raise _bad(path, f"{key}.value", "must be a positive finite number")
    unit = _text(path, f"{key}.unit", entry.get("unit"))
    source = _text(path, f"{key}.source", entry.get("source"))
    note = _text(path, f"{key}.note", entry.get("note"), required=False)
    return DatasheetValue(name, float(entry["value"]), unit, source, note)


def _table(path: Path, key: str, value: Any) -> dict[str, Any]:
    """``value``, which must be a TOML table (of tables)."""
    if not isinstance(value, dict):
        raise _bad(path, key, "must be a table of tables")
    return value


def _check_fields(path: Path, key: str, table: Any, allowed: frozenset[str]) -> dict[str, Any]:
    """The table as a dict, refusing any field not in ``allowed``."""
    if not isinstance(table, dict):
        raise _bad(path, key, "must be a table")
    unknown = sorted(set(table) - allowed)
    if unknown:
        raise _bad(path, f"{key}.{unknown[0]}", f"unknown field (allowed: {', '.join(sorted(allowed))})")
    return table


def _bounds(path: Path, key: str, table: dict[str, Any]) -> tuple[float | None, float | None]:
    """Resolve ``min``/``max`` or ``value``/``tolerance`` into (low, high)."""
    for name in ("min", "max", "value", "tolerance"):
        if name in table and not _is_number(table[name]):
            raise _bad(path, f"{key}.{name}", "must be a finite number")
    has_range = "min" in table or "max" in table
    if has_range and ("value" in table or "tolerance" in table):
        raise _bad(path, key, "give either min/max or value/tolerance, not both")
    if "value" in table:
        if "tolerance" not in table:
            raise _bad(path, key, "value without tolerance (relative, e.g. tolerance = 0.1; 0 for exact)")
        value, tolerance = float(table["value"]), float(table["tolerance"])
        if not 0.0 <= tolerance < 1.0:
            raise _bad(path, f"{key}.tolerance", f"relative tolerance must be in [0, 1), got {tolerance}")
        spread = abs(value) * tolerance
        return value - spread, value + spread
    if "tolerance" in table:
        raise _bad(path, key, "tolerance without value")
    low = float(table["min"]) if "min" in table else None
    high = float(table["max"]) if "max" in table else None
    if low is not None and high is not None and low > high:
        raise _bad(path, key, f"min {fmt_bound(low)} > max {fmt_bound(high)}")
    return low, high


DEVICE_FACT_IDS = ("device.sm_count", "device.l2_bytes")  # what the part reports, recorded as facts by every run


@functools.cache
def declared_fact_ids() -> frozenset[str]:
    """Every fact id a probe declares (its ``facts`` in the probe registry), and the device's own facts."""
    from gpuprobe.kernels.registry import all_probes

    return frozenset({fact for probe in all_probes() for fact in probe.facts} | set(DEVICE_FACT_IDS))


def is_declared(fact_id: str) -> bool:
    """Whether ``fact_id`` (or the pattern ``fact_id`` ending in ``.*``) is a fact some probe declares: an
    expectation of any other id would never judge a thing (a typo such as ``latency.l2x`` goes unnoticed)."""
    declared = declared_fact_ids()
    return fact_id in declared or any(fact_matches(d, fact_id) for d in declared if d.endswith(".*"))


def _parse_fact(path: Path, fact_id: str, table: Any, model: str = "") -> tuple[Expectation, tuple[Published, ...]]:
    """One ``[facts."<id>"]`` table (in a family file ``[facts."<id>".<model>]``), validated: the expectation, and
    the published measurements it lists."""
    key = f'facts."{fact_id}"' + (f".{model}" if model else "")
    if not _FACT_ID_RE.match(fact_id):
        raise _bad(path, key, 'fact id must be dotted lower case and quoted, e.g. [facts."latency.l2"]')
    if not is_declared(fact_id):
        close = difflib.get_close_matches(fact_id, declared_fact_ids(), n=1)
        raise _bad(path, key, f"no probe measures {fact_id!r}" + (f" (did you mean {close[0]!r}?)" if close else "")
                   + ": an expectation is of a fact a probe declares (gpuprobe list --json shows them)")  # fmt: skip
    table = _check_fields(path, key, table, _FACT_FIELDS)
    unit = _text(path, f"{key}.unit", table.get("unit"))
    expected_unit = KNOWN_UNITS.get(fact_id)
    if expected_unit is not None and unit != expected_unit:
        raise _bad(path, f"{key}.unit", f"unit mismatch: {fact_id} is measured in {expected_unit!r}, not {unit!r}")
    severity = table.get("severity")
    if severity not in SEVERITIES:
        raise _bad(path, f"{key}.severity", f"unknown severity {severity!r} (use one of {', '.join(SEVERITIES)})")
    source = _text(path, f"{key}.source", table.get("source"))
    note = _text(path, f"{key}.note", table.get("note"), required=False)
    low, high = _bounds(path, key, table)
    if severity != "report" and low is None and high is None:
        raise _bad(path, key, f"severity {severity!r} needs a range (min/max or value/tolerance)")
    if severity != "report" and unit == "fraction" and (low is None or high is None):
        raise _bad(path, key, "a ratio is judged on both sides: give min and max")
    if severity == "assert" and unit in ABSOLUTE_RATE_UNITS:
        raise _bad(path, key, f"an absolute rate ({unit}) judges the clock it ran at: warn at most, judged per clock")
    return Expectation(fact_id, low, high, unit, severity, source, note), _parse_published(
        path, key, table.get("published"), unit
    )


def _parse_model(path: Path, key: str, data: dict[str, Any]) -> ModelExpectations:
    """The whole document of one file, validated."""
    _check_fields(path, "(top level)", data, _TOP_FIELDS)
    if "model" not in data:
        raise _bad(path, "model", "missing [model] table")
    model = _check_fields(path, "model", data["model"], _MODEL_FIELDS)
    name = _text(path, "model.name", model.get("name"))
    match = _patterns(path, "model.match", model.get("match"), required=True)
    exclude = _patterns(path, "model.exclude", model.get("exclude"), required=False)
    cc = model.get("cc")
    if not isinstance(cc, str) or not _CC_RE.match(cc):
        raise _bad(path, "model.cc", f'compute capability must be a string like "9.0", got {cc!r}')
    memory = _text(path, "model.memory", model.get("memory"), required=False)
    facts_table = data.get("facts", {})
    if not isinstance(facts_table, dict):
        raise _bad(path, "facts", "must be a table of fact tables")
    parsed = {fact_id: _parse_fact(path, fact_id, table) for fact_id, table in facts_table.items()}
    facts = {fact_id: expectation for fact_id, (expectation, _) in parsed.items()}
    published = {fact_id: found for fact_id, (_, found) in parsed.items() if found}
    datasheet = _parse_datasheet(path, data)
    device = _parse_device(path, data)
    return ModelExpectations(key, name, match, cc, facts, exclude, memory, datasheet, device, published)


def _parse_device(path: Path, data: dict[str, Any]) -> dict[str, float]:
    """The ``[device]`` table: every field a positive number, and a source."""
    if "device" not in data:
        return {}
    table = _check_fields(path, "device", data["device"], frozenset({*DEVICE_RECORD_FIELDS, "source"}))
    _text(path, "device.source", table.get("source"))
    record = {}
    for name in DEVICE_RECORD_FIELDS:
        value = table.get(name)
        if not _is_number(value) or value <= 0:
            raise _bad(path, f"device.{name}", f"must be a positive number, got {value!r}")
        record[name] = float(value)
    return record


def load_model_file(path: Path) -> ModelExpectations:
    """Load and validate one model file; any problem raises GpuprobeError naming file and key."""
    path = Path(path)
    key = path.stem
    if not _KEY_RE.match(key):
        raise _bad(path, "(file name)", f"model key {key!r} must be lower case letters, digits and underscores")
    return _parse_model(path, key, read_toml(path))


@dataclass(frozen=True)
class FamilyEntries:
    """What one family's file holds for one model: expectations, datasheet figures, published measurements."""

    facts: dict[str, Expectation] = field(default_factory=dict)
    datasheet: dict[str, DatasheetValue] = field(default_factory=dict)
    published: dict[str, tuple[Published, ...]] = field(default_factory=dict)


def _family_file(path: Path) -> dict[str, FamilyEntries]:
    """The facts, datasheet figures and published measurements of one family's file (``[facts."<id>".<model>]``,
    ``[datasheet."<key>".<model>]``), by model key."""
    data = read_toml(path)
    _check_fields(path, "(top level)", data, _FAMILY_FILE_FIELDS)
    by_model: dict[str, FamilyEntries] = {}
    for fact_id, per_model in _table(path, "facts", data.get("facts", {})).items():
        for model, table in _table(path, f'facts."{fact_id}"', per_model).items():
            entries = by_model.setdefault(model, FamilyEntries())
            entries.facts[fact_id], published = _parse_fact(path, fact_id, table, model)
            if published:
                entries.published[fact_id] = published
    for name, per_model in _table(path, "datasheet", data.get("datasheet", {})).items():
        for model, entry in _table(path, f'datasheet."{name}"', per_model).items():
            by_model.setdefault(model, FamilyEntries()).datasheet[name] = _datasheet_entry(path, name, entry, model)
    return by_model


def family_files(families: Path) -> list[Path]:
    """Every family's expectations file: ``<family>/expectations.toml`` under ``families``."""
    return sorted(families.glob("*/expectations.toml"))


def families_expecting(key: str, families: Path | None = None) -> list[str]:
    """The families whose expectations file holds entries for model ``key``."""
    held = family_files(FAMILIES_DIRECTORY if families is None else families)
    return [path.parent.name for path in held if key in _family_file(path)]


def _merge_family_files(directory: Path, families: Path, models: dict[str, ModelExpectations]) -> None:
    """Add each family's facts and datasheet figures (``<family>/expectations.toml``) to their models; a
    model without a file of its own, or an entry given twice, is an error."""
    for path in family_files(families):
        for key, held in _family_file(path).items():
            model = models.get(key)
            if model is None:
                raise _bad(path, key, f"no model {key!r} ({directory / (key + '.toml')} is missing)")
            for target, entries in ((model.facts, held.facts), (model.datasheet, held.datasheet),
                                    (model.published, held.published)):  # fmt: skip
                for name, entry in entries.items():
                    if name in target:
                        raise _bad(path, f"{name}.{key}", f"{key} has it already (given twice)")
                    target[name] = entry  # type: ignore[index]


def _check_overlaps(directory: Path, models: dict[str, ModelExpectations]) -> None:
    """Refuse a pattern that two models share: the match would depend on file order."""
    owner: dict[str, str] = {}
    for model in models.values():
        for pattern in model.match:
            other = owner.setdefault(pattern.lower(), model.key)
            if other != model.key:
                path = directory / f"{model.key}.toml"
                raise _bad(path, "model.match", f"pattern {pattern!r} is also used by {other}.toml")


def load_all(directory: Path | None = None) -> dict[str, ModelExpectations]:
    """Load every ``*.toml`` in ``directory`` (default: the shipped models), keyed by model key, with the
    facts of the family files (``<family>/expectations.toml``, under the shipped families or, for another
    ``directory``, under it) merged in."""
    families = FAMILIES_DIRECTORY if directory is None else Path(directory)
    directory = DEFAULT_DIRECTORY if directory is None else Path(directory)
    if not directory.is_dir():
        raise GpuprobeError(f"{directory}: expectations directory not found")
    models = {path.stem: load_model_file(path) for path in sorted(directory.glob("*.toml"))}
    _merge_family_files(directory, families, models)
    _check_overlaps(directory, models)
    return models


# --- matching ------------------------------------------------------------------------------------


def match_model(
    device_name: str, forced: str | None = None, models: dict[str, ModelExpectations] | None = None
) -> ModelExpectations | None:
    """The expectations for ``device_name``, or None for an unknown GPU (discovery mode).

    ``forced`` names a model key to use whatever the device is called; an unknown key raises
    GpuprobeError listing the known ones. When several models match, the one whose matching
    pattern is longest wins; a tie between two models is an error in the data.
    """
    models = load_all() if models is None else models
    if forced is not None:
        if forced not in models:
            known = ", ".join(sorted(models)) or "(none)"
            raise GpuprobeError(f"unknown GPU model {forced!r}; known models: {known}")
        return models[forced]
    hits = [(len(p), m) for m in models.values() if (p := m.matching_pattern(device_name)) is not None]
    if not hits:
        return None
    hits.sort(key=lambda hit: hit[0], reverse=True)
    if len(hits) > 1 and hits[0][0] == hits[1][0]:
        raise GpuprobeError(
            f"device {device_name!r} matches models {hits[0][1].key} and {hits[1][1].key} equally well; "
            "make one of their match patterns more specific"
        )
    return hits[0][1]


# --- judging -------------------------------------------------------------------------------------


def _measured_text(fact: Fact) -> str:
    """What was measured, e.g. ``latency.l2 = 263.1 cycle (CI 260.2–266.0; 134.2 ns)``."""
    parts = []
    if fact.ci is not None:
        parts.append(f"CI {fmt_bound(fact.ci[0])}–{fmt_bound(fact.ci[1])}")
    else:
        parts.append("no CI")
    parts.extend(f"{fmt_bound(value)} {unit}" for unit, value in sorted(fact.converted.items()))
    return f"{fact.id} = {fmt_bound(fact.value)} {fact.unit} ({'; '.join(parts)})"


def _straddles(ci: tuple[float, float] | None, expectation: Expectation) -> bool:
    """True when a bound lies strictly inside the confidence interval."""
    if ci is None:
        return False
    lo, hi = min(ci), max(ci)
    return any(bound is not None and lo < bound < hi for bound in (expectation.low, expectation.high))


STRADDLES = "the CI straddles a bound: too noisy to judge"  # how the judge ends the detail of a straddling CI
UNIT_MISMATCH = "; unit mismatch: "  # where the judge says a fact's unit is not its expectation's


def judge(fact: Fact, expectation: Expectation | None) -> tuple[str, str]:
    """Hold one measured fact against its expectation; return (verdict, detail). The detail of a fact with a
    value opens with it (``latency.l2 = 263.1 cycle (CI 260.2–266.0)``), then the range it was held to.

    Verdicts: ``not_run`` (no value), ``report`` (no expectation, or severity report),
    ``unstable`` (the confidence interval straddles a bound, so the noise is too large to say),
    ``pass`` (inside), ``fail`` (outside, severity assert), ``warn`` (outside, severity warn).
    A unit that differs from the expectation's is a bug in the probe or the data: ``fail``.
    """
    if fact.value is None:
        return "not_run", f"{fact.id}: no value was measured{f' ({fact.detail})' if fact.detail else ''}"
    measured = _measured_text(fact)
    if expectation is None:
        return "report", f"{measured}; no expectation for this GPU model (discovery mode)"
    expected = f"expected {expectation.describe()}"
    if fact.unit != expectation.unit:
        return "fail", f"{measured}{UNIT_MISMATCH}{expected}"
    if expectation.severity == "report":
        where = "inside" if expectation.contains(fact.value) else "outside"
        return "report", f"{measured}; {expected}; {where} (reported, not judged)"
    if _straddles(fact.ci, expectation):
        return "unstable", f"{measured}; {expected}; {STRADDLES}"
    if expectation.contains(fact.value):
        return "pass", f"{measured}; {expected}"
    verdict = "fail" if expectation.severity == "assert" else "warn"
    return verdict, f"{measured}; OUTSIDE {expected}"


# --- a model a person names ---------------------------------------------------------------------


def resolve_model(text: str, models: dict[str, ModelExpectations]) -> ModelExpectations:
    """A model by its key (``h100_sxm``), by a device name that matches it (``NVIDIA H100 80GB HBM3``), or by
    a part of its name or patterns that no other model's holds (``A100``); a part several hold is refused
    as ambiguous, naming them."""
    if text.strip().lower() in models:
        return models[text.strip().lower()]
    model = match_model(text, models=models)
    if model is not None:
        return model
    named = sorted(key for key, m in models.items() if any(_occurs(text.strip(), n) for n in (m.name, *m.match)))
    if len(named) > 1:
        raise GpuprobeError(f"{text!r} is ambiguous: matches {', '.join(named)} (give one of those keys)")
    if not named:
        known = ", ".join(sorted(models)) or "(none)"
        raise GpuprobeError(f"no GPU model matches {text!r}; known models: {known}")
    return models[named[0]]
