"""The ``gpuprobe`` command: probes listed and checked, runs, fact sheets, comparisons, fleets, expectations.

One module per group of commands: ``probes`` (list, check, sass), ``run`` (run, demo), ``report`` (report,
witness, index), ``compare``, ``fleet`` (fleet, fleet-run, fleet-links), ``expectations``.

Every user error is one line on stderr and exit status 2; a contract violation or a failed
measurement is exit status 1; a traceback is a bug.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys
from collections.abc import Sequence

from gpuprobe.cli.common import EXIT_USAGE
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.files import os_reason
from gpuprobe.core.text import inert_terminal

EXIT_INTERRUPTED = 130  # as a shell reports Ctrl-C
EXIT_PIPE_CLOSED = 128 + 13  # as a process killed by SIGPIPE reports it
#: Each module of commands (``gpuprobe.cli.<group>``) and the commands it adds, in the order --help lists them.
#: A command imports its own group alone: ``gpuprobe check`` pays for none of what ``fleet`` or ``run`` import
#: (every family's analysis, NumPy), which is most of a warm check's time. A test holds this table to what each
#: group's ``add_commands`` adds.
GROUPS: dict[str, tuple[str, ...]] = {
    "probes": ("list", "check", "sass"),
    "run": ("run", "demo"),
    "report": ("report", "witness", "index"),
    "compare": ("compare",),
    "fleet": ("fleet", "fleet-run", "fleet-links"),
    "expectations": ("expectations",),
}


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The command line's parser. Given the arguments, only the group of the command they name is imported and
    built in full; the other commands are there by name, so a mistyped one is still told every choice. With no
    arguments (or none naming a command: ``--help``), every group."""
    parser = argparse.ArgumentParser(prog="gpuprobe", description=__doc__.splitlines()[0])
    parser.add_argument("--version", action=PrintVersion)
    subparsers = parser.add_subparsers(dest="command", required=True)
    named = _command_named(argv)
    for group, commands in GROUPS.items():
        if named is None or named in commands:
            importlib.import_module(f"gpuprobe.cli.{group}").add_commands(subparsers)
        else:
            for command in commands:
                subparsers.add_parser(command)
    return parser


def _command_named(argv: Sequence[str] | None) -> str | None:
    """The command ``argv`` names (its first argument that is not an option: ``--version`` is the only global
    one, and it takes no value); None where there are no arguments or the first is no command."""
    first = next((arg for arg in argv if not arg.startswith("-")), None) if argv is not None else None
    return first if any(first in commands for commands in GROUPS.values()) else None


def main(argv: Sequence[str] | None = None) -> int:
    inert_terminal()  # what files and tools hold reaches the terminal as text, never as escape sequences
    arguments = sys.argv[1:] if argv is None else argv
    args = build_parser(arguments).parse_args(arguments)
    try:
        return args.func(args)
    except GpuprobeError as exc:
        print(f"gpuprobe: error: {one_line(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt as exc:
        print(interrupted_line(exc), file=sys.stderr)
        return EXIT_INTERRUPTED
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


def _reader_gone() -> int:
    """The reader of stdout closed it (``gpuprobe list | head``): stop quietly, as a tool killed by SIGPIPE
    does, with nothing more written to the closed pipe (even when Python flushes stdout on exit)."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return EXIT_PIPE_CLOSED


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
