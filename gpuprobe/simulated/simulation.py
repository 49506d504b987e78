"""What a family's simulation gives the simulated GPU (``gpuprobe/families/<family>/simulated.py``: ``SIMULATION``)."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Simulation:
    """A family's kernels as NumPy models of their PTX, by kernel name (``simulate(gpu, launch, **parameters)``,
    returning the launch's simulated GPU milliseconds, or None for the simulated GPU's default cost);
    ``fast_settings``, the family's settings for a quick whole-suite run (None: its defaults); ``smoke_part``,
    the simulated part its smoke check needs (SimulatedGpu options) where the default part, an sm_90a, lacks it."""

    kernels: Mapping[str, Callable[..., float | None]]
    fast_settings: Any = None
    smoke_part: Mapping[str, Any] = field(default_factory=dict)
