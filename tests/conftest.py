"""Test-suite setup: simulated runs lock a GPU of their own, never a real one or each other's."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterator
from itertools import islice
from pathlib import Path

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


TESTS = Path(__file__).resolve().parent

#: Test modules that run whole simulated suites or wait on measuring processes, longest first (by their longest
#: tests in a ``--durations`` run of the suite). Under ``-n`` they are dealt out among the workers' first runs of tests,
#: so that each worker starts on long modules and ends on short tests, which the others take over as they free up
#: (see :func:`pytest_configure` and :func:`dealt_to_workers`).
LONGEST_FIRST = ("test_session.py", "test_readme.py", "test_bandwidth.py", "test_isolation.py", "test_pytest_plugin.py",
                 "test_witness.py", "test_fleet.py", "test_compare.py", "test_check_cache.py", "test_verdicts.py",
                 "test_detection.py", "test_fuzz_cli.py", "test_mma.py", "test_wgmma.py", "test_registry.py",
                 "test_demo.py", "test_p2p.py", "test_cli.py", "test_interrupted_run.py",
                 "test_multi_gpu_run.py")  # fmt: skip


def pytest_configure(config: pytest.Config) -> None:
    """Under ``-n`` the tests are dealt by ``--dist worksteal`` unless ``--dist`` was given: each worker takes a run of
    consecutive tests in the collected order, and one that is done takes half of what another has left. A module's
    tests then mostly run in one worker, its module fixtures (whole simulated runs) made once, yet the long modules
    are shared out as the workers free up, not left to whichever worker a module was dealt to. And the processes
    the tests start keep their bytecode."""
    keep_bytecode_outside_the_checkout()
    given = any(arg == "--dist" or arg.startswith(("--dist=", "-d")) for arg in config.invocation_params.args)
    if getattr(config.option, "dist", "no") == "load" and not given:
        config.option.dist = "worksteal"


def shares_a_module_fixture(item: pytest.Item) -> bool:
    """Whether ``item`` uses a fixture of wider than function scope that its own module defines."""
    module = item.nodeid.split("::", 1)[0]
    info = getattr(item, "_fixtureinfo", None)
    definitions = info.name2fixturedefs.values() if info is not None else ()
    return any(d.scope != "function" and d.baseid.split("::", 1)[0] == module for defs in definitions for d in defs)


@pytest.hookimpl(trylast=True)  # after -m and -k deselected theirs: the runs are of the tests that run
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """:data:`LONGEST_FIRST`, and in each module the tests sharing its module fixtures first: a worker that is done
    takes the last tests of another's run, so that what it takes of a module is its tests of a run of their own,
    not those whose shared fixture the other worker has made already (and this one would make again). Under ``-n``,
    the long modules are dealt out among the workers' runs (:func:`dealt_to_workers`)."""
    rank = {TESTS / name: place for place, name in enumerate(LONGEST_FIRST)}  # not probes/'s files of those names
    collected: dict[Path, int] = {}
    for item in items:
        collected.setdefault(item.path, len(collected))
    module = {path: (rank.get(path, len(rank)), place) for path, place in collected.items()}
    items.sort(key=lambda item: (module[item.path], not shares_a_module_fixture(item)))
    items[:] = dealt_to_workers(items, int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1")), set(rank))


def dealt_to_workers(items: list[pytest.Item], workers: int, long_modules: set[Path]) -> list[pytest.Item]:
    """``items`` (the long modules' first, longest first) in the order that gives each of ``workers`` long modules
    at the start of its first run: worksteal deals the collected order out in consecutive runs (of ``len // workers``
    tests, then of what is left over the workers left), so the first worker would otherwise start on every long
    module and the others on short tests alone. The long modules go to the runs snake-wise (0, 1, 1, 0, ... for two
    workers: each run's long modules come to about as much), each module whole; the short tests fill each run after
    them."""
    if workers < 2:
        return items
    firsts: list[list[pytest.Item]] = [[] for _ in range(workers)]
    modules = list(dict.fromkeys(item.path for item in items if item.path in long_modules))
    for place, path in enumerate(modules):
        lap, turn = divmod(place, workers)
        firsts[turn if lap % 2 == 0 else workers - 1 - turn].extend(i for i in items if i.path == path)
    short = iter([item for item in items if item.path not in long_modules])
    dealt, left = [], len(items)
    for worker, first in enumerate(firsts):
        run = left // (workers - worker)  # what worksteal deals this worker
        left -= run
        dealt += first + list(islice(short, max(0, run - len(first))))
    return dealt + list(short)
