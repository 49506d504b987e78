"""Where the loaded-latency facts go on the sheet, and what must hold among them and the memory and bandwidth
families' facts."""

from __future__ import annotations

from gpuprobe.core.results import Device, Fact
from gpuprobe.families.loaded_latency.plot import LOADED_PLOT
from gpuprobe.judge.invariants import Check
from gpuprobe.judge.ordering import pair_not_below
from gpuprobe.output.sections import Section

LEVELS = {"l2": "L2", "dram": "DRAM"}
# A loaded background may exceed the bandwidth family's streaming figure by this much: the two are measured
# differently (here the sum of each warp's bytes over its own %globaltimer span, 1 us ticks over spans of a few
# hundred us; there a long-minus-short launch), and each has its CI besides.
BANDWIDTH_MARGIN = 0.05
# The idle chase lands on whichever SM runs block 0, the memory family's on another: near-L2 hits vary over
# the SMs (latency.l2.sm_spread), DRAM misses with the TLB reach of a different footprint. Beyond this share
# of the memory family's plateau the two are not the same level.
IDLE_TOLERANCE = 0.25


def _measured(facts: dict[str, Fact], fact_id: str) -> Fact | None:
    found = facts.get(fact_id)
    return found if found is not None and found.value is not None else None


def p90_not_below_idle(facts: dict[str, Fact], device: Device) -> list[Check]:
    """At 90 % of the bandwidth the chase is no faster than idle (a queue does not shorten with traffic)."""
    return [check for level in LEVELS for check in pair_not_below(
        facts, f"loaded_latency.{level}.p90_not_below_idle",
        f"latency.{level}.loaded.idle", f"latency.{level}.loaded.p90")]  # fmt: skip


def background_within_bandwidth(facts: dict[str, Fact], device: Device) -> list[Check]:
    """The highest background stays within the level's streaming bandwidth (the bandwidth family's 16-byte read,
    plus BANDWIDTH_MARGIN) and, for DRAM, within the theoretical peak (physics)."""
    checks = []
    for level in LEVELS:
        top = _measured(facts, f"latency.{level}.loaded.max_bandwidth")
        stream = _measured(facts, f"bandwidth.{level}_read.v16")
        if top is None:
            continue
        low = top.ci[0] if top.ci else top.value
        if stream is not None:
            bound = (stream.ci[1] if stream.ci else stream.value) * (1 + BANDWIDTH_MARGIN)
            detail = (f"{top.id} = {top.value:.0f} GB/s (CI from {low:.0f}) vs {stream.id} = {stream.value:.0f} GB/s "
                      f"(+{BANDWIDTH_MARGIN:.0%}: {bound:.0f})")  # fmt: skip
            checks.append(Check(f"loaded_latency.{level}.background_within_bandwidth", low <= bound, detail,
                                (top.id, stream.id)))  # fmt: skip
        peak = _measured(facts, "bandwidth.dram_theoretical") if level == "dram" else None
        if peak is not None:
            detail = f"{top.id} = {top.value:.0f} GB/s (CI from {low:.0f}) vs theoretical {peak.value:.0f} GB/s"
            checks.append(Check("loaded_latency.dram.background_within_peak", low <= peak.value, detail,
                                (top.id, peak.id), physics=True))  # fmt: skip
    return checks


def idle_matches_unloaded(facts: dict[str, Fact], device: Device) -> list[Check]:
    """The idle chase reads the level the memory family's footprint sweep names (latency.l2, latency.dram),
    within IDLE_TOLERANCE."""
    checks = []
    for level in LEVELS:
        idle, plateau = _measured(facts, f"latency.{level}.loaded.idle"), _measured(facts, f"latency.{level}")
        if idle is None or plateau is None or idle.unit != plateau.unit:
            continue
        share = idle.value / plateau.value - 1
        detail = (f"{idle.id} = {idle.value:.1f} vs {plateau.id} = {plateau.value:.1f} {idle.unit} "
                  f"({share:+.0%}, within ±{IDLE_TOLERANCE:.0%})")  # fmt: skip
        checks.append(Check(f"loaded_latency.{level}.idle_matches_unloaded", abs(share) <= IDLE_TOLERANCE, detail,
                            (idle.id, plateau.id)))  # fmt: skip
    return checks


INVARIANTS = (p90_not_below_idle, background_within_bandwidth, idle_matches_unloaded)

SECTIONS = (
    Section(
        "Loaded latency",
        ("latency.l2.loaded.", "latency.dram.loaded."),
        ("loaded_latency.",),
        plot=LOADED_PLOT,
        blurb="One thread chases a random pointer cycle in the L2 (warmed) or DRAM (cold) while one block on "
        "every other SM streams 16-byte L1-bypassing reads from the same level, 0 to 32 warps per SM; the "
        "background GB/s is what the streamers measured. p50 and p90 are the chase at the load point nearest "
        "above 50 % and 90 % of the highest background the sweep reached (max_bandwidth), not interpolated.",
    ),
)
