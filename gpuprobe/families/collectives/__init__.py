"""The collectives family: NCCL's all-reduce, all-gather, reduce-scatter, broadcast and all-to-all over
every GPU one process sees, measured as nccl-tests measures them and checked element by element.

One probe per collective. Each rank's input is written once by gpuprobe's kernel (``gp_coll_pattern``:
small integers the host can predict, checked before use); then for each size of 8 B to 1 GiB (nccl-tests'
size: :mod:`gpuprobe.families.collectives.busbw`) the output is poisoned, one collective runs and every
rank's output is held to the host's prediction, and the time of one call is sampled (GPU time over many
back-to-back calls, the slowest rank's: ``Communicator.time``). Per size: time, algbw and busbw by
nccl-tests' definitions, and the algorithm and protocol NCCL's log says it chose
(:mod:`gpuprobe.families.collectives.nccl_log`); per collective the facts busbw at the largest size and
latency (the time of one call) at the smallest. The results say which fabric NCCL used.

With one GPU visible every probe is ``not_run`` (:data:`~gpuprobe.runner.peers.ONE_GPU`): a single-rank
communicator moves nothing between GPUs, and its "bandwidth" would measure a local copy. Without the
NCCL library each probe is ``not_run`` with that reason (the ``nccl`` extra installs it).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.core.results import Device, ProbeOutcome
from gpuprobe.families.base import Family, Measured, Plan, Probes, Request, Smoke
from gpuprobe.families.collectives import busbw, nccl_log
from gpuprobe.families.collectives.busbw import ELEMENT, Layout
from gpuprobe.families.collectives.plot import BUSBW_PLOT
from gpuprobe.families.measuring import fact
from gpuprobe.families.planning import CHECKED_LAUNCH_CALLS, GEN4_LINK, probe
from gpuprobe.families.sampling import ONE_SAMPLE, Stopping, sample_until_stable
from gpuprobe.families.stepping import probe_steps
from gpuprobe.output.sections import Section
from gpuprobe.runner.checked import Kernels
from gpuprobe.runner.launcher import LaunchPathUnavailable
from gpuprobe.runner.nccl import COLLECTIVES, Communicator
from gpuprobe.runner.peers import ONE_GPU, PeerGroup, open_peer_group

PROBES = [f"collectives.{name}" for name in COLLECTIVES]
MIN_GPUS = 2  # one rank moves nothing between GPUs: with fewer visible every probe is not run (ONE_GPU)
KERNEL = "gp_coll_pattern"
POISON = 0xFF  # every byte of an output before a checked call: float32 NaN, which no input sums to
KIB, MIB, GIB = 1 << 10, 1 << 20, 1 << 30
NCCL_INIT_S = 2.5  # ncclCommInitAll over a node's GPUs (a second or two on 8 GPUs), for the time plan
CALL_OVERHEAD_S = 50e-6  # one collective's fixed cost (a launch and a handshake across the ranks), at most
CHECK_ELEMENT_S = 5e-9  # one output element read back and predicted (one input per rank summed), per rank


@dataclass(frozen=True)
class Settings:
    collectives: tuple[str, ...] = COLLECTIVES
    min_bytes: int = 8  # nccl-tests' -b 8 -e 1G -f 2
    max_bytes: int = GIB
    size_factor: int = 2
    calls: int = 20  # back-to-back calls per timed sample (nccl-tests' -n 20) ...
    large_calls: int = 5  # ... and from large_from_bytes, where one call is milliseconds
    large_from_bytes: int = 64 * MIB
    warmup_calls: int = 2  # untimed, after the checked call
    sampling: Stopping = Stopping(2, 3, 0.02, 1.0)  # per size
    full_check_bytes: int = 4 * MIB  # outputs up to this are checked element by element ...
    check_samples: int = 4096  # ... larger ones at this many spread elements and both ends of every share
    fill_blocks: int = 1024
    fill_threads: int = 256
    seed: int = 20240903
    planned_gpus: int = 8  # what the time plan counts on where the device record does not say how many GPUs

    def __post_init__(self) -> None:
        unknown = set(self.collectives) - set(COLLECTIVES)
        if unknown or not self.collectives:
            raise ValueError(f"Settings.collectives must be some of {', '.join(COLLECTIVES)}, not {sorted(unknown)}")
        busbw.sizes(self.min_bytes, self.max_bytes, self.size_factor)  # validates itself, as the Stopping does
        if min(self.calls, self.large_calls, self.fill_blocks, self.fill_threads, self.check_samples) < 1:
            raise ValueError("Settings: calls, large_calls, fill_blocks, fill_threads and check_samples must be >= 1")
        if self.warmup_calls < 0 or self.planned_gpus < 2 or self.max_bytes // ELEMENT >= 2**31:
            raise ValueError("Settings: warmup_calls >= 0, planned_gpus >= 2, max_bytes under 8 GiB")

    def sizes(self) -> list[int]:
        return busbw.sizes(self.min_bytes, self.max_bytes, self.size_factor)

    def calls_at(self, size_bytes: int) -> int:
        return self.large_calls if size_bytes >= self.large_from_bytes else self.calls


def plan(settings: Settings, device: Device, bus_gbps: float = GEN4_LINK.pinned_gbps) -> Plan:
    """Every collective at every size at its most repeats over the GPUs the device record says the process
    sees (else ``settings.planned_gpus`` ranks), whose links
    move ``bus_gbps`` (a PCIe Gen4 link: an NVLink node is an order of magnitude faster), the inputs
    written once and NCCL initialised once."""
    s, repeats = settings, settings.sampling.max_repeats
    n = s.planned_gpus if device.visible_gpus is None else device.visible_gpus
    if n < MIN_GPUS:  # one GPU visible: every probe is not run
        return Plan(len(s.collectives), 0, 0.0)
    total = Plan(0, (CHECKED_LAUNCH_CALLS + 1) * n, 0.0, NCCL_INIT_S)  # each rank's input written and sampled
    for collective in s.collectives:
        parts = []
        for size in s.sizes():
            layout = busbw.layout(collective, size, n)
            if layout is None:
                continue
            seconds = CALL_OVERHEAD_S + size * busbw.BUS_FACTORS[collective](n) / (bus_gbps * 1e9)
            calls = 1 + s.warmup_calls + repeats * s.calls_at(size)
            full = layout.recv_elements * ELEMENT <= s.full_check_bytes
            checked = layout.recv_elements if full else s.check_samples + 2 * n
            parts.append(Plan(0, 2 * n + 2 + repeats, calls * seconds, n * n * checked * CHECK_ELEMENT_S))
        total += probe(*parts)
    return total


# ---- measuring ------------------------------------------------------------------------------


@dataclass
class _Ranks:
    """Every GPU as a rank: its input (the pattern, written once and checked) and its output buffer."""

    group: PeerGroup
    kernels: Kernels  # the request's checked launches, on its own GPU
    settings: Settings
    communicator: Communicator | None = None
    unavailable: str = ""
    sends: list[Any] = field(default_factory=list)
    recvs: list[Any] = field(default_factory=list)

    @property
    def count(self) -> int:
        return self.group.count()

    def opened(self) -> Communicator | None:
        """NCCL's communicator and every rank's buffers, made on first use; None (and ``unavailable`` says
        why) where NCCL cannot be used here."""
        if self.communicator is None and not self.unavailable:
            try:
                self.communicator = self.group.communicator()
            except LaunchPathUnavailable as exc:
                self.unavailable = str(exc)
                return None
            self._write_inputs()
        return self.communicator

    def _write_inputs(self) -> None:
        s = self.settings
        elements = s.max_bytes // ELEMENT
        for rank in range(self.count):
            launcher = self.group.on(rank)
            self.sends.append(launcher.alloc(elements * ELEMENT))
            self.recvs.append(launcher.alloc(elements * ELEMENT))
            args = [np.uint32(elements), np.uint32(busbw.pattern_offset(rank)), self.sends[rank]]
            kernels = Kernels(launcher)  # checked, on this rank's GPU
            kernels.results(KERNEL, args, self.sends[rank], min(elements, 1024), dtype="float32", grid=s.fill_blocks,
                        block=s.fill_threads)  # fmt: skip
            spread = np.random.default_rng(s.seed + rank).integers(0, elements, 1024)
            indices = np.unique(np.concatenate([np.arange(min(elements, 1024)), [elements - 1], spread]))
            got = self.group.sample(self.sends[rank], "float32", indices)
            wrong = np.flatnonzero(got != busbw.inputs(rank, indices))
            if wrong.size:
                k = int(indices[wrong[0]])
                raise ProbeFailure(f"{KERNEL}: rank {rank}'s input element {k} is {float(got[wrong[0]]):g}, "
                                   f"expected {float(busbw.inputs(rank, np.array([k]))[0]):g}")  # fmt: skip

    def addresses(self) -> tuple[list[int], list[int]]:
        return ([self.group.on(r).address(b) for r, b in enumerate(self.sends)],
                [self.group.on(r).address(b) for r, b in enumerate(self.recvs)])  # fmt: skip


def _checked_call(ranks: _Ranks, comm: Communicator, layout: Layout) -> None:
    """One collective into poisoned outputs, every rank's output held to the host's prediction."""
    s = ranks.settings
    for rank, recv in enumerate(ranks.recvs):
        ranks.group.on(rank).fill(recv, POISON)
    sends, recvs = ranks.addresses()
    comm.call(layout.collective, sends, recvs, layout.count)
    for rank, recv in enumerate(ranks.recvs):
        indices = busbw.check_indices(layout, s.full_check_bytes, s.check_samples, s.seed + rank)
        problem = busbw.mismatch(layout, rank, indices, ranks.group.sample(recv, "float32", indices))
        if problem:
            raise ProbeFailure(problem)


def _timed(ranks: _Ranks, comm: Communicator, layout: Layout) -> list[float]:
    """Samples of one call's seconds at this layout."""
    s = ranks.settings
    sends, recvs = ranks.addresses()
    args = (layout.collective, sends, recvs, layout.count)
    if s.warmup_calls:
        comm.time(*args, s.warmup_calls)
    calls = s.calls_at(layout.size_bytes)
    samples: list[float] = []

    def take() -> None:
        ms = comm.time(*args, calls)
        if not ms > 0:
            raise ProbeFailure(f"{layout.collective} of {layout.size_bytes} B took {ms} ms per call")
        samples.append(ms / 1e3)

    sample_until_stable(take, samples, s.sampling)
    return samples


