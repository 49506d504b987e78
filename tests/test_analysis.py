"""Median confidence intervals and cache-level detection, on curves from the cache model.

Every curve here is fabricated by ``cache_model`` (test support); nothing is measured.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from gpuprobe.judge.analysis import Level, find_levels, median_ci
from gpuprobe.simulated.cache_model import HIERARCHIES, KIB, MIB, Hierarchy, curve, log_footprints

CAPACITY_TOLERANCE = 0.30
LATENCY_TOLERANCE = 0.06
SEEDS = (0, 1, 2)
NOISE_BY_SEED = (0.02, 0.025, 0.03)
OUTLIERS = 2
DRAM_DRIFT = 0.01


def footprints_for(levels: Hierarchy) -> np.ndarray:
    """4 KB to 4x the last cache's capacity, 4 points per octave."""
    last_capacity = levels[-2][0]
    assert last_capacity is not None
    return log_footprints(4 * KIB, 4 * last_capacity, per_octave=4)


def describe(levels: list[Level]) -> str:
    """Found levels as a short readable string for assertion messages."""
    return ", ".join(
        f"{level.latency:.0f} cyc up to {'-' if level.size_bytes is None else f'{level.size_bytes / MIB:.3g} MiB'}"
        for level in levels
    )


def assert_recovers(expected: Hierarchy, found: list[Level]) -> None:
    """Same number of levels, each capacity within 30 % and each latency within 6 %."""
    assert len(found) == len(expected), f"expected {len(expected)} levels, found: {describe(found)}"
    for (capacity, latency), level in zip(expected, found, strict=True):
        assert level.latency == pytest.approx(latency, rel=LATENCY_TOLERANCE), describe(found)
        if capacity is None:
            assert level.size_bytes is None
        else:
            assert level.size_bytes == pytest.approx(capacity, rel=CAPACITY_TOLERANCE), describe(found)


# ----------------------------------------------------------------------------- the model


def test_model_sits_on_its_plateaus_far_from_transitions() -> None:
    levels = HIERARCHIES["T4"]
    footprints = np.array([8 * KIB, 1 * MIB, 15 * MIB])
    for transition in ("sharp", "smooth"):
        assert curve(levels, footprints, transition) == pytest.approx([32.0, 220.0, 500.0], rel=0.01)


def test_model_outliers_are_single_separated_points() -> None:
    footprints = log_footprints(4 * KIB, 64 * MIB)
    clean = curve(HIERARCHIES["V100"], footprints)
    spiked = curve(HIERARCHIES["V100"], footprints, outliers=3, seed=7)
    ratios = spiked / clean
    positions = np.flatnonzero(ratios > 1.5)
    assert len(positions) == 3
    assert np.all(np.diff(positions) > 1)
    assert np.all((ratios[positions] >= 2.0) & (ratios[positions] <= 5.0))


# ----------------------------------------------------------------------------- find_levels: real-part hierarchies


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("transition", ["sharp", "smooth"])
@pytest.mark.parametrize("hierarchy", sorted(HIERARCHIES))
def test_recovers_every_level(hierarchy: str, transition: str, seed: int) -> None:
    levels = HIERARCHIES[hierarchy]
    footprints = footprints_for(levels)
    latency = curve(
        levels,
        footprints,
        transition,
        noise=NOISE_BY_SEED[seed],
        outliers=OUTLIERS,
        drift_per_octave=DRAM_DRIFT,
        seed=seed,
    )
    assert_recovers(levels, find_levels(footprints, latency))


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize("transition", ["sharp", "smooth"])
@pytest.mark.parametrize("hierarchy", ["A100", "H100"])
def test_near_and_far_l2_stay_separate_levels(hierarchy: str, transition: str, seed: int) -> None:
    """Fails if the ~1.8x near/far L2 step were merged into one plateau."""
    levels = HIERARCHIES[hierarchy]
    (_, _), (near_capacity, near_latency), (far_capacity, far_latency), _ = levels
    footprints = footprints_for(levels)
    latency = curve(levels, footprints, transition, noise=0.03, outliers=OUTLIERS, seed=seed)
    found = find_levels(footprints, latency)
    assert len(found) == 4, describe(found)
    near, far = found[1], found[2]
    assert near.latency == pytest.approx(near_latency, rel=LATENCY_TOLERANCE)
    assert far.latency == pytest.approx(far_latency, rel=LATENCY_TOLERANCE)
    assert far.latency / near.latency > 1.5
    assert near.size_bytes is not None and far.size_bytes is not None
    assert near.size_bytes < 0.75 * far_capacity, "the near level must end at about half the L2"
    assert near.size_bytes == pytest.approx(near_capacity, rel=CAPACITY_TOLERANCE)
    assert near.last_footprint < far.first_footprint


