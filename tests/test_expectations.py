"""Expectation files, their strict loader, model matching, the judge, and the invariants."""

from __future__ import annotations

import argparse
import itertools
import json
from pathlib import Path

import pytest

from gpuprobe.errors import GpuprobeError
from gpuprobe.expectations import (
    DEFAULT_DIRECTORY,
    KNOWN_UNITS,
    SEVERITIES,
    Expectation,
    add_command,
    judge,
    load_all,
    load_model_file,
    match_model,
)
from gpuprobe.invariants import check_invariants
from gpuprobe.results import Device, Fact

SHIPPED = sorted(DEFAULT_DIRECTORY.glob("*.toml"))
EXPECTED_KEYS = {
    "v100",
    "t4",
    "a100",
    "a10",
    "a40",
    "l4",
    "l40s",
    "rtx_4090",
    "h100_pcie",
    "h100_sxm",
    "h200",
    "b200",
    "rtx_5090",
}
LATENCIES = ("latency.shared", "latency.l1", "latency.l2", "latency.l2_far", "latency.dram")
KIB = 1024
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def models():
    return load_all()


# --- shipped files -------------------------------------------------------------------------------


def test_every_expected_model_ships():
    assert {path.stem for path in SHIPPED} >= EXPECTED_KEYS


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_file_loads(path):
    model = load_model_file(path)
    assert model.key == path.stem
    assert model.match and model.name and model.cc


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_every_fact_has_a_source_and_its_unit(path):
    for fact_id, expectation in load_model_file(path).facts.items():
        assert expectation.source.strip(), fact_id
        assert expectation.severity in SEVERITIES
        if fact_id in KNOWN_UNITS:
            assert expectation.unit == KNOWN_UNITS[fact_id], fact_id


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_unpublished_facts_are_report_only(path):
    for fact_id, expectation in load_model_file(path).facts.items():
        if "no published measurement found" in expectation.source:
            assert expectation.severity == "report", fact_id


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_sm_count_is_an_exact_assert(path):
    expectation = load_model_file(path).facts["device.sm_count"]
    assert expectation.severity == "assert"
    assert expectation.low == expectation.high and expectation.low > 0


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_ranges_respect_the_invariants(path):
    """The latency bounds rise level by level, and capacities sit inside the invariant limits."""
    facts = load_model_file(path).facts
    ranged = [facts[i] for i in LATENCIES if i in facts and facts[i].low is not None]
    for lower, upper in itertools.pairwise(ranged):
        assert lower.low < upper.low and lower.high < upper.high, (lower.fact_id, upper.fact_id)
    l2_bytes = facts["device.l2_bytes"]
    capacity_l2 = facts["capacity.l2"]
    assert 0.4 * l2_bytes.high <= capacity_l2.low and capacity_l2.high <= 1.6 * l2_bytes.low
    capacity_l1 = facts["capacity.l1"]
    assert capacity_l1.low >= 16 * KIB and capacity_l1.high <= 256 * KIB


# --- matching ------------------------------------------------------------------------------------


# Device names as the CUDA runtime reports them (cudaGetDeviceProperties / deviceQuery / nvidia-smi).
REAL_NAMES = [
    ("Tesla V100-SXM2-16GB", "v100"),
    ("Tesla V100-SXM2-32GB", "v100"),
    ("Tesla V100-PCIE-16GB", "v100"),
    ("Tesla V100-PCIE-32GB", "v100"),
    ("Tesla V100S-PCIE-32GB", "v100"),
    ("Tesla T4", "t4"),
    ("NVIDIA A100-SXM4-80GB", "a100"),
    ("NVIDIA A100-SXM4-40GB", "a100"),
    ("NVIDIA A100-PCIE-40GB", "a100"),
    ("NVIDIA A100 80GB PCIe", "a100"),
    ("NVIDIA A10", "a10"),
    ("NVIDIA A40", "a40"),
    ("NVIDIA L4", "l4"),
    ("NVIDIA L40S", "l40s"),
    ("NVIDIA GeForce RTX 4090", "rtx_4090"),
    ("NVIDIA H100 PCIe", "h100_pcie"),
    ("NVIDIA H100 80GB HBM3", "h100_sxm"),
    ("NVIDIA H200", "h200"),
    ("NVIDIA B200", "b200"),
    ("NVIDIA GeForce RTX 5090", "rtx_5090"),
    ("nvidia h100 pcie", "h100_pcie"),
]


