"""The README reads as the tool behaves: every command it shows runs here, or is named in
:data:`RUN_ELSEWHERE` with the script or test that runs it.

The commands are found, not listed: every line of a shell code block (``sh``, or a block with no
language) and every inline code span that starts with a command (``gpuprobe``, ``pytest``,
``python3 -m ...``, ``.venv/bin/...``, ``scripts/...``, ``.ci/...``, ``pip``, any of them after
``VAR=value`` assignments), a chain split at ``&&``. Then:

* usage syntax (``[options]``, ``A|B`` choices, ``NAME...``; the synopsis under "## The command")
  is held to the real parser, ``gpuprobe.cli.build_parser``: every subcommand and option shown
  exists, every choice list is the parser's, and every subcommand and option the parser has is
  shown (the README is the manual);
* a concrete ``gpuprobe`` command runs in this process through ``gpuprobe.cli.main``, with its
  placeholders (``RESULTS.json``, ``DIR``, ``FAMILY``, ...) filled by :data:`PLACEHOLDERS`: exit 0
  and every file it says it wrote there, or, for a command that measures on a GPU, the one-line
  "no GPU" refusal with exit status 2;
* a concrete ``pytest`` command runs once per distinct argument list, all of them in one child
  process (``pytest.main`` per command): exit 0 and the line saying the measurements were skipped
  for want of a GPU;
* anything else (a venv, an install, a script that takes minutes) must be in :data:`RUN_ELSEWHERE`.

No command may print a traceback. On a machine with a GPU the commands that would measure are skipped
here (a run takes minutes); the device check runs them there.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from gpuprobe.cli import build_parser, main
from tests.test_cli import CUDA_SOURCE, refusal

REPO = Path(__file__).resolve().parents[1]
README = REPO / "README.md"

#: The README's commands a unit test cannot run, each with the file in this repository that runs it
#: (or holds what it needs), a text that file must contain, and why. A command the README gains that
#: runs neither here nor through this table fails test_every_command_runs_here_or_is_mapped.
RUN_ELSEWHERE: dict[str, tuple[str, str, str]] = {
    "python3 -m venv .venv": (".ci/run", "python3 -m venv .venv", "CI makes the venv on a clean checkout"),
    ".venv/bin/pip install -q -e '.[test]'": (
        ".ci/run", "pip install -q -e '.[test]'", "CI installs the test extra (a package index is needed)"),
    ".venv/bin/pytest -m \"not gpu\" -n auto": (
        ".ci/run", '.venv/bin/pytest -m "not gpu" -n auto', "the test command itself: this test is part of it"),
    ".venv/bin/pip install -q -e '.[gpu]'": (
        "pyproject.toml", "\ngpu = [", "the extra is declared; installing it needs a package index (and a GPU to use)"),
    "pip install 'gpuprobe[nccl]'": ("pyproject.toml", "\nnccl = [", "the extra is declared; it needs a package index"),
    ".ci/run": (".ci/run", "set -euo pipefail", "the CI entry point: whatever runs CI runs it"),
    "scripts/device-check.sh": (
        "scripts/rehearse-device-check.sh", "scripts/device-check.sh", "rehearsed against the simulated GPU"),
    "scripts/device-check.sh [OUT]": (
        "scripts/rehearse-device-check.sh", 'scripts/device-check.sh "$out/OUT"', "rehearsed with an OUT"),
    "scripts/rehearse-device-check.sh": (".ci/run", "\nscripts/rehearse-device-check.sh\n", "CI runs it"),
    "scripts/toolkit-matrix.sh": (".ci/run", "\nscripts/toolkit-matrix.sh\n", "CI runs it; it fetches old toolkits"),
    "scripts/wheel-check.sh": (".ci/run", "\nscripts/wheel-check.sh\n", "CI runs it; it builds and installs a wheel"),
    "scripts/render-check.sh": (".ci/run", "\nscripts/render-check.sh\n", "CI runs it; it needs Chromium"),
    "gpuprobe --version": (
        "tests/test_cli.py", "def test_version_is_the_one_results_record", "argparse exits the process after it"),
    "gpuprobe list | head": (
        "tests/test_cli.py", "def test_a_reader_that_closes_the_pipe_ends_the_command_quietly",
        "the reader closes the pipe before the first write, deterministically, in a child process"),
}  # fmt: skip

#: Commands run here in another form than shown, and why: the all-arch check is the test command's
#: own static part (``pytest probes/``) and scripts/toolkit-matrix.sh's; a benchmark run takes minutes.
RUN_AS: dict[str, tuple[list[str], str]] = {
    "gpuprobe check": (["check", "--arch", "sm_90a"], "one arch here; all of them in `pytest probes/`"),
    ".venv/bin/pytest benchmarks/ --benchmark-only": (
        ["benchmarks/", "--benchmark-only", "--collect-only"], "collected, not timed"),
    "gpuprobe demo": (["demo", "--families", "warp"], "one family here; the whole suite in test_session's clean_run"),
    "gpuprobe report gpuprobe-demo/results.json --format html": (
        ["report", "RESULTS.json", "--format", "html"], "a results file here; the demo's own in test_demo"),
}  # fmt: skip


def _results_copy(tmp: Path) -> str:
    """A results file of the real H200 run (an extract of reports/nvidia-h200/results.json), in ``tmp``
    so that what a command writes beside it lands there."""
    target = tmp / "results" / "results.json"
    if not target.exists():
        target.parent.mkdir(parents=True)
        shutil.copy(REPO / "tests" / "data" / "fuzz" / "h200_extract_results.json", target)
    return str(target)


def _cuda_file(tmp: Path) -> str:
    target = tmp / "kernel.cu"
    target.write_text(CUDA_SOURCE)
    return str(target)


def _cubin(tmp: Path) -> str:
    from gpuprobe.core.arch import parse_arch
    from gpuprobe.kernels.toolchain import compile_cuda

    return str(compile_cuda(CUDA_SOURCE, parse_arch("sm_90a"), "kernel.cu").cubin)


#: What stands for each placeholder a concrete command shows (made only when a command shows it).
PLACEHOLDERS: dict[str, Callable[[Path], str]] = {
    "RESULTS.json": _results_copy,
    "BASE.json": _results_copy,
    "NEW.json": _results_copy,
    "GOOD.json": _results_copy,
    "DIR": lambda tmp: str(tmp / "dir"),
    "OUT": lambda tmp: str(tmp / "out"),
    "FAMILY": lambda tmp: "warp",
    "MODEL": lambda tmp: "h200",
    "KEY": lambda tmp: "h200",
    "FILE.ptx": lambda tmp: str(REPO / "ptx" / "alu" / "alu.ptx"),
    "FILE.cu": _cuda_file,
    "FILE.cubin": _cubin,
}

#: ``gpuprobe`` subcommands that measure on the local GPU (``run --plan --model`` plans without one).
MEASURING = ("run", "fleet-run")


# ---------------------------------------------------------------- finding the commands --------------


@dataclass(frozen=True)
class Shown:
    """A command as the README shows it: its text (whitespace collapsed), where, and whether it is usage
    syntax rather than an example to run."""

    text: str
    line: int
    usage: bool

    def __str__(self) -> str:
        return f"README.md:{self.line}: {self.text}"


FENCE = re.compile(r"^```([\w-]*)[^\n]*\n(.*?)^```[ \t]*$", re.M | re.S)
SHELL_BLOCKS = ("", "sh", "bash", "shell", "console")
SPAN = re.compile(r"(`+)(.+?)\1", re.S)
PROGRAM = r"(?:gpuprobe|pytest|python3?|pip3?|\.venv/bin/\S+|scripts/\S+|\.ci/\S+)"
COMMAND = re.compile(rf"^(?:[A-Z_][A-Z0-9_]*=\S*\s+)*{PROGRAM}(?=\s|$)")
BARE_NAMES = {"gpuprobe", "pytest", "python", "python3", "pip", "pip3"}  # a program named, not run
DESCRIPTION = re.compile(r"\s{3,}")  # a synopsis line: the command, then its description after a gap


def is_usage(text: str) -> bool:
    """Usage syntax: optional parts in brackets, a repeatable ``NAME...``, or ``A|B`` choices (quoted words,
    such as ``'.[gpu]'``, are the shell's)."""
    text = re.sub(r"'[^']*'|\"[^\"]*\"", "", text)
    return "[" in text or "..." in text or re.search(r"\w\|\w", text) is not None


def _commands_in(text: str, line: int) -> list[Shown]:
    """Each command of a chain (split at ``&&``); nothing when none of it is a command, or the text is only a
    program's name."""
    parts = [part.strip() for part in " ".join(text.split()).split(" && ")]
    if not any(COMMAND.match(part) for part in parts) or parts[0] in BARE_NAMES:
        return []
    return [Shown(part, line, is_usage(part)) for part in parts]


def shown_commands(markdown: str) -> list[Shown]:
    """Every command the Markdown shows, in its shell code blocks and inline code spans."""
    found: list[Shown] = []
    for block in FENCE.finditer(markdown):
        if block.group(1) not in SHELL_BLOCKS:
            continue
        first = markdown.count("\n", 0, block.start(2)) + 1
        current: list[str] = []
        start = first
        for offset, raw in enumerate(block.group(2).splitlines()):
            text = DESCRIPTION.split(raw.strip(), maxsplit=1)[0] if raw.strip() else ""
            continues = bool(current) and (
                current[-1].endswith("\\") or (raw[:1].isspace() and text.startswith(("[", "-")))
            )
            if continues:
                current.append(text)
                continue
            if current:
                found += _commands_in(" ".join(part.rstrip("\\") for part in current), start)
            current, start = ([text], first + offset) if COMMAND.match(raw) else ([], start)
        if current:
            found += _commands_in(" ".join(part.rstrip("\\") for part in current), start)
    prose = FENCE.sub(lambda m: "\n" * m.group(0).count("\n"), markdown)  # the line numbers kept
    for span in SPAN.finditer(prose):
        found += _commands_in(span.group(2), prose.count("\n", 0, span.start()) + 1)
    return sorted(found, key=lambda shown: shown.line)


@dataclass(frozen=True)
class Invocation:
    """A concrete command taken apart: its environment assignments, the program (``gpuprobe``, ``pytest``,
    or the first word of anything else) and its arguments."""

    env: dict[str, str]
    program: str
    argv: list[str]


GPUPROBE_LAUNCHERS = (["gpuprobe"], [".venv/bin/gpuprobe"], ["python3", "-m", "gpuprobe"], ["python", "-m", "gpuprobe"])
PYTEST_LAUNCHERS = (["pytest"], [".venv/bin/pytest"], ["python3", "-m", "pytest"], ["python", "-m", "pytest"])
SHELL_OPERATORS = {"|", "||", "&", ";", ">", ">>", "<", "2>", "2>&1"}


def invocation(text: str) -> Invocation:
    words = shlex.split(text)
    env: dict[str, str] = {}
    while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    for program, launchers in (("gpuprobe", GPUPROBE_LAUNCHERS), ("pytest", PYTEST_LAUNCHERS)):
        for launcher in launchers:
            if words[: len(launcher)] == launcher:
                return Invocation(env, program, words[len(launcher) :])
    return Invocation(env, words[0], words[1:])


def is_shell(text: str) -> bool:
    """A pipeline, a redirection or a command substitution: more than one program's command."""
    words = shlex.split(text)
    return any(word in SHELL_OPERATORS for word in words) or "$(" in text


def subcommands() -> dict[str, object]:
    """The ``gpuprobe`` subcommands' parsers by name."""
    import argparse

    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return dict(sub.choices)


def names_a_subcommand(argv: list[str]) -> bool:
    """``gpuprobe SUB`` alone, where SUB needs arguments (``gpuprobe sass``): the subcommand named in prose."""
    if len(argv) != 1 or argv[0] not in subcommands():
        return False
    parser = subcommands()[argv[0]]
    return any(not a.option_strings and a.nargs not in ("?", "*") for a in parser._actions)


def kind(shown: Shown) -> str:
    """How the test holds a command: ``mapped``, ``usage`` (of gpuprobe), ``gpuprobe``, ``pytest``,
    ``named`` (a subcommand named in prose), or ``unmapped``."""
    if shown.text in RUN_ELSEWHERE:
        return "mapped"
    if is_shell(shown.text):
        return "unmapped"
    call = invocation(shown.text)
    if call.program == "gpuprobe":
        if shown.usage:
            return "usage"
        return "named" if names_a_subcommand(call.argv) else "gpuprobe"
    if call.program == "pytest" and not shown.usage:
        return "pytest"
    return "unmapped"


SHOWN = shown_commands(README.read_text())


def distinct(program: str) -> list[Shown]:
    """The README's concrete commands of ``program``, the first showing of each."""
    seen: dict[str, Shown] = {}
    for shown in SHOWN:
        if kind(shown) == program and shown.text not in seen:
            seen[shown.text] = shown
    return list(seen.values())


# ---------------------------------------------------------------- filling in and running ---------------

PLACEHOLDER = re.compile(r"(?<![A-Za-z0-9])[A-Z][A-Z0-9_]+(?:\.[a-z]+)?(?![A-Za-z0-9])")


def fill(words: list[str], tmp: Path) -> list[str]:
    """``words`` with every placeholder replaced by its stand-in; a placeholder without one fails, saying
    where to add it."""
    keys = sorted(PLACEHOLDERS, key=len, reverse=True)  # FILE.ptx before FILE
    pattern = re.compile("|".join(rf"(?<![A-Za-z0-9]){re.escape(k)}(?![A-Za-z0-9])" for k in keys))
    left = [name for word in words for name in PLACEHOLDER.findall(pattern.sub("", word))]
    assert not left, f"no stand-in for the placeholder(s) {left}: add one to PLACEHOLDERS in {__file__}"
    return [pattern.sub(lambda m: PLACEHOLDERS[m.group(0)](tmp), word) for word in words]


def in_checkout(words: list[str]) -> list[str]:
    """Paths of the checkout made absolute, so the command can run from a scratch folder."""
    return [str(REPO / w) if not w.startswith("-") and "/" in w and (REPO / w).exists() else w for w in words]


def toolkit_stand_in(tmp: Path) -> str:
    """A toolkit folder for ``GPUPROBE_TOOLKIT=/usr/local/cuda-13.0``, laid out as one: ``bin/`` holding
    links to the ptxas and nvdisasm found here, ``lib/`` to NVRTC's folder and ``include/`` to the CUDA
    headers' (each resolved, so the builds cached for them are the ones read)."""
    from gpuprobe.kernels import nvrtc
    from gpuprobe.kernels.toolchain import locate_tool

    folder = tmp / "toolkit"
    (folder / "bin").mkdir(parents=True, exist_ok=True)
    links = {f"bin/{tool}": locate_tool(tool).path for tool in ("ptxas", "nvdisasm")}
    links["lib"] = nvrtc.locate_nvrtc().path.parent
    links["include"] = next(d for d in nvrtc.include_dirs() if (d / nvrtc.COOPERATIVE_GROUPS).is_file())
    for name, target in links.items():
        if not (folder / name).exists():
            (folder / name).symlink_to(target)
    return str(folder)


def gpu_here() -> bool:
    from gpuprobe.runner.device import gpu_unavailable_reason

    return gpu_unavailable_reason() is None


def measures(argv: list[str]) -> bool:
    """Whether the command measures on the local GPU (``run --plan`` reads the local GPU too, unless a model
    is given)."""
    args = build_parser().parse_args(argv)
    return args.command in MEASURING and not (args.command == "run" and args.plan and args.model)


@pytest.fixture
def fresh_toolchain():
    """The tools located again before and after a command that chooses them (``GPUPROBE_TOOLKIT=...``)."""
    from gpuprobe.kernels import toolchain

    def clear() -> None:
        toolchain.locate_tool.cache_clear()
        toolchain._version_line.cache_clear()

    clear()
    yield
    clear()


def _no_traceback(*texts: str) -> None:
    for text in texts:
        assert "Traceback" not in text, text


@pytest.mark.parametrize("shown", distinct("gpuprobe"), ids=lambda shown: shown.text)
def test_a_gpuprobe_command_does_what_the_readme_says(
    shown: Shown,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    fresh_toolchain: None,
) -> None:
    """In this process, from a scratch folder: exit 0 and every file it says it wrote is there; a command that
    measures is, without a GPU, one line saying so and exit status 2."""
    call = invocation(shown.text)
    argv = RUN_AS[shown.text][0] if shown.text in RUN_AS else call.argv
    argv = in_checkout(fill(argv, tmp_path))
    for name, value in call.env.items():
        if name == "GPUPROBE_TOOLKIT":
            value = os.pathsep.join(toolkit_stand_in(tmp_path) for _ in value.split(os.pathsep))
        monkeypatch.setenv(name, value)
    monkeypatch.chdir(tmp_path)
    if measures(argv) and gpu_here():
        pytest.skip(f"{shown}: measures on the GPU here (minutes): the device check runs it")
    code = main(argv)
    out, err = capsys.readouterr()
    _no_traceback(out, err)
    if measures(argv):
        assert "no GPU" in refusal(code, out, err), (str(shown), err)
        return
    assert code == 0, (str(shown), code, out[-2000:], err)
    progress = ("gpuprobe: [", "gpuprobe check: ")  # a run's, a cold check's
    assert all(line.startswith(("gpuprobe: warning: ", *progress)) for line in err.splitlines() if line), err
    for line in out.splitlines():
        if line.startswith("wrote "):
            assert Path(line.removeprefix("wrote ").split(" and ")[0]).exists(), (str(shown), line)


# The pytest commands: each distinct argument list once, all in one child process (a fresh interpreter,
# so the suite's own session does not leak in; one start for all of them).
PYTEST_DRIVER = """
import json, sys, pytest
for argv in json.loads(sys.argv[1]):
    print("@@@ pytest", json.dumps(argv), flush=True)
    code = pytest.main([*argv, "-p", "no:cacheprovider"])
    print("@@@ exit", int(code), flush=True)
"""
NO_GPU_SUMMARY = re.compile(r"^gpuprobe: .*\b\d+ measurements skipped, no GPU: ", re.M)
WHOLE_SUITE = ("probes", "probes/")


def pytest_argvs(tmp: Path) -> dict[tuple[str, ...], list[str]]:
    """Each distinct concrete pytest command's arguments (placeholders filled) -> the README commands showing
    it. A whole-``probes/`` command with options beyond the plain one adds ``-m gpu``: its static part is the
    plain one's, checked once."""
    argvs: dict[tuple[str, ...], list[str]] = {}
    for shown in SHOWN:
        if kind(shown) != "pytest":
            continue
        argv = RUN_AS[shown.text][0] if shown.text in RUN_AS else invocation(shown.text).argv
        argv = fill(argv, tmp)
        if any(a in WHOLE_SUITE for a in argv) and len(argv) > 1 and "-m" not in argv:
            argv = [*argv, "-m", "gpu"]
        argvs.setdefault(tuple(argv), []).append(str(shown))
    return argvs


def test_the_pytest_commands_do_what_the_readme_says(tmp_path: Path) -> None:
    """Without a GPU: exit 0, the line that says the measurements were skipped and why, and, given
    ``--gpuprobe-out DIR``, that nothing was written there (and nothing is). The README's sample of that line
    (its ``text`` block) is one of the lines printed."""
    if gpu_here():
        pytest.skip("a GPU is here: these commands would measure every family (the device check runs them)")
    argvs = pytest_argvs(tmp_path)
    assert ("probes/",) in argvs, "the README no longer shows `pytest probes/`"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COV_"))}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, "-c", PYTEST_DRIVER, json.dumps([list(a) for a in argvs])],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600, check=False,
    )  # fmt: skip
    _no_traceback(proc.stdout)
    runs = proc.stdout.split("@@@ pytest ")[1:]
    assert len(runs) == len(argvs) and proc.returncode == 0, proc.stdout[-3000:]
    outputs = dict(zip(argvs, runs, strict=True))
    problems = []
    for argv, output in outputs.items():
        where = "; ".join(argvs[argv])
        code = int(output.rsplit("@@@ exit ", 1)[1])
        if code != 0:
            problems.append(f"{where}: exit status {code}:\n{output[-1500:]}")
        elif any(a.startswith("probes") for a in argv) and not NO_GPU_SUMMARY.search(output):
            problems.append(f"{where}: no line says the measurements were skipped for want of a GPU")
        if "--gpuprobe-out" in argv:
            out = argv[argv.index("--gpuprobe-out") + 1]
            if f"nothing was measured (no GPU), so nothing was written to {out}" not in output or Path(out).exists():
                problems.append(f"{where}: does not say that nothing was written to {out}, or wrote it")
    assert not problems, "\n".join(problems)
    from gpuprobe.runner.device import driver_missing_reason

    if not driver_missing_reason():
        return  # the sample shows a machine without a driver; this one has one (and no GPU): its reason differs
    printed = proc.stdout.splitlines()
    for sample in text_samples(README.read_text()):
        shape = sample_shape(sample)
        assert any(shape.fullmatch(line) for line in printed), f"the README's sample is printed by no command: {sample}"


