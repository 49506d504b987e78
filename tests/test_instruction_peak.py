"""The instruction peak per type that the wgmma and mma families leave in the run's state, and what a library
reads of it at its own clock."""

from __future__ import annotations

import json

import pytest

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.families import instruction_peak, mma, wgmma
from gpuprobe.families.instruction_peak import STATE_KEY, at_clock, record
from gpuprobe.families.mma import Settings as MmaSettings
from gpuprobe.families.sampling import Stopping
from gpuprobe.families.wgmma import Settings as WgmmaSettings
from gpuprobe.simulated.gpu import measure_family, simulated_gpu


def test_the_best_instruction_is_the_peak_and_a_later_lower_one_does_not_replace_it() -> None:
    state: dict = {}
    record(state, "bf16", [2700.0, 2710.0], "mma.bf16.m16n8k16.ilp8")
    record(state, "bf16", [4000.0, 4010.0, 3990.0], "wgmma.throughput.bf16.ss")
    record(state, "bf16", [3000.0], "wgmma.throughput.bf16.ss.n64")
    assert state[STATE_KEY]["bf16"]["source"] == "wgmma.throughput.bf16.ss"
    assert json.loads(json.dumps(state)) == state  # it crosses into the next measuring process as JSON


def test_the_peak_at_a_clock_is_the_per_clock_rate_times_the_sms_and_the_clock() -> None:
    state: dict = {}
    record(state, "e4m3", [8000.0], "wgmma.throughput.e4m3.ss")
    peak = at_clock(state, "e4m3", sm_count=132, mhz=1755.0)
    assert peak is not None and peak.tflops == pytest.approx(8000 * 132 * 1755e6 / 1e12)
    assert peak.source == "wgmma.throughput.e4m3.ss"
    assert at_clock(state, "bf16", 132, 1755.0) is None
    assert "bf16" in instruction_peak.missing_reason("bf16")


@pytest.mark.parametrize("samples", [[], [0.0], [-1.0], [float("nan")]])
def test_a_rate_that_is_no_rate_is_refused(samples: list[float]) -> None:
    with pytest.raises(ValueError, match="no positive finite samples"):
        record({}, "bf16", samples, "a probe")


def test_an_unknown_type_is_refused() -> None:
    with pytest.raises(ValueError, match="is none of"):
        record({}, "f64", [1.0], "a probe")


def test_the_wgmma_family_records_each_dense_type_it_measures_at_its_per_clock_rate() -> None:
    gpu = simulated_gpu(sm_count=4, blocks_per_sm=1)
    settings = WgmmaSettings(sampling=Stopping(3, 3, 0.01, 5.0), throughput_sampling=Stopping(2, 2))
    state: dict = {}
    measured = measure_family(wgmma, gpu, {"wgmma.throughput.bf16.ss", "wgmma.throughput.s8.ss"}, settings, state)
    assert {m.outcome.status for m in measured.values()} == {"ok"}
    facts = {f.id: f for m in measured.values() for f in m.facts}
    for dtype, per_clock in (("bf16", 4096), ("s8", 8192)):
        held = state[STATE_KEY][dtype]
        assert held["source"] == f"wgmma.throughput.{dtype}.ss"
        fraction = facts[f"tensor.wgmma.{dtype}.m64n256k{32 // {'bf16': 2, 's8': 1}[dtype]}.ss.fraction_of_peak"]
        assert sorted(v / per_clock for v in held["flop_per_clock_per_sm"]) == pytest.approx(sorted(fraction.samples))


def test_the_mma_family_records_a_dense_type_as_two_flop_a_multiply_add() -> None:
    gpu = simulated_gpu(sm_count=4, blocks_per_sm=1, arch="sm_80")
    state: dict = {}
    names = {f"mma.int8.m16n8k32.ilp{ilp}" for ilp in mma.ILPS}
    measured = measure_family(mma, gpu, names, MmaSettings(sampling=Stopping(2, 2)), state)
    assert {m.outcome.status for m in measured.values()} == {"ok"}
    plateau = {f.id: f for m in measured.values() for f in m.facts}["tensor.mma_sync.int8.m16n8k32.throughput"]
    held = state[STATE_KEY]["s8"]
    assert held["flop_per_clock_per_sm"] == pytest.approx([2 * v for v in plateau.samples])


def test_a_librarys_share_is_its_rate_over_the_peak_at_each_timings_clock_and_above_it_is_impossible() -> None:
    state: dict = {}
    record(state, "bf16", [4000.0], "wgmma.throughput.bf16.ss")
    peak_at = [4000.0 * 132 * mhz * 1e6 / 1e12 for mhz in (1755.0, 1980.0)]
    found = instruction_peak.shares(state, "bf16", 132, [0.8 * peak_at[0], 0.7 * peak_at[1]], [1755.0, 1980.0], "x")
    assert found == pytest.approx([0.8, 0.7])
    assert instruction_peak.share_fact("f", found, "p", "bf16").value == pytest.approx(0.75)
    with pytest.raises(ProbeFailure, match=r"cuBLAS 8192: .* 1\.100 x the bf16 instruction peak .* impossible"):
        instruction_peak.shares(state, "bf16", 132, [1.1 * peak_at[0]], [1755.0], "cuBLAS 8192")
    assert instruction_peak.shares(state, "e4m3", 132, [1.0], [1755.0], "x") is None
    missing = instruction_peak.share_fact("f", None, "p", "e4m3")
    assert missing.value is None and missing.detail == instruction_peak.missing_reason("e4m3")
