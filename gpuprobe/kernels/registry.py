"""The probe registry: every probe, declared as data next to its source.

Each family has a folder of ``ptx/`` (``ptx/<family>/``, with the kernels several families share
in ``ptx/common/``) holding pairs of files: the source (``NAME.ptx``, or CUDA C++ ``NAME.cu``) and
its declaration (``NAME.toml``), which names the family, the archs it targets, and per probe its
kernel, the facts it produces, a docstring, and its SASS contract. A probe's contract is the family-level
``[[contract]]`` rules (every probe), the named rule sets it ``use``s (``[[rules.NAME]]``, shared
by the probes that name them), and its own ``[[probe.contract]]`` rules; ``{var}`` placeholders
in opcode patterns (and in count/min/max bounds given as strings, e.g. ``count = "2 * {ILP}"``)
take the probe's ``vars``. A probe with ``each = {NAME = [v1, v2], ...}`` is declared once per
combination of the values, ``{NAME}`` filled in its name, kernel, facts, doc and contract.

A probe timed against a second kernel of its own (``twin = {kernel = "..._x2", vars = {PASSES = "2"}}``:
the same loop with its body twice over, so the difference cancels the loop's control) names it: the twin
is held to the probe's whole contract with the twin's ``vars`` over the probe's, and the probe is
runnable only where both contracts hold. The twin is part of the probe, not a probe of its own.
"""

from __future__ import annotations

import ast
import functools
import itertools
import operator
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuprobe.core.arch import SUPPORTED_ARCHS, Arch, parse_arch
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.files import read_toml
from gpuprobe.kernels.contracts import Rule
from gpuprobe.kernels.source_tree import PTX_DIR, SOURCE_SUFFIXES, shown_path

if TYPE_CHECKING:  # imported where a run's record is made: ``gpuprobe check`` needs none of it (nor NumPy)
    from gpuprobe.core.results import DeclaredProbe, Results


@dataclass(frozen=True)
class Twin:
    """A second kernel a probe times against its own, and the contract that kernel is held to."""

    kernel: str
    contract: tuple[Rule, ...]


# The kernel that spins a given number of cycles and reads %clock64 and %globaltimer around it
# (ptx/memory/memory.ptx, vouched for by probe memory.clock's contract): the SM clock for the memory
# family, the conditions around every probe, and the runner's hold while launches are enqueued.
CLOCK_KERNEL = "gp_sm_clock"
CLOCK_PROBE = "memory.clock"


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
    twin: Twin | None = None
    unroll: int | None = None  # operations per loop iteration its PTX fixes (//@repeat N), where the host needs it

    def supports(self, arch: Arch) -> bool:
        return arch in self.archs

    @property
    def source_label(self) -> str:
        return shown_path(self.source)

    @property
    def kernels(self) -> tuple[str, ...]:
        """Its kernel, and its twin's where it has one."""
        return (self.kernel,) if self.twin is None else (self.kernel, self.twin.kernel)

    @functools.cached_property
    def declaration(self) -> str:
        """What of the declaration decides a static check's outcome (name, kernel, source, contract and twin), as
        text: part of the outcome's cache key (:mod:`gpuprobe.kernels.outcomes`), worked out once per probe."""
        return repr((self.name, self.kernel, str(self.source), self.contract, self.twin))


_KINDS: dict[str, tuple[Callable[[Any], bool], str]] = {
    "string": (lambda v: isinstance(v, str), "a string"),
    "strings": (lambda v: isinstance(v, list) and all(isinstance(x, str) for x in v), "a list of strings"),
    "table": (lambda v: isinstance(v, dict), "a table"),
    "count": (lambda v: type(v) is int and v >= 1, "a positive integer"),
    "tables": (lambda v: isinstance(v, list) and all(isinstance(x, dict) for x in v), "an array of tables"),
    "rule sets": (
        lambda v: (
            isinstance(v, dict) and all(isinstance(s, list) and all(isinstance(x, dict) for x in s) for s in v.values())
        ),
        "named arrays of rule tables ([[rules.NAME]])",
    ),
}
_FAMILY_TYPES = {"family": "string", "source": "string", "doc": "string", "min_arch": "string", "unroll": "count",
                 "archs": "strings", "contract": "tables", "rules": "rule sets", "probe": "tables"}  # fmt: skip
_PROBE_TYPES = {"name": "string", "kernel": "string", "doc": "string", "facts": "strings", "unroll": "count",
                "vars": "table", "each": "table", "use": "strings", "contract": "tables", "twin": "table"}  # fmt: skip
_TWIN_TYPES = {"kernel": "string", "vars": "table"}
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


_OPERATORS: dict[type, Callable[[int, int], int]] = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
}


