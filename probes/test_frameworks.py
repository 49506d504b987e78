"""The frameworks family: the clock stamp's SASS contract on every arch from sm_80, then torch.matmul, a Triton
matmul and cuDNN's attention through PyTorch's SDPA, each at its witnessed SM clock and as a fraction of the
instruction peak at that clock.

PyTorch, Triton and cuDNN are optional (gpuprobe never requires them): where one is missing its probe is not run,
with the reason, and its test here skips, naming it (a missing NCCL fails the collectives family's, which the
``nccl`` extra installs; nothing installs these).

What is measured and why each probe is shaped as it is: see the probe docs in ptx/frameworks/frameworks.toml
(``gpuprobe list frameworks``) and gpuprobe/families/frameworks/__init__.py.
"""

from __future__ import annotations

import pytest

from gpuprobe.core.results import Results
from gpuprobe.pytest_plugin import assert_probe_ok, family_probes, family_tests

FAMILY = "frameworks"
test_sass_contract, _, test_fact = family_tests(FAMILY)


@pytest.mark.gpu
@pytest.mark.parametrize("name", [p.name for p in family_probes(FAMILY)])
def test_probe_ran_and_verified_itself(gpuprobe_results: Results, name: str) -> None:
    """Every family's test, but a rung not run here (its library, type or backend missing: the only way this
    family's probes are not run) skips with the reason."""
    outcome = gpuprobe_results.probes.get(name)
    if outcome is not None and outcome.status == "not_run":
        pytest.skip(f"{name}: {outcome.detail}")
    assert_probe_ok(gpuprobe_results, name)
