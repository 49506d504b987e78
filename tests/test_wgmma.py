"""The wgmma family's host side: layouts, operands, the generated PTX, contracts, and measure()
end to end against the simulated GPU."""

from __future__ import annotations

import dataclasses
import re
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

import gpuprobe.families.wgmma as family
from gpuprobe.core.arch import SUPPORTED_ARCHS, parse_arch
from gpuprobe.core.results import Fact, Results
from gpuprobe.families import wgmma
from gpuprobe.families.base import Request
from gpuprobe.families.library_timing import STAMP_WORDS, bracket_mhz
from gpuprobe.families.sampling import Stopping
from gpuprobe.families.wgmma import (
    CUBLAS_PROBE,
    KERNELS,
    PROBES,
    SMOKE,
    Settings,
    cublas_invariant,
    latency_floor_invariants,
    plan,
    rate_invariants,
)
from gpuprobe.families.wgmma.layout import (
    N_VALUES,
    TYPES,
    M,
    a_fragment_index,
    core_matrix_bytes,
    d_fragment_index,
    d_from_fragments,
    decode_descriptor,
    layout_bits,
    operand_offset,
)
from gpuprobe.families.wgmma.operands import (
    E4M3,
    check_chain,
    decode,
    encode,
    make_operands,
    make_sparse_operands,
    mismatch,
)
from gpuprobe.families.wgmma.ptx import CLOCK_STAMP_KERNEL, Kernel, kernel_text, module_text
from gpuprobe.families.wgmma.simulated import FAST_SETTINGS, fp8_chain
from gpuprobe.kernels.check import check_probe
from gpuprobe.kernels.cubin import build_ptx
from gpuprobe.kernels.registry import CLOCK_KERNEL, PTX_DIR, find_probe
from gpuprobe.kernels.sass import Listing, apply_compile_log
from gpuprobe.output.references import References
from gpuprobe.output.report import section_lines
from gpuprobe.output.sheet import fact_rows, sheet_section
from gpuprobe.runner.launcher import GemmShape, LaunchPathUnavailable
from gpuprobe.simulated.gpu import measure_family, ptx_parameters, simulated_gpu
from tests.helpers.checked import contract_results
from tests.helpers.devices import H100_SXM

FAST = Settings(sampling=Stopping(3, 3, 0.01, 5.0), throughput_sampling=Stopping(2, 2), gemm_sampling=Stopping(2, 2))
# The simulated GPU: 4 SMs, one block of 3 warpgroups each; cuBLAS at 22 TFLOP/s, about 80 % of its peak
# per clock at the clock the simulated GEMMs run at (0.9 x 1755 MHz), as on an H100.
CUBLAS_TFLOPS = 22.0
SMALL = {"sm_count": 4, "blocks_per_sm": 1, "gemm_tflops": {"f16": CUBLAS_TFLOPS, "bf16": CUBLAS_TFLOPS, "tf32": 11.0}}
# The datasheet peak of that 4-SM part, at the clock its bf16 peak assumes (4096 flop/clk/SM).
DATASHEET = {"bf16_dense_tflops": 4 * 4096 * 1830e6 / 1e12, "bf16_dense_clock_mhz": 1830.0}


def _run(gpu, runnable=None, settings=FAST, datasheet=DATASHEET):
    names = set(PROBES) if runnable is None else set(runnable)
    state = {"datasheet": dict(datasheet)}
    return measure_family(wgmma, gpu, names, settings, state)


@pytest.fixture(scope="module")
def every_probe() -> dict:
    """Every probe of the family measured on the small simulated part, once for the tests that only read it (a run
    of the same part and settings gives the same measurements)."""
    return _run(simulated_gpu(**SMALL))


def _facts(measured) -> dict[str, Fact]:
    return {f.id: f for m in measured.values() for f in m.facts}


# --------------------------------------------------------------------------- descriptors and layouts


def test_the_descriptor_packs_offsets_and_swizzle_where_the_ptx_isa_puts_them() -> None:
    bits = layout_bits()
    assert bits == (128 >> 4) << 16 | (256 >> 4) << 32  # LBO 128 (next core matrix in K), SBO 256 (in M/N)
    full = bits | 0x1200 >> 4  # the kernel ORs in its shared address >> 4
    assert decode_descriptor(full) == {"start": 0x1200, "leading": 128, "stride": 256, "base_offset": 0, "swizzle": 0}
    assert decode_descriptor(layout_bits(swizzle=1))["swizzle"] == 1 and layout_bits(swizzle=1) >> 62 == 1


