"""What a fact's samples can detect: Student's t, Welch's test, the smallest detectable change.

The distribution functions are held to closed forms (one and two degrees of freedom, and the normal
limit), the test's false-alarm rate to its nominal ``alpha`` and the detectable change to its stated
power by simulation with seeded samples.
"""

from __future__ import annotations

import math
import random
import statistics
from statistics import NormalDist

import pytest

from gpuprobe.core.detection import (
    FACT_ALPHA,
    MOST_DF,
    NOISY,
    POWER,
    RUN_TO_RUN,
    RUN_TO_RUN_PCT,
    TARGET_PCT,
    TOO_FEW,
    Spread,
    detection,
    effective_df,
    incomplete_beta,
    quantity_kind,
    run_to_run_pct,
    samples_needed,
    t_quantile,
    t_test,
    t_two_sided,
)


@pytest.mark.parametrize("t", [0.1, 1.0, 3.0, 12.706, 300.0])
def test_t_tails_match_the_closed_forms_of_one_and_two_degrees_of_freedom(t: float) -> None:
    assert t_two_sided(t, 1.0) == pytest.approx(1.0 - 2.0 / math.pi * math.atan(t), rel=1e-9)  # Cauchy
    assert t_two_sided(t, 2.0) == pytest.approx(1.0 - t / math.sqrt(2.0 + t * t), rel=1e-9)


@pytest.mark.parametrize("z", [0.5, 1.96, 3.29])
def test_many_degrees_of_freedom_are_the_normal(z: float) -> None:
    assert t_two_sided(z, 1e7) == pytest.approx(2.0 * (1.0 - NormalDist().cdf(z)), rel=1e-5)


@pytest.mark.parametrize(("a", "b", "x"), [(0.5, 0.5, 0.3), (2.0, 3.0, 0.7), (7.5, 0.5, 0.99), (30.0, 0.5, 0.2)])
def test_the_incomplete_beta_is_its_own_mirror(a: float, b: float, x: float) -> None:
    """``I_x(a, b) = 1 - I_{1-x}(b, a)``: the two branches of the continued fraction agree."""
    assert incomplete_beta(a, b, x) == pytest.approx(1.0 - incomplete_beta(b, a, 1.0 - x), abs=1e-12)


@pytest.mark.parametrize(("p", "df"), [(0.8, 3.0), (0.975, 10.0), (0.9995, 4.0), (0.9995, 2.37), (0.99995, 1.0)])
def test_the_quantile_inverts_the_tail(p: float, df: float) -> None:
    assert t_two_sided(t_quantile(p, df), df) == pytest.approx(2.0 * (1.0 - p), rel=1e-8)


def test_the_t_test_pools_the_two_runs_noise() -> None:
    base, new = [10.0, 10.2, 9.9, 10.1], [10.4, 10.7, 10.3, 10.5, 10.6, 10.2]
    test = t_test(Spread.of(base), Spread.of(new))
    assert test is not None and test.df == 8
    pooled = (3 * statistics.variance(base) + 5 * statistics.variance(new)) / 8
    expected = (statistics.mean(new) - statistics.mean(base)) / math.sqrt(pooled * (1 / 4 + 1 / 6))
    assert test.change / test.standard_error == pytest.approx(expected)
    assert test.p_value == pytest.approx(t_two_sided(expected, 8.0))


def test_samples_that_never_vary_decide_by_their_values_and_one_sample_cannot_be_tested() -> None:
    flat = Spread.of([33.0] * 5)
    assert t_test(flat, Spread.of([34.0] * 5)).p_value == 0.0
    assert t_test(flat, flat).p_value == 1.0
    assert t_test(Spread.of([33.0]), flat) is None
    assert Spread.of([1.0, math.nan, 3.0]).n == 2  # non-finite samples are not samples


