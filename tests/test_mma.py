"""The mma family's host side: fragment layouts, references, and end to end against the simulated GPU."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpuprobe.core.arch import SUPPORTED_ARCHS, parse_arch
from gpuprobe.core.errors import ProbeFailure
from gpuprobe.families import mma
from gpuprobe.families.base import Request
from gpuprobe.families.differencing import Difference, Lengths
from gpuprobe.families.issue_sweep import SMOKE_SETTINGS, Settings, thread_cycles
from gpuprobe.families.mma.fragments import (
    LANES,
    VARIANTS,
    Variant,
    a_position,
    b_position,
    c_position,
    encodable,
    make_operands,
    predicted_words,
)
from gpuprobe.families.mma.numerics import (
    NUMERIC_VARIANTS,
    accumulator_experiment,
    alignment_experiment,
    mantissa_experiment,
    read_numerics,
)
from gpuprobe.families.mma.simulated import FAST_SETTINGS, SPARSE_TIMING, TIMING, element, lane_results, numeric_d
from gpuprobe.families.mma.sparse import SPARSE_VARIANTS, SparseVariant
from gpuprobe.kernels.contracts import check
from gpuprobe.kernels.registry import all_probes, find_probe
from gpuprobe.measure.plan import family_seconds
from gpuprobe.simulated.gpu import measure_family, ptx_parameters, simulated_gpu
from tests.helpers.checked import measured_module
from tests.helpers.devices import H100_SXM
from tests.helpers.issue_sweep_smoke import smoke_rates_of_the_full_run_s_shape

SM90A = parse_arch("sm_90a")
ON_SM90A = {p.name for p in all_probes() if p.family == "mma" and p.supports(SM90A)}


def _run(gpu, runnable, settings=FAST_SETTINGS, state=None):
    """The family measured on ``gpu``: the probes of ``runnable``."""
    return measure_family(mma, gpu, set(runnable), settings, state)


@pytest.mark.parametrize(
    ("variant", "lane", "register", "element", "a", "b"),
    [
        # PTX ISA, "Matrix fragments for mma.m16n8k16 with floating point type": a0,a1 at (g, 2t + i),
        # a2,a3 at (g + 8, ...), a4..a7 at columns + 8; b0,b1 at rows 2t + i, b2,b3 at rows + 8
        (Variant("f16", "m16n8k16"), 5, 0, 1, (1, 3), (3, 1)),
        (Variant("f16", "m16n8k16"), 5, 1, 0, (9, 2), (10, 1)),
        (Variant("f16", "m16n8k16"), 31, 3, 1, (15, 15), (15, 7)),
        # m16n8k8 tf32: a0 (g, t), a1 (g + 8, t), a2 (g, t + 4), a3 (g + 8, t + 4); b0 (t, g), b1 (t + 4, g)
        (Variant("tf32", "m16n8k8"), 6, 2, 0, (1, 6), (6, 1)),
        # m16n8k32 int8: a0..a3 (g, 4t + i), a8..a11 at columns + 16; b4..b7 at rows 4t + i + 16
        (Variant("int8", "m16n8k32"), 9, 2, 3, (2, 23), (23, 2)),
        # m8n8k16 int8: a (g, 4t + i); b (4t + i, g)
        (Variant("int8", "m8n8k16"), 13, 0, 2, (3, 6), (6, 3)),
        # m16n8k64 int4: a0..a7 (g, 8t + i), a16..a23 at columns + 32; b8..b15 at rows + 32
        (Variant("int4", "m16n8k64"), 3, 3, 7, (8, 63), (63, 0)),
    ],
)
def test_fragment_positions_are_the_ptx_isa_layouts(variant, lane, register, element, a, b) -> None:
    assert a_position(variant, lane, register, element) == a
    if register < variant.b_registers:
        assert b_position(variant, lane, register, element) == b


def test_accumulator_positions_are_the_ptx_isa_layout() -> None:
    m16 = Variant("f16", "m16n8k16")  # c0,c1 (g, 2t + i), c2,c3 (g + 8, 2t + i)
    assert [c_position(m16, 6, i) for i in range(4)] == [(1, 4), (1, 5), (9, 4), (9, 5)]
    m8 = Variant("int8", "m8n8k16")  # c0,c1 (g, 2t + i)
    assert [c_position(m8, 6, i) for i in range(2)] == [(1, 4), (1, 5)]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"{v.name}.{v.shape}")
def test_every_element_of_every_operand_is_held_by_exactly_one_lane(variant: Variant) -> None:
    v, e = variant, variant.per_register
    a_cells = [a_position(v, lane, r, j) for lane in range(LANES) for r in range(v.a_registers) for j in range(e)]
    b_cells = [b_position(v, lane, r, j) for lane in range(LANES) for r in range(v.b_registers) for j in range(e)]
    c_cells = [c_position(v, lane, i) for lane in range(LANES) for i in range(v.m * v.n // LANES)]
    assert sorted(a_cells) == [(i, j) for i in range(v.m) for j in range(v.k)]
    assert sorted(b_cells) == [(i, j) for i in range(v.k) for j in range(v.n)]
    assert sorted(c_cells) == [(i, j) for i in range(v.m) for j in range(v.n)]


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"{v.name}.{v.shape}")
def test_the_prediction_is_what_the_fragments_compute(variant: Variant) -> None:
    """Host packing and host reference against a decoder of the raw fragment bits (the simulated GPU)."""
    operands = make_operands(variant, seed=3)
    assert np.array_equal(lane_results(variant, operands.fragments), predicted_words(variant, operands))
    assert np.any(operands.a @ operands.b != 0)  # a product that is all zero would prove nothing


@pytest.mark.parametrize("variant", VARIANTS, ids=lambda v: f"{v.name}.{v.shape}")
def test_the_negated_fragments_hold_minus_a(variant: Variant) -> None:
    """The timed loop's second round uses -A: every element of it must be the negated element of A."""
    words = make_operands(variant, seed=5).fragments
    for lane in range(LANES):
        for r in range(variant.a_registers):
            for j in range(variant.per_register):
                assert element(variant, words[lane, 4 + r], j) == -element(variant, words[lane, r], j)


