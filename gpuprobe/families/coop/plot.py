"""The coop family's figure: per pair, the C++ cost beside its PTX twin's, with what each compiled to.

One row per pair measured, two bars (C++ and hand-written PTX, cycles on a log scale: a tile shuffle
is tens of cycles, a grid barrier thousands), each labelled with its kernel's SASS per step as the
probe recorded it (the opcodes of its timed region, from the cubin that ran), so a reader sees at a
glance what an abstraction costs and where it goes.
"""

from __future__ import annotations

from gpuprobe.core.results import Results
from gpuprobe.families.coop.lowering import rank
from gpuprobe.output.plots import new_figure, png_bytes
from gpuprobe.output.sections import Plot

SHOWN_OPCODES = 4  # per bar label, the most frequent first
CPP_LABEL = "C++ (cooperative groups, libcu++, CUB)"


def _label(counts: dict[str, list[float]]) -> str:
    """The opcodes per step as the probe recorded them, in the order its note gives them."""
    items = sorted(counts.items(), key=lambda item: rank(item[0], item[1][0]))
    return ", ".join(f"{opcode} {values[0]:.3g}" for opcode, values in items[:SHOWN_OPCODES])


def pair_rows(results: Results) -> list[tuple[str, float, float, str, str]]:
    """(fact id of the C++ cost, C++ cycles, PTX cycles, C++ SASS, PTX SASS) for every pair measured."""
    rows = []
    for fact in results.facts:
        if not fact.id.startswith("coop.") or ".latency" not in fact.id or fact.value is None:
            continue
        twin = results.fact(fact.id.replace(".latency", ".ptx_latency", 1))
        outcome = results.probes.get(fact.probe)
        if twin is None or twin.value is None or outcome is None:
            continue
        series = outcome.series
        rows.append((fact.id, float(fact.value), float(twin.value), _label(series.get("sass_cpp", {})),
                     _label(series.get("sass_ptx", {}))))  # fmt: skip
    return rows


def pairs_png(results: Results, dpi: int) -> bytes | None:
    """PNG bytes of the figure; None when no pair was measured."""
    rows = pair_rows(results)
    if not rows:
        return None
    fig = new_figure((11, 0.55 * len(rows) + 1.2), dpi)
    ax = fig.add_subplot()
    for index, (_, cpp, ptx, cpp_sass, ptx_sass) in enumerate(rows):
        y, first = len(rows) - 1 - index, index == 0
        ax.barh(y + 0.2, cpp, height=0.38, color="C0", label=CPP_LABEL if first else None)
        ax.barh(y - 0.2, ptx, height=0.38, color="C1", label="hand-written PTX twin" if first else None)
        ax.text(cpp * 1.05, y + 0.2, cpp_sass, va="center", fontsize=6)
        ax.text(ptx * 1.05, y - 0.2, ptx_sass, va="center", fontsize=6)
    ax.set_yticks(range(len(rows)), [row[0].removeprefix("coop.") for row in reversed(rows)], fontsize=7)
    ax.set_xscale("log")
    ax.set_xlabel("cycles per step (log scale); labels: SASS opcodes per step")
    ax.set_xlim(right=max(max(r[1], r[2]) for r in rows) * 60)
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(loc="lower right", fontsize="small")
    fig.tight_layout()
    return png_bytes(fig)


PAIRS_PLOT = Plot("coop_pairs", "coop_pairs.png", "C++ abstractions beside their PTX twins, cycles and SASS", pairs_png)
