"""What another program printed, as text: UTF-8, any byte that is not shown as U+FFFD, never an error.

The tools gpuprobe runs (ptxas, nvdisasm, NVRTC, a measuring process and the CUDA driver under it)
may print bytes that are not UTF-8: nvdisasm echoes a corrupt cubin's symbol names, a driver may
speak the machine's own encoding. Decoding them strictly ends the command with a
``UnicodeDecodeError`` instead of the tool's message, so every tool's output is decoded as this
module says: pass ``encoding=ENCODING, errors=ERRORS`` to ``subprocess``, or read bytes with
:func:`decoded`.
"""

from __future__ import annotations

ENCODING = "utf-8"
ERRORS = "replace"


def decoded(data: bytes | str) -> str:
    """``data`` as text, each byte that is not UTF-8 shown as U+FFFD; text is returned as it is."""
    return data if isinstance(data, str) else data.decode(ENCODING, ERRORS)
