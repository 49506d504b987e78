"""The build cache: a warm check builds nothing, an edit rebuilds exactly what it feeds, a record that is not
sound is rebuilt, never trusted; every entry is verified against its recorded hash (a damaged one made again,
said once), a tool's output is judged before it is cached, and a cache that cannot be written is one line."""

from __future__ import annotations

import errno
import json
import os
import struct
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from gpuprobe.core import cache, workers
from gpuprobe.core.arch import Arch, parse_arch
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.kernels import check, outcomes, outputs, registry, sass, toolchain
from gpuprobe.kernels.check import CheckResult, check_all
from gpuprobe.kernels.contracts import Rule, Violation
from gpuprobe.kernels.outputs import cubin_problem, listing_problem, ptx_problem
from gpuprobe.kernels.registry import Probe
from gpuprobe.kernels.tool_limits import BrokenTool
from gpuprobe.kernels.toolkit_choice import TOOLKIT_VARIABLE

SM80, SM90 = parse_arch("sm_80"), parse_arch("sm_90")
STORE = Rule(kind="count", opcode=r"STG\.E\.64", count=1)


def kernel(name: str, store: str) -> str:
    """A PTX file with one kernel storing to its argument; ``store`` is the store's line."""
    return "\n".join(
        [
            ".version 8.7",
            ".target sm_80",
            ".address_size 64",
            f".visible .entry {name}(.param .u64 out)",
            "{",
            "\t.reg .u64 %rd<3>;",
            "\tld.param.u64 %rd1, [out];",
            "\tcvta.to.global.u64 %rd1, %rd1;",
            store,
            "\tret;",
            "}",
            "",
        ]
    )


@pytest.fixture
def tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Two probe files in an empty cache: ``one.ptx`` (its store in an include) and ``two.ptx``."""
    monkeypatch.setenv("GPUPROBE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "one.ptx").write_text(kernel("k_one", "//@include store.ptxinc"))
    (tmp_path / "store.ptxinc").write_text("\tst.global.u64 [%rd1], %rd1;\n")
    (tmp_path / "two.ptx").write_text(kernel("k_two", "\tst.global.u64 [%rd1], %rd1;"))
    return tmp_path


def probes(tree: Path, two_contract: tuple[Rule, ...] = (STORE,)) -> list[Probe]:
    """``one`` targets sm_80 alone, ``two`` sm_80 and sm_90."""
    return [
        Probe("toy.one", "toy", "k_one", tree / "one.ptx", (SM80,), (), "one", (STORE,)),
        Probe("toy.two", "toy", "k_two", tree / "two.ptx", (SM80, SM90), (), "two", two_contract),
    ]


@pytest.fixture
def built(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The archs the check builds, in order (builds run here, one at a time, so that they can be seen)."""
    archs: list[str] = []
    build = check.build_and_check

    def spy(targeted: list[Probe], arch: Arch) -> list[CheckResult]:
        archs.append(arch.name)
        return build(targeted, arch)

    monkeypatch.setattr(workers, "usable_cpus", lambda: 1)
    monkeypatch.setattr(check, "build_and_check", spy)
    return archs


def cache_files(tree: Path, suffix: str) -> set[Path]:
    return set((tree / "cache").rglob(f"*{suffix}"))


def outcome(results: list[CheckResult]) -> list[dict]:
    return [r.to_json() for r in results]


def test_a_warm_check_reads_one_record_per_arch_and_builds_nothing(tree: Path, built: list[str]) -> None:
    cold = check_all(probes(tree), [SM80, SM90])
    assert built == ["sm_80", "sm_90"]
    assert [(r.probe, r.arch, r.status) for r in cold] == [
        ("toy.one", "sm_80", "ok"),
        ("toy.two", "sm_80", "ok"),
        ("toy.one", "sm_90", "unsupported"),
        ("toy.two", "sm_90", "ok"),
    ]
    assert len(cache_files(tree, ".check.json")) == 2
    warm = check_all(probes(tree), [SM80, SM90])
    assert built == ["sm_80", "sm_90"]
    assert outcome(warm) == outcome(cold)


