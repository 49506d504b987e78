"""The results file: one run's device identity, facts and raw series, versioned and atomic.

Every reader goes through :func:`load`, which validates what it reads (:func:`validate`) and refuses,
in one line, what gpuprobe never writes. docs/results.md gives the schema (``SCHEMA_VERSION``; files
of every version from 1 are read), each fact's optional ``detection`` and ``stopped``, the provenance
a run records, and what reading refuses.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import math
import os
import re
import socket
import subprocess
import tomllib
from collections import Counter
from dataclasses import dataclass, field, fields
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gpuprobe.core.detection import Detection, detection, run_to_run_pct
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.files import read_text, write_atomic
from gpuprobe.core.results_index import write_index
from gpuprobe.core.strict import strict_dumps

SCHEMA = "gpuprobe.core.results"
SCHEMA_VERSION = 2

# "throttled" and "shared": measured while the GPU was throttling or had other tenants, even after a
# retry; such a fact is recorded but not judged.
DISTURBED_VERDICTS = ("throttled", "shared")
# A hardware counter's witness of what one probe of one run claims (``gpuprobe witness``): a statement about
# that run's probe, not a property of the GPU, so neither compared between runs nor across a fleet.
WITNESS_PREFIX = "witness."
# "invalid": the file holds a judgement of a fact but no value for it (see docs/results.md).
INVALID = "invalid"
VERDICTS = ("pass", "fail", "warn", "report", "unstable", "not_run", *DISTURBED_VERDICTS, INVALID)
JUDGEMENTS = ("pass", "fail", "warn", "unstable")  # what needs a value to mean anything


def _probe_status(probe: str, status: Any) -> str:
    if status not in PROBE_STATUSES:
        raise ValueError(f"probe {probe!r} has unknown status {status!r}")
    return str(status)


def _check_expectation(fact_id: str, expectation: Any) -> None:
    """The expectation a fact was judged against: None, or bounds (numbers or None) and texts."""
    if expectation is None:
        return
    if not isinstance(expectation, dict):
        raise ValueError(f"fact {fact_id!r} has an expectation that is not a table")
    for key, value in expectation.items():
        numeric = key in ("low", "high")
        ok = (value is None or isinstance(value, int | float)) if numeric else isinstance(value, str)
        if not ok or isinstance(value, bool):
            raise ValueError(f"fact {fact_id!r}: expectation {key!r} is {type(value).__name__}")


def _type_name(value: Any) -> str:
    """What JSON kind a value is, as a message names it: ``a bool``, ``a str``, ``null``."""
    return "null" if value is None else f"a {type(value).__name__}"


def _created(value: Any) -> str:
    """When the run began: an ISO-8601 time as gpuprobe writes it, or "" where a file does not say."""
    if not isinstance(value, str):
        raise InvalidResults(f"created is {_type_name(value)}, not an ISO-8601 time")
    if value:
        try:
            datetime.fromisoformat(value)
        except ValueError:
            raise InvalidResults(f"created is {_shown(value)}, not an ISO-8601 time") from None
    return value


def _is_number(value: Any) -> bool:
    """An int or float, not a bool (JSON's true is not a measurement)."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def _shown(value: Any) -> str:
    """A value as an error message shows it: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= 40 else text[:37] + "..."


def _interval(fact_id: str, ci: Any) -> tuple[float, float] | None:
    """A confidence interval: None, or a pair of numbers."""
    if ci is None:
        return None
    if not isinstance(ci, list | tuple) or len(ci) != 2 or not all(_is_number(b) for b in ci):
        raise ValueError(f"fact {fact_id!r}: confidence interval is {_shown(ci)}, not a pair of numbers")
    return float(ci[0]), float(ci[1])


def fact_matches(declared: str, fact_id: str) -> bool:
    """Whether ``fact_id`` is the fact ``declared`` names: the same id, or, for a declaration ending in
    ``.*`` (facts one per pair of GPUs, ``p2p.ce.bandwidth.*``), its prefix and exactly one more part."""
    if not declared.endswith(".*"):
        return declared == fact_id
    prefix = declared[:-1]
    return fact_id.startswith(prefix) and bool(fact_id[len(prefix) :]) and "." not in fact_id[len(prefix) :]


@dataclass
class Fact:
    """One measured fact with a stable dotted id (e.g. ``latency.l2``)."""

    id: str
    value: float | None
    unit: str
    ci: tuple[float, float] | None = None
    samples: list[float] = field(default_factory=list)
    converted: dict[str, float] = field(default_factory=dict)  # e.g. {"ns": 12.3}
    probe: str = ""
    expectation: dict[str, Any] | None = None
    verdict: str = "report"
    detail: str = ""
    detection: Detection | None = None  # what the samples can detect; set when read (see docs/results.md)
    stopped: str = ""  # why its sampling stopped: stable, max_repeats or budget ("+" joins several); "" unsampled

    @classmethod
    def from_dict(cls, data: dict[str, Any], detect: bool = True) -> Fact:
        """A fact as a results file (or a measuring process) spells it; a field of the wrong type is a ValueError.
        ``detect``: compute what its samples can detect (the sheet and ``compare`` show it; a fleet, which never
        does, reads a thousand files without it: it is the dearest part of reading a fact)."""
        fact_id = data["id"]
        if not isinstance(fact_id, str) or not fact_id:
            raise ValueError(f"a fact's id is {_shown(fact_id)}, not a name")
        ci = _interval(fact_id, data.get("ci"))
        _check_expectation(fact_id, data.get("expectation"))
        verdict = str(data.get("verdict", "report"))
        if verdict not in VERDICTS:
            raise ValueError(f"fact {fact_id!r} has unknown verdict {verdict!r}")
        value = data.get("value")
        if value is not None and not _is_number(value):
            raise ValueError(f"fact {fact_id!r}: value is {_shown(value)}, not a number")
        samples = data.get("samples", [])
        if not isinstance(samples, list) or not all(_is_number(s) for s in samples):
            raise ValueError(f"fact {fact_id!r}: samples are {_shown(samples)}, not a list of numbers")
        samples = [float(s) for s in samples]
        return cls(
            id=fact_id,
            value=None if value is None else float(value),
            unit=str(data["unit"]),
            ci=ci,
            samples=samples,
            converted={str(k): float(v) for k, v in data.get("converted", {}).items()},
            probe=str(data.get("probe", "")),
            expectation=data.get("expectation"),
            verdict=verdict,
            detail=str(data.get("detail", "")),
            stopped=_stop_reasons(fact_id, data.get("stopped", "")),
            detection=detection(samples, run_to_run=run_to_run_pct(fact_id, str(data["unit"]))) if detect else None,
        )


STOP_REASONS = frozenset({"stable", "max_repeats", "budget"})


def _stop_reasons(fact_id: str, stopped: object) -> str:
    """Why a fact's sampling stopped, as written: "" or reasons of :data:`STOP_REASONS` joined by "+"."""
    if not isinstance(stopped, str) or (stopped and not set(stopped.split("+")) <= STOP_REASONS):
        raise ValueError(f"fact {fact_id!r}: stopped is {_shown(stopped)}, not reasons among {sorted(STOP_REASONS)}")
    return stopped


def _record(instance: Any) -> dict[str, Any]:
    """A dataclass instance's fields as a dict, sharing its values (unlike ``dataclasses.asdict``, which
    deep-copies them): what is only written out needs no copy, and a run writes its results after every probe."""
    return {f.name: getattr(instance, f.name) for f in fields(instance)}


def _fact_record(fact: Fact) -> dict[str, Any]:
    """A fact as the results file spells it, its detection computed from the samples it is written with."""
    found = detection(fact.samples, run_to_run=run_to_run_pct(fact.id, fact.unit))
    return {**_record(fact), "detection": None if found is None else _record(found)}


@dataclass
class Device:
    """What the device says about itself, plus the software that measured it."""

    name: str
    cc: str  # "9.0"
    arch: str  # "sm_90"
    sm_count: int
    l2_bytes: int
    sm_clock_nominal_mhz: float | None = None
    mem_clock_mhz: float | None = None
    mem_bus_bits: int | None = None
    mem_bytes: int | None = None
    shared_per_sm_bytes: int | None = None
    shared_per_block_optin_bytes: int | None = None
    driver: str = ""
    cuda_runtime: str = ""
    toolkit: str = ""
    uuid: str = ""
    serial: str = ""  # the board's serial number (NVML), "" where the board or the file does not say
    hostname: str = ""  # the node that measured (see gpuprobe.runner.device.placement)
    gpu_index: int | None = None  # the GPU's index on that node, as nvidia-smi numbers it
    cuda_visible_devices: str | None = None  # CUDA_VISIBLE_DEVICES as the measuring process saw it; None: unset
    memory_type: str = ""  # from the GPU model's datasheet (gpuprobe/expectations); CUDA does not report it
    visible_gpus: int | None = None  # GPUs the measuring process sees (CUDA's count): the multi-GPU families' node
    simulated: bool = False  # measured on gpuprobe's simulated GPU (`gpuprobe demo`, the tests): no hardware at all

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Device:
        """The device of a results file; a field of the wrong type is a ValueError naming it."""
        fields = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        for name, value in fields.items():
            kinds = _DEVICE_FIELD_TYPES[name]
            if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
                raise ValueError(f"device field {name!r} is {type(value).__name__}, not {kinds[0].__name__}")
        return cls(**fields)


_TEXT, _INT, _NUMBER = (str,), (int,), (int, float)
_DEVICE_FIELD_TYPES: dict[str, tuple[type, ...]] = {
    "name": _TEXT, "cc": _TEXT, "arch": _TEXT, "sm_count": _INT, "l2_bytes": _INT,
    "sm_clock_nominal_mhz": (*_NUMBER, type(None)), "mem_clock_mhz": (*_NUMBER, type(None)),
    "mem_bus_bits": (int, type(None)), "mem_bytes": (int, type(None)), "shared_per_sm_bytes": (int, type(None)),
    "shared_per_block_optin_bytes": (int, type(None)), "driver": _TEXT, "cuda_runtime": _TEXT, "toolkit": _TEXT,
    "uuid": _TEXT, "serial": _TEXT, "hostname": _TEXT, "gpu_index": (int, type(None)),
    "cuda_visible_devices": (str, type(None)), "memory_type": _TEXT, "visible_gpus": (int, type(None)),
    "simulated": (bool,),
}  # fmt: skip

# "not_run": the probe could have run but the run ended first (its deadline), or it has nothing to measure here
# (a multi-GPU probe in a process that sees one GPU), with the reason in the detail.
PROBE_STATUSES = ("ok", "failed", "crashed", "timeout", "violated", "skipped", "error", "not_run")


@dataclass
class ProbeOutcome:
    """How one probe ended, the raw series it measured (for plots), and the conditions it ran under.

    ``conditions`` holds what was read just before and after the measurement: the SM clock from
    the device's own timers (``sm_mhz_before`` / ``sm_mhz_after``) and NVML's readings
    (``nvml_before`` / ``nvml_after``), plus ``attempts`` when it had to be retried. ``flight``: the
    measuring process's last launcher calls, kept when the probe crashed, timed out or failed.
    """

    status: str
    detail: str = ""
    series: dict[str, dict[str, list[float]]] = field(default_factory=dict)
    conditions: dict[str, Any] = field(default_factory=dict)
    flight: list[dict[str, Any]] = field(default_factory=list)

    @classmethod
    def from_dict(cls, probe: str, data: dict[str, Any]) -> ProbeOutcome:
        """A probe's outcome as a results file (or a measuring process) spells it; a bad field is a ValueError."""
        flight = data.get("flight", [])
        if not isinstance(flight, list) or not all(isinstance(call, dict) for call in flight):
            raise ValueError(f"probe {probe!r} has a flight record that is not a list of calls")
        return cls(
            status=_probe_status(probe, data["status"]),
            detail=str(data.get("detail", "")),
            series=dict(data.get("series", {})),
            conditions=dict(data.get("conditions", {})),
            flight=list(flight),
        )


@dataclass(frozen=True)
class DeclaredProbe:
    """A probe as the gpuprobe that made the run declares it (``declared_probes``): its family, the archs it
    targets, the facts it measures. What a reader says of a probe or fact the run lacks comes from here, not
    from the gpuprobe that reads the file; a file written before these were recorded has none."""

    family: str
    archs: tuple[str, ...]
    facts: tuple[str, ...]

    def targets(self, arch: str) -> bool:
        """Whether the probe runs on ``arch`` (``sm_90a``)."""
        return arch in self.archs

    def record(self) -> dict[str, Any]:
        """The probe as the results file spells it."""
        return {"family": self.family, "archs": list(self.archs), "facts": list(self.facts)}

    @classmethod
    def from_dict(cls, probe: str, data: Any) -> DeclaredProbe:
        """A declared probe as a results file spells it; anything but a family and lists of names is a ValueError."""
        record = data if isinstance(data, dict) else {}
        family, archs, facts = (record.get(key) for key in ("family", "archs", "facts"))
        if not isinstance(family, str) or not all(_is_names(names) for names in (archs, facts)):
            raise ValueError(f"declared probe {probe!r} is {_shown(data)}, not a family and lists of archs and facts")
        return cls(family, tuple(archs), tuple(facts))


def _is_names(value: Any) -> bool:
    """A list of strings, as JSON spells names."""
    return isinstance(value, list) and all(isinstance(name, str) for name in value)


@dataclass
class Results:
    device: Device
    facts: list[Fact] = field(default_factory=list)
    probes: dict[str, ProbeOutcome] = field(default_factory=dict)
    clocks: dict[str, Any] = field(default_factory=dict)
    partial: bool = True
    created: str = field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    stage: str = (
        "full"  # "smoke": a first-contact run, each family's cheapest probes once (see gpuprobe.measure.session)
    )
    environment: dict[str, Any] = field(default_factory=dict)  # the NVML device record, software versions
    build: dict[str, Any] = field(default_factory=dict)  # the cubin measured: arch, path, sha256, toolkit
    families: dict[str, dict[str, Any]] = field(default_factory=dict)  # per family: planned and actual seconds
    declared_probes: dict[str, DeclaredProbe] = field(default_factory=dict)  # every probe the measuring gpuprobe has

    def fact(self, fact_id: str) -> Fact | None:
        return next((f for f in self.facts if f.id == fact_id), None)

    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "created": self.created,
            "partial": self.partial,
            "stage": self.stage,
            "device": _record(self.device),
            "clocks": self.clocks,
            "environment": self.environment,
            "build": self.build,
            "families": self.families,
            "probes": {name: _record(p) for name, p in self.probes.items()},
            "facts": [_fact_record(f) for f in self.facts],
            "declared_probes": {name: p.record() for name, p in self.declared_probes.items()},
        }

    @classmethod
    def from_dict(cls, data: Any, source: str = "results", detect: bool = True) -> Results:
        """A results record as read (validated: :func:`validate`); ``detect`` as :meth:`Fact.from_dict`'s."""
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            raise GpuprobeError(f"{source}: not a gpuprobe results file")
        version = data.get("schema_version")
        if "schema_version" not in data:
            raise GpuprobeError(f"{source}: results file has no schema_version")
        if not isinstance(version, int) or isinstance(version, bool):
            raise GpuprobeError(f"{source}: results schema_version is {_type_name(version)}, not an integer")
        if version > SCHEMA_VERSION:
            raise GpuprobeError(
                f"{source}: results schema {version} is newer than this gpuprobe reads "
                f"({SCHEMA_VERSION}); upgrade gpuprobe"
            )
        if version < 1:
            raise GpuprobeError(f"{source}: results schema {version} is not supported")
        declared = data.get("declared_probes", {})  # absent from files written before probes were declared in them
        try:
            return validate(cls(
                device=Device.from_dict(data["device"]),
                facts=[Fact.from_dict(f, detect) for f in data.get("facts", [])],
                probes={str(n): ProbeOutcome.from_dict(str(n), p) for n, p in data.get("probes", {}).items()},
                clocks=dict(data.get("clocks", {})),
                partial=bool(data.get("partial", False)),
                created=_created(data.get("created", "")),
                stage=_stage(data.get("stage", "full")),
                environment=dict(data.get("environment", {})),
                build=dict(data.get("build", {})),
                families={str(k): dict(v) for k, v in data.get("families", {}).items()},
                declared_probes={str(k): DeclaredProbe.from_dict(str(k), v) for k, v in declared.items()},
            ))
        except InvalidResults as exc:
            raise GpuprobeError(f"{source}: invalid results file: {exc}") from None
        except (KeyError, TypeError, ValueError, AttributeError, IndexError, OverflowError) as exc:
            raise GpuprobeError(f"{source}: corrupt results file ({type(exc).__name__}: {exc})") from None