@pytest.mark.parametrize(("device_name", "key"), REAL_NAMES)
def test_real_device_names_match(models, device_name, key):
    model = match_model(device_name, models=models)
    assert model is not None and model.key == key


@pytest.mark.parametrize(("device_name", "key"), REAL_NAMES)
def test_no_two_models_match_the_same_name(models, device_name, key):
    assert [m.key for m in models.values() if m.matching_pattern(device_name)] == [key]


def test_every_shipped_model_has_a_real_name_tested(models):
    assert {key for _, key in REAL_NAMES} == set(models)


@pytest.mark.parametrize(
    "device_name",
    [
        "NVIDIA GH200 480GB",  # "H200" inside "GH200"
        "NVIDIA L40",  # not the L40S
        "NVIDIA T400 4GB",  # not the T4
        "NVIDIA GeForce RTX 4090 D",  # 114 SMs
        "NVIDIA GeForce RTX 4090 Laptop GPU",
        "NVIDIA A100-SXM4-40GB MIG 1g.5gb",  # a slice of the GPU
        "NVIDIA H100 NVL",
        "NVIDIA GB200",  # "B200" inside "GB200"
        "NVIDIA B200 MIG 1g.23gb",
        "NVIDIA A10G",  # AWS part, 80 SMs: not the A10
        "NVIDIA RTX A4000",  # not the A40
        "Quadro GV100",  # not the V100
        "NVIDIA TITAN V",
        "NVIDIA GeForce RTX 5090 D",
        "NVIDIA GeForce RTX 5090 Laptop GPU",
        "NVIDIA GeForce RTX 3090",
        "AMD Instinct MI300X",
        "",
    ],
)
def test_unknown_device_names_give_discovery_mode(models, device_name):
    assert match_model(device_name, models=models) is None


def test_h100_pcie_does_not_match_sxm_patterns(models):
    sxm = models["h100_sxm"]
    assert sxm.matching_pattern("NVIDIA H100 PCIe") is None
    assert models["h100_pcie"].matching_pattern("NVIDIA H100 80GB HBM3") is None


def test_h200_does_not_match_h100(models):
    for key in ("h100_sxm", "h100_pcie"):
        assert models[key].matching_pattern("NVIDIA H200") is None
    assert models["h200"].matching_pattern("NVIDIA H100 80GB HBM3") is None


def test_forced_model_wins_over_the_name(models):
    assert match_model("Some Future GPU", forced="a100", models=models).key == "a100"


def test_unknown_forced_model_lists_known_keys(models):
    with pytest.raises(GpuprobeError) as info:
        match_model("NVIDIA H100 PCIe", forced="h300", models=models)
    message = str(info.value)
    assert "h300" in message and all(key in message for key in EXPECTED_KEYS)


def _write(directory: Path, key: str, patterns: list[str]) -> Path:
    path = directory / f"{key}.toml"
    quoted = ", ".join(f'"{p}"' for p in patterns)
    path.write_text(f'[model]\nname = "{key}"\nmatch = [{quoted}]\ncc = "9.0"\n', encoding="utf-8")
    return path


def test_longest_pattern_wins(tmp_path):
    _write(tmp_path, "generic", ["X100"])
    _write(tmp_path, "special", ["X100 Turbo"])
    models = load_all(tmp_path)
    assert match_model("ACME X100 Turbo", models=models).key == "special"
    assert match_model("ACME X100", models=models).key == "generic"


def test_equally_specific_models_are_an_error(tmp_path):
    _write(tmp_path, "one", ["X100"])
    _write(tmp_path, "two", ["Y200"])
    with pytest.raises(GpuprobeError, match=r"(one and two|two and one)"):
        match_model("X100 Y200", models=load_all(tmp_path))


def test_pattern_shared_by_two_models_is_refused(tmp_path):
    _write(tmp_path, "one", ["X100"])
    _write(tmp_path, "two", ["x100"])
    with pytest.raises(GpuprobeError, match=r"(X100|x100)"):
        load_all(tmp_path)


def test_missing_directory_is_one_line_error(tmp_path):
    with pytest.raises(GpuprobeError, match="not found"):
        load_all(tmp_path / "nowhere")


# --- broken files --------------------------------------------------------------------------------

MODEL = '[model]\nname = "Test GPU"\nmatch = ["Test GPU"]\ncc = "9.0"\n'
GOOD_FACT = 'unit = "cycle"\nseverity = "warn"\nsource = "a paper"\n'


