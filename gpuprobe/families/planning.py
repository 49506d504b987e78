"""What a family's :func:`plan` counts its work at: bounds on the GPU's speeds and the host's.

A plan (:class:`~gpuprobe.families.base.Plan`) is an upper bound a real run can be held to, so
every figure here is a pessimistic one: cycles per load 1.3-2 times what any supported part was
measured to take at the level (enough to cover an SM clock somewhat below the nominal one the device
reports, which cycles are counted at), half the DRAM peak the device's memory clock and bus allow
(published reads and writes reach 0.79-0.87 of it), a PCIe Gen4 link for host copies, and NumPy at
half the speeds measured on the 2-core build machine. The cost model that turns a plan into wall
seconds (a host round trip per launcher call, the condition snapshots) is :mod:`gpuprobe.measure.plan`'s.
These are guesses, as that model's are, until a real run records planned against actual seconds.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from gpuprobe.core.results import Device
from gpuprobe.families.base import Plan
from gpuprobe.runner.launcher import hold_cycles

CHECKED_LAUNCH_CALLS = 3  # a checked Kernels.results: the poison fill, the launch, the read-back
MIN_KERNEL_S = 5e-6  # the GPU time of the emptiest launch: its start and its drain
UNKNOWN_SM_MHZ = 1000.0  # the SM clock of a device that reports none
MAX_THREADS_PER_SM = 2048  # the most resident threads any supported arch allows (sm_80, sm_90, sm_100)
MAX_BLOCKS_PER_SM = 32

# Cycles per dependent load, at least what any supported part was measured to take at that level
# (far L2 475-556 on Hopper, DRAM 540-700 on A100 and Hopper, as tests/test_find_levels_recorded.py
# and gpuprobe/families/memory/expectations.toml cite), with room for a TLB miss beyond the L2.
SHARED_STEP_CYCLES = 60.0
L2_STEP_CYCLES = 700.0
DRAM_STEP_CYCLES = 1200.0

DRAM_FRACTION = 0.5  # of the theoretical DRAM peak
UNKNOWN_DRAM_GBPS = 300.0  # a device that reports neither memory clock nor bus width (a T4 reaches 320 peak)

# The host, per byte or node, at half or less of what the 2-core build machine measured when not crowded
# (NumPy 2, fresh pages included; crowded, several times slower): generating a source pattern in place
# 2.0-3.6 GB/s; reducing words into wider sums across strided axes (16-byte chunk sums, a goodput pattern's
# lanes) 0.6-0.86 GB/s; an elementwise pass (comparing words, adding them, summing rows of sums) 1.6-11 GB/s;
# a random cycle built and converted 54 ns a node.
HOST_GENERATE_BYTES_PER_S = 1.0e9
HOST_SUM_BYTES_PER_S = 0.3e9
HOST_COMPARE_BYTES_PER_S = 0.8e9
HOST_CYCLE_NODE_S = 150e-9
READBACK_BYTES_PER_S = 10e9  # results read back, device to host (a Gen4 link's pinned rate is 20-25 GB/s)
HOST_CHECK_THREAD_S = 200e-9  # one thread's result predicted and checked (atomics, warp: 50-100 ns measured)


def sm_mhz(device: Device) -> float:
    """The SM clock a plan counts cycles at: the device's nominal clock, or a low guess when unknown."""
    return device.sm_clock_nominal_mhz or UNKNOWN_SM_MHZ


def cycles_s(cycles: float, device: Device) -> float:
    """Seconds of ``cycles`` SM cycles on ``device``."""
    return cycles / (sm_mhz(device) * 1e6)


def dram_gbps(device: Device) -> float:
    """The DRAM rate a plan moves bytes at: ``DRAM_FRACTION`` of the device's theoretical peak."""
    peak = dram_peak_gbps(device.mem_clock_mhz, device.mem_bus_bits, {})
    return DRAM_FRACTION * peak[0] if peak else UNKNOWN_DRAM_GBPS


def dram_s(nbytes: float, device: Device) -> float:
    """Seconds to move ``nbytes`` through the device's DRAM (read, written, or zeroed by an allocation)."""
    return nbytes / (dram_gbps(device) * 1e9)


@dataclass(frozen=True)
class Link:
    """A host link's copy rates, GB/s: from pinned host memory, and from pageable memory (staged by the driver)."""

    pinned_gbps: float
    pageable_gbps: float

    def seconds(self, nbytes: float, pinned: bool = True) -> float:
        """Seconds to copy ``nbytes`` between host and device."""
        return nbytes / ((self.pinned_gbps if pinned else self.pageable_gbps) * 1e9)


