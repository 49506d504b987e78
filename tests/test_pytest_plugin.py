"""``pytest probes/`` without a GPU: static checks pass, measurements skip with the reason, and
``--require-gpu`` turns that reason into a failure. Fact assertions say what a reader needs."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuprobe.core.results import Device, Fact, ProbeOutcome, Results, load
from gpuprobe.kernels.registry import all_probes
from gpuprobe.pytest_plugin import assert_fact
from tests.helpers.processes import PYTEST_ARMED

REPO = Path(__file__).resolve().parent.parent


def _pytest(target: str, *args: str) -> subprocess.CompletedProcess[str]:
    """``pytest TARGET ARGS`` (of the probe files: ``probes``, or one of them), as a user runs it."""
    return subprocess.run(
        [sys.executable, "-m", "pytest", target, "-p", "no:cacheprovider", "-rs", "-q", *args],
        cwd=REPO, capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip


@pytest.fixture(scope="module")
def no_gpu_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess[str], Path]:
    """``pytest probes/ --gpuprobe-out OUT`` on a machine without a GPU, and OUT."""
    from gpuprobe.runner.device import gpu_unavailable_reason

    if gpu_unavailable_reason() is None:
        pytest.skip("a GPU is present: this checks the behaviour without one")
    out = tmp_path_factory.mktemp("no-gpu") / "out"
    return _pytest("probes", "--gpuprobe-out", str(out)), out


def test_without_a_gpu_static_checks_pass_and_measurements_skip_with_the_reason(no_gpu_run) -> None:
    run, _ = no_gpu_run
    assert run.returncode == 0, run.stdout[-3000:]
    assert " passed" in run.stdout and " skipped" in run.stdout
    skips = [line for line in run.stdout.splitlines() if line.startswith("SKIPPED")]
    assert skips and all("no GPU" in line or "lacks" in line for line in skips), skips


def test_without_a_gpu_one_line_says_what_was_checked_and_why_the_rest_skipped(no_gpu_run) -> None:
    """The summary counts the probes compiled and checked, the measurements skipped for want of a GPU (with
    a reason that does not send anyone to upgrade a driver that is not there) and the tests skipped where the
    arch lacks a family's feature; ``--gpuprobe-out`` says nothing was written."""
    import re

    from gpuprobe.runner.device import driver_missing_reason

    run, out = no_gpu_run
    (line,) = [line for line in run.stdout.splitlines() if "probes compiled and contract-checked" in line]
    counted = re.fullmatch(
        r"gpuprobe: (\d+) probes compiled and contract-checked \((\d+) builds\); (\d+) measurements skipped, "
        r"(no GPU: .*); (\d+) skipped where the arch lacks what a family needs; pytest -rs lists every skip with "
        r"its reason; without a GPU, gpuprobe demo shows what a run measures and writes, on a simulated GPU",
        line,
    )
    assert counted, line
    probes, builds, no_gpu, reason, lacking = counted.groups()
    contract_tests = [p for p in all_probes() if p.family != "selftest"]  # selftest has no static test
    assert int(probes) == len(contract_tests)
    assert int(builds) == sum(len(p.archs) for p in contract_tests)
    skips = [line for line in run.stdout.splitlines() if line.startswith("SKIPPED")]
    said = {"no GPU": sum(int(s.split("[")[1].split("]")[0]) for s in skips if "no GPU" in s),
            "lacks": sum(int(s.split("[")[1].split("]")[0]) for s in skips if "lacks" in s)}  # fmt: skip
    assert (int(no_gpu), int(lacking)) == (said["no GPU"], said["lacks"])
    if driver_missing_reason():
        assert reason.startswith("no GPU: no NVIDIA GPU/driver found (") and "insufficient" not in reason.split("(")[0]
    assert f"gpuprobe: nothing was measured (no GPU), so nothing was written to {out}" in run.stdout
    assert not out.exists()


def test_require_gpu_turns_the_skip_into_a_failure() -> None:
    from gpuprobe.runner.device import gpu_unavailable_reason

    if gpu_unavailable_reason() is None:
        pytest.skip("a GPU is present: this checks the behaviour without one")
    run = _pytest("probes/test_memory.py", "--require-gpu", "-k", "test_fact and latency")  # one file collected
    assert run.returncode == 1
    assert "--require-gpu: no GPU" in run.stdout


DEVICE = Device(name="Simulated GPU", cc="9.0", arch="sm_90a", sm_count=132, l2_bytes=50 * 2**20)


