"""Fact sheet and plot rendering, on fabricated H100-like results.

Everything built here is test data: a made-up curve shaped like an H100's, never written
under reports/.
"""

from __future__ import annotations

import itertools
import math
import re
from pathlib import Path

import numpy as np
import pytest

from gpuprobe.core.numbers import fmt_nums
from gpuprobe.core.results import Device, Fact, ProbeOutcome, Results, load, save
from gpuprobe.core.text import md_text
from gpuprobe.families.catalog import sections
from gpuprobe.families.memory import LATENCY_PLOT
from gpuprobe.judge.expectations import load_all
from gpuprobe.kernels.registry import declared_probes
from gpuprobe.output import factsheet, html_report, plots, report, sheet
from gpuprobe.output.headline import headline_rows
from gpuprobe.output.quantities import fmt_quantity
from gpuprobe.output.references import References
from gpuprobe.runner.trajectory import Reading, Trajectory

SECTIONS = sections()
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
TEST_DPI = 40
MHZ = 1755.0
KIB, MIB, GIB = 2**10, 2**20, 2**30

# (name, plateau cycles, capacity bytes or None) for the fabricated hierarchy.
CA_LEVELS = [("L1", 33.1, 192 * KIB), ("L2", 262.4, 30 * MIB), ("L2 far", 478.0, 50 * MIB), ("DRAM", 819.5, None)]
CG_LEVELS = [("L2", 268.0, 30 * MIB), ("L2 far", 480.0, 50 * MIB), ("DRAM", 821.0, None)]


def fake_curve(levels: list[tuple[str, float, int | None]], seed: int) -> dict[str, list[float]]:
    """A smooth staircase in log2(footprint) with a little deterministic noise and a CI band."""
    footprint = 2.0 ** np.arange(10, 31.01, 0.25)
    x = np.log2(footprint)
    latency = np.full_like(x, levels[0][1])
    for (_, lat, size), (_, next_lat, _) in itertools.pairwise(levels):
        latency += (next_lat - lat) / (1 + np.exp(-(x - math.log2(size) - 0.3) * 6))
    latency += np.random.default_rng(seed).normal(0, 0.004, x.size) * latency
    half = 0.01 * latency + 0.5
    return {
        "footprint_bytes": footprint.tolist(),
        "latency_cycles": latency.tolist(),
        "latency_ns": (latency / MHZ * 1000).tolist(),
        "ci_low": (latency - half).tolist(),
        "ci_high": (latency + half).tolist(),
    }


def fake_levels(levels: list[tuple[str, float, int | None]]) -> dict[str, list]:
    return {
        "size_bytes": [size for _, _, size in levels],
        "latency_cycles": [lat for _, lat, _ in levels],
        "name": [name for name, _, _ in levels],
    }


def expect(low: float | None, high: float | None, unit: str, severity: str = "assert", note: str = "") -> dict:
    return {"low": low, "high": high, "unit": unit, "severity": severity, "source": "test data: invented", "note": note}


