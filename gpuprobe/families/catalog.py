"""The measurement families, by the family name their probes declare in ``ptx/*.toml``."""

from __future__ import annotations

from types import ModuleType

from gpuprobe.families import alu, memory_latency, mma, selftest

# In measuring order. The self-test goes first when it runs (--inject-fault), so that every family
# after it shows the run went on.
FAMILIES: dict[str, ModuleType] = {"selftest": selftest, "memory": memory_latency, "alu": alu, "mma": mma}
OPT_IN = frozenset({"selftest"})  # measured only when asked