def sample_shape(sample: str) -> re.Pattern[str]:
    """A README sample of a printed line as a pattern: any number where it shows one, anything where ``...``."""
    return re.compile(".*".join(re.sub(r"\d+", r"\\d+", re.escape(part)) for part in sample.split("...")))


def test_the_readme_sample_of_the_no_gpu_line_has_the_shape_the_plugin_prints() -> None:
    """Its words, in order, as the summary prints them today (the numbers and the driver's words aside): checked
    here without running ``pytest probes/``, so a change to the line and not to the README fails at once."""
    from types import SimpleNamespace

    from gpuprobe.pytest_plugin import RunSummary
    from gpuprobe.runner.device import driver_missing_reason, gpu_unavailable_reason

    reason = gpu_unavailable_reason()
    if reason is None or not driver_missing_reason():
        pytest.skip("the sample shows a machine without a driver; this one has one: its reason differs")
    (sample,) = [line for line in text_samples(README.read_text()) if "measurements skipped, no GPU" in line]
    summary = RunSummary({"memory.latency"}, 7, no_gpu=5, lacking=3, no_gpu_reason=reason)
    (printed,) = summary.lines(SimpleNamespace(stash={}, getoption=lambda name: None))
    assert sample_shape(sample).fullmatch(printed), (sample, printed)