def fake_facts() -> list[Fact]:
    probe = "memory.latency.global_ca"
    return [
        Fact(
            "latency.shared",
            29.8,
            "cycle",
            (29.5, 30.1),
            probe=probe,
            expectation=expect(25, 35, "cycle"),
            verdict="pass",
        ),
        Fact(
            "latency.l1", 33.1, "cycle", (32.9, 33.4), probe=probe, expectation=expect(30, 40, "cycle"), verdict="pass"
        ),
        Fact(
            "latency.l2",
            262.4,
            "cycle",
            (261.9, 263.0),
            probe=probe,
            expectation=expect(200, 250, "cycle"),
            verdict="fail",
            detail="measured above the range",
        ),
        Fact(
            "latency.l2_far",
            478.0,
            "cycle",
            (470.2, 485.5),
            probe=probe,
            expectation=expect(None, 450, "cycle", "warn"),
            verdict="warn",
        ),
        Fact(
            "latency.dram",
            819.5,
            "cycle",
            (812.0, 826.5),
            converted={"ns": 819.5 / MHZ * 1000},
            probe=probe,
            expectation=expect(400, 600, "ns", "assert", note="HBM3 at nominal clocks"),
            verdict="pass",
        ),
        Fact(
            "capacity.l1",
            192 * KIB,
            "byte",
            (176 * KIB, 208 * KIB),
            probe=probe,
            expectation=expect(128 * KIB, 256 * KIB, "byte"),
            verdict="pass",
        ),
        Fact("capacity.l2", 50 * MIB, "byte", None, probe=probe, expectation=None, verdict="report"),
        Fact("device.sm_count", 132, "count", probe=probe, expectation=expect(132, 132, "count"), verdict="pass"),
        Fact("device.l2_bytes", 50 * MIB, "byte", probe=probe, verdict="report"),
        Fact("device.sm_clock", MHZ, "MHz", (1750.0, 1760.0), probe=probe, verdict="report"),
        Fact("overhead.clock_read", 2.0, "cycle", (2.0, 2.0), probe=probe, verdict="report"),
        Fact("overhead.loop", 6.5, "cycle", (6.0, 7.0), probe=probe, verdict="unstable"),
        Fact(
            "invariant.latency_order",
            1.0,
            "bool",
            probe="invariants",
            expectation=expect(1, 1, "bool"),
            verdict="pass",
            detail="shared < L1 < L2 < DRAM",
        ),
        Fact(
            "invariant.l2_knee_at_device_l2",
            0.0,
            "bool",
            probe="invariants",
            expectation=expect(1, 1, "bool", "warn"),
            verdict="warn",
            detail="knee at 30 MiB, device says 50 MiB",
        ),
    ]


DECLARED = declared_probes()  # what a run of this gpuprobe records of its probes


def simulated_results(partial: bool = False, with_curves: bool = True) -> Results:
    """Realistic H100-like results with fabricated curves (test data only)."""
    device = Device(
        name="NVIDIA H100 80GB HBM3",
        cc="9.0",
        arch="sm_90",
        sm_count=132,
        l2_bytes=50 * MIB,
        sm_clock_nominal_mhz=1980.0,
        mem_clock_mhz=2619.0,
        mem_bus_bits=5120,
        mem_bytes=80 * GIB,
        shared_per_sm_bytes=228 * KIB,
        shared_per_block_optin_bytes=227 * KIB,
        driver="550.54.15",
        cuda_runtime="12.4",
        toolkit="13.0",
        uuid="GPU-test",
    )
    probes = {
        "memory.latency.global_ca": ProbeOutcome("ok"),
        "memory.latency.global_cg": ProbeOutcome("ok"),
        "memory.latency.shared": ProbeOutcome(
            "violated", "SASS contract: loop holds 2 loads\n/*0090*/ LDS R2, [R2] | extra"
        ),
        "alu.ffma": ProbeOutcome("crashed", "CUDA_ERROR_ILLEGAL_ADDRESS"),
    }
    if with_curves:
        for name, levels, seed in (("global_ca", CA_LEVELS, 1), ("global_cg", CG_LEVELS, 2)):
            probes[f"memory.latency.{name}"].series = {"curve": fake_curve(levels, seed), "levels": fake_levels(levels)}
    return Results(
        device=device,
        facts=fake_facts(),
        probes=probes,
        clocks={"sm_mhz_measured": MHZ, "samples": [1754.0, 1755.0, 1756.0], "model": "h100_sxm"},
        partial=partial,
        created="2025-01-02T03:04:05+00:00",
        declared_probes=DECLARED,
    )


@pytest.fixture(scope="module")
def markdown() -> str:
    plots = {LATENCY_PLOT.key: "latency_vs_footprint.png"}
    return report.render_markdown(simulated_results(), plots, sections=SECTIONS)


