"""How the run's probes ended, told truthfully: the ones that went wrong and the ones that never ran.

A probe that ran has an outcome in the results. A probe the run meant to measure but never reached (the
run was interrupted, or cut by its deadline before it recorded the family) has none: the session records
every family's probes before it measures the first (``families[f]["probe_names"]``), so the sheet lists
those with no outcome. A file from before that record says only how many probes each family planned
(``families[f]["probes"]``); the sheet then counts the ones missing per family.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuprobe.core.results import Results

NEVER_RAN = "NEVER RAN"


@dataclass(frozen=True)
class ProbeTally:
    """The probes of a run: how many ended each way, and the ones planned that never ran."""

    statuses: dict[str, int]  # status -> count, over the probes that ran (an outcome other than not_run)
    never_ran: list[str]  # planned probes with no outcome, by name
    unnamed_missing: dict[str, int]  # family -> probes planned but with no outcome, names not recorded
    not_run: int = 0  # probes recorded not_run (a deadline, an interrupt, a missing GPU): they never ran either

    @property
    def recorded(self) -> int:
        return sum(self.statuses.values())

    @property
    def missing(self) -> int:
        return len(self.never_ran) + sum(self.unnamed_missing.values()) + self.not_run

    @property
    def planned(self) -> int:
        return self.recorded + self.missing


def _family_outcomes(results: Results, family: str) -> int:
    return sum(1 for name in results.probes if name.startswith(f"{family}."))


def tally(results: Results) -> ProbeTally:
    """Count the run's probe outcomes and find the planned probes that have none."""
    statuses: dict[str, int] = {}
    not_run = 0
    for outcome in results.probes.values():
        if outcome.status == "not_run":
            not_run += 1
        else:
            statuses[outcome.status] = statuses.get(outcome.status, 0) + 1
    never: list[str] = []
    unnamed: dict[str, int] = {}
    for family, record in results.families.items():
        names = record.get("probe_names")
        if isinstance(names, list):
            never += [str(n) for n in names if str(n) not in results.probes]
            continue
        planned = record.get("probes")
        if isinstance(planned, int) and not isinstance(planned, bool):
            gap = planned - _family_outcomes(results, family)
            if gap > 0:
                unnamed[family] = gap
    return ProbeTally(statuses, never, unnamed, not_run)


DETAIL_CHARS = 240  # a problem's detail on the sheet; results.json keeps all of it


@dataclass(frozen=True)
class Problem:
    """Probes that ended the same way: their names, the status, and the first one's detail, shortened."""

    probes: tuple[str, ...]
    status: str
    detail: str


def short_detail(detail: str) -> str:
    """The start of a probe's detail: its first line, without the measuring process's stderr tail, cut to
    ``DETAIL_CHARS``."""
    text = detail.strip().splitlines()[0] if detail.strip() else ""
    text = text.split("; stderr:", 1)[0]
    return text if len(text) <= DETAIL_CHARS else text[: DETAIL_CHARS - 1].rstrip() + "…"


def _alike(status: str, detail: str) -> tuple[str, str]:
    """What makes two problems the same: status and detail with its numbers left out."""
    return status, re.sub(r"0x[0-9a-fA-F]+|\d+(\.\d+)?", "#", detail)


def problems(results: Results) -> list[Problem]:
    """Every probe that did not end "ok", then every planned probe that never ran; probes that ended alike
    (same status, same detail but for its numbers) in one entry, in results order."""
    found = [(name, p.status.upper(), short_detail(p.detail)) for name, p in results.probes.items() if p.status != "ok"]
    counted = tally(results)
    why = "the run ended before it (interrupted, or its deadline)"
    found += [(name, NEVER_RAN, why) for name in counted.never_ran]
    found += [  # a file from before probe names were recorded: how many of the family's probes, not which
        (f"{family}.* ({n} probe{'s' if n != 1 else ''})", NEVER_RAN, why)
        for family, n in counted.unnamed_missing.items()
    ]
    groups: dict[tuple[str, str], list[tuple[str, str, str]]] = {}
    for entry in found:
        groups.setdefault(_alike(entry[1], entry[2]), []).append(entry)
    return [Problem(tuple(e[0] for e in group), group[0][1], group[0][2]) for group in groups.values()]


def summary(results: Results) -> str:
    """One line: how many probes ran and how they ended, and how many planned never ran."""
    counted = tally(results)
    if not counted.planned:
        return "No probe ran."
    parts = [f"{n} {status.replace('_', ' ')}" for status, n in sorted(counted.statuses.items(), key=_ok_first)]
    text = f"{counted.recorded} of {counted.planned} probes ran" + (f": {', '.join(parts)}" if parts else "")
    if counted.missing:
        text += f"; {counted.missing} never ran"
    return text + "."


def _ok_first(item: tuple[str, int]) -> tuple[bool, str]:
    return item[0] != "ok", item[0]
