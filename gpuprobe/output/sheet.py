"""The fact sheet as a model: everything one run's sheet says, as plain text, built once for both writers.

:func:`fact_sheet` builds a :class:`Sheet` from a results file's content: the title and the banners, the device in
a line, the verdict naming the facts that failed, the probes in a line, the Answers block (the two questions
the suite exists for, answered from the run's facts: :mod:`gpuprobe.output.answers`), the headline and tensor-core
tables (:mod:`gpuprobe.output.headline`), the key plots, the run's conditions (:mod:`gpuprobe.output.run_conditions`),
the device and software, one section per probe family (the ``SECTIONS`` each family declares, then
``GENERAL_SECTIONS``: every fact in one row, what a row does not say in a note under its table), the hardware
witness (:mod:`gpuprobe.output.witness`), the probes that did not end ok or never ran
(:mod:`gpuprobe.output.probe_status`), and the expectations' sources, each numbered once in the order the sheet
cites it (:mod:`gpuprobe.output.references`). Each fact's verdict and detail are the judge's
(:func:`gpuprobe.judge.verdicts.remarks`), never judged again here.

The writers only mark it up: :mod:`gpuprobe.output.report` as Markdown, :mod:`gpuprobe.output.html_report` as
one HTML page; so the two formats say the same thing. Every number comes from the results; nothing here measures
or edits one.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from gpuprobe.core.numbers import fmt_bytes, fmt_num
from gpuprobe.core.results import Fact, Results, provenance
from gpuprobe.judge.verdicts import remarks
from gpuprobe.output import answers, headline, probe_status, witness
from gpuprobe.output.answers import Answer
from gpuprobe.output.headline import HeadlineRow, TensorRow
from gpuprobe.output.plots import measured_sm_mhz
from gpuprobe.output.probe_status import Problem
from gpuprobe.output.quantities import (
    NONE,
    ci_shown,
    fmt_detection,
    fmt_expected,
    fmt_measured,
    fmt_quantity,
    fmt_values,
    spans_zero,
    unit_suffix,
)
from gpuprobe.output.references import References, source_of
from gpuprobe.output.run_conditions import condition_rows, ran_at
from gpuprobe.output.sections import Plot, Section
from gpuprobe.output.series import Series, fold
from gpuprobe.output.witness import WitnessSection

# The sections every sheet ends with, after the families' own (see ``sheet_layout``). A fact goes to the
# first section whose id prefix matches, else to the first whose probe prefix matches its probe, else
# to "Other facts".
GENERAL_SECTIONS: tuple[Section, ...] = (
    Section(
        title="Device",
        fact_prefixes=("device.",),
        blurb="What the probes measured about the device, held against what it reports.",
    ),
    Section(
        title="Measurement overheads",
        fact_prefixes=("overhead.",),
        blurb="Measured costs subtracted from every timed loop.",
    ),
    Section(
        title="Cross-generation invariants",
        fact_prefixes=("invariant.",),
        blurb="Relations that hold on every GPU generation; asserted even for a GPU with no expectations.",
        invariants=True,
    ),
)
OTHER = Section(title="Other facts", fact_prefixes=())

LEGEND = (
    "Each fact once: its median, with the confidence interval when wider than ±1 %; Detects, the smallest "
    "change `gpuprobe compare` flags against a run like this one (80 % of the time), and why when 5 % is "
    "out of reach, and its samples (`n=9, max repeats`) when sampling stopped before the median settled; "
    "the expected range, severity and source [n] (see References); the verdict (—: reported, not judged). "
    "Facts whose ids differ in one part share a row, that part as `*`. A note under a table adds only what "
    "its row does not say; `gpuprobe expectations MODEL` gives every expectation's note."
)

PARTIAL_TEXT = (
    "PARTIAL RUN — this run did not finish. Facts may be missing and probes may not have run; see Probe "
    "status below. Do not publish or compare against this sheet as a complete result."
)
SIMULATED_TEXT = (
    "SIMULATED — no GPU was measured. Every number here comes from gpuprobe's simulated GPU (a NumPy model "
    "of each kernel on a small made-up part): it shows what a run produces, not what any hardware does. "
    "Do not publish, compare or judge hardware by it."
)
SMOKE_TEXT = (
    "SMOKE STAGE — each family's cheapest probes, measured once at minimal settings to see them run and "
    "verify their own results. These figures are not the part's performance: they are held to physics only, "
    "never to the GPU model's expectations. Quote the full run's sheet, not this one."
)
PROBE_STATUS_NOTE = "Probes that ended alike share a row, with the first one's detail; results.json holds every detail."

FACT_HEADER = ("Fact", "Median [CI]", "Detects", "Expected [ref]", "Verdict")
INVARIANT_HEADER = ("Invariant", "Result", "Verdict", "Detail")
PROBE_HEADER = ("Probes", "Status", "Detail")
DEVICE_HEADER = ("Device", "Value")
CONDITIONS_HEADER = ("Condition", "Over the run")
RAN_AT = "Ran at (NVML while measuring): "  # before a section's ran_at


def sheet_title(kind: str, results: Results) -> str:
    """A page's title: what it is and the device, marked SIMULATED where no GPU was measured."""
    return f"gpuprobe {kind}: {results.device.name}" + (" (SIMULATED)" if results.device.simulated else "")