def part(markdown: str, heading: str) -> str:
    """The text under a heading ("## Headline", "### Memory latency"), up to the next heading of its level."""
    level = heading.split(" ", 1)[0]
    return markdown.split(f"{heading}\n", 1)[1].split(f"\n{level} ", 1)[0]


def row(markdown: str, fact_id: str) -> list[str]:
    """The cells of a fact's row in the details."""
    line = next(line for line in markdown.splitlines() if line.startswith(f"| `{fact_id}` |"))
    return [c.strip() for c in re.split(r"(?<!\\)\|", line)[1:-1]]


# ---------------------------------------------------------------- gpu_slug


@pytest.mark.parametrize(
    ("name", "slug"),
    [
        ("NVIDIA H200", "nvidia-h200"),
        ("NVIDIA GeForce RTX 4090", "nvidia-geforce-rtx-4090"),
        ("NVIDIA A100-SXM4-80GB", "nvidia-a100-sxm4-80gb"),
        ("  NVIDIA  H100 80GB HBM3 ", "nvidia-h100-80gb-hbm3"),
        ("Tesla T4 (MIG 1g.5gb)", "tesla-t4-mig-1g-5gb"),
        ("???", "unknown-gpu"),
    ],
)
def test_gpu_slug(name: str, slug: str) -> None:
    assert factsheet.gpu_slug(name) == slug
    assert re.fullmatch(r"[a-z0-9-]+", factsheet.gpu_slug(name))


# ---------------------------------------------------------------- the first screen


def test_the_sheet_opens_with_the_device_the_verdict_and_the_headline(markdown: str) -> None:
    top = markdown.split("## Headline", 1)[0]
    device = (
        "NVIDIA H100 80GB HBM3 · sm_90 (cc 9.0) · 132 SMs · SM clock 1755 MHz measured at rest (nominal 1980) · "
        "80 GiB 5120-bit · L2 50 MiB · CUDA 550.54.15 · run 2025-01-02 03:04 UTC · judged as h100_sxm"
    )
    assert device in top
    assert "**Verdict:** 1 fail, 1 unstable, 2 warn, 6 pass; 4 reported, not judged (14 facts)." in top
    assert "**FAIL:** `latency.l2`. **UNSTABLE:** `overhead.loop`." in top  # the failing facts named up front
    assert "**Probes:** 4 of 4 probes ran: 2 ok, 1 crashed, 1 violated." in top
    assert markdown.index("## Headline") < markdown.index("## Run conditions") < markdown.index("## Details")


def test_the_headline_table_gives_each_fact_its_expectation_and_verdict(markdown: str) -> None:
    headline = part(markdown, "## Headline")
    shared = "| Shared memory latency | 29.8 cyc (16.98 ns) | — | 29.88 cyc H100, mt4g chase (nearest of 2) [2] |"
    assert f"{shared} 25 – 35 cyc (assert) [1] | PASS |" in headline
    near = (
        "| L2 hit latency, near (one SM's chase) | 262.4 cyc (149.5 ns) | — | 272.3 cyc H100 SXM, Luo et al.'s l2_lat"
    )
    assert f"{near} (nearest of 2) [4] | 200 – 250 cyc (assert) [1] | **FAIL** |" in headline
    assert "| L1 capacity (latency knee) | 192 KiB | — | — | 128 KiB – 256 KiB (assert) [1] | PASS |" in headline
    # A headline fact the run lacks says why: here its probe never ran (this run measured memory alone).
    missing = "| DRAM read bandwidth | not measured: bandwidth.dram.read.v16 never ran | — | datasheet 3350 GB/s [6] |"
    assert f"{missing} — | — |" in headline
    assert "| FFMA latency | not measured: alu.ffma.ilp1 never ran |" in headline
    assert "wgmma" not in headline  # an sm_90 part has no wgmma: the row is left out, not "not measured"


