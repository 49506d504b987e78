"""The tcgen05 family's host side: descriptors against the PTX ISA's tables, the kernels' contracts on
sm_100a (and wrong kernels they catch), the arch gating, and measure() against a simulated B200."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpuprobe.core.arch import SUPPORTED_ARCHS, parse_arch
from gpuprobe.core.results import Fact, Results
from gpuprobe.families import tcgen05
from gpuprobe.families.tcgen05 import INVARIANTS, PROBES, SECTIONS, plan
from gpuprobe.families.tcgen05.layout import MMAS, decode_instruction, descriptor_bits, instruction_descriptor
from gpuprobe.families.tcgen05.simulated import FAST_SETTINGS
from gpuprobe.families.wgmma.layout import decode_descriptor
from gpuprobe.kernels.registry import all_probes
from gpuprobe.measure.plan import family_seconds
from gpuprobe.simulated.gpu import measure_family, simulated_gpu
from tests.helpers.checked import contract_results
from tests.test_host_transfer import mutant_violations

B200 = {"arch": "sm_100a", "cc": "10.0", "name": "NVIDIA B200", "sm_count": 4}


def _run(runnable=frozenset(PROBES), **options):
    gpu = simulated_gpu(**B200, **options)
    return measure_family(tcgen05, gpu, runnable, FAST_SETTINGS)


def _facts(measured) -> dict[str, Fact]:
    return {f.id: f for m in measured.values() for f in m.facts}


def test_the_instruction_descriptor_packs_the_fields_where_the_isa_table_puts_them() -> None:
    """PTX ISA, "Instruction descriptor format": D F32 = 1 in bits 4-5, A and B BF16 = 1 (kind::f16) or E4M3 = 0
    (kind::f8f6f4) in 7-9 and 10-12, N >> 3 in 17-22, M >> 4 in 24-28."""
    assert instruction_descriptor("bf16", 128, 256) == 0x10 | 0x80 | 0x400 | 32 << 17 | 8 << 24
    assert instruction_descriptor("e4m3", 256, 64) == 0x10 | 8 << 17 | 16 << 24
    fields = decode_instruction(instruction_descriptor("bf16", 64, 8))
    assert (fields["m"], fields["n"], fields["a"], fields["sparse"], fields["transpose_a"]) == (64, 8, 1, 0, 0)
    with pytest.raises(ValueError, match="m96n256"):
        instruction_descriptor("bf16", 96, 256)


def test_the_shared_memory_descriptor_is_wgmmas_with_the_sm_100_version_bits() -> None:
    bits = descriptor_bits()
    assert (bits >> 46) & 7 == 1
    assert decode_descriptor(bits) == {"start": 0, "leading": 128, "stride": 256, "base_offset": 0, "swizzle": 0}


def test_tcgen05_is_sm_100a_alone_and_unsupported_on_an_h200() -> None:
    probes = [p for p in all_probes() if p.family == "tcgen05"]
    assert {p.name for p in probes} == set(PROBES)
    others = [a for a in SUPPORTED_ARCHS if a.name != "sm_100a"]
    results = contract_results(probes[:3], others)
    assert {r.status for r in results} == {"unsupported"} and all("does not target" in r.detail for r in results)
    assert {r.status for r in contract_results(probes, [parse_arch("sm_100a")])} == {"ok"}


def test_a_latency_loop_waiting_with_try_wait_breaks_the_clock_bracket(tmp_path: Path) -> None:
    """ptxas moves try_wait's retry out of line, past the second clock read: the kernels poll with test_wait."""
    old = "mbarrier.test_wait.parity.shared::cta.b64 %p9"
    broken = mutant_violations(tmp_path, "tcgen05.latency.bf16.m128n64", "sm_100a", old, old.replace("test", "try"))
    assert any("clock reads bracketing" in rule for rule in broken), broken


