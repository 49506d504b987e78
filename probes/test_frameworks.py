"""The frameworks family: the clock stamp's SASS contract on every arch from sm_80, then torch.matmul, a Triton
matmul and cuDNN's attention through PyTorch's SDPA, each at its witnessed SM clock and as a fraction of the
instruction peak at that clock (not run, with the reason, where PyTorch, Triton or the backend is missing).

What is measured and why each probe is shaped as it is: see the probe docs in ptx/frameworks/frameworks.toml
(``gpuprobe list frameworks``) and gpuprobe/families/frameworks/__init__.py.
"""

from __future__ import annotations

from gpuprobe.pytest_plugin import family_tests

FAMILY = "frameworks"
test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests(FAMILY)
