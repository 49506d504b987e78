"""The async-copy family's host side, end to end against a simulated GPU."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import numpy as np
import pytest

from gpuprobe.core.arch import parse_arch
from gpuprobe.core.results import Fact, Results
from gpuprobe.families import async_copy
from gpuprobe.families.async_copy import (
    INVARIANTS,
    PROBES,
    SECTIONS,
    SOURCE_CEILINGS,
    SOURCED_RATES,
    STREAM_CHUNK_BYTES,
    Settings,
    bulk_block_sums,
    measure,
    neighbour_sums,
)
from gpuprobe.families.async_copy.simulated import (
    FAST_SETTINGS,
    copy_bytes_per_clock,
    model,
    probe_ptx,
    shared_accesses,
    wavefronts,
)
from gpuprobe.families.base import Request
from gpuprobe.families.differencing import step_gbps
from gpuprobe.families.streams import chunk_sums, pattern, stream_sums
from gpuprobe.judge.verdicts import mark_impossible
from gpuprobe.kernels.registry import all_probes
from gpuprobe.measure.plan import family_seconds
from gpuprobe.simulated.gpu import KIB, measure_family, ptx_parameters, simulated_gpu
from tests.helpers.checked import contract_results
from tests.helpers.devices import H200
from tests.test_host_transfer import mutant_violations

SMALL = FAST_SETTINGS
COPY_KERNELS = ("gp_ac_copy_cp_async", "gp_ac_copy_plain")
# A simulated memory as fast per SM as an H200's (4.8 TB/s DRAM, ~9 TB/s L2 over 132 SMs) on the 4-SM test part:
# the copies read it more slowly than their banks could take it, as on the H200 once the slots are conflict-free.
H200_PER_SM_MEMORY = {"bw_dram_gbps": 140.0, "bw_l2_gbps": 270.0}


def _gpu(**kwargs):
    return simulated_gpu(sm_count=4, l2_bytes=256 * KIB, **kwargs)


def _run(gpu, runnable=frozenset(PROBES), settings=SMALL):
    device = dataclasses.replace(gpu.device(), shared_per_block_optin_bytes=227 * KIB)  # as an H100 reports
    return measure_family(async_copy, gpu, runnable, settings, device=device)


def _facts(measured) -> dict[str, Fact]:
    return {f.id: f for m in measured.values() for f in m.facts}


def test_a_rate_is_a_steps_bytes_over_its_time() -> None:
    assert step_gbps(3e9, 1.0) == pytest.approx(3000.0)


def test_the_stream_checks_follow_the_kernels_data_layout() -> None:
    words = pattern(4 * 4 * 6)  # 6 threads, 4 chunks each, 16 bytes a chunk
    chunks = chunk_sums(words)
    w = [int(x) for x in words[4:8]]  # the kernels add the words in pairs in 32 bits, then widen
    assert chunks[1] == (w[0] + w[1]) % 2**32 + (w[2] + w[3]) % 2**32 != sum(w)
    sums = stream_sums(chunks, 6)
    assert sums[5] == chunks[5::6].sum()
    assert list(neighbour_sums(sums)[:4]) == [sums[1], sums[0], sums[3], sums[2]]
    per_block = bulk_block_sums(np.arange(10, dtype=np.uint64), blocks=3, steps=4)
    assert list(per_block) == [0 + 3 + 6 + 9, 1 + 4 + 7 + 0, 2 + 5 + 8 + 1]  # (b + k x blocks) mod chunks


def test_both_families_fit_their_time_budget_on_an_h100_class_gpu() -> None:
    """8.5 s for host_transfer and async_copy together on an H200 (``plan``): the streams at half the DRAM peak,
    every chase step at an L2 miss's worst, the host copies over a PCIe Gen4 link (pinned 20 GB/s, pageable
    6 GB/s), the host's own work (patterns, sums, checks: every timed stream launch is read back and checked,
    about 0.5 s of it) and every launcher call and condition snapshot."""
    from gpuprobe.families import host_transfer

    ours = async_copy.plan(Settings(), H200)
    host = host_transfer.plan(host_transfer.Settings(), H200)
    assert ours.probes == len(PROBES) and ours.gpu_s < 3.5 and host.gpu_s < 3.0
    assert family_seconds(ours, child_start=False) + family_seconds(host, child_start=False) < 8.5
    greedy = async_copy.plan(dataclasses.replace(Settings(), dram_l2_multiple=40.0), H200)
    assert family_seconds(greedy, child_start=False) > 8.0  # the bound counts the sources: it can fail


def test_every_stream_reads_one_source_made_once() -> None:
    """A smaller stream reads the first bytes of the largest source made so far: the host generates, sums and
    uploads the pattern once, not once per stream size."""
    gpu = _gpu(noise=0.002)
    _run(gpu, runnable={"async_copy.cp_async.bandwidth", "async_copy.bulk.bandwidth"})
    uploads = [nbytes for nbytes in gpu.allocated if nbytes >= SMALL.dram_min_bytes]
    assert len(uploads) == 1, uploads


@pytest.mark.parametrize(
    "change",
    [{"short_iterations": 0}, {"long_iterations": 32}, {"bulk_points": ((1000, 2),)}, {"bulk_points": ((1024, 9),)},
     {"dram_passes": (2, 2)}, {"dsm_stride": 12}, {"stream_threads": 48}],
)  # fmt: skip
def test_settings_that_would_hang_or_mean_nothing_are_refused(change: dict) -> None:
    with pytest.raises(ValueError, match="Settings"):
        dataclasses.replace(Settings(), **change)


def test_the_bulk_latency_facts_are_the_declared_ones() -> None:
    declared = next(p for p in all_probes() if p.name == "async_copy.bulk.latency").facts
    assert set(declared) == {f"async.bulk.latency.{size}" for size in Settings().bulk_sizes}


def test_simulated_latencies_and_rates_are_recovered() -> None:
    # the simulated sources are tiny: launch jitter would swamp their copy times
    gpu = _gpu(noise=0.002, family_options=H200_PER_SM_MEMORY)
    measured = _run(gpu)
    assert {n: m.outcome.status for n, m in measured.items()} == dict.fromkeys(PROBES, "ok")
    facts = _facts(measured)
    declared = {f for p in all_probes() if p.family == "async_copy" for f in p.facts}
    assert set(facts) == declared
    share = model(gpu).copy_share  # of the simulated memory's read rate: the copies are not bank-bound here
    dram, l2 = H200_PER_SM_MEMORY["bw_dram_gbps"], H200_PER_SM_MEMORY["bw_l2_gbps"]
    expected = {
        "async.cp_async.ca.latency": 60.0, "async.cp_async.cg.latency": 300.0,
        "async.bulk.latency.256": 504.0, "async.bulk.latency.32768": 1012.0,
        "dsmem.latency.own": 32.0, "dsmem.latency.peer": 190.0,
        "async.plain_copy.bandwidth": share["plain"] * dram, "async.cp_async.bandwidth": share["cp_async"] * dram,
        "async.plain_copy.l2_bandwidth": share["plain"] * l2, "async.cp_async.l2_bandwidth": share["cp_async"] * l2,
        "async.bulk.bandwidth": 3200.0, "dsmem.bandwidth.own": 30000.0, "dsmem.bandwidth.peer": 12000.0,
    }  # fmt: skip
    for fact_id, value in expected.items():
        assert facts[fact_id].value == pytest.approx(value, rel=0.06), fact_id
    # the long chases read the clock: cycles come with nanoseconds at the simulated 1755 MHz, even the quickest
    assert facts["async.cp_async.cg.latency"].converted["ns"] == pytest.approx(300.0 / 1.755, rel=0.06)
    assert facts["dsmem.latency.own"].converted["ns"] == pytest.approx(32.0 / 1.755, rel=0.06)
    assert facts["async.cp_async.ca.latency"].converted and facts["async.bulk.latency.256"].converted
    sweep = measured["async_copy.bulk.bandwidth"].outcome.series["sweep"]
    assert sweep["stages"] == [8.0, 2.0, 4.0] and sweep["gbps"][0] < sweep["gbps"][2]


@pytest.mark.parametrize("fault", ["chase", "sums"])
def test_a_wrong_result_fails_its_probe_and_gives_no_number(fault: str) -> None:
    gpu = _gpu()
    model(gpu).corrupt = fault
    measured = _run(gpu)
    chases = {n for n in PROBES if ".latency" in n}
    for name in chases if fault == "chase" else set(PROBES) - chases:
        assert measured[name].outcome.status == "failed", name
        assert ("host predicted" if fault == "chase" else "expected") in measured[name].outcome.detail
        assert measured[name].facts == []


def test_probes_the_arch_lacks_are_not_launched() -> None:
    """An sm_80 part runs cp.async only: the sm_90 kernels are not runnable there (their toml)."""
    sm80 = parse_arch("sm_80")
    runnable = {p.name for p in all_probes() if p.family == "async_copy" and p.supports(sm80)}
    cp_async = {"cp_async.latency.ca", "cp_async.latency.cg", "cp_async.bandwidth", "plain_copy.bandwidth"}
    assert runnable == {f"async_copy.{name}" for name in cp_async}
    assert not any(p.supports(parse_arch("sm_75")) for p in all_probes() if p.family == "async_copy")
    gpu = _gpu()
    measured = _run(gpu, runnable=runnable)
    assert set(measured) == runnable
    assert not any(k.startswith(("gp_ac_bulk", "gp_ac_dsm")) for k in gpu.launches)


def test_invariants_hold_on_the_simulated_part_and_catch_a_swap() -> None:
    facts = _facts(_run(_gpu()))
    checks = [check for invariant in INVARIANTS for check in invariant(facts, None)]
    assert len(checks) == 2 and all(ok for _, ok, *_ in checks)
    swapped = dict(facts)
    swapped["dsmem.latency.own"], swapped["dsmem.latency.peer"] = (
        facts["dsmem.latency.peer"],
        facts["dsmem.latency.own"],
    )
    assert not all(ok for invariant in INVARIANTS for _, ok, *_ in invariant(swapped, None))
    assert [c for invariant in INVARIANTS for c in invariant({}, None)] == []  # nothing measured, nothing checked


def _rate(fact_id: str, value: float, half_ci: float, verdict: str = "report") -> Fact:
    return Fact(fact_id, value, "GB/s", (value - half_ci, value + half_ci), verdict=verdict)


# The H200 run (reports/nvidia-h200/results.json): the reads, and the copies as the bank-bound kernels measured them.
H200_RUN = {"bandwidth.l2_read.v16": 8796.0, "bandwidth.dram_theoretical": 4814.0, "async.cp_async.bandwidth": 2307.0,
            "async.cp_async.l2_bandwidth": 2464.0, "async.plain_copy.bandwidth": 3571.0,
            "async.plain_copy.l2_bandwidth": 3655.0, "async.bulk.bandwidth": 4433.0}  # fmt: skip


def _source_checks(facts: dict[str, Fact]) -> list:
    return [c for invariant in INVARIANTS for c in invariant(facts, H200) if c.name.endswith("_read")]


def test_every_copy_is_held_to_what_its_source_can_deliver() -> None:
    """A stream from DRAM is held to the pin rate (physics, naming the stream); one from L2 to 1.15 x the run's
    own L2 read (the read kernel leaves 10-13 % of the L2 unused), naming both. The H200 run's numbers pass."""
    facts = {fact_id: _rate(fact_id, value, 0.01 * value) for fact_id, value in H200_RUN.items()}
    checks = _source_checks(facts)
    ceiling = {level: fact_id for level, (fact_id, _) in SOURCE_CEILINGS.items()}
    assert [set(c.facts) for c in checks] == [{rate} if level == "dram" else {rate, ceiling[level]}
                                              for rate, level in SOURCED_RATES]  # fmt: skip
    assert [c.physics for c in checks] == [level == "dram" for _, level in SOURCED_RATES]
    assert all(c.ok for c in checks), [c.detail for c in checks if not c.ok]
    assert _source_checks({k: v for k, v in facts.items() if not k.startswith("bandwidth.")}) == []  # no read run


