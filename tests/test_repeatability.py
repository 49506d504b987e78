"""Repeat mode's arithmetic: differences between runs against the runs' own confidence intervals."""

from __future__ import annotations

import pytest

from gpuprobe.core.results import Device, Fact, Results
from gpuprobe.fleet.repeatability import render_markdown, repeatability

DEVICE = Device(name="Simulated GPU", cc="9.0", arch="sm_90a", sm_count=132, l2_bytes=50 * 2**20)


def run(**values: tuple[float, float]) -> Results:
    """Facts as id -> (value, CI half-width)."""
    facts = [Fact(k.replace("_", "."), v, "cycle", (v - h, v + h) if h else None) for k, (v, h) in values.items()]
    return Results(DEVICE, facts)


def test_differences_are_measured_against_the_intervals() -> None:
    rows = repeatability(
        [run(latency_l2=(260.0, 2.0), latency_l1=(33.0, 0.5)), run(latency_l2=(263.0, 1.0), latency_l1=(33.2, 0.5))]
    )
    by_id = {r.fact_id: r for r in rows}
    assert by_id["latency.l2"].ratio == pytest.approx(3.0 / 3.0)
    assert by_id["latency.l1"].ratio == pytest.approx(0.2 / 1.0)
    assert by_id["latency.l1"].repeatable
    assert rows[0].fact_id == "latency.l2"  # largest ratio first


def test_a_fact_without_noise_is_repeatable_only_when_equal() -> None:
    rows = {
        r.fact_id: r
        for r in repeatability(
            [run(device_a=(132.0, 0), device_b=(1.0, 0)), run(device_a=(132.0, 0), device_b=(2.0, 0))]
        )
    }
    assert rows["device.a"].ratio == 0.0 and rows["device.a"].repeatable
    assert rows["device.b"].ratio is None and not rows["device.b"].repeatable


def test_only_facts_in_every_run_are_compared_and_the_table_names_the_worst() -> None:
    rows = repeatability([run(latency_l2=(260.0, 1.0), latency_dram=(700.0, 5.0)), run(latency_l2=(266.0, 1.0))])
    assert [r.fact_id for r in rows] == ["latency.l2"]
    text = render_markdown(rows)
    assert "**3.00** (latency.l2)" in text and "| **no** |" in text
    with pytest.raises(ValueError):
        repeatability([run()])
