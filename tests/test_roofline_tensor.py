"""The tensor-core roofline's sweeps without a GPU: the generated PTX, its SASS contracts, the host's prediction of
every block's D, the sweeps on the simulated GPU (memory-bound to compute-bound, every D checked), a planted wrong
D caught, and the plan on an H200."""

from __future__ import annotations

import dataclasses
import itertools

import numpy as np
import pytest

from gpuprobe.core.arch import parse_arch
from gpuprobe.core.errors import ProbeFailure
from gpuprobe.families.bandwidth.simulated import memory_read_gbps as simulated_memory_gbps
from gpuprobe.families.base import Request
from gpuprobe.families.roofline import simulated as roofline_simulated
from gpuprobe.families.roofline.sweep import Sweep, guard
from gpuprobe.families.roofline.tensor import (
    PERIOD,
    SYNC_FLOP_PER_CLK_PER_SM,
    TENSOR_SWEEPS,
    Regions,
    TensorSettings,
    check_ring_d,
    expected_ring_d,
    measure_fill,
    measure_tensor_sweep,
    measured_fill,
    off_period,
    period_operands,
    probe_name,
    tensor_plan,
    tensor_sweeps,
)
from gpuprobe.families.roofline.tensor_ptx import (
    REPEATS,
    REPLICATE_KERNEL,
    RING_N,
    SHARED_N,
    SYNC_TYPES,
    TENSOR_TYPES,
    fill_module_text,
    module_text,
    sync_module_text,
)
from gpuprobe.families.wgmma.layout import TYPES, core_matrix_bytes, d_fragment_index
from gpuprobe.judge.expectations import load_all
from gpuprobe.kernels.contracts import clock_reads
from gpuprobe.kernels.registry import all_probes, find_probe
from gpuprobe.kernels.source_tree import PTX_DIR
from gpuprobe.measure.plan import family_seconds, model_device
from gpuprobe.simulated import gpu as simulated
from gpuprobe.simulated.gpu import ptx_parameters, simulated_gpu, suite_options
from tests.helpers.checked import contract_results, measured_module

SM80, SM90A = parse_arch("sm_80"), parse_arch("sm_90a")
FAST = roofline_simulated.FAST_TENSOR  # a 16 MiB DRAM region, 0.1 ms L2 launches: quick on the simulated part


def _request(**options) -> tuple[Request, object]:
    gpu = simulated_gpu(**suite_options(**options))
    return Request(gpu, ptx_parameters(), gpu.device(), set()), gpu


def _sweeps() -> tuple[Sweep, ...]:
    return tensor_sweeps(lambda _: TensorSettings(), lambda _: Regions())


def _probes() -> list:
    return [p for p in all_probes() if p.kernel.startswith("gp_rt")]


# ---- the kernels ---------------------------------------------------------------------------------


def test_the_committed_ptx_is_what_the_generator_writes() -> None:
    assert (PTX_DIR / "roofline" / "tensor.ptx").read_text() == module_text(), (
        "regenerate: python -m gpuprobe.families.roofline.tensor_ptx > ptx/roofline/tensor.ptx"
    )
    assert (PTX_DIR / "roofline" / "tensor_sync.ptx").read_text() == sync_module_text(), (
        "regenerate: python -m gpuprobe.families.roofline.tensor_ptx sync > ptx/roofline/tensor_sync.ptx"
    )
    assert (PTX_DIR / "roofline" / "fill.ptx").read_text() == fill_module_text(), (
        "regenerate: python -m gpuprobe.families.roofline.tensor_ptx fill > ptx/roofline/fill.ptx"
    )


def test_every_sweep_point_is_a_declared_probe_and_its_contract_holds_on_sm_80_and_sm_90a() -> None:
    probes = _probes()
    names = {p.name for p in probes}
    wanted = {probe for sweep in _sweeps() for probe in sweep.probes}
    wgmma, sync = len(TENSOR_TYPES) * (2 * len(REPEATS) + len(SHARED_N)), len(SYNC_TYPES) * 2 * len(REPEATS)
    assert wanted <= names and len(wanted) == wgmma + sync and len(names) == len(wanted) + 1  # and the fill
    results = contract_results(probes, [SM80, SM90A])
    assert sum(r.status == "ok" for r in results) == (sync + 1) + (wgmma + 1)  # sm_80: mma.sync's, sm_90a: wgmma's
    assert all(r.status in ("ok", "unsupported") for r in results), [(r.probe, r.detail) for r in results]


