"""The pytest plugin behind ``pytest probes/``: its options, hooks, fixtures and the family tests' helpers.

Static cases (compile + SASS contract for every probe and arch) run on any machine. Measured
cases share one suite run per pytest session; without a GPU they skip with the reason, and with
``--require-gpu`` that reason is a failure instead. Under pytest-xdist, worker ``gwK`` measures GPU K.

pytest loads it by the ``pytest11`` entry point ``gpuprobe.pytest_plugin`` where gpuprobe is installed, and
by the root conftest.py's ``pytest_plugins`` from a checkout that is not; both register it under its module
name, so it is registered once.
"""

from __future__ import annotations

import contextlib
import functools
import os
import re
import socket
import warnings
from collections.abc import Callable, MutableMapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from gpuprobe.cli.run import add_run_options, check_run_options
from gpuprobe.core.arch import SUPPORTED_ARCHS, Arch, parse_arch
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.results import DISTURBED_VERDICTS, Fact, Results, fact_matches
from gpuprobe.fleet.compare import Comparison, baseline_message, compare, render
from gpuprobe.fleet.node_runs import gpu_dir_name
from gpuprobe.kernels.check import CheckResult, check_all
from gpuprobe.kernels.registry import Probe, all_probes
from gpuprobe.runner.device import entry_index, visible_entries
from gpuprobe.runner.peers import ONE_GPU

if TYPE_CHECKING:
    from gpuprobe.measure.isolation import ChildPolicy

#: Verdicts a fact's test passes with a warning (pytest's warnings summary): noted, not judged.
NOTED_VERDICTS = ("warn", "unstable", "not_run", *DISTURBED_VERDICTS)

#: The options ``gpuprobe run`` shares (gpuprobe.cli.run.add_run_options) take this prefix under pytest.
PREFIX = "gpuprobe-"


# ---------------------------------------------------------------- options and hooks ----------


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("gpuprobe", "GPU microarchitecture probes")
    group.addoption("--gpuprobe-out", metavar="DIR", help="write results.json and the fact sheet to DIR")
    group.addoption("--require-gpu", action="store_true", help="fail, instead of skipping, when no GPU is usable")
    add_run_options(group.addoption, PREFIX)
    group.addoption(
        "--baseline", metavar="RESULTS.json",
        help="also fail facts that got WORSE than in this earlier results file, beyond both runs' noise",
    )  # fmt: skip
    group.addoption(
        "--baseline-threshold", metavar="PCT", type=float,
        help="with --baseline: a change under PCT percent of the baseline value is no failure (default 0)",
    )  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    pin_xdist_worker(config)  # first: an xdist worker gwK sees only GPU K, set before CUDA starts
    config.addinivalue_line("markers", "gpu: measures on a GPU (skipped, with the reason, when none is usable)")
    config.addinivalue_line("markers", "static: compiles and checks SASS contracts; runs on any machine")
    check_options(config)
    load_baseline(config)
    config.pluginmanager.register(RunSummary(), "gpuprobe-summary")


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    comparison = config.stash.get(COMPARISON, None)
    if comparison is not None:
        terminalreporter.section("gpuprobe: this run against the baseline")
        for line in render(comparison).splitlines():
            terminalreporter.write_line(line)


def run_option(config: pytest.Config, name: str) -> Any:
    """An option ``gpuprobe run`` shares, by its name there (``"device"`` for ``--gpuprobe-device``)."""
    return config.getoption(PREFIX.replace("-", "_") + name)


def optional_facts() -> dict[str, str]:
    """Facts a part may lack for a hardware reason (fact id -> the reason): every family's ``optional_facts``.
    Absent and not expected of the model, such a fact skips."""
    from gpuprobe.families.catalog import FAMILIES

    return {k: v for family in FAMILIES for k, v in family.optional_facts.items()}


LACKS = "lacks what"


def lacks(arch: Arch, family: str) -> str:
    """The reason a test skips on an arch without the hardware feature a family needs (the summary counts it)."""
    return f"{arch} {LACKS} {family} probes need"


