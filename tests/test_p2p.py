"""The p2p family's host side, end to end against a simulated node of several GPUs (gpuprobe/simulated/peers.py)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpuprobe.core.results import Device, Results, fact_matches
from gpuprobe.families import p2p
from gpuprobe.families.base import Plan
from gpuprobe.families.p2p import PROBES, Settings, pairs
from gpuprobe.families.p2p.plot import heatmaps, matrices_png
from gpuprobe.families.p2p.simulated import FAST_SETTINGS
from gpuprobe.judge.expectations import match_model
from gpuprobe.judge.verdicts import judge_fact
from gpuprobe.kernels.registry import all_probes
from gpuprobe.runner.peers import ONE_GPU
from gpuprobe.simulated.gpu import SimulatedGpu, measure_family
from tests.helpers.devices import H200

NVLINK_GBPS = 380.0  # the simulated node's copy engine one way, every pair (gpuprobe.simulated.peers.SimulatedNode)


def _measure(node: dict, runnable=frozenset(PROBES), settings: Settings = FAST_SETTINGS) -> dict:
    return measure_family(p2p, SimulatedGpu(peer_node=node), set(runnable), settings)


def _facts(measured: dict) -> dict:
    return {f.id: f for m in measured.values() for f in m.facts}


@pytest.fixture(scope="module")
def degraded() -> dict:
    """Four GPUs over NVLink, the link from GPU 1 to GPU 2 at 30 % of the others."""
    return _measure({"count": 4, "slow": {(1, 2): 0.3}})


def test_every_pair_of_a_node_is_measured_and_each_link_is_recovered(degraded: dict) -> None:
    assert {n: m.outcome.status for n, m in degraded.items()} == dict.fromkeys(PROBES, "ok")
    facts = _facts(degraded)
    for pair in pairs.ordered_pairs(4):
        scale = 0.3 if pair == (1, 2) else 1.0
        expected = {"ce": NVLINK_GBPS, "ce_bidir": NVLINK_GBPS * 0.97, "sm_read": NVLINK_GBPS * 1.05,
                    "sm_write": NVLINK_GBPS * 0.95}  # fmt: skip
        for kind, gbps in expected.items():
            assert facts[pairs.bandwidth_id(kind, pair)].value == pytest.approx(gbps * scale, rel=0.1), (kind, pair)
        assert facts[pairs.latency_id(pair)].value == pytest.approx(1500.0, rel=0.05)
        assert facts[pairs.latency_id(pair)].converted["ns"] > 0
    assert [facts[f"p2p.nvlinks.{gpu}"].value for gpu in range(4)] == [18.0] * 4
    matrix = degraded["p2p.ce"].outcome.series["matrix"]  # the matrix in the results, row per pair
    row = list(zip(matrix["src"], matrix["dst"], strict=True)).index((1, 2))
    assert matrix["value"][row] == facts["p2p.ce.bandwidth.1_2"].value and matrix["joined"][row] == "nvlink"
    assert len(matrix["src"]) == 12 and set(matrix["unit"]) == {"GB/s"}
    assert (facts["p2p.gpus"].value, facts["p2p.peer_pairs"].value, facts["p2p.nvlink_pairs"].value) == (4, 12, 12)


def test_every_fact_is_one_a_probe_declares_and_every_declaration_is_measured(degraded: dict) -> None:
    for name, measured in degraded.items():
        declared = next(p for p in all_probes() if p.name == name).facts
        ids = [f.id for f in measured.facts]
        assert all(any(fact_matches(d, i) for d in declared) for i in ids), name
        assert all(any(fact_matches(d, i) for i in ids) for d in declared), name


def test_the_degraded_link_is_far_below_its_peers_and_warned_against_the_models_nvlink_figures(degraded: dict) -> None:
    facts = _facts(degraded)
    fractions = {pair: facts[pairs.peers_id("ce", pair)].value for pair in pairs.ordered_pairs(4)}
    assert pairs.far_below(fractions, 0.8) == [((1, 2), pytest.approx(0.3, rel=0.1))]
    model = match_model("", "h100_sxm")
    judged = {i: judge_fact(dataclasses.replace(f), model).verdict for i, f in facts.items()}
    assert judged["p2p.ce.fraction_of_peers.1_2"] == judged["p2p.ce.bandwidth.1_2"] == "warn"
    assert judged["p2p.ce.bandwidth.2_1"] == judged["p2p.ce.fraction_of_peers.2_1"] == "pass"
    assert judged["p2p.nvlinks.3"] == "pass" and judged["p2p.latency.0_1"] == "report"
    assert "OUTSIDE" in judge_fact(dataclasses.replace(facts["p2p.ce.bandwidth.1_2"]), model).detail


def test_a_gpu_with_an_nvlink_down_is_warned() -> None:
    facts = _facts(_measure({"count": 2, "nvlinks_down": {1: 1}}, runnable={"p2p.access"}))
    model = match_model("", "h200")
    assert facts["p2p.nvlinks.1"].value == 17.0 and "17 of 18" in facts["p2p.nvlinks.1"].detail
    assert judge_fact(facts["p2p.nvlinks.1"], model).verdict == "warn"
    assert judge_fact(facts["p2p.nvlinks.0"], model).verdict == "pass"


@pytest.mark.parametrize("count", [1])
def test_one_gpu_measures_no_link_and_fails_nothing(count: int) -> None:
    measured = _measure({"count": count})
    assert {n: (m.outcome.status, m.outcome.detail) for n, m in measured.items()} == dict.fromkeys(
        PROBES, ("not_run", ONE_GPU)
    )
    assert not _facts(measured)
    plain = measure_family(p2p, SimulatedGpu(), set(PROBES), FAST_SETTINGS)  # a GPU that says nothing of a node
    assert {m.outcome.detail for m in plain.values()} == {ONE_GPU}


def test_pcie_pairs_are_held_to_pairs_on_the_same_path_only() -> None:
    """Two GPUs bridged by NVLink, the rest PCIe, some under one switch and some across the sockets: no
    pair is far below its own kind, though the kinds differ tenfold."""
    joined = {(0, 1): ("nvlink", "", 380.0), (1, 0): ("nvlink", "", 380.0)}
    for pair in pairs.ordered_pairs(4):
        if pair not in joined:
            joined[pair] = ("pcie", "PIX", 50.0) if set(pair) == {2, 3} else ("pcie", "SYS", 22.0)
    facts = _facts(_measure({"count": 4, "joined": joined}, runnable={"p2p.access", "p2p.ce"}))
    fractions = {pair: facts[pairs.peers_id("ce", pair)].value for pair in pairs.ordered_pairs(4)}
    assert all(f == pytest.approx(1.0, rel=0.1) for f in fractions.values()), fractions
    assert facts["p2p.nvlink_pairs"].value == 2
    assert facts[pairs.bandwidth_id("ce", (2, 3))].value == pytest.approx(50.0, rel=0.1)


def test_pairs_without_peer_access_are_not_run_with_the_reason_and_never_touched() -> None:
    """GPU 0 cannot address GPU 3's memory: no kernel of GPU 0 reads or writes GPU 3 (the simulated GPU
    faults as a real one would), the copy engine still copies between them."""
    measured = _measure({"count": 4, "no_access": {(0, 3)}})
    assert all(m.outcome.status == "ok" for m in measured.values())
    facts = _facts(measured)
    assert facts["p2p.peer_pairs"].value == 11
    for fact_id in ("p2p.sm_read.bandwidth.3_0", "p2p.sm_write.bandwidth.0_3", "p2p.latency.0_3"):
        assert facts[fact_id].value is None and "no peer access" in facts[fact_id].detail, fact_id
        assert judge_fact(facts[fact_id], match_model("", "h100_sxm")).verdict == "not_run"
    assert facts["p2p.ce.bandwidth.0_3"].value == pytest.approx(NVLINK_GBPS, rel=0.1)
    assert facts["p2p.sm_read.bandwidth.0_3"].value is not None  # GPU 3 may address GPU 0


@pytest.mark.parametrize(
    ("corrupt", "probe", "detail"),
    [("ce", "p2p.ce", "checked on GPU"), ("ce", "p2p.ce_bidirectional", "both ways"),
     ("sm_write", "p2p.sm_write", "checked on GPU")],
)  # fmt: skip
def test_bytes_that_did_not_arrive_fail_the_probe_and_give_no_number(corrupt: str, probe: str, detail: str) -> None:
    measured = _measure({"count": 2, "corrupt": corrupt}, runnable={"p2p.access", probe})
    assert measured["p2p.access"].outcome.status == "ok"
    assert measured[probe].outcome.status == "failed" and detail in measured[probe].outcome.detail
    assert measured[probe].facts == []


def test_fraction_of_peers_holds_each_pair_to_the_median_of_its_kind() -> None:
    values = {(0, 1): 100.0, (1, 0): 90.0, (0, 2): 20.0, (2, 0): 10.0, (1, 2): 50.0}
    joined = {(0, 1): "nvlink", (1, 0): "nvlink", (0, 2): "pcie", (2, 0): "pcie", (1, 2): "pcie"}
    fractions = pairs.fraction_of_peers(values, joined)
    assert fractions == {(0, 1): 100 / 95, (1, 0): 90 / 95, (0, 2): 1.0, (2, 0): 0.5, (1, 2): 2.5}
    assert pairs.far_below(fractions, 0.8) == [((2, 0), 0.5)]


def test_pair_ids_round_trip_and_make_matrices() -> None:
    assert pairs.bandwidth_id("ce", (3, 7)) == "p2p.ce.bandwidth.3_7"
    assert pairs.parse("p2p.ce_bidir.bandwidth.10_2") == ("ce_bidir", (10, 2))
    assert pairs.parse("p2p.latency.1_0") == ("latency", (1, 0))
    assert pairs.parse("p2p.ce.fraction_of_peers.0_1") is None and pairs.parse("p2p.gpus") is None
    found = pairs.matrices([("p2p.ce.bandwidth.0_1", 5.0), ("p2p.ce.bandwidth.1_0", 6.0), ("p2p.latency.0_1", None)])
    assert found == {"ce": {(0, 1): 5.0, (1, 0): 6.0}}
    assert pairs.matrix(found["ce"], 2) == [[None, 5.0], [6.0, None]]


def test_the_heatmaps_are_drawn_from_the_facts(degraded: dict) -> None:
    results = Results(H200, facts=list(_facts(degraded).values()))
    maps = heatmaps(results)
    assert list(maps) == ["ce", "ce_bidir", "sm_read", "sm_write", "latency"]
    assert maps["ce"].shape == (4, 4) and np.isnan(maps["ce"][2, 2])
    assert maps["ce"][1, 2] < 0.4 * maps["ce"][2, 1]
    assert matrices_png(results, 40).startswith(b"\x89PNG")
    assert matrices_png(Results(H200), 40) is None


def test_the_plan_counts_every_ordered_pair_of_the_gpus_the_process_sees() -> None:
    """The device record says how many GPUs the run's process sees; a model's record (no GPU at hand) does
    not, and the plan counts ``planned_gpus`` then."""
    small, large = (p2p.plan(dataclasses.replace(Settings(), planned_gpus=n), H200) for n in (2, 8))
    assert small.probes == large.probes == len(PROBES)
    assert large.launches > 20 * small.launches and large.gpu_s > 20 * small.gpu_s
    assert p2p.plan(Settings(), dataclasses.replace(H200, visible_gpus=8)) == large
    assert p2p.plan(Settings(), dataclasses.replace(H200, visible_gpus=1)) == Plan(len(PROBES), 0, 0.0)


@pytest.mark.parametrize(
    "change",
    [{"large_bytes": 24 << 20}, {"small_bytes": 128 << 20}, {"blocks": 0}, {"planned_gpus": 1},
     {"chase_iterations": (3, 3)}, {"threads": 0}],
)  # fmt: skip
def test_settings_that_would_mean_nothing_are_refused(change: dict) -> None:
    with pytest.raises(ValueError, match=r"Settings"):
        dataclasses.replace(Settings(), **change)


def test_the_device_it_is_told_it_measures_does_not_matter() -> None:
    """The node is the process's: the family never reads the run's device record."""
    other = Device("NVIDIA H100 80GB HBM3", "9.0", "sm_90a", 132, 1)
    gpu = SimulatedGpu(peer_node={"count": 2})
    measured = measure_family(p2p, gpu, {"p2p.access"}, FAST_SETTINGS, device=other)
    assert measured["p2p.access"].outcome.status == "ok"
