"""The probe registry: every probe, declared as data next to its source.

Each family is a pair of files in ``ptx/``: the source (``NAME.ptx``) and its declaration
(``NAME.toml``), which names the family, the archs it targets, and per probe its kernel, the
facts it produces, a docstring, and its SASS contract. A probe's contract is the family-level
``[[contract]]`` rules (every probe), the named rule sets it ``use``s (``[[rules.NAME]]``, shared
by the probes that name them), and its own ``[[probe.contract]]`` rules; ``{var}`` placeholders
in opcode patterns take the probe's ``vars``.
"""

from __future__ import annotations

import functools
import re
import tomllib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuprobe.arch import SUPPORTED_ARCHS, Arch, parse_arch
from gpuprobe.contracts import Rule
from gpuprobe.errors import GpuprobeError
from gpuprobe.files import read_text

REPO_ROOT = Path(__file__).resolve().parent.parent
PTX_DIR = REPO_ROOT / "ptx"


@dataclass(frozen=True)
class Probe:
    name: str  # dotted, e.g. "memory.latency.global_cg"
    family: str
    kernel: str
    source: Path
    archs: tuple[Arch, ...]
    facts: tuple[str, ...]
    doc: str
    contract: tuple[Rule, ...]

    def supports(self, arch: Arch) -> bool:
        return arch in self.archs

    @property
    def source_label(self) -> str:
        return str(self.source.relative_to(REPO_ROOT)) if self.source.is_relative_to(REPO_ROOT) else str(self.source)


_KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "string": (lambda v: isinstance(v, str), "a string"),
    "strings": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of strings"),
    "table": (lambda v: isinstance(v, dict), "a table"),
    "tables": (lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v), "an array of tables"),
    "rule sets": (
        lambda v: (
            isinstance(v, dict) and all(isinstance(s, list) and all(isinstance(x, dict) for x in s) for s in v.values())
        ),
        "named arrays of rule tables ([[rules.NAME]])",
    ),
}
_FAMILY_TYPES = {"family": "string", "source": "string", "doc": "string", "min_arch": "string",
                 "archs": "strings", "contract": "tables", "rules": "rule sets", "probe": "tables"}  # fmt: skip
_PROBE_TYPES = {"name": "string", "kernel": "string", "doc": "string", "facts": "strings",
                "vars": "table", "use": "strings", "contract": "tables"}  # fmt: skip
_PLACEHOLDER = re.compile(r"\{([A-Za-z_]\w*)\}")


def _validate(table: dict[str, Any], types: dict[str, str], required: tuple[str, ...], where: str) -> None:
    unknown = set(table) - set(types)
    if unknown:
        raise GpuprobeError(f"{where}: unknown key(s) {sorted(unknown)}")
    for key in required:
        if key not in table:
            raise GpuprobeError(f"{where}: missing key {key!r}")
    for key, value in table.items():
        accepts, description = _KINDS[types[key]]
        if not accepts(value):
            raise GpuprobeError(f"{where}: {key!r} must be {description}")


def _family_archs(data: dict[str, Any], where: str) -> tuple[Arch, ...]:
    try:
        if "archs" in data:
            return tuple(parse_arch(a) for a in data["archs"])
        if "min_arch" in data:
            low = parse_arch(data["min_arch"])
            return tuple(a for a in SUPPORTED_ARCHS if a.number >= low.number)
    except GpuprobeError as exc:
        raise GpuprobeError(f"{where}: {'archs' if 'archs' in data else 'min_arch'}: {exc}") from None
    raise GpuprobeError(f"{where}: give 'archs' or 'min_arch'")


def _fill(pattern: str, variables: dict[str, str], where: str) -> str:
    """Replace ``{name}`` placeholders (never regex quantifiers such as ``{2,3}``) with the probe's vars."""

    def value(match: re.Match[str]) -> str:
        if match.group(1) not in variables:
            raise GpuprobeError(f"{where} uses undefined var {match.group(1)!r}")
        return variables[match.group(1)]

    return _PLACEHOLDER.sub(value, pattern)


def _rules(entries: list[dict[str, Any]], variables: dict[str, str], where: str) -> list[Rule]:
    rules = []
    for index, entry in enumerate(entries):
        entry = dict(entry)
        if isinstance(entry.get("opcode"), str):
            entry["opcode"] = _fill(entry["opcode"], variables, f"{where}: contract[{index}]")
        rules.append(Rule.from_dict(entry, f"{where}: contract[{index}]"))
    return rules


def load_family(toml_path: Path) -> list[Probe]:
    """Read one family declaration; a bad file is a one-line error naming file and key."""
    where = str(toml_path.relative_to(REPO_ROOT)) if toml_path.is_relative_to(REPO_ROOT) else str(toml_path)
    try:
        data = tomllib.loads(read_text(toml_path))
    except tomllib.TOMLDecodeError as exc:
        raise GpuprobeError(f"{where}: {exc}") from None
    _validate(data, _FAMILY_TYPES, ("family", "source", "probe"), where)
    source = toml_path.parent / data["source"]
    if not source.is_file():
        raise GpuprobeError(f"{where}: source {data['source']!r} does not exist")
    archs = _family_archs(data, where)
    probes = []
    for index, entry in enumerate(data["probe"]):
        probe_where = f"{where}: probe[{index}]"
        _validate(entry, _PROBE_TYPES, ("name", "kernel", "doc"), probe_where)
        variables = {str(k): str(v) for k, v in entry.get("vars", {}).items()}
        rules = _rules(data.get("contract", []), variables, where)
        for set_name in entry.get("use", []):
            if set_name not in data.get("rules", {}):
                raise GpuprobeError(f"{probe_where}: uses unknown rule set {set_name!r}")
            rules += _rules(data["rules"][set_name], variables, f"{where}: rules.{set_name}")
        rules += _rules(entry.get("contract", []), variables, probe_where)
        probes.append(
            Probe(
                name=entry["name"],
                family=data["family"],
                kernel=entry["kernel"],
                source=source,
                archs=archs,
                facts=tuple(entry.get("facts", [])),
                doc=" ".join(entry["doc"].split()),
                contract=tuple(rules),
            )
        )
    return probes


@functools.cache
def all_probes(directory: Path = PTX_DIR) -> tuple[Probe, ...]:
    if not directory.is_dir():
        raise GpuprobeError(f"probe sources not found at {directory}: run gpuprobe from a checkout (pip install -e .)")
    probes = [p for path in sorted(directory.glob("*.toml")) for p in load_family(path)]
    names = [p.name for p in probes]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise GpuprobeError(f"duplicate probe name(s): {', '.join(duplicates)}")
    return tuple(probes)


def find_probe(name: str) -> Probe:
    for probe in all_probes():
        if probe.name == name:
            return probe
    raise GpuprobeError(f"no probe named {name!r}")
