"""Test-suite setup: simulated runs lock a GPU of their own, never a real one or each other's."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest

from tests.processes import measuring_children, wait_until

#: How long the measuring children a test process started may take to go once its tests are done.
CHILDREN_GONE_S = 30.0


@pytest.fixture(autouse=True, scope="session")
def private_gpu_locks() -> Iterator[None]:
    """Every simulated device is "local-gpu0": give this test process (and the measuring children it
    starts) a lock directory of its own, so concurrent test runs on one machine do not wait on each other.

    The folder also marks this process's measuring children, so once its tests are done the suite
    fails if any is still alive: no test may leave a process measuring behind it."""
    lock_dir = tempfile.mkdtemp(prefix="gpuprobe-test-locks-")
    os.environ["GPUPROBE_LOCK_DIR"] = lock_dir
    yield
    if not wait_until(lambda: not measuring_children(lock_dir), CHILDREN_GONE_S):
        pytest.fail(f"measuring processes left behind by the tests: {measuring_children(lock_dir)}", pytrace=False)