def test_simulated_latency_and_peaks_are_recovered() -> None:
    measured = _run(simulated_gpu(sm_count=4), ON_SM90A - {n for n in ON_SM90A if n.endswith("emulated")})
    assert {m.outcome.status for m in measured.values()} == {"ok"}
    facts = {f.id: f for m in measured.values() for f in m.facts}
    for (name, shape), (latency, peak) in TIMING.items():
        stem = f"tensor.mma_sync.{name}.{shape}"
        if f"mma.{name}.{shape}.ilp1" not in ON_SM90A:
            continue
        assert facts[f"{stem}.latency"].value == pytest.approx(latency, rel=0.03), stem
        assert facts[f"{stem}.throughput"].value == pytest.approx(peak, rel=0.03), stem
        tflops = 2 * peak * 4 * 1755e6 / 1e12  # 4 SMs at the simulated clock
        assert facts[f"{stem}.tflops"].value == pytest.approx(tflops, rel=0.04), stem


def test_the_simulated_loop_bubble_reads_as_on_the_h200_alone_and_cancels_against_the_twin() -> None:
    """The simulated f16 m16n8k8 chain waits 14 cycles an iteration for its loop's branch: timed alone (long
    minus short iterations, the method before the twins) it reads the H200's (16 x 16 + 14) / 16 = 16.875; the
    probe, against the twin, reads the mma's 16. m16n8k16's 24 cycles hide the control, alone or not."""
    gpu = simulated_gpu(sm_count=2, noise=0.0)
    request = Request(gpu, ptx_parameters(gpu.arch), gpu.device(), set(), FAST_SETTINGS)
    for shape, alone, latency in (("m16n8k8", 16.875, 16.0), ("m16n8k16", 24.0, 24.0)):
        v = Variant("f16", shape)
        launch = mma.variant_launch(request, v)
        alone_cycles = lambda n, launch=launch: thread_cycles(launch(1, 1, n, 1, LANES))  # noqa: E731
        chain = Difference(alone_cycles, Lengths(8, 400, 16), "alone")
        assert chain.sample() == pytest.approx(alone, rel=1e-3), shape
        facts = {f.id: f.value for m in _run(gpu, {v.probe(1)}).values() for f in m.facts}
        assert facts[f"{v.fact_stem}.latency"] == pytest.approx(latency, rel=1e-3), shape


