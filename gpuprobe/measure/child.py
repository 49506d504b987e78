"""The measuring child process: family after family on one GPU, each probe reported line by line.

The parent (:mod:`gpuprobe.measure.isolation`) starts ``python -m gpuprobe.measure.child`` and writes it one JSON
spec a line on stdin, a family's each; the child measures them in turn and ends at the end of its input. For the
first spec, and for any that names another launcher or cubin, it checks that the cubin it is handed is the one the
parent built and checked (its SHA-256, ``cubin_sha256`` in the spec) and opens the launcher the spec names
(``module:factory``, called with the cubin, the device index, its kernels' PTX signatures and the spec's options)
wrapped in the flight recorder (:mod:`gpuprobe.runner.flight`); every later family of the run is measured with
that launcher, its module loaded and its CUDA context made once. It prints ``@@gpuprobe`` event lines on stdout,
flushed at once: ``call`` and ``ret`` around every launcher call, ``start`` before a probe runs, ``measured``
(outcome and facts) when it ends, ``state`` (what later probes need, e.g. the measured clock) after it, and
``done`` when the family is measured and its context is still sound (``unsound``, with the error, when not).

A probe that raises anything but its own check failure is reported ``crashed`` and the child exits 3 at once:
its CUDA context may be poisoned, and a fresh process measures the rest. A family that ends with a context that
no longer works (an error a probe left behind without raising it) ends the process too, with exit status 6,
so the next family starts in a fresh one. Everything else a library prints on stdout
is not an event and the parent keeps it only as evidence.
"""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import json
import os
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from gpuprobe.core.results import Device
from gpuprobe.core.strict import strict_dumps
from gpuprobe.families import catalog
from gpuprobe.families.base import Request
from gpuprobe.measure.conditions import ConditionRecorder
from gpuprobe.runner.flight import RecordingLauncher
from gpuprobe.runner.launcher import Launcher

MARKER = "@@gpuprobe "
EXIT_CRASHED = 3
EXIT_ORPHANED = 4
EXIT_WRONG_CUBIN = 5
EXIT_POISONED = 6
SOUND_BYTES = 16  # the buffer a family's end fills and reads back: any error the context holds surfaces


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def emit(stream: TextIO, event: str, **fields: Any) -> None:
    stream.write(MARKER + strict_dumps({"event": event, **fields}) + "\n")
    stream.flush()


def load_factory(spec: str) -> Any:
    """``package.module:callable`` -> the callable."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def launcher_key(spec: dict[str, Any]) -> str:
    """What a spec's launcher is opened from: specs that agree on it are measured with one launcher."""
    keys = ("launcher", "launcher_options", "device_index", "cubin", "cubin_sha256", "parameters")
    return json.dumps([spec.get(key) for key in keys], sort_keys=True)


@dataclass
class Opened:
    """The launcher this process opened (its module loaded, its context made), and the spec key it was opened for."""

    key: str
    launcher: Launcher  # as opened, unrecorded: the family's end checks its context through it
    recording: RecordingLauncher  # what the families measure through


def open_launcher(spec: dict[str, Any], out: TextIO) -> Opened | int:
    """The spec's launcher, opened on the cubin it names once its SHA-256 is the one checked; else the exit status."""
    cubin = Path(spec["cubin"])
    expected = spec.get("cubin_sha256")
    if expected and file_sha256(cubin) != expected:
        print(f"{cubin} is not the cubin that was checked (SHA-256 {file_sha256(cubin)}, checked {expected})",
              file=sys.stderr)  # fmt: skip
        return EXIT_WRONG_CUBIN
    parameters = {k: [tuple(p) for p in v] for k, v in spec["parameters"].items()}
    factory = load_factory(spec["launcher"])  # every launch it makes is checked against ``parameters``
    opened = factory(cubin, int(spec.get("device_index", 0)), parameters, **spec.get("launcher_options", {}))
    recording = RecordingLauncher(
        opened,
        on_call=lambda record: emit(out, "call", record=record),
        on_return=lambda n, ms, error: emit(out, "ret", n=n, ms=ms, error=error),
    )
    return Opened(launcher_key(spec), opened, recording)


def context_problem(launcher: Launcher) -> str | None:
    """What is wrong with the launcher's context, if a fill and a read-back of a few bytes fail (None: sound)."""
    try:
        buffer = launcher.alloc(SOUND_BYTES)
        launcher.fill(buffer, 0)
        launcher.read(buffer, "uint8", SOUND_BYTES)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


def measure_probes(spec: dict[str, Any], out: TextIO, opened: Opened) -> None:
    """The spec's runnable probes of its family measured with ``opened``, each event written to ``out`` (the family's
    package imported now, if an earlier spec's did not: a process imports the families it measures alone)."""
    family = catalog.family(spec["family"])
    launcher = opened.recording
    parameters = {k: [tuple(p) for p in v] for k, v in spec["parameters"].items()}
    settings = family.settings_from(spec["settings"]) if spec.get("settings") else None
    state = dict(spec.get("state", {}))
    device = Device.from_dict(spec["device"])
    cubin = Path(spec["cubin"])
    begin = getattr(opened.launcher, "begin_family", None)  # the simulated GPU's: its noise restarts per family
    if begin is not None:
        begin(spec["family"])
    probes = family.measure(Request(launcher, parameters, device, set(spec["runnable"]), settings, state, cubin))
    recorder = ConditionRecorder(launcher, parameters, bool(spec.get("clock_usable")), state)
    for name, measure_probe in probes:
        emit(out, "start", probe=name)
        try:  # a failed self-check (ProbeFailure) is the outcome "failed": the process is sound
            measured = recorder.measure(name, measure_probe)
        except Exception as exc:  # a CUDA error or worse: this process's context is not to be trusted
            detail = f"{type(exc).__name__}: {exc}"
            emit(out, "measured", probe=name, outcome={"status": "crashed", "detail": detail}, facts=[])
            traceback.print_exc(file=sys.stderr)
            sys.stderr.flush()
            os._exit(EXIT_CRASHED)  # no interpreter teardown: freeing a poisoned CUDA context can hang
        outcome = dataclasses.asdict(measured.outcome)
        facts = [dataclasses.asdict(f) for f in measured.facts]
        emit(out, "measured", probe=name, outcome=outcome, facts=facts)
        emit(out, "state", state=state)
    problem = context_problem(opened.launcher)
    if problem is not None:  # the next family must not inherit it: a fresh process will measure it
        emit(out, "unsound", detail=problem)
        os._exit(EXIT_POISONED)
    emit(out, "done")


def serve(specs: TextIO, out: TextIO) -> int:
    """Every spec ``specs`` holds (one JSON spec a line) measured in turn; the exit status."""
    opened: Opened | None = None
    while line := specs.readline():
        if not line.strip():
            continue
        spec = json.loads(line)
        if opened is None or opened.key != launcher_key(spec):
            made = open_launcher(spec, out)
            if isinstance(made, int):
                return made
            opened = made
        measure_probes(spec, out, opened)
    return 0


def exit_when_orphaned(poll_s: float = 0.5) -> None:
    """End this process if its parent dies: a killed run must not leave a child measuring the GPU."""
    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(poll_s)
        os._exit(EXIT_ORPHANED)

    threading.Thread(target=watch, daemon=True).start()


def main() -> int:
    exit_when_orphaned()
    return serve(sys.stdin, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
