"""The mma family: SASS contracts on every arch (native or emulated), then the measured mma.sync latencies and rates.

What is measured and why each kernel is shaped as it is: see the probe docs in
ptx/mma*.toml (``gpuprobe list mma``) and gpuprobe/families/mma/__init__.py.
"""

from __future__ import annotations

from gpuprobe.pytest_plugin import family_tests

FAMILY = "mma"
test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests(FAMILY)