def test_a_loop_without_its_commit_breaks_the_contract(tmp_path: Path) -> None:
    """Without tcgen05.commit the barrier never completes: the contract names the missing UTCBAR."""
    old = "\ttcgen05.commit.cta_group::1.mbarrier::arrive::one.shared::cluster.b64 [%r7];\n//@endfor\nWAIT:"
    broken = mutant_violations(tmp_path, "tcgen05.throughput.bf16.m128n256", "sm_100a", old, "//@endfor\nWAIT:")
    assert any("UTCBAR" in rule for rule in broken), broken


def test_a_tensor_memory_chain_without_its_store_wait_breaks_the_contract(tmp_path: Path) -> None:
    load = "\ttcgen05.ld.sync.aligned.32x32b.x1.b32 {%r5}, [%r4];\n\ttcgen05.wait::ld.sync.aligned;\n"
    new = load + "\tadd.u32 %r5, %r5, 1;\n//@endfor"
    old = "\ttcgen05.wait::st.sync.aligned;\n" + new
    broken = mutant_violations(tmp_path, "tcgen05.tmem.ld_st.latency", "sm_100a", old, new)
    assert any("FENCE" in rule for rule in broken), broken


def test_every_probe_measures_and_checks_itself_on_a_simulated_b200() -> None:
    measured = _run()
    assert {n: m.outcome.status for n, m in measured.items()} == dict.fromkeys(PROBES, "ok")
    declared = {f for p in all_probes() if p.family == "tcgen05" for f in p.facts}
    facts = _facts(measured)
    assert set(facts) == declared
    assert facts["tensor.tcgen05.bf16.m128n256k16.latency"].value == pytest.approx(128 + 70, rel=0.03)
    assert facts["tensor.tcgen05.bf16.m128n256k16.tflops"].value == pytest.approx(4 * 8192 * 0.94 * 1755e-6, rel=0.05)
    device = dataclasses.replace(simulated_gpu(**B200).device(), sm_count=4)
    checks = [c for check in INVARIANTS for c in check(facts, device)]
    assert len(checks) == len(MMAS) and all(ok for _, ok, *_ in checks), checks


@pytest.mark.parametrize(("flag", "probe", "what"), [
    ("tcgen05_corrupt", "tcgen05.latency.bf16.m128n64", "elements wrong"),
    ("tcgen05_corrupt", "tcgen05.pair.throughput.bf16.m256n256", "block group 1"),
    ("tcgen05_alloc_misaligned", "tcgen05.tmem.alloc.latency", "not lane 0 of an aligned column"),
])  # fmt: skip
def test_a_wrong_result_fails_the_probe_with_no_facts(flag: str, probe: str, what: str) -> None:
    measured = _run({probe}, family_options={flag: True})[probe]
    assert measured.outcome.status == "failed" and what in measured.outcome.detail, measured.outcome.detail
    assert measured.facts == []


def test_an_mma_faster_than_the_datasheet_rate_or_its_floor_breaks_the_invariants() -> None:
    def one(fact_id: str, value: float) -> Fact:
        return Fact(fact_id, value, "x")

    stem = "tensor.tcgen05.bf16.m128n256k16"
    given = (one(f"{stem}.tflops", 3000.0), one(f"{stem}.sm_clock", 1800.0), one(f"{stem}.latency", 100.0))
    facts = {f.id: f for f in given}
    device = simulated_gpu(sm_count=148).device()
    failed = {name for check in INVARIANTS for name, ok, *_ in check(facts, device) if not ok}
    assert failed == {"tcgen05.rate_below_peak.bf16.m128n256k16", "tcgen05.latency_floor.bf16.m128n256k16"}


def test_the_family_fits_10_s_on_a_b200_and_draws_its_latencies() -> None:
    device = dataclasses.replace(simulated_gpu(**B200).device(), sm_count=148, sm_clock_nominal_mhz=1965.0)
    assert family_seconds(plan(tcgen05.Settings(), device)) < 10.0
    results = Results(device)
    results.facts = list(_facts(_run({"tcgen05.latency.bf16.m128n64", "tcgen05.pair.latency.bf16.m256n256"})).values())
    (section,) = SECTIONS
    assert section.plot.png(results, 40).startswith(b"\x89PNG") and section.plot.png(Results(device), 40) is None
