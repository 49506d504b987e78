"""The sheet's first screen: the device in one line, the verdict in one line, the numbers an engineer asks
for first (latencies, capacities, bandwidths, FP32 rate, shuffles, barriers, launch and host-link costs),
each with its expectation and verdict, and the tensor cores per data type (mma.sync, wgmma, the datasheet
peak at the measured clock, cuBLAS).

Every number is a fact of the run (or plain arithmetic on facts and the device's own figures, stated as
such: a per-SM rate times the SM count and the measured clock). A headline fact the run lacks says why:
its probe failed, never ran, or found no such level; a fact this GPU's arch cannot have (wgmma off
sm_90a) is left out. Which probe declares a fact, and the archs it targets, is what the run recorded
(``declared_probes``; a file from before runs recorded it is read with this gpuprobe's declarations,
``kernels.registry.with_declarations``).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta

from gpuprobe.core.numbers import fmt_bytes, fmt_num
from gpuprobe.core.results import Fact, Results, provenance
from gpuprobe.judge.expectations import ModelExpectations, Published
from gpuprobe.judge.verdicts import is_impossible, model_of
from gpuprobe.output.plots import measured_sm_mhz
from gpuprobe.output.quantities import fmt_expected, fmt_measured, fmt_quantity, unit_suffix
from gpuprobe.output.references import References
from gpuprobe.output.run_conditions import ran_at

# The key plots, shown under the headline in this order (a family's ``Plot.key``); the sheet shows those the run has.
HEADLINE_PLOTS = ("latency_vs_footprint", "dram_occupancy", "wgmma_latency_vs_n", "l2_partition_map", "goodput",
                  "loaded_latency", "sustained")  # fmt: skip

Compare = Callable[[Results], str]


def _value(results: Results, fact_id: str) -> float | None:
    fact = results.fact(fact_id)
    return None if fact is None else fact.value


def percent(fraction_id: str, of: str, reference_id: str | None = None) -> Compare:
    """ "94 % of the theoretical peak (4814 GB/s)": a fraction fact, and the figure it is a fraction of."""

    def text(results: Results) -> str:
        fraction = _value(results, fraction_id)
        if fraction is None:
            return ""
        reference = _value(results, reference_id) if reference_id else None
        unit = results.fact(reference_id).unit if reference_id and results.fact(reference_id) else ""
        shown = f" ({fmt_quantity(reference, unit)})" if reference is not None else ""
        return f"{fraction * 100:.0f} % of {of}{shown}"

    return text


def whole_gpu(per: str, factor: float = 1.0, unit: str = "", scale: float = 1.0) -> Compare:
    """A per-SM-per-clock rate over the whole GPU at the measured clock: "= 33.45 TB/s (132 SMs × 1980 MHz)"."""

    def text(results: Results) -> str:
        value, mhz = _value(results, per), measured_sm_mhz(results)
        if value is None or not mhz:
            return ""
        total = value * factor * results.device.sm_count * mhz * 1e6 / scale
        return f"= {fmt_num(total)} {unit} ({results.device.sm_count} SMs × {fmt_num(mhz)} MHz)"

    return text


def beside(fact_id: str, label: str) -> Compare:
    """Another fact of the run that says what this one is not: "every SM: 276 cyc (spread 46 cyc)"."""

    def text(results: Results) -> str:
        fact = results.fact(fact_id)
        return "" if fact is None or fact.value is None else f"{label} {fmt_quantity(fact.value, fact.unit)}"

    return text


def joined(*parts: Compare) -> Compare:
    """Several comparisons in one cell, "; " between them."""

    def text(results: Results) -> str:
        return "; ".join(t for t in (part(results) for part in parts) if t)

    return text


@dataclass(frozen=True)
class Headline:
    """One line of the headline table: what an engineer asks, the fact that answers it, what of the run to set
    it against, and the datasheet figure (a model's ``[datasheet."<key>"]``) it is held to, if any."""

    label: str
    fact_id: str
    compare: Compare | None = None
    datasheet: str = ""


HEADLINES: tuple[Headline, ...] = (
    Headline("Shared memory latency", "latency.shared"),
    Headline("L1 hit latency", "latency.l1"),
    Headline(
        "L2 hit latency, near (one SM's chase)",
        "latency.l2",
        joined(beside("l2.near_latency", "median over SMs"), beside("latency.l2.sm_spread", "SMs spread over")),
    ),
    Headline(
        "L2 hit latency, far (footprint plateau)",
        "latency.l2_far",
        beside("l2.far_latency", "a far-homed line's first touch"),
    ),
    Headline("L2 near capacity (where near becomes far)", "capacity.l2_near"),
    Headline("DRAM latency", "latency.dram"),
    Headline("L1 capacity (latency knee)", "capacity.l1"),
    Headline("L2 capacity (latency knee)", "capacity.l2"),
    Headline(
        "DRAM read bandwidth",
        "bandwidth.dram_read.v16",
        percent("bandwidth.dram_read_fraction_of_peak", "the theoretical peak", "bandwidth.dram_theoretical"),
        "dram_gbps",
    ),
    Headline(
        "DRAM copy bandwidth (read + write)",
        "bandwidth.dram_copy.v16",
        joined(
            percent("bandwidth.dram_copy_fraction_of_peak", "the theoretical peak"),
            percent("bandwidth.dram_copy_fraction_of_memcpy", "cudaMemcpy", "bandwidth.dram_copy_cuda_memcpy"),
        ),
        "dram_gbps",
    ),
    Headline("L2 read bandwidth", "bandwidth.l2_read.v16"),
    Headline("L1 read bandwidth", "bandwidth.l1_read.v16", whole_gpu("bandwidth.l1_read.v16", unit="TB/s", scale=1e12)),
    Headline(
        "Shared memory read bandwidth",
        "bandwidth.shared_read.v16",
        whole_gpu("bandwidth.shared_read.v16", unit="TB/s", scale=1e12),
    ),
    Headline(
        "FFMA (FP32) throughput",
        "alu.ffma.throughput",
        whole_gpu("alu.ffma.throughput", factor=2.0, unit="TFLOP/s FP32", scale=1e12),
    ),
    Headline("FFMA latency", "alu.ffma.latency"),
    Headline("Warp shuffle latency (bfly)", "warp.shfl.bfly.latency"),
    Headline("Warp shuffle throughput (bfly)", "warp.shfl.bfly.throughput"),
    Headline("Block barrier, 256 threads", "sync.block.latency.256"),
    Headline("Grid barrier (cooperative, every SM)", "sync.grid.latency"),
    Headline("Kernel launch, host enqueue (CuPy)", "launch.stream.host_latency.cupy"),
    Headline("Kernel launch, back-to-back on the GPU", "launch.stream.gpu_spacing"),
    Headline("CUDA graph, per kernel node", "launch.graph.per_node.gpu"),
    Headline("Host → device, pinned", "host.h2d.pinned.bandwidth"),
    Headline("Device → host, pinned", "host.d2h.pinned.bandwidth"),
)

HEADLINE_HEADER = ("Fact", "Measured", "Compared with", "Published", "Expected", "Verdict")


@dataclass(frozen=True)
class Cited:
    """A figure from outside the run as a cell shows it: its text and its source's number (None: no source)."""

    text: str
    reference: int | None


@dataclass(frozen=True)
class HeadlineRow:
    """One headline line as plain text; ``verdict`` is the fact's verdict key, "" when it was not measured;
    ``reference`` the number of its expectation's source (None: no source); ``published`` the nearest published
    measurement and the datasheet figure, each with its source's number."""

    label: str
    fact_id: str
    measured: str
    compared: str
    expected: str
    verdict: str
    fact: Fact | None
    reference: int | None = None
    published: tuple[Cited, ...] = ()


def published_value(found: Published) -> str:
    """ "29 cyc", "279–282 cyc", "233 KiB": a published value or spread in its unit."""
    if found.unit != "byte":
        return found.value_text() + unit_suffix(found.unit)
    low, high = fmt_quantity(found.low, "byte"), fmt_quantity(found.high, "byte")
    return low if low == high else f"{low}–{high}"


def nearest_published(found: tuple[Published, ...], value: float | None) -> Published:
    """The published measurement nearest ``value`` (the first listed when there is no value)."""
    return found[0] if value is None else min(found, key=lambda p: p.distance(value))


def published_cells(model: ModelExpectations | None, line: Headline, fact: Fact | None,
                    refs: References) -> tuple[Cited, ...]:  # fmt: skip
    """What a headline row shows of the world outside the run: the published measurement of its fact nearest
    the run's value ("279–282 cyc GH200, random chase (nearest of 3) [18]"), and its datasheet figure."""
    if model is None:
        return ()
    cells = []
    found = model.published_for(line.fact_id)
    if found:
        near = nearest_published(found, fact.value if fact is not None else None)
        more = f" (nearest of {len(found)})" if len(found) > 1 else ""
        cells.append(Cited(f"{published_value(near)} {near.part}, {near.method}{more}", refs.cite(near.source)))
    sheet = model.datasheet.get(line.datasheet) if line.datasheet else None
    if sheet is not None:
        cells.append(Cited(f"datasheet {fmt_num(sheet.value)} {sheet.unit}", refs.cite(sheet.source)))
    return tuple(cells)


def why_missing(results: Results, fact_id: str) -> str | None:
    """Why the run has no such fact (plain text); None when this GPU's arch cannot have it, or the gpuprobe that
    made the run (an older one, which recorded no version) did not measure it yet."""
    name = next((name for name, p in results.declared_probes.items() if fact_id in p.facts), None)
    if name is None:
        return "not measured"
    if not results.declared_probes[name].targets(results.device.arch):
        return None
    outcome = results.probes.get(name)
    if outcome is None:
        return f"not measured: {name} never ran"
    if outcome.status == "ok" and not provenance(results).version:
        return None  # an older gpuprobe's run, before this fact was measured: nothing to say of this GPU
    if outcome.status == "ok":
        return "none found (its probe ran and verified itself)"
    return f"not measured: {name} {outcome.status}"


def headline_rows(results: Results, refs: References | None = None) -> list[HeadlineRow]:
    """The headline table's rows, in ``HEADLINES`` order, each fact's source numbered in ``refs``; facts this GPU
    cannot have are left out."""
    refs = References() if refs is None else refs
    mhz = measured_sm_mhz(results)
    model = model_of(results)
    rows = []
    for line in HEADLINES:
        fact = results.fact(line.fact_id)
        if fact is None:
            missing = why_missing(results, line.fact_id)
            if missing is not None:
                published = published_cells(model, line, None, refs)
                rows.append(HeadlineRow(line.label, line.fact_id, missing, "", "", "", None, None, published))
            continue
        # an impossible value (a negative bandwidth) is set against nothing: its share of a peak would be a lie too
        compared = line.compare(results) if line.compare and fact.value is not None and not is_impossible(fact) else ""
        measured = fmt_measured(fact, mhz, with_ci=False)
        reference = refs.number(fact)
        rows.append(
            HeadlineRow(line.label, line.fact_id, measured, compared, fmt_expected(fact.expectation, fact.unit),
                        fact.verdict, fact, reference, published_cells(model, line, fact, refs))
        )  # fmt: skip
    return rows


# ---------------------------------------------------------------- tensor cores per type


@dataclass(frozen=True)
class TensorType:
    """One data type as the tensor-core families name it: mma.sync's key, wgmma's key, the rate's unit."""

    label: str
    mma: str
    wgmma: str
    unit: str


TENSOR_TYPES: tuple[TensorType, ...] = (
    TensorType("f16 (f32 accumulate)", "f16", "f16", "TFLOP/s"),
    TensorType("bf16", "bf16", "bf16", "TFLOP/s"),
    TensorType("tf32", "tf32", "tf32", "TFLOP/s"),
    TensorType("fp8 e4m3", "fp8", "e4m3", "TFLOP/s"),
    TensorType("int8", "int8", "s8", "TOP/s"),
)
TENSOR_HEADER = ("Type", "mma.sync (best shape)", "wgmma dense", "wgmma ran at (NVML)", "Datasheet at clock", "cuBLAS",
                 "wgmma vs cuBLAS")  # fmt: skip


@dataclass(frozen=True)
class TensorRow:
    """One type's rates as plain text, and the facts they came from."""

    label: str
    cells: tuple[str, str, str, str, str, str]
    facts: tuple[Fact, ...]

    @property
    def verdict(self) -> str:
        """The worst verdict among its facts ("report" when none is judged)."""
        verdicts = [f.verdict for f in self.facts]
        return next((v for v in JUDGED if v in verdicts), "report")


def _best(results: Results, pattern: str) -> Fact | None:
    """The fact with the highest value among those whose id matches ``pattern`` (a full-match regex)."""
    found = [f for f in results.facts if re.fullmatch(pattern, f.id) and f.value is not None]
    return max(found, key=lambda f: f.value or 0.0) if found else None


def _shape(fact: Fact) -> str:
    match = re.search(r"\.(m\d+n\d+k\d+)\.", fact.id)
    return match.group(1) if match else ""


def _rate(fact: Fact | None, unit: str) -> str:
    if fact is None or fact.value is None:
        return ""
    shape = _shape(fact)
    return f"{fmt_num(fact.value)} {unit}" + (f" ({shape})" if shape else "")


def _peak_at_clock(results: Results, kind: TensorType, wgmma: Fact | None) -> tuple[Fact | None, Fact | None]:
    """The datasheet's dense peak at the clock wgmma ran at, and wgmma's share of it: bf16's own facts (the
    model's datasheet figure scaled to the clock), else the peak per clock at that clock, which is the datasheet's
    per SM per clock (docs/datasheets.md): the rate over its ``fraction_of_peak``."""
    peak = results.fact(f"tensor.wgmma.{kind.wgmma}.datasheet_peak_at_clock")
    share = results.fact(f"tensor.wgmma.{kind.wgmma}.fraction_of_peak")
    if (peak is not None and peak.value is not None) or wgmma is None or wgmma.value is None:
        return peak, share
    share = results.fact(f"{wgmma.id.removesuffix('.tflops')}.fraction_of_peak")
    if share is None or not share.value:
        return None, None
    at_clock = Fact(f"tensor.wgmma.{kind.wgmma}.peak_at_clock", wgmma.value / share.value, wgmma.unit)
    return at_clock, share


def tensor_rows(results: Results) -> list[TensorRow]:
    """Per data type: the best mma.sync rate, wgmma's dense rate (random operands) and the clock and power its
    probe ran at (NVML sampled while it measured), the datasheet peak at the measured clock with wgmma's share of
    it (:func:`_peak_at_clock`), cuBLAS, and wgmma against cuBLAS; types the run has no rate for are left out."""
    rows = []
    for kind in TENSOR_TYPES:
        mma = _best(results, rf"tensor\.mma_sync\.{kind.mma}\.m\d+n\d+k\d+\.tflops")
        emulated = results.fact(f"tensor.mma_sync.{kind.mma}.emulated")
        wgmma = _best(results, rf"tensor\.wgmma\.{kind.wgmma}\.m64n256k\d+\.ss\.tflops")
        peak, share = _peak_at_clock(results, kind, wgmma)
        cublas = results.fact(f"tensor.cublas.{kind.wgmma}.tflops") or results.fact(f"tensor.cublas.{kind.mma}.tflops")
        versus = results.fact(f"tensor.wgmma.{kind.wgmma}.fraction_of_cublas")
        mma_text = _rate(mma, kind.unit) or ("emulated" if emulated is not None and emulated.value else "")
        peak_text = _rate(peak, kind.unit)
        if peak_text and share is not None and share.value is not None:
            peak_text += f"; wgmma at {share.value * 100:.0f} %"
        versus_text = "" if versus is None or versus.value is None else f"{versus.value:.2f} ×"
        ran = ran_at(results, [wgmma.probe], energy=False) if wgmma is not None else ""
        cells = (mma_text, _rate(wgmma, kind.unit), ran, peak_text, _rate(cublas, kind.unit), versus_text)
        if any(cells):
            used = tuple(f for f in (mma, emulated, wgmma, peak, share, cublas, versus) if f is not None)
            rows.append(TensorRow(kind.label, cells, used))
    return rows


# ---------------------------------------------------------------- the device and the verdict in one line each


def device_line(results: Results) -> str:
    """ "NVIDIA H200 · sm_90a (cc 9.0) · 132 SMs · SM clock 1980 MHz measured at rest (nominal 1980) · ...": the
    clock the run's clock probe read on an idle part (under tensor load it runs lower: the run conditions)."""
    dev = results.device
    mhz = measured_sm_mhz(results)
    clock = f"SM clock {fmt_num(mhz)} MHz measured at rest" if mhz else "SM clock not measured"
    if dev.sm_clock_nominal_mhz:
        clock += f" (nominal {fmt_num(dev.sm_clock_nominal_mhz)})"
    memory = " ".join(p for p in (dev.memory_type, fmt_bytes(dev.mem_bytes) if dev.mem_bytes else "") if p)
    if dev.mem_bus_bits:
        memory += f" {dev.mem_bus_bits}-bit"
    nvml = results.clocks.get("nvml_before")
    driver = nvml.get("driver") if isinstance(nvml, dict) and isinstance(nvml.get("driver"), str) else ""
    software = ", ".join(p for p in (f"driver {driver}" if driver else "",
                                      f"CUDA {dev.driver}" if dev.driver else "") if p)  # fmt: skip
    parts = [
        dev.name,
        f"{dev.arch} (cc {dev.cc})",
        f"{dev.sm_count} SMs",
        clock,
        memory.strip(),
        f"L2 {fmt_bytes(dev.l2_bytes)}",
        software,
        f"run {run_time(results.created)}" if results.created else "",
        judged_as(results),
    ]
    return " · ".join(p for p in parts if p)


def run_time(created: str) -> str:
    """ "2026-12-04 13:18 UTC" from the results' ISO time; the text as it is when it is not one."""
    try:
        when = datetime.fromisoformat(created)
    except ValueError:
        return created
    if when.utcoffset() == timedelta(0):
        return when.strftime("%Y-%m-%d %H:%M UTC")
    return when.isoformat(sep=" ", timespec="minutes")


def judged_as(results: Results) -> str:
    """Which expectations judged the run, as the run recorded it."""
    model = results.clocks.get("model")
    if not isinstance(model, str) or not model:
        return ""
    if model.startswith("unknown"):
        return "discovery mode (no expectations for this GPU: facts reported, invariants asserted)"
    if results.stage == "smoke":
        return f"smoke stage of a {model}: held to physics, not to its expectations"
    return f"judged as {model}"


JUDGED = ("fail", "invalid", "unstable", "warn", "not_run", "throttled", "shared", "pass")
NAMED = ("fail", "invalid", "unstable", "warn")  # verdicts whose facts the verdict line names
NAMED_MOST = 8


def verdict_counts(facts: list[Fact]) -> list[tuple[str, int]]:
    """(verdict, count) for the judged verdicts the run has, worst first; "report" is counted apart."""
    counts = {v: sum(1 for f in facts if f.verdict == v) for v in JUDGED}
    return [(v, n) for v, n in counts.items() if n]


def named_facts(facts: list[Fact], verdict: str) -> tuple[list[str], int]:
    """The ids of the facts with ``verdict``, at most ``NAMED_MOST``, and how many more there are."""
    ids = [f.id for f in facts if f.verdict == verdict]
    return ids[:NAMED_MOST], max(0, len(ids) - NAMED_MOST)
