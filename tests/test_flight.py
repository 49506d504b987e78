"""The flight recorder: every launcher call described as it is made, and its return or error."""

from __future__ import annotations

import numpy as np
import pytest

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.runner.flight import RecordingLauncher, describe_argument, describe_call
from gpuprobe.runner.launcher import HostCopies, capability
from gpuprobe.simulated.gpu import SimulatedGpu


def test_a_launch_is_described_by_the_launcher_protocol_names_with_each_argument_width() -> None:
    call = describe_call("time_launches", ("gp_x", 132, (256, 1, 1), [np.uint32(5), np.zeros(4)], 0, 10, True), {})
    assert call == {
        "call": "time_launches", "kernel": "gp_x", "grid": 132, "block": [256, 1, 1],
        "args": ["uint32=5", "buffer[32 B]"], "shared_bytes": 0, "count": 10, "cooperative": True,
    }  # fmt: skip
    assert describe_call("launch", ("gp_y", 1, 1, [np.uint64(7)]), {"shared_bytes": 65536})["shared_bytes"] == 65536
    assert describe_call("fill", (np.zeros(16, dtype=np.uint8), 255), {}) == {
        "call": "fill",
        "buffer": "buffer[16 B]",
        "value": 255,
    }


def test_a_call_outside_the_protocol_is_still_recorded_positionally() -> None:
    described = describe_call("not_a_method", (3, "x"), {"k": 1.5})
    assert described == {"call": "not_a_method", "positional": [3, "x"], "k": 1.5}
    assert describe_argument(np.float32(1.5)) == "float32=1.5"
    assert describe_argument(object()) == "object"


def test_every_call_is_reported_before_it_runs_and_when_it_returns_or_raises() -> None:
    calls: list[dict] = []
    returns: list[tuple] = []
    gpu = SimulatedGpu()
    launcher = RecordingLauncher(gpu, calls.append, lambda n, ms, error: returns.append((n, ms, error)))
    buffer = launcher.alloc(64)
    launcher.fill(buffer, 0)
    assert launcher.address(buffer) == gpu.address(buffer)  # a lookup, not recorded
    with pytest.raises(ProbeFailure, match="not in the checked cubin"):
        launcher.launch("gp_no_such_kernel", 1, 1, [buffer])
    assert [c["call"] for c in calls] == ["alloc", "fill", "launch"]
    assert [c["n"] for c in calls] == [1, 2, 3]
    assert calls[2]["kernel"] == "gp_no_such_kernel" and calls[2]["args"] == ["SimulatedBuffer"]
    assert [(n, error) for n, _, error in returns[:2]] == [(1, None), (2, None)]
    assert returns[2][0] == 3 and returns[2][2].startswith("ProbeFailure")
    assert all(ms >= 0 for _, ms, _ in returns)
    assert launcher.launches is gpu.launches  # attributes pass through


def test_a_capabilitys_calls_are_recorded_by_their_names_too() -> None:
    assert describe_call("time_host_copy", (1024, "h2d", True), {"count": 3}) == {
        "call": "time_host_copy", "nbytes": 1024, "direction": "h2d", "pinned": True, "count": 3,
    }  # fmt: skip
    calls: list[dict] = []
    copies = capability(RecordingLauncher(SimulatedGpu(), calls.append, lambda n, ms, error: None), HostCopies)
    copies.alloc_pinned(64)
    assert [c["call"] for c in calls] == ["alloc_pinned"] and calls[0]["nbytes"] == 64