def test_each_headline_row_shows_the_published_measurement_nearest_its_value_and_the_datasheet() -> None:
    """The model's published measurements of the fact (the nearest the run's value, with part, method and source)
    and its datasheet figure; a GPU without expectations (discovery mode) has none to show."""
    results = simulated_results()
    results.facts = [f for f in results.facts if f.id != "latency.l2"]
    results.facts.append(Fact("latency.l2", 292.0, "cycle", probe="memory.latency.global_ca", verdict="report"))
    rows = {row.fact_id: row for row in headline_rows(results)}
    (nearest,) = rows["latency.l2"].published
    assert nearest.text == "290–295 cyc H100 SXM, random chase (nearest of 2)"  # 272.3 is further from 292
    assert rows["bandwidth.dram_read.v16"].published[-1].text == "datasheet 3350 GB/s"
    model = load_all()["h100_sxm"]
    assert {p.source for p in model.published_for("latency.l2")} <= {text for _, text in _cited(results)}
    results.clocks["model"] = "unknown (discovery mode)"
    results.device.name = "NVIDIA Nonesuch 9000"
    assert all(not row.published for row in headline_rows(results))


def _cited(results: Results) -> list[tuple[int, str]]:
    """The sources the headline table cites, numbered."""
    refs = References()
    headline_rows(results, refs)
    return refs.entries()


def test_whole_gpu_rates_are_stated_with_their_basis() -> None:
    results = simulated_results()
    results.facts.append(Fact("alu.ffma.throughput", 128.0, "op/clk/SM", probe="alu.ffma", verdict="report"))
    results.facts.append(Fact("bandwidth.dram_read.v16", 3000.0, "GB/s", probe="bandwidth.dram.read.v16"))
    results.facts.append(Fact("bandwidth.dram_read_fraction_of_peak", 0.625, "fraction"))
    results.facts.append(Fact("bandwidth.dram_theoretical", 4800.0, "GB/s"))
    headline = part(report.render_markdown(results, {}, sections=SECTIONS), "## Headline")
    # 128 FFMA x 2 flops x 132 SMs x 1755 MHz = 59.30 TFLOP/s
    assert "| FFMA (FP32) throughput | 128 op/clk/SM | = 59.3 TFLOP/s FP32 (132 SMs × 1755 MHz) |" in headline
    assert "| DRAM read bandwidth | 3000 GB/s | 62 % of the theoretical peak (4800 GB/s) |" in headline


def test_the_tensor_cores_per_type_table() -> None:
    results = simulated_results()
    results.device.arch = "sm_90a"
    tensor = [
        ("tensor.mma_sync.bf16.m16n8k16.tflops", 640.0, "report"),
        ("tensor.mma_sync.bf16.m16n8k8.tflops", 480.0, "report"),
        ("tensor.wgmma.bf16.m64n256k16.ss.tflops", 650.0, "warn"),
        ("tensor.wgmma.bf16.datasheet_peak_at_clock", 989.4, "report"),
        ("tensor.wgmma.bf16.fraction_of_peak", 0.657, "warn"),
        ("tensor.cublas.bf16.tflops", 700.0, "pass"),
        ("tensor.wgmma.bf16.fraction_of_cublas", 0.93, "pass"),
        ("tensor.wgmma.s8.m64n256k32.ss.tflops", 1300.0, "report"),
        ("tensor.wgmma.tf32.m64n256k8.ss.tflops", 400.0, "warn"),
        ("tensor.wgmma.tf32.m64n256k8.ss.fraction_of_peak", 0.8, "pass"),
        ("tensor.mma_sync.fp8.emulated", 1.0, "report"),
    ]
    wgmma = "wgmma.throughput.bf16.ss"
    results.facts += [Fact(i, v, "fraction" if "fraction" in i else "TFLOP/s", verdict=d,
                           probe=wgmma if ".wgmma.bf16.m64" in i else "") for i, v, d in tensor]  # fmt: skip
    sampled = Trajectory([Reading(0.0, 1800.0, 3201.0, 520.0), Reading(0.004, 1610.0, 3201.0, 690.0)]).record()
    results.probes[wgmma] = ProbeOutcome("ok", conditions={"trajectory": sampled})
    table = part(report.render_markdown(results, {}, sections=SECTIONS), "## Headline").splitlines()
    assert "| bf16 | 640 TFLOP/s (m16n8k16) | 650 TFLOP/s (m64n256k16) | SM 1610 – 1800 MHz, ≤ 690 W | " \
           "989.4 TFLOP/s; wgmma at 66 % | 700 TFLOP/s | 0.93 × | WARN |" in table  # fmt: skip
    assert "| int8 | — | 1300 TOP/s (m64n256k32) | — | — | — | — | — |" in table  # integer rates; no trajectory
    assert "| fp8 e4m3 | emulated | — | — | — | — | — | — |" in table
    # tf32 has no datasheet fact of its own: its peak at the clock is its rate over its fraction of the peak per clock
    assert "| tf32 | — | 400 TFLOP/s (m64n256k8) | — | 500 TFLOP/s; wgmma at 80 % | — | — | WARN |" in table
    assert not [line for line in table if line.startswith("| f16")]  # no f16 rate: no row


