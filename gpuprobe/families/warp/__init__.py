"""The warp family: latency of warp-collective chains and shuffle throughput, each result checked.

Latency probes run one warp. Each lane starts from a value the host chose (``lanes``: 32 words of
per-lane operands, then 32 starting values), the kernel feeds every collective's result to the
next, 32 per loop iteration between two %clock64 reads, and writes each lane's final value. The
host replays the same chain (:func:`shfl`, :func:`ballot`, :func:`match_any`, ...) and a lane
that ends anywhere else fails the probe. A sample is a long minus a short launch
(:mod:`gpuprobe.families.differencing`), so the clock reads and the loop's edges cancel.

The divergence probe times an if/else of two 16-IMAD paths with the warp on one path and split over
both (the paths then run one after the other), every lane's result checked.

The throughput probe fills every SM with 32 warps of 4 independent shuffle chains and divides the
shuffles by the SM's span between its first warp's start and its last warp's end, long minus short.

Cycles only: this family does not measure the SM clock (the memory family's ``device.sm_clock``
converts, for whoever needs ns).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device, Fact, ProbeOutcome
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.differencing import SMOKE_SAMPLING, Difference, DifferencedSettings, Lengths, samples_plan
from gpuprobe.families.measuring import fact
from gpuprobe.families.planning import HOST_CHECK_THREAD_S, cycles_s, kernel_runs, link_s, probe
from gpuprobe.families.stepping import probe_steps
from gpuprobe.judge.invariants import Check
from gpuprobe.judge.ordering import non_decreasing, pair_not_below
from gpuprobe.kernels.registry import find_probe, unroll_of
from gpuprobe.output.sections import Section

LANES = 32
FULL = 0xFFFFFFFF
SHFL_MODES = ("idx", "up", "down", "bfly")
TILES = (4, 8, 16, 32)
TPUT_MASKS = (1, 2, 4, 8, 16, 3, 5, 9)  # the throughput kernel's lane masks, in order (PTX //@for M)
TPUT_CHAINS = 4
OUT_WORDS = 1 + LANES + 1  # cycles, every lane's value, one check word (redux's first sum)

PROBES = [
    *(f"warp.shfl.{mode}" for mode in SHFL_MODES),
    "warp.shfl.partial",
    "warp.vote.ballot",
    "warp.vote.any",
    "warp.match.any",
    "warp.redux.add",
    *(f"warp.tile{tile}.reduce" for tile in TILES),
    "warp.syncwarp",
    "warp.divergence",
    "warp.shfl.bfly.throughput",
]
DIVERGE_KERNEL = "gp_warp_diverge_lat"  # its declared unroll: the dependent IMADs on each path of its if/else
TPUT_KERNEL = "gp_warp_shfl_bfly_tput"


SECTIONS = (
    Section(
        "Warp collectives",
        ("warp.",),
        ("warp.",),
        blurb="Latency of one warp's dependent chains of shuffles, votes, matches, redux and tile reductions "
        "(cycles per collective; a tile reduction is log2(tile) shuffle + add steps), and shuffle lane results "
        "per clock per SM. Every lane's result is checked against the host's replay.",
    ),
)


@dataclass(frozen=True)
class Settings(DifferencedSettings):
    long_iterations: int = 72  # a latency sample: (72 - 8) x 32 = 2048 collectives
    throughput_threads: int = 1024  # per block, one block per SM
    throughput_short: int = 16
    throughput_long: int = 80
    seed: int = 20240917

    def __post_init__(self) -> None:
        super().__post_init__()
        Lengths(self.throughput_short, self.throughput_long, 1)
        if self.throughput_threads % LANES or not 0 < self.throughput_threads <= 1024:
            raise ValueError(f"Settings.throughput_threads: whole warps up to 1024, not {self.throughput_threads}")


# ---- the host's replay of each chain --------------------------------------------------------------
_LANE = np.arange(LANES, dtype=np.int64)


def shfl(values: np.ndarray, mode: str, b: np.ndarray, c: int) -> np.ndarray:
    """One shfl.sync of every lane (full member mask), as the PTX ISA defines it: lane j's value
    when j is within the clamp, else the lane's own."""
    segmask, cval = (c >> 8) & 31, c & 31
    max_lane = (_LANE & segmask) | (cval & ~segmask)
    bval = np.asarray(b, dtype=np.int64) & 31
    if mode == "up":
        j = _LANE - bval
        valid = j >= max_lane
    elif mode == "down":
        j = _LANE + bval
        valid = j <= max_lane
    elif mode == "bfly":
        j = _LANE ^ bval
        valid = j <= max_lane
    else:
        j = (_LANE & segmask) | (bval & ~segmask)
        valid = j <= max_lane
    return values[np.where(valid, j, _LANE)]


