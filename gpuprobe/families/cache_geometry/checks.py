"""The cache-geometry family's fact-sheet section and its cross-generation invariants.

The invariants hold on any NVIDIA GPU whatever its model, and each leaves itself out when its
facts were not measured (see :mod:`gpuprobe.judge.invariants`).
"""

from __future__ import annotations

from gpuprobe.core.results import Device, Fact
from gpuprobe.judge.invariants import Check, measured
from gpuprobe.output.sections import Section

SECTIONS = (
    Section(
        title="Cache geometry",
        fact_prefixes=("cache.", "tlb.", "constant."),
        probe_prefixes=("cache_geometry.",),
        blurb="Fill units from the knee of latency vs stride, the L1 line from two capacity knees, and the constant "
        "cache's cost per distinct address in a warp. TLB reach is where latency steps up with footprint in chases of "
        "one line per page stride (2 MiB, 32 MiB and 512 MiB, each its own sweep, so larger pages show their steps "
        "too), up to half the device memory. A level no sweep places has no reach value, only the reason; "
        "tlb.no_step_below_bytes is how far the sweeps went, so every level they did not place reaches beyond it. "
        "Latencies of 16-byte against 8-byte loads and of the constant cache are under Memory latency.",
    ),
)


def sector_within_line(facts: dict[str, Fact], device: Device) -> list[Check]:
    """The L1 sector divides the L1 line: a line is a whole number of sectors."""
    pair = measured(facts, "cache.l1.sector_bytes", "cache.l1.line_bytes")
    if pair is None:
        return []
    sector, line = (f.value for f in pair)
    ok = 0 < sector <= line and line % sector == 0
    detail = f"cache.l1.sector_bytes = {sector:g}, cache.l1.line_bytes = {line:g}"
    return [Check("cache.l1_sector_divides_line", ok, detail, tuple(f.id for f in pair))]


def ordered(name: str, lower_id: str, upper_id: str):
    """A check that ``lower_id`` measures below ``upper_id`` (in the same unit)."""

    def check(facts: dict[str, Fact], device: Device) -> list[Check]:
        pair = measured(facts, lower_id, upper_id)
        if pair is None:
            return []
        lower, upper = pair
        ok = lower.unit == upper.unit and lower.value < upper.value
        relation = "<" if ok else "not <"
        detail = f"{lower_id} = {lower.value:g} {lower.unit} {relation} {upper_id} = {upper.value:g} {upper.unit}"
        return [Check(name, ok, detail, (lower_id, upper_id))]

    return check


INVARIANTS = (
    sector_within_line,
    ordered("constant.hit_below_miss", "latency.constant.hit", "latency.constant.miss"),
    ordered("tlb.l1_reach_below_l2_reach", "tlb.l1.reach_bytes", "tlb.l2.reach_bytes"),
)