@pytest.mark.parametrize("repeats", [1, 16])
def test_a_ring_step_is_a_barrier_wait_r_wgmmas_one_wait_and_one_elected_tensor_load(repeats: int) -> None:
    """What the contract pins, read off the listing: between the clock reads, R HGMMAs of the type, one UTMALDG and
    one expect_tx, the wait_group 1 of the step and the wait_group 0 after the loop, one block barrier between the
    wait_group 1 and the tensor load (a warp's wait covers its own share of the group alone), no other memory access."""
    kernel = measured_module(SM90A).listing.kernel(f"gp_rt_tma_bf16_r{repeats}")
    reads = clock_reads(kernel)
    timed = kernel.between(reads[0].offset + 1, reads[-1].offset - 1)
    opcodes = [ins.opcode for ins in timed]
    assert opcodes.count("HGMMA.64x256x16.F32.BF16") == repeats
    assert opcodes.count("UTMALDG.2D") == 1 and opcodes.count("SYNCS.ARRIVE.TRANS64") == 1
    assert [ins.operands[-1] for ins in timed if ins.opcode == "WARPGROUP.DEPBAR.LE"] == ["0x1", "0x0"]
    order = [o for o in opcodes if o in ("WARPGROUP.DEPBAR.LE", "BAR.SYNC.DEFER_BLOCKING", "UTMALDG.2D")]
    assert order == ["WARPGROUP.DEPBAR.LE", "BAR.SYNC.DEFER_BLOCKING", "UTMALDG.2D", "WARPGROUP.DEPBAR.LE"]
    assert not {ins.base for ins in timed} & {"LDG", "STG", "LDS", "STS", "LDL", "STL", "LDGSTS"}


@pytest.mark.parametrize("stages", [0, 1, 9])
def test_a_tma_ring_takes_two_to_eight_stages(stages: int) -> None:
    """A stage is refilled a step after it is read: one stage alone would wait for a load never issued (a hang);
    the kernels hold MAX_STAGES barriers."""
    with pytest.raises(ValueError, match="stages"):
        TensorSettings(stages=stages)


@pytest.mark.parametrize("repeats", [1, 4])
def test_a_cp_async_step_is_five_copies_one_barrier_17_ldmatrix_and_r_times_32_mma_sync(repeats: int) -> None:
    kernel = measured_module(SM80).listing.kernel(f"gp_rt_sync_bf16_r{repeats}")
    reads = clock_reads(kernel)
    opcodes = [ins.opcode for ins in kernel.between(reads[0].offset + 1, reads[-1].offset - 1)]
    assert opcodes.count("HMMA.16816.F32.BF16") == 32 * repeats and opcodes.count("LDSM.16.M88.4") == 17
    assert sum(o.startswith("LDGSTS") for o in opcodes) == 5 and sum(o.startswith("BAR.SYNC") for o in opcodes) == 1


