"""One measured run of the suite: build for the local arch, check, measure, judge, write.

The order is the design's data flow. The cubin built and contract-checked here is the cubin the
launcher loads. Results are saved atomically after every probe, so an interrupted run keeps all
it measured (the file says ``partial`` until the run completes).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

from gpuprobe.arch import parse_arch
from gpuprobe.build import build_for
from gpuprobe.check import CheckResult, check_probe
from gpuprobe.expectations import ModelExpectations, judge, match_model
from gpuprobe.families import memory_latency
from gpuprobe.gpu import Launcher
from gpuprobe.invariants import check_invariants
from gpuprobe.registry import all_probes
from gpuprobe.report import gpu_slug, write_report
from gpuprobe.results import Device, Fact, ProbeOutcome, Results, save

RESULTS_NAME = "results.json"


def judge_fact(fact: Fact, model: ModelExpectations | None) -> Fact:
    expectation = model.facts.get(fact.id) if model else None
    fact.expectation = None if expectation is None else {k: v for k, v in asdict(expectation).items() if k != "fact_id"}
    fact.verdict, fact.detail = judge(fact, expectation)
    return fact


def device_facts(device: Device) -> list[Fact]:
    return [
        Fact("device.sm_count", float(device.sm_count), "count", probe="device"),
        Fact("device.l2_bytes", float(device.l2_bytes), "byte", probe="device"),
    ]


def invariant_facts(results: Results) -> list[Fact]:
    facts = {f.id: f for f in results.facts}
    return [
        Fact(f"invariant.{name}", 1.0 if ok else 0.0, "bool", probe="invariants",
             verdict="pass" if ok else "fail", detail=detail)
        for name, ok, detail in check_invariants(facts, results.device)
    ]  # fmt: skip


def clock_during_chases(results: Results) -> float | None:
    """The median SM clock over the long timed regions of the latency sweeps (None if none was long)."""
    values = [
        mhz
        for outcome in results.probes.values()
        for mhz in outcome.series.get("curve", {}).get("sm_mhz", [])
        if isinstance(mhz, float | int)
    ]
    return float(statistics.median(values)) if values else None


def default_out_dir(device: Device) -> Path:
    return Path("reports") / gpu_slug(device.name)


def run_suite(
    device: Device,
    open_launcher: Callable[[Path], Launcher],
    out_dir: Path,
    forced_model: str | None = None,
    settings: memory_latency.Settings | None = None,
) -> Results:
    """Measure every runnable probe on ``device``; write results and fact sheet to ``out_dir``."""
    model = match_model(device.name, forced_model)
    arch = parse_arch(device.arch)
    probes = all_probes()
    module = build_for(probes, arch)
    checks: dict[str, CheckResult] = {p.name: check_probe(p, module) for p in probes if p.supports(arch)}
    launcher = open_launcher(module.cubin)
    results = Results(device=device, clocks={"nvml_before": launcher.nvml()})
    results.facts.extend(judge_fact(f, model) for f in device_facts(device))
    path = out_dir / RESULTS_NAME
    for name, check in checks.items():
        if check.status != "ok":
            results.probes[name] = ProbeOutcome(check.status, check.detail)
    save(results, path)
    runnable = {name for name, check in checks.items() if check.status == "ok"}
    for measured in memory_latency.measure(launcher, module.parameters, device.l2_bytes, runnable, settings):
        if measured.outcome.status == "skipped" and measured.probe in results.probes:
            continue  # keep the contract violation as the reason
        results.probes[measured.probe] = measured.outcome
        results.facts.extend(judge_fact(f, model) for f in measured.facts)
        if measured.probe == "memory.clock" and measured.facts:
            results.clocks["sm_mhz_measured"] = measured.facts[0].value
            results.clocks["samples"] = measured.facts[0].samples
        save(results, path)
    results.clocks["sm_mhz_during_chases"] = clock_during_chases(results)
    results.facts.extend(invariant_facts(results))
    results.clocks["nvml_after"] = launcher.nvml()
    results.clocks["model"] = model.key if model else "unknown (discovery mode)"
    results.partial = False
    save(results, path)
    write_report(results, out_dir)
    return results
