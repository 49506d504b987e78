"""Plots for the fact sheet, drawn from the raw series kept in a results file.

Figures are built with ``matplotlib.figure.Figure`` and the Agg canvas directly: no pyplot, no
global backend switch, no display. PNGs carry no timestamp or software tag, so the same results
render to the same bytes on the same matplotlib. Every figure of the package, the families' too, comes
from ``new_figure`` and leaves as ``png_bytes``: matplotlib is imported there, when a plot is drawn,
so the measuring processes (which import every family and draw nothing) never load it. Within ``stamped_as``
every figure leaves with a stamp (SIMULATED) written across it, drawn in the one rendering of the figure.
"""

from __future__ import annotations

import io
import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, NamedTuple

import numpy as np

from gpuprobe.core.results import Results

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure
    from matplotlib.text import Annotation, Text
    from matplotlib.transforms import Bbox

# Latency series the plot knows by name, in drawing order, with their legend label.
# Any other ``memory.latency.*`` probe that has a "curve" series is drawn after these.
LATENCY_PROBES: tuple[tuple[str, str], ...] = (
    ("memory.latency.global_ca", "ld.global.ca (L1-cached)"),
    ("memory.latency.global_cg", "ld.global.cg (bypasses L1)"),
)
LATENCY_PROBE_PREFIX = "memory.latency."

COLORS = ("#1f77b4", "#d62728", "#2ca02c", "#9467bd", "#8c564b")
DEVICE_L2_COLOR = "#555555"
DEFAULT_DPI = 150

_BYTE_SUFFIXES = ("", "K", "M", "G", "T")

# The text ``png_bytes`` writes across every figure (None: none), set by ``stamped_as``.
_STAMP: ContextVar[str | None] = ContextVar("gpuprobe_plot_stamp", default=None)
STAMP_ZORDER = 1e6  # above every other artist of a figure, its own legends and texts included


class LabelSpot(NamedTuple):
    """Where a level label may go: beside the start or end of its plateau, offset in points."""

    anchor: str  # "start" | "end"
    offset: tuple[int, int]
    ha: str
    va: str


# Tried in order; the first that covers no curve, label or legend wins.
LABEL_SPOTS: tuple[LabelSpot, ...] = (
    LabelSpot("start", (4, 6), "left", "bottom"),
    LabelSpot("end", (-4, 6), "right", "bottom"),
    LabelSpot("start", (-6, 0), "right", "center"),
    LabelSpot("end", (6, 0), "left", "center"),
    LabelSpot("start", (4, -6), "left", "top"),
    LabelSpot("end", (-4, -6), "right", "top"),
)


@dataclass(frozen=True)
class Level:
    """A plateau found in a curve: its name, latency, and the footprint span it covers."""

    name: str
    cycles: float
    start: float
    end: float
    size: float | None  # the capacity knee; None for the last level (DRAM)


@dataclass(frozen=True)
class LatencyCurve:
    """One latency-vs-footprint series, cleaned for plotting (finite, sorted by footprint)."""

    probe: str
    label: str
    footprint: np.ndarray
    cycles: np.ndarray
    ci_low: np.ndarray | None
    ci_high: np.ndarray | None
    levels: list[Level]


def short_bytes(n: float) -> str:
    """Tick-style byte label on powers of two: 4096 -> "4K", 2**20 -> "1M", 3 * 2**30 -> "3G"."""
    value = float(n)
    index = 0
    while value >= 1024 and index < len(_BYTE_SUFFIXES) - 1:
        value /= 1024
        index += 1
    text = f"{value:.0f}" if value == int(value) else f"{value:.3g}"
    return text + _BYTE_SUFFIXES[index]


def iec_bytes(n: float) -> str:
    """Short byte size with its IEC unit: 50 * 2**20 -> "50 MiB", 512 -> "512 B"."""
    short = short_bytes(n)
    return f"{short[:-1]} {short[-1]}iB" if short[-1].isalpha() else f"{short} B"


