"""What every measurement family shares: how a probe's outcome is handed back, how a probe says its
own check failed, and the shape of a family module.

A family module (see :mod:`gpuprobe.families.catalog`) provides ``PROBES`` (its probe names in
measuring order, as declared in ``ptx/*.toml``), a ``Settings`` dataclass (JSON-able fields: it
crosses into the measuring child process), and ``measure(request: Request) -> Probes``, yielding
``(probe name, run)`` pairs, where ``run()`` measures that probe and returns a :class:`Measured`
(or raises :class:`ProbeFailure`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gpuprobe.gpu import Launcher
from gpuprobe.results import Device, Fact, ProbeOutcome


class ProbeFailure(Exception):
    """The probe ran but its own check failed (a wrong result, an impossible timing): no facts.

    Raised from a family's ``run()``, the measuring child records the probe as "failed"."""


@dataclass
class Measured:
    """One probe's outcome and facts, handed back as soon as the probe finishes."""

    probe: str
    outcome: ProbeOutcome
    facts: list[Fact] = field(default_factory=list)


@dataclass
class Request:
    """What a family is asked to measure, and with what."""

    launcher: Launcher  # the one runner every launch goes through
    parameters: dict[str, list[tuple[str, str]]]  # each kernel's PTX signature: every launch is checked against it
    device: Device
    runnable: set[str]  # the probes to measure: their SASS contracts held on this arch
    settings: Any = None  # the family's Settings; None: its defaults
    state: dict[str, Any] = field(default_factory=dict)  # JSON-able, carried across measuring processes
    # (it starts with the GPU model's datasheet figures, state["datasheet"]; families add what later probes need)


Probes = Iterator[tuple[str, Callable[[], Measured]]]  # (probe name, run) in measuring order
