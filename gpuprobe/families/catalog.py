"""The measurement families, by the family name their probes declare in ``ptx/<family>/*.toml``.

This is the one place that knows every family. What the families export as data (the fact sheet's
``SECTIONS``, the cross-generation ``INVARIANTS``, their probes) is collected here and handed to the
stages that use it; nothing below the families imports this module.
"""

from __future__ import annotations

from types import ModuleType

from gpuprobe.families import (
    alu,
    async_copy,
    atomics,
    bandwidth,
    barrier,
    cache_geometry,
    cluster,
    collectives,
    coop,
    grid_sync,
    host_transfer,
    l2_partition,
    launch,
    memory_latency,
    mma,
    p2p,
    selftest,
    tcgen05,
    tma,
    warp,
    wgmma,
)
from gpuprobe.judge.invariants import InvariantCheck
from gpuprobe.output.sections import Section

# In measuring order (and fact-sheet order): the memory hierarchy, then compute and tensor cores, then
# warps, synchronisation, the CUDA C++ abstractions over them (coop) and launch, then what joins the GPUs
# (measured only where a process sees more than one). The self-test goes first when it runs
# (--inject-fault), so that every family after it shows the run went on.
FAMILIES: dict[str, ModuleType] = {
    "selftest": selftest,
    "memory": memory_latency,
    "bandwidth": bandwidth,
    "cache_geometry": cache_geometry,
    "l2_partition": l2_partition,
    "atomics": atomics,
    "host_transfer": host_transfer,
    "async_copy": async_copy,
    "tma": tma,
    "alu": alu,
    "mma": mma,
    "wgmma": wgmma,
    "tcgen05": tcgen05,
    "warp": warp,
    "barrier": barrier,
    "cluster": cluster,
    "grid_sync": grid_sync,
    "coop": coop,
    "launch": launch,
    "p2p": p2p,
    "collectives": collectives,
}
OPT_IN = frozenset({"selftest"})  # measured only when asked


def sections() -> tuple[Section, ...]:
    """Every family's fact-sheet sections (``SECTIONS``), in catalog order."""
    return tuple(section for module in FAMILIES.values() for section in getattr(module, "SECTIONS", ()))


def invariant_checks() -> tuple[InvariantCheck, ...]:
    """Every family's cross-generation invariants (``INVARIANTS``), in catalog order."""
    return tuple(check for module in FAMILIES.values() for check in getattr(module, "INVARIANTS", ()))


def probes_by_family(smoke: bool) -> dict[str, tuple[str, ...]]:
    """Each family's probes: all of them, or (``smoke``) the cheapest few its smoke stage measures."""
    return {name: tuple(module.SMOKE.probes if smoke else module.PROBES) for name, module in FAMILIES.items()}