def test_the_rate_is_judged_per_clock_and_the_clock_it_ran_at_is_a_fact() -> None:
    """.tflops is the per-clock plateau at .sm_clock, the clock the twins' runs read: both reported, so a
    TFLOP/s figure can be told apart from the board's clock."""
    gpu = simulated_gpu(sm_count=4)
    facts = {f.id: f for m in _run(gpu, {"mma.f16.m16n8k16.ilp8"}).values() for f in m.facts}
    stem = "tensor.mma_sync.f16.m16n8k16"
    clock, rate, tflops = (facts[f"{stem}.{what}"] for what in ("sm_clock", "throughput", "tflops"))
    assert clock.unit == "MHz" and clock.value == pytest.approx(gpu.mhz, rel=0.01) and len(clock.samples) >= 2
    assert tflops.value == pytest.approx(2 * rate.value * 4 * clock.value * 1e6 / 1e12, rel=0.01)
    assert f"{stem}.sm_clock" in find_probe("mma.f16.m16n8k16.ilp8").facts
    short = _run(simulated_gpu(sm_count=4), {"mma.f16.m16n8k16.ilp8"}, SMOKE_SETTINGS)["mma.f16.m16n8k16.ilp8"]
    unread = {f.id: f for f in short.facts if f.value is None}
    assert set(unread) == {f"{stem}.sm_clock", f"{stem}.tflops"}  # runs too short to read a clock: said so
    assert "long enough to read the SM clock" in unread[f"{stem}.tflops"].detail


def test_the_smoke_stage_publishes_its_facts_with_the_full_run_s_shape() -> None:
    """A smoke fact id means what the full run's does: the f16 m16n8k8 rates from the same ILP and warps per SM
    (one warp per SM read 60.7 against the full run's 1013.8 on an H200), fewer iterations and samples only."""
    rates = smoke_rates_of_the_full_run_s_shape(mma.FAMILY)
    peak = TIMING[("f16", "m16n8k8")][1]
    assert rates["tensor.mma_sync.f16.m16n8k8.throughput.ilp1"] == pytest.approx(peak, rel=0.05)  # not one warp's


def test_a_wrong_lane_fails_the_probe_and_names_the_thread() -> None:
    gpu = simulated_gpu(sm_count=2)
    gpu.mma_corrupt = True
    measured = _run(gpu, {"mma.bf16.m16n8k16.ilp1", "mma.int4.m16n8k64.emulated"})
    for outcome in (m.outcome for m in measured.values()):
        assert outcome.status == "failed" and "computed" in outcome.detail
    assert all(m.facts == [] for m in measured.values())


def test_emulated_types_report_the_flag_after_a_checked_run() -> None:
    gpu = simulated_gpu(sm_count=2)
    measured = _run(gpu, {"mma.int4.m16n8k64.emulated", "mma.e4m3.m16n8k32.emulated"})
    flags = {f.id: f.value for m in measured.values() for f in m.facts}
    assert flags == {"tensor.mma_sync.int4.emulated": 1.0, "tensor.mma_sync.fp8.emulated": 1.0}
    probe_launches = [k for k in gpu.launches if k != "gp_sm_clock"]  # the clock is read around every probe
    assert probe_launches == ["gp_mma_int4_m16n8k64_ilp1", "gp_mma_e4m3_m16n8k32_ilp1"]


NEWER = ("sm_90", "sm_90a", "sm_100a", "sm_120")


@pytest.mark.parametrize(
    ("probe", "emulation", "native", "emulated"),
    [
        ("mma.int4.m16n8k64.ilp1", "mma.int4.m16n8k64.emulated", ("sm_80", "sm_86", "sm_89"), NEWER),
        ("mma.e4m3.m16n8k32.ilp1", "mma.e4m3.m16n8k32.emulated", ("sm_89", "sm_120"), ("sm_90", "sm_90a", "sm_100a")),
    ],
)
def test_a_type_is_measured_where_native_and_flagged_where_emulated(probe, emulation, native, emulated) -> None:
    """Where the arch has the instruction, the native probe targets it; where ptxas emulates it, the
    native contract fails on the real SASS (so no number is reported) and the emulation probe holds."""
    assert tuple(a.name for a in find_probe(probe).archs) == native
    assert tuple(a.name for a in find_probe(emulation).archs) == emulated
    below = [a for a in SUPPORTED_ARCHS if a.name not in native + emulated]
    assert all(not find_probe(probe).supports(a) for a in below)
    native_rules = list(find_probe(probe).contract)
    kernel = measured_module(parse_arch(emulated[0])).listing.kernel(find_probe(emulation).kernel)
    assert any(v.rule.startswith("count") for v in check(kernel, native_rules))  # the native contract rejects it


