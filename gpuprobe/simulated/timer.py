"""The simulated %globaltimer: it moves in whole ticks, as a real GPU's does.

On current NVIDIA GPUs %globaltimer is updated about every microsecond (every 32 ns only while a
profiler refines it), so two readings around a window of ``d`` ns differ by ``floor(d / tick)`` or
``ceil(d / tick)`` ticks, depending on where the window starts between two updates: a window under
one tick reads 0 or 1 tick. The simulated kernels that write %globaltimer readings read it through
:class:`Globaltimer`, with an arbitrary phase per launch (:func:`at_launch`), so a host that divides
by a short window's reading, or claims a precision a window cannot give, fails here as it would on
a GPU. ``gpu.timer_tick_ns`` (default :data:`TICK_NS`) sets the tick.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

TICK_NS = 1000  # %globaltimer's update interval without a profiler
# Where the timer stands when a simulated launch starts: as on a GPU, nanoseconds since the Unix epoch
# (here 2025-12-02), beyond float64's exact integers (2**53), so a host that does timer arithmetic in
# float64 loses nanoseconds here as it does on a GPU.
EPOCH_NS = 1_764_633_600_000_000_000


def tick_ns(gpu: Any) -> int:
    """The simulated GPU's timer tick, in whole ns."""
    return int(getattr(gpu, "timer_tick_ns", TICK_NS))


@dataclass(frozen=True)
class Globaltimer:
    """%globaltimer as a kernel reads it: the true time ``epoch_ns + t``, down to a whole tick."""

    epoch_ns: int
    tick_ns: int = TICK_NS

    def read(self, true_ns: npt.ArrayLike) -> np.ndarray:
        """The readings at true times ``true_ns`` (ns after the epoch), as the kernel stores them (uint64)."""
        t = np.int64(self.epoch_ns) + np.floor(np.asarray(true_ns, dtype=np.float64)).astype(np.int64)
        return (t // self.tick_ns * self.tick_ns).astype(np.uint64)

    def window(self, start_ns: npt.ArrayLike, end_ns: npt.ArrayLike) -> np.ndarray:
        """What a kernel computes as the ns between readings at ``start_ns`` and ``end_ns``."""
        return (self.read(end_ns) - self.read(start_ns)).astype(np.int64)


def at_launch(gpu: Any) -> Globaltimer:
    """The timer as one launch sees it: the launch starts at an arbitrary point between two ticks."""
    tick = tick_ns(gpu)
    return Globaltimer(EPOCH_NS + int(gpu._rng.integers(0, tick)), tick)


def continuous(gpu: Any) -> Globaltimer:
    """The timer for simulations that keep their own running time (``gpu.timer_ns``, from the epoch)."""
    return Globaltimer(EPOCH_NS, tick_ns(gpu))
