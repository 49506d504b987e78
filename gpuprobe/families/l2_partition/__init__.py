"""The L2-partition family: which L2 lines are near which SMs, from first-touch load latencies.

One probe, ``l2_partition.map``. Each round:

1. flush the L2 (a write through a scratch buffer of twice its size), then write the probe lines
   whole (a memset, then the chain's pointers): each then sits in its home L2 slice, and no SM has
   read it (split-L2 parts keep a copy of a far
   line near the SM that read it, which would hide the far latency from every later read);
2. launch one block per SM (more than half an SM's shared memory each, cooperative, so every SM
   runs exactly one): block b chases the 17-line cycle of group (b + round) mod groups, 16
   dependent ld.global.cg with a clock read after each, so 15 intervals are the latencies of 15
   lines read for the first time.

Groups rotate across blocks from round to round, so each line is read by ``rounds`` SMs and each SM
reads ``rounds`` x 15 lines. Every launch is checked: each chain ends on the line the host
predicts, every block ran on an SM of its own (by %smid: the PTX ISA does not promise SM ids 0 to
SM count - 1, and parts with disabled SMs number them with gaps, so ids are only compared, never used
as indices), and the loads waited for each other (every interval exceeds the issue-only first one).

Every reading is kept (series ``readings``: SM id, line, round, cycles; series ``layout``: the
buffer's base address and line size, line i at base + i x line_bytes), so a run can be analysed
again from its results file.

:func:`partition_map` reads the map: the latencies split into a fast and a slow cluster (two-means
on their logarithms); each SM's fast/slow pattern over lines gives the SM sides and each line's home
(the side it is fast from), fitted to explain the most readings. Whether that fit is evidence of a
split is judged against the best single-factor explanation, never against a fixed bar: see
:func:`partition_map`. :func:`plan` counts what the map costs at most, from the settings alone.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from gpuprobe.core.results import Device, Fact, ProbeOutcome, Results
from gpuprobe.families.base import Measured, Plan, ProbeFailure, Probes, Request, Smoke
from gpuprobe.families.chain import random_cycle
from gpuprobe.families.measuring import Kernels, fact, unmeasured
from gpuprobe.families.planning import KERNEL_RUN_CALLS, dram_s
from gpuprobe.output.plots import new_figure, png_bytes
from gpuprobe.output.sections import Plot, Section
from gpuprobe.runner.gpu import Launcher

PROBE = "l2_partition.map"
KERNEL = "gp_l2p_touch"
LOADS = 16  # loads per chain, each followed by a clock read: fixed by the PTX
TIMED = LOADS - 1  # intervals that time a load (the last load's latency is not timed)
GROUP_LINES = LOADS + 1  # each group's cycle: the lines read, and the one the chain ends on
RECORD_WORDS = LOADS + 3  # per block: 17 clock readings, end address, SM id
BLOCK = 32  # one warp; thread 0 chases


@dataclass(frozen=True)
class Settings:
    rounds: int = 16  # each line is read by this many SMs; each SM reads 15 x this many lines
    line_bytes: int = 128
    flush_l2_multiple: float = 2.0
    split_ratio: float = 1.3  # the slow cluster's median over the fast one's, at least, for a split
    min_cluster_fraction: float = 0.15  # each cluster holds at least this share of the readings
    # The side x home fit removes at least this share of the errors the best single-factor model
    # (each line, or each SM, fast or slow throughout) leaves, for a split; at most ``no_interaction``
    # of them (or no more than it removes from shuffled readings) is one partition; between, undecided.
    min_interaction: float = 0.5
    no_interaction: float = 0.25
    chance_shuffles: int = 4  # fits to shuffled readings that measure what the fit gains by chance
    heatmap_bins: int = 48  # address groups (columns) of the heatmap
    seed: int = 20240917

    def __post_init__(self) -> None:
        if self.rounds < 2 or self.line_bytes < 8 or self.line_bytes % 8 or self.heatmap_bins < 1:
            raise ValueError("Settings: rounds >= 2, line_bytes a multiple of 8, heatmap_bins >= 1")
        if self.flush_l2_multiple < 1.0 or self.split_ratio <= 1.0:
            raise ValueError("Settings: flush_l2_multiple >= 1, split_ratio > 1")
        if not 0.0 <= self.no_interaction < self.min_interaction < 1.0 or self.chance_shuffles < 1:
            raise ValueError("Settings: 0 <= no_interaction < min_interaction < 1, chance_shuffles >= 1")


# ---- the plan: lines, groups, chains ---------------------------------------------------------------


@dataclass(frozen=True)
class Layout:
    """The probe lines: ``groups`` cycles of GROUP_LINES lines, one after another, then a zero word."""

    groups: int
    line_bytes: int
    order: np.ndarray  # (groups, GROUP_LINES): the lines of each group's cycle, in chase order
    successor: np.ndarray  # per line (global index): the next line of its cycle

    @property
    def group_bytes(self) -> int:
        return GROUP_LINES * self.line_bytes

    @property
    def lines(self) -> int:
        return self.groups * GROUP_LINES

    @property
    def nbytes(self) -> int:
        return self.lines * self.line_bytes + self.line_bytes  # the zero word's line at the end

    def timed_lines(self, group: int) -> np.ndarray:
        """The lines whose latencies a chase of ``group`` times, in order."""
        return self.order[group, :TIMED]

    def end_line(self, group: int) -> int:
        return int(self.order[group, LOADS])


def plan_layout(groups: int, settings: Settings) -> Layout:
    """One random cycle per group, each starting at the group's first line (where the kernel starts)."""
    order = np.empty((groups, GROUP_LINES), dtype=np.int64)
    successor = np.empty(groups * GROUP_LINES, dtype=np.int64)
    for group in range(groups):
        chain = random_cycle(GROUP_LINES, settings.seed + group)
        first = group * GROUP_LINES
        order[group] = first + chain.order
        successor[first : first + GROUP_LINES] = first + chain.successor
    return Layout(groups, settings.line_bytes, order, successor)