def _results(*facts: Fact) -> Results:
    return Results(DEVICE, list(facts), clocks={"sm_mhz_measured": 1755.0}, partial=False)


def test_a_failing_fact_says_what_was_measured_expected_where_from_and_the_clock() -> None:
    detail = "latency.l2 = 400 cycle (CI 398–402); OUTSIDE expected 240–330 cycle (warn; Luo et al.)"
    fact = Fact("latency.l2", 400.0, "cycle", (398.0, 402.0), [400.0], verdict="fail", detail=detail)
    with pytest.raises(pytest.fail.Exception) as info:
        assert_fact(_results(fact), "latency.l2")
    message = str(info.value)
    assert "400" in message and "240–330" in message and "Luo" in message and "1755 MHz" in message


def test_a_warned_or_unstable_fact_warns_but_passes() -> None:
    for verdict in ("warn", "unstable", "throttled", "shared"):
        fact = Fact("latency.l2", 400.0, "cycle", verdict=verdict, detail="outside")
        with pytest.warns(UserWarning, match=verdict.upper()):
            assert_fact(_results(fact), "latency.l2")


def test_a_missing_fact_fails_unless_the_part_lacks_that_level() -> None:
    with pytest.raises(pytest.fail.Exception, match="was not measured"):
        assert_fact(_results(), "latency.l2")
    with pytest.raises(pytest.skip.Exception, match="no split L2"):
        assert_fact(_results(), "latency.l2_far")  # an unknown GPU: discovery mode
    h100 = Results(
        Device(name="Simulated", cc="9.0", arch="sm_90a", sm_count=132, l2_bytes=1), [], clocks={"model": "h100_sxm"}
    )
    with pytest.raises(pytest.fail.Exception, match="was not measured"):
        assert_fact(h100, "latency.l2_far")  # judged as an H100 (detected or forced): split L2, so absence fails


# The H200 run's twelve failed e4m3 wgmma probes: nothing to do with the TLB
E4M3_FAILED = {
    f"wgmma.latency.e4m3.{s}.n{n}": ProbeOutcome("failed", "wgmma: the D fragment differs from the reference")
    for s in ("ss", "rs")
    for n in (8, 16, 32, 64, 128, 256)
}


def _with_probes(outcomes: dict[str, ProbeOutcome] | None = None) -> Results:
    """A run whose e4m3 wgmma probes failed, with ``outcomes`` besides."""
    results = _results()
    results.probes = {**E4M3_FAILED, **(outcomes or {})}
    return results


def _not_measured_message(results: Results, fact_id: str) -> str:
    with pytest.raises(pytest.fail.Exception, match="was not measured") as info:
        assert_fact(results, fact_id)
    return str(info.value)


def test_a_missing_fact_blames_the_probes_that_produce_it_not_every_failed_probe() -> None:
    """The H200's test_fact[tlb.l1.reach_bytes] blamed the twelve failed e4m3 wgmma probes; the probe that
    declares the fact (ptx/cache_geometry/cache_geometry.toml) ran ok and wrote none, and the message says so."""
    ran_ok = _with_probes({"cache_geometry.tlb": ProbeOutcome("ok", "no translation step up to 34 GB")})
    message = _not_measured_message(ran_ok, "tlb.l1.reach_bytes")
    assert "cache_geometry.tlb ran ok but wrote no tlb.l1.reach_bytes: no translation step up to 34 GB" in message
    assert "wgmma" not in message
    crashed = _with_probes({"cache_geometry.tlb": ProbeOutcome("crashed", "CUDA_ERROR_ILLEGAL_ADDRESS in gp_cg_chase")})
    message = _not_measured_message(crashed, "tlb.miss_cycles")
    assert "cache_geometry.tlb crashed: CUDA_ERROR_ILLEGAL_ADDRESS in gp_cg_chase" in message
    assert "wgmma" not in message
    assert "cache_geometry.tlb is not in this run" in _not_measured_message(_with_probes(), "tlb.l2.reach_bytes")
    assert "no probe declares toy.nothing" in _not_measured_message(_with_probes(), "toy.nothing")


def test_a_missing_declared_pattern_blames_its_producer() -> None:
    results = _with_probes({"p2p.ce": ProbeOutcome("failed", "copy of 2 MiB came back wrong")})
    with pytest.raises(pytest.fail.Exception, match=r"no p2p\.ce\.bandwidth\.\* was measured") as info:
        assert_fact(results, "p2p.ce.bandwidth.*")
    assert "p2p.ce failed: copy of 2 MiB came back wrong" in str(info.value)
    assert "wgmma" not in str(info.value)