def text_samples(markdown: str) -> list[str]:
    """The lines of the README's ``text`` blocks that show what ``gpuprobe`` prints."""
    return [
        line
        for block in FENCE.finditer(markdown)
        if block.group(1) == "text"
        for line in block.group(2).splitlines()
        if line.startswith("gpuprobe: ")
    ]


# ---------------------------------------------------------------- what is not run here -----------------


def test_every_command_runs_here_or_is_mapped() -> None:
    unmapped = [str(shown) for shown in SHOWN if kind(shown) == "unmapped"]
    assert not unmapped, (
        "README commands this test can neither run nor check: "
        + "; ".join(unmapped)
        + f". Add each to RUN_ELSEWHERE in {__file__}: the file that runs it (a script .ci/run runs, a test), "
        "a text that file must contain, and why it cannot run in a unit test."
    )


def test_every_mapped_command_names_a_file_that_runs_it() -> None:
    shown = {s.text for s in SHOWN}
    stale = [text for text in RUN_ELSEWHERE if text not in shown]
    assert not stale, f"RUN_ELSEWHERE maps commands the README no longer shows: {stale}"
    stale = [text for text in RUN_AS if text not in shown]
    assert not stale, f"RUN_AS holds commands the README no longer shows: {stale}"
    for text, (target, contains, why) in RUN_ELSEWHERE.items():
        path = REPO / target
        assert path.is_file(), f"{text!r} is mapped to {target}, which does not exist"
        assert contains in path.read_text(), f"{text!r} is mapped to {target}, which does not hold {contains!r}"
        assert why


