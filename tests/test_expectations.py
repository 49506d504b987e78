"""Expectation files, their strict loader, model matching, the judge, and the invariants."""

from __future__ import annotations

import argparse
import itertools
import json
import re
from pathlib import Path

import pytest

from gpuprobe.cli.expectations import add_commands
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.results import Device, Fact
from gpuprobe.judge.expectations import (
    DEFAULT_DIRECTORY,
    KNOWN_UNITS,
    SEVERITIES,
    Expectation,
    is_declared,
    judge,
    load_all,
    load_model_file,
    match_model,
)
from gpuprobe.judge.invariants import check_invariants
from gpuprobe.judge.verdicts import recorded

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
def test_shipped_ranges_respect_the_invariants(path, models):
    """The latency bounds rise level by level, and capacities sit inside the invariant limits."""
    facts = models[path.stem].facts
    ranged = [facts[i] for i in LATENCIES if i in facts and facts[i].low is not None]
    for lower, upper in itertools.pairwise(ranged):
        assert lower.low < upper.low and lower.high < upper.high, (lower.fact_id, upper.fact_id)
    l2_bytes = facts["device.l2_bytes"]
    capacity_l2 = facts["capacity.l2"]
    assert 0.4 * l2_bytes.high <= capacity_l2.low and capacity_l2.high <= 1.6 * l2_bytes.low
    capacity_l1 = facts["capacity.l1"]
    assert capacity_l1.low >= 16 * KIB and capacity_l1.high <= 256 * KIB


# --- the H200, H100 SXM and A100 against published measurements (issue 11, the expectations audit) ----

AUDITED = ("h200", "h100_sxm", "a100")
HOPPER = ("h200", "h100_sxm")
HOPPER_SMS, HOPPER_BOOST_MHZ = 132, 1980.0
HOPPER_BF16_PEAK = HOPPER_SMS * 4096 * HOPPER_BOOST_MHZ / 1e6  # TFLOP/s at 1980 MHz