def producing_probes(fact_id: str) -> list[Probe]:
    """The probes whose declaration (the ``facts`` of their ``[[probe]]`` in ptx/<family>/*.toml) names
    ``fact_id``, or the pattern (``p2p.ce.bandwidth.*``) it is one of, or that pattern itself."""
    return [p for p in all_probes() if any(fact_matches(declared, fact_id) for declared in p.facts)]


def _unsupported_reason(results: Results, fact_id: str) -> str | None:
    """Why no probe could measure ``fact_id`` on the measured arch (None when one could)."""
    try:
        arch = parse_arch(results.device.arch)
    except GpuprobeError:
        return None
    producers = producing_probes(fact_id)
    if not producers or any(p.supports(arch) for p in producers):
        return None
    targets = sorted({a.name for p in producers for a in p.archs})
    return f"{fact_id}: {lacks(arch, producers[0].family)} (targets: {' '.join(targets)})"


def family_probes(family: str) -> list[Probe]:
    return [p for p in all_probes() if p.family == family]


def static_cases(family: str) -> list:
    return [pytest.param(p, a, id=f"{p.name}-{a.name}") for p in family_probes(family) for a in SUPPORTED_ARCHS]


@functools.cache
def _checked() -> dict[tuple[str, str], CheckResult]:
    """Every probe's check on every arch by (probe, arch), once per session: the same per-arch
    outcomes ``gpuprobe check`` records, read where cached, the rest built side by side."""
    return {(result.probe, result.arch): result for result in check_all(all_probes(), SUPPORTED_ARCHS)}


def assert_contract(probe: Probe, arch: Arch) -> None:
    """The probe compiles for ``arch`` and its SASS contract holds; an arch it cannot target skips."""
    if not probe.supports(arch):
        pytest.skip(f"{lacks(arch, probe.family)} (targets: {' '.join(a.name for a in probe.archs)})")
    try:
        result = _checked()[probe.name, arch.name]
    except GpuprobeError as exc:  # the whole check stopped (an include refused, say): its one line, no traceback
        pytest.fail(str(exc), pytrace=False)
    if result.status != "ok":
        pytest.fail(f"{probe.name} on {arch}: {result.detail}", pytrace=False)


def family_fact_ids(family: str) -> list[str]:
    ids = [f for p in family_probes(family) for f in p.facts]
    return list(dict.fromkeys(ids))


def _clock_text(results: Results) -> str:
    mhz = results.clocks.get("sm_mhz_measured")
    return f"SM clock {mhz:.0f} MHz measured" if isinstance(mhz, float | int) else "SM clock not measured"


def _one_gpu_reason(results: Results, fact_id: str) -> str | None:
    """Why ``fact_id`` could not be measured when the probes that produce it were not run for want of a
    second GPU (the run saw one); None otherwise."""
    outcomes = [results.probes[p.name] for p in producing_probes(fact_id) if p.name in results.probes]
    if outcomes and all(o.status == "not_run" and o.detail == ONE_GPU for o in outcomes):
        return f"{fact_id}: {ONE_GPU}; a link needs two GPUs in the measuring process"
    return None


def why_not_measured(results: Results, fact_id: str) -> str:
    """What the probes that produce ``fact_id`` (:func:`producing_probes`), and only they, did in ``results``: each
    one's status and detail, that it ran ok yet wrote no such fact, or that it is not in the run at all."""
    said = []
    for probe in producing_probes(fact_id):
        outcome = results.probes.get(probe.name)
        if outcome is None:
            said.append(f"{probe.name} is not in this run")
        elif outcome.status == "ok":
            note = f": {outcome.detail}" if outcome.detail else ""
            said.append(f"{probe.name} ran ok but wrote no {fact_id}{note}")
        else:
            said.append(f"{probe.name} {outcome.status}: {outcome.detail}")
    return "; ".join(said) if said else f"no probe declares {fact_id} among its facts"


