"""What the commands share: their exit statuses, JSON output and the toolkit warning."""

from __future__ import annotations

import json
import sys

EXIT_FAILED = 1  # a contract violated, a measurement failed, a fact WORSE, an outlier named
EXIT_USAGE = 2  # a user error, said in one line on stderr


def print_json(data: object) -> None:
    print(json.dumps(data, indent=1))


def say_ignored_toolkit_homes() -> None:
    """A warning line on stderr for each ``CUDA_HOME`` / ``CUDA_PATH`` that names no CUDA toolkit."""
    from gpuprobe.kernels.toolchain import ignored_toolkit_homes

    for line in ignored_toolkit_homes():
        print(f"gpuprobe: warning: {line}", file=sys.stderr)
