"""The goodput walks (gpuprobe.families.bandwidth.goodput): where each pattern's elements lie, the moved bytes the
measured granules give, the guards, the host's predictions, and every pattern run on the simulated GPU."""

from __future__ import annotations

import numpy as np
import pytest

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Fact, Results
from gpuprobe.families import bandwidth as bw
from gpuprobe.families.bandwidth import goodput as g
from gpuprobe.families.bandwidth import shapes
from gpuprobe.families.bandwidth.patterns import source_words
from gpuprobe.families.bandwidth.report import INVARIANTS, SECTIONS
from gpuprobe.families.planning import dram_peak_gbps
from gpuprobe.kernels.registry import find_probe
from gpuprobe.runner.checked import POISON_BYTE
from tests.helpers.devices import H200
from tests.test_bandwidth import kernels_launched, run_family, small_gpu

POISON = int.from_bytes(bytes([POISON_BYTE]) * 4, "little")


def _offsets(name: str, count: int, index: np.ndarray | None = None, wrap: int = 0) -> np.ndarray:
    return g.WALKS[name].offsets(np.arange(count, dtype=np.int64), index, wrap)


# ---- where the elements lie ----------------------------------------------------------------------------------


def test_each_pattern_puts_its_elements_where_its_name_says() -> None:
    assert list(_offsets("v2.stride1", 4)) == [0, 2, 4, 6]
    assert list(_offsets("v4.stride8", 3)) == [0, 32, 64]  # 4 bytes in each 32-byte sector
    column = _offsets("column.fp32", 2048)
    assert list(column[:3]) == [0, 4096, 8192] and column[32] == 128, "32 rows of a column, then the next column"
    assert column[1024] == 32 * 4096, "32 columns of 32 rows, then the next 32 rows"
    rows = _offsets("misaligned", 64)
    assert rows[32] == 132 and {int(r) % 32 for r in _offsets("misaligned", 32 * 8)[::32]} == set(range(0, 32, 4))
    tile = _offsets("transposed", 1025)
    assert list(tile[:2]) == [0, 128] and tile[32] == 4 and tile[1024] == 4096, "a tile read column by column"
    index = np.array([5, 2, 7], dtype=np.uint32)
    assert list(_offsets("gather.64", 12, index)[::4]) == [5 * 64, 2 * 64, 7 * 64]
    assert list(_offsets("gather.64", 4, index)) == [320, 336, 352, 368], "a row read whole, 16 bytes a lane"
    assert list(_offsets("v4.stride1", 6, wrap=4)) == [0, 4, 8, 12, 0, 4], "an L2 walk wrapped onto its footprint"


def test_the_kernel_shape_words_select_the_same_offsets() -> None:
    """The shifts and masks the kernel gets, applied as the PTX does, give the host's offsets."""
    for name in ("v2.stride1", "column.fp32", "misaligned", "transposed"):
        for wrap in (0, 4):
            walk, j = g.WALKS[name], np.arange(8192, dtype=np.int64)
            row_shift, element_mask, row_mask, column_shift, column_mask, tile_shift, tile_mask = (
                int(v) for v in walk.shape_args(wrap)
            )
            u = j >> row_shift

            def shr(v: np.ndarray, s: int) -> np.ndarray:
                return v >> s if s < 32 else np.zeros_like(v)

            ptx = ((u & row_mask) * walk.pitch + (shr(u, column_shift) & column_mask) * walk.column_step
                   + (shr(u, tile_shift) & tile_mask) * walk.tile_step + (j & element_mask) * walk.width)  # fmt: skip
            assert np.array_equal(ptx, walk.offsets(j, None, wrap)), (name, wrap)


# ---- moved bytes from the measured granules --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "granule", "per_request", "efficiency"),
    [
        ("v4.stride1", 64, False, 1.0),
        ("v2.stride1", 32, True, 1.0),
        ("column.fp32", 64, False, 4 / 64),  # a column wastes the granule but 4 bytes of it
        ("column.fp32", 32, True, 4 / 32),
        ("v4.stride8", 32, True, 1 / 8),  # the partial-sector write: 4 bytes of each sector
        ("transposed", 64, False, 1.0),  # DRAM moves the tile once: its neighbours' columns hit in L2
        ("transposed", 32, True, 1 / 8),  # the L2 serves 32 sectors per request of 32 x 4 bytes
        ("misaligned", 64, False, 128 / 132),  # rows of 128 bytes at a 132-byte pitch, streamed
        ("misaligned", 32, True, 128 / 156),  # 7 of 8 rows straddle one more sector
        ("gather.64", 64, False, 64 / 68),  # a row of 64 bytes and its 4-byte index
        ("gather.4096", 64, False, 4096 / 4100),
    ],
)
def test_moved_bytes_follow_the_granule(name: str, granule: int, per_request: bool, efficiency: float) -> None:
    sweep = g.WalkStream(g.WALKS[name], 8, 256, 4)  # 64 warps x 128 elements x 4 iterations: 2**15 elements
    assert sweep.elements == 1 << 15
    assert sweep.useful_bytes / sweep.moved_bytes(granule, per_request) == pytest.approx(efficiency)


