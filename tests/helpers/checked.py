"""The registered probes' checks as ``gpuprobe check`` makes them: each arch's one module of every probe that
targets it (the module a run measures with), built once per cache and read back after, not a module of one
family's probes built again per test (its own NVRTC, ptxas and nvdisasm). ptxas compiles each kernel on its
own, so a probe's kernel is the same in either; a test of a modified source builds that source itself."""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence

from gpuprobe.core.arch import Arch
from gpuprobe.kernels.check import CheckResult, arch_module, check_all
from gpuprobe.kernels.registry import Probe, all_probes


def contract_results(probes: Sequence[Probe], archs: Iterable[Arch]) -> list[CheckResult]:
    """``check_all(probes, archs)``, read from ``check_all(all_probes(), archs)``: the same results in the same
    order (arch by arch, those it does not target first, each part in the order of ``probes``)."""
    archs = list(archs)
    every = {(r.probe, r.arch): r for r in check_all(all_probes(), archs)}
    assert {p.name for p in probes} <= {name for name, _ in every}, "not a registered probe"
    return [every[p.name, arch.name] for arch in archs for p in sorted(probes, key=lambda p: p.supports(arch))]


measured_module = functools.cache(arch_module)  # one per arch and process, its listing read once
