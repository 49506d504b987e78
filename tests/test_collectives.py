"""The collectives family: nccl-tests' arithmetic held to nccl-tests' own published output, the host's
prediction of every output element held to collectives done by hand, NCCL's log read, and the family end
to end on a simulated node whose NCCL is NumPy (gpuprobe/simulated/peers.py), corrupted on purpose."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from gpuprobe.core.results import Results
from gpuprobe.families import collectives
from gpuprobe.families.collectives import PROBES, Settings, busbw, nccl_log
from gpuprobe.families.collectives.plot import busbw_png
from gpuprobe.families.collectives.simulated import FAST_SETTINGS
from gpuprobe.runner.peers import ONE_GPU
from gpuprobe.simulated.gpu import SimulatedGpu, measure_family
from gpuprobe.simulated.peers import SimulatedNode
from tests.helpers.devices import H200

# ---- nccl-tests' definitions ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("collective", "ranks", "size", "time_us", "algbw", "busbw_gbps"),
    [
        # NVIDIA/nccl-tests issue #194: all_reduce_perf -g 2 on two NVLink-bridged H100 PCIe
        ("all_reduce", 2, 1073741824, 9306.7, 115.37, 115.37),
        # kvcache-ai/Mooncake pull request #3484: an all_reduce_perf line on 8 GPUs (busbw/algbw = 1.75)
        ("all_reduce", 8, 33554432, 195.40, 171.72, 300.51),
        # ROCm/rccl pull request #2075: broadcast_perf (rccl-tests print nccl-tests' columns)
        ("broadcast", 1, 134217728, 18781, 7.15, 7.15),
        # li-plus/playground cuda/nccl.md: sendrecv_perf -g 8 on A100 (algbw = busbw, as all point-to-point)
        ("broadcast", 8, 1073741824, 5503.4, 195.10, 195.10),
    ],
)
def test_algbw_and_busbw_reproduce_nccl_tests_published_columns(
    collective: str, ranks: int, size: int, time_us: float, algbw: float, busbw_gbps: float
) -> None:
    seconds = time_us * 1e-6
    assert busbw.algbw_gbps(size, seconds) == pytest.approx(algbw, abs=0.006)
    assert busbw.busbw_gbps(collective, size, seconds, ranks) == pytest.approx(busbw_gbps, abs=0.006)


def test_bus_factors_are_nccl_tests_summary() -> None:
    """nccl-tests doc/PERFORMANCE.md, "Summary": AllReduce 2(n-1)/n, ReduceScatter, AllGather and AlltoAll
    (n-1)/n, Broadcast 1."""
    for n in (2, 4, 8, 16):
        assert busbw.BUS_FACTORS["all_reduce"](n) == 2 * (n - 1) / n
        for name in ("reduce_scatter", "all_gather", "all_to_all"):
            assert busbw.BUS_FACTORS[name](n) == (n - 1) / n
        assert busbw.BUS_FACTORS["broadcast"](n) == 1.0
    assert busbw.busbw_gbps("all_gather", 8 * 10**9, 1.0, 8) == pytest.approx(7.0)


def test_a_size_is_laid_out_as_nccl_tests_lays_it_out() -> None:
    assert busbw.layout("all_gather", 8, 8) is None  # 2 elements cannot give 8 ranks a share each
    gather = busbw.layout("all_gather", 100, 4)  # 25 elements: 6 per rank, 24 in all
    assert (gather.count, gather.send_elements, gather.recv_elements, gather.size_bytes) == (6, 6, 24, 96)
    scatter = busbw.layout("reduce_scatter", 1 << 20, 8)
    assert (scatter.count, scatter.send_elements, scatter.recv_elements) == (32768, 262144, 32768)
    assert busbw.layout("all_reduce", 8, 8).count == 2 and busbw.layout("broadcast", 2, 8) is None
    assert busbw.sizes(8, 1 << 30, 2)[:3] == [8, 16, 32] and busbw.sizes(8, 1 << 30, 2)[-1] == 1 << 30
    assert len(busbw.sizes(8, 1 << 30, 2)) == 28


def _by_hand(collective: str, ranks: int, count: int) -> list[np.ndarray]:
    """Each rank's output, by loops over elements: independent of busbw.expected's vector arithmetic."""
    n, c = ranks, count
    inp = [[float((k + r * busbw.RANK_OFFSET) % busbw.PERIOD) for k in range(c * n)] for r in range(n)]
    if collective == "all_reduce":
        return [np.array([sum(inp[r][k] for r in range(n)) for k in range(c)])] * n
    if collective == "broadcast":
        return [np.array(inp[0][:c])] * n
    if collective == "all_gather":
        return [np.array([inp[k // c][k % c] for k in range(c * n)])] * n
    if collective == "reduce_scatter":
        return [np.array([sum(inp[r][q * c + k] for r in range(n)) for k in range(c)]) for q in range(n)]
    return [np.array([inp[k // c][q * c + k % c] for k in range(c * n)]) for q in range(n)]  # all_to_all


@pytest.mark.parametrize("collective", busbw.COLLECTIVES)
def test_every_predicted_output_element_is_the_collective_done_by_hand(collective: str) -> None:
    for ranks in (2, 3):
        plan = busbw.layout(collective, 4 * 5 * ranks, ranks)
        for rank, want in enumerate(_by_hand(collective, ranks, plan.count)):
            indices = np.arange(plan.recv_elements)
            assert np.array_equal(busbw.expected(plan, rank, indices), want), (collective, ranks, rank)


def test_a_corrupted_or_unwritten_output_is_named() -> None:
    plan = busbw.layout("all_reduce", 4096, 4)
    indices = np.arange(plan.recv_elements)
    good = busbw.expected(plan, 1, indices)
    assert busbw.mismatch(plan, 1, indices, good) is None
    wrong = good.copy()
    wrong[700] += 1
    assert "rank 1 element 700 is" in busbw.mismatch(plan, 1, indices, wrong)
    unwritten = good.copy()
    unwritten[-1] = np.nan
    assert "never written" in busbw.mismatch(plan, 1, indices, unwritten)


def test_large_outputs_are_checked_at_both_ends_of_every_share_and_a_spread_sample() -> None:
    plan = busbw.layout("all_gather", 64 << 20, 8)
    indices = busbw.check_indices(plan, 4 << 20, 100, seed=1)
    share = plan.count
    for rank in range(8):
        assert rank * share in indices and (rank + 1) * share - 1 in indices
    assert 100 <= len(indices) <= 116
    small = busbw.layout("all_reduce", 1 << 20, 8)
    assert len(busbw.check_indices(small, 4 << 20, 100, seed=1)) == small.recv_elements


# ---- NCCL's log ------------------------------------------------------------------------------------

LOG = """vm:660:660 [0] NCCL INFO Channel 00/64 : 0
node7:811:811 [0] NCCL INFO Bootstrap : Using ib0:10.0.0.7<0>
node7:811:811 [0] NCCL INFO NCCL version 2.27.7+cuda13.0
node7:811:840 [0] NCCL INFO Using network IB
node7:811:840 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
node7:811:840 [1] NCCL INFO Channel 00/0 : 1[1] -> 2[2] via P2P/CUMEM/read
node7:811:841 [7] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA
node7:811:811 [0] NCCL INFO AllReduce: 8 Bytes -> Algo TREE proto LL channel{Lo..Hi}={0..0}
node7:811:811 [0] NCCL INFO AllReduce: 1073741824 Bytes -> Algo NVLS proto Simple channel{Lo..Hi}={0..15}
node7:811:811 [0] NCCL INFO AllGather: 134217728 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..31} comm 0x5
node7:811:811 [0] NCCL INFO 4194304 Bytes -> Algo 1 proto 2 time 36.000000
node7:811:811 [0] NCCL INFO some line of another shape -> Algo ? proto ?
"""


def test_the_lines_nccl_2_28_wrote_on_the_lent_h200_are_read() -> None:
    """What NCCL 2.28.9 (CuPy 14's binding, one H200, one rank) wrote with NCCL_DEBUG=INFO, verbatim."""
    log = nccl_log.parse(
        "vm:660:660 [0] NCCL INFO NCCL version 2.28.9+cuda13.0\n"
        "vm:660:660 [0] NCCL INFO Failed to initialize NET plugin IB\n"
        "vm:660:660 [0] NCCL INFO Using network Socket\n"
        "vm:660:660 [0] NCCL INFO Channel 00/64 : 0\n"
    )
    assert (log.version, log.network, log.transports, log.choices) == ("2.28.9+cuda13.0", "Socket", [], {})


def test_the_nccl_log_says_version_fabric_and_each_choice() -> None:
    log = nccl_log.parse(LOG)
    assert log.version == "2.27.7+cuda13.0" and log.network == "IB"
    assert log.transports == ["P2P/CUMEM/read", "NET/IB/0/GDRDMA"]
    assert log.fabric() == "transports P2P/CUMEM/read, NET/IB/0/GDRDMA; network IB (between nodes)"
    assert log.choice("all_reduce", 8) == ("TREE", "LL")
    assert log.choice("all_reduce", 1 << 30) == ("NVLS", "SIMPLE")
    assert log.choice("all_gather", 1 << 27) == ("RING", "SIMPLE")
    assert log.choice("broadcast", 4194304) == ("RING", "SIMPLE")  # NCCL 2.20's numeric form: no function named
    assert log.choice("reduce_scatter", 12) == ("", "")
    assert nccl_log.parse("").fabric() == "not reported"


# ---- the family on a simulated node ---------------------------------------------------------------


def _measure(node: dict, runnable=frozenset(PROBES), settings: Settings = FAST_SETTINGS) -> dict:
    return measure_family(collectives, SimulatedGpu(peer_node=node), set(runnable), settings)


@pytest.fixture(scope="module")
def four() -> dict:
    return _measure({"count": 4})


def test_every_collective_is_timed_checked_and_reported_as_nccl_tests_would(four: dict) -> None:
    node = SimulatedNode(count=4)
    assert {n: m.outcome.status for n, m in four.items()} == dict.fromkeys(PROBES, "ok")
    for name, measured in four.items():
        collective = name.removeprefix("collectives.")
        facts = {f.id: f for f in measured.facts}
        sizes = measured.outcome.series["sizes"]
        largest = sizes["size_bytes"][-1]
        factor = busbw.BUS_FACTORS[collective](4)
        model_s = node.nccl_latency_us * 1e-6 + largest * factor / (node.nccl_busbw_gbps * 1e9)
        modelled = busbw.busbw_gbps(collective, largest, model_s, 4)
        assert facts[f"{name}.busbw"].value == pytest.approx(modelled, rel=0.05)
        assert facts[f"{name}.latency"].value == pytest.approx(node.nccl_latency_us, rel=0.05)
        assert sizes["size_bytes"][0] == (8.0 if collective in ("all_reduce", "broadcast") else 32.0)  # 4 shares
        ratio = np.array(sizes["busbw_gbps"]) / np.array(sizes["algbw_gbps"])
        assert np.allclose(ratio, busbw.BUS_FACTORS[collective](4))
        assert "every size's output checked" in measured.outcome.detail and "P2P/CUMEM/read" in measured.outcome.detail
        assert measured.outcome.series["nccl"]["version"] == ["2.27.7"]
    sizes = four["collectives.all_reduce"].outcome.series["sizes"]
    assert sizes["protocol"][0] == "LL" and sizes["protocol"][-1] == "SIMPLE" and set(sizes["algorithm"]) == {"RING"}
    assert set(four["collectives.all_to_all"].outcome.series["sizes"]["algorithm"]) == {""}  # NCCL does not say


@pytest.mark.parametrize(
    ("corrupt", "detail"),
    [("nccl:all_reduce", "rank 3 element"), ("nccl:all_to_all", "rank 3 element"),
     ("nccl-short:reduce_scatter", "never written")],
)  # fmt: skip
def test_a_wrong_result_fails_its_collective_and_gives_no_number(corrupt: str, detail: str) -> None:
    name = f"collectives.{corrupt.split(':')[1]}"
    measured = _measure({"count": 4, "corrupt": corrupt})
    assert measured[name].outcome.status == "failed" and detail in measured[name].outcome.detail
    assert measured[name].facts == []
    assert all(m.outcome.status == "ok" for n, m in measured.items() if n != name)


def test_one_rank_never_pretends_to_measure_an_interconnect() -> None:
    measured = _measure({"count": 1})
    assert {n: (m.outcome.status, m.outcome.detail) for n, m in measured.items()} == dict.fromkeys(
        PROBES, ("not_run", ONE_GPU)
    )
    assert not any(m.facts for m in measured.values())


def test_without_the_nccl_library_each_collective_says_so() -> None:
    measured = _measure({"count": 2, "nccl": False})
    for outcome in (m.outcome for m in measured.values()):
        assert outcome.status == "not_run" and "pip install 'gpuprobe[nccl]'" in outcome.detail


def test_the_settings_choose_the_collectives_and_sizes() -> None:
    settings = dataclasses.replace(FAST_SETTINGS, collectives=("broadcast",), max_bytes=512)
    measured = _measure({"count": 2}, settings=settings)
    assert {n: m.outcome.status for n, m in measured.items()} == {n: "not_run" for n in PROBES} | {
        "collectives.broadcast": "ok"
    }  # every probe answers (a measuring process must report each it was given), the rest not run and why
    assert measured["collectives.all_gather"].outcome.detail == "not among the collectives the settings chose"
    assert measured["collectives.broadcast"].outcome.series["sizes"]["size_bytes"] == [8.0, 32.0, 128.0, 512.0]


def test_the_busbw_plot_is_drawn_from_the_series(four: dict) -> None:
    results = Results(H200, probes={n: m.outcome for n, m in four.items()})
    assert busbw_png(results, 40).startswith(b"\x89PNG")
    assert busbw_png(Results(H200), 40) is None


def test_the_plan_grows_with_the_node_and_the_largest_size() -> None:
    base = collectives.plan(Settings(), H200)
    assert base.probes == len(PROBES)
    assert collectives.plan(Settings(), dataclasses.replace(H200, visible_gpus=8)) == base  # planned_gpus = 8
    assert collectives.plan(Settings(), dataclasses.replace(H200, visible_gpus=1)).launches == 0
    assert collectives.plan(Settings(), dataclasses.replace(H200, visible_gpus=4)).gpu_s < base.gpu_s
    assert collectives.plan(dataclasses.replace(Settings(), max_bytes=1 << 28), H200).gpu_s < base.gpu_s / 3


@pytest.mark.parametrize(
    "change",
    [{"collectives": ("all_reduce", "gather")}, {"min_bytes": 2}, {"size_factor": 1}, {"calls": 0},
     {"planned_gpus": 1}, {"max_bytes": 8 << 30}],
)  # fmt: skip
def test_settings_that_would_mean_nothing_are_refused(change: dict) -> None:
    with pytest.raises(ValueError, match=r"Settings|sizes"):
        dataclasses.replace(Settings(), **change)
