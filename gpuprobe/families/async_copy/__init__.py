"""The async-copy family: cp.async (sm_80+), bulk copies and distributed shared memory (sm_90+).

Latencies come from serial chases, each step's address the data the previous step brought in:

* ``async.cp_async.latency.{ca,cg}`` — cp.async of a node into shared memory, wait, read it;
* ``async.bulk.latency`` — a bulk copy of a whole node (256 B .. 32 KiB) completing an mbarrier;
* ``async.dsmem.latency`` — loads through the cluster window, from the peer block or the own one.

A sample is a short and a long timed chase continuing the same cycle, and the latency per step is
their difference over the steps between, so every once-per-region cost cancels; every launch checks
that the chase ended on the node the host predicts. The long chases also read the global timer, so
their cycles over nanoseconds give the SM clock the cycles are converted at.

Throughputs come from full grids timed with events, the bytes of one step (a pass, an iteration)
over its time, long minus short (:class:`~gpuprobe.families.differencing.Difference` with the EVENTS
timer: launch costs cancel, a difference under 100 event ticks is widened); every launch, timed ones
included, adds up the words it moved and the host checks the sums:

* ``async.cp_async.bandwidth`` / ``async.plain_copy.bandwidth`` — global to shared by cp.async and
  through registers (ld.global.cg + st.shared), from a source of 4 L2 sizes (DRAM) and from one that
  fits half the L2. The two kernels are the same but for the path the bytes take, so their ratio is
  what cp.async saves: the registers, the issue slots of the loads and stores, and the wait for the
  loads before the stores. Each warp's slots lie four rows of 512 bytes, lane l's slot k at row k,
  chunk l: every 16-byte shared access of a warp covers 512 contiguous bytes, 4 wavefronts and no
  bank conflict, so the banks (64 B/clk/SM for this copy) bound neither stream below what the L2 and
  the DRAM deliver. (Slots at thread x 64 bytes took 16 wavefronts an access: 16 B/clk/SM, 4.2 TB/s on
  an H200, which the H200 run measured in place of its L2 and DRAM.)
* ``async.bulk.bandwidth`` — bulk copies vs size and copies in flight per block, from DRAM;
* ``async.dsmem.bandwidth`` — loads from the peer block's shared memory and from the own block's.

The copy streams record, launch by launch (the untimed first included), the bytes each says it moved
(series ``launch``: passes, useful, DRAM and L2 read bytes, grid), for a hardware counter to witness
(``gpuprobe witness``: Nsight Compute's DRAM and L2 bytes, and the bank conflicts the slot layout rules out).

Invariants: a peer's shared memory is farther than one's own, a cp.async served by L1 is quicker than
one served by L2, and no stream reading the L2 or the DRAM outruns the same run's read of that level
(``bandwidth.l2_read.v16``, ``bandwidth.dram_read.v16``) beyond their CIs (:func:`within_source`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device, Fact, ProbeOutcome, Results
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.chase import OUT_WORDS, Chase, latencies_plan, memory_chase, node_of, random_cycle
from gpuprobe.families.differencing import Lengths, event_gbps
from gpuprobe.families.measuring import fact, require_counts
from gpuprobe.families.planning import (
    L2_STEP_CYCLES,
    NO_WORK,
    combined,
    compare_host_s,
    cycles_s,
    dram_s,
    generate_host_s,
    kernel_runs,
    link_s,
    probe,
    readback_host_s,
    resident_blocks,
    sum_host_s,
)
from gpuprobe.families.sampling import ONE_SAMPLE, Stopping
from gpuprobe.families.stepping import probe_steps
from gpuprobe.families.streams import check_sums, chunk_sums, pattern, stream_sums
from gpuprobe.judge.invariants import Check
from gpuprobe.kernels.registry import unroll_of
from gpuprobe.output.plots import new_figure, png_bytes
from gpuprobe.output.sections import Plot, Section
from gpuprobe.runner.checked import POISON_BYTE, unwritten

PROBES = [
    "async_copy.cp_async.latency.ca",
    "async_copy.cp_async.latency.cg",
    "async_copy.cp_async.bandwidth",
    "async_copy.plain_copy.bandwidth",
    "async_copy.bulk.latency",
    "async_copy.bulk.bandwidth",
    "async_copy.dsmem.latency",
    "async_copy.dsmem.bandwidth",
]
MIB = 1 << 20
STREAM_CHUNK_BYTES = 64  # bytes per thread per iteration of the streaming kernels: four 16-byte chunks
WARP = 32  # the global->shared streams lay their slots out per warp: blocks of whole warps
BULK_STATIC_SHARED = 64  # the bulk kernels' static shared memory: 8 mbarriers
BULK_STAGING_KNOWN_TO_FIT = 48 * 1024  # a block's dynamic shared memory without opting in, when the device says nothing


@dataclass(frozen=True)
class Settings:
    chase_nodes: int = 64  # a small, warmed cycle: the copies hit the cache the operator names
    chase_stride: int = 128
    short_iterations: int = 32  # timed iterations of the cp.async and DSM chases (16 and 32 steps each):
    long_iterations: int = 480  # a long chase of ~400k cycles or more reads the SM clock to 1 %
    bulk_sizes: tuple[int, ...] = (256, 1024, 4096, 16384, 32768)  # as ptx/async_copy/async_copy_sm90.toml's facts
    bulk_iterations: tuple[int, int] = (64, 1000)  # bulk chase steps, short and long (one per iteration)
    dsm_nodes: int = 256
    dsm_stride: int = 32
    dsm_threads: int = 128
    stream_threads: int = 256
    dram_l2_multiple: float = 4.0  # the DRAM source, in L2 sizes,
    dram_min_bytes: int = 64 * MIB  # and at least this
    dram_passes: tuple[int, int] = (1, 4)  # short and long runs over the DRAM source
    l2_passes: tuple[int, int] = (16, 160)  # and over the L2-sized one
    bulk_points: tuple[tuple[int, int], ...] = ((1024, 8), (4096, 4), (4096, 8), (16384, 2), (16384, 4), (32768, 4))
    bulk_threads: int = 128
    dsm_stream_threads: int = 512
    dsm_iterations: tuple[int, int] = (64, 320)
    sampling: Stopping = Stopping(3, 7, 0.01, 0.3)  # each measurement's samples
    seed: int = 20240902

    def __post_init__(self) -> None:
        counts = ("chase_nodes", "short_iterations", "dsm_nodes", "stream_threads", "bulk_threads",
                  "dsm_stream_threads")  # fmt: skip
        require_counts(self, counts)
        pairs = {"short/long_iterations": (self.short_iterations, self.long_iterations),
                 "bulk_iterations": tuple(self.bulk_iterations), "dram_passes": tuple(self.dram_passes),
                 "l2_passes": tuple(self.l2_passes), "dsm_iterations": tuple(self.dsm_iterations)}  # fmt: skip
        for name, (short, long) in pairs.items():
            if not 1 <= short < long:
                raise ValueError(f"Settings.{name}: need 1 <= short < long, got {short}, {long}")
        for size, stages in self.bulk_points:
            if size % 16 or not 1 <= stages <= 8:
                raise ValueError(f"Settings.bulk_points: ({size}, {stages}) needs a multiple of 16 bytes, 1..8 stages")
        if any(size % 16 or size < 16 for size in self.bulk_sizes):
            raise ValueError("Settings.bulk_sizes: bulk copies move multiples of 16 bytes")
        if self.dsm_stride % 8 or self.chase_stride % 16:
            raise ValueError("Settings: strides of whole 8- (dsm) and 16-byte words")
        if self.stream_threads % WARP:
            raise ValueError(f"Settings.stream_threads: whole warps ({WARP} threads), the slots are laid out per warp")


def neighbour_sums(sums: np.ndarray) -> np.ndarray:
    """What each thread of the global->shared stream reports: its warp neighbour's (lane ^ 1) sum."""
    return sums[np.arange(len(sums)) ^ 1]


