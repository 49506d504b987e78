"""SASS contracts: what a probe's compiled code must look like, checked rule by rule.

A contract is data declared next to the probe's source (:mod:`gpuprobe.kernels.registry`): rules, each
naming a region of the kernel and a property of the instructions in it. docs/contracts.md lists the
regions, the rule kinds and how a rule is limited to some archs.
"""

from __future__ import annotations

import functools
import itertools
import re
from dataclasses import dataclass, field
from typing import Any

from gpuprobe.core.arch import Arch, parse_arch
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.kernels.sass import Instruction, Kernel, Loop

MEMORY_OPCODES = frozenset(
    {
        "LD", "LDG", "LDS", "LDL", "LDC", "ULDC", "LDSM", "LDGSTS", "LDGDEPBAR", "LDTRAM",
        "ST", "STG", "STS", "STL", "STSM",
        "ATOM", "ATOMG", "ATOMS", "RED", "REDG", "REDAS",
        "TEX", "TLD", "TLD4", "TXQ", "SULD", "SUST", "SUATOM", "SURED", "CCTL", "CCTLL",
        "UBLKCP", "UBLKRED", "UBLKPF", "UTMALDG", "UTMASTG", "UTMAPF", "UTMAREDG", "UTMACCTL",
        "LDCU", "LDGMC", "STAS", "LDTM", "STTM", "SYNCS", "MEMBAR", "FENCE", "ERRBAR",
    }
)  # fmt: skip

_TEXT_FIELDS = frozenset({"rule", "region", "opcode", "why", "min_arch", "max_arch"})
RULE_KINDS = (
    "forbid",
    "count",
    "only",
    "only_memory",
    "clock_bracket",
    "dependent_chain",
    "control_off_chain",
    "no_local",
    "no_compile_notes",
)
REGIONS = ("kernel", "timed", "timed_loop", "timed_outside_loop")
CLOCK_OPERAND = re.compile(r"SR_CLOCKLO")


