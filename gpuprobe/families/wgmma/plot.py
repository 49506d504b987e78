"""The wgmma figures for the fact sheet: latency vs N, one line per type, solid for A from shared memory
(ss), dashed for A from registers (rs), with the N/2-cycle floor an SM's dense rate sets; and sparse vs
dense throughput vs N, with every sparse rate over its dense twin's against the datasheets' 2 x."""

from __future__ import annotations

from gpuprobe.core.results import Results
from gpuprobe.families.wgmma.layout import N_VALUES, TYPES
from gpuprobe.output.plots import new_figure, png_bytes


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
    fig = new_figure((8, 4.8), dpi)
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
    return png_bytes(fig)


SPARSE_N = (64, 128, 256)


def sparse_series(results: Results) -> tuple[dict[str, tuple[list[int], list[float]]], dict[str, float]]:
    """bf16 wgmma TFLOP/s vs N, dense and 2:4 sparse (A from shared memory); and each sparse instruction's
    rate over its dense twin's (``.over_dense`` facts, wgmma and mma.sync alike)."""
    lines: dict[str, tuple[list[int], list[float]]] = {}
    for label, family, k in (("dense", "wgmma", 16), ("2:4 sparse", "wgmma_sp", 32)):
        points = [(n, results.fact(f"tensor.{family}.bf16.m64n{n}k{k}.ss.tflops")) for n in SPARSE_N]
        measured = [(n, float(f.value)) for n, f in points if f is not None and f.value is not None]
        if measured:
            lines[label] = ([n for n, _ in measured], [v for _, v in measured])
    ratios = {
        f.id.removeprefix("tensor.").removesuffix(".over_dense"): float(f.value)
        for f in results.facts
        if f.id.endswith(".over_dense") and f.value is not None
    }
    return lines, ratios


def sparse_png(results: Results, dpi: int) -> bytes | None:
    """Dense and sparse bf16 wgmma throughput vs N (left), every sparse rate over its dense twin's against the
    datasheets' 2 x (right); None when no sparse rate was measured."""
    lines, ratios = sparse_series(results)
    if not ratios and "2:4 sparse" not in lines:
        return None
    fig = new_figure((11, 4.4), dpi)
    left, right = fig.subplots(1, 2)
    for label, (ns, tflops) in lines.items():
        left.plot(ns, tflops, marker="o", label=f"bf16 wgmma, {label}")
    left.set_xscale("log", base=2)
    left.set_xticks(SPARSE_N, [str(n) for n in SPARSE_N])
    left.set(xlabel="N of m64nN (A from shared memory)", ylabel="TFLOP/s (sparse: dense-equivalent)")
    if lines:
        left.legend(fontsize="small")
    else:  # a part without wgmma: mma.sp's ratios alone
        left.text(0.5, 0.5, "no bf16 wgmma measured", ha="center", va="center", transform=left.transAxes)
    left.grid(True, alpha=0.3)
    names = sorted(ratios)
    right.barh(range(len(names)), [ratios[n] for n in names], color="C2")
    right.axvline(2.0, color="grey", linestyle=":", label="datasheet 2 x")
    right.axvline(1.0, color="grey", linewidth=0.8)
    right.set_yticks(range(len(names)), names, fontsize="x-small")
    right.set(xlabel="sparse rate / dense rate, same run")
    right.legend(fontsize="small")
    fig.tight_layout()
    return png_bytes(fig)
