"""The atomics family: latency and throughput of atomic adds, each checked against what the host predicts.

Order of measurement:

1. ``atomics.latency.global`` / ``atomics.latency.shared`` — a self-feeding chain of returning adds
   (each increment is the value the previous add returned), timed by %clock64 around a loop of 32:
   one lane, a warp on one address, a warp on 32 distinct words. A sample is a long minus a short
   launch, so what a timed region pays once cancels. From a zeroed counter, one lane's returned
   values follow a Fibonacci-like sequence mod 2**32 that :func:`chain_values` predicts exactly;
   for a warp on one address the hardware picks the order of the 32 adds of each instruction, and
   :func:`check_serialized` checks that the last instruction's values form one serial chain that
   ends at the counter's final value.
2. ``atomics.throughput.global`` / ``global_red`` / ``shared`` — every SM adding as fast as it can
   (CUDA events, long minus short launch, the long one sized to a target time), to one address,
   one address per warp, or one word per thread. Every counter must end at adds x increment, and
   (for the returning adds) the values handed out for each counter must sum to what 0, inc, ...,
   (n - 1) inc sum to.

Any mismatch is a ProbeFailure: the probe reports no number.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cache, partial
from typing import Any

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.differencing import EVENTS, Difference, Lengths
from gpuprobe.families.measuring import fact, require_counts, require_long_after_short
from gpuprobe.families.planning import HOST_CHECK_THREAD_S, combined, cycles_s, kernel_runs, probe
from gpuprobe.families.sampling import ONE_SAMPLE, Stopping
from gpuprobe.families.stepping import probe_steps
from gpuprobe.judge.invariants import Check
from gpuprobe.kernels.registry import unroll_of
from gpuprobe.output.sections import Section
from gpuprobe.runner.checked import POISON_BYTE, unwritten
from gpuprobe.runner.launcher import Launcher

WORD = 2**32  # the counters are 32-bit: every value is mod 2**32
WARP = 32

# Latency shapes: fact suffix -> (lanes, byte stride between the lanes' counters).
LANE_SHAPES: dict[str, tuple[int, int]] = {"": (1, 0), ".warp_one_address": (WARP, 0), ".warp_distinct": (WARP, 4)}


@dataclass(frozen=True)
class Spread:
    """Where thread g adds: byte offset ((g >> shift) & mask) << spacing from the counters."""

    shift: int
    mask: int
    spacing: int

    def offsets(self, threads: int) -> np.ndarray:
        g = np.arange(threads, dtype=np.int64)
        return ((g >> self.shift) & self.mask) << self.spacing


# Global throughput modes: fact suffix -> spread (one address; the lanes of a warp on one address,
# warps on distinct lines; every thread on its own word, 32 per line).
GLOBAL_SPREADS: dict[str, Spread] = {
    "one_address": Spread(0, 0, 0),
    "one_per_warp": Spread(5, 0xFFFFFFFF, 7),
    "distinct": Spread(0, 0xFFFFFFFF, 2),
}
SHARED_MASKS: dict[str, int] = {"one_address": 0, "distinct": WARP - 1}  # word (tid & mask) of the block's 32


@dataclass(frozen=True)
class Settings:
    short_iterations: int = 8  # latency: a sample is a long minus a short chain,
    long_iterations: int = 72  # (72 - 8) x 32 = 2048 adds
    first_increment: int = 1  # the first add's increment; each later one adds what the previous returned
    sampling: Stopping = Stopping(3, 9, 0.01, 0.5)  # latency samples per shape
    block: int = 256  # throughput: threads per block,
    blocks_per_sm: int = 4  # at most this many blocks per SM (fewer if the occupancy API says so)
    increment: int = 3  # what each throughput add adds
    stream_short_iterations: int = 1
    stream_target_ms: float = 3.0  # the long throughput launch is sized to take about this long
    stream_max_iterations: int = 4096
    stream_sampling: Stopping = Stopping(3, 5, 0.01, 0.5)  # throughput samples per mode

    def __post_init__(self) -> None:
        counts = ("short_iterations", "first_increment", "block", "blocks_per_sm", "increment",
                  "stream_short_iterations")  # fmt: skip
        require_counts(self, counts)
        require_long_after_short(self)
        if self.block % WARP or self.block > 1024:
            raise ValueError(f"Settings.block must be a multiple of {WARP} up to 1024, got {self.block}")
        if self.stream_max_iterations < 2 * self.stream_short_iterations + 1 or self.stream_target_ms <= 0:
            raise ValueError(
                "Settings: stream_max_iterations must be at least 2 x stream_short_iterations + 1, target > 0"
            )


def _settings(request: Request) -> Settings:
    return request.settings or Settings()


# ---- what the host predicts ------------------------------------------------------------------


@cache
def chain_values(first: int, steps: int) -> tuple[int, int, int]:
    """One lane's chain from a zeroed counter: (last returned value, the one before, final counter).

    Each add's increment is the value the previous add returned (the first one's is ``first``)."""
    counter, increment, last, before = 0, first % WORD, 0, 0
    for _ in range(steps):
        before, last = last, counter
        counter = (counter + increment) % WORD
        increment = last
    return last, before, counter


def check_chain(kind: str, first: int, steps: int, last: list[int], before: list[int], final: list[int]) -> None:
    """Every lane ran the chain alone on its own counter: values and final counters as predicted."""
    want = chain_values(first, steps)
    for lane, got in enumerate(zip(last, before, final, strict=True)):
        if got != want:
            raise ProbeFailure(
                f"{kind}: lane {lane} returned {got[0]}, {got[1]} and left its counter at {got[2]} after {steps} "
                f"adds; the host predicted {want[0]}, {want[1]} and {want[2]}"
            )


def check_serialized(kind: str, last: list[int], before: list[int], final: int) -> None:
    """The last instruction of a warp adding to one address: each lane added its previous returned
    value, so its 32 adds must form one serial chain (each returned the one before it plus that
    one's increment) whose end plus its increment is the counter's final value."""
    lanes = len(last)
    owner = {value: lane for lane, value in enumerate(last)}
    if len(owner) != lanes:
        raise ProbeFailure(f"{kind}: two lanes were handed the same value by one instruction's adds")
    after = [(last[lane] + before[lane]) % WORD for lane in range(lanes)]
    successor = {lane: owner.get(after[lane]) for lane in range(lanes)}
    ends = [lane for lane, following in successor.items() if following is None]
    if len(ends) != 1 or after[ends[0]] != final:
        raise ProbeFailure(
            f"{kind}: the last instruction's adds do not chain into the final counter {final} "
            f"({len(ends)} lane(s) end a chain)"
        )
    heads = set(range(lanes)) - set(successor.values())
    lane, seen = (heads.pop() if len(heads) == 1 else None), 0
    while lane is not None and seen <= lanes:
        lane, seen = successor[lane], seen + 1
    if seen != lanes:
        raise ProbeFailure(f"{kind}: the last instruction's {lanes} adds are not one serial chain")


def _adds_per_counter(offsets: np.ndarray, adds_per_thread: int, counters: int) -> np.ndarray:
    return np.bincount(offsets // 4, minlength=counters).astype(np.int64) * adds_per_thread


def check_counters(kind: str, offsets: np.ndarray, adds_per_thread: int, increment: int, counters: np.ndarray) -> None:
    """Each counter ended at (adds made to it) x increment, mod 2**32; untouched ones stayed 0."""
    adds = _adds_per_counter(offsets, adds_per_thread, len(counters))
    want = (adds % WORD) * increment % WORD
    wrong = np.flatnonzero(want != counters.astype(np.int64))
    if wrong.size:
        index = int(wrong[0])
        raise ProbeFailure(
            f"{kind}: counter {index} ended at {int(counters[index])} after {int(adds[index])} adds of {increment}; "
            f"the host predicted {int(want[index])} ({wrong.size} counter(s) wrong)"
        )


def check_returned_sums(kind: str, offsets: np.ndarray, adds_per_thread: int, increment: int, sums: np.ndarray) -> None:
    """The values one counter handed out are 0, inc, ..., (n - 1) inc in some order: the threads'
    sums of returned values, added up per counter, must equal inc n (n - 1) / 2, mod 2**32."""
    words = offsets // 4
    adds = _adds_per_counter(offsets, adds_per_thread, int(words.max()) + 1)
    got = np.zeros(len(adds), dtype=np.int64)
    np.add.at(got, words, sums.astype(np.int64) % WORD)  # each < 2**32, at most 2**31 of them: no overflow
    got %= WORD
    want = np.zeros(len(adds), dtype=np.int64)
    for n in np.unique(adds):  # few distinct counts: exact in Python integers
        want[adds == n] = increment * int(n) * (int(n) - 1) // 2 % WORD
    wrong = np.flatnonzero((want != got) & (adds > 0))
    if wrong.size:
        word = int(wrong[0])
        raise ProbeFailure(
            f"{kind}: the values returned by counter {word}'s {int(adds[word])} adds sum to {int(got[word])}, "
            f"not {int(want[word])}: a value was handed out twice or never ({wrong.size} counter(s) wrong)"
        )


# ---- latency ------------------------------------------------------------------------------------


@dataclass
class _LatencyChain:
    """One latency shape on one memory space: launches a chain and checks what it returned."""

    request: Request
    kernel: str
    lanes: int
    lane_stride: int
    counters: Any = None  # a global chain's counters, one word per lane (None in shared memory)
    sms: list[int] = field(default_factory=list)

    @property
    def shared(self) -> bool:
        return self.kernel.endswith("shared")

    def launch(self, iterations: int) -> int:
        s, request = _settings(self.request), self.request
        args: list[object] = [np.uint32(self.lane_stride), np.uint32(s.first_increment), np.uint32(iterations)]
        if not self.shared:
            request.launcher.fill(self.counters, 0)
            args.insert(0, self.counters)
        per_lane = 3 if self.shared else 2
        words = 2 + per_lane * self.lanes
        out = request.outputs.get(2 + 3 * WARP)
        values = [int(v) for v in request.kernels.results(self.kernel, [*args, out], out, words, block=self.lanes)]
        lanes = np.array(values[2:]).reshape(self.lanes, per_lane)
        if self.shared:
            final = [int(v) for v in lanes[:, 2]]
        else:
            raw = request.launcher.read(self.counters, "uint32", WARP)
            final = [int(raw[lane * self.lane_stride // 4]) for lane in range(self.lanes)]
        steps = iterations * unroll_of(self.kernel)
        self.check(steps, [int(v) for v in lanes[:, 0]], [int(v) for v in lanes[:, 1]], final)
        self.sms.append(values[1] & 0xFFFFFFFF)
        return values[0]

    def check(self, steps: int, last: list[int], before: list[int], final: list[int]) -> None:
        if self.lanes > 1 and self.lane_stride == 0:
            if len(set(final)) != 1:
                raise ProbeFailure(f"{self.kernel}: the lanes of one counter saw different final values {set(final)}")
            return check_serialized(self.kernel, last, before, final[0])
        return check_chain(self.kernel, _settings(self.request).first_increment, steps, last, before, final)

    def latencies(self) -> list[float]:
        """Samples of one add's latency: the long chain minus the short one, over the adds between."""
        s = _settings(self.request)
        lengths = Lengths(s.short_iterations, s.long_iterations, unroll_of(self.kernel))
        return Difference(lambda iterations: float(self.launch(iterations)), lengths, self.kernel).samples(s.sampling)


def measure_latency(request: Request, probe: str, kernel: str, space: str) -> Measured:
    facts: list[Fact] = []
    series: dict[str, list[float]] = {"shape": [], "lanes": [], "latency_cycles": [], "sm_id": []}
    counters = None if space == "shared" else request.launcher.alloc(4 * WARP)
    for suffix, (lanes, stride) in LANE_SHAPES.items():
        chain = _LatencyChain(request, kernel, lanes, stride, counters)
        result = fact(f"atomic.{space}.latency{suffix}", chain.latencies(), "cycle", probe)
        facts.append(result)
        series["shape"].append(float(list(LANE_SHAPES).index(suffix)))
        series["lanes"].append(float(lanes))
        series["latency_cycles"].append(float(result.value or 0.0))
        series["sm_id"].append(float(chain.sms[-1]))
    note = "shapes: 0 one lane, 1 a warp on one address, 2 a warp on 32 distinct words"
    return Measured(probe, ProbeOutcome("ok", note, {"latency": series}), facts)


# ---- throughput ---------------------------------------------------------------------------------


@dataclass
class Stream:
    """One throughput mode: how to launch it with a number of iterations, and how to check it after."""

    request: Request
    kernel: str
    grid: int
    args: Callable[[int], list[object]]  # iterations -> the kernel's arguments
    reset: Callable[[], None]  # zero the counters (and poison the outputs) before a timed launch
    verify: Callable[[int], None]  # iterations of the last launch -> raise ProbeFailure if wrong

    @property
    def threads(self) -> int:
        return self.grid * _settings(self.request).block

    def time(self, iterations: int) -> float:
        self.reset()
        block = _settings(self.request).block
        ms = self.request.kernels.time(self.kernel, self.args(iterations), grid=self.grid, block=block)
        self.verify(iterations)
        return ms

    def long_iterations(self, short_ms: float) -> int:
        """Iterations for a long launch of about the target time, from a trial of 2 x short + 1 iterations."""
        s = _settings(self.request)
        trial = s.stream_short_iterations * 2 + 1
        trial_ms = self.time(trial)
        per_iteration = Lengths(s.stream_short_iterations, trial, 1).per_step(short_ms, trial_ms)
        if not per_iteration > 0:  # lost in the launch overhead: the trial's whole time bounds it from above
            per_iteration = trial_ms / trial
        wanted = round(s.stream_target_ms / per_iteration) + s.stream_short_iterations
        return int(min(max(wanted, trial), s.stream_max_iterations))

    def rate(self) -> list[float]:
        """Samples of Gop/s: adds between a long and a short launch over the time between them."""
        s = _settings(self.request)
        short = self.time(s.stream_short_iterations)
        iterations = self.long_iterations(short)
        lengths = Lengths(s.stream_short_iterations, iterations, self.threads * unroll_of(self.kernel))
        # the sizing launches ran the kernel: no untimed first launch
        adds = Difference(self.time, lengths, self.kernel, EVENTS, longest=s.stream_max_iterations, warmed=True)
        return [1e-6 / ms_per_add for ms_per_add in adds.samples(s.stream_sampling)]  # Gop/s


def stream_grid(request: Request, kernel: str) -> int:
    """Blocks filling every SM: the occupancy the device reports, at most ``blocks_per_sm``."""
    s = _settings(request)
    per_sm = min(s.blocks_per_sm, request.launcher.max_active_blocks(kernel, s.block, 0))
    if per_sm < 1:
        raise ProbeFailure(f"{kernel} cannot run {s.block} threads per block on this device")
    return request.device.sm_count * per_sm


def _poison(launcher: Launcher, buffer: Any) -> None:
    launcher.fill(buffer, POISON_BYTE)


def global_stream(request: Request, kernel: str, spread: Spread, returning: bool) -> Stream:
    s, launcher = _settings(request), request.launcher
    grid = stream_grid(request, kernel)
    threads = grid * s.block
    offsets = spread.offsets(threads)
    words = int(offsets.max()) // 4 + 1
    counters = launcher.alloc(words * 4)
    sums = launcher.alloc(threads * 4) if returning else None
    fixed = [np.uint32(spread.shift), np.uint32(spread.mask), np.uint32(spread.spacing), np.uint32(s.increment)]

    def args(iterations: int) -> list[object]:
        if returning:
            return [counters, *fixed, np.uint32(iterations), sums]
        return [*fixed, np.uint32(iterations), counters]

    def reset() -> None:
        launcher.fill(counters, 0)
        if sums is not None:
            _poison(launcher, sums)

    def verify(iterations: int) -> None:
        adds = iterations * unroll_of(kernel)
        check_counters(kernel, offsets, adds, s.increment, launcher.read(counters, "uint32", words))
        if sums is not None:
            returned = launcher.read(sums, "uint32", threads)
            if unwritten(returned):
                raise ProbeFailure(f"{kernel} did not write every thread's sum")
            check_returned_sums(kernel, offsets, adds, s.increment, returned)

    return Stream(request, kernel, grid, args, reset, verify)


def shared_stream(request: Request, mask: int) -> Stream:
    s, launcher, kernel = _settings(request), request.launcher, "gp_at_tput_shared"
    grid = stream_grid(request, kernel)
    threads = grid * s.block
    tid = np.arange(threads, dtype=np.int64) % s.block
    offsets = ((np.arange(threads, dtype=np.int64) // s.block) * WARP + (tid & mask)) * 4  # block's 32 words
    out = launcher.alloc((grid * WARP + threads) * 4)

    def verify(iterations: int) -> None:
        adds = iterations * unroll_of(kernel)
        values = launcher.read(out, "uint32", grid * WARP + threads)
        if unwritten(values):
            raise ProbeFailure(f"{kernel} did not write all of its counters and sums")
        check_counters(kernel, offsets, adds, s.increment, values[: grid * WARP])
        check_returned_sums(kernel, offsets, adds, s.increment, values[grid * WARP :])

    def args(iterations: int) -> list[object]:
        return [np.uint32(mask), np.uint32(s.increment), np.uint32(iterations), out]

    return Stream(request, kernel, grid, args, lambda: _poison(launcher, out), verify)


def _throughput(probe: str, prefix: str, streams: dict[str, Callable[[], Stream]]) -> Measured:
    facts, series = [], {"mode": [], "gops": [], "threads": []}
    for index, (suffix, make) in enumerate(streams.items()):
        stream = make()
        facts.append(fact(f"{prefix}.{suffix}", stream.rate(), "Gop/s", probe))
        series["mode"].append(float(index))
        series["gops"].append(float(facts[-1].value or 0.0))
        series["threads"].append(float(stream.threads))
    note = "modes: " + ", ".join(f"{i} {name}" for i, name in enumerate(streams))
    return Measured(probe, ProbeOutcome("ok", note, {"throughput": series}), facts)


def _throughput_streams(request: Request, probe: str) -> dict[str, Callable[[], Stream]]:
    """Each mode of a throughput probe, by its fact suffix: the stream to make for it."""
    if probe == "atomics.throughput.shared":
        return {mode: partial(shared_stream, request, mask) for mode, mask in SHARED_MASKS.items()}
    kernel, returning = ("gp_at_red_global", False) if probe.endswith("_red") else ("gp_at_tput_global", True)
    return {mode: partial(global_stream, request, kernel, spread, returning) for mode, spread in GLOBAL_SPREADS.items()}


STEPS: list[tuple[str, Callable[[Request], Measured]]] = [
    ("atomics.latency.global", lambda r: measure_latency(r, "atomics.latency.global", "gp_at_lat_global", "global")),
    ("atomics.latency.shared", lambda r: measure_latency(r, "atomics.latency.shared", "gp_at_lat_shared", "shared")),
    *(
        (name, lambda r, name=name, prefix=prefix: _throughput(name, prefix, _throughput_streams(r, name)))
        for name, prefix in (
            ("atomics.throughput.global", "atomic.global.throughput"),
            ("atomics.throughput.global_red", "atomic.global.red.throughput"),
            ("atomics.throughput.shared", "atomic.shared.throughput"),
        )
    ),
]

PROBES = [name for name, _ in STEPS]


def _both(facts: dict[str, Fact], low: str, high: str) -> tuple[float, float] | None:
    a, b = facts.get(low), facts.get(high)
    return None if a is None or b is None or a.value is None or b.value is None else (a.value, b.value)


def invariant_shared_below_global(facts: dict[str, Fact], device: Device) -> list[Check]:
    """An add in the SM's shared memory returns sooner than one performed in L2."""
    ids = ("atomic.shared.latency", "atomic.global.latency")
    pair = _both(facts, *ids)
    if pair is None:
        return []
    detail = f"shared {pair[0]:.0f} vs global {pair[1]:.0f} cycles"
    return [Check("atomics.shared_below_global", pair[0] < pair[1], detail, ids)]


def invariant_contention_costs(facts: dict[str, Fact], device: Device) -> list[Check]:
    """Adds to one global counter are serialized: never faster than adds spread over every thread's word."""
    ids = ("atomic.global.throughput.one_address", "atomic.global.throughput.distinct")
    pair = _both(facts, *ids)
    if pair is None:
        return []
    detail = f"one address {pair[0]:.3g} vs distinct {pair[1]:.3g} Gop/s"
    return [Check("atomics.contention_costs", pair[0] <= pair[1], detail, ids)]


INVARIANTS = (invariant_shared_below_global, invariant_contention_costs)

SECTIONS = (
    Section(
        "Atomics",
        ("atomic.",),
        ("atomics.",),
        blurb=(
            "Atomic adds: latency of a self-feeding chain (one lane, a warp on one address, a warp on distinct "
            "words) and throughput from every SM (one address, one per warp, one per thread), returning and not."
        ),
    ),
)


LATENCY_ADD_CYCLES = 1500.0  # one add of a latency chain at most (a warp on one global address: 32 in turn)
STREAM_LAUNCH_CALLS = 5  # a timed throughput launch: counters zeroed, sums poisoned, the timed batch, both read
STREAM_LAUNCH_TARGETS = 1.5  # a throughput launch takes at most this many stream_target_ms


def plan(settings: Settings, device: Device) -> Plan:
    """Every probe at its most repeats (see :mod:`gpuprobe.families.planning`): latency 2 launches per
    sample per shape (the global ones zero and read back their counters too); throughput per mode one
    short launch, one trial and 2 per sample, each checked per thread on the host."""
    s, r = settings, settings.sampling.max_repeats

    def chains(kernel: str) -> Plan:
        adds = r * (s.short_iterations + s.long_iterations) * unroll_of(kernel)
        return kernel_runs(2 * r, cycles_s(adds * LATENCY_ADD_CYCLES, device))

    counters = Plan(0, 2 * 2 * r, 0.0)
    shapes = len(LANE_SHAPES)
    latency = [probe(*[chains("gp_at_lat_global") + counters] * shapes), probe(*[chains("gp_at_lat_shared")] * shapes)]
    launches = 2 + 2 * s.stream_sampling.max_repeats
    threads = device.sm_count * s.blocks_per_sm * s.block
    gpu_s = launches * STREAM_LAUNCH_TARGETS * s.stream_target_ms * 1e-3
    mode = Plan(0, launches * STREAM_LAUNCH_CALLS, gpu_s, launches * threads * HOST_CHECK_THREAD_S)
    modes = (len(GLOBAL_SPREADS), len(GLOBAL_SPREADS), len(SHARED_MASKS))  # global, global_red, shared
    return sum((probe(*[mode] * count) for count in modes), combined(latency))


# A first contact: the one-lane, warp and distinct chains on global memory, one sample each (their
# returned values replayed on the host, the counters read back).
SMOKE = Smoke(
    probes=("atomics.latency.global",),
    settings=Settings(
        short_iterations=1, long_iterations=2, sampling=ONE_SAMPLE, stream_sampling=ONE_SAMPLE, stream_target_ms=0.1
    ),
)


def measure(request: Request) -> Probes:
    """The family's runnable probes in order, each as (name, step); a failed self-check raises ProbeFailure."""
    yield from probe_steps(PROBES, {name: partial(step, request) for name, step in STEPS}, request.runnable)


FAMILY = Family(
    name="atomics",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
    sections=SECTIONS,
    invariants=INVARIANTS,
)
