"""The Answers block: the two questions answered from synthetic results built here (test data, invented values):
each sentence quotes the run's facts, is left out when they are absent, and never quotes a failed or impossible
fact; both writers put the block above the headline."""

from __future__ import annotations

import pytest

from gpuprobe.core.results import Fact, ProbeOutcome, Results
from gpuprobe.families.catalog import sections
from gpuprobe.judge.verdicts import IMPOSSIBLE
from gpuprobe.output import answers, html_report, report
from gpuprobe.output.answers import GOODPUT_QUESTION, L2_QUESTION, NOT_MEASURED
from tests.helpers.devices import H200

MHZ = 1980.0
MIB = 2**20
GOODPUT_PROBE = "bandwidth.goodput.v4.stride16"


def fact(fact_id: str, value: float, unit: str, verdict: str = "report", probe: str = "", **more: object) -> Fact:
    return Fact(fact_id, value, unit, (value, value), probe=probe, verdict=verdict, **more)  # type: ignore[arg-type]


def goodput(prefix: str, useful: float, moved: float, probe: str = "") -> list[Fact]:
    """A pattern's three facts (GB/s useful and moved, their ratio)."""
    return [fact(f"{prefix}.useful", useful, "GB/s", probe=probe), fact(f"{prefix}.moved", moved, "GB/s", probe=probe),
            fact(f"{prefix}.efficiency", useful / moved, "fraction", probe=probe)]  # fmt: skip


def cycles(fact_id: str, value: float, verdict: str = "pass") -> Fact:
    return fact(fact_id, value, "cycle", verdict, converted={"ns": value / MHZ * 1000})


def whole_run() -> list[Fact]:
    """Every fact either question quotes, with invented values."""
    return [
        fact("bandwidth.goodput.granule_bytes", 64.0, "byte"),
        *goodput("bandwidth.goodput.v4.stride1", 4400.0, 4400.0),
        *goodput("bandwidth.goodput.v4.stride16", 290.0, 4640.0, GOODPUT_PROBE),
        *goodput("bandwidth.goodput.l2_read.v4.stride8", 1100.0, 8800.0),
        *goodput("bandwidth.goodput.l2_read.v16.unit", 8700.0, 8800.0),
        *goodput("bandwidth.goodput.dram_write.v4.stride2", 1900.0, 3800.0),
        *goodput("bandwidth.goodput.l2_write.v4.offset4", 3000.0, 4000.0),
        fact("tensor.cublas.bf16.tflops", 801.8, "TFLOP/s"),
        fact("tensor.wgmma.bf16.fraction_of_cublas", 1.173, "fraction"),
        fact("tensor.wgmma.bf16.datasheet_peak_at_clock", 946.5, "TFLOP/s"),
        cycles("latency.l2", 280.8),
        cycles("latency.l2_far", 511.8),
        cycles("l2.near_latency", 276.0, "report"),
        cycles("l2.near_latency.min", 258.0, "report"),
        cycles("l2.near_latency.max", 303.0, "report"),
        cycles("l2.far_latency", 446.8, "report"),
        fact("capacity.l2_near", 28.8 * MIB, "byte"),
        cycles("latency.l2.warp_v16", 301.5, "report"),
        cycles("latency.l2.loaded.idle", 281.0, "report"),
        cycles("latency.l2.loaded.p90", 612.0, "report"),
        fact("latency.l2.loaded.max_bandwidth", 8600.0, "GB/s"),
        cycles("latency.dram.loaded.p90", 1450.0, "report"),
        fact("bandwidth.l2.bytes_in_flight_per_sm.p50", 4096.0, "byte"),
        fact("bandwidth.l2.bytes_in_flight_per_sm.p90", 9728.0, "byte"),
        fact("bandwidth.l2.warps_per_sm.p90", 19.0, "count"),
        fact("bandwidth.l2.little_bytes_per_sm", 9523.0, "byte"),
        fact("bandwidth.dram.bytes_in_flight_per_sm.p90", 32768.0, "byte"),
    ]


def results(facts: list[Fact], moved_from: str | None = "granule") -> Results:
    series = {"goodput": {"useful_gbps": [290.0], "moved_from": [moved_from]}} if moved_from else {}
    probes = {GOODPUT_PROBE: ProbeOutcome("ok", series=series)}
    return Results(device=H200, facts=facts, probes=probes, clocks={"sm_mhz_measured": MHZ, "model": "h200"},
                   partial=False)  # fmt: skip


def answer(run: Results, question: str) -> str:
    return next(a for a in answers.answers(run) if a.question == question).text()


