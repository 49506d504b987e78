"""Reading a stored run: the one way every reader of a results file (``report``, ``compare``, ``fleet``,
``index``, ``--baseline``) reads it.

A file is validated (:func:`gpuprobe.core.results.load`: refused in one line when no run could have written
it), then every fact is judged again by this gpuprobe (:func:`gpuprobe.judge.verdicts.judge_again`) from its
value, the model's expectations and every family's invariants: a reader never repeats a stored verdict, and
one that differs is named (:func:`changes_text`). It sits in ``fleet``, above ``families``, whose invariants
it needs.

A fleet reads thousands of files (:func:`read_for_fleet`): each from its facts index where that holds the file as it
is now (:mod:`gpuprobe.core.results_index`), validated and judged again all the same.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.files import read_regular
from gpuprobe.core.results import Results, load
from gpuprobe.core.results_index import bound_record, index_path
from gpuprobe.families.catalog import invariant_checks
from gpuprobe.judge.verdicts import VerdictChange, judge_again, model_of


def judge_stored(results: Results) -> list[VerdictChange]:
    """A run read from a file, judged again in place (:func:`~gpuprobe.judge.verdicts.judge_again`, by the model it
    was judged as and every family's invariants) as every reader shows it; returns the facts whose stored verdict
    differs."""
    return judge_again(results, model_of(results), invariant_checks())


def read_judged(path: Path) -> tuple[Results, list[VerdictChange]]:
    """The one way every reader (``report``, ``compare``, ``index``, ``--baseline``; ``fleet`` through
    :func:`read_for_fleet`) reads a results file: validated (:func:`gpuprobe.core.results.load`), then judged again
    (:func:`judge_stored`)."""
    results = load(path)
    return results, judge_stored(results)


INDEX_LIMIT = 64 * 1024 * 1024  # bytes: an index larger than this is passed over (a full run's is ~300 KB)


def read_indexed(path: Path) -> Results | None:
    """The results file ``path`` as its facts index holds it (:func:`~gpuprobe.core.results_index.bound_record`),
    validated as the file would be, without what the samples detect (a fleet never shows it); None where the index
    is missing, damaged, of another version, or not of the file's bytes as they are now, or its record is refused:
    the file itself says then what it holds, or why it cannot be read."""
    try:
        index = json.loads(read_regular(index_path(path), INDEX_LIMIT))  # save writes it from a dict: keys are unique
        record = bound_record(index, path)
        return None if record is None else Results.from_dict(record, str(path), detect=False)
    except (GpuprobeError, ValueError, RecursionError):  # not JSON, not UTF-8, refused
        return None


def read_for_fleet(path: Path) -> tuple[Results, list[VerdictChange]]:
    """A results file as ``fleet`` reads it: from its index (:func:`read_indexed`), else in full (:func:`load`),
    without what the samples detect; judged again either way (:func:`judge_stored`). A fleet's report is the same
    whichever way a file was read."""
    results = read_indexed(path) or load(path, detect=False)
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