def _integer(text: str, where: str, key: str) -> int:
    """A rule bound given as text once its vars are filled: an integer or +, -, * of integers ("2 * 4")."""

    def value(node: ast.expr) -> int:
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPERATORS:
            return _OPERATORS[type(node.op)](value(node.left), value(node.right))
        raise ValueError(text)

    try:
        return value(ast.parse(text, mode="eval").body)
    except (SyntaxError, ValueError):
        raise GpuprobeError(f"{where}: {key} = {text!r} is not an integer expression (+, -, * of integers)") from None


def _rules(entries: list[dict[str, Any]], variables: dict[str, str], where: str) -> list[Rule]:
    rules = []
    for index, entry in enumerate(entries):
        entry = dict(entry)
        if isinstance(entry.get("opcode"), str):
            entry["opcode"] = _fill(entry["opcode"], variables, f"{where}: contract[{index}]")
        for bound in ("count", "min", "max", "reads", "loops"):  # may be "{VAR}" or an expression of vars
            if isinstance(entry.get(bound), str):
                entry[bound] = _integer(_fill(entry[bound], variables, f"{where}: contract[{index}]"), where, bound)
        rules.append(_rule(entry, f"{where}: contract[{index}]"))
    return rules


_RULES_MADE: dict[tuple[tuple[str, type, Any], ...], Rule] = {}


def _rule(entry: dict[str, Any], where: str) -> Rule:
    """``Rule.from_dict`` of a filled-in rule table, made once per distinct table: a family's rules are filled in
    for each of its probes, mostly alike (thousands of tables, hundreds of them distinct). Keyed by each value's
    type too (``count = true`` is refused, never taken for ``count = 1``); a table holding a list or a table is
    left to from_dict to refuse."""
    try:
        key = tuple((name, type(value), value) for name, value in sorted(entry.items()))
        made = _RULES_MADE.get(key)
    except TypeError:  # an unhashable value: no rule's
        return Rule.from_dict(entry, where)
    if made is None:
        made = _RULES_MADE[key] = Rule.from_dict(entry, where)
    return made


def load_family(toml_path: Path) -> list[Probe]:
    """Read one family declaration; a bad file is a one-line error naming file and key."""
    where = shown_path(toml_path)
    data = read_toml(toml_path, where)
    _validate(data, _FAMILY_TYPES, ("family", "source", "probe"), where)
    source = toml_path.parent / data["source"]
    if source.suffix not in SOURCE_SUFFIXES:
        raise GpuprobeError(f"{where}: source {data['source']!r} is neither PTX (.ptx) nor CUDA C++ (.cu)")
    if not source.is_file():
        raise GpuprobeError(f"{where}: source {data['source']!r} does not exist")
    archs = _family_archs(data, where)
    probes = []
    for index, declared in enumerate(data["probe"]):
        probe_where = f"{where}: probe[{index}]"
        _validate(declared, _PROBE_TYPES, ("name", "kernel", "doc"), probe_where)
        for entry, variables in _instances(declared, probe_where):
            probes.append(_probe(data, entry, variables, source, archs, where, probe_where))
    return probes


def _instances(entry: dict[str, Any], where: str) -> list[tuple[dict[str, Any], dict[str, str]]]:
    """One probe per combination of its ``each`` values (itself alone without ``each``), with
    ``{NAME}`` filled in its name, kernel, facts and doc, and NAME added to its vars for the contract."""
    fixed = {str(k): str(v) for k, v in entry.get("vars", {}).items()}
    each = entry.get("each", {})
    for name, values in each.items():
        if not isinstance(values, list) or not values or not all(isinstance(v, str | int) for v in values):
            raise GpuprobeError(f"{where}: each.{name} must be a non-empty list of strings or integers")
    combos = itertools.product(*([(name, str(v)) for v in values] for name, values in each.items()))
    instances = []
    for combo in combos:
        variables = {**fixed, **dict(combo)}
        filled = dict(entry)
        for key in ("name", "kernel", "doc"):
            filled[key] = _fill(entry[key], variables, f"{where}: {key}")
        filled["facts"] = [_fill(f, variables, f"{where}: facts") for f in entry.get("facts", [])]
        instances.append((filled, variables))
    return instances


