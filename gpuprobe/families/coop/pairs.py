"""Which hand-written kernel each C++ probe stands beside, per arch, and how the two are measured.

A pair is a C++ probe of ptx/coop/ and its PTX twin: the kernel of a probe of another family that
does what the abstraction wraps, chosen per arch where the abstraction compiles differently (a tile
reduction is redux.sync where CG uses REDUX, a shuffle butterfly elsewhere). Both kernels are in the
one cubin, so the coop family launches both, a sample of one then a sample of the other, under the
same conditions; the facts are the C++ cost, the twin's, and their ratio.

Where the C++ kernel compiles to the twin's instructions and more (its contract pins it), the twin
bounds it from below (``floor``): an abstraction cannot be faster than the instructions it wraps,
beyond noise. Elsewhere (another instruction: REDUX.MIN beside REDUX.SUM, a generic ATOM beside
ATOMG, a cluster barrier without .aligned beside one with it) the ratio is reported only.

CUB's block collectives have no hand-written kernel in another family: each probe declares its own (the
small asm kernels of ptx/coop/cub.cu, the probe's twin in the registry's sense: held to the probe's
contract with the twin's vars), which :attr:`Twin.own` names. CUB's warp collectives also stand beside
the cooperative-groups kernel of the same operation (:data:`CG_TWINS`), whose cost the run measured
as that probe's.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuprobe.core.arch import Arch
from gpuprobe.kernels.contracts import Rule, check
from gpuprobe.kernels.registry import find_probe
from gpuprobe.kernels.sass import Listing

REDUX_ARCH = 80  # redux.sync (REDUX): sm_80 and newer
CP_ASYNC_ARCH = 80  # cp.async (LDGSTS)
BULK_ARCH = 90  # cp.async.bulk (UBLKCP) and thread-block clusters
SCAN_STEPS = 5  # shuffles up in a 32-lane inclusive scan, one after another


@dataclass(frozen=True)
class Twin:
    """The hand-written probe whose kernel a C++ probe is measured beside on an arch."""

    probe: str
    floor: bool  # the C++ lowering holds the twin's instructions and more: the twin bounds it from below
    scale: float = 1.0  # the twin's cost times this is the bound (a scan is five dependent shuffles)
    own: bool = False  # the twin kernel ``probe`` declares beside its own (CUB's block collectives)

    @property
    def kernel(self) -> str:
        declared = find_probe(self.probe)
        return declared.twin.kernel if self.own and declared.twin else declared.kernel

    def contract(self, arch: Arch) -> list[Rule]:
        """The rules the twin's kernel is held to on ``arch``."""
        declared = find_probe(self.probe)
        rules = declared.twin.contract if self.own and declared.twin else declared.contract
        return [rule for rule in rules if rule.applies_to(arch)]


def _reduce_twin(tile: int, arch: Arch, exact: bool) -> Twin:
    """redux.sync where CG reduces with REDUX (32-bit integers, tiles of 16 and 32, sm_80+), else the
    hand-written butterfly over ``tile`` lanes; a floor only for the same operation (``exact``)."""
    if arch.number >= REDUX_ARCH and tile >= 16:
        return Twin("warp.redux.add", floor=exact)
    return Twin(f"warp.tile{tile}.reduce", floor=exact)


def _copy_twin(probe: str, arch: Arch) -> Twin | None:
    if arch.number < CP_ASYNC_ARCH:
        return None  # no cp.async, nothing hand-written to stand beside
    if probe == "coop.memcpy_async.barrier" and arch.number >= BULK_ARCH:
        return Twin("async_copy.bulk.latency", floor=True)
    return Twin("async_copy.cp_async.latency.cg", floor=True)