@pytest.mark.parametrize(("n_base", "n_new"), [(2, 2), (3, 3), (2, 9), (3, 9), (9, 9)])
@pytest.mark.parametrize("shape", ["normal", "lognormal"])
def test_the_false_alarm_rate_is_at_most_alpha(n_base: int, n_new: int, shape: str) -> None:
    """Two unchanged runs, unequal sample counts too: flagged with probability at most ``FACT_ALPHA``,
    within three binomial standard errors of 60 000 seeded trials (Welch's test fails this at 2
    against 9). The lognormal is skewed noise of 5 %; noise far more
    skewed than timings show (an exponential tail as wide as the noise) does raise the rate at very
    unequal counts, which is why the suite samples every fact alike."""
    rng, unit = random.Random(n_base * 100 + n_new), NormalDist()
    draw = {"normal": lambda z: 250.0 + 2.5 * z, "lognormal": lambda z: 250.0 * math.exp(0.05 * z)}[shape]
    trials = 60_000

    def spread(n: int) -> Spread:
        return Spread.of([draw(unit.inv_cdf(1.0 - rng.random())) for _ in range(n)])

    alarms = sum(t_test(spread(n_base), spread(n_new)).changed() for _ in range(trials))
    assert alarms / trials <= FACT_ALPHA + 3.0 * math.sqrt(FACT_ALPHA * (1.0 - FACT_ALPHA) / trials)


@pytest.mark.parametrize("n", [2, 3, 5, 9])
def test_a_change_of_the_detectable_size_is_flagged_with_the_stated_power(n: int) -> None:
    """Shift the mean by what :func:`detection` says a run of ``n`` samples at 1 % noise detects: the
    test flags it ``POWER`` of the time, within three binomial standard errors of 4000 seeded trials."""
    rng, noise = random.Random(n), NormalDist(0.0, 1.0)
    trials = 4000
    smallest = detection([1.0 + 0.01 * z for z in _unit_spread(n)])
    assert smallest is not None and smallest.noise_pct == pytest.approx(1.0, rel=1e-9)
    shift = smallest.detects_pct / 100.0

    def spread(center: float) -> Spread:
        return Spread.of([center + 0.01 * noise.inv_cdf(1.0 - rng.random()) for _ in range(n)])

    hits = sum(t_test(spread(1.0), spread(1.0 + shift)).changed() for _ in range(trials))
    assert abs(hits / trials - POWER) <= 3.0 * math.sqrt(POWER * (1.0 - POWER) / trials)


def test_detection_says_why_five_percent_is_out_of_reach() -> None:
    quiet = detection([100.0, 100.1, 99.9])
    assert quiet is not None and quiet.limit == "" and quiet.detects_pct < TARGET_PCT
    assert quiet.text() == f"noise ±0.10 %, detects changes ≥ {quiet.text().split('≥ ')[1]}"
    few = detection([100.0, 101.0, 99.0])
    assert few is not None and few.limit == TOO_FEW and few.needs == samples_needed(few.noise_pct)
    assert few.needs is not None and few.needs > 3
    assert f"too few samples (3; {few.needs} would do)" in few.text()
    noisy = detection([100.0, 130.0, 70.0])
    assert noisy is not None and noisy.limit == NOISY and noisy.needs is None
    assert "a noisy quantity (over 50 samples needed)" in noisy.text()
    single = detection([100.0])
    assert single is not None and single.detects_pct is None and single.limit == TOO_FEW
    assert single.text() == "1 sample: no relative noise (too few samples)"
    assert detection([]) is None
    assert detection([33.0] * 4).text() == "no noise (4 equal samples): any change is beyond it"


def test_more_samples_always_detect_smaller_changes() -> None:
    found = [detection([1.0 + 0.01 * ((i % 2) * 2 - 1) for i in range(n)]) for n in range(2, 30, 2)]
    sizes = [d.detects_pct / d.noise_pct for d in found if d is not None and d.detects_pct and d.noise_pct]
    assert len(sizes) == len(found) and sizes == sorted(sizes, reverse=True)
    assert samples_needed(1.0, FACT_ALPHA) == min(n for n in range(2, 51) if _detects(n, 1.0) <= TARGET_PCT)


def _unit_spread(n: int) -> list[float]:
    """``n`` values of mean 0 and sample standard deviation exactly 1."""
    values = [i - (n - 1) / 2.0 for i in range(n)]
    return [v / statistics.stdev(values) for v in values]


def _detects(n: int, noise_pct: float) -> float:
    found = t_test(Spread(n, 1.0, (noise_pct / 100.0) ** 2), Spread(n, 1.0, (noise_pct / 100.0) ** 2))
    assert found is not None
    return found.detectable() * 100.0


