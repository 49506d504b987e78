"""The L2-partition family: which L2 lines are near which SMs, from first-touch load latencies.

One probe, ``l2_partition.map``. Each round:

1. flush the L2 (a write through a scratch buffer of twice its size), then write the probe lines
   whole (a memset, then the cycles' pointers): each then sits in its home L2 slice, and no SM has
   read it (split-L2 parts keep a copy of a far
   line near the SM that read it, which would hide the far latency from every later read);
2. launch one block per SM (more than half an SM's shared memory each, cooperative, so every SM
   runs exactly one): block b chases the 17-line cycle of group (b + round) mod groups, 16
   dependent ld.global.cg with a clock read after each, so 15 intervals are the latencies of 15
   lines read for the first time.

Groups rotate across blocks from round to round, so each line is read by ``rounds`` SMs and each SM
reads ``rounds`` x 15 lines. Every launch is checked: each chase ends on the line the host
predicts, every block ran on an SM of its own (by %smid: the PTX ISA does not promise SM ids 0 to
SM count - 1, and parts with disabled SMs number them with gaps, so ids are only compared, never used
as indices), and the loads waited for each other (every interval exceeds the issue-only first one).

Every reading is kept (series ``readings``: SM id, line, round, cycles; series ``layout``: the
buffer's base address and line size, line i at base + i x line_bytes), so a run can be analysed
again from its results file.

:func:`partition_map` reads the map: the latencies split into a fast and a slow cluster (two-means
on their logarithms); SM sides and line homes are fitted to the fast/slow labels (each SM fast on
the lines homed on its side), and the count is a permutation test of that fit: two partitions
when the fit explains more than it does on every one of ``permutations`` relabelled copies of the
same readings (p < 1 / (permutations + 1)), one otherwise; see :func:`partition_map`. A stored map
(the readings, or only the SM x address-group medians an older results file kept) is read again the
same way: :meth:`Readings.from_series`, :meth:`Readings.from_heatmap`. :func:`plan` counts what the
map costs at most, from the settings alone.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from functools import partial

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device, Fact, ProbeOutcome, Results
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.chase import random_cycle
from gpuprobe.families.measuring import fact
from gpuprobe.families.planning import CHECKED_LAUNCH_CALLS, dram_s
from gpuprobe.families.stepping import probe_steps
from gpuprobe.judge.analysis import median_ci
from gpuprobe.judge.invariants import Check, measured
from gpuprobe.judge.ordering import pair_not_below
from gpuprobe.kernels.registry import unroll_of
from gpuprobe.output.plots import new_figure, png_bytes
from gpuprobe.output.sections import Plot, Section

PROBE = "l2_partition.map"
KERNEL = "gp_l2p_touch"
LOADS = unroll_of(KERNEL)  # loads per chase, each followed by a clock read: the kernel's declared unroll (16)
TIMED = LOADS - 1  # intervals that time a load (the last load's latency is not timed)
GROUP_LINES = LOADS + 1  # each group's cycle: the lines read, and the one the chase ends on
RECORD_WORDS = LOADS + 3  # per block: 17 clock readings, end address, SM id
BLOCK = 32  # one warp; thread 0 chases


@dataclass(frozen=True)
class Settings:
    rounds: int = 16  # each line is read by this many SMs; each SM reads 15 x this many lines
    line_bytes: int = 128
    flush_l2_multiple: float = 2.0
    split_ratio: float = 1.3  # the slow cluster's median over the fast one's, at least, for two clusters
    min_cluster_fraction: float = 0.15  # each cluster holds at least this share of the readings
    # The count's test: the side x home fit's interaction against the same fit on this many copies of
    # the readings, labels shuffled within each address group and within each SM in turn: a split is
    # an interaction above every copy's (p < 1 / (permutations + 1) = 0.05).
    permutations: int = 19
    bootstrap: int = 200  # resamples of the address groups for the interaction's 95 % interval
    heatmap_bins: int = 48  # address groups (columns) of the heatmap
    seed: int = 20240917

    def __post_init__(self) -> None:
        if self.rounds < 2 or self.line_bytes < 8 or self.line_bytes % 8 or self.heatmap_bins < 1:
            raise ValueError("Settings: rounds >= 2, line_bytes a multiple of 8, heatmap_bins >= 1")
        if self.flush_l2_multiple < 1.0 or self.split_ratio <= 1.0:
            raise ValueError("Settings: flush_l2_multiple >= 1, split_ratio > 1")
        if self.permutations < 1 or self.bootstrap < 1:
            raise ValueError("Settings: permutations >= 1, bootstrap >= 1")


# ---- the layout: lines, groups, cycles -------------------------------------------------------------


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


def cycle_layout(groups: int, settings: Settings) -> Layout:
    """One random cycle per group, each starting at the group's first line (where the kernel starts)."""
    order = np.empty((groups, GROUP_LINES), dtype=np.int64)
    successor = np.empty(groups * GROUP_LINES, dtype=np.int64)
    for group in range(groups):
        cycle = random_cycle(GROUP_LINES, settings.seed + group)
        first = group * GROUP_LINES
        order[group] = first + cycle.order
        successor[first : first + GROUP_LINES] = first + cycle.successor
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
    """First-touch latencies: one row per reading (SM id, line, cycles, and the round it was read in).

    ``block_lines``: lines per address group, the lines one SM reads in one round (a layout group).
    Readings rebuilt from a heatmap have address bins for lines, each bin its own group."""

    sm: list[int]
    line: list[int]
    cycles: list[float]
    round: list[int] = field(default_factory=list)
    block_lines: int = GROUP_LINES

    def blocks(self) -> np.ndarray:
        """Each reading's address group."""
        return np.asarray(self.line, dtype=np.int64) // self.block_lines

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

    @classmethod
    def from_heatmap(cls, series: dict[str, list[float]]) -> Readings:
        """One reading per cell of a results file's ``heatmap`` series (an SM's median latency over the
        lines of one address bin): what a results file written before the readings were kept holds
        (reports/nvidia-h200's first run). Coarser than the readings: a bin holds the lines of about
        three layout groups, so its home is the majority of theirs."""
        count = len(series["latency_cycles"])
        if len(series["sm_id"]) != count or len(series["bin"]) != count:
            raise ValueError("heatmap series: columns of different lengths")
        sm, bins = [int(x) for x in series["sm_id"]], [int(x) for x in series["bin"]]
        return cls(sm, bins, [float(x) for x in series["latency_cycles"]], [0] * count, block_lines=1)