@dataclass(frozen=True)
class Rule:
    kind: str
    region: str = "kernel"
    opcode: str | None = None
    count: int | None = None
    min: int | None = None
    max: int | None = None
    reads: int = 2
    loops: int = 1
    why: str = ""
    min_arch: str | None = None  # the rule holds on this arch and newer (by arch number)
    max_arch: str | None = None  # ... and on this arch and older

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str) -> Rule:
        unknown = set(data) - ({"rule"} | set(cls.__dataclass_fields__) - {"kind"})
        if unknown:
            raise GpuprobeError(f"{where}: unknown contract key(s) {sorted(unknown)}")
        kind = data.get("rule")
        if kind not in RULE_KINDS:
            raise GpuprobeError(f"{where}: unknown contract rule {kind!r}; known: {', '.join(RULE_KINDS)}")
        for key, value in data.items():
            expected = str if key in _TEXT_FIELDS else int
            if type(value) is not expected:  # bool is an int to isinstance, and never meant here
                raise GpuprobeError(f"{where}: {key!r} must be {'a string' if expected is str else 'an integer'}")
        rule = cls(kind=kind, **{k: v for k, v in data.items() if k != "rule"})
        if rule.region not in REGIONS:
            raise GpuprobeError(f"{where}: unknown region {rule.region!r}; known: {', '.join(REGIONS)}")
        if (
            kind in ("forbid", "count", "only", "only_memory", "dependent_chain", "control_off_chain")
            and not rule.opcode
        ):
            raise GpuprobeError(f"{where}: rule {kind!r} needs an opcode pattern")
        if rule.opcode:
            try:
                re.compile(rule.opcode)
            except re.error as exc:
                raise GpuprobeError(f"{where}: bad opcode pattern {rule.opcode!r}: {exc}") from None
        if kind == "count" and rule.count is None and rule.min is None and rule.max is None:
            raise GpuprobeError(f"{where}: rule 'count' needs count, min or max")
        for key in ("min_arch", "max_arch"):
            if getattr(rule, key) is not None:
                try:
                    parse_arch(getattr(rule, key))
                except GpuprobeError as exc:
                    raise GpuprobeError(f"{where}: {key}: {exc}") from None
        low, high = rule._arch_numbers()
        if low is not None and high is not None and low > high:
            raise GpuprobeError(f"{where}: min_arch {rule.min_arch} is newer than max_arch {rule.max_arch}")
        return rule

    def _arch_numbers(self) -> tuple[int | None, int | None]:
        low = parse_arch(self.min_arch).number if self.min_arch else None
        high = parse_arch(self.max_arch).number if self.max_arch else None
        return low, high

    def applies_to(self, arch: Arch) -> bool:
        """Whether the rule is checked on ``arch`` (see ``min_arch`` and ``max_arch``)."""
        low, high = self._arch_numbers()
        return (low is None or arch.number >= low) and (high is None or arch.number <= high)

    def _archs_text(self) -> str:
        if self.min_arch and self.max_arch:
            return f" (on {self.min_arch}..{self.max_arch})"
        if self.min_arch:
            return f" (on {self.min_arch} and newer)"
        return f" (on {self.max_arch} and older)" if self.max_arch else ""

    def describe(self) -> str:
        return self._describe_rule() + self._archs_text()

    def _describe_rule(self) -> str:
        if self.kind == "count":
            bound = f"== {self.count}" if self.count is not None else f"in [{self.min}, {self.max}]"
            return f"count {self.opcode} in {self.region} {bound}"
        if self.kind == "clock_bracket":
            if self.min is not None or self.max is not None:
                return f"{self.reads} clock reads bracketing {self.min or 0}..{self.max or 'any'} loops"
            return f"{self.reads} clock reads bracketing {self.loops} loop(s)"
        if self.kind == "no_local":
            return "no local memory (stack frame, spills)"
        if self.kind == "no_compile_notes":
            return "no numbered ptxas notes (serialization, injected waits)"
        return f"{self.kind} {self.opcode} in {self.region}"


@dataclass
class Violation:
    rule: str
    message: str
    lines: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        shown = "".join(f"\n    {line}" for line in self.lines[:12])
        more = f"\n    ... {len(self.lines) - 12} more" if len(self.lines) > 12 else ""
        return f"rule '{self.rule}' violated: {self.message}{shown}{more}"


def _sass_line(ins: Instruction) -> str:
    return f"/*{ins.offset:04x}*/ {ins.text()} ;"


def _innermost(loops: list[Loop]) -> list[Loop]:
    return [a for a in loops if not any(b is not a and a.start <= b.start and b.end <= a.end for b in loops)]


class _RegionError(Exception):
    pass


class KernelRegions:
    """What the rules ask of one kernel, each worked out once however many rules ask: its clock
    reads, its loops, the loops between the clock reads, and the instructions of each region."""

    def __init__(self, kernel: Kernel) -> None:
        self.kernel = kernel
        self._regions: dict[str, tuple[list[Instruction], bool]] = {}

    @functools.cached_property
    def clock_reads(self) -> list[Instruction]:
        return [ins for ins in self.kernel.instructions if any(CLOCK_OPERAND.search(op) for op in ins.operands)]

    @functools.cached_property
    def loops(self) -> list[Loop]:
        return self.kernel.loops

    @functools.cached_property
    def timed_loops(self) -> list[Loop]:
        """The innermost loops between the first and the last clock read."""
        reads = self.clock_reads
        if len(reads) < 2:
            return []
        first, last = reads[0].offset, reads[-1].offset
        return _innermost([loop for loop in self.loops if first < loop.start and loop.end < last])

    def region(self, name: str) -> tuple[list[Instruction], bool]:
        """The instructions of a region, and whether the region is a loop (for chains that wrap)."""
        if name not in self._regions:
            self._regions[name] = self._region(name)
        return self._regions[name]

    def _region(self, name: str) -> tuple[list[Instruction], bool]:
        kernel = self.kernel
        if name == "kernel":
            return kernel.instructions, False
        reads = self.clock_reads
        if len(reads) < 2:
            raise _RegionError(f"region {name!r} needs two clock reads, found {len(reads)}")
        timed = kernel.between(reads[0].offset + 1, reads[-1].offset - 1)
        if name == "timed":
            return timed, False
        loops = self.timed_loops
        if len(loops) != 1:
            raise _RegionError(f"region {name!r} needs exactly one loop between the clock reads, found {len(loops)}")
        if name == "timed_outside_loop":
            return [ins for ins in timed if not loops[0].contains(ins.offset)], False
        return kernel.between(loops[0].start, loops[0].end), True


