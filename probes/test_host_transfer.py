"""The host-transfer family: SASS contracts on every arch, then host <-> device transfers measured.

What is measured and why the kernel is shaped as it is: see the probe docs in ptx/host_transfer/host_transfer.toml
(``gpuprobe list host_transfer``) and gpuprobe/families/host_transfer/__init__.py.
"""

from __future__ import annotations

from gpuprobe.pytest_plugin import family_tests

FAMILY = "host_transfer"
test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests(FAMILY)
