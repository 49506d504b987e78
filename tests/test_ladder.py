"""The ladder family's host side on the simulated GPU: every type's sweep against the instruction peak at the clock
its batches ran at, the result check (a planted wrong C fails the probe), a library that cannot be loaded (not run,
with the reason), the guard against a rate above the peak, the operands' encodings, and the time the plan needs."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpuprobe.families import instruction_peak, ladder
from gpuprobe.families.ladder import REFERENCE, SHAPES, SKINNY_M, TYPES, Settings
from gpuprobe.families.sampling import Stopping
from gpuprobe.kernels.registry import PTX_DIR, all_probes
from gpuprobe.measure.plan import family_seconds
from gpuprobe.runner import cublaslt
from gpuprobe.runner.cupy_launcher import decode_values, encode_operand
from gpuprobe.runner.launcher import (
    GEMM_TYPES,
    GEMM_VALUE_RANGE,
    GemmShape,
    LaunchPathUnavailable,
    output_spacing,
    round_to_output,
)
from gpuprobe.simulated.gpu import measure_family, simulated_gpu
from tests.helpers.devices import H200

FAST = Settings(sampling=Stopping(2, 2))
PER_CLOCK = {"bf16": 4096, "f16": 4096, "tf32": 2048, "e4m3": 8192, "s8": 8192}  # Hopper's dense flop/clk/SM


def _peaks(share: float = 0.97) -> dict:
    """A run's state as the wgmma family leaves it: each type's instruction peak at ``share`` of Hopper's."""
    state: dict = {}
    for dtype, per_clock in PER_CLOCK.items():
        instruction_peak.record(state, dtype, [share * per_clock] * 3, f"wgmma.throughput.{dtype}.ss")
    return state


def _run(gpu=None, settings=FAST, state=None, runnable=None):
    names = set(ladder.PROBES) if runnable is None else set(runnable)
    return measure_family(ladder, gpu or simulated_gpu(), names, settings, _peaks() if state is None else state)


def _facts(measured) -> dict:
    return {f.id: f for m in measured.values() for f in m.facts}


def test_the_probes_are_the_declared_family_and_the_ptx_is_what_the_module_writes() -> None:
    assert set(ladder.PROBES) == {p.name for p in all_probes() if p.family == "ladder"}
    declared = {f for p in all_probes() if p.family == "ladder" for f in p.facts}
    assert declared == {i for dtype in TYPES for i, _ in ladder.fact_ids(dtype)}
    assert (PTX_DIR / "ladder" / "ladder.ptx").read_text() == ladder.module_text()


def test_every_type_reaches_a_share_of_the_instruction_peak_at_its_own_clock() -> None:
    gpu = simulated_gpu()
    measured = _run(gpu)
    assert {n: m.outcome.status for n, m in measured.items()} == dict.fromkeys(ladder.PROBES, "ok")
    facts = _facts(measured)
    mhz = gpu.mhz * 0.90  # the simulated cuBLAS clock (wgmma.simulated.CUBLAS_CLOCK_DROP)
    for dtype in TYPES:
        base = f"library.cublas.{dtype}"
        assert facts[f"{base}.sm_clock"].value == pytest.approx(mhz, rel=0.01)
        peak = 0.97 * PER_CLOCK[dtype] * gpu.sm_count * mhz * 1e6 / 1e12
        reference = facts[f"{base}.reference.tflops"].value
        assert reference == pytest.approx(gpu.gemm_tflops[dtype], rel=0.02)  # 8192^3 is compute-bound here
        assert facts[f"{base}.reference.fraction_of_peak"].value == pytest.approx(reference / peak, rel=0.02)
        assert facts[f"{base}.best.tflops"].value >= reference * 0.99
        assert 0 < facts[f"{base}.best.fraction_of_peak"].value < 1
        skinny = [facts[f"{base}.m{m}.tflops"].value for m in SKINNY_M]
        assert skinny == sorted(skinny) and skinny[-1] < reference  # a skinny GEMM is bound by B's bytes
        assert "launch-bound" in facts[f"{base}.m1.tflops"].detail
        assert facts[f"{base}.best.tflops"].unit == ("TOP/s" if dtype == "s8" else "TFLOP/s")
    series = measured["ladder.cublas.bf16"].outcome.series
    assert [s["shape"] for s in series["shapes"]] == [str(s) for s in SHAPES]
    assert series["best"] in {str(s) for s in SHAPES}
    assert "launch-bound" in measured["ladder.cublas.bf16"].outcome.detail


def test_each_timing_fills_a_clock_window_and_a_skinny_gemm_runs_more_of_them() -> None:
    for dtype in TYPES:
        counts = {shape: ladder.gemm_count(shape, dtype, Settings(), 132) for shape in SHAPES}
        for shape, count in counts.items():
            assert count * ladder.planned_ms(shape, dtype, 132) >= Settings().batch_ms
        assert counts[GemmShape(1, 8192, 8192)] > counts[REFERENCE]