def measured_sm_mhz(results: Results) -> float | None:
    """The measured SM clock in MHz: the clocks record first, then the ``device.sm_clock`` fact."""
    mhz = results.clocks.get("sm_mhz_measured")
    if isinstance(mhz, (int, float)) and mhz > 0:
        return float(mhz)
    fact = results.fact("device.sm_clock")
    if fact is not None and fact.value is not None and fact.value > 0:
        return float(fact.value)
    return None


def _floats(values: Sequence[object] | None) -> np.ndarray:
    """Column to float array; JSON nulls and non-numbers become NaN."""
    if values is None:
        return np.array([], dtype=float)
    return np.array([float(v) if isinstance(v, (int, float)) else math.nan for v in values], dtype=float)


def _latency_probe_names(results: Results) -> list[tuple[str, str]]:
    """(probe, label) for every probe with a latency curve, known ones first."""
    known = dict(LATENCY_PROBES)
    names = [(p, label) for p, label in LATENCY_PROBES if p in results.probes]
    extra = sorted(p for p in results.probes if p.startswith(LATENCY_PROBE_PREFIX) and p not in known)
    names += [(p, p.removeprefix(LATENCY_PROBE_PREFIX)) for p in extra]
    return [(p, label) for p, label in names if "curve" in results.probes[p].series]


def _levels(raw: dict[str, list[object]] | None, x_min: float, x_max: float) -> list[Level]:
    """Levels from a "levels" series: each spans from the previous knee to its own size."""
    if not raw:
        return []
    sizes = _floats(raw.get("size_bytes"))
    cycles = _floats(raw.get("latency_cycles"))
    names = list(raw.get("name") or [])
    levels: list[Level] = []
    start = x_min
    for i, latency in enumerate(cycles):
        if not math.isfinite(latency):
            continue
        size = float(sizes[i]) if i < len(sizes) and math.isfinite(sizes[i]) else None
        end = min(size, x_max) if size is not None else x_max
        name = str(names[i]) if i < len(names) and names[i] is not None else f"level {i + 1}"
        levels.append(Level(name=name, cycles=float(latency), start=start, end=max(end, start), size=size))
        start = max(end, start)
    return levels


def load_latency_curves(results: Results) -> list[LatencyCurve]:
    """Every latency-vs-footprint series in ``results``, ready to draw (possibly empty)."""
    curves = []
    for probe, label in _latency_probe_names(results):
        series = results.probes[probe].series
        curve, raw_levels = series.get("curve"), series.get("levels")
        if not isinstance(curve, dict):
            continue
        x = _floats(curve.get("footprint_bytes"))
        y = _floats(curve.get("latency_cycles"))
        n = min(len(x), len(y))
        if n == 0:
            continue
        low, high = _floats(curve.get("ci_low")), _floats(curve.get("ci_high"))
        has_ci = len(low) >= n and len(high) >= n
        keep = np.isfinite(x[:n]) & np.isfinite(y[:n]) & (x[:n] > 0)
        order = np.argsort(x[:n][keep], kind="stable")
        x, y = x[:n][keep][order], y[:n][keep][order]
        if len(x) == 0:
            continue
        ci_low = low[:n][keep][order] if has_ci else None
        ci_high = high[:n][keep][order] if has_ci else None
        levels = _levels(raw_levels if isinstance(raw_levels, dict) else None, float(x[0]), float(x[-1]))
        curves.append(LatencyCurve(probe, label, x, y, ci_low, ci_high, levels))
    return curves


