"""The sustained-run figure for the fact sheet: per run, the SM clock each launch ran at and its rate against the
GPU time since the run began, and NVML's power over the run, so the moment the power controller acts shows."""

from __future__ import annotations

from gpuprobe.core.results import Results
from gpuprobe.output.plots import COLORS, new_figure, png_bytes
from gpuprobe.output.sections import Plot

RUN_PROBES = ("power.wgmma.bf16.random", "power.wgmma.bf16.zero", "power.cublas.bf16", "power.mma.bf16.random",
              "power.mma.bf16.zero", "power.ffma", "power.dram_read", "power.l2_read", "power.shared_read")  # fmt: skip


def sustained_png(results: Results, dpi: int) -> bytes | None:
    """PNG bytes: one panel per run measured (clock and power against time); None without any."""
    runs = [(p, results.probes[p].series) for p in RUN_PROBES if p in results.probes and results.probes[p].series]
    runs = [(p, series) for p, series in runs if series.get("launches", {}).get("at_ms")]
    if not runs:
        return None
    fig = new_figure((9.0, 1.8 * len(runs)), dpi)
    for number, (probe, series) in enumerate(runs):
        ax = fig.add_subplot(len(runs), 1, number + 1)
        launches = series["launches"]
        clocked = [(t, mhz) for t, mhz in zip(launches["at_ms"], launches["mhz"], strict=True) if mhz]
        if clocked:
            ax.plot(*zip(*clocked, strict=True), color=COLORS[0], marker=".", markersize=3, label="SM clock (kernel)")
        ax.set_ylabel("MHz", fontsize=8)
        ax.set_title(probe, fontsize=9)
        nvml = series.get("nvml", {})
        watts = [(t, w) for t, w in zip(nvml.get("t_ms", []), nvml.get("power_w", []), strict=True) if w is not None]
        if watts:
            power = ax.twinx()
            power.plot(*zip(*watts, strict=True), color=COLORS[1 % len(COLORS)], linestyle="--", label="power (NVML)")
            power.set_ylabel("W", fontsize=8)
            power.set_ylim(bottom=0)
            power.legend(fontsize=7, loc="lower right")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7, loc="lower left")
    fig.axes[-1].set_xlabel("ms since the run began (kernel clock: GPU time; power: wall time)")
    fig.tight_layout()
    return png_bytes(fig)


SUSTAINED_PLOT = Plot("sustained", "sustained.png", "SM clock and power against time, per sustained run", sustained_png)
