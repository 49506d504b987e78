"""What every family measures with: argument checks, poisoned outputs, stopping rules, facts, settings checks."""

from __future__ import annotations

import numpy as np
import pytest

from gpuprobe.core.detection import detection
from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Fact
from gpuprobe.families.measuring import fact
from gpuprobe.families.sampling import Stopping, sample_until_stable, stamp_stops, stop_text, stops_recorded
from gpuprobe.runner.checked import Kernels, check_arguments, unwritten
from gpuprobe.simulated.gpu import SimulatedGpu

SIGNATURE = [("u64", "buffer"), ("u32", "n"), ("s32", "k"), ("f32", "x"), ("b64", "bits")]


def test_arguments_match_ptx_types() -> None:
    buffer = object()
    check_arguments("k", [buffer, np.uint32(1), np.int32(-1), np.float32(0.5), np.int64(3)], SIGNATURE)
    wrong = {
        1: (np.int32(1), "parameter n is .u32, given int32"),
        2: (np.uint32(1), "parameter k is .s32, given uint32"),
        3: (np.float64(0.5), "parameter x is .f32, given float64"),
        0: (np.uint32(1), "parameter buffer is .u64, given uint32"),
    }
    for index, (value, message) in wrong.items():
        args: list[object] = [buffer, np.uint32(1), np.int32(-1), np.float32(0.5), np.int64(3)]
        args[index] = value
        with pytest.raises(ProbeFailure, match=message):
            check_arguments("k", args, SIGNATURE)
    with pytest.raises(ProbeFailure, match="takes 5 parameters"):
        check_arguments("k", [buffer], SIGNATURE)
    with pytest.raises(ProbeFailure, match="which gpuprobe cannot pass"):
        check_arguments("k", [np.uint32(1)], [("pred", "p")])


def test_a_buffer_may_not_stand_for_a_32_bit_parameter() -> None:
    with pytest.raises(ProbeFailure, match=r"parameter n is \.u32, given object"):
        check_arguments("k", [object()], [("u32", "n")])


@pytest.mark.parametrize("dtype", ["uint64", "uint32", "float32", "float64", "int8"])
def test_unwritten_finds_a_poisoned_value_of_any_width(dtype: str) -> None:
    values = np.zeros(4, dtype=dtype)
    assert not unwritten(values)
    raw = values.view(np.uint8)
    raw[values.itemsize : 2 * values.itemsize] = 0xFF
    assert unwritten(values)


@pytest.mark.parametrize("dtype", ["uint64", "uint32", "uint16", "float32", "int8", "complex128"])
def test_unwritten_agrees_with_a_test_of_every_byte(dtype: str) -> None:
    """Each value compared whole (1 to 8 bytes) says what a test of each value's bytes says: random words with
    some bytes set, one fully poisoned or none, in a strided view and as rows of a 2-D array too."""
    rng = np.random.default_rng(7)
    for poisoned in (False, True):
        raw = rng.choice(np.array([0, 0xFF, 0x7F], dtype=np.uint8), size=64 * np.dtype(dtype).itemsize)
        values = raw.view(dtype).copy()
        values.view(np.uint8)[: values.itemsize] = 0xFF if poisoned else 0
        for view in (values, values[::2] if poisoned else values[1::2], values.reshape(8, -1)):
            rows = np.ascontiguousarray(view).view(np.uint8).reshape(len(view), -1)
            assert unwritten(view) == bool(np.any(np.all(rows == 0xFF, axis=1))), (dtype, view.shape)


def test_a_value_with_some_bytes_set_is_written() -> None:
    values = np.array([0x00FF_FFFF_FFFF_FFFF], dtype=np.uint64)
    assert not unwritten(values)


def test_kernels_run_poisons_and_reads_back() -> None:
    gpu = SimulatedGpu(mhz=1000.0, noise=0.0)
    kernels = Kernels(gpu)
    out = gpu.alloc(64)
    cycles, ns = kernels.results("gp_sm_clock", [np.uint64(1000), out], out, 2)
    assert cycles == 1040 and ns == 1040
    assert gpu.launches == ["gp_sm_clock"]
    with pytest.raises(ProbeFailure, match="did not write all of its 3 results"):
        kernels.results("gp_sm_clock", [np.uint64(1000), out], out, 3)  # the third word is never written


def test_kernels_check_arguments_before_launching() -> None:
    gpu = SimulatedGpu()
    kernels = Kernels(gpu)
    out = gpu.alloc(64)
    with pytest.raises(ProbeFailure, match=r"parameter spin is \.u64, given uint32"):
        kernels.results("gp_sm_clock", [np.uint32(1000), out], out, 2)
    with pytest.raises(ProbeFailure, match="not in the checked cubin"):
        kernels.time("gp_no_such_kernel", [], grid=1, block=1)
    assert gpu.launches == []


def test_kernels_time_counts_every_launch() -> None:
    gpu = SimulatedGpu(kernel_ms=0.5)
    kernels = Kernels(gpu)
    out = gpu.alloc(64)
    assert kernels.time("gp_clock_overhead", [out], grid=4, block=32, count=3) == pytest.approx(1.5)
    assert gpu.launches == ["gp_clock_overhead"] * 3


