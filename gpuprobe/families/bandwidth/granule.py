"""The DRAM access granule, measured by the goodput stride sweep: the unit the memory moves per access.

A warp of 4-byte loads whose lanes sit ``s`` words apart touches one ``G``-byte unit per ``G / 4s``
lanes while ``4s < G``, and one unit per lane from ``4s >= G`` on. With DRAM the limit, its useful rate
is the DRAM's rate times ``max(1 / s, 4 / G)``: it halves with every doubling of the stride until the
lanes stand a granule apart, then stays. So the granule is ``4 B x`` the first stride of the sweep whose
doubling no longer halves the useful rate (the ratio rises above 1/sqrt(2), halfway between halving and
flat on a log scale), provided every doubling before it halved. The H200 run of issue 24: 0.576, 0.287,
0.255 TB/s at strides 8, 16, 32: 8 to 16 halves (0.50), 16 to 32 does not (0.89), so G = 64 bytes.

Bytes "moved" are then derived: the units of ``G`` bytes each request touches, times ``G``. That is a
model fed by a measurement, not a counter; the device check reads ``dram__bytes_read.sum`` to witness it.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from gpuprobe.families.bandwidth.patterns import LINE_BYTES, WORD

HALVED = 1 / math.sqrt(2)  # a doubling of the stride whose rate ratio is below this halved the rate


@dataclass(frozen=True)
class Granule:
    """What the stride sweep says of the DRAM's access unit: ``bytes`` (None when the sweep cannot say),
    why not, and the sweep's median useful rates by lane stride in words."""

    bytes: int | None
    rates: dict[int, float]
    why: str = ""

    @property
    def ratios(self) -> list[tuple[int, float]]:
        """(stride s, useful rate at 2s over the rate at s) for each doubling the sweep measured."""
        strides = sorted(self.rates)
        return [(s, self.rates[t] / self.rates[s]) for s, t in itertools.pairwise(strides) if t == 2 * s]

    def describe(self) -> str:
        """The granule and the ratios it was read from, for a probe's note."""
        ratios = ", ".join(f"{s}->{2 * s}: {r:.2f}" for s, r in self.ratios)
        found = f"{self.bytes}-byte granule" if self.bytes else f"no granule ({self.why})"
        return f"{found}, from the useful rate's ratio at each doubling of the stride ({ratios})"


def granule_from_rates(rates: dict[int, float]) -> Granule:
    """The granule from median useful rates of 4-byte loads by lane stride in words (1, 2, 4, ...)."""
    if any(not r > 0 for r in rates.values()):
        return Granule(None, rates, "a stride read no useful bytes")
    partial = Granule(None, rates)
    steps = partial.ratios
    if not steps:
        return Granule(None, rates, "the sweep has no doubling of the stride")
    flat = [s for s, ratio in steps if ratio >= HALVED]
    if not flat:
        beyond = WORD.itemsize * 2 * steps[-1][0]
        return Granule(None, rates, f"every doubling halved the rate: the granule exceeds {beyond} bytes")
    first = flat[0]
    if first == steps[0][0]:
        return Granule(None, rates, f"the rate did not halve from stride {first} to {2 * first}: DRAM is not the limit")
    if any(ratio < HALVED for s, ratio in steps if s > first):
        return Granule(None, rates, f"the rate halves again after it stopped halving at stride {first}")
    unit = WORD.itemsize * first
    if unit > LINE_BYTES:
        return Granule(None, rates, f"a {unit}-byte unit is beyond the {LINE_BYTES}-byte slots requests keep apart")
    return Granule(unit, rates)
