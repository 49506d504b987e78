"""The wgmma kernels on the simulated GPU: D computed from the operands as the descriptors say they
lie, written back in the D-fragment layout, with a timing model; and the clock stamps around cuBLAS.

A reads its operands through the ``layout`` bits the host passed (leading and stride byte offsets),
and, for RS kernels, A from the registers each thread loaded: a host that lays operands out one way
and describes them another gets a wrong D, as on a GPU. An e4m3 chain accumulates as Hopper's fp8
wgmma does (:func:`fp8_chain`, DeepSeek-V3's description): a long ternary chain stops growing at
2**14. One warpgroup per SM issues a few percent under the peak per clock (it waits out each batch
alone). Flags set on the SimulatedGpu instance:
``wgmma_corrupt`` (one element of the last warpgroup's D is one more than it should be),
``wgmma_corrupt_all`` (every warpgroup's D is, in the same element), ``wgmma_metadata_halves_swapped``
(a sparse wgmma reads each metadata register's halves the other way round), ``wgmma_fp8_accumulator_bits``
(the fp8 accumulator's width, default :data:`FP8_ACCUMULATOR_BITS`) and ``cublas_mhz`` (the clock cuBLAS's
GEMMs run at, default :data:`CUBLAS_CLOCK_DROP` x the part's). A sparse wgmma expands A from the
metadata registers as the hardware reads them with selector 0. The records' %globaltimer readings move
in ticks (:mod:`gpuprobe.simulated.timer`); the clock stamps read a timer and per-SM cycle counters that
a simulated GEMM batch advances (:func:`bracket_gemm`).
"""

from __future__ import annotations

import functools

import numpy as np

from gpuprobe.families.library_timing import STAMP_WORDS
from gpuprobe.families.sampling import Stopping
from gpuprobe.families.wgmma import Settings
from gpuprobe.families.wgmma.layout import (
    K_BYTES,
    WARPGROUP,
    M,
    a_fragment_index,
    d_fragment_index,
    operand_offset,
)
from gpuprobe.families.wgmma.operands import decode
from gpuprobe.families.wgmma.ptx import CLOCK_STAMP_KERNEL, Kernel, kernels
from gpuprobe.runner.launcher import Stamp
from gpuprobe.simulated.simulation import Simulation
from gpuprobe.simulated.timer import at_launch, continuous

# Settings for a whole-suite run on the simulated GPU (132 SMs, 8 blocks an SM by its occupancy
# answer): one warpgroup a block and one block an SM keep each throughput launch's D at 8.7 MB.
FAST_SETTINGS = Settings(sampling=Settings().sampling.at_most(3), warpgroups_per_block=1, blocks_per_sm=1,
                         throughput_sampling=Stopping(2, 2), gemm_sampling=Stopping(2, 2))  # fmt: skip
LATENCY_BASE = 14.0  # cycles a dependent wgmma costs on top of its N/2-cycle floor
THROUGHPUT_EFFICIENCY = {"zero": 0.98, "random": 0.96}  # fraction of the per-SM dense rate per clock
RANDOM_CLOCK_DROP = 0.93  # random operands draw more power: the clock falls this much
ONE_WARPGROUP_SHORTFALL = 0.97  # one warpgroup an SM waits out each batch alone (H200: 0.964 vs 0.993 per clock)
FP8_ACCUMULATOR_BITS = 14  # Hopper's fp8 wgmma: DeepSeek-V3 Technical Report, arXiv:2412.19437, section 3.5.2
CUBLAS_CLOCK_DROP = 0.90  # cuBLAS's GEMM (random operands, and its DRAM traffic) runs at a lower clock still
STAMP_GAP_NS = 2000.0  # between a clock stamp and the GEMM batch beside it (a launch's spacing)
FLOP_PER_CLK_PER_SM = {"bf16": 4096, "f16": 4096, "tf32": 2048, "e4m3": 8192, "s8": 8192}


SPARSE_EFFICIENCY = 0.8  # a sparse wgmma's rate, of twice the dense rate per clock (so 1.6 x its dense twin)


def _operand(data: np.ndarray, rows: int, layout: int, k_bytes: int = K_BYTES) -> np.ndarray:
    """A K-major operand's raw bytes (rows x k_bytes) read where the descriptor's offsets say they lie."""
    return data[operand_offset(np.arange(rows)[:, None], np.arange(k_bytes)[None, :], layout)]


