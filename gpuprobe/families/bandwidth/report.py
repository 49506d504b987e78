"""The bandwidth family on the fact sheet: its sections, the occupancy plot, and its invariants.

Invariants (held on any GPU, known model or not; each skipped when its facts were not measured):

* no DRAM figure beats the theoretical peak by more than ``PEAK_MARGIN`` (a timing error if so);
* the probe's DRAM copy is at least ``MEMCPY_FLOOR`` of the CUDA runtime's device-to-device copy of
  the same bytes (a plain streaming copy should come near the runtime's; nothing published compares
  the two on these parts, and published copy kernels on one GPU differ by up to 10 %, gpu-benches
  gpu-stream/h200.txt, so the floor leaves that and some room: the same floor as the expectations');
* L2 reads are faster than DRAM reads (16-byte accesses);
* L1 and shared memory deliver at most ``CACHED_MAX`` bytes per clock per SM: 32 banks x 4 bytes is
  128, and a figure well beyond it means the clock records were misread.
"""

from __future__ import annotations

from gpuprobe.core.results import Device, Fact, Results
from gpuprobe.output.plots import COLORS, DEFAULT_DPI, new_figure, png_bytes
from gpuprobe.output.sections import Plot, Section

PEAK_MARGIN = 1.02
MEMCPY_FLOOR = 0.85
CACHED_MAX = 128 * 1.1
OCCUPANCY_PROBE = "bandwidth.dram.occupancy.v4"

Check = tuple[str, bool, str]


def _measured(facts: dict[str, Fact], fact_id: str) -> Fact | None:
    fact = facts.get(fact_id)
    return fact if fact is not None and fact.value is not None else None


def peak_checks(facts: dict[str, Fact], device: Device) -> list[Check]:
    checks = []
    for op in ("read", "write", "copy"):
        fraction = _measured(facts, f"bandwidth.dram_{op}_fraction_of_peak")
        if fraction is not None:
            ok = fraction.value <= PEAK_MARGIN
            detail = f"{fraction.id} = {fraction.value:.3f} ({'≤' if ok else '>'} {PEAK_MARGIN:g})"
            checks.append((f"bandwidth.dram_{op}_within_peak", ok, detail))
    return checks


def memcpy_check(facts: dict[str, Fact], device: Device) -> list[Check]:
    ratio = _measured(facts, "bandwidth.dram_copy_fraction_of_memcpy")
    if ratio is None:
        return []
    ok = ratio.value >= MEMCPY_FLOOR
    detail = f"probe copy / cudaMemcpy = {ratio.value:.3f} ({'≥' if ok else '<'} {MEMCPY_FLOOR:g})"
    return [("bandwidth.dram_copy_as_fast_as_memcpy", ok, detail)]


def order_check(facts: dict[str, Fact], device: Device) -> list[Check]:
    l2, dram = _measured(facts, "bandwidth.l2_read.v16"), _measured(facts, "bandwidth.dram_read.v16")
    if l2 is None or dram is None:
        return []
    ok = l2.value > dram.value
    detail = f"{l2.id} = {l2.value:.0f} GB/s {'>' if ok else '≤'} {dram.id} = {dram.value:.0f} GB/s"
    return [("bandwidth.l2_faster_than_dram", ok, detail)]


def cached_checks(facts: dict[str, Fact], device: Device) -> list[Check]:
    checks = []
    for level in ("l1", "shared"):
        for width in (4, 8, 16):
            measured = _measured(facts, f"bandwidth.{level}_read.v{width}")
            if measured is not None:
                ok = 0 < measured.value <= CACHED_MAX
                detail = f"{measured.id} = {measured.value:.1f} byte/clk/SM (at most {CACHED_MAX:g})"
                checks.append((f"bandwidth.{level}_read_v{width}_plausible", ok, detail))
    return checks


INVARIANTS = (peak_checks, memcpy_check, order_check, cached_checks)


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
        blurb="Useful bytes per second next to the bytes the memory system moved (32-byte sectors touched, "
        "counted from the access pattern), for strided and misaligned reads from DRAM.",
    ),
)
