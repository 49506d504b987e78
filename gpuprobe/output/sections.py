"""The fact sheet's sections and plots, as data each measurement family declares.

A family module may define ``SECTIONS`` (a tuple of :class:`Section`, in sheet order) and
``INVARIANTS`` (see :mod:`gpuprobe.judge.invariants`); :mod:`gpuprobe.output.sheet` places its sections
in the catalog's order, before the general ones. A section with a :class:`Plot` gets
that plot drawn from the results (PNG) and shown under its table.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from gpuprobe.core.results import Results


@dataclass(frozen=True)
class Plot:
    """One figure: drawn from the results as PNG bytes (None when the run has nothing to draw)."""

    key: str  # e.g. "latency_vs_footprint"
    file_name: str  # e.g. "latency_vs_footprint.png", beside factsheet.md
    alt: str  # e.g. "latency vs footprint"
    png: Callable[[Results, int], bytes | None]  # (results, dpi) -> PNG bytes


@dataclass(frozen=True)
class Section:
    """One section of the sheet: which facts it holds and which plot goes with it.

    A fact goes to the section whose id prefix matches longest (the first such on a tie), else to the
    first whose probe prefix matches the probe that measured it, else to "Other facts"."""

    title: str
    fact_prefixes: tuple[str, ...]
    probe_prefixes: tuple[str, ...] = ()
    plot: Plot | None = None
    blurb: str = ""
    invariants: bool = False

    @property
    def plot_key(self) -> str | None:
        return self.plot.key if self.plot else None
