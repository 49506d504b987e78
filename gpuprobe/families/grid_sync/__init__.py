"""The grid_sync family: a grid-wide barrier in a cooperative launch, and a persistent kernel against
back-to-back launches.

``grid_sync.latency``: the barrier of ptx/grid_sync/grid_sync.ptx (the way cg::grid_group::sync does it) at grid
sizes from one block to the most blocks that can be co-resident, as the occupancy API counts them
(blocks per SM x SMs). A cooperative grid larger than that cannot run (every block must be resident
for the barrier to open), so asking for one is a :class:`ProbeFailure` before anything is launched:
it is never shrunk to fit. Each sample is two launches, ``long_syncs`` and ``short_syncs`` barriers
between block 0's clock reads: cost per sync = (cycles(K) - cycles(1)) / (K - 1), so the clock reads
and the loop's entry and exit cancel. The SM clock comes from the same launches (cycles over
global-timer ns of the long timed phase, read only from windows of at least :data:`CLOCK_WINDOW_NS`:
%globaltimer moves in ticks of about a microsecond), so every latency is in cycles and ns. The short
launch's window, one barrier of 0.4 to 1.5 us, often reads 0 or 1 tick: its ns are not used.

Every launch first runs ``checks`` rounds of the check phase: each block writes its tag for the round,
passes the barrier, and reads every block's tag for that round; the kernel counts wrong tags. The host
checks there were none, that every block passed every barrier, and that the arrive word ended on the
sense the number of barriers implies: a barrier that let a block through early fails the probe.

``grid_sync.persistent``: one block per SM doing a tiny step (every thread adds 1 to its word) ``steps``
times, separated by the same grid barrier inside one cooperative launch, against the same step as
back-to-back launches of a kernel of its own. Both costs are long-minus-short over GPU event time, and
both results are checked word by word.

:func:`plan` counts what measuring both costs at most on a device, from the settings alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.differencing import EVENTS, Difference, Lengths
from gpuprobe.families.measuring import clock_mhz, clock_window_ns, fact
from gpuprobe.families.planning import CHECKED_LAUNCH_CALLS, MAX_THREADS_PER_SM, held_batch_s
from gpuprobe.families.sampling import ONE_SAMPLE, Stopping, sample_until_stable
from gpuprobe.families.stepping import probe_steps
from gpuprobe.judge.invariants import Check
from gpuprobe.output.sections import Section
from gpuprobe.runner.checked import Kernels

PROBES = ["grid_sync.latency", "grid_sync.persistent"]
GRID_KERNEL, STEP_KERNEL = "gp_gs_grid", "gp_gs_step"
SENSE_BIT = 0x80000000  # the arrive word's top bit flips at every barrier
CLOCK_WINDOW_NS = clock_window_ns(0.01)  # 100 us: the long launch's timed phase reads the SM clock to 1 %


@dataclass(frozen=True)
class Settings:
    block: int = 256  # threads per block
    short_syncs: int = 1  # a latency sample is the difference of two launches' timed phases
    long_syncs: int = 401
    checks: int = 4  # check-phase rounds in every launch
    short_steps: int = 1  # a persistent / back-to-back sample: long minus short, in steps
    long_steps: int = 201
    sampling: Stopping = Stopping(3, 7, 0.02, 0.5)  # per grid size, and for the persistent probe

    def __post_init__(self) -> None:
        if min(self.block, self.short_syncs, self.checks, self.short_steps) < 1:
            raise ValueError(f"Settings: block, short_syncs, checks and short_steps must be at least 1, not {self}")
        if self.long_syncs <= self.short_syncs or self.long_steps <= self.short_steps:
            raise ValueError("Settings: long_syncs and long_steps must exceed short_syncs and short_steps")


def grid_sizes(sm_count: int, per_sm: int) -> list[int]:
    """Grid sizes for the latency curve: 1 block, a quarter and half of the SMs, then 1, 2, 4 ... blocks
    per SM up to the co-resident maximum ``per_sm`` x ``sm_count``, which is always the last."""
    if sm_count < 1 or per_sm < 1:
        raise ProbeFailure(f"no cooperative grid fits: {per_sm} blocks per SM on {sm_count} SMs (occupancy API)")
    multiples = [k for k in (1, 2, 4, 8, 16, 32) if k < per_sm]
    sizes = {1, max(1, sm_count // 4), max(1, sm_count // 2), *(k * sm_count for k in multiples), per_sm * sm_count}
    return sorted(sizes)


Timed = Callable[[int, int], tuple[int, int]]  # (blocks, syncs) -> block 0's (cycles, ns) of a checked launch


def barrier_difference(timed: Timed, blocks: int, settings: Settings, clocks: list[float], what: str) -> Difference:
    """One grid barrier's cost at ``blocks`` blocks, a long minus a short cooperative launch of ``timed``; the
    SM clock of every launch long enough to read it appended to ``clocks``."""

    def launch(syncs: int) -> float:
        cycles, ns = timed(blocks, syncs)
        mhz = clock_mhz(cycles, ns, CLOCK_WINDOW_NS)
        if mhz is not None:
            clocks.append(mhz)
        return float(cycles)

    return Difference(launch, Lengths(settings.short_syncs, settings.long_syncs, 1), what)


@dataclass
class GridBarrier:
    """The buffers and limits of cooperative launches of the barrier kernel."""

    kernels: Kernels
    device: Device
    settings: Settings
    max_blocks: int  # co-resident blocks: occupancy x SMs
    per_sm: int
    counter: Any
    slots: Any
    data: Any
    out: Any

    @classmethod
    def open(cls, request: Request, settings: Settings) -> GridBarrier:
        per_sm = request.launcher.max_active_blocks(GRID_KERNEL, settings.block, 0)
        top = per_sm * request.device.sm_count
        words = max(top, 1)
        alloc = request.launcher.alloc
        return cls(request.kernels, request.device, settings, top, per_sm, alloc(8), alloc(8 * words),
                   alloc(4 * words * settings.block), request.outputs.get(2 + words))  # fmt: skip

    def check_fits(self, blocks: int) -> None:
        if not 1 <= blocks <= self.max_blocks:
            raise ProbeFailure(
                f"a cooperative grid of {blocks} blocks of {self.settings.block} threads cannot be co-resident: "
                f"at most {self.max_blocks} ({self.per_sm} per SM x {self.device.sm_count} SMs, occupancy API); "
                "it is refused, never shrunk"
            )

    def args(self, checks: int, syncs: int, steps: int) -> list[object]:
        values = (np.uint32(checks), np.uint32(syncs), np.uint32(steps))
        return [self.counter, self.slots, self.data, *values, self.out]

    def fresh(self) -> None:
        """Zero the arrive word and error count (the barrier starts on sense 0) and the check tags."""
        self.kernels.launcher.fill(self.counter, 0)
        self.kernels.launcher.fill(self.slots, 0)

    def verify(self, blocks: int, barriers: int, passed: np.ndarray) -> None:
        arrive, errors = (int(v) for v in self.kernels.launcher.read(self.counter, "uint32", 2))
        if errors:
            raise ProbeFailure(f"{GRID_KERNEL}: {errors} tag(s) read after the barrier were not the round's")
        wrong = np.flatnonzero(passed != barriers)
        if wrong.size:
            raise ProbeFailure(
                f"{GRID_KERNEL}: block {int(wrong[0])} passed {int(passed[wrong[0]])} barriers, not {barriers}"
            )
        expected = (barriers & 1) * SENSE_BIT
        if arrive != expected:
            raise ProbeFailure(
                f"{GRID_KERNEL}: the arrive word ended {arrive:#x} after {barriers} barriers, not {expected:#x}"
            )

    def timed(self, blocks: int, syncs: int) -> tuple[int, int]:
        """One cooperative launch of ``blocks`` blocks: the check phase, then ``syncs`` timed barriers;
        verified; block 0's (cycles, ns) of the timed phase. The ns are whole timer ticks: a phase
        shorter than a tick may read 0."""
        self.check_fits(blocks)
        self.fresh()
        s = self.settings
        values = self.kernels.results(GRID_KERNEL, self.args(s.checks, syncs, 0), self.out, 2 + blocks,
                                  grid=blocks, block=s.block, cooperative=True)  # fmt: skip
        self.verify(blocks, s.checks + syncs, values[2:])
        cycles, ns = int(values[0]), int(values[1])
        if cycles <= 0:
            raise ProbeFailure(f"{GRID_KERNEL}: the timed phase took {cycles} cycles")
        return cycles, ns


@dataclass
class Curve:
    """Per grid size, the per-sync samples in cycles and the SM clock of each long launch."""

    blocks: list[int]
    cycles: list[list[float]]
    mhz: list[list[float]]


def latency_curve(grid: GridBarrier, sizes: list[int]) -> Curve:
    curve = Curve(sizes, [], [])
    for blocks in sizes:
        clocks: list[float] = []
        difference = barrier_difference(grid.timed, blocks, grid.settings, clocks, f"{GRID_KERNEL} ({blocks} blocks)")
        curve.cycles.append(difference.samples(grid.settings.sampling))
        curve.mhz.append(clocks)
    return curve


def measure_latency(grid: GridBarrier) -> Measured:
    probe = PROBES[0]
    sizes = grid_sizes(grid.device.sm_count, grid.per_sm)
    curve = latency_curve(grid, sizes)
    clocks = [m for ms in curve.mhz for m in ms]
    mhz = float(np.median(clocks)) if clocks else None
    one_per_sm = sizes.index(grid.device.sm_count)  # always planned: 1 x SMs, or the maximum itself
    facts = [
        fact("sync.grid.latency", curve.cycles[one_per_sm], "cycle", probe, mhz),
        fact("sync.grid.latency_full", curve.cycles[-1], "cycle", probe, mhz),
    ]
    medians = [float(np.median(c)) for c in curve.cycles]
    curve_series = {"blocks": [float(b) for b in sizes], "latency_cycles": medians}
    note = f"{len(sizes)} grid sizes up to {grid.max_blocks} blocks ({grid.per_sm}/SM), "
    if mhz is None:
        note += f"no timed phase of {CLOCK_WINDOW_NS / 1e3:.0f} us or more to read the SM clock over (cycles only)"
    else:
        curve_series["latency_ns"] = [m / mhz * 1000.0 for m in medians]
        note += f"SM clock {mhz:.0f} MHz"
    return Measured(probe, ProbeOutcome("ok", note, {"grid": curve_series}), facts)


def _check_data(grid: GridBarrier, threads: int, steps: int, what: str) -> None:
    words = grid.kernels.launcher.read(grid.data, "uint32", threads)
    wrong = np.flatnonzero(words != steps)
    if wrong.size:
        raise ProbeFailure(f"{what}: thread {int(wrong[0])} counted {int(words[wrong[0]])} steps, not {steps}")


def measure_persistent(grid: GridBarrier, runnable: set[str]) -> Measured:
    probe = PROBES[1]
    if PROBES[0] not in runnable:
        raise ProbeFailure(f"the persistent kernel is {GRID_KERNEL}, whose contract ({PROBES[0]}) did not hold here")
    s, sms = grid.settings, grid.device.sm_count
    grid.check_fits(sms)
    threads = sms * s.block
    launcher = grid.kernels.launcher

    def persistent(steps: int) -> float:
        grid.fresh()
        launcher.fill(grid.data, 0)
        ms = grid.kernels.time(GRID_KERNEL, grid.args(0, 0, steps), grid=sms, block=s.block, cooperative=True)
        _check_data(grid, threads, steps, GRID_KERNEL)
        return ms

    def launches(count: int) -> float:
        launcher.fill(grid.data, 0)
        ms = grid.kernels.time(STEP_KERNEL, [grid.data], grid=sms, block=s.block, count=count)
        _check_data(grid, threads, count, STEP_KERNEL)
        return ms

    lengths = Lengths(s.short_steps, s.long_steps, 1)
    fused_steps = Difference(persistent, lengths, GRID_KERNEL, EVENTS)
    separate_steps = Difference(launches, lengths, STEP_KERNEL, EVENTS)
    fused: list[float] = []
    separate: list[float] = []

    def take() -> None:  # microseconds per step
        fused.append(fused_steps.sample() * 1e3)
        separate.append(separate_steps.sample() * 1e3)

    sample_until_stable(take, fused, s.sampling)
    facts: list[Fact] = [
        fact("sync.grid.persistent_step", fused, "us", probe),
        fact("launch.back_to_back_step", separate, "us", probe),
    ]
    gaps = (d.lengths.long - d.lengths.short for d in (fused_steps, separate_steps))
    note = f"{sms} blocks x {s.block} threads, " + " and ".join(f"{gap} steps" for gap in gaps) + " per sample"
    return Measured(probe, ProbeOutcome("ok", note), facts)


BARRIER_S = 5e-6  # one grid barrier, at most (0.4 to 1.5 us expected at one block per SM)
STEP_LAUNCH_S = 10e-6  # one back-to-back launch of the step kernel on the GPU, at most
TIMED_CALLS = 2 + CHECKED_LAUNCH_CALLS + 1  # one timed(): the two fresh fills, the checked run, the arrive word read
PERSISTENT_CALLS = 5  # one persistent sample launch: two fresh fills, the data fill, the timed batch, the read
STEP_CALLS = 3  # one back-to-back sample: the data fill, the timed batch, the read


def plan(settings: Settings, device: Device) -> Plan:
    """What both probes cost at most on ``device``: every grid size the occupancy API could allow
    (:data:`MAX_THREADS_PER_SM` / block), every sample at its most repeats, each barrier at
    :data:`BARRIER_S`; the results read back are a few words per block (no host time to speak of)."""
    s, repeats = settings, settings.sampling.max_repeats
    sizes = grid_sizes(device.sm_count, max(1, min(32, MAX_THREADS_PER_SM // s.block)))  # 32 blocks per SM at most
    samples = len(sizes) * repeats
    barriers = 2 * s.checks + s.short_syncs + s.long_syncs  # a sample's two launches
    latency = Plan(1, samples * 2 * TIMED_CALLS, samples * barriers * BARRIER_S)
    steps = (s.short_steps, s.long_steps)
    persistent_s = sum(held_batch_s(1, n * BARRIER_S, device) + held_batch_s(n, STEP_LAUNCH_S, device) for n in steps)
    persistent = Plan(1, repeats * 2 * (PERSISTENT_CALLS + STEP_CALLS), repeats * persistent_s)
    return latency + persistent


# First contact: both probes (the persistent one runs the barrier kernel, so it needs the latency probe's
# contract), every grid size once, one check round, one and two barriers or steps: the cooperative launch,
# the ordering checks and the step counts all run; the windows are too short to read the SM clock.
SMOKE = Smoke(
    probes=tuple(PROBES),
    settings=Settings(short_syncs=1, long_syncs=2, checks=1, short_steps=1, long_steps=2, sampling=ONE_SAMPLE),
)


def _block_barrier_check(facts: dict[str, Fact], device: Device) -> list[Check]:
    """A grid barrier costs more than any block barrier measured (sync.block.*, in cycles)."""
    grid = facts.get("sync.grid.latency")
    if grid is None or grid.value is None or grid.unit != "cycle":
        return []
    checks = []
    for block in facts.values():
        if block.id.startswith("sync.block.") and block.unit == "cycle" and block.value is not None:
            ok = grid.value > block.value
            relation = ">" if ok else "≤"
            detail = f"sync.grid.latency = {grid.value:g} cycle {relation} {block.id} = {block.value:g} cycle"
            name = f"grid_sync_above_{block.id.removeprefix('sync.block.').replace('.', '_')}"
            checks.append(Check(name, ok, detail, (grid.id, block.id)))
    return checks


INVARIANTS = (_block_barrier_check,)

SECTIONS = (
    Section(
        "Grid synchronization",
        ("sync.grid.", "launch.back_to_back_step"),
        ("grid_sync.",),
        blurb="A grid-wide barrier as cg::grid_group::sync does it, in a cooperative launch, checked for ordering "
        "in every launch; a persistent kernel's step against the same step as back-to-back launches.",
    ),
)


def measure(request: Request) -> Probes:
    """The runnable probes in order, as (name, step); a failed self-check raises ProbeFailure."""
    settings = request.settings or Settings()
    grid = cache(lambda: GridBarrier.open(request, settings))  # opened by the first probe measured
    steps: dict[str, Callable[[], Measured]] = {
        PROBES[0]: lambda: measure_latency(grid()),
        PROBES[1]: lambda: measure_persistent(grid(), request.runnable),
    }
    return probe_steps(PROBES, steps, request.runnable)


FAMILY = Family(
    name="grid_sync",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
    sections=SECTIONS,
    invariants=INVARIANTS,
)
