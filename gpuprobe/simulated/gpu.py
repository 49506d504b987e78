"""The simulated GPU (``gpuprobe demo`` and the tests): a part whose kernels are NumPy models of their PTX.

Every launch's arguments are checked against the kernel's PTX signature, as CupyLauncher checks them,
and bound to its parameter names. Nothing it produces is a measurement.

Every family simulates its kernels in ``gpuprobe/families/<family>/simulated.py``: each such module's
``SIMULATION`` (:class:`~gpuprobe.simulated.simulation.Simulation`) maps kernel name to ``simulate(gpu,
launch, **parameters) -> float | None`` (the parameters by PTX name; the return value is the kernel's
simulated GPU time in ms, for ``time_launches``). The simulated GPU dispatches a launch to the family that
knows its kernel.
"""

from __future__ import annotations

import contextlib
import importlib
import os
import sys
import time
import weakref
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import Any
from uuid import NAMESPACE_URL, uuid5

import numpy as np

from gpuprobe.core.arch import parse_arch
from gpuprobe.core.results import Device
from gpuprobe.families.base import Request
from gpuprobe.kernels.check import arch_module
from gpuprobe.kernels.cubin import BuiltModule, module_of
from gpuprobe.kernels.registry import declaring
from gpuprobe.kernels.sass import kernel_opcodes
from gpuprobe.measure.conditions import ConditionRecorder
from gpuprobe.runner.checked import check_launch, signature
from gpuprobe.runner.launcher import (
    GEMM_DRAWN_ROWS,
    GEMM_TYPES,
    CooperativeGridTooLarge,
    Dims,
    GemmSample,
    GemmShape,
    LaunchPathUnavailable,
    Signatures,
    Stamp,
    hold_cycles,
    round_to_output,
    xyz,
)
from gpuprobe.runner.tensor_map import TENSOR_MAP_DTYPE, TileMap
from gpuprobe.runner.trajectory import Trajectory
from gpuprobe.simulated import power
from gpuprobe.simulated.simulation import Simulation

KIB, MIB = 2**10, 2**20
TENSOR_MAP_TAG = 0x7E45_0121  # the first word of a simulated tensor map

# Run-to-run noise: each simulated quantity (a kernel's timing, a copy path, a launch path) is off by a
# factor drawn once per SimulatedGpu from its seed, the same for every sample of the run, as a real run's
# samples share the pages it got and the clocks it settled on. A count of SM cycles moves only with where
# pages and cycles land (L2 slice distances, TLB reach): about 0.3 % (CLOCKED_RUN_SD). A device time (a
# bandwidth kernel's ms, the SM clock, a GEMM) also moves with the memory and SM clocks a run settles
# on: about 0.5 % on a fixed-clock datacentre part. What the host takes part in (an enqueue, a PCIe copy,
# an event) moves with the CPU's frequency and the link's state: about 1 %. The comparison allows
# 0.5 % for what the GPU measures and 1 % for host costs (gpuprobe.core.detection.RUN_TO_RUN_PCT):
# these spreads, and what derived facts (a difference of two timings, a fit) make of them.
CLOCKED_RUN_SD = 0.003
DEVICE_RUN_SD = 0.005
HOST_RUN_SD = 0.01

_MODULES: dict[str, BuiltModule] = {}


def _module(arch: str = "sm_90a") -> BuiltModule:
    """The module of a simulated part of ``arch`` (by default sm_90a), once per process: the one a measuring
    process was handed (``open_simulated``), else the module ``gpuprobe check`` builds for the arch (read back
    from the check cache)."""
    if arch not in _MODULES:
        _MODULES[arch] = arch_module(parse_arch(arch))
    return _MODULES[arch]


def ptx_parameters(arch: str = "sm_90a") -> dict[str, list[tuple[str, str]]]:
    """The probe kernels' PTX signatures in the module for ``arch``."""
    return _module(arch).parameters


# SASS opcodes whose instruction is a whole warp's (HMMA, IMMA, ...) or a warpgroup's (HGMMA, ...): a
# kernel holding one is launched in whole warps or warpgroups, else a GPU leaves its results undefined
_COLLECTIVE_WIDTH = {"HMMA": 32, "IMMA": 32, "DMMA": 32, "QMMA": 32, "HGMMA": 128, "IGMMA": 128, "QGMMA": 128}


@cache
def collective_width(kernel: str, arch: str = "sm_90a") -> int:
    """The threads a launch of ``kernel`` must come in multiples of: 128 with a warpgroup MMA in its SASS,
    32 with a warp MMA, else 1."""
    bases = _opcodes(arch).get(kernel, frozenset())
    return max((w for opcode, w in _COLLECTIVE_WIDTH.items() if opcode in bases), default=1)


