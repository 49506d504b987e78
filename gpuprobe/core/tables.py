"""Tables the commands print: aligned plain text for a terminal, Markdown to publish, both laid out by tabulate.

Cells arrive as the caller formatted them (numbers already rounded, units attached): tabulate only pads
and aligns, it never re-reads a cell as a number (``disable_numparse``), so ``1e+308`` or ``132`` print as
given. Columns named in ``right`` are right-aligned (numbers), the others left-aligned. A cell may quote a
file (a device name, a fact id): each stays on one line, its control characters escaped
(:mod:`gpuprobe.core.text`), and in Markdown its HTML and markup shown as text.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from tabulate import tabulate

from gpuprobe.core.text import md_text, shown


def md_cell(text: str) -> str:
    """Plain text shown literally in Markdown (:func:`~gpuprobe.core.text.md_text`), pipes escaped for a table."""
    return md_text(text).replace("|", "\\|")


def _alignment(headers: Sequence[str], right: Collection[str]) -> tuple[str, ...]:
    return tuple("right" if header in right else "left" for header in headers)


def text_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Collection[str] = ()) -> list[str]:
    """The lines of a plain-text table: the header, a rule of dashes under each column, the rows."""
    text = tabulate(
        [[shown(cell) for cell in row] for row in rows], headers=list(headers), tablefmt="simple",
        disable_numparse=True, colalign=_alignment(headers, right),
    )  # fmt: skip
    return [line.rstrip() for line in text.splitlines()]


def md_table(headers: Sequence[str], rows: Sequence[Sequence[str]], right: Collection[str] = ()) -> list[str]:
    """The lines of a Markdown (GitHub pipe) table; every cell escaped by :func:`md_cell`."""
    text = tabulate(
        [[md_cell(cell) for cell in row] for row in rows], headers=[md_cell(h) for h in headers], tablefmt="pipe",
        disable_numparse=True, colalign=_alignment(headers, right),
    )  # fmt: skip
    return text.splitlines()