def _node_results(*facts: Fact, status: str = "ok", detail: str = "") -> Results:
    results = _results(*facts)
    results.probes = {name: ProbeOutcome(status, detail) for name in ("p2p.access", "p2p.ce", "collectives.all_reduce")}
    return results


def test_a_declared_pattern_holds_every_pair_and_names_each_failure() -> None:
    good = Fact("p2p.ce.bandwidth.0_1", 380.0, "GB/s", verdict="pass", detail="fine")
    slow = Fact("p2p.ce.bandwidth.1_0", 90.0, "GB/s", verdict="warn", detail="p2p.ce.bandwidth.1_0 = 90 GB/s; OUTSIDE")
    broken = Fact("p2p.ce.bandwidth.2_0", 9.0, "GB/s", verdict="fail", detail="p2p.ce.bandwidth.2_0 = 9 GB/s; OUTSIDE")
    other = Fact("p2p.ce.bandwidth_total", 1.0, "GB/s", verdict="fail")  # another id: not of the pattern
    with pytest.warns(UserWarning, match=r"1 of 2 p2p\.ce\.bandwidth\.\* noted: WARN: p2p\.ce\.bandwidth\.1_0"):
        assert_fact(_node_results(good, slow, other), "p2p.ce.bandwidth.*")
    with pytest.raises(pytest.fail.Exception, match=r"1 of 3 p2p\.ce\.bandwidth\.\*:\np2p\.ce\.bandwidth\.2_0 = 9"):
        assert_fact(_node_results(good, slow, broken), "p2p.ce.bandwidth.*")
    with pytest.raises(pytest.fail.Exception, match=r"no p2p\.ce\.bandwidth\.\* was measured"):
        assert_fact(_node_results(), "p2p.ce.bandwidth.*")


def test_with_one_gpu_visible_the_links_skip_and_nothing_else_does() -> None:
    from gpuprobe.pytest_plugin import assert_probe_ok
    from gpuprobe.runner.peers import ONE_GPU

    one = _node_results(status="not_run", detail=ONE_GPU)
    for check in (
        lambda: assert_fact(one, "p2p.ce.bandwidth.*"),
        lambda: assert_fact(one, "p2p.gpus"),
        lambda: assert_fact(one, "collectives.all_reduce.busbw"),
        lambda: assert_probe_ok(one, "p2p.ce"),
    ):
        with pytest.raises(pytest.skip.Exception, match="1 GPU visible"):
            check()
    no_nccl = _node_results(status="not_run", detail="NCCL cannot be used here: the NCCL library is not installed")
    with pytest.raises(AssertionError, match="NCCL library is not installed"):
        assert_probe_ok(no_nccl, "collectives.all_reduce")
    with pytest.raises(pytest.fail.Exception, match="was not measured"):
        assert_fact(no_nccl, "collectives.all_reduce.busbw")


def test_a_bad_baseline_is_a_usage_error_before_anything_is_measured(tmp_path) -> None:
    bad = tmp_path / "base.json"
    bad.write_text("{not json")
    run = _pytest("probes", "--baseline", str(bad))
    assert run.returncode == 4  # pytest's usage error
    assert "--baseline:" in run.stderr and "corrupt results file" in run.stderr


def test_a_fact_the_arch_cannot_measure_skips_with_the_reason(monkeypatch: pytest.MonkeyPatch) -> None:
    from pathlib import Path

    from gpuprobe import pytest_plugin
    from gpuprobe.core.arch import parse_arch
    from gpuprobe.kernels.registry import Probe

    toy = Probe("toy.wide", "toy", "toy_wide", Path("toy.ptx"), (parse_arch("sm_90a"),), ("toy.rate",), "d", ())
    monkeypatch.setattr(pytest_plugin, "all_probes", lambda: (toy,))
    ampere = Results(Device(name="Simulated", cc="8.0", arch="sm_80", sm_count=108, l2_bytes=1), [])
    with pytest.raises(pytest.skip.Exception, match=r"toy\.rate: sm_80 lacks what toy probes need \(targets: sm_90a\)"):
        assert_fact(ampere, "toy.rate")
    hopper = Results(DEVICE, [])
    with pytest.raises(pytest.fail.Exception, match="was not measured"):
        assert_fact(hopper, "toy.rate")  # the arch could measure it: its absence is a failure