def test_fp8_mma_sync_is_absent_below_sm_89() -> None:
    for arch in ("sm_75", "sm_80", "sm_86"):
        assert "gp_mma_e4m3_m16n8k32_ilp1" not in measured_module(parse_arch(arch)).parameters


def test_a_contract_catches_a_kernel_of_another_type() -> None:
    listing = measured_module(parse_arch("sm_80")).listing
    bf16 = find_probe("mma.bf16.m16n8k16.ilp1")
    assert check(listing.kernel(bf16.kernel), list(bf16.contract)) == []
    violations = check(listing.kernel("gp_mma_f16_m16n8k16_ilp1"), list(bf16.contract))
    assert any("HMMA" in v.rule for v in violations)


@pytest.mark.parametrize(("probe", "twin", "kernel", "broken"), [
    ("mma.f16.m16n8k8.ilp1", True, "gp_mma_f16_m16n8k8_ilp1", "== 32"),  # a twin of one pass: no loop-free difference
    ("mma.f16.m16n8k8.ilp1", False, "gp_mma_f16_m16n8k8_ilp1_x2", "== 16"),  # the twin where its kernel should be
    ("mma.sp.f16.m16n8k32.ilp8", True, "gp_mma_sp_f16_m16n8k32_ilp8", "== 32"),
])  # fmt: skip
def test_a_twin_contract_pins_twice_its_kernel_s_mma(probe: str, twin: bool, kernel: str, broken: str) -> None:
    """The probe's contract at one pass for its kernel, at two for its twin: each refuses the other's kernel."""
    declared = find_probe(probe)
    own, rules = (declared.twin.kernel, declared.twin.contract) if twin else (declared.kernel, declared.contract)
    listing = measured_module(parse_arch("sm_90a")).listing
    assert check(listing.kernel(own), list(rules)) == []
    assert any(v.rule.startswith("count") and v.rule.endswith(broken) for v in check(listing.kernel(kernel), rules))


def test_every_probe_is_declared_and_measured_in_order() -> None:
    declared = {p.name for p in all_probes() if p.family == "mma"}
    assert declared == set(mma.PROBES)
    for v in VARIANTS + SPARSE_VARIANTS:
        assert mma.PROBES.index(v.probe(1)) < mma.PROBES.index(v.probe(8))
        for ilp in (1, 8):  # each chain probe timed against the twin its declaration names
            assert find_probe(v.probe(ilp)).twin.kernel == f"{find_probe(v.probe(ilp)).kernel}_x2"


def test_the_plan_counts_the_chains_native_on_the_device_s_arch() -> None:
    """On an H100 int4 and fp8 mma.sync are emulated (no sweep), so its plan counts 8 of the 12 dense chains."""
    assert len(mma.targeted(VARIANTS, H100_SXM)) == 8
    assert len(mma.targeted(VARIANTS, dataclasses.replace(H100_SXM, arch=""))) == len(VARIANTS)  # arch unknown


def test_both_compute_families_fit_the_15_s_budget_on_an_h100() -> None:
    from gpuprobe.families import alu

    total = family_seconds(mma.plan(Settings(), H100_SXM) + alu.plan(Settings(), H100_SXM), child_start=False)
    assert total < 15.0


def test_state_stays_json() -> None:
    import json

    state: dict = {}
    _run(simulated_gpu(sm_count=2), {"mma.tf32.m16n8k8.ilp1", "mma.tf32.m16n8k8.ilp8"}, state=state)
    assert set(state["mma_sweeps"]) == {"tensor.mma_sync.tf32.m16n8k8"}
    json.dumps(state)


# ---------------------------------------------------------------- numerics -----


def _model_run(v: Variant, **model):
    """D of an experiment from the simulated tensor core's arithmetic model."""
    gpu = simulated_gpu()
    for key, value in model.items():
        setattr(gpu, key, value)
    return lambda exp: numeric_d(v, exp.a, exp.b, exp.c, gpu)


