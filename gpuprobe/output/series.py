"""Sweeps folded into one row: facts whose ids differ in one part only (``alu.ffma.throughput.ilp1`` ...
``ilp8``, ``sync.block.latency.32`` ... ``1024``), shown as one line of values.

A fact is folded only when the row it shares says all its own row would: the caller says what a sweep's
members must share (unit, expected range, source, verdict) and which facts keep their own row (a failure,
a note). Facts whose ids differ in one part (``host.h2d.latency`` and ``host.d2h.latency`` too), or when
no such sweep has two members in two neighbouring parts, fold into one row naming the varying part once,
``alu.*.throughput.ilp1``, and listing every member's value by its label (``ffma 63.67 · dfma 42.4 · ...``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpuprobe.core.results import Fact

SMALLEST = 2  # a sweep folds when it has at least this many members
WILD = "*"


@dataclass(frozen=True)
class Series:
    """Facts of one sweep: ``pattern`` is their id with the varying part (one or two name parts) as ``*``,
    ``labels`` that part of each."""

    pattern: str
    labels: tuple[str, ...]
    facts: tuple[Fact, ...]


def _keys(fact: Fact, kin: str) -> list[str]:
    """The sweeps a fact could belong to, most specific first: its id with one part wild (the later parts
    first), then with two neighbouring parts wild; each key ends with the fact's kin and the wild span."""
    parts = fact.id.split(".")
    keys = []
    for width in (1, 2):
        for i in range(len(parts) - width, 0, -1):
            pattern = ".".join([*parts[:i], WILD, *parts[i + width :]])
            keys.append(f"{pattern}\0{kin}\0{i}\0{width}")
    return keys


def fold(facts: list[Fact], foldable: Callable[[Fact], str | None]) -> list[Fact | Series]:
    """``facts`` in order, sweeps folded. ``foldable`` gives a fact's kin (what its sweep must share with
    it: unit, range, source) or None when it must keep its own row. Each foldable fact joins the largest
    sweep with one part wild it could belong to (the later part on a tie), or when none is large enough the
    largest with two parts wild; a sweep under ``SMALLEST`` members unfolds."""
    keys = {id(f): _keys(f, kin) for f in facts if (kin := foldable(f)) is not None}
    counts: dict[str, int] = {}
    for fact_keys in keys.values():
        for key in fact_keys:
            counts[key] = counts.get(key, 0) + 1
    chosen = {fid: _best(fact_keys, counts) for fid, fact_keys in keys.items() if fact_keys}
    members: dict[str, list[Fact]] = {}
    for fact in facts:
        if id(fact) in chosen:
            members.setdefault(chosen[id(fact)], []).append(fact)
    out: list[Fact | Series] = []
    placed: set[str] = set()
    for fact in facts:
        key = chosen.get(id(fact))
        group = members.get(key, []) if key else []
        if key is None or len(group) < SMALLEST:
            out.append(fact)
        elif key not in placed:
            placed.add(key)
            out.append(_series(key, group))
    return out


def _best(keys: list[str], counts: dict[str, int]) -> str:
    """The largest sweep with one part wild when it is large enough to fold, else the largest of all."""
    narrow = max((k for k in keys if k.endswith("\0001")), key=lambda k: counts[k], default=None)
    if narrow is not None and counts[narrow] >= SMALLEST:
        return narrow
    return max(keys, key=lambda k: counts[k])


def _series(key: str, facts: list[Fact]) -> Series:
    pattern = key.split("\0", 1)[0]
    i, n = (int(part) for part in key.rsplit("\0", 2)[1:])
    labels = tuple(".".join(f.id.split(".")[i : i + n]) for f in facts)
    return Series(pattern, labels, tuple(facts))