@pytest.mark.parametrize(
    ("planted", "value", "broken"),
    [("async.cp_async.l2_bandwidth", 10500.0, "async.cp_async.l2_bandwidth_within_l2_read"),
     ("async.plain_copy.bandwidth", 5000.0, "async.plain_copy.bandwidth_within_dram_read"),
     ("async.bulk.bandwidth", 4950.0, "async.bulk.bandwidth_within_dram_read")],
)  # fmt: skip
def test_a_copy_faster_than_its_source_is_impossible(planted: str, value: float, broken: str) -> None:
    """A planted rate above what its level delivers beyond the CIs fails its check, which marks what it names
    failed, even where an expectation had passed them; one as fast as an honest copy can be holds."""
    facts = {fact_id: _rate(fact_id, v, 50.0, "pass") for fact_id, v in H200_RUN.items()}
    facts[planted] = _rate(planted, value, 50.0, "pass")
    checks = _source_checks(facts)
    assert [c.name for c in checks if not c.ok] == [broken]
    mark_impossible(facts.values(), checks)
    (failed,) = [c for c in checks if not c.ok]
    assert {f.id for f in facts.values() if f.verdict == "fail"} == set(failed.facts) and planted in failed.facts
    assert facts[planted].detail.startswith(f"IMPOSSIBLE (invariant.{broken})")
    ceiling_id, headroom = SOURCE_CEILINGS[dict(SOURCED_RATES)[planted]]
    facts[planted] = _rate(planted, headroom * facts[ceiling_id].value, 50.0)  # at the ceiling, within noise
    assert all(c.ok for c in _source_checks(facts))


