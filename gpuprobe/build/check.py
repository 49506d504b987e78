"""``gpuprobe check``: compile every probe for every arch and hold its SASS to its contract."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from gpuprobe.build.contracts import Violation, check
from gpuprobe.build.cubin import BuiltModule, build_for
from gpuprobe.build.registry import Probe
from gpuprobe.core.arch import Arch
from gpuprobe.core.errors import GpuprobeError

STATUSES = ("ok", "violated", "unsupported", "error")


@dataclass
class CheckResult:
    probe: str
    arch: str
    status: str
    detail: str = ""
    violations: list[Violation] = field(default_factory=list)
    resources: dict[str, Any] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "probe": self.probe,
            "arch": self.arch,
            "status": self.status,
            "detail": self.detail,
            "violations": [{"rule": v.rule, "message": v.message, "sass": v.lines} for v in self.violations],
            "resources": self.resources,
        }


def check_probe(probe: Probe, module: BuiltModule) -> CheckResult:
    kernel = module.listing.kernels.get(probe.kernel)
    if kernel is None:
        return CheckResult(probe.name, module.arch.name, "error", f"kernel {probe.kernel} missing from the cubin")
    resources = {
        "registers": kernel.registers,
        "shared_bytes": kernel.shared_bytes,
        "local_bytes": kernel.local_bytes,
        "spill_store_bytes": kernel.spill_store_bytes,
        "spill_load_bytes": kernel.spill_load_bytes,
        "instructions": len(kernel.instructions),
    }
    violations = check(kernel, list(probe.contract))
    if violations:
        detail = "\n".join(str(v) for v in violations)
        return CheckResult(probe.name, module.arch.name, "violated", detail, violations, resources)
    return CheckResult(probe.name, module.arch.name, "ok", f"{len(probe.contract)} rules hold", [], resources)


def check_all(probes: Iterable[Probe], archs: Iterable[Arch]) -> list[CheckResult]:
    probes = list(probes)
    results: list[CheckResult] = []
    for arch in archs:
        targeted = [p for p in probes if p.supports(arch)]
        for probe in probes:
            if not probe.supports(arch):
                results.append(
                    CheckResult(probe.name, arch.name, "unsupported", f"{probe.family} does not target {arch}")
                )
        if not targeted:
            continue
        try:
            module = build_for(targeted, arch)
        except GpuprobeError as exc:
            results.extend(CheckResult(p.name, arch.name, "error", str(exc)) for p in targeted)
            continue
        results.extend(check_probe(p, module) for p in targeted)
    return results
