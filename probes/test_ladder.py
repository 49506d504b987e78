"""The ladder family: SASS contracts of its clock stamp on every arch from sm_80, then cuBLAS's and cuBLASLt's GEMM
rates per type against the instruction peak measured at the same clock.

What is measured and why: see the probe docs in ptx/ladder/ladder.toml (``gpuprobe list ladder``) and
gpuprobe/families/ladder/__init__.py.
"""

from __future__ import annotations

from gpuprobe.pytest_plugin import family_tests

FAMILY = "ladder"
test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests(FAMILY)
