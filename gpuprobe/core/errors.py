"""The one exception type that reaches the user as a single line."""


class GpuprobeError(Exception):
    """A problem the user can act on: bad input, missing tool, no GPU.

    The CLI prints ``str(error)`` on one line and exits non-zero; it never shows a traceback
    for this type.
    """
