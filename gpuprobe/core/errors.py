"""The one exception type that reaches the user as a single line, and the checks of a user's counts."""


class GpuprobeError(Exception):
    """A problem the user can act on: bad input, missing tool, no GPU.

    The CLI prints ``str(error)`` on one line and exits non-zero; it never shows a traceback
    for this type.
    """


def require_count(value: int | None, option: str) -> None:
    """A user's count (None: not given) is at least 1; else a one-line GpuprobeError naming ``option``."""
    if value is not None and value < 1:
        raise GpuprobeError(f"{option} must be at least 1, got {value}")