# ---------------------------------------------------------------- validation on load


class InvalidResults(ValueError):
    """A results file that parses but holds what no measurement gives (see :func:`validate`)."""


def _finite(what: str, value: float | None) -> None:
    if value is not None and not math.isfinite(value):
        raise InvalidResults(f"{what} is {value}, not a finite number")


def _validate_interval(where: str, fact: Fact, low: float, high: float) -> None:
    """A confidence interval: finite, low to high, and holding the value or, for a value a probe rounds to a
    grid (a line size from a ratio of capacities), one of its samples."""
    _finite(f"{where}: confidence interval bound", low)
    _finite(f"{where}: confidence interval bound", high)
    if low > high:
        raise InvalidResults(f"{where}: confidence interval [{low:g}, {high:g}] is reversed")
    if fact.value is not None and not any(low <= v <= high for v in (fact.value, *fact.samples)):
        raise InvalidResults(
            f"{where}: confidence interval [{low:g}, {high:g}] holds neither its value {fact.value:g} nor a sample"
        )


#: The SM clocks a cycle count's time in ns may imply: from the slowest clock a GPU measures at, to the device's
#: nominal (boost) clock with :data:`CLOCK_MARGIN` (no ceiling where the file records none).
MIN_SM_MHZ = 100.0
CLOCK_MARGIN = 1.10