# ----------------------------------------------------------------------------- find_levels: step sizes and shapes


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("transition", ["sharp", "smooth"])
def test_resolves_a_1_3x_step(transition: str, seed: int) -> None:
    levels: Hierarchy = [(1 * MIB, 100.0), (None, 130.0)]
    footprints = log_footprints(4 * KIB, 16 * MIB)
    latency = curve(levels, footprints, transition, noise=0.03, outliers=OUTLIERS, seed=seed)
    assert_recovers(levels, find_levels(footprints, latency))


@pytest.mark.parametrize("seed", SEEDS)
def test_transitions_two_octaves_wide(seed: int) -> None:
    levels: Hierarchy = [(32 * KIB, 20.0), (4 * MIB, 200.0), (None, 500.0)]
    footprints = log_footprints(4 * KIB, 64 * MIB)
    latency = curve(levels, footprints, "smooth", noise=0.03, outliers=OUTLIERS, seed=seed, smooth_width_octaves=2.0)
    assert_recovers(levels, find_levels(footprints, latency))


@pytest.mark.parametrize("seed", SEEDS)
def test_memory_drift_does_not_split_memory(seed: int) -> None:
    """DRAM latency rising 4 % per octave for 6 octaves (TLB misses) stays one level."""
    levels = HIERARCHIES["T4"]
    footprints = log_footprints(4 * KIB, 256 * MIB)
    latency = curve(levels, footprints, "smooth", noise=0.03, outliers=OUTLIERS, drift_per_octave=0.04, seed=seed)
    found = find_levels(footprints, latency)
    assert len(found) == 3, describe(found)
    assert found[-1].size_bytes is None


@pytest.mark.parametrize("noise", [0.0, 0.03])
def test_flat_curve_is_one_level_without_size(noise: float) -> None:
    footprints = log_footprints(4 * KIB, 256 * MIB)
    latency = curve([(None, 300.0)], footprints, noise=noise, seed=3)
    found = find_levels(footprints, latency)
    assert len(found) == 1
    assert found[0].size_bytes is None
    assert found[0].latency == pytest.approx(300.0, rel=0.02)
    assert found[0].first_footprint == footprints[0]
    assert found[0].last_footprint == footprints[-1]


@pytest.mark.parametrize("spike_width", [1, 2])
@pytest.mark.parametrize("factor", [2.0, 5.0])
def test_outlier_spike_alone_creates_no_level(spike_width: int, factor: float) -> None:
    footprints = log_footprints(4 * KIB, 64 * MIB)
    latency = curve([(None, 300.0)], footprints, noise=0.02, seed=5)
    middle = footprints.size // 2
    latency[middle : middle + spike_width] *= factor
    found = find_levels(footprints, latency)
    assert len(found) == 1, describe(found)
    assert found[0].latency == pytest.approx(300.0, rel=0.03)


def test_outliers_on_a_plateau_do_not_split_it() -> None:
    levels = HIERARCHIES["RTX4090"]
    footprints = footprints_for(levels)
    latency = curve(levels, footprints, "sharp", noise=0.02, seed=1)
    l2_points = np.flatnonzero((footprints > 1 * MIB) & (footprints < 48 * MIB))
    latency[l2_points[::4]] *= 3.0  # every fourth point of the L2 plateau
    assert_recovers(levels, find_levels(footprints, latency))


# ----------------------------------------------------------------------------- find_levels: input handling


def test_unsorted_input_gives_the_same_levels() -> None:
    levels = HIERARCHIES["H100"]
    footprints = footprints_for(levels)
    latency = curve(levels, footprints, "smooth", noise=0.02, outliers=1, seed=4)
    order = np.random.default_rng(0).permutation(footprints.size)
    assert find_levels(footprints[order], latency[order]) == find_levels(footprints, latency)


def test_nan_points_are_ignored() -> None:
    levels = HIERARCHIES["synthetic5"]
    footprints = footprints_for(levels)
    latency = curve(levels, footprints, "sharp", noise=0.02, seed=6)
    expected = find_levels(footprints, latency)
    positions = [5, 20, 40, 41]
    gappy_footprints = np.insert(footprints, positions, [1e9, 7.0, np.nan, np.nan])
    gappy_latency = np.insert(latency, positions, [np.nan, np.nan, 1e6, 50.0])
    assert find_levels(gappy_footprints, gappy_latency) == expected


def test_accepts_plain_lists() -> None:
    assert find_levels([4096.0, 8192.0, 16384.0, 32768.0], [30.0, 30.0, 31.0, 30.0])[0].size_bytes is None