def assert_fact(results: Results, fact_id: str, comparison: Comparison | None = None) -> None:
    """Hold one measured fact to its verdict, and to the baseline run when ``comparison`` is given
    (``pytest --baseline``); the failure message says all a reader needs. A declared pattern (``.*``:
    one fact per pair of GPUs) holds every fact it stands for."""
    if fact_id.endswith(".*"):
        _assert_facts_like(results, fact_id, comparison)
        return
    fact: Fact | None = results.fact(fact_id)
    if fact is None:
        one_gpu = _one_gpu_reason(results, fact_id)
        if one_gpu:
            pytest.skip(one_gpu)
        unsupported = _unsupported_reason(results, fact_id)
        if unsupported:
            pytest.skip(unsupported)
        optional = optional_facts()
        if fact_id in optional and not _expected(results, fact_id):
            pytest.skip(f"{fact_id}: {optional[fact_id]}")
        pytest.fail(f"{fact_id} was not measured ({why_not_measured(results, fact_id)})", pytrace=False)
    message = f"{fact.detail} [{_clock_text(results)}; {results.device.name}]"
    failures = [message] if fact.verdict == "fail" else []
    regression = baseline_message(comparison, fact_id)
    if regression:
        failures.append(regression)
    if failures:
        pytest.fail("\n".join(failures), pytrace=False)
    if fact.verdict in NOTED_VERDICTS:
        warnings.warn(f"{fact.verdict.upper()}: {message}", stacklevel=1)


def _assert_facts_like(results: Results, pattern: str, comparison: Comparison | None) -> None:
    """Every measured fact ``pattern`` stands for, held as :func:`assert_fact` holds one: all failures in
    one message, the facts merely noted in one warning."""
    facts = [f for f in results.facts if fact_matches(pattern, f.id)]
    if not facts:
        one_gpu = _one_gpu_reason(results, pattern)
        if one_gpu:
            pytest.skip(one_gpu)
        pytest.fail(f"no {pattern} was measured ({why_not_measured(results, pattern)})", pytrace=False)
    context = f"[{_clock_text(results)}; {results.device.name}]"
    failures = [f"{f.detail} {context}" for f in facts if f.verdict == "fail"]
    failures += [m for f in facts if (m := baseline_message(comparison, f.id))]
    if failures:
        pytest.fail(f"{len(failures)} of {len(facts)} {pattern}:\n" + "\n".join(failures), pytrace=False)
    noted = [f for f in facts if f.verdict in NOTED_VERDICTS]
    if noted:
        lines = "; ".join(f"{f.verdict.upper()}: {f.detail}" for f in noted)
        warnings.warn(f"{len(noted)} of {len(facts)} {pattern} noted: {lines} {context}", stacklevel=1)


def assert_probe_ok(results: Results, name: str) -> None:
    """The probe ran and its own check held; a probe the measured arch cannot run skips, naming why."""
    probe = next((p for p in all_probes() if p.name == name), None)
    with contextlib.suppress(GpuprobeError):
        arch = parse_arch(results.device.arch)
        if probe is not None and not probe.supports(arch):
            targets = " ".join(a.name for a in probe.archs)
            pytest.skip(f"{name}: {lacks(arch, probe.family)} (targets: {targets})")
    outcome = results.probes.get(name)
    assert outcome is not None, f"{name} did not run"
    if outcome.status == "not_run" and outcome.detail == ONE_GPU:  # a missing second GPU: hardware lacking
        pytest.skip(f"{name}: {ONE_GPU}; a link needs two GPUs in the measuring process")
    assert outcome.status == "ok", f"{name}: {outcome.status}: {outcome.detail}"


def assert_invariants(results: Results, *prefixes: str, family: str | None = None) -> None:
    """The cross-generation invariants ``invariant.<prefix>*`` were checked and hold; where ``family``
    is given and the measured arch can run none of its probes, the check skips, naming why."""
    probes = family_probes(family) if family else []
    with contextlib.suppress(GpuprobeError):
        arch = parse_arch(results.device.arch)
        if probes and not any(p.supports(arch) for p in probes):
            pytest.skip(f"{lacks(arch, family)}: their invariants cannot be checked")
    checks = [f for f in results.facts if f.id.startswith(tuple(f"invariant.{p}" for p in prefixes))]
    names = ", ".join(f"invariant.{p}*" for p in prefixes)
    assert checks, f"no {names} could be checked: the facts they compare are missing"
    broken = [f.detail for f in checks if f.verdict == "fail"]
    assert not broken, "; ".join(broken)


