"""The measurement families, by the family name their probes declare in ``ptx/*.toml``."""

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
    grid_sync,
    host_transfer,
    l2_partition,
    launch,
    memory_latency,
    mma,
    selftest,
    warp,
    wgmma,
)

# In measuring order (and fact-sheet order): the memory hierarchy, then compute and tensor cores, then
# warps, synchronisation and launch. The self-test goes first when it runs (--inject-fault), so that
# every family after it shows the run went on.
FAMILIES: dict[str, ModuleType] = {
    "selftest": selftest,
    "memory": memory_latency,
    "bandwidth": bandwidth,
    "cache_geometry": cache_geometry,
    "l2_partition": l2_partition,
    "atomics": atomics,
    "host_transfer": host_transfer,
    "async_copy": async_copy,
    "alu": alu,
    "mma": mma,
    "wgmma": wgmma,
    "warp": warp,
    "barrier": barrier,
    "cluster": cluster,
    "grid_sync": grid_sync,
    "launch": launch,
}
OPT_IN = frozenset({"selftest"})  # measured only when asked