def check_launch(records: np.ndarray, layout: Layout, base: int, round_: int, sm_count: int) -> None:
    """The launch's records (blocks x RECORD_WORDS): chases ended where predicted, every SM ran one
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


def shuffled_within(labels: np.ndarray, groups: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``labels`` shuffled among the readings of each group (each group keeps its count of each label)."""
    by_group = np.argsort(groups, kind="stable")
    shuffled = np.lexsort((rng.random(len(labels)), groups))
    out = np.empty_like(labels)
    out[by_group] = labels[shuffled]
    return out


@dataclass(frozen=True)
class Design:
    """Which SM read which line of which address group: the SM ids and lines seen (sorted), and each reading's
    index into them and into the address groups."""

    sm_ids: np.ndarray
    line_ids: np.ndarray
    sm_index: np.ndarray
    line_index: np.ndarray
    block_index: np.ndarray

    @classmethod
    def of(cls, readings: Readings) -> Design:
        """The design of ``readings``."""
        sm_ids, sm_index = np.unique(np.asarray(readings.sm), return_inverse=True)
        line_ids, line_index = np.unique(np.asarray(readings.line), return_inverse=True)
        _, block_index = np.unique(readings.blocks(), return_inverse=True)
        return cls(sm_ids, line_ids, sm_index, line_index, block_index)

    @property
    def sms(self) -> int:
        return len(self.sm_ids)

    @property
    def lines(self) -> int:
        return len(self.line_ids)

    @property
    def blocks(self) -> int:
        return int(self.block_index.max(initial=-1)) + 1

    def fit(self, fast: np.ndarray) -> Evidence:
        """The side x home fit to ``fast`` (one label per reading), weighed against one factor."""
        return evidence(fast, self.sm_index, self.line_index, self.sms, self.lines)


