"""``gpuprobe report``, ``witness`` and ``index``: what is made of results files already written."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from gpuprobe.core.errors import require_index, require_seconds

FACTSHEET_FORMATS = ("md", "html")  # = output.factsheet.FORMATS; here so building the parser needs no matplotlib


def cmd_report(args: argparse.Namespace) -> int:
    from gpuprobe.families.catalog import sections
    from gpuprobe.fleet.reading import read_judged
    from gpuprobe.kernels.registry import with_declarations
    from gpuprobe.output.factsheet import write_report

    path = Path(args.results)
    results, _ = read_judged(path)  # a changed verdict says so in its fact's detail
    results = with_declarations(results)
    out_dir = Path(args.output) if args.output else default_sheet_dir(path)
    for written in write_report(results, out_dir, args.format, sections=sections()):
        print(f"wrote {written}")
    return 0


def default_sheet_dir(results: Path) -> Path:
    """Where ``report`` writes without ``-o``: beside ``results.json``; for a file named otherwise (the device
    check's ``smoke-results.json`` beside a full run's sheet), a folder of its own named after it."""
    return results.parent if results.name == "results.json" else results.parent / results.stem


def cmd_witness(args: argparse.Namespace) -> int:
    """``gpuprobe witness``: Nsight Compute's counts of the bytes some probes moved, into the results."""
    from gpuprobe.measure.witness.command import witness

    require_seconds(args.timeout, "--timeout")
    require_index(args.device, "--device")
    families = [f for f in args.families.split(",") if f] if args.families is not None else None
    out_dir = Path(args.output) if args.output else None
    return witness(Path(args.results), out_dir, args.ncu, families, args.timeout, args.device)


def cmd_index(args: argparse.Namespace) -> int:
    from gpuprobe.fleet.reports_index import write_index

    print(f"wrote {write_index(Path(args.reports_dir))}")
    return 0


def add_commands(subparsers: Any) -> None:
    """Register ``report``, ``witness`` and ``index`` on the ``gpuprobe`` command's subparsers."""
    p = subparsers.add_parser("report", help="render the fact sheet from a results file")
    p.add_argument("results")
    p.add_argument("-o", "--output", help="directory for the fact sheet (default: beside the results)")
    p.add_argument(
        "--format",
        choices=FACTSHEET_FORMATS,
        default="md",
        help="md: factsheet.md and its PNG plots beside it (default); html: one self-contained factsheet.html",
    )
    p.set_defaults(func=cmd_report)

    p = subparsers.add_parser(
        "witness",
        help="count with Nsight Compute (ncu) the bytes some probes moved, beside what they claim, into the results",
    )
    p.add_argument("results", metavar="RESULTS.json", help="the full run's results: the facts are written into it")
    p.add_argument("-o", "--output", metavar="DIR", help="for ncu's CSV and the witness run (default: witness/ beside)")
    p.add_argument("--ncu", metavar="PATH", help="the ncu to run (default: PATH, $CUDA_HOME/bin, /usr/local/cuda/bin)")
    p.add_argument("--families", metavar="A,B", help="only these families' witnessed probes (bandwidth, async_copy)")
    p.add_argument("--timeout", type=float, default=600.0, metavar="S", help="ncu and its run are killed after S s")
    p.add_argument("--device", type=int, default=0, help="CUDA device index")
    p.set_defaults(func=cmd_witness)

    p = subparsers.add_parser("index", help="regenerate REPORTS_DIR/README.md from every results.json in it")
    p.add_argument("reports_dir", nargs="?", default="reports", help="default: reports")
    p.set_defaults(func=cmd_index)