def _validate_conversion(where: str, fact: Fact, unit: str, converted: float, nominal_mhz: float | None) -> None:
    """A value's conversion: of its sign, and for cycles in ns, the count at an SM clock the device can run
    (``1 cycle (141.8 ns)`` would be a 7 MHz clock: not the conversion of this value)."""
    if fact.value is None or not fact.value or not converted:
        return
    if converted * fact.value < 0:
        raise InvalidResults(f"{where}: value {fact.value:g} is {converted:g} in {unit}: no conversion turns a sign")
    if fact.unit != "cycle" or unit != "ns":
        return
    mhz = fact.value / converted * 1000.0
    ceiling = nominal_mhz * CLOCK_MARGIN if nominal_mhz else math.inf
    if not MIN_SM_MHZ <= mhz <= ceiling:
        raise InvalidResults(
            f"{where}: {fact.value:g} cycles is {converted:g} ns, an SM clock of {mhz:.4g} MHz, not one this "
            f"device runs at ({MIN_SM_MHZ:g} – {ceiling:.4g} MHz)"
        )


def _validate_fact(fact: Fact, nominal_mhz: float | None) -> Fact:
    """Refuse a fact no measurement gives; a judgement with no value is marked ``invalid``."""
    where = f"fact {fact.id!r}"
    _finite(f"{where}: value", fact.value)
    for sample in fact.samples:
        _finite(f"{where}: a sample", sample)
    for unit, value in fact.converted.items():
        _finite(f"{where}: value in {unit}", value)
        _validate_conversion(where, fact, unit, value, nominal_mhz)
    if fact.ci is not None:
        _validate_interval(where, fact, *fact.ci)
    bounds = [(fact.expectation or {}).get(key) for key in ("low", "high")]
    for bound in bounds:
        _finite(f"{where}: expected bound", bound)
    if None not in bounds and bounds[0] > bounds[1]:
        raise InvalidResults(f"{where}: expected range {bounds[0]:g} – {bounds[1]:g} is reversed")
    if fact.value is None and fact.verdict in JUDGEMENTS:
        stored = fact.verdict
        fact.verdict = INVALID
        fact.detail = f"no value in the file, yet a stored verdict {stored!r}: not judged. {fact.detail}".strip()
    return fact