def family_tests(family: str, extra_facts: tuple[str, ...] = ()) -> tuple[Callable[..., None], ...]:
    """The standard tests of a family's ``probes/test_<family>.py``, to assign at module level::

        test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests("warp")

    each probe's SASS contract on every arch (static), each probe ran and verified itself, and each
    fact the family declares (and ``extra_facts``) judged against the GPU model's expectations."""

    @pytest.mark.static
    @pytest.mark.parametrize(("probe", "arch"), static_cases(family))
    def test_sass_contract(probe: Probe, arch: Arch) -> None:
        assert_contract(probe, arch)

    @pytest.mark.gpu
    @pytest.mark.parametrize("name", [p.name for p in family_probes(family)])
    def test_probe_ran_and_verified_itself(gpuprobe_results: Results, name: str) -> None:
        assert_probe_ok(gpuprobe_results, name)

    @pytest.mark.gpu
    @pytest.mark.parametrize("fact_id", [*family_fact_ids(family), *extra_facts])
    def test_fact(gpuprobe_results: Results, gpuprobe_comparison: Comparison | None, fact_id: str) -> None:
        assert_fact(gpuprobe_results, fact_id, gpuprobe_comparison)

    return test_sass_contract, test_probe_ran_and_verified_itself, test_fact


def _expected(results: Results, fact_id: str) -> bool:
    """Whether the model the run was judged as (detected or forced) expects ``fact_id``."""
    from gpuprobe.judge.expectations import load_all

    model = load_all().get(str(results.clocks.get("model", "")))
    return model is not None and model.expectation_for(fact_id) is not None


# ---------------------------------------------------------------- xdist: one worker per GPU ---


@dataclass(frozen=True)
class WorkerPin:
    """An xdist worker's GPU: worker ``gwK`` sees only ``visible`` (``""``: no GPU of its own)."""

    worker: str
    gpu_index: int
    visible: str
    hostname: str
    reason: str | None = None  # why the worker has no GPU


PIN = pytest.StashKey[WorkerPin]()
"""This xdist worker's GPU, once pinned."""


def pin_xdist_worker(config: pytest.Config, env: MutableMapping[str, str] | None = None) -> WorkerPin | None:
    """In an xdist worker ``gwK``, before CUDA starts: make GPU K the only one this worker sees.

    Called first in ``pytest_configure``. A worker is known by ``config.workerinput``, which xdist sets
    before ``pytest_configure``; ``PYTEST_XDIST_WORKER`` alone is not trusted, as every pytest a
    test starts inherits it. Outside a worker it does nothing. Worker K takes the K-th entry
    of the ``CUDA_VISIBLE_DEVICES`` it inherited (or GPU K when that is unset); a worker beyond
    the listed GPUs sees none, so its measured tests skip with the reason and never share a GPU.
    ``--gpuprobe-device`` other than 0 is refused: in a pinned worker its only device is 0.
    """
    env = os.environ if env is None else env
    workerinput = getattr(config, "workerinput", None)
    if workerinput is None:
        return None
    worker = str(workerinput.get("workerid", ""))
    match = re.fullmatch(r"gw(\d+)", worker)
    if not match:
        raise pytest.UsageError(f"gpuprobe: cannot pin xdist worker {worker!r} to a GPU (expected gw0, gw1, ...)")
    if (run_option(config, "device") or 0) != 0:
        raise pytest.UsageError(f"gpuprobe: --{PREFIX}device cannot be combined with xdist; worker gwK measures GPU K")
    k = int(match[1])
    entries = visible_entries(env.get("CUDA_VISIBLE_DEVICES"))
    reason = None
    if entries is None:
        visible = str(k)
    elif k < len(entries):
        visible = entries[k]
    else:
        visible = ""
        reason = f"xdist worker {worker} has no GPU of its own (CUDA_VISIBLE_DEVICES listed {len(entries)})"
    gpu_index = entry_index(visible) if visible else None
    pin = WorkerPin(worker, k if gpu_index is None else gpu_index, visible, socket.gethostname(), reason)
    env["CUDA_VISIBLE_DEVICES"] = visible
    env.setdefault("CUDA_DEVICE_ORDER", "PCI_BUS_ID")
    env["GPUPROBE_GPU_INDEX"] = str(pin.gpu_index)
    config.stash[PIN] = pin
    return pin