@cache
def _opcodes(arch: str) -> dict[str, frozenset[str]]:
    """The opcodes of each kernel of the module of ``arch`` (its SASS, without reading back its whole listing)."""
    return kernel_opcodes(_module(arch).cubin)


@dataclass(frozen=True)
class SimulatedLaunch:
    """How a simulated kernel was launched: grid and block as (x, y, z), dynamic shared bytes."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0
    cooperative: bool = False

    @property
    def blocks(self) -> int:
        return self.grid[0] * self.grid[1] * self.grid[2]

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]


@cache
def simulation(family: str) -> Simulation:
    """``family``'s simulation (``SIMULATION`` of ``gpuprobe/families/<family>/simulated.py``)."""
    return importlib.import_module(f"gpuprobe.families.{family}.simulated").SIMULATION


def simulations() -> dict[str, Simulation]:
    """Each family's simulation, by family name, in catalog order."""
    from gpuprobe.families.catalog import NAMES

    return {family: simulation(family) for family in NAMES}


def smoke_part(family: str) -> dict[str, Any]:
    """SimulatedGpu options for a family's smoke check: the part its simulation names (none: the default)."""
    return dict(simulations()[family].smoke_part)


SUITE_SMS = 8  # the simulated part a whole-suite run measures: few SMs for its small L2, as real parts have


# What the suite's part's memory delivers: the default part's (132 SMs) per SM, so that a stream, the loaded-latency
# background and Little's law (bytes in flight = rate x latency) agree on one 8-SM memory system; bytes in flight
# per SM that saturate it about 1.5 x what its rate and the simulated latencies need.
SUITE_MEMORY = {"bw_dram_gbps": 3000.0 * SUITE_SMS / 132, "bw_l2_gbps": 9000.0 * SUITE_SMS / 132,
                "bw_inflight_bytes": 16384.0, "bw_l2_inflight_bytes": 12288.0}  # fmt: skip


SIMULATED_GEMM_BYTES = {"bf16": (2, 2), "f16": (2, 2), "tf32": (4, 4), "f32": (4, 4), "s8": (1, 4), "e4m3": (1, 2)}


def _simulated_rows(shape: GemmShape, dtype: str, side: str, rows: np.ndarray) -> np.ndarray:
    """Rows of a simulated GEMM's A or B (``side``): integers of the type's value range, row r the draw of row r mod
    GEMM_DRAWN_ROWS of an operand of its side, size and type (a skinny GEMM's B is a square one's, as the launcher
    keeps them)."""
    total = shape.m if side == "a" else shape.n
    seeds = (zlib.crc32(f"{side}.{total}x{shape.k}.{dtype}.{int(r) % GEMM_DRAWN_ROWS}".encode()) for r in rows)
    span = GEMM_TYPES[dtype].value_range
    draws = [np.random.default_rng(seed).integers(-span, span + 1, shape.k) for seed in seeds]
    return np.array(draws, dtype=np.float64).reshape(len(rows), shape.k)


def suite_options(**options: Any) -> dict[str, Any]:
    """The simulated part of a whole-suite run: ``SUITE_SMS`` SMs; a cuBLAS, a memory system and cudaMemcpy as
    fast per SM as the default part's (so the simulated wgmma, which scales with the SMs, compares as it would,
    and a memory rate per SM is one that SM's L1 could take in). ``family_options`` given add to or replace
    :data:`SUITE_MEMORY`."""
    default = SimulatedGpu()
    gemm = {dtype: tflops * SUITE_SMS / 132 for dtype, tflops in default.gemm_tflops.items()}
    family = {**SUITE_MEMORY, **options.pop("family_options", {})}
    return {"sm_count": SUITE_SMS, "gemm_tflops": gemm, "copy_gbps": default.copy_gbps * SUITE_SMS / 132, **options,
            "family_options": family}  # fmt: skip


def fast_settings() -> dict[str, Any]:
    """Settings for a quick whole-suite run on the simulated GPU: each family's ``FAST_SETTINGS`` from its
    simulation."""
    return {name: sim.fast_settings for name, sim in simulations().items() if sim.fast_settings is not None}


_KERNELS: dict[str, Callable[..., float | None]] = {}  # the kernels of the simulations loaded so far, by name
_LOADED: set[str] = set()  # the families whose simulations' kernels are in _KERNELS


