"""The roofline family on the fact sheet: its section, the roofline plot, and its invariant.

The plot (:func:`roofline_png`): one panel per type measured, log-log, rate against intensity; per level the
measured points, the measured ceilings drawn as the roofline ``min(compute, bandwidth x intensity)`` (solid), and
beside them, dotted, the datasheet's: the DRAM peak as a memory ceiling, the type's peak scaled to the clock
the sweep ran at as a compute ceiling (where the run knew the GPU model's datasheet).

Invariant (physics, on any GPU): the L2 and shared-memory ceilings do not lie, CI wholly, beyond
:data:`LEVEL_MARGIN` x what the bandwidth family measured for the same level in the same run (its 16-byte read
streams: ``bandwidth.l2_read.v16`` GB/s; ``bandwidth.shared_read.v16`` bytes per clock per SM, at the
roofline's own clock). The two kernels read the level alike (16-byte loads, every SM busy), so a roofline
ceiling well above the level's own stream means a timing or a count is wrong. The margin leaves two
measurements' noise and the kernels' differences (the roofline's FFMAs keep fewer loads in flight).
DRAM is held to its theoretical peak inside the probe (:mod:`~gpuprobe.families.roofline.sweep`).
"""

from __future__ import annotations

from collections import defaultdict

from gpuprobe.core.results import Device, Fact, Results
from gpuprobe.families.roofline.sweep import LEVELS, SERIES
from gpuprobe.judge.invariants import Check
from gpuprobe.output.plots import COLORS, new_figure, png_bytes
from gpuprobe.output.sections import Plot, Section

LEVEL_MARGIN = 1.1
LEVEL_STREAMS = {"l2": ("bandwidth.l2_read.v16", False), "shared": ("bandwidth.shared_read.v16", True)}  # id,
# and whether it is in bytes per clock per SM


def _measured(facts: dict[str, Fact], fact_id: str) -> Fact | None:
    found = facts.get(fact_id)
    return found if found is not None and found.value is not None else None


def level_checks(facts: dict[str, Fact], device: Device) -> list[Check]:
    """Physics: each L2 and shared roofline bandwidth within LEVEL_MARGIN of the bandwidth family's stream."""
    checks = []
    for fact_id in sorted(facts):
        parts = fact_id.split(".")
        if len(parts) != 4 or parts[0] != "roofline" or parts[3] != "bandwidth" or parts[2] not in LEVEL_STREAMS:
            continue
        stream_id, per_clock = LEVEL_STREAMS[parts[2]]
        ceiling, stream = _measured(facts, fact_id), _measured(facts, stream_id)
        clock = _measured(facts, fact_id.replace(".bandwidth", ".sm_clock"))
        if ceiling is None or stream is None or (per_clock and clock is None):
            continue
        scale = device.sm_count * clock.value * 1e6 / 1e9 if per_clock else 1.0  # byte/clk/SM -> GB/s
        limit = (stream.ci[1] if stream.ci else stream.value) * scale * LEVEL_MARGIN
        low = ceiling.ci[0] if ceiling.ci else ceiling.value
        ok = low <= limit
        detail = (f"{fact_id} = {ceiling.value:.0f} GB/s (CI from {low:.0f}) {'≤' if ok else '>'} {LEVEL_MARGIN:g} x "
                  f"{stream_id} = {limit:.0f} GB/s" + (f" (at {clock.value:.0f} MHz, {device.sm_count} SMs)"
                                                       if per_clock else ""))  # fmt: skip
        named = (fact_id, stream_id) + ((clock.id,) if per_clock else ())
        checks.append(Check(f"roofline.{parts[1]}.{parts[2]}_within_bandwidth_stream", ok, detail, named, physics=True))
    return checks


INVARIANTS = (level_checks,)


