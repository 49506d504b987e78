"""The ALU family: SASS contracts on every arch, then the measured latencies and issue rates.

What is measured and why each kernel is shaped as it is: see the probe docs in
ptx/alu/alu.toml, ptx/alu/alu_sm80.toml (``gpuprobe list alu``) and gpuprobe/families/alu/__init__.py.
"""

from __future__ import annotations

from gpuprobe.pytest_plugin import family_tests

FAMILY = "alu"
test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests(FAMILY)