# ---------------------------------------------------------------- the details: every fact once


def test_every_fact_is_in_exactly_one_row_of_the_details(markdown: str) -> None:
    details = markdown.split("## Details", 1)[1].split("## Probe status", 1)[0]
    for fact in simulated_results().facts:
        held = sheet.holds(fact) and fact.id.startswith("invariant.")  # listed by name under "Hold"
        assert details.count(f"| `{fact.id}` |") == (0 if held else 1), fact.id
    assert "- `other`: latency_order" in details


def test_no_source_or_detail_is_printed_twice() -> None:
    results = simulated_results()
    for fact in results.facts:  # one long citation shared by every judged fact, as a paper table is
        if fact.expectation:
            fact.expectation["source"] = "Luo et al., arXiv:2501.12084, Table 3 (H800 PCIe, 1755 MHz)"
    text = report.render_markdown(results, {}, sections=SECTIONS)
    assert text.count("Luo et al., arXiv:2501.12084") == 1
    assert "1. Luo et al., arXiv:2501.12084, Table 3 (H800 PCIe, 1755 MHz)" in part(text, "## References")
    assert row(text, "latency.l1")[3] == "30 – 40 cyc (assert) [1]"
    assert "262.4" not in "".join(line for line in text.splitlines() if line.startswith("- "))  # no restatement


def test_a_row_gives_median_ci_detection_range_and_verdict(markdown: str) -> None:
    assert row(markdown, "latency.l2") == ["`latency.l2`", "262.4 cyc (149.5 ns)", "—", "200 – 250 cyc (assert) [1]",
                                            "**FAIL**"]  # fmt: skip
    assert row(markdown, "latency.l2_far")[1] == "478.0 [470.2, 485.5] cyc (272.4 ns)"  # CI over ±1 %: shown
    assert row(markdown, "latency.l2_far")[3] == "≤ 450 cyc (warn) [1]"
    assert row(markdown, "latency.dram")[1:4] == ["819.5 cyc (467 ns)", "—", "400 – 600 ns (assert) [1]"]
    assert row(markdown, "capacity.l1")[1] == "192 KiB [176 KiB, 208 KiB]"
    assert row(markdown, "device.sm_count") == ["`device.sm_count`", "132", "—", "= 132 (assert) [1]", "PASS"]
    assert row(markdown, "capacity.l2")[3:] == ["—", "—"]  # no expectation, reported


def test_what_a_row_does_not_say_is_a_note(markdown: str) -> None:
    memory = part(markdown, "### Memory latency")
    assert "- `latency.l2`: measured above the range" in memory  # a detail the judge did not write
    assert "HBM3 at nominal clocks" not in markdown  # a passing fact's expectation note is not repeated here
    assert "- `overhead.loop`" not in markdown  # unstable, but its detail says nothing more


