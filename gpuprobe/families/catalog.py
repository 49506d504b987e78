"""Every measurement family, in measuring order: the one place that knows them all.

What the families declare (:class:`~gpuprobe.families.base.Family`: fact-sheet sections, invariants,
probes) is collected here and handed to the stages that use it; nothing below the families imports it.

A family's package is imported when it is first asked for (:func:`family`), and every one of them when
``FAMILIES`` or ``BY_NAME`` is first read: a measuring process, which measures the families it is handed
one at a time, imports those alone (every family's import was most of its start).
"""

from __future__ import annotations

import importlib
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gpuprobe.families.base import Family
    from gpuprobe.judge.invariants import InvariantCheck
    from gpuprobe.output.sections import Section

# In measuring order (and fact-sheet order): the memory hierarchy, then compute and tensor cores, then
# warps, synchronisation, the CUDA C++ abstractions over them (coop) and launch, then seconds of sustained work
# (power: last of one GPU's, so its heat reaches no other family), then what joins the GPUs (measured only where a
# process sees more than one). The self-test goes first when it runs
# (--inject-fault), so that every family after it shows the run went on.
NAMES: tuple[str, ...] = (
    "selftest",
    "memory",
    "bandwidth",
    "loaded_latency",
    "cache_geometry",
    "l2_partition",
    "atomics",
    "host_transfer",
    "async_copy",
    "tma",
    "alu",
    "mma",
    "wgmma",
    "tcgen05",
    "warp",
    "barrier",
    "cluster",
    "grid_sync",
    "coop",
    "launch",
    "roofline",
    "ladder",
    "frameworks",
    "power",
    "p2p",
    "collectives",
)
OPT_IN = frozenset({"selftest"})  # measured only when asked

FAMILIES: tuple[Family, ...]  # every family, in measuring order (made on first use: :func:`__getattr__`)
BY_NAME: dict[str, Family]  # the same, by name


def family(name: str) -> Family:
    """The family ``name`` (its package, ``gpuprobe.families.<name>``, imported if it was not); KeyError for a
    name the catalog does not list."""
    if name not in NAMES:
        raise KeyError(name)
    return importlib.import_module(f"{__package__}.{name}").FAMILY


def __getattr__(attribute: str) -> object:
    """``FAMILIES`` and ``BY_NAME``, every family imported on the first read of either (then kept)."""
    if attribute == "FAMILIES":
        value: object = tuple(family(name) for name in NAMES)
    elif attribute == "BY_NAME":
        value = {name: family(name) for name in NAMES}
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {attribute!r}")
    globals()[attribute] = value
    return value


def every_family() -> tuple[Family, ...]:
    """``FAMILIES`` as it stands (made on first use, as its first read from outside makes it)."""
    return sys.modules[__name__].FAMILIES


def sections() -> tuple[Section, ...]:
    """Every family's fact-sheet sections, in catalog order."""
    return tuple(section for measured in every_family() for section in measured.sections)


def invariant_checks() -> tuple[InvariantCheck, ...]:
    """Every family's invariants, in catalog order."""
    return tuple(check for measured in every_family() for check in measured.invariants)


def probes_by_family(smoke: bool) -> dict[str, tuple[str, ...]]:
    """Each family's probes: all of them, or (``smoke``) the cheapest few its smoke stage measures."""
    return {measured.name: measured.smoke.probes if smoke else measured.probes for measured in every_family()}
