"""The tensor-core roofline: the tensor cores fed from DRAM, L2 and shared memory, at intensities from memory-bound
to compute-bound. On sm_90a, wgmma fed by TMA (types bf16, e4m3, tf32, s8; levels dram, l2, shared); on sm_80,
sm_86 and sm_89, mma.sync fed by cp.async (sweep types ``bf16_sync``, ``tf32_sync``, ``s8_sync``; dram, l2).
Kernels: :mod:`gpuprobe.families.roofline.tensor_ptx`. Every point runs the whole GPU and holds its result to
NumPy's:

* **dram** and **l2**: tile pairs (10 KiB: A 64 x 32 bytes, B 256 x 32 bytes, in core-matrix order) into a ring of
  shared-memory stages per block (TMA: ``stages`` of them, one box each; cp.async: four, 16 bytes a thread a
  copy), R wgmmas (or R x 32 mma.sync a warp) a stage: R = 1 .. 16 is the intensity, ``2 x 64 x 256 x K x R`` flop
  per 10240 bytes. The tiles repeat a period of three tile pairs (:func:`period_operands`) whose products sum to
  zero, so the region is filled on the device from one period (``gp_rt_replicate``, :func:`measure_fill`), every
  partial sum of a block's D stays small (at most 2048: exact in every accumulator, Hopper's 14-bit fp8 one
  included), and D after ``steps`` tile pairs is R x the sum of the first ``steps mod 3`` products, the same in
  every block (:func:`expected_ring_d`); mma.sync's D fragments lie in the registers wgmma's do, so one check
  serves both. DRAM: a region of ``dram_l2_multiple`` L2 sizes (at least
  ``dram_min_bytes``) split into one chunk a block, each tile pair loaded once a launch (``chunk - 1``
  steps), the L2 flushed before the launch. L2: chunks of a region under ``l2_fraction`` of the L2, walked
  over and over for about ``l2_ms`` (a first, calibrating launch warms the L2).
* **shared**: the operands resident in shared memory, the wgmma family's throughput measurement
  (:func:`gpuprobe.families.wgmma.measure_rate`, its kernel under a name of its own) at N = 16 .. 256: the
  intensity is the wgmma's own flop per byte of shared memory it reads, ``2 x 64 x N x K / ((64 + N) x 32)``.

A point's rate is its flop over the launch's own %globaltimer span (first block's start to last block's end),
its bytes/s the level's bytes over the same span, its SM clock the blocks' %clock64 over %globaltimer (the
median), as the wgmma family times its throughput.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuprobe.core.arch import arch_for_device
from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device, ProbeOutcome
from gpuprobe.families.async_copy import L2Flush
from gpuprobe.families.base import Measured, Plan, Request
from gpuprobe.families.measuring import TIMER_TICK_NS, clock_window_ns, fact, require_counts
from gpuprobe.families.planning import cycles_s, dram_s, generate_host_s, kernel_runs, link_s, readback_host_s
from gpuprobe.families.roofline.sweep import LEVELS, Point, Sweep
from gpuprobe.families.roofline.tensor_ptx import (
    BOX_ROWS,
    MAX_STAGES,
    PAIR_BYTES,
    REPEATS,
    REPLICATE_KERNEL,
    RING_N,
    RING_THREADS,
    ROW_BYTES,
    SHARED_N,
    SMEM_ALIGN,
    SYNC_STAGES,
    SYNC_TYPES,
    TENSOR_TYPES,
    RingKernel,
    SyncKernel,
    shared_kernel,
)
from gpuprobe.families.sampling import Stopping, sample_until_stable
from gpuprobe.families.wgmma import HOPPER_FLOP_PER_CLK_PER_SM, RECORD_WORDS, Launched, measure_rate, split_output
from gpuprobe.families.wgmma import timed as timed_records
from gpuprobe.families.wgmma.layout import TYPES, M, core_matrix_bytes, d_from_fragments, layout_bits
from gpuprobe.families.wgmma.operands import decode, encode
from gpuprobe.runner.launcher import TensorMaps, capability
from gpuprobe.runner.tensor_map import TileMap

MIB = 1 << 20
PERIOD = 3  # tile pairs: the third's B is minus the sum of the first two's, so the three products sum to zero
SYNC = "_sync"  # a sweep type's suffix where mma.sync, fed by cp.async, is the instruction: ``bf16_sync``
# The (type, level) sweeps each arch has: wgmma and TMA are sm_90a's alone; mma.sync's before it. (mma.sync on
# Hopper, and Blackwell's parts, have none: tcgen05 is sm_100a's instruction.)
_SYNC_SWEEPS = tuple((f"{dtype}{SYNC}", level) for dtype in SYNC_TYPES for level in ("dram", "l2"))
TENSOR_SWEEPS: dict[str, tuple[tuple[str, str], ...]] = {
    "sm_80": _SYNC_SWEEPS,
    "sm_86": _SYNC_SWEEPS,
    "sm_89": _SYNC_SWEEPS,
    "sm_90a": tuple((dtype, level) for dtype in TENSOR_TYPES for level in LEVELS),
}
# mma.sync's dense flop (s8: operations) per clock per SM at most before Hopper: the A100's (NVIDIA A100 whitepaper,
# Table 1: 312 bf16, 156 tf32, 624 int8 dense TFLOP/s or TOP/s at 1410 MHz over 108 SMs); the GA10x and AD10x parts
# (sm_86, sm_89) run half of it or less, so it bounds them too.
SYNC_FLOP_PER_CLK_PER_SM = {"bf16": 2048, "tf32": 1024, "s8": 4096}
REPLICATE_THREADS = 256
REPLICATE_BLOCKS_PER_SM = 4


def sweeps(device: Device) -> tuple[tuple[str, str], ...]:
    """The (type, level) sweeps ``device`` runs: those of the arch its compute capability builds for."""
    major, minor = (int(part) for part in device.cc.split("."))
    return TENSOR_SWEEPS.get(arch_for_device(major, minor).name, ())


@dataclass(frozen=True)
class TensorSettings:
    """What the tensor sweeps run with. The shared level's fields are the wgmma family's names for them
    (``warpgroups_per_block`` .. ``throughput_sampling``): it measures with that family's ``measure_rate``."""

    stages: int = 6  # tile pairs in flight a TMA ring's block (2 .. MAX_STAGES; a cp.async ring's: SYNC_STAGES)
    ring_blocks_per_sm: int = 1  # TMA ring blocks an SM, at most those that fit
    sync_blocks_per_sm: int = 2  # cp.async ring blocks an SM (four warps each, their MMAs interleaved), at most those
    dram_l2_multiple: float = 8.0  # the DRAM region, in L2 sizes,
    dram_min_bytes: int = 256 * MIB  # and at least this
    l2_fraction: float = 0.5  # the L2 region, of the L2
    l2_ms: float = 1.0  # an L2 launch lasts about this long
    l2_calibration_laps: int = 2  # the L2 calibration launch walks each chunk this often (and warms the L2)
    sampling: Stopping = Stopping(2, 2)  # timed launches a dram or l2 point
    warpgroups_per_block: int = 2  # the shared level's blocks
    blocks_per_sm: int = 1
    calibration_iterations: int = 8
    throughput_ms: float = 1.0
    throughput_sampling: Stopping = Stopping(2, 2)
    min_clock_window_ns: float = clock_window_ns(0.02)  # 50 us: a launch this long reads the SM clock to 2 %
    seed: int = 20261208

    def __post_init__(self) -> None:
        require_counts(self, ("stages", "ring_blocks_per_sm", "sync_blocks_per_sm", "l2_calibration_laps",
                              "warpgroups_per_block", "calibration_iterations"))  # fmt: skip
        if not 2 <= self.stages <= MAX_STAGES:
            raise ValueError(
                f"TensorSettings.stages must be 2 .. {MAX_STAGES}: the kernels' barriers, and a stage "
                "refilled a step after it is read (one stage would wait for a load never issued)"
            )
        if not 0 < self.l2_fraction <= 1 or self.dram_l2_multiple <= 1:
            raise ValueError(
                "TensorSettings: 0 < l2_fraction <= 1 and dram_l2_multiple > 1 (a DRAM region beyond the L2)"
            )