def clock_reads(kernel: Kernel) -> list[Instruction]:
    return KernelRegions(kernel).clock_reads


def timed_loops(kernel: Kernel) -> list[Loop]:
    return KernelRegions(kernel).timed_loops


def _matching(instructions: list[Instruction], pattern: str) -> list[Instruction]:
    compiled = re.compile(pattern)
    return [ins for ins in instructions if compiled.fullmatch(ins.opcode)]


_ADDRESS_REGISTER = re.compile(r"\[(U?R\d+)")
_REGISTER = re.compile(r"\b(U?R)(\d+)\b")


def _address_register(ins: Instruction) -> str | None:
    for operand in ins.operands[1:]:
        groups = _ADDRESS_REGISTER.findall(operand)
        if groups:
            return groups[-1]
    return None


def _registers(operand: str, width: int = 1) -> set[str]:
    """The registers an operand names, a wide one (``R2`` of a 64-bit value) with its pair."""
    named = set()
    for prefix, number in _REGISTER.findall(operand):
        if number != "Z":
            named.update(f"{prefix}{int(number) + k}" for k in range(width))
    return named


def _width(ins: Instruction) -> int:
    """Registers per value the instruction moves: 2 for .64, 4 for .128, else 1."""
    return {"64": 2, "128": 4}.get(next((m for m in ins.opcode.split(".") if m in ("64", "128")), ""), 1)


def _writes(ins: Instruction) -> set[str]:
    """Registers an instruction writes: its first operand, when that is a register."""
    if not ins.operands or "[" in ins.operands[0]:
        return set()
    return _registers(ins.operands[0], _width(ins))


def _check_chain(region: list[Instruction], loads: list[Instruction], wraps: bool) -> list[Instruction]:
    """Loads that are predicated, or whose address is not the previous load's value, untouched since."""
    broken = [load for load in loads if load.predicate]
    pairs = list(itertools.pairwise(loads))
    if wraps and len(loads) > 1:
        pairs.append((loads[-1], loads[0]))
    for previous, current in pairs:
        address = _address_register(current)
        if address != previous.operands[0]:
            broken.append(current)
            continue
        wide = 2 if any(".64]" in op for op in current.operands[1:]) else 1
        if any(_registers(address, wide) & _writes(i) for i in _between(region, previous, current)):
            broken.append(current)
    return sorted(set(broken), key=lambda i: i.offset)


def _between(region: list[Instruction], first: Instruction, second: Instruction) -> list[Instruction]:
    """What runs after ``first`` and before ``second``; in a loop, ``second`` may come round again."""
    if second.offset > first.offset:
        return [i for i in region if first.offset < i.offset < second.offset]
    return [i for i in region if i.offset > first.offset or i.offset < second.offset]


def _readers_of_chain(region: list[Instruction], loads: list[Instruction]) -> list[Instruction]:
    """Instructions, other than the loads, that read a register the loads write."""
    loaded = set().union(*(_writes(load) for load in loads)) if loads else set()
    readers = []
    chain = set(loads)
    for ins in (i for i in region if i not in chain):
        sources = ins.operands[1:] if _writes(ins) else ins.operands
        if any(_registers(op) & loaded for op in sources):
            readers.append(ins)
    return readers


