"""The commands' tables (gpuprobe.core.tables): cells printed as given, aligned, safe in Markdown."""

from __future__ import annotations

from gpuprobe.core.tables import md_cell, md_table, text_table


def test_a_text_table_aligns_columns_and_keeps_each_cell_as_written() -> None:
    lines = text_table(("fact", "n", "value"), [["latency.l2", "7", "1e+308"], ["l1", "132", "0.50 %"]], right={"n"})
    assert lines == [
        "fact          n  value",
        "----------  ---  -------",
        "latency.l2    7  1e+308",  # not re-read as a number, not reformatted
        "l1          132  0.50 %",
    ]
    assert text_table(("fact", "n"), []) == ["fact    n", "------  ---"]


def test_a_markdown_table_escapes_pipes_and_marks_alignment() -> None:
    lines = md_table(("fact", "n"), [["a | b", "3"], ["back\\slash", "12"]], right={"n"})
    assert lines[1] == "|:------------|----:|"
    assert lines[2] == "| a \\| b      |   3 |" and lines[3] == "| back\\\\slash |  12 |"
    assert md_cell("one\ntwo") == r"one\\ntwo"  # the line break shown, as \n
