"""The facts index: what ``gpuprobe fleet`` reads of a results file, written beside it whenever it is written.

A results file is 2 to 3 MB for a full run, most of it what a fleet never reads: each probe's raw series, NVML
trajectory and flight record, each fact's detail text. Parsing and validating all of it is ~60 ms a file, minutes
for a fleet of 2,000 GPUs. ``results.index.json`` (beside ``results.json``; :func:`index_path`) holds the results
record less that (:func:`projection`: each probe's status alone, each fact less its detail and detection), ~7 %
of the bytes, and what binds it to its results file: that file's size and SHA-256 (hashing 3 MB is milliseconds,
parsing it is not).

The index is derived and safe to delete. It is only ever read by the fleet
(:func:`gpuprobe.fleet.reading.read_for_fleet`), and only when it is an index of this version of the results file
as it is now (:func:`bound_record`); a missing, damaged, stale or foreign index is passed over and the file read
in full. Its record is read as a results file's is (validated, then judged again), so an index can say nothing its
results file could not. What a fleet's judgement reads of a run must be in the projection: a change that makes it
read more bumps :data:`INDEX_SCHEMA_VERSION`, which sets every older index aside.
"""

from __future__ import annotations

import hashlib
import os
import stat
from pathlib import Path
from typing import Any

from gpuprobe.core.files import write_atomic
from gpuprobe.core.strict import strict_dumps

INDEX_SCHEMA = "gpuprobe.core.results_index"
INDEX_SCHEMA_VERSION = 1
INDEX_SUFFIX = ".index.json"
LEFT_OUT_OF_FACTS = ("detail", "detection")  # a fleet judges again (new details), never shows what samples detect


def index_path(results: Path) -> Path:
    """Where the index of the results file ``results`` lives: ``results.json`` -> ``results.index.json`` (a name
    that does not end in ``.json`` gets ``.index.json`` after it)."""
    return results.with_name(results.name.removesuffix(".json") + INDEX_SUFFIX)


def is_index(path: Path) -> bool:
    """Whether ``path`` is named as an index is (never a results file of its own)."""
    return path.name.endswith(INDEX_SUFFIX)


def projection(record: dict[str, Any]) -> dict[str, Any]:
    """A results record less what a fleet never reads: each probe's outcome but its status (which validation
    checks), each fact's :data:`LEFT_OUT_OF_FACTS`; everything else as it is."""
    probes = {name: {"status": outcome.get("status")} for name, outcome in record.get("probes", {}).items()}
    facts = [{k: v for k, v in fact.items() if k not in LEFT_OUT_OF_FACTS} for fact in record.get("facts", [])]
    return {**record, "probes": probes, "facts": facts}


def _binding(data: bytes) -> dict[str, Any]:
    return {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}


def index_text(record: dict[str, Any], data: bytes) -> str:
    """The index of the results file whose bytes are ``data``, written from ``record``: compact JSON."""
    index = {"schema": INDEX_SCHEMA, "schema_version": INDEX_SCHEMA_VERSION, "results": _binding(data),
             "record": projection(record)}  # fmt: skip
    return strict_dumps(index, separators=(",", ":"))


def write_index(results: Path, record: dict[str, Any], data: bytes) -> None:
    """The index of ``results``, just written from ``record`` as ``data``, written atomically beside it."""
    write_atomic(index_path(results), index_text(record, data))


def _holds(binding: Any, results: Path) -> bool:
    """Whether ``binding`` is the size and SHA-256 of the regular file ``results`` as it is now. The file is hashed
    in chunks (a fleet's files are gigabytes: no copy of each is made), and only when its size is the one bound; a
    pipe or device is never read."""
    if not isinstance(binding, dict):
        return False
    try:
        if not stat.S_ISREG(os.stat(results).st_mode):
            return False
        with open(os.open(results, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC), "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode) or binding.get("bytes") != info.st_size:
                return False
            return binding.get("sha256") == hashlib.file_digest(handle, "sha256").hexdigest()
    except OSError:
        return False


def bound_record(index: Any, results: Path) -> dict[str, Any] | None:
    """The results record ``index`` holds, when it is an index of this version (:data:`INDEX_SCHEMA_VERSION`) of
    the results file ``results`` as it is now (its size and SHA-256); else None."""
    if not isinstance(index, dict) or index.get("schema") != INDEX_SCHEMA:
        return None
    if index.get("schema_version") != INDEX_SCHEMA_VERSION or not _holds(index.get("results"), results):
        return None
    record = index.get("record")
    return record if isinstance(record, dict) else None
