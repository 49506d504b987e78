"""The p2p family: SASS contracts on every arch, then every pair of the GPUs this process sees measured.

What is measured and why the kernels are shaped as they are: see the probe docs in ptx/p2p/p2p.toml
(``gpuprobe list``) and gpuprobe/families/p2p/__init__.py. Per-pair facts are declared as patterns
(``p2p.ce.bandwidth.*``): each test holds every pair's fact. With one GPU visible the measured tests skip
("1 GPU visible"); run them in a process that sees the node's GPUs (docs/fleet.md).
"""

from __future__ import annotations

from gpuprobe.pytest_plugin import family_tests

FAMILY = "p2p"
test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests(FAMILY)