def null_interactions(fast: np.ndarray, design: Design, settings: Settings) -> np.ndarray:
    """The fit's interaction on ``settings.permutations`` relabelled copies of the readings (seeded): the
    labels shuffled among the readings of each address group, and among each SM's, in turn. Each copy
    keeps the readings' design and one factor (which address groups are fast, or which SMs), so it
    shows what the fit gains by chance where that factor explains the clusters."""
    rng = np.random.default_rng(settings.seed)
    withins = (design.block_index, design.sm_index)
    copies = (shuffled_within(fast, withins[k % 2], rng) for k in range(settings.permutations))
    return np.array([design.fit(labels).interaction for labels in copies])


def interaction_interval(fast: np.ndarray, found: Evidence, design: Design, settings: Settings) -> tuple[float, float]:
    """The interaction's 95 % interval over ``settings.bootstrap`` resamples of the address groups, the
    sides held as fitted (each line keeps the home its own readings give it)."""
    blocks = design.blocks
    vote = np.where(fast, 1.0, -1.0)
    explained = (found.side[design.sm_index] * found.home[design.line_index] * vote > 0).astype(np.float64)
    line_fast = np.bincount(design.line_index, fast.astype(np.float64), design.lines)
    line_count = np.bincount(design.line_index, minlength=design.lines)
    block_of_line = np.zeros(design.lines, dtype=np.int64)
    block_of_line[design.line_index] = design.block_index
    count = np.bincount(design.block_index, minlength=blocks).astype(np.float64)
    fit_ok = np.bincount(design.block_index, explained, blocks)
    line_ok = np.bincount(block_of_line, np.maximum(line_fast, line_count - line_fast), blocks)
    sm_fast, sm_count = np.zeros((design.sms, blocks)), np.zeros((design.sms, blocks))
    np.add.at(sm_fast, (design.sm_index, design.block_index), fast.astype(np.float64))
    np.add.at(sm_count, (design.sm_index, design.block_index), 1.0)
    weights = np.random.default_rng(settings.seed).multinomial(blocks, np.full(blocks, 1 / blocks), settings.bootstrap)
    total = weights @ count
    consistency, by_line = weights @ fit_ok / total, weights @ line_ok / total
    fast_w, count_w = sm_fast @ weights.T, sm_count @ weights.T
    by_sm = np.maximum(fast_w, count_w - fast_w).sum(axis=0) / total
    one_factor = np.maximum(by_line, by_sm)
    interaction = np.where(one_factor < 1, (consistency - one_factor) / np.maximum(1 - one_factor, 1e-12), 0.0)
    # at least 0: refitted to a resample, the fit would explain what its better single factor does
    low, high = np.percentile(np.maximum(interaction, 0.0), [2.5, 97.5])
    return float(low), float(high)


def decide(clustered: bool, interaction: float, chance: float, settings: Settings) -> tuple[int, str]:
    """The partition count and why, from the test :func:`partition_map` states."""
    if not clustered:
        return 1, "no two latency clusters (each a substantial share, the slow one clearly slower)"
    p = f"p < {1 / (settings.permutations + 1):.2g}"
    if interaction > chance:
        return 2, f"a side x home pattern explains the two latency clusters ({p})"
    return 1, f"two latency clusters, but no side x home pattern beyond what one factor gives by chance (not {p})"


