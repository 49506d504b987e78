"""The measurement families, by the family name their probes declare in ``ptx/*.toml``."""

from __future__ import annotations

from types import ModuleType

from gpuprobe.families import memory_latency, selftest

# In measuring order. The self-test goes first when it runs (--inject-fault), so that every family
# after it shows the run went on.
FAMILIES: dict[str, ModuleType] = {"selftest": selftest, "memory": memory_latency}
OPT_IN = frozenset({"selftest"})  # measured only when asked
