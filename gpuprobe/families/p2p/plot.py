"""The p2p heatmaps for the fact sheet: one matrix per measured kind (rows the source GPU, columns the
destination), each cell its value, so a link far below its row and column stands out at a glance."""

from __future__ import annotations

import numpy as np

from gpuprobe.core.results import Results
from gpuprobe.families.p2p.pairs import BANDWIDTH_KINDS, KIND_TITLES, matrices, matrix
from gpuprobe.output.plots import new_figure, png_bytes
from gpuprobe.output.sections import Plot


def heatmaps(results: Results) -> dict[str, np.ndarray]:
    """Kind -> its matrix (NaN on the diagonal and where not measured), for the kinds the run measured."""
    found = matrices((f.id, f.value) for f in results.facts)
    count = 1 + max((max(pair) for values in found.values() for pair in values), default=0)
    return {
        kind: np.array([[np.nan if v is None else v for v in row] for row in matrix(found[kind], count)], dtype=float)
        for kind in (*BANDWIDTH_KINDS, "latency")
        if kind in found
    }


def matrices_png(results: Results, dpi: int) -> bytes | None:
    """PNG bytes of the heatmaps; None when no pair was measured."""
    maps = heatmaps(results)
    if not maps:
        return None
    fig = new_figure((4.2 * len(maps), 4.0), dpi)
    for index, (kind, values) in enumerate(maps.items()):
        ax = fig.add_subplot(1, len(maps), index + 1)
        image = ax.imshow(values, cmap="viridis" if kind != "latency" else "viridis_r")
        count = values.shape[0]
        if count <= 16:  # the numbers in the cells, while they fit
            for (row, column), value in np.ndenumerate(values):
                if np.isfinite(value):
                    ax.text(column, row, f"{value:.0f}", ha="center", va="center", fontsize="x-small", color="w")
        ax.set_xticks(range(count))
        ax.set_yticks(range(count))
        ax.set_xlabel("to GPU" if kind != "latency" else "memory of GPU")
        ax.set_ylabel("from GPU" if kind != "latency" else "load by GPU")
        ax.set_title(f"{KIND_TITLES[kind]} ({'cycles' if kind == 'latency' else 'GB/s'})", fontsize="small")
        fig.colorbar(image, ax=ax, shrink=0.8)
    fig.tight_layout()
    return png_bytes(fig)


MATRICES_PLOT = Plot("p2p_matrices", "p2p_matrices.png", "GPU-to-GPU bandwidth and latency matrices", matrices_png)