_POSITIVE_CLOCKS = ("sm_clock_nominal_mhz", "mem_clock_mhz")
_SIZES = ("l2_bytes", "mem_bus_bits", "mem_bytes", "shared_per_sm_bytes", "shared_per_block_optin_bytes")


def _validate_device(device: Device) -> None:
    if device.sm_count < 1:
        raise InvalidResults(f"device SM count {device.sm_count} is not a count of SMs")
    for name in _SIZES:
        value = getattr(device, name)
        if value is not None and value < 0:
            raise InvalidResults(f"device {name} {value} is negative")
    for name in _POSITIVE_CLOCKS:
        value = getattr(device, name)
        _finite(f"device {name}", value)
        if value is not None and value <= 0:
            raise InvalidResults(f"device {name} {value:g} is not a clock")


def _validate_clocks(clocks: dict[str, Any]) -> None:
    """The SM clocks a sheet converts cycles with: a positive finite number or null."""
    for key in ("sm_mhz_measured", "sm_mhz_during_chases"):
        value = clocks.get(key)
        if value is None:
            continue
        if not _is_number(value) or not math.isfinite(value) or value <= 0:
            raise InvalidResults(f"clocks {key} is {_shown(value)}, not a clock in MHz")


def validate(results: Results) -> Results:
    """The one check every reader of a results file relies on (docs/results.md, "Reading"); returns
    ``results`` with judgements that have no value marked ``invalid``, or raises :class:`InvalidResults`."""
    if not results.facts:
        raise InvalidResults("it holds no facts: nothing was measured")
    _validate_device(results.device)
    _validate_clocks(results.clocks)
    _validate_fact_ids(results.facts)
    results.facts = [_validate_fact(fact, results.device.sm_clock_nominal_mhz) for fact in results.facts]
    return results


