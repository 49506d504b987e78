"""The warp family's host side: the chain replays, the throughput arithmetic, the self-checks, the
run against the simulated GPU, the contracts on every arch, and the time the plan needs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from gpuprobe.core.arch import SUPPORTED_ARCHS, parse_arch
from gpuprobe.core.results import Fact
from gpuprobe.families import warp
from gpuprobe.families.differencing import Lengths
from gpuprobe.families.sampling import Stopping
from gpuprobe.families.warp import simulated
from gpuprobe.kernels.check import check_probe
from gpuprobe.kernels.cubin import build_ptx
from gpuprobe.kernels.registry import PTX_DIR, all_probes, find_probe
from gpuprobe.measure.plan import family_seconds
from gpuprobe.simulated.gpu import measure_family, simulated_gpu
from tests.helpers.checked import contract_results
from tests.helpers.devices import H200

FAST = warp.Settings(short_iterations=2, long_iterations=6, sampling=Stopping(3, 3, 0.01, 0.5), throughput_short=2,
                     throughput_long=6)  # fmt: skip
LANE = np.arange(32)


def _run(gpu, settings=FAST, runnable=None):
    names = set(warp.PROBES) if runnable is None else runnable
    return measure_family(warp, gpu, names, settings)


def test_the_probe_order_is_the_declared_family() -> None:
    declared = {p.name for p in all_probes() if p.family == "warp"}
    assert set(warp.PROBES) == declared


def test_a_step_is_the_long_minus_the_short_chain_over_the_steps_between() -> None:
    lengths = Lengths(8, 72, 32)
    fixed = 75.0  # clock reads, loop edges, the last collective's drain
    assert lengths.per_step(fixed + 8 * 32 * 23.0, fixed + 72 * 32 * 23.0) == pytest.approx(23.0)


@pytest.mark.parametrize(
    ("mode", "b", "c", "expected"),
    [
        ("idx", 5, 31, [5] * 32),  # everyone reads lane 5
        ("up", 1, 0, [0, *range(31)]),  # lane 0 keeps its own
        ("down", 1, 31, [*range(1, 32), 31]),  # lane 31 keeps its own
        ("bfly", 1, 31, list(LANE ^ 1)),
        ("bfly", 1, (32 - 4) << 8 | 31, list(LANE ^ 1)),  # within tiles of 4
        ("down", 2, (32 - 8) << 8 | 31, [lane + 2 if lane % 8 < 6 else lane for lane in range(32)]),
    ],
)
def test_shfl_replays_the_ptx_isa_lane_rules(mode: str, b: int, c: int, expected: list[int]) -> None:
    assert list(warp.shfl(LANE.copy(), mode, np.full(32, b), c)) == expected


def test_ballot_match_and_tile_reduce_replays() -> None:
    bits = np.roll(LANE, -1)  # lane votes bit lane + 1: the ballot rotates right by one
    assert int(warp.ballot(np.full(32, 0b110, dtype=np.uint64), bits)[0]) == 0b11
    groups = np.array([7, 9] * 16, dtype=np.uint64)
    assert set(warp.match_any(groups).tolist()) == {0x55555555, 0xAAAAAAAA}
    ones = np.ones(32, dtype=np.uint64)
    assert list(warp.tile_reduce(ones, 8, 3)) == [8] * 32  # one whole reduction: the tile's sum
    assert list(warp.tile_reduce(ones, 8, 6)) == [64] * 32  # and the next one sums the sums


def test_every_chain_prediction_matches_the_independent_simulation() -> None:
    """The host's replay and the simulated GPU's lane-by-lane one agree for every probe."""
    measured = _run(simulated_gpu(sm_count=2))
    assert {name: m.outcome.status for name, m in measured.items()} == dict.fromkeys(warp.PROBES, "ok")


def test_the_simulated_latencies_and_throughput_are_recovered() -> None:
    measured = _run(simulated_gpu(sm_count=2, noise=0.0))
    facts = {f.id: f for m in measured.values() for f in m.facts}
    assert facts["warp.shfl.idx.latency"].value == pytest.approx(simulated.CYCLES["idx"], rel=0.01)
    assert facts["warp.shfl.partial.latency"].value == pytest.approx(simulated.CYCLES["partial"], rel=0.01)
    assert facts["warp.match.any.latency"].value == pytest.approx(simulated.CYCLES["match"], rel=0.01)
    assert facts["warp.redux.add.latency"].value == pytest.approx(simulated.CYCLES["redux"], rel=0.01)
    for tile in warp.TILES:  # one reduction is log2(tile) steps
        reduce = facts[f"warp.tile.reduce.latency.{tile}"]
        assert reduce.value == pytest.approx(simulated.CYCLES["tile"] * np.log2(tile), rel=0.01)
    one_path = 16 * simulated.IMAD_CYCLES + simulated.BRANCH_CYCLES
    assert facts["warp.divergence.uniform"].value == pytest.approx(one_path, rel=0.01)
    assert facts["warp.divergence.divergent"].value == pytest.approx(one_path + 16 * simulated.IMAD_CYCLES, rel=0.01)
    assert facts["warp.divergence.cost"].value == pytest.approx(16 * simulated.IMAD_CYCLES, rel=0.02)
    assert facts["warp.shfl.bfly.throughput"].value == pytest.approx(32 * simulated.SHFL_PER_CLK, rel=0.02)
    assert facts["warp.shfl.bfly.throughput"].unit == "op/clk/SM"
    assert all(f.unit == "cycle" for i, f in facts.items() if i.endswith(".latency") or ".latency." in i)
    assert set(facts) == {f for p in all_probes() if p.family == "warp" for f in p.facts}


def test_a_lane_that_ends_anywhere_else_fails_its_probe_and_gives_no_number() -> None:
    gpu = simulated_gpu(sm_count=2)
    gpu.warp_corrupt = True
    measured = _run(gpu)
    for name, m in measured.items():
        assert m.outcome.status == "failed", name
        assert m.facts == []
    assert "lane 5 holds" in measured["warp.shfl.idx"].outcome.detail
    assert "host predicts" in measured["warp.shfl.idx"].outcome.detail
    assert "thread 7 summed" in measured["warp.shfl.bfly.throughput"].outcome.detail


def test_each_lane_of_the_divergent_kernel_follows_its_own_path() -> None:
    m, x0 = np.array([3] * 32, dtype=np.uint64), np.arange(32, dtype=np.uint64)
    got = warp.diverge_values(m, x0, split=16, steps=16)
    for lane in (0, 15, 16, 31):  # 16 steps of x = 3x + 1 (lanes below the split) or 3x + 2
        x = lane
        for _ in range(16):
            x = (3 * x + (1 if lane < 16 else 2)) % 2**32
        assert int(got[lane]) == x
    assert not np.array_equal(got, warp.diverge_values(m, x0, split=32, steps=16))


def test_a_divergence_that_costs_nothing_breaks_the_invariant() -> None:
    def fact_of(fact_id: str, value: float) -> Fact:
        return Fact(fact_id, value, "cycle", (value - 1, value + 1))

    cheap = {"warp.divergence.uniform": fact_of("warp.divergence.uniform", 80.0),
             "warp.divergence.divergent": fact_of("warp.divergence.divergent", 60.0)}  # fmt: skip
    assert not warp.divergence_costs(cheap, simulated_gpu().device())[0][1]
    assert warp.divergence_costs({}, simulated_gpu().device()) == []


def test_a_wrong_first_sum_fails_the_redux_probe() -> None:
    gpu = simulated_gpu(sm_count=2)
    gpu.warp_corrupt_sum = True
    measured = _run(gpu, runnable={"warp.redux.add"})
    assert measured["warp.redux.add"].outcome.status == "failed"
    assert "the first sum is" in measured["warp.redux.add"].outcome.detail


def test_throughput_spans_group_warps_by_sm() -> None:
    timing = np.array([[100, 900, 3], [120, 1000, 3], [50, 700, 5]])
    assert warp.sm_spans(timing) == {3: (900.0, 2), 5: (650.0, 1)}


def test_the_throughput_values_follow_the_mask_sequence() -> None:
    one = warp.throughput_values(1, 64, 1)  # the 8 masks xor to 16: lane l holds lane l ^ 16's chains
    assert int(one[0]) == 16 * 16 + 6 and int(one[16]) == 16 * 0 + 6 and int(one[32]) == 16 * 48 + 6
    assert list(warp.throughput_values(1, 64, 2)) == [16 * t + 6 for t in range(64)]


@pytest.mark.parametrize("change", [{"short_iterations": 0}, {"long_iterations": 8}, {"throughput_threads": 48}])
def test_settings_that_would_hang_or_mean_nothing_are_refused(change: dict) -> None:
    with pytest.raises(ValueError, match=r"Settings|Lengths"):
        dataclasses.replace(warp.Settings(), **change)


def test_probes_whose_contract_failed_are_not_launched() -> None:
    gpu = simulated_gpu(sm_count=2)
    measured = _run(gpu, runnable=set(warp.PROBES) - {"warp.match.any"})
    assert "warp.match.any" not in measured
    assert "gp_warp_match_any_lat" not in gpu.launches


def test_every_probe_holds_its_contract_on_every_arch_and_redux_skips_turing() -> None:
    probes = [p for p in all_probes() if p.family == "warp"]
    results = contract_results(probes, SUPPORTED_ARCHS)
    assert all(r.status == "ok" for r in results if not (r.probe == "warp.redux.add" and r.arch == "sm_75")), [
        (r.probe, r.arch, r.detail) for r in results if r.status != "ok"
    ]
    redux_75 = next(r for r in results if r.probe == "warp.redux.add" and r.arch == "sm_75")
    assert redux_75.status == "unsupported"


def _mutated(tmp_path: Path, old: str, new: str, arch: str = "sm_80"):
    text = (PTX_DIR / "warp" / "warp.ptx").read_text()
    assert text.count(old) == 1, old
    path = tmp_path / "warp_mutated.ptx"
    path.write_text(text.replace(old, new))
    return build_ptx([path], parse_arch(arch))


def test_a_chain_one_shuffle_short_breaks_the_contract(tmp_path: Path) -> None:
    module = _mutated(tmp_path, "//@repeat 32\n\tshfl.sync.{OP}.b32", "//@repeat 31\n\tshfl.sync.{OP}.b32")
    result = check_probe(find_probe("warp.shfl.idx"), module)
    assert result.status == "violated"
    assert "== 32" in result.detail and "found 31" in result.detail


def test_a_syncwarp_with_a_run_time_mask_breaks_the_contract(tmp_path: Path) -> None:
    """A register mask makes ptxas check the mask and add a slow path whose branches wrap the clock
    read: exactly why warp.syncwarp times the literal full mask."""
    module = _mutated(tmp_path, "//@repeat 32\n\tbar.warp.sync -1;", "//@repeat 32\n\tbar.warp.sync %r5;", "sm_90")
    result = check_probe(find_probe("warp.syncwarp"), module)
    assert result.status == "violated"


def test_a_branch_the_whole_warp_takes_alike_breaks_the_divergence_contract(tmp_path: Path) -> None:
    """Split on the parameter instead of the lane: the branch is uniform, ptxas sets up no
    reconvergence, and the kernel would time no divergence at all."""
    module = _mutated(tmp_path, "setp.lt.u32 %p3, %r3, %r1;", "setp.lt.u32 %p3, %r2, %r1;")
    result = check_probe(find_probe("warp.divergence"), module)
    assert result.status == "violated" and "BSSY" in result.detail


def test_the_planned_work_fits_the_time_budget() -> None:
    """Worst case on an H200 (``warp.plan``): every probe takes all its repeats, each a short and a long
    launch, at a pessimistic 200 cycles per collective (the throughput kernel: one warp shuffle per clock
    per SM), with every launcher call's round trip and the host's replay of every chain."""
    plan = warp.plan(warp.Settings(), H200)
    assert plan.probes == len(warp.PROBES)
    total = family_seconds(plan, child_start=False)
    assert total < 4.0, f"the warp family could take {total:.2f} s"
    greedy = warp.plan(dataclasses.replace(warp.Settings(), long_iterations=20_000), H200)
    assert family_seconds(greedy, child_start=False) > 4.0  # the bound counts the kernels: it can fail


def test_the_tile_invariant_holds_on_the_simulated_run_and_catches_a_fall() -> None:
    measured = _run(simulated_gpu(sm_count=2))
    facts = {f.id: f for m in measured.values() for f in m.facts}
    checks = warp.tile_reduce_grows(facts, simulated_gpu().device())
    assert [c.name for c in checks] == ["tile_reduce_grows.4_to_8", "tile_reduce_grows.8_to_16",
                                               "tile_reduce_grows.16_to_32"]  # fmt: skip
    assert all(ok for _, ok, *_ in checks)
    fallen = dataclasses.replace(facts["warp.tile.reduce.latency.32"], value=1.0, ci=(0.9, 1.1))
    broken = warp.tile_reduce_grows({**facts, fallen.id: fallen}, simulated_gpu().device())
    assert [name for name, ok, *_ in broken if not ok] == ["tile_reduce_grows.16_to_32"]
