"""The TMA family's figures: tile bandwidth vs tile shape and swizzle (loads from L2 and DRAM, with and
without L2 promotion, and stores), and the multicast's speed-up over unicast loads vs cluster size."""

from __future__ import annotations

from gpuprobe.core.results import Results
from gpuprobe.families.tma.tiles import SWIZZLE_BYTES, TILE_COLS, TILE_ROWS
from gpuprobe.output.plots import new_figure, png_bytes

CLUSTERS = (2, 4)
SERIES = (  # (label, fact id stem after the tile and swizzle)
    ("load from L2", "load.l2", ""),
    ("load from DRAM", "load.dram", ""),
    ("load from DRAM, no L2 promotion", "load.dram", ".no_l2_promotion"),
    ("store to DRAM", "store.dram", ""),
)


def _value(results: Results, fact_id: str) -> float | None:
    found = results.fact(fact_id)
    return float(found.value) if found is not None and found.value is not None else None


def bandwidth_series(results: Results) -> tuple[list[str], dict[str, list[float | None]]]:
    """The tile configurations (shape, swizzle) and per series their GB/s (None where not measured)."""
    configs = [(rows, swizzle) for rows in TILE_ROWS for swizzle in SWIZZLE_BYTES]
    labels = [f"{rows}x{TILE_COLS} {swizzle}" for rows, swizzle in configs]
    series = {
        label: [_value(results, f"tma.{stem}.{rows}x{TILE_COLS}.{sw}{suffix}.bandwidth") for rows, sw in configs]
        for label, stem, suffix in SERIES
    }
    return labels, series


def speedup_series(results: Results) -> dict[str, tuple[list[int], list[float]]]:
    """Per level, the cluster sizes measured and the multicast's speed-up at each."""
    found = {}
    for level in ("l2", "dram"):
        points = [(c, _value(results, f"tma.multicast.c{c}.{level}.speedup")) for c in CLUSTERS]
        measured = [(c, v) for c, v in points if v is not None]
        if measured:
            found[level] = ([c for c, _ in measured], [v for _, v in measured])
    return found


def bandwidth_png(results: Results, dpi: int) -> bytes | None:
    """Grouped bars, one group per tile shape and swizzle; None when no TMA bandwidth was measured."""
    labels, series = bandwidth_series(results)
    if not any(v is not None for values in series.values() for v in values):
        return None
    figure = new_figure((10, 4.2), dpi)
    ax = figure.subplots()
    width = 0.8 / len(series)
    for k, (label, values) in enumerate(series.items()):
        xs = [i + (k - (len(series) - 1) / 2) * width for i, v in enumerate(values) if v is not None]
        ax.bar(xs, [v for v in values if v is not None], width, label=label)
    ax.set_xticks(range(len(labels)), labels)
    ax.set(ylabel="GB/s (every SM)", title="TMA tiles: bandwidth by tile shape and swizzle")
    ax.legend(fontsize="small")
    ax.grid(True, axis="y", alpha=0.3)
    figure.tight_layout()
    return png_bytes(figure)


def multicast_png(results: Results, dpi: int) -> bytes | None:
    """The multicast's speed-up over unicast vs cluster size, from L2 and DRAM, with the ideal (C)."""
    series = speedup_series(results)
    if not series:
        return None
    figure = new_figure((6, 4), dpi)
    ax = figure.subplots()
    for level, (sizes, values) in series.items():
        ax.plot(sizes, values, "o-", label=f"from {level.upper()}")
    ax.plot(CLUSTERS, CLUSTERS, ":", color="grey", label="1/C of the requests (at most C x)")
    ax.axhline(1.0, color="grey", linewidth=0.8)
    ax.set_xticks(CLUSTERS)
    ax.set(xlabel="blocks per cluster", ylabel="received GB/s, multicast / unicast", title="TMA multicast")
    ax.legend(fontsize="small")
    figure.tight_layout()
    return png_bytes(figure)
