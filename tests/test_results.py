"""The results file: round trip, atomic writes, and clear errors for files gpuprobe cannot read."""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
from pathlib import Path

import pytest

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.files import write_atomic
from gpuprobe.core.results import (
    INVALID,
    SCHEMA,
    SCHEMA_VERSION,
    DeclaredProbe,
    Device,
    Fact,
    ProbeOutcome,
    Results,
    code_record,
    host_record,
    load,
    provenance,
    save,
)

DEVICE = Device(name="Simulated GPU", cc="9.0", arch="sm_90a", sm_count=132, l2_bytes=50 * 2**20)


def _results() -> Results:
    fact = Fact("latency.l2", 261.0, "cycle", (260.5, 261.5), [260.5, 261.0, 261.5], {"ns": 150.0}, "p")
    return Results(DEVICE, [fact], {"p": ProbeOutcome("ok", "", {"curve": {"x": [1.0]}})}, {"sm_mhz_measured": 1740.0})


def test_round_trip(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    save(_results(), path)
    again = load(path)
    assert again.to_dict() == _results().to_dict() | {"created": again.created}
    assert again.fact("latency.l2").ci == (260.5, 261.5)
    assert oct(path.stat().st_mode & 0o777) == "0o644"


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "r.json"
    write_atomic(path, "old")

    def broken_replace(*args, **kwargs):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(GpuprobeError, match=r"r\.json: cannot write \(disk full\)$"):
        write_atomic(path, "new")
    assert path.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["r.json"]


BAD_CI = {"id": "x.y", "value": 1, "unit": "cycle", "ci": [1]}
BAD_VERDICT = {"id": "x.y", "value": 1, "unit": "cycle", "verdict": "great"}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{not json", "corrupt results file (not JSON"),
        ('{"hello": 1}', "not a gpuprobe results file"),
        ("[1, 2]", "not a gpuprobe results file"),
        (json.dumps({"schema": SCHEMA}), "no schema_version"),
        (json.dumps({"schema": SCHEMA, "schema_version": SCHEMA_VERSION + 1}), "newer than this gpuprobe reads"),
        (json.dumps({"schema": SCHEMA, "schema_version": 0}), "not supported"),
        (json.dumps({"schema": SCHEMA, "schema_version": 1, "device": {}}), "corrupt results file"),
        (
            json.dumps({"schema": SCHEMA, "schema_version": 1, "device": DEVICE.__dict__, "facts": [{"id": "x"}]}),
            "corrupt results file",
        ),
        (
            json.dumps({"schema": SCHEMA, "schema_version": 1, "device": DEVICE.__dict__, "facts": [BAD_CI]}),
            "confidence interval is [1], not a pair of numbers",
        ),
        (
            json.dumps({"schema": SCHEMA, "schema_version": 1, "device": DEVICE.__dict__, "facts": [BAD_VERDICT]}),
            "'great'",
        ),
    ],
)
def test_unreadable_files_give_one_clear_line(tmp_path: Path, content: str, message: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(content)
    with pytest.raises(GpuprobeError) as info:
        load(path)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_missing_and_binary_files(tmp_path: Path) -> None:
    with pytest.raises(GpuprobeError, match="no such file"):
        load(tmp_path / "absent.json")
    binary = tmp_path / "b.json"
    binary.write_bytes(b"\xff\xfe\x00garbage")
    with pytest.raises(GpuprobeError):
        load(binary)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="this platform has no named pipes")
def test_a_named_pipe_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "results.json"
    os.mkfifo(fifo)  # opening it to read would wait for a writer that never comes
    with pytest.raises(GpuprobeError, match="not a regular file"):
        load(fifo)


def test_non_finite_numbers_are_stored_as_null_not_lost(tmp_path: Path) -> None:
    results = _results()
    results.probes["p"].series["curve"]["sm_mhz"] = [float("nan"), 1750.0]
    results.clocks["sm_mhz_measured"] = float("inf")
    save(results, tmp_path / "r.json")
    again = load(tmp_path / "r.json")
    assert again.probes["p"].series["curve"]["sm_mhz"] == [None, 1750.0]
    assert again.clocks["sm_mhz_measured"] is None


def test_each_fact_with_samples_records_what_they_can_detect(tmp_path: Path) -> None:
    results = _results()
    results.facts.append(Fact("device.sm_count", 132.0, "count"))
    save(results, tmp_path / "r.json")
    stored = {f["id"]: f["detection"] for f in json.loads((tmp_path / "r.json").read_text())["facts"]}
    assert stored["device.sm_count"] is None
    record = stored["latency.l2"]
    assert record["samples"] == 3
    assert record["noise_pct"] == pytest.approx(0.5 / 261.0 * 100.0)  # sd 0.5 of 260.5, 261, 261.5
    assert 0.0 < record["detects_pct"] <= 5.0 and record["limit"] == "" and record["needs"] is None
    again = load(tmp_path / "r.json").fact("latency.l2")
    assert again.detection is not None and again.detection.detects_pct == pytest.approx(record["detects_pct"])


@pytest.mark.parametrize("version", [1, SCHEMA_VERSION])
def test_a_file_written_before_detection_was_recorded_still_reads_and_gets_it(tmp_path: Path, version: int) -> None:
    """Schema 1 files, and schema 2 files written before the optional ``detection`` field, have none."""
    fact = {"id": "latency.l2", "value": 261.0, "unit": "cycle", "ci": [259.0, 263.0], "samples": [230.0, 261.0, 292.0]}
    content = {"schema": SCHEMA, "schema_version": version, "device": DEVICE.__dict__, "facts": [fact]}
    (tmp_path / "old.json").write_text(json.dumps(content))
    read = load(tmp_path / "old.json").fact("latency.l2")
    assert read.detection is not None and read.detection.samples == 3
    assert read.detection.noise_pct == pytest.approx(31.0 / 261.0 * 100.0)
    assert read.detection.limit == "a noisy quantity"


# ---------------------------------------------------------------- validation on load (one validator, every reader)

EXPECTED = {"low": 200.0, "high": 300.0, "unit": "cycle", "severity": "warn", "source": "s"}
GOOD_FACT = {"id": "latency.l2", "value": 261.0, "unit": "cycle", "ci": [260.0, 262.0],
             "samples": [260.0, 261.0, 262.0], "expectation": EXPECTED, "verdict": "pass"}  # fmt: skip


def results_text(fact_changes: dict | None = None, device_changes: dict | None = None, **top: object) -> str:
    """A results file's text with one fact and the device changed as given (JSON, NaN and Infinity allowed)."""
    fact = {**GOOD_FACT, **(fact_changes or {})}
    data = {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "device": {**DEVICE.__dict__, **(device_changes or {})},
            "facts": [fact], **top}  # fmt: skip
    return json.dumps(data)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (results_text({"value": float("inf")}), "fact 'latency.l2': value is inf, not a finite number"),
        (results_text().replace("261.0,", "1e999,", 1), "fact 'latency.l2': value is inf, not a finite number"),
        (results_text({"value": float("nan")}), "fact 'latency.l2': value is nan, not a finite number"),
        (results_text({"ci": [260.0, float("inf")]}), "confidence interval bound is inf"),
        (results_text({"samples": [260.0, float("nan")]}), "a sample is nan"),
        (results_text({"converted": {"ns": float("-inf")}}), "value in ns is -inf"),
        (results_text({"ci": "narrow"}), "confidence interval is 'narrow', not a pair of numbers"),
        (results_text({"ci": [1.0, "2"]}), "confidence interval is [1.0, '2'], not a pair of numbers"),
        (results_text({"ci": [262.0, 260.0]}), "confidence interval [262, 260] is reversed"),
        (results_text({"value": "261"}), "value is '261', not a number"),
        (results_text({"value": True}), "value is True, not a number"),
        (results_text({"samples": "many"}), "samples are 'many', not a list of numbers"),
        (results_text({"expectation": {**GOOD_FACT["expectation"], "low": 400.0}}), "range 400 – 300 is reversed"),
        (results_text({"expectation": {**GOOD_FACT["expectation"], "high": float("nan")}}), "expected bound is nan"),
        (results_text({"id": ""}), "a fact's id is '', not a name"),
        (results_text(facts=[]), "it holds no facts: nothing was measured"),
        (json.dumps({"schema": SCHEMA, "schema_version": 2, "device": DEVICE.__dict__}), "it holds no facts"),
        (results_text(device_changes={"sm_count": -132}), "device SM count -132 is not a count of SMs"),
        (results_text(device_changes={"sm_count": 0}), "device SM count 0 is not a count of SMs"),
        (results_text(device_changes={"l2_bytes": -1}), "device l2_bytes -1 is negative"),
        (results_text(device_changes={"mem_clock_mhz": 0.0}), "device mem_clock_mhz 0 is not a clock"),
        (results_text(device_changes={"sm_clock_nominal_mhz": float("inf")}), "sm_clock_nominal_mhz is inf"),
        (results_text(clocks={"sm_mhz_measured": -5.0}), "clocks sm_mhz_measured is -5.0, not a clock in MHz"),
        (results_text(clocks={"sm_mhz_measured": "fast"}), "clocks sm_mhz_measured is 'fast', not a clock in MHz"),
        # the newcomer trial 3's n15-n17, n01, n36, n35 and n23
        (results_text(schema_version=True), "results schema_version is a bool, not an integer"),
        (results_text(schema_version="2"), "results schema_version is a str, not an integer"),
        (results_text(schema_version=1.5), "results schema_version is a float, not an integer"),
        (results_text(schema_version=None), "results schema_version is null, not an integer"),
        (results_text(facts=[GOOD_FACT, {**GOOD_FACT, "value": 999.0, "ci": None, "samples": []}]),
         "invalid results file: fact 'latency.l2' appears twice; cannot tell which one is the measurement"),
        (results_text({"ci": [500.0, 600.0]}), "interval [500, 600] holds neither its value 261 nor a sample"),
        (results_text({"value": -261.0, "samples": [], "ci": None, "converted": {"ns": 150.0}}),
         "fact 'latency.l2': value -261 is 150 in ns: no conversion turns a sign"),
        # n33's "1 cyc (141.8 ns)": the stored time is not the count's at any clock the device runs
        (results_text({"value": 1.0, "samples": [1.0], "ci": [1.0, 1.0], "converted": {"ns": 141.8}},
                      {"sm_clock_nominal_mhz": 1980.0}),
         "1 cycles is 141.8 ns, an SM clock of 7.052 MHz, not one this device runs at (100 – 2178 MHz)"),
        (results_text({"converted": {"ns": 50.0}}, {"sm_clock_nominal_mhz": 1980.0}),
         "261 cycles is 50 ns, an SM clock of 5220 MHz, not one this device runs at (100 – 2178 MHz)"),
        (results_text(created="<b>yesterday</b>"), "created is '<b>yesterday</b>', not an ISO-8601 time"),
        (results_text(created=20251204), "created is a int, not an ISO-8601 time"),
        (results_text(declared_probes={"p": {"family": "alu", "archs": "sm_90", "facts": []}}),
         "declared probe 'p' is {'family': 'alu', 'archs': 'sm_90', '..., not a family and lists of archs and facts"),
        (results_text(declared_probes=["p"]), "corrupt results file (AttributeError"),
    ],
)
def test_a_file_that_no_run_writes_is_refused_in_one_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(text)
    with pytest.raises(GpuprobeError) as info:
        load(path)
    assert str(info.value).startswith(f"{path}: ")
    assert message in str(info.value) and "\n" not in str(info.value)