def test_a_fact_whose_sampling_did_not_settle_says_how_it_stopped_in_both_writers(tmp_path: Path) -> None:
    results = simulated_results()
    capped, settled = results.fact("latency.l1"), results.fact("latency.shared")
    capped.samples, capped.stopped = [32.9, 33.1, 33.4] * 3, "max_repeats"
    settled.samples, settled.stopped = [29.5, 29.8, 30.1], "stable"
    save(results, tmp_path / "results.json")
    results = load(tmp_path / "results.json")  # as a reader sees it: with what its samples detect
    markdown = report.render_markdown(results, {}, sections=SECTIONS)
    assert re.fullmatch(r"≥ \S+ %( \(.+\))?; n=9, max repeats", row(markdown, "latency.l1")[2])
    assert "n=" not in row(markdown, "latency.shared")[2]  # it settled: nothing to say
    assert "<td>" + row(markdown, "latency.l1")[2] + "</td>" in html_report.render_html(results, {}, sections=SECTIONS)
    several = [Fact("a", 1.0, "us", samples=[1.0] * 5, stopped="budget+stable"),
               Fact("b", 1.0, "us", samples=[1.0], stopped="stable")]  # fmt: skip
    assert sheet.stop_text(several) == "n up to 5, budget + stable"


def test_what_each_fact_lets_a_comparison_detect(tmp_path: Path) -> None:
    """As the results file records it: the smallest change, and why 5 % is out of reach when it is."""
    results = simulated_results()
    quiet, few = results.fact("latency.l2"), results.fact("latency.dram")
    quiet.samples = [262.0, 262.4, 262.9, 262.4, 262.1]
    few.samples = [812.0, 819.5, 826.5]
    save(results, tmp_path / "results.json")
    markdown = report.render_markdown(load(tmp_path / "results.json"), {}, sections=SECTIONS)
    assert re.fullmatch(r"≥ \d\.\d %", row(markdown, "latency.l2")[2])
    assert re.fullmatch(r"≥ \d+(\.\d)? % \(\d+ samples would do\)", row(markdown, "latency.dram")[2])


def test_verdict_markers(markdown: str) -> None:
    assert row(markdown, "latency.l1")[-1] == "PASS"
    assert row(markdown, "latency.l2")[-1] == "**FAIL**"
    assert row(markdown, "latency.l2_far")[-1] == "WARN"
    assert row(markdown, "capacity.l2")[-1] == "—"
    assert row(markdown, "overhead.loop")[-1] == "UNSTABLE"


def test_sections_grouped(markdown: str) -> None:
    memory = part(markdown, "### Memory latency")
    assert "`latency.l1`" in memory and "`capacity.l2`" in memory and "`invariant." not in memory
    assert "`device.sm_count`" in part(markdown, "### Device") and "`overhead.loop`" in part(
        markdown, "### Measurement overheads"
    )
    invariants = part(markdown, "### Cross-generation invariants")
    assert "| `invariant.l2_knee_at_device_l2` | VIOLATED | WARN | knee at 30 MiB, device says 50 MiB |" in invariants
    assert "**Hold (1):**" in invariants and "- `other`: latency_order" in invariants
    assert "Plot: *latency vs footprint*, under Key plots." in memory
    assert "![Memory latency: latency vs footprint](latency_vs_footprint.png)" in part(markdown, "## Key plots")


def test_unknown_family_goes_to_other_facts() -> None:
    results = simulated_results()
    results.facts.append(Fact("zzz.ffma.latency", 4.0, "cycle", probe="zzz.ffma"))
    md = report.render_markdown(results, {}, sections=SECTIONS)
    assert "### Other facts" in md and "| `zzz.ffma.latency` | 4 cyc" in md


def test_tables_well_formed(markdown: str) -> None:
    """Every table row has as many cells as its header (pipes in details are escaped)."""
    header_cells = None
    for line in markdown.splitlines():
        if not line.startswith("|"):
            header_cells = None
            continue
        cells = len(re.findall(r"(?<!\\)\|", line))
        header_cells = header_cells or cells
        assert cells == header_cells, line


