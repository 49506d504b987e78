"""Faulting, hanging, noisy and throttled probes, in real child processes on the simulated GPU.

Each test would fail if its protection were removed: a crash or hang that took the parent down,
a stray line that broke the protocol, a throttled measurement judged as if clean.

No test depends on how busy the machine is: a probe limit or deadline a test is about passes when the
policy's clock jumps (while the hanging kernel hangs, or at once); every other limit only bounds a broken
test, and a child's pipe reader that lags is played by one that reads only once the child is dead.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import queue
import subprocess
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from gpuprobe.core.arch import parse_arch
from gpuprobe.families.base import Measured
from gpuprobe.families.memory.simulated import FAST_SETTINGS
from gpuprobe.kernels.cubin import BuiltModule, build_for
from gpuprobe.kernels.registry import all_probes
from gpuprobe.measure.conditions import gpu_conditions
from gpuprobe.measure.isolation import ChildPolicy, MeasuringProcess, _Child, _follow, run_family
from gpuprobe.measure.session import child_spec
from gpuprobe.runner.launcher import LauncherSpec
from gpuprobe.simulated.gpu import SimulatedGpu, ptx_parameters
from tests.helpers.processes import clock_jumping_while_hung

FEW = ["memory.clock", "memory.overhead.clock_read", "memory.latency.shared"]


@functools.cache
def every_probe_module() -> BuiltModule:
    """The module of every probe for sm_90a, built once for all of this file's specs (combining every probe's
    PTX and reading its listing back is most of a second, and no test here changes a probe)."""
    return build_for(all_probes(), parse_arch("sm_90a"))


def spec(family: str = "memory", settings: object = FAST_SETTINGS, **options) -> dict:
    module = every_probe_module()
    assert module.parameters == ptx_parameters()
    launcher = LauncherSpec("gpuprobe.simulated.gpu:open_simulated", 0, options)
    return child_spec(module, SimulatedGpu().device(), launcher, family, settings, clock_usable=True)


QUICK = ChildPolicy(cooldown_s=0.0)  # its probe limit (120 s) only ends a broken test


def measure(order=FEW, policy=QUICK, **options):
    return {m.probe: m for m in run_family(spec(**options), order, policy)}


def hanging(tmp_path: Path, **policy) -> dict[str, Measured]:
    """FEW measured with memory.overhead.clock_read's kernel hanging, under a clock that passes every limit
    while it hangs."""
    hang_file = tmp_path / "hanging"
    clocked = dataclasses.replace(QUICK, clock=clock_jumping_while_hung(hang_file), **policy)
    return measure(policy=clocked, faults={"gp_clock_overhead": "hang"}, hang_file=str(hang_file))


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


def test_a_hanging_probe_times_out_and_the_rest_are_measured(tmp_path: Path) -> None:
    measured = hanging(tmp_path)
    timed_out = measured["memory.overhead.clock_read"].outcome
    assert timed_out.status == "timeout" and "ran past its 120 s limit and was killed" in timed_out.detail
    assert measured["memory.clock"].outcome.status == measured["memory.latency.shared"].outcome.status == "ok"


def test_garbage_on_stdout_does_not_break_the_protocol() -> None:
    measured = measure(garbage=True)
    assert {m.outcome.status for m in measured.values()} == {"ok"}


def test_bytes_that_are_not_utf8_are_shown_as_the_child_printed_them() -> None:
    """What a child (or the driver in it) prints is decoded tolerantly: its stderr reaches the crash's detail."""
    measured = measure(garbage=True, faults={"gp_clock_overhead": "abort"})
    crashed = measured["memory.overhead.clock_read"].outcome
    assert crashed.status == "crashed" and "driver: \ufffd\ufffd not UTF-8" in crashed.detail
    assert measured["memory.latency.shared"].outcome.status == "ok"


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
    policy = dataclasses.replace(QUICK, cooldown_s=7.0, attempts=2)
    measured = {m.probe: m for m in run_family(spec(throttle="always"), FEW, policy, sleep=slept.append)}
    assert slept == [7.0]
    for m in measured.values():
        assert "throttled after 2 attempt(s)" in m.outcome.detail
        assert m.facts and all(f.verdict == "throttled" for f in m.facts)