def measure_collective(ranks: _Ranks, probe_name: str) -> Measured:
    collective = probe_name.removeprefix("collectives.")
    comm = ranks.opened()
    if comm is None:
        return Measured(probe_name, ProbeOutcome("not_run", f"NCCL cannot be used here: {ranks.unavailable}"))
    n = ranks.count
    rows: list[tuple[Layout, list[float]]] = []
    for size in ranks.settings.sizes():
        layout = busbw.layout(collective, size, n)
        if layout is None or (rows and layout.size_bytes == rows[-1][0].size_bytes):
            continue  # too small to give every rank a share, or the same size once rounded to shares
        _checked_call(ranks, comm, layout)
        rows.append((layout, _timed(ranks, comm, layout)))
    if not rows:
        why = f"no size up to {ranks.settings.max_bytes} B gives each of {n} ranks a share"
        return Measured(probe_name, ProbeOutcome("not_run", why))
    log = nccl_log.parse(comm.log())
    smallest, largest = rows[0], rows[-1]
    facts = [
        fact(f"{probe_name}.latency", [t * 1e6 for t in smallest[1]], "us", probe_name),
        fact(f"{probe_name}.busbw", [busbw.busbw_gbps(collective, largest[0].size_bytes, t, n) for t in largest[1]],
             "GB/s", probe_name),
    ]  # fmt: skip
    series = {"sizes": _size_series(collective, rows, log, n), "nccl": _nccl_series(comm, log)}
    note = (f"NCCL {comm.version()}, {n} ranks: busbw {facts[1].value:.1f} GB/s at {largest[0].size_bytes} B, "
            f"{facts[0].value:.1f} us at {smallest[0].size_bytes} B; every size's output checked; fabric: "
            f"{log.fabric()}")  # fmt: skip
    return Measured(probe_name, ProbeOutcome("ok", note, series), facts)