def ballot(values: np.ndarray, bits: np.ndarray) -> np.ndarray:
    """vote.ballot of "bit ``bits[lane]`` of my value is set": the same mask in every lane."""
    votes = (values.astype(np.uint64) >> bits.astype(np.uint64)) & np.uint64(1)
    mask = int(np.sum(votes << _LANE.astype(np.uint64)))
    return np.full(LANES, mask, dtype=np.uint64)


def match_any(values: np.ndarray) -> np.ndarray:
    """match.any: each lane gets the mask of the lanes holding its value."""
    same = values[:, None] == values[None, :]
    return (same * (np.uint64(1) << _LANE.astype(np.uint64))[None, :]).sum(axis=1).astype(np.uint64)


def tile_reduce(values: np.ndarray, tile: int, steps: int) -> np.ndarray:
    """``steps`` butterfly-add steps within tiles of ``tile`` lanes, the distance running tile/2 .. 1."""
    v = values.astype(np.uint64)
    distance = tile // 2
    for _ in range(steps):
        v = (v + v[_LANE ^ distance]) & np.uint64(FULL)
        distance = distance // 2 or tile // 2
    return v


@dataclass
class LaneChain:
    """A latency probe: its kernel, its lanes buffer, the extra scalars before ``iters``, and the
    host's prediction of every lane's final value after a given number of collectives."""

    kernel: str
    operands: np.ndarray  # 32 per-lane operands
    start: np.ndarray  # 32 starting values
    scalars: list[object]
    predict: Callable[[int], np.ndarray]
    per_fact: float = 1.0  # steps per fact unit (a tile reduction is log2(tile) steps)
    check_word: Callable[[], int] | None = None  # the extra word the kernel writes, predicted
    threads: int = LANES  # the block: the lanes that exist, each writing its final value

    @property
    def unroll(self) -> int:
        """Collectives per loop iteration, as the kernel's declaration gives them."""
        return unroll_of(self.kernel)


def _power(step: Callable[[np.ndarray], np.ndarray], start: np.ndarray, count: int) -> np.ndarray:
    value = start
    for _ in range(count):
        value = step(value)
    return value


def chain_for(probe: str, rng: np.random.Generator) -> LaneChain:
    """The operands, starting values and prediction of one latency probe."""
    words = rng.integers(0, 2**32, LANES, dtype=np.uint64)
    none = np.zeros(LANES, dtype=np.uint64)
    if probe in (f"warp.shfl.{mode}" for mode in SHFL_MODES):
        mode = probe.removeprefix("warp.shfl.")
        # idx: a random permutation; up/down/bfly: a random delta or lane mask per lane (1..31), so
        # the final values depend on every lane's own operand, not just on how many steps ran
        b = (rng.permutation(LANES) if mode == "idx" else rng.integers(1, LANES, LANES)).astype(np.uint64)
        c = 0 if mode == "up" else 31
        kernel = f"gp_warp_shfl_{mode}_lat"
        return LaneChain(kernel, b, words, [np.uint32(c)], lambda n: _power(lambda v: shfl(v, mode, b, c), words, n))
    if probe == "warp.shfl.partial":
        half = LANES // 2
        b = np.concatenate([rng.permutation(half), np.zeros(half, dtype=np.int64)]).astype(np.uint64)

        def partial_chain(n: int) -> np.ndarray:  # lanes 16..31 do not exist: only 0..15 are replayed
            return _power(lambda v: v[b[:half].astype(np.int64)], words[:half], n)

        return LaneChain("gp_warp_shfl_partial_lat", b, words, [], partial_chain, threads=half)
    if probe == "warp.vote.ballot":
        bits = rng.permutation(LANES).astype(np.uint64)
        start = np.full(LANES, words[0], dtype=np.uint64)
        return LaneChain("gp_warp_ballot_lat", bits, start, [], lambda n: _power(lambda v: ballot(v, bits), start, n))
    if probe == "warp.vote.any":
        lane = int(rng.integers(0, LANES))
        start = np.full(LANES, lane, dtype=np.uint64)

        def any_chain(n: int) -> np.ndarray:  # the first vote is true everywhere, then it flips
            return np.full(LANES, 1 if n % 2 else 0, dtype=np.uint64)

        return LaneChain("gp_warp_vote_any_lat", none, start, [], any_chain)
    if probe == "warp.match.any":
        groups = (rng.integers(0, 5, LANES).astype(np.uint64) * np.uint64(0x9E3779B1)) & np.uint64(FULL)
        return LaneChain("gp_warp_match_any_lat", none, groups, [], lambda n: _power(match_any, groups, n))
    if probe == "warp.redux.add":
        total = int(np.sum(words)) & FULL

        def redux_chain(n: int) -> np.ndarray:
            return np.full(LANES, _power(lambda s: (s * LANES) & FULL, total, n - 1), dtype=np.uint64)

        return LaneChain("gp_warp_redux_add_lat", none, words, [], redux_chain, check_word=lambda: total)
    if probe.startswith("warp.tile") and probe.endswith(".reduce"):
        tile = int(probe.removeprefix("warp.tile").removesuffix(".reduce"))
        return LaneChain(
            "gp_warp_tile_reduce_lat",
            none,
            words,
            [np.uint32(tile)],
            lambda n: tile_reduce(words, tile, n),
            per_fact=1.0 / math.log2(tile),
        )
    if probe == "warp.syncwarp":
        return LaneChain("gp_warp_syncwarp_lat", none, words, [], lambda n: words[_LANE ^ 1])
    raise ValueError(f"no latency chain for {probe}")


