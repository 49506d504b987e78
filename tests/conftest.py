"""Test-suite setup: simulated runs lock a GPU of their own, never a real one or each other's."""

from __future__ import annotations

import os
import tempfile

import pytest


@pytest.fixture(autouse=True, scope="session")
def private_gpu_locks() -> None:
    """Every simulated device is "local-gpu0": give this test process (and the measuring children it
    starts) a lock directory of its own, so concurrent test runs on one machine do not wait on each other."""
    os.environ["GPUPROBE_LOCK_DIR"] = tempfile.mkdtemp(prefix="gpuprobe-test-locks-")
