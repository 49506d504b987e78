"""The atomics family's host side: predictions, self-checks, budget and contracts, end to end on the simulated GPU."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from gpuprobe.core.arch import SUPPORTED_ARCHS, parse_arch
from gpuprobe.families import atomics
from gpuprobe.families.atomics import (
    GLOBAL_SPREADS,
    PROBES,
    WORD,
    ProbeFailure,
    Settings,
    Stream,
    chain_values,
    check_chain,
    check_counters,
    check_returned_sums,
    check_serialized,
    simulated,
)
from gpuprobe.families.atomics.simulated import with_fault
from gpuprobe.families.sampling import Stopping
from gpuprobe.kernels.check import check_probe
from gpuprobe.kernels.cubin import build_ptx
from gpuprobe.kernels.registry import PTX_DIR, find_probe
from gpuprobe.measure.plan import family_seconds
from gpuprobe.simulated.gpu import measure_family, simulated_gpu
from tests.helpers.devices import H100_SXM

FAST = Settings(
    short_iterations=2,
    long_iterations=6,
    sampling=Stopping(3, 4, 0.01, 0.5),
    block=128,
    blocks_per_sm=2,
    stream_max_iterations=4096,  # a difference of 100 ticks of the CUDA events (50 us) even on 8 simulated SMs
    stream_sampling=Stopping(3, 3, 0.01, 0.5),
)


def _run(gpu, settings=FAST, runnable=frozenset(PROBES)):
    return measure_family(atomics, gpu, runnable, settings)


def _facts(measured) -> dict:
    return {f.id: f for m in measured.values() for f in m.facts}


# ---- predictions and checks ------------------------------------------------------------------------


def test_one_lane_chain_runs_through_fibonacci_numbers() -> None:
    """From a zeroed counter with a first increment of 1, the returned values are 0, 1, 1, 2, 3, 5."""
    assert chain_values(1, 6) == (5, 3, 8)
    assert chain_values(1, 1) == (0, 0, 1)
    last, before, final = chain_values(3, 200)
    assert (last + before) % WORD == final  # each add added the value the one before returned


def test_a_chain_that_lost_or_repeated_an_add_fails() -> None:
    last, before, final = chain_values(1, 64)
    check_chain("k", 1, 64, [last], [before], [final])
    with pytest.raises(ProbeFailure, match=r"lane 0 returned .* the host predicted"):
        check_chain("k", 1, 64, [last], [before], [final + 1])
    with pytest.raises(ProbeFailure, match="lane 1"):
        check_chain("k", 1, 64, [last, last], [before, before + 1], [final, final])


def _serialized(order: list[int], start: int, increments: list[int]) -> tuple[list[int], int]:
    """One warp instruction on one address, its adds performed in ``order``: returned values, final."""
    last, counter = [0] * len(order), start
    for lane in order:
        last[lane], counter = counter, (counter + increments[lane]) % WORD
    return last, counter


def test_a_warp_on_one_address_must_be_one_serial_chain_into_the_final_value() -> None:
    rng = np.random.default_rng(1)
    increments = [int(x) for x in rng.integers(1, WORD, 32)]
    last, final = _serialized([int(x) for x in rng.permutation(32)], WORD - 5, increments)  # wraps mod 2**32
    check_serialized("k", last, increments, final)
    with pytest.raises(ProbeFailure, match="do not chain into the final counter"):
        check_serialized("k", last, increments, (final + 1) % WORD)
    broken = list(last)
    broken[3] = (broken[3] + 7) % WORD
    with pytest.raises(ProbeFailure, match="chain"):
        check_serialized("k", broken, increments, final)
    twice = list(last)
    twice[5] = twice[6]
    with pytest.raises(ProbeFailure, match="same value"):
        check_serialized("k", twice, increments, final)


def test_two_separate_chains_are_not_one() -> None:
    """Two halves that each chain, ending at the final value and at some other lane, are caught."""
    increments = [1] * 4
    last = [10, 11, 20, 21]  # 10 -> 11 -> (12: nobody), 20 -> 21 -> 22
    with pytest.raises(ProbeFailure, match="2 lane"):
        check_serialized("k", last, increments, 22)


def test_counters_and_returned_values_are_held_to_the_adds_made() -> None:
    offsets = GLOBAL_SPREADS["one_per_warp"].offsets(256)  # 8 warps, 8 counters 128 bytes apart
    counters = np.zeros(8 * 32, dtype=np.uint32)
    counters[::32] = 32 * 10 * 3
    check_counters("k", offsets, 10, 3, counters)
    counters[32] -= 3
    with pytest.raises(ProbeFailure, match="counter 32 ended at 957 after 320 adds of 3; the host predicted 960"):
        check_counters("k", offsets, 10, 3, counters)
    n = 32 * 10  # each warp's 320 adds handed out 0, 3, ..., 3 (n - 1), shared among its lanes
    sums = np.zeros(256, dtype=np.uint32)
    sums[::32] = 3 * n * (n - 1) // 2
    check_returned_sums("k", offsets, 10, 3, sums)
    sums[64] += 3
    with pytest.raises(ProbeFailure, match=r"counter 64's 320 adds sum to .* handed out twice or never"):
        check_returned_sums("k", offsets, 10, 3, sums)


def test_sums_of_returned_values_are_exact_beyond_64_bits() -> None:
    """A counter with billions of adds: the expected sum is taken mod 2**32 without overflow."""
    offsets = np.zeros(4, dtype=np.int64)
    adds = 2**31  # 4 threads x 2**31 adds on one counter: n (n - 1) / 2 is about 2**65
    n = 4 * adds
    total = 5 * n * (n - 1) // 2 % WORD
    check_returned_sums("k", offsets, adds, 5, np.array([total, 0, 0, 0], dtype=np.uint32))


@pytest.mark.parametrize(
    "change",
    [{"short_iterations": 0}, {"long_iterations": 2, "short_iterations": 2}, {"block": 100}, {"increment": 0},
     {"stream_max_iterations": 2}, {"stream_target_ms": 0.0}],
)  # fmt: skip
def test_settings_that_would_hang_or_mean_nothing_are_refused(change: dict) -> None:
    with pytest.raises(ValueError, match="Settings"):
        dataclasses.replace(Settings(), **change)


# ---- end to end on the simulated GPU -----------------------------------------------------------------


def test_simulated_latencies_and_throughputs_are_recovered() -> None:
    gpu = simulated_gpu(sm_count=8, blocks_per_sm=2)
    measured = _run(gpu)
    assert {name: m.outcome.status for name, m in measured.items()} == dict.fromkeys(PROBES, "ok")
    facts = _facts(measured)
    expected = {
        "atomic.global.latency": simulated.LATENCY["global", 1],
        "atomic.global.latency.warp_one_address": simulated.LATENCY["global", 32],
        "atomic.global.latency.warp_distinct": simulated.LATENCY["global", 1],
        "atomic.shared.latency": simulated.LATENCY["shared", 1],
        "atomic.shared.latency.warp_one_address": simulated.LATENCY["shared", 32],
        "atomic.global.throughput.one_address": simulated.ONE_ADDRESS_GOPS["global"],
        "atomic.global.throughput.distinct": simulated.PEAK_GOPS["global"],
        "atomic.global.red.throughput.one_address": simulated.ONE_ADDRESS_GOPS["global"] * simulated.RED_SPEEDUP,
        "atomic.shared.throughput.distinct": simulated.ONE_ADDRESS_GOPS["shared"] * 16 * 32,  # 16 blocks x 32 words
    }
    for fact_id, value in expected.items():
        assert facts[fact_id].value == pytest.approx(value, rel=0.05), fact_id
    assert facts["atomic.global.latency"].unit == "cycle"
    assert facts["atomic.global.throughput.distinct"].unit == "Gop/s"
    declared = {f for name in PROBES for f in find_probe(name).facts}
    assert set(facts) == declared


class _Timed(Stream):
    """A stream whose launches take the given milliseconds per number of iterations."""

    def __init__(self, ms, settings: Settings) -> None:
        super().__init__(SimpleNamespace(settings=settings), "k", 1, list, lambda: None, lambda _: None)
        self.ms = ms

    def time(self, iterations: int) -> float:
        return self.ms(iterations)


def test_the_long_launch_is_sized_to_the_target_time() -> None:
    settings = Settings(stream_target_ms=3.0, stream_short_iterations=1)
    assert _Timed(lambda n: 0.01 + 0.5 * n, settings).long_iterations(0.51) == 7  # 1 + 3 ms / 0.5 ms
    assert _Timed(lambda n: 0.01 + 1e-6 * n, settings).long_iterations(0.01) == settings.stream_max_iterations
    # timing noise hides the per-iteration cost: the trial's whole time bounds it, never the maximum
    assert _Timed(lambda n: 1.0, settings).long_iterations(1.0) == 10  # 1 + 3 ms / (1 ms / 3)


def test_throughput_uses_every_sm_at_the_occupancy_the_device_allows() -> None:
    gpu = simulated_gpu(sm_count=8, blocks_per_sm=1)
    series = _run(gpu, runnable={"atomics.throughput.global"})["atomics.throughput.global"].outcome.series
    assert series["throughput"]["threads"] == [8 * 1 * FAST.block] * 3


@pytest.mark.parametrize(("fault", "message"), [("lost_add", "host predicted"), ("duplicate_value", "")])
def test_a_wrong_atomic_result_fails_its_probe_and_gives_no_number(fault: str, message: str) -> None:
    measured = _run(with_fault(simulated_gpu(sm_count=8, blocks_per_sm=2), fault))
    must_fail = set(PROBES) - ({"atomics.throughput.global_red"} if fault == "duplicate_value" else set())
    for name in must_fail:
        assert measured[name].outcome.status == "failed", name
        assert measured[name].facts == []
        assert message in measured[name].outcome.detail
    if fault == "duplicate_value":  # a red returns nothing, so only its counters are checked
        assert measured["atomics.throughput.global_red"].outcome.status == "ok"


def test_probes_whose_contract_failed_are_not_launched() -> None:
    gpu = simulated_gpu(sm_count=8, blocks_per_sm=2)
    measured = _run(gpu, runnable={"atomics.latency.shared"})
    assert set(measured) == {"atomics.latency.shared"}
    assert set(gpu.launches) == {"gp_at_lat_shared", "gp_sm_clock"}  # and the clock readings around it


def test_the_planned_work_fits_the_time_budget_on_an_h100() -> None:
    """Worst case on an H100-class part, with the default settings (``atomics.plan``: every repeat, ~1500
    cycles an add of a warp on one global address, every throughput launch at 1.5 x its target time):
    well within the family's share (8 s for the atomics and the L2 map together)."""
    plan = atomics.plan(Settings(), H100_SXM)
    assert plan.probes == len(PROBES)
    assert family_seconds(plan, child_start=False) < 4.0, plan
    greedy = atomics.plan(dataclasses.replace(Settings(), stream_target_ms=30.0), H100_SXM)
    assert family_seconds(greedy, child_start=False) > 4.0  # the bound counts the launches' time: it can fail