def _validate_fact_ids(facts: list[Fact]) -> None:
    """One fact per id: of two, which one a reader shows, compares or counts would be a guess."""
    seen: set[str] = set()
    for fact in facts:
        if fact.id in seen:
            raise InvalidResults(f"fact {fact.id!r} appears twice; cannot tell which one is the measurement")
        seen.add(fact.id)


# ---------------------------------------------------------------- provenance: the code, the board, the machine

PACKAGE_ROOT = Path(__file__).resolve().parents[2]
"""The folder that holds the ``gpuprobe`` package: a git checkout, or site-packages for an installed wheel."""
CODE_PATHS = ("gpuprobe", "ptx", "probes")
"""What a run's numbers depend on in a checkout: the package, the kernels, the pytest entry points. A change
elsewhere (a report written under ``reports/``) leaves the code clean."""
GIT_TIMEOUT_S = 10.0
MACHINE_ID_FILES = (Path("/etc/machine-id"), Path("/var/lib/dbus/machine-id"))
BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")
MACHINE_ID_SALT = b"gpuprobe machine id\0"
"""Hashed with the machine id: machine-id(5) asks that the id itself not be published, so a results file
holds a hash of it that only gpuprobe's own salt gives (16 hex digits)."""


def _git(root: Path, *args: str) -> str | None:
    """``git -C root ARGS``'s output, or None where git is missing, refuses (another owner's checkout) or hangs."""
    try:
        done = subprocess.run(["git", "--no-optional-locks", "-C", str(root), *args], capture_output=True,
                              text=True, timeout=GIT_TIMEOUT_S, check=False)  # fmt: skip
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout if done.returncode == 0 else None


