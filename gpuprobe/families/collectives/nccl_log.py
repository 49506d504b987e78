"""What NCCL's debug log says it did: its version, how it joined the GPUs, the network it used across
nodes, and the algorithm and protocol of each call. Text in, facts about the run out; no GPU.

NCCL writes these with ``NCCL_DEBUG=INFO`` (the INIT subsystem: version, network, the transport of each
channel's connection) and, with ``NCCL_DEBUG_SUBSYS`` including TUNING, one line per collective on rank
0. The lines read here, as NCCL 2.20 to 2.27 print them::

    host:1234:1234 [0] NCCL INFO NCCL version 2.28.9+cuda13.0
    host:1234:1300 [0] NCCL INFO Using network IB
    host:1234:1300 [0] NCCL INFO Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read
    host:1234:1300 [1] NCCL INFO Channel 00/0 : 7[7] -> 8[0] [send] via NET/IB/0/GDRDMA
    host:1234:1234 [0] NCCL INFO AllReduce: 4194304 Bytes -> Algo RING proto SIMPLE channel{Lo..Hi}={0..31}
    host:1234:1234 [0] NCCL INFO 4194304 Bytes -> Algo 1 proto 2 time 36.000000       (NCCL 2.20's form)

A line of another shape is ignored (``Channel 00/64 : 0 1 2``, a ring's order, names no transport): what
cannot be read is reported as not known, never guessed. NCCL 2.28.9 on the lent H200 wrote the version and
network lines as above; one rank alone writes no channel transports and no TUNING line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# NCCL's function names for gpuprobe's collectives (all-to-all is a group of sends and receives)
FUNCTIONS = {"all_reduce": "AllReduce", "all_gather": "AllGather", "reduce_scatter": "ReduceScatter",
             "broadcast": "Broadcast", "all_to_all": "Send"}  # fmt: skip
# nccl_common.h's numbering, for the older numeric form
ALGORITHMS = ("TREE", "RING", "COLLNET_DIRECT", "COLLNET_CHAIN", "NVLS", "NVLS_TREE", "PAT")
PROTOCOLS = ("LL", "LL128", "SIMPLE")

_VERSION = re.compile(r"NCCL INFO NCCL version (\S+)")
_NETWORK = re.compile(r"NCCL INFO Using network (\S+)")
_CHANNEL = re.compile(r"NCCL INFO Channel \d+/\d+ : \d+\[\w+\] -> \d+\[\w+\](?: \[\w+\])? via (\S+)")
_TUNING = re.compile(r"NCCL INFO (\w+): (\d+) Bytes -> Algo (\w+) proto (\w+)")
_TUNING_NUMERIC = re.compile(r"NCCL INFO (\d+) Bytes -> Algo (\d+) proto (\d+)")


@dataclass
class NcclLog:
    """What one log says. ``choices``: (NCCL function or "" in the numeric form, bytes) -> (algorithm,
    protocol), the last seen; ``transports``: each distinct way a channel was connected."""

    version: str = ""
    network: str = ""
    transports: list[str] = field(default_factory=list)
    choices: dict[tuple[str, int], tuple[str, str]] = field(default_factory=dict)

    def choice(self, collective: str, nccl_bytes: int) -> tuple[str, str]:
        """The algorithm and protocol NCCL chose for ``collective`` moving ``nccl_bytes`` (its count times the
        element size, as it prints it); ("", "") where the log does not say."""
        return self.choices.get((FUNCTIONS[collective], nccl_bytes)) or self.choices.get(("", nccl_bytes), ("", ""))

    def fabric(self) -> str:
        """How NCCL joined the ranks, in words: the transports between GPUs, and the network across nodes."""
        parts = []
        if self.transports:
            parts.append("transports " + ", ".join(self.transports))
        if self.network:  # NCCL opens its network at every start, one node or many: what crossing nodes would use
            parts.append(f"network {self.network} (between nodes)")
        return "; ".join(parts) or "not reported"


def parse(text: str) -> NcclLog:
    """The log's version, network, transports and per-call choices (see the module docstring)."""
    log = NcclLog()
    for line in text.splitlines():
        if match := _VERSION.search(line):
            log.version = match[1]
        elif match := _NETWORK.search(line):
            log.network = match[1]
        elif match := _CHANNEL.search(line):
            if match[1] not in log.transports:
                log.transports.append(match[1])
        elif match := _TUNING.search(line):
            log.choices[(match[1], int(match[2]))] = (match[3].upper(), match[4].upper())
        elif match := _TUNING_NUMERIC.search(line):
            algorithm, protocol = int(match[2]), int(match[3])
            if algorithm < len(ALGORITHMS) and protocol < len(PROTOCOLS):
                log.choices[("", int(match[1]))] = (ALGORITHMS[algorithm], PROTOCOLS[protocol])
    return log
