"""``gpuprobe fleet``, ``fleet-run`` and ``fleet-links``: many GPUs' results compared, a node's GPUs measured at
once, nodes' links compared (docs/fleet.md)."""

from __future__ import annotations

import argparse
import math
import os
import shlex
import socket
import sys
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from gpuprobe.cli.common import EXIT_FAILED
from gpuprobe.core.errors import GpuprobeError, require_count
from gpuprobe.core.files import make_dirs
from gpuprobe.fleet import aggregate, links, node_runs
from gpuprobe.runner.device import entry_index, visible_entries


def positive_number(text: str, what: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not value > 0 or not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be a positive {what}, not {text}")
    return value


def z_threshold(text: str) -> float:
    return positive_number(text, "z-score")


def positive_seconds(text: str) -> float:
    return positive_number(text, "number of seconds")


def floor_fraction(text: str) -> float:
    value = positive_number(text, "fraction")
    if value >= 1:
        raise argparse.ArgumentTypeError(f"must be a fraction under 1, not {text}")
    return value


def percentage(text: str) -> float:
    """A finite percentage of at least 0 (``--min-deviation``)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not (value >= 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"must be a finite percentage of at least 0, not {text}")
    return value


def add_outlier_options(p: argparse.ArgumentParser) -> None:
    """``--threshold Z`` and ``--min-deviation PCT``: what makes an outlier (``fleet`` and ``fleet-run``)."""
    p.add_argument(
        "--threshold",
        type=z_threshold,
        default=aggregate.DEFAULT_THRESHOLD,
        metavar="Z",
        help=f"a GPU with any |robust z| above Z is an outlier: exit status 1 (default {aggregate.DEFAULT_THRESHOLD})",
    )
    p.add_argument(
        "--min-deviation",
        type=percentage,
        default=aggregate.DEFAULT_MIN_DEVIATION_PCT,
        metavar="PCT",
        help="the practical threshold: a measured fact less than PCT percent from its model's median is never "
        f"an outlier, whatever its z (default {aggregate.DEFAULT_MIN_DEVIATION_PCT:g}; exact facts count any "
        "difference)",
    )


def cmd_fleet(args: argparse.Namespace) -> int:
    require_count(args.top, "--top")
    require_count(args.jobs, "--jobs")
    report = aggregate.aggregate_paths(args.paths, args.threshold, args.jobs, args.min_deviation)
    print(aggregate.render(report, args.format, args.top), end="")
    return report.exit_status


def gpu_count() -> int:
    """GPUs the CUDA driver reports (0 when none or no CuPy); only ``fleet-run`` asks, never a run it starts."""
    try:
        import cupy

        return int(cupy.cuda.runtime.getDeviceCount())
    except Exception:  # no CuPy, no driver: nothing to run on
        return 0


def local_gpus(requested: str | None, env: Mapping[str, str], count: Callable[[], int]) -> list[tuple[int, str]]:
    """``(gpu_index, CUDA_VISIBLE_DEVICES value)`` for each GPU to measure, each exactly once.

    ``requested`` (``--gpus 0,2`` or UUIDs) wins; else the inherited ``CUDA_VISIBLE_DEVICES``;
    else every GPU the driver counts. A numeric entry is its own index; a UUID takes its position.
    """
    entries = visible_entries(requested) if requested is not None else visible_entries(env.get("CUDA_VISIBLE_DEVICES"))
    if entries is None:
        entries = [str(i) for i in range(count())]
    if not entries:
        raise GpuprobeError("fleet-run: no GPU to measure (the driver reports none, or CUDA_VISIBLE_DEVICES is empty)")
    duplicated = sorted(e for e, n in Counter(entries).items() if n > 1)
    if duplicated:
        raise GpuprobeError(f"fleet-run: GPU {', '.join(duplicated)} listed twice; two runs never share a GPU")
    gpus = [(entry_index(e) if entry_index(e) is not None else pos, e) for pos, e in enumerate(entries)]
    indices = Counter(i for i, _ in gpus)
    if any(n > 1 for n in indices.values()):
        gpus = list(enumerate(entries))  # mixed numbers and UUIDs that collide: fall back to positions
    return gpus


def cmd_fleet_run(args: argparse.Namespace) -> int:
    out = Path(args.out)
    gpus = local_gpus(args.gpus, os.environ, gpu_count)
    try:
        pytest_args = shlex.split(args.pytest_args)
    except ValueError as exc:
        raise GpuprobeError(f"fleet-run: --pytest-args {args.pytest_args!r}: {exc}") from None
    runs = node_runs.pinned_runs(gpus, out, socket.gethostname(), args.tests, pytest_args, args.python)
    if not Path(args.tests).exists():
        raise GpuprobeError(f"fleet-run: no {args.tests} here (run from a gpuprobe checkout or give --tests)")
    stale = node_runs.existing_results(runs)
    if stale and not args.overwrite:
        raise GpuprobeError(f"fleet-run: {stale[0]} already exists; use a new OUT or --overwrite")
    for path in stale:
        path.unlink()  # a run that writes nothing must not leave the old numbers to be read as new
    make_dirs(out)  # an OUT that cannot be a folder is said before any GPU starts
    print(f"gpuprobe fleet-run: {len(runs)} GPU(s), one pytest each, logs in {out}/<host>-gpu<K>/pytest.log")
    outcomes = node_runs.supervise(runs, os.environ, args.timeout)
    for outcome in outcomes:
        print(outcome.text())
    failed = [o for o in outcomes if not o.ok]
    links_bad = bool(args.links) and _links(gpus, Path(args.links), args, pytest_args)
    if args.no_aggregate:
        return EXIT_FAILED if failed or links_bad else 0
    try:
        report = aggregate.aggregate_paths([out], args.threshold, min_deviation_pct=args.min_deviation)
    except GpuprobeError as exc:
        print(f"gpuprobe fleet-run: no fleet report: {exc}")
        return EXIT_FAILED
    print()
    print(aggregate.render(report, "text"), end="")
    return EXIT_FAILED if failed or links_bad or report.exit_status else 0


def _links(gpus: Sequence[tuple[int, str]], out: Path, args: argparse.Namespace, pytest_args: list[str]) -> bool:
    """The multi-GPU families over every listed GPU at once, then the links report: whether the run failed
    or a link is slow."""
    if len(gpus) < 2:
        print("gpuprobe fleet-run: --links needs two or more GPUs; one GPU has no link to measure")
        return False
    run = node_runs.links_run(gpus, out, socket.gethostname(), args.tests, pytest_args, args.python)
    print(f"gpuprobe fleet-run: links between {len(gpus)} GPUs, one pytest, log in {run.log}")
    outcome = node_runs.supervise([run], os.environ, args.timeout)[0]
    print(outcome.text())
    try:
        report = links.links_report([out])
    except GpuprobeError as exc:
        print(f"gpuprobe fleet-run: no links report: {exc}")
        return True
    print(links.render(report), end="")
    return not outcome.ok or bool(report.exit_status)


def cmd_fleet_links(args: argparse.Namespace) -> int:
    report = links.links_report(args.paths, args.floor)
    print(links.render(report, args.format), end="")
    return report.exit_status


def add_commands(subparsers: Any) -> None:
    """Register ``fleet``, ``fleet-run`` and ``fleet-links`` on the ``gpuprobe`` command's subparsers."""
    p = subparsers.add_parser("fleet", help="compare many GPUs' results: distributions per model, robust outliers")
    p.add_argument("paths", nargs="+", metavar="DIR_OR_FILE", help="results files, or directories to search for *.json")
    add_outlier_options(p)
    p.add_argument("--format", choices=aggregate.FORMATS, default="text")
    p.add_argument("--top", type=int, default=aggregate.WORST_SHOWN, metavar="N", help="worst GPUs shown (default 10)")
    p.add_argument("--jobs", type=int, default=None, metavar="N", help="processes reading files (default: CPUs)")
    p.set_defaults(func=cmd_fleet)

    p = subparsers.add_parser("fleet-run", help="measure every GPU of this node at once: one pytest per GPU")
    p.add_argument("out", metavar="OUT", help="results go to OUT/<hostname>-gpu<K>/results.json")
    p.add_argument(
        "--pytest-args",
        default="",
        metavar="ARGS",
        help="more arguments for every pytest, one string, e.g. --pytest-args='-x --require-gpu'",
    )
    p.add_argument(
        "--gpus",
        metavar="LIST",
        help="CUDA_VISIBLE_DEVICES entries to measure, one run each "
        "(default: the inherited CUDA_VISIBLE_DEVICES, else every GPU)",
    )
    p.add_argument("--tests", default="probes", help="what each pytest runs (default: probes)")
    p.add_argument("--python", default=sys.executable, help="interpreter for the pytest runs")
    p.add_argument("--timeout", type=positive_seconds, default=None, metavar="S",
                   help="kill a run still going after S seconds")  # fmt: skip
    p.add_argument("--overwrite", action="store_true", help="replace results already in OUT")
    p.add_argument("--no-aggregate", action="store_true", help="skip the fleet report over OUT afterwards")
    add_outlier_options(p)
    p.add_argument("--links", metavar="DIR",
                   help="then measure the links between the GPUs (p2p, collectives) in one process that sees them "
                   "all, into DIR/<hostname>, and report the slow ones")  # fmt: skip
    p.set_defaults(func=cmd_fleet_run)

    p = subparsers.add_parser("fleet-links", help="compare nodes' GPU-to-GPU links: the slow link of a fleet named")
    p.add_argument("paths", nargs="+", metavar="DIR_OR_FILE", help="p2p results files, one per node, or directories")
    p.add_argument(
        "--floor",
        type=floor_fraction,
        default=links.DEFAULT_FLOOR,
        metavar="F",
        help=f"a link under F of the same link's median across nodes is slow: exit 1 (default {links.DEFAULT_FLOOR})",
    )
    p.add_argument("--format", choices=aggregate.FORMATS, default="text")
    p.set_defaults(func=cmd_fleet_links)