def _version(root: Path) -> str:
    """gpuprobe's version: the installed distribution's, else (a checkout on PYTHONPATH) its pyproject's."""
    try:
        return importlib.metadata.version("gpuprobe")
    except importlib.metadata.PackageNotFoundError:
        pass
    try:
        return str(tomllib.loads((root / "pyproject.toml").read_text())["project"]["version"])
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return "unknown"


COMMIT_VARIABLE = "GPUPROBE_COMMIT"


def code_record(root: Path = PACKAGE_ROOT) -> dict[str, Any]:
    """The gpuprobe that measured, for ``build["gpuprobe"]``: ``version``; in a git checkout (``root`` holds
    ``.git``) the ``commit`` it is at and whether ``CODE_PATHS`` have uncommitted changes, tracked or new
    (``dirty``); outside one (a wheel), or where git cannot tell, ``commit`` and ``dirty`` are None, unless
    :data:`COMMIT_VARIABLE` names the commit a checkout copied without its ``.git`` was made from (the device
    check's machine gets the working tree alone)."""
    record: dict[str, Any] = {"version": _version(root), "commit": None, "dirty": None}
    if not (root / ".git").exists():
        told = os.environ.get(COMMIT_VARIABLE, "").strip().lower()
        return {**record, "commit": told} if re.fullmatch(r"[0-9a-f]{40}", told) else record
    commit = _git(root, "rev-parse", "HEAD")
    if commit:
        status = _git(root, "status", "--porcelain", "--untracked-files=normal", "--", *CODE_PATHS)
        record.update(commit=commit.strip(), dirty=None if status is None else bool(status.strip()))
    return record


