"""``gpuprobe list``, ``check`` and ``sass``: the probes, their contracts, and any kernel's SASS."""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuprobe.cli.common import EXIT_FAILED, print_json, say_ignored_toolkit_homes
from gpuprobe.core.arch import SUPPORTED_ARCHS, Arch, parse_arch, parse_arch_list
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.files import read_text

if TYPE_CHECKING:
    from gpuprobe.kernels.check import CheckResult
    from gpuprobe.kernels.registry import Probe
    from gpuprobe.kernels.sass import Listing

DOC_WIDTH = 100  # a probe's doc, wrapped
FACTS_WIDTH = 64  # the facts column, wrapped (wider where a fact id with its comma is longer)


def cmd_list(args: argparse.Namespace) -> int:
    from gpuprobe.kernels.registry import all_probes

    probes = select_probes(all_probes(), args.names)
    if args.json:
        print_json({"probes": [
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
    from gpuprobe.core.tables import text_table

    rows = [(p.name, arch_span(p.archs), ", ".join(p.facts) or "-") for p in probes]
    width = max([FACTS_WIDTH, *(len(fact) + 1 for p in probes for fact in p.facts)])  # never a fact id cut in two
    return "\n".join(text_table(("probe", "archs", "facts"), rows, widest=[None, None, width]))


def cmd_check(args: argparse.Namespace) -> int:
    from gpuprobe.kernels.check import STATUSES, check_all
    from gpuprobe.kernels.outcomes import require_tools
    from gpuprobe.kernels.registry import all_probes

    say_ignored_toolkit_homes()
    require_tools()

    def progress(line: str) -> None:
        print(f"gpuprobe check: {line}", file=sys.stderr, flush=True)

    results = check_all(all_probes(), parse_arch_list(args.arch), progress)
    bad = [r for r in results if r.status in ("violated", "error")]
    if args.json:
        print_json({"results": [r.to_json() for r in results]})
    else:  # what was checked, then what was not; written at once (thousands of lines)
        lines = [_check_line(r) for r in sorted(results, key=lambda r: r.status == "unsupported")]
        counts = {s: sum(r.status == s for r in results) for s in STATUSES}
        print("\n".join([*lines, ", ".join(f"{n} {s}" for s, n in counts.items())]))
    return EXIT_FAILED if bad else 0


def _check_line(r: CheckResult) -> str:
    """One probe's outcome on one arch, as ``gpuprobe check`` prints it (a violation's details indented below)."""
    if r.status == "ok":
        return f"ok          {r.arch:8} {r.probe}  ({r.resources.get('registers')} registers)"
    if r.status == "unsupported":
        return f"unsupported {r.arch:8} {r.probe}  {r.detail}"
    return f"{r.status.upper():11} {r.arch:8} {r.probe}\n" + "\n".join(f"    {line}" for line in r.detail.splitlines())


def _default_arch_for_ptx(path: Path) -> Arch:
    import re

    match = re.search(r"^\s*\.target\s+(\w+)", read_text(path), re.MULTILINE)
    if not match:
        raise GpuprobeError(f"{path}: no .target directive; give --arch")
    return parse_arch(match.group(1))


def _listing_for(path: Path, arch_text: str | None) -> Listing:
    from gpuprobe.kernels.ptxsource import combine
    from gpuprobe.kernels.sass import apply_compile_log, read_cubin
    from gpuprobe.kernels.toolchain import assemble_ptx, compile_cuda

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
        print_json({"arch": listing.arch, "kernels": [k.to_json() for k in kernels]})
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


def add_commands(subparsers: Any) -> None:
    """Register ``list``, ``check`` and ``sass`` on the ``gpuprobe`` command's subparsers."""
    p = subparsers.add_parser("list", help="every probe, its family, archs and facts")
    p.add_argument(
        "names", nargs="*", metavar="FAMILY",
        help="only these families or probes (a probe name, or its start: mma.f16), each with what it isolates",
    )  # fmt: skip
    p.add_argument("--json", action="store_true", help="as JSON, with each probe's kernel, source and doc")
    p.set_defaults(func=cmd_list)

    p = subparsers.add_parser("check", help="compile every probe for every arch and check its SASS contract")
    p.add_argument("--arch", help="comma-separated archs (default: all supported)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_check)

    p = subparsers.add_parser("sass", help="disassemble a .ptx, .cu or .cubin into kernels and instructions")
    p.add_argument("file")
    p.add_argument("--arch", help="target for .ptx/.cu (default: the .ptx's .target; sm_90a for .cu)")
    p.add_argument("--kernel", help="only this kernel")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_sass)
