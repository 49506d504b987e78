"""The L2-partition family's host side: plan, checks, clustering, plot, contracts, end to end on the simulated GPU."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest

from gpuprobe.core.arch import SUPPORTED_ARCHS, parse_arch
from gpuprobe.core.results import Device, Results
from gpuprobe.families import l2_partition
from gpuprobe.families.base import Request
from gpuprobe.families.l2_partition import (
    GROUP_LINES,
    PROBE,
    SECTIONS,
    TIMED,
    ProbeFailure,
    Readings,
    Settings,
    block_shared_bytes,
    cycle_layout,
    group_of,
    heatmap_png,
    heatmap_series,
    measure,
    partition_map,
    plan,
    simulated,
    two_means_threshold,
)
from gpuprobe.kernels.check import check_probe
from gpuprobe.kernels.cubin import build_ptx
from gpuprobe.kernels.registry import PTX_DIR, find_probe
from gpuprobe.measure.plan import family_seconds
from gpuprobe.simulated.gpu import KIB, MIB, measure_family, ptx_parameters, simulated_gpu
from tests.helpers.devices import H100_SXM

FAST = Settings(rounds=8)


def _run(gpu, settings=FAST):
    return measure_family(l2_partition, gpu, {PROBE}, settings)[PROBE]


def _facts(measured) -> dict:
    return {f.id: f for f in measured.facts}


# ---- the plan ----------------------------------------------------------------------------------------


def test_each_group_is_one_cycle_through_its_own_lines_from_its_first() -> None:
    layout = cycle_layout(6, Settings())
    assert layout.lines == 6 * GROUP_LINES
    assert layout.nbytes == (6 * GROUP_LINES + 1) * 128
    for group in range(6):
        first = group * GROUP_LINES
        line, visited = first, []
        for _ in range(GROUP_LINES):
            visited.append(line)
            line = int(layout.successor[line])
        assert line == first  # one cycle, back at the start
        assert sorted(visited) == list(range(first, first + GROUP_LINES))
        assert list(layout.order[group]) == visited
        assert list(layout.timed_lines(group)) == visited[:TIMED]
        assert layout.end_line(group) == visited[-1]  # 16 loads from the first line end on the 17th


def test_every_round_gives_each_block_its_own_group_and_rounds_rotate_them() -> None:
    groups = 10
    for round_ in range(4):
        assert sorted(group_of(b, round_, groups) for b in range(groups)) == list(range(groups))
    assert len({group_of(3, r, groups) for r in range(groups)}) == groups


def test_one_block_per_sm_by_shared_memory() -> None:
    h100 = Device("H100", "9.0", "sm_90", 132, 50 * MIB, shared_per_sm_bytes=228 * KIB,
                  shared_per_block_optin_bytes=227 * KIB)  # fmt: skip
    assert 114 * KIB < block_shared_bytes(h100) <= 227 * KIB
    t4 = dataclasses.replace(h100, shared_per_sm_bytes=64 * KIB, shared_per_block_optin_bytes=64 * KIB)
    assert 32 * KIB < block_shared_bytes(t4) <= 64 * KIB
    with pytest.raises(ProbeFailure, match="no shared memory per SM"):
        block_shared_bytes(dataclasses.replace(h100, shared_per_sm_bytes=None))
    with pytest.raises(ProbeFailure, match="exceed"):
        block_shared_bytes(dataclasses.replace(h100, shared_per_block_optin_bytes=48 * KIB))


# ---- the analysis ------------------------------------------------------------------------------------


def test_two_means_cuts_between_two_clusters() -> None:
    values = np.concatenate([np.full(50, 265.0), np.full(30, 475.0), [270.0, 480.0]])
    assert 270.0 < two_means_threshold(values) < 475.0


def _synthetic(split: bool, sms: int = 20, lines: int = 200, per_sm: int = 60, seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    side = rng.integers(0, 2, sms)
    home = rng.integers(0, 2, lines)
    readings = Readings([], [], [])
    for s in range(sms):
        chosen = rng.choice(lines, per_sm, replace=False)
        if split:
            cycles = np.where(home[chosen] == side[s], 265.0, 475.0) * (1 + 0.02 * rng.standard_normal(per_sm))
        else:
            cycles = 270.0 * (1 + 0.03 * rng.standard_normal(per_sm))
        readings.extend(s, chosen, cycles)
    return readings, side, home


def test_a_split_l2_is_found_with_its_sm_sides_and_line_homes() -> None:
    readings, side, home = _synthetic(split=True)
    result = partition_map(readings, Settings())
    assert result.partitions == 2
    assert result.consistency == 1.0
    same = np.array_equal(result.side, side[result.sms])
    assert same or np.array_equal(result.side, 1 - side[result.sms])  # the labels may swap, together
    assert np.array_equal(result.home, home[result.lines] if same else 1 - home[result.lines])


def test_one_cluster_of_latencies_is_one_partition() -> None:
    readings, _, _ = _synthetic(split=False)
    result = partition_map(readings, Settings())
    assert result.partitions == 1
    assert result.near.all() and not result.side.any()


def test_latencies_that_vary_by_sm_and_line_without_two_sides_are_one_partition() -> None:
    """An L40-like spread (each SM and each slice a little nearer or farther) is not a split."""
    gpu = simulated.configure(simulated_gpu(sm_count=24), split=False)
    measured = _run(gpu)
    assert measured.outcome.status == "ok"
    facts = _facts(measured)
    assert facts["l2.partition_count"].value == 1.0
    assert "l2.far_latency" not in facts and "l2.partition_sm_fraction" not in facts
    assert facts["l2.near_line_fraction"].value == 1.0
    assert facts["l2.near_latency"].value == pytest.approx(simulated.UNSPLIT, rel=0.08)


def _mapped(latency, rounds: int, sms: int = 24, seed: int = 0) -> Readings:
    """Readings laid out as the probe lays them out (each round one group per SM, SMs in a random
    order), with ``latency(sm, lines, rng)`` giving each group's cycles."""
    rng = np.random.default_rng(seed)
    layout = cycle_layout(sms, Settings())
    readings = Readings([], [], [])
    for round_ in range(rounds):
        order = rng.permutation(sms)
        for block in range(sms):
            lines = layout.timed_lines(group_of(block, round_, sms))
            readings.extend(int(order[block]), lines, latency(int(order[block]), lines, rng), round_)
    return readings