def _first_line(path: Path) -> str:
    try:
        return path.read_text().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def _machine_id_hash() -> str:
    found = next((text for text in map(_first_line, MACHINE_ID_FILES) if text), "")
    return hashlib.sha256(MACHINE_ID_SALT + found.encode()).hexdigest()[:16] if found else ""


def host_record() -> dict[str, str]:
    """The machine that measured, for ``environment["host"]``: its host name; ``machine_id``, a salted hash of
    ``/etc/machine-id`` (one per installation: two VMs that both call themselves "vm" differ in it unless
    cloned with it); ``boot_id`` (one per boot, from the kernel: differs between any two machines, and on one
    machine after a reboot). "" where the system has none (not Linux)."""
    return {"hostname": socket.gethostname(), "machine_id": _machine_id_hash(), "boot_id": _first_line(BOOT_ID_FILE)}


PROVENANCE_CHARS = 128  # the most of a provenance text a reader shows: serials, ids and versions are short


def _text_at(record: Any, key: str) -> str:
    """``record[key]`` when ``record`` is a table and that is text, else "" (a file that lacks it, or
    holds something else there: provenance is read, never judged), printable and at most
    :data:`PROVENANCE_CHARS` long: a name from a file never forges a line or reaches a terminal raw."""
    value = record.get(key) if isinstance(record, dict) else None
    return _shown_text(value) if isinstance(value, str) else ""


def _shown_text(text: str) -> str:
    printable = "".join(c if c.isprintable() else "?" for c in text[:PROVENANCE_CHARS])
    return printable + ("..." if len(text) > PROVENANCE_CHARS else "")


_VERSION_TEXT = frozenset("0123456789.")


@dataclass(frozen=True)
class Provenance:
    """Where a run's numbers came from, as its file records it; "" (``dirty``: None) where it does not.

    ``driver`` is NVML's driver version (``580.159.04``), ``cuda_driver`` the CUDA version the driver
    supports (``Device.driver``, ``13.0``); ``machine_id`` is the hash :func:`host_record` writes."""

    uuid: str = ""
    serial: str = ""
    hostname: str = ""
    machine_id: str = ""
    boot_id: str = ""
    driver: str = ""
    cuda_driver: str = ""
    version: str = ""
    commit: str = ""
    dirty: bool | None = None
    cubin_sha256: str = ""
    stage: str = "full"

    def board_text(self) -> str:
        """``uuid 1d3b46dd…, serial 1653924170345``; what is not recorded said so."""
        uuid = f"uuid {self.uuid}" if self.uuid else "no uuid recorded"
        return f"{uuid}, serial {self.serial or 'not recorded'}"

    def host_text(self) -> str:
        """``vm (machine 0123456789abcdef, boot 5e3c…)``; what is not recorded said so."""
        ids = f"machine {self.machine_id}" if self.machine_id else "no machine id recorded"
        boot = f", boot {self.boot_id[:8]}" if self.boot_id else ""
        return f"{self.hostname or 'host name not recorded'} ({ids}{boot})"

    def code_text(self) -> str:
        """``gpuprobe 0.1.0 at 3f9ca522bf03, uncommitted changes``; ``not recorded`` for an older file."""
        if not self.version:
            return "gpuprobe version not recorded"
        if not self.commit:
            return f"gpuprobe {self.version} (no commit: not a git checkout)"
        state = {True: ", uncommitted changes", False: "", None: ", changes unknown"}[self.dirty]
        return f"gpuprobe {self.version} at {self.commit[:12]}{state}"

    def driver_text(self) -> str:
        """``580.159.04 (CUDA 13.0)``."""
        cuda = f"CUDA {self.cuda_driver}" if self.cuda_driver else "CUDA version not recorded"
        return f"{self.driver} ({cuda})" if self.driver else cuda