def _size_series(collective: str, rows: list[tuple[Layout, list[float]]], log: nccl_log.NcclLog, n: int) -> dict:
    seconds = [float(np.median(times)) for _, times in rows]
    choices = [log.choice(collective, layout.count * ELEMENT) for layout, _ in rows]
    return {
        "size_bytes": [float(p.size_bytes) for p, _ in rows],
        "count": [float(p.count) for p, _ in rows],
        "time_us": [t * 1e6 for t in seconds],
        "algbw_gbps": [busbw.algbw_gbps(p.size_bytes, t) for (p, _), t in zip(rows, seconds, strict=True)],
        "busbw_gbps": [busbw.busbw_gbps(collective, p.size_bytes, t, n)
                       for (p, _), t in zip(rows, seconds, strict=True)],
        "algorithm": [algorithm for algorithm, _ in choices],
        "protocol": [protocol for _, protocol in choices],
    }  # fmt: skip


def _nccl_series(comm: Communicator, log: nccl_log.NcclLog) -> dict:
    """The NCCL that ran and the fabric its log reports (one row: what the results file says NCCL used)."""
    return {"version": [comm.version()], "log_version": [log.version], "network": [log.network],
            "transports": [", ".join(log.transports)]}  # fmt: skip


def measure(request: Request) -> Probes:
    """The family's runnable probes in order; with fewer than two GPUs each is ``not_run`` (ONE_GPU)."""
    settings = request.settings or Settings()
    ranks = _Ranks(open_peer_group(request.launcher), request.kernels, settings)

    def measure_probe(name: str) -> Measured:
        if ranks.count < MIN_GPUS:
            return Measured(name, ProbeOutcome("not_run", ONE_GPU))
        if name.removeprefix("collectives.") not in settings.collectives:
            return Measured(name, ProbeOutcome("not_run", "not among the collectives the settings chose"))
        return measure_collective(ranks, name)

    steps = {name: functools.partial(measure_probe, name) for name in PROBES}
    yield from probe_steps(PROBES, steps, request.runnable)  # the GPUs opened once the first probe is asked for