# (models, fact id, a value a healthy part of that model has been published to read, where it was published).
# Each range must hold each value; the ranges the audit found too tight fail here. A few entries add the
# margin a warn range needs over the nearest published reading (5 % for a latency, 10 % for a bandwidth); where two
# or more independent measurements agree (latency.l1, latency.l2_far, bandwidth.l2_read.v16 on Hopper, issue 27) the
# range is their spread, with no margin (TIGHTENED).
# Per-clock conversions at the 1980 MHz the Hopper parts held in those runs, ns-scaling from the 1755 MHz
# PCIe parts as the notes derive.
PUBLISHED = [
    (HOPPER, "latency.l2", 280.1, "markdewing/AI_kernels gh200.dat (GH200, 60 MiB L2)"),
    (HOPPER, "latency.l2", 292.2, "markdewing/AI_kernels h100sxm.dat"),
    (HOPPER, "latency.l2_far", 499.7, "markdewing/AI_kernels h100sxm.dat, 32.4 MiB"),
    (HOPPER, "latency.l2_far", 538.4, "markdewing/AI_kernels h100sxm.dat, 44.6 MiB"),
    (HOPPER, "latency.l2_far", 536.7, "markdewing/AI_kernels gh200.dat, 61.4 MiB"),
    (HOPPER, "latency.l2_far", 477.8 * 1980 / 1755, "gpu-benches h100_pcie.txt, ns-scaled"),
    (HOPPER, "latency.l2_far", 502.0 * 1980 / 1755, "Luo et al. arXiv:2501.12084 Table 3, ns-scaled"),
    (HOPPER, "latency.dram", 673.8, "markdewing/AI_kernels gh200.dat"),
    (HOPPER, "latency.dram", 703.0, "markdewing/AI_kernels h100sxm.dat"),
    (("h200",), "latency.dram", 658.4 * 1980 / 1755, "gpu-benches h100_pcie.txt, ns-scaled"),
    (("h100_sxm",), "latency.dram", 484.0, "Johnsonms/NVIDIA-Hopper-Benchmark summary.md, fixed stride"),
    (("h200",), "capacity.l2", 60 * MIB, "a 60 MiB L2 read exactly"),
    (("h200",), "capacity.l2", 1.085 * 60 * MIB, "the level finder's overshoot on whole-line chases"),
    (("h200",), "capacity.l2", 1.085 * 50 * MIB, "the same, if the part has 50 MiB"),
    (HOPPER, "bandwidth.l2_read.v16", 4207 * 1.98, "Johnsonms/NVIDIA-Hopper-Benchmark summary.md, 32-bit loads"),
    (HOPPER, "bandwidth.l2_read.v16", 9477.3, "gpu-benches gpu-l2-cache/h200.txt, 36.9 MB"),
    (HOPPER, "async.cp_async.l2_bandwidth", 4207 * 1.98, "Johnsonms/NVIDIA-Hopper-Benchmark summary.md"),
    (AUDITED, "bandwidth.dram_copy_fraction_of_memcpy", 3165 / 3534, "gpu-benches gpu-stream/h200.txt scale / triad"),
    (("h100_sxm",), "bandwidth.dram_copy.v16", 3008.2, "Johnsonms/NVIDIA-Hopper-Benchmark raw/mem_bw.log"),
    (("a100",), "bandwidth.dram_read_fraction_of_peak", 0.9 * 1730 / 2039, "10 % under gpu-l2-cache/a100_80.txt"),
    (HOPPER, "tensor.wgmma.bf16.fraction_of_peak", 901.8 / HOPPER_BF16_PEAK, "wgmma_fp16.log, random, per clock"),
    (
        HOPPER,
        "tensor.wgmma.f16.m64n256k16.rs.zero_operands.fraction_of_peak",
        976.6 / HOPPER_BF16_PEAK,
        "the same log, zero operands, per clock",
    ),
    (HOPPER, "tensor.cublas.bf16.fraction_of_peak", 622.8 / HOPPER_BF16_PEAK, "the audit's H100 FP16 report"),
    (HOPPER, "tensor.cublas.bf16.fraction_of_peak", 794.5 / HOPPER_BF16_PEAK, "stas00/ml-engineering MAMF, H100 SXM"),
    (("a100",), "alu.hfma2.throughput", 200.0, "'Code enhanced from Accel-sim' README, A100"),
    (HOPPER, "alu.hfma2.throughput", 405.7 / 2, "Johnsonms/NVIDIA-Hopper-Benchmark summary.md"),
    (("a100",), "tensor.mma_sync.bf16.m16n8k16.tflops", 252.9, "stas00/ml-engineering MAMF, A100 PCIe"),
    (("a100",), "tensor.mma_sync.bf16.m16n8k16.throughput", 0.869 * 1024, "MAMF A100 SXM per clock"),
    (HOPPER, "dsmem.latency.peer", 181.0, "HPMLL/NVIDIA-Hopper-Benchmark DSM OneToAll log, H800"),
    (HOPPER, "dsmem.latency.peer", 181.0 * 1980 / 1755, "the same, ns-scaled"),
    (HOPPER, "dsmem.latency.own", 33.0, "the same log, own block"),
    (HOPPER, "warp.shfl.bfly.throughput", 32.0, "CUDA Programming Guide throughput table"),
    (HOPPER, "latency.constant.hit", 17.0, "mt4g H100 80GB HBM3, p50"),
    (HOPPER, "latency.constant.miss", 104.9, "mt4g H100 80GB HBM3, mean"),
    (HOPPER, "cache.l2.sector_bytes", 32.0, "mt4g H100 80GB HBM3"),
    (("h200",), "sync.grid.persistent_step", 65536 / 58e3, "gpu-benches h200_gsync.txt, fastest"),
    (("h200",), "sync.grid.persistent_step", 65536 / 52e3, "gpu-benches h200_gsync.txt, slowest"),
    (("h200",), "launch.graph.per_node.gpu", 65536 / 48e3, "gpu-benches h200_graph.txt, slowest"),
    (("h200",), "host.h2d.pinned.bandwidth", 52.0, "Azure ND H200 v5 nvbandwidth, Gen5 host"),
]


@pytest.mark.parametrize(
    ("key", "fact_id", "value", "where"),
    [(key, fact_id, value, where) for keys, fact_id, value, where in PUBLISHED for key in keys],
    ids=lambda v: v if isinstance(v, str) else f"{v:g}",
)
def test_audited_ranges_hold_the_published_measurements(models, key, fact_id, value, where):
    expectation = models[key].facts[fact_id]
    assert expectation.severity != "report", f"{key} {fact_id}: published ({where}) but not judged"
    assert expectation.contains(value), f"{key} {fact_id} {expectation.range_text()} misses {value:g} ({where})"