@pytest.mark.parametrize(("call", "message"), [
    (lambda: layout_bits(leading_bytes=100), "multiple of 16"),
    (lambda: layout_bits(stride_bytes=1 << 18), "multiple of 16 below"),
    (lambda: layout_bits(swizzle=4), "swizzle mode 4"),
])  # fmt: skip
def test_impossible_descriptors_are_refused(call, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        call()


def test_operands_lie_in_core_matrices_exactly_where_the_descriptor_says() -> None:
    rows = np.arange(64 * 32, dtype=np.uint32).astype(np.uint16).reshape(64, 32).astype(np.uint8)
    rows = np.random.default_rng(1).integers(0, 256, size=(64, 32), dtype=np.uint8)
    laid = core_matrix_bytes(rows)
    assert laid.size == 64 * 32
    for row in range(64):
        for byte in range(32):
            assert laid[operand_offset(row, byte)] == rows[row, byte]
    assert operand_offset(8, 0) == 256 and operand_offset(0, 16) == 128 and operand_offset(1, 0) == 16


def test_core_matrix_layout_refuses_a_ragged_operand() -> None:
    with pytest.raises(ValueError, match="multiple of 8 rows"):
        core_matrix_bytes(np.zeros((12, 32), dtype=np.uint8))


@pytest.mark.parametrize("n", N_VALUES)
def test_d_fragments_cover_the_tile_once_in_the_ptx_isa_layout(n: int) -> None:
    rows, cols = d_fragment_index(n)
    assert rows.shape == (128, n // 2)
    assert len(set(zip(rows.ravel().tolist(), cols.ravel().tolist(), strict=True))) == 64 * n
    lane5 = (rows[5], cols[5])  # lane 5: group 1, t 1
    assert (lane5[0][:4].tolist(), lane5[1][:4].tolist()) == ([1, 1, 9, 9], [2, 3, 2, 3])
    assert rows[32, 0] == 16 and rows[127, 3] == 16 * 3 + 7 + 8  # warp w holds rows 16 w ..


def test_d_fragments_map_back_to_the_matrix() -> None:
    d = np.arange(64 * 32, dtype=np.float32).reshape(64, 32)
    rows, cols = d_fragment_index(32)
    assert np.array_equal(d_from_fragments(d[rows, cols], 32), d)


@pytest.mark.parametrize("name", list(TYPES))
def test_a_fragments_cover_a_once_with_consecutive_k_in_each_register(name: str) -> None:
    wgmma = TYPES[name]
    rows, cols = a_fragment_index(wgmma)
    assert len(set(zip(rows.ravel().tolist(), cols.ravel().tolist(), strict=True))) == M * wgmma.k
    per = 4 // wgmma.element_bytes
    # lane 5 (group 1, t 1): register 0 holds row 1 from column t x per, register 2 the same K/2 on
    assert rows[5, 0] == 1 and cols[5, 0] == per and rows[5, per] == 9
    assert cols[5, 2 * per] == per + wgmma.k // 2


# --------------------------------------------------------------------------- operands


def test_e4m3_values_follow_the_format() -> None:
    assert E4M3[0x38] == 1.0 and E4M3[0x7E] == 448.0 and E4M3[0x01] == 2.0**-9 and E4M3[0xB8] == -1.0
    assert np.isnan(E4M3[0x7F]) and np.isnan(E4M3[0xFF]) and np.isfinite(E4M3[0x7E])


@pytest.mark.parametrize("name", list(TYPES))
@pytest.mark.parametrize("kind", ["zero", "random", "ternary"])
def test_operands_round_trip_exactly(name: str, kind: str) -> None:
    wgmma = TYPES[name]
    operands = make_operands(wgmma, 64, kind, seed=3)
    assert operands.a_bits.shape == (64, wgmma.k) and operands.b_bits.shape == (64, wgmma.k)
    assert operands.a_bits.itemsize == wgmma.element_bytes
    assert np.array_equal(encode(operands.a, wgmma), operands.a_bits)
    if kind == "random":
        assert np.count_nonzero(operands.a) > 0.9 * operands.a.size
    assert np.all(np.isfinite(decode(operands.b_bits, wgmma)))


def test_bf16_rounds_to_nearest_even() -> None:
    wgmma = TYPES["bf16"]
    assert decode(encode(np.array([1.0 + 2.0**-8]), wgmma), wgmma)[0] == 1.0  # a tie, to even
    assert decode(encode(np.array([1.0 + 3 * 2.0**-8]), wgmma), wgmma)[0] == 1.0 + 2.0**-6


def test_a_wrong_d_is_named_and_a_right_one_passes() -> None:
    operands = make_operands(TYPES["bf16"], 16, "random", seed=5)
    d = (4 * operands.product()).astype(np.float32)
    assert mismatch(d, operands, 4) is None
    d[3, 7] += 1.0
    assert "D[3,7]" in mismatch(d, operands, 4)
    exact = make_operands(TYPES["s8"], 16, "random", seed=5)
    d = (16 * exact.product()).astype(np.int32)
    d[0, 0] += 1
    assert "1 of 1024 elements wrong" in mismatch(d, exact, 16)
    zero = make_operands(TYPES["e4m3"], 8, "zero", seed=5)
    assert mismatch(np.full((64, 8), 1e-6, dtype=np.float32), zero, 16) is not None


def _fp8_d(operands, times: int, bits: int) -> np.ndarray:
    """D of ``times`` x A @ B in the simulated fp8 accumulator of ``bits`` bits (DeepSeek-V3's description)."""
    products = (operands.a[:, None, :] * operands.b[None, :, :]).reshape(-1, operands.a.shape[1])
    return fp8_chain(products, times, bits).reshape(operands.product().shape)


@pytest.mark.parametrize("bits", [14, 13, 16])
def test_an_fp8_chain_stopped_by_its_accumulator_passes_and_measures_its_width(bits: int) -> None:
    """The H200's e4m3 chains (32768 x A @ B) stopped at D[0,0] = -16384 for a term of -2 (reports/nvidia-h200):
    a unit product no longer counts once the sum reaches 2**14. The check reads the width off D, whatever it is."""
    operands = make_operands(TYPES["e4m3"], 16, "ternary", seed=3)
    term = operands.product()
    d = _fp8_d(operands, 32768, bits)
    assert np.all(d[term == -2] == -(2.0**bits)) and np.any(term == -2)
    assert check_chain(d.astype(np.float32), operands, 32768) == (None, bits)
    assert check_chain((64 * term).astype(np.float32), operands, 64) == (None, None)  # short: exact, no width


def test_an_fp8_chain_wrong_in_any_other_way_still_fails() -> None:
    operands = make_operands(TYPES["e4m3"], 16, "ternary", seed=3)
    term = operands.product()
    stalled = _fp8_d(operands, 32768, 14)
    assert check_chain(stalled.astype(np.float32), operands, 32768).problem is None
    one_off = stalled.copy()
    one_off[np.argwhere(term == 3)[0][0], np.argwhere(term == 3)[0][1]] += 2  # one element of term 3 ends apart
    far = stalled.copy()
    far[term == 1] = 2.0**16  # stopped where a 14-bit accumulator cannot carry a unit term
    wrong = {
        "never grew": np.zeros_like(term),
        "grew the wrong way": -stalled,
        "grew past twice the exact sum": 3 * 32768 * term,
        "ended apart from elements of the same term": one_off,
        "grew past 2**15 x the term": far,
        "not a number": np.where(term == 1, np.nan, stalled),
    }
    for why, d in wrong.items():
        problem = check_chain(d.astype(np.float32), operands, 32768).problem
        assert problem is not None and "elements wrong" in problem, why
        assert why in problem or why in ("never grew", "not a number"), (why, problem)
    short = (64 * term).astype(np.float32)
    short[2, 3] += 1.0  # a short chain (exact) off by one: one element of its term apart from the rest
    assert check_chain(short, operands, 64).problem is not None
    f32 = make_operands(TYPES["bf16"], 16, "ternary", seed=3)
    assert mismatch((32768 * f32.product()).astype(np.float32), f32, 32768) is None
    assert mismatch(np.sign(f32.product()).astype(np.float32) * 2.0**13, f32, 32768) is not None  # f32 never stops


# --------------------------------------------------------------------------- the generated PTX and the probes


def test_the_committed_ptx_is_what_the_generator_writes() -> None:
    assert (PTX_DIR / "wgmma" / "wgmma.ptx").read_text() == module_text(), (
        "regenerate: python -m gpuprobe.families.wgmma > ptx/wgmma/wgmma.ptx"
    )


def test_every_declared_probe_has_its_kernel_and_facts_as_measured(every_probe: dict) -> None:
    measured = every_probe
    assert list(measured) == PROBES
    for name in PROBES:
        probe = find_probe(name)
        assert probe.kernel == (CLOCK_STAMP_KERNEL if name == CUBLAS_PROBE else KERNELS[name].name)
        assert sorted(f.id for f in measured[name].facts) == sorted(probe.facts), name


def test_the_family_is_sm_90a_only_and_says_so_elsewhere() -> None:
    probes = [find_probe(name) for name in PROBES]
    others = [arch for arch in SUPPORTED_ARCHS if arch.name != "sm_90a"]
    results = contract_results(probes[:2], others)
    assert {r.status for r in results} == {"unsupported"}
    assert all("wgmma does not target" in r.detail for r in results)


def test_every_probe_compiles_and_keeps_its_contract_on_sm_90a() -> None:
    results = contract_results([find_probe(name) for name in PROBES], [parse_arch("sm_90a")])
    assert {r.probe: r.status for r in results} == dict.fromkeys(PROBES, "ok")


def _built(tmp_path: Path, kernel: Kernel, edit) -> object:
    source = tmp_path / "wgmma_variant.ptx"
    source.write_text(edit(module_text().split("\n.visible")[0] + "\n" + kernel_text(kernel)))
    return build_ptx([source], parse_arch("sm_90a"))


def test_the_contract_catches_an_unrolled_loop(tmp_path: Path) -> None:
    """Without nounroll ptxas unrolls by four and slips a dummy HGMMA.64x8x16.F16 into the remainder.

    It does so (12.8, 13.0 and 13.5 alike) only when the loop does not begin with its own
    wgmma.fence, so both go: the loop top as first written, before the fence that 12.8 and 13.0
    would otherwise inject (C7519).
    """
    kernel = KERNELS["wgmma.throughput.bf16.ss"]
    loop_top = re.compile(r'(LOOP:\n)\t\.pragma "nounroll";\n\twgmma\.fence\.sync\.aligned;[^\n]*\n')

    def without_pragma_and_fence(text: str) -> str:
        edited, found = loop_top.subn(r"\1", text)
        assert found == 1, "the loop top changed: update this mutation"
        return edited

    module = _built(tmp_path, kernel, without_pragma_and_fence)
    result = check_probe(find_probe("wgmma.throughput.bf16.ss"), module)
    assert result.status == "violated"
    assert "found 2 loop(s) between the clock reads" in result.detail
    assert "count [HQIB]GMMA(\\..*)? in timed == 16' violated: found 68" in result.detail  # 4 x 16 and 4 dummies


def test_the_contract_catches_a_wait_ptxas_injected(tmp_path: Path) -> None:
    """Touching the accumulator before the wait makes ptxas inject a wait_group (C7517)."""
    kernel = KERNELS["wgmma.throughput.bf16.ss"]
    touch = "\tadd.f32 %d0, %d0, 0f3F800000;\n\twgmma.commit_group.sync.aligned;"
    module = _built(tmp_path, kernel, lambda text: text.replace("\twgmma.commit_group.sync.aligned;", touch))
    result = check_probe(find_probe("wgmma.throughput.bf16.ss"), module)
    assert result.status == "violated"
    assert "C7517" in result.detail


def test_ptxas_numbered_notes_are_attached_to_their_kernel() -> None:
    listing = Listing("sm_90a", {})
    from gpuprobe.kernels.sass import Kernel as SassKernel

    listing.kernels["k"] = SassKernel("k")
    log = (
        "ptxas info    : (C7515) Potential Performance Loss: wgmma.mma_async instructions are serialized due to "
        "the presence of Extern calls in the function 'k'.\n"
        "ptxas info    : (C7517) wgmma.wait_group is injected in around line 9 by compiler in function 'other'\n"
        "ptxas info    : Function properties for k\n"
        "    0 bytes stack frame, 0 bytes spill stores, 0 bytes spill loads\n"
    )
    apply_compile_log(listing, log)
    assert len(listing.kernels["k"].compile_notes) == 1 and "(C7515)" in listing.kernels["k"].compile_notes[0]
    assert listing.kernels["k"].spill_store_bytes == 0


# --------------------------------------------------------------------------- measuring


def test_latency_is_the_difference_of_a_long_and_a_short_loop_through_difference(monkeypatch) -> None:
    """One dependent wgmma's cycles are differencing.Difference's: a gap too short to resolve (1 against 2
    iterations of an 18-cycle wgmma) is widened, not read."""
    made = []

    class Recorded(family.Difference):
        def __init__(self, *args, **kwargs) -> None:
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(family, "Difference", Recorded)
    settings = dataclasses.replace(FAST, short_iterations=1, long_iterations=2)
    facts = _facts(_run(simulated_gpu(**SMALL), runnable=["wgmma.latency.bf16.ss.n8"], settings=settings))
    assert facts["tensor.wgmma.bf16.m64n8k16.ss.latency"].value == pytest.approx(4 + 14, rel=0.05)
    (difference,) = made
    assert difference.lengths.short == 1 and difference.lengths.steps == 1 and difference.lengths.long > 2


def test_a_short_latency_run_under_a_timer_tick_reads_0_or_1_tick_and_is_no_error() -> None:
    """64 dependent m64n8k16 (0.7 us here) between a warpgroup's reads of a %globaltimer that moves every 1 us."""
    gpu = simulated_gpu(**SMALL)
    request = Request(gpu, ptx_parameters(), gpu.device(), set(), FAST)
    kernel = KERNELS["wgmma.latency.bf16.ss.n8"]
    operands, given = wgmma.upload_operands(request, kernel, "ternary")
    assert {float(wgmma.launch(request, kernel, operands, given, 64, 1, 128).ns[0]) for _ in range(20)} == {0.0, 1000.0}


def test_latency_runs_too_short_to_read_the_clock_give_cycles_only() -> None:
    """2048 iterations at N = 8: 21 us, read to 5 % at a 1 us tick, short of the 1 % the clock is read to."""
    settings = dataclasses.replace(FAST, long_iterations=2048)
    measured = _run(simulated_gpu(**SMALL), runnable=["wgmma.latency.bf16.ss.n8", "wgmma.latency.bf16.ss.n256"],
                    settings=settings)  # fmt: skip
    facts = _facts(measured)
    assert facts["tensor.wgmma.bf16.m64n8k16.ss.latency"].converted == {}
    assert facts["tensor.wgmma.bf16.m64n256k16.ss.latency"].converted["ns"] == pytest.approx(142 / 1755 * 1e3, rel=0.03)


def test_the_simulated_wgmmas_are_recovered(every_probe: dict) -> None:
    gpu, measured = simulated_gpu(**SMALL), every_probe  # the part measured: its clock
    assert {name: m.outcome.status for name, m in measured.items()} == dict.fromkeys(PROBES, "ok")
    facts = _facts(measured)
    assert facts["tensor.wgmma.bf16.m64n256k16.ss.latency"].value == pytest.approx(128 + 14, rel=0.03)
    assert facts["tensor.wgmma.s8.m64n8k32.rs.latency"].value == pytest.approx(4 + 14, rel=0.03)
    assert facts["tensor.wgmma.e4m3.m64n256k32.ss.latency"].value == pytest.approx(128 + 14, rel=0.03)
    assert facts["tensor.wgmma.bf16.m64n256k16.ss.latency"].converted["ns"] == pytest.approx(142 / 1755 * 1e3, rel=0.03)
    assert all("ns" in f.converted for f in facts.values() if f.id.endswith(".latency"))  # each long run >= 100 us
    random_mhz, zero_mhz = gpu.mhz * 0.93, gpu.mhz
    expected = 4 * 4096 * 0.96 * random_mhz / 1e6  # 4 SMs at 96 % of the dense rate per clock
    assert facts["tensor.wgmma.bf16.m64n256k16.ss.tflops"].value == pytest.approx(expected, rel=0.03)
    assert facts["tensor.wgmma.bf16.m64n256k16.ss.zero_operands.tflops"].value == pytest.approx(
        4 * 4096 * 0.98 * zero_mhz / 1e6, rel=0.03
    )
    assert facts["tensor.wgmma.tf32.m64n256k8.rs.tflops"].value == pytest.approx(expected / 2, rel=0.03)
    assert facts["tensor.wgmma.bf16.m64n256k16.ss.sm_clock"].value == pytest.approx(random_mhz, rel=0.02)
    for base in ("bf16.m64n256k16.ss", "e4m3.m64n256k32.rs", "tf32.m64n256k8.ss", "s8.m64n256k32.ss"):
        assert facts[f"tensor.wgmma.{base}.fraction_of_peak"].value == pytest.approx(0.96, rel=0.03), base
        assert facts[f"tensor.wgmma.{base}.zero_operands.fraction_of_peak"].value == pytest.approx(0.98, rel=0.03)
    peak = DATASHEET["bf16_dense_tflops"] * random_mhz / 1830.0
    assert facts["tensor.wgmma.bf16.datasheet_peak_at_clock"].value == pytest.approx(peak, rel=0.02)
    assert facts["tensor.wgmma.bf16.fraction_of_peak"].value == pytest.approx(0.96, rel=0.03)
    assert facts["tensor.wgmma.e4m3.accumulator_bits"].value == 14  # the simulated Hopper fp8 accumulator


def test_the_fp8_accumulator_is_measured_not_assumed_and_a_wrong_chain_still_fails() -> None:
    """An fp8 accumulator of another width reads as that width (the check assumes none); the e4m3 latency
    facts come with it; a chain wrong in another way (one element off) fails its probe."""
    names = ["wgmma.latency.e4m3.ss.n256", "wgmma.latency.e4m3.rs.n8"]
    narrower = _run(simulated_gpu(**SMALL, family_options={"wgmma_fp8_accumulator_bits": 12}), runnable=names)
    assert {m.outcome.status for m in narrower.values()} == {"ok"}
    assert _facts(narrower)["tensor.wgmma.e4m3.accumulator_bits"].value == 12
    assert "stopped being exact at 2^12" in narrower["wgmma.latency.e4m3.rs.n8"].outcome.detail
    assert _facts(narrower)["tensor.wgmma.e4m3.m64n8k32.rs.latency"].value == pytest.approx(4 + 14, rel=0.03)
    gpu = simulated_gpu(**SMALL)
    gpu.wgmma_corrupt = True
    broken = _run(gpu, runnable=names)
    assert {m.outcome.status for m in broken.values()} == {"failed"}
    assert all("elements wrong" in m.outcome.detail for m in broken.values())


def test_a_chain_too_short_to_leave_the_exact_range_measures_no_width_and_says_so() -> None:
    settings = dataclasses.replace(FAST, long_iterations=4096)  # 4096 x |t| reaches 2**14 only where |t| >= 4
    facts = _facts(_run(simulated_gpu(**SMALL), runnable=["wgmma.latency.e4m3.ss.n256"], settings=settings))
    assert facts["tensor.wgmma.e4m3.accumulator_bits"].value == 14
    shorter = dataclasses.replace(FAST, long_iterations=256)
    facts = _facts(_run(simulated_gpu(**SMALL), runnable=["wgmma.latency.e4m3.ss.n256"], settings=shorter))
    assert facts["tensor.wgmma.e4m3.accumulator_bits"].value is None
    assert "no chain left the accumulator's exact range" in facts["tensor.wgmma.e4m3.accumulator_bits"].detail


def test_cublas_is_measured_at_its_own_clock_and_compared_per_clock() -> None:
    """The simulated cuBLAS runs at 0.9 x the part's clock, wgmma's random operands at 0.93 x: the TFLOP/s
    ratio mixes the two power states, the per-clock one does not. The clock comes from stamps that land on
    other SMs in the second launch than in the first, so only stamps paired by SM read it."""
    gpu = simulated_gpu(**SMALL)
    facts = _facts(_run(gpu, runnable=["wgmma.throughput.bf16.ss", CUBLAS_PROBE]))
    cublas_mhz = 0.9 * gpu.mhz
    assert facts["tensor.cublas.bf16.tflops"].value == pytest.approx(CUBLAS_TFLOPS, rel=0.03)
    assert facts["tensor.cublas.bf16.sm_clock"].value == pytest.approx(cublas_mhz, rel=0.01)
    cublas_per_clock = CUBLAS_TFLOPS / (4 * 4096 * cublas_mhz / 1e6)
    assert facts["tensor.cublas.bf16.fraction_of_peak"].value == pytest.approx(cublas_per_clock, rel=0.03)
    fraction = facts["tensor.wgmma.bf16.fraction_of_cublas"].value
    assert fraction == pytest.approx(0.96 / cublas_per_clock, rel=0.04)
    raw = facts["tensor.wgmma.bf16.m64n256k16.ss.tflops"].value / facts["tensor.cublas.bf16.tflops"].value
    assert abs(raw / fraction - 0.93 / 0.9) < 0.01  # the plain TFLOP/s ratio would be off by the clocks' ratio
    assert "per clock" in find_probe(CUBLAS_PROBE).doc and "per clock" in family.SECTIONS[0].blurb


def test_a_gemm_too_short_to_be_a_throughput_is_refused() -> None:
    """An H200 smoke run's one 1024^3 GEMM read 29.85 TFLOP/s (call overhead): a GEMM under half a millisecond
    is no throughput, and a setting that asks for one is refused outright."""
    with pytest.raises(ValueError, match="gemm_n must be at least 4096"):
        Settings(gemm_n=1024)
    fast = simulated_gpu(**{**SMALL, "gemm_tflops": {"bf16": 5000.0}})  # an 8192^3 GEMM in 0.22 ms
    measured = _run(fast, runnable=[CUBLAS_PROBE])[CUBLAS_PROBE]
    assert measured.outcome.status == "failed" and "not cuBLAS's throughput" in measured.outcome.detail


def _stamps(before: list[tuple[int, int, int]], after: list[tuple[int, int, int]]) -> np.ndarray:
    rows = [[[c, t, sm, slot] for c, t, sm in records] for slot, records in enumerate((before, after))]
    return np.array(rows, dtype=np.uint64)


def test_the_stamps_read_the_clock_of_the_same_sm_before_and_after_and_must_enclose_the_batch() -> None:
    # SM 3's counter started long before SM 5's: only a pair on one SM reads a clock (2e6 cycles in 1 ms)
    before, after = [(10**12, 0, 3), (5, 10, 5)], [(2 * 10**6 + 5, 1_000_010, 5), (10**12 + 2 * 10**6, 1_000_000, 3)]
    assert bracket_mhz(_stamps(before, after), 1.0, 1e5, CLOCK_STAMP_KERNEL) == pytest.approx(2000.0)
    with pytest.raises(family.ProbeFailure, match="no SM ran a stamp both"):
        bracket_mhz(_stamps([(0, 0, 1)], [(10**6, 10**6, 2)]), 1.0, 1e5, CLOCK_STAMP_KERNEL)
    with pytest.raises(family.ProbeFailure, match="do not enclose"):
        bracket_mhz(_stamps([(0, 0, 1)], [(10**6, 500_000, 1)]), 1.0, 1e5, CLOCK_STAMP_KERNEL)
    with pytest.raises(family.ProbeFailure, match="another slot"):
        bracket_mhz(_stamps([(0, 0, 1)], [(10**6, 10**6, 1)])[::-1].copy(), 1.0, 1e5, CLOCK_STAMP_KERNEL)
    assert STAMP_WORDS == 4


def test_the_launcher_stamps_the_gemms_on_the_same_stream_outside_the_events(monkeypatch, tmp_path: Path) -> None:
    """CupyLauncher.time_gemm against the stand-in CuPy of tests/test_cupy_launcher.py: one untimed GEMM the first
    time (the algorithm picked), the hold, the first stamp, the events around the GEMMs alone, the second stamp;
    one thread a block, the slot first; a second call reuses the operands and times its GEMMs alone."""
    from gpuprobe.runner.cupy_launcher import CupyLauncher
    from tests.test_cuda_api import DriverDouble, driver_double
    from tests.test_cupy_launcher import StubCupy

    stub = StubCupy()
    for name, module in (("cupy", stub), ("cupy.cuda", stub.cuda), ("cupy.cuda.cublas", stub.cuda.cublas)):
        monkeypatch.setitem(sys.modules, name, module)
    (tmp_path / "probes.cubin").write_bytes(b"\x7fELF")
    with driver_double(DriverDouble()):
        launcher = CupyLauncher(tmp_path / "probes.cubin", 0, ptx_parameters())
        out = launcher.alloc(64)
        assert launcher.time_gemm(GemmShape(64, 64, 64), "bf16", count=2, stamp=(CLOCK_STAMP_KERNEL, 3, out)) == 2.5
        uploads = []
        monkeypatch.setattr(stub, "asarray", lambda array, dtype=None: uploads.append(array))
        launcher.time_gemm(GemmShape(64, 64, 64), "bf16", count=2, stamp=(CLOCK_STAMP_KERNEL, 3, out))
    kinds = [c[1] if c[0] == "launch" else c[0] for c in stub.calls if c[0] in ("launch", "event.record", "gemmEx")]
    timed = [CLOCK_KERNEL, CLOCK_STAMP_KERNEL, "event.record", "gemmEx", "gemmEx", "event.record", CLOCK_STAMP_KERNEL]
    assert kinds == ["gemmEx", *timed, *timed]
    assert uploads == []  # the second call drew and uploaded nothing: the first call's operands were kept
    stamps = [c for c in stub.calls if c[0] == "launch" and c[1] == CLOCK_STAMP_KERNEL]
    assert [(c[2], c[3], c[4][0]) for c in stamps] == [((3, 1, 1), (1, 1, 1), 0), ((3, 1, 1), (1, 1, 1), 1)] * 2


def test_without_a_datasheet_the_peak_fraction_is_not_measured_with_the_reason() -> None:
    measured = _run(simulated_gpu(**SMALL), runnable=["wgmma.throughput.bf16.ss", CUBLAS_PROBE], datasheet={})
    facts = _facts(measured)
    assert facts["tensor.wgmma.bf16.fraction_of_cublas"].value is not None
    assert facts["tensor.wgmma.bf16.m64n256k16.ss.fraction_of_peak"].value is not None  # per SM per clock
    for fact_id in ("tensor.wgmma.bf16.fraction_of_peak", "tensor.wgmma.bf16.datasheet_peak_at_clock"):
        assert facts[fact_id].value is None and "no datasheet bf16 peak" in facts[fact_id].detail


def test_without_cublas_the_wgmma_rate_stands_and_the_comparison_is_not_run_with_the_reason() -> None:
    gpu = simulated_gpu(**SMALL)

    def no_cublas(n: int, dtype: str, count: int = 1, stamp=None) -> float:
        raise LaunchPathUnavailable("cuBLAS cannot be loaded here (Failure finding libcublasLt.so.13)")

    gpu.time_gemm = no_cublas
    measured = _run(gpu, runnable=["wgmma.throughput.bf16.ss", CUBLAS_PROBE])
    assert measured["wgmma.throughput.bf16.ss"].outcome.status == "ok"
    assert measured[CUBLAS_PROBE].outcome.status == "not_run"
    facts = _facts(measured)
    assert facts["tensor.wgmma.bf16.m64n256k16.ss.tflops"].value > 0
    assert facts["tensor.wgmma.bf16.fraction_of_peak"].value is not None
    for fact_id in ("tensor.cublas.bf16.tflops", "tensor.cublas.bf16.sm_clock", "tensor.wgmma.bf16.fraction_of_cublas"):
        assert facts[fact_id].value is None and "libcublasLt" in facts[fact_id].detail


def test_cublas_without_the_wgmma_rate_is_measured_and_says_why_no_ratio() -> None:
    facts = _facts(_run(simulated_gpu(**SMALL), runnable=[CUBLAS_PROBE]))
    assert facts["tensor.cublas.bf16.sm_clock"].value is not None
    assert "wgmma.throughput.bf16.ss) was not measured" in facts["tensor.wgmma.bf16.fraction_of_cublas"].detail


def test_one_warpgroup_computing_a_wrong_d_fails_the_probe() -> None:
    gpu = simulated_gpu(**SMALL)
    gpu.wgmma_corrupt = True
    measured = _run(gpu, runnable=["wgmma.throughput.e4m3.ss", "wgmma.latency.bf16.ss.n8"])
    for outcome in (measured["wgmma.throughput.e4m3.ss"].outcome,):
        assert outcome.status == "failed"
        assert "warpgroup 11's D differs from warpgroup 0's" in outcome.detail
    assert measured["wgmma.latency.bf16.ss.n8"].outcome.status == "failed"  # one warpgroup: wrong vs NumPy
    assert "expected" in measured["wgmma.latency.bf16.ss.n8"].outcome.detail
    assert all(m.facts == [] for m in measured.values())


def test_every_warpgroup_agreeing_on_a_wrong_d_fails_against_numpy() -> None:
    gpu = simulated_gpu(**SMALL)
    gpu.wgmma_corrupt_all = True
    measured = _run(gpu, runnable=["wgmma.throughput.s8.rs"])
    outcome = measured["wgmma.throughput.s8.rs"].outcome
    assert outcome.status == "failed" and "D[" in outcome.detail and "s8, zero operands" in outcome.detail


def test_a_descriptor_that_misdescribes_the_operands_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Swapping the leading and stride offsets reads the core matrices in the wrong order."""
    monkeypatch.setattr(family, "layout_bits", lambda: layout_bits(leading_bytes=256, stride_bytes=128))
    measured = _run(simulated_gpu(**SMALL), runnable=["wgmma.latency.f16.ss.n16"])
    outcome = measured["wgmma.latency.f16.ss.n16"].outcome
    assert outcome.status == "failed" and "expected" in outcome.detail


def test_probes_whose_contract_failed_are_not_launched() -> None:
    gpu = simulated_gpu(**SMALL)
    measured = _run(gpu, runnable=set(PROBES) - {"wgmma.throughput.bf16.ss"})
    assert "wgmma.throughput.bf16.ss" not in measured
    assert "gp_wg_tput_ss_bf16_n256" not in gpu.launches


def test_a_whole_suite_run_on_the_simulated_gpu_stays_small() -> None:
    """The default simulated GPU (132 SMs, 8 blocks an SM) with the settings other tests should pass: one
    warpgroup a block, which issues 3 % under three per clock."""
    gpu = simulated_gpu()
    measured = _run(gpu, runnable=["wgmma.throughput.bf16.ss", CUBLAS_PROBE], settings=FAST_SETTINGS)
    assert {m.outcome.status for m in measured.values()} == {"ok"}
    fraction = _facts(measured)["tensor.wgmma.bf16.fraction_of_cublas"].value
    cublas_per_clock = 700.0 / (132 * 4096 * 0.9 * gpu.mhz / 1e6)
    assert fraction == pytest.approx(0.96 * 0.97 / cublas_per_clock, rel=0.04)


def test_the_smoke_stage_publishes_its_ids_with_their_full_run_meaning() -> None:
    """An H200 smoke run published 0.964 of the peak per clock (one warpgroup a block) under the id the full
    run read 0.993 for (three), and 29.85 TFLOP/s for cuBLAS (one 1024^3 GEMM): the smoke settings keep the
    full run's shape and GEMM, with fewer samples, so each id it publishes means what the full run's does."""
    full, smoke = Settings(), SMOKE.settings
    for name in ("warpgroups_per_block", "blocks_per_sm", "gemm_n"):
        assert getattr(smoke, name) == getattr(full, name), name
    assert smoke.gemm_count * smoke.gemm_sampling.max_repeats < full.gemm_count * full.gemm_sampling.max_repeats
    assert CUBLAS_PROBE in SMOKE.probes
    smoke_facts = _facts(_run(simulated_gpu(**SMALL), runnable=SMOKE.probes, settings=smoke))
    full_facts = _facts(_run(simulated_gpu(**SMALL), runnable=SMOKE.probes, settings=FAST))
    published = [f for f in smoke_facts.values() if f.value is not None]
    assert len(published) == 13
    for fact in published:
        assert fact.value == pytest.approx(full_facts[fact.id].value, rel=0.03), fact.id
    one_warpgroup = dataclasses.replace(smoke, warpgroups_per_block=1)  # what the old smoke ran
    old = _facts(_run(simulated_gpu(**SMALL), runnable=SMOKE.probes[:1], settings=one_warpgroup))
    fraction = "tensor.wgmma.bf16.m64n256k16.ss.fraction_of_peak"
    assert old[fraction].value < 0.985 * full_facts[fraction].value


def test_the_family_fits_its_time_budget_on_an_h100() -> None:
    """Every launch at its most repeats, read back and checked, plus cuBLAS: within 15 s on 132 SMs
    (the GPU's work and the host's read-backs, checks and cuBLAS operands; the runner's per-call and
    per-probe costs come on top, in gpuprobe.measure.plan)."""
    work = plan(Settings(), H100_SXM)
    assert work.gpu_s + work.host_s < 15.0
    greedy = plan(dataclasses.replace(Settings(), throughput_ms=40.0, throughput_sampling=Stopping(9, 9)), H100_SXM)
    assert greedy.gpu_s + greedy.host_s > 15.0  # the bound can fail


@pytest.mark.parametrize(
    "change",
    [{"short_iterations": 0}, {"long_iterations": 8}, {"warpgroups_per_block": 4}, {"throughput_ms": 0.0},
     {"gemm_count": 0}, {"blocks_per_sm": -1}, {"gemm_n": 1024}],
)  # fmt: skip
def test_settings_that_would_hang_or_mean_nothing_are_refused(change: dict) -> None:
    with pytest.raises(ValueError, match="Settings"):
        dataclasses.replace(Settings(), **change)


# --------------------------------------------------------------------------- invariants


def _fact(fact_id: str, value: float) -> Fact:
    return Fact(fact_id, value, "x", (value, value), [value], {}, "p")


def test_the_cublas_invariants_hold_the_ratio_on_both_sides() -> None:
    """At least 0.95 (a consistency check of full runs) and at most 1.02 / 0.5 = 2.04 (physics: wgmma at its
    per-clock ceiling over cuBLAS at the least it does at 8192^3), which fails and marks cuBLAS's facts."""
    device = simulated_gpu().device()
    assert cublas_invariant({}, device) == []
    ratio = "tensor.wgmma.bf16.fraction_of_cublas"
    verdicts = {value: [(c.name, c.ok, c.physics) for c in cublas_invariant({ratio: _fact(ratio, value)}, device)]
                for value in (0.9, 1.2, 2.0, 2.1, 29.9)}  # fmt: skip
    low, high = "wgmma.bf16_reaches_cublas", "wgmma.bf16_within_cublas_reach"
    assert verdicts[0.9] == [(low, False, False), (high, True, True)]
    assert verdicts[1.2] == verdicts[2.0] == [(low, True, False), (high, True, True)]
    assert verdicts[2.1] == verdicts[29.9] == [(low, True, False), (high, False, True)]
    cublas = {ratio: _fact(ratio, 29.9), "tensor.cublas.bf16.tflops": _fact("tensor.cublas.bf16.tflops", 29.85)}
    assert cublas_invariant(cublas, device)[1].facts == ("tensor.cublas.bf16.tflops", ratio)


def _planted(stage: str) -> Results:
    """An H200 run's cuBLAS facts as the smoke stage of run 2 published them (one 1024^3 GEMM), judged now."""
    from gpuprobe.judge.expectations import load_all
    from gpuprobe.judge.verdicts import judge_again
    from tests.helpers.devices import H200

    def planted(fact_id: str, value: float, unit: str) -> Fact:
        return Fact(fact_id, value, unit, (0.99 * value, 1.01 * value), [value], {}, CUBLAS_PROBE)

    facts = [planted("tensor.cublas.bf16.tflops", 29.85, "TFLOP/s"),
             planted("tensor.wgmma.bf16.fraction_of_cublas", 29.9, "fraction")]  # fmt: skip
    results = Results(H200, facts, stage=stage)
    judge_again(results, load_all()["h200"], family.INVARIANTS)
    return results


@pytest.mark.parametrize("stage", ["full", "smoke"])
def test_a_planted_29_9_x_cublas_fails_in_a_full_run_and_a_smoke_run(stage: str) -> None:
    results = _planted(stage)
    verdicts = {f.id: f.verdict for f in results.facts}
    assert verdicts["invariant.wgmma.bf16_within_cublas_reach"] == "fail"
    assert verdicts["tensor.wgmma.bf16.fraction_of_cublas"] == verdicts["tensor.cublas.bf16.tflops"] == "fail"
    if stage == "full":  # the expectation alone refuses it too
        from gpuprobe.judge.expectations import judge, load_all

        expectation = load_all()["h200"].expectation_for("tensor.wgmma.bf16.fraction_of_cublas")
        assert expectation.high == 1.4 and "1.37" in expectation.note
        assert judge(Fact("tensor.wgmma.bf16.fraction_of_cublas", 29.9, "fraction"), expectation)[0] == "warn"


@pytest.mark.parametrize("key", ["h200", "h100_sxm"])
def test_tflops_warn_at_their_clock_and_are_judged_per_clock(key: str) -> None:
    """TFLOP/s ranges are absolute: an H200's random e4m3 1733 at 1610 MHz sat 2 % over a 1700 floor purely by
    its clock. Each range is a warn (its verdict states the clock), one without a range is reported; its fraction
    of the peak per clock is judged, with a source; none widened."""
    from gpuprobe.judge.expectations import load_all

    model = load_all()[key]
    rates = [i for i in model.facts if i.startswith(("tensor.wgmma.", "tensor.cublas.")) and i.endswith(".tflops")]
    assert len(rates) == 21
    for fact_id in rates:
        rate = model.facts[fact_id]
        assert rate.severity == ("report" if rate.low is rate.high is None else "warn"), fact_id
        assert "not judged" not in rate.note or rate.severity == "report", fact_id
        per_clock = model.facts[fact_id.removesuffix("tflops") + "fraction_of_peak"]
        assert per_clock.severity == "warn" and per_clock.high == 1.02 and per_clock.low >= 0.5, fact_id
        assert per_clock.source and "1980 MHz" in per_clock.source, fact_id
    e4m3 = model.facts["tensor.wgmma.e4m3.m64n256k32.ss.fraction_of_peak"]
    assert e4m3.contains(1732.9 / (132 * 8192 * 1610.5 / 1e6)) and "random A" in e4m3.note  # the H200's, per clock
    assert model.facts["tensor.wgmma.e4m3.m64n256k32.ss.tflops"].low == 1700.0  # a warn, not widened
    assert model.facts["tensor.wgmma.e4m3.accumulator_bits"].contains(14.0)


def test_no_wgmma_may_beat_the_dense_rate_at_its_clock() -> None:
    device = simulated_gpu().device()  # 132 SMs
    base = "tensor.wgmma.bf16.m64n256k16.ss"
    ceiling = 132 * 4096 * 1800 / 1e6
    facts = {f"{base}.tflops": _fact("t", 0.95 * ceiling), f"{base}.sm_clock": _fact("c", 1800.0)}
    assert [(c.ok, c.physics) for c in rate_invariants(facts, device)] == [(True, True)]
    facts[f"{base}.tflops"] = _fact("t", 1.1 * ceiling)
    (check,) = rate_invariants(facts, device)
    assert not check.ok and check.facts == (f"{base}.tflops", f"{base}.fraction_of_peak")


def test_no_clock_a_wgmma_or_cublas_ran_at_beats_the_parts_highest() -> None:
    """A clock read wrong (stamps paired across SMs read any number) fails with every rate per clock from it."""
    device = simulated_gpu().device()  # 1980 MHz at most
    cublas = "tensor.cublas.bf16.sm_clock"
    assert [c.ok for c in family.clock_invariants({cublas: _fact(cublas, 1750.0)}, device)] == [True]
    (check,) = family.clock_invariants({cublas: _fact(cublas, 2500.0)}, device)
    assert not check.ok and check.physics and check.facts == (cublas, "tensor.cublas.bf16.fraction_of_peak")
    unknown = dataclasses.replace(device, sm_clock_nominal_mhz=None)
    assert family.clock_invariants({cublas: _fact(cublas, 2500.0)}, unknown) == []


def test_no_wgmma_finishes_faster_than_its_work_allows() -> None:
    device = simulated_gpu().device()
    fact_id = "tensor.wgmma.bf16.m64n256k16.ss.latency"
    assert [c.ok for c in latency_floor_invariants({fact_id: _fact(fact_id, 140.0)}, device)] == [True]
    assert [(c.ok, c.physics) for c in latency_floor_invariants({fact_id: _fact(fact_id, 100.0)}, device)] == [
        (False, True)]  # fmt: skip


# --------------------------------------------------------------------------- the fact sheet


def _results(measured) -> Results:
    gpu_device = simulated_gpu(**SMALL).device()
    outcomes = {name: m.outcome for name, m in measured.items()}
    return Results(gpu_device, [f for m in measured.values() for f in m.facts], outcomes, partial=False)


def test_the_section_shows_wgmma_against_cublas_and_the_peak_at_the_measured_clock(every_probe: dict) -> None:
    results = _results(every_probe)
    sheet, sparse = family.SECTIONS
    facts = [f for f in results.facts if f.id.startswith(sheet.fact_prefixes)]
    text = "\n".join(section_lines(sheet_section(results, sheet, facts, {sheet.plot.key: sheet.plot.file_name})))
    shown = {member for row in fact_rows(facts, None, References()) for member in row.members}  # a sweep's row too
    for fact_id in ("tensor.wgmma.bf16.m64n256k16.ss.tflops", "tensor.cublas.bf16.tflops",
                    "tensor.wgmma.bf16.fraction_of_cublas", "tensor.wgmma.bf16.datasheet_peak_at_clock",
                    "tensor.wgmma.bf16.fraction_of_peak", "tensor.wgmma.s8.m64n8k32.rs.latency",
                    "tensor.cublas.bf16.sm_clock", "tensor.cublas.bf16.fraction_of_peak",
                    "tensor.wgmma.e4m3.m64n256k32.ss.fraction_of_peak",
                    "tensor.wgmma.e4m3.accumulator_bits"):  # fmt: skip
        assert fact_id in shown
    assert "wgmma_latency_vs_n.png" in text
    assert sheet.plot.png(results, 50).startswith(b"\x89PNG")
    assert sheet.plot.png(Results(results.device), 50) is None
    assert sparse.plot.png(results, 50).startswith(b"\x89PNG") and sparse.plot.png(Results(results.device), 50) is None
    assert not any(f.id.startswith(sparse.fact_prefixes) for f in facts)  # the sparse facts are the second section's
    mma_only = Results(
        results.device, [_fact("tensor.mma_sync_sp.f16.m16n8k32.over_dense", 1.5)]
    )  # a part without wgmma
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's empty-legend warning among them
        assert sparse.plot.png(mma_only, 50).startswith(b"\x89PNG")


def test_the_simulated_run_keeps_every_invariant(every_probe: dict) -> None:
    results = _results(every_probe)
    facts = {f.id: f for f in results.facts}
    device = dataclasses.replace(results.device, sm_count=4)
    checks = [c for check in family.INVARIANTS for c in check(facts, device)]
    # cuBLAS both ways, each throughput probe's rate and clock (zero, random), cuBLAS's clock, each latency
    # probe, each sparse throughput against its twin
    assert len(checks) == 2 + 2 * 2 * 15 + 1 + 63 + 3
    assert all(c.ok for c in checks), [c for c in checks if not c.ok]
    assert all(c.facts for c in checks)  # a failure would mark the facts it holds


def test_mma_sync_stays_below_wgmma_where_both_were_measured() -> None:
    from gpuprobe.families.wgmma import mma_sync_below_wgmma

    def facts(sync: float, wide: float) -> dict[str, Fact]:
        return {
            "tensor.mma_sync.bf16.m16n8k16.tflops": Fact("tensor.mma_sync.bf16.m16n8k16.tflops", sync, "TFLOP/s"),
            "tensor.wgmma.bf16.m64n256k16.ss.tflops": Fact("tensor.wgmma.bf16.m64n256k16.ss.tflops", wide, "TFLOP/s"),
        }

    device = simulated_gpu().device()
    assert mma_sync_below_wgmma(facts(640.0, 900.0), device)[0][1]
    assert not mma_sync_below_wgmma(facts(950.0, 900.0), device)[0][1]
    assert mma_sync_below_wgmma({}, device) == []  # not measured (no Hopper): left out, not passed


# --------------------------------------------------------------------------- 2:4 sparse wgmma


def test_a_sparse_wgmmas_operands_hold_a_2_4_pattern_and_twice_the_k() -> None:
    operands = make_sparse_operands(TYPES["bf16"], 64, "random", seed=4)
    assert operands.a_bits.shape == (64, 16) and operands.a.shape == (64, 32) and operands.b_bits.shape == (64, 32)
    assert np.all(np.count_nonzero(operands.a.reshape(64, 8, 4), axis=2) <= 2)
    assert operands.metadata().shape == (128,) and operands.metadata().dtype == np.uint32
    assert mismatch((3 * operands.product()).astype(np.float32), operands, 3) is None


def test_a_sparse_wgmmas_b_lies_in_four_core_matrices_along_k() -> None:
    rows = np.random.default_rng(2).integers(0, 256, size=(16, 64), dtype=np.uint8)
    laid = core_matrix_bytes(rows, 64)
    bits = layout_bits(stride_bytes=512)
    for row in range(16):
        for byte in range(64):
            assert laid[operand_offset(row, byte, bits)] == rows[row, byte]


def test_sparse_wgmma_is_set_against_its_dense_twin_in_the_same_run() -> None:
    names = {"wgmma.throughput.bf16.ss.n64", "wgmma.sp.throughput.bf16.ss.n64", "wgmma.sp.latency.bf16.ss.n64"}
    facts = _facts(_run(simulated_gpu(**SMALL), runnable=names))
    assert facts["tensor.wgmma_sp.bf16.m64n64k32.ss.over_dense"].value == pytest.approx(2 * 0.8, rel=0.05)
    assert facts["tensor.wgmma_sp.bf16.m64n64k32.ss.latency"].value == pytest.approx(32 + 14, rel=0.03)
    alone = _facts(_run(simulated_gpu(**SMALL), runnable={"wgmma.sp.throughput.bf16.ss.n64"}))
    assert "dense twin" in alone["tensor.wgmma_sp.bf16.m64n64k32.ss.over_dense"].detail


def test_metadata_read_the_other_way_round_fails_the_sparse_probe() -> None:
    gpu = simulated_gpu(**SMALL, family_options={"wgmma_metadata_halves_swapped": True})
    measured = _run(gpu, runnable={"wgmma.sp.latency.bf16.ss.n64"})["wgmma.sp.latency.bf16.ss.n64"]
    assert measured.outcome.status == "failed" and "elements wrong" in measured.outcome.detail


def test_a_dense_wgmma_in_a_sparse_kernel_breaks_the_contract(tmp_path: Path) -> None:
    kernel = KERNELS["wgmma.sp.latency.bf16.ss.n64"]
    module = _built(tmp_path, kernel, lambda text: text.replace("wgmma.mma_async.sp.sync.aligned.m64n64k32",
                                                                  "wgmma.mma_async.sync.aligned.m64n64k16")
                    .replace("%r20, 0, 1, 1, 1", "1, 1, 1"))  # fmt: skip
    result = check_probe(find_probe("wgmma.sp.latency.bf16.ss.n64"), module)
    assert result.status == "violated" and "HGMMA\\.SP" in result.detail


def test_sparse_below_dense_beyond_the_noise_breaks_the_invariant() -> None:
    from gpuprobe.families.wgmma import sparse_at_least_dense

    def tflops(fact_id: str, value: float) -> Fact:
        return Fact(fact_id, value, "TFLOP/s", (0.98 * value, 1.02 * value))

    dense, sparse = "tensor.wgmma.bf16.m64n256k16.ss.tflops", "tensor.wgmma_sp.bf16.m64n256k32.ss.tflops"
    verdicts = [[ok for _, ok, *_ in sparse_at_least_dense({dense: tflops(dense, 600.0), sparse: tflops(sparse, s)},
                                                         H100_SXM)] for s in (1100.0, 595.0, 500.0)]  # fmt: skip
    assert verdicts == [[True], [True], [False]]  # 2 x; within the noise; under it
