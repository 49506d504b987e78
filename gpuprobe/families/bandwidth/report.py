"""The bandwidth family on the fact sheet: its sections, the occupancy plot, and its invariants.

Invariants (held on any GPU, known model or not; each skipped when its facts were not measured; a failed
one marks the facts it names, so no PASS sits beside an impossible number):

* physics: no goodput moved figure through the L2 lies wholly above ``L2_MARGIN`` x the L2 stream of its direction
  (:func:`~gpuprobe.families.bandwidth.goodput.l2_moved_checks`);
* physics: no figure through DRAM (reads, writes and copies at every width, the occupancy sweep's best,
  the CUDA runtime's copy, goodput's useful and moved bytes) has a CI wholly above the DRAM's peak
  (``bandwidth.dram_theoretical``): the DRAM cannot move more, so a timing error made it;
* the probe's DRAM copy is at least ``MEMCPY_FLOOR`` of the CUDA runtime's device-to-device copy of
  the same bytes (a plain streaming copy should come near the runtime's; nothing published compares
  the two on these parts, and published copy kernels on one GPU differ by up to 10 %, gpu-benches
  gpu-stream/h200.txt, so the floor leaves that and some room: the same floor as the expectations');
* the L2 does not fall below DRAM, within the CIs, for reads, writes and copies at each width: every
  DRAM byte passes through the L2 (measured the same way, so a full run's settings only);
* L1 and shared memory deliver at most ``CACHED_MAX`` bytes per clock per SM: 32 banks x 4 bytes is
  128, and a figure well beyond it means the clock records were misread.
"""

from __future__ import annotations

from gpuprobe.core.results import Device, Fact, Results
from gpuprobe.families.bandwidth.goodput import goodput_png, l2_moved_checks
from gpuprobe.families.bandwidth.shapes import OPS, STREAM_WIDTHS
from gpuprobe.judge.invariants import Check
from gpuprobe.judge.ordering import pair_not_below
from gpuprobe.output.plots import COLORS, DEFAULT_DPI, new_figure, png_bytes
from gpuprobe.output.sections import Plot, Section

MEMCPY_FLOOR = 0.85
CACHED_MAX = 128 * 1.1
OCCUPANCY_PROBE = "bandwidth.dram.occupancy.v4"
PEAK = "bandwidth.dram_theoretical"


def _measured(facts: dict[str, Fact], fact_id: str) -> Fact | None:
    fact = facts.get(fact_id)
    return fact if fact is not None and fact.value is not None else None


def _dram_figures(facts: dict[str, Fact]) -> list[str]:
    """The ids of every GB/s figure that moved through DRAM, whichever were measured."""
    streams = [f"bandwidth.dram_{op}.v{width}" for op in OPS for width in STREAM_WIDTHS]
    goodput = sorted(
        i
        for i in facts
        if i.startswith("bandwidth.goodput.")
        and not i.startswith("bandwidth.goodput.l2_")
        and i.endswith((".useful", ".moved"))
    )  # the L2's goodput has its own ceiling (l2_moved_checks)
    return [*streams, "bandwidth.dram_read_best.v4", "bandwidth.dram_copy_cuda_memcpy", *goodput]


def _peak_name(figure_id: str) -> str:
    """``bandwidth.dram_read_within_peak`` for the 16-byte streams (their names before issue 24), else the
    figure's id, dots made underscores, ``_within_peak`` added."""
    for op in OPS:
        if figure_id == f"bandwidth.dram_{op}.v16":
            return f"bandwidth.dram_{op}_within_peak"
    return "bandwidth." + figure_id.removeprefix("bandwidth.").replace(".", "_") + "_within_peak"


def peak_checks(facts: dict[str, Fact], device: Device) -> list[Check]:
    """Physics: each DRAM figure's CI reaches down to the DRAM's peak or below it."""
    peak = _measured(facts, PEAK)
    if peak is None:
        return []
    checks = []
    for figure_id in _dram_figures(facts):
        figure = _measured(facts, figure_id)
        if figure is None:
            continue
        low = figure.ci[0] if figure.ci else figure.value
        ok = low <= peak.value
        relation = "≤" if ok else ">"
        detail = f"{figure.id} = {figure.value:.0f} GB/s, CI from {low:.0f} {relation} {PEAK} = {peak.value:.0f} GB/s"
        fraction = figure_id.replace(".v16", "_fraction_of_peak") if figure_id.endswith(".v16") else None
        named = (figure.id, fraction) if fraction in facts else (figure.id,)
        checks.append(Check(_peak_name(figure_id), ok, detail, named, physics=True))
    return checks


def memcpy_check(facts: dict[str, Fact], device: Device) -> list[Check]:
    ratio = _measured(facts, "bandwidth.dram_copy_fraction_of_memcpy")
    if ratio is None:
        return []
    ok = ratio.value >= MEMCPY_FLOOR
    detail = f"probe copy / cudaMemcpy = {ratio.value:.3f} ({'≥' if ok else '<'} {MEMCPY_FLOOR:g})"
    return [Check("bandwidth.dram_copy_as_fast_as_memcpy", ok, detail, (ratio.id,))]