def _probe(
    data: dict[str, Any],
    entry: dict[str, Any],
    variables: dict[str, str],
    source: Path,
    archs: tuple[Arch, ...],
    where: str,
    probe_where: str,
) -> Probe:
    """One probe of a family file, its contract the family's rules, its rule sets' and its own (its twin's the
    same, with the twin's vars)."""
    unroll = entry.get("unroll", data.get("unroll"))
    if unroll is not None:  # the contract may count the unrolled operations: {UNROLL}
        variables = {"UNROLL": str(unroll), **variables}
    twin = None
    if "twin" in entry:
        _validate(entry["twin"], _TWIN_TYPES, ("kernel", "vars"), f"{probe_where}: twin")
        twin_vars = {**variables, **{str(k): str(v) for k, v in entry["twin"]["vars"].items()}}
        kernel = _fill(entry["twin"]["kernel"], variables, f"{probe_where}: twin.kernel")
        twin = Twin(kernel, _contract(data, entry, twin_vars, where, f"{probe_where}: twin"))
    return Probe(
        name=entry["name"],
        family=data["family"],
        kernel=entry["kernel"],
        source=source,
        archs=archs,
        facts=tuple(entry.get("facts", [])),
        doc=" ".join(entry["doc"].split()),
        contract=_contract(data, entry, variables, where, probe_where),
        twin=twin,
        unroll=unroll,
    )


def _contract(data: dict[str, Any], entry: dict[str, Any], variables: dict[str, str], where: str,
              probe_where: str) -> tuple[Rule, ...]:  # fmt: skip
    """A probe's rules: the family's, its rule sets' and its own, their vars filled with ``variables``."""
    rules = _rules(data.get("contract", []), variables, where)
    for set_name in entry.get("use", []):
        if set_name not in data.get("rules", {}):
            raise GpuprobeError(f"{probe_where}: uses unknown rule set {set_name!r}")
        rules += _rules(data["rules"][set_name], variables, f"{where}: rules.{set_name}")
    rules += _rules(entry.get("contract", []), variables, probe_where)
    return tuple(rules)


@functools.cache
def all_probes(directory: Path = PTX_DIR) -> tuple[Probe, ...]:
    if not directory.is_dir():
        raise GpuprobeError(
            f"probe sources not found at {directory}: gpuprobe is installed without its kernels (reinstall it)"
        )
    probes = [p for path in sorted(directory.glob("*/*.toml")) for p in load_family(path)]
    names = [p.name for p in probes]
    duplicates = sorted({n for n in names if names.count(n) > 1})
    if duplicates:
        raise GpuprobeError(f"duplicate probe name(s): {', '.join(duplicates)}")
    return tuple(probes)


def declared_probes(probes: Sequence[Probe] | None = None) -> dict[str, DeclaredProbe]:
    """Every probe (default: all of this checkout's) as a run records it (the results' ``declared_probes``):
    its family, archs and facts."""
    from gpuprobe.core.results import DeclaredProbe

    chosen = all_probes() if probes is None else probes
    return {p.name: DeclaredProbe(p.family, tuple(arch.name for arch in p.archs), p.facts) for p in chosen}


def with_declarations(results: Results) -> Results:
    """``results`` as the fact sheet reads them: a file from before runs recorded their probes'
    declarations (``declared_probes``) gets this gpuprobe's, as every sheet of that time was written."""
    return results if results.declared_probes else replace(results, declared_probes=declared_probes())


def unroll_of(kernel: str) -> int:
    """The operations per loop iteration that ``kernel``'s declaration gives (``unroll``, the count its PTX
    repeats the loop body: ``//@repeat N``); the host divides its timed differences by it. A probe that runs
    the kernel without timing its loop (mma's emulated types, checked once) need not state it."""
    counts = {p.unroll for p in declaring(kernel) if p.unroll}
    if len(counts) != 1:
        raise GpuprobeError(f"kernel {kernel}: its declarations give unroll {sorted(counts)}, not one count")
    return counts.pop()


def declaring(kernel: str) -> tuple[Probe, ...]:
    """The probes that declare ``kernel``, as their own or their twin's."""
    return _by_kernel(all_probes()).get(kernel, ())


_BY_KERNEL: dict[int, tuple[Sequence[Probe], dict[str, tuple[Probe, ...]]]] = {}  # the last probes' table, by identity


def _by_kernel(probes: Sequence[Probe]) -> dict[str, tuple[Probe, ...]]:
    """Each kernel of ``probes`` and the probes that declare it, made once for the probes :func:`all_probes`
    returns (a run asks for a kernel's declarations thousands of times)."""
    known = _BY_KERNEL.get(id(probes))
    if known is not None and known[0] is probes:
        return known[1]
    table: dict[str, tuple[Probe, ...]] = {}
    for probe in probes:
        for kernel in probe.kernels:
            table[kernel] = (*table.get(kernel, ()), probe)
    _BY_KERNEL.clear()
    _BY_KERNEL[id(probes)] = (probes, table)
    return table


def find_probe(name: str) -> Probe:
    for probe in all_probes():
        if probe.name == name:
            return probe
    raise GpuprobeError(f"no probe named {name!r}")
