"""The simulated input kernel of the collectives family (gp_coll_pattern): rank inputs as the PTX writes
them, out[k] = (k + offset) mod 65521 as float32, written here from the PTX, apart from the host's
prediction (gpuprobe.families.collectives.busbw.inputs)."""

from __future__ import annotations

import numpy as np

from gpuprobe.families.collectives import Settings
from gpuprobe.families.sampling import Stopping
from gpuprobe.simulated.simulation import Simulation

# Settings sized for the simulated node: 8 B to 256 KiB by factors of 4, outputs over 16 KiB sampled.
FAST_SETTINGS = Settings(max_bytes=256 << 10, size_factor=4, calls=3, large_calls=2, large_from_bytes=64 << 10,
                         warmup_calls=1, sampling=Stopping(2, 3, 0.02, 0.0), full_check_bytes=16 << 10,
                         check_samples=256, fill_blocks=4, fill_threads=32)  # fmt: skip


def pattern(gpu, launch, count, offset, out) -> None:
    buffer, start = gpu.buffer_at(out)
    k = np.arange(int(count), dtype=np.uint64)
    values = ((k + np.uint64(offset)) % np.uint64(65521)).astype(np.float32)
    buffer.data[start : start + 4 * int(count)] = values.view(np.uint8)


KERNELS = {"gp_coll_pattern": pattern}

SIMULATION = Simulation(kernels=KERNELS, fast_settings=FAST_SETTINGS)