def test_families_may_declare_facts_a_part_lacks(monkeypatch: pytest.MonkeyPatch) -> None:
    import dataclasses

    from gpuprobe.families import catalog

    far = {"toy.far": "this part has one partition"}
    toy = dataclasses.replace(catalog.BY_NAME["selftest"], name="toy", sections=(), optional_facts=far)
    monkeypatch.setattr(catalog, "FAMILIES", (*catalog.FAMILIES, toy))
    with pytest.raises(pytest.skip.Exception, match=r"toy\.far: this part has one partition"):
        assert_fact(_results(), "toy.far")


def test_a_latency_forty_percent_slower_than_the_baseline_fails_its_test_naming_the_fact() -> None:
    """The issue's report through ``--baseline``: a scaled copy of three samples a side is WORSE, not UNKNOWN."""
    from gpuprobe.fleet.compare import compare

    before = Fact("latency.shared", 29.0, "cycle", (28.9, 29.1), [28.9, 29.0, 29.1], verdict="pass")
    slower = Fact("latency.shared", 40.6, "cycle", (40.46, 40.74), [40.46, 40.6, 40.74], verdict="pass")
    comparison = compare(_results(before), _results(slower), base_name="base.json", new_name="this run")
    with pytest.raises(pytest.fail.Exception) as info:
        assert_fact(_results(slower), "latency.shared", comparison)
    message = str(info.value)
    assert message.startswith("latency.shared is WORSE against the baseline: before 29")
    assert "+40.00 %" in message and "detects changes ≥" in message
    assert_fact(_results(before), "latency.shared", compare(_results(before), _results(before)))  # unchanged passes


# ---- --baseline against the simulated GPU: a changed part fails the tests of the facts it changed -------

REHEARSAL = REPO / "tests" / "rehearsal"


@dataclass(frozen=True)
class BaselineCase:
    """Tests of facts that the simulated part's changed hardware makes worse, their families and the probes that
    measure those facts."""

    changed_tests: tuple[str, ...]  # probe file::test
    families: frozenset[str]  # what those tests measure
    probes: tuple[str, ...]  # the probes of those facts: the run measures these alone


BASELINE_CASES = {
    "l2": BaselineCase(
        ("probes/test_memory.py::test_fact[latency.l2]",),  # +5 %
        frozenset({"memory"}),
        ("memory.clock", "memory.latency.global_cg"),  # with the SM clock the latencies are converted by
    ),
    "dram-mma-launch": BaselineCase(
        (
            "probes/test_bandwidth.py::test_fact[bandwidth.dram_read.v16]",  # DRAM bandwidth -5 %
            "probes/test_mma.py::test_fact[tensor.mma_sync.f16.m16n8k16.throughput]",  # one tensor-core rate -5 %
            "probes/test_launch.py::test_fact[launch.stream.host_latency.cupy]",  # launch overhead +10 %
        ),
        frozenset({"bandwidth", "mma", "launch"}),
        ("bandwidth.dram.read.v16", "mma.f16.m16n8k16.ilp8", "launch.stream"),
    ),
}


def _simulated_pytest(
    tmp_path: Path, case: BaselineCase, options: dict, *args: str
) -> subprocess.CompletedProcess[str]:
    """``pytest`` of the case's tests, measuring on the simulated part with these options their facts' probes alone
    (``GPUPROBE_REHEARSAL_PROBES``: the tests read no other fact), at each family's quick settings (``gpuprobe
    demo``'s: the point here is ``--baseline``, not the default settings)."""
    env = {
        **os.environ,
        "GPUPROBE_REHEARSAL": "1",
        "GPUPROBE_REHEARSAL_OPTIONS": json.dumps({"faults": {}, **options}),
        "GPUPROBE_REHEARSAL_SETTINGS": "fast",
        "GPUPROBE_REHEARSAL_PROBES": ",".join(case.probes),
        "GPUPROBE_LOCK_DIR": str(tmp_path / "locks"),
        "COLUMNS": "10000",  # the short summary in full: each failure with its message
        "PYTHONPATH": os.pathsep.join([str(REHEARSAL), str(REPO)]),
    }
    return subprocess.run(
        [sys.executable, "-m", "pytest", *case.changed_tests, "-p", "no:cacheprovider", "-q", "-rf", *args],
        cwd=REPO, env=env, capture_output=True, text=True, check=False, timeout=600,
    )  # fmt: skip


