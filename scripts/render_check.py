"""The HTML fact sheet as a real browser shows it: headless Chromium opens each sheet at 1400x900 and this
checks that the page renders, that every key plot is a decoded image shown at a readable size, that the
Answers block lies wholly above the fold with the headline table beginning under it on the first screen (its
header and first rows at least), and that the page is not blank; it leaves a screenshot of the first screen and
of the whole page beside each sheet.

The headline table once had to lie wholly above the fold. The Answers block (issue 27) now opens the sheet: it
answers on the first screen what the table's rows only add up to, and its ~150 px push a 23-row table that
already ended at 780-850 px of 900 below the fold, so the first screen is held to the answers and the table's start.

Sheets checked: the real H200 run in reports/nvidia-h200/ and a whole simulated run judged as an H200
(every family, so every key plot). Run by scripts/render-check.sh, which installs Chromium first; no GPU.

    python3 scripts/render_check.py OUT_DIR [--chromium PATH]

Exit status 0 when every check holds, 1 when one fails (each failure one line), 2 when Chromium cannot run.
"""

from __future__ import annotations

import argparse
import html
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

import numpy as np
from matplotlib import image

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from gpuprobe.core.results import Results, load  # noqa: E402
from gpuprobe.families.catalog import sections  # noqa: E402
from gpuprobe.output.factsheet import plot_images, write_report  # noqa: E402
from gpuprobe.output.headline import HEADLINE_PLOTS  # noqa: E402

WIDTH, HEIGHT = 1400, 900
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--hide-scrollbars",
)
REAL_RUN = REPO / "reports" / "nvidia-h200" / "results.json"
MIN_PLOT_WIDTH = 400  # CSS pixels: a key plot narrower than this is not readable beside its neighbour
HEADLINE_SHOWN = 150  # CSS pixels of the headline table (its header and first rows) the first screen must show

# Measured in the page once it has loaded, written into the DOM for --dump-dom to carry out.
PROBE_SCRIPT = """
<script>
window.addEventListener("load", () => {
  const box = (el) => { const r = el.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom]; };
  const table = document.querySelector("table.headline");
  const answers = document.querySelector("div.answers");
  const plots = [...document.querySelectorAll("#key-plots ~ .plots img")].map((img) => ({
    alt: img.alt, complete: img.complete, natural: img.naturalWidth, box: box(img),
    hidden: img.closest("details:not([open])") !== null || getComputedStyle(img).visibility !== "visible",
  }));
  const out = document.createElement("pre");
  out.id = "render-check";
  out.textContent = JSON.stringify({
    viewport: [window.innerWidth, window.innerHeight],
    headline: table ? box(table) : null,
    answers: answers ? box(answers) : null,
    plots: plots,
    sections: document.querySelectorAll("details").length,
    height: document.documentElement.scrollHeight,
  });
  document.body.appendChild(out);
});
</script>
"""


def die(message: str) -> NoReturn:
    """Chromium could not do what was asked: one line, exit status 2."""
    print(f"render_check: {message}", file=sys.stderr)
    sys.exit(2)


def chromium_binary(given: str | None) -> str:
    found = given or shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
    if not found:
        die("no Chromium (install the Debian package chromium)")
    return found