@dataclass(frozen=True)
class PartitionMap:
    """What the readings say: partition count, each SM's side, each line's home, and the latencies."""

    partitions: int  # 1 or 2
    sms: np.ndarray  # SM ids seen
    side: np.ndarray  # per SM in ``sms``: 0 or 1
    lines: np.ndarray  # line ids seen
    home: np.ndarray  # per line in ``lines``: the side it is near (0 or 1)
    near: np.ndarray  # per reading: predicted near
    fast: np.ndarray  # per reading: in the fast latency cluster
    consistency: float  # share of readings the side x home model predicts (fast = near)
    fast_fraction: float  # share of readings in the fast cluster
    ratio: float  # slow cluster's median over the fast one's
    one_factor: float = 0.0  # share of readings the better single-factor model predicts
    interaction: float = 0.0  # share of that model's errors the side x home model removes
    interaction_ci: tuple[float, float] = (0.0, 0.0)  # its 95 % interval over resampled address groups
    chance: float = 0.0  # the most ``interaction`` reached on the relabelled copies
    reason: str = ""  # why the count is what it is

    def hits(self) -> tuple[np.ndarray, np.ndarray]:
        """The readings that time a near hit and a far one: predicted near (far) and in the fast (slow)
        cluster; with one partition every reading is a near hit. A line the fit homed on the wrong side,
        or one near from both (fast though predicted far), times neither half's latency."""
        if self.partitions == 1:
            return np.ones(len(self.near), dtype=bool), np.zeros(len(self.near), dtype=bool)
        return self.near & self.fast, ~self.near & ~self.fast


def partition_map(readings: Readings, settings: Settings) -> PartitionMap:
    """Cluster the readings into near and far, find which SMs are near which lines, and test the count.

    A split L2 shows as an interaction: each line is fast from the SMs of one side and slow from the
    others, so each SM is fast on the lines homed on its side and slow on the rest. The fit's
    ``interaction`` is the share of the better single-factor model's errors it removes (that model:
    each line fast or slow for every SM, or each SM on every line; a line missing L2, a slow GPC):
    1 on a clean split, 0 where one factor explains all there is.

    No fixed bar on it can decide. The H200 (reports/nvidia-h200) read the same raw shape in two runs
    (fast cluster 62-64 %, slow/fast 1.64-1.65) and the interaction depends on how finely the data
    resolve a line's home: 0.61 over its 31,680 readings, 0.17-0.19 over the SM x address-bin medians
    (a bin holds about three layout groups, each homed on its own side), and 62 % of its readings are
    fast where a clean two-way split gives half (address groups near from every SM). Bars of 90 %
    consistency and then of 0.5 interaction flipped its count between runs.

    The count is a test instead, against the same fit on copies of the very readings, relabelled with
    one factor kept (:func:`null_interactions`): two partitions when the interaction exceeds every
    copy's (``chance``, the largest), p < 1 / (permutations + 1); one when it does not, or when the
    latencies do not form two clusters (each at least ``min_cluster_fraction`` of the readings, the
    slow one at least ``split_ratio`` slower). The interaction's interval over resampled address
    groups (:func:`interaction_interval`) says how well the data pin it down. Known blind spot: a slow
    GPC reading lines that also miss L2 (an OR of two factors) is a pattern no single factor explains.
    """
    cycles = np.asarray(readings.cycles, dtype=np.float64)
    design = Design.of(readings)
    sms, lines = design.sm_ids, design.line_ids
    fast, ratio = split_latencies(cycles)
    fast_fraction = float(np.mean(fast))
    found = design.fit(fast)
    chance = float(null_interactions(fast, design, settings).max())
    clustered = min(fast_fraction, 1 - fast_fraction) >= settings.min_cluster_fraction and ratio >= settings.split_ratio
    partitions, reason = decide(clustered, found.interaction, chance, settings)
    interval = interaction_interval(fast, found, design, settings)
    scores = (found.consistency, fast_fraction, ratio, found.one_factor, found.interaction, interval, chance, reason)
    if partitions == 1:
        zeros_sm, zeros_line = np.zeros(len(sms), dtype=np.int64), np.zeros(len(lines), dtype=np.int64)
        return PartitionMap(1, sms, zeros_sm, lines, zeros_line, np.ones(len(cycles), bool), fast, *scores)
    side, home = (found.side < 0).astype(np.int64), (found.home < 0).astype(np.int64)
    near = found.side[design.sm_index] * found.home[design.line_index] > 0
    return PartitionMap(partitions, sms, side, lines, home, near, fast, *scores)


def per_sm_latency(readings: Readings, chosen: np.ndarray) -> dict[int, np.ndarray]:
    """Each SM's ``chosen`` readings' cycles, by SM id (SMs with none left out)."""
    sm = np.asarray(readings.sm)
    cycles = np.asarray(readings.cycles, dtype=np.float64)
    return {int(s): cycles[(sm == s) & chosen] for s in np.unique(sm) if np.any((sm == s) & chosen)}