def test_goodput_is_answered_from_the_patterns_the_run_measured() -> None:
    text = answer(results(whole_run()), GOODPUT_QUESTION)
    assert text.startswith("DRAM moves whole 64-B units, so the most wasteful DRAM read measured, v4.stride16, "
                           "delivers 290 GB/s useful of 4640 GB/s moved (6 % efficiency; moved bytes derived from "
                           "the granule the run measured), where v4.stride1 reaches 100 %.")  # fmt: skip
    assert ("Worst elsewhere: L2 reads v4.stride8 12 % (1100 GB/s of 8800 GB/s), DRAM writes v4.stride2 50 % "
            "(1900 GB/s of 3800 GB/s) and L2 writes v4.offset4 75 % (3000 GB/s of 4000 GB/s).") in text  # fmt: skip
    assert text.endswith(
        "On the tensor cores, cuBLAS's bf16 GEMM does 801.8 TFLOP/s of useful work: wgmma issues "
        "1.173 × that and the datasheet at the measured clock is 946.5 TFLOP/s (cuBLAS at 85 %)."
    )


def test_the_moved_bytes_say_when_the_hardware_witness_counted_them() -> None:
    assert "moved bytes counted by the hardware witness" in answer(results(whole_run(), "witness"), GOODPUT_QUESTION)
    assert "moved bytes" not in answer(results(whole_run(), None), GOODPUT_QUESTION)


def test_the_l2_is_answered_in_cycles_and_ns_with_the_spread_the_knee_the_vector_load_and_what_hides_it() -> None:
    text = answer(results(whole_run()), L2_QUESTION)
    assert text == (
        "A dependent load hits the near L2 in 280.8 cyc (141.8 ns) on one SM, 258–303 cyc over SMs (median 276); "
        "the far L2 in 511.8 cyc (258.5 ns) once the working set passes 28.8 MiB, a far-homed line's first touch: "
        "median over SMs 446.8 cyc. A warp-wide vector load (32 lanes × 16 B) takes 301.5 cyc (152.3 ns). Under "
        "load, the L2 chase reads 281 cyc idle and 612 cyc while the rest of the GPU streams from the L2 at 90 % "
        "of the most it reached (8600 GB/s) and DRAM's 1450 cyc while the rest of the GPU streams from DRAM at 90 % "
        "of the most it reached. To hide it, "
        "the L2 needs 4 KiB for 50 % and 9.5 KiB for 90 % of its bandwidth in flight per SM (19 warps per SM at "
        "90 %; Little's law says 9.3 KiB) and DRAM needs 32 KiB for 90 % of its bandwidth in flight per SM."
    )


def test_numbers_come_from_the_facts_another_gpu_reads_its_own() -> None:
    other = [f if f.id != "latency.l2" else cycles("latency.l2", 210.0) for f in whole_run()]
    text = answer(results(other), L2_QUESTION)
    assert "near L2 in 210 cyc (106.1 ns)" in text and "280.8" not in text


@pytest.mark.parametrize("question", [GOODPUT_QUESTION, L2_QUESTION])
def test_a_run_without_the_facts_says_it_did_not_measure_them(question: str) -> None:
    assert answer(results([]), question) == NOT_MEASURED


def test_sentences_whose_facts_are_absent_are_left_out() -> None:
    kept = [f for f in whole_run() if not f.id.startswith(("bandwidth.goodput.", "latency.l2.", "latency.dram."))]
    goodput_text, l2_text = answer(results(kept), GOODPUT_QUESTION), answer(results(kept), L2_QUESTION)
    assert goodput_text.startswith("On the tensor cores") and "Worst elsewhere" not in goodput_text
    assert "warp-wide" not in l2_text and "under load" not in l2_text and l2_text.startswith("A dependent load")
    assert "To hide it" in l2_text


@pytest.mark.parametrize("verdict", ["fail", "invalid", "not_run"])
def test_a_failed_fact_is_never_quoted(verdict: str) -> None:
    facts = [f if f.id != "latency.l2" else cycles("latency.l2", 999.0, verdict) for f in whole_run()]
    text = answer(results(facts), L2_QUESTION)
    assert "999" not in text and "258–303 cyc over SMs" in text


def test_an_impossible_pattern_is_not_the_answer() -> None:
    impossible = fact("bandwidth.goodput.v4.stride16.useful", 290.0, "GB/s", "fail", detail=f"{IMPOSSIBLE}: above")
    facts = [impossible if f.id == impossible.id else f for f in whole_run()]
    text = answer(results(facts), GOODPUT_QUESTION)
    assert "v4.stride16" not in text and "the most wasteful DRAM read measured, v4.stride1," in text


def test_both_writers_put_the_answers_above_the_headline() -> None:
    run = results(whole_run())
    markdown = report.render_markdown(run, {}, sections=sections())
    assert markdown.index("## Answers") < markdown.index("## Headline")
    assert f"**{GOODPUT_QUESTION}** DRAM moves whole 64-B units" in markdown
    page = html_report.render_html(run, {}, sections=sections())
    assert page.index('id="answers"') < page.index('id="headline"')
    assert f"<strong>{L2_QUESTION}</strong> A dependent load hits the near L2" in page
