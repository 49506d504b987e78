"""The wgmma latency-vs-N figure for the fact sheet: one line per type, solid for A from shared
memory (ss), dashed for A from registers (rs), with the N/2-cycle floor an SM's dense rate sets."""

from __future__ import annotations

import io

from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from gpuprobe.core.results import Results
from gpuprobe.families.wgmma.layout import N_VALUES, TYPES


def latency_series(results: Results) -> dict[tuple[str, str], tuple[list[int], list[float]]]:
    """(type, source) -> (N values, latency cycles) of the latency facts the run measured."""
    series: dict[tuple[str, str], tuple[list[int], list[float]]] = {}
    for wgmma in TYPES.values():
        for source in ("ss", "rs"):
            points = [
                (n, results.fact(f"tensor.wgmma.{wgmma.name}.m64n{n}k{wgmma.k}.{source}.latency")) for n in N_VALUES
            ]
            measured = [(n, f.value) for n, f in points if f is not None and f.value is not None]
            if measured:
                series[(wgmma.name, source)] = ([n for n, _ in measured], [float(v) for _, v in measured])
    return series


def latency_png(results: Results, dpi: int) -> bytes | None:
    """PNG bytes of the figure; None when no wgmma latency was measured."""
    series = latency_series(results)
    if not series:
        return None
    fig = Figure(figsize=(8, 4.8), dpi=dpi)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    colors = dict(zip(TYPES, ("C0", "C1", "C2", "C3", "C4"), strict=True))
    for (name, source), (ns, cycles) in series.items():
        ax.plot(ns, cycles, marker="o", color=colors[name], linestyle="-" if source == "ss" else "--",
                label=f"{name} {source}")  # fmt: skip
    ax.plot(N_VALUES, [n / 2 for n in N_VALUES], color="grey", linestyle=":", label="floor N/2 (dense rate)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(N_VALUES, [str(n) for n in N_VALUES])
    ax.set_xlabel("N of wgmma m64nNk (k: 32 bytes of the type)")
    ax.set_ylabel("latency (SM cycles)")
    ax.grid(True, alpha=0.3)
    ax.legend(ncol=2, fontsize="small")
    fig.tight_layout()
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi="figure", metadata={"Software": None})
    return buffer.getvalue()
