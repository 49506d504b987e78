"""The witness measurement: the witnessed probes measured once more, the way the full run measured them.

``python -m gpuprobe.measure.witness --probes A,B -o DIR`` is the process ncu wraps: the suite's one runner
(:func:`gpuprobe.measure.session.run_suite`: the build checked, the GPU locked, each family in its measuring
processes through the one launcher) with the families' normal settings (the full run's shapes, not the smoke
stage's) at one sample each (each ``Stopping`` of its settings ``ONE_SAMPLE``: one short and one long launch a
figure, one point of a sweep), and
no second try of a probe measured under bad conditions. It writes its own results into DIR, never the full
run's: their series say what each counted launch claims to move.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.results import Results
from gpuprobe.families.base import Family
from gpuprobe.families.catalog import BY_NAME, FAMILIES
from gpuprobe.families.sampling import ONE_SAMPLE, Stopping
from gpuprobe.measure.plan import Stage

# The probes witnessed, per family, and why (the issue-24 audit of the H200 results): the DRAM and L2 writes (is a
# DRAM write faster than an L2 write because the bytes never reached DRAM in the time?), the goodput patterns around
# the DRAM granule (are the "moved" bytes what DRAM moved?), one goodput walk of each other level and direction
# (issue 27: a DRAM gather of 64-byte rows and their indices, an L2 column read, a DRAM and an L2 partial-sector
# write: do the granules the suite measured account for what each level moved?), and the global->shared copies
# (do they move what they say, and are their shared-memory slots free of bank conflicts?).
WITNESSED: dict[str, tuple[str, ...]] = {
    "bandwidth": (
        "bandwidth.dram.write.v16",
        "bandwidth.l2.write.v16",
        "bandwidth.goodput.v4.stride8",
        "bandwidth.goodput.v4.stride16",
        "bandwidth.goodput.v4.stride32",
        "bandwidth.goodput.gather.64",
        "bandwidth.goodput.l2_read.column.fp32",
        "bandwidth.goodput.dram_write.v4.stride8",
        "bandwidth.goodput.l2_write.v4.stride8",
    ),
    "async_copy": ("async_copy.cp_async.bandwidth", "async_copy.plain_copy.bandwidth"),
}


@dataclass(frozen=True)
class Witnessed(Stage):
    """The full stage (its settings and shapes), measuring only the ``chosen`` probes."""

    chosen: frozenset[str] = frozenset()

    def probes(self, family: Family) -> list[str]:
        return [name for name in super().probes(family) if name in self.chosen]


def chosen_probes(families: Sequence[str] | None) -> list[str]:
    """The witnessed probes of ``families`` (None: all of :data:`WITNESSED`); an unknown family is an error."""
    names = list(WITNESSED) if families is None else list(families)
    unknown = [name for name in names if name not in WITNESSED]
    if unknown or not names:
        raise GpuprobeError(f"no witnessed family {', '.join(unknown) or '(none given)'}; use: {', '.join(WITNESSED)}")
    return [probe for name in names for probe in WITNESSED[name]]


def one_sample(family: Family) -> Any:
    """The family's normal settings, sampled once: each of its ``Stopping`` values (a sweep's too) ``ONE_SAMPLE``."""
    defaults = family.settings()
    once = {f.name: ONE_SAMPLE for f in dataclasses.fields(defaults) if isinstance(getattr(defaults, f.name), Stopping)}
    return dataclasses.replace(defaults, **once)


def family_of(probe: str) -> str:
    """The catalog name of the family that measures ``probe``."""
    return next(family.name for family in FAMILIES if probe in family.probes)


def measuring_command(probes: Sequence[str], out_dir: Path, device_index: int) -> list[str]:
    """The witness measurement as a command for ncu to wrap: this Python, this module."""
    return [sys.executable, "-m", str(__package__), "--probes", ",".join(probes), "-o", str(out_dir),
            "--device", str(device_index)]  # fmt: skip


def measure(probes: Sequence[str], out_dir: Path, device_index: int = 0) -> Results:
    """``probes`` measured once at the full run's shapes on CUDA device ``device_index``, into ``out_dir``."""
    from gpuprobe.measure.isolation import ChildPolicy
    from gpuprobe.measure.session import run_suite
    from gpuprobe.runner.device import device_identity, require_gpu
    from gpuprobe.runner.launcher import LauncherSpec

    families = {family_of(p) for p in probes}
    settings = {name: one_sample(BY_NAME[name]) for name in families}
    policy = dataclasses.replace(ChildPolicy(), attempts=1)
    require_gpu()
    return run_suite(device_identity(device_index), LauncherSpec(device_index=device_index), out_dir,
                     settings=settings, policy=policy, stage=Witnessed(chosen=frozenset(probes)),
                     families=families)  # fmt: skip


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m gpuprobe.measure.witness``: measure, say where the results are; a bad argument: one line, exit 2."""
    parser = argparse.ArgumentParser(prog=f"python -m {__package__}", description=__doc__.splitlines()[0])
    parser.add_argument("--probes", required=True, help="comma-separated probe names")
    parser.add_argument("-o", "--output", required=True, help="directory for the witness run's results")
    parser.add_argument("--device", type=int, default=0, help="CUDA device index")
    args = parser.parse_args(argv)
    try:
        probes = [p for p in args.probes.split(",") if p]
        known = {p for family in FAMILIES for p in family.probes}
        if not probes or set(probes) - known:
            raise GpuprobeError(f"unknown probe(s): {', '.join(sorted(set(probes) - known)) or '(none given)'}")
        measure(probes, Path(args.output), args.device)
    except GpuprobeError as exc:
        print(f"gpuprobe witness: error: {exc}", file=sys.stderr)
        return 2
    print(f"wrote {Path(args.output) / 'results.json'}")
    return 0