@pytest.mark.parametrize(
    ("footprints", "latency", "message"),
    [
        ([1.0, 2.0, 3.0], [1.0, 2.0], "as many footprints as latencies"),
        ([1.0, 2.0, np.nan, 4.0], [1.0, 2.0, 3.0, np.nan], "at least 3 points"),
        ([1.0, 2.0], [5.0, 6.0], "at least 3 points"),
        ([1.0, 2.0, 3.0], [5.0, 0.0, 6.0], "strictly positive latencies"),
        ([1.0, -2.0, 3.0], [5.0, 5.0, 6.0], "strictly positive footprints"),
        ([1.0, 2.0, 3.0], [5.0, np.inf, 6.0], "finite latencies"),
        ([[1.0, 2.0, 3.0]], [[5.0, 5.0, 6.0]], "1-D"),
    ],
)
def test_find_levels_rejects_bad_input(footprints: list[float], latency: list[float], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        find_levels(footprints, latency)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(min_value=1.0, max_value=1e4), min_size=3, max_size=80))
def test_levels_are_ordered_and_inside_the_data(latency: list[float]) -> None:
    footprints = 4 * KIB * 2.0 ** (np.arange(len(latency)) / 4)
    found = find_levels(footprints, latency)
    for level in found:
        assert min(latency) <= level.latency <= max(latency)
        assert level.first_footprint <= level.last_footprint
    for level, following in itertools.pairwise(found):
        assert level.last_footprint < following.first_footprint
        assert level.size_bytes is not None
        assert level.first_footprint * (1 - 1e-9) <= level.size_bytes <= following.last_footprint * (1 + 1e-9)
    if found:
        assert found[-1].size_bytes is None


# ----------------------------------------------------------------------------- median_ci


def test_median_ci_contains_the_median_and_uses_sample_values() -> None:
    samples = np.random.default_rng(1).lognormal(size=51)
    median, low, high = median_ci(samples)
    assert median == pytest.approx(np.median(samples))
    assert low < median < high
    assert low in samples and high in samples


def test_median_ci_narrows_with_more_samples() -> None:
    rng = np.random.default_rng(2)
    widths = []
    for n in (15, 150, 1500):
        _, low, high = median_ci(rng.normal(10.0, 1.0, size=n))
        widths.append(high - low)
    assert widths[0] > widths[1] > widths[2]


def test_median_ci_with_too_few_samples_is_the_range() -> None:
    assert median_ci([3.0, 1.0, 2.0, 5.0, 4.0]) == (3.0, 1.0, 5.0)  # 5 samples cover only 93.75 %
    assert median_ci([7.0]) == (7.0, 7.0, 7.0)
    assert median_ci([1.0, 2.0]) == (1.5, 1.0, 2.0)


def test_median_ci_order_statistics_for_nine_samples() -> None:
    # n = 9: ranks 2 and 8 cover 1 - 2 * 10 / 512 = 96.1 %, ranks 3 and 7 only 82 %.
    assert median_ci(list(range(1, 10))) == (5.0, 2.0, 8.0)


def test_median_ci_covers_the_true_median_at_the_stated_rate() -> None:
    rng = np.random.default_rng(3)
    trials = 2000
    hits = sum(low <= 0.0 <= high for _, low, high in (median_ci(rng.standard_normal(30)) for _ in range(trials)))
    assert 0.94 <= hits / trials <= 0.985


@pytest.mark.parametrize(
    ("samples", "confidence", "message"),
    [
        ([], 0.95, "at least one sample"),
        ([1.0, np.nan], 0.95, "finite"),
        ([1.0, np.inf], 0.95, "finite"),
        ([1.0, 2.0], 1.0, "confidence"),
        ([1.0, 2.0], 0.0, "confidence"),
    ],
)
def test_median_ci_rejects_bad_input(samples: list[float], confidence: float, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        median_ci(samples, confidence)


finite_samples = st.lists(st.floats(allow_nan=False, allow_infinity=False), min_size=1, max_size=300)


@settings(max_examples=200, deadline=None)
@given(finite_samples, st.floats(min_value=0.01, max_value=0.999))
def test_median_ci_never_crashes_on_finite_input(samples: list[float], confidence: float) -> None:
    median, low, high = median_ci(samples, confidence)
    assert min(samples) <= low <= median <= high <= max(samples)


@settings(max_examples=100, deadline=None)
@given(finite_samples)
def test_median_ci_widens_with_confidence(samples: list[float]) -> None:
    _, low_90, high_90 = median_ci(samples, 0.90)
    _, low_99, high_99 = median_ci(samples, 0.99)
    assert low_99 <= low_90 and high_90 <= high_99