_FACTS = {
    **{f"warp.shfl.{mode}": f"warp.shfl.{mode}.latency" for mode in SHFL_MODES},
    "warp.shfl.partial": "warp.shfl.partial.latency",
    "warp.vote.ballot": "warp.vote.ballot.latency",
    "warp.vote.any": "warp.vote.any.latency",
    "warp.match.any": "warp.match.any.latency",
    "warp.redux.add": "warp.redux.add.latency",
    **{f"warp.tile{tile}.reduce": f"warp.tile.reduce.latency.{tile}" for tile in TILES},
    "warp.syncwarp": "warp.syncwarp.latency",
}


def check_lanes(kernel: str, got: np.ndarray, expected: np.ndarray, steps: int) -> None:
    """Every lane's final value is the host's; else a ProbeFailure naming the first wrong lane."""
    wrong = np.flatnonzero(got.astype(np.uint64) != expected.astype(np.uint64))
    if wrong.size:
        lane = int(wrong[0])
        raise ProbeFailure(
            f"{kernel}: after {steps} steps lane {lane} holds {int(got[lane]):#x}, the host predicts "
            f"{int(expected[lane]):#x} ({wrong.size} of {len(expected)} lanes wrong)"
        )


def chain_launch(request: Request, chain: LaneChain) -> Callable[[int], float]:
    """``launch(iterations)``: one launch of ``chain``'s kernel, every lane's end (and the check word)
    held to the host's replay; the cycles of its timed loop."""
    lanes = request.launcher.upload(np.concatenate([chain.operands, chain.start]).astype(np.uint32))
    out = request.outputs.get(OUT_WORDS)
    words = OUT_WORDS if chain.check_word else 1 + chain.threads
    unroll = chain.unroll
    predicted: dict[int, np.ndarray] = {}  # the host's replay of each chain length, once

    def launch(iterations: int) -> float:
        args = [lanes, *chain.scalars, np.uint32(iterations), out]
        values = request.kernels.results(chain.kernel, args, out, words, block=chain.threads)
        steps = iterations * unroll
        if steps not in predicted:
            predicted[steps] = chain.predict(steps)
        check_lanes(chain.kernel, values[1 : 1 + chain.threads], predicted[steps], steps)
        if chain.check_word and int(values[-1]) != chain.check_word():
            first, host = int(values[-1]), chain.check_word()
            raise ProbeFailure(f"{chain.kernel}: the first sum is {first:#x}, the host's {host:#x}")
        return float(values[0])

    return launch


def measure_chain(request: Request, settings: Settings, rng: np.random.Generator, probe: str) -> Measured:
    chain = chain_for(probe, rng)
    launch = chain_launch(request, chain)
    samples = Difference(launch, settings.lengths(chain.unroll), chain.kernel).samples(settings.sampling)
    scaled = [s / chain.per_fact for s in samples]
    return Measured(probe, ProbeOutcome("ok"), [fact(_FACTS[probe], scaled, "cycle", probe)])


# ---- divergence ------------------------------------------------------------------------------------
def diverge_values(multipliers: np.ndarray, starts: np.ndarray, split: int, steps: int) -> np.ndarray:
    """Each lane's x after ``steps`` steps of x = x * m + (1 below ``split``, else 2), mod 2^32."""
    x, m = starts.astype(np.uint64), multipliers.astype(np.uint64)
    add = np.where(np.arange(LANES) < split, 1, 2).astype(np.uint64)
    for _ in range(steps):
        x = (x * m + add) & np.uint64(FULL)  # both factors below 2^32: the product fits 64 bits
    return x


