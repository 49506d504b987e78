"""Writing the fact sheet: Markdown with its plots as PNG files beside it, or one self-contained HTML page.

The content comes from :mod:`gpuprobe.output.sheet`, marked up by :mod:`gpuprobe.output.report` (Markdown) or
:mod:`gpuprobe.output.html_report` (HTML); this module only draws the plots and writes the files, atomically.
"""

from __future__ import annotations

import re
import sys
from collections.abc import Sequence
from pathlib import Path

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.files import make_dirs, write_atomic
from gpuprobe.core.results import Results
from gpuprobe.core.text import shown_lines
from gpuprobe.output.html_report import render_html
from gpuprobe.output.plots import DEFAULT_DPI, stamped_as
from gpuprobe.output.report import render_markdown
from gpuprobe.output.sections import Plot, Section
from gpuprobe.output.sheet import all_plots, sheet_layout

FACTSHEET_NAME = "factsheet.md"
FACTSHEET_HTML_NAME = "factsheet.html"
FORMATS = ("md", "html")


def gpu_slug(device_name: str) -> str:
    """File-name slug of a GPU name: "NVIDIA A100-SXM4-80GB" -> "nvidia-a100-sxm4-80gb" (``reports/<slug>/``).

    Lower case; every run of characters outside [a-z0-9] becomes one "-"; no leading or trailing
    "-". A name with nothing usable gives "unknown-gpu".
    """
    slug = re.sub(r"[^a-z0-9]+", "-", device_name.lower()).strip("-")
    return slug or "unknown-gpu"


def _drawn(plot: Plot, results: Results, dpi: int | None) -> bytes | None:
    """One plot's PNG for this run (None where it has nothing to draw), stamped if the run is simulated. A plot
    there is not the memory to draw is left out with a warning line on stderr: the sheet is written without it."""
    try:
        with stamped_as("SIMULATED" if results.device.simulated else None):
            return plot.png(results, DEFAULT_DPI if dpi is None else dpi)
    except MemoryError:
        print(f"gpuprobe: warning: {plot.file_name} left out of the fact sheet: not the memory to draw it",
              file=sys.stderr)  # fmt: skip
        return None


def plot_images(results: Results, sections: Sequence[Section], dpi: int | None = None) -> dict[str, bytes]:
    """Every plot this run can draw, as PNG bytes keyed by ``plot_key``."""
    drawn = {plot.key: _drawn(plot, results, dpi) for plot in all_plots(sheet_layout(sections))}
    return {key: png for key, png in drawn.items() if png is not None}


def write_html(results: Results, out_dir: Path, sections: Sequence[Section], dpi: int | None = None) -> Path:
    """Write ``factsheet.html`` (plots embedded) into ``out_dir``; return its path."""
    path = Path(out_dir) / FACTSHEET_HTML_NAME
    page = render_html(results, plot_images(results, sections, dpi), sections=sections)
    write_atomic(path, shown_lines(page))  # a file's control and bidi characters as escapes, as text
    return path


def _write_markdown(results: Results, out_dir: Path, sections: Sequence[Section], dpi: int | None) -> list[Path]:
    """``factsheet.md`` and its PNG plots; a plot this run cannot draw is removed if an older run left one."""
    plot_files: dict[str, str] = {}
    drawn: list[Path] = []
    for plot in all_plots(sheet_layout(sections)):
        path = out_dir / plot.file_name
        data = _drawn(plot, results, dpi)
        if data is None:
            path.unlink(missing_ok=True)
            continue
        write_atomic(path, data)
        plot_files[plot.key] = plot.file_name
        drawn.append(path)
    sheet = out_dir / FACTSHEET_NAME
    write_atomic(sheet, render_markdown(results, plot_files, sections=sections))
    return [sheet, *drawn]


def write_report(
    results: Results, out_dir: Path, fmt: str = "md", *, sections: Sequence[Section], dpi: int | None = None
) -> list[Path]:
    """Write the fact sheet into ``out_dir`` in format ``fmt``, with the families' ``sections``; return
    the paths written.

    ``"md"``: ``factsheet.md`` plus its plot(s) as PNG files beside it. ``"html"``:
    ``factsheet.html`` alone, self-contained (plots embedded, no external resources). The results
    JSON is the caller's to write. An unknown format is a GpuprobeError.
    """
    if fmt not in FORMATS:
        raise GpuprobeError(f"unknown fact sheet format {fmt!r} (use one of: {', '.join(FORMATS)})")
    out_dir = make_dirs(Path(out_dir))
    if fmt == "html":
        return [write_html(results, out_dir, sections, dpi)]
    return _write_markdown(results, out_dir, sections, dpi)