# --------------------------------------------------------------------------- operands and the host's prediction


@dataclass(frozen=True)
class Period:
    """Three tile pairs of one type: A (one for all three, 64 x K) and B (3 x 256 x K) as raw bits and exact values;
    B[2] = -(B[0] + B[1]), so their products with A sum to zero."""

    dtype: str
    a_bits: np.ndarray
    b_bits: np.ndarray

    def products(self) -> np.ndarray:
        """A @ B[p]^T for each tile pair p (3 x 64 x 256), exact in float64."""
        wgmma = TYPES[self.dtype]
        return np.einsum("mk,pnk->pmn", decode(self.a_bits, wgmma), decode(self.b_bits, wgmma))

    def tile_bytes(self) -> np.ndarray:
        """The period as the tensor holds it: per tile pair A then B, each in core-matrix order (uint8)."""
        pairs = [np.concatenate([core_matrix_bytes(self.a_bits.view(np.uint8).reshape(M, -1)),
                                 core_matrix_bytes(self.b_bits[p].view(np.uint8).reshape(RING_N, -1))])
                 for p in range(PERIOD)]  # fmt: skip
        return np.concatenate(pairs)


def period_operands(dtype: str, seed: int) -> Period:
    """A of -2/0/2 and the first two B of -1/0/1, the third B their negated sum (-2 .. 2): small integers every
    type holds exactly, so every product is an exact even integer (an s32 D of -1 would read as the poison of an
    unwritten word), at most 128 in magnitude."""
    wgmma = TYPES[dtype]
    rng = np.random.default_rng(seed)
    a = 2.0 * rng.integers(-1, 2, size=(M, wgmma.k))
    b = rng.integers(-1, 2, size=(2, RING_N, wgmma.k)).astype(np.float64)
    b = np.concatenate([b, -(b[0] + b[1])[None]])
    return Period(dtype, encode(a, wgmma), encode(b, wgmma))