@pytest.mark.parametrize(
    ("edited", "old", "new"),
    [
        ("one.ptx", "//@include store.ptxinc", "\tst.global.wt.u64 [%rd1], %rd1;"),
        ("store.ptxinc", "st.global.u64", "st.global.wt.u64"),
    ],
)
def test_editing_a_probe_file_rebuilds_only_the_archs_it_feeds(
    tree: Path, built: list[str], edited: str, old: str, new: str
) -> None:
    check_all(probes(tree), [SM80, SM90])
    path = tree / edited
    path.write_text(path.read_text().replace(old, new))
    results = check_all(probes(tree), [SM80, SM90])
    assert built == ["sm_80", "sm_90", "sm_80"]
    one = next(r for r in results if r.probe == "toy.one" and r.arch == "sm_80")
    assert one.status == "violated"  # the edit reached the build: STG.E.STRONG.SYS is not STG.E.64


def test_a_runs_module_is_read_back_with_its_checks_and_an_edit_rebuilds_it(tree: Path, monkeypatch) -> None:
    """What a run measures with (:func:`check.checked_module`): built and checked once, then read back from its
    record with the same checks, nothing built or checked again; an edited source builds it again."""
    builds: list[str] = []
    build = check.build_for
    monkeypatch.setattr(check, "build_for", lambda targeted, arch: builds.append(arch.name) or build(targeted, arch))
    targeted = probes(tree)
    cold = check.checked_module(targeted, SM80)
    checked = outcome([check.check_probe(p, cold) for p in targeted])
    assert [r["status"] for r in checked] == ["ok", "ok"]
    checking = check.check_kernel
    monkeypatch.setattr(check, "check_kernel", lambda *args: pytest.fail(f"checked again: {args[:2]}"))
    warm = check.checked_module(targeted, SM80)
    assert builds == ["sm_80"] and (warm.cubin, warm.parameters, warm.sources) == (cold.cubin, cold.parameters,
                                                                                   cold.sources)  # fmt: skip
    assert outcome([check.check_probe(p, warm) for p in targeted]) == checked
    monkeypatch.setattr(check, "check_kernel", checking)
    (tree / "store.ptxinc").write_text("\tst.global.wt.u64 [%rd1], %rd1;\n")
    edited = check.checked_module(targeted, SM80)
    assert builds == ["sm_80", "sm_80"] and edited.cubin != cold.cubin
    assert [check.check_probe(p, edited).status for p in targeted] == ["violated", "ok"]


def test_editing_a_contract_rechecks_without_recompiling(tree: Path, built: list[str]) -> None:
    check_all(probes(tree), [SM80, SM90])
    compiled = cache_files(tree, ".cubin") | cache_files(tree, ".sass")
    two = (Rule(kind="count", opcode=r"STG\.E\.64", count=2),)
    results = check_all(probes(tree, two), [SM80, SM90])
    assert built == ["sm_80", "sm_90", "sm_80", "sm_90"]
    assert [r.status for r in results if r.probe == "toy.two"] == ["violated", "violated"]
    assert cache_files(tree, ".cubin") | cache_files(tree, ".sass") == compiled


