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

:func:`partition_map` reads the map: the latencies split into a fast and a slow cluster (two-means
in one dimension); each SM's fast/slow pattern over lines, compared with every other SM's, gives
the SM sides (the sign of the leading eigenvector of the SMs' agreement matrix) and each line's
home (the side it is fast from). The part has two partitions when that model explains the data
(``min_consistency``), both clusters are substantial and the slow one is clearly slower;
otherwise one, and every line counts as near. :func:`plan` counts what the map costs at most, from
the settings alone.
"""

from __future__ import annotations

import io
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from gpuprobe.core.results import Device, Fact, ProbeOutcome, Results
from gpuprobe.families.base import Measured, Plan, ProbeFailure, Probes, Request, Smoke
from gpuprobe.families.chain import random_cycle
from gpuprobe.families.measuring import Kernels, fact
from gpuprobe.families.planning import KERNEL_RUN_CALLS, dram_s
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
    min_consistency: float = 0.9  # the side x home model explains at least this share of readings
    heatmap_bins: int = 48  # address groups (columns) of the heatmap
    seed: int = 20240917

    def __post_init__(self) -> None:
        if self.rounds < 2 or self.line_bytes < 8 or self.line_bytes % 8 or self.heatmap_bins < 1:
            raise ValueError("Settings: rounds >= 2, line_bytes a multiple of 8, heatmap_bins >= 1")
        if self.flush_l2_multiple < 1.0 or self.split_ratio <= 1.0 or not 0.5 < self.min_consistency <= 1.0:
            raise ValueError("Settings: flush_l2_multiple >= 1, split_ratio > 1, 0.5 < min_consistency <= 1")


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
    """First-touch latencies: one row per reading (SM id, line, cycles)."""

    sm: list[int]
    line: list[int]
    cycles: list[float]

    def extend(self, sm: int, lines: np.ndarray, cycles: np.ndarray) -> None:
        self.sm += [sm] * len(lines)
        self.line += [int(x) for x in lines]
        self.cycles += [float(x) for x in cycles]


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


@dataclass(frozen=True)
class PartitionMap:
    """What the readings say: partition count, each SM's side, each line's home, and the latencies."""

    partitions: int
    sms: np.ndarray  # SM ids seen
    side: np.ndarray  # per SM in ``sms``: 0 or 1
    lines: np.ndarray  # line ids seen
    home: np.ndarray  # per line in ``lines``: the side it is near (0 or 1)
    near: np.ndarray  # per reading: predicted near
    consistency: float  # share of readings the side x home model predicts (fast = near)
    fast_fraction: float  # share of readings in the fast cluster
    ratio: float  # slow cluster's median over the fast one's


def partition_map(readings: Readings, settings: Settings) -> PartitionMap:
    """Cluster the readings into near and far, and find which SMs are near which lines."""
    cycles = np.asarray(readings.cycles, dtype=np.float64)
    sms, sm_index = np.unique(np.asarray(readings.sm), return_inverse=True)
    lines, line_index = np.unique(np.asarray(readings.line), return_inverse=True)
    fast = cycles <= two_means_threshold(cycles)
    agree = np.zeros((len(sms), len(lines)))
    np.add.at(agree, (sm_index, line_index), np.where(fast, 1.0, -1.0))
    _, vectors = np.linalg.eigh(agree @ agree.T)
    sign = np.where(vectors[:, -1] >= 0, 1.0, -1.0)
    home_sign = np.where(sign @ agree >= 0, 1.0, -1.0)
    predicted = sign[sm_index] * home_sign[line_index] > 0
    consistency = float(np.mean(predicted == fast))
    fast_fraction = float(np.mean(fast))
    ratio = float(np.median(cycles[~fast]) / np.median(cycles[fast])) if 0 < fast_fraction < 1 else 1.0
    split = (
        consistency >= settings.min_consistency
        and min(fast_fraction, 1 - fast_fraction) >= settings.min_cluster_fraction
        and ratio >= settings.split_ratio
    )
    if not split:
        zeros_sm, zeros_line = np.zeros(len(sms), dtype=np.int64), np.zeros(len(lines), dtype=np.int64)
        return PartitionMap(1, sms, zeros_sm, lines, zeros_line, np.ones(len(cycles), bool), consistency,
                            fast_fraction, ratio)  # fmt: skip
    side, home = (sign < 0).astype(np.int64), (home_sign < 0).astype(np.int64)
    return PartitionMap(2, sms, side, lines, home, predicted, consistency, fast_fraction, ratio)


def _per_sm(readings: Readings, chosen: np.ndarray, reduce: Callable[[np.ndarray], float]) -> list[float]:
    sm = np.asarray(readings.sm)
    cycles = np.asarray(readings.cycles, dtype=np.float64)
    return [reduce(cycles[(sm == s) & chosen]) for s in np.unique(sm) if np.any((sm == s) & chosen)]


def _single(fact_id: str, value: float, unit: str) -> Fact:
    return Fact(fact_id, value, unit, (value, value), [value], {}, PROBE)


def map_facts(readings: Readings, result: PartitionMap, sm_count: int) -> list[Fact]:
    """Near and far latency (medians over SMs of each SM's median), partition count, shares."""
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
            readings.extend(int(records[block, RECORD_WORDS - 1]), layout_lines, latencies[block])
    result = partition_map(readings, settings)
    facts = map_facts(readings, result, device.sm_count)
    series = {
        "heatmap": heatmap_series(readings, result, settings.heatmap_bins),
        "sides": {"sm_id": [float(s) for s in result.sms], "side": [float(x) for x in result.side]},
    }
    note = (
        f"{result.partitions} partition(s): {len(readings.cycles)} first-touch readings, fast cluster "
        f"{result.fast_fraction:.0%}, slow/fast {result.ratio:.2f}, side x home model explains {result.consistency:.0%}"
    )
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
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    ranks, bins = np.asarray(rows["sm_rank"], int), np.asarray(rows["bin"], int)
    grid = np.full((ranks.max() + 1, bins.max() + 1), np.nan)
    grid[ranks, bins] = rows["latency_cycles"]
    fig, ax = plt.subplots(figsize=(7.5, 5.0), dpi=dpi)
    image = ax.imshow(grid, aspect="auto", interpolation="nearest", cmap="viridis")
    fig.colorbar(image, ax=ax, label="first-touch latency (cycles)")
    ax.set_xlabel("address group (lines ordered by home partition)")
    ax.set_ylabel("SM (ordered by side)")
    ax.set_title("L2 latency from each SM to each address group")
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi="figure", metadata={"Software": None})
    plt.close(fig)
    return buffer.getvalue()


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