# ---------------------------------------------------------------- the device and software


def _mhz(value: float | None) -> str:
    return NONE if value is None else f"{fmt_num(value)} MHz"


def _memory_row(results: Results) -> str:
    """Memory: clock, bus width and size, whichever the device reported."""
    dev = results.device
    parts = [f"{dev.memory_type} (datasheet)"] if dev.memory_type else []
    if dev.mem_bytes is not None:
        parts.append(fmt_bytes(dev.mem_bytes))
    if dev.mem_bus_bits is not None:
        parts.append(f"{dev.mem_bus_bits}-bit bus")
    if dev.mem_clock_mhz is not None:
        parts.append(f"{_mhz(dev.mem_clock_mhz)} clock")
    return ", ".join(parts) or NONE


def _shared_row(results: Results) -> str:
    dev = results.device
    if dev.shared_per_sm_bytes is None:
        return NONE
    text = fmt_bytes(dev.shared_per_sm_bytes)
    if dev.shared_per_block_optin_bytes is not None:
        text += f" (opt-in per block {fmt_bytes(dev.shared_per_block_optin_bytes)})"
    return text


def identity_rows(results: Results) -> list[tuple[str, str]]:
    """The device identity as (label, plain text) pairs (the first-contact page's table)."""
    dev = results.device
    sm_clock = f"{_mhz(measured_sm_mhz(results))} measured (nominal {_mhz(dev.sm_clock_nominal_mhz)})"
    return [
        ("GPU", dev.name),
        ("Architecture", f"{dev.arch} (compute capability {dev.cc})"),
        ("SMs", str(dev.sm_count)),
        ("SM clock", sm_clock),
        ("L2 cache", fmt_bytes(dev.l2_bytes)),
        *software_rows(results),
        ("Run date (UTC)", results.created),
    ]


def software_rows(results: Results) -> list[tuple[str, str]]:
    """What the sheet's device line leaves out, as (label, plain text) pairs: memory, shared memory, the
    driver, CUDA runtime, the toolkit that built the probes, and where the numbers came from: the board
    (UUID, serial), the host (name, machine id, boot) and the gpuprobe that measured (version, commit)."""
    dev, origin = results.device, provenance(results)
    return [
        ("Memory", _memory_row(results)),
        ("Shared memory per SM", _shared_row(results)),
        ("Driver", origin.driver_text()),
        ("CUDA runtime", dev.cuda_runtime),
        ("Toolkit that compiled the probes", dev.toolkit),
        ("Board", origin.board_text()),
        ("Host", origin.host_text()),
        ("gpuprobe", origin.code_text()),
    ]