# ---- static: every arch, and contracts that catch a wrong kernel ---------------------------------------


@pytest.mark.parametrize("arch", [a.name for a in SUPPORTED_ARCHS])
def test_every_probe_targets_every_supported_arch(arch: str) -> None:
    assert all(find_probe(name).supports(parse_arch(arch)) for name in PROBES)


def _variant(tmp_path: Path, old: str, new: str) -> Path:
    text = (PTX_DIR / "atomics" / "atomics.ptx").read_text()
    assert old in text
    path = tmp_path / "atomics_variant.ptx"
    path.write_text(text.replace(old, new))
    return path


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_an_atom_whose_value_is_dropped_becomes_a_red_and_is_caught(tmp_path: Path, arch: str) -> None:
    """Without the sum of returned values, ptxas emits RED: the throughput contract refuses it."""
    path = _variant(tmp_path, "\tadd.u32 %r11, %r11, %r12;\n", "")
    result = check_probe(find_probe("atomics.throughput.global"), build_ptx([path], parse_arch(arch)))
    assert result.status == "violated"
    assert {v.rule for v in result.violations} >= {"count ATOMG\\.E\\.ADD\\.STRONG\\.GPU in kernel == 8"}


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_an_alu_step_on_the_latency_chain_is_caught(tmp_path: Path, arch: str) -> None:
    path = _variant(
        tmp_path,
        "\tatom.global.add.u32 %r7, [%rd3], %r8;\n",
        "\tatom.global.add.u32 %r7, [%rd3], %r8;\n\tadd.u32 %r7, %r7, %r1;\n",
    )
    result = check_probe(find_probe("atomics.latency.global"), build_ptx([path], parse_arch(arch)))
    assert result.status == "violated"
    assert [v.rule for v in result.violations] == [find_probe("atomics.latency.global").contract[4].describe()]
    assert "IADD3" in result.detail


def test_the_invariants_hold_on_the_simulated_gpu_and_catch_a_contradiction() -> None:
    from gpuprobe.families.atomics import INVARIANTS

    gpu = simulated_gpu(sm_count=8, blocks_per_sm=2)
    facts = _facts(_run(gpu))
    checks = [c for invariant in INVARIANTS for c in invariant(facts, gpu.device())]
    assert [(name, ok) for name, ok, *_ in checks] == [
        ("atomics.shared_below_global", True),
        ("atomics.contention_costs", True),
    ]
    swapped = dict(facts)
    swapped["atomic.shared.latency"] = dataclasses.replace(facts["atomic.shared.latency"], value=5000.0)
    assert not INVARIANTS[0](swapped, gpu.device())[0][1]
    assert INVARIANTS[1]({}, gpu.device()) == []  # not measured: left out, not passed
