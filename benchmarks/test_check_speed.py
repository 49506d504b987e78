"""Benchmarks of the static check (pytest-benchmark; not tests: they time, they never judge).

Run them with ``.venv/bin/pytest benchmarks/ --benchmark-only``. They sit outside ``testpaths``, so
the ordinary test command never runs them. ``gpuprobe check`` is timed as a user runs it, as a
command (interpreter start, imports and declarations included): cold with an empty cache, warm with
a full one. Parsing the largest arch's listing, finding its loops, holding every probe to its
contract, and NVRTC's compile of the CUDA C++ probes of one arch (the build cost they add to a cold
check, once per arch) are timed in this process.
"""

from __future__ import annotations

import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprobe.core.arch import parse_arch
from gpuprobe.kernels.check import CheckResult, check_probe
from gpuprobe.kernels.cubin import CUDA_SUFFIX, BuiltModule, build_for
from gpuprobe.kernels.cudasource import cuda_module
from gpuprobe.kernels.registry import all_probes
from gpuprobe.kernels.sass import parse_listing
from gpuprobe.kernels.source_tree import SOURCE_ROOT
from gpuprobe.kernels.toolchain import disassemble

LARGEST = parse_arch("sm_90a")  # the arch most families target: the biggest module

REPO = Path(__file__).resolve().parents[1]


def run_check(cache: Path) -> None:
    """``gpuprobe check`` over every probe and arch, as a command, with ``cache`` as its cache."""
    env = {**os.environ, "GPUPROBE_CACHE": str(cache)}
    command = [sys.executable, "-m", "gpuprobe", "check"]
    subprocess.run(command, env=env, cwd=REPO, stdout=subprocess.DEVNULL, check=True)


@pytest.fixture(scope="module")
def warm_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    cache = tmp_path_factory.mktemp("warm-cache")
    run_check(cache)
    return cache


@pytest.fixture(scope="module")
def module() -> BuiltModule:
    return build_for(all_probes(), LARGEST)


def test_check_cold(benchmark, tmp_path: Path) -> None:
    """Every probe on every arch from an empty cache: assembling, disassembling, parsing, checking."""
    caches = (tmp_path / f"cold-{n}" for n in itertools.count())

    def empty_cache() -> tuple[tuple[Path], dict]:
        return (next(caches),), {}

    benchmark.pedantic(run_check, setup=empty_cache, rounds=2, iterations=1)


def test_check_warm(benchmark, warm_cache: Path) -> None:
    """Every probe on every arch with nothing changed since the last check."""
    benchmark.pedantic(run_check, args=(warm_cache,), rounds=5, iterations=1, warmup_rounds=1)


def test_parse_the_largest_listing(benchmark, module: BuiltModule) -> None:
    text = disassemble(module.cubin)
    listing = benchmark(parse_listing, text)
    assert set(listing.kernels) == set(module.listing.kernels)


def test_hold_every_probe_to_its_contract(benchmark, module: BuiltModule) -> None:
    probes = [p for p in all_probes() if p.supports(LARGEST)]

    def check_each() -> list[CheckResult]:
        return [check_probe(p, module) for p in probes]

    results = benchmark(check_each)
    assert len(results) == len(probes)


def test_find_the_loops_of_the_largest_listing(benchmark, module: BuiltModule) -> None:
    """Every kernel's loops (back edges, by dominators: gpuprobe.kernels.flow)."""
    kernels = list(module.listing.kernels.values())
    loops = benchmark(lambda: [kernel.loops for kernel in kernels])
    assert len(loops) == len(kernels)


def test_compile_the_cuda_probes_of_one_arch(benchmark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """NVRTC on every CUDA C++ probe of the largest arch, one translation unit, from an empty cache."""
    sources = sorted({p.source for p in all_probes() if p.supports(LARGEST) and p.source.suffix == CUDA_SUFFIX})
    caches = (tmp_path / f"nvrtc-{n}" for n in itertools.count())

    def empty_cache() -> tuple[tuple, dict]:
        monkeypatch.setenv("GPUPROBE_CACHE", str(next(caches)))
        return (), {}

    generated = benchmark.pedantic(lambda: cuda_module(sources, LARGEST, SOURCE_ROOT), setup=empty_cache, rounds=3,
                                   iterations=1)  # fmt: skip
    assert ".entry gp_coop_grid_sync" in generated.text
