"""The static check's outcome cache: a warm check builds nothing, an edit rebuilds exactly what it feeds,
and a record that is not sound is rebuilt, never trusted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gpuprobe.build import check, outcomes, workers
from gpuprobe.build.check import CheckResult, check_all
from gpuprobe.build.contracts import Rule, Violation
from gpuprobe.build.registry import Probe
from gpuprobe.core.arch import Arch, parse_arch

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


def _record(key_of: str, results: object) -> bytes:
    return _json({"format": outcomes.RECORD_FORMAT, "key": key_of, "results": results})


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda key, good: b"",
        lambda key, good: b"\xff\xfe not text",
        lambda key, good: _record(key, good)[:-7],  # cut short
        lambda key, good: _json(["a", "list"]),
        lambda key, good: _json({"format": "gpuprobe-check-outcome/0", "key": key, "results": good}),
        lambda key, good: _record("0" * 64, good),  # another key's record
        lambda key, good: _record(key, {"not": "a list"}),
        lambda key, good: _record(key, [{**r, "status": "fine"} for r in good]),
        lambda key, good: _record(key, [{**r, "resources": {"registers": "many"}} for r in good]),
        lambda key, good: _record(key, [{**r, "violations": [{"rule": 1}]} for r in good]),
        lambda key, good: _record(key, [{k: v for k, v in r.items() if k != "detail"} for r in good]),
        lambda key, good: _record(key, good[::-1]),  # another probe's result in each place
        lambda key, good: _record(key, good[:1]),
        lambda key, good: b"[" * 100_000 + b"]" * 100_000,  # nesting json cannot follow
    ],
    ids=[
        "empty", "not-utf8", "truncated", "not-a-record", "other-format", "other-key", "results-not-a-list",
        "unknown-status", "bad-resources", "bad-violation", "missing-field", "other-probes", "too-few", "deep",
    ],
)  # fmt: skip
def test_a_corrupt_or_foreign_record_is_rebuilt_not_trusted(tree: Path, built: list[str], corrupt) -> None:
    fresh = check_all(probes(tree), [SM80])
    (record,) = cache_files(tree, ".check.json")
    key = record.name.removesuffix(".check.json")
    good = json.loads(record.read_bytes())["results"]
    assert len(good) == 2
    record.write_bytes(corrupt(key, good))
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


def test_with_one_cpu_the_jobs_run_here(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(workers, "usable_cpus", lambda: 1)
    seen: list[int] = []
    assert workers.map_in_processes(lambda x: seen.append(x) or x, [(1,), (2,)]) == [1, 2]
    assert seen == [1, 2]  # a lambda cannot be sent to another process, and this list saw both


# ---- one maker per entry: two test workers (or runs) building the same module build it once -------------


def test_an_entry_two_makers_want_at_once_is_made_once(tmp_path: Path, monkeypatch) -> None:
    import threading
    import time

    from gpuprobe.core.cache import cached_file

    monkeypatch.setenv("GPUPROBE_CACHE", str(tmp_path))
    made: list[str] = []

    def produce() -> bytes:  # slow enough that the second maker comes while the first is at it
        made.append("once")
        time.sleep(0.3)
        return b"cubin"

    paths: list[Path] = []
    makers = [threading.Thread(target=lambda: paths.append(cached_file("k" * 64, ".cubin", produce))) for _ in "ab"]
    for maker in makers:
        maker.start()
    for maker in makers:
        maker.join(timeout=10)
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