def test_a_shared_gpu_is_marked_shared() -> None:
    measured = measure(policy=dataclasses.replace(QUICK, attempts=1), shared="always")
    assert {f.verdict for m in measured.values() for f in m.facts} == {"shared"}


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ({"nvml_before": {"clock_event_reasons": 0x1, "compute_processes": 0}}, None),  # idle is not throttling
        ({"nvml_after": {"clock_event_reasons": 0x40}}, "throttled after (NVML clock-event reasons 0x40)"),
        ({"nvml_before": {"compute_processes": 3}}, "shared before (3 other compute process(es) on the GPU)"),
        ({"sm_mhz_after": 1500.0}, "throttled after (SM clock 1500 MHz, run started at 1980)"),
        ({"sm_mhz_after": 1950.0}, None),
        ({"nvml_before": {"clock_event_reasons": "unavailable (NVMLError)"}}, None),
    ],
)
def test_gpu_conditions(conditions: dict, expected: str | None) -> None:
    assert gpu_conditions(conditions, reference_mhz=1980.0) == expected


def test_a_probe_that_hangs_keeps_the_launch_that_never_returned_in_its_flight_record(tmp_path: Path) -> None:
    measured = hanging(tmp_path)
    flight = measured["memory.overhead.clock_read"].outcome.flight
    assert flight, "a timed-out probe keeps the launcher calls its process made"
    hung = flight[-1]
    assert (hung["call"], hung["kernel"], hung["elapsed_ms"]) == ("launch", "gp_clock_overhead", None)
    assert hung["args"] == ["SimulatedBuffer"] and hung["grid"] == 1
    assert all(call["elapsed_ms"] is not None for call in flight[:-1])
    assert measured["memory.latency.shared"].outcome.flight == []  # a clean probe carries none


def test_a_crash_keeps_the_failing_call_and_its_error_in_its_flight_record() -> None:
    crashed = measure(faults={"gp_clock_overhead": "raise"})["memory.overhead.clock_read"].outcome
    last = crashed.flight[-1]
    assert last["kernel"] == "gp_clock_overhead" and "CUDA_ERROR_ILLEGAL_ADDRESS" in last["error"]


def test_a_failed_self_check_keeps_its_flight_record() -> None:
    failed = measure(["memory.clock", "memory.latency.global_cg"], corrupt_chase=True)["memory.latency.global_cg"]
    assert failed.outcome.status == "failed"
    assert any(call.get("kernel") == "gp_chase_global_cg" for call in failed.outcome.flight)


def test_fresh_processes_that_die_the_same_way_on_their_first_probe_stop_the_respawning() -> None:
    measured = measure(faults={"gp_sm_clock": "raise"})  # every probe's first clock reading fails alike
    outcomes = [measured[name].outcome for name in FEW]
    assert [o.status for o in outcomes] == ["crashed"] * 3
    assert "CUDA_ERROR_ILLEGAL_ADDRESS" in outcomes[0].detail and "CUDA_ERROR_ILLEGAL_ADDRESS" in outcomes[1].detail
    assert outcomes[2].detail.startswith("not measured: two fresh processes in a row died on their first probe")


def test_a_family_stops_after_its_limit_of_measuring_processes() -> None:
    policy = dataclasses.replace(QUICK, max_children=1)
    measured = measure(policy=policy, faults={"gp_clock_overhead": "raise"})
    assert measured["memory.overhead.clock_read"].outcome.status == "crashed"
    assert "1 measuring processes of this family ended early" in measured["memory.latency.shared"].outcome.detail


def test_the_run_deadline_stops_a_hung_family_and_records_the_rest_not_run(tmp_path: Path) -> None:
    """The deadline (before the probe's limit) passes as the kernel starts to hang: the clock jumps then."""
    measured = hanging(tmp_path, deadline=time.monotonic() + 60)
    assert measured["memory.clock"].outcome.status == "ok"
    for name in ("memory.overhead.clock_read", "memory.latency.shared"):
        assert measured[name].outcome.status == "not_run"
        assert measured[name].outcome.detail.startswith("deadline: the run's time ran out")
    assert "while memory.overhead.clock_read was measured" in measured["memory.latency.shared"].outcome.detail
    hung = measured["memory.overhead.clock_read"].outcome.flight  # the probe stopped keeps what it was doing
    assert hung and hung[-1]["kernel"] == "gp_clock_overhead" and hung[-1]["elapsed_ms"] is None
    assert measured["memory.latency.shared"].outcome.flight == []