def _fact(body: str, fact_id: str = "latency.l2") -> str:
    return f'{MODEL}\n[facts."{fact_id}"]\n{body}'


BROKEN = [
    (
        "unknown severity",
        _fact('min = 1.0\nmax = 2.0\nunit = "cycle"\nseverity = "fatal"\nsource = "x"\n'),
        "latency.l2",
        "unknown severity",
    ),
    ("min above max", _fact(f"min = 320.0\nmax = 200.0\n{GOOD_FACT}"), "latency.l2", "min 320 > max 200"),
    (
        "unit mismatch",
        _fact('min = 1.0\nmax = 2.0\nunit = "ns"\nseverity = "warn"\nsource = "x"\n'),
        "latency.l2",
        "unit mismatch",
    ),
    ("missing source", _fact('min = 1.0\nmax = 2.0\nunit = "cycle"\nseverity = "warn"\n'), "source", "non-empty"),
    ("empty source", _fact('min = 1.0\nunit = "cycle"\nseverity = "warn"\nsource = "  "\n'), "source", "non-empty"),
    ("unknown fact field", _fact(f"min = 1.0\nmaximum = 2.0\n{GOOD_FACT}"), "maximum", "unknown field"),
    ("unknown model field", MODEL + 'vendor = "x"\n', "model.vendor", "unknown field"),
    ("unknown top-level table", MODEL + "[extra]\na = 1\n", "extra", "unknown field"),
    ("toml syntax error", MODEL + '[facts."latency.l2"\nmin = \n', "TOML syntax", "line"),
    ("value without tolerance", _fact(f"value = 263.0\n{GOOD_FACT}"), "latency.l2", "value without tolerance"),
    ("tolerance without value", _fact(f"tolerance = 0.1\n{GOOD_FACT}"), "latency.l2", "tolerance without value"),
    ("range and value", _fact(f"min = 1.0\nvalue = 2.0\ntolerance = 0.1\n{GOOD_FACT}"), "latency.l2", "not both"),
    ("tolerance out of range", _fact(f"value = 2.0\ntolerance = 1.5\n{GOOD_FACT}"), "tolerance", "[0, 1)"),
    ("bound not a number", _fact(f'min = "200"\n{GOOD_FACT}'), "min", "finite number"),
    ("warn without bounds", _fact(GOOD_FACT), "latency.l2", "needs a range"),
    ("unquoted fact id", MODEL + f"[facts.latency.l2]\nmin = 1.0\n{GOOD_FACT}", "latency", "quoted"),
    ("missing model table", f'[facts."latency.l2"]\nmin = 1.0\n{GOOD_FACT}', "model", "missing [model]"),
    ("missing match", '[model]\nname = "x"\ncc = "9.0"\n', "model.match", "non-empty list"),
    ("empty match", '[model]\nname = "x"\nmatch = []\ncc = "9.0"\n', "model.match", "non-empty list"),
    ("bad cc", '[model]\nname = "x"\nmatch = ["x"]\ncc = 9.0\n', "model.cc", "compute capability"),
    ("missing unit", _fact('min = 1.0\nseverity = "warn"\nsource = "x"\n'), "unit", "non-empty"),
]


@pytest.mark.parametrize(("text", "key", "problem"), [case[1:] for case in BROKEN], ids=[case[0] for case in BROKEN])
def test_broken_file_gives_one_line_naming_file_and_key(tmp_path, text, key, problem):
    path = tmp_path / "broken.toml"
    path.write_text(text, encoding="utf-8")
    with pytest.raises(GpuprobeError) as info:
        load_model_file(path)
    message = str(info.value)
    assert "\n" not in message
    assert str(path) in message
    assert key in message
    assert problem in message


def test_broken_file_fails_load_all(tmp_path):
    _write(tmp_path, "good", ["X100"])
    (tmp_path / "bad.toml").write_text(_fact(f"min = 3.0\nmax = 1.0\n{GOOD_FACT}"), encoding="utf-8")
    with pytest.raises(GpuprobeError, match=r"bad\.toml"):
        load_all(tmp_path)


def test_bad_model_key_from_file_name(tmp_path):
    path = _write(tmp_path, "Bad-Name", ["X"])
    with pytest.raises(GpuprobeError, match="model key"):
        load_model_file(path)


