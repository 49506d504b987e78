"""Parsing nvdisasm's listing into kernels, instructions, loops and resource usage.

The parser keeps every instruction exactly as the disassembler printed it: the full opcode with
all its dot-modifiers (``LDG.E.64.STRONG.GPU``), the guard predicate (``@!P0``) and the operands
split at top-level commas. :meth:`Instruction.text` re-renders an instruction, so the parse can be
checked against the disassembler's own text.
"""

from __future__ import annotations

import contextlib
import functools
import json
import pickle
import re
from collections.abc import Collection
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gpuprobe.core.cache import content_key, read_entry, write_entry
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.kernels import flow, outputs
from gpuprobe.kernels.flow import Step, back_edges
from gpuprobe.kernels.outputs import INSTRUCTION, SECTION
from gpuprobe.kernels.toolchain import disassemble

_PREDICATE = re.compile(r"^@!?U?P(?:T|\d+)$")
_LABEL = re.compile(r"^(?P<name>[.$\w]+):\s*$")
_TARGET = re.compile(r"^\s*\.target\s+(?P<arch>\w+)")
_BRANCH_TARGET = re.compile(r"`\((?P<label>[^()`]+)\)")
_NVINFO = re.compile(r"//----- nvinfo : (?P<attr>EIATTR_\w+)")
_WORD = re.compile(r"^\s*/\*[0-9a-fA-F]+\*/\s+\.word\s+(?P<value>\S+)")
_ZERO = re.compile(r"^\s*\.zero\s+(?P<size>\d+)")
_ENTRY = re.compile(r"^\s*\.other\s+(?P<name>[^,\s]+),\s*@\"STO_CUDA_ENTRY")
_BRACKETS = {"[": "]", "(": ")", "{": "}"}
_SPLIT_POINTS = re.compile(r"[\[\](){},]")
_UNBOUNDED_STACK = 0xFFFFFFFF  # EIATTR_MIN_STACK_SIZE of a kernel whose call graph recurses
_KERNEL_ATTRS = ("EIATTR_REGCOUNT", "EIATTR_FRAME_SIZE", "EIATTR_MIN_STACK_SIZE")


@dataclass(frozen=True)
class Instruction:
    offset: int
    predicate: str | None
    opcode: str  # the full mnemonic, e.g. "LDG.E.64.STRONG.GPU"
    operands: tuple[str, ...]
    annotation: str | None = None  # nvdisasm's trailing (*"..."*) comment, e.g. BRX's branch targets

    @property
    def base(self) -> str:
        """The opcode without modifiers: ``LDG`` for ``LDG.E.64.STRONG.GPU``."""
        return self.opcode.split(".", 1)[0]

    def text(self) -> str:
        """The instruction as nvdisasm prints it (without offset and terminator)."""
        head = f"{self.predicate} {self.opcode}" if self.predicate else self.opcode
        text = f"{head} {', '.join(self.operands)}" if self.operands else head
        return f"{text} {self.annotation}" if self.annotation else text

    def branch_target(self) -> str | None:
        match = _BRANCH_TARGET.search(" ".join(self.operands))
        return match["label"] if match else None

    def to_json(self) -> dict[str, Any]:
        found: dict[str, Any] = {"offset": self.offset, "predicate": self.predicate, "opcode": self.opcode}
        found["operands"] = list(self.operands)
        if self.annotation:
            found["annotation"] = self.annotation
        return found


@dataclass(frozen=True)
class Loop:
    """A backward branch: the body runs from ``start`` (the label) to ``end`` (the branch)."""

    start: int
    end: int
    label: str

    def contains(self, offset: int) -> bool:
        return self.start <= offset <= self.end


def _merge_interleaved(loops: list[Loop]) -> list[Loop]:
    """Loops whose bodies partly overlap, merged (repeatedly) into their union; nesting is kept."""
    merged = list(loops)
    changed = True
    while changed:
        changed = False
        for a in merged:
            b = next((b for b in merged if a.start < b.start <= a.end < b.end), None)
            if b is not None:
                merged = [x for x in merged if x is not a and x is not b]
                merged.append(Loop(start=a.start, end=b.end, label=a.label))
                changed = True
                break
    return sorted(merged, key=lambda loop: (loop.start, loop.end))


