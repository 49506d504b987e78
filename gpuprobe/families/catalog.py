"""Every measurement family, in measuring order: the one place that knows them all.

What the families declare (:class:`~gpuprobe.families.base.Family`: fact-sheet sections, invariants,
probes) is collected here and handed to the stages that use it; nothing below the families imports it.
"""

from __future__ import annotations

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
    loaded_latency,
    memory,
    mma,
    p2p,
    power,
    selftest,
    tcgen05,
    tma,
    warp,
    wgmma,
)
from gpuprobe.families.base import Family
from gpuprobe.judge.invariants import InvariantCheck
from gpuprobe.output.sections import Section

# In measuring order (and fact-sheet order): the memory hierarchy, then compute and tensor cores, then
# warps, synchronisation, the CUDA C++ abstractions over them (coop) and launch, then seconds of sustained work
# (power: last of one GPU's, so its heat reaches no other family), then what joins the GPUs (measured only where a
# process sees more than one). The self-test goes first when it runs
# (--inject-fault), so that every family after it shows the run went on.
FAMILIES: tuple[Family, ...] = (
    selftest.FAMILY,
    memory.FAMILY,
    bandwidth.FAMILY,
    loaded_latency.FAMILY,
    cache_geometry.FAMILY,
    l2_partition.FAMILY,
    atomics.FAMILY,
    host_transfer.FAMILY,
    async_copy.FAMILY,
    tma.FAMILY,
    alu.FAMILY,
    mma.FAMILY,
    wgmma.FAMILY,
    tcgen05.FAMILY,
    warp.FAMILY,
    barrier.FAMILY,
    cluster.FAMILY,
    grid_sync.FAMILY,
    coop.FAMILY,
    launch.FAMILY,
    power.FAMILY,
    p2p.FAMILY,
    collectives.FAMILY,
)
BY_NAME: dict[str, Family] = {family.name: family for family in FAMILIES}
OPT_IN = frozenset({"selftest"})  # measured only when asked


def sections() -> tuple[Section, ...]:
    """Every family's fact-sheet sections, in catalog order."""
    return tuple(section for family in FAMILIES for section in family.sections)


def invariant_checks() -> tuple[InvariantCheck, ...]:
    """Every family's invariants, in catalog order."""
    return tuple(check for family in FAMILIES for check in family.invariants)


def probes_by_family(smoke: bool) -> dict[str, tuple[str, ...]]:
    """Each family's probes: all of them, or (``smoke``) the cheapest few its smoke stage measures."""
    return {family.name: family.smoke.probes if smoke else family.probes for family in FAMILIES}
