"""The ``gpuprobe`` command on a seeded corpus of damaged inputs, one for every kind of file it reads.

Cubins, PTX (and the file it ``//@include``s) and CUDA source for ``sass``; results files for ``report``,
``compare``, ``fleet``, ``index`` and ``run --plan --calibrate``; the expectation TOML files (the command
reads only the ones it ships, so a damaged copy stands in for them); and the folders ``fleet`` and ``index``
search (empty, mixed, unreadable, symbolic-link loops, files that are not results). The damage is
tests/helpers/fuzz_corpus.py's, each case rebuilt from its seed; the results file damaged is an extract of the
H200's first run (reports/nvidia-h200/results.json: five facts, three probes).

Every case ends one of two ways: the command handles it (exit 0 or 1, no traceback), or refuses it as a
user error (exit 2, nothing on stdout, exactly one line on stderr). Where the input is certainly broken,
refusing is the only right answer. An exception out of ``main`` fails the test with its traceback.
Results files go through the one validator every reader shares (``gpuprobe.core.results.load``): NaN,
infinities, numbers as strings, integers no float holds and nesting JSON cannot follow are refused.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tomllib
from collections.abc import Callable
from pathlib import Path

import pytest

import gpuprobe.judge.expectations
from gpuprobe.core.arch import parse_arch
from gpuprobe.judge.expectations import FAMILIES_DIRECTORY, family_files
from gpuprobe.kernels.ptxsource import combine
from gpuprobe.kernels.toolchain import assemble_ptx
from tests.helpers.fuzz_corpus import (
    BENT_DIRECTIVES,
    BYTE_DAMAGE,
    CUDA,
    GARBAGE_NUMBERS,
    JSON_DAMAGE,
    PTX,
    PTX_INCLUDE,
    PTX_INCLUDE_NAME,
    SOURCE_DAMAGE,
    TOML_DAMAGE,
    UNREADABLE,
    bent,
    damaged_bytes,
    damaged_json,
    damaged_source,
    damaged_toml,
)
from tests.test_cli import refusal, run, write

RESULTS = Path(__file__).parent / "data" / "fuzz" / "h200_extract_results.json"
EXPECTATIONS = Path(gpuprobe.judge.expectations.__file__).resolve().parents[1] / "expectations"
PTX_ERROR = re.compile(r"^(?P<file>\S+):(?P<line>\d+): ptxas error: .+ \[sm_90a\]( \(and \d+ more\))?$")

Outcome = tuple[int, str, str]


def refused(outcome: Outcome) -> str:
    """The message a command refused its input with, as a user error: exit 2, one line on stderr, no output."""
    return refusal(*outcome)


def handled_or_refused(outcome: Outcome) -> str | None:
    """The refusal's message, or None where the command handled the input (exit 0 or 1, no traceback)."""
    code, _, err = outcome
    if code == 2:
        return refused(outcome)
    assert code in (0, 1), outcome
    assert "Traceback" not in err
    return None


def rng(*parts: object) -> random.Random:
    """The random numbers of one case, from its name alone."""
    return random.Random("-".join(map(str, parts)))


def is_utf8(data: bytes) -> bool:
    try:
        data.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


# ---------------------------------------------------------------- sass: cubins -------------------


@pytest.fixture(scope="module")
def cubin(tmp_path_factory: pytest.TempPathFactory) -> bytes:
    """The corpus PTX, built as ``gpuprobe sass`` builds it: the cubin every damaged one starts from."""
    folder = tmp_path_factory.mktemp("cubin")
    write(folder / PTX_INCLUDE_NAME, PTX_INCLUDE)
    arch = parse_arch("sm_90a")
    module = combine([write(folder / "fuzz.ptx", PTX)], arch)
    return assemble_ptx(module.text, arch, "fuzz.ptx", module.origins).cubin.read_bytes()


#: Six seeds of each damage, and two (found among seeds 0-39) whose cubins nvdisasm 13.5 reads and lists with bytes
#: that are not UTF-8 (issue 15's traceback); test_toolchain.py holds that with a fake nvdisasm, whatever the version.
CUBIN_CASES = [*((kind, seed) for kind in BYTE_DAMAGE for seed in range(6)), ("flip", 25), ("run", 16)]


