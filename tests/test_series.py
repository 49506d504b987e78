"""Sweeps folded into one row: which facts fold together, and which keep their own row."""

from __future__ import annotations

from gpuprobe.core.results import Fact
from gpuprobe.output.series import Series, fold


def facts(*ids: str, unit: str = "cycle") -> list[Fact]:
    return [Fact(i, float(n + 1), unit) for n, i in enumerate(ids)]


def by_unit(fact: Fact) -> str | None:
    return None if fact.unit == "bool" else fact.unit


def test_a_sweep_over_one_part_folds_in_place() -> None:
    items = fold(facts("a.first", "b.lat.32", "b.lat.64", "b.lat.128", "c.last"), by_unit)
    assert [type(i).__name__ for i in items] == ["Fact", "Series", "Fact"]
    sweep = items[1]
    assert isinstance(sweep, Series)
    assert (sweep.pattern, sweep.labels) == ("b.lat.*", ("32", "64", "128"))
    assert [f.id for f in sweep.facts] == ["b.lat.32", "b.lat.64", "b.lat.128"]


def test_one_fact_is_no_sweep_and_kin_must_agree() -> None:
    (pair,) = fold(facts("host.h2d.latency", "host.d2h.latency"), by_unit)
    assert isinstance(pair, Series) and pair.labels == ("h2d", "d2h")
    assert all(isinstance(i, Fact) for i in fold(facts("b.lat.32"), by_unit))
    mixed = facts("b.lat.32") + facts("b.lat.64", unit="GB/s")
    assert all(isinstance(i, Fact) for i in fold(mixed, by_unit))  # the second has another unit
    kept = facts("b.lat.32", "b.lat.64")
    kept[1].unit = "bool"  # keeps its own row: the sweep is left with one
    assert all(isinstance(i, Fact) for i in fold(kept, by_unit))


def test_the_largest_one_part_sweep_wins_and_two_parts_only_when_none_is_large_enough() -> None:
    ids = [f"alu.{op}.throughput.ilp{n}" for op in ("ffma", "dfma", "imad") for n in (1, 2, 4, 8)]
    items = fold(facts(*ids), by_unit)  # four ILPs per op beat three ops per ILP
    assert [i.pattern for i in items if isinstance(i, Series)] == [f"alu.{op}.throughput.*" for op in
                                                                   ("ffma", "dfma", "imad")]  # fmt: skip
    clocks = ["w.bf16.m64n256k16.ss.clock", "w.tf32.m64n256k8.ss.clock", "w.s8.m64n256k32.ss.clock"]
    (sweep,) = fold(facts(*clocks), by_unit)  # no two differ in one part only: two parts wild
    assert isinstance(sweep, Series)
    assert (sweep.pattern, sweep.labels) == ("w.*.ss.clock", ("bf16.m64n256k16", "tf32.m64n256k8", "s8.m64n256k32"))
    pair_first = fold(facts("w.bf16.m64n256k16.ss.clock", "w.f16.m64n256k16.ss.clock", "w.tf32.m64n256k8.ss.clock"),
                      by_unit)  # fmt: skip
    assert [i.pattern if isinstance(i, Series) else i.id for i in pair_first] == [
        "w.*.m64n256k16.ss.clock", "w.tf32.m64n256k8.ss.clock"]  # fmt: skip