GEN4_LINK = Link(pinned_gbps=20.0, pageable_gbps=6.0)  # PCIe Gen4 x16 (the H200's Gen5 moves twice that)


def link_s(nbytes: float, pinned: bool = True) -> float:
    """Seconds to copy ``nbytes`` between host and device over a PCIe Gen4 link."""
    return GEN4_LINK.seconds(nbytes, pinned)


def resident_blocks(device: Device, threads: int, shared_bytes: int = 0) -> int:
    """The most blocks of ``threads`` threads (and ``shared_bytes`` of shared memory each) an SM of
    ``device`` could hold: what the occupancy API answers at most, for a plan of a full grid."""
    most = min(MAX_BLOCKS_PER_SM, MAX_THREADS_PER_SM // threads)
    if shared_bytes and device.shared_per_sm_bytes:
        most = min(most, device.shared_per_sm_bytes // shared_bytes)
    return max(1, most)


def step_cycles(footprint: int, device: Device) -> float:
    """Cycles a dependent load of a chase over ``footprint`` bytes takes at most: an L2 hit while the
    footprint fits the L2, a DRAM access beyond."""
    return L2_STEP_CYCLES if footprint <= device.l2_bytes else DRAM_STEP_CYCLES


def generate_host_s(nbytes: float) -> float:
    """Host seconds to generate ``nbytes`` of a source pattern."""
    return nbytes / HOST_GENERATE_BYTES_PER_S


def sum_host_s(nbytes: float) -> float:
    """Host seconds to reduce ``nbytes`` of words into wider sums (a prediction of what threads add up)."""
    return nbytes / HOST_SUM_BYTES_PER_S


def compare_host_s(nbytes: float) -> float:
    """Host seconds for an elementwise pass over ``nbytes`` of words: compared with what they must hold
    (read back), or added to others."""
    return nbytes / HOST_COMPARE_BYTES_PER_S


def readback_host_s(nbytes: float) -> float:
    """Host seconds to read ``nbytes`` of results back and hold them to the host's prediction."""
    return nbytes / READBACK_BYTES_PER_S + compare_host_s(nbytes)


def held_batch_s(launches: int, launch_s: float, device: Device) -> float:
    """GPU seconds of one timed batch (Launcher.time_launches) of ``launches`` launches of ``launch_s``
    each: the runner first holds the GPU with a spin of HOLD_CYCLES_PER_LAUNCH per launch while it
    enqueues them."""
    return cycles_s(hold_cycles(launches), device) + launches * launch_s


def cycle_host_s(nodes: int) -> float:
    """Host seconds to build a random cycle of ``nodes`` and hand it to ``Launcher.write_cycle``."""
    return nodes * HOST_CYCLE_NODE_S


NO_WORK = Plan(0, 0, 0.0)


def combined(plans: Iterable[Plan]) -> Plan:
    """The work of all ``plans`` together."""
    return sum(plans, NO_WORK)


def kernel_runs(runs: int, gpu_s: float, host_s: float = 0.0) -> Plan:
    """``runs`` checked launches (each a fill, a launch and a read) doing ``gpu_s`` of work in all;
    no probe of their own (a probe's plan adds itself: ``probe(...)``)."""
    return Plan(0, runs * CHECKED_LAUNCH_CALLS, gpu_s + runs * MIN_KERNEL_S, host_s)


def probe(*parts: Plan) -> Plan:
    """One probe: its parts' work, counted as one probe (two condition snapshots)."""
    return sum(parts, Plan(1, 0, 0.0))


def dram_peak_gbps(
    mem_clock_mhz: float | None, mem_bus_bits: int | None, datasheet: dict[str, float]
) -> tuple[float, str] | None:
    """The theoretical DRAM bandwidth and where it came from: 2 x clock x bus / 8 (the double data
    rate CUDA's memory clock is quoted at) when the device reports both, else the datasheet."""
    if mem_clock_mhz and mem_bus_bits:
        return 2.0 * mem_clock_mhz * 1e6 * mem_bus_bits / 8 / 1e9, "2 x memory clock x bus width"
    if "dram_gbps" in datasheet:
        return float(datasheet["dram_gbps"]), "datasheet"
    return None