def test_stopping_is_validated() -> None:
    with pytest.raises(ValueError, match="min_repeats <= max_repeats"):
        Stopping(min_repeats=5, max_repeats=4)
    with pytest.raises(ValueError):
        Stopping(min_repeats=0)


def test_sampling_stops_early_only_once_the_median_is_tight() -> None:
    quiet: list[float] = []
    sample_until_stable(lambda: quiet.append(10.0), quiet, Stopping(3, 10, 0.01, 60.0))
    assert len(quiet) == 3
    noisy: list[float] = []
    values = iter([1.0, 9.0, 3.0, 7.0] * 5)
    sample_until_stable(lambda: noisy.append(next(values)), noisy, Stopping(3, 10, 0.01, 60.0))
    assert len(noisy) == 10


def test_sampling_says_why_it_stopped(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stable once the median is tight, at its most repeats otherwise, or when its budget ran out: a fake
    clock that moves one second a reading makes the budget run out after the first sample."""
    quiet: list[float] = []
    assert sample_until_stable(lambda: quiet.append(10.0), quiet, Stopping(3, 10, 0.01, 60.0)) == "stable"
    noisy: list[float] = []
    values = iter([1.0, 9.0, 3.0, 7.0] * 5)
    assert sample_until_stable(lambda: noisy.append(next(values)), noisy, Stopping(3, 10, 0.01, 60.0)) == "max_repeats"
    ticks = iter(range(100))
    monkeypatch.setattr("gpuprobe.families.sampling.time.monotonic", lambda: float(next(ticks)))
    slow: list[float] = []
    values = iter([1.0, 9.0, 3.0, 7.0] * 5)
    assert sample_until_stable(lambda: slow.append(next(values)), slow, Stopping(3, 10, 0.01, 1.5)) == "budget"
    assert len(slow) == 3  # at least min_repeats, however long they took


def test_each_sampled_fact_is_told_why_its_probe_stopped_sampling() -> None:
    """Every reason inside a probe counts (a nested record, a pattern a later probe reuses, counts for the
    probe too); a fact with no samples says nothing, and a reason a family gave is kept."""
    one: list[float] = []
    two: list[float] = []
    with stops_recorded() as probe:
        with stops_recorded() as part:
            sample_until_stable(lambda: one.append(1.0), one, Stopping(1, 1))
        sample_until_stable(lambda: two.append(float(len(two) % 2)), two, Stopping(2, 2))
    assert part == ["max_repeats"] and probe == ["max_repeats", "max_repeats"]
    facts = [Fact("a", 1.0, "x", samples=[1.0]), Fact("b", None, "x"),
             Fact("c", 1.0, "x", samples=[1.0], stopped="budget")]  # fmt: skip
    stamp_stops(facts, ["stable", "max_repeats", "stable"])
    assert [f.stopped for f in facts] == ["max_repeats+stable", "", "budget"]
    assert stop_text([]) == "" and stop_text(["budget"]) == "budget"


def test_fact_gives_median_ci_and_ns_for_cycles() -> None:
    result = fact("alu.ffma.latency", [4.0, 4.0, 4.2, 3.9, 4.0], "cycle", "alu.ffma", mhz=2000.0)
    assert result.value == 4.0 and result.ci is not None and result.ci[0] <= 4.0 <= result.ci[1]
    assert result.converted == {"ns": 2.0}
    assert result.samples == [4.0, 4.0, 4.2, 3.9, 4.0]
    assert fact("bandwidth.dram_read", [1.0, 2.0, 3.0], "GB/s", "bandwidth.dram").converted == {}


def test_settings_checks_name_the_setting_at_fault() -> None:
    from types import SimpleNamespace

    from gpuprobe.families.measuring import require_counts, require_long_after_short

    ok = SimpleNamespace(short_iterations=2, long_iterations=8, threads=32)
    require_counts(ok, ("short_iterations", "threads"))
    require_long_after_short(ok)
    with pytest.raises(ValueError, match=r"Settings\.threads must be at least 1, got 0"):
        require_counts(SimpleNamespace(threads=0), ("threads",))
    with pytest.raises(ValueError, match="long_iterations must exceed short_iterations"):
        require_long_after_short(SimpleNamespace(short_iterations=8, long_iterations=8))


def test_sampling_goes_on_until_a_five_percent_change_would_be_detected() -> None:
    """1 % noise: three samples bound the median to 1 %, but a 5 % change wants five a side."""
    samples: list[float] = []
    values = iter([100.0, 101.0, 99.0, 100.0, 100.5, 99.5, 100.2, 99.8, 100.0, 100.0])
    sample_until_stable(lambda: samples.append(next(values)), samples, Stopping(3, 10, 0.02, 60.0))
    found = detection(samples, run_to_run=Stopping().run_to_run_pct)
    assert found is not None and not found.limit
    assert 3 < len(samples) < 10
    assert detection(samples[:3], run_to_run=Stopping().run_to_run_pct).limit  # where the old rule stopped
