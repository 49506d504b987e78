"""The sheet's numbered references: each expectation source cited once, by number, listed at the end.

An expectation's source (a paper and table, a repository file at a commit, a datasheet) is long; a fact
row shows ``[3]`` and the list at the end of the sheet holds the text of [3] once, however many facts
cite it. Numbers follow the order of first citation down the sheet.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from gpuprobe.core.results import Fact

# A "source" that says there is none: the fact is report-only for want of a published figure.
NO_SOURCE = frozenset({"", "no published measurement found"})


def source_of(expectation: dict[str, Any] | None) -> str:
    """The expectation's source text, stripped; "" when it has none (or says there is none)."""
    text = str((expectation or {}).get("source") or "").strip()
    return "" if text.lower() in NO_SOURCE else text


class References:
    """Source texts numbered in the order they are first cited."""

    def __init__(self) -> None:
        self._numbers: dict[str, int] = {}

    def cite(self, source: str) -> int | None:
        """The number of ``source`` (numbered now if new); None for no source."""
        text = source_of({"source": source})
        if not text:
            return None
        return self._numbers.setdefault(text, len(self._numbers) + 1)

    def cite_facts(self, facts: Iterable[Fact]) -> None:
        """Number the sources of ``facts`` in their order (so the numbers follow the sheet)."""
        for fact in facts:
            self.cite(source_of(fact.expectation))

    def number(self, fact: Fact) -> int | None:
        """The number of a fact's source, citing it if it was not yet."""
        return self.cite(source_of(fact.expectation))

    def entries(self) -> list[tuple[int, str]]:
        """(number, source) for every source cited, in number order."""
        return [(number, text) for text, number in self._numbers.items()]

    def __len__(self) -> int:
        return len(self._numbers)


def marker(number: int | None) -> str:
    """``[3]`` for a cited source, "" for none."""
    return "" if number is None else f"[{number}]"