def test_an_l2_gathers_row_indices_count_once_a_pass_however_often_its_rows_are_read_again() -> None:
    """The indices load through L1, so a re-read finds them there: as the simulated GPU (and its fake ncu) count."""
    once, again = (g.WalkStream(g.WALKS["gather.64"], 8, 256, n, repeat=True) for n in (1, 4))
    index = once.walk.index_bytes(once.elements, 32)
    assert index == once.elements // 4 * 4  # 4 elements a row, 4 bytes an index
    assert again.moved_bytes(32, True) - index == 4 * (once.moved_bytes(32, True) - index)


def test_the_matrix_covers_unit_stride_strided_gather_and_a_partial_sector_write_at_every_level() -> None:
    for level_op, patterns in g.MATRIX.items():
        covered = set(patterns) | (set(g.EXISTING) if level_op == "dram_read" else set())
        assert {"v4.stride1", "v16.stride1", "column.fp32"} <= covered, level_op
        assert any(p.startswith("gather.") for p in covered), level_op
    for level_op in ("dram_write", "l2_write"):
        assert "v4.stride8" in g.MATRIX[level_op], "4 bytes per 32-byte sector: the partial-sector write"
    assert {"v2.stride1", "misaligned", "transposed", "gather.64", "gather.4096"} <= set(g.READS)


# ---- the host's predictions -------------------------------------------------------------------------------------