def _set_byte_axis(ax: Axes, x_min: float, x_max: float) -> None:
    """Log2 x axis with human byte labels on every 4th, 16th... power of two (at most ~12 labels)."""
    from matplotlib.ticker import FixedLocator, NullFormatter

    ax.set_xscale("log", base=2)
    lo = math.floor(math.log2(x_min))
    hi = max(math.ceil(math.log2(x_max)), lo + 1)
    step = 2
    while (hi - lo) / step > 12:
        step *= 2
    first = lo + (-lo) % step
    majors = [2.0**e for e in range(first, hi + 1, step)]
    ax.xaxis.set_major_locator(FixedLocator(majors))
    ax.xaxis.set_ticklabels([short_bytes(m) for m in majors])
    ax.xaxis.set_minor_locator(FixedLocator([2.0**e for e in range(lo, hi + 1)]))
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlim(2.0**lo, 2.0**hi)


def _level_text(level: Level, mhz: float | None) -> str:
    """Level label in cycles, and in ns when the SM clock was measured: ``L2: 262 cyc / 150 ns``."""
    text = f"{level.name}: {level.cycles:.0f} cyc"
    if mhz:
        text += f" / {level.cycles / mhz * 1000:.0f} ns"
    return text


def _unique_levels(curves: list[LatencyCurve]) -> list[tuple[Level, str]]:
    """Each level name once, from the first curve that found it, with that curve's color."""
    seen: set[str] = set()
    out = []
    for index, curve in enumerate(curves):
        for level in curve.levels:
            if level.name not in seen:
                seen.add(level.name)
                out.append((level, COLORS[index % len(COLORS)]))
    return out


def _draw_level_marks(ax: Axes, levels: list[tuple[Level, str]]) -> None:
    """A thick segment at each plateau across its span, and a dashed line at each knee."""
    for level, color in levels:
        ax.hlines(level.cycles, level.start, level.end, colors=color, linewidth=3, alpha=0.45, zorder=3)
        if level.size is not None:
            ax.axvline(level.size, color=color, linestyle="--", linewidth=0.9, alpha=0.7, zorder=1)


def _obstacle_points(ax: Axes, curves: list[LatencyCurve], levels: list[tuple[Level, str]]) -> np.ndarray:
    """Display coordinates along every curve and plateau segment, dense enough to catch steep rises."""
    polylines = [np.column_stack([c.footprint, c.cycles]) for c in curves]
    polylines += [np.array([[lv.start, lv.cycles], [lv.end, lv.cycles]]) for lv, _ in levels]
    steps = np.linspace(0.0, 1.0, 16)[:-1][None, :, None]
    points = []
    for line in polylines:
        xy = ax.transData.transform(line)
        points.append((xy[:-1, None, :] + (xy[1:, None, :] - xy[:-1, None, :]) * steps).reshape(-1, 2))
        points.append(xy[-1:])
    return np.vstack(points)


def _collisions(box: Bbox, area: Bbox, taken: list[Bbox], points: np.ndarray) -> int:
    """How badly a label box collides: leaving the axes or covering a label counts 1000, each point 1."""
    score = 0 if area.contains(box.x0, box.y0) and area.contains(box.x1, box.y1) else 1000
    score += 1000 * sum(box.overlaps(other) for other in taken)
    inside = (points[:, 0] >= box.x0) & (points[:, 0] <= box.x1) & (points[:, 1] >= box.y0) & (points[:, 1] <= box.y1)
    return score + int(inside.sum())


def _annotate(ax: Axes, level: Level, text: str, color: str, spot: LabelSpot) -> Annotation:
    """A level label offset (in points) from the start or end of its plateau."""
    x = level.start if spot.anchor == "start" else level.end
    return ax.annotate(
        text,
        (x, level.cycles),
        xytext=spot.offset,
        textcoords="offset points",
        color=color,
        fontsize=8.5,
        ha=spot.ha,
        va=spot.va,
        zorder=5,
        bbox={"boxstyle": "round,pad=0.2", "facecolor": "white", "edgecolor": "none", "alpha": 0.85},
    )