@pytest.mark.parametrize("case", BASELINE_CASES.values(), ids=BASELINE_CASES.keys())
def test_baseline_fails_the_test_of_each_fact_changed_hardware_made_worse(tmp_path: Path, case: BaselineCase) -> None:
    """The selected tests' families alone are measured; a run of the part with a longer L2 latency, a lower
    DRAM bandwidth, a lower mma rate and a longer launch against one of the unchanged part fails those facts'
    tests."""
    from tests.test_session import changed_hardware

    base = _simulated_pytest(tmp_path, case, {"seed": 7}, "--gpuprobe-out", str(tmp_path / "base"))
    measured = set(load(tmp_path / "base" / "results.json").families)
    assert measured == case.families, base.stdout
    changed = _simulated_pytest(
        tmp_path, case, changed_hardware(), "--baseline", str(tmp_path / "base" / "results.json")
    )
    assert changed.returncode == 1, changed.stdout[-3000:]
    failed = [line for line in changed.stdout.splitlines() if line.startswith("FAILED") and "WORSE" in line]
    for test in case.changed_tests:
        fact_id = test.split("::test_fact[", 1)[1].removesuffix("]")
        assert any(test in line and f"{fact_id} is WORSE against the baseline" in line for line in failed), failed


def test_the_run_measures_the_families_of_the_selected_tests_or_all_of_them() -> None:
    from types import SimpleNamespace

    from gpuprobe.pytest_plugin import selected_families

    def item(module: object, *fixtures: str) -> SimpleNamespace:
        return SimpleNamespace(module=module, fixturenames=list(fixtures))

    warp, memory = SimpleNamespace(FAMILY="warp"), SimpleNamespace(FAMILY="memory")
    static = item(SimpleNamespace(), "probe", "arch")  # a SASS contract: measures nothing
    assert selected_families([item(warp, "gpuprobe_results"), item(memory, "gpuprobe_results"), static]) == {
        "warp",
        "memory",
    }
    assert selected_families([item(warp, "gpuprobe_results"), item(SimpleNamespace(), "gpuprobe_results")]) is None


# ---- options that would mean nothing are refused before anything is built or measured --------------

OPTION_DEFAULTS = {
    "gpuprobe_model": None, "gpuprobe_device": 0, "gpuprobe_out": None, "baseline": None, "baseline_threshold": None,
    "gpuprobe_deadline": None, "gpuprobe_probe_time_limit": None, "gpuprobe_cooldown": None,
    "gpuprobe_process_per_family": False,
}  # fmt: skip


def _check(**given: object) -> None:
    from types import SimpleNamespace

    from gpuprobe.pytest_plugin import check_options

    options = {**OPTION_DEFAULTS, **given}
    check_options(SimpleNamespace(getoption=lambda name, default=None: options[name]))


def test_meaningful_options_pass(tmp_path: Path) -> None:
    _check()
    _check(gpuprobe_model="h200", gpuprobe_device=1, gpuprobe_out=str(tmp_path / "new" / "out"))
    _check(baseline="base.json", baseline_threshold=2.0)  # the file itself is read by load_baseline
    assert not (tmp_path / "new").exists(), "checking the folder makes nothing"


def test_options_that_mean_nothing_are_a_usage_error(tmp_path: Path) -> None:
    a_file = tmp_path / "results.txt"
    a_file.write_text("not a folder")
    refused = {
        "--gpuprobe-model: unknown GPU model 'nosuchmodel'; known models: a10, a100": {"gpuprobe_model": "nosuchmodel"},
        "--gpuprobe-device must be a device index of 0 or more, got -1": {"gpuprobe_device": -1},
        f"--gpuprobe-out: {a_file}: not a folder": {"gpuprobe_out": str(a_file)},
        f"--gpuprobe-out: {a_file}/out: cannot make this folder ({a_file} is not a folder)": {
            "gpuprobe_out": str(a_file / "out")
        },
        "--baseline-threshold needs --baseline": {"baseline_threshold": 5.0},
        "--gpuprobe-probe-time-limit must be a positive number of seconds, got -1.0": {
            "gpuprobe_probe_time_limit": -1.0
        },
        "--gpuprobe-deadline must be a positive number of seconds, got 0.0": {"gpuprobe_deadline": 0.0},
        "--gpuprobe-cooldown must be at least 0 seconds, got -2.0": {"gpuprobe_cooldown": -2.0},
    }
    if Path("/proc/self").is_dir():  # a place no folder can be made, even by root
        refused["--gpuprobe-out: /proc/gpuprobe: cannot make this folder ("] = {"gpuprobe_out": "/proc/gpuprobe"}
    for message, given in refused.items():
        with pytest.raises(pytest.UsageError) as info:
            _check(**given)
        assert str(info.value).startswith(message), (given, str(info.value))