def test_a_wrong_result_fails_the_probe() -> None:
    gpu = simulated_gpu(gemm_corrupt=True)
    measured = _run(gpu, runnable=["ladder.cublas.bf16"])["ladder.cublas.bf16"]
    assert measured.outcome.status == "failed" and measured.facts == []
    assert "NumPy predicts" in measured.outcome.detail and "2048x2048x2048" in measured.outcome.detail


@pytest.mark.parametrize(("dtype", "value", "spacing"), [("bf16", 3_000_000.0, 16384.0), ("f16", 3000.0, 2.0),
                                                        ("e4m3", -256.0, 2.0), ("tf32", 3_000_000.0, 0.0),
                                                        ("s8", 3_000_000.0, 0.0)])  # fmt: skip
def test_a_16_bit_c_may_be_one_unit_off_in_its_last_place_and_no_more(dtype: str, value: float, spacing: float) -> None:
    """A split-K GEMM reducing through a bf16 or f16 C rounds twice: one unit in the last place, allowed; an f32
    or s32 C of exact integer sums is exact."""
    assert output_spacing(np.array([value, 0.0]), dtype).tolist() == [spacing, 0.0]


def test_a_library_that_cannot_be_loaded_is_not_run_with_the_reason() -> None:
    why = "no libcublasLt beside /usr/lib/libcublas.so.13"
    gpu = simulated_gpu(gemm_missing={"cuBLASLt": why})
    measured = _run(gpu, runnable=["ladder.cublas.e4m3", "ladder.cublas.bf16"])
    e4m3 = measured["ladder.cublas.e4m3"]
    assert e4m3.outcome.status == "not_run" and why in e4m3.outcome.detail
    assert {f.id for f in e4m3.facts} == {i for i, _ in ladder.fact_ids("e4m3")}
    assert all(f.value is None and why in f.detail for f in e4m3.facts)
    assert measured["ladder.cublas.bf16"].outcome.status == "ok"  # cuBLAS itself loads


def test_without_an_instruction_peak_the_fractions_are_not_measured_with_the_reason() -> None:
    facts = _facts(_run(state={}, runnable=["ladder.cublas.tf32"]))
    for which in ("best", "reference"):
        fraction = facts[f"library.cublas.tf32.{which}.fraction_of_peak"]
        assert fraction.value is None and fraction.detail == instruction_peak.missing_reason("tf32")
    assert facts["library.cublas.tf32.reference.tflops"].value > 0


def test_a_rate_above_the_instruction_peak_at_its_clock_fails_the_probe() -> None:
    """The library runs the same tensor cores: a peak read at half its value makes cuBLAS impossible."""
    measured = _run(state=_peaks(share=0.4), runnable=["ladder.cublas.bf16"])["ladder.cublas.bf16"]
    assert measured.outcome.status == "failed" and "impossible on the same tensor cores" in measured.outcome.detail


@pytest.mark.parametrize("dtype", TYPES)
def test_the_operands_encode_and_decode_exactly_and_the_reference_rounds_once(dtype: str) -> None:
    span = GEMM_TYPES[dtype].value_range
    values = np.arange(-span, span + 1).reshape(1, -1)
    assert decode_values(encode_operand(values, dtype), dtype).tolist() == values.tolist()
    assert span >= GEMM_VALUE_RANGE  # the range every type keeps exact (the frameworks family's operands)
    sums = np.array([257.0, 259.0, 2049.0, -16385.0])
    rounded = {"bf16": [256, 260, 2048, -16384], "e4m3": [256, 260, 2048, -16384], "f16": [257, 259, 2048, -16384]}
    assert round_to_output(sums, dtype).tolist() == rounded.get(dtype, sums.tolist())


@pytest.mark.parametrize("dtype", TYPES)
def test_every_sampled_result_is_finite_and_a_square_gemms_a_is_not_its_b(dtype: str) -> None:
    """C = A . A^T would sum squares on its diagonal, past exactness (bf16) and past f16's largest value."""
    gpu = simulated_gpu()
    for shape in SHAPES:
        rows, cols = (ladder.sampled_indices(size, ladder.SAMPLED, size + shape.k) for size in (shape.m, shape.n))
        with np.errstate(over="raise"):
            sample = gpu.gemm_sample(shape, dtype, rows, cols)
        assert np.isfinite(sample.c).all() and np.abs(sample.a @ sample.b.T).max() < 2**24
        assert shape.m != shape.n or not np.array_equal(sample.a, sample.b)


def test_e4m3_bytes_decode_as_the_format_has_them() -> None:
    """OCP e4m3fn: 448 the largest, 2^-9 the least subnormal, 0x7F and 0xFF NaN, the sign bit alone -0."""
    values = decode_values(np.array([0x7E, 0x01, 0x38, 0x80, 0xC4], np.uint8), "e4m3").tolist()
    assert values == [448.0, 2.0**-9, 1.0, -0.0, -3.0]
    assert np.isnan(decode_values(np.array([0x7F, 0xFF], np.uint8), "e4m3")).all()