def provenance(results: Results) -> Provenance:
    """What ``results`` records of the code, board and machine that produced it (see :class:`Provenance`)."""
    environment, build = results.environment, results.build
    host, nvml, code = environment.get("host"), environment.get("device_record"), build.get("gpuprobe")
    driver = _text_at(nvml, "driver")
    dirty = code.get("dirty") if isinstance(code, dict) else None
    return Provenance(
        uuid=results.device.uuid,
        serial=_shown_text(results.device.serial) or _text_at(nvml, "serial"),
        hostname=_shown_text(results.device.hostname) or _text_at(host, "hostname"),
        machine_id=_text_at(host, "machine_id"),
        boot_id=_text_at(host, "boot_id"),
        driver=driver if driver and set(driver) <= _VERSION_TEXT else "",
        cuda_driver=results.device.driver,
        version=_text_at(code, "version"),
        commit=_text_at(code, "commit"),
        dirty=dirty if isinstance(dirty, bool) else None,
        cubin_sha256=_text_at(build, "cubin_sha256"),
        stage=results.stage,
    )


STAGES = ("full", "smoke")


def _stage(value: Any) -> str:
    if value not in STAGES:
        raise ValueError(f"unknown stage {value!r}")
    return str(value)


ENTRY_PER_LINE = ("families", "probes", "facts", "declared_probes")  # the keys whose every entry is a line


def results_text(record: dict[str, Any]) -> str:
    """A results record as its file spells it: a line per top-level key, and each family, probe and fact on a
    line of its own, in compact JSON (the fast encoder's: a run writes its results after every probe,
    hundreds of times); a diff of two files then shows whole facts."""

    def compact(value: Any) -> str:
        return strict_dumps(value)

    lines = []
    for key, value in record.items():
        if key in ENTRY_PER_LINE and isinstance(value, dict) and value:
            text = "{\n" + ",\n".join(f"  {compact(k)}: {compact(v)}" for k, v in value.items()) + "\n }"
        elif key in ENTRY_PER_LINE and isinstance(value, list) and value:
            text = "[\n" + ",\n".join(f"  {compact(v)}" for v in value) + "\n ]"
        else:
            text = compact(value)
        lines.append(f" {compact(key)}: {text}")
    return "{\n" + ",\n".join(lines) + "\n}\n"


def save(results: Results, path: Path) -> None:
    """``results`` written to ``path`` atomically, then its facts index beside it
    (:mod:`gpuprobe.core.results_index`, bound to the bytes just written): every run, demo and pytest run writes
    through here."""
    record = results.to_dict()
    data = results_text(record).encode("utf-8", "replace")
    write_atomic(path, data)
    write_index(path, record, data)


class DuplicateKey(ValueError):
    """A JSON object that gives one key twice: which value a reader takes would be the parser's choice."""


def _unique_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object as a dict (``json``'s ``object_pairs_hook``), refusing a key given twice; the error names
    the key and the object by its ``id`` or ``name`` where it has one (a fact, a device)."""
    found = dict(pairs)
    if len(found) == len(pairs):
        return found
    key = next(k for k, n in Counter(k for k, _ in pairs).items() if n > 1)
    names = [f" (its {name} {_shown(found[name])})" for name in ("id", "name") if isinstance(found.get(name), str)]
    owner = names[0] if names else ""
    raise DuplicateKey(f"key {key!r} appears twice in one object{owner}")


def load(path: Path, detect: bool = True) -> Results:
    """The results file ``path``, read and validated (``detect`` as :meth:`Fact.from_dict`'s)."""
    text = read_text(path)
    try:
        data = json.loads(text, object_pairs_hook=_unique_keys)
    except DuplicateKey as exc:
        raise GpuprobeError(f"{path}: invalid results file: {exc}") from None
    except json.JSONDecodeError as exc:
        raise GpuprobeError(f"{path}: corrupt results file (not JSON: {exc.msg} at line {exc.lineno})") from None
    except RecursionError:
        raise GpuprobeError(f"{path}: corrupt results file (nested deeper than JSON can be read)") from None
    return Results.from_dict(data, source=str(path), detect=detect)
