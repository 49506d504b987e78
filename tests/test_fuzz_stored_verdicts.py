"""Seeded lies about one stored fact, through every reader of a results file (issue 25's stored verdicts).

Each case takes the small extract of the H200's run (tests/data/fuzz/h200_extract_results.json: five facts)
and tells one lie about one of its facts, chosen with the magnitude from the case's seed: a verdict
flipped, a value moved out of its stored range with its verdict kept, a sign flipped, an interval moved off
its value, the expectation's unit changed, the fact given twice, or one of its keys given twice. ``report``,
``compare`` (either side), ``fleet`` and ``index`` then read it, and each ends one of two ways:

* refused, by the one validator, with the same line from every reader (the index lists it as unreadable);
* judged again (:func:`gpuprobe.fleet.reading.read_judged`): no fact reads PASS on a value outside the
  range it is judged against, against a range in another unit, or on a negative quantity.
"""

from __future__ import annotations

import json
import random
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from gpuprobe.fleet.reading import read_judged
from gpuprobe.judge.physics import is_difference
from tests.test_cli import run, write
from tests.test_fuzz_cli import handled_or_refused, refused, rng

RESULTS = Path(__file__).parent / "data" / "fuzz" / "h200_extract_results.json"

Lie = Callable[[dict[str, Any], dict[str, Any], random.Random], str | None]
"""Changes the file (``data``) and its chosen fact in place; returns the file's text where only raw text can
tell the lie (a key given twice), else None."""


def _scaled(fact: dict[str, Any], factor: float) -> None:
    """The fact's value, samples, interval and converted values times ``factor``, so that they still agree."""
    fact["value"] *= factor
    fact["samples"] = [s * factor for s in fact.get("samples", [])]
    fact["converted"] = {unit: v * factor for unit, v in fact.get("converted", {}).items()}
    if fact.get("ci"):
        fact["ci"] = sorted(bound * factor for bound in fact["ci"])


def flip_verdict(data: dict[str, Any], fact: dict[str, Any], r: random.Random) -> None:
    fact["verdict"] = r.choice([v for v in ("pass", "fail", "warn", "unstable", "report") if v != fact["verdict"]])


def move_out_of_range(data: dict[str, Any], fact: dict[str, Any], r: random.Random) -> None:
    _scaled(fact, r.choice([1e-3, 0.05, 20.0, 1e4]))  # the stored verdict stays "pass"


def flip_sign(data: dict[str, Any], fact: dict[str, Any], r: random.Random) -> None:
    _scaled(fact, -r.uniform(0.5, 2.0))


def move_interval(data: dict[str, Any], fact: dict[str, Any], r: random.Random) -> None:
    top = max([fact["value"], *fact.get("samples", [])])
    fact["ci"] = [top * r.uniform(1.5, 3.0), top * r.uniform(3.5, 5.0)]


def change_expected_unit(data: dict[str, Any], fact: dict[str, Any], r: random.Random) -> None:
    fact["expectation"]["unit"] = r.choice([u for u in ("ns", "GB/s", "byte", "count", "us") if u != fact["unit"]])


def give_fact_twice(data: dict[str, Any], fact: dict[str, Any], r: random.Random) -> None:
    twin = json.loads(json.dumps(fact))
    _scaled(twin, r.uniform(2.0, 4.0))
    data["facts"].insert(r.randrange(len(data["facts"]) + 1), twin)


def give_key_twice(data: dict[str, Any], fact: dict[str, Any], r: random.Random) -> str:
    key = r.choice(["value", "verdict", "unit"])
    marker = f'"id": {json.dumps(fact["id"])}'
    text = json.dumps(data)
    return text.replace(marker, f"{marker}, {json.dumps(key)}: {json.dumps(fact[key])}", 1)


LIES: dict[str, tuple[Lie, str | None]] = {  # the lie, and the refusal it must draw (None: judged again)
    "verdict-flipped": (flip_verdict, None),
    "value-out-of-range": (move_out_of_range, None),
    "sign-flipped": (flip_sign, None),
    "interval-off-its-value": (move_interval, "holds neither its value"),
    "expected-unit-changed": (change_expected_unit, None),
    "fact-given-twice": (give_fact_twice, "appears twice; cannot tell which one is the measurement"),
    "key-given-twice": (give_key_twice, "appears twice in one object"),
}
CASES = [pytest.param(lie, seed, id=f"{lie}-{seed}") for lie in LIES for seed in range(2)]


def told(lie: str, seed: int) -> str:
    """The extract's text with the case's lie told about one of its facts."""
    r = rng("stored-verdicts", lie, seed)
    data = json.loads(RESULTS.read_text())
    fact = r.choice([f for f in data["facts"] if f.get("expectation")])
    text = LIES[lie][0](data, fact, r)
    return text or json.dumps(data)


def never_passed_unearned(path: Path) -> None:
    """What every reader shows of the file: no PASS outside its range, against another unit, or below zero."""
    results, _ = read_judged(path)
    for fact in results.facts:
        if fact.verdict != "pass" or fact.id.startswith("invariant."):
            continue
        expected = fact.expectation or {}
        assert expected.get("unit") == fact.unit, fact
        low, high = expected.get("low"), expected.get("high")
        assert (low is None or fact.value >= low) and (high is None or fact.value <= high), fact
        assert fact.value >= 0 or is_difference(fact.id), fact


@pytest.mark.parametrize(("lie", "seed"), CASES)
def test_a_lie_about_a_stored_fact_is_refused_alike_or_judged_again_by_every_reader(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, lie: str, seed: int
) -> None:
    text = told(lie, seed)
    lied = write(tmp_path / "runs" / "run" / "results.json", text)
    good = str(shutil.copy(RESULTS, tmp_path / "good.json"))
    readers = {
        "report": run(capsys, "report", str(lied), "-o", str(tmp_path / "sheet")),
        "compare BASE": run(capsys, "compare", str(lied), good),
        "compare NEW": run(capsys, "compare", good, str(lied)),
        "fleet": run(capsys, "fleet", str(lied)),
    }
    assert run(capsys, "index", str(tmp_path / "runs"))[0::2] == (0, "")
    index = (tmp_path / "runs" / "README.md").read_text()
    refusal = LIES[lie][1]
    if refusal is None:
        assert all(handled_or_refused(outcome) is None for outcome in readers.values()), readers
        never_passed_unearned(lied)
        assert "## Unreadable results" not in index
        return
    lines = {name: refused(outcome) for name, outcome in readers.items()}
    line = lines["report"]
    assert refusal in line and line.startswith(f"{lied}: invalid results file: ")
    assert lines["compare BASE"] == lines["compare NEW"] == line
    assert lines["fleet"] == f"fleet: no readable gpuprobe results ({line})"
    assert "## Unreadable results" in index and refusal in index
