"""What every measurement family shares: the :class:`Family` that names one, what it is asked to measure
(:class:`Request`), how a probe's outcome is handed back, and how a probe says its own check failed.

A family is one folder, ``gpuprobe/families/<name>/``, whose ``__init__.py`` holds ``FAMILY``, a
:class:`Family`; ``families/catalog.py`` lists them in measuring order. The smallest real one,
``families/cluster/``, is the template (docs/architecture.md, "A new family").
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import Field, dataclass, field, fields, is_dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.families.sampling import Stopping
from gpuprobe.runner.checked import Kernels, OutputBuffers
from gpuprobe.runner.launcher import Launcher

if TYPE_CHECKING:
    from gpuprobe.judge.invariants import InvariantCheck
    from gpuprobe.output.sections import Section


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

    @cached_property
    def kernels(self) -> Kernels:
        """Checked launches of the cubin's kernels (see :mod:`gpuprobe.runner.checked`)."""
        return Kernels(self.launcher)

    @cached_property
    def outputs(self) -> OutputBuffers:
        """Output buffers for the family's launches, each size allocated once."""
        return OutputBuffers(self.launcher)


Probes = Iterator[tuple[str, Callable[[], Measured]]]  # (probe name, step measuring it) in measuring order


@dataclass(frozen=True)
class Plan:
    """What measuring a family is expected to cost on a device, counted from its settings (no GPU needed).

    The run's time plan (:mod:`gpuprobe.measure.plan`) turns it into seconds with one cost model for every
    family: each probe pays two condition snapshots, each launcher call a host round trip, and the
    GPU and host work on top. Count what the settings allow at most (every sample at its most
    repeats), so the plan is an upper bound a real run can be held to; seconds a probe waits out by its
    settings (a sustained load's window, an idle one) are ``wait_s``: what they take, never less.
    """

    probes: int  # probes measured: each is wrapped in two condition snapshots
    launches: int  # launcher calls that wait for the GPU (a launch, fill, read, timed batch, copy)
    gpu_s: float  # GPU seconds of the work itself: kernels, copies, GEMMs (no host overhead)
    host_s: float = 0.0  # other host seconds: results read back and checked, references computed, chains built
    wait_s: float = 0.0  # wall-clock windows the settings fix (a run sustained for seconds, an idle window)

    def __post_init__(self) -> None:
        seconds = (self.gpu_s, self.host_s, self.wait_s)
        if self.probes < 0 or self.launches < 0 or not all(s >= 0 for s in seconds):
            raise ValueError(f"Plan: counts and seconds must be at least 0, not {self}")

    def __add__(self, other: Plan) -> Plan:
        return Plan(self.probes + other.probes, self.launches + other.launches, self.gpu_s + other.gpu_s,
                    self.host_s + other.host_s, self.wait_s + other.wait_s)  # fmt: skip


@dataclass(frozen=True)
class Smoke:
    """A family's first-contact check: its cheapest probes that still exercise its launch path and
    self-check, measured once with ``settings`` (the family's ``Settings`` at their minimum)."""

    probes: tuple[str, ...]
    settings: Any


@dataclass(frozen=True)
class Family:
    """One measurement family, everything the stages ask of it::

        FAMILY = Family(
            name="cluster",                  # as its probes declare it in ptx/cluster/*.toml
            probes=PROBES,                   # its probe names, in measuring order
            settings=Settings,               # a frozen dataclass, JSON-able (it crosses into the measuring process)
            plan=plan,                       # plan(settings, device) -> Plan: what measuring costs, without a GPU
            measure=measure,                 # measure(request) -> Probes: (probe name, step) pairs in order
            smoke=SMOKE,                     # its cheapest probes at minimal settings, for a first contact
            sections=SECTIONS,               # where its facts appear on the fact sheet
            invariants=(cluster_above_block,),  # checks across its facts (and other families')
        )

    ``optional_facts``: fact ids it may leave out (absent where the hardware lacks what they measure), each
    with the reason shown when one is; ``min_gpus``: the GPUs its process must see, else its probes are
    ``not_run``."""

    name: str
    probes: tuple[str, ...]
    settings: type
    plan: Callable[[Any, Device], Plan]
    measure: Callable[[Request], Probes]
    smoke: Smoke
    sections: tuple[Section, ...] = ()
    invariants: tuple[InvariantCheck, ...] = ()
    optional_facts: Mapping[str, str] = field(default_factory=dict)
    min_gpus: int = 1

    def settings_from(self, data: Mapping[str, Any]) -> Any:
        """The family's ``Settings`` from their JSON form, in which a :class:`Stopping` (or a nested settings
        dataclass, such as the roofline family's tensor sweeps') arrives as a dict and a tuple as a list."""
        return _dataclass_from_json(self.settings, data)


def _dataclass_from_json(kind: type, data: Mapping[str, Any]) -> Any:
    """``kind`` (a settings dataclass) from its JSON form, each field as its type or default declares it."""
    declared = {f.name: f for f in fields(kind)}
    return kind(**{k: _from_json(declared[k], v) if k in declared else v for k, v in data.items()})


def _from_json(declared: Field, value: Any) -> Any:
    """A settings field's value as its annotation (its text) or its default (a dataclass) declares it."""
    if isinstance(value, dict):
        if str(declared.type) == "Stopping":
            return Stopping(**value)
        if is_dataclass(declared.default):
            return _dataclass_from_json(type(declared.default), value)
    if str(declared.type).startswith("tuple") and isinstance(value, list):
        return _tuples(value)
    return value


def _tuples(value: Any) -> Any:
    return tuple(_tuples(v) for v in value) if isinstance(value, list) else value