def test_the_probes_a_run_declares_are_kept_and_a_file_without_them_reads_with_none(tmp_path: Path) -> None:
    results = _results()
    results.declared_probes = {"p": DeclaredProbe("alu", ("sm_90", "sm_90a"), ("latency.l2",))}
    save(results, tmp_path / "r.json")
    again = load(tmp_path / "r.json").declared_probes["p"]
    assert again == results.declared_probes["p"] and again.targets("sm_90a") and not again.targets("sm_80")
    assert load_text(tmp_path, results_text()).declared_probes == {}


def load_text(folder: Path, text: str) -> Results:
    (folder / "text.json").write_text(text)
    return load(folder / "text.json")


def test_a_key_given_twice_is_refused_naming_the_key_and_its_object(tmp_path: Path) -> None:
    """The newcomer trial 3's n04: ``"value": 132.0, "value": 7.0`` read as 7, judged against 132."""
    path = tmp_path / "r.json"
    path.write_text(results_text().replace('"value": 261.0', '"value": 261.0, "value": 7.0', 1))
    with pytest.raises(GpuprobeError) as info:
        load(path)
    expected = "key 'value' appears twice in one object (its id 'latency.l2')"
    assert str(info.value) == f"{path}: invalid results file: {expected}"
    path.write_text(results_text().replace('"name": ', '"name": "GPU A", "name": ', 1))
    with pytest.raises(GpuprobeError, match="key 'name' appears twice in one object \\(its name 'Simulated GPU'\\)"):
        load(path)


