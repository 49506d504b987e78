"""The roofline family: what each level of memory (DRAM, L2, shared memory) can feed each type of unit, measured
as an arithmetic-intensity sweep per (type, level), its ceilings and ridge point facts, at the clock it ran at.

The framework (:mod:`~gpuprobe.families.roofline.sweep`) is the same for every type: a :class:`~.sweep.Sweep`
names one probe per point (lowest intensity first) and a callable that measures one point, ``(request, probe)
-> Point`` (its intensity, rate samples and the SM clock of each); every point is guarded by physics (no rate
above the per-clock peak at its clock, no bytes/s above the level's limit) and written to its probe's
``roofline`` series; the last probe analyses the sweep into ``roofline.<type>.<level>.bandwidth`` (GB/s),
``.compute`` (TFLOP/s, TOP/s for s8), ``.ridge`` (flop/B) and ``.sm_clock`` (MHz). The plot and the invariant
(:mod:`~gpuprobe.families.roofline.report`) read every type alike.

Types: ``fp32``, the CUDA cores' FFMA (:mod:`~gpuprobe.families.roofline.fp32`, kernels
:mod:`~gpuprobe.families.roofline.fp32_ptx`), then the tensor cores' (:mod:`~gpuprobe.families.roofline.tensor`,
kernels :mod:`~gpuprobe.families.roofline.tensor_ptx`): wgmma fed by TMA on sm_90a (``bf16``, ``e4m3``, ``tf32``,
``s8`` from DRAM, L2 and shared memory), mma.sync fed by cp.async on sm_80, sm_86 and sm_89 (``bf16_sync``,
``tf32_sync``, ``s8_sync`` from DRAM and L2), after ``roofline.tensor.fill`` has filled their region on the device.
A further type plugs in by adding its :class:`~.sweep.Sweep` values to :func:`all_sweeps`, its probes to its own
``ptx/roofline/*.toml``, and its kernels' models to ``simulated.py``'s ``KERNELS``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

from gpuprobe.core.results import Device
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.planning import (
    CHECKED_LAUNCH_CALLS,
    MIN_KERNEL_S,
    combined,
    compare_host_s,
    dram_gbps,
    dram_peak_gbps,
    generate_host_s,
    link_s,
    probe,
    readback_host_s,
    resident_blocks,
    sm_mhz,
    sum_host_s,
)
from gpuprobe.families.roofline import fp32, tensor
from gpuprobe.families.roofline.fp32_ptx import FFMAS_PER_LOAD, ITERATION_BYTES, LOAD_BYTES, RECORD_WORDS, THREADS
from gpuprobe.families.roofline.report import INVARIANTS, SECTIONS
from gpuprobe.families.roofline.sweep import LEVELS, SM_INGEST_BYTES_PER_CLOCK, Point, Sweep, measured_point
from gpuprobe.families.sampling import ONE_SAMPLE, Stopping
from gpuprobe.families.stepping import probe_steps


@dataclass(frozen=True)
class Settings:
    """A point: ``sampling`` of long-minus-short batches of ``long_launches`` and ``short_launches``, each launch
    lasting ``min_launch_ms`` at least; DRAM's footprint ``dram_l2_multiple`` L2 sizes, the L2's ``l2_fraction``."""

    sampling: Stopping = Stopping(2, 3, 0.02, 0.5)
    short_launches: int = 1
    long_launches: int = 3
    min_launch_ms: float = 0.25
    dram_l2_multiple: float = 4.0
    l2_fraction: float = 0.5
    tensor: tensor.TensorSettings = tensor.TensorSettings()  # the tensor sweeps' own

    def __post_init__(self) -> None:
        if not 1 <= self.short_launches < self.long_launches:
            raise ValueError(f"Settings: need 1 <= short_launches < long_launches, not {self}")
        if self.min_launch_ms <= 0 or self.dram_l2_multiple < 2 or not 0 < self.l2_fraction <= 1:
            raise ValueError(f"Settings: min_launch_ms > 0, dram_l2_multiple >= 2, l2_fraction in (0, 1], not {self}")


def tensor_settings(request: Request) -> tensor.TensorSettings:
    return request.settings.tensor


def all_sweeps(regions: tensor.Regions | None = None) -> tuple[Sweep, ...]:
    """Every sweep of the family, in measuring order, each type's kernels sharing what they set up once a process
    (the FP32 sweeps their source, the tensor sweeps their ``regions``)."""
    bench: dict[str, fp32.Bench] = {}
    kept = regions if regions is not None else tensor.Regions()

    def fp32_bench(request: Request) -> fp32.Bench:
        if "bench" not in bench:
            bench["bench"] = fp32.make_bench(request)
        return bench["bench"]

    return (*fp32.sweeps(fp32_bench), *tensor.tensor_sweeps(tensor_settings, lambda _: kept))


def _probes() -> list[str]:
    """The FP32 sweeps' points, the tensor region's fill, then the tensor sweeps' points."""
    names = [name for sweep in all_sweeps() for name in sweep.probes]
    first_tensor = next(i for i, name in enumerate(names) if not name.startswith("roofline.fp32."))
    return [*names[:first_tensor], tensor.FILL_PROBE, *names[first_tensor:]]