@pytest.mark.parametrize(("kind", "seed"), CUBIN_CASES)
def test_sass_on_a_damaged_cubin(capsys: pytest.CaptureFixture[str], tmp_path: Path, cubin: bytes, kind: str,
                                 seed: int) -> None:  # fmt: skip
    data = damaged_bytes(cubin, kind, rng("cubin", kind, seed))
    message = handled_or_refused(run(capsys, "sass", str(write(tmp_path / "fuzz.cubin", data))))
    if not data.startswith(b"\x7fELF"):
        assert message is not None and message.endswith(("not a cubin (no ELF header)", "not a cubin (empty)"))
    elif message is not None:  # what gpuprobe judged of the file, or nvdisasm's own words after what it was doing
        assert re.search(r"fuzz\.cubin: (not a cubin \(.+\)|nvdisasm cannot read it: \S)", message), message


# ---------------------------------------------------------------- sass: PTX ----------------------


def sass_on_ptx(capsys: pytest.CaptureFixture[str], folder: Path, ptx: str | bytes, include: str | bytes) -> None:
    """``gpuprobe sass`` on ``ptx`` (beside the file it includes): a listing, or one line; where ptxas refused
    it, its message at the file and line it points at."""
    files = {"fuzz.ptx": write(folder / "fuzz.ptx", ptx), PTX_INCLUDE_NAME: write(folder / PTX_INCLUDE_NAME, include)}
    message = handled_or_refused(run(capsys, "sass", str(files["fuzz.ptx"])))
    if not all(is_utf8(path.read_bytes()) for path in files.values()):
        assert message is not None
    if message is not None and "ptxas" in message:
        where = PTX_ERROR.match(message)
        assert where, message
        path = Path(where["file"])
        assert path.name in files and 1 <= int(where["line"]) <= len(path.read_bytes().splitlines()), message


@pytest.mark.parametrize("target", ["ptx", "include"])
@pytest.mark.parametrize("kind", BYTE_DAMAGE)
def test_sass_on_ptx_with_damaged_bytes(capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str,
                                        target: str) -> None:  # fmt: skip
    original = {"ptx": PTX, "include": PTX_INCLUDE}[target].encode()
    damaged = damaged_bytes(original, kind, rng("ptx", kind, target))
    ptx, include = (damaged, PTX_INCLUDE) if target == "ptx" else (PTX, damaged)
    sass_on_ptx(capsys, tmp_path, ptx, include)


@pytest.mark.parametrize("seed", range(3))
@pytest.mark.parametrize("kind", SOURCE_DAMAGE)
def test_sass_on_damaged_ptx_text(capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str, seed: int) -> None:
    sass_on_ptx(capsys, tmp_path, damaged_source(PTX, kind, rng("ptx", kind, seed)), PTX_INCLUDE)


@pytest.mark.parametrize("case", range(len(BENT_DIRECTIVES)))
def test_sass_on_ptx_with_a_bent_directive(capsys: pytest.CaptureFixture[str], tmp_path: Path, case: int) -> None:
    sass_on_ptx(capsys, tmp_path, bent(PTX, case), PTX_INCLUDE)


# ---------------------------------------------------------------- sass: CUDA ---------------------


@pytest.mark.parametrize(("kind", "seed"), [*((k, 0) for k in BYTE_DAMAGE), *((k, s) for k in SOURCE_DAMAGE
                                                                               for s in range(2))])  # fmt: skip
def test_sass_on_damaged_cuda_source(capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str,
                                     seed: int) -> None:  # fmt: skip
    if kind in BYTE_DAMAGE:
        source: str | bytes = damaged_bytes(CUDA.encode(), kind, rng("cu", kind, seed))
    else:
        source = damaged_source(CUDA, kind, rng("cu", kind, seed))
    path = write(tmp_path / "fuzz.cu", source)
    message = handled_or_refused(run(capsys, "sass", str(path)))
    if not is_utf8(path.read_bytes()):
        assert message is not None and message.endswith("cannot read (not UTF-8 text)")
    elif message is not None:  # NVRTC's message, at the file (and the line) it points at
        assert re.match(rf"{re.escape(str(path))}(\(\d+\))?: .*error", message), message


# ---------------------------------------------------------------- file names -----------------------

ODD_NAME = os.fsdecode(b"odd\xff\xfe")  # a file name whose bytes are not UTF-8