def worker_results_dir(config: pytest.Config, out: Path) -> Path:
    """Where this pytest process writes results: ``out/<hostname>-gpu<K>`` in a pinned worker, else ``out``."""
    pin = config.stash.get(PIN, None)
    return out / gpu_dir_name(pin.hostname, pin.gpu_index) if pin else out


def worker_gpu_reason(config: pytest.Config, reason: str | None) -> str | None:
    """The no-GPU skip reason, told which GPU this worker was pinned to (None: the GPU is usable)."""
    pin = config.stash.get(PIN, None)
    if pin is None:
        return reason
    if pin.reason:
        return f"no GPU: {pin.reason}"
    return reason and f"{reason} (xdist worker {pin.worker} is pinned to CUDA_VISIBLE_DEVICES={pin.visible})"


# ---------------------------------------------------------------- the measured run ------------


@pytest.fixture(scope="session")
def gpuprobe_results(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory) -> Results:
    """One measured run of the suite on the local GPU, shared by every measured test."""
    from gpuprobe.api import local_device
    from gpuprobe.measure.session import RunInterrupted, run_suite
    from gpuprobe.runner.device import gpu_unavailable_reason
    from gpuprobe.runner.launcher import LauncherSpec

    config = request.config
    reason = worker_gpu_reason(config, gpu_unavailable_reason())
    if reason:
        if config.getoption("require_gpu"):
            pytest.fail(f"--require-gpu: {reason}", pytrace=False)
        pytest.skip(reason)
    out = config.getoption("gpuprobe_out")
    out_dir = worker_results_dir(config, Path(out)) if out else tmp_path_factory.mktemp("gpuprobe")
    config.stash[RESULTS_DIR] = out_dir
    index = run_option(config, "device")
    try:
        device = local_device(index)
        return run_suite(
            device,
            LauncherSpec(device_index=index),
            out_dir,
            run_option(config, "model"),
            policy=child_policy(config),
            inject_fault=run_option(config, "inject_fault"),
            deadline_s=run_option(config, "deadline"),
            families=selected_families(request.session.items),
            progress=PytestSink.of(config),
        )
    except RunInterrupted as exc:
        config.stash[INTERRUPTED] = exc
        raise
    except GpuprobeError as exc:
        pytest.fail(str(exc), pytrace=False)


def selected_families(items: Sequence[pytest.Item]) -> frozenset[str] | None:
    """The families whose measured tests were selected, by the ``FAMILY`` their ``probes/test_*.py``
    names: ``pytest probes/test_memory.py`` measures the memory family alone. None (every
    family) when a selected test that reads the measured run belongs to no one family."""
    families: set[str] = set()
    for item in items:
        if "gpuprobe_results" not in getattr(item, "fixturenames", ()):
            continue
        family = getattr(getattr(item, "module", None), "FAMILY", None)
        if family is None:
            return None
        families.add(family)
    return frozenset(families)


def child_policy(config: pytest.Config) -> ChildPolicy:
    """The measuring processes' policy, with ``--gpuprobe-probe-time-limit`` and ``--gpuprobe-cooldown`` where
    given; a device index or a limit that means nothing is a usage error (``gpuprobe run`` checks the same)."""
    try:
        return check_run_options(lambda name: run_option(config, name), PREFIX)
    except GpuprobeError as exc:
        raise pytest.UsageError(str(exc)) from None


RESULTS_DIR = pytest.StashKey[Path]()
"""Where the measured run writes, once it starts."""
INTERRUPTED = pytest.StashKey[KeyboardInterrupt]()
"""The measured run, stopped by Ctrl-C after it saved its partial results (a ``RunInterrupted``)."""


