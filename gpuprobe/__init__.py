"""gpuprobe: SASS-checked GPU microarchitecture probes, measured facts, judged per GPU model.

The public names, for scripts (everything else is internal; docs/architecture.md says what lives
where)::

    import gpuprobe

    results = gpuprobe.measure_gpu("out/")              # measure, judge, write results and fact sheet
    base = gpuprobe.load_results("base/results.json")   # a results file, checked
    print(gpuprobe.render_comparison(gpuprobe.compare(base, results)))
    print([probe.name for probe in gpuprobe.all_probes()])

A name's module is imported when the name is first used, so ``import gpuprobe`` itself is cheap.
"""

from __future__ import annotations

import importlib
from typing import Any

#: public name -> (module, attribute)
_EXPORTS: dict[str, tuple[str, str]] = {
    "measure_gpu": ("gpuprobe.api", "measure_gpu"),
    "local_device": ("gpuprobe.api", "local_device"),
    "write_factsheet": ("gpuprobe.api", "write_factsheet"),
    "load_results": ("gpuprobe.core.results", "load"),
    "save_results": ("gpuprobe.core.results", "save"),
    "Results": ("gpuprobe.core.results", "Results"),
    "Fact": ("gpuprobe.core.results", "Fact"),
    "Device": ("gpuprobe.core.results", "Device"),
    "ProbeOutcome": ("gpuprobe.core.results", "ProbeOutcome"),
    "compare": ("gpuprobe.fleet.compare", "compare"),
    "Comparison": ("gpuprobe.fleet.compare", "Comparison"),
    "render_comparison": ("gpuprobe.fleet.compare", "render"),
    "all_probes": ("gpuprobe.kernels.registry", "all_probes"),
    "find_probe": ("gpuprobe.kernels.registry", "find_probe"),
    "Probe": ("gpuprobe.kernels.registry", "Probe"),
    "check_all": ("gpuprobe.kernels.check", "check_all"),
    "CheckResult": ("gpuprobe.kernels.check", "CheckResult"),
    "SUPPORTED_ARCHS": ("gpuprobe.core.arch", "SUPPORTED_ARCHS"),
    "GpuprobeError": ("gpuprobe.core.errors", "GpuprobeError"),
}
__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module 'gpuprobe' has no attribute {name!r}")
    module, attribute = _EXPORTS[name]
    value = getattr(importlib.import_module(module), attribute)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
