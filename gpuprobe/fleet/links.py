"""Nodes' GPU-to-GPU matrices side by side: which link of which node is slow.

``gpuprobe fleet-links DIR_OR_FILE...`` reads results files of the p2p family, one per node (a process that
saw the node's GPUs: ``gpuprobe fleet-run OUT --links DIR``, or the Slurm recipe in docs/fleet.md), and
holds every link to the same link on the other nodes: nodes of one GPU model with as many GPUs are
compared pair by pair (``p2p.ce.bandwidth.3_5`` of node 17 against ``p2p.ce.bandwidth.3_5`` of every
other node), each measured kind on its own (copy engine one way and both ways, SM reads and writes, and
the load latency, where higher is slower). A link is **slow** when it moves less than ``floor`` (0.8 by
default) of the fleet's median for that pair, or takes longer than its median by the same factor; the
report names each slow link with its node, its value, the fleet's median and the node's own median of
that kind (a whole node slow, or one cable), slowest first, and the command exits 1.

With fewer than ``MIN_NODES`` nodes of a kind the fleet's median says little: the node's own median of
the kind is the reference instead (one bad link among a node's 56 still stands out).

Pure parts (:func:`compare_links`, :func:`render`) do no I/O; reading the files is :func:`links_report`.
"""

from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from gpuprobe.core.errors import GpuprobeError
from gpuprobe.core.results import Results, load
from gpuprobe.core.tables import md_table
from gpuprobe.core.text import shown
from gpuprobe.fleet.aggregate import Skipped, discover

DEFAULT_FLOOR = 0.8
MIN_NODES = 3  # fewer nodes of one model and GPU count: each link is held to its own node's median
# The p2p family's per-pair ids (gpuprobe.families.p2p.pairs; the fleet reads results files, not families)
_BANDWIDTH = re.compile(r"^p2p\.(?P<kind>\w+)\.bandwidth\.(?P<src>\d+)_(?P<dst>\d+)$")
_LATENCY = re.compile(r"^p2p\.latency\.(?P<src>\d+)_(?P<dst>\d+)$")


@dataclass(frozen=True)
class Link:
    """One measured link of one node."""

    node: str  # the node's host name, else the results file
    kind: str  # "ce", "ce_bidir", "sm_read", "sm_write" or "latency"
    src: int
    dst: int
    value: float
    unit: str

    @property
    def fact_id(self) -> str:
        if self.kind == "latency":
            return f"p2p.latency.{self.src}_{self.dst}"
        return f"p2p.{self.kind}.bandwidth.{self.src}_{self.dst}"


@dataclass(frozen=True)
class SlowLink:
    link: Link
    reference: float  # what it is held to: the fleet's median of that pair, or the node's of that kind
    node_median: float  # the node's own median of that kind
    fraction: float  # of the reference's speed (for a latency: reference over value)
    held_to: str  # "fleet" or "node"


@dataclass
class LinksReport:
    floor: float
    nodes: int = 0
    links: int = 0
    slow: list[SlowLink] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def exit_status(self) -> int:
        return 1 if self.slow else 0


def node_name(source: str, results: Results) -> str:
    return results.device.hostname or source


def node_links(source: str, results: Results) -> list[Link]:
    """Every measured per-pair fact of one results file."""
    found = []
    for fact in results.facts:
        match = _BANDWIDTH.match(fact.id) or _LATENCY.match(fact.id)
        if match is None or fact.value is None:
            continue
        kind = match.groupdict().get("kind") or "latency"
        found.append(Link(node_name(source, results), kind, int(match["src"]), int(match["dst"]), float(fact.value),
                          fact.unit))  # fmt: skip
    return found


def _speed(kind: str, value: float, reference: float) -> float:
    """How fast ``value`` is against ``reference``: a bandwidth's share of it, a latency's inverse share."""
    return reference / value if kind == "latency" else value / reference


