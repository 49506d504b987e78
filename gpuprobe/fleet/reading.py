"""Reading a stored run: the one way every reader of a results file (``report``, ``compare``, ``fleet``,
``index``, ``--baseline``) reads it.

A file is validated (:func:`gpuprobe.core.results.load`: refused in one line when no run could have written
it), then every fact is judged again by this gpuprobe (:func:`gpuprobe.judge.verdicts.judge_again`) from its
value, the model's expectations and every family's invariants: a reader never repeats a stored verdict, and
one that differs is named (:func:`changes_text`). It sits in ``fleet``, above ``families``, whose invariants
it needs.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gpuprobe.core.results import Results, load
from gpuprobe.families.catalog import invariant_checks
from gpuprobe.judge.verdicts import VerdictChange, judge_again, model_of


def judge_stored(results: Results) -> list[VerdictChange]:
    """A run read from a file, judged again in place (:func:`~gpuprobe.judge.verdicts.judge_again`, by the model it
    was judged as and every family's invariants) as every reader shows it; returns the facts whose stored verdict
    differs."""
    return judge_again(results, model_of(results), invariant_checks())


def read_judged(path: Path) -> tuple[Results, list[VerdictChange]]:
    """The one way every reader (``report``, ``compare``, ``fleet``, ``index``, ``--baseline``) reads a results
    file: validated (:func:`gpuprobe.core.results.load`), then judged again (:func:`judge_stored`)."""
    results = load(path)
    return results, judge_stored(results)


CHANGES_SHOWN = 3  # verdict changes named in one line, the rest counted


def changes_text(changes: Sequence[VerdictChange]) -> str:
    """``2 stored verdict(s) differ from this gpuprobe's judgement of the values: latency.l2 (stored pass, judged
    fail), ...`` (the first :data:`CHANGES_SHOWN` named, the rest counted); "" when none do."""
    if not changes:
        return ""
    named = ", ".join(c.text() for c in changes[:CHANGES_SHOWN])
    more = f" and {len(changes) - CHANGES_SHOWN} more" if len(changes) > CHANGES_SHOWN else ""
    return f"{len(changes)} stored verdict(s) differ from this gpuprobe's judgement of the values: {named}{more}"
