"""``gpuprobe witness RESULTS.json``: Nsight Compute's counters beside the bytes the probes say they moved.

ncu wraps a second measurement of the witnessed probes (:mod:`.run`: the one runner, the full run's shapes, one
sample each) and counts each launch of their kernels (:mod:`.ncu`); its CSV (:mod:`.counters`) is paired with the
witness run's launches and held to the full run's claims (:mod:`.compare`), and the comparison is written into
RESULTS.json as ``witness.*`` facts,
judged by :func:`gpuprobe.judge.verdicts.judge_witness` (more than 10 % apart: WARN), for the fact sheet to
show (``gpuprobe report``). Everything ncu leaves lands in DIR (default: ``witness/`` beside RESULTS.json):
``ncu.csv``, ``ncu-output.txt`` (the run's own output) and ``run/`` (the witness run's results).

No ncu, or an ncu that may not read the counters (ERR_NVGPUCTRPERM), is one line and exit status 0: the stage
is skipped, not failed. A tool that is not ncu, an ncu that fails or overruns ``timeout_s``, a CSV that is
not ncu's, or a witness run on another GPU is a GpuprobeError (one line, exit status 2).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.files import make_dirs, read_text
from gpuprobe.core.results import Fact, Results, load, save
from gpuprobe.judge.verdicts import judge_fact
from gpuprobe.measure.witness.compare import witness_facts
from gpuprobe.measure.witness.counters import Counted, MalformedCsv, parse_raw
from gpuprobe.measure.witness.ncu import (
    TOOLKIT_HOMES,
    Ran,
    check_tool,
    find_ncu,
    profile_command,
    refusal,
    run_bounded,
    tool_errors,
)
from gpuprobe.measure.witness.run import chosen_probes, measuring_command
from gpuprobe.output.witness import FIGURES, NOTED, split_id

SKIPPED = "gpuprobe witness: skipped:"


def witness(
    results_path: Path,
    out_dir: Path | None,
    ncu: str | None,
    families: Sequence[str] | None,
    timeout_s: float,
    device_index: int = 0,
) -> int:
    """Run the witness (see the module) for ``results_path``; the exit status."""
    results = load(results_path)
    probes = chosen_probes(families)
    tool = find_ncu(ncu)
    if tool is None:
        homes = ", ".join(f"{h}/bin" for h in TOOLKIT_HOMES)
        print(f"{SKIPPED} no ncu (Nsight Compute) on PATH, in $CUDA_HOME/bin or {homes}: nothing counts the bytes")
        return 0
    out = make_dirs(out_dir if out_dir is not None else results_path.parent / "witness")
    version = check_tool(tool, out / "ncu-version.txt")
    log, run_dir = out / "ncu.csv", out / "run"
    log.unlink(missing_ok=True)
    kernels = probe_kernels()
    command = profile_command(tool, log, [kernels[p] for p in probes], measuring_command(probes, run_dir, device_index))
    ran = run_bounded(command, timeout_s, out / "ncu-output.txt")
    said = read_text(log) if log.is_file() else ""
    refused = refusal(f"{said}\n{ran.output}")
    if refused:
        print(f"{SKIPPED} ncu may not read the GPU's performance counters here: {refused}")
        return 0
    counted = counted_launches(said, ran, log)
    witness_run = witness_results(run_dir, ran)
    require_same_gpu(results, witness_run)
    facts = judged_facts(probes, kernels, witness_run, counted, results)
    record(results, facts, {"ncu": str(tool), "version": version, "probes": probes, "csv": str(log)})
    save(results, results_path)
    report(facts, results_path, log)
    return 0


def counted_launches(said: str, ran: Ran, log: Path) -> list[Counted]:
    """Every launch ncu counted; where its CSV cannot be read, ncu's own complaint if it made one."""
    try:
        return parse_raw(said, str(log))
    except MalformedCsv:
        errors = tool_errors(f"{said}\n{ran.output}")
        if errors:
            raise GpuprobeError(f"ncu failed (exit status {ran.returncode}): {errors[0]}") from None
        raise


def witness_results(run_dir: Path, ran: Ran) -> Results:
    """The witness run's results; a GpuprobeError with its last words when it wrote none."""
    path = run_dir / "results.json"
    if not path.is_file():
        lines = [line.strip() for line in ran.output.splitlines() if line.strip()]
        last = lines[-1] if lines else "nothing"
        raise GpuprobeError(f"the witness run wrote no {path} (ncu exit status {ran.returncode}; it last said: {last})")
    return load(path)


def require_same_gpu(results: Results, witness_run: Results) -> None:
    """The witness measured the GPU the results came from (its UUID, else its name)."""
    mine, theirs = witness_run.device, results.device
    same = mine.uuid == theirs.uuid if mine.uuid and theirs.uuid else mine.name == theirs.name
    if not same:
        raise GpuprobeError(
            f"the results are of {theirs.name} ({theirs.uuid or 'no UUID'}), the witness ran on {mine.name} "
            f"({mine.uuid or 'no UUID'}): run it on the GPU that measured them"
        )


def probe_kernels() -> dict[str, str]:
    """Each probe's kernel, as its ``.toml`` declares it."""
    from gpuprobe.kernels.registry import all_probes

    return {p.name: p.kernel for p in all_probes()}


def judged_facts(
    probes: Sequence[str], kernels: dict[str, str], witness_run: Results, counted: Sequence[Counted], suite: Results
) -> list[Fact]:
    """Every witnessed probe's facts (:func:`.compare.witness_facts`: the witness run's launches held to the
    ``suite``'s claims), judged."""
    facts = [
        f for p in probes for f in witness_facts(p, kernels[p], witness_run.probes.get(p), counted, suite.probes.get(p))
    ]
    return [judge_fact(f, None) for f in facts]


def witnessed_probe(fact: Fact) -> str | None:
    """The probe a witness fact is of; None for any other fact."""
    where = split_id(fact.id)
    return where[0] if where else None


def record(results: Results, facts: list[Fact], how: dict[str, object]) -> None:
    """``facts`` in place of the witness facts the results held of the same probes, and how they were counted."""
    witnessed = {witnessed_probe(f) for f in facts}
    results.facts = [f for f in results.facts if witnessed_probe(f) not in witnessed] + facts
    results.environment["witness"] = how


def report(facts: Sequence[Fact], results_path: Path, log: Path) -> None:
    """Each comparison that did not agree (or could not be made), then what was written where."""
    comparisons = [f for f in facts if (split_id(f.id) or ("", "", ""))[2] not in FIGURES]
    for fact in comparisons:
        if fact.verdict in NOTED:  # printed with its detail; the others in the count
            print(f"{fact.verdict.upper():8} {fact.id}: {fact.detail}")
    counts = {v: sum(f.verdict == v for f in comparisons) for v in ("pass", "warn", "fail", "not_run")}
    summary = ", ".join(f"{n} {v.replace('_', ' ')}" for v, n in counts.items() if n)
    print(f"wrote {len(facts)} witness facts into {results_path} ({summary or 'no comparison'}); ncu's CSV: {log}")
    print(f"gpuprobe report {results_path} shows them in the fact sheet")
