"""The one exception type that reaches the user as a single line, and the checks of a user's numbers."""

from __future__ import annotations

import math


class GpuprobeError(Exception):
    """A problem the user can act on: bad input, missing tool, no GPU.

    The CLI prints ``str(error)`` on one line and exits non-zero; it never shows a traceback
    for this type.
    """


def require_count(value: int | None, option: str) -> None:
    """A user's count (None: not given) is at least 1; else a one-line GpuprobeError naming ``option``."""
    if value is not None and value < 1:
        raise GpuprobeError(f"{option} must be at least 1, got {value}")


def require_index(value: int | None, option: str) -> None:
    """A user's device index (None: not given) is 0 or more; else a one-line GpuprobeError naming ``option``."""
    if value is not None and value < 0:
        raise GpuprobeError(f"{option} must be a device index of 0 or more, got {value}")


def require_seconds(value: float | None, option: str, zero_ok: bool = False) -> None:
    """A user's number of seconds (None: not given) is finite and positive (or 0, where ``zero_ok``);
    else a one-line GpuprobeError naming ``option``."""
    if value is None or (math.isfinite(value) and (value > 0 or (zero_ok and value == 0))):
        return
    wanted = "at least 0 seconds" if zero_ok else "a positive number of seconds"
    raise GpuprobeError(f"{option} must be {wanted}, got {value}")


class ProbeFailure(Exception):
    """The probe ran but its own check failed (a wrong result, an impossible timing): no facts.

    Raised from a family's ``run()`` or a checked launch; the measuring child records the probe as "failed"."""
