"""The results and expectations loaders on random and mutated input: a result or one clear error, never
a traceback of another kind, never a hang. (The SASS parser is fuzzed in test_sass_corpus.py, the command on a
seeded corpus of every file it reads in test_fuzz_cli.py.)"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.results import Device, Fact, ProbeOutcome, Results, load, save
from gpuprobe.families.catalog import sections
from gpuprobe.judge.expectations import load_model_file
from gpuprobe.output.report import render_markdown
from tests.helpers.fuzz_corpus import nodes, replaced

EXPECTATIONS = Path(__file__).resolve().parent.parent / "gpuprobe" / "expectations"
FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=12,
)


def valid_results() -> dict[str, Any]:
    device = Device(name="Simulated GPU", cc="9.0", arch="sm_90a", sm_count=132, l2_bytes=50 * 2**20)
    fact = Fact("latency.l2", 261.0, "cycle", (259.0, 263.0), [260.0, 261.0, 262.0], {"ns": 150.0}, "p")
    return Results(device, [fact], {"p": ProbeOutcome("ok", series={"curve": {"x": [1.0]}})}).to_dict()


def mutate(value: Any, rng: random.Random, replacement: Any) -> Any:
    """``value`` with one randomly chosen node (at any depth, the whole included) replaced."""
    path, _ = rng.choice([((), value), *nodes(value)])
    return replaced(value, path, replacement)


def load_or_clear_error(path: Path) -> None:
    """Load the file, and render its fact sheet when it loads: any loadable file can be reported."""
    try:
        results = load(path)
    except GpuprobeError as exc:
        assert "\n" not in str(exc)
        return
    render_markdown(results, {}, sections=sections())


@FUZZ
@given(st.binary(max_size=300))
def test_results_loader_on_random_bytes(tmp_path_factory, data: bytes) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "r.json"
    path.write_bytes(data)
    load_or_clear_error(path)


@FUZZ
@given(st.integers(min_value=0), JSON_VALUES)
def test_results_loader_on_mutated_results(tmp_path_factory, seed: int, replacement: Any) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "r.json"
    path.write_text(json.dumps(mutate(valid_results(), random.Random(seed), replacement)))
    load_or_clear_error(path)


def test_the_unmutated_results_load(tmp_path: Path) -> None:
    save(Results.from_dict(valid_results()), tmp_path / "r.json")
    assert load(tmp_path / "r.json").fact("latency.l2").value == 261.0


def expectations_or_clear_error(path: Path) -> None:
    try:
        load_model_file(path)
    except GpuprobeError as exc:
        assert "\n" not in str(exc)


@FUZZ
@given(st.text(max_size=300))
def test_expectations_loader_on_random_text(tmp_path_factory, text: str) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "some_model.toml"
    path.write_text(text)
    expectations_or_clear_error(path)


TOML_VALUES = ['"x"', "1", "-5", "1e309", "true", '[1, "a"]', "{ a = 1 }", '""', "[]", "nan", "0", "inf", "'\\d['"]


def mutate_toml(text: str, rng: random.Random, edits: int) -> str:
    """``text`` with some assignments given other values, and some lines dropped or repeated."""
    lines = text.splitlines()
    for _ in range(edits):
        index = rng.randrange(len(lines))
        action = rng.choice(("value", "value", "drop", "repeat"))
        if action == "value" and "=" in lines[index]:
            key = lines[index].split("=", 1)[0]
            lines[index] = f"{key}= {rng.choice(TOML_VALUES)}"
        elif action == "drop":
            del lines[index]
        else:
            lines.insert(index, lines[index])
    return "\n".join(lines) + "\n"


@FUZZ
@given(st.integers(min_value=0), st.integers(min_value=1, max_value=4))
def test_expectations_loader_on_mutated_files(tmp_path_factory, seed: int, edits: int) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "h100_sxm.toml"
    path.write_text(mutate_toml((EXPECTATIONS / "h100_sxm.toml").read_text(), random.Random(seed), edits))
    expectations_or_clear_error(path)