def check_rule(kernel: Kernel, rule: Rule) -> Violation | None:
    return _checked_rule(KernelRegions(kernel), rule)


def _checked_rule(regions: KernelRegions, rule: Rule) -> Violation | None:
    try:
        return _check_rule(regions, rule)
    except _RegionError as exc:
        return Violation(rule.describe(), str(exc))


def _check_rule(regions: KernelRegions, rule: Rule) -> Violation | None:
    kernel = regions.kernel
    name = rule.describe()
    if rule.kind == "no_local":
        if kernel.local_bytes is None:
            return Violation(name, "the stack size is unknown (recursion or an indirect call)")
        local = kernel.local_bytes
        spills = (kernel.spill_store_bytes or 0) + (kernel.spill_load_bytes or 0)
        if local or spills:
            return Violation(name, f"stack frame {local} bytes, spills {spills} bytes")
        return None
    if rule.kind == "no_compile_notes":
        if kernel.compile_notes:
            return Violation(
                name, f"ptxas changed what was written ({len(kernel.compile_notes)} note(s))", kernel.compile_notes
            )
        return None
    if rule.kind == "clock_bracket":
        return _check_bracket(regions, rule)
    instructions, wraps = regions.region(rule.region)
    assert rule.opcode is not None
    matching = _matching(instructions, rule.opcode)
    matched = set(matching)
    if rule.kind == "forbid" and matching:
        return Violation(name, f"{len(matching)} forbidden instruction(s)", [_sass_line(i) for i in matching])
    if rule.kind == "count":
        low = rule.count if rule.count is not None else rule.min
        high = rule.count if rule.count is not None else rule.max
        if (low is not None and len(matching) < low) or (high is not None and len(matching) > high):
            shown = matching or instructions
            return Violation(name, f"found {len(matching)}", [_sass_line(i) for i in shown])
    if rule.kind == "only_memory":
        others = [i for i in instructions if i.base in MEMORY_OPCODES and i not in matched]
        if others:
            return Violation(name, f"{len(others)} other memory instruction(s)", [_sass_line(i) for i in others])
    if rule.kind == "only":
        others = [i for i in instructions if i not in matched]
        if others:
            return Violation(name, f"{len(others)} instruction(s) not allowed here", [_sass_line(i) for i in others])
    if rule.kind == "control_off_chain":
        readers = _readers_of_chain(instructions, matching)
        if readers:
            return Violation(
                name, f"{len(readers)} instruction(s) wait for the chain", [_sass_line(i) for i in readers]
            )
    if rule.kind == "dependent_chain":
        broken = _check_chain(instructions, matching, wraps)
        if broken or not matching:
            message = "no such instructions" if not matching else f"{len(broken)} load(s) not fed by the previous one"
            return Violation(name, message, [_sass_line(i) for i in broken])
    return None


def _check_bracket(regions: KernelRegions, rule: Rule) -> Violation | None:
    reads = regions.clock_reads
    lines = [_sass_line(i) for i in reads]
    if len(reads) != rule.reads:
        return Violation(rule.describe(), f"found {len(reads)} clock reads", lines)
    loops = regions.timed_loops
    ranged = rule.min is not None or rule.max is not None
    low, high = (rule.min, rule.max) if ranged else (rule.loops, rule.loops)
    if (low is not None and len(loops) < low) or (high is not None and len(loops) > high):
        return Violation(rule.describe(), f"found {len(loops)} loop(s) between the clock reads", lines)
    inside = [i for i in reads if any(loop.contains(i.offset) for loop in regions.loops)]
    if inside:
        return Violation(rule.describe(), "a clock read sits inside a loop", [_sass_line(i) for i in inside])
    return None


def check(kernel: Kernel, rules: list[Rule]) -> list[Violation]:
    """Every rule's violation, if any; the kernel's regions are worked out once for all the rules."""
    regions = KernelRegions(kernel)
    return [v for v in (_checked_rule(regions, rule) for rule in rules) if v is not None]
