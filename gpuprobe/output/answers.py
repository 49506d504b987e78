"""The sheet's Answers block: the two questions this suite exists for, each answered in two or three sentences
written from the run's own facts.

"Is all that throughput actually goodput?" is answered from the goodput facts (useful and moved bytes per
access pattern, for DRAM and L2 reads and writes; the granule DRAM moves) and, on the compute side, from
cuBLAS's useful TFLOP/s against wgmma's issue rate and the datasheet at the measured clock. "Does loading that
vector from the L2 really take that long?" is answered from the near and far L2 latencies (one SM's chase and
the spread over SMs), the working set where near becomes far, a warp-wide vector load, latency under load and
the bytes in flight per SM that hide it.

Nothing is typed: every number is a fact of the run, so another GPU's run reads its own sentences. A sentence
whose facts the run lacks is left out, and a fact that failed or is impossible (a value no hardware gives) is
never quoted as an answer. A question none of whose sentences the run can write says so.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

from gpuprobe.core.numbers import fmt_num
from gpuprobe.core.results import Fact, Results
from gpuprobe.judge.verdicts import is_impossible
from gpuprobe.output.plots import measured_sm_mhz
from gpuprobe.output.quantities import fmt_measured, fmt_quantity

GOODPUT_QUESTION = "Is all that throughput actually goodput?"
L2_QUESTION = "Does loading that vector from the L2 really take that long?"
NOT_MEASURED = "Not measured in this run."
UNQUOTABLE = ("fail", "invalid", "not_run")  # verdicts whose value is no answer

# bandwidth.goodput[.<level_op>].<pattern>.<quantity>: DRAM reads carry no level_op
_GOODPUT_ID = re.compile(
    r"bandwidth\.goodput\.(?:(?P<level>l2_read|dram_write|l2_write)\.)?(?P<pattern>.+)\.efficiency"
)
LEVEL_NAMES = {"dram_read": "DRAM reads", "l2_read": "L2 reads", "dram_write": "DRAM writes", "l2_write": "L2 writes"}
MOVED_FROM = {"granule": "derived from the granule the run measured", "witness": "counted by the hardware witness"}


@dataclass(frozen=True)
class Answer:
    """One question and the sentences that answer it (``[NOT_MEASURED]`` when the run has none)."""

    question: str
    sentences: list[str]

    def text(self) -> str:
        return " ".join(self.sentences)


def quotable(results: Results, fact_id: str) -> Fact | None:
    """The fact, when its value may be quoted as an answer: measured, not failed, not impossible."""
    fact = results.fact(fact_id)
    if fact is None or fact.value is None or fact.verdict in UNQUOTABLE or is_impossible(fact):
        return None
    return fact


def latency_text(fact: Fact, mhz: float | None) -> str:
    """ "280.8 cyc (141.8 ns)": the value in its unit, ns beside cycles where known, as the headline writes it
    (without its CI)."""
    return fmt_measured(fact, mhz, with_ci=False)


def percent(fraction: float) -> str:
    return f"{fraction * 100:.0f} %"


def joined(parts: list[str]) -> str:
    """ "a", "a and b", "a, b and c"."""
    return parts[0] if len(parts) == 1 else f"{', '.join(parts[:-1])} and {parts[-1]}"


# ---------------------------------------------------------------- goodput


@dataclass(frozen=True)
class Pattern:
    """One goodput pattern's facts: the level and operation, the pattern, useful and moved rates, efficiency."""

    level: str
    pattern: str
    useful: Fact
    moved: Fact
    efficiency: Fact


def goodput_patterns(results: Results) -> list[Pattern]:
    """Every pattern whose useful, moved and efficiency facts may all be quoted, in results order."""
    found = []
    for fact in results.facts:
        match = _GOODPUT_ID.fullmatch(fact.id)
        if match is None:
            continue
        prefix = fact.id.removesuffix(".efficiency")
        useful, moved = quotable(results, f"{prefix}.useful"), quotable(results, f"{prefix}.moved")
        efficiency = quotable(results, fact.id)
        if useful is not None and moved is not None and efficiency is not None:
            found.append(Pattern(match["level"] or "dram_read", match["pattern"], useful, moved, efficiency))
    return found


def moved_from(results: Results, pattern: Pattern) -> str:
    """How the run knows the bytes moved for a pattern (its probe's ``goodput`` series ``moved_from``), "" if unsaid."""
    outcome = results.probes.get(pattern.efficiency.probe)
    series = (outcome.series if outcome is not None else {}).get("goodput", {})
    kinds = series.get("moved_from") if isinstance(series, dict) else None
    return MOVED_FROM.get(kinds[0], "") if isinstance(kinds, list) and kinds else ""