def test_partial_banner() -> None:
    full = report.render_markdown(simulated_results(partial=False), {}, sections=SECTIONS)
    partial = report.render_markdown(simulated_results(partial=True), {}, sections=SECTIONS)
    assert "PARTIAL RUN" not in full
    assert "PARTIAL RUN" in partial
    assert partial.index("PARTIAL RUN") < partial.index("NVIDIA H100 80GB HBM3 · sm_90")


def test_probes_that_ended_alike_share_a_row() -> None:
    results = simulated_results()
    for n in (1, 2):
        results.probes[f"alu.dfma.ilp{n}"] = ProbeOutcome("failed", f"gp_dfma: {1000 + n} of 4096 sums differ (0x{n}f)")
    status = report.render_markdown(results, {}, sections=SECTIONS).split("## Probe status\n", 1)[1]
    assert "6 of 6 probes ran: 2 ok, 1 crashed, 2 failed, 1 violated." in status
    # newline -> <br>, pipe escaped for the table, SASS comment and brackets escaped for Markdown
    detail = r"SASS contract: loop holds 2 loads"
    assert f"| `memory.latency.shared` | VIOLATED | {detail} |" in status  # the first line of the detail
    assert "| `alu.ffma` | CRASHED | CUDA_ERROR_ILLEGAL_ADDRESS |" in status
    assert "| `alu.dfma.ilp1`, `alu.dfma.ilp2` | FAILED | gp_dfma: 1001 of 4096 sums differ (0x1f) |" in status
    assert "global_ca" not in status and "global_cg" not in status


def test_all_probes_ok() -> None:
    results = simulated_results()
    results.probes = {k: v for k, v in results.probes.items() if v.status == "ok"}
    md = report.render_markdown(results, {}, sections=SECTIONS)
    assert "## Probe status\n\n2 of 2 probes ran: 2 ok.\n" in md


def test_round_trip_renders_the_same(tmp_path: Path) -> None:
    results = simulated_results(partial=True)
    save(results, tmp_path / "results.json")
    plot_files = {LATENCY_PLOT.key: "latency_vs_footprint.png"}
    assert report.render_markdown(
        load(tmp_path / "results.json"), plot_files, sections=SECTIONS
    ) == report.render_markdown(results, plot_files, sections=SECTIONS)


# ---------------------------------------------------------------- plots and write_report


def test_write_report_writes_sheet_and_png(tmp_path: Path) -> None:
    paths = factsheet.write_report(simulated_results(), tmp_path / "out", dpi=TEST_DPI, sections=SECTIONS)
    sheet, png = tmp_path / "out" / "factsheet.md", tmp_path / "out" / "latency_vs_footprint.png"
    assert paths == [sheet, png]
    assert png.read_bytes().startswith(PNG_SIGNATURE)
    assert "](latency_vs_footprint.png)" in sheet.read_text(encoding="utf-8")
    assert not [p for p in (tmp_path / "out").iterdir() if p.name.startswith(".")]  # no temp files left


def test_plot_is_deterministic(tmp_path: Path) -> None:
    results = simulated_results()
    a = plots.latency_png(results, dpi=TEST_DPI)
    b = plots.latency_png(results, dpi=TEST_DPI)
    assert a is not None and a.startswith(PNG_SIGNATURE)
    assert a == b
    assert b"Software" not in a and b"Creation" not in a


def test_plot_with_one_series_and_null_last_size(tmp_path: Path) -> None:
    results = simulated_results()
    del results.probes["memory.latency.global_cg"]
    results.clocks = {}
    results.facts = [f for f in results.facts if f.id != "device.sm_clock"]  # no clock: cycles only
    assert (plots.latency_png(results, dpi=TEST_DPI) or b"").startswith(PNG_SIGNATURE)


