"""The host-transfer family's host side, end to end against a simulated GPU."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from gpuprobe.core.arch import SUPPORTED_ARCHS, parse_arch
from gpuprobe.core.errors import ProbeFailure
from gpuprobe.families import host_transfer
from gpuprobe.families.host_transfer import (
    PROBES,
    Settings,
    rate_gbps,
)
from gpuprobe.families.host_transfer.simulated import FAST_SETTINGS, link
from gpuprobe.families.planning import Link
from gpuprobe.families.streams import chunk_sums, pattern, stream_sums
from gpuprobe.kernels.contracts import check
from gpuprobe.kernels.cubin import build_ptx
from gpuprobe.kernels.ptxsource import expand
from gpuprobe.kernels.registry import all_probes
from gpuprobe.simulated.gpu import KIB, measure_family, simulated_gpu
from tests.helpers.devices import H200

SMALL = FAST_SETTINGS


def _run(gpu, runnable=frozenset(PROBES), settings=SMALL):
    return measure_family(host_transfer, gpu, runnable, settings)


def _facts(measured) -> dict:
    return {f.id: f for m in measured.values() for f in m.facts}


def test_the_default_plan_copies_64_and_256_mib_with_a_grid_that_divides_them() -> None:
    settings = Settings()
    assert (settings.small_bytes, settings.large_bytes) == (64 << 20, 256 << 20)
    assert settings.large_bytes % settings.iteration_bytes == 0
    assert min(settings.latency_sizes) == 4 and max(settings.latency_sizes) == 64 * KIB


def test_the_family_fits_its_time_budget_on_a_slow_link() -> None:
    """Every copy at the most repeats over a PCIe Gen4 link (pinned 20 GB/s, pageable 6 GB/s) takes under
    3 s (``host_transfer.plan``: its GPU seconds); the budget both families share, the host's pattern, checks
    and launcher calls included, is checked in tests/test_async_copy.py."""
    plan = host_transfer.plan(Settings(), H200)
    assert plan == host_transfer.plan(Settings(), H200, Link(pinned_gbps=20.0, pageable_gbps=6.0))
    assert plan.probes == len(PROBES)
    assert plan.gpu_s < 3.0
    slow = host_transfer.plan(Settings(), H200, Link(pinned_gbps=10.0, pageable_gbps=3.0))
    assert slow.gpu_s > 3.0  # the bound does depend on the link


def test_a_rate_is_the_extra_bytes_over_the_extra_time() -> None:
    fixed = 0.02  # ms every call pays, cancelled by the difference
    small, large = fixed + 64e6 / 25e9 * 1e3, fixed + 256e6 / 25e9 * 1e3
    assert rate_gbps(64_000_000, small, 256_000_000, large, 2000.0, "h2d copy") == pytest.approx(25.0)


@pytest.mark.parametrize(
    ("small_ms", "large_ms", "match"),
    [(2.0, 1.5, "not positive"), (1.0, 1.0001, "under 100 ticks of CUDA events"), (1.0, 1.06, "beyond any link")],
)
def test_a_timing_no_link_could_give_fails(small_ms: float, large_ms: float, match: str) -> None:
    with pytest.raises(ProbeFailure, match=match):
        rate_gbps(64 << 20, small_ms, 256 << 20, large_ms, 2000.0, "h2d copy")


def test_each_thread_reports_the_sum_of_its_own_chunks() -> None:
    words = pattern(4 * 4 * 3)  # 3 threads, 4 chunks each, strided as the kernel strides them
    chunks = chunk_sums(words)
    w = [int(x) for x in words[4:8]]  # the kernels add the words in pairs in 32 bits, then widen
    assert chunks[1] == (w[0] + w[1]) % 2**32 + (w[2] + w[3]) % 2**32 != sum(w)
    assert stream_sums(chunks, threads=3)[1] == chunks[1::3].sum(dtype=np.uint64)
    assert len(set(chunk_sums(pattern(1 << 16)).tolist())) == 1 << 14  # every chunk differs


@pytest.mark.parametrize(
    "change",
    [{"large_bytes": 48 * KIB}, {"small_bytes": 70 * KIB}, {"latency_copies": 0}, {"threads": 0},
     {"chase_iterations": (4, 4)}],
)  # fmt: skip
def test_settings_that_would_mean_nothing_are_refused(change: dict) -> None:
    with pytest.raises(ValueError, match="Settings"):
        dataclasses.replace(SMALL, **change)


def test_simulated_links_are_recovered() -> None:
    gpu = simulated_gpu()
    measured = _run(gpu)
    assert {n: m.outcome.status for n, m in measured.items()} == dict.fromkeys(PROBES, "ok")
    facts = _facts(measured)
    expected = {
        "host.h2d.pinned.bandwidth": 50.0, "host.d2h.pinned.bandwidth": 50.0,
        "host.bidirectional.pinned.bandwidth": 100.0,
        "host.h2d.pageable.bandwidth": 20.0, "host.d2h.pageable.bandwidth": 20.0,
        "host.bidirectional.pageable.bandwidth": 40.0, "host.sm_read.bandwidth": 24.0, "host.sm_write.bandwidth": 26.0,
        "host.sm_bidirectional.bandwidth": 80.0,
    }  # fmt: skip
    for fact_id, value in expected.items():
        assert facts[fact_id].value == pytest.approx(value, rel=0.1), fact_id
        assert facts[fact_id].unit == "GB/s"
    assert facts["host.sm_read.latency"].value == pytest.approx(2600.0, rel=0.05)
    assert facts["host.sm_read.latency"].converted["ns"] == pytest.approx(2600.0 / 1.755, rel=0.05)
    # the simulated copy engine pays 5 us per call: small copies take about that
    assert facts["host.h2d.latency"].value == pytest.approx(5.0, rel=0.1)
    assert facts["host.d2h.latency"].unit == "us"
    assert measured["host_transfer.h2d"].outcome.series["latency"]["size_bytes"][0] == 4.0
    declared = {f for p in all_probes() if p.family == "host_transfer" for f in p.facts}
    assert set(facts) == declared


@pytest.mark.parametrize(("fault", "detail"), [("sums", "thread"), ("data", "destination word")])
def test_a_wrong_copy_fails_every_probe_and_gives_no_number(fault: str, detail: str) -> None:
    gpu = simulated_gpu()
    link(gpu).corrupt = fault
    measured = _run(gpu)
    assert measured["host_transfer.sm_latency"].outcome.status == "ok"  # it copies nothing
    for name in set(PROBES) - {"host_transfer.sm_latency"}:
        assert measured[name].outcome.status == "failed"
        assert detail in measured[name].outcome.detail
        assert measured[name].facts == []


def test_the_sm_copies_go_through_pinned_host_memory() -> None:
    gpu = simulated_gpu()
    _run(gpu, runnable={"host_transfer.h2d"})
    assert len(gpu.pinned) == 1  # the pinned source; the copy's destination is on the device
    assert "gp_ht_sm_copy" in gpu.launches


def test_probes_whose_contract_failed_are_not_launched() -> None:
    gpu = simulated_gpu()
    measured = _run(gpu, runnable={"host_transfer.d2h"})
    assert set(measured) == {"host_transfer.d2h"}


def test_the_family_targets_every_supported_arch() -> None:
    probes = [p for p in all_probes() if p.family == "host_transfer"]
    assert {p.name for p in probes} == set(PROBES)
    assert all(set(p.archs) == set(SUPPORTED_ARCHS) for p in probes)


def mutant_violations(tmp_path: Path, probe_name: str, arch: str, old: str, new: str) -> set[str]:
    """The contract rules (their descriptions) a probe's kernel breaks once ``old`` in its PTX source
    is replaced by ``new``: a wrong kernel the contract must catch. A kernel the source includes (the
    templates of ptx/common/, shared with the p2p family) is mutated in the source as expanded."""
    probe = next(p for p in all_probes() if p.name == probe_name)
    text = probe.source.read_text()
    if old not in text:  # the kernel is a template of ptx/common/: mutate the source as expanded
        text = "\n".join(expand(text, str(probe.source)).lines) + "\n"
    assert old in text, f"{old!r} is not in {probe.source_label}, as written or as expanded"
    mutant = tmp_path / probe.source.name
    mutant.write_text(text.replace(old, new))
    kernel = build_ptx([mutant], parse_arch(arch)).listing.kernel(probe.kernel)
    return {violation.rule for violation in check(kernel, list(probe.contract))}


@pytest.mark.parametrize("arch", ["sm_75", "sm_90"])
def test_a_copy_that_the_cache_could_serve_breaks_the_contract(tmp_path: Path, arch: str) -> None:
    """Without .cv a load may be served by a cached copy, not fetched again over the link."""
    broken = mutant_violations(tmp_path, "host_transfer.h2d", arch, "ld.global.cv.v4.u32", "ld.global.v4.u32")
    assert any("LDG" in rule and "STRONG" in rule for rule in broken), broken
    assert mutant_violations(tmp_path, "host_transfer.h2d", arch, "ld.global.cv.v4.u32", "ld.global.cv.v4.u32") == set()


def test_a_chase_through_host_memory_that_ends_on_the_wrong_node_fails() -> None:
    gpu = simulated_gpu()
    link(gpu).corrupt = "chase"
    measured = _run(gpu, runnable={"host_transfer.sm_latency"})["host_transfer.sm_latency"]
    assert measured.outcome.status == "failed" and "host predicted" in measured.outcome.detail
    assert measured.facts == []


@pytest.mark.parametrize("arch", ["sm_80", "sm_100a"])
def test_a_chase_the_cache_could_serve_breaks_the_contract(tmp_path: Path, arch: str) -> None:
    """Without .cv the chase's loads could hit a cached copy of host memory: not one round trip each."""
    broken = mutant_violations(tmp_path, "host_transfer.sm_latency", arch, "ld.global.cv.u64", "ld.global.u64")
    assert any(rule.startswith("count LDG") for rule in broken), broken
