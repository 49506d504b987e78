"""The measuring child process: one family's probes on one GPU, reported line by line.

The parent (:mod:`gpuprobe.measure.isolation`) starts ``python -m gpuprobe.measure.child`` with a JSON spec on
stdin. The child checks that the cubin it is handed is the one the parent built and checked (its
SHA-256, ``cubin_sha256`` in the spec), opens the launcher the spec names (``module:factory``,
called with the cubin, the device index, its kernels' PTX signatures and the spec's options) wrapped in the
flight recorder (:mod:`gpuprobe.runner.flight`), then prints ``@@gpuprobe`` event lines on stdout, flushed at once:
``call`` and ``ret`` around every launcher call, ``start`` before a probe runs, ``measured``
(outcome and facts) when it ends, ``state`` (what later probes need, e.g. the measured clock) after
it. A probe that raises
anything but its own check failure is reported ``crashed`` and the child exits 3 at once: its
CUDA context may be poisoned, and a fresh process measures the rest. Everything else a library
prints on stdout is not an event and the parent keeps it only as evidence.
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
from pathlib import Path
from typing import Any, TextIO

from gpuprobe.core.results import Device, strict_json
from gpuprobe.families.base import Request
from gpuprobe.families.catalog import BY_NAME
from gpuprobe.measure.conditions import ConditionRecorder
from gpuprobe.runner.flight import RecordingLauncher

MARKER = "@@gpuprobe "
EXIT_CRASHED = 3
EXIT_ORPHANED = 4
EXIT_WRONG_CUBIN = 5


def file_sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def emit(stream: TextIO, event: str, **fields: Any) -> None:
    stream.write(MARKER + json.dumps({"event": event, **fields}, allow_nan=False) + "\n")
    stream.flush()


def load_factory(spec: str) -> Any:
    """``package.module:callable`` -> the callable."""
    module, _, name = spec.partition(":")
    return getattr(importlib.import_module(module), name)


def measure_probes(spec: dict[str, Any], out: TextIO) -> int:
    """The spec's runnable probes of its family measured in this process, each event written to ``out``."""
    family = BY_NAME[spec["family"]]
    cubin = Path(spec["cubin"])
    expected = spec.get("cubin_sha256")
    if expected and file_sha256(cubin) != expected:
        print(f"{cubin} is not the cubin that was checked (SHA-256 {file_sha256(cubin)}, checked {expected})",
              file=sys.stderr)  # fmt: skip
        return EXIT_WRONG_CUBIN
    parameters = {k: [tuple(p) for p in v] for k, v in spec["parameters"].items()}
    factory = load_factory(spec["launcher"])  # every launch it makes is checked against ``parameters``
    opened = factory(cubin, int(spec.get("device_index", 0)), parameters, **spec.get("launcher_options", {}))
    launcher = RecordingLauncher(
        opened,
        on_call=lambda record: emit(out, "call", record=strict_json(record)),
        on_return=lambda n, ms, error: emit(out, "ret", n=n, ms=ms, error=error),
    )
    settings = family.settings_from(spec["settings"]) if spec.get("settings") else None
    state = dict(spec.get("state", {}))
    device = Device.from_dict(spec["device"])
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
        emit(out, "measured", probe=name, outcome=strict_json(outcome), facts=strict_json(facts))
        emit(out, "state", state=strict_json(state))
    emit(out, "done")
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
    spec = json.loads(sys.stdin.read())
    return measure_probes(spec, sys.stdout)


if __name__ == "__main__":
    sys.exit(main())
