"""Fuzz: seeded damage to every kind of build-cache entry, and to the hash recorded beside it.

Two warm caches are made once: one by ``gpuprobe sass`` of a small CUDA C++ file for sm_80 (NVRTC's PTX,
the cubin, ptxas's report, nvdisasm's listing, the parsed listing), one by checking a small PTX probe and
building its module as a run does (the parameters beside the cubin, the check's outcome record). Each case
copies one, damages one entry (or its hash) with tests/helpers/fuzz_corpus.py's byte damage, rebuilt from its seed,
and runs the same command again: its output must be the warm one, the entry made again with the warm
bytes, and one warning line on stderr name it. Never trusted, never a traceback.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from collections.abc import Callable
from contextlib import redirect_stderr, redirect_stdout
from dataclasses import dataclass
from io import StringIO
from pathlib import Path
from typing import Any

import pytest

from gpuprobe.cli import main
from gpuprobe.core.cache import DIGEST_SUFFIX
from gpuprobe.kernels.check import check_all
from gpuprobe.kernels.cubin import build_for, module_of
from tests.helpers.fuzz_corpus import BYTE_DAMAGE, CUDA, damaged_bytes
from tests.test_check_cache import SM80, kernel, probes, warning_about
from tests.test_cli import run
from tests.test_fuzz_cli import rng

SASS_ENTRIES = (".ptx", ".cubin", ".log", ".sass", ".pickle")  # what ``sass`` of a CUDA C++ file caches
CHECK_ENTRIES = (".cubin", ".parameters.json", ".check.json")  # what a check and a run's build add
# Each entry is damaged each way; its hash one way, chosen by the seed of its case (damage to the hash is
# found the same way whatever it is: the two disagree).
CASES = [("entry", kind) for kind in BYTE_DAMAGE] + [("hash", "seeded")]


@dataclass(frozen=True)
class Warm:
    """A warm cache, the tree of sources it was made from, and what the command said on it."""

    cache: Path
    tree: Path
    output: Any


def sass_output(tree: Path, capsys: pytest.CaptureFixture[str] | None = None) -> tuple[int, str, str]:
    """``gpuprobe sass k.cu --arch sm_80``: its exit status, stdout and stderr."""
    argv = ["sass", str(tree / "k.cu"), "--arch", "sm_80"]
    if capsys is not None:
        return run(capsys, *argv)
    out, err = StringIO(), StringIO()
    with redirect_stdout(out), redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue(), err.getvalue()


def check_output(tree: Path, capsys: pytest.CaptureFixture[str] | None = None) -> Any:
    """The check's outcome, and the module a run builds and a measuring process reads back from the cache."""
    targeted = probes(tree)[:1]  # the probe that targets sm_80 alone
    results = [r.to_json() for r in check_all(targeted, [SM80])]
    handed = module_of(build_for(targeted, SM80).cubin, SM80)
    assert handed is not None
    return results, handed.parameters, handed.listing.to_json()


def make_warm(tmp: Path, command: Callable[[Path], Any]) -> Warm:
    tree = tmp / "tree"
    tree.mkdir()
    (tree / "k.cu").write_text(CUDA)
    (tree / "one.ptx").write_text(kernel("k_one", "//@include store.ptxinc"))
    (tree / "store.ptxinc").write_text("\tst.global.u64 [%rd1], %rd1;\n")
    (tree / "two.ptx").write_text(kernel("k_two", "\tst.global.u64 [%rd1], %rd1;"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("GPUPROBE_CACHE", str(tmp / "cache"))
        output = command(tree)
    return Warm(tmp / "cache", tree, output)


@pytest.fixture(scope="module")
def warm_sass(tmp_path_factory: pytest.TempPathFactory) -> Warm:
    warm = make_warm(tmp_path_factory.mktemp("sass"), sass_output)
    assert warm.output[0] == 0 and "fuzz_scale" in warm.output[1]
    return warm


@pytest.fixture(scope="module")
def warm_check(tmp_path_factory: pytest.TempPathFactory) -> Warm:
    warm = make_warm(tmp_path_factory.mktemp("check"), check_output)
    assert [r["status"] for r in warm.output[0]] == ["ok"]
    return warm


def damaged_copy(warm: Warm, suffix: str, target: str, kind: str, into: Path) -> tuple[Path, bytes]:
    """A copy of ``warm``'s cache with its one entry of ``suffix`` (or that entry's hash) damaged; the entry's
    path in the copy and its warm bytes."""
    shutil.copytree(warm.cache, into)
    (entry,) = [path for path in into.rglob(f"*{suffix}") if path.name.count(".") == suffix.count(".")]
    damaged = entry.with_name(entry.name + DIGEST_SUFFIX) if target == "hash" else entry
    good = entry.read_bytes()
    seeded = rng(suffix, target, kind)
    kind = seeded.choice(BYTE_DAMAGE) if kind == "seeded" else kind
    damaged.write_bytes(damaged_bytes(damaged.read_bytes(), kind, seeded))
    return entry, good


def assert_made_again(entry: Path, good: bytes) -> None:
    """``entry`` holds its warm bytes again (ptxas's report, which states how long it took, bytes like them),
    its hash recorded beside it."""
    made = entry.read_bytes()
    assert entry.with_name(entry.name + DIGEST_SUFFIX).read_bytes() == hashlib.sha256(made).hexdigest().encode()
    if entry.suffix == ".log":
        made, good = (re.sub(rb"= [\d.]+ ms", b"", data) for data in (made, good))
    assert made == good


@pytest.mark.parametrize(("target", "kind"), CASES)
@pytest.mark.parametrize("suffix", SASS_ENTRIES)
def test_sass_makes_a_damaged_entry_again(warm_sass: Warm, suffix: str, target: str, kind: str, tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # fmt: skip
    entry, good = damaged_copy(warm_sass, suffix, target, kind, tmp_path / "cache")
    monkeypatch.setenv("GPUPROBE_CACHE", str(tmp_path / "cache"))
    code, out, err = sass_output(warm_sass.tree, capsys)
    assert (code, out) == warm_sass.output[:2]
    assert err.splitlines() == [warning_about(entry)]
    assert_made_again(entry, good)


@pytest.mark.parametrize(("target", "kind"), CASES)
@pytest.mark.parametrize("suffix", CHECK_ENTRIES)
def test_check_and_build_make_a_damaged_entry_again(warm_check: Warm, suffix: str, target: str, kind: str,
                                                    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                    capsys) -> None:  # fmt: skip
    entry, good = damaged_copy(warm_check, suffix, target, kind, tmp_path / "cache")
    monkeypatch.setenv("GPUPROBE_CACHE", str(tmp_path / "cache"))
    assert check_output(warm_check.tree) == warm_check.output
    assert capsys.readouterr().err.splitlines() == [warning_about(entry)]
    assert_made_again(entry, good)