def test_the_commands_are_found(tmp_path: Path) -> None:
    """The finder on a sample: shell blocks and their continuation lines, inline spans across a line break,
    chains split; output blocks, module names and a bare program name are no commands."""
    sample = (
        "Run `gpuprobe run\n--plan --model h200`, or `pytest` alone, not `gpuprobe.cli`.\n\n"
        "```sh\nGPUPROBE_TOOLKIT=/x gpuprobe check --arch sm_90a\npython3 -m venv .v && .v/bin/pytest probes/\n```\n"
        "```\ngpuprobe run [-o DIR] [--smoke]     measure\n"
        "             [--cooldown S]\n                  more description\n```\n"
        "```text\ngpuprobe: 3 probes compiled\n```\n"
    )
    found = [(s.text, s.line, s.usage) for s in shown_commands(sample)]
    assert found == [
        ("gpuprobe run --plan --model h200", 1, False),
        ("GPUPROBE_TOOLKIT=/x gpuprobe check --arch sm_90a", 5, False),
        ("python3 -m venv .v", 6, False),
        (".v/bin/pytest probes/", 6, False),
        ("gpuprobe run [-o DIR] [--smoke] [--cooldown S]", 9, True),
    ]
    assert invocation("PYTHONPATH=. python3 -m pytest probes/") == Invocation(
        {"PYTHONPATH": "."}, "pytest", ["probes/"]
    )
    assert kind(Shown("gpuprobe list | head -3", 1, False)) == "unmapped"
    assert kind(Shown("gpuprobe sass", 1, False)) == "named"
    for name, stand_in in PLACEHOLDERS.items():  # each stand-in is made, a file where the name is a file's
        assert Path(stand_in(tmp_path)).is_file() if "." in name else stand_in(tmp_path)


