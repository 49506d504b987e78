"""The collectives family: its input kernel's SASS contract on every arch, then NCCL's collectives over
every GPU this process sees, timed as nccl-tests times them and checked element by element.

What is measured: see the probe docs in ptx/collectives/collectives.toml (``gpuprobe list``) and
gpuprobe/families/collectives/__init__.py. With one GPU visible the measured tests skip ("1 GPU
visible"); without the NCCL library (``pip install 'gpuprobe[nccl]'``) on a multi-GPU node they fail,
saying so.
"""

from __future__ import annotations

from gpuprobe.pytest_plugin import family_tests

FAMILY = "collectives"
test_sass_contract, test_probe_ran_and_verified_itself, test_fact = family_tests(FAMILY)