def measure_divergence(request: Request, settings: Settings, rng: np.random.Generator) -> Measured:
    """Cycles per iteration with the warp on one path (split 32) and split in two (16): the paths of a
    divergent branch run one after the other, and the difference is what the divergence costs."""
    probe, kernel, path_steps = "warp.divergence", DIVERGE_KERNEL, unroll_of(DIVERGE_KERNEL)
    multipliers = rng.integers(0, 2**32, LANES, dtype=np.uint64) | np.uint64(1)  # odd: no lane collapses
    starts = rng.integers(0, 2**32, LANES, dtype=np.uint64)
    lanes = request.launcher.upload(np.concatenate([multipliers, starts]).astype(np.uint32))
    out = request.outputs.get(OUT_WORDS)
    per_iteration = settings.lengths(1)

    def cycles_per_iteration(split: int) -> list[float]:
        def launch(iterations: int) -> float:
            args = [lanes, np.uint32(split), np.uint32(iterations), out]
            values = request.kernels.results(kernel, args, out, 1 + LANES, block=LANES)
            steps = iterations * path_steps
            check_lanes(kernel, values[1 : 1 + LANES], diverge_values(multipliers, starts, split, steps), steps)
            return float(values[0])

        return Difference(launch, per_iteration, f"{kernel} (split {split})").samples(settings.sampling)

    uniform, divergent = cycles_per_iteration(LANES), cycles_per_iteration(LANES // 2)
    facts = [
        fact("warp.divergence.uniform", uniform, "cycle", probe),
        fact("warp.divergence.divergent", divergent, "cycle", probe),
        fact("warp.divergence.cost", [d - u for d in divergent for u in uniform], "cycle", probe),
    ]
    note = (f"cycles per iteration of an if/else of two {path_steps}-IMAD paths: {facts[0].value:.0f} with "
            f"the warp on one path, {facts[1].value:.0f} split over both")  # fmt: skip
    return Measured(probe, ProbeOutcome("ok", note), facts)


# ---- throughput ------------------------------------------------------------------------------------
def throughput_values(blocks: int, threads: int, iterations: int) -> np.ndarray:
    """What each thread of the throughput kernel writes: the sum of its 4 chains, mod 2^32."""
    flip = 0
    for mask in TPUT_MASKS * iterations:
        flip ^= mask
    thread = np.arange(blocks * threads, dtype=np.int64)
    source = (thread & ~31) | ((thread & 31) ^ flip)
    return ((TPUT_CHAINS * TPUT_CHAINS * source + sum(range(TPUT_CHAINS))) & FULL).astype(np.uint64)


def sm_spans(timing: np.ndarray) -> dict[int, tuple[float, int]]:
    """Per SM: (last end minus first start, warps) from the per-warp [start, end, SM id] records."""
    spans: dict[int, tuple[float, int]] = {}
    for sm in np.unique(timing[:, 2]):
        rows = timing[timing[:, 2] == sm]
        spans[int(sm)] = (float(rows[:, 1].max()) - float(rows[:, 0].min()), len(rows))
    return spans


def measure_throughput(request: Request, settings: Settings) -> Measured:
    s = settings
    blocks, threads = request.device.sm_count, s.throughput_threads
    warps = blocks * threads // LANES
    count = 3 * warps + blocks * threads
    out = request.outputs.get(count)
    spans: dict[int, tuple[float, int]] = {}  # the last long launch's, per SM, for the series

    def launch(iterations: int) -> dict[int, tuple[float, int]]:
        args = [np.uint32(iterations), out]
        values = request.kernels.results(TPUT_KERNEL, args, out, count, grid=blocks, block=threads)
        expected = throughput_values(blocks, threads, iterations)
        wrong = np.flatnonzero(values[3 * warps :] != expected)
        if wrong.size:
            thread = int(wrong[0])
            raise ProbeFailure(
                f"gp_warp_shfl_bfly_tput: thread {thread} summed {int(values[3 * warps + thread])}, "
                f"the host predicts {int(expected[thread])} ({wrong.size} threads wrong)"
            )
        timing = values[: 3 * warps].reshape(warps, 3).astype(np.int64)
        if np.any(timing[:, 1] <= timing[:, 0]):
            raise ProbeFailure("gp_warp_shfl_bfly_tput: a warp's clock did not advance over its loop")
        return sm_spans(timing)

    def summed_spans(iterations: int) -> float:
        """Every SM's span, summed: over every SM's lane operations, the cycles an SM takes per operation."""
        spans.clear()
        spans.update(launch(iterations))
        return sum(span for span, _ in spans.values())

    lengths = Lengths(s.throughput_short, s.throughput_long, unroll_of(TPUT_KERNEL) * LANES * warps)
    per_op = Difference(summed_spans, lengths, TPUT_KERNEL).samples(s.sampling)
    samples = [1.0 / cycles for cycles in per_op]  # lane operations per clock per SM
    series = {"per_sm": {"sm": [float(k) for k in spans], "span_cycles": [span for span, _ in spans.values()]}}
    facts = [fact("warp.shfl.bfly.throughput", samples, "op/clk/SM", "warp.shfl.bfly.throughput")]
    return Measured("warp.shfl.bfly.throughput", ProbeOutcome("ok", f"{len(spans)} SMs", series), facts)


# ---- the time plan ---------------------------------------------------------------------------------
COLLECTIVE_CYCLES = 200.0  # one collective of a latency chain at most (shuffles ~25 cycles, match.any more)
DIVERGED_STEP_CYCLES = 20.0  # one IMAD of the divergence kernel's paths, both paths counted, at most
REPLAY_STEP_S = 20e-6  # the host's replay of one collective of 32 lanes (NumPy, up to 14 us measured)


def plan(settings: Settings, device: Device) -> Plan:
    """Every probe at its most repeats (see :mod:`gpuprobe.families.planning`): each latency chain
    replayed once per length on the host; the throughput kernel at one warp shuffle per clock per SM."""
    s, repeats = settings, settings.sampling.max_repeats

    def chain(name: str) -> Plan:
        unroll = unroll_of(find_probe(name).kernel)
        replay = (s.short_iterations + s.long_iterations) * unroll * REPLAY_STEP_S
        return probe(samples_plan(s, device, COLLECTIVE_CYCLES, unroll), Plan(0, 0, 0.0, replay))

    both_paths = 2 * unroll_of(DIVERGE_KERNEL)  # per iteration, one path after the other
    divergence = probe(*(samples_plan(s, device, DIVERGED_STEP_CYCLES, both_paths) for _ in range(2)))
    warps = s.throughput_threads // LANES
    shuffles = repeats * (s.throughput_short + s.throughput_long) * unroll_of(TPUT_KERNEL) * TPUT_CHAINS * warps
    launches, threads = 2 * repeats, s.throughput_threads * device.sm_count
    read_back = launches * (3 * warps * device.sm_count + threads) * 8
    gpu_s = cycles_s(shuffles, device) + link_s(read_back, pinned=False)
    throughput = probe(kernel_runs(launches, gpu_s, launches * threads * HOST_CHECK_THREAD_S))
    return sum([*(chain(name) for name in _FACTS), divergence], throughput)


# A first contact: one shuffle chain (every lane's end replayed on the host), one sample.
SMOKE = Smoke(probes=("warp.shfl.idx",), settings=Settings(**SMOKE_SAMPLING))


def measure(request: Request) -> Probes:
    """The family's runnable probes in order, each as (name, step); ``state`` is not used: every probe is
    self-contained."""
    settings = request.settings or Settings()
    rng = np.random.default_rng(settings.seed)
    steps: dict[str, Callable[[], Measured]] = {
        name: functools.partial(measure_chain, request, settings, rng, name) for name in _FACTS
    }
    steps["warp.divergence"] = functools.partial(measure_divergence, request, settings, rng)
    steps["warp.shfl.bfly.throughput"] = functools.partial(measure_throughput, request, settings)
    return probe_steps(PROBES, steps, request.runnable)


def tile_reduce_grows(facts: dict[str, Fact], device: Device) -> list[Check]:
    """A reduction over a larger tile takes more steps (log2 of the tile), so it costs no less."""
    ordered = [(str(tile), f"warp.tile.reduce.latency.{tile}") for tile in TILES]
    return non_decreasing(facts, ordered, "tile_reduce_grows")


def divergence_costs(facts: dict[str, Fact], device: Device) -> list[Check]:
    """A warp split over both paths of a branch runs them one after the other: it costs no less."""
    return pair_not_below(facts, "divergence_costs", "warp.divergence.uniform", "warp.divergence.divergent")


INVARIANTS = (tile_reduce_grows, divergence_costs)


FAMILY = Family(
    name="warp",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
    sections=SECTIONS,
    invariants=INVARIANTS,
)
