"""The fact sheet's hardware-witness section: per witnessed probe, what it claims its launches moved, what
Nsight Compute counted, and the verdict (``witness.*`` facts, written by ``gpuprobe witness``).

One row per probe and quantity (bytes read from and written to DRAM, read from and written to L2; the
shared-memory bank conflicts where its kernel touches shared memory), all from the facts: the claim and the
count are the long launch's bytes beyond the short one's, what the probe's figure divides by its time. A
comparison that disagrees, or could not be made, says why under the table. The witness facts appear here
only (:func:`without_witness` keeps them out of the families' sections).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from gpuprobe.core.numbers import fmt_bytes
from gpuprobe.core.results import WITNESS_PREFIX, Fact, Results
from gpuprobe.core.tables import NONE
from gpuprobe.judge.verdicts import WITNESS_CONFLICTS, WITNESS_JUDGED

# A witness fact's id: ``witness.<probe>.<key>`` (the comparison) or ``witness.<probe>.<key>.<part>`` (one of its
# FIGURES); the keys are what gpuprobe.measure.witness compares (LABELS, in sheet order) and LAUNCHES_KEY, how
# the probe's launches were paired.
CONFLICTS_KEY = WITNESS_CONFLICTS.lstrip(".")
LABELS = {
    "dram_read_bytes": "bytes read from DRAM",
    "dram_write_bytes": "bytes written to DRAM",
    "l2_read_bytes": "bytes read by the SMs from L2",
    "l2_write_bytes": "bytes written by the SMs to L2",
    CONFLICTS_KEY: "shared-memory bank conflicts",
}
LAUNCHES_KEY = "launches"
FIGURES = ("counted", "claimed")

TITLE = "Hardware witness (Nsight Compute)"
BLURB = (
    "Nsight Compute (ncu) wrapped a second measurement of these probes at this run's shapes, one sample each "
    "(`gpuprobe witness`), and counted what each kernel launch moved. Each row: what the probe's long launch "
    "moved beyond its short one (the bytes its figure divides by its time) as the probe claims it and as the "
    "hardware counted it; more than 10 % apart is a WARN."
)
HEADER = ("Probe", "What", "The probe claims", "ncu counted", "Counted / claimed", "Verdict")
NOTED = ("warn", "fail", "not_run")


@dataclass(frozen=True)
class WitnessRow:
    """One row as plain text; ``verdict`` the verdict key of its comparison ("report" where none is made)."""

    probe: str
    what: str
    claimed: str
    counted: str
    ratio: str
    verdict: str


def fact_id(probe: str, key: str, part: str = "") -> str:
    """``witness.<probe>.<key>[.<part>]``."""
    return f"{WITNESS_PREFIX}{probe}.{key}" + (f".{part}" if part else "")


def split_id(witness_id: str) -> tuple[str, str, str] | None:
    """(probe, key, part) of a witness fact's id (part "" for the comparison itself); None for another id."""
    if not witness_id.startswith(WITNESS_PREFIX):
        return None
    rest = witness_id.removeprefix(WITNESS_PREFIX)
    for key in (*LABELS, LAUNCHES_KEY):
        for part in ("", *FIGURES):
            suffix = f".{key}" + (f".{part}" if part else "")
            if rest.endswith(suffix) and len(rest) > len(suffix):
                return rest.removesuffix(suffix), key, part
    return None


def witness_facts(results: Results) -> dict[tuple[str, str, str], Fact]:
    """The run's witness facts by (probe, key, part)."""
    split = ((split_id(f.id), f) for f in results.facts if f.id.startswith(WITNESS_PREFIX))
    return {where: fact for where, fact in split if where is not None}


def without_witness(results: Results) -> Results:
    """``results`` without its witness facts (for the families' sections: they are shown here)."""
    return dataclasses.replace(results, facts=[f for f in results.facts if not f.id.startswith(WITNESS_PREFIX)])


def _bytes(fact: Fact | None) -> str:
    return NONE if fact is None or fact.value is None else fmt_bytes(fact.value)


def _row(probe: str, key: str, facts: dict[tuple[str, str, str], Fact]) -> WitnessRow:
    compared = facts.get((probe, key, ""))
    counted = facts.get((probe, key, "counted"))
    ratio = NONE if compared is None or compared.value is None else f"{compared.value:.3f}"
    verdict = compared.verdict if compared is not None else "report"
    if key == CONFLICTS_KEY:
        count = NONE if counted is None or counted.value is None else f"{counted.value:,.0f}"
        return WitnessRow(probe, LABELS[key], "none", count, ratio + " a wavefront", verdict)
    return WitnessRow(probe, LABELS[key], _bytes(facts.get((probe, key, "claimed"))), _bytes(counted), ratio, verdict)


def _shown(facts: dict[tuple[str, str, str], Fact], probe: str, key: str) -> bool:
    """A quantity has a row where the probe claims it, or the counter saw some of it (or could not count it)."""
    counted = facts.get((probe, key, "counted"))
    return (probe, key, "claimed") in facts or (counted is not None and counted.value != 0)


def witness_rows(results: Results) -> list[WitnessRow]:
    """Every probe's rows (a quantity it neither claims nor moved has none), in the order its facts were
    written; a probe not witnessed: one row saying so."""
    facts = witness_facts(results)
    rows = []
    for probe in dict.fromkeys(p for p, _, _ in facts):
        launches = facts.get((probe, LAUNCHES_KEY, ""))
        if launches is not None and launches.value is None:
            rows.append(WitnessRow(probe, "launches", NONE, NONE, NONE, launches.verdict))
            continue
        rows += [_row(probe, key, facts) for key in LABELS if _shown(facts, probe, key)]
    return rows


def witness_notes(results: Results) -> list[tuple[str, str]]:
    """(fact id, what the witness said) of each comparison that did not agree or could not be made."""
    comparisons = [f for (_, _, part), f in witness_facts(results).items() if not part]
    return [(f.id, f.detail.split(WITNESS_JUDGED, 1)[0]) for f in comparisons if f.verdict in NOTED]


def _counted_with(results: Results) -> str:
    how = results.environment.get("witness")
    version = how.get("version") if isinstance(how, dict) else None
    return f" Counted with {version}." if isinstance(version, str) and version else ""


@dataclass(frozen=True)
class WitnessSection:
    """The section as the sheet shows it: its rows, (fact id, what the witness said) of each comparison that did
    not agree or could not be made, and which Nsight Compute counted ("" where the run did not record it)."""

    rows: list[WitnessRow]
    notes: list[tuple[str, str]]
    counted_with: str


def witness_section(results: Results) -> WitnessSection | None:
    """The section of ``results``; None when the run has no witness facts."""
    rows = witness_rows(results)
    return WitnessSection(rows, witness_notes(results), _counted_with(results)) if rows else None