def stopped_child(*said: dict) -> _Child:
    """A measuring child that never ends, as its parent sees it, whose pipe reader lags (a busy machine):
    what it ``said`` (event lines) is read only once it is dead."""
    child = _Child(subprocess.Popen(["sleep", "600"], start_new_session=True), queue.Queue())

    def lagging_reader() -> None:
        child.process.wait()
        for event in said:
            child.events.put(("event", event))
        child.events.put(("eof", None))

    child.readers.append(threading.Thread(target=lagging_reader))
    child.readers[0].start()
    return child


CALL = {"n": 7, "call": "launch", "kernel": "gp_clock_overhead"}
MEASURED_THEN_STARTED = (
    {"event": "measured", "probe": "memory.clock", "outcome": {"status": "ok"}, "facts": []},
    {"event": "start", "probe": "memory.overhead.clock_read"},
    {"event": "call", "record": CALL},
)


def ticking() -> Callable[[], int]:
    """A clock each reading of which is ten minutes on: a probe's limit passes at once."""
    return itertools.count(step=600).__next__


def test_what_a_child_said_before_the_deadline_stopped_it_still_counts() -> None:
    """The parent meets the deadline before it reads that the child finished a probe and started the next:
    the one finished is kept, the one started is the one the deadline stopped, keeping the call it made."""
    child = stopped_child(*MEASURED_THEN_STARTED)
    order = ["memory.clock", "memory.overhead.clock_read", "memory.latency.shared"]
    kept, *cut = _follow(child, order, {}, ChildPolicy(deadline=0.0, clock=lambda: 1.0))
    assert kept.probe == "memory.clock" and kept.outcome.status == "ok"
    assert [m.outcome.status for m in cut] == ["not_run", "not_run"] and order == []
    assert all("while memory.overhead.clock_read was measured" in m.outcome.detail for m in cut)
    assert cut[0].outcome.flight == [{**CALL, "elapsed_ms": None}]
    assert child.process.returncode == -9


def test_a_probe_that_finished_as_its_limit_struck_is_kept_and_the_next_is_not_blamed() -> None:
    order = ["memory.clock", "memory.overhead.clock_read"]
    [kept] = _follow(stopped_child(*MEASURED_THEN_STARTED), order, {}, ChildPolicy(clock=ticking()))
    assert kept.probe == "memory.clock" and kept.outcome.status == "ok"
    assert order == ["memory.overhead.clock_read"]  # a fresh child measures it


def test_a_child_that_hangs_after_its_last_probe_costs_no_probe() -> None:
    """All its probes measured, it never exits (a driver stuck in teardown): killed at the limit, no probe
    is blamed (this was once an IndexError)."""
    assert list(_follow(stopped_child(), [], {}, ChildPolicy(clock=ticking()))) == []


def test_a_passed_deadline_starts_no_process() -> None:
    policy = ChildPolicy(deadline=time.monotonic() - 1)
    measured = measure(policy=policy, faults={"gp_sm_clock": "abort"})  # a child would die at once
    assert {m.outcome.status for m in measured.values()} == {"not_run"}


def test_the_state_a_family_reports_is_handed_back_to_the_caller() -> None:
    state: dict = {}
    list(run_family(spec(), FEW, QUICK, state=state))
    assert state["mhz"] == pytest.approx(SimulatedGpu().mhz, rel=0.05)  # memory.clock's reading, for later families
    assert state["sm_mhz_reference"] == pytest.approx(SimulatedGpu().mhz, rel=0.05)


@pytest.mark.parametrize(
    ("conditions", "expected"),
    [
        ({"sm_mhz_after": 1500.0, "sm_mhz_reference": 1980.0, "nvml_after": {"clock_event_reasons": 0x4}}, None),
        ({"sm_mhz_after": 1500.0, "sm_mhz_reference": 1980.0, "nvml_after": {"clock_event_reasons": 0x44}},
         "throttled after (NVML clock-event reasons 0x44); throttled after (SM clock 1500 MHz, run started at 1980)"),
        ({"nvml_before": {"clock_event_reasons": 0x4}}, None),  # a power cap alone is the part's design
        ({"sm_mhz_before": 1720.0, "sm_mhz_reference": 1800.0}, None),  # within 5 % of the run's own reference
        ({"sm_mhz_before": 1700.0, "sm_mhz_reference": 1980.0},
         "throttled before (SM clock 1700 MHz, run started at 1980)"),
        ({"nvml_after": {"compute_processes": 1}}, "shared after (1 other compute process(es) on the GPU)"),
        ({"nvml_after": {"compute_processes": 0}}, None),
    ],
)  # fmt: skip
def test_gpu_conditions_against_the_run_reference_and_the_power_cap(conditions: dict, expected: str | None) -> None:
    assert gpu_conditions(conditions) == expected


