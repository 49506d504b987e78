"""Numbers written for people: about four significant digits, never scientific; bytes in binary units."""

from __future__ import annotations

import math
from collections.abc import Sequence

_BYTE_UNITS = (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10))


def _decimals(x: float) -> int:
    """Decimals that give ``x`` about four significant digits (0 for large numbers, at most 6)."""
    if not math.isfinite(x) or x == 0:
        return 0
    return min(max(3 - math.floor(math.log10(abs(x))), 0), 6)


def fmt_nums(values: Sequence[float]) -> list[str]:
    """Numbers shown together, at the precision of the first, trailing zeros common to all dropped.

    ``[262.4, 261.9, 263.0]`` -> ``["262.4", "261.9", "263.0"]``; ``[2.0, 2.0]`` -> ``["2", "2"]``.
    """
    decimals = _decimals(values[0])
    texts = [f"{v:.{decimals}f}" if math.isfinite(v) else str(v) for v in values]
    while decimals > 0 and all(t.endswith("0") for t, v in zip(texts, values, strict=True) if math.isfinite(v)):
        decimals -= 1
        texts = [f"{v:.{decimals}f}" if math.isfinite(v) else t for t, v in zip(texts, values, strict=True)]
    return texts


def fmt_num(x: float) -> str:
    """About four significant digits, never scientific, no trailing zeros: 33.42, 262.4, 1.5, 1980."""
    return fmt_nums([x])[0]


def fmt_bound(x: float) -> str:
    """A bound or a summary statistic without float noise: integers as integers, others to six significant digits."""
    if float(x).is_integer() and abs(x) < 1e15:
        return str(int(x))
    return f"{x:.6g}"


def fmt_bytes(n: float) -> str:
    """Bytes in binary units: 1536 -> "1.5 KiB", 50 * 2**20 -> "50 MiB", 512 -> "512 B"."""
    for name, size in _BYTE_UNITS:
        if abs(n) >= size:
            return f"{fmt_num(round(n / size, 2))} {name}"
    return f"{fmt_num(n)} B"
