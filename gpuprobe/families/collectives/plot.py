"""The collectives figure for the fact sheet: bus bandwidth against message size, one line per collective
(nccl-tests' busbw, so the lines are comparable with each other and with the links' rate)."""

from __future__ import annotations

from gpuprobe.core.results import Results
from gpuprobe.output.plots import new_figure, png_bytes
from gpuprobe.output.sections import Plot


def busbw_series(results: Results) -> dict[str, tuple[list[float], list[float]]]:
    """Collective -> (sizes in bytes, busbw in GB/s) of every collective the run measured."""
    found = {}
    for name, outcome in results.probes.items():
        sizes = outcome.series.get("sizes", {}) if name.startswith("collectives.") else {}
        if sizes.get("size_bytes") and sizes.get("busbw_gbps"):
            found[name.removeprefix("collectives.")] = (list(sizes["size_bytes"]), list(sizes["busbw_gbps"]))
    return found


def busbw_png(results: Results, dpi: int) -> bytes | None:
    """PNG bytes of the figure; None when no collective was measured."""
    series = busbw_series(results)
    if not series:
        return None
    fig = new_figure((8, 4.8), dpi)
    ax = fig.add_subplot()
    for collective, (sizes, gbps) in series.items():
        ax.plot(sizes, gbps, marker="o", markersize=3, label=collective.replace("_", "-"))
    ax.set_xscale("log", base=2)
    ax.set_xlabel("size (bytes, as nccl-tests counts it)")
    ax.set_ylabel("bus bandwidth (GB/s)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    fig.tight_layout()
    return png_bytes(fig)


BUSBW_PLOT = Plot("collectives_busbw", "collectives_busbw.png", "NCCL bus bandwidth vs size", busbw_png)
