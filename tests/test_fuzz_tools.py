"""``sass`` and ``check`` under a seeded set of misbehaving ptxas builds (issue 25 item 4): one that hangs, one
whose ``--version`` hangs, a wrapper whose child would outlive it, one that floods its output, prints garbage,
exits 0 having written nothing, is killed, or fails with a random status and bytes.

Every case ends as the fuzz tests of tests/test_fuzz_cli.py do: handled (exit 0 or 1, no traceback) or
refused with one line. A tool that did not do its job whatever it was given (it hung, or wrote no cubin) is
refused by both commands, naming ptxas, never a temporary file; a hang names the limit and its setting. No
process of the fake toolkit is left running. The hangs run under a 0.5 s GPUPROBE_TOOL_TIMEOUT, the rest
under the default limits, so that no outcome depends on how busy the machine is.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gpuprobe.core import workers
from gpuprobe.kernels import registry, toolchain
from gpuprobe.kernels.toolchain import TOOLKIT_VARIABLE, locate_tool
from tests.test_check_cache import probes, tree  # noqa: F401 (a fixture)
from tests.test_cli import run, write
from tests.test_fuzz_cli import handled_or_refused, rng
from tests.test_tool_limits import REAL_TOOLS, SETTLE_S, SHORT, gone
from tests.test_toolchain import GOOD_KERNEL, make_executable, ptx_text

VERSION = 'if [ "$1" = --version ]; then echo "Cuda compilation tools, release 13.0, V13.0.88"; exit 0; fi\n'
HANG = f"{SHORT} s (GPUPROBE_TOOL_TIMEOUT)"
NO_CUBIN = "ptxas exited 0 but wrote no cubin"


def tool_script(case: str, folder: Path) -> tuple[str, str | None]:
    """The fake ptxas of ``case`` (its payload drawn from the case's seed), and what a refusal of it must say
    whatever the command (None: the command may handle it instead: a tool that fails on the source)."""
    draw = rng("tools", case)
    payload = folder / "payload"
    payload.write_bytes(draw.randbytes(draw.randint(1, 6000)))
    sleeper = folder / "sleeper"  # sleep, under a name that says whose it is (see left_running)
    sleeper.symlink_to(shutil.which("sleep") or "/bin/sleep")
    scripts = {
        "hang": (VERSION + f"exec '{sleeper}' 100000", HANG),
        "hang-on-version": (f"exec '{sleeper}' 100000", HANG),
        "orphaning-wrapper": (VERSION + f"'{sleeper}' 100000 &\nwait", HANG),
        "flood": (VERSION + f"yes 'ptxas warning : flood' | head -c {draw.randint(10**5, 4 * 10**6)}; exit 1", None),
        "garbage": (VERSION + f"cat '{payload}'; exit 0", NO_CUBIN),
        "garbage-on-stderr": (VERSION + f"cat '{payload}' >&2; exit 0", NO_CUBIN),
        "exit-0-silently": (VERSION + "exit 0", NO_CUBIN),
        "killed": (VERSION + "kill -9 $$", None),
        "random-failure": (VERSION + f"cat '{payload}' >&2; exit {draw.randint(1, 255)}", None),
    }
    script, said = scripts[case]
    return "#!/bin/sh\n" + script + "\n", said


CASES = ["hang", "hang-on-version", "orphaning-wrapper", "flood", "garbage", "garbage-on-stderr", "exit-0-silently",
         "killed", "random-failure"]  # fmt: skip


def left_running(folder: Path) -> list[int]:
    """The processes still running whose command line names ``folder`` (the fake tool, and its children,
    which inherit its name in their arguments), once a SIGKILL has had time to land."""
    give_up = time.monotonic() + SETTLE_S
    while True:
        found = []
        for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                named = str(folder).encode() in cmdline.read_bytes()
            except OSError:  # it ended while we looked
                continue
            if named and not gone(int(cmdline.parent.name)):
                found.append(int(cmdline.parent.name))
        if not found or time.monotonic() > give_up:
            return found
        time.sleep(0.05)


@pytest.fixture
def fake_ptxas(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, request: pytest.FixtureRequest
) -> Iterator[tuple[Path, str | None]]:
    """The case's fake ptxas, chosen as GPUPROBE_TOOLKIT with the real other tools, in an empty cache; a hang
    under the short limit. Returns its folder and what a refusal must say."""
    case = request.param
    folder = tmp_path / f"fake-{case}"
    folder.mkdir()
    script, said = tool_script(case, folder)
    make_executable(folder / "ptxas", script)
    monkeypatch.setenv(TOOLKIT_VARIABLE, f"{folder}:{REAL_TOOLS}")
    monkeypatch.setenv("GPUPROBE_CACHE", str(tmp_path / "cache"))
    if said == HANG:
        monkeypatch.setenv("GPUPROBE_TOOL_TIMEOUT", SHORT)
    locate_tool.cache_clear()
    toolchain._version_line.cache_clear()
    yield folder, said
    locate_tool.cache_clear()
    toolchain._version_line.cache_clear()


def judged(outcome: tuple[int, str, str], folder: Path, said: str | None) -> None:
    """The outcome is handled or one line; a refusal that must say something says it; nothing is left running."""
    message = handled_or_refused(outcome)
    if said is not None:
        assert message is not None and said in message, outcome
    if message is not None:
        assert "gpuprobe-" not in message  # names ptxas, never the temporary folder it ran in
    assert left_running(folder) == []


@pytest.mark.parametrize("fake_ptxas", CASES, indirect=True)
def test_sass_under_a_misbehaving_ptxas(
    capsys: pytest.CaptureFixture[str], fake_ptxas: tuple[Path, str | None], tmp_path: Path
) -> None:
    folder, said = fake_ptxas
    source = write(tmp_path / "k.ptx", ptx_text(*GOOD_KERNEL))
    outcome = run(capsys, "sass", str(source))
    assert outcome[0] == 2  # no fake ptxas here gives a cubin
    judged(outcome, folder, said)


@pytest.mark.parametrize("fake_ptxas", CASES, indirect=True)
def test_check_under_a_misbehaving_ptxas(
    capsys: pytest.CaptureFixture[str],
    fake_ptxas: tuple[Path, str | None],
    tree: Path,  # noqa: F811
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``check`` over two toy probes: a broken tool is one line (after the line saying what is built, when it
    gets that far), a failed build each probe's error (exit 1)."""
    folder, said = fake_ptxas
    monkeypatch.setattr(registry, "all_probes", lambda: probes(tree))
    monkeypatch.setattr(workers, "usable_cpus", lambda: 1)
    code, out, err = run(capsys, "check", "--arch", "sm_80")
    assert code != 0
    said_besides_progress = "".join(line for line in err.splitlines(True) if not line.startswith("gpuprobe check: "))
    judged((code, out, said_besides_progress), folder, said)