PROBES = _probes()


def measure(request: Request) -> Probes:
    """The family's runnable probes in order, each as (name, step): each sweep's points, the last with its facts,
    and the tensor region's fill."""
    if request.settings is None:
        request.settings = Settings()
    regions = tensor.Regions()
    steps: dict[str, Callable[[], Measured]] = {
        tensor.FILL_PROBE: functools.partial(tensor.measured_fill, tensor_settings, lambda _: regions, request)
    }
    for sweep in all_sweeps(regions):
        points: list[Point] = []
        steps.update({name: functools.partial(measured_point, request, sweep, name, points) for name in sweep.probes})
    return probe_steps(PROBES, steps, request.runnable)


# What a plan counts the work at: at most these shares of the limits a point's launch is sized by (the DRAM's
# half-peak rate is planning.dram_gbps'): an H200 streams its L2 at ~10 TB/s of the 33 TB/s its SMs take in
# (te42kyfo/gpu-benches gpu-l2-cache/h200.txt), its roofline kernel reaches 64 % of the FP32 peak
# (gpu-roofline/h200.txt).
L2_PLAN_SHARE = 0.2
SHARED_PLAN_SHARE = 0.5
FP32_PLAN_SHARE = 0.5


def _launch_s(level: str, shape: fp32.Shape, ffmas: int, passes: int, device: Device) -> float:
    """A launch's GPU seconds at most: its bytes at the planned share of the level, its flop at half the peak."""
    mhz = sm_mhz(device)
    ingest = SM_INGEST_BYTES_PER_CLOCK * device.sm_count * mhz * 1e6 / 1e9
    gbps = {"dram": dram_gbps(device), "l2": L2_PLAN_SHARE * ingest, "shared": SHARED_PLAN_SHARE * ingest}[level]
    moved = shape.footprint * passes
    flops = FP32_PLAN_SHARE * 2 * fp32.FP32_LANES_DEFAULT * device.sm_count * mhz * 1e6
    return max(moved / (gbps * 1e9), moved / LOAD_BYTES * 2 * ffmas / flops, MIN_KERNEL_S)


def _resident(device: Device, level: str) -> int:
    """The blocks a level's launches take at most: a full GPU of 256-thread blocks (16 KiB of shared each)."""
    return device.sm_count * resident_blocks(device, THREADS, ITERATION_BYTES if level == "shared" else 0)


def plan(settings: Settings, device: Device) -> Plan:
    """Every FP32 point at its most samples (each a short and a long batch, plus one warm-up batch), every batch's
    sums and records read back and checked, the source generated, uploaded and summed once (see :mod:`.fp32`); and
    the tensor sweeps' (:func:`~gpuprobe.families.roofline.tensor.tensor_plan`)."""
    shapes = {level: fp32.level_shape(level, _resident(device, level), device.l2_bytes, settings) for level in LEVELS}
    repeats = settings.sampling.max_repeats
    batches = 1 + 2 * repeats  # a warm-up batch of short launches, then a short and a long batch a sample
    launches = (1 + repeats) * settings.short_launches + repeats * settings.long_launches
    peak = dram_peak_gbps(device.mem_clock_mhz, device.mem_bus_bits, {})
    points = []
    for level, shape in shapes.items():
        for ffmas in FFMAS_PER_LOAD:
            passes = fp32.passes_for(level, shape, ffmas, device, peak[0] if peak else None, settings.min_launch_ms)
            check_s = readback_host_s(4 * shape.threads + 8 * RECORD_WORDS * shape.blocks)
            points.append(probe(Plan(0, batches * 5, launches * _launch_s(level, shape, ffmas, passes, device),
                                     batches * check_s)))  # fmt: skip
    source = max(s.footprint for s in shapes.values())
    sums = sum(sum_host_s(s.footprint / 4) + compare_host_s(4 * s.threads) for s in shapes.values())
    setup = Plan(0, CHECKED_LAUNCH_CALLS, 0.0, generate_host_s(source) + link_s(source) + sums)
    return combined([setup, *points]) + tensor.tensor_plan(settings.tensor, device)


# A first contact: the shared-memory sweep's first point, one sample of one launch against two.
SMOKE = Smoke(probes=(fp32.probe_name("shared", FFMAS_PER_LOAD[0]),),
              settings=Settings(sampling=ONE_SAMPLE, short_launches=1, long_launches=2))  # fmt: skip


FAMILY = Family(
    name="roofline",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
    sections=SECTIONS,
    invariants=INVARIANTS,
)
