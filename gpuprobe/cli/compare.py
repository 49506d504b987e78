"""``gpuprobe compare BASE.json NEW.json``: every fact of NEW labelled against BASE (gpuprobe.fleet.compare)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from gpuprobe.cli.common import EXIT_FAILED
from gpuprobe.core.errors import GpuprobeError


def cmd_compare(args: argparse.Namespace) -> int:
    """Print the report; 1 if a fact got WORSE (or, with --strict, UNKNOWN), else 0.

    With ``--strict``, runs of different GPUs or clocks (``gpu_differences``) are refused: a user error."""
    from gpuprobe.fleet.compare import compare, gpu_differences, render
    from gpuprobe.fleet.reading import changes_text, read_judged

    (base, base_changes), (new, new_changes) = read_judged(Path(args.base)), read_judged(Path(args.new))
    differences = gpu_differences(base, new, args.base, args.new)
    if args.strict and differences:
        raise GpuprobeError(
            f"compare --strict: different GPUs or clocks ({'; '.join(differences)}); compare two runs of one GPU model "
            f"at the same clocks, or leave out --strict"
        )
    comparison = compare(base, new, args.threshold, base_name=args.base, new_name=args.new)
    comparison.warnings += [f"{name}: {changes_text(changes)}" for name, changes in
                            ((args.base, base_changes), (args.new, new_changes)) if changes]  # fmt: skip
    print(render(comparison, args.format, args.all), end="")
    return EXIT_FAILED if comparison.failures(args.strict) else 0


def add_commands(subparsers: Any) -> None:
    """Register ``compare`` on the ``gpuprobe`` command's subparsers."""
    p = subparsers.add_parser(
        "compare",
        help="label every fact of NEW against BASE: SAME, BETTER, WORSE or UNKNOWN, relative to their noise",
        description="Compare two results files fact by fact, relative to the noise measured in both runs. "
        "Runs of different GPU models, SM counts or clocks draw a warning line first. "
        "Exit status 1 when a fact got WORSE, 2 for unreadable input (or, with --strict, different GPUs).",
    )
    p.add_argument("base", metavar="BASE.json", help="the baseline results file")
    p.add_argument("new", metavar="NEW.json", help="the results file to judge")
    p.add_argument("--format", choices=("text", "md"), default="text", help="plain text (default) or GitHub Markdown")
    p.add_argument(
        "--threshold", type=float, default=0.0, metavar="PCT",
        help="changes smaller than PCT percent of the base value are SAME even beyond the noise (default 0)",
    )  # fmt: skip
    p.add_argument(
        "--strict", action="store_true",
        help="also exit 1 when a fact of BASE is CHANGED, DIFFERENT HOST or UNKNOWN (missing now, undecidable); "
        "refuse (exit 2) runs of different GPU models, SM counts or clocks",
    )  # fmt: skip
    p.add_argument("--all", action="store_true", help="also list the SAME facts (by default only the others)")
    p.set_defaults(func=cmd_compare)