# ---- shared-memory banks: the streams' slot layout --------------------------------------------

SLOTS_AT_THREAD_TIMES_64 = """\tmov.u32 %r9, gp_ac_tile;
\tshl.b32 %r10, %r3, 6;
\tadd.u32 %r11, %r9, %r10;
\txor.b32 %r12, %r3, 1;
\tshl.b32 %r12, %r12, 6;
\tadd.u32 %r12, %r9, %r12;
"""


def _slots_at_thread_times_64(ptx: str) -> str:
    """The streams as the H200 ran them: each thread's four slots at thread x 64 bytes, 16 bytes apart."""
    laid, count = re.subn(r"\tmov\.u32 %r9, gp_ac_tile;\n.*?(?=\tmov\.u64 %rd5, 0;)", SLOTS_AT_THREAD_TIMES_64, ptx,
                          flags=re.S)  # fmt: skip
    assert count == 2, "both streams' slot arithmetic"
    for now, then in (("+512]", "+16]"), ("+1024]", "+32]"), ("+1536]", "+48]")):
        laid = laid.replace(now, then)
    return laid


def test_the_bank_model_counts_wavefronts_as_the_banks_work() -> None:
    """32 banks of 4-byte words, successive words in successive banks (CUDA C++ Best Practices Guide, "Shared
    Memory and Memory Banks"); one word read by many lanes is one access; 16-byte accesses go a quarter-warp
    (128 bytes) at a time, so a warp's 512 bytes take at least 4 wavefronts."""
    lanes = np.arange(32)
    assert wavefronts(lanes * 4, 4) == 1  # successive words, successive banks
    assert wavefronts(np.zeros(32, dtype=np.int64), 4) == 1  # one word for every lane
    assert wavefronts(lanes * 8, 4) == 2  # every other word: two lanes per bank
    assert wavefronts(lanes * 128, 4) == 32  # one bank, 32 words
    assert wavefronts(lanes * 16, 16) == 4  # 512 contiguous bytes
    assert wavefronts(lanes * 64, 16) == 16  # lanes 0, 2, 4, 6 of each quarter-warp on the same four banks