# ---------------------------------------------------------------- the verdict line


@dataclass(frozen=True)
class VerdictLine:
    """The run's verdict: how many facts have each judged verdict (worst first), how many are reported, of how
    many facts, and the facts it names: (verdict, fact ids, how many more) for the failed, invalid, unstable and
    warned ones."""

    counts: list[tuple[str, int]]
    reported: int
    facts: int
    named: list[tuple[str, list[str], int]]

    def text(self) -> str:
        """ "1 fail, 9 pass; 12 reported, not judged (22 facts)"."""
        text = ", ".join(f"{n} {v.replace('_', ' ')}" for v, n in self.counts) or "nothing judged"
        return text + f"; {self.reported} reported, not judged ({self.facts} facts)"


def verdict_line(facts: list[Fact]) -> VerdictLine:
    """The verdict line of a run's ``facts``."""
    named = [(v, *headline.named_facts(facts, v)) for v in headline.NAMED if any(f.verdict == v for f in facts)]
    reported = sum(1 for f in facts if f.verdict == "report")
    return VerdictLine(headline.verdict_counts(facts), reported, len(facts), named)


# ---------------------------------------------------------------- the facts' rows and notes


@dataclass(frozen=True)
class FactRow:
    """One fact-table row as plain text; ``verdict`` is the verdict key (``"fail"``), not its marker;
    ``reference`` the number of its expectation's source (None: no source)."""

    fact_id: str
    measured: str
    detects: str
    expected: str
    reference: int | None
    verdict: str
    members: tuple[str, ...] = ()  # the ids a sweep's row holds (a single fact's row: its own)


@dataclass(frozen=True)
class InvariantRow:
    """One invariant-table row as plain text."""

    fact_id: str
    result: str
    verdict: str
    detail: str


@dataclass(frozen=True)
class Note:
    """What a fact's row does not say: what its detail adds (``said``), and its expectation's note when it did
    not pass."""

    fact_id: str
    said: str
    note: str


FOLDED_VERDICTS = ("pass", "warn", "report")
NOTED_VERDICTS = ("fail", "unstable", "invalid")  # whose expectation note the sheet shows


def _sweep_kin(fact: Fact) -> str | None:
    """What a fact's sweep must share with it (unit, expected range, source, verdict), or None when the fact
    keeps its own row: it failed, is unstable or not measured, its sign is not known, or it has a note (see
    :mod:`gpuprobe.output.series`)."""
    if fact.verdict not in FOLDED_VERDICTS or fact.value is None or fact.unit == "bool" or remarks(fact):
        return None
    if spans_zero(fact):
        return None
    expected = fmt_expected(fact.expectation, fact.unit)
    return "\0".join((fact.unit, expected, source_of(fact.expectation), fact.verdict))


def holds(fact: Fact) -> bool:
    """An invariant that was checked and holds."""
    return fact.verdict == "pass" and bool(fact.value)


def _held_kin(fact: Fact) -> str | None:
    return "holds" if holds(fact) else None


def series_values(sweep: Series) -> str:
    """ "ilp1 63.67 · ilp2 86.69 [85.2, 87.0] · ilp4 115.9 op/clk/SM": each member's median by its label,
    its CI when wider than ±0.5 %, the unit once."""
    unit = sweep.facts[0].unit
    parts = []
    for label, fact in zip(sweep.labels, sweep.facts, strict=True):
        value = fact.value if fact.value is not None else float("nan")
        if unit == "byte":
            text = fmt_quantity(value, unit)
        elif fact.ci is not None and ci_shown(fact):
            text = fmt_values([value, *fact.ci], "", "{0} [{1}, {2}]")
        else:
            text = fmt_num(value)
        parts.append(f"{label} {text}")
    return " · ".join(parts) + ("" if unit == "byte" else unit_suffix(unit))