def test_an_interval_may_miss_a_value_rounded_to_a_grid_but_not_its_samples(tmp_path: Path) -> None:
    """A line size is a ratio of two capacities rounded to a power of two: its interval is the ratio's, which
    holds its sample, not always the rounded value. A created time gpuprobe wrote, or none, reads."""
    line = {"id": "cache.l1.line_bytes", "value": 128.0, "unit": "byte", "ci": [118.0, 124.0], "samples": [121.0],
            "verdict": "report"}  # fmt: skip
    path = tmp_path / "r.json"
    path.write_text(results_text(facts=[GOOD_FACT, line], created="2026-12-04T13:18:00+00:00"))
    assert load(path).fact("cache.l1.line_bytes").value == 128.0
    path.write_text(results_text(created=""))
    assert load(path).created == ""


def test_a_judgement_without_a_value_is_read_as_invalid_never_as_its_verdict(tmp_path: Path) -> None:
    """A value that was not finite when judged is written as null: the file loads, the verdict does not."""
    path = tmp_path / "r.json"
    path.write_text(results_text({"value": None, "verdict": "pass"}))
    fact = load(path).fact("latency.l2")
    assert fact.verdict == INVALID
    assert fact.detail.startswith("no value in the file, yet a stored verdict 'pass': not judged")


