"""The TMA family's host side: tiles, boxes and the swizzle against independent references, the tensor map a
probe asks for, the kernels' contracts (and wrong kernels they catch), and measure() end to end against the
simulated GPU."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from gpuprobe.core.arch import parse_arch
from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Fact, Results
from gpuprobe.families import tma
from gpuprobe.families.async_copy import SOURCE_CEILINGS
from gpuprobe.families.chase import random_cycle
from gpuprobe.families.tma import PROBES, SECTIONS, Settings, fact_id, plan, stream_steps, tensor_rows
from gpuprobe.families.tma.simulated import FAST_SETTINGS, model
from gpuprobe.families.tma.tiles import Tile, chase_tensor, swizzled_offsets, tensor_values, tile_word_sums, tiles
from gpuprobe.kernels.registry import all_probes
from gpuprobe.measure.plan import family_seconds
from gpuprobe.runner.checked import check_arguments
from gpuprobe.runner.tensor_map import TileMap
from gpuprobe.simulated.gpu import KIB, measure_family, ptx_parameters, simulated_gpu
from tests.helpers.checked import contract_results
from tests.helpers.devices import H200
from tests.test_host_transfer import mutant_violations


def _gpu(**kwargs):
    return simulated_gpu(sm_count=4, l2_bytes=256 * KIB, **kwargs)


def _run(gpu, runnable=frozenset(PROBES), settings=FAST_SETTINGS, state=None):
    device = dataclasses.replace(gpu.device(), shared_per_block_optin_bytes=227 * KIB)
    return measure_family(tma, gpu, runnable, settings, state, device=device)


def _facts(measured) -> dict[str, Fact]:
    return {f.id: f for m in measured.values() for f in m.facts}


# ---- tiles and the swizzle -----------------------------------------------------------------------


def reference_placement(nbytes: int, span: int) -> np.ndarray:
    """Where each byte of a box lands, per the swizzle as the CUDA C++ Programming Guide draws it ("TMA
    Swizzle"): shared memory in 128-byte lines, the 16-byte chunk c of line l moved to chunk c XOR (l mod
    span / 16) of the same line (mod 8 for 128 B, mod 4 for 64 B, mod 2 for 32 B); written chunk by chunk."""
    phases = max(span // 16, 1)
    placed = np.empty(nbytes, dtype=np.int64)
    for start in range(0, nbytes, 16):
        line, chunk = divmod(start, 128)
        placed[start : start + 16] = line * 128 + (chunk // 16 ^ line % phases) * 16 + np.arange(16)
    return placed


@pytest.mark.parametrize(("rows", "swizzle"), [(r, s) for r in (64, 128) for s in ("none", "sw64", "sw128")])
def test_the_swizzle_moves_chunks_as_the_programming_guide_draws_them(rows: int, swizzle: str) -> None:
    tile = Tile(rows, swizzle)
    assert np.array_equal(swizzled_offsets(tile.box_bytes, tile.span), reference_placement(tile.box_bytes, tile.span))
    assert np.array_equal(swizzled_offsets(1024, 32), reference_placement(1024, 32))


def test_a_128_byte_swizzle_moves_chunk_c_of_row_r_to_chunk_c_xor_r_mod_8() -> None:
    where = swizzled_offsets(8 * 128, 128).reshape(8, 8, 16)
    for row in range(8):
        assert list(where[row, :, 0] // 16 % 8) == [c ^ row for c in range(8)]


def test_the_64_byte_swizzle_splits_a_64_column_tile_into_two_boxes() -> None:
    """A box row may not exceed the swizzle span (cuTensorMapEncodeTiled's rule): 64 bf16 are 128 bytes."""
    assert (Tile(128, "sw64").boxes, Tile(128, "sw64").box_cols) == (2, 32)
    assert (Tile(128, "sw128").boxes, Tile(64, "none").boxes) == (1, 1)
    assert Tile(64, "sw64").tensor_map(4096) == TileMap(4096, 64, 64, 32, 64, 256)
    assert Tile(128, "sw128").tensor_map(4096, promotion=False, box_rows=32) == TileMap(4096, 64, 32, 64, 128, 0)
    with pytest.raises(ValueError, match="no such tile"):
        Tile(96, "none")
    with pytest.raises(ValueError, match="32, 64 or 128"):
        swizzled_offsets(128, 16)


@pytest.mark.parametrize("swizzle", ["none", "sw64", "sw128"])
def test_a_tile_laid_into_shared_memory_is_read_back_whole(swizzle: str) -> None:
    tile = Tile(128, swizzle)
    values = tensor_values(128, 7)
    raw = tile.to_shared(values)
    assert np.array_equal(tile.from_shared(raw), values)
    if swizzle != "none":  # the swizzle does move chunks: reading raw bytes as rows is wrong
        assert not np.array_equal(raw.view(np.uint16).reshape(128, 64), values)
    second = raw[tile.box_bytes :].view(np.uint16)  # box 1 of the 64-byte swizzle: columns 32..63
    if tile.boxes == 2:
        assert sorted(second) == sorted(values[:, 32:].ravel())


def test_every_chunk_of_a_swizzle_pattern_holds_different_values() -> None:
    """A wrongly decoded swizzle must show: no two 16-byte chunks of a 1024-byte span are equal."""
    chunks = tensor_values(64, 3).view(np.uint8).reshape(-1, 64, 16)
    assert all(len({bytes(c) for c in span}) == 64 for span in chunks)


def test_a_chase_tensor_names_each_tiles_successor_at_its_first_element() -> None:
    chain = random_cycle(16, 5)
    tensor = chase_tensor(chain, 64, 9)
    assert list(tiles(tensor, 64)[:, 0, 0]) == list(chain.successor)
    assert tensor.shape == (16 * 64, 64)
    with pytest.raises(ValueError, match="16 bits"):
        chase_tensor(random_cycle(70_000, 1), 64, 1)


def test_a_tiles_word_sum_is_what_a_thread_adds_up_chunk_by_chunk() -> None:
    tensor = tensor_values(128, 11)
    words = tensor.view(np.uint32).reshape(2, -1, 4).astype(np.uint64)
    pairs = ((words[..., 0] + words[..., 1]) % 2**32) + ((words[..., 2] + words[..., 3]) % 2**32)
    assert list(tile_word_sums(tensor, 64)) == [int(p.sum()) for p in pairs]


def test_the_store_kernels_tile_is_its_shared_words_unswizzled() -> None:
    tile = Tile(64, "sw128")
    words = np.arange(tile.bytes // 4, dtype=np.uint32) * np.uint32(0x9E3779B1) + np.uint32(0x5BD1E995)
    assert np.array_equal(tile.to_shared(tile.stored()), words.view(np.uint8))


def test_a_tensor_map_is_passed_as_the_128_bytes_the_kernel_takes() -> None:
    gpu = _gpu()
    buffer = gpu.alloc(64 * 128)
    tmap = gpu.tensor_map(buffer, Tile(64, "none").tensor_map(64))
    signature = ptx_parameters()["gp_tma_chase_x1"]
    args = [tmap, np.uint32(64), np.uint32(0), np.uint32(0), np.uint32(1), buffer]
    check_arguments("gp_tma_chase_x1", args, signature)
    with pytest.raises(ProbeFailure, match="is a tensor map, given uint64"):
        check_arguments("gp_tma_chase_x1", [np.uint64(0), *args[1:]], signature)


# ---- sizing and the plan ------------------------------------------------------------------------


def test_the_streams_read_dram_from_four_l2_sizes_and_l2_from_half_of_it() -> None:
    assert tensor_rows(Settings(), H200, "dram") * 128 == 4 * H200.l2_bytes
    assert tensor_rows(Settings(), H200, "l2") * 128 == H200.l2_bytes // 2
    short, long = stream_steps(Settings(), "dram", 4 * H200.l2_bytes // 16384, 396)
    assert short >= 8 and long > 3 * short  # a DRAM run: half a pass, then two


def test_the_family_fits_its_time_budget_on_an_h200() -> None:
    """25 s for every TMA probe on an H200 (the chases at twice an L2 miss's or DRAM access's worst per tile,
    the streams at half the DRAM peak, the two stream tensors made once), and the bound can fail."""
    work = plan(Settings(), H200)
    assert work.probes == len(PROBES) and family_seconds(work) < 25.0
    greedy = plan(dataclasses.replace(Settings(), dram_l2_multiple=80.0), H200)
    assert family_seconds(greedy) > 25.0


# ---- the kernels' contracts ----------------------------------------------------------------------


def test_tma_is_sm_90_and_later_and_multicast_sm_90a_and_sm_100a() -> None:
    probes = [p for p in all_probes() if p.family == "tma"]
    cast = {p.name for p in probes if ".unicast." in p.name or ".multicast." in p.name}
    for arch, supported in (("sm_89", set()), ("sm_90", {p.name for p in probes} - cast), ("sm_120", None),
                            ("sm_90a", {p.name for p in probes})):  # fmt: skip
        results = {r.probe: r for r in contract_results(probes, [parse_arch(arch)])}
        expected = supported if supported is not None else {p.name for p in probes} - cast
        assert {n for n, r in results.items() if r.status == "ok"} == expected, arch
        assert all("does not target" in r.detail for n, r in results.items() if n not in expected)


def test_a_chase_that_waits_with_try_wait_breaks_the_clock_bracket(tmp_path: Path) -> None:
    """ptxas moves try_wait's retry out of line, past the second clock read: the chase polls with test_wait."""
    old = "mbarrier.test_wait.parity.shared::cta.b64 %p6"
    broken = mutant_violations(tmp_path, "tma.latency.none", "sm_90", old, old.replace("test_wait", "try_wait"))
    assert any("clock reads bracketing" in rule for rule in broken), broken


def test_a_tile_moved_by_a_bulk_copy_breaks_the_contract(tmp_path: Path) -> None:
    """A 1-D bulk copy of the same bytes is not a tensor-map load: no UTMALDG, an unannounced UBLKCP."""
    old = "cp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes [%r8], [%rd1, {0, %r13}]"
    new = "cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes [%r8], [%rd2], %r10"
    broken = mutant_violations(tmp_path, "tma.latency.sw128", "sm_90a", old, new)
    assert any("UTMALDG" in rule and rule.startswith("count") for rule in broken), broken


def test_a_store_stream_that_does_not_wait_breaks_the_contract(tmp_path: Path) -> None:
    """Without wait_group 0 the block may end before its stores are done: the events would time less."""
    old = "\tcp.async.bulk.wait_group 0;             // every store complete, its writes made\n"
    broken = mutant_violations(tmp_path, "tma.store.sw128", "sm_100a", old, "")
    assert any("DEPBAR" in rule for rule in broken), broken


def test_a_multicast_kernel_that_does_not_multicast_breaks_the_contract(tmp_path: Path) -> None:
    old = "mbarrier::complete_tx::bytes.multicast::cluster [%r22], [%rd1, {0, %r23}], [%r21], %h1;"
    new = "mbarrier::complete_tx::bytes [%r22], [%rd1, {0, %r23}], [%r21];"
    broken = mutant_violations(tmp_path, "tma.multicast.c2", "sm_90a", old, new)
    assert any("MULTICAST" in rule for rule in broken), broken


# ---- measured on the simulated GPU ---------------------------------------------------------------


def test_every_probe_measures_and_checks_itself_on_the_simulated_gpu() -> None:
    measured = _run(_gpu())
    assert all(m.outcome.status == "ok" for m in measured.values()), {
        n: m.outcome.detail for n, m in measured.items() if m.outcome.status != "ok"
    }
    declared = {f for p in all_probes() if p.family == "tma" for f in p.facts}
    facts = _facts(measured)
    assert set(facts) == declared
    l2, dram = (facts[fact_id("load", level, Tile(128, "sw128"), True, "latency")].value for level in ("l2", "dram"))
    assert l2 < dram
    assert facts["tma.multicast.c4.l2.speedup"].value == pytest.approx(model(_gpu()).multicast_gain[4], rel=0.1)
    checks = [c for check in tma.INVARIANTS for c in check(facts, H200)]
    assert checks and all(ok for _, ok, *_ in checks), [c for c in checks if not c[1]]


@pytest.mark.parametrize(
    ("corrupt", "probe", "what"),
    [
        ("swizzle", "tma.latency.sw128", "once the swizzle is decoded"),
        ("swizzle", "tma.bandwidth.sw64", "block 0's last 64x64 (sw64)"),
        ("chase", "tma.latency.none", "host predicted"),
        ("sums", "tma.bandwidth.none", "added up"),
        ("sums", "tma.multicast.c2", "added up"),
        ("store", "tma.store.sw128", "stored 64x64 (sw128) tile 0"),
    ],
)
def test_a_wrong_result_fails_the_probe_with_no_facts(corrupt: str, probe: str, what: str) -> None:
    gpu = _gpu()
    model(gpu).corrupt = corrupt
    measured = _run(gpu, runnable={probe})[probe]
    assert measured.outcome.status == "failed" and what in measured.outcome.detail, measured.outcome.detail
    assert measured.facts == []


def test_a_multicast_without_its_unicast_baseline_reports_no_speed_up() -> None:
    measured = _run(_gpu(), runnable={"tma.multicast.c2"})["tma.multicast.c2"]
    speedups = [f for f in measured.facts if f.id.endswith(".speedup")]
    assert speedups and all(f.value is None and "tma.unicast.c2 was not measured" in f.detail for f in speedups)


def test_the_invariants_catch_an_impossible_multicast_and_a_dram_faster_than_l2() -> None:
    def one(fact_id_: str, value: float) -> Fact:
        return Fact(fact_id_, value, "x")

    tile = Tile(64, "none")
    given = [one("tma.multicast.c2.l2.speedup", 2.5), one(fact_id("load", "l2", tile, True, "latency"), 900.0),
             one(fact_id("load", "dram", tile, True, "latency"), 800.0)]  # fmt: skip
    facts = {f.id: f for f in given}
    failed = {name for check in tma.INVARIANTS for name, ok, *_ in check(facts, H200) if not ok}
    assert failed == {"tma.multicast_at_most_cluster_size.c2.l2", "tma.l2_beats_dram.latency.64x64.none"}


def _gbps(fact_id_: str, value: float, half_ci: float = 50.0) -> Fact:
    return Fact(fact_id_, value, "GB/s", (value - half_ci, value + half_ci), verdict="pass")


# The H200 run's reads (reports/nvidia-h200/results.json): what every TMA load stream is held under.
H200_READS = {"bandwidth.l2_read.v16": 8796.0, "bandwidth.dram_theoretical": 4814.0}


def test_every_tma_load_stream_is_held_to_the_runs_read_of_its_source() -> None:
    """Each load stream (every tile, swizzle and promotion) names its rate and the read of its level; the unicast
    clusters are held to the L2 read at either tensor (every block's load is an L2 request); multicast and store
    rates are not read rates and are not held. Under reads faster than anything the simulated part moved, all
    hold."""
    measured = _facts(_run(_gpu(), runnable={"tma.bandwidth.none", "tma.unicast.c2", "tma.multicast.c2",
                                             "tma.store.none"}))  # fmt: skip
    reads = {fact_id_: _gbps(fact_id_, 10 * value) for fact_id_, value in H200_READS.items()}  # above all it moved
    checks = tma.source_invariants({**measured, **reads}, H200)
    held = {fact for c in checks for fact in c.facts} - set(reads)
    assert held == {f for f in measured if f.startswith(("tma.load.", "tma.unicast.")) and f.endswith(".bandwidth")}
    assert all(c.ok and c.physics == c.name.endswith("_within_dram_read") for c in checks)
    assert tma.source_invariants(measured, H200) == []  # no read measured in this run: nothing to hold them to


@pytest.mark.parametrize(
    ("planted", "value", "broken"),
    [(fact_id("load", "l2", Tile(128, "sw128"), True, "bandwidth"), 10500.0, "l2"),
     (fact_id("load", "dram", Tile(64, "none"), False, "bandwidth"), 5000.0, "dram"),
     ("tma.unicast.c4.dram.bandwidth", 10500.0, "l2")],
)  # fmt: skip
def test_a_tma_load_faster_than_its_source_is_impossible(planted: str, value: float, broken: str) -> None:
    """A planted rate above what its level delivers (DRAM's pin rate; 1.15 x the run's L2 read) fails the one check
    that names it (and the L2 read, a consistency check); at that ceiling within the CIs it holds."""
    facts = {fact_id_: _gbps(fact_id_, value_) for fact_id_, value_ in H200_READS.items()}
    facts[planted] = _gbps(planted, value)
    (check,) = tma.source_invariants(facts, H200)
    assert not check.ok and check.name == f"{planted}_within_{broken}_read"
    ceiling_id, headroom = SOURCE_CEILINGS[broken]
    assert set(check.facts) == ({planted} if broken == "dram" else {planted, ceiling_id})
    facts[planted] = _gbps(planted, headroom * facts[ceiling_id].value + 80.0)
    assert all(c.ok for c in tma.source_invariants(facts, H200))


def test_the_sheet_plots_bandwidth_by_tile_and_the_multicast_speed_up() -> None:
    measured = _run(_gpu(), runnable={"tma.bandwidth.sw128", "tma.unicast.c2", "tma.multicast.c2"})
    results = Results(_gpu().device())
    results.facts = list(_facts(measured).values())
    for section in SECTIONS:
        assert section.plot.png(results, 40).startswith(b"\x89PNG"), section.title
    assert all(section.plot.png(Results(_gpu().device()), 40) is None for section in SECTIONS)