def _place_label(ax: Axes, level: Level, text: str, color: str, obstacles: tuple[Bbox, list[Bbox], np.ndarray]) -> Bbox:
    """Put a level's label at the first of ``LABEL_SPOTS`` that covers nothing, else the least bad one."""
    area, taken, points = obstacles
    renderer = ax.figure.canvas.get_renderer()
    scores: list[int] = []
    for spot in LABEL_SPOTS:
        label = _annotate(ax, level, text, color, spot)
        scores.append(_collisions(label.get_window_extent(renderer).expanded(1.04, 1.1), area, taken, points))
        label.remove()
        if scores[-1] == 0:
            break
    best = LABEL_SPOTS[scores.index(min(scores))]
    return _annotate(ax, level, text, color, best).get_window_extent(renderer)


def _label_levels(ax: Axes, curves: list[LatencyCurve], mhz: float | None, fixed: list[Bbox]) -> None:
    """Label each level in cycles and ns, keeping clear of the curves, the legend and each other.

    Call after the layout is final: placement works in display coordinates.
    """
    levels = _unique_levels(curves)
    renderer = ax.figure.canvas.get_renderer()
    area = ax.get_window_extent(renderer)
    taken = list(fixed)
    points = _obstacle_points(ax, curves, levels)
    for level, color in sorted(levels, key=lambda item: item[0].start):
        taken.append(_place_label(ax, level, _level_text(level, mhz), color, (area, taken, points)))


def _draw_device_l2(ax: Axes, l2_bytes: int, y_top: float) -> Text | None:
    """Dotted line at the L2 size the device reports, labelled along the line (below every plateau)."""
    if l2_bytes <= 0:
        return None
    ax.axvline(l2_bytes, color=DEVICE_L2_COLOR, linestyle=":", linewidth=1.4, zorder=1)
    return ax.text(
        l2_bytes * 0.93,
        0.02 * y_top,
        f"device L2 = {iec_bytes(l2_bytes)}",
        rotation=90,
        color=DEVICE_L2_COLOR,
        fontsize=8,
        ha="right",
        va="bottom",
        zorder=5,
        clip_on=True,
    )


def _draw_curves(ax: Axes, curves: list[LatencyCurve]) -> None:
    """One line with markers and a CI band per curve."""
    for index, curve in enumerate(curves):
        color = COLORS[index % len(COLORS)]
        if curve.ci_low is not None and curve.ci_high is not None:
            ok = np.isfinite(curve.ci_low) & np.isfinite(curve.ci_high)
            ax.fill_between(
                curve.footprint,
                np.where(ok, curve.ci_low, curve.cycles),
                np.where(ok, curve.ci_high, curve.cycles),
                color=color,
                alpha=0.2,
                linewidth=0,
                zorder=2,
            )
        ax.plot(
            curve.footprint,
            curve.cycles,
            color=color,
            linewidth=1.4,
            marker="o",
            markersize=2.2,
            label=curve.label,
            zorder=4,
        )


def _y_top(curves: list[LatencyCurve]) -> float:
    """Upper y limit: the highest point or CI bound plus room for the labels."""
    tops = [float(np.nanmax(c.cycles)) for c in curves]
    tops += [float(np.nanmax(c.ci_high)) for c in curves if c.ci_high is not None and np.isfinite(c.ci_high).any()]
    return max(tops) * 1.22 if max(tops) > 0 else 1.0


def _add_ns_axis(ax: Axes, mhz: float) -> None:
    """Right-hand axis in nanoseconds at the measured SM clock."""
    scale = 1000.0 / mhz
    right = ax.secondary_yaxis("right", functions=(lambda c: c * scale, lambda ns: ns / scale))
    right.set_ylabel(f"latency (ns at measured {mhz:.0f} MHz)")