def _brute_sums(words: np.ndarray, stream: g.WalkStream, index: np.ndarray | None) -> np.ndarray:
    """Thread by thread, access by access: what the kernel adds."""
    data = words.view(np.uint8)
    sums = np.zeros(stream.warps * 32, dtype=np.uint64)
    for i in range(stream.iters):
        for t in range(stream.warps * 32):
            for k in range(4):
                j = (0 if stream.repeat else i * stream.warps * 128) + 128 * (t // 32) + 32 * k + t % 32
                at = int(stream.walk.offsets(np.array([j]), index, stream.wrap)[0])
                sums[t] += (
                    int.from_bytes(data[at : at + 2], "little")
                    if stream.walk.width == 2
                    else sum(int(words[at // 4 + q]) for q in range(stream.walk.width // 4))
                )
    return (sums & np.uint64(0xFFFFFFFF)).astype(np.uint32)


@pytest.mark.parametrize("name", ["v2.stride1", "v16.stride1", "column.fp32", "misaligned", "transposed",
                                  "gather.256"])  # fmt: skip
@pytest.mark.parametrize("repeat", [False, True])
def test_predicted_sums_match_a_thread_by_thread_walk(name: str, repeat: bool) -> None:
    walk = g.WALKS[name]
    stream = g.WalkStream(walk, 1, 256, 2, repeat=repeat, wrap=2 if repeat else 0)
    words = source_words(1 << 20, 7)
    rows = stream.elements // walk.elements
    index = np.resize(np.random.default_rng(1).permutation(2 if repeat else rows), rows) if walk.gather else None
    index = index.astype(np.uint32) if index is not None else None
    assert np.array_equal(g.expected_sums(words, stream, index), _brute_sums(words, stream, index))


def test_a_partial_sector_write_predicts_the_words_it_must_leave_alone() -> None:
    stream = g.WalkStream(g.WALKS["v4.stride8"], 1, 256, 2)
    value = np.array([11, 12, 13, 14], dtype=np.uint32)
    words = g.written_words(stream, None, value, 64)
    assert list(words[:9]) == [11] + [POISON] * 7 + [11]
    scatter = g.WalkStream(g.WALKS["gather.256"], 1, 256, 1)
    index = np.arange(scatter.elements // 16, dtype=np.uint32)[::-1].copy()
    stored = g.written_words(scatter, index, value, scatter.footprint // 4)
    assert np.array_equal(stored.reshape(-1, 4), np.tile(value, (len(stored) // 4, 1)))


# ---- guards -----------------------------------------------------------------------------------------------------


def _fact(fact_id: str, value: float, low: float | None = None) -> Fact:
    return Fact(fact_id, value, "GB/s", (value if low is None else low, value), [value], {}, "p")


def test_useful_above_moved_or_an_efficiency_out_of_range_fails() -> None:
    with pytest.raises(ProbeFailure, match="cannot deliver more than it moves"):
        g.guard_moved(_fact("x.useful", 100.0), _fact("x.moved", 90.0), 0.9)
    with pytest.raises(ProbeFailure):
        g.guard_moved(_fact("x.useful", 100.0), _fact("x.moved", 200.0), 1.5)
    g.guard_moved(_fact("x.useful", 100.0), _fact("x.moved", 200.0), 0.5)


def test_an_l2_moved_figure_above_the_l2_ceiling_fails() -> None:
    with pytest.raises(ProbeFailure, match="more than the L2 serves"):
        g.guard_l2(_fact("m", 12000.0), 9000.0, "bandwidth.l2_read.v16")
    assert g.guard_l2(_fact("m", 12000.0, low=10000.0), 9000.0, "s").value == 12000.0  # CI reaches below 1.2 x
    assert g.guard_l2(_fact("m", 1e6), None, "s").value == 1e6  # no L2 stream measured: the invariant judges


def test_the_l2_invariant_names_a_moved_figure_above_the_stream() -> None:
    facts = {f.id: f for f in [_fact("bandwidth.l2_read.v16", 9000.0),
                               _fact("bandwidth.goodput.l2_read.gather.64.moved", 20000.0),
                               _fact("bandwidth.goodput.l2_read.v4.stride1.moved", 9000.0)]}  # fmt: skip
    checks = {c.name: c for c in g.l2_moved_checks(facts, H200)}
    assert not checks["bandwidth.goodput_l2_read_gather_64_moved_within_l2"].ok
    assert checks["bandwidth.goodput_l2_read_v4_stride1_moved_within_l2"].ok
    assert g.l2_moved_checks in INVARIANTS


def test_a_dram_walk_above_the_peak_fails_its_probe() -> None:
    """Planted: a datasheet peak of 2900 GB/s under the simulated DRAM's 3000."""
    probe = "bandwidth.goodput.dram_write.v16.stride1"
    measured = run_family(small_gpu(), runnable=[probe], state={"datasheet": {"dram_gbps": 2900.0}})
    outcome = measured[probe].outcome
    assert outcome.status == "failed" and "lies wholly above the datasheet's 2900 GB/s" in outcome.detail


@pytest.mark.parametrize(
    ("probe", "kernel", "message"),
    [
        ("bandwidth.goodput.column.fp32", "gp_bw_walk_v4", "thread sums differ"),
        ("bandwidth.goodput.l2_read.gather.64", "gp_bw_gather_v16", "thread sums differ"),
        ("bandwidth.goodput.dram_write.v4.stride8", "gp_bw_walk_store_b32", "words differ from the host's prediction"),
        ("bandwidth.goodput.l2_write.gather.256", "gp_bw_scatter_b128", "words differ from the host's prediction"),
    ],
)
def test_a_wrong_result_fails_its_walk(probe: str, kernel: str, message: str) -> None:
    measured = run_family(small_gpu(bw_corrupt=kernel), runnable=[probe])
    assert measured[probe].outcome.status == "failed" and message in measured[probe].outcome.detail
    assert measured[probe].facts == []


# ---- every pattern on the simulated GPU -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def walks_run() -> dict:
    return run_family(small_gpu(), runnable=[name for name, _, _ in g.steps()] + ["bandwidth.l2.read.v16"])


def test_every_walk_runs_and_its_moved_bytes_are_physical(walks_run: dict) -> None:
    for name, level_op, _ in g.steps():
        measured = walks_run[name]
        assert measured.outcome.status == "ok", (name, measured.outcome.detail)
        facts = {f.id: f for f in measured.facts}
        useful, moved, share = (facts[f"{name}.{kind}"] for kind in ("useful", "moved", "efficiency"))
        assert 0 < useful.value <= moved.value * (1 + 1e-9) and 0 < share.value <= 1, name
        assert moved.value == pytest.approx(useful.value / share.value)
        series = measured.outcome.series
        assert series["goodput"]["moved_from"] == ["granule"] and series["goodput"]["level_op"] == [level_op]
        claimed = series["launch"][f"{level_op}_bytes"]
        assert claimed[1] > claimed[0] > 0, "the long launch claims more than the short: what witness compares"
        assert "moved derived from the measured" in measured.outcome.detail


def test_the_simulated_granules_are_found_and_shape_the_efficiencies(walks_run: dict) -> None:
    facts = {f.id: f for m in walks_run.values() for f in m.facts}
    assert facts["bandwidth.goodput.l2_read.granule_bytes"].value == 32
    assert facts["bandwidth.goodput.l2_write.granule_bytes"].value == 32
    assert facts["bandwidth.goodput.dram_write.granule_bytes"].value == 32
    assert facts["bandwidth.goodput.column.fp32.efficiency"].value == pytest.approx(4 / 64), "the 64-byte DRAM granule"
    assert facts["bandwidth.goodput.gather.64.efficiency"].value == pytest.approx(64 / 68)
    assert facts["bandwidth.goodput.l2_read.transposed.efficiency"].value == pytest.approx(1 / 8)
    assert facts["bandwidth.goodput.dram_write.v4.stride8.efficiency"].value == pytest.approx(1 / 8)
    # the L2 moves its sectors at its stream's rate whatever the pattern: moved stays near the stream figure
    stream = facts["bandwidth.l2_read.v16"].value
    for level_op in ("l2_read",):
        for pattern in g.MATRIX[level_op]:
            assert facts[f"{g.probe_name(level_op, pattern)}.moved"].value <= g.L2_MARGIN * stream, pattern


def test_the_goodput_plot_draws_every_level(walks_run: dict) -> None:
    results = Results(H200)
    results.facts = [f for m in walks_run.values() for f in m.facts]
    results.probes = {name: m.outcome for name, m in walks_run.items()}
    assert g.goodput_png(results) is not None
    assert g.goodput_png(Results(H200)) is None
    section = next(s for s in SECTIONS if s.title == "Goodput")
    assert section.plot is not None and section.plot.key == "goodput"


# ---- declarations, contracts and the plan -------------------------------------------------------------------


def test_every_walk_is_registered_declared_and_contracted() -> None:
    for name, level_op, pattern in g.steps():
        assert name in bw.PROBES
        probe = find_probe(name)
        walk = g.WALKS[pattern]
        assert probe.kernel == g.kernel_of(walk, level_op.split("_")[1])
        rules = {(r.kind, r.region, r.opcode) for r in probe.contract}
        assert any(kind == "no_local" for kind, _, _ in rules), name
        counted = [opcode for kind, region, opcode in rules if kind == "count" and region == "timed_loop"]
        assert set(counted) - {r"LDG\.E\.CONSTANT(\.SYS)?"}, "four accesses of the width and cache operator announced"
        if walk.gather:
            assert ("count", "timed_loop", r"LDG\.E\.CONSTANT(\.SYS)?") in rules, "the gather's index load"


def test_the_plan_covers_every_walk_and_fits_the_h200() -> None:
    peak = dram_peak_gbps(H200.mem_clock_mhz, H200.mem_bus_bits, {})[0]
    settings = bw.Settings()
    work = g.planned_work(H200, settings, lambda kernel, threads: 2048 // threads, shapes.source_bytes(H200, settings),
                          peak)  # fmt: skip
    swept = {g.probe_name(lo, p) for lo in ("l2_read", "dram_write", "l2_write") for p in g.SWEEP[1:]}
    assert {w.probe for w in work} == {name for name, _, _ in g.steps()} - swept, "a pattern the sweep measured: once"
    sweeps = [w for w in work if w.probe == "bandwidth.goodput.l2_write.v4.stride1" and w.level == "l2"]
    assert len(sweeps) == len(g.SWEEP), "the probe that measures its level's sweep plans every stride"


def test_a_walk_alone_launches_only_its_kernels() -> None:
    gpu = small_gpu()
    run_family(gpu, runnable=["bandwidth.goodput.gather.4096"])
    assert set(kernels_launched(gpu)) == {"gp_bw_read_cg_v16", "gp_bw_pattern_v4", "gp_bw_gather_v16"}


def test_a_first_contact_measures_and_plans_no_walk() -> None:
    """The smoke settings' one probe is no walk; the smoke plan (a bound over every probe) counts none, and a walk
    asked for under them says why it measures nothing."""
    assert g.planned_work(H200, bw.SMOKE.settings, lambda kernel, threads: 8, 1 << 30, 4800.0) == []
    probe = "bandwidth.goodput.l2_read.column.fp32"
    measured = run_family(small_gpu(), runnable=[probe], settings=bw.SMOKE.settings)
    assert "goodput_walks is off" in measured[probe].outcome.detail
