"""What every measurement family shares: how a probe's outcome is handed back, how a probe says its
own check failed, and the shape of a family module.

A family module (see :mod:`gpuprobe.families.catalog`) provides ``PROBES`` (its probe names in
measuring order, as declared in ``ptx/<family>/*.toml``), a ``Settings`` dataclass (JSON-able fields: it
crosses into the measuring child process), ``measure(request: Request) -> Probes``, yielding
``(probe name, run)`` pairs, where ``run()`` measures that probe and returns a :class:`Measured`
(or raises :class:`ProbeFailure`), ``plan(settings: Settings, device: Device) -> Plan`` (what
measuring every probe costs, from the settings and what the device reports, without a GPU), and
``SMOKE`` (a :class:`Smoke`: the family's cheapest probes and minimal settings, for a first contact
with new hardware).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.runner.gpu import Launcher


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
    cubin: Path | None = None  # the checked cubin the launcher loaded, for a family that reports what its
    # kernels compiled to (None where the caller has none to give, as a test with a simulated GPU may)


Probes = Iterator[tuple[str, Callable[[], Measured]]]  # (probe name, run) in measuring order


@dataclass(frozen=True)
class Plan:
    """What measuring a family is expected to cost on a device, counted from its settings (no GPU needed).

    The run's time plan (:mod:`gpuprobe.measure.plan`) turns it into seconds with one cost model for every
    family: each probe pays two condition snapshots, each launcher call a host round trip, and the
    GPU and host work on top. Count what the settings allow at most (every sample at its most
    repeats), so the plan is an upper bound a real run can be held to.
    """

    probes: int  # probes measured: each is wrapped in two condition snapshots
    launches: int  # launcher calls that wait for the GPU (a launch, fill, read, timed batch, copy)
    gpu_s: float  # GPU seconds of the work itself: kernels, copies, GEMMs (no host overhead)
    host_s: float = 0.0  # other host seconds: results read back and checked, references computed, chains built

    def __post_init__(self) -> None:
        if self.probes < 0 or self.launches < 0 or not self.gpu_s >= 0 or not self.host_s >= 0:
            raise ValueError(f"Plan: counts and seconds must be at least 0, not {self}")

    def __add__(self, other: Plan) -> Plan:
        return Plan(self.probes + other.probes, self.launches + other.launches,
                    self.gpu_s + other.gpu_s, self.host_s + other.host_s)  # fmt: skip


@dataclass(frozen=True)
class Smoke:
    """A family's first-contact check: its cheapest probes that still exercise its launch path and
    self-check, measured once with ``settings`` (the family's ``Settings`` at their minimum)."""

    probes: tuple[str, ...]
    settings: Any