def compare_links(nodes: Iterable[tuple[str, Results]], floor: float = DEFAULT_FLOOR) -> LinksReport:
    """Every link held to the same link of the other nodes of its model and GPU count (or, with too few
    nodes, to its own node's median of the kind); the slow ones, slowest first."""
    if not 0 < floor < 1:
        raise GpuprobeError(f"fleet-links: the floor must be a fraction between 0 and 1, not {floor}")
    report = LinksReport(floor)
    groups: dict[tuple[str, int], list[list[Link]]] = defaultdict(list)  # (model, GPUs) -> each node's links
    for source, results in nodes:
        links = node_links(source, results)
        if not links:
            report.notes.append(f"{source}: no GPU-to-GPU link measured (one GPU visible, or the p2p family not run)")
            continue
        gpus = 1 + max(max(link.src, link.dst) for link in links)
        groups[(results.device.name, gpus)].append(links)
        report.nodes += 1
        report.links += len(links)
    for (model, gpus), members in sorted(groups.items()):
        if len(members) < MIN_NODES:
            report.notes.append(f"{model} x {gpus}: {len(members)} node(s), each link held to its own node's median")
        pair_medians = _medians(link for links in members for link in links)
        for links in members:
            own = _medians(links, by_pair=False)
            for link in links:
                node_median = own[(link.kind, 0, 0)]
                fleet = len(members) >= MIN_NODES
                reference = pair_medians[(link.kind, link.src, link.dst)] if fleet else node_median
                fraction = _speed(link.kind, link.value, reference)
                if fraction < floor:
                    report.slow.append(SlowLink(link, reference, node_median, fraction, "fleet" if fleet else "node"))
    report.slow.sort(key=lambda s: (s.fraction, s.link.node, s.link.kind, s.link.src, s.link.dst))
    return report


def _medians(links: Iterable[Link], by_pair: bool = True) -> dict[tuple[str, int, int], float]:
    """The median value per (kind, src, dst) (``by_pair``), else per kind (keyed (kind, 0, 0))."""
    values: dict[tuple[str, int, int], list[float]] = defaultdict(list)
    for link in links:
        values[(link.kind, link.src, link.dst) if by_pair else (link.kind, 0, 0)].append(link.value)
    return {key: statistics.median(found) for key, found in values.items()}


def links_report(paths: Sequence[str | Path], floor: float = DEFAULT_FLOOR) -> LinksReport:
    """:func:`compare_links` over the results files under ``paths``; unreadable files are skipped with the
    reason, and none readable at all is an error."""
    files, skipped = discover(paths)
    nodes = []
    for file in files:
        try:
            nodes.append((file, load(Path(file))))
        except GpuprobeError as exc:
            skipped.append(Skipped(file, str(exc)))
    if not nodes:
        raise GpuprobeError(f"fleet-links: no readable results file in {', '.join(str(p) for p in paths)}")
    report = compare_links(nodes, floor)
    report.skipped = skipped
    return report


def _row(slow: SlowLink) -> list[str]:
    link = slow.link
    return [link.node, link.fact_id, f"{link.value:.1f} {link.unit}", f"{slow.reference:.1f}", slow.held_to,
            f"{slow.node_median:.1f}", f"{slow.fraction:.0%}"]  # fmt: skip


HEADERS = ["node", "link", "measured", "median", "of", "node's median", "speed"]


def render(report: LinksReport, fmt: str = "text") -> str:
    """The report as text (aligned columns), Markdown, or JSON (schema ``gpuprobe.fleet.links``, version 1)."""
    if fmt == "json":
        data = {"schema": "gpuprobe.fleet.links", "schema_version": 1, "floor": report.floor, "nodes": report.nodes,
                "links": report.links, "slow": [{**asdict(s.link), "fact": s.link.fact_id, "reference": s.reference,
                "held_to": s.held_to, "node_median": s.node_median, "fraction": s.fraction} for s in report.slow],
                "skipped": [asdict(s) for s in report.skipped], "notes": report.notes,
                "exit_status": report.exit_status}  # fmt: skip
        return json.dumps(data, indent=1) + "\n"
    head = (f"{report.links} links of {report.nodes} node(s): {len(report.slow)} slow "
            f"(under {report.floor:.0%} of the same link's median across nodes)")  # fmt: skip
    rows = [[shown(cell) for cell in _row(s)] for s in report.slow]  # a node's or fact's name on one line
    lines = [f"# GPU-to-GPU links across nodes\n\n{head}\n"] if fmt == "md" else [head]
    if rows and fmt == "md":
        lines += md_table(HEADERS, rows)
    elif rows:
        widths = [max(len(r[i]) for r in [HEADERS, *rows]) for i in range(len(HEADERS))]
        lines += [
            "  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in [HEADERS, *rows]
        ]
    lines += [shown(f"skipped {s.path}: {s.reason}") for s in report.skipped]
    lines += [shown(f"note: {n}") for n in report.notes]
    return "\n".join(lines) + "\n"
