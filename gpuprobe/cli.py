"""The ``gpuprobe`` command: list, check, sass, run, report, witness, index, compare, fleet, fleet-run, fleet-links,
expectations.

Every user error is one line on stderr and exit status 2; a contract violation or a failed
measurement is exit status 1; a traceback is a bug.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from gpuprobe.core.arch import SUPPORTED_ARCHS, Arch, parse_arch, parse_arch_list
from gpuprobe.core.errors import GpuprobeError, require_count, require_index
from gpuprobe.core.files import os_reason, read_text, require_writable_folder
from gpuprobe.core.text import inert_terminal
from gpuprobe.fleet.aggregate import add_command as add_fleet_command
from gpuprobe.fleet.compare import add_command as add_compare_command
from gpuprobe.fleet.links import add_command as add_fleet_links_command
from gpuprobe.fleet.runs import add_command as add_fleet_run_command
from gpuprobe.judge.expectations import add_command as add_expectations_command

if TYPE_CHECKING:
    from gpuprobe.build.registry import Probe

EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_PIPE_CLOSED = 128 + 13  # as a process killed by SIGPIPE reports it
FACTSHEET_FORMATS = ("md", "html")  # = gpuprobe.output.report.FORMATS; here so building the parser needs no matplotlib


def _print_json(data: object) -> None:
    print(json.dumps(data, indent=1))


# ---------------------------------------------------------------- list ---------


def cmd_list(args: argparse.Namespace) -> int:
    from gpuprobe.build.registry import all_probes

    probes = select_probes(all_probes(), args.names)
    if args.json:
        _print_json({"probes": [
            {"name": p.name, "family": p.family, "kernel": p.kernel, "source": p.source_label,
             "archs": [a.name for a in p.archs], "facts": list(p.facts), "doc": p.doc}
            for p in probes
        ]})  # fmt: skip
        return 0
    print(probes_table(probes))
    families = list(dict.fromkeys(p.family for p in probes))
    counted = f"{len(probes)} probe(s) of {len(families)} famil{'ies' if len(families) > 1 else 'y'}"
    print("\n" + textwrap.fill(f"{counted}: {', '.join(families)}", DOC_WIDTH, subsequent_indent="    "))
    if not args.names:
        print("gpuprobe list FAMILY (or a probe name, or its start) adds what each probe isolates")
    for p in probes if args.names else ():
        print(f"\n{p.name}\n{textwrap.fill(p.doc, DOC_WIDTH, initial_indent='    ', subsequent_indent='    ')}")
    return 0


DOC_WIDTH = 100  # a probe's doc, wrapped
FACTS_WIDTH = 64  # the facts column, wrapped (wider where a fact id with its comma is longer)


def select_probes(probes: Sequence[Probe], names: Sequence[str]) -> list[Probe]:
    """The probes of the families named, and the probes named or under a name (``mma.f16`` takes
    ``mma.f16.*``), in catalog order; every probe when nothing is named. A name that selects nothing is
    a GpuprobeError listing the families."""
    if not names:
        return list(probes)
    chosen: set[str] = set()
    for name in names:
        hits = {p.name for p in probes if name in (p.family, p.name) or p.name.startswith(name + ".")}
        if not hits:
            families = ", ".join(dict.fromkeys(p.family for p in probes))
            raise GpuprobeError(f"no family or probe matches {name!r}; families: {families}")
        chosen |= hits
    return [p for p in probes if p.name in chosen]


def arch_span(archs: Sequence[Arch]) -> str:
    """The archs a probe targets, short: ``all``, ``sm_80 and newer``, ``sm_75–sm_89``, else each one."""
    supported = [a.name for a in SUPPORTED_ARCHS]
    names = [a.name for a in archs]
    first = supported.index(names[0]) if names and names[0] in supported else -1
    if first < 0 or names != supported[first : first + len(names)] or len(names) < 3:
        return " ".join(names)
    if len(names) == len(supported):
        return "all"
    return f"{names[0]} and newer" if first + len(names) == len(supported) else f"{names[0]}–{names[-1]}"


def probes_table(probes: Sequence[Probe]) -> str:
    """One row per probe: its name (which starts with its family's), the archs it targets and the facts it
    measures."""
    from tabulate import tabulate

    rows = [(p.name, arch_span(p.archs), ", ".join(p.facts) or "-") for p in probes]
    width = max([FACTS_WIDTH, *(len(fact) + 1 for p in probes for fact in p.facts)])  # never a fact id cut in two
    return tabulate(rows, headers=("probe", "archs", "facts"), tablefmt="simple", maxcolwidths=[None, None, width])


# ---------------------------------------------------------------- check --------


def cmd_check(args: argparse.Namespace) -> int:
    from gpuprobe.build.check import STATUSES, check_all
    from gpuprobe.build.outcomes import require_tools
    from gpuprobe.build.registry import all_probes

    say_ignored_toolkit_homes()
    require_tools()

    def progress(line: str) -> None:
        print(f"gpuprobe check: {line}", file=sys.stderr, flush=True)

    results = check_all(all_probes(), parse_arch_list(args.arch), progress)
    bad = [r for r in results if r.status in ("violated", "error")]
    if args.json:
        _print_json({"results": [r.to_json() for r in results]})
    else:
        for r in sorted(results, key=lambda r: r.status == "unsupported"):  # what was checked, then what was not
            if r.status == "ok":
                print(f"ok          {r.arch:8} {r.probe}  ({r.resources.get('registers')} registers)")
            elif r.status == "unsupported":
                print(f"unsupported {r.arch:8} {r.probe}  {r.detail}")
            else:
                print(
                    f"{r.status.upper():11} {r.arch:8} {r.probe}\n"
                    + "\n".join(f"    {line}" for line in r.detail.splitlines())
                )
        counts = {s: sum(r.status == s for r in results) for s in STATUSES}
        print(", ".join(f"{n} {s}" for s, n in counts.items()))
    return EXIT_FAILED if bad else 0


# ---------------------------------------------------------------- sass ---------


def _default_arch_for_ptx(path: Path) -> Arch:
    import re

    match = re.search(r"^\s*\.target\s+(\w+)", read_text(path), re.MULTILINE)
    if not match:
        raise GpuprobeError(f"{path}: no .target directive; give --arch")
    return parse_arch(match.group(1))


def _listing_for(path: Path, arch_text: str | None):
    from gpuprobe.build.ptxsource import combine
    from gpuprobe.build.sass import apply_compile_log, read_cubin
    from gpuprobe.build.toolchain import assemble_ptx, compile_cuda

    if not path.is_file():
        raise GpuprobeError(f"{path}: {'not a file' if path.exists() else 'no such file'}")
    suffix = path.suffix.lower()
    if suffix == ".cubin":
        return read_cubin(path)
    if suffix == ".ptx":
        arch = parse_arch(arch_text) if arch_text else _default_arch_for_ptx(path)
        module = combine([path.resolve()], arch, Path.cwd().resolve())
        compiled = assemble_ptx(module.text, arch, str(path), module.origins)
    elif suffix in (".cu", ".cuh"):
        arch = parse_arch(arch_text or "sm_90a")
        compiled = compile_cuda(read_text(path), arch, str(path), (path.resolve().parent,))  # as the build compiles
    else:
        raise GpuprobeError(f"{path}: expected a .ptx, .cu or .cubin file")
    listing = read_cubin(compiled.cubin)
    apply_compile_log(listing, compiled.log)
    return listing


def cmd_sass(args: argparse.Namespace) -> int:
    say_ignored_toolkit_homes()
    listing = _listing_for(Path(args.file), args.arch)
    if not listing.kernels:
        raise GpuprobeError(f"no kernels in {args.file}: nothing to disassemble (a kernel is a .entry in PTX, "
                            "a __global__ function in CUDA)")  # fmt: skip
    if args.kernel is not None and not args.kernel.strip():
        raise GpuprobeError("--kernel names no kernel: give one, or leave --kernel out for all of them")
    kernels = [listing.kernel(args.kernel)] if args.kernel else list(listing.kernels.values())
    if args.json:
        _print_json({"arch": listing.arch, "kernels": [k.to_json() for k in kernels]})
        return 0
    for kernel in kernels:
        stack = "unknown" if kernel.local_bytes is None else kernel.local_bytes
        known = kernel.spill_store_bytes is not None
        spills = f"{kernel.spill_store_bytes}/{kernel.spill_load_bytes}" if known else "unknown"
        print(
            f"// {kernel.name} ({listing.arch}): {kernel.registers} registers, {kernel.shared_bytes} bytes shared, "
            f"{stack} bytes stack, spills (store/load) {spills} bytes"
        )
        loops = kernel.loops
        for ins in kernel.instructions:
            mark = "|" * sum(loop.contains(ins.offset) for loop in loops)
            print(f"/*{ins.offset:04x}*/ {mark:3} {ins.text()} ;")
    return 0


# ---------------------------------------------------------------- run ----------


def cmd_plan(args: argparse.Namespace) -> int:
    """``gpuprobe run --plan``: the time plan, for the local GPU or (``--model``) a model's [device] record."""
    from gpuprobe.core.results import load
    from gpuprobe.judge.expectations import load_all, resolve_model
    from gpuprobe.measure.plan import FULL, SMOKE, calibration, model_device, render_plan, run_plan
    from gpuprobe.runner.gpu import device_identity, gpu_unavailable_reason

    if args.model:
        device = model_device(resolve_model(args.model, load_all()))
    else:
        reason = gpu_unavailable_reason()
        if reason:
            raise GpuprobeError(f"{reason}; give --model KEY to plan for a GPU model (gpuprobe expectations)")
        device = device_identity(args.device)
    factor = calibration(load(Path(args.calibrate)), args.calibrate) if args.calibrate else 1.0
    if factor is None:
        print(f"gpuprobe: warning: {args.calibrate} records no family measured to the end: the plan is not calibrated",
              file=sys.stderr)  # fmt: skip
    plan = run_plan(device, SMOKE if args.smoke else FULL, calibration=factor or 1.0)
    print(render_plan(plan, args.deadline), end="")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from gpuprobe.api import local_device
    from gpuprobe.core.errors import require_seconds
    from gpuprobe.core.files import write_atomic
    from gpuprobe.families import catalog
    from gpuprobe.fleet.repeatability import render_markdown, repeatability
    from gpuprobe.judge.expectations import match_model
    from gpuprobe.measure.isolation import user_policy
    from gpuprobe.measure.plan import FULL, SMOKE, unproven_probes
    from gpuprobe.measure.progress import StreamSink
    from gpuprobe.measure.session import FIRST_CONTACT_NAME, default_out_dir, run_suite
    from gpuprobe.output.first_contact import family_rows, verdict_line
    from gpuprobe.runner.gpu import LauncherSpec

    require_count(args.repeat, "--repeat")
    require_index(args.device, "--device")
    require_seconds(args.deadline, "--deadline")
    require_seconds(args.lock_wait, "--lock-wait", zero_ok=True)
    if args.unproven_first is not None and not (args.smoke and Path(args.unproven_first).is_dir()):
        raise GpuprobeError(f"--unproven-first {args.unproven_first}: needs --smoke and a folder of real runs' results")
    policy = user_policy(args.probe_time_limit, args.cooldown)
    if args.plan:
        return cmd_plan(args)
    if args.model is not None:
        match_model("", args.model)  # an unknown key is refused before any GPU time is spent
    if args.output:
        require_writable_folder(Path(args.output))
    say_ignored_toolkit_homes()
    device = local_device(args.device)
    if args.model is None and match_model(device.name) is None:
        print(f"{device.name!r} has no expectations: discovery mode (facts reported, invariants asserted)")
    out_dir = Path(args.output) if args.output else default_out_dir(device, args.smoke)
    launcher = LauncherSpec(device_index=args.device)
    stage = FULL
    if args.smoke:
        first = unproven_probes(Path(args.unproven_first)) if args.unproven_first else frozenset()
        stage = dataclasses.replace(SMOKE, first=first)
        if first:
            print(f"measuring first the {len(first)} probes no run under {args.unproven_first} proved")
    runs = []
    for index in range(args.repeat):
        target = out_dir if args.repeat == 1 else out_dir / f"run-{index + 1}"
        runs.append(run_suite(device, launcher, target, args.model, policy=policy, lock_wait_s=args.lock_wait,
                              inject_fault=args.inject_fault, stage=stage, deadline_s=args.deadline,
                              progress=StreamSink(sys.stderr)))  # fmt: skip
        print(f"wrote {target}/results.json and its {FIRST_CONTACT_NAME if args.smoke else 'fact sheet'}")
    results = runs[-1]
    if args.smoke:
        print(verdict_line(family_rows(results, catalog.probes_by_family(smoke=results.stage == "smoke"))))
    else:
        for fact in results.facts:
            print(f"{fact.verdict.upper():9} {fact.detail}")
    if len(runs) > 1:
        table = render_markdown(repeatability(runs))
        write_atomic(out_dir / "repeatability.md", table)
        print(table)
    failed = [f for run in runs for f in run.facts if f.verdict == "fail"]
    not_ok = [n for run in runs for n, p in run.probes.items() if p.status != "ok"]
    print(f"{len(failed)} failed facts, {len(not_ok)} probes not ok")
    return EXIT_FAILED if failed or not_ok else 0


# ---------------------------------------------------------------- report -------


def cmd_report(args: argparse.Namespace) -> int:
    from gpuprobe.families.catalog import sections
    from gpuprobe.fleet.reading import read_judged
    from gpuprobe.output.factsheet import write_report

    path = Path(args.results)
    results, _ = read_judged(path)  # a changed verdict says so in its fact's detail
    out_dir = Path(args.output) if args.output else default_sheet_dir(path)
    for written in write_report(results, out_dir, args.format, sections=sections()):
        print(f"wrote {written}")
    return 0


def cmd_witness(args: argparse.Namespace) -> int:
    """``gpuprobe witness``: Nsight Compute's counts of the bytes some probes moved, into the results."""
    from gpuprobe.core.errors import require_seconds
    from gpuprobe.measure.witness.command import witness

    require_seconds(args.timeout, "--timeout")
    require_index(args.device, "--device")
    families = [f for f in args.families.split(",") if f] if args.families is not None else None
    out_dir = Path(args.output) if args.output else None
    return witness(Path(args.results), out_dir, args.ncu, families, args.timeout, args.device)


def default_sheet_dir(results: Path) -> Path:
    """Where ``report`` writes without ``-o``: beside ``results.json``; for a file named otherwise (the device
    check's ``smoke-results.json`` beside a full run's sheet), a folder of its own named after it."""
    return results.parent if results.name == "results.json" else results.parent / results.stem


def cmd_index(args: argparse.Namespace) -> int:
    from gpuprobe.fleet.reports_index import write_index

    print(f"wrote {write_index(Path(args.reports_dir))}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from gpuprobe.measure.progress import StreamSink
    from gpuprobe.output.report import SIMULATED_TEXT
    from gpuprobe.simulated.demo import DEMO_DIR, demo_families, run_demo
    from gpuprobe.simulated.gpu import FakeGpu, suite_options

    families = demo_families(args.families)
    if families is not None:
        require_measurable(families, FakeGpu(**suite_options()).device().arch)
    out_dir = Path(args.output) if args.output else DEMO_DIR
    require_writable_folder(out_dir)
    results = run_demo(out_dir, families, progress=StreamSink(sys.stderr))
    print(f"wrote {out_dir}/results.json and its fact sheet {out_dir}/factsheet.md ({len(results.facts)} facts)")
    print(SIMULATED_TEXT.split(". ", 1)[0] + ": gpuprobe report --format html shows it as a page")
    return 0


def require_measurable(families: Sequence[str], arch: str) -> None:
    """Families named for a demo of which none measures anything on the simulated GPU's ``arch`` are a
    one-line GpuprobeError saying why (no probe of theirs runs on it, or they are opt-in)."""
    from gpuprobe.families.catalog import OPT_IN
    from gpuprobe.measure.plan import left_out_line, runs_on
    from gpuprobe.measure.session import chosen_families

    chosen = chosen_families(families, inject_fault=False)
    if any(runs_on(family, arch) for family in chosen.values()):
        return
    opt_in = [name for name in families if name in OPT_IN]
    reasons = [left_out_line(list(chosen), arch)] if chosen else []
    reasons += [f"{', '.join(opt_in)}: measured only by gpuprobe run --inject-fault"] if opt_in else []
    raise GpuprobeError(f"--families: nothing to measure on the simulated GPU ({'; '.join(reasons)})")


def version_line() -> str:
    """gpuprobe's version as a run records it (``build["gpuprobe"]`` in its results), with the commit where known."""
    from gpuprobe.core.results import code_record

    code = code_record()
    changes = ", with uncommitted changes" if code["dirty"] else ""
    return f"gpuprobe {code['version']}" + (f" (commit {code['commit'][:12]}{changes})" if code["commit"] else "")


class PrintVersion(argparse.Action):
    """``--version``: :func:`version_line`, worked out only when asked (it may ask git)."""

    def __init__(self, option_strings: Sequence[str], dest: str, **kwargs: object) -> None:
        super().__init__(option_strings, dest, nargs=0, default=argparse.SUPPRESS,
                         help="print gpuprobe's version (and commit, in a checkout) and exit")  # fmt: skip

    def __call__(self, parser: argparse.ArgumentParser, *args: object) -> None:
        print(version_line())
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="gpuprobe", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action=PrintVersion)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("list", help="every probe, its family, archs and facts")
    p.add_argument(
        "names", nargs="*", metavar="FAMILY",
        help="only these families or probes (a probe name, or its start: mma.f16), each with what it isolates",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="as JSON, with each probe's kernel, source and doc")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("check", help="compile every probe for every arch and check its SASS contract")
    p.add_argument("--arch", help="comma-separated archs (default: all supported)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_check)

    p = sub.add_parser("sass", help="disassemble a .ptx, .cu or .cubin into kernels and instructions")
    p.add_argument("file")
    p.add_argument("--arch", help="target for .ptx/.cu (default: the .ptx's .target; sm_90a for .cu)")
    p.add_argument("--kernel", help="only this kernel")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_sass)

    p = sub.add_parser("run", help="measure on the local GPU and write reports/<gpu-slug>/")
    p.add_argument("-o", "--output", help="directory for results.json and the fact sheet")
    p.add_argument("--model", help="judge as this GPU model (an expectations key) instead of the detected one")
    p.add_argument("--device", type=int, default=0, help="CUDA device index")
    p.add_argument("--repeat", type=int, default=1, help="run the suite N times and report run-to-run differences")
    p.add_argument("--lock-wait", type=float, default=60.0, help="seconds to wait for another run on this GPU")
    p.add_argument("--inject-fault", action="store_true", help="also run a probe that faults on purpose (self-test)")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="first contact: each family's cheapest probes once, written up in first-contact.md",
    )
    p.add_argument(
        "--unproven-first",
        metavar="REPORTS",
        help="with --smoke: measure first, beside the cheapest probes, every probe no real run under REPORTS proved",
    )
    p.add_argument(
        "--deadline",
        type=float,
        metavar="S",
        help="stop measuring S seconds from now; what is left is not_run (deadline), the results partial",
    )
    p.add_argument("--probe-time-limit", type=float, metavar="S", help="a probe running longer is killed (default 120)")
    p.add_argument("--cooldown", type=float, metavar="S", help="wait before re-measuring a throttled probe (default 3)")
    p.add_argument(
        "--plan",
        action="store_true",
        help="print the time plan per family and measure nothing (with --model: no GPU needed)",
    )
    p.add_argument(
        "--calibrate",
        metavar="RESULTS.json",
        help="with --plan: correct the plan by the actual/planned seconds of an earlier run",
    )
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("demo", help="the whole suite on the simulated GPU: what a run writes, stamped SIMULATED")
    p.add_argument("-o", "--output", help="directory for the results and fact sheet (default: gpuprobe-demo)")
    p.add_argument("--families", metavar="A,B", help="only these families (default: all; see gpuprobe list)")
    p.set_defaults(func=cmd_demo)

    p = sub.add_parser("report", help="render the fact sheet from a results file")
    p.add_argument("results")
    p.add_argument("-o", "--output", help="directory for the fact sheet (default: beside the results)")
    p.add_argument(
        "--format",
        choices=FACTSHEET_FORMATS,
        default="md",
        help="md: factsheet.md and its PNG plots beside it (default); html: one self-contained factsheet.html",
    )
    p.set_defaults(func=cmd_report)

    p = sub.add_parser(
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

    p = sub.add_parser("index", help="regenerate REPORTS_DIR/README.md from every results.json in it")
    p.add_argument("reports_dir", nargs="?", default="reports", help="default: reports")
    p.set_defaults(func=cmd_index)

    add_compare_command(sub)
    add_fleet_command(sub)
    add_fleet_run_command(sub)
    add_fleet_links_command(sub)
    add_expectations_command(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    inert_terminal()  # what files and tools hold reaches the terminal as text, never as escape sequences
    args = build_parser().parse_args(argv)
    try:
        return args.func(args)
    except GpuprobeError as exc:
        print(f"gpuprobe: error: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:
        print(interrupted_line(exc), file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _reader_gone()
    except MemoryError:  # a limit such as ``ulimit -v``: what was written before stays written
        print("gpuprobe: error: out of memory (a memory limit, such as ulimit -v, too low for this command)",
              file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    except OSError as exc:  # a path the checks before could not look at: too long a name, a folder shut to us
        where = f"{exc.filename}: " if exc.filename else ""
        print(f"gpuprobe: error: {one_line(where + os_reason(exc))}", file=sys.stderr)
        return EXIT_USAGE


def one_line(message: str) -> str:
    """An error message on one line, whatever it quotes (a tool's output, a file name, a key of a user's file):
    each line break, as ``str.splitlines`` counts them, becomes a space, and a file name's bytes that are not
    UTF-8 are shown as U+FFFD, as a tool's are."""
    shown = message.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    return " ".join(part.strip() for part in shown.splitlines() if part.strip())


def interrupted_line(exc: KeyboardInterrupt) -> str:
    """What an interrupted command says: for a run, where it left its partial results."""
    session = sys.modules.get("gpuprobe.measure.session")  # not imported: no run was interrupted (and a
    if session is None or not isinstance(exc, session.RunInterrupted):  # Ctrl-C'd check stays quick)
        return "gpuprobe: interrupted"
    return f"gpuprobe: {exc} (gpuprobe report {exc.paths[0]} renders them again)"


def say_ignored_toolkit_homes() -> None:
    """A warning line on stderr for each ``CUDA_HOME`` / ``CUDA_PATH`` that names no CUDA toolkit."""
    from gpuprobe.build.toolchain import ignored_toolkit_homes

    for line in ignored_toolkit_homes():
        print(f"gpuprobe: warning: {line}", file=sys.stderr)


def _reader_gone() -> int:
    """The reader of stdout closed it (``gpuprobe list | head``): stop quietly, as a tool killed by SIGPIPE
    does, with nothing more written to the closed pipe (even when Python flushes stdout on exit)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_PIPE_CLOSED


if __name__ == "__main__":
    sys.exit(main())