def test_a_valid_file_and_nulls_where_nothing_was_measured_load(tmp_path: Path) -> None:
    path = tmp_path / "r.json"
    path.write_text(results_text({"value": None, "ci": None, "verdict": "not_run"}, clocks={"sm_mhz_measured": None}))
    assert load(path).fact("latency.l2").verdict == "not_run"
    path.write_text(results_text())
    assert load(path).fact("latency.l2").verdict == "pass"


# ---------------------------------------------------------------- provenance: the code, the board, the machine

H200_RUN_1 = Path(__file__).resolve().parent / "data" / "h200_first_run_results.json"


def test_a_results_file_records_the_board_the_host_and_the_code(tmp_path: Path) -> None:
    results = _results()
    results.device = Device(**{**DEVICE.__dict__, "uuid": "e492ee3d" * 4, "serial": "1653824018461"})
    results.environment = {"host": host_record()}
    results.build = {"gpuprobe": code_record(), "cubin_sha256": "2745d023" * 8}
    save(results, tmp_path / "r.json")
    origin = provenance(load(tmp_path / "r.json"))
    assert (origin.uuid, origin.serial) == ("e492ee3d" * 4, "1653824018461")
    assert origin.hostname == socket.gethostname() and origin.version and origin.stage == "full"
    assert origin.board_text() == f"uuid {'e492ee3d' * 4}, serial 1653824018461"
    assert origin.host_text().startswith(f"{socket.gethostname()} (")


