"""Random single-cycle pointer chains, built on the host, and where a chase of them must end."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Chain:
    """A random cycle through ``nodes`` nodes that starts (and ends each lap) at node 0.

    ``order[k]`` is the node visited at step k; ``successor[i]`` the node after node i. One cycle
    through every node defeats any prefetcher and makes every node of the footprint part of the
    chase, so the footprint is exactly ``nodes * stride``.
    """

    order: np.ndarray
    successor: np.ndarray

    @property
    def nodes(self) -> int:
        return len(self.order)

    def node_after(self, steps: int) -> int:
        """The node a chase that starts at node 0 reaches after ``steps`` loads."""
        return int(self.order[steps % self.nodes])


def random_cycle(nodes: int, seed: int) -> Chain:
    if nodes < 2:
        raise ValueError(f"a chase needs at least 2 nodes, got {nodes}")
    rng = np.random.default_rng(seed)
    order = np.concatenate(([0], rng.permutation(np.arange(1, nodes, dtype=np.int64)))).astype(np.int64)
    successor = np.empty(nodes, dtype=np.int64)
    successor[order] = np.roll(order, -1)
    return Chain(order=order, successor=successor)