_FIXED: dict[str, Twin] = {
    "coop.tile.shfl": Twin("warp.shfl.idx", floor=True),
    "coop.tile.shfl_down": Twin("warp.shfl.down", floor=True),
    "coop.scan.add": Twin("warp.shfl.up", floor=True, scale=SCAN_STEPS),
    "coop.tile.sync": Twin("warp.syncwarp", floor=True),
    "coop.coalesced.shfl": Twin("warp.shfl.partial", floor=True),
    "coop.labeled.reduce": Twin("warp.match.any", floor=True),
    "coop.binary.reduce": Twin("warp.vote.any", floor=True),
    "coop.grid.sync": Twin("grid_sync.latency", floor=True),
    "coop.cluster.dsmem": Twin("async_copy.dsmem.latency", floor=True),
    "coop.atomic_ref.device": Twin("atomics.latency.global", floor=False),
    "coop.atomic_ref.block": Twin("atomics.latency.global", floor=False),
    "coop.atomic_ref.shared": Twin("atomics.latency.shared", floor=False),
    "coop.cub.warp_scan": Twin("warp.shfl.up", floor=True, scale=SCAN_STEPS),
    # CUB's step holds the twin's (shuffles, a store, bar.sync, loads) and a second barrier and the raking
    "coop.cub.block_scan": Twin("coop.cub.block_scan", floor=True, own=True),
    # the same warp totals, store and barrier, but CUB loads seven totals in three loads where the twin
    # loads eight in two, and on sm_75 shuffles down where the twin's butterfly shuffles across: reported
    "coop.cub.block_reduce": Twin("coop.cub.block_reduce", floor=False, own=True),
}

# The probes measured without a twin on any arch, and why.
NO_TWIN = {"coop.cub.radix_sort": "a hand-written radix sort is a library of its own, not a few instructions"}

# CUB's warp collectives and the cooperative-groups probe of the same operation, whose cost the run measured:
# CUB over cg is derived from the two cost facts (:func:`gpuprobe.families.coop.cg_ratio`).
CG_TWINS = {"coop.cub.warp_reduce": "coop.reduce.add.32", "coop.cub.warp_scan": "coop.scan.add"}


def twin_of(probe: str, arch: Arch) -> Twin | None:
    """The twin of a coop probe on ``arch``; None where the arch has nothing hand-written beside it."""
    if probe in _FIXED:
        return _FIXED[probe]
    if probe in NO_TWIN:
        return None
    if probe == "coop.cub.warp_reduce":  # REDUX and a LOP3 beside REDUX; five SHFL.DOWN beside a butterfly
        return Twin("warp.redux.add", floor=True) if arch.number >= REDUX_ARCH else Twin("warp.tile32.reduce", False)
    if probe.startswith("coop.reduce.add."):
        return _reduce_twin(int(probe.rsplit(".", 1)[1]), arch, exact=True)
    if probe in ("coop.reduce.min", "coop.reduce.and", "coop.reduce.fadd"):
        return _reduce_twin(32, arch, exact=False) if probe != "coop.reduce.fadd" else Twin("warp.tile32.reduce", False)
    if probe.startswith("coop.block.sync."):
        return Twin(f"barrier.block.{probe.rsplit('.', 1)[1]}", floor=True)
    if probe.startswith("coop.cluster.sync."):
        return Twin(f"cluster.bar.{probe.rsplit('.', 1)[1]}", floor=False)
    if probe.startswith(("coop.memcpy_async.", "coop.pipeline")):
        return _copy_twin(probe, arch)
    raise ValueError(f"{probe} is not a coop probe")


def twin_refusal(twin: Twin, listing: Listing | None, arch: Arch) -> str | None:
    """Why the twin's kernel cannot be measured here (None: it can): its contract must hold on this arch,
    in the cubin that was loaded, as it must for its own family to measure it."""
    if listing is None:
        return "the loaded cubin's listing is unknown, so the twin's contract cannot be checked"
    if not find_probe(twin.probe).supports(arch) or twin.kernel not in listing.kernels:
        return f"{twin.probe} does not target {arch}"
    violations = check(listing.kernel(twin.kernel), twin.contract(arch))
    return f"{twin.probe}'s contract does not hold here ({violations[0]})" if violations else None
