"""Test-suite setup: simulated runs lock a GPU of their own, never a real one or each other's."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator

import pytest

from tests.helpers.processes import measuring_children, wait_until

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



def keep_bytecode_outside_the_checkout() -> None:
    """The tests start hundreds of Python processes (measuring children, CLI and pytest runs), each importing
    gpuprobe. Where the environment says to write no bytecode (PYTHONDONTWRITEBYTECODE), each compiles every
    module again, a sixth of a second a process: those processes (which inherit this environment) write
    their bytecode to a folder of their own instead, outside the checkout."""
    if os.environ.pop("PYTHONDONTWRITEBYTECODE", None) is not None and not os.environ.get("PYTHONPYCACHEPREFIX"):
        os.environ["PYTHONPYCACHEPREFIX"] = os.path.join(tempfile.gettempdir(), "gpuprobe-tests-bytecode")


def pytest_configure(config: pytest.Config) -> None:
    """Under ``-n`` a test module goes to one worker whole (``--dist loadscope``) unless ``--dist`` was
    given: its module fixtures (whole simulated runs, half a minute each) are then made once, not once
    per worker the module's tests were dealt to. And the processes the tests start keep their bytecode."""
    keep_bytecode_outside_the_checkout()
    given = any(arg == "--dist" or arg.startswith(("--dist=", "-d")) for arg in config.invocation_params.args)
    if getattr(config.option, "dist", "no") == "load" and not given:
        config.option.dist = "loadscope"


#: Test modules that run whole simulated suites or wait on measuring processes, longest first. They are
#: collected before the rest, so that under ``-n`` the workers start on them and the many short ones fill
#: in around them: the suite then ends about when its work, halved, is done, not a long module later.
LONGEST_FIRST = ("test_session.py", "test_pytest_plugin.py", "test_isolation.py", "test_wgmma.py",
                 "test_detection.py", "test_readme.py", "test_check_cache.py", "test_fuzz_cli.py")  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    rank = {name: place for place, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(LONGEST_FIRST)))