# ---------------------------------------------------------------- the synopsis is the parser -------------

OPTION = re.compile(r"(?<![\w-])(--?[a-zA-Z][\w-]*)")
CHOICES = re.compile(r"(--?[\w-]+)\s+(\w+(?:\|\w+)+)")


def test_the_synopsis_shows_every_subcommand_and_option_and_only_those() -> None:
    """Every usage line names a subcommand the parser has, options it accepts and its choice lists; every
    subcommand and option of the parser is shown (named subcommands in prose count for nothing here)."""
    parsers = subcommands()
    shown_options: dict[str, set[str]] = {name: set() for name in parsers}
    problems = []
    usage = [s for s in SHOWN if kind(s) == "usage"]
    assert len(usage) >= len(parsers), [str(s) for s in usage]
    for shown in usage:
        sub, *rest = invocation(shown.text.replace("[", " [ ").replace("]", " ] ")).argv
        if sub not in parsers:
            problems.append(f"{shown}: no subcommand {sub!r}")
            continue
        actions = {o: a for a in parsers[sub]._actions for o in a.option_strings}
        text = " ".join(rest)
        for option in OPTION.findall(text):
            if option not in actions:
                problems.append(f"{shown}: gpuprobe {sub} has no option {option}")
            shown_options[sub].update(actions[option].option_strings if option in actions else ())
        for option, choices in CHOICES.findall(text):
            known = getattr(actions.get(option), "choices", None)
            if known is not None and set(choices.split("|")) != set(known):
                problems.append(f"{shown}: {option} takes {'|'.join(known)}, not {choices}")
    for sub, parser in parsers.items():
        for action in parser._actions:
            options = set(action.option_strings)
            if options and "-h" not in options and not options & shown_options[sub]:
                problems.append(f"gpuprobe {sub} {'/'.join(action.option_strings)} is not in the README's synopsis")
    assert not problems, "\n".join(problems)


