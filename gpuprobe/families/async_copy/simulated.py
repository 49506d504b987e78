"""The simulated async-copy kernels: chases that walk the cycle they are given, and streams that
report the sums a correct kernel reports, each taking the time a simple model gives.

The global->shared streams (gp_ac_copy_cp_async, gp_ac_copy_plain) run at the slower of two bounds:

* the memory level they read: a share (``AsyncModel.copy_share``) of the simulated memory's read rate,
  the one the bandwidth family's simulation reads (``bw_dram_gbps``, ``bw_l2_gbps``), so the simulated
  part has one memory system and no copy outruns its source;
* the shared memory's banks, modelled from the kernel's own PTX: each thread's shared address of every
  shared-memory instruction is evaluated from the kernel's address arithmetic (:func:`shared_accesses`),
  a warp's access takes, phase by phase (a quarter-warp for 16-byte accesses), as many wavefronts as its
  most loaded bank holds distinct words (:func:`wavefronts`), and an SM serves one wavefront of
  ``WAVEFRONT_BYTES`` per clock. A slot layout that puts lanes on the same banks is as slow here as on a
  GPU: slots at thread x 64 bytes take 16 wavefronts per 16-byte access instead of 4.
"""

from __future__ import annotations

import operator
import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from functools import cache

import numpy as np

from gpuprobe.families.async_copy import STREAM_CHUNK_BYTES, WARP, Settings
from gpuprobe.families.bandwidth.simulated import memory_read_gbps
from gpuprobe.families.streams import PATTERN_MULTIPLIER
from gpuprobe.kernels.ptxsource import expand
from gpuprobe.kernels.registry import all_probes, unroll_of
from gpuprobe.simulated.kernel_sums import chunk_totals, thread_totals
from gpuprobe.simulated.simulation import Simulation

# Settings sized for the simulated GPU: small grids and sources, many passes over them so that the copy
# time dwarfs the simulated launches' jitter.
FAST_SETTINGS = Settings(
    stream_threads=32,
    bulk_threads=32,
    dsm_stream_threads=32,
    dram_min_bytes=1 << 20,
    dram_passes=(1, 20),
    l2_passes=(8, 400),
    bulk_points=((1024, 8), (4096, 2), (16384, 4)),
    sampling=replace(Settings().sampling, max_repeats=4, budget_s=0.0),
)

EDGE = 40.0  # cycles a timed chase pays once (pipeline fill and drain)
LAUNCH_MS = 0.004


@dataclass
class AsyncModel:
    """Latencies (cycles per step) and rates (GB/s) of the simulated part, and a fault to inject."""

    cp_async: dict[str, float] = field(default_factory=lambda: {"ca": 60.0, "cg": 300.0})
    bulk_base: float = 500.0  # a bulk copy's round trip: this plus its bytes at bulk_bytes_per_cycle
    bulk_bytes_per_cycle: float = 64.0
    dsm: dict[int, float] = field(default_factory=lambda: {0: 32.0, 1: 190.0})  # by target rank
    # of the level's read rate, what each global->shared path reaches where the shared-memory banks do not bound it
    copy_share: dict[str, float] = field(default_factory=lambda: {"plain": 0.9, "cp_async": 0.95})
    bulk_gbps: float = 3200.0  # reached with 64 KiB or more in flight per block
    dsm_gbps: dict[int, float] = field(default_factory=lambda: {0: 30000.0, 1: 12000.0})
    corrupt: str = ""  # "chase": a chase ends one node off; "sums": a stream reports a wrong sum
    ptx: dict[str, str] = field(default_factory=dict)  # by kernel, PTX to simulate instead of its probe file's


def model(gpu) -> AsyncModel:
    """The async-copy model of one simulated GPU (made on first use)."""
    return gpu.__dict__.setdefault("async_model", AsyncModel())


def _finish_chase(gpu, out, cycles_per_step: float, steps: int, end: int) -> None:
    cycles = EDGE + steps * cycles_per_step * gpu._jitter()
    words = out.data.view(np.uint64)
    words[0], words[1] = round(cycles), round(cycles / gpu.mhz * 1000.0)
    words[2] = end
    out.data.view(np.uint32)[6] = gpu.sm_id