@pytest.mark.parametrize("scale", [0.95, 1.0, 1.03, 1.06, 1.09, 1.14])
@pytest.mark.parametrize("l2_mib", [60, 50])
def test_h200_l2_capacity_holds_what_the_finder_reads(models, scale, l2_mib):
    """The level finder reads 1.00-1.085 x the L2 on whole-line chases (issue 11 audit, section 0.1), 5 % more
    either side for noise; the H200's L2 is probably 60 MiB, 50 MiB in some listings."""
    assert models["h200"].facts["capacity.l2"].contains(scale * l2_mib * MIB)


def _wgmma_rate_facts(model):
    """(fact id, expectation, the per-clock ceiling at 1980 MHz) for each wgmma TFLOP/s fact with an upper bound."""
    from gpuprobe.families.wgmma import HOPPER_FLOP_PER_CLK_PER_SM

    rates = []
    for fact_id, expectation in model.facts.items():
        parts = fact_id.split(".")
        if fact_id.startswith("tensor.wgmma.") and parts[-1] == "tflops" and expectation.high is not None:
            flop = HOPPER_FLOP_PER_CLK_PER_SM[parts[2]]
            rates.append((fact_id, expectation, HOPPER_SMS * flop * HOPPER_BOOST_MHZ / 1e6))
    return rates


@pytest.mark.parametrize("key", HOPPER)
def test_no_wgmma_ceiling_sits_at_the_peak_without_a_timer_margin(models, key):
    """The rate invariant allows 2 % over the per-clock peak for timer noise; so must the expectations,
    and no more than a few percent, or the ceiling stops catching a wrong timer."""
    rates = _wgmma_rate_facts(models[key])
    assert len(rates) >= 12, [fact_id for fact_id, _, _ in rates]
    for fact_id, expectation, peak in rates:
        assert 1.02 * peak <= expectation.high <= 1.05 * peak, (fact_id, expectation.high, peak)


def test_a100_mma_sync_floors_would_catch_a_half_rate_path(models):
    """cuBLAS reaches 0.81-0.87 of the A100's dense peak with mma.sync alone, so no floor sits under 0.75."""
    peaks = {"f16": (1024, 312.0), "f16_f16acc": (1024, 312.0), "bf16": (1024, 312.0), "tf32": (512, 156.0),
             "int8": (2048, 624.0)}  # fmt: skip
    judged = 0
    for fact_id, expectation in models["a100"].facts.items():
        parts = fact_id.split(".")
        rate = parts[-1] in ("throughput", "tflops")
        if not fact_id.startswith("tensor.mma_sync.") or expectation.low is None or not rate:
            continue
        per_clock, tflops = peaks[parts[2]]
        peak = per_clock if parts[-1] == "throughput" else tflops
        assert 0.75 * peak <= expectation.low < peak <= expectation.high, (fact_id, expectation.range_text())
        judged += 1
    assert judged == 10


UNTRACEABLE = ("DGNA", "2607.19922", "CREDIT", "2609.01864", "saulelectric")


@pytest.mark.parametrize("key", AUDITED)
def test_every_judged_fact_of_the_audited_models_names_a_source(models, key):
    """Every warn or assert fact (family files merged) cites something, not the no-source placeholder and
    none of the citations the audit could not trace; a project requirement says why in its note."""
    judged = {i: e for i, e in models[key].facts.items() if e.severity != "report"}
    assert len(judged) > 40
    for fact_id, expectation in judged.items():
        assert expectation.source.strip() and "no published measurement found" not in expectation.source, fact_id
        assert not any(name in expectation.source for name in UNTRACEABLE), (fact_id, expectation.source)
        if expectation.source.startswith("gpuprobe requirement"):
            assert expectation.note.strip(), fact_id


def test_h200_ranges_said_to_be_inherited_are_the_h100s(models):
    """An H200 range that says it is inherited from the H100 SXM (same GH100 SM) is exactly the H100's."""
    h100 = models["h100_sxm"].facts
    inherited = {
        fact_id: expectation
        for fact_id, expectation in models["h200"].facts.items()
        if expectation.source.startswith("inherited from H100") or "the H100 values apply" in expectation.note
    }
    assert len(inherited) > 30
    for fact_id, expectation in inherited.items():
        other = h100[fact_id]
        assert (expectation.low, expectation.high) == (other.low, other.high), fact_id
        assert expectation.severity == other.severity, fact_id


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


PUBLISHED_ENTRY = 'value = 29.0, unit = "cycle", part = "H800", method = "indexed chase", source = "a paper"'