# ---- between runs ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fact_id", "unit", "kind"),
    [
        ("latency.l2", "cycle", "device"),
        ("bandwidth.dram_read.v16", "GB/s", "device"),
        ("tensor.mma_sync.f16.m16n8k16.throughput", "op/clk/SM", "device"),
        ("sync.grid.persistent_step", "us", "device"),
        ("launch.stream.host_latency.cupy", "us", "host"),
        ("host.h2d.pinned.bandwidth", "GB/s", "host"),
        ("tensor.wgmma.bf16.fraction_of_cublas", "fraction", "ratio"),
        ("tensor.mma_sync.bf16.m16n8k16.tflops", "TFLOP/s", "clocked"),
        ("device.sm_clock", "MHz", "clocked"),
        ("bandwidth.l2_read.v16", "GB/s", "clocked"),
        ("dsmem.bandwidth.peer", "GB/s", "clocked"),
        ("atomic.global.red.throughput.distinct", "Gop/s", "clocked"),
        ("bandwidth.dram_read.v16", "GB/s", "device"),
        ("capacity.l2", "byte", "fitted"),
        ("cache.l1.line_bytes", "byte", "fitted"),
        ("bandwidth.dram_read_saturation.v4", "count", "fitted"),
        ("cache.l2.sector_bytes", "byte", "exact"),
        ("l2.partition_count", "count", "exact"),
        ("device.l2_bytes", "byte", "exact"),
        ("tensor.mma_sync.fp8.emulated", "bool", "exact"),
    ],
)
def test_each_kind_of_quantity_has_its_run_to_run_allowance(fact_id: str, unit: str, kind: str) -> None:
    """Fitted sizes carry the unit byte or count, yet are estimates: the id, not the unit, says so."""
    assert quantity_kind(fact_id, unit) == kind
    assert run_to_run_pct(fact_id, unit) == RUN_TO_RUN_PCT[kind]


def test_the_allowance_keeps_quiet_facts_from_flagging_a_run_that_moved_and_still_sees_five_percent() -> None:
    before, moved, slower = Spread.of([100.0] * 3), Spread.of([100.6] * 3), Spread.of([105.0] * 3)
    assert t_test(before, moved).changed()  # within-run noise alone: any move is a change
    assert not t_test(before, moved, run_to_run=0.5).changed()
    assert t_test(before, slower, run_to_run=0.5).changed()
    assert t_test(before, slower, run_to_run=0.5).df == MOST_DF  # the allowance is known, not estimated


def test_satterthwaite_degrees_of_freedom_lie_between_the_samples_and_the_normal() -> None:
    assert effective_df(1.0, 4, 0.0) == 4.0
    assert effective_df(0.0, 4, 1.0) == MOST_DF
    assert effective_df(1.0, 4, 1.0) == 16.0  # 4 x ((1 + 1) / 1)^2
    assert effective_df(1.0, 4, 0.5) == 9.0  # 4 x 1.5^2, rounded down to two digits


@pytest.mark.parametrize("n", [3, 9])
def test_runs_that_move_by_the_allowance_are_flagged_at_most_alpha_of_the_time(n: int) -> None:
    """Each run off by a factor of the allowed spread, then samples of 0.3 % noise: false alarms at most
    ``FACT_ALPHA``, within three binomial standard errors of 60 000 seeded trials."""
    rng, unit = random.Random(n), NormalDist()
    trials, allowed = 60_000, RUN_TO_RUN_PCT["device"]

    def spread() -> Spread:
        centre = 250.0 * (1.0 + allowed / 100.0 * unit.inv_cdf(1.0 - rng.random()))
        return Spread.of([centre * (1.0 + 0.003 * unit.inv_cdf(1.0 - rng.random())) for _ in range(n)])

    alarms = sum(t_test(spread(), spread(), run_to_run=allowed).changed() for _ in range(trials))
    assert alarms / trials <= FACT_ALPHA + 3.0 * math.sqrt(FACT_ALPHA * (1.0 - FACT_ALPHA) / trials)


def test_a_host_cost_says_its_run_to_run_noise_puts_five_percent_out_of_reach() -> None:
    found = detection([4.0, 4.01, 3.99], run_to_run=RUN_TO_RUN_PCT["host"])
    assert found is not None and found.limit == RUN_TO_RUN and found.needs is None
    assert "(±1.0 % between runs)" in found.text() and "run-to-run noise (no sample count would do)" in found.text()
    device = detection([4.0, 4.01, 3.99], run_to_run=RUN_TO_RUN_PCT["device"])
    assert device is not None and device.limit == ""
