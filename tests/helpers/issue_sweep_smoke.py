"""The smoke stage of an issue-sweep family (alu, mma) measured beside the full run's settings."""

from __future__ import annotations

from gpuprobe.families.base import Family
from gpuprobe.families.issue_sweep import Settings
from gpuprobe.simulated.gpu import measure_family, simulated_gpu


def _shape(series: dict) -> tuple | None:
    """A sweep's configurations: each point's ILP and warps per SM (None: no sweep)."""
    sweep = series.get("sweep")
    return None if sweep is None else (sweep["ilp"], sweep["warps_per_sm"])


def smoke_rates_of_the_full_run_s_shape(family: Family) -> dict[str, float | None]:
    """The smoke stage's facts, after checking each probe passed and published the full run's fact ids from
    the full run's sweep configurations (fewer iterations and samples only)."""
    probes = set(family.smoke.probes)
    smoke = measure_family(family, simulated_gpu(sm_count=2), probes, family.smoke.settings)
    full = measure_family(family, simulated_gpu(sm_count=2), probes, Settings(sampling=Settings().sampling.at_most(2)))
    assert {m.outcome.status for m in smoke.values()} == {"ok"}
    for name, measured in smoke.items():
        assert [f.id for f in measured.facts] == [f.id for f in full[name].facts], name
        assert _shape(measured.outcome.series) == _shape(full[name].outcome.series), name
    return {f.id: f.value for m in smoke.values() for f in m.facts}