def browse(chromium: str, profile: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Chromium headless, a fresh profile, the network closed to it by flags; ``args`` say what to do."""
    command = [chromium, *FLAGS, f"--user-data-dir={profile}", *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120, check=False)
    if done.returncode != 0:
        die(f"chromium failed ({done.returncode}): {done.stderr.strip()[-300:]}")
    return done


def measure(chromium: str, sheet: Path, work: Path, window_height: int) -> dict:
    """The page's layout as Chromium lays it out in a 1400 x ``window_height`` window (a copy of the sheet
    with the probe script)."""
    page = sheet.read_text(encoding="utf-8")
    page = re.sub(r'<meta http-equiv="Content-Security-Policy"[^>]*>', "", page, count=1)
    probe = work / "probe.html"
    probe.write_text(page.replace("</body>", PROBE_SCRIPT + "</body>"), encoding="utf-8")
    done = browse(chromium, work / f"profile-dom-{window_height}", f"--window-size={WIDTH},{window_height}",
                  "--virtual-time-budget=10000", "--dump-dom", probe.as_uri())  # fmt: skip
    found = re.search(r'<pre id="render-check">(.*?)</pre>', done.stdout, re.S)
    if not found:
        die(f"{sheet}: the page never reported its layout (did it load?)")
    return json.loads(html.unescape(found.group(1)))


def layout_at_fold(chromium: str, sheet: Path, work: Path) -> tuple[dict, int]:
    """The layout in a 1400x900 viewport, and the window height that gives it: headless Chromium keeps
    part of its window for browser furniture it does not draw, so the window is made taller by that."""
    first = measure(chromium, sheet, work, HEIGHT)
    window = HEIGHT + HEIGHT - int(first["viewport"][1])
    layout = measure(chromium, sheet, work, window)
    if layout["viewport"] != [WIDTH, HEIGHT]:
        die(f"cannot get a {WIDTH}x{HEIGHT} viewport (got {layout['viewport']})")
    return layout, window - HEIGHT


def screenshot(chromium: str, sheet: Path, shot: Path, height: int, furniture: int, work: Path) -> np.ndarray:
    """A screenshot of the sheet itself (its CSP in force), its top 1400 x ``height`` CSS pixels, as RGB."""
    browse(chromium, work / f"profile-{shot.stem}", f"--window-size={WIDTH},{height + furniture}",
           "--virtual-time-budget=10000", f"--screenshot={shot}", sheet.as_uri())  # fmt: skip
    pixels = np.asarray(image.imread(shot))[:height, :, :3]
    image.imsave(shot, pixels)
    return pixels


def ink(pixels: np.ndarray) -> float:
    """The share of pixels that are not (nearly) white."""
    return float((pixels.mean(axis=2) < 0.85).mean()) if pixels.size else 0.0


def check(name: str, layout: dict, first: np.ndarray, page: np.ndarray, plot_keys: list[str]) -> list[str]:
    """What is wrong with one sheet's rendering, one line each: ``first`` and ``page`` are the screenshots of
    the first screen and of the whole page, ``plot_keys`` the key plots the run has."""
    problems = []
    _, inner_height = layout["viewport"]
    headline, answers = layout["headline"], layout["answers"]
    if answers is None:
        problems.append(f"{name}: no Answers block on the page")
    elif answers[3] > inner_height:
        problems.append(f"{name}: the Answers block ends at {answers[3]:.0f} px, below the fold ({inner_height})")
    if headline is None:
        problems.append(f"{name}: no headline table on the page")
    elif headline[1] + HEADLINE_SHOWN > inner_height:
        problems.append(f"{name}: the headline table starts at {headline[1]:.0f} px, too low to show its first rows "
                        f"above the fold ({inner_height})")  # fmt: skip
    if len(layout["plots"]) != len(plot_keys):
        problems.append(f"{name}: {len(layout['plots'])} key plots on the page, {len(plot_keys)} drawn")
    for plot in layout["plots"]:
        width = plot["box"][2] - plot["box"][0]
        if not plot["complete"] or plot["natural"] == 0:
            problems.append(f"{name}: plot {plot['alt']!r} did not decode")
        elif plot["hidden"] or width < MIN_PLOT_WIDTH:
            problems.append(f"{name}: plot {plot['alt']!r} is hidden or {width:.0f} px wide")
        else:
            left, top, right, bottom = (round(v) for v in plot["box"])
            if ink(page[top:bottom, left:right]) < 0.03:
                problems.append(f"{name}: plot {plot['alt']!r} is blank on the screen")
    if layout["sections"] < 5:
        problems.append(f"{name}: {layout['sections']} collapsible sections")
    if ink(first) < 0.03:
        problems.append(f"{name}: the first screen is blank ({ink(first):.1%} of its pixels are ink)")
    return problems


def simulated_run(out: Path) -> Results:
    """Every family measured on the simulated GPU, named as an H200 so the run is judged."""
    from gpuprobe.measure import session
    from gpuprobe.measure.isolation import ChildPolicy
    from gpuprobe.runner.launcher import LauncherSpec
    from gpuprobe.simulated.gpu import SimulatedGpu, fast_settings, suite_options

    options = suite_options(name="NVIDIA H200")
    launcher = LauncherSpec("gpuprobe.simulated.gpu:open_simulated", 0, options)
    policy = ChildPolicy(probe_time_limit_s=60, cooldown_s=0.0)
    return session.run_suite(SimulatedGpu(**options).device(), launcher, out, settings=fast_settings(), policy=policy)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out", type=Path, help="folder for the sheets and screenshots")
    parser.add_argument("--chromium", help="the browser binary (default: chromium on PATH)")
    args = parser.parse_args()
    chromium = chromium_binary(args.chromium)
    out = args.out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    runs = {"nvidia-h200": load(REAL_RUN), "simulated-h200": simulated_run(out / "simulated-run")}
    problems: list[str] = []
    with tempfile.TemporaryDirectory() as scratch:
        for name, results in runs.items():
            folder = out / name
            (sheet,) = write_report(results, folder, "html", sections=sections())
            work = Path(scratch) / name
            work.mkdir()
            layout, furniture = layout_at_fold(chromium, sheet, work)
            first = screenshot(chromium, sheet, folder / "first-screen.png", HEIGHT, furniture, work)
            page = screenshot(chromium, sheet, folder / "page.png", min(int(layout["height"]), 16000), furniture, work)
            drawable = plot_images(results, sections(), dpi=40)
            drawn = [key for key in HEADLINE_PLOTS if key in drawable]
            found = check(name, layout, first, page, drawn)
            problems += found
            top, said = layout["headline"] or [0, 0, 0, 0], layout["answers"] or [0, 0, 0, 0]
            print(f"render_check: {name}: answers {said[1]:.0f}-{said[3]:.0f} px, headline table {top[1]:.0f}-"
                  f"{top[3]:.0f} px of {layout['viewport'][1]}, "
                  f"{len(layout['plots'])} of {len(drawn)} key plots shown, {layout['sections']} sections, "
                  f"page {layout['height']} px, {len(found)} problem(s)")  # fmt: skip
    for line in problems:
        print(f"render_check: FAIL {line}")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