@pytest.mark.parametrize("kernel", COPY_KERNELS)
def test_the_streams_shared_accesses_are_conflict_free_and_read_the_neighbours_slots(kernel: str) -> None:
    """From the kernel's PTX: its four copies (or stores) and four loads per iteration are 16 bytes a lane and take
    4 wavefronts in every warp; the copies fill the 64 bytes per thread the host gives, each byte once, and lane t's
    load k reads what lane t ^ 1's copy k wrote (what ``neighbour_sums`` predicts)."""
    threads = Settings().stream_threads
    accesses = shared_accesses(probe_ptx(kernel), kernel, threads)
    assert len(accesses) == 8 and {a.width for a in accesses} == {16}
    per_warp = {wavefronts(a.addresses[w : w + 32], a.width) for a in accesses for w in range(0, threads, 32)}
    assert per_warp == {4}
    written, read = accesses[:4], accesses[4:]
    slots = np.sort(np.concatenate([a.addresses for a in written]))
    assert np.array_equal(slots, np.arange(threads * STREAM_CHUNK_BYTES // 16) * 16)
    neighbour = np.arange(threads) ^ 1
    assert all(np.array_equal(r.addresses, w.addresses[neighbour]) for w, r in zip(written, read, strict=True))
    assert copy_bytes_per_clock(probe_ptx(kernel), kernel, threads) == 64.0  # 2 KiB a warp in 32 wavefronts
    assert copy_bytes_per_clock(_slots_at_thread_times_64(probe_ptx(kernel)), kernel, threads) == 16.0


def test_the_bank_model_refuses_an_address_it_cannot_evaluate() -> None:
    """Slots placed by the block index: not known from %tid.x and constants, so not guessed."""
    kernel = COPY_KERNELS[0]
    moved = probe_ptx(kernel).replace("and.b32 %r10, %r3, 31;", "and.b32 %r10, %r5, 31;")
    with pytest.raises(ValueError, match="shared address not known"):
        shared_accesses(moved, kernel, 32)


def test_a_regression_of_the_slot_layout_slows_the_bank_bound_streams_fourfold() -> None:
    """Where the banks bound both streams (the default simulated memory, 3 and 9 TB/s, on 4 SMs), they copy
    4 SMs x 1755 MHz x 64 B/clk = 449 GB/s with the kernels' slots, and a quarter of that with the slots at
    thread x 64 bytes: the H200's symptom, copies capped under their source."""
    runnable = {"async_copy.cp_async.bandwidth", "async_copy.plain_copy.bandwidth"}
    conflict_free = _facts(_run(_gpu(noise=0.002), runnable))
    regressed_gpu = _gpu(noise=0.002)
    model(regressed_gpu).ptx = {kernel: _slots_at_thread_times_64(probe_ptx(kernel)) for kernel in COPY_KERNELS}
    regressed = _facts(_run(regressed_gpu, runnable))
    bound = 4 * 1755.0 * 64 / 1e3
    for fact_id in ("async.cp_async.bandwidth", "async.cp_async.l2_bandwidth", "async.plain_copy.bandwidth",
                    "async.plain_copy.l2_bandwidth"):  # fmt: skip
        assert conflict_free[fact_id].value == pytest.approx(bound, rel=0.03), fact_id
        assert regressed[fact_id].value == pytest.approx(bound / 4, rel=0.03), fact_id


def test_every_timed_stream_launch_is_checked() -> None:
    """A stream whose timed launches go wrong (the sums) fails its probe: no rate from a launch never checked."""
    gpu = _gpu()
    timed = gpu.time_launches

    def wrong_when_timed(*args, **kwargs):
        model(gpu).corrupt = "sums"
        return timed(*args, **kwargs)

    gpu.time_launches = wrong_when_timed
    streams = {name for name in PROBES if name.endswith("bandwidth")}
    measured = _run(gpu, runnable=streams)
    assert {name: m.outcome.status for name, m in measured.items()} == dict.fromkeys(streams, "failed")
    assert all("expected" in m.outcome.detail and m.facts == [] for m in measured.values())


# ---- the contracts catch the wrong kernels that matter --------------------------------------


def test_a_cp_async_chase_that_does_not_wait_breaks_the_contract(tmp_path: Path) -> None:
    """Drop cp.async.wait_all from the timed steps: the shared load would race the copy."""
    probe, step_end = "async_copy.cp_async.latency.ca", "\tcp.async.wait_all;\n\tld.shared.u64 %rd1, [%r4];\n//@endfor"
    assert mutant_violations(tmp_path, probe, "sm_90", step_end, step_end) == set()  # the real kernel holds
    broken = mutant_violations(tmp_path, probe, "sm_90", step_end, "\tld.shared.u64 %rd1, [%r4];\n//@endfor")
    assert any("DEPBAR" in rule for rule in broken), broken


@pytest.mark.parametrize("arch", ["sm_80", "sm_90", "sm_120"])
def test_a_cp_async_stream_through_l1_breaks_the_contract(tmp_path: Path, arch: str) -> None:
    """cp.async.ca instead of .cg: the stream would no longer bypass L1 like the plain path's ld.cg."""
    broken = mutant_violations(
        tmp_path,
        "async_copy.cp_async.bandwidth",
        arch,
        "cp.async.cg.shared.global [%r11]",
        "cp.async.ca.shared.global [%r11]",
    )
    assert any("LDGSTS" in rule for rule in broken), broken


@pytest.mark.parametrize("arch", ["sm_90", "sm_100a", "sm_120"])
def test_a_bulk_chase_waiting_with_try_wait_breaks_the_clock_bracket(tmp_path: Path, arch: str) -> None:
    """ptxas moves try_wait's retry out of line, past the second clock read: the loop it makes encloses
    the clock reads, so the timed region is no longer one chase loop (why the kernel polls with test_wait)."""
    broken = mutant_violations(
        tmp_path, "async_copy.bulk.latency", arch, "mbarrier.test_wait.parity", "mbarrier.try_wait.parity"
    )
    assert any("clock reads bracketing" in rule for rule in broken), broken


def test_a_dsm_chase_through_32_bit_cluster_addresses_breaks_the_contract(tmp_path: Path) -> None:
    """ld.shared::cluster with 32-bit addresses puts moves (the window's high half) on the chain."""
    steps = " ".join(str(k) for k in range(32))
    old = "//@repeat 32\n\tld.u64 %rd8, [%rd8];\n"
    new = f"//@for K in {steps}\n\tcvt.u32.u64 %r20, %rd8;\n\tld.shared::cluster.u64 %rd8, [%r20];\n//@endfor\n"
    broken = mutant_violations(tmp_path, "async_copy.dsmem.latency", "sm_90", old, new)
    assert any(rule.startswith("only LD") for rule in broken), broken
    assert any(rule.startswith("control_off_chain") for rule in broken), broken  # the moves read each load


@pytest.mark.parametrize("arch", ["sm_90", "sm_120"])
def test_a_dsm_stream_with_weak_loads_breaks_the_contract(tmp_path: Path, arch: str) -> None:
    """Weak loads of unchanging addresses may be hoisted out of the loop: the stream would read once."""
    broken = mutant_violations(
        tmp_path, "async_copy.dsmem.bandwidth", arch, "ld.relaxed.cluster.shared::cluster", "ld.shared::cluster"
    )
    assert any("LD\\.E\\.128" in rule for rule in broken), broken


def test_bulk_points_whose_buffers_do_not_fit_a_block_are_left_out() -> None:
    """An sm_120 part lets a block use 99 KiB of shared memory: 32 KiB x 4 in flight cannot run there."""
    gpu = _gpu()
    device = dataclasses.replace(gpu.device(), shared_per_block_optin_bytes=99 * KIB)
    settings = dataclasses.replace(FAST_SETTINGS, bulk_points=((1024, 8), (32768, 4)))
    measured = dict(measure(Request(gpu, ptx_parameters(), device, {"async_copy.bulk.bandwidth"}, settings)))
    outcome = measured["async_copy.bulk.bandwidth"]().outcome
    assert outcome.status == "ok" and outcome.series["sweep"]["size_bytes"] == [1024.0]
    assert "1 point(s) need more shared memory" in outcome.detail
    tiny = dataclasses.replace(device, shared_per_block_optin_bytes=1024)
    measured = measure_family(async_copy, gpu, {"async_copy.bulk.bandwidth"}, settings, device=tiny)
    assert measured["async_copy.bulk.bandwidth"].outcome.status == "failed"
    assert "no bulk point" in measured["async_copy.bulk.bandwidth"].outcome.detail


def test_the_static_check_reports_the_features_an_arch_lacks_as_unsupported() -> None:
    """cp.async from sm_80, bulk copies and clusters from sm_90: `gpuprobe check` says so, it builds nothing."""
    probes = [p for p in all_probes() if p.family == "async_copy"]
    sm80 = {"async_copy.cp_async.latency.ca", "async_copy.cp_async.latency.cg", "async_copy.cp_async.bandwidth",
            "async_copy.plain_copy.bandwidth"}  # fmt: skip
    for arch, supported in (("sm_75", set()), ("sm_89", sm80), ("sm_90", {p.name for p in probes})):
        results = {r.probe: r for r in contract_results(probes, [parse_arch(arch)])}
        unsupported = {name for name, r in results.items() if r.status == "unsupported"}
        assert unsupported == {p.name for p in probes} - supported, arch
        assert all(r.status == "ok" for name, r in results.items() if name in supported), arch
        assert all("does not target" in results[name].detail for name in unsupported)


def test_the_bulk_plot_draws_what_the_probes_measured() -> None:
    gpu = _gpu()
    measured = _run(gpu, runnable={"async_copy.bulk.latency", "async_copy.bulk.bandwidth"})
    results = Results(device=gpu.device(), probes={name: m.outcome for name, m in measured.items()})
    (section,) = SECTIONS
    assert section.plot is not None
    assert section.plot.png(results, 50)[:8] == b"\x89PNG\r\n\x1a\n"
    assert section.plot.png(Results(device=gpu.device()), 50) is None  # nothing measured, nothing drawn
