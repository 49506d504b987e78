"""pytest options, markers and hooks for gpuprobe; fixtures live in gpuprobe.pytest_plugin."""

from __future__ import annotations

import pytest

pytest_plugins = ["gpuprobe.pytest_plugin"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpuprobe", "GPU microarchitecture probes")
    group.addoption("--gpuprobe-out", metavar="DIR", help="write results.json and the fact sheet to DIR")
    group.addoption("--require-gpu", action="store_true", help="fail, instead of skipping, when no GPU is usable")
    group.addoption("--gpu-model", metavar="KEY", help="judge as this GPU model (see gpuprobe/expectations/)")
    group.addoption("--gpu-device", metavar="N", type=int, default=0, help="CUDA device index to measure")
    group.addoption(
        "--inject-fault", action="store_true", help="also run a probe that faults on purpose, to show the run survives"
    )
    group.addoption(
        "--gpuprobe-deadline", metavar="S", type=float,
        help="stop measuring S seconds after the run starts: the rest is not_run (deadline), the results partial",
    )  # fmt: skip
    group.addoption(
        "--probe-time-limit", metavar="S", type=float, help="kill a probe that runs longer than S seconds (default 120)"
    )
    group.addoption(
        "--cooldown", metavar="S", type=float, help="seconds to wait before re-measuring a throttled probe (default 3)"
    )
    group.addoption(
        "--baseline", metavar="RESULTS.json",
        help="also fail facts that got WORSE than in this earlier results file, beyond both runs' noise",
    )  # fmt: skip
    group.addoption(
        "--baseline-threshold", metavar="PCT", type=float,
        help="with --baseline: a change under PCT percent of the baseline value is no failure (default 0)",
    )  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    from gpuprobe.fleet.runs import pin_xdist_worker

    pin_xdist_worker(config)  # first: an xdist worker gwK sees only GPU K, set before CUDA starts
    config.addinivalue_line("markers", "gpu: measures on a GPU (skipped, with the reason, when none is usable)")
    config.addinivalue_line("markers", "static: compiles and checks SASS contracts; runs on any machine")
    from gpuprobe.pytest_plugin import RunSummary, check_options, load_baseline

    check_options(config)
    load_baseline(config)
    config.pluginmanager.register(RunSummary(), "gpuprobe-summary")


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    from gpuprobe.fleet.compare import render
    from gpuprobe.pytest_plugin import COMPARISON

    comparison = config.stash.get(COMPARISON, None)
    if comparison is not None:
        terminalreporter.section("gpuprobe: this run against the baseline")
        for line in render(comparison).splitlines():
            terminalreporter.write_line(line)