def stop_text(facts: Sequence[Fact]) -> str:
    """ "n=9, max repeats": the samples and why sampling stopped, where it stopped before the median settled (at
    the most samples or the time budget); "" for facts that settled, or that say nothing of it."""
    reasons = sorted({reason for f in facts for reason in f.stopped.split("+") if reason})
    if set(reasons) <= {"stable"}:
        return ""
    counts = {len(f.samples) for f in facts if f.stopped}
    n = f"n={counts.pop()}" if len(counts) == 1 else f"n up to {max(counts)}"
    return f"{n}, {' + '.join(r.replace('_', ' ') for r in reasons)}"


def detects_text(facts: Sequence[Fact]) -> str:
    """The least sensitive fact's detectable change ("up to" when they differ), then :func:`stop_text`."""
    found = [f.detection for f in facts if f.detection is not None]
    detects = ""
    if found:
        worst = fmt_detection(max(found, key=lambda d: (d.detects_pct is not None, d.detects_pct or 0.0)))
        detects = worst if all(fmt_detection(d) == worst for d in found) else f"up to {worst}"
    return "; ".join(text for text in (detects, stop_text(facts)) if text) or NONE


def fact_rows(facts: list[Fact], mhz: float | None, refs: References) -> list[FactRow]:
    """Fact id, measured, noise and what a comparison detects, expected, source number, verdict; a sweep
    of reported facts in one row (see :mod:`gpuprobe.output.series`)."""
    rows = []
    for item in fold(facts, _sweep_kin):
        if isinstance(item, Series):
            first = item.facts[0]
            expected = fmt_expected(first.expectation, first.unit)
            rows.append(FactRow(item.pattern, series_values(item), detects_text(item.facts), expected,
                                refs.number(first), first.verdict, tuple(f.id for f in item.facts)))  # fmt: skip
            continue
        rows.append(
            FactRow(
                fact_id=item.id,
                measured=fmt_measured(item, mhz),
                detects=detects_text([item]),
                expected=fmt_expected(item.expectation, item.unit),
                reference=refs.number(item),
                verdict=item.verdict,
                members=(item.id,),
            )
        )
    return rows


def invariant_rows(facts: list[Fact]) -> list[InvariantRow]:
    """Every invariant that does not hold (or was not checked): id, result, verdict and what it compared,
    as plain text. Those that hold are ``held_invariants``."""
    rows = []
    for fact in facts:
        if not holds(fact):
            result = NONE if fact.value is None else ("holds" if fact.value else "VIOLATED")
            rows.append(InvariantRow(fact.id, result, fact.verdict, fact.detail.strip()))
    return rows


def held_invariants(facts: list[Fact]) -> list[tuple[str, list[str]]]:
    """The invariants that hold, by their first name part: [("latency_order", ["shared_below_l1", ...])],
    a sweep in one entry, "rate_below_peak.bf16.*.ss (m64n64k16, m64n128k16, m64n256k16)"; one-part names
    last, under ""."""
    groups: dict[str, list[Fact]] = {}
    for fact in facts:
        if holds(fact):
            name = fact.id.removeprefix("invariant.")
            groups.setdefault(name.partition(".")[0] if "." in name else "", []).append(fact)
    listed = []
    for group, members in sorted(groups.items(), key=lambda kv: kv[0] == ""):
        start = len(f"invariant.{group}.") if group else len("invariant.")
        names = []
        for item in fold(members, _held_kin):
            if isinstance(item, Series):
                rest = item.pattern[start:]
                names.append(", ".join(item.labels) if rest == "*" else f"{rest} ({', '.join(item.labels)})")
            else:
                names.append(item.id[start:])
        listed.append((group, names))
    return listed


def fact_notes(facts: list[Fact]) -> list[Note]:
    """A note for each fact whose detail says more than its row (:func:`~gpuprobe.judge.verdicts.remarks`), or
    whose expectation has a note and that did not pass."""
    items = []
    for fact in facts:
        note = str((fact.expectation or {}).get("note") or "").strip() if fact.verdict in NOTED_VERDICTS else ""
        said = remarks(fact)
        if said or note:
            items.append(Note(fact.id, said, note))
    return items