@dataclass
class Kernel:
    name: str
    entry: bool = False
    instructions: list[Instruction] = field(default_factory=list)
    labels: dict[str, int] = field(default_factory=dict)
    registers: int | None = None
    shared_bytes: int = 0
    local_bytes: int | None = None  # per-thread stack the kernel needs, callees included; None: unbounded (recursion)
    spill_store_bytes: int | None = None  # known only when gpuprobe compiled it (ptxas -v)
    spill_load_bytes: int | None = None
    compile_notes: list[str] = field(default_factory=list)  # ptxas's numbered notes on it, e.g. wgmma serialized

    @property
    def loops(self) -> list[Loop]:
        """One loop per back edge: a backward branch whose target dominates it (a branch back into a loop
        from an out-of-line slow path is not one; see :mod:`gpuprobe.kernels.flow`). Two whose bodies
        interleave (each starts inside the other and ends outside it, as ptxas lays out a spin with its
        convergence loop) are one loop, their union."""
        closing = back_edges([self._step(ins) for ins in self.instructions])
        found: list[Loop] = []
        for ins in self.instructions:
            if not ins.opcode.startswith(("BRA", "JMP")) or (closing is not None and ins.offset not in closing):
                continue
            label = ins.branch_target()
            if label is None:
                continue
            target = self.labels.get(label)
            if target is not None and target <= ins.offset:
                found.append(Loop(start=target, end=ins.offset, label=label))
        return _merge_interleaved(found)

    def _step(self, ins: Instruction) -> Step:
        label = ins.branch_target()
        target = self.labels.get(label) if label is not None else None
        return Step(ins.offset, ins.opcode, ins.predicate is not None, len(ins.operands), target)

    def between(self, start: int, end: int) -> list[Instruction]:
        return [ins for ins in self.instructions if start <= ins.offset <= end]

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "entry": self.entry,
            "registers": self.registers,
            "shared_bytes": self.shared_bytes,
            "local_bytes": self.local_bytes,
            "spill_store_bytes": self.spill_store_bytes,
            "spill_load_bytes": self.spill_load_bytes,
            "instructions": [ins.to_json() for ins in self.instructions],
            "loops": [asdict(loop) for loop in self.loops],
        }


@dataclass
class Listing:
    arch: str
    kernels: dict[str, Kernel]

    def kernel(self, name: str) -> Kernel:
        try:
            return self.kernels[name]
        except KeyError:
            known = ", ".join(sorted(self.kernels)) or "none"
            raise GpuprobeError(f"no kernel {name!r} in the cubin (it has: {known})") from None

    def to_json(self) -> dict[str, Any]:
        return {"arch": self.arch, "kernels": [k.to_json() for k in self.kernels.values()]}


def split_operands(text: str) -> tuple[str, ...]:
    """Split at commas outside brackets; a label operand is bracketed too, as in ``BRA `(.L_x_0)``.

    Only the brackets and commas are visited (found by one regex), the text between them is sliced;
    without an opening bracket every comma splits."""
    if not any(opening in text for opening in _BRACKETS):
        return tuple(part.strip() for part in text.split(",")) if text.strip() else ()
    parts, depth, start = [], [], 0
    for match in _SPLIT_POINTS.finditer(text):
        char = match.group()
        if char in _BRACKETS:
            depth.append(_BRACKETS[char])
        elif depth and char == depth[-1]:
            depth.pop()
        elif char == "," and not depth:
            parts.append(text[start : match.start()].strip())
            start = match.end()
    tail = text[start:].strip()
    if tail or parts:
        parts.append(tail)
    return tuple(parts)


def _split_annotation(body: str) -> tuple[str, str | None]:
    """Split off nvdisasm's trailing comment, e.g. BRX's ``(*"BRANCH_TARGETS .L_x_3,.L_x_4"*)``."""
    start = body.find("(*")
    if start < 0 or not body.rstrip().endswith("*)"):
        return body, None
    return body[:start], body[start:].rstrip()