def _sparse_a(values: np.ndarray, meta: np.ndarray, swapped: bool = False) -> np.ndarray:
    """The dense A (64 x 2K) of a sparse wgmma from A's kept elements (64 x K) and the threads' metadata as
    the hardware reads it with selector 0: in each group of four lanes, lane 0 holds K elements 0..15 and
    lane 1 elements 16..31 of rows 16 w + group (low half) and 16 w + group + 8 (high half)."""
    rows, kept = values.shape
    dense = np.zeros((rows, 2 * kept))
    words = meta.data.view(np.uint32)[:WARPGROUP]
    for row in range(rows):
        warp, within = divmod(row, 16)
        half, group = divmod(within, 8)
        half ^= int(swapped)  # a part that read the halves the other way round
        for chunk in range(kept // 2):
            word = int(words[32 * warp + 4 * group + chunk // 4])
            nibble = (word >> (16 * half + 4 * (chunk % 4))) & 0xF
            first, second = nibble & 3, nibble >> 2
            dense[row, 4 * chunk + first] = values[row, 2 * chunk]
            dense[row, 4 * chunk + second] = values[row, 2 * chunk + 1]
    return dense


def _a_from_registers(data: np.ndarray, kernel: Kernel) -> np.ndarray:
    """A's raw elements (64 x K) from the 128 threads' four A registers, per the fragment layout."""
    element = np.dtype(f"u{kernel.wgmma.element_bytes}")
    registers = data[: WARPGROUP * 16].view(element).reshape(WARPGROUP, -1)
    rows, cols = a_fragment_index(kernel.wgmma)
    a = np.zeros((M, kernel.wgmma.k), dtype=element)
    a[rows, cols] = registers
    return a


def _values(kernel: Kernel, a, b, layout: int, b_layout: int | None, meta, swapped: bool) -> tuple[np.ndarray, ...]:
    """A's (64 x K, a sparse A expanded) and B's (N x K) values, as the descriptors and registers say they lie."""
    wgmma = kernel.wgmma
    element = np.dtype(f"u{wgmma.element_bytes}")
    if kernel.source == "ss":
        a_bits = _operand(a.data, M, layout).copy().view(element)
    else:
        a_bits = _a_from_registers(a.data, kernel)
    b_bits = _operand(b.data, kernel.n, layout if b_layout is None else b_layout, kernel.b_row_bytes)
    a_values = decode(a_bits, wgmma)
    if kernel.sparse:
        a_values = _sparse_a(a_values, meta, swapped)
    return a_values, decode(b_bits.copy().view(element), wgmma)


def _accumulated(gpu, kernel: Kernel, a_values: np.ndarray, b_values: np.ndarray, times: int) -> np.ndarray:
    """D after ``times`` steps of D += A @ B^T from 0: exact in an f32 or s32 accumulator (the sums here fit
    it), as Hopper's fp8 accumulator has it for e4m3 (:func:`fp8_chain`)."""
    if not kernel.wgmma.narrow_accumulator:
        return times * (a_values @ b_values.T)
    bits = getattr(gpu, "wgmma_fp8_accumulator_bits", FP8_ACCUMULATOR_BITS)
    a, b = np.ascontiguousarray(a_values, dtype=np.float64), np.ascontiguousarray(b_values, dtype=np.float64)
    return _narrow_accumulated(a.tobytes(), b.tobytes(), a.shape[1], times, bits)


@functools.lru_cache(maxsize=64)
def _narrow_accumulated(a_raw: bytes, b_raw: bytes, k: int, times: int, bits: int) -> np.ndarray:
    """:func:`_accumulated` in a narrow accumulator, of operands given as their float64 bytes (rows of ``k``).
    Kept per operands: every sample of a probe launches the same operands, and finding the rows that share
    their products is most of a simulated fp8 launch's time. Read-only, being shared."""
    a_values, b_values = np.frombuffer(a_raw).reshape(-1, k), np.frombuffer(b_raw).reshape(-1, k)
    products = (a_values[:, None, :] * b_values[None, :, :]).reshape(-1, k)
    d = fp8_chain(products, times, bits).reshape(len(a_values), len(b_values))
    d.setflags(write=False)
    return d


def fp8_chain(products: np.ndarray, times: int, bits: int) -> np.ndarray:
    """``times`` steps of d += sum(products of its row) from 0, per row, in an fp8 wgmma's accumulator as
    DeepSeek-V3 describes Hopper's (arXiv:2412.19437, section 3.5.2): the products are aligned to the largest
    exponent among them and the running sum, each keeps its highest ``bits`` bits (truncated toward zero),
    and the sum kept in the register keeps ``bits`` significant bits. A chain of unit products grows exactly
    up to 2**bits and stops there. Rows with the same products (in any order) are stepped once."""
    first, where = _same_products(products)
    return _fp8_rows(products[first].tobytes(), products.shape[1], times, bits)[where]


def _same_products(products: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(one row of each distinct multiset of products, each row's index among those): a row's multiset is
    its count of each distinct value, one integer when the values are few (a ternary chain's -1, 0, 1);
    with many values (random operands) every row stands alone."""
    rows, k = products.shape
    values, codes = np.unique(products, return_inverse=True)
    if (k + 1) ** len(values) >= 2**62:
        return np.arange(rows), np.arange(rows)
    counts = (codes.reshape(rows, k)[:, :, None] == np.arange(len(values))).sum(axis=1)
    keys = counts @ (k + 1) ** np.arange(len(values), dtype=np.int64)
    _, first, where = np.unique(keys, return_index=True, return_inverse=True)
    return first, where.reshape(-1)


@functools.cache
def _fp8_rows(raw: bytes, k: int, times: int, bits: int) -> np.ndarray:
    """:func:`fp8_chain` over distinct rows. While the alignment stays put (the sum within its binade),
    every step adds the same kept products exactly, so those steps are taken at once; a step that crosses
    into the next binade is taken alone, and one that changes nothing ends the row's chain."""
    products = np.frombuffer(raw).reshape(-1, k)
    largest = np.abs(products).max(axis=1)
    d, left = np.zeros(len(products)), np.full(len(products), times, dtype=np.int64)
    while np.any(live := left > 0):
        exponent = np.floor(np.log2(np.maximum(np.maximum(np.abs(d), largest), np.finfo(float).tiny)))
        quantum = np.exp2(exponent - bits + 1)
        kept = (np.trunc(products / quantum[:, None]) * quantum[:, None]).sum(axis=1)
        outward = (kept != 0) & (np.sign(kept) * np.sign(d) >= 0)
        with np.errstate(divide="ignore", invalid="ignore"):  # steps whose sums stay under the next binade
            room = np.where(outward, np.ceil((np.exp2(exponent + 1) - np.abs(d)) / np.abs(kept)) - 1, 0)
        jump = np.where(live, np.minimum(np.maximum(room, 0), left), 0).astype(np.int64)
        stepped = _keep_bits(np.trunc(d / quantum) * quantum + kept, bits)
        new = np.where(live, np.where(jump > 0, d + jump * kept, stepped), d)
        left = np.where(~live | (new == d), 0, left - np.maximum(jump, 1))
        d = new
    return d


def _keep_bits(x: np.ndarray, bits: int) -> np.ndarray:
    """``x`` cut to ``bits`` significant bits, toward zero."""
    exponent = np.floor(np.log2(np.maximum(np.abs(x), np.finfo(float).tiny)))
    quantum = np.exp2(exponent - bits + 1)
    return np.trunc(x / quantum) * quantum


def _clock(gpu, zero: bool, purpose: str) -> float:
    return gpu.mhz * (1.0 if zero or purpose == "lat" else RANDOM_CLOCK_DROP)


def simulate(gpu, launch, kernel: Kernel, a, b, layout, iters, out, b_layout=None, meta=None) -> float:
    iterations = int(iters)
    warpgroups = launch.blocks * launch.threads // WARPGROUP
    swapped = getattr(gpu, "wgmma_metadata_halves_swapped", False)
    a_values, b_values = _values(kernel, a, b, int(layout), None if b_layout is None else int(b_layout), meta, swapped)
    times = iterations if kernel.purpose == "lat" else kernel.batch
    d = _accumulated(gpu, kernel, a_values, b_values, times)
    d = d.astype(np.float32) if kernel.wgmma.accumulator == "f32" else d.astype(np.int64).astype(np.int32)
    rows, cols = d_fragment_index(kernel.n)
    fragments = np.repeat(d[rows, cols][None], warpgroups, axis=0)
    if getattr(gpu, "wgmma_corrupt_all", False):
        fragments[:, 5, 1] += 1
    if getattr(gpu, "wgmma_corrupt", False):
        fragments[warpgroups - 1, 3, 0] += 1
    fragments = fragments.view(np.uint32)
    zero = not d.any() and not a.data.any()
    mhz = _clock(gpu, zero, kernel.purpose)
    if kernel.purpose == "lat":
        per = kernel.n / 2 + LATENCY_BASE
        cycles = np.full(warpgroups, gpu.clock_read + gpu.edge + iterations * per * gpu._jitter())
    else:
        per_sm = max(1, warpgroups // min(gpu.sm_count, launch.blocks))
        flop = kernel.flop() * kernel.batch * iterations * per_sm
        rate = FLOP_PER_CLK_PER_SM[kernel.wgmma.name] * THROUGHPUT_EFFICIENCY["zero" if zero else "random"]
        rate *= 2 * SPARSE_EFFICIENCY if kernel.sparse else 1.0
        rate *= ONE_WARPGROUP_SHORTFALL if per_sm == 1 else 1.0
        cycles = np.full(warpgroups, flop / rate * gpu._jitter())
    true_start = np.arange(warpgroups) % 7  # the blocks start within a few ns of each other
    true_end = true_start + cycles / mhz * 1000.0
    timer = at_launch(gpu)
    start, end = timer.read(true_start), timer.read(true_end)
    records = np.stack([cycles.round().astype(np.uint64), end - start, start, end], axis=1)
    words = out.data.view(np.uint32)
    words[: warpgroups * 8] = records.reshape(-1).view(np.uint32)
    words[warpgroups * 8 : warpgroups * 8 + fragments.size] = fragments.reshape(-1)
    return float(true_end.max() / 1e6)


def _bind(kernel: Kernel):
    return lambda gpu, launch, **params: simulate(gpu, launch, kernel, **params)


# --------------------------------------------------------------------------- the clock stamps around cuBLAS


def cublas_mhz(gpu) -> float:
    """The SM clock the simulated part runs cuBLAS's GEMMs at."""
    return getattr(gpu, "cublas_mhz", gpu.mhz * CUBLAS_CLOCK_DROP)


def _stamp_sms(blocks: int, sm_count: int, slot: int) -> np.ndarray:
    """The SM each block of a stamp lands on: the block scheduler's order differs between launches, so a host
    that pairs the two stamps by block instead of by SM pairs two SMs' unrelated cycle counters."""
    return (np.arange(blocks) + slot * (sm_count // 2 + 1)) % sm_count


def clock_stamp(gpu, launch, slot, out) -> None:
    """gp_wg_clock_stamp: each block's record of its SM's %clock64 (each SM's counter started at its own
    time), the %globaltimer (the part's running time, in ticks), its %smid and the slot."""
    slot, blocks = int(slot), launch.blocks
    sm = _stamp_sms(blocks, gpu.sm_count, slot)
    cycles = (sm + 1) * 10**12 + round(getattr(gpu, "wgmma_cycles", 0.0))
    ns = continuous(gpu).read(np.full(blocks, gpu.timer_ns))
    records = np.stack([cycles.astype(np.uint64), ns, sm.astype(np.uint64), np.full(blocks, slot, np.uint64)], axis=1)
    out.data.view(np.uint64)[slot * blocks * STAMP_WORDS : (slot + 1) * blocks * STAMP_WORDS] = records.reshape(-1)


def bracket_gemm(gpu, stamp: Stamp, batch_ms: float) -> None:
    """A simulated GEMM batch of ``batch_ms`` between its clock stamps: the first stamp, the batch at
    :func:`cublas_mhz` (the part's timer and every SM's cycle counter advance), the second stamp."""
    kernel, blocks, out = stamp
    gpu._launch(kernel, blocks, 1, [np.uint32(0), out], 0, False)
    elapsed_ns = batch_ms * 1e6 + 2 * STAMP_GAP_NS
    gpu.timer_ns += elapsed_ns
    gpu.wgmma_cycles = getattr(gpu, "wgmma_cycles", 0.0) + elapsed_ns * cublas_mhz(gpu) / 1000.0
    gpu._launch(kernel, blocks, 1, [np.uint32(1), out], 0, False)


KERNELS = {**{k.name: _bind(k) for k in kernels()}, CLOCK_STAMP_KERNEL: clock_stamp}

SIMULATION = Simulation(kernels=KERNELS, fast_settings=FAST_SETTINGS)