def expected_ring_d(products: np.ndarray, repeats: int, steps: int) -> np.ndarray:
    """D of every block after ``steps`` tile pairs of R = ``repeats`` wgmmas: a block's chunk starts on a period
    (chunks are whole periods), so its step k loads tile pair k mod 3 and D = R x the sum of those products."""
    counts = np.bincount(np.arange(steps) % PERIOD, minlength=PERIOD)
    return repeats * np.tensordot(counts.astype(np.float64), products, axes=1)


def check_ring_d(kernel: str, fragments: np.ndarray, accumulator: str, expected: np.ndarray) -> None:
    """Every block's D is bit-identical to block 0's, and that is ``expected`` exactly (small integers): else
    ProbeFailure naming the first wrong block or element."""
    differing = np.flatnonzero(np.any(fragments != fragments[:1], axis=(1, 2)))
    if len(differing):
        raise ProbeFailure(f"{kernel}: block {int(differing[0])}'s D differs from block 0's "
                           f"({len(differing)} of {len(fragments)} blocks)")  # fmt: skip
    d = d_from_fragments(fragments[0].view(np.float32 if accumulator == "f32" else np.int32), RING_N)
    wrong = np.argwhere(d.astype(np.float64) != expected)
    if len(wrong):
        row, col = (int(v) for v in wrong[0])
        raise ProbeFailure(f"{kernel}: D[{row},{col}] = {d[row, col]!r}, the host predicts {expected[row, col]!r} "
                           f"({len(wrong)} of {d.size} elements wrong)")  # fmt: skip