def parse_instruction(offset: int, body: str) -> Instruction:
    body, annotation = _split_annotation(body)
    tokens = body.split(None, 1)
    predicate = None
    if tokens and _PREDICATE.match(tokens[0]):
        predicate = tokens[0]
        tokens = tokens[1].split(None, 1) if len(tokens) > 1 else []
    if not tokens:
        raise GpuprobeError(f"SASS line at /*{offset:04x}*/ has no opcode: {body!r}")
    operands = split_operands(tokens[1]) if len(tokens) > 1 else ()
    return Instruction(offset, predicate, tokens[0], operands, annotation)


class _ListingParser:
    """A single pass over the listing, tracking the current section."""

    def __init__(self, only: Collection[str] | None = None) -> None:
        self.only = None if only is None else frozenset(only)  # the kernels whose code is parsed (None: all)
        self.arch = ""
        self.kernels: dict[str, Kernel] = {}
        self.entries: set[str] = set()
        self.section = ""
        self.attr = ""
        self.words: list[str] = []
        self.attrs: list[tuple[str, list[str]]] = []

    def kernel(self, name: str) -> Kernel:
        return self.kernels.setdefault(name, Kernel(name))

    def feed(self, line: str) -> None:
        directive = line.lstrip().startswith(".")  # what a .section, .target or .other line starts with
        if directive and (match := SECTION.match(line)):
            self._end_attr()
            self.section = match["name"]
            if self.section.startswith(".text."):
                self.kernel(self.section[len(".text.") :])
            return
        if directive and (match := _TARGET.match(line)):
            self.arch = match["arch"]
        elif directive and (match := _ENTRY.match(line)):
            self.entries.add(match["name"])
        elif self.section.startswith(".text."):
            name = self.section[len(".text.") :]
            if self.only is None or name in self.only:
                self._feed_code(self.kernels[name], line)
        elif self.section.startswith(".nv.info"):
            self._feed_info(line)
        elif self.section.startswith(".nv.shared.") and (match := _ZERO.match(line)):
            name = self.section[len(".nv.shared.") :]
            if name in self.kernels or not name.startswith("reserved"):
                self.kernel(name).shared_bytes += int(match["size"])

    def _feed_code(self, kernel: Kernel, line: str) -> None:
        if match := INSTRUCTION.match(line):
            body = match["body"].rstrip()
            body = body[:-1].rstrip() if body.endswith(";") else body
            kernel.instructions.append(parse_instruction(int(match["offset"], 16), body))
        elif match := _LABEL.match(line.strip()):
            next_offset = kernel.instructions[-1].offset + 16 if kernel.instructions else 0
            kernel.labels[match["name"]] = next_offset

    def _feed_info(self, line: str) -> None:
        if match := _NVINFO.search(line):
            self._end_attr()
            self.attr = match["attr"]
        elif self.attr and (match := _WORD.match(line)):
            self.words.append(match["value"])

    def _end_attr(self) -> None:
        if self.attr:
            self.attrs.append((self.attr, self.words))
        self.attr, self.words = "", []

    def finish(self) -> Listing:
        self._end_attr()
        stacks: dict[str, int] = {}
        for attr, words in self.attrs:
            if attr not in _KERNEL_ATTRS or len(words) != 2 or not words[0].startswith("index@("):
                continue
            kernel = self.kernels.get(words[0][len("index@(") : -1])
            if kernel is None:
                continue
            try:
                value = int(words[1], 0)
            except ValueError:
                raise GpuprobeError(f"{attr} of {kernel.name}: not a number: {words[1]!r}") from None
            if attr == "EIATTR_REGCOUNT":
                kernel.registers = value
            elif attr == "EIATTR_FRAME_SIZE":
                kernel.local_bytes = value
            elif attr == "EIATTR_MIN_STACK_SIZE":
                stacks[kernel.name] = value
        # The stack a kernel needs covers its callees' frames too (what cuobjdump -res-usage calls STACK);
        # with recursion it has no static bound, and the frame size alone would understate it.
        for name, stack in stacks.items():
            self.kernels[name].local_bytes = None if stack == _UNBOUNDED_STACK else stack
        for name in self.entries:
            if name in self.kernels:
                self.kernels[name].entry = True
        return Listing(arch=self.arch, kernels=self.kernels)