def _fact(body: str, fact_id: str = "latency.l2") -> str:
    return f'{MODEL}\n[facts."{fact_id}"]\n{body}'


def _published(*entries: str) -> str:
    """A model file whose latency.l2 lists ``entries`` (inline-table bodies) as its published measurements."""
    listed = ", ".join("{" + entry + "}" for entry in entries)
    return _fact(f"min = 1.0\npublished = [{listed}]\n{GOOD_FACT}")


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
    ("bound no float holds", _fact(f"min = 1{'0' * 400}\n{GOOD_FACT}"), "min", "finite number"),
    ("nested too deeply", MODEL + "x = " + "[" * 5000 + "]" * 5000 + "\n", "TOML syntax", "nested too deeply"),
    ("warn without bounds", _fact(GOOD_FACT), "latency.l2", "needs a range"),
    (
        "a ratio judged on one side",
        MODEL + '[facts."tensor.wgmma.bf16.fraction_of_cublas"]\nmin = 0.95\nunit = "fraction"\nseverity = "warn"\n'
        'source = "x"\n',
        "fraction_of_cublas",
        "judged on both sides",
    ),
    (
        "an absolute rate asserted",
        MODEL + '[facts."tensor.cublas.bf16.tflops"]\nmin = 550.0\nunit = "TFLOP/s"\nseverity = "assert"\n'
        'source = "x"\n',
        "tensor.cublas.bf16.tflops",
        "judges the clock it ran at: warn at most",
    ),
    ("unquoted fact id", MODEL + f"[facts.latency.l2]\nmin = 1.0\n{GOOD_FACT}", "latency", "quoted"),
    ("missing model table", f'[facts."latency.l2"]\nmin = 1.0\n{GOOD_FACT}', "model", "missing [model]"),
    ("missing match", '[model]\nname = "x"\ncc = "9.0"\n', "model.match", "non-empty list"),
    ("empty match", '[model]\nname = "x"\nmatch = []\ncc = "9.0"\n', "model.match", "non-empty list"),
    ("bad cc", '[model]\nname = "x"\nmatch = ["x"]\ncc = 9.0\n', "model.cc", "compute capability"),
    ("missing unit", _fact('min = 1.0\nseverity = "warn"\nsource = "x"\n'), "unit", "non-empty"),
    ("published not a list", _fact(f"min = 1.0\npublished = 29.0\n{GOOD_FACT}"), "published", "non-empty list"),
    ("published empty", _fact(f"min = 1.0\npublished = []\n{GOOD_FACT}"), "published", "non-empty list"),
    ("published unknown field", _published(PUBLISHED_ENTRY + ", board = 1"), "published[0].board", "unknown field"),
    (
        "published value not a number",
        _published(PUBLISHED_ENTRY.replace("29.0", "'29'")),
        "published[0].value",
        "finite number",
    ),
    (
        "published without a value",
        _published(PUBLISHED_ENTRY.replace("value = 29.0, ", "")),
        "published[0].value",
        "finite number",
    ),
    ("published value and range", _published(PUBLISHED_ENTRY + ", max = 30.0"), "published[0]", "not both"),
    (
        "published range reversed",
        _published(PUBLISHED_ENTRY.replace("value = 29.0", "min = 3.0, max = 2.0")),
        "published[0]",
        "min 3 > max 2",
    ),
    (
        "published in another unit",
        _published(PUBLISHED_ENTRY.replace("cycle", "ns")),
        "published[0].unit",
        "unit mismatch",
    ),
    (
        "published without a source",
        _published(PUBLISHED_ENTRY.replace(', source = "a paper"', "")),
        "published[0].source",
        "non-empty",
    ),
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


def test_published_measurements_are_read_with_their_expectation(tmp_path):
    spread = PUBLISHED_ENTRY.replace("value = 29.0", "min = 279.0, max = 282.0")
    (tmp_path / "test_gpu.toml").write_text(_published(PUBLISHED_ENTRY, spread), encoding="utf-8")
    model = load_all(tmp_path)["test_gpu"]
    first, second = model.published_for("latency.l2")
    assert (first.low, first.high, first.unit, first.part, first.method, first.source) == (
        29.0, 29.0, "cycle", "H800", "indexed chase", "a paper")  # fmt: skip
    assert (second.low, second.high, second.value_text()) == (279.0, 282.0, "279–282")
    assert second.distance(280.0) == 0.0 and first.distance(29.0 * 1.1) == pytest.approx(0.1)
    assert model.published_for("latency.l1") == ()
    assert recorded(model.facts["latency.l2"]) == {"low": 1.0, "high": None, "unit": "cycle", "severity": "warn",
                                                   "source": "a paper", "note": ""}  # fmt: skip