def test_a_refused_option_is_one_line_and_pytest_s_usage_status() -> None:
    command = [sys.executable, "-m", "pytest", "probes/test_expectations.py", "-p", "no:cacheprovider"]
    run = subprocess.run([*command, "--gpuprobe-model", "h300"], cwd=REPO, capture_output=True, text=True, check=False,
                         timeout=120)  # fmt: skip
    assert run.returncode == 4, run.stdout + run.stderr
    assert run.stderr.startswith("ERROR: --gpuprobe-model: unknown GPU model 'h300'; known models: ")
    assert len(run.stderr.strip().splitlines()) == 1 and "Traceback" not in run.stderr


def test_a_corrupt_expectations_file_fails_the_static_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``pytest probes/`` reads the expectations on any machine, so a file that does not read fails there,
    not only on a GPU after the measuring."""
    import importlib.util
    import shutil

    from gpuprobe.judge import expectations

    copy = tmp_path / "expectations"
    shutil.copytree(expectations.DEFAULT_DIRECTORY, copy)
    (copy / "h200.toml").write_text('[facts."tensor.x"\nmin = 1\n')
    monkeypatch.setattr(expectations, "DEFAULT_DIRECTORY", copy)
    spec = importlib.util.spec_from_file_location("static_expectations", REPO / "probes" / "test_expectations.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    with pytest.raises(pytest.fail.Exception, match=r"expectations/h200\.toml: \(TOML syntax\)"):
        module.test_every_expectation_file_reads()


# ---- a run a person can follow: progress, a crash said at once, an interrupt that says where ------------


def test_a_run_says_each_family_a_crash_at_once_and_where_an_interrupt_left_the_partial_results(
    tmp_path: Path,
) -> None:
    """On the simulated part, the L2-partition family's probe crashes and the launch family hangs until
    Ctrl-C: each family's start and end is a line under pytest's output with the time left by the plan, the
    crash is its own line before the family ends, and the interrupted run names its partial results and
    fact sheet, both written. A CUDA_HOME that names no toolkit is said in the header."""
    import signal

    out = tmp_path / "out"
    env = {
        **os.environ,
        "GPUPROBE_REHEARSAL": "1",
        "GPUPROBE_REHEARSAL_OPTIONS": json.dumps({"faults": {"gp_l2p_touch": "abort", "gp_launch_stamp": "hang"}}),
        "GPUPROBE_LOCK_DIR": str(tmp_path / "locks"),
        "PYTHONPATH": os.pathsep.join([str(REHEARSAL), str(REPO)]),
        "CUDA_HOME": str(tmp_path / "no-toolkit"),
    }
    command = [sys.executable, "-c", PYTEST_ARMED, "probes/test_l2_partition.py", "probes/test_launch.py", "-q",
               "-p", "no:cacheprovider", "--gpuprobe-out", str(out), "--gpuprobe-probe-time-limit", "600"]  # fmt: skip
    run = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    said = []
    try:
        assert run.stdout is not None
        for line in run.stdout:
            said.append(line.rstrip("\n"))
            if line.startswith("gpuprobe: [2/2] launch: 3 probes"):
                run.send_signal(signal.SIGINT)  # the launch family hangs: stop it
        run.wait(timeout=120)
    finally:
        run.kill()
    ours = [line for line in said if line.startswith("gpuprobe: ")]
    no_toolkit = f"CUDA_HOME={tmp_path / 'no-toolkit'} is not a CUDA toolkit (no bin/ptxas or bin/nvdisasm in it)"
    assert ours[0] == f"gpuprobe: warning: {no_toolkit}: ignored", said
    assert ours[1].startswith("gpuprobe: [1/2] l2_partition: 1 probe, about ") and "left in all" in ours[1]
    assert ours[2].startswith("gpuprobe: [1/2] l2_partition: l2_partition.map CRASHED: child killed by signal 6")
    assert ours[3].startswith("gpuprobe: [1/2] l2_partition done in ") and ours[3].endswith(": 0/1 ok, 1 crashed")
    assert ours[4].startswith("gpuprobe: [2/2] launch: 3 probes, about ")
    assert f"gpuprobe: interrupted; partial results in {out / 'results.json'}, {out / 'factsheet.md'}" in ours
    assert run.returncode == 2  # pytest's "interrupted"
    results = load(out / "results.json")
    assert results.partial and results.families["launch"]["ended"] == "interrupted"
    assert "partial" in (out / "factsheet.md").read_text().lower()
