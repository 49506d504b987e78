"""What a person watching a run sees while it measures: which family, how many probes done of how many,
the time left by the time plan (:mod:`gpuprobe.measure.plan`), and a probe that crashed or timed out the
moment it does, not only in the results at the end.

The session tells :class:`RunProgress` each family's start, each probe's end and each family's end;
:class:`RunProgress` says it through a sink. :class:`StreamSink` writes plain lines to a stream (a family's
start and end, and within a long family a line at most every :data:`PLAIN_EVERY_S` seconds), or on a
terminal keeps a progress bar redrawn below those lines. The pytest plugin's sink writes through
pytest's terminal reporter, under pytest's own output.

The time left is the plan's seconds for what is still to measure, scaled by how the families measured
so far compared with their plan (the plan's cost model is a guess until a run corrects it), plus the
fact sheet's seconds; a run with a deadline has no more left than the deadline allows.
"""

from __future__ import annotations

import collections
import shutil
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol, TextIO

from gpuprobe.core.results import ProbeOutcome
from gpuprobe.measure.plan import CHILD_START_S

PREFIX = "gpuprobe: "
PLAIN_EVERY_S = 30.0  # without a terminal: within one family, a progress line at most this often
BAR_WIDTH = 20
FAILED_AT_ONCE = {"crashed": "CRASHED", "timeout": "TIMED OUT"}  # said the moment the first of a family happens
DETAIL_CHARS = 200  # of a crash's or timeout's detail, in its line (the results keep all of it)


class ProgressSink(Protocol):
    """Where progress is said."""

    live: bool  # it can keep one status line redrawn in place (a terminal)

    def line(self, text: str) -> None:
        """A line that stays."""

    def status(self, text: str) -> None:
        """The one line redrawn in place; called only when ``live``."""

    def close(self) -> None:
        """The run ended: clear the status line."""


def duration(seconds: float) -> str:
    """Seconds as a person reads them: ``45 s``, ``2 min 10 s``, ``1 h 05 min``."""
    s = max(0, round(seconds))
    if s < 60:
        return f"{s} s"
    if s < 3600:
        return f"{s // 60} min {s % 60:02d} s"
    return f"{s // 3600} h {s % 3600 // 60:02d} min"


@dataclass
class _Family:
    name: str
    number: int  # 1-based, among the families that measure anything
    probes: int
    planned_s: float
    done: int = 0
    statuses: collections.Counter[str] = field(default_factory=collections.Counter)
    started: float | None = None
    actual_s: float | None = None  # set when it ended
    failure_said: bool = False