def _medians(by_sm: dict[int, np.ndarray]) -> list[float]:
    """Each SM's median."""
    return [float(np.median(c)) for c in by_sm.values()]


def _single(fact_id: str, value: float, unit: str) -> Fact:
    return Fact(fact_id, value, unit, (value, value), [value], {}, PROBE)


def _derived(fact_id: str, value: float, unit: str, ci: tuple[float, float] | None = None) -> Fact:
    """A figure computed from the whole map (no samples of its own), with its interval where it has one."""
    return Fact(fact_id, value, unit, ci or (value, value), [], {}, PROBE)


def sm_spread(near_by_sm: dict[int, np.ndarray]) -> Fact:
    """``latency.l2.sm_spread``: how far apart the SMs' near-L2 hits lie, the slowest SM's median near
    latency minus the fastest's; its interval from the two SMs' median intervals (the slowest's low
    bound minus the fastest's high one, and the other way round), never below zero."""
    bounds = {sm: median_ci(c) for sm, c in near_by_sm.items()}
    slowest = max(bounds, key=lambda sm: bounds[sm][0])
    fastest = min(bounds, key=lambda sm: bounds[sm][0])
    (top, top_low, top_high), (bottom, bottom_low, bottom_high) = bounds[slowest], bounds[fastest]
    ci = (max(0.0, top_low - bottom_high), top_high - bottom_low)
    return _derived("latency.l2.sm_spread", top - bottom, "cycle", ci)


def extreme_sms(fact_id: str, by_sm: dict[int, np.ndarray]) -> list[Fact]:
    """``<fact_id>.min`` and ``.max``: the fastest and the slowest SM's median latency, each with that SM's
    readings as samples (its median's interval) and its SM id in the detail."""
    medians = {sm: float(np.median(cycles)) for sm, cycles in by_sm.items()}
    ends = (("min", min(medians, key=medians.__getitem__)), ("max", max(medians, key=medians.__getitem__)))
    return [replace(fact(f"{fact_id}.{end}", by_sm[sm], "cycle", PROBE), detail=f"SM {sm}") for end, sm in ends]


def map_facts(readings: Readings, result: PartitionMap, sm_count: int) -> list[Fact]:
    """Near and far latency (medians over SMs of each SM's median, and the fastest and slowest SM's), the
    spread of the SMs' near latencies, partition count with the interaction and chance it was tested with,
    shares."""
    near_hits, far_hits = result.hits()
    near_by_sm = per_sm_latency(readings, near_hits)
    facts = [
        fact("l2.near_latency", _medians(near_by_sm), "cycle", PROBE),
        *extreme_sms("l2.near_latency", near_by_sm),
        sm_spread(near_by_sm),
        _single("l2.partition_count", float(result.partitions), "count"),
        _derived("l2.partition_interaction", result.interaction, "fraction", result.interaction_ci),
        _derived("l2.partition_chance", result.chance, "fraction"),
    ]
    sm = np.asarray(readings.sm)
    fractions = [float(np.mean(result.near[sm == s])) for s in result.sms]
    facts.append(fact("l2.near_line_fraction", fractions, "fraction", PROBE))
    if result.partitions == 2:
        far_by_sm = per_sm_latency(readings, far_hits)
        facts[1:1] = [
            fact("l2.far_latency", _medians(far_by_sm), "cycle", PROBE),
            *extreme_sms("l2.far_latency", far_by_sm),
        ]
        minor = min(int(np.sum(result.side == 0)), int(np.sum(result.side == 1)))
        facts.append(_single("l2.partition_sm_fraction", minor / sm_count, "fraction"))
    facts.append(_single("l2.partition_consistency", result.consistency, "fraction"))
    return facts