@pytest.mark.parametrize("variant", NUMERIC_VARIANTS, ids=lambda v: v.name)
@pytest.mark.parametrize("sum_bits", [23, 13, 8])
def test_the_accumulator_and_alignment_bits_are_read_back(variant: Variant, sum_bits: int) -> None:
    readings = {r.fact_id: r for r in read_numerics(variant, _model_run(variant, tensor_sum_bits=sum_bits), "k")}
    prefix = "tensor.numerics.fp8" if variant.name == "e4m3" else f"tensor.numerics.{variant.name}"
    for what in ("accumulator_bits", "alignment_bits"):
        reading = readings[f"{prefix}.{what}"]
        if reading.at_least:  # fp8 cannot hold the inputs to test every bit: a lower bound, never above the truth
            assert reading.value <= sum_bits and variant.name == "e4m3", (what, reading)
        else:
            assert reading.value == sum_bits, (what, reading)


@pytest.mark.parametrize(("bits", "nearest"), [(10, False), (10, True), (13, False)])
def test_tf32_mantissa_and_rounding_are_read_back(bits: int, nearest: bool) -> None:
    tf32 = Variant("tf32", "m16n8k8")
    readings = {
        r.fact_id: r.value for r in read_numerics(tf32, _model_run(tf32, tf32_bits=bits, tf32_nearest=nearest), "k")
    }
    assert readings["tensor.numerics.tf32.mantissa_bits"] == bits
    assert readings["tensor.numerics.tf32.rounds_to_nearest"] == float(nearest)


def test_every_experiment_input_is_exact_in_its_type() -> None:
    for v in NUMERIC_VARIANTS:
        for exp in (accumulator_experiment(v), alignment_experiment(v)):
            assert exp.cells, (v.name, exp.name)
            assert all(encodable(v.input_type, x) for x in np.concatenate([exp.a.ravel(), exp.b.ravel()])), exp.name
    tf32 = Variant("tf32", "m16n8k8")
    assert not encodable("tf32", mantissa_experiment(tf32).a[10, 0])  # 1 + 2^-15: beyond tf32, on purpose


def test_a_cell_that_is_neither_kept_nor_lost_fails_the_probe() -> None:
    v = Variant("f16", "m16n8k16")
    exp = accumulator_experiment(v)
    d = exp.reference()
    d[3, 2] = 7.0
    with pytest.raises(ProbeFailure, match=r"D\[3\]\[2\] = 7.0, neither"):
        exp.kept(d, "k")


def test_numerics_end_to_end_on_the_simulated_gpu() -> None:
    gpu = simulated_gpu(sm_count=2)
    gpu.tensor_sum_bits = 13
    measured = _run(gpu, {"mma.numerics.tf32", "mma.numerics.bf16"})
    facts = {f.id: f.value for m in measured.values() for f in m.facts}
    assert facts == {
        "tensor.numerics.tf32.mantissa_bits": 10.0,
        "tensor.numerics.tf32.rounds_to_nearest": 0.0,
        "tensor.numerics.tf32.accumulator_bits": 13.0,
        "tensor.numerics.tf32.alignment_bits": 13.0,
        "tensor.numerics.bf16.accumulator_bits": 13.0,
        "tensor.numerics.bf16.alignment_bits": 13.0,
    }
    corrupt = simulated_gpu(sm_count=2)
    corrupt.mma_corrupt = True
    failed = _run(corrupt, {"mma.numerics.f16"})["mma.numerics.f16"]
    assert failed.outcome.status == "failed" and "neither" in failed.outcome.detail and not failed.facts


def test_the_latency_invariant_holds_for_growing_k_and_is_skipped_when_unmeasured() -> None:
    from gpuprobe.core.results import Fact

    def facts(k8: float, k16: float) -> dict:
        ids = {"tensor.mma_sync.f16.m16n8k8.latency": k8, "tensor.mma_sync.f16.m16n8k16.latency": k16}
        return {i: Fact(i, v, "cycle", (v, v), [v], {}, "p") for i, v in ids.items()}

    device = simulated_gpu().device()
    check = mma.larger_k_is_not_faster
    assert check(facts(16.0, 24.0), device)[0][1] is True
    assert check(facts(24.0, 16.0), device)[0][1] is False
    assert check({}, device) == []