def group_of(block: int, round_: int, groups: int) -> int:
    """The group block ``block`` chases in round ``round_`` (as the kernel computes it)."""
    return (block + round_) % groups


def block_shared_bytes(device: Device) -> int:
    """Dynamic shared memory per block that leaves room for one block per SM only."""
    per_sm = device.shared_per_sm_bytes
    if not per_sm:
        raise ProbeFailure("the device reports no shared memory per SM: cannot place one block per SM")
    wanted = (per_sm // 2 + 1024) & ~1023
    limit = device.shared_per_block_optin_bytes or per_sm
    if wanted > limit:
        raise ProbeFailure(f"{wanted} bytes of shared memory per block exceed the {limit} a block may have")
    return wanted


# ---- one launch: checked readings ----------------------------------------------------------------


@dataclass
class Readings:
    """First-touch latencies: one row per reading (SM id, line, cycles, and the round it was read in)."""

    sm: list[int]
    line: list[int]
    cycles: list[float]
    round: list[int] = field(default_factory=list)

    def extend(self, sm: int, lines: np.ndarray, cycles: np.ndarray, round_: int = 0) -> None:
        self.sm += [sm] * len(lines)
        self.line += [int(x) for x in lines]
        self.cycles += [float(x) for x in cycles]
        self.round += [round_] * len(lines)

    def series(self) -> dict[str, list[float]]:
        """Every reading, as the results file keeps it: enough to run :func:`partition_map` again."""
        return {
            "sm_id": [float(x) for x in self.sm],
            "line": [float(x) for x in self.line],
            "round": [float(x) for x in self.round],
            "cycles": list(self.cycles),
        }

    @classmethod
    def from_series(cls, series: dict[str, list[float]]) -> Readings:
        """The readings a results file's ``readings`` series holds (as :meth:`series` wrote them)."""
        count = len(series["cycles"])
        columns = [series["sm_id"], series["line"], series.get("round", [0.0] * count)]
        if any(len(column) != count for column in columns):
            raise ValueError("readings series: columns of different lengths")
        sm, line, round_ = ([int(x) for x in column] for column in columns)
        return cls(sm, line, [float(x) for x in series["cycles"]], round_)


def check_launch(records: np.ndarray, layout: Layout, base: int, round_: int, sm_count: int) -> None:
    """The launch's records (blocks x RECORD_WORDS): chains ended where predicted, every SM ran one
    block (``sm_count`` blocks on as many distinct SM ids, whatever the ids), and the loads waited for
    each other."""
    blocks = len(records)
    sms = records[:, RECORD_WORDS - 1] & 0xFFFFFFFF
    if len(set(sms.tolist())) != blocks or blocks != sm_count:
        raise ProbeFailure(
            f"{KERNEL}: {blocks} blocks ran on {len(set(sms.tolist()))} distinct SMs of {sm_count}: "
            "not one block on every SM"
        )
    for block in range(blocks):
        group = group_of(block, round_, layout.groups)
        want = base + layout.end_line(group) * layout.line_bytes
        if int(records[block, LOADS + 1]) != want:
            raise ProbeFailure(
                f"{KERNEL}: block {block}'s chase of group {group} ended at {int(records[block, LOADS + 1]):#x}, "
                f"host predicted {want:#x}"
            )
    intervals = np.diff(records[:, : LOADS + 1].astype(np.int64), axis=1)
    issue, latencies = intervals[:, :1], intervals[:, 1:]
    if np.any(latencies <= issue):
        raise ProbeFailure(
            f"{KERNEL}: an interval of {int(latencies.min())} cycles is no longer than the issue-only "
            f"first one ({int(issue.max())}): the clock reads did not wait for the loads"
        )


# ---- the analysis --------------------------------------------------------------------------------


def two_means_threshold(values: np.ndarray) -> float:
    """The cut between two clusters of 1-D values that minimizes the within-cluster squared error."""
    x = np.sort(np.asarray(values, dtype=np.float64))
    n = len(x)
    if n < 2:
        return float(x[0]) if n else 0.0
    total, total_sq = np.cumsum(x), np.cumsum(x * x)
    k = np.arange(1, n)  # left cluster sizes
    left = total_sq[:-1] - total[:-1] ** 2 / k
    right_sum, right_sq = total[-1] - total[:-1], total_sq[-1] - total_sq[:-1]
    right = right_sq - right_sum**2 / (n - k)
    best = int(np.argmin(left + right))
    return float((x[best] + x[best + 1]) / 2)


STALL_FACTOR = 4.0  # a reading this many times the median (or less) is no L2 hit: far L2 is ~1.7x near, DRAM ~2.5x


def split_latencies(cycles: np.ndarray) -> tuple[np.ndarray, float]:
    """Each reading fast or slow, and the slow cluster's median over the fast one's.

    The cut is two-means on the logarithms, each first held within STALL_FACTOR of the median:
    latencies are told apart by their ratio (the split criterion is one), and a reading stalled a
    thousandfold (a preemption) stays slow without weighing in by its size. On the raw scale one such
    reading among 31680 outweighs the whole near/far difference and takes the slow cluster for itself,
    leaving near and far together in the fast one: the more readings, the likelier."""
    if not len(cycles):
        return np.zeros(0, dtype=bool), 1.0
    logs = np.log(np.maximum(cycles, 1.0))
    middle, reach = float(np.median(logs)), float(np.log(STALL_FACTOR))
    held = np.clip(logs, middle - reach, middle + reach)
    fast = held <= two_means_threshold(held)
    share = float(np.mean(fast))
    ratio = float(np.median(cycles[~fast]) / np.median(cycles[fast])) if 0 < share < 1 else 1.0
    return fast, ratio


def _sign(values: np.ndarray) -> np.ndarray:
    """+1 where ``values`` >= 0, else -1 (ties go to +1, so every step of the fit is deterministic)."""
    return np.where(values >= 0, 1.0, -1.0)


def _ascend(
    vote: np.ndarray, sm_index: np.ndarray, line_index: np.ndarray, side: np.ndarray, lines: int, max_steps: int = 100
) -> tuple[np.ndarray, np.ndarray]:
    """From ``side``: each line takes the home most of its readings vote for and each SM the side most
    of its readings vote for, in turn, until no SM moves (no step explains fewer readings)."""
    for _ in range(max_steps):
        home = _sign(np.bincount(line_index, vote * side[sm_index], lines))
        moved = _sign(np.bincount(sm_index, vote * home[line_index], len(side)))
        if np.array_equal(moved, side):
            break
        side = moved
    return side, _sign(np.bincount(line_index, vote * side[sm_index], lines))


def fit_sides(
    fast: np.ndarray, sm_index: np.ndarray, line_index: np.ndarray, sms: int, lines: int
) -> tuple[np.ndarray, np.ndarray]:
    """SM sides and line homes (each +1 or -1) that explain the most readings, fast meaning near.

    Alternating majorities (:func:`_ascend`) from three starts, the best kept: the sign of the leading
    eigenvector of the SMs' agreement matrix (a relaxation of the problem), every SM on one side (the
    single-factor line model), and every SM on the side of its own majority (the single-factor SM
    model). The model holds both single-factor ones, so the fit never explains less than they do,
    even in a sparse map (two rounds: every line read by two SMs) where the eigenvector is poorly
    determined and alternation alone stops short."""
    vote = np.where(fast, 1.0, -1.0)
    agree = np.zeros((sms, lines))
    np.add.at(agree, (sm_index, line_index), vote)
    _, vectors = np.linalg.eigh(agree @ agree.T)
    starts = [_sign(vectors[:, -1]), np.ones(sms), _sign(np.bincount(sm_index, vote, sms))]
    fits = [_ascend(vote, sm_index, line_index, start, lines) for start in starts]
    explained = [np.sum(side[sm_index] * home[line_index] * vote > 0) for side, home in fits]
    return fits[int(np.argmax(explained))]


def majority_share(fast: np.ndarray, index: np.ndarray, groups: int) -> float:
    """The share of readings explained when each group (a line, or an SM) is fast or slow throughout."""
    if not len(fast):
        return 1.0
    count = np.bincount(index, minlength=groups)
    fast_count = np.bincount(index, fast.astype(np.float64), groups)
    return float(np.sum(np.maximum(fast_count, count - fast_count)) / len(fast))


@dataclass(frozen=True)
class Evidence:
    """One side x home fit to the readings' fast/slow labels, and how well it explains them."""

    side: np.ndarray  # per SM: +1 or -1
    home: np.ndarray  # per line: the side (+1 or -1) it is near
    consistency: float  # share of readings the fit explains (fast = near)
    one_factor: float  # share the better single-factor model explains: lines, or SMs, fast or slow throughout
    interaction: float  # share of the single-factor model's errors the fit removes (1: all, 0: none)


def evidence(fast: np.ndarray, sm_index: np.ndarray, line_index: np.ndarray, sms: int, lines: int) -> Evidence:
    """Fit sides and homes to ``fast`` and weigh the fit against the better single-factor model."""
    side, home = fit_sides(fast, sm_index, line_index, sms, lines)
    consistency = float(np.mean((side[sm_index] * home[line_index] > 0) == fast)) if len(fast) else 1.0
    one_factor = max(majority_share(fast, line_index, lines), majority_share(fast, sm_index, sms))
    interaction = (consistency - one_factor) / (1.0 - one_factor) if one_factor < 1.0 else 0.0
    return Evidence(side, home, consistency, one_factor, interaction)


def chance_interaction(
    fast: np.ndarray, sm_index: np.ndarray, line_index: np.ndarray, sms: int, lines: int, settings: Settings
) -> float:
    """The most the fit's interaction reaches on the readings' labels shuffled over the readings
    (``settings.chance_shuffles`` times, seeded): what fitting sides and homes gains by chance on this
    very design (which SM read which line, how often) at this fast share."""
    rng = np.random.default_rng(settings.seed)
    shuffled = (rng.permutation(fast) for _ in range(settings.chance_shuffles))
    return max(evidence(labels, sm_index, line_index, sms, lines).interaction for labels in shuffled)


def decide(clustered: bool, interaction: float, chance: float, settings: Settings) -> tuple[int | None, str]:
    """The partition count (None: undecided) and why, from the rule :func:`partition_map` states."""
    if not clustered:
        return 1, "no two latency clusters (each a substantial share, the slow one clearly slower)"
    floor = max(settings.no_interaction, chance)
    if interaction <= floor:
        return 1, "two latency clusters, but lines or SMs alone explain them, not a side x home pattern"
    if interaction >= settings.min_interaction:
        return 2, "a side x home pattern explains the two latency clusters"
    return None, "a side x home pattern, but too weak to call the L2 split"


@dataclass(frozen=True)
class PartitionMap:
    """What the readings say: partition count, each SM's side, each line's home, and the latencies."""

    partitions: int | None  # 1 or 2; None where the readings cannot decide
    sms: np.ndarray  # SM ids seen
    side: np.ndarray  # per SM in ``sms``: 0 or 1
    lines: np.ndarray  # line ids seen
    home: np.ndarray  # per line in ``lines``: the side it is near (0 or 1)
    near: np.ndarray  # per reading: predicted near
    consistency: float  # share of readings the side x home model predicts (fast = near)
    fast_fraction: float  # share of readings in the fast cluster
    ratio: float  # slow cluster's median over the fast one's
    one_factor: float = 0.0  # share of readings the better single-factor model predicts
    interaction: float = 0.0  # share of that model's errors the side x home model removes
    chance: float = 0.0  # the most ``interaction`` reached on shuffled readings
    reason: str = ""  # why the count is what it is


def partition_map(readings: Readings, settings: Settings) -> PartitionMap:
    """Cluster the readings into near and far, find which SMs are near which lines, and decide.

    A split L2 shows as an interaction: each line is fast from the SMs of one side and slow from the
    others, so each SM is fast on the lines homed on its side and slow on the rest. The share of
    readings the side x home fit explains (``consistency``) is no measure of that on its own, and no
    fixed bar on it can decide, for two reasons an H200 showed (reports/nvidia-h200):

    1. The fit chooses a home for every line, so it explains readings by chance, the more the fewer
       readings each line has: shuffled labels reach ~80% with two rounds (each line read by two
       SMs) and ~64% with sixteen. A line fast from both of its two readers looks like a line homed
       on the side of two SMs of one side, so whatever makes far lines read fast is absorbed with
       two rounds and exposed with sixteen.
    2. Real readings hold what no two-sided model explains: 62% of the H200's were fast where near-
       even sides and homes give half (address groups fast from every SM that read them, SMs fast on
       every line). So the consistency does not tend to 1 as readings grow.

    The same part read 98% in the smoke run (3960 readings) and 89% in the full one (31680), and the
    old bar of 90% fell between them. The fit is weighed instead against the better single-factor
    model, fitted to the same readings with the same per-line freedom: each line fast or slow for
    every SM (lines missing L2, lines near everywhere), or each SM fast or slow on every line (a slow
    GPC). ``interaction`` is the share of that model's errors the side x home fit removes: 1 on a
    clean split, 0 where one factor explains all there is, comparable across reading counts.

    Two partitions: two latency clusters (each at least ``min_cluster_fraction`` of the readings,
    the slow one at least ``split_ratio`` slower) and an interaction of at least ``min_interaction``
    (a half: the two-sided pattern accounts for most of what one factor leaves unexplained). One:
    one cluster, or an interaction of at most ``no_interaction`` or of no more than the same fit
    reaches on the labels shuffled over the readings (:func:`chance_interaction`, measured on this
    very design): the clusters then belong to lines or SMs, not to a pairing of sides and homes. A
    quarter is above what shuffled labels reach in the sparsest map this probe makes (two rounds:
    up to ~0.2). In between, the readings cannot decide, and the count is None, not a guess.
    """
    cycles = np.asarray(readings.cycles, dtype=np.float64)
    sms, sm_index = np.unique(np.asarray(readings.sm), return_inverse=True)
    lines, line_index = np.unique(np.asarray(readings.line), return_inverse=True)
    fast, ratio = split_latencies(cycles)
    fast_fraction = float(np.mean(fast))
    found = evidence(fast, sm_index, line_index, len(sms), len(lines))
    chance = chance_interaction(fast, sm_index, line_index, len(sms), len(lines), settings)
    clustered = min(fast_fraction, 1 - fast_fraction) >= settings.min_cluster_fraction and ratio >= settings.split_ratio
    partitions, reason = decide(clustered, found.interaction, chance, settings)
    scores = (found.consistency, fast_fraction, ratio, found.one_factor, found.interaction, chance, reason)
    if partitions == 1:
        zeros_sm, zeros_line = np.zeros(len(sms), dtype=np.int64), np.zeros(len(lines), dtype=np.int64)
        return PartitionMap(1, sms, zeros_sm, lines, zeros_line, np.ones(len(cycles), bool), *scores)
    side, home = (found.side < 0).astype(np.int64), (found.home < 0).astype(np.int64)
    near = found.side[sm_index] * found.home[line_index] > 0
    return PartitionMap(partitions, sms, side, lines, home, near, *scores)


def _per_sm(readings: Readings, chosen: np.ndarray, reduce: Callable[[np.ndarray], float]) -> list[float]:
    sm = np.asarray(readings.sm)
    cycles = np.asarray(readings.cycles, dtype=np.float64)
    return [reduce(cycles[(sm == s) & chosen]) for s in np.unique(sm) if np.any((sm == s) & chosen)]


def _single(fact_id: str, value: float, unit: str) -> Fact:
    return Fact(fact_id, value, unit, (value, value), [value], {}, PROBE)


def map_facts(readings: Readings, result: PartitionMap, sm_count: int) -> list[Fact]:
    """Near and far latency (medians over SMs of each SM's median), partition count, shares. Where the
    readings cannot decide, what depends on the count (near latency, the count, the near share) is
    recorded without a value, with the reason, rather than as a guess."""
    if result.partitions is None:
        why = f"the map is undecided: {map_summary(readings, result)}"
        return [
            unmeasured("l2.near_latency", "cycle", PROBE, why),
            unmeasured("l2.partition_count", "count", PROBE, why),
            unmeasured("l2.near_line_fraction", "fraction", PROBE, why),
            _single("l2.partition_consistency", result.consistency, "fraction"),
        ]
    near = result.near
    facts = [
        fact("l2.near_latency", _per_sm(readings, near, lambda c: float(np.median(c))), "cycle", PROBE),
        _single("l2.partition_count", float(result.partitions), "count"),
    ]
    sm = np.asarray(readings.sm)
    fractions = [float(np.mean(near[sm == s])) for s in result.sms]
    facts.append(fact("l2.near_line_fraction", fractions, "fraction", PROBE))
    if result.partitions == 2:
        facts.insert(1, fact("l2.far_latency", _per_sm(readings, ~near, lambda c: float(np.median(c))), "cycle", PROBE))
        minor = min(int(np.sum(result.side == 0)), int(np.sum(result.side == 1)))
        facts.append(_single("l2.partition_sm_fraction", minor / sm_count, "fraction"))
    facts.append(_single("l2.partition_consistency", result.consistency, "fraction"))
    return facts


def map_summary(readings: Readings, result: PartitionMap) -> str:
    """One line on the readings and the evidence behind the count (the probe's detail)."""
    count = "undecided" if result.partitions is None else f"{result.partitions} partition(s)"
    return (
        f"{count}: {len(readings.cycles)} first-touch readings, fast cluster {result.fast_fraction:.0%}, "
        f"slow/fast {result.ratio:.2f}, side x home model explains {result.consistency:.0%} "
        f"(one factor alone {result.one_factor:.0%}; it removes {result.interaction:.0%} of one factor's errors, "
        f"{result.chance:.0%} on shuffled readings): {result.reason}"
    )


def heatmap_series(readings: Readings, result: PartitionMap, bins: int) -> dict[str, list[float]]:
    """SM x address-group median latency, long format: lines ordered by home then id, cut into bins;
    SMs ordered by side then id (the plot keeps that order)."""
    line_order = np.lexsort((result.lines, result.home))
    bin_of_line = np.empty(len(result.lines), dtype=np.int64)
    bin_of_line[line_order] = np.arange(len(result.lines)) * bins // max(len(result.lines), 1)
    line_bin = bin_of_line[np.searchsorted(result.lines, np.asarray(readings.line))]
    by_rank = np.lexsort((result.sms, result.side))  # positions in ``result.sms`` (sorted ids), by side then id
    sm_by_rank = result.sms[by_rank]
    rank = np.empty(len(by_rank), dtype=np.int64)
    rank[by_rank] = np.arange(len(by_rank))
    cycles = np.asarray(readings.cycles, dtype=np.float64)
    cell = rank[np.searchsorted(result.sms, np.asarray(readings.sm))] * bins + line_bin
    order = np.lexsort((cycles, cell))  # by cell, and by latency within a cell
    cells, first, count = np.unique(cell[order], return_index=True, return_counts=True)
    sorted_cycles = cycles[order]
    median = (sorted_cycles[first + (count - 1) // 2] + sorted_cycles[first + count // 2]) / 2
    cell_rank = cells // bins
    return {
        "sm_rank": [float(r) for r in cell_rank],
        "sm_id": [float(sm_by_rank[r]) for r in cell_rank],
        "bin": [float(b) for b in cells % bins],
        "latency_cycles": [float(m) for m in median],
    }


# ---- measuring -----------------------------------------------------------------------------------


def measure_map(launcher: Launcher, kernels: Kernels, device: Device, settings: Settings) -> Measured:
    groups = device.sm_count
    layout = plan_layout(groups, settings)
    shared = block_shared_bytes(device)
    buffer = launcher.alloc(layout.nbytes)
    scratch = launcher.alloc(int(settings.flush_l2_multiple * device.l2_bytes))
    out = launcher.alloc(8 * RECORD_WORDS * groups)
    base = launcher.address(buffer)
    readings = Readings([], [], [])
    for round_ in range(settings.rounds):
        launcher.fill(scratch, 0)  # flush: no line of the layout is left in L2, near or far
        launcher.fill(buffer, 0)  # whole lines written (no partial sector to fill from DRAM), the zero word
        launcher.write_chain(buffer, layout.successor, layout.line_bytes)  # the pointers, in their home slices
        args = [buffer, np.uint32(groups), np.uint32(layout.group_bytes), np.uint32(round_), out]
        raw = kernels.run(KERNEL, args, out, RECORD_WORDS * groups, grid=groups, block=BLOCK, shared=shared,
                          cooperative=True)  # fmt: skip
        records = np.asarray(raw, dtype=np.uint64).reshape(groups, RECORD_WORDS).astype(np.int64)
        check_launch(records, layout, base, round_, device.sm_count)
        latencies = np.diff(records[:, : LOADS + 1], axis=1)[:, 1:]
        for block in range(groups):
            group = group_of(block, round_, groups)
            layout_lines = layout.timed_lines(group)
            readings.extend(int(records[block, RECORD_WORDS - 1]), layout_lines, latencies[block], round_)
    result = partition_map(readings, settings)
    facts = map_facts(readings, result, device.sm_count)
    series = {
        "heatmap": heatmap_series(readings, result, settings.heatmap_bins),
        "sides": {"sm_id": [float(s) for s in result.sms], "side": [float(x) for x in result.side]},
        "readings": readings.series(),  # every reading: the map can be read again from the results file
        "layout": {"base_address": [float(base)], "line_bytes": [float(layout.line_bytes)]},  # line -> address
    }
    note = map_summary(readings, result)
    return Measured(PROBE, ProbeOutcome("ok", note, series), facts)


PROBES = [PROBE]


ROUND_CALLS = 3 + KERNEL_RUN_CALLS  # the flush and the layout's fills, the chain written, the checked run
TOUCH_S = 100e-6  # one launch on the GPU: 16 dependent loads from DRAM or L2 per block, at most
HOST_S_PER_READING = 3e-5  # one first-touch reading collected, clustered and mapped on the host


def plan(settings: Settings, device: Device) -> Plan:
    """What the map costs at most: every round's flush (``flush_l2_multiple`` x the L2) and layout
    written at the DRAM rate plans count at, its launch, and the host's work on its readings."""
    s = settings
    written = s.flush_l2_multiple * device.l2_bytes + device.sm_count * GROUP_LINES * s.line_bytes
    readings = s.rounds * device.sm_count * TIMED
    return Plan(
        1, s.rounds * ROUND_CALLS, s.rounds * (dram_s(written, device) + TOUCH_S), readings * HOST_S_PER_READING
    )


# First contact: the map from two rounds (each line read from two SMs): the cooperative one-block-per-SM
# launch, the flush, the chain ends, the distinct SMs and the loads' ordering all checked.
SMOKE = Smoke(probes=(PROBE,), settings=Settings(rounds=2))


def measure(request: Request) -> Probes:
    """The map, as (name, run) when runnable; a failed self-check raises ProbeFailure."""
    launcher, parameters = request.launcher, request.parameters
    device, runnable, settings = request.device, request.runnable, request.settings
    chosen = settings or Settings()

    def run() -> Measured:
        return measure_map(launcher, Kernels(launcher, parameters), device, chosen)

    if PROBE in runnable:
        yield PROBE, run


# ---- the fact sheet ------------------------------------------------------------------------------


def heatmap_png(results: Results, dpi: int) -> bytes | None:
    """SM x address-group latency, SMs ordered by side and lines by home; None without a map."""
    outcome = results.probes.get(PROBE)
    rows = outcome.series.get("heatmap") if outcome else None
    if not rows or not rows.get("latency_cycles"):
        return None
    ranks, bins = np.asarray(rows["sm_rank"], int), np.asarray(rows["bin"], int)
    grid = np.full((ranks.max() + 1, bins.max() + 1), np.nan)
    grid[ranks, bins] = rows["latency_cycles"]
    fig = new_figure((7.5, 5.0), dpi)
    ax = fig.add_subplot()
    image = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="viridis")
    fig.colorbar(image, ax=ax, label="first-touch latency (cycles)")
    ax.set_xlabel("address group (lines ordered by home partition)")
    ax.set_ylabel("SM (ordered by side)")
    ax.set_title("L2 latency from each SM to each address group")
    return png_bytes(fig)


NEAR_CHASE_FACTOR = 1.35  # first-touch near latency vs the memory family's chase plateau, at most this apart


def invariant_far_above_near(facts: dict[str, Fact], device: Device) -> list[tuple[str, bool, str]]:
    """Where the map found two partitions, the far half is slower than the near one."""
    near, far = facts.get("l2.near_latency"), facts.get("l2.far_latency")
    if near is None or far is None or near.value is None or far.value is None:
        return []
    return [
        ("l2_partition.far_above_near", far.value > near.value, f"far {far.value:.0f} vs near {near.value:.0f} cycles")
    ]


def invariant_near_matches_chase(facts: dict[str, Fact], device: Device) -> list[tuple[str, bool, str]]:
    """The map's near latency and the pointer chase's L2 plateau measure the same hit, by two methods."""
    near, chase = facts.get("l2.near_latency"), facts.get("latency.l2")
    if near is None or chase is None or not near.value or not chase.value:
        return []
    ratio = near.value / chase.value
    ok = 1 / NEAR_CHASE_FACTOR <= ratio <= NEAR_CHASE_FACTOR
    return [("l2_partition.near_matches_chase", ok, f"map {near.value:.0f} vs chase {chase.value:.0f} cycles")]


INVARIANTS = (invariant_far_above_near, invariant_near_matches_chase)
OPTIONAL_FACTS = {  # measured only where the L2 is split (absent elsewhere, unless the model expects a split)
    "l2.far_latency": "the map found one L2 partition (no far half)",
    "l2.partition_sm_fraction": "the map found one L2 partition (no SM sides)",
}

SECTIONS = (
    Section(
        "L2 partitions",
        ("l2.",),
        ("l2_partition.",),
        plot=Plot("l2_partition_map", "l2_partition_map.png", "SM x address-group latency", heatmap_png),
        blurb=(
            "First-touch latency of L2-resident lines from every SM. A split L2 (A100, H100) shows as two "
            "latency clusters explained by which half of the SMs a line is near; one cluster means one partition."
        ),
    ),
)
