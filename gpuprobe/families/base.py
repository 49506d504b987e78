"""What every measurement family shares: how a probe's outcome is handed back, how a probe says its
own check failed, and the shape of a family module.

A family module (see :mod:`gpuprobe.families.catalog`) provides ``PROBES`` (its probe names in
measuring order, as declared in ``ptx/*.toml``), a ``Settings`` dataclass (JSON-able fields: it
crosses into the measuring child process), and ``measure(launcher, parameters, l2_bytes, runnable,
settings, state)`` yielding ``(probe name, run)`` pairs, where ``run()`` measures that probe and
returns a :class:`Measured`. ``state`` is a JSON-able dict carried across child processes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuprobe.results import Fact, ProbeOutcome


class ProbeFailure(Exception):
    """The probe ran but its own check failed (a wrong result, an impossible timing): no facts.

    Raised from a family's ``run()``, the measuring child records the probe as "failed"."""


@dataclass
class Measured:
    """One probe's outcome and facts, handed back as soon as the probe finishes."""

    probe: str
    outcome: ProbeOutcome
    facts: list[Fact] = field(default_factory=list)