# A first contact: all-reduce alone, from 8 B to 1 MiB by factors of 16, once each.
SMOKE = Smoke(
    probes=("collectives.all_reduce",),
    settings=Settings(
        collectives=("all_reduce",),
        max_bytes=MIB,
        size_factor=16,
        calls=5,
        large_calls=2,
        warmup_calls=1,
        sampling=ONE_SAMPLE,
    ),
)

SECTIONS = (
    Section(
        "Collectives (NCCL)",
        ("collectives.",),
        ("collectives.",),
        plot=BUSBW_PLOT,
        blurb="NCCL across every GPU the run saw, one communicator per GPU, as nccl-tests measures: the time "
        "of one call (GPU time over back-to-back calls, the slowest rank's), algbw = size / time and busbw = "
        "algbw x the collective's factor (all-reduce 2(n-1)/n; all-gather, reduce-scatter, all-to-all "
        "(n-1)/n; broadcast 1; nccl-tests doc/PERFORMANCE.md). busbw at the largest size, latency at the "
        "smallest; every size's output checked against the host's prediction.",
    ),
)


FAMILY = Family(
    name="collectives",
    probes=tuple(PROBES),
    settings=Settings,
    plan=plan,
    measure=measure,
    smoke=SMOKE,
    sections=SECTIONS,
    min_gpus=MIN_GPUS,
)