def new_figure(figsize: tuple[float, float], dpi: float) -> Figure:
    """An empty figure on its own Agg canvas; the first call imports matplotlib (a quarter of a second)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, dpi=dpi)
    FigureCanvasAgg(fig)
    return fig


@contextmanager
def stamped_as(text: str | None) -> Iterator[None]:
    """Within: every figure ``png_bytes`` writes has ``text`` written across it (None: nothing), so a plot of a
    simulated run shows what it is wherever it is copied to."""
    token = _STAMP.set(text)
    try:
        yield
    finally:
        _STAMP.reset(token)


def _draw_stamp(fig: Figure, text: str) -> None:
    """``text`` across the middle of the figure, over everything: a sixth of its shorter side high (in
    points at 100 dpi), tilted, red and faint, so the plot underneath still reads."""
    width, height = fig.canvas.get_width_height()
    fig.text(0.5, 0.5, text, ha="center", va="center", rotation=25, fontsize=min(width, height) / 6 * 100 / fig.dpi,
             color="#cf222e", alpha=0.25, weight="bold", zorder=STAMP_ZORDER)  # fmt: skip


def png_bytes(fig: Figure) -> bytes:
    """The figure as PNG bytes, with no software tag (same results, same bytes), stamped within ``stamped_as``."""
    from matplotlib.layout_engine import PlaceHolderLayoutEngine

    if isinstance(fig.get_layout_engine(), PlaceHolderLayoutEngine):
        fig.set_layout_engine(None)  # tight_layout() leaves one, for which savefig lays out (draws) the figure twice
    stamp = _STAMP.get()
    if stamp is not None:
        _draw_stamp(fig, stamp)
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi="figure", metadata={"Software": None})
    return buffer.getvalue()


def latency_figure(results: Results, dpi: int = DEFAULT_DPI) -> Figure | None:
    """The latency-vs-footprint figure for every latency series; None when there is none.

    Each series (L1-cached and L1-bypassing loads) is a line with its CI band; the levels the
    analysis found are marked by a segment at their plateau and a dashed line at their size,
    labelled in cycles and in ns at the measured SM clock; a dotted line marks the L2 size the
    device reports.
    """
    curves = load_latency_curves(results)
    if not curves:
        return None
    mhz = measured_sm_mhz(results)
    x_min = min(float(c.footprint[0]) for c in curves)
    x_max = max(float(c.footprint[-1]) for c in curves)
    if results.device.l2_bytes > 0:  # keep the device's L2 size in view, even on a curve cut short
        x_min, x_max = min(x_min, results.device.l2_bytes / 2), max(x_max, results.device.l2_bytes * 2)
    y_top = _y_top(curves)

    fig = new_figure((10, 5.6), dpi)
    ax = fig.add_subplot()
    _set_byte_axis(ax, x_min, x_max)
    ax.set_ylim(0, y_top)
    ax.grid(True, which="major", alpha=0.3)
    _draw_curves(ax, curves)
    _draw_level_marks(ax, _unique_levels(curves))
    device_l2 = _draw_device_l2(ax, results.device.l2_bytes, y_top)
    if mhz:
        _add_ns_axis(ax, mhz)
    ax.set_xlabel("footprint (bytes, log2 scale)")
    ax.set_ylabel("latency (SM cycles)")
    ax.set_title(f"{results.device.name} ({results.device.arch}): pointer-chase latency vs footprint", fontsize=11)
    legend = ax.legend(loc="upper left", fontsize=8.5, framealpha=0.9)
    fig.tight_layout()
    renderer = fig.canvas.get_renderer()
    fixed = [legend.get_window_extent(renderer)]
    if device_l2 is not None:
        fixed.append(device_l2.get_window_extent(renderer))
    _label_levels(ax, curves, mhz, fixed)
    return fig


def latency_png(results: Results, dpi: int = DEFAULT_DPI) -> bytes | None:
    """The latency-vs-footprint plot as PNG bytes (for embedding); None when there is no series."""
    fig = latency_figure(results, dpi)
    return None if fig is None else png_bytes(fig)
