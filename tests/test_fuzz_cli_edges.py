"""The ``gpuprobe`` command's smaller inputs on a seeded corpus: the seconds an earlier run recorded (``run --plan
--calibrate``), arch lists (``check --arch``), the fact ids of an expectation file and the model names
``expectations`` resolves.

Each case is rebuilt from its seed. Where the input is certainly wrong (a number of seconds that is not one, a
run that took far more or less than its plan, ``all`` beside another arch, an expectation of a fact no probe
declares) the command refuses it as a user error: exit 2, one line on stderr, nothing on stdout. Otherwise it
is handled, with no traceback.
"""

from __future__ import annotations

import json
import math
import random
import shutil
import string
from pathlib import Path
from typing import Any

import pytest

import gpuprobe.judge.expectations
from gpuprobe.core.arch import SUPPORTED_ARCHS, parse_arch_list
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.judge.expectations import declared_fact_ids, is_declared, load_all
from gpuprobe.measure.plan import CALIBRATION_LIMITS
from tests.test_cli import run, write
from tests.test_fuzz_cli import EXPECTATIONS, RESULTS, handled_or_refused, refused, rng

CASES = 8  # seeds per test: each takes well under a second

# ---- the seconds of an earlier run ---------------------------------------------------------------------

NOT_SECONDS: list[Any] = ["fast", "12", -1.0, -1e-9, True, [1.0], {"s": 1}, math.nan, math.inf, -math.inf]


def seconds(r: random.Random) -> Any:
    """A recorded number of seconds: mostly plausible, sometimes tiny, huge, missing or not seconds at all."""
    pick = r.random()
    if pick < 0.6:
        return round(r.uniform(0.5, 60.0), 3)
    if pick < 0.75:
        return r.choice([0, 0.0, 1e-9, 1e9, None])
    return r.choice(NOT_SECONDS)


def is_seconds(value: Any) -> bool:
    return value is None or (isinstance(value, int | float) and not isinstance(value, bool) and 0 <= value < math.inf)


@pytest.mark.parametrize("seed", range(CASES))
def test_the_plan_on_an_earlier_run_with_odd_seconds(capsys, tmp_path: Path, seed: int) -> None:
    r = rng("calibrate", seed)
    data = json.loads(RESULTS.read_text())
    for record in data["families"].values():
        record.update(planned_s=seconds(r), actual_s=seconds(r), ended=r.choice(["measured", "measured", "deadline"]))
    path = write(tmp_path / "earlier.json", json.dumps(data, allow_nan=True))
    outcome = run(capsys, "run", "--plan", "--model", "h200", "--calibrate", str(path))
    records = data["families"].values()
    if not all(is_seconds(rec[key]) for rec in records for key in ("planned_s", "actual_s")):
        assert refused(outcome).startswith(f"{path}: families."), outcome
        return
    done = [rec for rec in records if rec["ended"] == "measured" and None not in (rec["planned_s"], rec["actual_s"])]
    planned, actual = (sum(rec[key] for rec in done) for key in ("planned_s", "actual_s"))
    low, high = CALIBRATION_LIMITS
    if planned > 0 and actual > 0 and not low <= actual / planned <= high:
        assert refused(outcome).startswith(f"{path}: its families took x"), outcome
    else:
        assert outcome[0] == 0 and "Traceback" not in outcome[2], outcome


# ---- arch lists ----------------------------------------------------------------------------------------

ARCH_WORDS = ("all", "ALL", " all ", *(a.name for a in SUPPORTED_ARCHS), "90a", "sm_70", "sm_91", "", " ")


@pytest.mark.parametrize("seed", range(CASES))
def test_an_arch_list_is_parsed_or_refused_in_one_line(capsys, seed: int) -> None:
    r = rng("archs", seed)
    text = ",".join(r.choice(ARCH_WORDS) for _ in range(r.randint(1, 4)))
    words = [w.strip().lower() for w in text.split(",") if w.strip()]
    try:
        archs = parse_arch_list(text)
    except GpuprobeError:
        # certainly wrong: refused as the command refuses it, before anything is built
        message = refused(run(capsys, "check", "--arch", text))
        assert ("all" in words and len(words) > 1) == message.startswith("'all' cannot be combined"), message
        return
    assert words == ["all"] or len(archs) == len(words)  # "all" alone, or each arch once


# ---- the fact ids of an expectation file ---------------------------------------------------------------


def misspelt(fact_id: str, r: random.Random) -> str:
    """``fact_id`` with one character dropped, doubled, replaced, or one part dropped."""
    i = r.randrange(len(fact_id))
    letter = r.choice(string.ascii_lowercase + string.digits + "_")
    return r.choice([
        fact_id[:i] + fact_id[i + 1 :],
        fact_id[:i] + fact_id[i] + fact_id[i:],
        fact_id[:i] + letter + fact_id[i + 1 :],
        fact_id.rpartition(".")[0] or fact_id + "x",
    ])  # fmt: skip


@pytest.mark.parametrize("seed", range(CASES))
def test_an_expectation_of_a_misspelt_fact_is_refused_by_every_command_naming_the_file(
    capsys, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, seed: int
) -> None:
    r = rng("fact-id", seed)
    shipped = shutil.copytree(EXPECTATIONS, tmp_path / "expectations")
    model = shipped / "h200.toml"
    text = model.read_text()
    expected = sorted(load_all(shipped)["h200"].facts)
    fact_id = r.choice([f for f in expected if f'[facts."{f}"]' in text])
    typo = misspelt(fact_id, r)
    write(model, text.replace(f'[facts."{fact_id}"]', f'[facts."{typo}"]'))
    monkeypatch.setattr(gpuprobe.judge.expectations, "DEFAULT_DIRECTORY", shipped)
    for argv in (["expectations"], ["expectations", "h200"], ["run", "--plan", "--model", "h200"]):
        message = handled_or_refused(run(capsys, *argv))
        if typo in expected or typo in declared_fact_ids():  # given twice, or another declared fact: said otherwise
            continue
        assert message is not None and message.startswith(f'{model}: facts."{typo}": '), message  # or a bad shape
    assert is_declared(fact_id)


# ---- model names ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(CASES))
def test_a_part_of_a_model_name_resolves_to_one_model_or_is_refused_naming_the_candidates(capsys, seed: int) -> None:
    r = rng("model-name", seed)
    models = load_all()
    name = r.choice([m.name for m in models.values()]).split()
    start = r.randrange(len(name))
    text = " ".join(name[start : start + r.randint(1, 2)])
    outcome = run(capsys, "expectations", text)
    message = handled_or_refused(outcome)
    if message is None:
        assert outcome[1].split(":")[0] in models  # the model it resolved to, first on its first line
    elif "is ambiguous" in message:
        keys = message.split("matches ", 1)[1].split(" (")[0].split(", ")
        assert len(keys) > 1 and set(keys) <= set(models), message
    else:
        assert message.startswith("no GPU model matches"), message
