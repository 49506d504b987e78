"""Sections, plots and invariants a measurement family declares reach the sheet and the run."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpuprobe.core.results import Device, Fact, Results
from gpuprobe.families import catalog
from gpuprobe.judge import invariants
from gpuprobe.output import factsheet
from gpuprobe.output.sections import Plot, Section
from gpuprobe.output.sheet import sheet_layout

PNG = b"\x89PNG\r\n\x1a\n" + b"toy"
DEVICE = Device(name="Simulated GPU", cc="9.0", arch="sm_90a", sm_count=132, l2_bytes=50 * 2**20)


def _toy_section(png: bytes | None) -> Section:
    plot = Plot("toy_rate", "toy_rate.png", "toy rate vs warps", lambda results, dpi: png)
    return Section("Toy rates", ("toy.",), plot=plot, blurb="Rates of a toy family.")


def _results() -> Results:
    return Results(device=DEVICE, facts=[Fact("toy.rate", 2.0, "op/clk/SM", probe="toy.rate")])


def test_every_family_section_is_on_the_sheet() -> None:
    declared = [s for family in catalog.FAMILIES for s in family.sections]
    layout = sheet_layout(catalog.sections())
    assert all(section in layout for section in declared)
    titles = [family.title for family in layout]
    assert titles[0] == "Memory latency" and titles[-1] == "Cross-generation invariants"


def test_a_family_plot_is_written_and_linked(tmp_path: Path) -> None:
    sections = (*catalog.sections(), _toy_section(PNG))
    paths = factsheet.write_report(_results(), tmp_path, sections=sections)
    assert tmp_path / "toy_rate.png" in paths and (tmp_path / "toy_rate.png").read_bytes() == PNG
    sheet = (tmp_path / factsheet.FACTSHEET_NAME).read_text(encoding="utf-8")
    assert "## Toy rates" in sheet and "![Toy rates: toy rate vs warps](toy_rate.png)" in sheet
    assert factsheet.plot_images(_results(), sections) == {"toy_rate": PNG}


def test_a_plot_with_nothing_to_draw_removes_a_stale_one(tmp_path: Path) -> None:
    (tmp_path / "toy_rate.png").write_bytes(PNG)
    factsheet.write_report(_results(), tmp_path, sections=(*catalog.sections(), _toy_section(None)))
    assert not (tmp_path / "toy_rate.png").exists()
    assert "toy_rate.png" not in (tmp_path / factsheet.FACTSHEET_NAME).read_text(encoding="utf-8")


def test_family_invariants_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    def rate_positive(facts: dict[str, Fact], device: Device) -> list[invariants.Check]:
        fact = facts.get("toy.rate")
        if fact is None:
            return []
        return [invariants.Check("toy.rate_positive", fact.value > 0, f"toy.rate = {fact.value}", (fact.id,))]

    toy = dataclasses.replace(catalog.BY_NAME["selftest"], name="toy", sections=(), invariants=(rate_positive,))
    monkeypatch.setattr(catalog, "FAMILIES", (*catalog.FAMILIES, toy))
    family_checks = catalog.invariant_checks()
    checks = invariants.check_invariants({"toy.rate": Fact("toy.rate", 2.0, "op/clk/SM")}, DEVICE, family_checks)
    assert ("toy.rate_positive", True, "toy.rate = 2.0", ("toy.rate",)) in [c[:4] for c in checks]
    assert not [c for c in invariants.check_invariants({}, DEVICE, family_checks) if c[0] == "toy.rate_positive"]


def test_a_family_check_that_names_no_facts_is_a_bug_not_a_silent_pass(monkeypatch: pytest.MonkeyPatch) -> None:
    """A failed check marks the facts it names: one naming none would leave a PASS beside what it refutes."""
    unnamed = (lambda facts, device: [("toy.unnamed", False, "refutes something")],)
    toy = dataclasses.replace(catalog.BY_NAME["selftest"], name="toy", sections=(), invariants=unnamed)
    monkeypatch.setattr(catalog, "FAMILIES", (*catalog.FAMILIES, toy))
    with pytest.raises(TypeError, match="a Check naming the facts it holds"):
        invariants.check_invariants({}, DEVICE, catalog.invariant_checks())