def test_every_pytest_option_is_in_the_readme() -> None:
    """Each option the pytest plugin gives pytest is named in the README."""
    from gpuprobe import pytest_plugin

    class Recorder:
        def __init__(self) -> None:
            self.options: list[str] = []

        def getgroup(self, *args: object) -> Recorder:
            return self

        def addoption(self, *names: str, **kwargs: object) -> None:
            self.options += names

    recorder = Recorder()
    pytest_plugin.pytest_addoption(recorder)
    text = README.read_text()
    assert recorder.options
    missing = [option for option in recorder.options if not re.search(rf"(?<![\w-]){option}(?![\w-])", text)]
    assert not missing, f"pytest options the README does not name: {missing}"


# ---------------------------------------------------------------- what it says of verdicts and plans ------


def test_the_verdict_table_explains_every_verdict_and_only_those() -> None:
    from gpuprobe.core.results import VERDICTS

    section = README.read_text().split("### What a verdict means", 1)[1].split("\n#", 1)[0]
    rows = [line for line in section.splitlines() if line.startswith("| `")]
    explained = [v for row in rows for v in re.findall(r"`(\w+)`", row.split("|")[1])]
    assert sorted(explained) == sorted(VERDICTS)


def test_the_readme_says_which_verdicts_pytest_warns_of() -> None:
    from gpuprobe.pytest_plugin import NOTED_VERDICTS

    text = " ".join(README.read_text().split())
    said = re.search(r"`pytest probes/` turns .*? into failed tests[^;]*; (.*?) into warnings", text)
    assert said, "the README no longer says which verdicts pytest warns of"
    assert set(re.findall(r"`(\w+)`", said.group(1))) == set(NOTED_VERDICTS)


def test_the_h200_plan_is_what_the_readme_says() -> None:
    """The seconds the README gives for a baseline run on an H200 are the plan's, within 5 %."""
    import dataclasses

    from gpuprobe.judge.expectations import load_all
    from gpuprobe.measure.plan import model_device, run_plan

    said = re.search(
        r"on an H200, (\d+) s of measuring by the plan \(`gpuprobe run --plan --model h200`[^)]*?(\d+) s on one GPU"
        r"[^)]*\), about (\d+) s in all",
        " ".join(README.read_text().split()),
    )
    assert said, "the README no longer gives the H200's plan"
    device = model_device(load_all()["h200"])
    node, alone = run_plan(device), run_plan(dataclasses.replace(device, visible_gpus=1))
    for text, planned in zip(said.groups(), (node.measuring_s, alone.measuring_s, node.total_s), strict=True):
        assert abs(int(text) - planned) <= 0.05 * planned, (said.group(0), planned)