def bulk_block_sums(copy_sums: np.ndarray, blocks: int, steps: int) -> np.ndarray:
    """Per block of the bulk stream, the sum of its chunks: block b takes (b + k x blocks) mod chunks."""
    index = (np.arange(blocks)[:, None] + np.arange(steps)[None, :] * blocks) % len(copy_sums)
    return copy_sums[index].sum(axis=1, dtype=np.uint64)


def dsm_thread_sums(threads: int, rank_read: int) -> np.ndarray:
    """Per thread of the DSM stream, one iteration's sum of the four chunks it reads of block ``rank_read``."""
    return stream_sums(chunk_sums(pattern(threads * 16, rank_read)), threads)


def dram_source_bytes(settings: Settings, device: Device) -> int:
    """The DRAM streams' source: ``dram_l2_multiple`` L2 sizes, at least ``dram_min_bytes``."""
    return max(settings.dram_min_bytes, int(settings.dram_l2_multiple * device.l2_bytes))


def copy_shape(settings: Settings, device: Device, grid: int, level: str) -> tuple[int, int, tuple[int, int]]:
    """The global->shared stream from ``level`` ("dram" or "l2") on a full ``grid``: the grid it runs
    (cut, for the L2, so its source fits half the L2), iterations per thread, (short, long) passes."""
    s, shared = settings, settings.stream_threads * STREAM_CHUNK_BYTES
    if level == "dram":
        iterations = max(1, round(dram_source_bytes(s, device) / (grid * shared)))
        return grid, iterations, s.dram_passes
    return max(1, min(grid, device.l2_bytes // 2 // shared)), 1, s.l2_passes  # one iteration per thread


def bulk_shape(nbytes: int, size: int, stages: int, grid: int) -> tuple[int, int]:
    """The bulk stream's copies in its source of about ``nbytes``, and steps per block of its short run
    (the long run, twice as many, is one pass)."""
    chunks = nbytes // size
    return chunks, max(2 * stages, chunks // grid // 2)


@dataclass
class L2Flush:
    """Flushing the L2: a write through a scratch buffer of twice its size (allocated at the first flush)
    evicts what it held."""

    scratch: Any = None

    def __call__(self, request: Request) -> None:
        if self.scratch is None:
            self.scratch = request.launcher.alloc(2 * request.device.l2_bytes)
        request.launcher.fill(self.scratch, 0)


@dataclass
class Sources:
    """What the family's streams share across probes: the pattern they copy (one source serves every stream,
    a smaller pattern being a larger one's first words) with its 16-byte chunks' sums, and the L2's flush."""

    buffer: Any = None
    chunks: np.ndarray = field(default_factory=lambda: np.zeros(0, dtype=np.uint64))
    flush: L2Flush = field(default_factory=L2Flush)

    def source(self, request: Request, nbytes: int) -> tuple[Any, np.ndarray]:
        """A device buffer starting with ``nbytes`` of the pattern, and the sums of those bytes' 16-byte
        chunks: made again only for a stream larger than any before."""
        if len(self.chunks) * 16 < nbytes:
            words = pattern(nbytes // 4)
            self.buffer, self.chunks = request.launcher.upload(words), chunk_sums(words)
        return self.buffer, self.chunks[: nbytes // 16]


def full_grid(request: Request, kernel: str, threads: int, shared: int) -> int:
    """Blocks filling every SM with as many blocks of ``kernel`` as fit."""
    per_sm = request.launcher.max_active_blocks(kernel, threads, shared)
    if per_sm < 1:
        raise ProbeFailure(f"{kernel}: no block of {threads} threads with {shared} bytes of shared memory fits an SM")
    return request.device.sm_count * per_sm


# ---- chases ----------------------------------------------------------------------------------


def _global_chase(request: Request, kernel: str, stride: int, extra: list[object], shared: int) -> Chase:
    """A chase through a fresh random cycle in global memory, one node every ``stride`` bytes."""
    s = request.settings
    cycle = random_cycle(s.chase_nodes, s.seed + stride)
    buffer = request.launcher.alloc(s.chase_nodes * stride)
    request.launcher.write_cycle(buffer, cycle.successor, stride)
    out = request.outputs.get(OUT_WORDS)
    return memory_chase(request.kernels, kernel, buffer, cycle, stride, unroll_of(kernel), out, extra, shared)


def measure_cp_async_latency(request: Request, sources: Sources, probe: str) -> Measured:
    cache = probe.rsplit(".", 1)[1]
    s = request.settings
    chase = _global_chase(request, f"gp_ac_cp_async_chase_{cache}", s.chase_stride, [], 0)
    samples = chase.latencies(s.short_iterations, s.long_iterations, s.sampling)
    result = fact(f"async.cp_async.{cache}.latency", samples, "cycle", probe, chase.mhz)
    return Measured(probe, ProbeOutcome("ok", _clock_note(chase.mhz)), [result])


def measure_bulk_latency(request: Request, sources: Sources, probe: str) -> Measured:
    s = request.settings
    facts: list[Fact] = []
    mhz: list[float] = []
    for size in sorted(s.bulk_sizes):
        chase = _global_chase(request, "gp_ac_bulk_chase", size, [np.uint32(size)], size)
        samples = chase.latencies(*s.bulk_iterations, s.sampling)
        mhz += chase.clock_mhz
        facts.append(fact(f"async.bulk.latency.{size}", samples, "cycle", probe, chase.mhz))
    series = {
        "latency": {"size_bytes": [float(x) for x in sorted(s.bulk_sizes)], "latency_cycles": [f.value for f in facts]}
    }
    clock = float(np.median(mhz)) if mhz else None
    return Measured(probe, ProbeOutcome("ok", _clock_note(clock), series), facts)


def _dsm_chase(request: Request, target: int) -> Chase:
    """A chase through a fresh random cycle in the shared memory of cluster rank ``target``."""
    s, kernel = request.settings, "gp_ac_dsm_chase"
    cycle = random_cycle(s.dsm_nodes, s.seed + target)
    successors = request.launcher.upload((cycle.successor * s.dsm_stride).astype(np.uint32))
    out, shared = request.outputs.get(OUT_WORDS), s.dsm_nodes * s.dsm_stride

    def launch(start: int, warm: int, iterations: int) -> np.ndarray:
        fixed = [successors, np.uint32(s.dsm_nodes), np.uint32(s.dsm_stride), np.uint32(start), np.uint32(target)]
        args = [*fixed, np.uint32(warm), np.uint32(iterations), out]
        return request.kernels.results(kernel, args, out, OUT_WORDS, grid=2, block=s.dsm_threads, shared=shared)

    def end_node(end: int) -> int:
        return node_of(end, s.dsm_stride, s.dsm_nodes, kernel)

    return Chase(cycle, launch, end_node, unroll_of(kernel), kernel)


def measure_dsm_latency(request: Request, sources: Sources, probe: str) -> Measured:
    s = request.settings
    facts = []
    for target, where in ((1, "peer"), (0, "own")):
        chase = _dsm_chase(request, target)
        samples = chase.latencies(s.short_iterations, s.long_iterations, s.sampling)
        facts.append(fact(f"dsmem.latency.{where}", samples, "cycle", probe, chase.mhz))
    return Measured(probe, ProbeOutcome("ok", f"peer {facts[0].value:.1f}, own {facts[1].value:.1f} cycles"), facts)


def _clock_note(mhz: float | None) -> str:
    return f"SM clock {mhz:.0f} MHz over the long chases" if mhz else "chases too short to read the SM clock"


# ---- streams ---------------------------------------------------------------------------------


@dataclass
class _Stream:
    """One streaming kernel at a fixed shape: ``args(n)`` runs it for n steps (passes over its source, steps
    per block, iterations), each moving ``step_bytes``; ``verify(values, n)`` holds the ``words`` 64-bit
    results it leaves in ``out`` to what n steps must give (ProbeFailure if not); ``flush()`` runs before
    every launch (for a DRAM source: nothing an earlier launch left in L2 is read from it). ``claim(n)``, where
    given, is what a launch of n steps says it moved (:func:`copy_claim`), kept per launch in ``launched``."""

    kernel: str
    args: Callable[[int], list[object]]
    out: Any
    words: int
    grid: int
    block: int
    shared: int
    step_bytes: float
    verify: Callable[[np.ndarray, int], None]
    flush: Callable[[], None] = lambda: None
    claim: Callable[[int], dict[str, float]] | None = None
    launched: list[dict[str, float]] = field(default_factory=list)


def _each_step_adds(kernel: str, once: np.ndarray) -> Callable[[np.ndarray, int], None]:
    """A stream's check when each step adds the same to every thread's sum: ``once`` times the steps."""
    return lambda values, steps: check_sums(kernel, values, once * np.uint64(steps), "thread")


def _stream_launch(request: Request, stream: _Stream, steps: int) -> float:
    """One checked launch of ``stream`` for ``steps``: its output poisoned, the flush, the launch timed with
    events, every result read back and verified. Its event time, ms."""
    request.launcher.fill(stream.out, POISON_BYTE)
    stream.flush()
    ms = request.kernels.time(stream.kernel, stream.args(steps), grid=stream.grid, block=stream.block,
                          shared=stream.shared)  # fmt: skip
    if stream.claim is not None:
        stream.launched.append(stream.claim(steps))
    values = request.launcher.read(stream.out, "uint64", stream.words)
    if unwritten(values):
        raise ProbeFailure(f"{stream.kernel} did not write all of its {stream.words} results")
    stream.verify(values, steps)
    return ms


def _stream_rates(request: Request, stream: _Stream, lengths: tuple[int, int]) -> list[float]:
    """Samples of ``stream``'s rate, GB/s: a step's bytes over its time, the difference of a long and a short
    launch (:class:`Difference` on CUDA events: a first launch untimed, a difference under 100 event ticks
    widened), so launch costs cancel."""
    launch = functools.partial(_stream_launch, request, stream)
    return event_gbps(launch, Lengths(*lengths, 1), stream.step_bytes, stream.kernel, request.settings.sampling)[0]


def copy_claim(level: str, nbytes: int, grid: int, threads: int) -> Callable[[int], dict[str, float]]:
    """What a launch of the global->shared stream from ``level`` says it moved in ``passes`` passes over its
    ``nbytes`` source, as a hardware counter can witness it (``gpuprobe.measure.witness``, the ``launch`` series):
    every pass reads the whole source through the L2, and from DRAM too where the source is the DRAM one
    (four L2 sizes, flushed before each launch); 0 claims nothing (a source in L2 is read from DRAM once, if
    at all, and no figure rests on that)."""

    def claim(passes: int) -> dict[str, float]:
        moved = float(passes * nbytes)
        return {"passes": float(passes), "useful_bytes": moved, "dram_read_bytes": moved if level == "dram" else 0.0,
                "l2_read_bytes": moved, "blocks": float(grid), "threads": float(threads)}  # fmt: skip

    return claim


def _copy_level(
    request: Request, sources: Sources, kernel: str, level: str
) -> tuple[list[float], float, list[dict[str, float]]]:
    """Samples of the global->shared stream's rate from DRAM or from L2, the source's size, and what each of
    its launches (the untimed first included) says it moved (:func:`copy_claim`)."""
    threads = request.settings.stream_threads
    shared = threads * STREAM_CHUNK_BYTES
    full = full_grid(request, kernel, threads, shared)
    grid, iterations, passes = copy_shape(request.settings, request.device, full, level)
    total = grid * threads
    nbytes = iterations * total * STREAM_CHUNK_BYTES
    source, chunks = sources.source(request, nbytes)
    out = request.outputs.get(total)
    flush = functools.partial(sources.flush, request) if level == "dram" else (lambda: None)
    verify = _each_step_adds(kernel, neighbour_sums(stream_sums(chunks, total)))

    def args(passes: int) -> list[object]:
        return [source, np.uint32(iterations), np.uint32(passes), out]

    claim = copy_claim(level, nbytes, grid, threads)
    stream = _Stream(kernel, args, out, total, grid, threads, shared, nbytes, verify, flush, claim)
    return _stream_rates(request, stream, passes), float(nbytes), stream.launched


def measure_copy_bandwidth(request: Request, sources: Sources, probe: str) -> Measured:
    name = probe.split(".")[1]  # cp_async or plain_copy
    kernel = "gp_ac_copy_cp_async" if name == "cp_async" else "gp_ac_copy_plain"
    dram, dram_bytes, dram_launches = _copy_level(request, sources, kernel, "dram")
    l2, l2_bytes, l2_launches = _copy_level(request, sources, kernel, "l2")
    facts = [
        fact(f"async.{name}.bandwidth", dram, "GB/s", probe),
        fact(f"async.{name}.l2_bandwidth", l2, "GB/s", probe),
    ]
    note = f"sources {dram_bytes / MIB:.0f} MiB (DRAM) and {l2_bytes / MIB:.1f} MiB (L2)"
    launched = dram_launches + l2_launches
    series = {"launch": {column: [claim[column] for claim in launched] for column in launched[0]}}
    return Measured(probe, ProbeOutcome("ok", note, series), facts)


def _bulk_point(request: Request, sources: Sources, size: int, stages: int, nbytes: int) -> list[float]:
    """Samples of the bulk stream's rate with copies of ``size`` bytes, ``stages`` in flight per block,
    from a source of about ``nbytes``; every launch's per-block sums checked."""
    kernel, threads = "gp_ac_bulk_stream", request.settings.bulk_threads
    grid = full_grid(request, kernel, threads, size * stages)
    chunks, per_block = bulk_shape(nbytes, size, stages, grid)
    source, sums16 = sources.source(request, chunks * size)
    out = request.outputs.get(grid * threads)
    copy_sums = sums16.reshape(chunks, -1).sum(axis=1, dtype=np.uint64)  # each bulk copy's words

    def args(steps: int) -> list[object]:
        return [source, np.uint32(size), np.uint32(stages), np.uint32(chunks), np.uint32(steps), out]

    def verify(values: np.ndarray, steps: int) -> None:
        block_sums = values.reshape(grid, threads).sum(axis=1, dtype=np.uint64)
        check_sums(kernel, block_sums, bulk_block_sums(copy_sums, grid, steps), "block")

    flush = functools.partial(sources.flush, request)  # the source is several L2 sizes: read from DRAM
    stream = _Stream(kernel, args, out, grid * threads, grid, threads, size * stages, grid * size, verify, flush)
    return _stream_rates(request, stream, (per_block, 2 * per_block))


def fitting_bulk_points(settings: Settings, device: Device) -> list[tuple[int, int]]:
    """The bulk points whose staging buffers fit the shared memory one block may use."""
    room = device.shared_per_block_optin_bytes or BULK_STAGING_KNOWN_TO_FIT
    return [(size, stages) for size, stages in settings.bulk_points if size * stages + BULK_STATIC_SHARED <= room]


def measure_bulk_bandwidth(request: Request, sources: Sources, probe: str) -> Measured:
    s, device = request.settings, request.device
    nbytes = dram_source_bytes(s, device)
    room = device.shared_per_block_optin_bytes or BULK_STAGING_KNOWN_TO_FIT
    fitting = fitting_bulk_points(s, device)
    if not fitting:
        raise ProbeFailure(f"no bulk point's buffers fit the {room} bytes of shared memory a block may use")
    points = [(size, stages, _bulk_point(request, sources, size, stages, nbytes)) for size, stages in fitting]
    medians = [float(np.median(samples)) for _, _, samples in points]
    top = int(np.argmax(medians))
    series = {
        "size_bytes": [float(size) for size, _, _ in points],
        "stages": [float(stages) for _, stages, _ in points],
        "gbps": medians,
    }
    skipped = len(s.bulk_points) - len(fitting)
    note = f"best at {points[top][0]} B x {points[top][1]} in flight per block" + (
        f"; {skipped} point(s) need more shared memory than a block may use ({room} bytes)" if skipped else ""
    )
    result = fact("async.bulk.bandwidth", points[top][2], "GB/s", probe)
    return Measured(probe, ProbeOutcome("ok", note, {"sweep": series}), [result])


def measure_dsm_bandwidth(request: Request, sources: Sources, probe: str) -> Measured:
    s, kernel = request.settings, "gp_ac_dsm_stream"
    threads = s.dsm_stream_threads
    shared = threads * STREAM_CHUNK_BYTES
    grid = full_grid(request, kernel, threads, shared) // 2 * 2  # whole clusters of two
    if grid < 2:
        raise ProbeFailure(f"{kernel}: not even one cluster of two blocks fits")
    out = request.outputs.get(grid * threads)
    facts = []
    for peer, where in ((1, "peer"), (0, "own")):
        per_rank = [dsm_thread_sums(threads, rank ^ peer) for rank in (0, 1)]
        verify = _each_step_adds(kernel, np.concatenate([per_rank[b % 2] for b in range(grid)]))

        def args(iterations: int, peer: int = peer) -> list[object]:
            return [np.uint32(peer), np.uint32(iterations), out]

        stream = _Stream(kernel, args, out, grid * threads, grid, threads, shared, grid * shared, verify)
        facts.append(fact(f"dsmem.bandwidth.{where}", _stream_rates(request, stream, s.dsm_iterations), "GB/s", probe))
    return Measured(probe, ProbeOutcome("ok", f"{grid // 2} clusters of two, {threads} threads per block"), facts)


STEPS: dict[str, Callable[[Request, Sources, str], Measured]] = {
    "async_copy.cp_async.latency.ca": measure_cp_async_latency,
    "async_copy.cp_async.latency.cg": measure_cp_async_latency,
    "async_copy.cp_async.bandwidth": measure_copy_bandwidth,
    "async_copy.plain_copy.bandwidth": measure_copy_bandwidth,
    "async_copy.bulk.latency": measure_bulk_latency,
    "async_copy.bulk.bandwidth": measure_bulk_bandwidth,
    "async_copy.dsmem.latency": measure_dsm_latency,
    "async_copy.dsmem.bandwidth": measure_dsm_bandwidth,
}

# ---- the time plan ---------------------------------------------------------------------------

BULK_STEP_CYCLES = 3000.0  # one bulk copy of up to 32 KiB completing its mbarrier, at most (500-1000 measured)
DSM_BYTES_PER_CLOCK = 8.0  # per SM, the least the SM-to-SM network moves (3.3 TB/s published on H800: ~14)


def _checked_launches(lengths: tuple[int, int], repeats: int, step_s: float, out_words: int,
                      flush: Plan = NO_WORK) -> Plan:  # fmt: skip
    """A stream's launches at its most repeats: the untimed first (short) and each sample's short and long,
    ``step_s`` GPU seconds a step, each launch's ``out_words`` results read back and checked, ``flush``
    before each."""
    short, long = lengths
    launches = 1 + 2 * repeats
    work = kernel_runs(launches, (short + repeats * (short + long)) * step_s, launches * readback_host_s(8 * out_words))
    return work + combined([flush] * launches)


def _streams(settings: Settings, device: Device) -> tuple[Plan, list[int]]:
    """The bandwidth probes at their most repeats, and the source bytes each asks for, in measuring order."""
    s, r, l2 = settings, settings.sampling.max_repeats, device.l2_bytes
    flush = Plan(0, 1, dram_s(2 * l2, device))  # a write through twice the L2
    shared = s.stream_threads * STREAM_CHUNK_BYTES
    full = device.sm_count * resident_blocks(device, s.stream_threads, shared)
    copies, sizes = Plan(0, 0, dram_s(2 * l2, device)), []  # the flush scratch, zeroed
    for level in ("dram", "l2"):
        grid, iterations, passes = copy_shape(s, device, full, level)
        nbytes = iterations * grid * shared
        sizes.append(nbytes)
        copies += _checked_launches(passes, r, dram_s(nbytes, device), grid * s.stream_threads,
                                    flush if level == "dram" else NO_WORK)  # fmt: skip
    source = dram_source_bytes(s, device)
    bulk = []
    for size, stages in fitting_bulk_points(s, device):
        grid = device.sm_count * resident_blocks(device, s.bulk_threads, size * stages + BULK_STATIC_SHARED)
        chunks, per_block = bulk_shape(source, size, stages, grid)
        sizes.append(chunks * size)
        copy_sums = Plan(0, 0, 0.0, compare_host_s(chunks * size // 2))  # one pass over the source's chunk sums
        steps = (per_block, 2 * per_block)
        bulk.append(copy_sums + _checked_launches(steps, r, dram_s(grid * size, device), grid * s.bulk_threads, flush))
    dsm_shared = s.dsm_stream_threads * STREAM_CHUNK_BYTES
    blocks = device.sm_count * resident_blocks(device, s.dsm_stream_threads, dsm_shared) // 2 * 2
    per_iteration = blocks * s.dsm_stream_threads * STREAM_CHUNK_BYTES
    iteration_s = cycles_s(per_iteration / (device.sm_count * DSM_BYTES_PER_CLOCK), device)
    one_way = _checked_launches(s.dsm_iterations, r, iteration_s, blocks * s.dsm_stream_threads)
    streams = [probe(copies), probe(copies), probe(*bulk), probe(one_way, one_way)]  # cp.async, plain, bulk, DSM
    return combined(streams), sizes


def plan(settings: Settings, device: Device) -> Plan:
    """Every probe at its most repeats (see :mod:`gpuprobe.families.planning`): the chases step by step,
    the streams by the bytes they move and their L2 flushes, the one source generated, summed and uploaded
    (again only for a stream larger than any before). Probes the arch lacks are counted too (an upper bound)."""
    s, r = settings, settings.sampling.max_repeats
    l2_step = cycles_s(L2_STEP_CYCLES, device)
    cp_async_steps = unroll_of("gp_ac_cp_async_chase_ca")
    cp_async = latencies_plan(s.chase_nodes, cp_async_steps, s.short_iterations, s.long_iterations, r, l2_step)
    bulk_step = cycles_s(BULK_STEP_CYCLES, device)
    bulk_steps = unroll_of("gp_ac_bulk_chase")
    bulk = [latencies_plan(s.chase_nodes, bulk_steps, *s.bulk_iterations, r, bulk_step) for _ in s.bulk_sizes]
    dsm_steps = unroll_of("gp_ac_dsm_chase")
    dsm = latencies_plan(s.dsm_nodes, dsm_steps, s.short_iterations, s.long_iterations, r, l2_step)
    streams, asked = _streams(s, device)
    made = sum(n for k, n in enumerate(asked) if n > max(asked[:k], default=0))  # as Sources.source makes them
    sources = Plan(0, 0, link_s(made, pinned=False), generate_host_s(made) + sum_host_s(made))
    chases = [probe(cp_async), probe(cp_async), probe(*bulk), probe(dsm, dsm)]
    return sum(chases, streams + sources)


# A first contact: the cp.async chase through L1 and the bulk-copy chase at one size (each launch's end
# node checked), one sample each.
SMOKE = Smoke(
    probes=("async_copy.cp_async.latency.ca", "async_copy.bulk.latency"),
    settings=Settings(
        short_iterations=1,
        long_iterations=2,
        bulk_sizes=(256,),
        bulk_iterations=(1, 2),
        dram_min_bytes=1 << 20,
        dram_l2_multiple=0.0,  # the stream probes at their smallest: 1 MiB sources, one pass over them
        dram_passes=(1, 2),
        l2_passes=(1, 2),
        bulk_points=((1024, 1),),
        dsm_iterations=(1, 2),
        sampling=ONE_SAMPLE,
    ),
)


def _ordered(facts: dict[str, Fact], low: str, high: str, name: str) -> list[Check]:
    a, b = facts.get(low), facts.get(high)
    if a is None or b is None or a.value is None or b.value is None:
        return []
    detail = f"{low} {a.value:.1f} {a.unit} < {high} {b.value:.1f} {b.unit}"
    return [Check(name, a.value < b.value, detail, (low, high))]


def _invariants(facts: dict[str, Fact], device: Device) -> list[Check]:
    """A peer's shared memory is farther than one's own; a cp.async served by L1 is quicker than one by L2."""
    return [
        *_ordered(facts, "dsmem.latency.own", "dsmem.latency.peer", "async.dsmem_peer_slower_than_own"),
        *_ordered(facts, "async.cp_async.ca.latency", "async.cp_async.cg.latency", "async.cp_async_l1_before_l2"),
    ]


# What a stream reading each level cannot beat: DRAM's pin rate (physics), and the run's own 16-byte L2 read
# with headroom for what that kernel leaves of the L2 (it reads 8.8 TB/s on an H200, where gpu-benches'
# gpu-l2-cache/h200.txt reads 9.7-9.9 at 10-40 MB: 10-13 % more), so an honest copy or TMA load is never failed.
SOURCE_CEILINGS = {"dram": ("bandwidth.dram_theoretical", 1.0), "l2": ("bandwidth.l2_read.v16", 1.15)}
# This family's rates and the level each reads: the copies from a source of 4 L2 sizes and the bulk copies'
# best point read DRAM, the copies from half the L2 read the L2.
SOURCED_RATES = (
    ("async.cp_async.bandwidth", "dram"), ("async.plain_copy.bandwidth", "dram"), ("async.bulk.bandwidth", "dram"),
    ("async.cp_async.l2_bandwidth", "l2"), ("async.plain_copy.l2_bandwidth", "l2"),
)  # fmt: skip


def within_source(facts: dict[str, Fact], rates: Iterable[tuple[str, str]]) -> list[Check]:
    """Each measured (rate, level) of ``rates`` is not above what its level can deliver (``SOURCE_CEILINGS``)
    beyond their CIs: a copy cannot outrun what it reads. Against DRAM's pin rate it is physics; against the
    run's L2 read (another family's kernel, whose settings a smoke run changes apart) a consistency check,
    which marks both figures when it fails."""
    checks = []
    for rate_id, level in rates:
        ceiling_id, headroom = SOURCE_CEILINGS[level]
        rate, ceiling = facts.get(rate_id), facts.get(ceiling_id)
        if rate is None or ceiling is None or rate.value is None or ceiling.value is None:
            continue
        low = rate.ci[0] if rate.ci else rate.value
        high = headroom * (ceiling.ci[1] if ceiling.ci else ceiling.value)
        ok = rate.unit == ceiling.unit and low <= high
        relation = "≤" if ok else ">"
        detail = f"{rate_id} = {rate.value:g} (CI from {low:g}) {relation} {headroom:g} x {ceiling_id}: {high:g}"
        named = (rate_id,) if level == "dram" else (rate_id, ceiling_id)
        name = f"{rate_id}_within_{level}_read"
        checks.append(Check(name, ok, f"{detail} {rate.unit}", named, physics=level == "dram"))
    return checks


def source_invariants(facts: dict[str, Fact], device: Device) -> list[Check]:
    """No global->shared or bulk stream outruns the L2 or DRAM read it draws from (``SOURCED_RATES``)."""
    return within_source(facts, SOURCED_RATES)


INVARIANTS = (_invariants, source_invariants)


def bulk_png(results: Results, dpi: int) -> bytes | None:
    """Bulk copies vs their size: one copy's latency (left), and the stream's rate per copies in flight
    per block (right); None when neither probe left a series."""
    latency = results.probes.get("async_copy.bulk.latency")
    sweep = results.probes.get("async_copy.bulk.bandwidth")
    latency_series = latency.series.get("latency") if latency else None
    sweep_series = sweep.series.get("sweep") if sweep else None
    if not latency_series and not sweep_series:
        return None
    figure = new_figure((10, 3.6), dpi)
    left, right = figure.subplots(1, 2)
    if latency_series:
        left.plot(latency_series["size_bytes"], latency_series["latency_cycles"], "o-")
    left.set(xscale="log", xlabel="bytes per copy", ylabel="cycles", title="one bulk copy, issue to data usable")
    if sweep_series:
        for stages in sorted(set(sweep_series["stages"])):
            rows = zip(sweep_series["size_bytes"], sweep_series["stages"], sweep_series["gbps"], strict=True)
            points = [(x, y) for x, k, y in rows if k == stages]
            right.plot(*zip(*points, strict=True), "o-", label=f"{stages:.0f} in flight per block")
        right.legend(fontsize="small")
    right.set(xscale="log", xlabel="bytes per copy", ylabel="GB/s", title="bulk copies from DRAM, every SM")
    figure.tight_layout()
    return png_bytes(figure)


SECTIONS = (
    Section(
        "Asynchronous copies and distributed shared memory",
        ("async.", "dsmem."),
        ("async_copy.",),
        plot=Plot("bulk_copies", "bulk_copies.png", "bulk copy latency and rate vs size", bulk_png),
        blurb="cp.async (sm_80+) against the plain path through registers, into shared-memory slots free of bank "
        "conflicts, so both read at what the L2 or the DRAM delivers (compare bandwidth.l2_read.v16 and "
        "bandwidth.dram_read.v16, which no copy may pass); bulk copies completing an mbarrier and loads from a peer "
        "block's shared memory in a cluster of two (sm_90+). Latencies are serial chases (cycles per step, long "
        "minus short); bandwidths are full grids timed with events (a step's bytes over its time, long minus short).",
    ),
)


def measure(request: Request) -> Probes:
    """The family's runnable probes in order, each as (name, step); a probe whose own check fails raises
    ProbeFailure. Probes the arch lacks are not runnable (their toml's archs)."""
    request, sources = replace(request, settings=request.settings or Settings()), Sources()
    steps = {name: lambda name=name: STEPS[name](request, sources, name) for name in PROBES}
    return probe_steps(PROBES, steps, request.runnable)


FAMILY = Family(
    name="async_copy",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
    sections=SECTIONS,
    invariants=INVARIANTS,
)
