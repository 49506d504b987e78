"""Tables the commands print: aligned plain text for a terminal, Markdown to publish, both laid out by tabulate.

Cells arrive as the caller formatted them (numbers already rounded, units attached): tabulate only pads
and aligns, it never re-reads a cell as a number (``disable_numparse``), so ``1e+308`` or ``132`` print as
given. Columns named in ``right`` are right-aligned (numbers), the others left-aligned.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from tabulate import tabulate


def md_cell(text: str) -> str:
    """A cell's text made safe inside a Markdown table: backslashes and pipes escaped, line breaks joined."""
    return text.replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _alignment(headers: Sequence[str], right: Collection[str]) -> tuple[str, ...]:
    return tuple("right" if header in right else "left" for header in headers)


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Collection[str] = ()) -> list[str]:
    """The lines of a plain-text table: the header, a rule of dashes under each column, the rows."""
    text = tabulate(
        [list(row) for row in rows], headers=list(headers), tablefmt="simple", disable_numparse=True,
        colalign=_alignment(headers, right),
    )  # fmt: skip
    return [line.rstrip() for line in text.splitlines()]


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Collection[str] = ()) -> list[str]:
    """The lines of a Markdown (GitHub pipe) table; every cell escaped by :func:`md_cell`."""
    text = tabulate(
        [[md_cell(cell) for cell in row] for row in rows], headers=[md_cell(h) for h in headers], tablefmt="pipe",
        disable_numparse=True, colalign=_alignment(headers, right),
    )  # fmt: skip
    return text.splitlines()