# ---------------------------------------------------------------- sections


def sheet_layout(family_sections: Sequence[Section]) -> tuple[Section, ...]:
    """Every section of the sheet in order: the families' own (``SECTIONS``, in the order the catalog
    gives them), then the general ones (``GENERAL_SECTIONS``)."""
    return (*family_sections, *GENERAL_SECTIONS)


def section_of(fact: Fact, layout: Sequence[Section]) -> Section:
    """The section a fact belongs to: by its longest matching id prefix first (``latency.l2.loaded.`` before
    ``latency.``; the earlier section on a tie), then by the probe that measured it."""
    matches = [(len(p), -i, section) for i, section in enumerate(layout) for p in section.fact_prefixes
               if fact.id.startswith(p)]  # fmt: skip
    if matches:
        return max(matches, key=lambda m: m[:2])[2]
    for section in layout:
        if section.probe_prefixes and fact.probe.startswith(section.probe_prefixes):
            return section
    return OTHER


def group_facts(facts: list[Fact], layout: Sequence[Section]) -> dict[str, list[Fact]]:
    """Facts by section title, each list in results order."""
    groups: dict[str, list[Fact]] = {}
    for fact in facts:
        groups.setdefault(section_of(fact, layout).title, []).append(fact)
    return groups


def section_counts(facts: list[Fact]) -> str:
    """ "12 facts: 1 fail, 9 pass, 2 reported": what a collapsed section's title line says."""
    counts = headline.verdict_counts(facts)
    reported = sum(1 for f in facts if f.verdict == "report")
    parts = [f"{n} {v.replace('_', ' ')}" for v, n in counts] + ([f"{reported} reported"] if reported else [])
    return f"{len(facts)} fact{'s' if len(facts) != 1 else ''}" + (f": {', '.join(parts)}" if parts else "")


def plot_alt(section: Section) -> str:
    """Alt text for a section's plot."""
    return section.plot.alt if section.plot else "plot"


@dataclass(frozen=True)
class SheetSection:
    """One section as the sheet shows it: its facts (an invariants section's as ``invariants`` and ``held``, any
    other's as ``rows`` and ``notes``), its probes and how each ended (what a section without facts names), and
    its plot (a file or URI; None: none), which ``plot_above`` says is under Key plots already."""

    section: Section
    facts: list[Fact]
    rows: list[FactRow]
    notes: list[Note]
    invariants: list[InvariantRow]
    held: list[tuple[str, list[str]]]
    probes: list[tuple[str, str]]
    plot: str | None
    plot_above: bool
    ran_at: str = ""  # what its facts' probes ran at, NVML sampled while they measured (run_conditions.ran_at)

    @property
    def counts(self) -> str:
        """What its title line says when it is collapsed (:func:`section_counts`), "no facts" without any."""
        return section_counts(self.facts) if self.facts else "no facts"

    @property
    def held_count(self) -> int:
        return sum(1 for f in self.facts if holds(f))


def sheet_section(
    results: Results,
    section: Section,
    facts: list[Fact],
    plots: Mapping[str, str],
    refs: References | None = None,
    above: Iterable[str] = (),
) -> SheetSection | None:
    """What ``section`` shows of ``facts`` (its sources numbered in ``refs``), with its plot from ``plots`` (key
    -> file or URI); None when it has nothing to show (no facts, plot or probes). A plot whose key is in ``above``
    is under Key plots already."""
    plot = plots.get(section.plot_key) if section.plot_key else None
    probes = [p for p in results.probes if section.probe_prefixes and p.startswith(section.probe_prefixes)]
    if not facts and not plot and not probes:
        return None
    refs = References() if refs is None else refs
    table = not section.invariants and facts
    return SheetSection(
        section=section,
        facts=facts,
        rows=fact_rows(facts, measured_sm_mhz(results), refs) if table else [],
        notes=fact_notes(facts) if table else [],
        invariants=invariant_rows(facts) if section.invariants else [],
        held=held_invariants(facts) if section.invariants else [],
        probes=[(p, results.probes[p].status) for p in probes],
        plot=plot,
        plot_above=plot is not None and section.plot_key in set(above),
        ran_at=ran_at(results, {f.probe for f in facts} | set(probes)),
    )