def test_new_contract_code_rechecks_without_recompiling(
    tree: Path, built: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    first = check_all(probes(tree), [SM80, SM90])
    compiled = cache_files(tree, ".cubin") | cache_files(tree, ".sass")
    monkeypatch.setattr(outcomes, "code_version", lambda: "the rules, edited")
    again = check_all(probes(tree), [SM80, SM90])
    assert built == ["sm_80", "sm_90", "sm_80", "sm_90"]
    assert outcome(again) == outcome(first)
    assert cache_files(tree, ".cubin") | cache_files(tree, ".sass") == compiled


@pytest.mark.parametrize("changed", ["find_tool", "tool_version"])
def test_another_toolkit_never_reads_this_toolkits_outcome(
    tree: Path, built: list[str], monkeypatch: pytest.MonkeyPatch, changed: str
) -> None:
    """Another ptxas (GPUPROBE_TOOLKIT, another path) or another release of it is another key."""
    check_all(probes(tree), [SM80])
    real = getattr(outcomes, changed)
    monkeypatch.setattr(outcomes, changed, lambda tool: f"{real(tool)}-other" if tool == "ptxas" else real(tool))
    check_all(probes(tree), [SM80])
    assert built == ["sm_80", "sm_80"]


def _json(data: object) -> bytes:
    return json.dumps(data).encode()


def _record(key_of: str, results: object, judged: dict) -> bytes:
    """A record of ``results`` under ``key_of``; ``judged`` names the cubin it judged (its ``cubin*`` fields)."""
    return _json({"format": outcomes.RECORD_FORMAT, "key": key_of, **judged, "results": results})


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda key, good, judged: b"",
        lambda key, good, judged: b"\xff\xfe not text",
        lambda key, good, judged: _record(key, good, judged)[:-7],  # cut short
        lambda key, good, judged: _json(["a", "list"]),
        lambda key, good, judged: _json({"format": "gpuprobe-check-outcome/0", "key": key, "results": good}),
        lambda key, good, judged: _record("0" * 64, good, judged),  # another key's record
        lambda key, good, judged: _record(key, {"not": "a list"}, judged),
        lambda key, good, judged: _record(key, [{**r, "status": "fine"} for r in good], judged),
        lambda key, good, judged: _record(key, [{**r, "resources": {"registers": "many"}} for r in good], judged),
        lambda key, good, judged: _record(key, [{**r, "violations": [{"rule": 1}]} for r in good], judged),
        lambda key, good, judged: _record(key, [{k: v for k, v in r.items() if k != "detail"} for r in good], judged),
        lambda key, good, judged: _record(key, good[::-1], judged),  # another probe's result in each place
        lambda key, good, judged: _record(key, good[:1], judged),
        lambda key, good, judged: b"[" * 100_000 + b"]" * 100_000,  # nesting json cannot follow
        lambda key, good, judged: _record(key, good, {**judged, "cubin_sha256": "0" * 64}),  # judged other bytes
        lambda key, good, judged: _record(key, good, {**judged, "cubin": "0" * 64}),  # judged another cubin
        lambda key, good, judged: _record(key, good, {"cubin": None}),
    ],
    ids=[
        "empty", "not-utf8", "truncated", "not-a-record", "other-format", "other-key", "results-not-a-list",
        "unknown-status", "bad-resources", "bad-violation", "missing-field", "other-probes", "too-few", "deep",
        "other-cubin-bytes", "other-cubin", "no-cubin",
    ],
)  # fmt: skip
def test_a_corrupt_or_foreign_record_is_rebuilt_not_trusted(tree: Path, built: list[str], corrupt) -> None:
    fresh = check_all(probes(tree), [SM80])
    (record,) = cache_files(tree, ".check.json")
    key = record.name.removesuffix(".check.json")
    good_record = json.loads(record.read_bytes())
    good, judged = good_record["results"], {k: v for k, v in good_record.items() if k.startswith("cubin")}
    assert len(good) == 2 and set(judged) == {"cubin", "cubin_sha256"}
    cache.write_entry(key, outcomes.SUFFIX, corrupt(key, good, judged))  # its hash recorded: its content must be judged
    assert outcome(check_all(probes(tree), [SM80])) == outcome(fresh)
    assert built == ["sm_80", "sm_80"]
    assert outcomes.load(key) == good  # rebuilt and recorded again


