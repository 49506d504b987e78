"""``gpuprobe expectations [MODEL] [--json]``: the GPU models with expectations, or every expected fact of one."""

from __future__ import annotations

import argparse
import json
import textwrap
from typing import Any

from gpuprobe.core.numbers import fmt_bound, fmt_bytes
from gpuprobe.judge import expectations  # its folders, read when used: a test points them at a copy
from gpuprobe.judge.expectations import (
    SEVERITIES,
    Expectation,
    ModelExpectations,
    families_expecting,
    load_all,
    resolve_model,
)

WRAP = 110  # the lines under the tables: a source or note cited, the families holding a model's facts


def cmd_expectations(args: argparse.Namespace) -> int:
    """The known models, or every expected fact of one."""
    models = load_all()
    if args.model is None:
        if args.json:
            print(json.dumps({"models": [model_json(models[k]) for k in sorted(models)]}, indent=1))
        else:
            print(models_table(models))
            print(f"\n{len(models)} models in {expectations.DEFAULT_DIRECTORY}")
        return 0
    model = resolve_model(args.model, models)
    print(json.dumps(model_json(model), indent=1) if args.json else "\n".join(model_lines(model)))
    return 0


def severity_counts(model: ModelExpectations) -> dict[str, int]:
    """How many of the model's facts have each severity, in ``SEVERITIES`` order."""
    return {s: sum(e.severity == s for e in model.facts.values()) for s in SEVERITIES}


def human_range(expectation: Expectation) -> str:
    """The range in words, with bytes also in binary units: ``41943040–62914560 byte (40 MiB – 60 MiB)``."""
    text = expectation.range_text()
    bounds = [b for b in (expectation.low, expectation.high) if b is not None]
    if expectation.unit != "byte" or not bounds:
        return text
    if len(bounds) == 2 and bounds[0] != bounds[1]:
        return f"{text} ({fmt_bytes(bounds[0])} – {fmt_bytes(bounds[1])})"
    return f"{text} ({fmt_bytes(bounds[0])})"


def models_table(models: dict[str, ModelExpectations]) -> str:
    """One row per model: key, name, cc, fact counts by severity, name patterns."""
    from gpuprobe.core.tables import text_table

    rows = []
    for key in sorted(models):
        model = models[key]
        counts = severity_counts(model)
        patterns = ", ".join(f'"{p}"' for p in model.match)
        if model.exclude:
            patterns += " (not: " + ", ".join(f'"{p}"' for p in model.exclude) + ")"
        rows.append((key, model.name, model.cc, str(len(model.facts)), *(str(counts[s]) for s in SEVERITIES), patterns))
    headers = ("key", "model", "cc", "facts", *SEVERITIES, "matches device names containing")
    return "\n".join(text_table(headers, rows))


class Numbered:
    """Texts numbered by first appearance (``S1``, ``S2``, ...), each listed once after the table that cites it."""

    def __init__(self, prefix: str) -> None:
        self.prefix = prefix
        self.numbers: dict[str, int] = {}

    def ref(self, text: str) -> str:
        if not text:
            return ""
        return f"{self.prefix}{self.numbers.setdefault(text, len(self.numbers) + 1)}"

    def lines(self, title: str) -> list[str]:
        entries = [
            textwrap.fill(text, WRAP, initial_indent=f"{self.prefix}{n}  ".ljust(6), subsequent_indent=" " * 6)
            for text, n in self.numbers.items()
        ]
        return ["", title, *entries] if entries else []


def model_lines(model: ModelExpectations) -> list[str]:
    """One model: how it is matched and where its files are, its datasheet figures and every expected fact
    (range, severity) as tables, then each source (``S3``) and note (``N7``) they cite, listed once."""
    from gpuprobe.core.tables import text_table

    patterns = ", ".join(f'"{p}"' for p in model.match)
    lines = [f"{model.key}: {model.name} (compute capability {model.cc})"]
    lines.append(f"matches device names containing {patterns}")
    if model.exclude:
        lines.append("never names containing " + ", ".join(f'"{p}"' for p in model.exclude))
    lines.append(f"file: {expectations.DEFAULT_DIRECTORY / (model.key + '.toml')}")
    families = families_expecting(model.key)
    if families:
        text = f"and {model.key}'s entries in the expectations.toml of: " + ", ".join(families)
        lines.append(textwrap.fill(text, WRAP, subsequent_indent="    "))
    sources, notes = Numbered("S"), Numbered("N")
    if model.datasheet:
        rows = [(d.key, fmt_bound(d.value), d.unit, sources.ref(d.source), notes.ref(d.note))
                for d in model.datasheet.values()]  # fmt: skip
        headers = ("datasheet figure", "value", "unit", "source", "note")
        lines += ["", *text_table(headers, rows)]
    rows = [
        (fact_id, human_range(e), e.severity, sources.ref(e.source), notes.ref(e.note))
        for fact_id, e in model.facts.items()
    ]
    headers = ("fact", "expected", "severity", "source", "note")
    lines += ["", *text_table(headers, rows)]
    lines.append(f"\n{len(model.facts)} facts: " + ", ".join(f"{n} {s}" for s, n in severity_counts(model).items()))
    return lines + sources.lines("sources") + notes.lines("notes")


def model_json(model: ModelExpectations) -> dict[str, Any]:
    """One model as JSON-ready data."""
    facts = [
        {"id": e.fact_id, "low": e.low, "high": e.high, "unit": e.unit, "severity": e.severity,
         "source": e.source, "note": e.note}
        for e in model.facts.values()
    ]  # fmt: skip
    datasheet = [{"key": d.key, "value": d.value, "unit": d.unit, "source": d.source, "note": d.note}
                 for d in model.datasheet.values()]  # fmt: skip
    return {"key": model.key, "name": model.name, "cc": model.cc, "match": list(model.match),
            "exclude": list(model.exclude), "facts": facts, "datasheet": datasheet}  # fmt: skip


def add_commands(subparsers: Any) -> None:
    """Register ``expectations`` on the ``gpuprobe`` command's subparsers."""
    p = subparsers.add_parser("expectations", help="the GPU models with expectations, or every expected fact of one")
    p.add_argument("model", nargs="?", help="a model key (h100_sxm) or a device name that matches one")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_expectations)