def test_report_fact_may_have_no_range(tmp_path):
    path = tmp_path / "ok.toml"
    path.write_text(_fact('unit = "cycle"\nseverity = "report"\nsource = "no published measurement found"\n'))
    expectation = load_model_file(path).facts["latency.l2"]
    assert expectation.low is None and expectation.high is None
    assert expectation.describe() == "no range (report; no published measurement found)"


def test_value_and_tolerance_become_bounds(tmp_path):
    path = tmp_path / "ok.toml"
    path.write_text(_fact(f"value = 200.0\ntolerance = 0.1\n{GOOD_FACT}"))
    expectation = load_model_file(path).facts["latency.l2"]
    assert expectation.low == pytest.approx(180.0) and expectation.high == pytest.approx(220.0)


def test_unknown_fact_ids_are_allowed_with_their_own_unit(tmp_path):
    path = tmp_path / "ok.toml"
    path.write_text(_fact('min = 1.0\nunit = "GB/s"\nseverity = "warn"\nsource = "x"\n', "bandwidth.dram_read"))
    assert load_model_file(path).facts["bandwidth.dram_read"].unit == "GB/s"


# --- describe and judge --------------------------------------------------------------------------

L2 = Expectation("latency.l2", 200.0, 320.0, "cycle", "warn", "Luo et al. Table IV")
SMS = Expectation("device.sm_count", 132.0, 132.0, "count", "assert", "whitepaper")
INFO = Expectation("latency.dram", 450.0, 800.0, "cycle", "report", "somebody")


def _l2(value, ci=None, **kwargs) -> Fact:
    return Fact(id="latency.l2", value=value, unit="cycle", ci=ci, **kwargs)


def test_describe():
    assert L2.describe() == "200–320 cycle (warn; Luo et al. Table IV)"
    assert SMS.describe() == "132 count (assert; whitepaper)"
    assert Expectation("capacity.l1", 16384.0, None, "byte", "warn", "s").range_text() == "≥ 16384 byte"
    assert Expectation("x.y", None, 2.5, "ns", "warn", "s").range_text() == "≤ 2.5 ns"


def test_judge_pass_with_full_detail():
    fact = _l2(263.2, ci=(261.0, 265.5), converted={"ns": 133.0})
    verdict, detail = judge(fact, L2)
    assert verdict == "pass"
    for piece in ("latency.l2", "263.2", "cycle", "261", "265.5", "CI", "133 ns", "200–320", "Luo et al. Table IV"):
        assert piece in detail


def test_judge_outside_warn_and_fail():
    assert judge(_l2(500.0, ci=(495.0, 505.0)), L2)[0] == "warn"
    verdict, detail = judge(Fact(id="device.sm_count", value=114.0, unit="count"), SMS)
    assert verdict == "fail"
    assert "114" in detail and "132 count" in detail and "whitepaper" in detail and "OUTSIDE" in detail


def test_judge_unstable_when_ci_straddles_a_bound():
    verdict, detail = judge(_l2(318.0, ci=(300.0, 340.0)), L2)
    assert verdict == "unstable"
    assert "straddles" in detail and "300" in detail and "340" in detail
    assert judge(_l2(190.0, ci=(150.0, 210.0)), L2)[0] == "unstable"


def test_judge_ci_touching_a_bound_is_not_unstable():
    assert judge(_l2(250.0, ci=(200.0, 320.0)), L2)[0] == "pass"


def test_judge_without_ci():
    verdict, detail = judge(_l2(250.0), L2)
    assert verdict == "pass" and "no CI" in detail


def test_judge_no_expectation_is_report():
    verdict, detail = judge(_l2(250.0, ci=(249.0, 251.0)), None)
    assert verdict == "report" and "250" in detail and "discovery" in detail


def test_judge_report_severity_never_fails():
    fact = Fact(id="latency.dram", value=5000.0, unit="cycle", ci=(4000.0, 6000.0))
    verdict, detail = judge(fact, INFO)
    assert verdict == "report" and "outside" in detail and "somebody" in detail


def test_judge_missing_value_is_not_run():
    verdict, detail = judge(_l2(None, detail="probe crashed"), L2)
    assert verdict == "not_run" and "probe crashed" in detail


def test_judge_unit_mismatch_fails():
    verdict, detail = judge(Fact(id="latency.l2", value=150.0, unit="ns"), L2)
    assert verdict == "fail" and "unit mismatch" in detail


# --- invariants ----------------------------------------------------------------------------------

