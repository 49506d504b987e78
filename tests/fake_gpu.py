"""A simulated GPU for CPU tests: runs the memory-latency kernels' semantics in NumPy.

It follows the pointer chains really written into its buffers (so a wrong chain or a wrong
prediction is caught exactly as on a GPU) and times each chase with a cache model. Test support
only: nothing it produces is a measurement.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from gpuprobe.families.memory_latency import UNROLL
from gpuprobe.results import Device
from tests.cache_model import curve

KIB, MIB = 2**10, 2**20


@dataclass
class FakeBuffer:
    base: int
    data: np.ndarray  # bytes


@dataclass
class FakeGpu:
    """A small split-L2 part by default, so whole-range sweeps stay fast on a CPU."""

    hierarchy_l1: list = field(
        default_factory=lambda: [(16 * KIB, 33.0), (256 * KIB, 260.0), (512 * KIB, 480.0), (None, 700.0)]
    )
    hierarchy_l2: list = field(default_factory=lambda: [(256 * KIB, 260.0), (512 * KIB, 480.0), (None, 700.0)])
    shared_latency: float = 29.0
    clock_read: float = 6.0
    loop: float = 4.0
    mhz: float = 1755.0
    noise: float = 0.01
    l2_bytes: int = 512 * KIB
    name: str = "NVIDIA H100 80GB HBM3"
    corrupt_chase: bool = False  # the device returns a wrong end node
    launches: list[str] = field(default_factory=list)
    buffers: dict[int, FakeBuffer] = field(default_factory=dict)  # by base address: kernels get raw pointers
    _next_base: int = 0x7F0000000000
    _rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(7))

    # ---- the Launcher protocol -------------------------------------------------------------
    def alloc(self, nbytes: int) -> FakeBuffer:
        buffer = FakeBuffer(self._next_base, np.zeros(nbytes, dtype=np.uint8))
        self._next_base += (nbytes + 0xFFFF) & ~0xFFFF
        self.buffers[buffer.base] = buffer
        return buffer

    def address(self, buffer: FakeBuffer) -> int:
        return buffer.base

    def upload(self, array: np.ndarray) -> FakeBuffer:
        raw = np.ascontiguousarray(array).view(np.uint8).copy()
        buffer = self.alloc(len(raw))
        buffer.data[:] = raw
        return buffer

    def write_chain(self, buffer: FakeBuffer, successor: np.ndarray, stride: int) -> None:
        words = buffer.data.view(np.uint64)
        words[np.arange(len(successor)) * (stride // 8)] = np.uint64(buffer.base) + successor.astype(
            np.uint64
        ) * np.uint64(stride)

    def read_u64(self, buffer: FakeBuffer, count: int) -> np.ndarray:
        return buffer.data.view(np.uint64)[:count].copy()

    def device(self) -> Device:
        return Device(
            name=self.name,
            cc="9.0",
            arch="sm_90a",
            sm_count=132,
            l2_bytes=self.l2_bytes,
            sm_clock_nominal_mhz=1980.0,
            shared_per_sm_bytes=228 * KIB,
            driver="fake",
            toolkit="fake",
        )

    def nvml(self) -> dict[str, Any] | None:
        return None

    def launch(self, kernel: str, grid: int, block: int, args: list[Any], shared_bytes: int = 0) -> None:
        self.launches.append(kernel)
        *params, out = args
        getattr(self, f"_{kernel}")(out, *params)

    # ---- kernels ---------------------------------------------------------------------------
    def _jitter(self) -> float:
        return float(1.0 + self.noise * self._rng.standard_normal())

    def _write(self, out: FakeBuffer, *values: float) -> None:
        out.data.view(np.uint64)[: len(values)] = [round(v) for v in values]

    def _gp_sm_clock(self, out: FakeBuffer, spin: np.uint64) -> None:
        cycles = int(spin) + 40
        self._write(out, cycles, cycles / (self.mhz * self._jitter()) * 1000.0)

    def _gp_clock_overhead(self, out: FakeBuffer) -> None:
        self._write(out, self.clock_read)

    def _gp_loop_overhead(self, out: FakeBuffer, iters: np.uint32) -> None:
        self._write(out, self.clock_read + int(iters) * self.loop, 0)

    def _timed(self, latency: float, iters: int) -> float:
        return self.clock_read + iters * (UNROLL * latency * self._jitter() + self.loop)

    def _gp_chase_shared(self, out: FakeBuffer, offsets: FakeBuffer, nodes, stride, warm, iters) -> None:
        succ = offsets.data.view(np.uint32)[: int(nodes)] // int(stride)
        node = 0
        for _ in range(int(warm) + int(iters) * UNROLL):
            node = int(succ[node])
        self._write(out, self._timed(self.shared_latency, int(iters)), 0, node * int(stride) + int(self.corrupt_chase))

    def _chase_global(self, out: FakeBuffer, hierarchy: list, start, warm, iters) -> None:
        buffer = self.buffers[int(start)]
        words = buffer.data.view(np.uint64)
        pointer = int(start)
        for _ in range(int(warm) + int(iters) * UNROLL):
            pointer = int(words[(pointer - buffer.base) // 8])
        footprint = self._footprint(buffer, int(start))
        latency = float(curve(hierarchy, [footprint], transition="sharp")[0])
        cycles = self._timed(latency, int(iters))
        self._write(out, cycles, cycles / self.mhz * 1000.0, pointer + 128 * int(self.corrupt_chase))

    def _gp_chase_global_ca(self, out: FakeBuffer, start, warm, iters) -> None:
        self._chase_global(out, self.hierarchy_l1, start, warm, iters)

    def _gp_chase_global_cg(self, out: FakeBuffer, start, warm, iters) -> None:
        self._chase_global(out, self.hierarchy_l2, start, warm, iters)

    def _footprint(self, buffer: FakeBuffer, start: int) -> int:
        """Nodes of the cycle through ``start``, times the line size: what the chase covers."""
        words = buffer.data.view(np.uint64)
        seen, pointer = 0, start
        while True:
            pointer = int(words[(pointer - buffer.base) // 8])
            seen += 1
            if pointer == start:
                return seen * 128


def fake_gpu(**kwargs: Any) -> FakeGpu:
    return FakeGpu(**kwargs)


def opener(gpu: FakeGpu):
    def open_launcher(cubin: Path) -> FakeGpu:
        assert Path(cubin).is_file(), "the session must hand over the cubin it built and checked"
        return gpu

    return open_launcher