def _rate(fact: Fact) -> str:
    return fmt_quantity(fact.value or 0.0, fact.unit)


def dram_read_sentence(results: Results, patterns: list[Pattern]) -> str:
    """The rule (the granule DRAM moves) and the DRAM-read pattern that wastes the most, useful against moved."""
    reads = [p for p in patterns if p.level == "dram_read"]
    granule = quotable(results, "bandwidth.goodput.granule_bytes")
    rule = f"DRAM moves whole {fmt_num(granule.value or 0.0)}-B units" if granule is not None else ""
    if not reads:
        return f"{rule}." if rule else ""
    worst = min(reads, key=lambda p: p.efficiency.value or 0.0)
    best = max(reads, key=lambda p: p.efficiency.value or 0.0)
    how = moved_from(results, worst)
    text = (f"{rule}, so " if rule else "") + (
        f"the most wasteful DRAM read measured, {worst.pattern}, delivers {_rate(worst.useful)} useful of "
        f"{_rate(worst.moved)} moved ({percent(worst.efficiency.value or 0.0)} efficiency"
        + (f"; moved bytes {how}" if how else "")
        + ")"
    )
    if best is not worst:
        text += f", where {best.pattern} reaches {percent(best.efficiency.value or 0.0)}"
    return text[0].upper() + text[1:] + "."


def other_levels_sentence(patterns: list[Pattern]) -> str:
    """The worst pattern of each other level and operation (L2 reads, DRAM and L2 writes), by efficiency."""
    parts = []
    for level in ("l2_read", "dram_write", "l2_write"):
        found = [p for p in patterns if p.level == level]
        if found:
            worst = min(found, key=lambda p: p.efficiency.value or 0.0)
            parts.append(f"{LEVEL_NAMES[level]} {worst.pattern} {percent(worst.efficiency.value or 0.0)} "
                         f"({_rate(worst.useful)} of {_rate(worst.moved)})")  # fmt: skip
    return f"Worst elsewhere: {joined(parts)}." if parts else ""


def tensor_sentence(results: Results) -> str:
    """cuBLAS's useful bf16 TFLOP/s against wgmma's issue rate and the datasheet at the measured clock (the facts
    the tensor table shows: :func:`gpuprobe.output.headline.tensor_rows`)."""
    cublas = quotable(results, "tensor.cublas.bf16.tflops")
    if cublas is None:
        return ""
    text = f"On the tensor cores, cuBLAS's bf16 GEMM does {_rate(cublas)} of useful work"
    parts = []
    versus = quotable(results, "tensor.wgmma.bf16.fraction_of_cublas")
    if versus is not None:
        parts.append(f"wgmma issues {fmt_num(versus.value or 0.0)} × that")
    peak = quotable(results, "tensor.wgmma.bf16.datasheet_peak_at_clock")
    if peak is not None and peak.value:
        share = percent((cublas.value or 0.0) / peak.value)
        parts.append(f"the datasheet at the measured clock is {_rate(peak)} (cuBLAS at {share})")
    return text + (f": {joined(parts)}." if parts else ".")


def goodput_answer(results: Results) -> Answer:
    patterns = goodput_patterns(results)
    sentences = [dram_read_sentence(results, patterns), other_levels_sentence(patterns), tensor_sentence(results)]
    return Answer(GOODPUT_QUESTION, [s for s in sentences if s] or [NOT_MEASURED])


# ---------------------------------------------------------------- the L2


def _spread(results: Results, stem: str) -> str:
    """ "258–303 cyc over SMs (median 276)" from ``<stem>``, ``<stem>.min`` and ``<stem>.max``; "" without them."""
    low, high = quotable(results, f"{stem}.min"), quotable(results, f"{stem}.max")
    median = quotable(results, stem)
    if low is None or high is None:
        return f"median over SMs {_rate(median)}" if median is not None else ""
    text = f"{fmt_num(low.value or 0.0)}–{_rate(high)} over SMs"
    return text + (f" (median {fmt_num(median.value or 0.0)})" if median is not None else "")