def map_summary(readings: Readings, result: PartitionMap) -> str:
    """One line on the readings and the evidence behind the count (the probe's detail)."""
    low, high = result.interaction_ci
    return (
        f"{result.partitions} partition(s): {len(readings.cycles)} first-touch readings, fast cluster "
        f"{result.fast_fraction:.0%}, slow/fast {result.ratio:.2f}, side x home model explains "
        f"{result.consistency:.0%} (one factor alone {result.one_factor:.0%}); interaction {result.interaction:.2f} "
        f"[{low:.2f}, {high:.2f}] against at most {result.chance:.2f} on relabelled copies: {result.reason}"
    )


def per_sm_series(readings: Readings, result: PartitionMap) -> dict[str, list[float | None]]:
    """Each SM's partition (its side: 0 or 1, all 0 on an unsplit L2), median near latency, and far latency
    where it read far lines (None where it did not)."""
    near, far = (per_sm_latency(readings, hits) for hits in result.hits())
    return {
        "sm_id": [float(s) for s in result.sms],
        "partition": [float(x) for x in result.side],
        "near_cycles": [float(np.median(near[s])) if s in near else None for s in map(int, result.sms)],
        "far_cycles": [float(np.median(far[s])) if s in far else None for s in map(int, result.sms)],
    }


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


def measure_map(request: Request) -> Measured:
    launcher, device, settings = request.launcher, request.device, request.settings or Settings()
    groups = device.sm_count
    layout = cycle_layout(groups, settings)
    shared = block_shared_bytes(device)
    buffer = launcher.alloc(layout.nbytes)
    scratch = launcher.alloc(int(settings.flush_l2_multiple * device.l2_bytes))
    out = request.outputs.get(RECORD_WORDS * groups)
    base = launcher.address(buffer)
    readings = Readings([], [], [])
    for round_ in range(settings.rounds):
        launcher.fill(scratch, 0)  # flush: no line of the layout is left in L2, near or far
        launcher.fill(buffer, 0)  # whole lines written (no partial sector to fill from DRAM), the zero word
        launcher.write_cycle(buffer, layout.successor, layout.line_bytes)  # the pointers, in their home slices
        args = [buffer, np.uint32(groups), np.uint32(layout.group_bytes), np.uint32(round_), out]
        raw = request.kernels.results(KERNEL, args, out, RECORD_WORDS * groups, grid=groups, block=BLOCK, shared=shared,
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
        "per_sm": per_sm_series(readings, result),
        "readings": readings.series(),  # every reading: the map can be read again from the results file
        "layout": {"base_address": [float(base)], "line_bytes": [float(layout.line_bytes)]},  # line -> address
    }
    note = map_summary(readings, result)
    return Measured(PROBE, ProbeOutcome("ok", note, series), facts)


PROBES = [PROBE]


ROUND_CALLS = 3 + CHECKED_LAUNCH_CALLS  # the flush and the layout's fills, the cycles written, the checked run
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
# launch, the flush, the chase ends, the distinct SMs and the loads' ordering all checked.
SMOKE = Smoke(probes=(PROBE,), settings=Settings(rounds=2))


def measure(request: Request) -> Probes:
    """The map, as (name, step) when runnable; a failed self-check raises ProbeFailure."""
    yield from probe_steps(PROBES, {PROBE: partial(measure_map, request)}, request.runnable)


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


CHASE_MARGIN = 0.05  # the chase's L2 plateau vs the map's per-SM range: two methods (see the check)
NEAR_SHARE_MARGIN = 0.25  # relative: each SM's near share of the lines within a quarter of 1 / count


def invariant_far_above_near(facts: dict[str, Fact], device: Device) -> list[Check]:
    """Where the map found two partitions, the far half is not faster than the near one, within the CIs."""
    return pair_not_below(facts, "l2_partition.far_above_near", "l2.near_latency", "l2.far_latency")


def invariant_near_matches_chase(facts: dict[str, Fact], device: Device) -> list[Check]:
    """The chase's L2 plateau (``latency.l2``, one SM) lies within the map's per-SM near latencies
    (``l2.near_latency``'s samples: one median per SM, the chase's SM among them), CHASE_MARGIN either
    side: both time a near-L2 hit by a dependent load, the chase over a footprint after a warm lap, the
    map on a line's first touch."""
    found = measured(facts, "l2.near_latency", "latency.l2")
    if found is None or not found[0].samples:
        return []
    near, chase = found
    low, high = min(near.samples) * (1 - CHASE_MARGIN), max(near.samples) * (1 + CHASE_MARGIN)
    detail = (f"chase {chase.value:.0f} cycles (one SM); map's SMs {min(near.samples):.0f}-{max(near.samples):.0f}, "
              f"allowed {low:.0f}-{high:.0f}")  # fmt: skip
    return [Check("l2_partition.near_matches_chase", low <= chase.value <= high, detail, (near.id, chase.id))]