def _ldmatrix_x4(stage: np.ndarray, row_address: np.ndarray) -> np.ndarray:
    """ldmatrix.x4 per the PTX ISA: lanes 8q .. 8q + 7 give the 16-byte rows of matrix q, and lane l receives 4 bytes
    of each, row l // 4, bytes 4 (l % 4) .. (32 lanes x 4 registers x 4 bytes)."""
    lane = np.arange(32)
    rows = row_address[8 * np.arange(4)[None, :] + lane[:, None] // 4]  # (lane, q)
    return stage[rows[:, :, None] + 4 * (lane % 4)[:, None, None] + np.arange(4)]


@pytest.mark.parametrize("warp", range(4))
def test_the_cp_async_kernels_ldmatrix_addresses_give_each_warp_the_mma_sync_fragments_of_its_rows(warp: int) -> None:
    """The lane addresses the sync kernels compute (A: core matrix 4 w + (q & 1) x 2 + q // 2, B: 512 bytes a pair of
    n8 blocks, lane x 16), through ldmatrix, hold what mma.sync's fragments must (PTX ISA, m16n8k16 / k8 / k32: a
    register is 4 bytes of K; a0 row g, a1 row g + 8, a2 and a3 the same rows 16 bytes further in K; b0 column g, b1
    16 bytes further in K): the warp's 16 rows of A and every n8 block of B, for any element width."""
    rng = np.random.default_rng(warp)
    a, b = rng.integers(0, 256, (64, 32), dtype=np.uint8), rng.integers(0, 256, (RING_N, 32), dtype=np.uint8)
    stage = np.concatenate([core_matrix_bytes(a), core_matrix_bytes(b)])
    lane = np.arange(32)
    q = lane >> 3
    a_regs = _ldmatrix_x4(stage, (4 * warp + ((q & 1) << 1 | q >> 1)) * 128 + (lane & 7) * 16)
    g, t = lane // 4, lane % 4
    for reg, (row, half) in enumerate([(0, 0), (8, 0), (0, 1), (8, 1)]):
        rows = a[16 * warp + row + g, 16 * half : 16 * half + 16].reshape(32, 4, 4)
        assert np.array_equal(a_regs[:, reg], rows[lane, t])
    for pair in range(RING_N // 16):
        b_regs = _ldmatrix_x4(stage, 2048 + 512 * pair + lane * 16)
        for reg, (block, half) in enumerate([(0, 0), (0, 1), (1, 0), (1, 1)]):
            columns = b[8 * (2 * pair + block) + g, 16 * half : 16 * half + 16].reshape(32, 4, 4)
            assert np.array_equal(b_regs[:, reg], columns[lane, t])


# ---- the host's prediction -----------------------------------------------------------------------


@pytest.mark.parametrize("dtype", TENSOR_TYPES)
def test_a_period_of_three_tile_pairs_sums_to_zero_and_every_partial_sum_stays_exact(dtype: str) -> None:
    products = period_operands(dtype, 7).products()
    assert products.shape == (PERIOD, 64, RING_N) and np.all(products.sum(axis=0) == 0) and products[0].any()
    partial = np.cumsum(np.repeat(products, max(REPEATS), axis=0), axis=0)  # every wgmma's running sum, R = 16
    assert np.abs(partial).max() <= 2**11  # well inside Hopper's 14-bit fp8 accumulator, and f32's 24 bits
    assert not np.any(products % 2)  # even: no s32 element of D reads -1, the poison of an unwritten word


def test_a_block_s_d_is_r_times_the_products_of_the_steps_left_over_from_whole_periods() -> None:
    products = period_operands("bf16", 7).products()
    assert np.array_equal(expected_ring_d(products, 4, 3 * 9 + 1), 4 * products[0])
    assert np.array_equal(expected_ring_d(products, 2, 3 * 9 + 2), -2 * products[2])
    assert off_period(30) == 29 and off_period(31) == 31  # never a whole number of periods: D would be 0


def test_the_check_names_a_block_whose_d_differs_and_an_element_off_the_prediction() -> None:
    expected = expected_ring_d(period_operands("s8", 3).products(), 1, 4)
    rows, cols = d_fragment_index(RING_N)
    fragments = np.repeat(expected.astype(np.int32)[rows, cols][None], 3, axis=0).view(np.uint32)
    check_ring_d("k", fragments, "s32", expected)
    fragments[2, 0, 0] += 1
    with pytest.raises(ProbeFailure, match="block 2's D differs"):
        check_ring_d("k", fragments, "s32", expected)
    with pytest.raises(ProbeFailure, match=r"D\[\d+,\d+\] = .*the host predicts"):
        check_ring_d("k", np.repeat(fragments[2:], 3, axis=0), "s32", expected)


# ---- on the simulated GPU ------------------------------------------------------------------------


@pytest.mark.parametrize("dtype", ["bf16", "e4m3"])
def test_a_sweep_runs_from_memory_bound_to_compute_bound_on_the_simulated_gpu(dtype: str) -> None:
    request, gpu = _request()
    regions = Regions()
    sweeps = {s.level: s for s in _sweeps() if s.type == dtype}
    per_clock = roofline_simulated.FLOP_PER_CLK_PER_SM[dtype] * gpu.sm_count / 1e6
    for level in ("dram", "l2", "shared"):
        points = measure_tensor_sweep(request, dtype, level, FAST, regions)
        assert [p.probe for p in points] == list(sweeps[level].probes)
        assert all(a.intensity < b.intensity for a, b in itertools.pairwise(points))
        for point in points:
            guard(request, sweeps[level], point)  # no point above the peak at its clock or its level's limit
        low, high = points[0], points[-1]
        assert low.rate < 0.8 * high.rate and low.bandwidth > high.bandwidth, level  # memory-bound at the low end
        assert high.rate > 0.85 * per_clock * high.clock, level  # compute-bound at the high end
        assert all(m == pytest.approx(gpu.mhz, rel=0.1) for p in points for m in p.mhz)


def test_dram_is_slower_than_l2_at_the_memory_bound_end() -> None:
    request, _ = _request()
    regions = Regions()
    dram, l2 = (measure_tensor_sweep(request, "s8", level, FAST, regions)[0] for level in ("dram", "l2"))
    assert dram.bandwidth < 0.6 * l2.bandwidth


def test_a_planted_wrong_accumulator_fails_the_point() -> None:
    request, gpu = _request()
    gpu.roofline_tensor_corrupt = True
    with pytest.raises(ProbeFailure, match="gp_rt_tma_tf32_r1: block 7's D differs"):
        measure_tensor_sweep(request, "tf32", "dram", FAST)


def test_a_region_described_the_wrong_way_fails_the_check(monkeypatch: pytest.MonkeyPatch) -> None:
    """Operands laid out in core-matrix order but described with the offsets swapped read other bytes: wrong D."""
    from gpuprobe.families.roofline import tensor
    from gpuprobe.families.wgmma.layout import layout_bits

    monkeypatch.setattr(tensor, "layout_bits", lambda: layout_bits(leading_bytes=256, stride_bytes=128))
    with pytest.raises(ProbeFailure, match="the host predicts"):
        measure_tensor_sweep(_request()[0], "bf16", "l2", FAST)


def test_the_fill_writes_the_region_from_the_period_and_a_wrong_fill_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    request, gpu = _request()
    regions = Regions()
    measured = measured_fill(lambda _: FAST, lambda _: regions, request)
    (gbps,) = (f.value for f in measured.facts if f.id == "roofline.tensor.fill.bandwidth")
    assert gbps == pytest.approx(simulated_memory_gbps(gpu, "dram"), rel=0.2) and regions.dtype == "bf16"
    assert {f.id for f in measured.facts} == set(find_probe(measured.probe).facts)
    source = period_operands("bf16", FAST.seed).tile_bytes()
    region = request.launcher.read(regions.buffer, "uint8", regions.tiles * len(source) // PERIOD)
    assert np.array_equal(
        region.reshape(-1, len(source)), np.broadcast_to(source, (len(region) // len(source), len(source)))
    )
    monkeypatch.setitem(simulated._KERNELS, REPLICATE_KERNEL, lambda gpu, launch, **params: None)  # writes nothing
    with pytest.raises(ProbeFailure, match=r"gp_rt_replicate: byte \d+ of the region holds 0, the period"):
        measure_fill(request, FAST, Regions())


@pytest.mark.parametrize("dtype", ["bf16_sync", "s8_sync"])
def test_an_mma_sync_sweep_runs_from_memory_bound_to_compute_bound_on_a_simulated_sm_80(dtype: str) -> None:
    request, gpu = _request(cc="8.0", arch="sm_80")
    regions = Regions()
    sweeps = {s.level: s for s in _sweeps() if s.type == dtype}
    per_clock = SYNC_FLOP_PER_CLK_PER_SM[dtype.removesuffix("_sync")] * gpu.sm_count / 1e6
    for level in ("dram", "l2"):
        points = measure_tensor_sweep(request, dtype, level, FAST, regions)
        assert [p.probe for p in points] == list(sweeps[level].probes)
        for point in points:
            guard(request, sweeps[level], point)
        low, high = points[0], points[-1]
        assert low.rate < 0.8 * high.rate and high.rate > 0.85 * per_clock * high.clock, level
    with pytest.raises(ValueError, match="no bf16 tensor sweep"):  # wgmma's are sm_90a's
        measure_tensor_sweep(request, "bf16", "dram", FAST)


def test_an_l2_sweep_whose_chunks_cannot_fit_the_l2_fails_rather_than_read_dram() -> None:
    request, _ = _request(l2_bytes=256 * 1024)  # 8 blocks x a period of three 10 KiB pairs: 240 KiB fits
    measure_tensor_sweep(request, "bf16", "l2", FAST)
    request, _ = _request(l2_bytes=128 * 1024)
    with pytest.raises(ProbeFailure, match=r"do not fit the 131072-byte L2"):
        measure_tensor_sweep(request, "bf16", "l2", FAST)


def test_no_sweep_runs_on_a_part_before_sm_80() -> None:
    request, _ = _request(cc="7.5", arch="sm_75")
    assert "sm_75" not in TENSOR_SWEEPS
    with pytest.raises(ValueError, match="no bf16_sync tensor sweep"):
        measure_tensor_sweep(request, "bf16_sync", "dram", FAST)


# ---- the plan ------------------------------------------------------------------------------------


def test_every_tensor_sweep_fits_five_seconds_on_an_h200() -> None:
    h200 = model_device(load_all()["h200"], visible_gpus=1)
    plan = tensor_plan(TensorSettings(), h200)
    assert plan.probes == len(TENSOR_TYPES) * (2 * len(REPEATS) + len(SHARED_N)) + 1  # a probe a point, the fill
    assert family_seconds(plan, child_start=False) < 5.0
    more = tensor_plan(dataclasses.replace(TensorSettings(), sampling=TensorSettings().sampling.at_most(4)), h200)
    assert family_seconds(more, child_start=False) > family_seconds(plan, child_start=False)


def test_the_tensor_sweeps_speak_the_framework_s_types() -> None:
    sweeps = _sweeps()
    assert all(isinstance(s, Sweep) for s in sweeps)
    assert {(s.type, s.level) for s in sweeps} == {sweep for found in TENSOR_SWEEPS.values() for sweep in found}
    assert sweeps[0].probes[0] == probe_name("bf16", "dram", 1) == "roofline.bf16.dram.r1"
    assert TYPES["s8"].accumulator == "s32" and {s.unit for s in sweeps if s.type == "s8"} == {"TOP/s"}