def sweep_points(results: Results) -> dict[str, dict[str, list[dict[str, float]]]]:
    """Per type, per level, the points of its sweep (each probe's ``roofline`` series), lowest intensity first."""
    found: dict[str, dict[str, list[dict[str, float]]]] = defaultdict(lambda: defaultdict(list))
    for outcome in results.probes.values():
        columns = outcome.series.get(SERIES) if outcome.series else None
        if not columns:
            continue
        for row in zip(*columns.values(), strict=True):
            point = dict(zip(columns, row, strict=True))
            found[str(point["type"])][str(point["level"])].append(point)
    for levels in found.values():
        for points in levels.values():
            points.sort(key=lambda p: float(p["intensity"]))
    return found


def _value(results: Results, fact_id: str) -> float | None:
    found = results.fact(fact_id)
    return float(found.value) if found is not None and found.value is not None else None


def _draw_level(ax, results: Results, dtype: str, level: str, points: list[dict[str, float]], color: str) -> None:
    """One level's points, its measured roofline, and the datasheet's ceilings beside it."""
    xs = [float(p["intensity"]) for p in points]
    ax.plot(xs, [float(p["tflops"]) for p in points], "o", color=color, label=f"{level} points")
    grid = [xs[0] / 2 * (xs[-1] * 4 / (xs[0] / 2)) ** (k / 60) for k in range(61)]
    bandwidth = _value(results, f"roofline.{dtype}.{level}.bandwidth")
    compute = _value(results, f"roofline.{dtype}.{level}.compute")
    if bandwidth and compute:
        ax.plot(
            grid,
            [min(compute, bandwidth * x / 1e3) for x in grid],
            "-",
            color=color,
            label=f"{level}: {bandwidth:.0f} GB/s, {compute:.1f} peak, ridge {compute * 1e3 / bandwidth:.1f}",
        )
    sheet_gbps = max(float(p["datasheet_gbps"]) for p in points)
    if sheet_gbps:
        label = f"datasheet DRAM {sheet_gbps:.0f} GB/s"
        ax.plot(grid, [sheet_gbps * x / 1e3 for x in grid], ":", color=color, label=label)


PANELS_PER_ROW = 3


def roofline_png(results: Results, dpi: int) -> bytes | None:
    """Log-log rooflines, one panel per type, three to a row; None when no sweep was measured."""
    sweeps = sweep_points(results)
    if not sweeps:
        return None
    columns = min(PANELS_PER_ROW, len(sweeps))
    rows = -(-len(sweeps) // columns)
    fig = new_figure((6.4 * columns, 4.6 * rows), dpi)
    for index, (dtype, levels) in enumerate(sorted(sweeps.items())):
        ax = fig.add_subplot(rows, columns, index + 1)
        for k, level in enumerate(lv for lv in LEVELS if lv in levels):
            _draw_level(ax, results, dtype, level, levels[level], COLORS[k % len(COLORS)])
        peaks = [float(p["datasheet_tflops"]) for points in levels.values() for p in points if p["datasheet_tflops"]]
        if peaks:
            ax.axhline(max(peaks), color="#555555", linestyle=":", linewidth=1,
                       label=f"datasheet peak at the clock run, {max(peaks):.1f}")  # fmt: skip
        ax.set_xscale("log", base=2)
        ax.set_yscale("log")
        ax.set_xlabel("arithmetic intensity (flop per byte from the level)")
        ax.set_ylabel(f"{dtype} {'TOP/s' if dtype.startswith('s8') else 'TFLOP/s'}")
        ax.set_title(f"{dtype} roofline, measured (solid) and datasheet (dotted)")
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return png_bytes(fig)


SECTIONS = (
    Section(
        "Measured roofline",
        ("roofline.",),
        ("roofline.",),
        plot=Plot("roofline", "roofline.png", "measured rooflines, datasheet ceilings beside", roofline_png),
        blurb="An arithmetic-intensity sweep per type and level (DRAM, L2, shared memory): the memory ceiling "
        "is the best bytes/s any point moved, the compute ceiling the best rate any point reached (each only "
        "where a point was in that regime), the ridge their ratio (flop/B), each at the SM clock the sweep ran at.",
    ),
)
