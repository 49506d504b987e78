"""JSON without NaN or infinities, which it has no spelling for: they are written as null, never lose a file."""

from __future__ import annotations

import json
import math
from typing import Any


def strict_json(value: Any) -> Any:
    """NaN and infinities have no JSON spelling: store them as null rather than lose the file."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [strict_json(v) for v in value]
    return value


def strict_dumps(value: Any, **options: Any) -> str:
    """``value`` as compact JSON, a NaN or infinity in it written as null (:func:`strict_json`). The walk that
    finds them is done only where the encoder met one: a run writes its results once a second, and walking every
    sample of every fact each time was most of a write's cost."""
    try:
        return json.dumps(value, allow_nan=False, **options)
    except ValueError:
        return json.dumps(strict_json(value), allow_nan=False, **options)
