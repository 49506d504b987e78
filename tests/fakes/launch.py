"""The launch family's kernels on the simulated GPU: each stamp launch moves the simulated %globaltimer
on by the spacing of the kind of launch now enqueued (``gpu.gap_ns``), stamps the next slot, and
holds for ``hold`` ns.

``gpu.corrupt_launch`` breaks a result on purpose: "skip" (a launch does not count itself), "order"
(a stamp earlier than the one before it).
"""

from __future__ import annotations

import numpy as np


def _stamp(gpu, launch, counter, capacity, hold, out) -> float:
    corrupt = getattr(gpu, "corrupt_launch", "")
    gap = gpu.gap_ns * gpu._jitter()
    gpu.timer_ns += gap
    words = counter.data.view(np.uint32)
    slot = int(words[0])
    words[0] += 0 if corrupt == "skip" and slot == 3 else 1
    if slot < int(capacity):
        stamp = gpu.timer_ns - (10 * gap if corrupt == "order" and slot == 5 else 0.0)
        out.data.view(np.uint64)[slot] = round(stamp)
    gpu.timer_ns += int(hold)
    return (gap + int(hold)) / 1e6


KERNELS = {"gp_launch_stamp": _stamp}
