"""Fuzzing where a probe source's includes lead (issue 25, item 1): a seeded corpus of include names, for PTX
(``//@include``) and CUDA C++ (``#include``, spelt every way NVRTC reads one), against a folder laid with
traps: absolute paths, ``..`` chains, links out of the folder, devices, a FIFO, a folder, an oversize file, a
dangling link, the source itself and an include cycle.

Each case is ``gpuprobe sass`` on the source. An include that leads outside the source's folder, or to no
regular file, or to a file over the limit, must be refused with one line naming the include as written and
why; any other is handled or refused (ptxas's or NVRTC's own message), never a traceback or a hang. Should a
guard regress, no case can take the machine down: the process's address space is bounded while a case runs
(a read of /dev/zero is a MemoryError), and the FIFO has a writer waiting, which answers any reader at once.
"""

from __future__ import annotations

import contextlib
import os
import random
import resource
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuprobe.kernels.includes import MAX_INCLUDE_BYTES
from tests.test_cli import run, write
from tests.test_fuzz_cli import handled_or_refused, refused

PTX_SOURCE = ".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry k()\n{{\n//@include {}\nret;\n}}\n"
CUDA_BODY = 'extern "C" __global__ void k(float* o) { o[0] = 1; }\n'
#: Every spelling of an include NVRTC acts on ({} is the name with its quotes or angle brackets).
CUDA_SPELLINGS = ("#include {}", "  #  include {}", "%:include {}", "#/**/include/**/{}", "#inc\\\nlude {}",
                  "#include /*\n*/ {}", "int a; /* x\n */ #include {}", "#include_next {}",
                  "#if __has_include({})\n#endif")  # fmt: skip
REASONS = ("leads outside", "not a regular file", f"larger than {MAX_INCLUDE_BYTES:,} bytes", "cannot read")
HEADROOM = 2 * 2**30  # address space a case may add to what the test process already holds

pytestmark = pytest.mark.usefixtures("bounded_memory")