# ---------------------------------------------------------------- plots


@dataclass(frozen=True)
class KeyPlot:
    """A plot shown under the headline: its key, its file or URI, and its alt text."""

    key: str
    src: str
    alt: str


def all_plots(layout: Sequence[Section]) -> list[Plot]:
    """Every plot a section of the sheet can show."""
    return [section.plot for section in layout if section.plot]


def key_plots(plots: Mapping[str, str], layout: Sequence[Section]) -> list[KeyPlot]:
    """The key plots this run has, in ``headline.HEADLINE_PLOTS`` order."""
    alts = {s.plot_key: f"{s.title}: {plot_alt(s)}" for s in layout if s.plot_key}
    return [KeyPlot(k, plots[k], alts.get(k, k)) for k in headline.HEADLINE_PLOTS if k in plots]


def other_plots(plots: Mapping[str, str], layout: Sequence[Section]) -> list[tuple[str, str]]:
    """(key, file or URI) of the plots no section claims, sorted, so a plot handed in is never silently dropped."""
    known = {s.plot_key for s in layout if s.plot_key}
    return [(k, plots[k]) for k in sorted(plots) if k not in known]


# ---------------------------------------------------------------- the whole sheet


@dataclass(frozen=True)
class Sheet:
    """Everything one run's fact sheet says, in the order it says it, as plain text (see the module docstring).
    ``warnings``: the smoke stage's and a partial run's banner texts; a simulated run's is ``simulated``."""

    title: str
    simulated: bool
    warnings: list[str]
    device_line: str
    verdict: VerdictLine
    probes_line: str
    answers: list[Answer]
    headline: list[HeadlineRow]
    tensor: list[TensorRow]
    key_plots: list[KeyPlot]
    conditions: list[tuple[str, str]]
    software: list[tuple[str, str]]
    sections: list[SheetSection]
    witness: WitnessSection | None
    other_plots: list[tuple[str, str]]
    problems: list[Problem]
    references: list[tuple[int, str]]


def fact_sheet(results: Results, plots: Mapping[str, str], *, sections: Sequence[Section]) -> Sheet:
    """The sheet of ``results``, with the families' ``sections`` (in catalog order) and ``plots`` (a section's
    ``plot_key`` -> the file or URI of its image; a section whose key is absent gets none)."""
    refs = References()
    layout = sheet_layout(sections)
    rows = headline.headline_rows(results, refs)  # numbered first: the sources follow the sheet down
    keyed = key_plots(plots, layout)
    unwitnessed = witness.without_witness(results)
    groups = group_facts(unwitnessed.facts, layout)
    parts = [sheet_section(unwitnessed, s, groups.get(s.title, []), plots, refs, [k.key for k in keyed])
             for s in (*layout, OTHER)]  # fmt: skip
    warnings = [SMOKE_TEXT] if results.stage == "smoke" else []
    warnings += [PARTIAL_TEXT] if results.partial else []
    return Sheet(
        title=sheet_title("fact sheet", results),
        simulated=results.device.simulated,
        warnings=warnings,
        device_line=headline.device_line(results),
        verdict=verdict_line(results.facts),
        probes_line=probe_status.summary(results),
        answers=answers.answers(results),
        headline=rows,
        tensor=headline.tensor_rows(results),
        key_plots=keyed,
        conditions=condition_rows(results),
        software=software_rows(results),
        sections=[part for part in parts if part is not None],
        witness=witness.witness_section(results),
        other_plots=other_plots(plots, layout),
        problems=probe_status.problems(results),
        references=refs.entries(),
    )
