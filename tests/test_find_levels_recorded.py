"""find_levels on real pointer-chase curves, recorded on real GPUs and published by RRZE gpu-benches.

The curves live verbatim in ``tests/data/recorded_latency/`` (each file's header names its
repository, path and commit).  They come from two versions of gpu-benches' ``gpu-latency``
benchmark, a random pointer chase along one dependent chain, printing one row per footprint:

* 5 columns (``h100_pcie``, ``a100_40``, ``a100_80``, ``v100``, ``l40``, ``mi210``): iterations,
  clock MHz, footprint, total time ms, cycles per load (gpu-latency/main.cu keeps the fastest
  of 7 runs).  One 8-byte pointer every 64 bytes, so each 128-byte line is visited twice per
  pass.
* 8 columns (``a100_80_fine``, ``a40``): iterations, clock MHz, footprint, mean time ms, then
  cycles per load as mean, median, min and max of 11 runs.  The chase walks whole 128-byte
  lines.  As the repository's plot.py does, we use the median.

In both, the footprint column is ``bytes / 1024`` (main.cu divides by 1024; plot.py's axis
says "kB"), so the loader multiplies by 1024.  Nothing in the data files is converted.

What each test asserts comes from published hardware facts (vendor whitepapers and data
sheets), and the plateau latencies from our own reading of the raw data, documented in
``RECORDED`` below and checked against the files by ``test_documented_plateaus_match_the_raw_data``.

Tolerances, as in the synthetic tests (tests/test_analysis.py):

* Capacities within 30 %.  A level "ends" where the latency crosses the geometric midpoint to
  the next plateau, i.e. once a good share of the chase misses, which replacement policy,
  address hashing and set conflicts move by some tens of percent.  On NVIDIA parts the L1
  shares one SRAM array with shared memory, and the driver may keep part of it as shared
  memory (the carveout) even for a kernel that uses none, so the L1 a chase sees can be
  smaller than the unified size (worst here: L40, whose L1 step sits at 84-95 KiB of 128 KiB,
  -26 %).  We take the vendors' cache "MB" as 2**20 bytes; 10**6 would shift sizes by 4.9 %.
* Plateau latencies within 6 % of our medians.  find_levels takes the median over its own
  plateau, which may take in a shoulder point or a drifting stretch that our hand-picked,
  clearly flat ranges leave out (L40's L2 creeps from 276.5 to 284 cycles above 32 MiB,
  MI210's L2 from ~235 to ~267, V100's DRAM from 420 to 437 as TLB misses grow).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
import pytest

from gpuprobe.families.memory import Settings, level_names, sweep_footprints
from gpuprobe.judge.analysis import Level, find_levels

DATA_DIR = Path(__file__).parent / "data" / "recorded_latency"
KIB, MIB = 2**10, 2**20
CAPACITY_TOLERANCE = 0.30
LATENCY_TOLERANCE = 0.06
READING_TOLERANCE = 0.05  # cycles: the files have one decimal, our medians are exact

FloatArray = npt.NDArray[np.float64]


# ----------------------------------------------------------------------------- loading


def data_rows(name: str) -> list[list[str]]:
    """The data rows of ``tests/data/recorded_latency/<name>.txt``, split into fields.

    Skips ``#`` comments, the ``clock:`` line and blank lines.

    Raises:
        ValueError: a row with neither 5 nor 8 columns.
    """
    rows = []
    for number, line in enumerate((DATA_DIR / f"{name}.txt").read_text().splitlines(), start=1):
        fields = line.split()
        if not fields or fields[0].startswith("#") or fields[0] == "clock:":
            continue
        if len(fields) not in (5, 8):
            raise ValueError(f"{name}.txt line {number}: expected 5 or 8 columns, got {len(fields)}")
        rows.append(fields)
    return rows


def load_curve(name: str) -> tuple[FloatArray, FloatArray]:
    """Footprints in bytes and latencies in cycles of ``tests/data/recorded_latency/<name>.txt``.

    A 5-column row's latency is its only cycles column; an 8-column row's is the median of its
    runs (column 6).  Footprints are printed in KiB (``bytes / 1024``) and converted to bytes here.
    """
    rows = data_rows(name)
    footprints = np.array([float(row[2]) * KIB for row in rows])
    latencies = np.array([float(row[4] if len(row) == 5 else row[5]) for row in rows])
    return footprints, latencies


# ----------------------------------------------------------------------------- what we know


@dataclass(frozen=True)
class Plateau:
    """A plateau as we read it off the raw data: a clearly flat footprint range and its median."""

    first_kib: float
    last_kib: float
    median_cycles: float


@dataclass(frozen=True)
class Recorded:
    """One recorded curve and the published facts about its GPU.

    Attributes:
        l1_bytes: the per-SM (per-CU) L1 size.
        l2_bytes: the device's L2 size; the last cache level should end near it.
        near_l2_bytes: on parts whose L2 is two partitions (A100, H100), half the L2: a chase
            from one SM sees its near partition first, then both.  ``None`` elsewhere.
        plateaus: our reading of every plateau, fastest first; one per expected level.
    """

    l1_bytes: float
    l2_bytes: float
    near_l2_bytes: float | None
    plateaus: tuple[Plateau, ...]


RECORDED: dict[str, Recorded] = {
    # H100 PCIe: 256 KB L1/shared per SM, 50 MB L2 in two partitions (Hopper whitepaper, H100
    # datasheet).  Four plateaus: L1 34.2, near L2 265.5, far L2 475.25 (the six points
    # 32129-51750 KiB, 461.5-484.3), DRAM 651.2 (68883-1529075 KiB, 644.0-658.4).
    "h100_pcie": Recorded(
        256 * KIB,
        50 * MIB,
        25 * MIB,
        (
            Plateau(1, 216, 34.2),
            Plateau(391, 19946, 265.5),
            Plateau(32129, 51750, 475.25),
            Plateau(68883, 1529075, 651.2),
        ),
    ),
    # A100 40GB: 192 KB L1/shared per SM, 40 MB L2 in two partitions (A100 whitepaper).  The far
    # L2 is a short but clear plateau, three points at 425.5-426.7 (32129-38878 KiB), before a
    # long ramp into DRAM (569.4-574.6 from 62620 KiB).
    "a100_40": Recorded(
        192 * KIB,
        40 * MIB,
        20 * MIB,
        (
            Plateau(1, 144, 36.1),
            Plateau(239, 19946, 213.0),
            Plateau(32129, 38878, 426.5),
            Plateau(62620, 1529075, 573.3),
        ),
    ),
    # A100 80GB, same memory hierarchy as the 40GB part; the file stops at 340388 KiB.
    "a100_80": Recorded(
        192 * KIB,
        40 * MIB,
        20 * MIB,
        (
            Plateau(1, 144, 36.1),
            Plateau(239, 18132, 211.0),
            Plateau(32129, 38878, 424.3),
            Plateau(62620, 340388, 569.35),
        ),
    ),
    # A100 80GB again, whole-line chase in 4 % steps.  The far L2 wobbles (387.4-412.9 over
    # 23972-39917 KiB, median 399.35); between 44901 and 119701 KiB the latency dips to
    # 507-547 before settling at 549.5-551.6 (from 136938 KiB), which we read as DRAM.
    "a100_80_fine": Recorded(
        192 * KIB,
        40 * MIB,
        20 * MIB,
        (
            Plateau(2, 150.5, 33.1),
            Plateau(223.8, 16841.9, 205.2),
            Plateau(23972.1, 39916.6, 399.35),
            Plateau(136938.4, 1178534.0, 551.2),
        ),
    ),
    # V100 PCIe: 128 KB L1/shared per SM, 6 MB L2 (Volta whitepaper; the README calls out both).
    # DRAM runs 420.3-437.0 from 9299 KiB.
    "v100": Recorded(
        128 * KIB,
        6 * MIB,
        None,
        (Plateau(1, 118, 30.0), Plateau(216, 5770, 215.0), Plateau(9299, 1529075, 429.0)),
    ),
    # L40 (AD102): 128 KB L1/shared per SM, 96 MB L2 (L40 datasheet, Ada whitepaper); the Ada
    # L2 shows no near/far split.  L2 flat at 276.3-276.7 over 157-32473 KiB, then creeping up.
    "l40": Recorded(
        128 * KIB,
        96 * MIB,
        None,
        (Plateau(1, 84, 36.15), Plateau(157, 32473, 276.5), Plateau(185030, 1095850, 631.5)),
    ),
    # A40 (GA102): 128 KB L1/shared per SM, 6 MB L2 (Ampere GA102 whitepaper).  Three levels;
    # the L1-to-L2 transition (105-157 KiB) climbs in stairs (42.2, 94.0, 94.5, 92.4, 146.2,
    # 143.9, 175.5, ...), which are not cache levels.  DRAM 537.0-556.7 from 6832 KiB.
    "a40": Recorded(
        128 * KIB,
        6 * MIB,
        None,
        (Plateau(2, 101.1, 33.1), Plateau(163.0, 5191.5, 250.4), Plateau(6832.1, 1178534.0, 547.4)),
    ),
    # MI210 (CDNA2): 16 KB vector L1 per CU, 8 MB L2, no Infinity Cache (CDNA2 whitepaper).  The
    # noisiest curve here: L2 233.1-267.5 over 18-4767 KiB; DRAM 569.4-584.6 over 13620-62620 KiB,
    # then 628.6-669.8 beyond 125026 KiB (TLB misses), less than a 1.2x step.
    "mi210": Recorded(
        16 * KIB,
        8 * MIB,
        None,
        (Plateau(1, 15, 125.1), Plateau(18, 4767, 240.6), Plateau(13620, 62620, 573.3)),
    ),
}

CURVES = sorted(RECORDED)
FOUR_LEVEL_CURVES = sorted(name for name, facts in RECORDED.items() if facts.near_l2_bytes is not None)


def describe(levels: list[Level]) -> str:
    """Found levels as one readable line per level, for assertion messages."""
    rows = []
    for level in levels:
        size = "-" if level.size_bytes is None else f"{level.size_bytes / KIB:.1f} KiB"
        rows.append(
            f"  {level.latency:.1f} cyc up to {size} "
            f"(plateau {level.first_footprint / KIB:.1f}..{level.last_footprint / KIB:.1f} KiB)"
        )
    return "found levels:\n" + "\n".join(rows)


_found: dict[str, list[Level]] = {}


def levels_of(name: str) -> list[Level]:
    """find_levels on a recorded curve (computed once per curve)."""
    if name not in _found:
        _found[name] = find_levels(*load_curve(name))
    return _found[name]


# ----------------------------------------------------------------------------- the data and the loader


def test_loader_converts_kib_to_bytes_and_reads_the_right_latency_column() -> None:
    footprints, latencies = load_curve("h100_pcie")
    assert footprints[0] == 1 * KIB and latencies[0] == 34.2  # "1000000  1755  1  19.5  34.2"
    assert footprints[-1] == 1529075 * KIB and latencies[-1] == 658.4
    footprints, latencies = load_curve("a40")
    assert footprints[0] == 2 * KIB  # the first row prints "2", the rest one decimal
    row = int(np.flatnonzero(footprints == 118.6 * KIB)[0])
    assert latencies[row] == 92.4  # "... 118.6  54.9  95.6 92.4 92.2 121.4": the median, not the mean


@pytest.mark.parametrize("name", CURVES)
def test_recorded_curves_are_sorted_and_positive(name: str) -> None:
    footprints, latencies = load_curve(name)
    assert footprints.size >= 90
    assert np.all(np.diff(footprints) > 0)
    assert np.all(latencies > 0)


def chain_lengths(name: str) -> list[int]:
    """Chain lengths (pointers) of the footprint loop in the main.cu that wrote ``name``.

    ``LEN`` starts at 16 and grows as ``LEN = LEN * growth + step``, jumping by ``jump`` once the
    buffer exceeds a limit.  The loop of gpu-latency/main.cu at te42kyfo commit 30c46d2 (1.1, 16,
    1.5 above 80 MiB, 64 bytes per pointer) matches the 5-column files except l40, whose run used
    1.04, 32, 1.5 above 120 MiB; that of xxrjun commit 3be3ab1 (1.04, 1, 1.1 above 120 MiB, 128
    bytes per pointer) matches the 8-column ones.
    """
    bytes_per_pointer, growth, step, jump, limit = {
        5: (64, 1.1, 16, 1.5, 80 * MIB),
        8: (128, 1.04, 1, 1.1, 120 * MIB),
    }[len(data_rows(name)[0])]
    if name == "l40":
        growth, step, limit = 1.04, 32, 120 * MIB
    lengths, length = [], 16
    while length < 1 << 24:
        if length * bytes_per_pointer > limit:
            length = int(length * jump)
        lengths.append(length)
        length = int(length * growth + step)
    return lengths


@pytest.mark.parametrize("name", CURVES)
def test_recorded_rows_are_as_main_cu_printed_them(name: str) -> None:
    """Guards the verbatim copy: footprints and iteration counts follow main.cu's loop exactly,
    and each row's cycles agree with its time, clock and iterations to the printed precision."""
    rows = data_rows(name)
    lengths = chain_lengths(name)[: len(rows)]
    assert len(lengths) == len(rows)
    for index, (row, length) in enumerate(zip(rows, lengths, strict=True)):
        iterations, clock_mhz, milliseconds, mean_cycles = int(row[0]), float(row[1]), float(row[3]), float(row[4])
        assert iterations == max(length, 1_000_000), row
        if len(row) == 5:
            assert row[2] == str(length * 64 // KIB), row  # integer division in main.cu
        else:
            assert row[2] == ("2" if index == 0 else f"{length * 128 / KIB:.1f}"), row  # std::fixed after row 1
            assert float(row[6]) <= float(row[5]) <= float(row[7]), row  # min <= median <= max
        derived = milliseconds / iterations * clock_mhz * 1e3
        assert abs(derived - mean_cycles) <= 0.051 + mean_cycles * 0.05 / milliseconds, row


@pytest.mark.parametrize("name", CURVES)
def test_documented_plateaus_match_the_raw_data(name: str) -> None:
    """Our documented plateau medians are what the files say over the documented ranges."""
    footprints, latencies = load_curve(name)
    for plateau in RECORDED[name].plateaus:
        on = (footprints >= plateau.first_kib * KIB) & (footprints <= plateau.last_kib * KIB)
        assert on.sum() >= 3
        assert float(np.median(latencies[on])) == pytest.approx(plateau.median_cycles, abs=READING_TOLERANCE)


# ----------------------------------------------------------------------------- find_levels against the hardware


@pytest.mark.parametrize("name", CURVES)
def test_finds_one_level_per_plateau(name: str) -> None:
    found = levels_of(name)
    expected = len(RECORDED[name].plateaus)
    assert len(found) == expected, f"{name}: expected {expected} levels; {describe(found)}"
    assert found[-1].size_bytes is None
    assert all(level.size_bytes is not None for level in found[:-1])


@pytest.mark.parametrize("name", CURVES)
def test_levels_get_slower_and_larger(name: str) -> None:
    found = levels_of(name)
    latencies = [level.latency for level in found]
    sizes = [level.size_bytes for level in found[:-1]]
    assert latencies == sorted(latencies), describe(found)
    assert sizes == sorted(sizes), describe(found)


@pytest.mark.parametrize("name", CURVES)
def test_first_level_ends_near_the_l1_size(name: str) -> None:
    found = levels_of(name)
    assert len(found) >= 2, describe(found)
    assert found[0].size_bytes == pytest.approx(RECORDED[name].l1_bytes, rel=CAPACITY_TOLERANCE), (
        f"{name}: L1 is {RECORDED[name].l1_bytes / KIB:g} KiB; {describe(found)}"
    )


@pytest.mark.parametrize("name", CURVES)
def test_last_cache_level_ends_near_the_l2_size(name: str) -> None:
    found = levels_of(name)
    assert len(found) >= 2, describe(found)
    assert found[-2].size_bytes == pytest.approx(RECORDED[name].l2_bytes, rel=CAPACITY_TOLERANCE), (
        f"{name}: L2 is {RECORDED[name].l2_bytes / MIB:g} MiB; {describe(found)}"
    )


@pytest.mark.parametrize("name", FOUR_LEVEL_CURVES)
def test_near_l2_level_ends_near_half_the_l2(name: str) -> None:
    found = levels_of(name)
    assert len(found) == 4, describe(found)
    near = RECORDED[name].near_l2_bytes
    assert near is not None
    assert found[1].size_bytes == pytest.approx(near, rel=CAPACITY_TOLERANCE), (
        f"{name}: near L2 partition is {near / MIB:g} MiB; {describe(found)}"
    )


@pytest.mark.parametrize("name", CURVES)
def test_plateau_latencies_match_our_reading(name: str) -> None:
    found = levels_of(name)
    plateaus = RECORDED[name].plateaus
    assert len(found) == len(plateaus), f"{name}: expected {len(plateaus)} levels; {describe(found)}"
    for plateau, level in zip(plateaus, found, strict=True):
        assert level.latency == pytest.approx(plateau.median_cycles, rel=LATENCY_TOLERANCE), (
            f"{name}: plateau {plateau.first_kib:g}..{plateau.last_kib:g} KiB reads {plateau.median_cycles:g} "
            f"cycles; {describe(found)}"
        )


@pytest.mark.parametrize("name", CURVES)
def test_each_level_plateau_lies_on_our_plateau(name: str) -> None:
    """Each found plateau overlaps the range we read the same level from (in log footprint)."""
    found = levels_of(name)
    plateaus = RECORDED[name].plateaus
    assert len(found) == len(plateaus), f"{name}: expected {len(plateaus)} levels; {describe(found)}"
    for plateau, level in zip(plateaus, found, strict=True):
        low = max(math.log2(level.first_footprint), math.log2(plateau.first_kib * KIB))
        high = min(math.log2(level.last_footprint), math.log2(plateau.last_kib * KIB))
        assert low <= high, f"{name}: no overlap with {plateau}; {describe(found)}"


# ----------------------------------------------------------------------------- the memory family's grid on them
#
# The memory family does not measure these curves at their own footprints: it samples its own grid
# (memory.sweep_footprints), and each point is a median known to within its stopping rule's
# 1 % (its CI half-width), so noisy. On a split L2 the far-partition plateau spans about 0.6-1.0 L2
# sizes (h100_pcie: 31.4-50.5 of 50 MiB; a100_80_fine: 23.4-39.0 of 40 MiB), three points of a grid of
# four per octave, where find_levels needs three. So each split-L2 curve is scaled to an L2 of the
# H200's 60 MiB (and left at its own), read at the grid's footprints (log-log interpolation between
# recorded points), and each point multiplied by 1 + noise: 0.6 % (a median whose 95 % CI half-width
# is 1 % has a standard error of about 0.5 %, as expectations_audit.md assumed) and 1 % (one whose
# repeats ran out first). Levels are found and named as the family does (find_levels, level_names).

SPLIT_L2_CURVES = {"h100_pcie": 50 * MIB, "a100_80_fine": 40 * MIB}  # the recorded Hopper curve; the whole-line one
H200_L2 = 60 * MIB
GRID_TRIALS = 200
GRID_SCENARIOS = [(name, l2) for name, own in SPLIT_L2_CURVES.items() for l2 in (H200_L2, own)]


def resampled(name: str, l2_bytes: int, footprints: list[int], noise: float, seed: int) -> FloatArray:
    """Curve ``name`` with its footprints scaled from its part's L2 to ``l2_bytes``, read at ``footprints``
    and multiplied point by point by 1 + ``noise`` x a standard normal draw (seeded)."""
    recorded, latencies = load_curve(name)
    scaled = recorded * l2_bytes / SPLIT_L2_CURVES[name]
    grid = np.asarray(footprints, dtype=np.float64)
    assert scaled[0] <= grid[0] and grid[-1] <= scaled[-1], "the grid lies within the recorded footprints"
    clean = np.exp(np.interp(np.log(grid), np.log(scaled), np.log(latencies)))
    return clean * (1.0 + noise * np.random.default_rng(seed).standard_normal(grid.size))


def far_l2_capacities(name: str, l2_bytes: int, dense: bool, noise: float) -> list[float | None]:
    """Per seeded trial, ``capacity.l2`` as the memory family reads it, in L2 sizes, when the far L2
    plateau was found (the last L2 level's size), else None."""
    footprints = sweep_footprints(l2_bytes, Settings(), dense=dense)
    capacities: list[float | None] = []
    for seed in range(GRID_TRIALS):
        levels = find_levels(footprints, resampled(name, l2_bytes, footprints, noise, seed))
        names = level_names(levels, l2_bytes, cached_in_l1=True)
        far = [level for level, named in zip(levels, names, strict=True) if named == "L2 far"]
        capacities.append(far[0].size_bytes / l2_bytes if far and far[0].size_bytes else None)
    return capacities


_capacities: dict[tuple[str, int, bool, float], list[float | None]] = {}


def capacities_of(name: str, l2_bytes: int, dense: bool, noise: float) -> list[float | None]:
    """``far_l2_capacities``, computed once per scenario."""
    key = (name, l2_bytes, dense, noise)
    if key not in _capacities:
        _capacities[key] = far_l2_capacities(*key)
    return _capacities[key]


@pytest.mark.parametrize("noise", [0.006, 0.01])
@pytest.mark.parametrize(("name", "l2_bytes"), GRID_SCENARIOS)
def test_the_memory_grid_finds_the_far_l2_plateau_in_every_noisy_sweep(name: str, l2_bytes: int, noise: float) -> None:
    missed = capacities_of(name, l2_bytes, True, noise).count(None)
    assert missed == 0, f"{name} at {l2_bytes / MIB:g} MiB, noise {noise:.1%}: far L2 missed in {missed} trials"


@pytest.mark.parametrize(("name", "l2_bytes"), GRID_SCENARIOS)
def test_four_points_per_octave_miss_the_far_l2_plateau(name: str, l2_bytes: int) -> None:
    """The grid before its dense stretch (four points per octave throughout) misses the far plateau
    of the same curves in some of the sweeps at 1 % noise (2 to 13 of these 200 when written)."""
    missed = capacities_of(name, l2_bytes, False, 0.01).count(None)
    assert missed >= 0.01 * GRID_TRIALS, f"{name} at {l2_bytes / MIB:g} MiB: missed in only {missed} trials"


@pytest.mark.parametrize("l2_bytes", [H200_L2, SPLIT_L2_CURVES["a100_80_fine"]])
def test_capacity_l2_of_a_whole_line_chase_lands_within_9_percent_above_the_l2(l2_bytes: int) -> None:
    """A chase through every line once (as the memory family's) fills the L2 right up to its size: in
    99 % of the sweeps capacity.l2 is 1.00-1.09 L2 sizes, the range expectations_audit.md reads off
    published whole-line curves (the rest a fraction of a percent below 1.00)."""
    capacities = [c for c in capacities_of("a100_80_fine", l2_bytes, True, 0.006) if c is not None]
    within = sum(1.0 <= c <= 1.09 for c in capacities)
    assert within >= 0.99 * GRID_TRIALS, f"{within} of {GRID_TRIALS} within 1.00-1.09: {sorted(capacities)[:5]}"
    assert min(capacities) >= 0.99


@pytest.mark.parametrize("l2_bytes", [H200_L2, SPLIT_L2_CURVES["h100_pcie"]])
def test_capacity_l2_on_the_grid_is_what_the_whole_recorded_hopper_curve_shows(l2_bytes: int) -> None:
    """h100_pcie visits each 128-byte line twice per lap (one pointer per 64 bytes), so a line evicted
    once may still be hit once, and the step into DRAM sits about 10 % past the L2 on the recorded
    curve itself: the grid must read the capacity the full curve shows, within 3 %."""
    full = levels_of("h100_pcie")[-2].size_bytes
    assert full is not None and 1.05 <= full / SPLIT_L2_CURVES["h100_pcie"] <= 1.15
    capacities = capacities_of("h100_pcie", l2_bytes, True, 0.006)
    assert all(c is not None for c in capacities)
    assert max(abs(c / (full / SPLIT_L2_CURVES["h100_pcie"]) - 1.0) for c in capacities) <= 0.03
