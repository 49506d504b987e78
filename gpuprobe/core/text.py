"""Text read from a file or a tool, shown inert: on a terminal, and in Markdown.

A results file, a tool's output or a file name may hold any character: ``ESC [2J`` clears a terminal, an
OSC sequence sets its window title, a line break starts a line that looks like gpuprobe's own, a bidi
override reverses what follows, ``<script>`` runs in a page that renders Markdown. gpuprobe never lets one
act:

- on the terminal, :func:`inert_terminal` puts :class:`InertStream` between every command and stdout and
  stderr, so a new command cannot forget it: each control character (C0 but the line break and tab, DEL,
  C1), each invisible format character (bidi controls, zero-width spaces) and each lone surrogate but a
  file name's stray byte is written as its Python escape (``\\x1b``, ``\\u202e``); only the erase-line
  gpuprobe's live progress writes (``\\r ESC [K``) passes. A stream that cannot encode a character writes
  its escape (``\\xb1``) instead of raising. A renderer keeps each of its lines one line with
  :func:`shown` (a line break inside a device name shows as ``\\n``);
- in Markdown, every string that came from a file enters through :func:`md_text` (literal text: HTML's
  ``< > &`` as entities, Markdown's markup characters backslash-escaped), :func:`md_code` (a code span no
  backtick closes early) or :func:`md_fence` (a code block no line closes early), and each line through
  :func:`shown`; gpuprobe's own markup (its bold, its links) stays Markdown. The HTML sheet, escaped as
  HTML already, is written through :func:`shown_lines` whole.
"""

from __future__ import annotations

import codecs
import html
import re
import sys
from collections.abc import Iterable
from typing import TextIO

_C0_C1 = "\x00-\x1f\x7f-\x9f"
_C0_C1_BUT_LINES = "\x00-\x08\x0b-\x1f\x7f-\x9f"  # all but the tab and the line break
_INVISIBLE = "\u061c\u200b-\u200f\u2028-\u202e\u2060-\u2069\ufeff"  # bidi controls, zero widths, separators
_LONE_SURROGATES = "\ud800-\udc7f\udd00-\udfff"  # not U+DC80-U+DCFF: a file name's stray bytes (surrogateescape)
ERASE_LINE = "\r\x1b[K"  # what gpuprobe's live progress writes to rewrite its status line
_IN_LINE = re.compile(f"[{_C0_C1}{_INVISIBLE}{_LONE_SURROGATES}]")
_IN_LINES = re.compile(f"[{_C0_C1_BUT_LINES}{_INVISIBLE}{_LONE_SURROGATES}]")
# Escaped: what starts code, emphasis or strikethrough ("_" not: GFM never emphasises inside a word), "]" where
# it would close a link's text ("](", "][", "]:"), so "[470, 485]" stays as it is and no link is made, and a
# heading's or list item's mark at the start ("-" alone, a table's "no value", is no list item).
_MD_MARKUP = re.compile(r"[\\`*~]|\](?=[(\[:])|^(?:#|[+-](?= ))")
STREAM_ERRORS = "gpuprobe.shown"  # the encoding error handler of gpuprobe's stdout and stderr


def _escape(match: re.Match[str]) -> str:
    """A character as its Python escape (``\\x1b``)."""
    return ascii(match.group())[1:-1]


def shown(text: str) -> str:
    """``text`` with each control and invisible character as its Python escape, line breaks and tabs too:
    ``"H200\\n# x"`` is one line reading ``H200\\n# x``."""
    return _IN_LINE.sub(_escape, text)


def shown_lines(text: str) -> str:
    """``text`` as :func:`shown` shows it, but its line breaks and tabs kept."""
    return _IN_LINES.sub(_escape, text)


def md_text(text: object) -> str:
    """Plain text (a file's string, or a line holding some) shown literally in Markdown: on one line, its
    markup characters backslash-escaped and HTML's ``< > &`` as entities, so ``<script>`` reads as text."""
    return html.escape(_MD_MARKUP.sub(r"\\\g<0>", shown(str(text))), quote=False)


def md_code(text: str) -> str:
    """``text`` as a Markdown code span, on one line, fenced by more backticks than it holds in a row."""
    code = shown(text)
    longest = max((len(run) for run in re.findall("`+", code)), default=0)
    fence, pad = "`" * (longest + 1), " " if longest else ""
    return f"{fence}{pad}{code}{pad}{fence}"


def md_fence(text: str) -> list[str]:
    """``text`` as a fenced code block, its lines kept (each as :func:`shown` shows it), fenced by more backticks
    than it holds in a row, so no line of it closes the block."""
    lines = [shown(line) for line in text.splitlines()]
    longest = max((len(run) for line in lines for run in re.findall("`+", line)), default=0)
    fence = "`" * max(3, longest + 1)
    return [fence, *lines, fence]


class InertStream:
    """A text stream that writes what it is given as :func:`shown_lines` shows it, but for the live progress's
    erase-line; everything else is the stream's own (``fileno``, ``isatty``, ``flush``...)."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        self.stream.write(ERASE_LINE.join(shown_lines(part) for part in text.split(ERASE_LINE)))
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> object:
        return getattr(self.stream, name)


def _bytes_or_escape(error: UnicodeEncodeError) -> tuple[str | bytes, int]:
    """A file name's stray bytes as those bytes (as ``ls`` prints them), any other character the stream's
    encoding lacks as its escape (``±`` on an ASCII stdout: ``\\xb1``)."""
    try:
        return codecs.lookup_error("surrogateescape")(error)
    except UnicodeEncodeError:
        return codecs.backslashreplace_errors(error)


codecs.register_error(STREAM_ERRORS, _bytes_or_escape)


def inert_terminal() -> None:
    """Put :class:`InertStream` before ``sys.stdout`` and ``sys.stderr`` (once), and make each write what its
    encoding lacks as :func:`_bytes_or_escape` says: a file name whose bytes are not UTF-8 as those bytes, a
    ``±`` on an ASCII stdout (``PYTHONIOENCODING=ascii``, the C locale uncoerced) as ``\\xb1``, never a
    UnicodeEncodeError."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if isinstance(stream, InertStream) or stream is None:
            continue
        if hasattr(stream, "reconfigure"):
            stream.reconfigure(errors=STREAM_ERRORS)
        setattr(sys, name, InertStream(stream))