BASELINE = pytest.StashKey[Results]()
"""The ``--baseline`` run, loaded (and checked) when pytest starts."""
COMPARISON = pytest.StashKey[Comparison]()
"""This run against the baseline, once measured; the terminal summary prints it."""


@pytest.fixture(scope="session")
def gpuprobe_comparison(request: pytest.FixtureRequest, gpuprobe_results: Results) -> Comparison | None:
    """The measured run labelled against ``--baseline`` (SAME / BETTER / WORSE / UNKNOWN); None without one."""
    config = request.config
    base = config.stash.get(BASELINE, None)
    if base is None:
        return None
    try:
        comparison = compare(
            base, gpuprobe_results, config.getoption("baseline_threshold") or 0.0,
            base_name=config.getoption("baseline"), new_name="this run",
        )  # fmt: skip
    except GpuprobeError as exc:
        pytest.fail(f"--baseline: {exc}", pytrace=False)
    config.stash[COMPARISON] = comparison
    return comparison


def load_baseline(config: pytest.Config) -> None:
    """Read ``--baseline`` before anything is measured: a bad file is a usage error, not GPU time lost."""
    import math

    from gpuprobe.fleet.reading import read_judged

    path = config.getoption("baseline", None)
    if not path:
        return
    threshold = config.getoption("baseline_threshold") or 0.0
    if not (math.isfinite(threshold) and threshold >= 0):
        raise pytest.UsageError(f"--baseline-threshold must be a finite percentage of at least 0, got {threshold}")
    try:
        config.stash[BASELINE] = read_judged(Path(path))[0]
    except GpuprobeError as exc:
        raise pytest.UsageError(f"--baseline: {exc}") from None


def check_options(config: pytest.Config) -> None:
    """Refuse, before anything is built or measured, an option that would mean nothing: an unknown
    ``--gpuprobe-model``, a negative ``--gpuprobe-device``, a ``--gpuprobe-out`` that cannot be a folder written
    to, ``--baseline-threshold`` without ``--baseline``, limits that are not seconds. A pytest usage error."""
    from gpuprobe.core.files import require_writable_folder
    from gpuprobe.judge.expectations import match_model

    child_policy(config)
    model, out = run_option(config, "model"), config.getoption("gpuprobe_out")
    if model is not None:
        _usage(f"--{PREFIX}model: ", lambda: match_model("", model))
    if out is not None:
        _usage("--gpuprobe-out: ", lambda: require_writable_folder(Path(out)))
    if config.getoption("baseline_threshold") is not None and not config.getoption("baseline"):
        raise pytest.UsageError("--baseline-threshold needs --baseline: there is no earlier run to hold this one to")


def _usage(prefix: str, check: Callable[[], object]) -> None:
    """Run ``check``; its GpuprobeError becomes a pytest usage error, its message after ``prefix``."""
    try:
        check()
    except GpuprobeError as exc:
        raise pytest.UsageError(f"{prefix}{exc}") from None


class PytestSink:
    """The run's progress under pytest's own output, through its terminal reporter (a bar on a terminal)."""

    def __init__(self, reporter: Any, capture: Any) -> None:
        from gpuprobe.measure.progress import StreamSink

        isatty = reporter.isatty
        self._reporter, self._capture = reporter, capture
        self._stream = StreamSink(self, live=bool(isatty() if callable(isatty) else isatty))
        self.live = self._stream.live

    @classmethod
    def of(cls, config: pytest.Config) -> PytestSink | None:
        """The sink for this pytest, or None where nothing is shown (no terminal reporter, an xdist worker)."""
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None or hasattr(config, "workerinput"):  # a worker's output reaches no one
            return None
        return cls(reporter, config.pluginmanager.get_plugin("capturemanager"))

    def line(self, text: str) -> None:
        self._stream.line(text)

    def status(self, text: str) -> None:
        self._stream.status(text)

    def close(self) -> None:
        self._stream.close()

    def write(self, text: str) -> None:
        """What the stream sink writes, past pytest's capture, starting on a line of its own."""
        with self._capture.global_and_fixture_disabled() if self._capture else contextlib.nullcontext():
            self._reporter.ensure_newline()  # after a file's name (verbose runs) ...
            writer = getattr(self._reporter, "_tw", None)
            if getattr(writer, "width_of_current_line", 0):  # ... or a row of dots (-q)
                self._reporter.write("\n")
            self._reporter.write(text)

    def flush(self) -> None:
        self._reporter.flush()

    def isatty(self) -> bool:
        return self.live


