"""The loaded-latency figure for the fact sheet: the chase's latency against the background bandwidth, one line
per level (the curve memory vendors draw for CPUs), in ns at the run's SM clock (cycles where it is unknown)."""

from __future__ import annotations

from gpuprobe.core.results import Results
from gpuprobe.output.plots import COLORS, new_figure, png_bytes
from gpuprobe.output.sections import Plot

LABELS = {"loaded_latency.l2": "L2", "loaded_latency.dram": "DRAM"}


def loaded_curves(results: Results) -> dict[str, tuple[list[float], list[float], str]]:
    """Level label -> (background GB/s, latency, its unit) of every level the run measured."""
    found = {}
    for probe_name, label in LABELS.items():
        outcome = results.probes.get(probe_name)
        curve = outcome.series.get("curve", {}) if outcome is not None else {}
        if curve.get("background_gbps"):
            unit = "ns" if curve.get("latency_ns") else "cycles"
            latency = curve["latency_ns"] if unit == "ns" else curve["latency_cycles"]
            found[label] = (list(curve["background_gbps"]), list(latency), unit)
    return found


def loaded_png(results: Results, dpi: int) -> bytes | None:
    """PNG bytes of the figure; None when no level was measured."""
    curves = loaded_curves(results)
    if not curves:
        return None
    fig = new_figure((8, 4.8), dpi)
    ax = fig.add_subplot()
    units = set()
    for index, (label, (gbps, latency, unit)) in enumerate(curves.items()):
        ax.plot(gbps, latency, marker="o", markersize=4, color=COLORS[index % len(COLORS)], label=label)
        units.add(unit)
    ax.set_xlabel("background read bandwidth from the same level (GB/s, measured)")
    ax.set_ylabel(f"dependent-load latency ({' / '.join(sorted(units))})")
    ax.set_xlim(left=0)
    ax.set_ylim(bottom=0)
    ax.set_title(f"{results.device.name}: loaded latency (one chasing thread, every other SM streaming)", fontsize=10)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small", loc="upper left")
    fig.tight_layout()
    return png_bytes(fig)


LOADED_PLOT = Plot("loaded_latency", "loaded_latency.png", "latency vs background bandwidth", loaded_png)
