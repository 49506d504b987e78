"""What a device check must leave behind, checked on a rehearsal's output folder (exit 1 and why, if not).

    python3 tests/rehearsal/check_outputs.py OUT/<gpu-slug> LAST_DEADLINE_S

The rehearsal packs the plots (PACK_PLOTS=1), so the folder holds exactly eight files: the smoke stage's
results and first-contact page, the full stage's results (with the counters' witness written in) and fact
sheet (partial where the deadline cut the run, with every unmeasured probe ``not_run`` for the deadline),
the log with every stage's end, the environment record, the plots packed in one tar, and the second run
with its comparison and ncu's raw table in another.
"""

from __future__ import annotations

import sys
import tarfile
from pathlib import Path

from gpuprobe.core.results import load
from gpuprobe.runner.peers import ONE_GPU

EXPECTED = {"env.txt", "device-check.log", "smoke-results.json", "first-contact.md", "results.json", "factsheet.md",
            "plots.tar", "repeat.tar"}  # fmt: skip
REPEAT = {"results.json", "factsheet.md", "compare.txt", "run.log", "witness-ncu.csv"}  # what repeat.tar holds


def planned_and_ended(record: dict) -> bool:
    """A family's record has its plan (0 s for a family with too few GPUs) or why none, and how it ended."""
    return (record.get("planned_s") is not None or bool(record.get("plan_error"))) and bool(record.get("ended"))


def problems(folder: Path, deadline_s: float) -> list[str]:
    found = {p.name for p in folder.iterdir()}
    wrong = [f"files: {sorted(found)} is not {sorted(EXPECTED)}"] if found != EXPECTED else []
    if wrong:
        return wrong
    smoke, full = load(folder / "smoke-results.json"), load(folder / "results.json")
    log = (folder / "device-check.log").read_text()
    with tarfile.open(folder / "plots.tar") as plots:
        packed = plots.getnames()
    with tarfile.open(folder / "repeat.tar") as repeat:
        again = set(repeat.getnames())
        compared = repeat.extractfile("compare.txt").read().decode() if "compare.txt" in again else ""
    checks = {
        "the smoke results are a smoke stage": smoke.stage == "smoke",
        "every smoke family is recorded with its planned seconds (or why not) and how it ended": bool(smoke.families)
        and all(map(planned_and_ended, smoke.families.values())),
        "the first-contact page has its verdict": "families ran, passed their self-checks"
        in (folder / "first-contact.md").read_text(),
        "the hung launch timed out in the smoke stage, with the call that never returned": any(
            o.status == "timeout" and o.flight and o.flight[-1].get("elapsed_ms") is None
            for name, o in smoke.probes.items()
            if name.startswith("launch.")
        ),
        "the full run was cut by its deadline and says partial": full.partial
        and any(r.get("ended") in ("deadline", "not_started") for r in full.families.values()),
        "what the deadline cut is not_run for the deadline (the links of one GPU, for want of a second)": all(
            p.detail.startswith("deadline") or p.detail == ONE_GPU
            for p in full.probes.values()
            if p.status == "not_run"
        ),
        "the fact sheet says it is partial": "partial" in (folder / "factsheet.md").read_text().lower(),
        "the plots are packed": bool(packed) and all(name.endswith(".png") for name in packed),
        "the environment record names the toolkit": "ptxas" in (folder / "env.txt").read_text(),
        "every stage ended and the script finished": all(f"stage {n}" in log for n in range(6))
        and "device-check: done after" in log,
        "the smoke stage measured the probes no real run proved, beside the cheapest (the TLB probe's facts were "
        "never written)": "measuring first the" in log and "cache_geometry.tlb" in smoke.probes,
        "the counters' witness wrote its facts into the full run's results, and the sheet shows them": any(
            f.id.startswith("witness.") for f in full.facts
        ) and "witness" in (folder / "factsheet.md").read_text().lower(),
        "the second run, its comparison with the first and ncu's table are packed": again == REPEAT
        and compared.startswith(("WARNING", "gpuprobe compare")) and "summary:" in compared,
        "the build and environment are recorded": bool(full.build.get("cubin_sha256"))
        and "software" in full.environment,
    }
    took = int(log.rsplit("device-check: done after ", 1)[-1].split(" s", 1)[0])
    checks[f"the script ended within a minute and a half of its last deadline, {deadline_s:.0f} s ({took} s)"] = (
        took <= deadline_s + 90
    )
    return [name for name, ok in checks.items() if not ok]


def main() -> int:
    folder, deadline_s = Path(sys.argv[1]), float(sys.argv[2])
    if not folder.is_dir():
        print(f"check_outputs: {folder} was not written", file=sys.stderr)
        return 1
    failed = problems(folder, deadline_s)
    for problem in failed:
        print(f"check_outputs: FAILED: {problem}", file=sys.stderr)
    if not failed:
        print(f"check_outputs: the device check left everything it must in {folder}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