def invariant_near_share_matches_count(facts: dict[str, Fact], device: Device) -> list[Check]:
    """An SM is near 1 / count of the lines (addresses hash evenly over the partitions), within
    NEAR_SHARE_MARGIN of that: a count the near shares contradict is not a partition count."""
    found = measured(facts, "l2.partition_count", "l2.near_line_fraction")
    if found is None:
        return []
    count, share = found
    expected = 1 / count.value
    ok = abs(share.value - expected) <= NEAR_SHARE_MARGIN * expected
    detail = (f"near share {share.value:.2f} for {count.value:.0f} partition(s), "
              f"expected {expected:.2f} ± {NEAR_SHARE_MARGIN:.0%}")  # fmt: skip
    return [Check("l2_partition.near_share_matches_count", ok, detail, (count.id, share.id))]


def invariant_spread_ordered(facts: dict[str, Fact], device: Device) -> list[Check]:
    """The fastest SM's median is no higher, and the slowest's no lower, than the median over SMs, for the
    near and the far half alike (each is one SM's median out of those the median is taken over)."""
    checks = []
    for level in ("l2.near_latency", "l2.far_latency"):
        found = measured(facts, f"{level}.min", level, f"{level}.max")
        if found is None:
            continue
        low, middle, high = found
        detail = f"{low.value:.0f} ({low.detail}) <= {middle.value:.0f} <= {high.value:.0f} ({high.detail}) cycles"
        ok = low.value <= middle.value <= high.value
        checks.append(
            Check(f"l2_partition.{level.split('.')[1]}_spread_ordered", ok, detail, (low.id, middle.id, high.id))
        )
    return checks


INVARIANTS = (
    invariant_far_above_near,
    invariant_near_matches_chase,
    invariant_near_share_matches_count,
    invariant_spread_ordered,
)
OPTIONAL_FACTS = {  # measured only where the L2 is split (absent elsewhere, unless the model expects a split)
    "l2.far_latency": "the map found one L2 partition (no far half)",
    "l2.far_latency.min": "the map found one L2 partition (no far half)",
    "l2.far_latency.max": "the map found one L2 partition (no far half)",
    "l2.partition_sm_fraction": "the map found one L2 partition (no SM sides)",
}

SECTIONS = (
    Section(
        "L2 partitions",
        ("l2.",),
        ("l2_partition.",),
        plot=Plot("l2_partition_map", "l2_partition_map.png", "SM x address-group latency", heatmap_png),
        blurb=(
            "First-touch latency of L2-resident lines from every SM, each line read once after an L2 flush. "
            "A split L2 (A100, H100, H200) shows as two latency clusters explained by which side of the SMs a "
            "line is homed near. The count is a test: 2 when the side x home fit (l2.partition_interaction, "
            "with its interval) explains the clusters better than on every relabelled copy of the same readings "
            "(l2.partition_chance, the largest; p < 0.05), else 1. l2.near_latency and l2.far_latency are "
            "medians over SMs of one line's first read from the near or the far half; latency.l2_far (Memory "
            "latency) is the footprint sweep's plateau beyond the near half's reach, a different quantity and "
            "higher. latency.l2.sm_spread is how far apart the SMs' near latencies lie (latency.l2 is one SM's); "
            "l2.near_latency.min / .max and l2.far_latency.min / .max are the fastest and the slowest SM's medians "
            "(the SM in the detail; every SM's, with its partition, in the series per_sm)."
        ),
    ),
)


FAMILY = Family(
    name="l2_partition",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
    sections=SECTIONS,
    invariants=INVARIANTS,
    optional_facts=OPTIONAL_FACTS,
)