def _order_name(op: str, width: int) -> str:
    """``bandwidth.l2_faster_than_dram`` for 16-byte reads (its name before issue 24), else
    ``bandwidth.l2_<op>_v<width>_not_below_dram``."""
    return (
        "bandwidth.l2_faster_than_dram" if (op, width) == ("read", 16) else f"bandwidth.l2_{op}_v{width}_not_below_dram"
    )


def order_checks(facts: dict[str, Fact], device: Device) -> list[Check]:
    """The L2 does not fall below DRAM (CIs) for each operation and width both were measured at."""
    checks = []
    for op in OPS:
        for width in STREAM_WIDTHS:
            lower, upper = f"bandwidth.dram_{op}.v{width}", f"bandwidth.l2_{op}.v{width}"
            checks += pair_not_below(facts, _order_name(op, width), lower, upper)
    return checks


def cached_checks(facts: dict[str, Fact], device: Device) -> list[Check]:
    checks = []
    for level in ("l1", "shared"):
        for width in (4, 8, 16):
            measured = _measured(facts, f"bandwidth.{level}_read.v{width}")
            if measured is not None:
                ok = 0 < measured.value <= CACHED_MAX
                detail = f"{measured.id} = {measured.value:.1f} byte/clk/SM (at most {CACHED_MAX:g})"
                checks.append(
                    Check(f"bandwidth.{level}_read_v{width}_plausible", ok, detail, (measured.id,), physics=True)
                )
    return checks


INVARIANTS = (peak_checks, memcpy_check, order_checks, cached_checks, l2_moved_checks)


def occupancy_png(results: Results, dpi: int = DEFAULT_DPI) -> bytes | None:
    """DRAM read GB/s against resident threads per SM, one line per block size."""
    from matplotlib.ticker import FixedFormatter, FixedLocator, NullFormatter

    outcome = results.probes.get(OCCUPANCY_PROBE)
    columns = outcome.series.get("occupancy") if outcome is not None else None
    if not columns or not columns.get("gbps"):
        return None
    fig = new_figure((7.0, 4.2), dpi)
    ax = fig.add_subplot()
    rows = list(zip(columns["threads_per_block"], columns["threads_per_sm"], columns["gbps"], strict=True))
    for index, block in enumerate(sorted({int(r[0]) for r in rows})):
        points = sorted((x, y) for b, x, y in rows if int(b) == block)
        ax.plot(
            [p[0] for p in points],
            [p[1] for p in points],
            marker="o",
            color=COLORS[index % len(COLORS)],
            label=f"{block} threads per block",
        )
    peak = results.fact("bandwidth.dram_theoretical")
    if peak is not None and peak.value:
        ax.axhline(peak.value, color="#555555", linestyle="--", linewidth=1, label=f"theoretical {peak.value:.0f} GB/s")
    saturation = results.fact("bandwidth.dram_read_saturation.v4")
    if saturation is not None and saturation.value:
        ax.axvline(
            saturation.value,
            color="#555555",
            linestyle=":",
            linewidth=1,
            label=f"saturated ({saturation.value:.0f} threads per SM)",
        )
    ax.set_xscale("log", base=2)
    ticks = sorted({float(r[1]) for r in rows})
    ax.xaxis.set_major_locator(FixedLocator(ticks))
    ax.xaxis.set_major_formatter(FixedFormatter([f"{t:.0f}" for t in ticks]))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("resident threads per SM")
    ax.set_ylabel("DRAM read (GB/s), 4-byte loads")
    ax.set_ylim(bottom=0)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    return png_bytes(fig)


SECTIONS = (
    Section(
        "DRAM bandwidth",
        ("bandwidth.dram_",),
        ("bandwidth.dram.",),
        plot=Plot(
            "dram_occupancy", "dram_occupancy.png", "DRAM read bandwidth vs resident threads per SM", occupancy_png
        ),
        blurb="Every SM busy streaming a footprint of several L2 sizes, flushed and differenced (long minus "
        "short launch). Copies count bytes read plus written, as does the CUDA runtime's copy beside them.",
    ),
    Section(
        "L2, L1 and shared-memory bandwidth",
        ("bandwidth.l2_", "bandwidth.l1_", "bandwidth.shared_"),
        blurb="L2 in GB/s (L1 bypassed); L1 and shared memory in bytes per clock per SM from in-kernel clocks.",
    ),
    Section(
        "Goodput",
        ("bandwidth.goodput.",),
        plot=Plot(
            "goodput", "goodput.png", "useful vs moved GB/s per pattern, DRAM and L2, reads and writes", goodput_png
        ),
        blurb="Useful bytes per second of the access patterns ML kernels make (unit stride at 2, 4 and 16 bytes, "
        "a matrix column, misaligned rows, row gathers of 64 B to 4 KiB, a transposed tile, partial-sector "
        "writes), at DRAM (bandwidth.goodput.<pattern>: reads; dram_write.) and L2 (l2_read., l2_write.), next "
        "to the bytes the level moved: derived (a model, not a counter: each probe's moved_from says so) from "
        "the granule that level's 4-byte stride sweep measures, the stride from which the useful rate stops "
        "halving (bandwidth.goodput.granule_bytes for DRAM reads, bandwidth.goodput.<level_op>.granule_bytes).",
    ),
)