# ---- mma.sp (2:4 sparse A) -------------------------------------------------------------------------


@pytest.mark.parametrize("v", SPARSE_VARIANTS, ids=lambda v: f"{v.name}.{v.shape}")
def test_sparse_fragments_hold_a_s_kept_elements_and_b_once_each(v: SparseVariant) -> None:
    """A's kept elements (16 x K/2) lie as a dense m16n8k(K/2) A; B (K x 8) as a dense m16n8kK B, its K split
    evenly over its registers (PTX ISA, "Matrix fragments for sparse mma")."""
    per = v.per_register
    lanes = range(LANES)
    kept = {a_position(v.compressed, lane, r, j) for lane in lanes for r in range(v.a_registers) for j in range(per)}
    b = {b_position(v, lane, r, j) for lane in lanes for r in range(v.b_registers) for j in range(per)}
    assert kept == {(i, j) for i in range(16) for j in range(v.k // 2)}
    assert b == {(i, j) for i in range(v.k) for j in range(8)}
    assert v.fmas == 16 * 8 * v.k and v.dense_twin.k == 8 * per


def test_a_sparse_lane_writes_what_the_metadata_makes_of_a() -> None:
    """The host's prediction and the simulated tensor core's reading of the metadata registers agree."""
    for v in SPARSE_VARIANTS:
        fragments, predicted = v.fragments_and_prediction(7)
        assert np.array_equal(lane_results(v, fragments), predicted), v
        assert not np.array_equal(lane_results(v, fragments, swapped=True), predicted), v


def test_sparse_chains_are_measured_and_set_against_their_dense_twins() -> None:
    gpu = simulated_gpu(sm_count=2)
    measured = _run(gpu, {"mma.f16.m16n8k16.ilp8", "mma.sp.f16.m16n8k32.ilp1", "mma.sp.f16.m16n8k32.ilp8"})
    facts = {f.id: f for m in measured.values() for f in m.facts}
    (latency, sparse), dense = SPARSE_TIMING[("f16", "m16n8k32")], TIMING[("f16", "m16n8k16")][1]
    assert facts["tensor.mma_sync_sp.f16.m16n8k32.latency"].value == pytest.approx(latency, rel=0.03)
    assert facts["tensor.mma_sync_sp.f16.m16n8k32.over_dense"].value == pytest.approx(sparse / dense, rel=0.05)
    checks = [c for check in mma.INVARIANTS for c in check(facts, H100_SXM)]
    assert ("tensor.mma_sync_sp.f16.m16n8k32.at_least_dense", True) in [(c.name, c.ok) for c in checks]
    alone = _run(simulated_gpu(sm_count=2), {"mma.sp.int8.m16n8k64.ilp8"})["mma.sp.int8.m16n8k64.ilp8"]
    (ratio,) = [f for f in alone.facts if f.id.endswith("over_dense")]
    assert ratio.value is None and "int8 m16n8k32 was not measured" in ratio.detail


def test_metadata_read_the_other_way_round_fails_the_sparse_chain() -> None:
    gpu = simulated_gpu(sm_count=2, family_options={"mma_metadata_halves_swapped": True})
    measured = _run(gpu, {"mma.sp.bf16.m16n8k32.ilp1"})["mma.sp.bf16.m16n8k32.ilp1"]
    assert measured.outcome.status == "failed" and measured.facts == []


def test_fp8_sparse_mma_is_native_on_sm_89_and_sm_120_only() -> None:
    assert tuple(a.name for a in find_probe("mma.sp.e4m3.m16n8k64.ilp1").archs) == ("sm_89", "sm_120")
    listing = measured_module(parse_arch("sm_89")).listing
    probe = find_probe("mma.sp.e4m3.m16n8k64.ilp8")
    assert check(listing.kernel(probe.kernel), list(probe.contract)) == []


def test_a_sparse_contract_catches_the_dense_instruction() -> None:
    listing = measured_module(parse_arch("sm_80")).listing
    sparse = find_probe("mma.sp.f16.m16n8k16.ilp1")
    assert check(listing.kernel(sparse.kernel), list(sparse.contract)) == []
    violations = check(listing.kernel("gp_mma_f16_m16n8k16_ilp1"), list(sparse.contract))
    assert any("HMMA\\.SP" in v.rule for v in violations)