@pytest.fixture
def bounded_memory() -> Iterator[None]:
    """Bound this process's address space while a test runs: a guard that regresses is a MemoryError there, not
    a machine out of memory."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    status = Path("/proc/self/status").read_text()
    held = int(next(line.split()[1] for line in status.splitlines() if line.startswith("VmSize:"))) * 1024
    limit = held + HEADROOM if hard == resource.RLIM_INFINITY else min(held + HEADROOM, hard)
    resource.setrlimit(resource.RLIMIT_AS, (limit, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


@contextlib.contextmanager
def answered_fifo(path: Path) -> Iterator[threading.Event]:
    """A FIFO at ``path`` with a writer in a thread that answers every reader that opens it (gpuprobe, or
    NVRTC) with an end of file at once, instead of leaving it waiting for ever; the event is set when one
    did. Released on leaving."""
    os.mkfifo(path)
    opened, leaving = threading.Event(), threading.Event()

    def writer() -> None:
        while True:
            with open(path, "wb"):  # waits for a reader
                pass
            if leaving.is_set():
                return
            opened.set()

    thread = threading.Thread(target=writer, daemon=True)
    thread.start()
    try:
        yield opened
    finally:
        leaving.set()
        release = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # the reader the writer waits for
        thread.join()
        os.close(release)


@pytest.fixture
def trapped(tmp_path: Path) -> Iterator[Path]:
    """``tmp_path/src``, the folder a source is built in, laid with traps; a file outside it, and a folder."""
    folder = tmp_path / "src"
    folder.mkdir()
    write(tmp_path / "outside.txt", "secret\n")
    (folder / "dir.inc").mkdir()
    os.truncate(write(folder / "big.inc", ""), MAX_INCLUDE_BYTES + 1)  # sparse: costs no disk
    links = {"zero.inc": "/dev/zero", "passwd.inc": "/etc/passwd", "out.inc": "../outside.txt", "outdir": "..",
             "dangling.inc": "/nonexistent/x", "loop.inc": "loop.inc"}  # fmt: skip
    for name, target in links.items():
        (folder / name).symlink_to(target)
    with answered_fifo(folder / "fifo.inc") as opened:
        yield folder
        assert not opened.is_set(), "the FIFO was opened"


TRAPS = ["fifo.inc", "dir.inc", "big.inc", "zero.inc", "passwd.inc", "out.inc", "outdir/outside.txt",
         "outdir/src/fifo.inc", "dangling.inc", "loop.inc", "./dir.inc/", "/etc/passwd", "/proc/self/environ",
         "/proc/self/fd/0", "/dev/zero", "/dev/urandom", "/dev/null", "/", "/etc", "."]  # fmt: skip
ENDS = ["etc/passwd", "etc/hostname", "outside.txt", "src/fifo.inc", "proc/self/environ", "dev/zero", ""]


def climbing_names(seed: int) -> list[str]:
    """``..`` chains of every depth, some through a folder first, ending at a file, a device or nothing."""
    rng = random.Random(f"includes-{seed}")
    names = []
    for _ in range(6):
        through = rng.choice(["", "./", "dir.inc/", "outdir/src/"])
        names.append(through + "../" * rng.randint(1, 14) + rng.choice(ENDS))
    return names


CORPUS = TRAPS + [name for seed in range(2) for name in climbing_names(seed)]


def must_refuse(folder: Path, name: str) -> bool:
    """Whether an include of ``name`` from ``folder`` breaks a rule: it leads (links followed) outside the
    folder, or to something there that is no regular file, or to a file over the limit."""
    place = folder / name
    if not os.path.lexists(place):
        return False
    resolved = Path(os.path.realpath(place))
    if not resolved.is_relative_to(folder.resolve()):
        return True
    return not resolved.is_file() or resolved.stat().st_size > MAX_INCLUDE_BYTES


def judged(capsys: pytest.CaptureFixture[str], source: Path, folder: Path, name: str, shown: str) -> None:
    """``gpuprobe sass`` on ``source``: refused with one line naming ``shown`` (the include as written) and why,
    where the include breaks a rule; else handled or refused, without a traceback."""
    outcome = run(capsys, "sass", str(source))
    if must_refuse(folder, name):
        message = refused(outcome)
        assert shown in message and any(reason in message for reason in REASONS), message
    else:
        handled_or_refused(outcome)


@pytest.mark.parametrize("name", CORPUS)
def test_a_ptx_include(capsys: pytest.CaptureFixture[str], trapped: Path, name: str) -> None:
    source = write(trapped / "k.ptx", PTX_SOURCE.format(name))
    judged(capsys, source, trapped, name, f"{source}:6: //@include {name}")


@pytest.mark.parametrize("name", CORPUS)
def test_a_cuda_include(capsys: pytest.CaptureFixture[str], trapped: Path, name: str) -> None:
    """Each name in quotes and angle brackets, in a spelling the name picks."""
    spelling = random.Random(name).choice(CUDA_SPELLINGS)
    for written in (f'"{name}"', f"<{name}>"):
        source = write(trapped / "k.cu", spelling.format(written) + "\n" + CUDA_BODY)
        judged(capsys, source, trapped, name, written)


@pytest.mark.parametrize("spelling", CUDA_SPELLINGS)
def test_every_spelling_of_a_cuda_include_is_seen(capsys: pytest.CaptureFixture[str], trapped: Path,
                                                  spelling: str) -> None:  # fmt: skip
    source = write(trapped / "k.cu", spelling.format('"zero.inc"') + "\n" + CUDA_BODY)
    judged(capsys, source, trapped, "zero.inc", '"zero.inc"')


@pytest.mark.parametrize("name", ['"/dev/zero"', "<fifo.inc>", ""])
def test_an_include_through_a_macro_is_refused(capsys: pytest.CaptureFixture[str], trapped: Path, name: str) -> None:
    source = write(trapped / "k.cu", f"#define WHERE {name}\n#include WHERE\n{CUDA_BODY}")
    assert "#include WHERE: names no file in quotes or angle brackets" in refused(run(capsys, "sass", str(source)))


@pytest.mark.parametrize("suffix", [".ptx", ".cu"])
def test_a_source_that_includes_itself_or_a_cycle_ends(capsys: pytest.CaptureFixture[str], trapped: Path,
                                                       suffix: str) -> None:  # fmt: skip
    if suffix == ".ptx":
        write(trapped / "a.inc", "//@include b.inc\n")
        write(trapped / "b.inc", "//@include a.inc\n")
        texts = [PTX_SOURCE.format("k.ptx"), PTX_SOURCE.format("a.inc")]
    else:
        write(trapped / "a.inc", '#include "b.inc"\n')
        write(trapped / "b.inc", '#include "a.inc"\n')
        texts = [f'#include "k.cu"\n{CUDA_BODY}', f'#include "a.inc"\n{CUDA_BODY}']
    for text in texts:
        refused(run(capsys, "sass", str(write(trapped / f"k{suffix}", text))))