def test_a_file_written_before_provenance_reads_with_it_empty() -> None:
    """Run 1 of the H200 (schema 2, no serial, host record or gpuprobe commit): read as it is, nothing invented."""
    results = load(H200_RUN_1)
    origin = provenance(results)
    assert results.device.serial == "" and origin.uuid == "1d3b46dd6c3cac095dbad6c62b2b9261"
    assert (origin.hostname, origin.machine_id, origin.version, origin.commit) == ("vm", "", "", "")
    assert origin.driver == "580.159.04" and origin.cuda_driver == "13.0"  # NVML's driver, and CUDA's
    assert origin.code_text() == "gpuprobe version not recorded"
    assert origin.host_text() == "vm (no machine id recorded)"


def test_provenance_of_another_shape_is_read_as_unrecorded_never_refused() -> None:
    odd = Results(DEVICE, environment={"host": ["vm"], "device_record": {"driver": "unavailable (NotSupported)"}},
                  build={"gpuprobe": {"version": 1, "commit": None, "dirty": "yes"}})  # fmt: skip
    origin = provenance(odd)
    assert (origin.hostname, origin.version, origin.dirty, origin.driver) == ("", "", None, "")


def _git(folder: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(folder), *args], check=True, capture_output=True)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_the_code_record_names_the_commit_and_says_when_the_code_has_uncommitted_changes(tmp_path: Path) -> None:
    (tmp_path / "gpuprobe").mkdir()
    (tmp_path / "gpuprobe" / "__init__.py").write_text("")
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "add", ".")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "one")
    clean = code_record(tmp_path)
    assert re.fullmatch(r"[0-9a-f]{40}", clean["commit"]) and clean["dirty"] is False
    (tmp_path / "reports").mkdir()
    (tmp_path / "reports" / "results.json").write_text("{}")  # a run's output is not code
    assert code_record(tmp_path)["dirty"] is False
    (tmp_path / "gpuprobe" / "new.py").write_text("")
    assert code_record(tmp_path) == {**clean, "dirty": True}


def test_outside_a_checkout_the_code_record_is_the_version_alone(tmp_path: Path) -> None:
    assert code_record(tmp_path) == {"version": code_record(tmp_path)["version"], "commit": None, "dirty": None}
    assert code_record(tmp_path)["version"]  # the installed distribution's, or "unknown"


def test_the_host_record_hashes_the_machine_id(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """machine-id(5): the id must not be published; two VMs named "vm" still differ in its hash and boot id."""
    from gpuprobe.core import results as module

    (tmp_path / "machine-id").write_text("0123456789abcdef0123456789abcdef\n")
    (tmp_path / "boot_id").write_text("5e3c0000-0000-4000-8000-000000000001\n")
    monkeypatch.setattr(module, "MACHINE_ID_FILES", (tmp_path / "absent", tmp_path / "machine-id"))
    monkeypatch.setattr(module, "BOOT_ID_FILE", tmp_path / "boot_id")
    record = host_record()
    assert re.fullmatch(r"[0-9a-f]{16}", record["machine_id"]) and "0123456789abcdef" not in record["machine_id"]
    assert record["boot_id"] == "5e3c0000-0000-4000-8000-000000000001"
    monkeypatch.setattr(module, "MACHINE_ID_FILES", (tmp_path / "absent",))
    assert host_record()["machine_id"] == ""