def test_family_files_carry_published_measurements(tmp_path):
    (tmp_path / "test_gpu.toml").write_text(_fact(f"min = 1.0\n{GOOD_FACT}"), encoding="utf-8")
    entry = "{" + PUBLISHED_ENTRY.replace("cycle", "GB/s") + "}"
    body = f"min = 2.0\npublished = [{entry}]\n" + GOOD_FACT.replace("cycle", "GB/s")
    _family_file(tmp_path, "bandwidth", "test_gpu", f'[facts."bandwidth.dram_read.v16"]\n{body}')
    (found,) = load_all(tmp_path)["test_gpu"].published_for("bandwidth.dram_read.v16")
    assert (found.low, found.unit, found.part) == (29.0, "GB/s", "H800")


def test_shipped_h200_headline_facts_cite_published_measurements(models):
    """Every H200 headline fact the audit (shared/review/h200_results_audit.md, section 3) found a published
    measurement for carries it, in the fact's unit."""
    audited = ("latency.shared", "latency.l1", "latency.l2", "latency.l2_far", "latency.dram", "capacity.l1",
               "bandwidth.dram_read.v16", "bandwidth.dram_copy.v16", "bandwidth.l2_read.v16", "bandwidth.l1_read.v16",
               "bandwidth.shared_read.v16", "alu.ffma.throughput", "alu.ffma.latency", "launch.stream.gpu_spacing",
               "launch.graph.per_node.gpu", "host.h2d.pinned.bandwidth", "host.d2h.pinned.bandwidth")  # fmt: skip
    h200 = models["h200"]
    for fact_id in audited:
        found = h200.published_for(fact_id)
        assert found, fact_id
        assert all(p.unit == h200.facts[fact_id].unit and p.source for p in found), fact_id


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


def test_a_fact_without_a_known_unit_takes_its_own(tmp_path):
    path = tmp_path / "ok.toml"
    path.write_text(_fact('min = 1.0\nunit = "GB/s"\nseverity = "warn"\nsource = "x"\n', "bandwidth.dram_read.v16"))
    assert load_model_file(path).facts["bandwidth.dram_read.v16"].unit == "GB/s"


@pytest.mark.parametrize(
    ("fact_id", "hint"),
    [("latency.l2x", "(did you mean 'latency.l2'?)"), ("p2p.ce.bandwidth.0_1.x", ""), ("zz.qq", "")],
)
def test_an_expectation_of_a_fact_no_probe_declares_is_refused_naming_the_closest(tmp_path, fact_id, hint):
    path = tmp_path / "typo.toml"
    path.write_text(_fact(f"min = 1.0\n{GOOD_FACT}", fact_id))
    with pytest.raises(GpuprobeError) as excinfo:
        load_all(tmp_path)
    message = str(excinfo.value)
    assert f'{path}: facts."{fact_id}": no probe measures {fact_id!r}' in message and hint in message


def test_declared_facts_and_their_pairs_may_be_expected() -> None:
    assert all(is_declared(f) for f in ("latency.l2", "device.sm_count", "p2p.ce.bandwidth.*", "p2p.ce.bandwidth.0_1"))


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
    assert all(ok for _, ok, *_ in checks), checks


def test_reversed_latency_ordering_is_caught():
    reversed_values = dict(GOOD_LATENCIES, **{"latency.l2": 700.0, "latency.dram": 260.0})
    failed = [c.name for c in check_invariants(_facts(reversed_values), H100) if not c.ok]
    assert "latency_order.l2_far_below_dram" in failed
    assert "latency_order.l2_below_l2_far" in failed


def test_missing_latencies_are_skipped_and_neighbours_compared():
    checks = check_invariants(_facts({"latency.shared": 29.0, "latency.dram": 650.0}), H100)
    assert [(name, ok) for name, ok, *_ in checks] == [("latency_order.shared_below_dram", True)]
    assert check_invariants({}, H100) == []
    unmeasured = {"latency.l1": Fact(id="latency.l1", value=None, unit="cycle")}
    assert check_invariants(unmeasured, H100) == []


