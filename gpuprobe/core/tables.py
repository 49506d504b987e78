"""Every table gpuprobe prints or writes: aligned plain text for a terminal, Markdown and HTML for a page.

Cells arrive as the caller formatted them (numbers already rounded, units attached): nothing here re-reads a cell
as a number, so ``1e+308`` or ``132`` print as given. Columns named in ``right`` are right-aligned (numbers).

- :func:`text_table` pads and aligns (tabulate's "simple" layout); each cell on one line, its control
  characters escaped (:func:`~gpuprobe.core.text.shown`).
- :func:`md_table` takes plain text (a file's strings among it), shown literally
  (:func:`~gpuprobe.core.text.md_text`, the one Markdown escape); :func:`md_markup_table` takes cells that are
  Markdown already (a code span, a bold verdict). Both write GitHub's pipe table unpadded (a viewer aligns the
  columns itself, and a full run's sheet stays small), every cell's pipes escaped and an empty cell as ``—``.
- :func:`html_table` takes cells that are HTML already (escaped by the caller) under plain-text headers.
"""

from __future__ import annotations

import html
from collections.abc import Collection, Iterable, Sequence

from tabulate import tabulate

from gpuprobe.core.text import md_text, shown

NONE = "—"  # what an empty cell of a page's table shows


def _alignment(headers: Sequence[str], right: Collection[str]) -> tuple[str, ...]:
    return tuple("right" if header in right else "left" for header in headers)


def text_table(
    headers: Sequence[str],
    rows: Iterable[Sequence[str]],
    right: Collection[str] = (),
    widest: Sequence[int | None] | None = None,
) -> list[str]:
    """The lines of a plain-text table: the header, a rule of dashes under each column, the rows. ``widest``: the
    most characters a column's line may hold (None: no limit), a longer cell wrapped onto more lines."""
    text = tabulate(
        [[shown(cell) for cell in row] for row in rows], headers=list(headers), tablefmt="simple",
        disable_numparse=True, colalign=_alignment(headers, right), maxcolwidths=widest and list(widest),
    )  # fmt: skip
    return [line.rstrip() for line in text.splitlines()]


def _md_row(cells: Iterable[str], empty: str = NONE) -> str:
    return "| " + " | ".join(cell.strip().replace("|", "\\|") or empty for cell in cells) + " |"


def md_markup_table(headers: Sequence[str], rows: Iterable[Sequence[str]], right: Collection[str] = ()) -> list[str]:
    """The lines of a Markdown (GitHub pipe) table of plain-text ``headers`` (one may be empty) and cells that are
    Markdown already."""
    rule = "|" + "".join("---:|" if header in right else "---|" for header in headers)
    return [_md_row(map(md_text, headers), empty=""), rule, *(_md_row(row) for row in rows)]


def md_table(headers: Sequence[str], rows: Iterable[Sequence[str]], right: Collection[str] = ()) -> list[str]:
    """The lines of a Markdown (GitHub pipe) table of plain text, every cell shown literally."""
    return md_markup_table(headers, ([md_text(cell) for cell in row] for row in rows), right)


def html_table(headers: Sequence[str], rows: Iterable[Sequence[str]], css: str = "") -> list[str]:
    """The lines of an HTML table of plain-text ``headers`` and cells that are HTML already; ``css``: its class."""
    heads = [html.escape(h) for h in headers]
    text = tabulate([list(row) for row in rows], headers=heads, tablefmt="unsafehtml",
                    colalign=[None] * len(heads), disable_numparse=True)  # fmt: skip
    return text.replace("<table>", f'<table class="{css}">', 1).splitlines() if css else text.splitlines()
