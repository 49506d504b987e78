"""The sheet's probe status is truthful: a run cut short lists every probe it never ran, never "all ok"."""

from __future__ import annotations

from gpuprobe.core.results import Device, Fact, ProbeOutcome, Results
from gpuprobe.families.catalog import sections
from gpuprobe.output import probe_status, report

DEVICE = Device(name="Simulated GPU", cc="9.0", arch="sm_90a", sm_count=132, l2_bytes=50 * 2**20)
MEMORY = ["memory.clock", "memory.latency.global_ca", "memory.latency.global_cg"]
WARP = ["warp.shfl.idx", "warp.vote.any"]


def interrupted() -> Results:
    """A run stopped during its first family: the session recorded both families' probes up front."""
    families = {
        "memory": {"planned_s": 9.0, "actual_s": 3.0, "probes": 3, "probe_names": MEMORY, "ended": "interrupted"},
        "warp": {"planned_s": 2.0, "actual_s": None, "probes": 2, "probe_names": WARP, "ended": "not_started"},
    }
    probes = {"memory.clock": ProbeOutcome("ok"), "memory.latency.global_ca": ProbeOutcome("ok")}
    return Results(DEVICE, [Fact("device.sm_clock", 1755.0, "MHz")], probes, families=families, partial=True)


def test_an_interrupted_runs_sheet_lists_the_probes_it_never_ran() -> None:
    sheet = report.render_markdown(interrupted(), {}, sections=sections())
    assert "**Probes:** 2 of 5 probes ran: 2 ok; 3 never ran." in sheet
    status = sheet.split("## Probe status\n", 1)[1]
    assert "ended ok" not in sheet  # what the old sheet said of such a run: "All 2 probes ended ok."
    assert "| `memory.latency.global_cg`, `warp.shfl.idx`, `warp.vote.any` | NEVER RAN |" in status
    assert "PARTIAL RUN" in sheet


def test_a_file_written_before_probe_names_were_recorded_counts_what_is_missing() -> None:
    results = interrupted()
    for record in results.families.values():
        del record["probe_names"]
    tally = probe_status.tally(results)
    assert (tally.recorded, tally.missing, tally.planned) == (2, 3, 5)
    assert tally.unnamed_missing == {"memory": 1, "warp": 2}
    status = report.render_markdown(results, {}, sections=sections()).split("## Probe status\n", 1)[1]
    assert "| `memory.* (1 probe)`, `warp.* (2 probes)` | NEVER RAN | the run ended before it" in status


def test_a_complete_run_lists_only_what_went_wrong() -> None:
    results = interrupted()
    results.probes["memory.latency.global_cg"] = ProbeOutcome("timeout", "ran past its 60 s limit")
    results.probes |= {name: ProbeOutcome("ok") for name in WARP}
    assert probe_status.summary(results) == "5 of 5 probes ran: 4 ok, 1 timeout."
    (problem,) = probe_status.problems(results)
    assert (problem.probes, problem.status, problem.detail) == (
        ("memory.latency.global_cg",), "TIMEOUT", "ran past its 60 s limit"
    )


def test_a_long_detail_is_cut_and_the_measuring_processes_stderr_left_in_the_file() -> None:
    detail = "ValueError: boom; child exit status 3; stderr: Traceback ... | File x.py, line 3"
    assert probe_status.short_detail(detail) == "ValueError: boom; child exit status 3"
    assert probe_status.short_detail("x" * 500).endswith("…") and len(probe_status.short_detail("x" * 500)) == 240
