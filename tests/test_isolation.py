"""Faulting, hanging, noisy and throttled probes, in real child processes on the simulated GPU.

Each test would fail if its protection were removed: a crash or hang that took the parent down,
a stray line that broke the protocol, a throttled measurement judged as if clean.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from gpuprobe.gpu import LauncherSpec
from gpuprobe.isolation import ChildPolicy, gpu_conditions, run_family
from gpuprobe.session import child_spec
from tests.fake_gpu import FAST, FakeGpu, ptx_parameters

FEW = ["memory.clock", "memory.overhead.clock_read", "memory.latency.shared"]


def spec(**options) -> dict:
    from gpuprobe.arch import parse_arch
    from gpuprobe.build import build_for
    from gpuprobe.registry import all_probes

    module = build_for(all_probes(), parse_arch("sm_90a"))
    assert module.parameters == ptx_parameters()
    launcher = LauncherSpec("tests.fake_gpu:open_fake", 0, options)
    return child_spec(module, FakeGpu().device(), launcher, "memory", FAST, clock_usable=True)


QUICK = ChildPolicy(probe_time_limit_s=30, cooldown_s=0.0)


def measure(order=FEW, policy=QUICK, **options):
    return {m.probe: m for m in run_family(spec(**options), order, policy)}


def test_a_clean_family_measures_every_probe() -> None:
    measured = measure()
    assert {name: m.outcome.status for name, m in measured.items()} == dict.fromkeys(FEW, "ok")


def test_a_probe_that_kills_its_process_is_crashed_and_the_rest_are_measured() -> None:
    measured = measure(faults={"gp_clock_overhead": "abort"})
    crashed = measured["memory.overhead.clock_read"].outcome
    assert crashed.status == "crashed" and "killed by signal 6" in crashed.detail
    assert measured["memory.latency.shared"].outcome.status == "ok"
    shared = measured["memory.latency.shared"].facts[0]
    assert shared.converted["ns"] > 0  # the fresh child was given the clock the first one measured


def test_a_cuda_error_is_crashed_with_its_message_and_a_fresh_process_goes_on() -> None:
    measured = measure(faults={"gp_clock_overhead": "raise"})
    crashed = measured["memory.overhead.clock_read"].outcome
    assert crashed.status == "crashed" and "CUDA_ERROR_ILLEGAL_ADDRESS" in crashed.detail
    assert "exit status 3" in crashed.detail
    assert measured["memory.latency.shared"].outcome.status == "ok"


def test_a_hanging_probe_times_out_and_the_rest_are_measured() -> None:
    started = time.monotonic()
    measured = measure(policy=ChildPolicy(probe_time_limit_s=3, cooldown_s=0.0), faults={"gp_clock_overhead": "hang"})
    assert time.monotonic() - started < 25
    timed_out = measured["memory.overhead.clock_read"].outcome
    assert timed_out.status == "timeout" and "3 s limit" in timed_out.detail
    assert measured["memory.latency.shared"].outcome.status == "ok"


def test_garbage_on_stdout_does_not_break_the_protocol() -> None:
    measured = measure(garbage=True)
    assert {m.outcome.status for m in measured.values()} == {"ok"}


def test_a_launcher_that_cannot_open_fails_every_probe_once() -> None:
    measured = measure(no_such_option=1)  # the factory raises before any probe starts
    assert {m.outcome.status for m in measured.values()} == {"crashed"}
    assert "no_such_option" in measured["memory.clock"].outcome.detail


def test_a_throttled_measurement_is_retried_after_a_cooldown(tmp_path: Path) -> None:
    measured = measure(throttle="once", flag_file=str(tmp_path / "first"))
    for m in measured.values():
        assert m.outcome.status == "ok" and m.outcome.conditions.get("attempts") is None
        assert all(f.verdict == "report" for f in m.facts)  # the retry was clean: judged as usual


def test_a_retried_probe_keeps_what_earlier_probes_measured(tmp_path: Path) -> None:
    """Only the latency probe ran throttled (NVML readings 3 and 4 of the first child): its retry
    starts from the clock the first child measured, so its latency still converts to ns."""
    order = ["memory.clock", "memory.latency.shared"]
    measured = measure(order, throttle="once", throttle_from_reading=3, flag_file=str(tmp_path / "first"))
    shared = measured["memory.latency.shared"]
    assert shared.outcome.status == "ok" and shared.facts[0].verdict == "report"
    assert shared.facts[0].converted["ns"] > 0
    assert shared.outcome.conditions["sm_mhz_before"] is not None


def test_a_measurement_that_stays_throttled_is_marked_not_judged() -> None:
    slept = []
    policy = ChildPolicy(probe_time_limit_s=30, cooldown_s=7.0, attempts=2)
    measured = {m.probe: m for m in run_family(spec(throttle="always"), FEW, policy, sleep=slept.append)}
    assert slept == [7.0]
    for m in measured.values():
        assert "throttled after 2 attempt(s)" in m.outcome.detail
        assert m.facts and all(f.verdict == "throttled" for f in m.facts)


def test_a_shared_gpu_is_marked_shared() -> None:
    measured = measure(policy=ChildPolicy(probe_time_limit_s=30, cooldown_s=0.0, attempts=1), shared="always")
    assert {f.verdict for m in measured.values() for f in m.facts} == {"shared"}


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ({"nvml_before": {"clock_event_reasons": 0x1, "compute_processes": 1}}, None),  # idle is not throttling
        ({"nvml_after": {"clock_event_reasons": 0x40}}, "throttled after (NVML clock-event reasons 0x40)"),
        ({"nvml_before": {"compute_processes": 3}}, "shared before (3 compute processes on the GPU)"),
        ({"sm_mhz_after": 1500.0}, "throttled after (SM clock 1500 MHz, run started at 1980)"),
        ({"sm_mhz_after": 1950.0}, None),
        ({"nvml_before": {"clock_event_reasons": "unavailable (NVMLError)"}}, None),
    ],
)
def test_gpu_conditions(conditions: dict, expected: str | None) -> None:
    assert gpu_conditions(conditions, reference_mhz=1980.0) == expected
