"""``gpuprobe demo``: the whole suite on the simulated GPU, so a machine with no GPU shows in a minute
what a real run writes (the results file, the fact sheet and its plots), every page stamped SIMULATED.

It goes through the same session as a real run (the build, every SASS contract, the measuring process serving
family after family, the judgement and the sheet); only the launcher is the simulated GPU's, with each family's
quick settings. The part is a made-up one of 8 SMs and a 512 KiB L2, in discovery mode (no GPU model's
expectations: facts reported, the cross-generation invariants asserted)."""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.results import Results
from gpuprobe.families.catalog import BY_NAME
from gpuprobe.measure.isolation import ChildPolicy
from gpuprobe.measure.progress import ProgressSink
from gpuprobe.measure.session import run_suite
from gpuprobe.runner.launcher import LauncherSpec
from gpuprobe.simulated.gpu import SimulatedGpu, fast_settings, suite_options

DEMO_DIR = Path("gpuprobe-demo")  # never reports/: that folder holds real runs alone
DEMO_NAME = "Simulated GPU"
DEMO_POLICY = ChildPolicy(probe_time_limit_s=60.0, cooldown_s=0.0)  # a simulated kernel never throttles


def demo_families(names: str | None) -> list[str] | None:
    """The families a ``--families A,B`` list names (None: all); an unknown name is a one-line error."""
    if names is None:
        return None
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in BY_NAME]
    if unknown or not chosen:
        raise GpuprobeError(f"--families: {', '.join(unknown) or '(none)'} not a family; families: "
                            f"{', '.join(BY_NAME)}")  # fmt: skip
    return chosen


def run_demo(out_dir: Path, families: Collection[str] | None = None, progress: ProgressSink | None = None) -> Results:
    """Run the suite (or ``families``) on the simulated GPU into ``out_dir``; its results, marked simulated."""
    options = suite_options(name=DEMO_NAME)
    launcher = LauncherSpec("gpuprobe.simulated.gpu:open_simulated", 0, options)
    return run_suite(SimulatedGpu(**options).device(), launcher, Path(out_dir), settings=fast_settings(),
                     policy=DEMO_POLICY, families=families, progress=progress)  # fmt: skip