def parse_listing(text: str, only: Collection[str] | None = None) -> Listing:
    """Parse nvdisasm's full listing (not ``-c``: resource attributes live outside the code); given
    ``only``, the code of those kernels alone (the others are listed, their instructions left out)."""
    parser = _ListingParser(only)
    for line in text.splitlines():
        parser.feed(line)
    return parser.finish()


_PTXAS_FUNCTION = re.compile(r"Function properties for (?P<name>\S+)")
# A numbered ptxas diagnostic about one function, e.g. "(C7515) Potential Performance Loss: wgmma.mma_async
# instructions are serialized due to ... in the function 'k'" or "(C7517) wgmma.wait_group is injected ...".
_PTXAS_NOTE = re.compile(r"ptxas (?:info|warning)\s*:\s*(?P<note>\(C\d+\).*?function '(?P<name>[^']+)'.*)$")
_PTXAS_SPILL = re.compile(
    r"(?P<frame>\d+) bytes stack frame, (?P<store>\d+) bytes spill stores, (?P<load>\d+) bytes spill loads"
)


def apply_compile_log(listing: Listing, log: str) -> None:
    """Attach ptxas -v's spill figures and numbered notes (known only for code gpuprobe compiled) to the kernels."""
    current = None
    for line in log.splitlines():
        if (match := _PTXAS_NOTE.search(line)) and match["name"] in listing.kernels:
            listing.kernels[match["name"]].compile_notes.append(match["note"].strip())
        elif match := _PTXAS_FUNCTION.search(line):
            current = listing.kernels.get(match["name"])
        elif current is not None and (match := _PTXAS_SPILL.search(line)):
            current.spill_store_bytes = int(match["store"])
            current.spill_load_bytes = int(match["load"])
            current = None


@functools.cache
def _parser_identity() -> bytes:
    """What a parsed listing depends on besides the listing's text: this parser's code (its grammar's two
    patterns in :mod:`gpuprobe.kernels.outputs` too)."""
    return b"".join(Path(module).read_bytes() for module in (__file__, flow.__file__, outputs.__file__))


def read_cubin(path: Path, only: Collection[str] | None = None) -> Listing:
    """The parsed listing of ``path``'s cubin. A parse is kept in the cache by the listing's text, the
    kernels asked for and the parser's code, so a measuring process or a warm check reads it back (tens
    of milliseconds) instead of parsing the whole module again (most of a second)."""
    text = disassemble(path)
    key = content_key("listing", _parser_identity(), text, "\0".join(sorted(only)) if only is not None else "\0all")
    cached = read_entry(key, ".pickle")
    if cached is not None:
        with contextlib.suppress(Exception):  # a verified entry another Python cannot unpickle is parsed again
            listing = pickle.loads(cached)
            if isinstance(listing, Listing):
                return listing
    try:
        listing = parse_listing(text, only)
    except GpuprobeError as exc:  # a listing in form (judged before it was cached) whose lines do not parse
        raise GpuprobeError(f"{path}: nvdisasm's listing of it cannot be parsed: {exc}") from None
    with contextlib.suppress(OSError):  # an unwritable cache costs the next reader a parse, nothing more
        write_entry(key, ".pickle", pickle.dumps(listing, protocol=pickle.HIGHEST_PROTOCOL))
    return listing


def kernel_opcodes(path: Path) -> dict[str, frozenset[str]]:
    """Each kernel of ``path``'s cubin and the opcodes its code holds (their bases, e.g. ``HMMA``), for a reader
    that needs no more: kept in the cache by the listing's text and the parser's code, a small fraction of
    reading the whole parsed listing back (:func:`read_cubin`)."""
    key = content_key("opcodes", _parser_identity(), disassemble(path))
    cached = read_entry(key, ".opcodes.json")
    if cached is not None:
        with contextlib.suppress(ValueError):  # a verified entry that does not decode is made again
            return {kernel: frozenset(bases) for kernel, bases in json.loads(cached).items()}
    listing = read_cubin(path)
    opcodes = {name: sorted({i.base for i in kernel.instructions}) for name, kernel in listing.kernels.items()}
    with contextlib.suppress(OSError):  # an unwritable cache costs the next reader the listing, nothing more
        write_entry(key, ".opcodes.json", json.dumps(opcodes).encode())
    return {kernel: frozenset(bases) for kernel, bases in opcodes.items()}