def test_a_directory_in_a_records_place_is_no_record(tree: Path, built: list[str]) -> None:
    fresh = check_all(probes(tree), [SM80])
    (record,) = cache_files(tree, ".check.json")
    record.unlink()
    (record / "foreign").mkdir(parents=True)
    assert outcome(check_all(probes(tree), [SM80])) == outcome(fresh)
    assert outcome(check_all(probes(tree), [SM80])) == outcome(fresh)
    assert built == ["sm_80", "sm_80", "sm_80"]


def test_an_outcome_with_an_error_is_not_recorded(tree: Path, built: list[str]) -> None:
    (tree / "two.ptx").write_text(kernel("k_two", "\tnot.an.instruction;"))
    results = check_all(probes(tree), [SM90])
    assert [r.status for r in results] == ["unsupported", "error"]
    assert not cache_files(tree, ".check.json")
    check_all(probes(tree), [SM90])
    assert built == ["sm_90", "sm_90"]


def test_archs_built_side_by_side_give_what_one_at_a_time_gives(tree: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "usable_cpus", lambda: 2)
    side_by_side = check_all(probes(tree), [SM80, SM90])
    monkeypatch.setattr(workers, "usable_cpus", lambda: 1)
    monkeypatch.setenv("GPUPROBE_CACHE", str(tree / "another-cache"))
    assert outcome(check_all(probes(tree), [SM80, SM90])) == outcome(side_by_side)
    assert len(cache_files(tree, ".check.json")) == 2  # the processes recorded into the cache too


def test_a_check_result_reads_back_what_it_wrote() -> None:
    violated = CheckResult(
        "p", "sm_90", "violated", "rule 'x' violated", [Violation("x", "found 2", ["/*0010*/ EXIT ;"])], {"a": None}
    )
    assert CheckResult.from_json(violated.to_json()) == violated
    assert CheckResult.from_json(json.loads(json.dumps(violated.to_json()))) == violated


def test_jobs_run_in_processes_come_back_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "usable_cpus", lambda: 2)
    assert workers.map_in_processes(divmod, [(7, 2), (9, 4), (1, 1)]) == [(3, 1), (2, 1), (1, 0)]


def test_a_worker_process_that_dies_is_one_line(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker the OOM killer ends was a BrokenProcessPool traceback."""
    monkeypatch.setattr(workers, "usable_cpus", lambda: 2)
    with pytest.raises(GpuprobeError, match=r"^a worker process died before its job ended \(killed, or out of memory"):
        workers.map_in_processes(os._exit, [(9,), (9,)])


def test_a_cached_parse_is_keyed_by_the_grammar_it_was_parsed_with() -> None:
    """Two of the listing parser's patterns live in outputs.py: a cached parse must not outlive a change to them."""
    assert Path(outputs.__file__).read_bytes() in sass._parser_identity()


def test_with_one_cpu_the_jobs_run_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "usable_cpus", lambda: 1)
    seen: list[int] = []
    assert workers.map_in_processes(lambda x: seen.append(x) or x, [(1,), (2,)]) == [1, 2]
    assert seen == [1, 2]  # a lambda cannot be sent to another process, and this list saw both


# ---- one maker per entry: two test workers (or runs) building the same module build it once -------------


def test_an_entry_two_makers_want_at_once_is_made_once(tmp_path: Path, monkeypatch) -> None:
    import fcntl
    import threading

    from gpuprobe.core.cache import cached_file

    monkeypatch.setenv("GPUPROBE_CACHE", str(tmp_path))
    lock = fcntl.flock
    second_waits = threading.Event()
    takers: list[int] = []

    def flock(handle: object, operation: int) -> None:  # the second maker to ask for the lock says so first
        takers.append(operation)
        if len(takers) == 2:
            second_waits.set()
        lock(handle, operation)

    monkeypatch.setattr(fcntl, "flock", flock)
    made: list[str] = []

    def produce() -> bytes:  # still making the entry when the second maker asks for it: no sleep, no race
        made.append("once")
        assert second_waits.wait(timeout=60)
        return b"cubin"

    paths: list[Path] = []
    makers = [threading.Thread(target=lambda: paths.append(cached_file("k" * 64, ".cubin", produce))) for _ in "ab"]
    for maker in makers:
        maker.start()
    for maker in makers:
        maker.join(timeout=60)
    assert made == ["once"] and len(paths) == 2 and paths[0].read_bytes() == b"cubin"