class RunProgress:
    """Follows one run, family by family, and says where it stands through ``sink``.

    ``families``: (name, probes to measure, planned seconds or None when the family could not plan) in
    the order they will be measured; a family with no probe to measure on this device is left out.
    ``report_s`` is what the run still spends after measuring (the fact sheet); ``deadline`` a
    ``clock()`` instant after which nothing more is measured."""

    def __init__(
        self,
        sink: ProgressSink,
        families: Sequence[tuple[str, int, float | None]],
        report_s: float = 0.0,
        deadline: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        measured = [(name, probes, planned) for name, probes, planned in families if probes > 0]
        self._families = {
            name: _Family(name, number, probes, CHILD_START_S if planned is None else planned)
            for number, (name, probes, planned) in enumerate(measured, start=1)
        }
        self._sink, self._report_s, self._deadline, self._clock = sink, report_s, deadline, clock
        self._last_line = clock()

    # ---- what the session tells ----

    def family_started(self, name: str) -> None:
        family = self._families.get(name)
        if family is None:
            return
        family.started = self._clock()
        planned, left = duration(family.planned_s * self._pace()), duration(self.seconds_left())
        probes = f"{family.probes} probe{'s' * (family.probes != 1)}"
        self._line(f"{self._tag(family)}: {probes}, about {planned} by the plan; about {left} left in all")
        self._status(family)

    def probe_ended(self, name: str, probe: str, outcome: ProbeOutcome) -> None:
        family = self._families.get(name)
        if family is None:
            return
        family.done += 1
        family.statuses[outcome.status] += 1
        word = FAILED_AT_ONCE.get(outcome.status)
        if word and not family.failure_said:
            family.failure_said = True
            detail = " ".join(outcome.detail.split())
            cut = detail[:DETAIL_CHARS] + ("…" if len(detail) > DETAIL_CHARS else "")
            self._line(f"{self._tag(family)}: {probe} {word}: {cut}")
        elif not self._sink.live and self._clock() - self._last_line >= PLAIN_EVERY_S:
            self._line(f"{self._tag(family)}: {family.done}/{family.probes} probes; about "
                       f"{duration(self.seconds_left())} left")  # fmt: skip
        self._status(family)

    def family_ended(self, name: str) -> None:
        family = self._families.get(name)
        if family is None:
            return
        family.actual_s = self._clock() - (family.started if family.started is not None else self._clock())
        ok = family.statuses["ok"]
        others = ", ".join(f"{n} {status}" for status, n in family.statuses.items() if status != "ok")
        self._line(f"{self._tag(family)} done in {duration(family.actual_s)}: {ok}/{family.probes} ok"
                   + (f", {others}" if others else ""))  # fmt: skip

    def family_skipped(self, name: str, reason: str) -> None:
        """A family the run did not measure (its deadline came, or family after family died)."""
        family = self._families.get(name)
        if family is None:
            return
        family.actual_s = 0.0
        family.planned_s = 0.0  # nothing of it is left to wait for, and it says nothing of the pace
        self._line(f"{self._tag(family)} not measured: {reason}")

    def close(self) -> None:
        self._sink.close()

    # ---- what is said ----

    def seconds_left(self) -> float:
        """The plan's seconds for what is still to measure, at the pace so far, and the report's."""
        left = sum(f.planned_s * (1 - f.done / f.probes) for f in self._families.values() if f.actual_s is None)
        left *= self._pace()
        if self._deadline is not None:
            left = min(left, max(0.0, self._deadline - self._clock()))
        return left + self._report_s

    def _pace(self) -> float:
        """Seconds taken over seconds planned, over the families measured to their end (1 before any)."""
        ended = [f for f in self._families.values() if f.actual_s is not None and f.planned_s > 0]
        planned = sum(f.planned_s for f in ended)
        actual = sum(f.actual_s or 0.0 for f in ended)
        return actual / planned if planned > 0 and actual > 0 else 1.0

    def _tag(self, family: _Family) -> str:
        return f"[{family.number}/{len(self._families)}] {family.name}"

    def _line(self, text: str) -> None:
        self._last_line = self._clock()
        self._sink.line(PREFIX + text)

    def _status(self, family: _Family) -> None:
        if not self._sink.live:
            return
        total = sum(f.probes for f in self._families.values())
        done = sum(f.done if f.actual_s is None else f.probes for f in self._families.values())
        filled = round(BAR_WIDTH * done / total) if total else BAR_WIDTH
        bar = "#" * filled + "-" * (BAR_WIDTH - filled)
        self._sink.status(
            f"[{bar}] {done}/{total} probes | {self._tag(family)} {family.done}/{family.probes} | "
            f"about {duration(self.seconds_left())} left"
        )


class QuietSink:
    """Says nothing: a run driven by a program, not watched by a person."""

    live = False

    def line(self, text: str) -> None:
        pass

    def status(self, text: str) -> None:
        pass

    def close(self) -> None:
        pass


class StreamSink:
    """Progress on a stream (the CLI's stderr): plain lines, and on a terminal a status line kept below them."""

    def __init__(self, stream: TextIO | None, live: bool | None = None) -> None:
        self._stream = stream
        self.live = bool(stream is not None and stream.isatty()) if live is None else live
        self._shown = ""  # the status line on screen

    def line(self, text: str) -> None:
        self._write(("\r\x1b[K" if self._shown else "") + text + "\n" + self._shown)

    def status(self, text: str) -> None:
        self._shown = text[: max(20, shutil.get_terminal_size().columns - 1)]
        self._write("\r\x1b[K" + self._shown)

    def close(self) -> None:
        if self._shown:
            self._shown = ""
            self._write("\r\x1b[K")

    def _write(self, text: str) -> None:
        assert self._stream is not None
        self._stream.write(text)
        self._stream.flush()