def near_far_sentence(results: Results, mhz: float | None) -> str:
    """Near and far L2 latency (one SM's chase, and the spread over SMs), and the working set where near becomes
    far: "A dependent load hits the near L2 in 280.8 cyc (141.8 ns) on one SM, 258–303 cyc over SMs (median 276);
    the far L2 in 511.8 cyc (258.5 ns) once the working set passes 28.8 MiB, a far-homed line's first touch: ..."."""
    near, far = quotable(results, "latency.l2"), quotable(results, "latency.l2_far")
    near_spread, far_spread = _spread(results, "l2.near_latency"), _spread(results, "l2.far_latency")
    knee = quotable(results, "capacity.l2_near")
    parts = []
    if near is not None or near_spread:
        said = [f"{latency_text(near, mhz)} on one SM"] if near is not None else []
        parts.append("the near L2 in " + ", ".join(said + ([near_spread] if near_spread else [])))
    if far is not None or far_spread:
        text = "the far L2 in " + (latency_text(far, mhz) if far is not None else far_spread)
        text += f" once the working set passes {_rate(knee)}" if knee is not None else ""
        parts.append(
            text + (f", a far-homed line's first touch: {far_spread}" if far is not None and far_spread else "")
        )
    elif knee is not None:
        parts.append(f"the far L2 once the working set passes {_rate(knee)}")
    return f"A dependent load hits {'; '.join(parts)}." if parts else ""


def _under_load(results: Results, level: str, name: str) -> str:
    """ "while the rest of the GPU streams from the L2 at 90 % of the most it reached (895 GB/s)": what ``p90``
    of a loaded-latency fact means (a load level, not a percentile of the latencies)."""
    most = quotable(results, f"latency.{level}.loaded.max_bandwidth")
    reached = f" ({_rate(most)})" if most is not None else ""
    return f"while the rest of the GPU streams from {name} at 90 % of the most it reached{reached}"


def vector_and_load_sentence(results: Results, mhz: float | None) -> str:
    """A warp-wide 16-B vector load; then latency under load (idle against the chase while the rest of the GPU
    streams from the same level at 90 % of the most it reached)."""
    sentences = []
    warp = quotable(results, "latency.l2.warp_v16")
    if warp is not None:
        sentences.append(f"A warp-wide vector load (32 lanes × 16 B) takes {latency_text(warp, mhz)}.")
    loaded = []
    idle, l2 = quotable(results, "latency.l2.loaded.idle"), quotable(results, "latency.l2.loaded.p90")
    if l2 is not None:
        loaded.append("the L2 chase reads " + (f"{_rate(idle)} idle and " if idle is not None else "")
                      + f"{_rate(l2)} {_under_load(results, 'l2', 'the L2')}")  # fmt: skip
    dram = quotable(results, "latency.dram.loaded.p90")
    if dram is not None:
        loaded.append(f"DRAM's {_rate(dram)} {_under_load(results, 'dram', 'DRAM')}")
    if loaded:
        sentences.append(f"Under load, {joined(loaded)}.")
    return " ".join(sentences)


def in_flight_sentence(results: Results) -> str:
    """The bytes in flight per SM that reach 50 % and 90 % of each level's bandwidth (Little's law)."""
    parts = []
    for level, name in (("l2", "the L2"), ("dram", "DRAM")):
        half = quotable(results, f"bandwidth.{level}.bytes_in_flight_per_sm.p50")
        most = quotable(results, f"bandwidth.{level}.bytes_in_flight_per_sm.p90")
        if half is None and most is None:
            continue
        reach = joined([f"{_rate(f)} for {share}" for f, share in ((half, "50 %"), (most, "90 %")) if f is not None])
        warps = quotable(results, f"bandwidth.{level}.warps_per_sm.p90")
        little = quotable(results, f"bandwidth.{level}.little_bytes_per_sm")
        extra = [f"{fmt_num(warps.value or 0.0)} warps per SM at 90 %"] if warps is not None else []
        extra += [f"Little's law says {_rate(little)}"] if little is not None else []
        parts.append(f"{name} needs {reach} of its bandwidth in flight per SM"
                     + (f" ({'; '.join(extra)})" if extra else ""))  # fmt: skip
    return f"To hide it, {joined(parts)}." if parts else ""


def l2_answer(results: Results) -> Answer:
    mhz = measured_sm_mhz(results)
    sentences = [near_far_sentence(results, mhz), vector_and_load_sentence(results, mhz), in_flight_sentence(results)]
    return Answer(L2_QUESTION, [s for s in sentences if s] or [NOT_MEASURED])


ANSWERS: tuple[Callable[[Results], Answer], ...] = (goodput_answer, l2_answer)


def answers(results: Results) -> list[Answer]:
    """Both questions, answered from ``results``."""
    return [answer(results) for answer in ANSWERS]