def test_making_an_entry_may_make_another_of_the_same_key(tmp_path: Path, monkeypatch) -> None:
    """A cubin's maker caches the compiler's report under the same key: each entry has its own lock."""
    import threading

    from gpuprobe.core.cache import cached_file

    monkeypatch.setenv("GPUPROBE_CACHE", str(tmp_path))
    key = "c" * 64

    def cubin() -> bytes:
        cached_file(key, ".log", lambda: b"report")
        return b"cubin"

    maker = threading.Thread(target=cached_file, args=(key, ".cubin", cubin), daemon=True)
    maker.start()
    maker.join(timeout=10)
    assert not maker.is_alive(), "making the cubin waited on its own key's lock"
    assert (tmp_path / key[:2] / f"{key}.log").read_bytes() == b"report"


# ---- every entry is verified against the hash recorded beside it (issue 25, item 3) ---------------------


def flip_a_bit(path: Path) -> bytes:
    """Flip one bit in the middle of ``path`` (the hash recorded beside it left as it was); its bytes before."""
    data = path.read_bytes()
    damaged = bytearray(data)
    damaged[len(data) // 2] ^= 0x10
    path.write_bytes(bytes(damaged))
    return data


def warning_about(path: Path) -> str:
    return f"gpuprobe: warning: cache entry {path} does not match its recorded SHA-256 (damaged): made again"


def test_a_damaged_cubin_is_rebuilt_and_no_record_judges_it(tree: Path, built: list[str], capsys) -> None:
    """n97, n99: a flipped bit in the cached cubin. The record judged other bytes, so it is not read: the cubin
    is made again (the same bytes, so a run records the same SHA-256 for the same sources), said once."""
    fresh = check_all(probes(tree), [SM80])
    (cubin,) = cache_files(tree, ".cubin")
    good = flip_a_bit(cubin)
    capsys.readouterr()
    assert outcome(check_all(probes(tree), [SM80])) == outcome(fresh)
    assert built == ["sm_80", "sm_80"]
    assert cubin.read_bytes() == good
    assert capsys.readouterr().err.splitlines() == [warning_about(cubin)]
    assert outcome(check_all(probes(tree), [SM80])) == outcome(fresh)  # and recorded again
    assert built == ["sm_80", "sm_80"]


def test_a_deleted_cubin_is_no_record_of_it(tree: Path, built: list[str]) -> None:
    """The record is of a cubin: without it in the cache (deleted, or rebuilt as other bytes) it is checked again."""
    fresh = check_all(probes(tree), [SM80])
    (cubin,) = cache_files(tree, ".cubin")
    cubin.unlink()
    assert outcome(check_all(probes(tree), [SM80])) == outcome(fresh)
    assert built == ["sm_80", "sm_80"]


@pytest.fixture
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("GPUPROBE_CACHE", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_a_damaged_entry_is_made_again_and_said_once(private_cache: Path, capsys) -> None:
    """However many read it: a reader finds no entry, the one that makes it again says so."""
    key = "d" * 64
    path = cache.cached_file(key, ".cubin", lambda: b"the cubin")
    flip_a_bit(path)
    assert cache.read_entry(key, ".cubin") is None
    made: list[bytes] = []
    for _ in range(3):
        cache.cached_file(key, ".cubin", lambda: made.append(b"the cubin") or b"the cubin")
    assert made == [b"the cubin"] and cache.read_entry(key, ".cubin") == b"the cubin"
    assert capsys.readouterr().err.splitlines() == [warning_about(path)]


def test_a_damaged_hash_is_a_damaged_entry(private_cache: Path, capsys) -> None:
    key = "e" * 64
    path = cache.cached_file(key, ".sass", lambda: b"the listing")
    flip_a_bit(path.with_name(path.name + cache.DIGEST_SUFFIX))
    assert cache.read_entry(key, ".sass") is None
    cache.cached_file(key, ".sass", lambda: b"the listing")
    assert capsys.readouterr().err.splitlines() == [warning_about(path)]


def test_an_entry_without_its_hash_is_made_again_silently(private_cache: Path, capsys) -> None:
    """An older gpuprobe's entry (or a write cut short before its hash): unverified, so made again, quietly."""
    key = "f" * 64
    old = cache.entry_path(key, ".cubin")
    old.parent.mkdir(parents=True)
    old.write_bytes(b"an older gpuprobe's cubin")  # n60: an empty cubin an older gpuprobe cached, say
    assert cache.read_entry(key, ".cubin") is None
    assert cache.cached_file(key, ".cubin", lambda: b"made again").read_bytes() == b"made again"
    assert capsys.readouterr().err == ""


# ---- a cache that cannot be written: one line, exit 2, nothing left behind (n96) -----------------------


@pytest.fixture
def full_disk(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Each write to disk fails as on a full disk, once its bytes are written to the temporary file (the
    calls so far counted; ``[n]`` lets the first ``n`` through)."""
    calls = [0]
    real = os.fsync

    def fsync(fd: int) -> None:
        calls[0] -= 1
        if calls[0] < 0:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    return calls


def files_in(folder: Path) -> list[str]:
    """The files in ``folder`` (its entries' locks aside)."""
    return sorted(p.name for p in folder.rglob("*") if p.is_file() and not p.name.endswith(".lock"))


@pytest.mark.parametrize("written", [0, 1], ids=["entry", "its-hash"])
def test_a_failed_write_leaves_no_temporary_file_and_no_entry(private_cache: Path, full_disk: list[int],
                                                              written: int) -> None:  # fmt: skip
    full_disk[0] = written  # the entry's write fails, or the hash's after it
    with pytest.raises(cache.CacheUnwritable) as excinfo:
        cache.cached_file("a" * 64, ".cubin", lambda: b"x" * 100_000)
    assert str(excinfo.value) == (
        f"cannot write the cache in {private_cache} (No space left on device): "
        "set GPUPROBE_CACHE to a folder gpuprobe may write"
    )
    assert files_in(private_cache) == []


def test_check_on_a_full_cache_is_one_line_and_exit_2(tree: Path, built: list[str], full_disk: list[int],
                                                       monkeypatch: pytest.MonkeyPatch, capsys) -> None:  # fmt: skip
    """n96: not one ERROR block per probe and exit 1, as before (what it prints of its progress aside)."""
    from tests.test_cli import run

    monkeypatch.setattr(registry, "all_probes", lambda: probes(tree))
    code, out, err = run(capsys, "check", "--arch", "sm_80,sm_90")
    assert (code, out) == (2, "")
    (message,) = [line for line in err.splitlines() if line.startswith("gpuprobe: ")]
    assert message.startswith("gpuprobe: error: cannot write the cache in ") and "(No space left on device)" in message
    assert files_in(tree / "cache") == []
    assert built == ["sm_80"]  # the first build ends the check


# ---- a tool's output is judged before it is cached (n60, n65) ------------------------------------------


FakeTool = Callable[[str, str], None]


@pytest.fixture
def fake_tool(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, private_cache: Path) -> Iterator[FakeTool]:
    """Makes ``fake_tool(tool, action)``: a ``tool`` that GPUPROBE_TOOLKIT chooses before the real one (as the
    trial's fakes were), answering ``--version`` as the real one does (so its entries have the real one's keys
    but for its path) and otherwise running the shell ``action`` (``$REAL`` names the real tool)."""
    real = {tool: toolchain.find_tool(tool) for tool in ("ptxas", "nvdisasm")}
    fake = tmp_path / "fake"
    fake.mkdir()
    monkeypatch.setenv(TOOLKIT_VARIABLE, os.pathsep.join([str(fake), *(str(path.parent) for path in real.values())]))

    def make(tool: str, action: str) -> None:
        script = fake / tool
        script.write_text(f'#!/bin/sh\nREAL="{real[tool]}"\n'
                          f'if [ "$1" = --version ]; then exec "$REAL" --version; fi\n{action}\n')  # fmt: skip
        script.chmod(0o755)
        toolchain.locate_tool.cache_clear()

    yield make
    toolchain.locate_tool.cache_clear()


def test_a_ptxas_that_writes_an_empty_cubin_caches_nothing(fake_tool: FakeTool, private_cache: Path) -> None:
    """n60: its empty output is an error naming ptxas; once ptxas is fixed (the same path and version, so
    the same key), the cubin is built, not read back from the cache as it was."""
    fake_tool("ptxas", 'for a; do out="$a"; done; : > "$out"; exit 0')  # truncates its output (-o, last)
    with pytest.raises(BrokenTool) as excinfo:
        toolchain.assemble_ptx(kernel("k", "\tst.global.u64 [%rd1], %rd1;"), SM80, "k.ptx")
    assert str(excinfo.value) == "k.ptx: ptxas exited 0 but wrote no cubin (empty); it printed nothing [sm_80]"
    assert files_in(private_cache) == []
    fake_tool("ptxas", 'exec "$REAL" "$@"')
    compiled = toolchain.assemble_ptx(kernel("k", "\tst.global.u64 [%rd1], %rd1;"), SM80, "k.ptx")
    assert cubin_problem(compiled.cubin.read_bytes()) is None


def test_an_nvdisasm_that_prints_no_sass_is_named_and_caches_nothing(fake_tool: FakeTool, private_cache: Path,
                                                                     tmp_path: Path, capsys) -> None:  # fmt: skip
    """n65: the trial's fake listing, which parsed as no kernel at all: ``sass`` printed nothing, exit 0."""
    from tests.test_cli import user_error

    fake_listing = r"printf '.text.k:\n        /*0000*/ THIS IS NOT SASS ;\ngarbage {{{{ ]]]\n'; exit 0"
    fake_tool("nvdisasm", fake_listing)
    source = tmp_path / "k.ptx"
    source.write_text(kernel("k", "\tst.global.u64 [%rd1], %rd1;"))
    message = user_error(capsys, "sass", str(source))
    assert "nvdisasm exited 0 but what it printed is not its SASS (no instructions of k)" in message
    assert not list(private_cache.rglob("*.sass"))


def cuda_elf(*sections: tuple[str, bytes], machine: int = 190, elf_class: int = 2) -> bytes:
    """An ELF file for the CUDA machine (190) holding ``sections`` (name, bytes) and the table of their names:
    a cubin in form, without ptxas."""
    names = b"\0.shstrtab\0" + b"".join(name.encode() + b"\0" for name, _ in sections)
    body, placed, name_at = names, [], len(b"\0.shstrtab\0")
    for name, data in sections:
        placed.append((name_at, 64 + len(body), len(data)))
        body += data
        name_at += len(name) + 1
    body += bytes(-len(body) % 8)
    header = struct.pack("<4sBBB9xHHIQQQIHHHHHH", b"\x7fELF", elf_class, 1, 1, 2, machine, 1, 0, 0,
                         64 + len(body), 0, 64, 0, 0, 64, 2 + len(sections), 1)  # fmt: skip
    table = bytes(64) + struct.pack("<IIQQQQIIQQ", 1, 3, 0, 0, 64, len(names), 0, 0, 1, 0)
    table += b"".join(struct.pack("<IIQQQQIIQQ", at, 1, 6, 0, offset, size, 0, 0, 16, 0) for at, offset, size in placed)
    return header + body + table


@pytest.mark.parametrize(
    ("data", "problem"),
    [
        (b"", "empty"),
        (b"this is text", "no ELF header"),
        (cuda_elf()[:40], "its ELF header is cut short"),
        (cuda_elf(elf_class=1), "not a 64-bit little-endian ELF file"),
        (cuda_elf(machine=62), "an ELF file for machine 62, not CUDA (190)"),
        (cuda_elf(("x", b"code"))[:-10], "its headers lie past its end (cut short or damaged)"),
        (cuda_elf()[:0x3C] + b"\0\0" + cuda_elf()[0x3E:], "no table of section names"),  # e_shnum 0
        (cuda_elf(), None),
    ],
    ids=["empty", "text", "short-header", "32-bit", "x86-64", "cut", "no-sections", "cubin"],
)
def test_what_is_no_cubin(data: bytes, problem: str | None) -> None:
    assert cubin_problem(data) == problem


def test_a_section_past_the_end_is_a_cubin_cut_short() -> None:
    whole = bytearray(cuda_elf((".text.k", b"\x01" * 64)))
    struct.pack_into("<Q", whole, len(whole) - 64 + 32, 10_000)  # the code section's size, past the end
    assert cubin_problem(bytes(whole)) == "a section lies past its end (cut short or damaged)"


CODE = (".text.k", b"\x01" * 16)
LISTING = '\t.section\t.text.k,"ax",@progbits\n.text.k:\n        /*0000*/                   EXIT ;\n'


@pytest.mark.parametrize(
    ("listing", "cubin", "problem"),
    [
        (LISTING, cuda_elf(CODE), None),
        (LISTING, cuda_elf(CODE, (".text.j", b"\x01" * 16), (".text.i", b"")), "no instructions of j"),
        (".text.k:\n        /*0000*/ THIS IS NOT SASS ;\ngarbage {{{{ ]]]\n", cuda_elf(CODE), "no instructions of k"),
        ("", cuda_elf(CODE, (".text.j", b"\x01")), "no instructions of k (and 1 more)"),
        ("", cuda_elf((".nv.info", b"\x01")), None),  # no code: nothing to list
    ],
    ids=["listed", "one-missing", "not-sass", "nothing", "no-code"],
)
def test_a_listing_holds_every_code_section_with_instructions(listing: str, cubin: bytes, problem: str | None) -> None:
    assert listing_problem(listing, cubin) == problem


@pytest.mark.parametrize(
    ("ptx", "problem"),
    [
        ("", "empty"),
        (" \n", "empty"),
        (".version 8.7\n.address_size 64\n", "no .target directive"),
        ("garbage", "no .version or .target directive"),
        (kernel("k", "\tret;"), None),
    ],
)
def test_what_is_no_ptx(ptx: str, problem: str | None) -> None:
    assert ptx_problem(ptx) == problem


def test_a_listing_that_does_not_parse_names_nvdisasm(fake_tool: FakeTool, tmp_path: Path, capsys) -> None:
    """A listing in form (a code section of the cubin's, an instruction line in it) that the parser refuses."""
    from tests.test_cli import user_error

    fake_tool("nvdisasm", r"""printf '\t.section\t.text.k,"ax",@progbits\n        /*0000*/ @P0 ;\n'""")
    source = tmp_path / "k.ptx"
    source.write_text(kernel("k", "\tst.global.u64 [%rd1], %rd1;"))
    message = user_error(capsys, "sass", str(source))
    assert message.endswith(
        ".cubin: nvdisasm's listing of it cannot be parsed: SASS line at /*0000*/ has no opcode: '@P0'"
    )