def test_no_latency_series_no_plot_no_link(tmp_path: Path) -> None:
    results = simulated_results(with_curves=False)
    out = tmp_path / "out"
    out.mkdir()
    (out / "latency_vs_footprint.png").write_bytes(PNG_SIGNATURE)  # left by an older run
    assert plots.latency_png(results) is None
    paths = factsheet.write_report(results, out, dpi=TEST_DPI, sections=SECTIONS)
    assert paths == [out / "factsheet.md"]
    assert not (out / "latency_vs_footprint.png").exists()
    md = (out / "factsheet.md").read_text(encoding="utf-8")
    assert "![" not in md and ".png" not in md


def test_short_bytes_labels() -> None:
    assert [plots.short_bytes(2**e) for e in (12, 16, 20, 24, 28, 30)] == ["4K", "64K", "1M", "16M", "256M", "1G"]


@pytest.mark.parametrize(
    ("value", "unit", "text"),
    [
        (512, "byte", "512 B"),
        (1536, "byte", "1.5 KiB"),
        (50 * MIB, "byte", "50 MiB"),
        (80 * GIB, "byte", "80 GiB"),
        (33.125, "cycle", "33.12 cyc"),
        (1980.0, "MHz", "1980 MHz"),
        (132, "count", "132"),
        (1.0, "bool", "yes"),
    ],
)
def test_fmt_quantity(value: float, unit: str, text: str) -> None:
    assert fmt_quantity(value, unit) == text


def test_fmt_nums_share_precision() -> None:
    assert fmt_nums([262.4, 261.9, 263.0]) == ["262.4", "261.9", "263.0"]
    assert fmt_nums([2.0, 2.0, 2.0]) == ["2", "2", "2"]
    assert fmt_nums([0.5, 1.25]) == ["0.50", "1.25"]
    assert fmt_nums([123456.7]) == ["123457"]


def test_machine_written_text_stays_literal() -> None:
    assert md_text("/*0090*/ LDG.E R2, [R2.64] <x> `y`") == r"/\*0090\*/ LDG.E R2, [R2.64] &lt;x&gt; \`y\`"
    assert md_text("CUDA_ERROR_ILLEGAL_ADDRESS") == "CUDA_ERROR_ILLEGAL_ADDRESS"


def test_family_without_facts_says_why() -> None:
    results = simulated_results(with_curves=False)
    results.facts = []
    results.probes["memory.latency.global_ca"].status = "violated"
    md = report.render_markdown(results, {}, sections=SECTIONS)
    assert "No facts measured (`memory.latency.global_ca` violated, `memory.latency.global_cg` ok" in md
    assert "**Verdict:** nothing judged; 0 reported, not judged (0 facts)." in md


def test_malformed_or_tiny_series(tmp_path: Path) -> None:
    results = simulated_results(with_curves=False)
    results.probes["memory.latency.global_ca"].series = {"curve": [1, 2, 3]}  # not a column dict
    assert plots.latency_png(results, dpi=TEST_DPI) is None
    results.device.l2_bytes = 0
    results.probes["memory.latency.global_cg"].series = {
        "curve": {"footprint_bytes": [4096, None], "latency_cycles": [300.0, 310.0]},
        "levels": {"size_bytes": [None], "latency_cycles": [300.0], "name": ["L2"]},
    }
    assert (plots.latency_png(results, dpi=TEST_DPI) or b"").startswith(PNG_SIGNATURE)


def test_throttled_and_shared_verdicts_are_marked() -> None:
    results = simulated_results()
    results.facts += [
        Fact("latency.extra", 5.0, "cycle", probe="x", verdict="throttled"),
        Fact("latency.other", 6.0, "cycle", probe="x", verdict="shared"),
    ]
    md = report.render_markdown(results, {}, sections=SECTIONS)
    assert "| THROTTLED |" in md and "| SHARED |" in md
    assert "1 fail, 1 unstable, 2 warn, 1 throttled, 1 shared, 6 pass; 4 reported" in md