def _load_kernels(family: str) -> None:
    """``family``'s simulated kernels added to :data:`_KERNELS` (once); one simulated twice is an error."""
    if family in _LOADED:
        return
    for name, simulate in simulation(family).kernels.items():
        assert name not in _KERNELS, f"kernel {name} is simulated twice"
        _KERNELS[name] = simulate
    _LOADED.add(family)


def simulated_kernels() -> dict[str, Callable[..., float | None]]:
    """Every kernel of the families' simulations, by name (one dict, kept: a test may replace one of them)."""
    for family in simulations():
        _load_kernels(family)
    return _KERNELS


def simulated_kernel(kernel: str) -> Callable[..., float | None]:
    """``kernel``'s simulation: the simulation of the family that declares it loaded first (a measuring process
    loads the simulations of the families it measures, not every one), every simulation where that lacks it."""
    declared = declaring(kernel)
    if kernel not in _KERNELS and declared:
        _load_kernels(declared[-1].family)
    if kernel not in _KERNELS:
        simulated_kernels()
    return _KERNELS[kernel]


@dataclass
class SimulatedBuffer:
    """Simulated device memory. Like a CuPy array it has no truth value, and like one it is freed when
    the last reference goes: a kernel given only its raw address afterwards reads freed memory, which
    the simulated GPU refuses (a real one reads whatever was allocated there since)."""

    base: int
    data: np.ndarray  # bytes

    def __bool__(self) -> bool:
        raise ValueError("The truth value of an array with more than one element is ambiguous (as CuPy says)")