H100 = Device(
    name="NVIDIA H100 80GB HBM3",
    cc="9.0",
    arch="sm_90",
    sm_count=132,
    l2_bytes=50 * MIB,
    shared_per_sm_bytes=228 * KIB,
)
GOOD_LATENCIES = {
    "latency.shared": 29.0,
    "latency.l1": 34.0,
    "latency.l2": 265.0,
    "latency.l2_far": 470.0,
    "latency.dram": 650.0,
}


def _facts(values: dict[str, float], unit: str = "cycle") -> dict[str, Fact]:
    return {fact_id: Fact(id=fact_id, value=value, unit=unit) for fact_id, value in values.items()}


def _capacities(l1: float, l2: float) -> dict[str, Fact]:
    return _facts({"capacity.l1": l1, "capacity.l2": l2}, unit="byte")


def test_invariants_hold_for_a_sane_h100():
    checks = check_invariants({**_facts(GOOD_LATENCIES), **_capacities(216 * KIB, 50 * MIB)}, H100)
    assert len(checks) == 6
    assert all(ok for _, ok, _ in checks), checks


def test_reversed_latency_ordering_is_caught():
    reversed_values = dict(GOOD_LATENCIES, **{"latency.l2": 700.0, "latency.dram": 260.0})
    failed = [name for name, ok, _ in check_invariants(_facts(reversed_values), H100) if not ok]
    assert "latency_order.l2_far_below_dram" in failed
    assert "latency_order.l2_below_l2_far" in failed


def test_missing_latencies_are_skipped_and_neighbours_compared():
    checks = check_invariants(_facts({"latency.shared": 29.0, "latency.dram": 650.0}), H100)
    assert [(name, ok) for name, ok, _ in checks] == [("latency_order.shared_below_dram", True)]
    assert check_invariants({}, H100) == []
    unmeasured = {"latency.l1": Fact(id="latency.l1", value=None, unit="cycle")}
    assert check_invariants(unmeasured, H100) == []


def test_wrong_l2_capacity_is_caught():
    checks = dict((name, (ok, detail)) for name, ok, detail in check_invariants(_capacities(216 * KIB, 6 * MIB), H100))
    ok, detail = checks["capacity_l2_near_device_l2"]
    assert not ok and "50.00 MiB" in detail
    assert not dict((n, ok) for n, ok, _ in check_invariants(_capacities(216 * KIB, 90 * MIB), H100))[
        "capacity_l2_near_device_l2"
    ]


def test_l1_capacity_bounds():
    def l1_ok(value: float, device: Device) -> bool:
        (result,) = [ok for name, ok, _ in check_invariants(_facts({"capacity.l1": value}, "byte"), device)]
        return result

    assert l1_ok(256 * KIB, H100)
    assert not l1_ok(300 * KIB, H100)
    assert not l1_ok(8 * KIB, H100)
    unknown = Device(name="?", cc="9.0", arch="sm_90", sm_count=1, l2_bytes=0)
    assert l1_ok(256 * KIB, unknown) and not l1_ok(257 * KIB, unknown)
    assert check_invariants(_capacities(64 * KIB, 4 * MIB), unknown)[0][0].startswith("capacity_l1")


# --- the `gpuprobe expectations` command ---------------------------------------------------------


