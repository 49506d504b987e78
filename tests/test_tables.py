"""Every table (gpuprobe.core.tables): cells printed as given, aligned in text, safe in Markdown and HTML."""

from __future__ import annotations

from gpuprobe.core.tables import html_table, md_markup_table, md_table, text_table


def test_a_text_table_aligns_columns_and_keeps_each_cell_as_written() -> None:
    lines = text_table(("fact", "n", "value"), [["latency.l2", "7", "1e+308"], ["l1", "132", "0.50 %"]], right={"n"})
    assert lines == [
        "fact          n  value",
        "----------  ---  -------",
        "latency.l2    7  1e+308",  # not re-read as a number, not reformatted
        "l1          132  0.50 %",
    ]
    assert text_table(("fact", "n"), []) == ["fact    n", "------  ---"]


def test_a_text_table_wraps_a_column_held_to_a_width() -> None:
    lines = text_table(("probe", "facts"), [["a", "one, two, three"]], widest=[None, 9])
    assert lines == ["probe    facts", "-------  ---------", "a        one, two,", "         three"]


def test_a_markdown_table_shows_text_literally_escapes_pipes_and_marks_alignment() -> None:
    lines = md_table(("fact", "n"), [["a | b", "3"], ["back\\slash", "12"], ["one\ntwo", ""]], right={"n"})
    assert lines[:2] == ["| fact | n |", "|---|---:|"]
    assert lines[2] == "| a \\| b | 3 |" and lines[3] == "| back\\\\slash | 12 |"
    assert lines[4] == "| one\\\\ntwo | — |"  # the line break shown, as \n; an empty cell as —


def test_a_markdown_table_of_markup_keeps_its_markup_and_escapes_its_pipes() -> None:
    lines = md_markup_table(("Fact", ""), [["`a|b`", "**FAIL**"]])
    assert lines == ["| Fact |  |", "|---|---|", "| `a\\|b` | **FAIL** |"]  # an empty header stays empty


def test_an_html_table_escapes_its_headers_and_takes_its_cells_as_html() -> None:
    lines = html_table(("a<b",), [["<code>x</code>"]], "facts")
    assert lines[0] == '<table class="facts">' and "<th>a&lt;b</th>" in "".join(lines)
    assert "<td><code>x</code></td>" in "".join(lines)