@dataclass
class SimulatedGpu:
    """A small split-L2 part by default, so whole-range sweeps stay fast on a CPU."""

    hierarchy_l1: list = field(
        default_factory=lambda: [(16 * KIB, 33.0), (256 * KIB, 260.0), (512 * KIB, 480.0), (None, 700.0)]
    )
    hierarchy_l2: list = field(default_factory=lambda: [(256 * KIB, 260.0), (512 * KIB, 480.0), (None, 700.0)])
    shared_latency: float = 29.0
    clock_read: float = 6.0
    loop: float = 4.0  # the control's standalone cost per iteration; hidden behind the loads in a chase
    edge: float = 40.0  # what a timed chase pays once (pipeline fill and drain)
    mhz: float = 1755.0
    noise: float = 0.01
    l2_bytes: int = 512 * KIB
    name: str = "NVIDIA H100 80GB HBM3"
    sm_id: int = 7
    corrupt_chase: bool = False  # the device returns a wrong end node
    nvml_readings: int = 0  # NVML snapshots taken so far (the simulated temperature and power climb with them)
    launches: list[str] = field(default_factory=list)
    # by base address, the live buffers (kernels get raw pointers): a buffer no one holds is freed
    buffers: weakref.WeakValueDictionary[int, SimulatedBuffer] = field(default_factory=weakref.WeakValueDictionary)
    allocated: list[int] = field(default_factory=list)  # every allocation's size, in order, freed or not
    pinned: set[int] = field(default_factory=set)  # base addresses of the buffers in (pinned) host memory
    in_l2: set[int] = field(default_factory=set)  # line addresses written or read since the last flush
    cycle_warmed: bool = False  # a warm-up lap ran on the pointer cycle now in memory (its steady state is the model's)
    cycle_bytes: int = 0  # the footprint of the pointer cycle last written
    carveouts: dict[str, str] = field(default_factory=dict)
    sm_count: int = 132
    cc: str = "9.0"
    arch: str = "sm_90a"
    signatures: Signatures | None = None  # the cubin's kernels' PTX parameters (None: ptx_parameters(arch))
    blocks_per_sm: int = 8  # what the occupancy API answers, whatever the kernel
    copy_gbps: float = 3000.0  # CuPy's device-to-device copy (bytes read + written per second, GB/s)
    host_gbps: dict[str, float] = field(default_factory=lambda: {"pinned": 50.0, "pageable": 20.0})
    gemm_tflops: dict[str, float] = field(
        default_factory=lambda: {"f16": 700.0, "bf16": 700.0, "tf32": 350.0, "e4m3": 1300.0, "s8": 1300.0}
    )  # 132 SMs, a large GEMM's rate; a skinny or small one is bound by its bytes (gemm_gbps) and its call
    gemm_gbps: float = 3000.0  # the operand and result bytes a GEMM streams from and to DRAM, per second
    gemm_call_us: float = 4.0  # a GEMM's launch and last wave, paid whatever its size
    gemm_missing: dict[str, str] = field(default_factory=dict)  # library ("cuBLASLt") -> why it cannot be loaded
    gemm_corrupt: bool = False  # every GEMM's C is wrong in one element (a planted wrong result)
    kernel_ms: float = 0.002  # a simulated kernel's time when its simulation gives none
    # launch costs (the launch and grid_sync families): host microseconds per enqueue by launch path (a
    # path not listed is not installed), the GPU's own spacing of back-to-back stream launches and of graph
    # nodes, host cost per graph replay, per event record and synchronize; timer_ns is the %globaltimer
    # the simulated kernels read, gap_ns how far it moves per launch of the kind now enqueued
    enqueue_us: dict[str, float] = field(default_factory=lambda: {"cupy": 4.0, "cuda-bindings": 2.5})
    stream_spacing_ns: float = 1800.0
    graph_node_ns: float = 450.0
    graph_replay_us: float = 2.5
    launch_queue_depth: int = 1024  # launches the host enqueues before it must wait for the GPU
    event_us: dict[str, float] = field(default_factory=lambda: {"record": 0.25, "synchronize": 0.3})
    timer_ns: float = 0.0
    gap_ns: float = 1800.0
    seed: int = 7  # the run: its within-run noise and its run-to-run factors are drawn from it
    family_options: dict[str, Any] = field(default_factory=dict)  # attributes the simulated kernels read
    peer_node: dict[str, Any] = field(default_factory=dict)  # the node it is GPU 0 of (peers.SimulatedNode)
    node: Any = None  # its SimulatedPeerGroup, once opened
    node_index: int = 0  # its number in that node
    tensor_maps: list[tuple[int, TileMap]] = field(default_factory=list)  # (buffer base, map) per tensor_map
    _next_base: int = 0x7F0000000000
    _rng: np.random.Generator = field(init=False)
    _run_factors: dict[str, float] = field(default_factory=dict, init=False)
    _kernel: str = field(default="", init=False)  # the kernel being simulated: whose run factor _jitter draws
    power_state: power.PowerState = field(default_factory=power.PowerState)  # its power, clock and energy counter
    power_kind: str = field(default="", init=False)  # what a kernel's simulation says its launch draws like

    def __post_init__(self) -> None:
        self._rng = np.random.default_rng(self.seed)
        for name, value in self.family_options.items():  # e.g. bw_dram_gbps: what a simulated part is like
            setattr(self, name, value)
        self.power_state.scale = self.sm_count / 132  # the power model's figures are a 132-SM part's

    def begin_family(self, family: str) -> None:
        """A measuring process starts measuring ``family`` (:mod:`gpuprobe.measure.child`): the noise draws start
        from the seed again, as in a process of the family's own, so a family's simulated figures do not depend on
        which families the process measured before it (its power, clock and caches carry on, as a real GPU's do)."""
        self._rng = np.random.default_rng(self.seed)

    def _signatures(self) -> Signatures:
        """The PTX parameters every launch is checked against (as CupyLauncher checks) and bound by name to."""
        return self.signatures if self.signatures is not None else ptx_parameters(self.arch)

    def run_factor(self, quantity: str, sd: float) -> float:
        """This run's factor for ``quantity`` (see CLOCKED_RUN_SD): drawn once, from the seed and the name;
        1 on a noiseless part (``noise=0``: no noise within a run, none between runs)."""
        if not self.noise:
            return 1.0
        if quantity not in self._run_factors:
            draw = np.random.default_rng([self.seed, zlib.crc32(quantity.encode())]).standard_normal()
            self._run_factors[quantity] = float(1.0 + sd * draw)
        return self._run_factors[quantity]

    # ---- the Launcher protocol -------------------------------------------------------------
    def alloc(self, nbytes: int) -> SimulatedBuffer:
        buffer = SimulatedBuffer(self._next_base, np.zeros(nbytes, dtype=np.uint8))
        self._next_base += (nbytes + 0xFFFF) & ~0xFFFF
        self.buffers[buffer.base] = buffer
        self.allocated.append(nbytes)
        return buffer

    def alloc_pinned(self, nbytes: int) -> SimulatedBuffer:
        buffer = self.alloc(nbytes)
        self.pinned.add(buffer.base)
        return buffer

    def address(self, buffer: SimulatedBuffer) -> int:
        return buffer.base

    def upload(self, array: np.ndarray) -> SimulatedBuffer:
        raw = np.ascontiguousarray(array).view(np.uint8).copy()
        buffer = self.alloc(len(raw))
        buffer.data[:] = raw
        return buffer

    def fill(self, buffer: SimulatedBuffer, value: int) -> None:
        buffer.data[:] = value
        if len(buffer.data) >= 2 * self.l2_bytes:
            self.in_l2.clear()

    def prefer_l1(self, kernel: str) -> None:
        self.carveouts[kernel] = "max L1"

    def write_cycle(self, buffer: SimulatedBuffer, successor: np.ndarray, stride: int) -> None:
        nodes = np.arange(len(successor), dtype=np.uint64)
        words = buffer.data.view(np.uint64)
        words[nodes * np.uint64(stride // 8)] = np.uint64(buffer.base) + successor.astype(np.uint64) * np.uint64(stride)
        self.in_l2.update((buffer.base + nodes * np.uint64(stride)).tolist())
        self.cycle_warmed = False
        self.cycle_bytes = len(successor) * stride

    def read(self, buffer: SimulatedBuffer, dtype: str, count: int) -> np.ndarray:
        return buffer.data.view(np.dtype(dtype))[:count].copy()

    def tensor_map(self, buffer: SimulatedBuffer, tiles: TileMap) -> np.void:
        """A simulated tensor map: its 128 bytes name an entry of this GPU's table (a real map's bytes are
        the driver's own encoding, which no simulation reads). The entry holds the buffer, as the map's
        address does not keep a real one alive: a kernel given a map of freed memory fails as on a GPU."""
        self.tensor_maps.append((buffer.base, tiles))
        value = np.zeros((), dtype=TENSOR_MAP_DTYPE)
        value["opaque"][:2] = [TENSOR_MAP_TAG, len(self.tensor_maps) - 1]
        return value[()]

    def mapped(self, tensor_map: np.void) -> tuple[SimulatedBuffer, TileMap]:
        """The buffer and the description a simulated tensor map names."""
        tag, index = (int(word) for word in tensor_map["opaque"][:2])
        if tag != TENSOR_MAP_TAG or not 0 <= index < len(self.tensor_maps):
            raise RuntimeError("CUDA_ERROR_ILLEGAL_INSTRUCTION: the kernel was given no tensor map this GPU encoded")
        base, tiles = self.tensor_maps[index]
        return self.buffer_at(base)[0], tiles

    def buffer_at(self, address: int | SimulatedBuffer) -> tuple[SimulatedBuffer, int]:
        """The buffer holding a raw device address (or a buffer, passed as a kernel gets its address), and
        the offset into it."""
        if isinstance(address, SimulatedBuffer):
            return address, 0
        address = int(address)
        for buffer in self.buffers.values():
            if buffer.base <= address < buffer.base + len(buffer.data):
                return buffer, address - buffer.base
        raise RuntimeError(f"CUDA_ERROR_ILLEGAL_ADDRESS: {address:#x} is in no live allocation (freed, or never made)")

    def time_launches(
        self, kernel: str, grid: Dims, block: Dims, args: list[Any], shared_bytes: int = 0, count: int = 1,
        cooperative: bool = False,
    ) -> float:  # fmt: skip
        return self._launch(kernel, grid, block, args, shared_bytes, cooperative, count)

    def max_active_blocks(self, kernel: str, block: int, shared_bytes: int = 0) -> int:
        signature(kernel, self._signatures())  # an unknown kernel fails here as it would in CUDA
        return self.blocks_per_sm

    def time_device_copy(self, dst: SimulatedBuffer, src: SimulatedBuffer, nbytes: int, count: int = 1) -> float:
        dst.data[:nbytes] = src.data[:nbytes]
        return count * 2 * nbytes / (self.copy_gbps * 1e9) * 1e3 * self._jitter("device_copy", DEVICE_RUN_SD)

    def time_host_copy(self, nbytes: int, direction: str, pinned: bool, count: int = 1) -> float:
        assert direction in ("h2d", "d2h", "both"), direction
        moved = nbytes * (2 if direction == "both" else 1)
        gbps = self.host_gbps["pinned" if pinned else "pageable"] * (2 if direction == "both" else 1)
        path = f"host_copy.{direction}.{'pinned' if pinned else 'pageable'}"
        return count * (moved / (gbps * 1e9) * 1e3 + 0.005) * self._jitter(path, HOST_RUN_SD)

    def time_gemm(self, shape: GemmShape, dtype: str, count: int = 1, stamp: Stamp | None = None) -> float:
        """A GEMM at ``gemm_tflops`` or its bytes at ``gemm_gbps``, whichever is slower, plus ``gemm_call_us``
        (so a skinny or small one falls under the large one's rate); the clock stamps around the batch, which runs
        at cuBLAS's own clock, as :func:`gpuprobe.families.wgmma.simulated.bracket_gemm` runs them.
        LaunchPathUnavailable where ``gemm_missing`` names the type's library."""
        library = GEMM_TYPES[dtype].library
        if library in self.gemm_missing:
            raise LaunchPathUnavailable(f"{library} cannot be loaded here ({self.gemm_missing[library]})")
        in_bytes, out_bytes = SIMULATED_GEMM_BYTES[dtype]
        moved = (shape.m + shape.n) * shape.k * in_bytes + shape.m * shape.n * out_bytes
        one_s = max(shape.flop / (self.gemm_tflops[dtype] * 1e12), moved / (self.gemm_gbps * 1e9))
        ms = count * (one_s * 1e3 + self.gemm_call_us / 1e3) * self._jitter(f"gemm.{dtype}", DEVICE_RUN_SD)
        if stamp is not None:
            from gpuprobe.families.wgmma.simulated import bracket_gemm

            bracket_gemm(self, stamp, ms)
        self.power_state.advance("tensor", ms)
        return ms

    def gemm_sample(self, shape: GemmShape, dtype: str, rows: np.ndarray, cols: np.ndarray) -> GemmSample:
        """The sampled rows of A and B (integers of the type's value range, each row from its own seed, as the launcher
        keeps one draw per operand size and type) and C rounded once to the output type; one element off when
        ``gemm_corrupt``."""
        if GEMM_TYPES[dtype].library in self.gemm_missing:
            self.time_gemm(shape, dtype)  # raises LaunchPathUnavailable, as the launcher's first GEMM would
        a, b = (_simulated_rows(shape, dtype, side, picked) for side, picked in (("a", rows), ("b", cols)))
        c = round_to_output(a @ b.T, dtype)
        if self.gemm_corrupt:
            c[-1, -1] += abs(c[-1, -1]) + 1  # off by more than its value: no rounding explains it
        return GemmSample(a, b, c)

    def device(self) -> Device:
        """The part as CUDA and NVML would describe it. Its board (UUID and serial) is one per model name and
        place in its node, whatever the seed: two runs of one simulated part (two seeds) measure one board."""
        board = f"gpuprobe-simulated:{self.name}/gpu{self.node_index}"
        return Device(
            name=self.name,
            cc=self.cc,
            arch=self.arch,
            sm_count=self.sm_count,
            l2_bytes=self.l2_bytes,
            sm_clock_nominal_mhz=1980.0,
            shared_per_sm_bytes=228 * KIB,
            driver="simulated",
            toolkit="simulated",
            uuid=uuid5(NAMESPACE_URL, board).hex,
            serial=f"SIMULATED-{self.node_index}",
            visible_gpus=int(self.peer_node.get("count", 1)),
            simulated=True,
        )

    def nvml(self) -> dict[str, Any] | None:
        """NVML as it reads on a part at work: its clocks, a temperature and power that climb with every
        reading, no clock-event reason, no other process; the driver version it cannot report, as NVML
        records a refused reading."""
        self.nvml_readings += 1
        return {
            "sm_clock_mhz": round(self.mhz),
            "mem_clock_mhz": 2619,
            "sm_clock_max_mhz": 1980,
            "temperature_c": 40 + min(self.nvml_readings // 20, 30),
            "power_w": 150.0 + min(self.nvml_readings, 400),
            "clock_event_reasons": 0,
            "driver": "unavailable (NVMLError_NotSupported: Not Supported)",
            "compute_processes": 0,
        }

    def idle(self, seconds: float) -> None:
        """Idle time passes at once: the power model spends the idle power over it."""
        self.power_state.advance("idle", seconds * 1e3)

    def sampling(self) -> contextlib.AbstractContextManager[Trajectory]:
        """The clock and power over the work done inside, from the power model (:mod:`gpuprobe.simulated.power`)."""
        return self.power_state.sampling(self.mhz)

    def nvtx_range(self, name: str) -> contextlib.AbstractContextManager[None]:
        """No profiler listens to a simulated GPU: the range marks nothing (tests/fakes/ncu stands one in)."""
        return contextlib.nullcontext()

    def peer_group(self) -> Any:
        """Every GPU of its simulated node (:mod:`gpuprobe.simulated.peers`): itself alone unless ``peer_node``
        says more."""
        if self.node is None:
            from gpuprobe.simulated.peers import SimulatedNode, SimulatedPeerGroup

            SimulatedPeerGroup(self, SimulatedNode(**{"count": 1, **self.peer_node}))
        return self.node

    def frameworks(self) -> Any:
        """PyTorch, Triton and cuDNN as the frameworks family models them on this part
        (:class:`gpuprobe.families.frameworks.simulated.SimulatedFrameworks`: gpuprobe.runner.frameworks.Frameworks)."""
        from gpuprobe.families.frameworks.simulated import SimulatedFrameworks

        return SimulatedFrameworks(self)

    def launch(
        self, kernel: str, grid: Dims, block: Dims, args: list[Any], shared_bytes: int = 0, cooperative: bool = False
    ) -> None:
        self._launch(kernel, grid, block, args, shared_bytes, cooperative)

    # ---- launch costs (LaunchPaths: the launch family) ----------------------------------------
    def enqueue_seconds(
        self, kernel: str, grid: Dims, block: Dims, args: list[Any], count: int, via: str = "cupy", wait: bool = True
    ) -> float:
        if via not in self.enqueue_us:
            raise LaunchPathUnavailable(f"{via} is not installed")
        self.gap_ns = self.stream_spacing_ns
        self._launch(kernel, grid, block, args, 0, False, count)
        return count * self.enqueue_us[via] * 1e-6 * self._jitter(f"enqueue.{via}", HOST_RUN_SD)

    def graph_replay(
        self, kernel: str, grid: Dims, block: Dims, args: list[Any], nodes: int, replays: int
    ) -> tuple[float, float]:
        self.gap_ns = self.graph_node_ns
        gpu_ms = self._launch(kernel, grid, block, args, 0, False, nodes * replays)
        self.gap_ns = self.stream_spacing_ns
        host = replays * self.graph_replay_us * 1e-6 * self._jitter("graph_replay", HOST_RUN_SD)
        # past the launch queue's depth the host waits for the GPU, held by the runner's spin while it enqueues
        waited = max(0, replays - self.launch_queue_depth) / replays * (gpu_ms / 1e3 + self.hold_s(replays))
        return host + waited, gpu_ms / 1e3

    def hold_s(self, launches: int) -> float:
        """Seconds the runner's holding spin keeps the GPU busy while ``launches`` are enqueued."""
        return hold_cycles(launches) / (self.mhz * 1e6)

    def event_costs(self, count: int) -> dict[str, float]:
        return {what: us * 1e-6 * self._jitter(f"event.{what}", HOST_RUN_SD) for what, us in self.event_us.items()}

    def _launch(
        self, kernel: str, grid: Dims, block: Dims, args: list[Any], shared_bytes: int, cooperative: bool,
        count: int = 1,
    ) -> float:  # fmt: skip
        """Run the kernel's simulation ``count`` times back to back (the launch checked once, each run simulated
        and its power counted); their simulated GPU time in ms."""
        signatures = self._signatures()
        check_launch(kernel, args, signatures)
        launch = SimulatedLaunch(xyz(grid), xyz(block), shared_bytes, cooperative)
        width = collective_width(kernel, self.arch)
        if launch.threads % width:
            raise RuntimeError(f"{kernel}: a block of {launch.threads} threads runs its {width}-thread MMA part-empty")
        if cooperative and launch.blocks > self.blocks_per_sm * self.sm_count:  # as CupyLauncher refuses it
            raise CooperativeGridTooLarge(
                f"{kernel}: a cooperative grid of {launch.blocks} blocks cannot be co-resident"
            )
        bound = {name: arg for (_, name), arg in zip(signatures[kernel], args, strict=True)}
        simulate, total = simulated_kernel(kernel), 0.0
        for _ in range(count):
            self.launches.append(kernel)
            self._kernel = kernel
            ms = simulate(self, launch, **bound)
            ms = self.kernel_ms if ms is None else float(ms)
            self.power_state.advance(self.power_kind or power.kind(kernel), ms)
            self.power_kind = ""
            total += ms
        return total

    # ---- noise, for the families' simulated kernels ---------------------------------------
    def _jitter(self, quantity: str = "", run_sd: float = CLOCKED_RUN_SD) -> float:
        """This run's factor for ``quantity`` (default: the kernel being simulated) times a sample's noise."""
        return self.run_factor(quantity or self._kernel, run_sd) * float(1.0 + self.noise * self._rng.standard_normal())


def simulated_gpu(**kwargs: Any) -> SimulatedGpu:
    return SimulatedGpu(**kwargs)


@dataclass
class FaultyGpu(SimulatedGpu):
    """The simulated GPU, misbehaving on purpose, as a measuring child process would meet it.

    ``faults`` maps a kernel name to what happens when it is launched: "abort" (the process dies
    on a signal, as after a fatal driver error), "raise" (a CUDA error surfaces as an exception),
    "hang" (the kernel never returns), "poison" (the kernel runs, and leaves the context broken without
    saying so: every allocation after it fails, as in a context a sticky error poisoned). ``garbage`` prints
    junk on stdout at start, and bytes that are not UTF-8 on stdout and stderr. ``throttle`` / ``shared`` make
    NVML report a thermal slowdown / a second process: "always", or "once" (only the first process to look, told
    apart by ``flag_file``).
    ``hang_file``: where a kernel that starts to hang writes its process id, so a test knows that moment.
    ``abort_between`` "once": the first process dies (on a signal) as it is handed its second family, between
    two families, before that family's first probe.
    """

    faults: dict[str, str] = field(default_factory=dict)
    throttle: str = ""
    shared: str = ""
    flag_file: str = ""
    throttle_from_reading: int = 1  # NVML reports the throttle from this reading on (1: all of them)
    hang_file: str = ""
    readings: int = 0
    poisoned: bool = False
    abort_between: str = ""
    families: int = 0  # families this process began

    def begin_family(self, family: str) -> None:
        self.families += 1
        if self.abort_between == "once" and self.families > 1 and self._first_process():
            os.abort()
        super().begin_family(family)

    def alloc(self, nbytes: int) -> SimulatedBuffer:
        if self.poisoned:
            raise RuntimeError("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered (sticky)")
        return super().alloc(nbytes)

    def _launch(
        self, kernel: str, grid: Dims, block: Dims, args: list[Any], shared_bytes: int, cooperative: bool,
        count: int = 1,
    ) -> float:  # fmt: skip
        fault = self.faults.get(kernel)
        if fault == "abort":
            os.abort()
        if fault == "raise":
            raise RuntimeError(f"CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access was encountered in {kernel}")
        if fault == "hang":
            if self.hang_file:
                Path(self.hang_file).write_text(str(os.getpid()))
            time.sleep(3600)
        self.poisoned = self.poisoned or fault == "poison"
        return super()._launch(kernel, grid, block, args, shared_bytes, cooperative, count)

    def nvml(self) -> dict[str, Any] | None:
        self.readings += 1
        first = self._first_process()
        active = {mode: mode == "always" or (mode == "once" and first) for mode in (self.throttle, self.shared)}
        throttled = self.throttle and active[self.throttle] and self.readings >= self.throttle_from_reading
        return {
            **(super().nvml() or {}),
            "clock_event_reasons": 0x40 if throttled else 0,
            "compute_processes": 1 if self.shared and active[self.shared] else 0,  # others than the run's own
        }

    def _first_process(self) -> bool:
        marker = Path(self.flag_file) if self.flag_file else None
        if marker is None:
            return False
        if not marker.exists():
            marker.write_text(str(os.getpid()))
        return marker.read_text() == str(os.getpid())


def open_simulated(
    cubin: Path, device_index: int, signatures: Signatures, garbage: bool = False, **options: Any
) -> SimulatedGpu:
    """The launcher factory a measuring child calls (see gpuprobe.runner.launcher.LauncherSpec)."""
    assert Path(cubin).is_file(), "the session must hand over the cubin it built and checked"
    if garbage:
        print("warning: libfoo.so: something something\n\x00\x01 not json {", flush=True)
        for stream in (sys.stdout, sys.stderr):  # and bytes that are not UTF-8, as a driver may print
            stream.buffer.write(b"driver: \xff\xfe not UTF-8\n")
            stream.buffer.flush()
    gpu = FaultyGpu(signatures=signatures, **options)
    if gpu.arch not in _MODULES:  # the cubin the session built and checked is the module to simulate
        handed = module_of(Path(cubin), parse_arch(gpu.arch))
        if handed is not None:
            _MODULES[gpu.arch] = handed
    return gpu


def measure_family(
    family: Any,
    gpu: SimulatedGpu,
    runnable: set[str] | frozenset[str],
    settings: Any = None,
    state: dict | None = None,
    device: Device | None = None,
) -> dict[str, Any]:
    """Each runnable probe of ``family`` (its :class:`~gpuprobe.families.base.Family` or its package: only its
    ``measure`` is used) measured as the measuring child measures it: between clock and NVML snapshots, a
    failed self-check giving the outcome "failed". ``device`` (default: what the simulated GPU reports) is the
    device the family is told it measures."""
    recorder = ConditionRecorder(gpu, ptx_parameters(gpu.arch), clock_usable=True)
    request = Request(gpu, ptx_parameters(gpu.arch), device or gpu.device(), set(runnable), settings,
                      {} if state is None else state, _module(gpu.arch).cubin)  # fmt: skip
    probes = family.measure(request)
    return {name: recorder.measure(name, step) for name, step in probes}