def _noisy(cycles: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    return cycles * (1 + 0.03 * rng.standard_normal(len(cycles)))


@pytest.mark.parametrize("rounds", [2, 16])
@pytest.mark.parametrize(
    "pattern",
    [
        pytest.param(lambda sm, lines: np.where(lines % 10 < 3, 700.0, 270.0), id="lines_that_miss_l2"),
        pytest.param(lambda sm, lines: np.full(len(lines), 470.0 if sm < 6 else 270.0), id="a_slow_gpc"),
    ],
)
def test_two_latency_clusters_that_one_factor_explains_are_one_partition(pattern, rounds: int) -> None:
    """Lines slow for every SM, or SMs slow on every line: two clusters, no sides. With two rounds (each
    line read by two SMs) the side x home fit also explains them all: only the single-factor model
    shows it adds nothing."""
    result = partition_map(_mapped(lambda sm, lines, rng: _noisy(pattern(sm, lines), rng), rounds), Settings())
    assert result.ratio > 1.5 and result.consistency > 0.95
    assert result.partitions == 1, result.reason
    assert result.interaction <= result.chance


@pytest.mark.parametrize("rounds", [2, 16])
def test_two_latency_levels_at_random_are_one_partition(rounds: int) -> None:
    """62% fast at random: with two rounds the fit still explains ~80% of such readings (the first rule's
    90% bar was not far), but no more than on relabelled copies of the same readings."""

    def latency(sm: int, lines: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        return _noisy(np.where(rng.random(len(lines)) < 0.62, 270.0, 470.0), rng)

    result = partition_map(_mapped(latency, rounds), Settings())
    assert result.partitions == 1, result.reason
    assert result.interaction <= result.chance


def test_a_few_stalled_readings_do_not_take_the_slow_cluster() -> None:
    """Five readings stalled a millionfold among 1200: on the raw scale they would be the slow cluster
    on their own, near and far the fast one, and the split lost."""
    readings, _, _ = _synthetic(split=True)
    readings.cycles[:5] = [3e8] * 5
    result = partition_map(readings, Settings())
    assert result.partitions == 2
    assert 0.4 < result.fast_fraction < 0.6
    assert two_means_threshold(np.asarray(readings.cycles)) > 1e6  # what a cut on the raw scale does


# ---- end to end on the simulated GPU -----------------------------------------------------------------


def test_a_split_l2_is_mapped_on_the_simulated_gpu() -> None:
    gpu = simulated.configure(simulated_gpu(sm_count=24), split=True)
    measured = _run(gpu)
    assert measured.outcome.status == "ok", measured.outcome.detail
    facts = _facts(measured)
    assert facts["l2.partition_count"].value == 2.0
    assert facts["l2.near_latency"].value == pytest.approx(simulated.NEAR, rel=0.03)
    assert facts["l2.far_latency"].value == pytest.approx(simulated.FAR, rel=0.03)
    assert facts["l2.near_line_fraction"].value == pytest.approx(0.5, abs=0.15)
    assert facts["l2.partition_sm_fraction"].value == pytest.approx(0.5)
    assert facts["l2.partition_consistency"].value > 0.95
    sides = measured.outcome.series["sides"]
    found = {int(s): int(x) for s, x in zip(sides["sm_id"], sides["side"], strict=True)}
    assert set(found) == set(simulated.sm_ids(24))  # every SM is on the map, by its %smid
    truth = {s: simulated.side_of(s) for s in found}
    assert found == truth or found == {s: 1 - x for s, x in truth.items()}
    assert {f.id for f in measured.facts} == set(find_probe(PROBE).facts)


@pytest.mark.parametrize("rounds", [2, 16])
def test_a_split_l2_with_lines_near_from_both_sides_is_two_partitions_at_any_reading_count(rounds: int) -> None:
    """The H200's case, simulated on its 132 SMs: about a third of the address blocks read near from
    every SM, so ~65% of the readings are fast and no two-sided model explains them all. Two rounds
    (the smoke run's 3960 readings) and sixteen (the full run's 31680) give the same answer; the
    consistency at sixteen falls below the 90% the old rule asked for, as the H200's full run did."""
    gpu = simulated.configure(simulated_gpu(sm_count=132), split=True, both_sides=0.3)
    measured = _run(gpu, Settings(rounds=rounds))
    assert measured.outcome.status == "ok", measured.outcome.detail
    facts = _facts(measured)
    assert facts["l2.partition_count"].value == 2.0, measured.outcome.detail
    assert facts["l2.near_latency"].value == pytest.approx(simulated.NEAR, rel=0.03)
    assert facts["l2.far_latency"].value == pytest.approx(simulated.FAR, rel=0.03)
    assert facts["l2.near_line_fraction"].value == pytest.approx(0.5, abs=0.2)
    if rounds == 16:
        assert facts["l2.partition_consistency"].value < 0.9
        assert facts["l2.near_line_fraction"].value == pytest.approx(0.5, abs=0.1)
        sides = measured.outcome.series["sides"]
        found = {int(s): int(x) for s, x in zip(sides["sm_id"], sides["side"], strict=True)}
        agree = np.mean([found[s] == simulated.side_of(s) for s in found])
        assert max(agree, 1 - agree) > 0.95


def test_sms_that_read_the_far_half_at_near_latency_leave_the_split_standing() -> None:
    """A GPC close to both halves (far read at 300 cycles, inside the near cluster): its SMs' readings
    fit no side, and the rest of the map still shows the split."""
    gpu = simulated.configure(simulated_gpu(sm_count=24), split=True, close_gpcs=(1,))
    measured = _run(gpu)
    facts = _facts(measured)
    assert facts["l2.partition_count"].value == 2.0, measured.outcome.detail
    assert facts["l2.partition_consistency"].value < 0.95


def test_a_split_with_over_a_third_of_its_blocks_near_from_both_sides_is_still_two_partitions() -> None:
    """So many far reads at near latency that the fit removes well under half of what one factor leaves
    (the rule before the test read that as undecided): still far above what it removes on relabelled
    copies of the same readings, so two partitions, with the interaction's interval to say how well
    the readings pin it down."""
    gpu = simulated.configure(simulated_gpu(sm_count=132), split=True, both_sides=0.35)
    measured = _run(gpu, Settings(rounds=16))
    facts = _facts(measured)
    assert facts["l2.partition_count"].value == 2.0, measured.outcome.detail
    interaction, chance = facts["l2.partition_interaction"], facts["l2.partition_chance"]
    assert interaction.value < 0.5 and interaction.ci[0] <= interaction.value <= interaction.ci[1]
    assert interaction.ci[0] > chance.value
    assert "p < 0.05" in measured.outcome.detail


# ---- the two H200 runs, replayed ------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parents[1]
RUN_1 = ROOT / "tests" / "data" / "h200_first_run_results.json"  # heatmap only (SM x address-bin medians)
RUN_2 = ROOT / "reports" / "nvidia-h200" / "results.json"  # every reading
SMOKE_2 = ROOT / "reports" / "nvidia-h200" / "smoke-results.json"  # run 2's smoke stage: two rounds


def _stored(path: Path) -> dict:
    return json.loads(path.read_text())["probes"][PROBE]["series"]


def _as_run_1_binned(readings: Readings) -> Readings:
    """Readings reduced to what run 1 kept: SM x address-bin medians, lines binned in id order."""
    result = partition_map(readings, dataclasses.replace(Settings(), permutations=1))
    unsplit = dataclasses.replace(result, side=np.zeros_like(result.side), home=np.zeros_like(result.home))
    return Readings.from_heatmap(heatmap_series(readings, unsplit, Settings().heatmap_bins))


@pytest.fixture(scope="module")
def h200_maps() -> dict[str, tuple[Readings, object]]:
    run_2 = Readings.from_series(_stored(RUN_2)["readings"])
    replays = {
        "run 1 (heatmap)": Readings.from_heatmap(_stored(RUN_1)["heatmap"]),
        "run 2 (readings)": run_2,
        "run 2 (binned as run 1)": _as_run_1_binned(run_2),
        "run 2 smoke (readings)": Readings.from_series(_stored(SMOKE_2)["readings"]),
    }
    return {name: (readings, partition_map(readings, Settings())) for name, readings in replays.items()}


def test_both_h200_runs_replayed_give_two_partitions(h200_maps) -> None:
    """Run 1 said 1 partition (a 90 % consistency bar), run 2 said 2 (an interaction bar of 0.5) on the same
    raw shape. Replayed through the test, every stored form of both runs gives 2: run 1's SM x bin medians
    (its interaction 0.17, below both old bars), run 2's 31,680 readings, the same readings reduced to
    run 1's bins, and the smoke stage's 3,960."""
    for name, (_, result) in h200_maps.items():
        assert result.partitions == 2, f"{name}: {result.reason}"
        assert result.interaction > result.chance, name
        assert result.fast_fraction == pytest.approx(0.63, abs=0.05) and result.ratio == pytest.approx(1.64, abs=0.04)
    run_1, run_2 = h200_maps["run 1 (heatmap)"][1], h200_maps["run 2 (readings)"][1]
    assert run_1.interaction < 0.5 and run_1.consistency < 0.9  # what each old bar read as one partition
    assert run_2.interaction > 0.5


def test_both_h200_runs_replayed_give_the_same_latencies(h200_maps) -> None:
    """Near and far latency, and the SMs' spread, agree between the runs within a few cycles (run 1
    published 300 near as one partition: near and far mixed). Where the readings resolve each line's
    home, every SM is near half the lines; a bin's home is the majority of about three groups' homes, so
    the binned forms do not pin that share down."""
    facts = {name: _facts_of(readings, result) for name, (readings, result) in h200_maps.items()}
    reference = facts["run 2 (readings)"]
    assert reference["l2.near_latency"].value == pytest.approx(276.0, abs=2)
    for name, found in facts.items():
        for fact_id, allowed in (("l2.near_latency", 6.0), ("l2.far_latency", 6.0), ("latency.l2.sm_spread", 15.0)):
            assert found[fact_id].value == pytest.approx(reference[fact_id].value, abs=allowed), (name, fact_id)
        if "readings" in name:
            assert found["l2.near_line_fraction"].value == pytest.approx(0.5, abs=0.05), name


def _facts_of(readings: Readings, result) -> dict:
    return {f.id: f for f in l2_partition.map_facts(readings, result, 132)}


def test_every_reading_is_kept_and_reads_back_to_the_same_map() -> None:
    gpu = simulated.configure(simulated_gpu(sm_count=16), split=True)
    measured = _run(gpu)
    series = measured.outcome.series
    readings = Readings.from_series(series["readings"])
    assert len(readings.cycles) == FAST.rounds * 16 * TIMED
    assert sorted(set(readings.round)) == list(range(FAST.rounds))
    assert set(readings.sm) == set(simulated.sm_ids(16))
    assert series["layout"]["line_bytes"] == [128.0] and series["layout"]["base_address"][0] > 0
    again = partition_map(readings, FAST)
    facts = _facts(measured)
    assert facts["l2.partition_count"].value == again.partitions == 2
    assert facts["l2.partition_consistency"].value == again.consistency


def test_without_the_flush_copies_hide_the_far_partition() -> None:
    """Why every round flushes: lines read in an earlier round have copies near both sides."""
    gpu = simulated.configure(simulated_gpu(sm_count=24), split=True)
    flush = gpu.fill
    gpu.fill = lambda buffer, value: None if len(buffer.data) >= 2 * gpu.l2_bytes else flush(buffer, value)
    facts = _facts(_run(gpu))
    assert facts["l2.partition_count"].value == 1.0


@pytest.mark.parametrize(
    ("fault", "message"),
    [
        ("wrong_end", "host predicted"),
        ("duplicate_sm", "not one block on every SM"),
        ("no_wait", "did not wait for the loads"),
    ],
)
def test_a_launch_that_fails_its_check_fails_the_probe_and_gives_no_number(fault: str, message: str) -> None:
    measured = _run(simulated.configure(simulated_gpu(sm_count=16), split=True, fault=fault))
    assert measured.outcome.status == "failed"
    assert message in measured.outcome.detail
    assert measured.facts == []


def test_sm_ids_with_gaps_and_beyond_the_sm_count_are_sms_all_the_same() -> None:
    """The PTX ISA promises no contiguous %smid: the simulated part numbers its 16 SMs up to 17."""
    assert max(simulated.sm_ids(16)) >= 16 and len(set(simulated.sm_ids(16))) == 16
    measured = _run(simulated.configure(simulated_gpu(sm_count=16), split=True))
    assert measured.outcome.status == "ok", measured.outcome.detail
    assert measured.outcome.series["sides"]["sm_id"] == [float(s) for s in simulated.sm_ids(16)]
    assert _facts(measured)["l2.partition_count"].value == 2.0


def test_the_launch_is_cooperative_one_block_per_sm() -> None:
    gpu = simulated.configure(simulated_gpu(sm_count=16))
    seen = []
    launch = gpu._launch

    def recording(kernel, grid, block, args, shared, cooperative):
        if kernel == "gp_l2p_touch":
            seen.append((grid, block, shared, cooperative))
        return launch(kernel, grid, block, args, shared, cooperative)

    gpu._launch = recording
    _run(gpu)
    assert set(seen) == {(16, 32, block_shared_bytes(gpu.device()), True)}
    assert len(seen) == FAST.rounds


def test_the_heatmap_is_drawn_from_the_series() -> None:
    gpu = simulated.configure(simulated_gpu(sm_count=16))
    measured = _run(gpu)
    heatmap = measured.outcome.series["heatmap"]
    assert len(heatmap["sm_rank"]) == len(heatmap["bin"]) == len(heatmap["latency_cycles"])
    assert set(heatmap["sm_rank"]) == set(map(float, range(16)))
    results = Results(gpu.device(), facts=measured.facts, probes={PROBE: measured.outcome})
    png = heatmap_png(results, 60)
    assert png is not None and png.startswith(b"\x89PNG")
    assert heatmap_png(Results(gpu.device()), 60) is None
    assert SECTIONS[0].plot is not None and SECTIONS[0].plot.png is heatmap_png


def test_each_heatmap_cell_is_the_median_of_its_readings_with_sms_ordered_by_side() -> None:
    readings = Readings([], [], [])
    readings.extend(7, np.array([0, 1, 2, 3]), np.array([100.0, 300.0, 200.0, 400.0]))
    readings.extend(3, np.array([0, 1]), np.array([500.0, 600.0]))
    result = partition_map(readings, Settings())
    result = dataclasses.replace(result, side=np.array([1, 0]), home=np.array([0, 0, 1, 1]))  # SM 3 side 1, SM 7 side 0
    rows = heatmap_series(readings, result, bins=2)  # lines 0, 1 in bin 0; lines 2, 3 in bin 1
    cells = {(r, b): (sm, v) for r, sm, b, v in zip(*rows.values(), strict=True)}
    assert cells == {(0.0, 0.0): (7.0, 200.0), (0.0, 1.0): (7.0, 300.0), (1.0, 0.0): (3.0, 550.0)}


def test_the_planned_work_fits_the_time_budget_on_an_h100() -> None:
    """On an H100 (132 SMs, 50 MiB L2): the flushes at half the HBM's peak, the launches and the host's
    analysis of the readings: well under 2 s."""
    work = plan(Settings(), H100_SXM)
    assert work.probes == 1 and work.launches == Settings().rounds * l2_partition.ROUND_CALLS
    assert family_seconds(work, child_start=False) < 2.0


@pytest.mark.parametrize(
    "change", [{"rounds": 1}, {"split_ratio": 1.0}, {"permutations": 0}, {"bootstrap": 0}]
)  # fmt: skip
def test_settings_that_mean_nothing_are_refused(change: dict) -> None:
    with pytest.raises(ValueError, match="Settings"):
        dataclasses.replace(Settings(), **change)


# ---- static: every arch, and contracts that catch a wrong kernel ---------------------------------------


@pytest.mark.parametrize("arch", [a.name for a in SUPPORTED_ARCHS])
def test_the_probe_targets_every_supported_arch(arch: str) -> None:
    assert find_probe(PROBE).supports(parse_arch(arch))


def _variant(tmp_path: Path, old: str, new: str) -> Path:
    text = (PTX_DIR / "l2_partition" / "l2_partition.ptx").read_text()
    assert old in text
    path = tmp_path / "l2_variant.ptx"
    path.write_text(text.replace(old, new))
    return path


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_loads_cached_in_l1_are_caught(tmp_path: Path, arch: str) -> None:
    path = _variant(tmp_path, "\tld.global.cg.u64 %rd6, [%rd6];", "\tld.global.ca.u64 %rd6, [%rd6];")
    result = check_probe(find_probe(PROBE), build_ptx([path], parse_arch(arch)))
    assert result.status == "violated"
    assert "count LDG" in result.detail


@pytest.mark.parametrize("arch", ["sm_80", "sm_90"])
def test_loads_that_do_not_depend_on_each_other_are_caught(tmp_path: Path, arch: str) -> None:
    path = _variant(tmp_path, "\tld.global.cg.u64 %rd6, [%rd6];", "\tld.global.cg.u64 %rd9, [%rd6];")
    result = check_probe(find_probe(PROBE), build_ptx([path], parse_arch(arch)))
    assert result.status == "violated"
    assert "dependent_chain" in result.detail


def _checks(facts: dict, device) -> dict:
    from gpuprobe.families.l2_partition import INVARIANTS

    return {check.name: check for invariant in INVARIANTS for check in invariant(facts, device)}


def test_the_invariants_compare_far_with_near_the_map_with_the_chase_and_the_count_with_the_near_share() -> None:
    gpu = simulated.configure(simulated_gpu(sm_count=16), split=True)
    device = gpu.device()
    facts = _facts(_run(gpu))
    checks = _checks(facts, device)
    assert {name: check.ok for name, check in checks.items()} == {
        "l2_partition.far_above_near": True,
        "l2_partition.near_share_matches_count": True,
        "l2_partition.near_latency_spread_ordered": True,
        "l2_partition.far_latency_spread_ordered": True,
    }  # no chase measured
    assert checks["l2_partition.far_above_near"].facts == ("l2.near_latency", "l2.far_latency")
    near = facts["l2.near_latency"]
    chase = dataclasses.replace(near, id="latency.l2", value=min(near.samples), samples=[])
    assert _checks({**facts, "latency.l2": chase}, device)["l2_partition.near_matches_chase"].ok
    outside = dataclasses.replace(chase, value=max(near.samples) * 1.1)  # above every SM's near latency
    refused = _checks({**facts, "latency.l2": outside}, device)["l2_partition.near_matches_chase"]
    assert not refused.ok and set(refused.facts) == {"l2.near_latency", "latency.l2"}
    slow_near = dataclasses.replace(near, value=600.0, ci=(590.0, 610.0))  # planted: near above far beyond the CIs
    assert not _checks({**facts, "l2.near_latency": slow_near}, device)["l2_partition.far_above_near"].ok
    one = dataclasses.replace(facts["l2.partition_count"], value=1.0)  # one partition, yet SMs near half the lines
    assert not _checks({**facts, "l2.partition_count": one}, device)["l2_partition.near_share_matches_count"].ok
    unsplit = _facts(_run(simulated.configure(simulated_gpu(sm_count=16), split=False)))
    assert set(_checks(unsplit, device)) == {
        "l2_partition.near_share_matches_count",
        "l2_partition.near_latency_spread_ordered",
    }
    fast_max = dataclasses.replace(facts["l2.far_latency.max"], value=facts["l2.far_latency"].value - 1.0)
    assert not _checks({**facts, "l2.far_latency.max": fast_max}, device)["l2_partition.far_latency_spread_ordered"].ok


def test_the_sms_spread_of_near_latency_is_measured() -> None:
    """Each simulated SM reads the L2 up to SM_SPREAD nearer or farther: the spread is the slowest SM's near
    latency minus the fastest's (one SM's latency.l2 says nothing of it)."""
    gpu = simulated.configure(simulated_gpu(sm_count=24), split=True)
    spread = _facts(_run(gpu))["latency.l2.sm_spread"]
    distances = [simulated.sm_distance(s) for s in simulated.sm_ids(24)]
    assert spread.value == pytest.approx(simulated.NEAR * (max(distances) - min(distances)), rel=0.15)
    assert spread.ci[0] <= spread.value <= spread.ci[1] and spread.unit == "cycle"
    assert spread.value > 0.1 * simulated.NEAR


def test_the_fastest_and_slowest_sms_near_and_far_latencies_are_facts_and_every_sms_partition_a_series() -> None:
    """The extremes are the SMs the model places nearest and farthest; each names its SM; the per-SM series
    holds every SM's partition (its side) and near and far medians, the extremes among them."""
    gpu = simulated.configure(simulated_gpu(sm_count=24), split=True)
    measured = _run(gpu)
    facts = _facts(measured)
    ids = simulated.sm_ids(24)
    nearest, farthest = min(ids, key=simulated.sm_distance), max(ids, key=simulated.sm_distance)
    for level, base in (("l2.near_latency", simulated.NEAR), ("l2.far_latency", simulated.FAR)):
        low, middle, high = facts[f"{level}.min"], facts[level], facts[f"{level}.max"]
        assert low.value <= middle.value <= high.value and low.unit == high.unit == "cycle"
        assert low.detail == f"SM {nearest}" and high.detail == f"SM {farthest}"
        assert low.value == pytest.approx(base * simulated.sm_distance(nearest), rel=0.05)
        assert high.value == pytest.approx(base * simulated.sm_distance(farthest), rel=0.05)
    per_sm = measured.outcome.series["per_sm"]
    assert per_sm["sm_id"] == [float(s) for s in ids]
    assert {side: per_sm["partition"].count(side) for side in (0.0, 1.0)} == {0.0: 12, 1.0: 12}
    assert min(per_sm["near_cycles"]) == facts["l2.near_latency.min"].value
    assert max(per_sm["far_cycles"]) == facts["l2.far_latency.max"].value


def test_a_probe_whose_contract_failed_is_not_launched() -> None:
    gpu = simulated.configure(simulated_gpu(sm_count=16))
    assert list(measure(Request(gpu, ptx_parameters(), gpu.device(), set(), FAST))) == []
    assert gpu.launches == []