def _walk_global(gpu, start: int, steps: int, stride: int) -> int:
    """Follow the 64-bit addresses stored at each node; ``stride`` bytes past the end when corrupt."""
    buffer, _ = gpu.buffer_at(int(start))
    words = buffer.data.view(np.uint64)
    pointer = int(start)
    for _ in range(steps):
        pointer = int(words[(pointer - buffer.base) // 8])
    return pointer + (stride if model(gpu).corrupt == "chase" else 0)


def _cp_async_chase(cache: str):
    def simulate(gpu, launch, start, warm, iters, out) -> None:
        timed = int(iters) * unroll_of(f"gp_ac_cp_async_chase_{cache}")
        _finish_chase(gpu, out, model(gpu).cp_async[cache], timed, _walk_global(gpu, start, int(warm) + timed, 128))

    return simulate


def bulk_chase(gpu, launch, start, size, warm, iters, out) -> None:
    m = model(gpu)
    assert launch.shared_bytes >= int(size), "the node must fit the dynamic shared memory"
    latency = m.bulk_base + int(size) / m.bulk_bytes_per_cycle
    _finish_chase(gpu, out, latency, int(iters), _walk_global(gpu, start, int(warm) + int(iters), int(size)))


def dsm_chase(gpu, launch, successors, nodes, stride, start, target, warm, iters, out) -> None:
    assert launch.grid[0] % 2 == 0, "clusters of two"
    succ = successors.data.view(np.uint32)[: int(nodes)] // int(stride)
    node = int(start)
    timed = int(iters) * unroll_of("gp_ac_dsm_chase")
    for _ in range(int(warm) + timed):
        node = int(succ[node])
    end = node * int(stride) + (int(stride) if model(gpu).corrupt == "chase" else 0)
    _finish_chase(gpu, out, model(gpu).dsm[int(target)], timed, end)


def _corrupt(gpu, sums: np.ndarray) -> np.ndarray:
    if model(gpu).corrupt == "sums":
        sums[len(sums) // 3] += np.uint64(1)
    return sums


# ---- shared-memory banks -------------------------------------------------------------------------

BANKS = 32
BANK_BYTES = 4
WAVEFRONT_BYTES = BANKS * BANK_BYTES  # what an SM's shared memory serves per clock: one word from every bank

_LABEL = re.compile(r"^\s*\w+:")
_INSTRUCTION = re.compile(r"^\s*(?:@!?%\w+\s+)?([a-z][\w.:]*)\s+(.*?)\s*;")
_SHARED_ADDRESS = re.compile(r"\[(%r\d+)(?:\+(\d+))?\]")
_VECTOR = re.compile(r"\.(?:v(\d)\.)?[bu](8|16|32|64)$")
_OPERATIONS: dict[str, Callable[..., np.ndarray]] = {
    "add": operator.add, "sub": operator.sub, "mul.lo": operator.mul, "shl": operator.lshift,
    "shr": operator.rshift, "and": operator.and_, "or": operator.or_, "xor": operator.xor,
    "mad.lo": lambda a, b, c: a * b + c, "mov": lambda a: a,
}  # fmt: skip
Value = np.ndarray | np.int64 | None  # per thread, one for all, or not known


@dataclass(frozen=True)
class SharedAccess:
    """One shared-memory instruction of a kernel: its PTX, the bytes each thread moves, each thread's address."""

    text: str
    width: int
    addresses: np.ndarray


@cache
def probe_ptx(kernel: str) -> str:
    """The PTX file that defines ``kernel``, its templates expanded."""
    source = next(p.source for p in all_probes() if p.kernel == kernel)
    return "\n".join(expand(source.read_text(), str(source)).lines)


def _body(ptx: str, kernel: str) -> list[str]:
    """The lines of ``kernel``'s body in ``ptx``."""
    lines = ptx.splitlines()
    start = next((i for i, line in enumerate(lines) if re.search(rf"\.entry\s+{kernel}\s*\(", line)), None)
    if start is None:
        raise ValueError(f"no kernel {kernel} in the PTX")
    return lines[start + 1 : lines.index("}", start)]


def _operand(text: str, registers: dict[str, Value], specials: dict[str, Value]) -> Value:
    """A 32-bit operand's value per thread: a register known so far, %tid.x or %ntid.x, a constant, or a shared
    variable (its window's base, taken as 0: a uniform shift by whole words moves no lane to another bank's
    queue); None when not known (a parameter, a block index, a register written in the loop)."""
    text = text.strip()
    if text in specials:
        return specials[text]
    if text.startswith("%"):
        return registers.get(text)
    if re.fullmatch(r"-?(0x[0-9a-fA-F]+|\d+)", text):
        return np.int64(int(text, 0))
    return np.int64(0) if re.fullmatch(r"[A-Za-z_]\w*", text) else None


def _evaluated(opcode: str, operands: list[str], registers: dict[str, Value], specials: dict[str, Value]) -> Value:
    """The 32-bit result of an integer instruction per thread, None when not this kind or not known."""
    name, _, kind = opcode.rpartition(".")
    values = [_operand(o, registers, specials) for o in operands[1:]]
    if name not in _OPERATIONS or kind not in ("u32", "b32") or any(v is None for v in values):
        return None
    return _OPERATIONS[name](*values) & 0xFFFFFFFF


def _width(opcode: str, operands: list[str]) -> int:
    """Bytes per thread of a shared access: cp.async's copy size, or a load's or store's (vector) type."""
    if opcode.startswith("cp.async"):
        return int(operands[-1])
    vector = _VECTOR.search(opcode)
    if vector is None:
        raise ValueError(f"shared access {opcode}: no width")
    return int(vector.group(1) or 1) * int(vector.group(2)) // 8


def shared_accesses(ptx: str, kernel: str, threads: int) -> list[SharedAccess]:
    """Every shared-memory instruction of ``kernel`` (a 16-byte cp.async, ld.shared, st.shared) with each of
    ``threads`` threads' address, evaluated from the kernel's 32-bit address arithmetic on %tid.x, %ntid.x
    and constants. An address register must be set before the first label (loop-invariant): one that is not
    known there is an error, not a guess."""
    specials: dict[str, Value] = {"%tid.x": np.arange(threads, dtype=np.int64), "%ntid.x": np.int64(threads)}
    registers: dict[str, Value] = {}
    accesses: list[SharedAccess] = []
    in_loop = False
    for line in _body(ptx, kernel):
        code = line.split("//", 1)[0]
        in_loop = in_loop or bool(_LABEL.match(code))
        found = _INSTRUCTION.match(code)
        if found is None:
            continue
        opcode, operands = found.group(1), [o.strip() for o in found.group(2).split(",")]
        if ".shared" in opcode and opcode.startswith(("ld.", "st.", "cp.async.")):
            address = _SHARED_ADDRESS.search(found.group(2))
            base = registers.get(address.group(1)) if address else None
            if base is None:
                raise ValueError(f"{kernel}: `{code.strip()}` takes a shared address not known before the loop")
            offset = int(address.group(2) or 0)
            accesses.append(SharedAccess(code.strip(), _width(opcode, operands), (base + offset) & 0xFFFFFFFF))
        elif re.fullmatch(r"%r\d+", operands[0]):
            registers[operands[0]] = None if in_loop else _evaluated(opcode, operands, registers, specials)
    return accesses


def wavefronts(addresses: np.ndarray, width: int) -> int:
    """Wavefronts one warp's shared access takes, ``addresses`` its 32 lanes' and ``width`` bytes each: the lanes
    go in phases of ``WAVEFRONT_BYTES`` (8 lanes for 16 bytes, 16 for 8, all 32 for 4), and a phase takes as
    many wavefronts as its busiest bank holds distinct words (one word read by many lanes is one)."""
    lanes = max(1, min(WARP, WAVEFRONT_BYTES // width))
    words = addresses[:, None] // BANK_BYTES + np.arange(max(1, width // BANK_BYTES))
    phases = words.reshape(WARP // lanes, -1)
    return sum(int(np.bincount(np.unique(phase) % BANKS, minlength=BANKS).max()) for phase in phases)


@cache
def copy_bytes_per_clock(ptx: str, kernel: str, threads: int) -> float:
    """Bytes the global->shared stream ``kernel`` copies per clock per SM where its shared-memory accesses bound
    it: a warp's 32 x ``STREAM_CHUNK_BYTES`` per iteration over the wavefronts of its accesses (each warp's,
    averaged)."""
    accesses = shared_accesses(ptx, kernel, threads)
    per_warp = [
        sum(wavefronts(access.addresses[w : w + WARP], access.width) for access in accesses)
        for w in range(0, threads, WARP)
    ]
    return WARP * STREAM_CHUNK_BYTES / float(np.mean(per_warp))


def _copy_gbps(gpu, launch, kernel: str, path: str, level: str) -> float:
    """The stream's rate: the level's read rate at the path's share, or the banks' bound on the SMs it runs on."""
    m = model(gpu)
    source = m.copy_share[path] * memory_read_gbps(gpu, level)
    ptx = m.ptx.get(kernel) or probe_ptx(kernel)
    banks = copy_bytes_per_clock(ptx, kernel, launch.threads) * min(gpu.sm_count, launch.blocks) * gpu.mhz / 1e3
    return min(source, banks)


def _copy_stream(kernel: str, path: str):
    def simulate(gpu, launch, src, iters, passes, out) -> float:
        assert launch.threads % WARP == 0, "whole warps: the slots are laid out per warp, bar.warp.sync -1"
        threads = launch.blocks * launch.threads
        nbytes = int(iters) * threads * STREAM_CHUNK_BYTES
        sums = thread_totals(src.data[:nbytes].view(np.uint32), threads)
        out.data.view(np.uint64)[:threads] = _corrupt(gpu, sums[np.arange(threads) ^ 1] * np.uint64(int(passes)))
        gbps = _copy_gbps(gpu, launch, kernel, path, "l2" if nbytes <= gpu.l2_bytes // 2 else "dram")
        return (int(passes) * nbytes / (gbps * 1e9) * 1e3 + LAUNCH_MS) * gpu._jitter()

    return simulate


def bulk_stream(gpu, launch, src, size, stages, chunks, steps, out) -> float:
    size, steps, chunks, blocks = int(size), int(steps), int(chunks), launch.blocks
    chunk_sums = chunk_totals(src.data[: chunks * size].view(np.uint32)).reshape(chunks, -1).sum(axis=1)
    index = (np.arange(blocks)[:, None] + np.arange(steps)[None, :] * blocks) % chunks
    per_thread = np.zeros((blocks, launch.threads), dtype=np.uint64)
    per_thread[:, 0] = chunk_sums[index].sum(axis=1, dtype=np.uint64)  # only the block's total is checked
    out.data.view(np.uint64)[: per_thread.size] = _corrupt(gpu, per_thread.ravel())
    in_flight = size * int(stages)
    gbps = model(gpu).bulk_gbps * min(1.0, in_flight / 65536)
    return (blocks * steps * size / (gbps * 1e9) * 1e3 + LAUNCH_MS) * gpu._jitter()


def dsm_stream(gpu, launch, peer, iters, out) -> float:
    assert launch.grid[0] % 2 == 0, "clusters of two"
    threads = launch.threads
    rows = []
    for block in range(launch.blocks):
        rank_read = (block % 2) ^ int(peer)
        words = np.arange(threads * 16, dtype=np.uint32) * np.uint32(PATTERN_MULTIPLIER) + np.uint32(rank_read)
        rows.append(thread_totals(words.astype(np.uint32), threads) * np.uint64(int(iters)))
    out.data.view(np.uint64)[: launch.blocks * threads] = _corrupt(gpu, np.concatenate(rows))
    nbytes = launch.blocks * threads * 64 * int(iters)
    return (nbytes / (model(gpu).dsm_gbps[int(peer)] * 1e9) * 1e3 + LAUNCH_MS) * gpu._jitter()


KERNELS = {
    "gp_ac_cp_async_chase_ca": _cp_async_chase("ca"),
    "gp_ac_cp_async_chase_cg": _cp_async_chase("cg"),
    "gp_ac_bulk_chase": bulk_chase,
    "gp_ac_dsm_chase": dsm_chase,
    "gp_ac_copy_cp_async": _copy_stream("gp_ac_copy_cp_async", "cp_async"),
    "gp_ac_copy_plain": _copy_stream("gp_ac_copy_plain", "plain"),
    "gp_ac_bulk_stream": bulk_stream,
    "gp_ac_dsm_stream": dsm_stream,
}

SIMULATION = Simulation(kernels=KERNELS, fast_settings=FAST_SETTINGS)