def test_a_process_without_cublaslt_is_told_why(monkeypatch) -> None:
    monkeypatch.setattr(cublaslt, "mapped_library", lambda soname, maps="": None)
    with pytest.raises(LaunchPathUnavailable, match=r"cuBLASLt cannot be loaded here \(no libcublasLt\.so\.13 in this "
                       r"process \(no libcublas\.so\.13 mapped\)"):  # fmt: skip
        cublaslt.load(13)


def test_the_mapped_library_is_read_from_the_process_maps(tmp_path) -> None:
    """Of the major asked for: a PyTorch's libcublasLt.so.12 mapped first is not CuPy's CUDA 13 one."""
    maps = tmp_path / "maps"
    maps.write_text("7e00-7e01 r-xp 00000000 08:01 1 /opt/torch/lib/libcublasLt.so.12.9.1.4\n"
                    "7f00-7f01 r-xp 00000000 08:01 1 /opt/nvidia/cublas/lib/libcublasLt.so.13\n")  # fmt: skip
    assert str(cublaslt.mapped_library("libcublasLt.so.13", str(maps))) == "/opt/nvidia/cublas/lib/libcublasLt.so.13"
    assert str(cublaslt.mapped_library("libcublasLt.so.12", str(maps))) == "/opt/torch/lib/libcublasLt.so.12.9.1.4"
    assert cublaslt.mapped_library("libcublasLt.so.1", str(maps)) is None
    assert cublaslt.mapped_library("libcublas.so.13", str(maps)) is None


def test_cublaslt_is_looked_for_beside_libcublas_of_the_same_major(tmp_path, monkeypatch) -> None:
    """Where libcublasLt is not mapped, the one beside libcublas.so.13 of major 13, not a .so.12 sorted first."""
    for name in ("libcublas.so.13", "libcublasLt.so.12", "libcublasLt.so.13.1"):
        (tmp_path / name).write_bytes(b"")
    mapped = {"libcublas.so.13": tmp_path / "libcublas.so.13"}
    monkeypatch.setattr(cublaslt, "mapped_library", lambda soname, maps="": mapped.get(soname))
    opened: list[str] = []
    monkeypatch.setattr(cublaslt.ctypes, "CDLL", lambda path: opened.append(path))
    cublaslt.load(13)
    assert opened == [str(tmp_path / "libcublasLt.so.13.1")]


def test_the_planned_work_fits_the_time_budget() -> None:
    """Worst case on an H200 (``ladder.plan``): every timing at the planned rates, every operand drawn, repeated
    and uploaded, every launcher call's round trip: within the 8 s the issue's design gives the family."""
    plan = ladder.plan(Settings(), H200)
    assert plan.probes == len(ladder.PROBES)
    total = family_seconds(plan, child_start=False)
    assert 1.0 < total < 8.0, f"the ladder family could take {total:.2f} s"
    slower = ladder.plan(dataclasses.replace(Settings(), batch_ms=20.0), H200)
    assert family_seconds(slower, child_start=False) > 8.0  # the bound counts the GEMMs: it can fail


def test_settings_that_mean_nothing_are_refused() -> None:
    with pytest.raises(ValueError, match=r"Settings\.types"):
        Settings(types=("fp64",))
    with pytest.raises(ValueError, match="batch_ms"):
        Settings(batch_ms=0.0)


class FakeCublasLt:
    """libcublasLt's stand-in: every function returns success and is recorded; the heuristic finds one algorithm."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, tuple]] = []

    def __getattr__(self, function: str):
        def call(*args):
            self.calls.append((function, args))
            if function == "cublasLtMatmulAlgoGetHeuristic":
                args[-1]._obj.value = 1  # returnAlgoCount
            return 0

        return call


def test_cublaslt_runs_the_row_major_tn_gemm_as_its_column_major_transpose() -> None:
    """C (16 x 64) = A (16 x 32) . B (64 x 32)^T is cuBLASLt's C^T (64 x 16) = op_T(B) . A: B's layout 32 x 64 and
    A's 32 x 16 (ld 32: K contiguous, the TN layout fp8 needs), C's 64 x 16 (ld 64), B passed first."""
    library = FakeCublasLt()
    call = cublaslt.CublasLt(library).matmul(GemmShape(16, 64, 32), (28, 14, 68), (0xA, 0xB, 0xC), 0xD)
    layouts = [tuple(a.value for a in args[1:]) for name, args in library.calls if name == "cublasLtMatrixLayoutCreate"]
    assert layouts == [(28, 32, 64, 32), (28, 32, 16, 32), (14, 64, 16, 64)]
    ops = [
        (args[1].value, args[2]._obj.value) for name, args in library.calls if name == "cublasLtMatmulDescSetAttribute"
    ]
    assert ops == [(cublaslt.CUBLASLT_MATMUL_DESC_TRANSA, 1), (cublaslt.CUBLASLT_MATMUL_DESC_TRANSB, 0)]
    call(0x5)
    name, args = library.calls[-1]
    assert name == "cublasLtMatmul" and [args[i].value for i in (3, 5, 8, 10)] == [0xB, 0xA, 0xC, 0xC]
    assert args[-1].value == 0x5  # the stream the call is given (the one current at each GEMM), not one kept