# ---- one measuring process serves family after family -------------------------------------------------

FIRST = ["memory.clock", "memory.latency.shared"]  # a first family, ending in the shared-memory chase
WARP = ["warp.shfl.idx", "warp.shfl.up"]  # a second family, measured after it


def two_families(policy: ChildPolicy = QUICK, **options) -> tuple[dict[str, Measured], MeasuringProcess]:
    """Two memory probes (with ``options``: its faults) then two warp probes, handed to one measuring process, as a
    run hands its families; every outcome, and the process (how many it started)."""
    measured: dict[str, Measured] = {}
    with MeasuringProcess(policy) as process:
        for family_spec, order in ((spec(**options), FIRST), (spec("warp", None, **options), WARP)):
            measured.update((m.probe, m) for m in run_family(family_spec, order, policy, process=process))
    return measured, process


def test_one_process_serves_family_after_family() -> None:
    measured, process = two_families()
    assert {m.outcome.status for m in measured.values()} == {"ok"} and len(measured) == len(FIRST) + len(WARP)
    assert process.started == 1


def test_a_process_per_family_when_asked() -> None:
    measured, process = two_families(dataclasses.replace(QUICK, process_per_family=True))
    assert {m.outcome.status for m in measured.values()} == {"ok"}
    assert process.started == 2


def test_a_crash_in_a_familys_last_probe_costs_the_next_family_only_a_fresh_process() -> None:
    measured, process = two_families(faults={"gp_chase_shared": "abort"})  # memory.latency.shared: FIRST's last
    crashed = measured["memory.latency.shared"].outcome
    assert crashed.status == "crashed" and "killed by signal 6" in crashed.detail
    assert any(call.get("kernel") == "gp_chase_shared" for call in crashed.flight)
    assert all(measured[name].outcome.status == "ok" for name in WARP)
    assert all(measured[name].outcome.flight == [] for name in WARP)
    assert process.started == 2


def test_a_timeout_in_a_familys_last_probe_costs_the_next_family_only_a_fresh_process(tmp_path: Path) -> None:
    hang_file = tmp_path / "hanging"
    policy = dataclasses.replace(QUICK, clock=clock_jumping_while_hung(hang_file))
    measured, process = two_families(policy, faults={"gp_chase_shared": "hang"}, hang_file=str(hang_file))
    assert measured["memory.latency.shared"].outcome.status == "timeout"
    assert all(measured[name].outcome.status == "ok" for name in WARP)
    assert process.started == 2


def test_a_context_left_unsound_ends_its_process_and_the_next_family_starts_a_fresh_one() -> None:
    """The last probe's kernel breaks the context without raising (every allocation after it fails): its probe
    is measured, the family's end finds the context unsound, and the warp probes run in a fresh process."""
    measured, process = two_families(faults={"gp_chase_shared": "poison"})
    assert {measured[name].outcome.status for name in FIRST} == {"ok"}
    [note] = process.notes
    assert note.startswith("its measuring process ended after its last probe") and "CUDA_ERROR_ILLEGAL_ADDRESS" in note
    assert all(measured[name].outcome.status == "ok" for name in WARP)
    assert process.started == 2


def test_a_process_that_dies_between_families_costs_the_next_only_a_fresh_process(tmp_path: Path) -> None:
    """It measured its family, said so, and died before the next family's first probe: nothing of that family is
    blamed, a fresh process measures it, and the death is noted for the run to record."""
    measured, process = two_families(abort_between="once", flag_file=str(tmp_path / "first"))
    assert {m.outcome.status for m in measured.values()} == {"ok"}
    [note] = process.notes
    assert note.startswith("the measuring process that waited for it ended before its first probe (child killed "
                           "by signal 6") and note.endswith("a fresh one measured it")  # fmt: skip
    assert process.started == 2


def test_a_deadline_that_passes_between_families_starts_no_process_for_the_next() -> None:
    now = [0.0]
    policy = dataclasses.replace(QUICK, deadline=100.0, clock=lambda: now[0])
    with MeasuringProcess(policy) as process:
        first = [m.outcome.status for m in run_family(spec(), ["memory.clock"], policy, process=process)]
        now[0] = 101.0  # the deadline passes while the process waits for the next family
        second = list(run_family(spec("warp", None), WARP, policy, process=process))
    assert first == ["ok"] and process.started == 1
    assert all(m.outcome.detail.startswith("deadline: the run's time ran out") for m in second)
