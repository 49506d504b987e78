"""The p2p family's facts as matrices: stable per-pair ids, every pair held to its peers, and back.

A pair's fact id ends in ``<src>_<dst>`` (GPU numbers as CUDA gives them in the measuring process):
``p2p.ce.bandwidth.0_1`` is GPU 0's data arriving at GPU 1 by the copy engine, ``p2p.latency.0_1`` a
load by GPU 0 from GPU 1's memory. The ids stay the same from run to run on one node, so ``compare`` and
the fleet report hold each link to itself.

A link far below its peers is what a bad cable, a GPU with an NVLink down or a PCIe link trained at a
lower width looks like: each pair's bandwidth is also given as a fraction of the median of the pairs
joined the same way (NVLink with NVLink, PCIe with PCIe), which the expectations hold to a floor.
"""

from __future__ import annotations

import re
import statistics
from collections.abc import Iterable, Mapping

Pair = tuple[int, int]

BANDWIDTH_KINDS = ("ce", "ce_bidir", "sm_read", "sm_write")
"""The bandwidths measured per pair, in fact-sheet order: copy engine one way and both ways at once, SMs
pulling and pushing."""
KIND_TITLES = {"ce": "copy engine", "ce_bidir": "copy engine, both ways at once", "sm_read": "SM reads (pull)",
               "sm_write": "SM writes (push)", "latency": "load latency"}  # fmt: skip
_PAIR_ID = re.compile(r"^p2p\.(?P<kind>\w+)\.(?P<what>bandwidth|fraction_of_peers)\.(?P<src>\d+)_(?P<dst>\d+)$")
_LATENCY_ID = re.compile(r"^p2p\.latency\.(?P<src>\d+)_(?P<dst>\d+)$")


def ordered_pairs(count: int) -> list[Pair]:
    """Every ordered pair of different GPUs among ``count``: (0, 1), (0, 2), ..., (1, 0), ..."""
    return [(src, dst) for src in range(count) for dst in range(count) if src != dst]


def unordered_pairs(count: int) -> list[Pair]:
    """Each pair of GPUs once, the lower number first."""
    return [(src, dst) for src, dst in ordered_pairs(count) if src < dst]


def suffix(pair: Pair) -> str:
    return f"{pair[0]}_{pair[1]}"


def bandwidth_id(kind: str, pair: Pair) -> str:
    return f"p2p.{kind}.bandwidth.{suffix(pair)}"


def peers_id(kind: str, pair: Pair) -> str:
    return f"p2p.{kind}.fraction_of_peers.{suffix(pair)}"


def latency_id(pair: Pair) -> str:
    return f"p2p.latency.{suffix(pair)}"


def parse(fact_id: str) -> tuple[str, Pair] | None:
    """(kind, pair) of a per-pair bandwidth or latency fact id (kind "latency" for a latency), else None;
    a fraction-of-peers id is not a measurement and gives None."""
    if match := _LATENCY_ID.match(fact_id):
        return "latency", (int(match["src"]), int(match["dst"]))
    match = _PAIR_ID.match(fact_id)
    if match is None or match["what"] != "bandwidth":
        return None
    return match["kind"], (int(match["src"]), int(match["dst"]))


def fraction_of_peers(values: Mapping[Pair, float], joined: Mapping[Pair, str]) -> dict[Pair, float]:
    """Each pair's value over the median of the pairs joined the same way (``joined[pair]``: "nvlink",
    "pcie", ...). A pair alone of its kind is its own peer (1.0): nothing to hold it to."""
    groups: dict[str, list[float]] = {}
    for pair, value in values.items():
        groups.setdefault(joined.get(pair, "unknown"), []).append(value)
    medians = {kind: statistics.median(group) for kind, group in groups.items()}
    return {pair: value / medians[joined.get(pair, "unknown")] for pair, value in values.items()}


def far_below(fractions: Mapping[Pair, float], floor: float) -> list[tuple[Pair, float]]:
    """The pairs under ``floor`` of their peers' median, slowest first."""
    return sorted(((pair, f) for pair, f in fractions.items() if f < floor), key=lambda item: item[1])


def matrix(values: Mapping[Pair, float], count: int) -> list[list[float | None]]:
    """Rows by source GPU, columns by destination; None on the diagonal and where not measured."""
    return [[values.get((src, dst)) for dst in range(count)] for src in range(count)]


def matrices(facts: Iterable[tuple[str, float | None]]) -> dict[str, dict[Pair, float]]:
    """Per kind (``BANDWIDTH_KINDS`` and "latency"), the measured value of each pair, from (id, value)."""
    found: dict[str, dict[Pair, float]] = {}
    for fact_id, value in facts:
        parsed = parse(fact_id)
        if parsed is not None and value is not None:
            found.setdefault(parsed[0], {})[parsed[1]] = float(value)
    return found
