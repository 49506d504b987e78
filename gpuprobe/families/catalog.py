"""The measurement families, by the family name their probes declare in ``ptx/*.toml``."""

from __future__ import annotations

from types import ModuleType

from gpuprobe.families import memory_latency

FAMILIES: dict[str, ModuleType] = {"memory": memory_latency}