# --------------------------------------------------------------------------- the region and its walks


def chunk_tiles(nbytes: float, blocks: int) -> int:
    """Tile pairs a block's chunk of a region of ``nbytes`` holds: whole periods, at least one."""
    return max(PERIOD, int(nbytes) // PAIR_BYTES // blocks // PERIOD * PERIOD)


def region_bytes(settings: TensorSettings, device: Device, level: str) -> float:
    if level == "l2":
        return settings.l2_fraction * device.l2_bytes
    return max(float(settings.dram_min_bytes), settings.dram_l2_multiple * device.l2_bytes)


def off_period(steps: int) -> int:
    """``steps`` or one fewer, whichever leaves a partial period (a whole number of periods sums to D = 0)."""
    return steps - 1 if steps % PERIOD == 0 else steps


@dataclass
class Regions:
    """What a type's dram and l2 sweeps share: the region on the device (filled from the type's period, the
    largest level's size), its tensor map, and the L2's flush; filled again for another type. Each fill's GB/s
    (CUDA events) is kept in ``fill_gbps``."""

    dtype: str = ""
    buffer: Any = None
    tiles: int = 0
    tmap: Any = None
    products: np.ndarray = field(default_factory=lambda: np.zeros(0))
    flush: L2Flush = field(default_factory=L2Flush)
    fill_gbps: list[float] = field(default_factory=list)

    def prepare(self, request: Request, settings: TensorSettings, dtype: str, grid: int) -> None:
        """The region holds ``dtype``'s period over every DRAM chunk of ``grid`` blocks (a no-op if it already does)."""
        tiles = grid * chunk_tiles(region_bytes(settings, request.device, "dram"), grid)
        if self.dtype == dtype and self.tiles >= tiles:
            return
        if self.buffer is None or self.tiles < tiles:
            self.buffer, self.tiles, self.tmap = request.launcher.alloc(tiles * PAIR_BYTES), tiles, None
        period = period_operands(dtype, settings.seed)
        self.fill(request, period.tile_bytes())
        self.dtype, self.products = dtype, period.products()

    def tensor_map(self, request: Request) -> Any:
        """The region's tensor map (a TMA ring's; made when first asked for): rows of 128 bytes, a pair a box."""
        if self.tmap is None:
            tiles = TileMap(self.tiles * BOX_ROWS, ROW_BYTES // 2, BOX_ROWS, ROW_BYTES // 2)
            self.tmap = capability(request.launcher, TensorMaps).tensor_map(self.buffer, tiles)
        return self.tmap

    def fill(self, request: Request, source: np.ndarray) -> None:
        """The region tiled from ``source`` on the device (timed by CUDA events), its first period read back."""
        nbytes = self.tiles * PAIR_BYTES
        args = [request.launcher.upload(source), np.uint64(source.nbytes), np.uint64(nbytes), self.buffer]
        grid = request.device.sm_count * REPLICATE_BLOCKS_PER_SM
        ms = request.kernels.time(REPLICATE_KERNEL, args, grid=grid, block=REPLICATE_THREADS)
        written = request.launcher.read(self.buffer, "uint8", source.nbytes)
        wrong = np.flatnonzero(written != source)
        if len(wrong):
            at = int(wrong[0])
            raise ProbeFailure(f"{REPLICATE_KERNEL}: byte {at} of the region holds {int(written[at])}, the period "
                               f"{int(source[at])} ({len(wrong)} of its {source.nbytes} bytes wrong)")  # fmt: skip
        self.fill_gbps.append(nbytes / (max(ms, 1e-6) * 1e6))


FILL_PROBE = "roofline.tensor.fill"


def measured_fill(settings_of: Callable[[Request], TensorSettings], regions_of: Callable[[Request], Regions],
                  request: Request) -> Measured:  # fmt: skip
    """The ``roofline.tensor.fill`` probe as the family steps it: the fill's GB/s, its first period checked."""
    gbps = measure_fill(request, settings_of(request), regions_of(request))
    note = f"the region of tile pairs filled on the device at {gbps:.0f} GB/s"
    return Measured(FILL_PROBE, ProbeOutcome("ok", note), [fact(f"{FILL_PROBE}.bandwidth", [gbps], "GB/s", FILL_PROBE)])


def measure_fill(request: Request, settings: TensorSettings, regions: Regions) -> float:
    """``roofline.tensor.fill``: the region filled for the device's first sweep (again, if it held it), its GB/s."""
    sweep_type = sweeps(request.device)[0][0]
    kernel = ring_kernel(sweep_type, REPEATS[0])
    regions.dtype = ""
    regions.prepare(request, settings, kernel.wgmma.name, ring_grid(request, settings, kernel))
    return regions.fill_gbps[-1]


Ring = RingKernel | SyncKernel


def ring_kernel(sweep_type: str, repeats: int) -> Ring:
    """The kernel of a dram or l2 point: TMA and wgmma (``bf16``), or cp.async and mma.sync (``bf16_sync``)."""
    if sweep_type.endswith(SYNC):
        return SyncKernel(TYPES[sweep_type.removesuffix(SYNC)], repeats)
    return RingKernel(TYPES[sweep_type], repeats)


def ring_grid(request: Request, settings: TensorSettings, kernel: Ring) -> int:
    fit = request.launcher.max_active_blocks(kernel.name, RING_THREADS, ring_shared_bytes(settings, kernel))
    if fit < 1:
        raise ProbeFailure(f"{kernel.name}: no block of {RING_THREADS} threads and its stages fits an SM")
    wanted = settings.sync_blocks_per_sm if isinstance(kernel, SyncKernel) else settings.ring_blocks_per_sm
    return request.device.sm_count * min(fit, wanted)


def ring_shared_bytes(settings: TensorSettings, kernel: Ring) -> int:
    stages = SYNC_STAGES if isinstance(kernel, SyncKernel) else settings.stages
    return stages * PAIR_BYTES + SMEM_ALIGN


def ring_arguments(request: Request, settings: TensorSettings, regions: Regions, kernel: Ring, chunk: int, steps: int,
                   out: Any) -> list[Any]:  # fmt: skip
    """A TMA ring's (tensor map, descriptor layout bits, chunk, steps, stages, out), a cp.async ring's (region,
    chunk, steps, out): its ldmatrix reads the core-matrix order the layout bits describe."""
    if isinstance(kernel, SyncKernel):
        return [regions.buffer, np.uint32(chunk), np.uint32(steps), out]
    tmap = regions.tensor_map(request)
    return [tmap, np.uint64(layout_bits()), np.uint32(chunk), np.uint32(steps), np.uint32(settings.stages), out]


def ring_launch(request: Request, settings: TensorSettings, regions: Regions, kernel: Ring, grid: int,
                chunk: int, steps: int) -> Launched:  # fmt: skip
    """One checked launch of ``kernel``: ``steps`` tile pairs a block over chunks of ``chunk``; its records,
    after every block's D was held to the host's prediction."""
    words = grid * (RECORD_WORDS + RING_THREADS * kernel.registers)
    out = request.outputs.get(-(-words // 2))
    args = ring_arguments(request, settings, regions, kernel, chunk, steps, out)
    values = request.kernels.results(kernel.name, args, out, words, dtype="uint32", grid=grid, block=RING_THREADS,
                                     shared=ring_shared_bytes(settings, kernel))  # fmt: skip
    records, fragments = split_output(values, grid, kernel.registers)
    expected = expected_ring_d(regions.products, kernel.repeats, steps)
    check_ring_d(kernel.name, fragments, kernel.wgmma.accumulator, expected)
    return timed_records(kernel, records)  # type: ignore[arg-type]  # only its name is read


def ring_steps(request: Request, settings: TensorSettings, regions: Regions, kernel: Ring, level: str,
               grid: int) -> tuple[int, int]:  # fmt: skip
    """A block's chunk and steps a launch at ``level``: DRAM, each tile pair of the chunk once; L2, about ``l2_ms``
    of laps over the chunk, sized by a first launch of ``l2_calibration_laps`` laps (which warms the L2), the blocks'
    chunks within the L2 (ProbeFailure where even a period each does not fit: a small L2 with many blocks)."""
    chunk = chunk_tiles(region_bytes(settings, request.device, level), grid)
    if level == "dram":
        chunk = min(chunk, regions.tiles // grid)
        return chunk, off_period(chunk - 1)
    walked, l2 = grid * chunk * PAIR_BYTES, request.device.l2_bytes  # a chunk is at least a period of three pairs
    if walked > l2:
        raise ProbeFailure(f"{kernel.name}: {grid} blocks' chunks of {chunk} tile pairs ({walked} bytes) do not fit "
                           f"the {l2}-byte L2: no L2 level to measure")  # fmt: skip
    laps = off_period(settings.l2_calibration_laps * chunk)
    first = ring_launch(request, settings, regions, kernel, grid, chunk, laps)
    per_step_ns = max(first.span_ns, TIMER_TICK_NS) / laps
    return chunk, off_period(max(settings.stages, round(settings.l2_ms * 1e6 / per_step_ns)))


def ring_point(request: Request, settings: TensorSettings, regions: Regions, kernel: Ring, level: str,
               probe: str) -> Point:  # fmt: skip
    """One dram or l2 point: its launches' flop over their %globaltimer spans, at the clock each ran at."""
    grid = ring_grid(request, settings, kernel)
    regions.prepare(request, settings, kernel.wgmma.name, grid)
    chunk, steps = ring_steps(request, settings, regions, kernel, level, grid)
    tflops: list[float] = []
    mhz: list[float] = []

    def take() -> None:
        if level == "dram":
            regions.flush(request)
        launched = ring_launch(request, settings, regions, kernel, grid, chunk, steps)
        clock = launched.mhz(settings.min_clock_window_ns)
        if clock is None:
            raise ProbeFailure(f"{kernel.name}: a launch of {steps} steps lasted {launched.span_ns / 1e3:.0f} us, too "
                               f"short to read the SM clock ({settings.min_clock_window_ns / 1e3:.0f} us)")  # fmt: skip
        tflops.append(grid * steps * kernel.flop_per_step() / max(launched.span_ns, TIMER_TICK_NS) / 1e3)
        mhz.append(clock)

    sample_until_stable(take, tflops, settings.sampling)
    return Point(probe, kernel.flop_per_step() / PAIR_BYTES, tuple(tflops), tuple(mhz))


def shared_intensity(dtype: str, n: int) -> float:
    """A wgmma's flop over the shared-memory bytes it reads: A (64 x 32 bytes) and B (N x 32 bytes)."""
    return TYPES[dtype].flop(n) / ((M + n) * 32)


def shared_point(request: Request, settings: TensorSettings, dtype: str, n: int, probe: str) -> Point:
    """One shared point: the wgmma family's throughput measurement of the resident-operand kernel at N."""
    rate = measure_rate(dataclasses.replace(request, settings=settings), shared_kernel(dtype, n), "ternary")
    return Point(probe, shared_intensity(dtype, n), tuple(rate.tflops), tuple(rate.mhz))


def probe_name(dtype: str, level: str, knob: int) -> str:
    """``roofline.<type>.<level>.r<R>`` (dram, l2: R wgmmas a tile pair) or ``roofline.<type>.shared.n<N>``."""
    return f"roofline.{dtype}.{level}.{'n' if level == 'shared' else 'r'}{knob}"


def knobs(level: str) -> tuple[int, ...]:
    """A sweep's knob values, lowest intensity first: N at the shared level, R at the others."""
    return SHARED_N if level == "shared" else REPEATS


def measure_tensor_point(settings_of: Callable[[Request], TensorSettings], regions_of: Callable[[Request], Regions],
                         request: Request, probe: str) -> Point:  # fmt: skip
    """The point of ``probe`` (:func:`probe_name`), with the settings and the regions (one per measuring
    process: a type's region carries from its dram points to its l2 ones) the caller keeps."""
    _, dtype, level, knob = probe.split(".")
    settings = settings_of(request)
    if level == "shared":
        return shared_point(request, settings, dtype, int(knob[1:]), probe)
    return ring_point(request, settings, regions_of(request), ring_kernel(dtype, int(knob[1:])), level, probe)


def datasheet_keys(sweep_type: str) -> tuple[str, str]:
    """The datasheet's dense peak of the sweep's type and the clock it assumes (bf16's are in the wgmma family's)."""
    dtype = sweep_type.removesuffix(SYNC)
    return f"{dtype}_dense_tflops", f"{dtype}_dense_clock_mhz"


def tensor_sweeps(settings_of: Callable[[Request], TensorSettings],
                  regions_of: Callable[[Request], Regions]) -> tuple[Sweep, ...]:  # fmt: skip
    """The tensor sweeps as the roofline framework takes them (:class:`~gpuprobe.families.roofline.sweep.Sweep`):
    every type and level of :data:`TENSOR_SWEEPS` (wgmma's on sm_90a, mma.sync's ``<type>_sync`` before), its
    probes lowest intensity first, the per-clock peak the instruction's (:func:`_flop_per_clock`). A point whose probe
    does not target the device's arch is not runnable there, as the framework leaves such points out."""
    measure = functools.partial(measure_tensor_point, settings_of, regions_of)
    found = {sweep for arch_sweeps in TENSOR_SWEEPS.values() for sweep in arch_sweeps}
    order = [*TENSOR_TYPES, *(f"{t}{SYNC}" for t in SYNC_TYPES)]
    return tuple(
        Sweep(dtype, level, tuple(probe_name(dtype, level, k) for k in knobs(level)), measure,
              functools.partial(_flop_per_clock, dtype), datasheet_keys(dtype))
        for dtype, level in sorted(found, key=lambda s: (order.index(s[0]), LEVELS.index(s[1])))
    )  # fmt: skip


def _flop_per_clock(sweep_type: str, request: Request) -> float | None:
    """The dense flop per clock per SM a sweep's instruction can reach at most: Hopper's for wgmma, the A100's for
    mma.sync; none where the device runs no such sweep."""
    if not any(chosen == sweep_type for chosen, _ in sweeps(request.device)):
        return None
    if sweep_type.endswith(SYNC):
        return float(SYNC_FLOP_PER_CLK_PER_SM[sweep_type.removesuffix(SYNC)])
    return float(HOPPER_FLOP_PER_CLK_PER_SM[sweep_type])


def measure_tensor_sweep(request: Request, dtype: str, level: str, settings: TensorSettings | None = None,
                         regions: Regions | None = None) -> list[Point]:  # fmt: skip
    """The ``dtype`` sweep fed from ``level``, one point per intensity, lowest first (unguarded: the framework's
    ``measured_point`` guards each); ``regions`` (made if None) carries the type's region from its dram sweep to
    its l2 sweep. A wrong D raises ProbeFailure."""
    if (dtype, level) not in sweeps(request.device):
        raise ValueError(f"no {dtype} tensor sweep from {level} on a {request.device.name} ({request.device.cc})")
    chosen, kept = settings or TensorSettings(), regions if regions is not None else Regions()
    return [measure_tensor_point(lambda _: chosen, lambda _: kept, request, probe_name(dtype, level, k))
            for k in knobs(level)]  # fmt: skip


# --------------------------------------------------------------------------- the plan


PLAN_EFFICIENCY = 0.5  # of the dense peak a planned point runs at, at worst (compute-bound points)


def _ring_plan(settings: TensorSettings, device: Device, dtype: str, level: str) -> Plan:
    """A ring sweep at most: per R, the L2's calibration, the timed launches (each its flush from DRAM), each
    launch's records and D read back and checked, its GPU time the longer of its bytes at the DRAM's planning
    rate and its flop at half the peak at the nominal clock."""
    sync = dtype.endswith(SYNC)
    blocks = device.sm_count * (settings.sync_blocks_per_sm if sync else settings.ring_blocks_per_sm)
    words = blocks * (RECORD_WORDS + RING_THREADS * RING_N // 2)
    per_clock = SYNC_FLOP_PER_CLK_PER_SM[dtype.removesuffix(SYNC)] if sync else HOPPER_FLOP_PER_CLK_PER_SM[dtype]
    peak = per_clock * device.sm_count * PLAN_EFFICIENCY
    total = Plan(0, 0, 0.0)
    for repeats in REPEATS:
        kernel = ring_kernel(dtype, repeats)
        if level == "dram":
            nbytes = region_bytes(settings, device, level)
            launches = settings.sampling.max_repeats
            launch_s = max(
                dram_s(nbytes, device), cycles_s(nbytes / PAIR_BYTES * kernel.flop_per_step() / peak, device)
            )
            launch_s += dram_s(2 * device.l2_bytes, device)  # the flush
        else:
            launches = 1 + settings.sampling.max_repeats
            launch_s = 2 * settings.l2_ms / 1e3
        total += kernel_runs(launches, launches * launch_s, launches * readback_host_s(4 * words))
    return total


def _shared_plan(settings: TensorSettings, device: Device, dtype: str) -> Plan:
    """The shared sweep at most: per N, the wgmma family's calibration and timed launches, each at most twice
    ``throughput_ms``, two operand uploads, each launch's records and D read back and checked."""
    warpgroups = device.sm_count * settings.blocks_per_sm * settings.warpgroups_per_block
    total = Plan(0, 0, 0.0)
    for n in SHARED_N:
        launches = 1 + settings.throughput_sampling.max_repeats
        words = warpgroups * (RECORD_WORDS + RING_THREADS * n // 2)
        total += kernel_runs(
            launches, launches * 2 * settings.throughput_ms / 1e3, launches * readback_host_s(4 * words)
        )
        total += Plan(0, 2, 0.0)
    return total


def tensor_plan(settings: TensorSettings, device: Device) -> Plan:
    """Every tensor sweep of ``device``'s arch at most, one probe per point (the framework's :class:`Sweep`) and
    ``roofline.tensor.fill``: the ring sweeps, the shared ones, and per type (and once more for the fill probe) its
    period generated, uploaded and replicated over the DRAM region, the first period read back."""
    chosen = sweeps(device)
    total = Plan(1, 0, 0.0) + _fill_plan(settings, device) if chosen else Plan(0, 0, 0.0)
    for dtype, level in chosen:
        sweep = (
            _shared_plan(settings, device, dtype) if level == "shared" else _ring_plan(settings, device, dtype, level)
        )
        total += Plan(len(knobs(level)), 0, 0.0) + sweep
        if level == "dram":
            total += _fill_plan(settings, device)
    return total


def _fill_plan(settings: TensorSettings, device: Device) -> Plan:
    """One fill of the region: the period generated and uploaded, the region written and its first period read."""
    source = PERIOD * PAIR_BYTES
    nbytes = region_bytes(settings, device, "dram")
    return Plan(0, 3, dram_s(2 * nbytes, device) + link_s(source), generate_host_s(source) + readback_host_s(source))