def test_wrong_l2_capacity_is_caught():
    checks = {c.name: (c.ok, c.detail) for c in check_invariants(_capacities(216 * KIB, 6 * MIB), H100)}
    ok, detail = checks["capacity_l2_near_device_l2"]
    assert not ok and "50.00 MiB" in detail
    assert not {c.name: c.ok for c in check_invariants(_capacities(216 * KIB, 90 * MIB), H100)}[
        "capacity_l2_near_device_l2"
    ]


def test_l1_capacity_bounds():
    def l1_ok(value: float, device: Device) -> bool:
        (result,) = [c.ok for c in check_invariants(_facts({"capacity.l1": value}, "byte"), device)]
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
    add_commands(parser.add_subparsers(dest="command", required=True))
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


def _listed(out: str, title: str) -> dict[str, str]:
    """The numbered texts listed under ``title`` (``sources``, ``notes``) after the tables, joined back up."""
    listed: dict[str, str] = {}
    last = ""
    section = out.split(f"\n{title}\n", 1)[1].split("\n\n", 1)[0]
    for line in section.splitlines():
        if line.startswith("      "):
            listed[last] += " " + line.strip()
        else:
            last, text = line.split(maxsplit=1)
            listed[last] = text
    return listed


def test_command_shows_every_fact_of_one_model_with_its_source_and_note_listed_once(capsys, models):
    assert run_command(["b200"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("b200: NVIDIA B200 (compute capability 10.0)")
    sources, notes = _listed(out, "sources"), _listed(out, "notes")
    for fact_id, expectation in models["b200"].facts.items():
        row = next(line for line in out.splitlines() if line.startswith(fact_id + " "))
        assert expectation.range_text() in row and f"  {expectation.severity}  " in row, row
        source, *note = row.split()[-2:] if expectation.note else row.split()[-1:]
        assert " ".join(sources[source].split()) == " ".join(expectation.source.split()), (fact_id, source)
        assert not note or " ".join(notes[note[0]].split()) == " ".join(expectation.note.split())
    assert len(sources) == len({e.source for e in models["b200"].facts.values()} | {
        d.source for d in models["b200"].datasheet.values()
    })  # fmt: skip
    assert "132644864 byte (126.5 MiB)" in out


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
    assert "and h100_sxm's entries in the expectations.toml of: " in out and "wgmma" in out
    row = next(line for line in out.splitlines() if line.startswith("dram_gbps "))
    assert row.split()[:3] == ["dram_gbps", "3350", "GB/s"] and row.split()[3] in _listed(out, "sources")


# --- family files and datasheet figures ------------------------------------------------------------

DATASHEET = '[datasheet."dram_gbps"]\nvalue = 3350.0\nunit = "GB/s"\nsource = "a datasheet"\n'


def _family_file(directory: Path, family: str, key: str, text: str) -> Path:
    """A family's expectations file holding ``text``'s tables for model ``key`` (``[facts."x"]`` written as
    ``[facts."x".<key>]``)."""
    path = directory / family / "expectations.toml"
    path.parent.mkdir(parents=True, exist_ok=True)
    text = re.sub(r'^\[(facts|datasheet)\."([^"]+)"\]', rf'[\1."\2".{key}]', text, flags=re.M)
    with path.open("a", encoding="utf-8") as file:
        file.write(text)
    return path


def test_family_files_merge_into_their_model(tmp_path):
    (tmp_path / "test_gpu.toml").write_text(_fact(f"min = 1.0\n{GOOD_FACT}") + "\n" + DATASHEET, encoding="utf-8")
    _family_file(tmp_path, "bandwidth", "test_gpu", f'[facts."bandwidth.dram_read.v16"]\nmin = 2.0\n{GOOD_FACT}')
    tensor = '[datasheet."bf16_dense_tflops"]\nvalue = 989.4\nunit = "TFLOP/s"\nsource = "a whitepaper"\n'
    _family_file(tmp_path, "wgmma", "test_gpu", tensor)
    model = load_all(tmp_path)["test_gpu"]
    assert set(model.facts) == {"latency.l2", "bandwidth.dram_read.v16"}
    assert model.facts["bandwidth.dram_read.v16"].low == 2.0
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
    path = _family_file(
        tmp_path, "bandwidth", "other_gpu", f'[facts."bandwidth.dram_read.v16"]\nmin = 2.0\n{GOOD_FACT}'
    )
    with pytest.raises(GpuprobeError, match="no model 'other_gpu'") as excinfo:
        load_all(tmp_path)
    assert str(path) in str(excinfo.value)