def run_command(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="gpuprobe")
    add_command(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(["expectations", *argv])
    return args.func(args)


def test_command_lists_every_model_with_its_fact_counts(capsys, models):
    assert run_command([]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[0].split()[:7] == ["key", "model", "cc", "facts", "assert", "warn", "report"]
    for key, model in models.items():
        (line,) = [line for line in lines if line.startswith(key + " ")]
        counts = [str(sum(e.severity == s for e in model.facts.values())) for s in SEVERITIES]
        assert f"  {model.cc}  " in line and f"  {len(model.facts)}  " in line, line
        assert " ".join(counts) in " ".join(line.split()), line
    assert f"{len(models)} models in" in out


def test_command_shows_every_fact_of_one_model(capsys, models):
    assert run_command(["b200"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("b200: NVIDIA B200 (compute capability 10.0)")
    for fact_id, expectation in models["b200"].facts.items():
        line = next(line for line in out.splitlines() if line.startswith(fact_id + " "))
        assert expectation.range_text() in line and f"[{expectation.severity}]" in line
    assert "132644864 byte (126.5 MiB)" in out
    assert "source: markdewing/AI_kernels" in out and "note: " in out


def test_command_takes_a_device_name(capsys):
    assert run_command(["NVIDIA H100 80GB HBM3"]) == 0
    assert capsys.readouterr().out.startswith("h100_sxm: ")


def test_command_unknown_model_is_a_one_line_error():
    with pytest.raises(GpuprobeError, match=r"no GPU model matches 'NVIDIA GB200'; known models: a10, a100"):
        run_command(["NVIDIA GB200"])


def test_command_json(capsys, models):
    assert run_command(["--json"]) == 0
    listed = json.loads(capsys.readouterr().out)["models"]
    assert [m["key"] for m in listed] == sorted(models)
    assert run_command(["l4", "--json"]) == 0
    l4 = json.loads(capsys.readouterr().out)
    assert l4["match"] == ["L4"] and {f["id"] for f in l4["facts"]} == set(models["l4"].facts)
    assert run_command(["h100_sxm", "--json"]) == 0
    h100 = json.loads(capsys.readouterr().out)
    peaks = {d["key"]: d["value"] for d in h100["datasheet"]}
    assert peaks["dram_gbps"] == 3350.0 and all(d["source"] for d in h100["datasheet"])


def test_command_names_the_family_files_and_datasheet(capsys):
    assert run_command(["h100_sxm"]) == 0
    out = capsys.readouterr().out
    assert "and each family's h100_sxm.toml in: " in out and "wgmma" in out
    assert "datasheet dram_gbps = 3350 GB/s (" in out


# --- family files and datasheet figures ------------------------------------------------------------

DATASHEET = '[datasheet."dram_gbps"]\nvalue = 3350.0\nunit = "GB/s"\nsource = "a datasheet"\n'


def _family_file(directory: Path, family: str, key: str, text: str) -> Path:
    path = directory / family / f"{key}.toml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def test_family_files_merge_into_their_model(tmp_path):
    (tmp_path / "test_gpu.toml").write_text(_fact(f"min = 1.0\n{GOOD_FACT}") + "\n" + DATASHEET, encoding="utf-8")
    _family_file(tmp_path, "bandwidth", "test_gpu", f'[facts."bandwidth.dram_read"]\nmin = 2.0\n{GOOD_FACT}')
    tensor = '[datasheet."bf16_dense_tflops"]\nvalue = 989.4\nunit = "TFLOP/s"\nsource = "a whitepaper"\n'
    _family_file(tmp_path, "wgmma", "test_gpu", tensor)
    model = load_all(tmp_path)["test_gpu"]
    assert set(model.facts) == {"latency.l2", "bandwidth.dram_read"}
    assert model.facts["bandwidth.dram_read"].low == 2.0
    assert {k: v.value for k, v in model.datasheet.items()} == {"dram_gbps": 3350.0, "bf16_dense_tflops": 989.4}
    assert model.datasheet["dram_gbps"].source == "a datasheet"


@pytest.mark.parametrize(
    ("family_text", "problem"),
    [
        (f'[facts."latency.l2"]\nmin = 2.0\n{GOOD_FACT}', "given twice"),
        (DATASHEET, "given twice"),
        ('[model]\nname = "x"\n', "unknown field"),
        ('[datasheet."dram_gbps"]\nvalue = -1.0\nunit = "GB/s"\nsource = "x"\n', "positive finite number"),
        ('[datasheet."dram_gbps"]\nvalue = 1.0\nunit = "GB/s"\n', "source"),
        ('[datasheet."Dram"]\nvalue = 1.0\nunit = "GB/s"\nsource = "x"\n', "lower case"),
        ("[facts.", "TOML syntax"),
    ],
)
def test_bad_family_file_is_one_line_naming_it(tmp_path, family_text, problem):
    (tmp_path / "test_gpu.toml").write_text(_fact(f"min = 1.0\n{GOOD_FACT}") + "\n" + DATASHEET, encoding="utf-8")
    path = _family_file(tmp_path, "bandwidth", "test_gpu", family_text)
    with pytest.raises(GpuprobeError) as excinfo:
        load_all(tmp_path)
    message = str(excinfo.value)
    assert "\n" not in message and str(path) in message and problem in message


def test_family_file_for_an_unknown_model_is_refused(tmp_path):
    _write(tmp_path, "test_gpu", ["Test GPU"])
    path = _family_file(tmp_path, "bandwidth", "other_gpu", f'[facts."bandwidth.dram_read"]\nmin = 2.0\n{GOOD_FACT}')
    with pytest.raises(GpuprobeError, match="no model 'other_gpu'") as excinfo:
        load_all(tmp_path)
    assert str(path) in str(excinfo.value)
