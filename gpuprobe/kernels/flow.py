"""Control flow of a kernel's SASS: which of its backward branches close loops.

A backward branch closes a loop when its target dominates it: every path from the kernel's entry to
the branch passes through the target (a loop's header comes before its latch on every path). Most
backward branches are such back edges. The exception is ptxas's out-of-line slow path of a warp
collective it could not prove converged (a shuffle over a sub-warp tile's lanes, a group formed in a
divergent branch): the loop body tests convergence (``BRA.DIV``) and, on the slow path, jumps to code
laid out after the kernel's exit, which runs the collective lane by lane and branches *back* into
the loop body to resume. That branch is backward in the layout but is no loop: the point it resumes
at does not dominate it (the slow path is entered from before that point). Counting it as a loop
would make the loop seem to wrap the clock reads around it.

Edges: an unconditional branch goes to its target only; a predicated one, ``BRA.DIV``/``BRA.CONV``,
``BRA.U`` with a uniform predicate, and the label of ``WARPSYNC.COLLECTIVE`` also fall through; a call
goes to its callee and returns to the next instruction; ``EXIT``/``RET``/``KILL`` end a path unless
predicated. ``BSSY`` names its reconvergence point but does not branch. An indirect branch
(``BRX``/``JMX``) makes the flow unknown: then every backward branch counts as a loop, as it would
without this analysis.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

_ENDS = frozenset({"EXIT", "RET", "KILL"})
_JUMPS = frozenset({"BRA", "JMP"})
_CALLS = frozenset({"CALL", "JMXU"})
_INDIRECT = frozenset({"BRX", "JMX"})


@dataclass(frozen=True)
class Step:
    """One instruction as control flow sees it."""

    offset: int
    opcode: str  # the full mnemonic
    predicated: bool
    operands: int  # how many operands it has (an unconditional BRA has only its target)
    target: int | None  # the offset its label names, if it names one


def _base(step: Step) -> str:
    return step.opcode.split(".", 1)[0]


def _successors(step: Step, following: int | None) -> list[int] | None:
    """Where control goes after ``step`` (offsets); None for an indirect branch (unknown)."""
    base = _base(step)
    through = [following] if following is not None else []
    if base in _INDIRECT:
        return None
    if base in _ENDS:
        return through if step.predicated else []
    if base in _JUMPS and step.target is not None:
        conditional = step.predicated or step.operands > 1 or ".DIV" in step.opcode or ".CONV" in step.opcode
        return [step.target, *through] if conditional else [step.target]
    if (base in _CALLS or step.opcode.startswith("WARPSYNC.COLLECTIVE")) and step.target is not None:
        return [step.target, *through]
    return through


def back_edges(steps: Sequence[Step]) -> set[int] | None:
    """Offsets of the backward branches whose target dominates them; None when the flow is unknown."""
    if not steps:
        return set()
    index = {step.offset: i for i, step in enumerate(steps)}
    leaving: list[list[int] | None] = []  # per instruction: where control goes, when not simply on
    for i, step in enumerate(steps):
        following = steps[i + 1].offset if i + 1 < len(steps) else None
        found = _successors(step, following)
        if found is None:
            return None
        simple = found == [following] and step.target is None
        leaving.append(None if simple else [index[offset] for offset in found if offset in index])
    after = {i + 1 for i, out in enumerate(leaving) if out is not None and i + 1 < len(steps)}
    starts = sorted({0} | after | {target for out in leaving if out for target in out})
    ends = [*starts[1:], len(steps)]
    block_of = [0] * len(steps)
    for number, (first, end) in enumerate(zip(starts, ends, strict=True)):
        block_of[first:end] = [number] * (end - first)
    successors: list[set[int]] = []
    for end in ends:
        out = leaving[end - 1]
        if out is None:  # the block ends where another starts: control runs on into it
            out = [end] if end < len(steps) else []
        successors.append({block_of[target] for target in out})
    dominators = _dominators(successors)
    return {
        step.offset
        for i, step in enumerate(steps)
        if _base(step) in _JUMPS and step.target is not None and step.target <= step.offset
        and step.target in index and dominators[block_of[i]] >> block_of[index[step.target]] & 1
    }  # fmt: skip


def _dominators(successors: list[set[int]]) -> list[int]:
    """Each basic block's dominators as a bit set (block 0 the entry), by the iterative data-flow
    method in layout order; a block no path reaches keeps "every block"."""
    count = len(successors)
    predecessors: list[list[int]] = [[] for _ in range(count)]
    for source, targets in enumerate(successors):
        for target in targets:
            predecessors[target].append(source)
    everything = (1 << count) - 1
    dominators = [everything] * count
    dominators[0] = 1
    changed = True
    while changed:
        changed = False
        for block in range(1, count):
            found = everything
            for predecessor in predecessors[block]:
                found &= dominators[predecessor]
            found |= 1 << block
            if found != dominators[block]:
                dominators[block] = found
                changed = True
    return dominators