@pytest.mark.parametrize("broken", [False, True], ids=["good", "broken"])
@pytest.mark.parametrize("suffix", [".ptx", ".cu", ".cubin"])
def test_sass_on_a_file_whose_name_is_not_utf8(capsys: pytest.CaptureFixture[str], tmp_path: Path, cubin: bytes,
                                               suffix: str, broken: bool) -> None:  # fmt: skip
    content = {".ptx": PTX.encode(), ".cu": CUDA.encode(), ".cubin": cubin}[suffix]
    write(tmp_path / PTX_INCLUDE_NAME, PTX_INCLUDE)
    path = write(tmp_path / (ODD_NAME + suffix), content[: len(content) // 2] if broken else content)
    message = handled_or_refused(run(capsys, "sass", str(path)))
    assert (message is not None) == broken
    if broken:  # the file named with each byte that is not UTF-8 shown as U+FFFD
        assert message.startswith(str(path).replace(ODD_NAME, "odd\ufffd\ufffd")), message


# ---------------------------------------------------------------- results files ------------------

def results_case(kind: str, seed: int) -> bytes:
    original = RESULTS.read_bytes()
    if kind in BYTE_DAMAGE:
        return damaged_bytes(original, kind, rng("results", kind, seed))
    return damaged_json(json.loads(original), kind, rng("results", kind, seed), under=("facts", "device"))


def certainly_broken(kind: str, data: bytes) -> bool:
    """Whether no reader may accept the file: it is no JSON, or its damage is garbage wherever it landed."""
    if kind in GARBAGE_NUMBERS or kind in UNREADABLE:
        return True
    try:
        json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        return True
    return False


RESULTS_CASES = [
    pytest.param(kind, seed, id=f"{kind}-{seed}") for kind in (*BYTE_DAMAGE, *JSON_DAMAGE) for seed in range(3)
]


@pytest.mark.parametrize(("kind", "seed"), RESULTS_CASES)
def test_the_results_commands_on_a_damaged_file(capsys: pytest.CaptureFixture[str], tmp_path: Path, kind: str,
                                                seed: int) -> None:  # fmt: skip
    data = results_case(kind, seed)
    damaged = str(write(tmp_path / "run" / "results.json", data))
    good = str(shutil.copy(RESULTS, tmp_path / "good.json"))
    expect = refused if certainly_broken(kind, data) else handled_or_refused
    for argv in (
        ["report", damaged, "-o", str(tmp_path / "sheet")],
        ["compare", good, damaged],
        ["compare", damaged, good],
        ["fleet", damaged],
        ["run", "--plan", "--model", "h200", "--calibrate", damaged],
    ):
        expect(run(capsys, *argv))
    code, _, err = run(capsys, "index", str(tmp_path))  # an index names the files it cannot read
    assert (code, err) == (0, ""), err
    if certainly_broken(kind, data):
        assert "## Unreadable results" in (tmp_path / "README.md").read_text()


# ---------------------------------------------------------------- folders fleet and index search ---


def results_copy(path: Path, uuid: str) -> Path:
    """The extract, as the results of the GPU ``uuid``."""
    document = json.loads(RESULTS.read_text())
    document["device"]["uuid"] = uuid
    return write(path, json.dumps(document))


def junk(root: Path) -> None:
    write(root / "notes" / "results.txt", "not results")
    write(root / "text" / "results.json", "not JSON {")
    write(root / "binary" / "results.json", bytes(range(256)))
    write(root / "other" / "results.json", '{"name": "another tool", "version": 3}')
    write(root / "empty" / "results.json", "")


def mixed(root: Path) -> None:
    junk(root)
    results_copy(root / "gpu0" / "results.json", "gpu-0")
    results_copy(root / "gpu1" / "results.json", "gpu-1")


def unreadable(root: Path) -> None:
    """Files and a folder without permissions (which a superuser, running the tests as root, reads anyway)."""
    locked = results_copy(root / "locked" / "results.json", "gpu-locked")
    results_copy(root / "shut" / "inner" / "results.json", "gpu-shut")
    results_copy(root / "gpu0" / "results.json", "gpu-0")
    locked.chmod(0)
    (root / "shut").chmod(0)


def link_loops(root: Path) -> None:
    results_copy(root / "gpu0" / "results.json", "gpu-0")
    (root / "gpu0" / "up").symlink_to(root, target_is_directory=True)  # a folder that holds itself
    (root / "self").mkdir()
    (root / "self" / "results.json").symlink_to(root / "self" / "results.json")
    (root / "dangling").mkdir()
    (root / "dangling" / "results.json").symlink_to(root / "nowhere.json")
    (root / "a.json").symlink_to(root / "b.json")
    (root / "b.json").symlink_to(root / "a.json")


def odd_files(root: Path) -> None:
    """A folder named like a results file, a pipe named like one (reading it would wait forever), deep folders."""
    results_copy(root / "gpu0" / "results.json", "gpu-0")
    (root / "folder" / "results.json").mkdir(parents=True)
    (root / "pipe").mkdir()
    os.mkfifo(root / "pipe" / "results.json")
    results_copy(root.joinpath(*["deep"] * 40, "results.json"), "gpu-deep")


def odd_names(root: Path) -> None:
    """Names whose bytes are not UTF-8: a run's folder, a file that is not results."""
    results_copy(root / ODD_NAME / "results.json", "gpu-odd")
    write(root / "junk" / f"{ODD_NAME}.json", "not JSON")


def empty(root: Path) -> None:
    """Nothing at all."""


FOLDERS: dict[str, tuple[Callable[[Path], None], bool]] = {  # layout, whether it holds any readable results
    "empty": (empty, False),
    "junk": (junk, False),
    "mixed": (mixed, True),
    "unreadable": (unreadable, True),
    "link-loops": (link_loops, True),
    "odd-files": (odd_files, True),
    "odd-names": (odd_names, True),
}


@pytest.mark.parametrize("layout", FOLDERS)
def test_fleet_and_index_on_an_odd_folder(capfd: pytest.CaptureFixture[str], tmp_path: Path, layout: str) -> None:
    """(capfd, not capsys: the fleet report prints file names as their bytes, which capsys cannot read back.)"""
    capsys = capfd
    make, readable = FOLDERS[layout]
    root = tmp_path / "runs"
    root.mkdir()
    make(root)
    try:
        fleet = run(capsys, "fleet", str(root))
        if readable:
            assert handled_or_refused(fleet) is None
            assert "gpuprobe fleet: " in fleet[1]
        else:
            assert "fleet: no readable gpuprobe results" in refused(fleet)
        assert run(capsys, "index", str(root))[0::2] == (0, "")
    finally:
        if (root / "shut").exists():  # its permission back, so that the folder can be removed
            (root / "shut").chmod(0o755)


def test_fleet_on_a_path_that_is_a_link_loop(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "loop").symlink_to(tmp_path / "loop")
    assert "loop: no such file or directory" in refused(run(capsys, "fleet", str(tmp_path / "loop")))


# ---------------------------------------------------------------- paths themselves ----------------

PATH_COMMANDS = {
    "sass": ["sass"], "report": ["report"], "compare": ["compare", str(RESULTS)], "fleet": ["fleet"],
    "index": ["index"], "calibrate": ["run", "--plan", "--model", "h200", "--calibrate"],
}  # fmt: skip


@pytest.mark.parametrize("command", PATH_COMMANDS)
def test_a_path_no_file_can_have_is_one_line(capsys: pytest.CaptureFixture[str], command: str) -> None:
    """A name longer than any file system allows: the file system's refusal, on one line, for every command."""
    assert "File name too long" in refused(run(capsys, *PATH_COMMANDS[command], "x" * 5000))


# ---------------------------------------------------------------- expectation files ---------------

TOML_TARGETS = ("h200.toml", "bandwidth/expectations.toml")  # a model file, and a family's file


def certainly_bad_toml(kind: str, data: bytes) -> bool:
    """Whether no loader may accept the file: its damage is garbage wherever it landed, or it is no TOML."""
    if kind in TOML_DAMAGE and kind not in ("wrong-type", "missing-key"):
        return True
    try:
        tomllib.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, tomllib.TOMLDecodeError, RecursionError):
        return True
    return False


@pytest.mark.parametrize("seed", range(2))
@pytest.mark.parametrize("kind", (*BYTE_DAMAGE, *TOML_DAMAGE))
@pytest.mark.parametrize("target", TOML_TARGETS)
def test_the_commands_that_read_expectations_on_a_damaged_file(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, target: str, kind: str,
    seed: int,
) -> None:  # fmt: skip
    shipped = shutil.copytree(EXPECTATIONS, tmp_path / "expectations")
    for path in family_files(FAMILIES_DIRECTORY):  # and every family's file, as <family>/expectations.toml beside them
        (shipped / path.relative_to(FAMILIES_DIRECTORY)).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(path, shipped / path.relative_to(FAMILIES_DIRECTORY))
    original = (shipped / target).read_bytes()
    if kind in BYTE_DAMAGE:
        data = damaged_bytes(original, kind, rng("toml", target, kind, seed))
    else:
        data = damaged_toml(original.decode(), kind, rng("toml", target, kind, seed))
    write(shipped / target, data)
    monkeypatch.setattr(gpuprobe.judge.expectations, "DEFAULT_DIRECTORY", shipped)
    monkeypatch.setattr(gpuprobe.judge.expectations, "FAMILIES_DIRECTORY", shipped)
    expect = refused if certainly_bad_toml(kind, data) else handled_or_refused
    for argv in (["expectations"], ["expectations", "h200", "--json"], ["run", "--plan", "--model", "h200"]):
        message = expect(run(capsys, *argv))
        if message is not None:
            assert message.startswith(str(shipped / target)), message  # names the file that is wrong
