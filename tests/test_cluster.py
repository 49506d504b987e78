"""The cluster family's host side: the cluster and phase checks, the run against the simulated GPU,
the contracts on sm_90+ and the explicit skip before it, and the time the plan needs."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from gpuprobe.core.arch import SUPPORTED_ARCHS, parse_arch
from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Fact
from gpuprobe.families import cluster
from gpuprobe.families.cluster import simulated
from gpuprobe.families.sampling import Stopping
from gpuprobe.kernels.check import check_probe
from gpuprobe.kernels.cubin import build_ptx
from gpuprobe.kernels.registry import PTX_DIR, all_probes, find_probe, unroll_of
from gpuprobe.measure.plan import family_seconds
from gpuprobe.simulated.gpu import measure_family, simulated_gpu
from tests.helpers.checked import contract_results
from tests.helpers.devices import H200

FAST = cluster.Settings(short_iterations=2, long_iterations=6, clusters=4, sampling=Stopping(3, 3, 0.01, 0.5))


def _run(gpu, settings=FAST, runnable=None):
    names = set(cluster.PROBES) if runnable is None else runnable
    return measure_family(cluster, gpu, names, settings)


def test_the_probe_order_is_the_declared_family() -> None:
    assert set(cluster.PROBES) == {p.name for p in all_probes() if p.family == "cluster"}


def test_the_cluster_check_wants_every_rank_and_every_sum() -> None:
    good = np.array([[500, 3, 10, rank % 4] for rank in range(8)])
    cluster.check_cluster("k", good, 4, 4)  # 1 + 2 + 3 + 4 = 10 and ranks 0..3 twice
    with pytest.raises(ProbeFailure, match="block 5 has rank 2"):
        cluster.check_cluster("k", np.where(np.arange(8)[:, None] == 5, [500, 3, 10, 2], good), 4, 4)
    with pytest.raises(ProbeFailure, match="block 0 summed 9"):
        cluster.check_cluster("k", np.vstack([[500, 3, 9, 0], good[1:]]), 4, 4)


def test_the_simulated_costs_are_recovered() -> None:
    measured = _run(simulated_gpu(sm_count=4, noise=0.0))
    assert {n: m.outcome.status for n, m in measured.items()} == dict.fromkeys(cluster.PROBES, "ok")
    facts = {f.id: f for m in measured.values() for f in m.facts}
    for size in cluster.CLUSTER_SIZES:
        assert facts[f"sync.cluster.latency.{size}"].value == pytest.approx(simulated.cluster_cost(size), rel=0.01)
    assert facts["sync.mbarrier.arrive_wait.latency"].value == pytest.approx(48.0, rel=0.01)
    assert facts["sync.mbarrier.tx.latency"].value == pytest.approx(75.0, rel=0.01)
    assert "4 clusters of 8 blocks" in measured["cluster.bar.8"].outcome.detail


def test_the_grid_is_a_whole_number_of_clusters() -> None:
    gpu = simulated_gpu(sm_count=4)
    _run(gpu, runnable={"cluster.bar.8"})  # the simulation refuses a grid that is not
    assert gpu.launches.count("gp_cluster_bar_8") >= 2 * FAST.sampling.min_repeats


def test_a_block_that_left_early_or_a_lost_arrival_fails_the_probe() -> None:
    gpu = simulated_gpu(sm_count=4)
    gpu.cluster_corrupt = True
    measured = _run(gpu)
    for name, m in measured.items():
        assert m.outcome.status == "failed", name
        assert m.facts == []
    assert "before every block had arrived" in measured["cluster.bar.2"].outcome.detail
    short = FAST.short_iterations * unroll_of("gp_mbar_arrive_wait")  # the first (short) launch already fails
    assert f"after {short} phases" in measured["cluster.mbarrier.arrive_wait"].outcome.detail
    assert f"after {short + 1} phases" in measured["cluster.mbarrier.tx"].outcome.detail


@pytest.mark.parametrize("change", [{"clusters": 0}, {"long_iterations": 8}])
def test_settings_that_mean_nothing_are_refused(change: dict) -> None:
    with pytest.raises(ValueError, match=r"Settings|Lengths"):
        dataclasses.replace(cluster.Settings(), **change)


def test_contracts_hold_from_sm_90_and_older_archs_are_explicitly_unsupported() -> None:
    results = contract_results([p for p in all_probes() if p.family == "cluster"], SUPPORTED_ARCHS)
    for r in results:
        if parse_arch(r.arch).number >= 90:
            assert r.status == "ok", (r.probe, r.arch, r.detail)
        else:
            assert r.status == "unsupported" and "does not target" in r.detail, (r.probe, r.arch)


def _mutated(tmp_path: Path, old: str, new: str):
    text = (PTX_DIR / "cluster" / "cluster.ptx").read_text()
    assert text.count(old) == 1, old
    path = tmp_path / "cluster_mutated.ptx"
    path.write_text(text.replace(old, new))
    return build_ptx([path], parse_arch("sm_90"))


def test_a_relaxed_arrival_is_not_cluster_sync(tmp_path: Path) -> None:
    """cluster.sync() releases: an arrive.relaxed loop drops the fence the contract pins."""
    old = "//@for U in 0 1 2 3 4 5 6 7\n\tbarrier.cluster.arrive.aligned;"
    module = _mutated(tmp_path, old, "//@for U in 0 1 2 3 4 5 6 7\n\tbarrier.cluster.arrive.relaxed.aligned;")
    result = check_probe(find_probe("cluster.bar.4"), module)
    assert result.status == "violated" and "MEMBAR" in result.detail


def test_a_blocking_wait_is_not_the_mbarrier_probe(tmp_path: Path) -> None:
    """try_wait may suspend the thread: the probe times the non-blocking test."""
    arrive = "\t@%p3 mbarrier.arrive.shared::cta.b64 %rd3, [%r8];\n"
    old = arrive + "\tmbarrier.test_wait.shared::cta.b64"
    module = _mutated(tmp_path, old, arrive + "\tmbarrier.try_wait.shared::cta.b64")
    result = check_probe(find_probe("cluster.mbarrier.arrive_wait"), module)
    assert result.status == "violated" and "PHASECHK" in result.detail


def test_the_planned_work_fits_the_time_budget() -> None:
    """Worst case on an H200 (``cluster.plan``): every repeat taken, 2000 cycles a cluster barrier and 500
    an mbarrier phase, every launcher call's round trip."""
    plan = cluster.plan(cluster.Settings(), H200)
    assert plan.probes == len(cluster.PROBES)
    total = family_seconds(plan, child_start=False)
    assert total < 3.0, f"the cluster family could take {total:.2f} s"
    greedy = cluster.plan(dataclasses.replace(cluster.Settings(), long_iterations=20_000), H200)
    assert family_seconds(greedy, child_start=False) > 3.0  # the bound counts the kernels: it can fail


def test_cluster_sync_costs_no_less_than_a_one_warp_block_barrier() -> None:
    device = simulated_gpu().device()
    block = Fact("sync.block.latency.32", 20.0, "cycle", (19.0, 21.0))
    cluster_fact = Fact("sync.cluster.latency.2", 380.0, "cycle", (378.0, 383.0))
    facts = {block.id: block, cluster_fact.id: cluster_fact}
    [(name, ok, detail, *_)] = cluster.cluster_above_block(facts, device)
    assert name == "cluster_sync_above_block_sync" and ok and "sync.block.latency.32 = 20" in detail
    cheap = Fact("sync.cluster.latency.2", 5.0, "cycle", (4.0, 6.0))
    assert not cluster.cluster_above_block({block.id: block, cheap.id: cheap}, device)[0][1]
    assert cluster.cluster_above_block({cheap.id: cheap}, device) == []  # no block barrier measured: no check