CONTRACT_TEST = "::test_sass_contract["  # family_tests' static test, one per (probe, arch)


@dataclass(eq=False)  # a plugin: pytest keeps it in sets, so it hashes by identity
class RunSummary:
    """Counts what ``pytest probes/`` did, for one line at the end: the probes compiled and contract-checked,
    the measurements that ran, those skipped for want of a GPU (and why), and those skipped where the arch
    lacks what a family needs. Registered by ``pytest_configure``; under xdist it counts every worker's
    reports."""

    checked: set[str] = field(default_factory=set)  # probes whose SASS contract held on some arch
    checked_builds: int = 0  # (probe, arch) builds compiled and checked
    measured: int = 0  # measured tests that ran (passed or failed)
    no_gpu: int = 0
    lacking: int = 0
    no_gpu_reason: str = ""

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped and isinstance(report.longrepr, tuple):
            reason = str(report.longrepr[2]).removeprefix("Skipped: ")
            if reason.startswith("no GPU"):
                self.no_gpu += 1
                self.no_gpu_reason = self.no_gpu_reason or reason
            elif LACKS in reason:
                self.lacking += 1
        elif report.when == "call" and CONTRACT_TEST in report.nodeid and report.passed:
            self.checked_builds += 1  # test_sass_contract[<probe>-<arch>]
            self.checked.add(report.nodeid.rpartition("[")[2].rstrip("]").rpartition("-")[0])
        elif report.when == "call" and "gpu" in report.keywords:
            self.measured += 1

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        """A ``CUDA_HOME`` / ``CUDA_PATH`` that names no toolkit is said first (``-q`` hides the header)."""
        from gpuprobe.kernels.toolchain import ignored_toolkit_homes

        reporter = session.config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None or hasattr(session.config, "workerinput"):
            return
        for line in ignored_toolkit_homes():
            reporter.write_line(f"gpuprobe: warning: {line}")

    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        for line in self.lines(config):
            terminalreporter.write_line(line)

    def lines(self, config: pytest.Config) -> list[str]:
        """The summary line, then where the results are (or why there are none)."""
        parts = []
        if self.checked_builds:
            parts.append(f"{len(self.checked)} probes compiled and contract-checked ({self.checked_builds} builds)")
        if self.measured:
            parts.append(f"{self.measured} measured tests ran")
        if self.no_gpu:
            parts.append(f"{self.no_gpu} measurements skipped, {self.no_gpu_reason}")
        if self.lacking:
            parts.append(f"{self.lacking} skipped where the arch lacks what a family needs")
        if self.no_gpu or self.lacking:
            parts.append("pytest -rs lists every skip with its reason")
        if self.no_gpu and not self.measured:  # the one thing to do next without a GPU
            parts.append("without a GPU, gpuprobe demo shows what a run measures and writes, on a simulated GPU")
        lines = ["gpuprobe: " + "; ".join(parts)] if parts else []
        interrupted, out = config.stash.get(INTERRUPTED, None), config.getoption("gpuprobe_out")
        if interrupted is not None:
            lines.append(f"gpuprobe: {interrupted}")
        elif RESULTS_DIR in config.stash:
            lines.append(f"gpuprobe: results and fact sheet in {config.stash[RESULTS_DIR]}")
        elif out is not None and not self.measured:
            why = "no GPU" if self.no_gpu else "no measured test was selected"
            lines.append(f"gpuprobe: nothing was measured ({why}), so nothing was written to {out}")
        return lines
