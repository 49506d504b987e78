"""Every table the fact sheet shows, in Markdown or HTML, laid out by ``tabulate``.

Cells are handed in as finished text (escaped for the format by the caller) and are never padded:
the Markdown of a full run stays small, and a browser or Markdown viewer aligns the columns itself.
"""

from __future__ import annotations

import html
from collections.abc import Iterable, Sequence

from tabulate import TableFormat, tabulate

NONE = "—"


def _short_rule(widths: Sequence[int], aligns: Sequence[str | None]) -> str:
    """The header rule of a Markdown table, one ``---`` per column whatever the column's width."""
    return "|" + "|".join("---" for _ in widths) + "|"


# GitHub's pipe table, with the rule under the header kept short.
_PIPE = TableFormat(
    lineabove=None,
    linebelowheader=_short_rule,
    linebetweenrows=None,
    linebelow=None,
    headerrow=("|", "|", "|"),
    datarow=("|", "|", "|"),
    padding=1,
    with_header_hide=None,
)


def _cell(text: object) -> str:
    """Text safe inside a Markdown table cell: pipes escaped, newlines as <br>, empty as "—"."""
    value = str(text).strip()
    if not value:
        return NONE
    return value.replace("|", "\\|").replace("\r\n", "\n").replace("\n", "<br>")


def markdown_table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> list[str]:
    """A Markdown (GitHub pipe) table as lines; each cell is Markdown already, made table-safe here."""
    body = [[_cell(c) for c in row] for row in rows]
    text = tabulate(body, headers=list(header), tablefmt=_PIPE, colalign=[None] * len(header), disable_numparse=True)
    return text.splitlines()


def html_table(header: Sequence[str], rows: Iterable[Sequence[str]], css: str = "") -> list[str]:
    """An HTML table as lines; ``header`` is plain text, each row cell is HTML already (escaped by the caller)."""
    body = [list(row) for row in rows]
    heads = [html.escape(h) for h in header]
    text = tabulate(body, headers=heads, tablefmt="unsafehtml", colalign=[None] * len(header), disable_numparse=True)
    if css:
        text = text.replace("<table>", f'<table class="{css}">', 1)
    return text.splitlines()
