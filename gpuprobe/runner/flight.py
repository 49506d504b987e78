"""The flight recorder: every launcher call a measuring process makes, reported as it is made.

A measuring child wraps its launcher in :class:`RecordingLauncher`, which reports each call twice:
once before it runs (the method, kernel, grid, block, dynamic shared bytes and every argument's
type and width, scalars with their value) and once when it returns (the wall milliseconds it took,
or the error it raised). The parent (:mod:`gpuprobe.measure.isolation`) keeps the last :data:`FLIGHT_CALLS`
of them, and writes them into the results with any probe that crashed, timed out or failed its
self-check: a call that never returned is the one that hung, and the calls before a wrong result
say exactly what was launched. So a failure seen once on a real GPU can be read here, with no GPU.

Recording happens around the launcher's methods, never inside them: every timed region is inside
one launcher call (CUDA events or the host clock the launcher itself reads), so recording costs no
measured time. The multi-GPU families' calls (:mod:`gpuprobe.runner.peers`: the group of GPUs, each
GPU's launcher, NCCL's communicator) are recorded the same way, numbered in one sequence with the
launcher's, each named for what it was made on (``peers.time_copies``, ``peers.on(2).launch``).
"""

from __future__ import annotations

import functools
import inspect
import time
from collections.abc import Callable
from typing import Any

import numpy as np

from gpuprobe.runner.launcher import CAPABILITIES, Launcher

FLIGHT_CALLS = 200  # launcher calls kept per measuring process (and written with a failed probe)
UNRECORDED = frozenset({"address", "device", "nvml", "count"})  # pure lookups: no GPU work to diagnose
# Calls whose result is itself a runner object (a GPU's launcher, NCCL's communicator): recorded in turn.
RECORDED_RESULTS = frozenset({"on", "communicator"})


def describe_argument(value: Any) -> str:
    """A kernel argument as the flight record shows it: a scalar's type, width and value; a buffer's size."""
    if isinstance(value, np.generic):
        return f"{value.dtype.name}={value.item()!r}"
    nbytes = getattr(value, "nbytes", None)
    return f"buffer[{nbytes} B]" if isinstance(nbytes, int) else type(value).__name__


def _short(value: Any) -> Any:
    """A call argument as JSON: numbers, texts and dims as they are, a list of kernel arguments described."""
    if isinstance(value, bool | int | float | str) or value is None:
        return value
    if isinstance(value, tuple | list) and all(isinstance(v, int) for v in value):
        return list(value)  # a grid or block
    if isinstance(value, tuple | list):
        return [describe_argument(v) for v in value]
    return describe_argument(value)


@functools.cache
def _signature(method: str) -> inspect.Signature | None:
    """``method``'s signature in the :class:`~gpuprobe.runner.launcher.Launcher` protocol or the capability
    that declares it (None if none does)."""
    found = (getattr(protocol, method, None) for protocol in (Launcher, *CAPABILITIES))
    function = next((f for f in found if callable(f)), None)
    return inspect.signature(function) if function is not None else None


def _bound_arguments(method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any] | None:
    """The call's arguments by their names in the launcher's protocols, or None where they name none."""
    signature = _signature(method)
    try:
        bound = dict(signature.bind(None, *args, **kwargs).arguments) if signature else None
    except TypeError:
        return None
    if bound is not None:
        bound.pop(next(iter(bound)))  # self
    return bound


def describe_call(method: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    """What a launcher call was asked to do, JSON-able, each argument under its name in the launcher's
    protocols (kernel, grid, block, args, shared_bytes, count, ...): kernel arguments as their type and
    width (scalars with their value), buffers as their size."""
    record: dict[str, Any] = {"call": method}
    bound = _bound_arguments(method.rsplit(".", 1)[-1], args, kwargs)
    if bound is None:
        return {**record, "positional": [_short(a) for a in args], **{k: _short(v) for k, v in kwargs.items()}}
    return {**record, **{name: _short(value) for name, value in bound.items()}}


class RecordingLauncher:
    """A launcher that reports every call to ``on_call`` before it runs and to ``on_return`` after.

    ``on_call(record)`` gets :func:`describe_call`'s record with a sequence number ``n``;
    ``on_return(n, elapsed_ms, error)`` gets the same number, the call's wall milliseconds and, if it
    raised, the error's text (the exception still propagates).
    """

    def __init__(
        self,
        launcher: Any,
        on_call: Callable[[dict[str, Any]], None],
        on_return: Callable[[int, float, str | None], None],
        prefix: str = "",
        counter: list[int] | None = None,
    ) -> None:
        self._launcher = launcher
        self._on_call = on_call
        self._on_return = on_return
        self._prefix = prefix  # what the calls are made on, e.g. "peers." (the launcher's own: "")
        self._counter = [0] if counter is None else counter  # one sequence for every recorder of a process

    @property
    def wrapped(self) -> Any:
        """The launcher (or runner object) being recorded."""
        return self._launcher

    def recording(self, other: Any, name: str) -> RecordingLauncher:
        """``other`` (a runner object this launcher's process uses too) recorded in the same sequence, its
        calls named ``name.method``."""
        return RecordingLauncher(other, self._on_call, self._on_return, f"{self._prefix}{name}.", self._counter)

    def __getattr__(self, name: str) -> Any:
        attribute = getattr(self._launcher, name)
        if name.startswith("_") or name in UNRECORDED or not callable(attribute):
            return attribute

        def recorded(*args: Any, **kwargs: Any) -> Any:
            self._counter[0] += 1
            number = self._counter[0]
            self._on_call({"n": number, **describe_call(self._prefix + name, args, kwargs)})
            started = time.perf_counter()
            try:
                result = attribute(*args, **kwargs)
            except BaseException as exc:
                self._on_return(number, (time.perf_counter() - started) * 1e3, f"{type(exc).__name__}: {exc}")
                raise
            self._on_return(number, (time.perf_counter() - started) * 1e3, None)
            if name in RECORDED_RESULTS:
                return self.recording(result, f"{name}({', '.join(repr(a) for a in args)})")
            return result

        return recorded
