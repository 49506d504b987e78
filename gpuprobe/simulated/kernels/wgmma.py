"""The wgmma kernels on the simulated GPU: D computed from the operands as the descriptors say they
lie, written back in the D-fragment layout, with a timing model.

A reads its operands through the ``layout`` bits the host passed (leading and stride byte offsets),
and, for RS kernels, A from the registers each thread loaded: a host that lays operands out one way
and describes them another gets a wrong D, as on a GPU. Flags set on the FakeGpu instance:
``wgmma_corrupt`` (one element of the last warpgroup's D is one more than it should be),
``wgmma_corrupt_all`` (every warpgroup's D is, in the same element), ``wgmma_metadata_halves_swapped``
(a sparse wgmma reads each metadata register's halves the other way round). A sparse wgmma expands A
from the metadata registers as the hardware reads them with selector 0. The records' %globaltimer
readings move in ticks (:mod:`gpuprobe.simulated.timer`).
"""

from __future__ import annotations

import functools

import numpy as np

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
from gpuprobe.families.wgmma.ptx import Kernel, kernels
from gpuprobe.simulated.timer import at_launch

# Settings for a whole-suite run on the simulated GPU (132 SMs, 8 blocks an SM by its occupancy
# answer): one warpgroup a block and one block an SM keep each throughput launch's D at 8.7 MB.
FAST_SETTINGS = Settings(max_repeats=3, warpgroups_per_block=1, blocks_per_sm=1, throughput_repeats=2, gemm_repeats=2)
LATENCY_BASE = 14.0  # cycles a dependent wgmma costs on top of its N/2-cycle floor
THROUGHPUT_EFFICIENCY = {"zero": 0.98, "random": 0.96}  # fraction of the per-SM dense rate per clock
RANDOM_CLOCK_DROP = 0.93  # random operands draw more power: the clock falls this much
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


def _product(kernel: Kernel, a, b, layout: int, b_layout: int | None, meta, swapped: bool) -> np.ndarray:
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
    return a_values @ decode(b_bits.copy().view(element), wgmma).T


def _chain(product: np.ndarray, times: int, bits: int) -> np.ndarray:
    """``times`` steps of D += product from 0 in an accumulator of ``bits`` significant bits, rounding
    to nearest (ties to even) each step: exact while the sums fit, then stalled. Each distinct term is
    stepped once (a ternary product holds a few dozen), until none changes: at most 2**bits steps."""
    if np.all(times * np.abs(product) < 2.0 ** (bits - 1)):
        return times * product
    terms, where = np.unique(product, return_inverse=True)
    return _chain_of_terms(terms.tobytes(), times, bits)[where].reshape(product.shape)


@functools.cache
def _chain_of_terms(terms: bytes, times: int, bits: int) -> np.ndarray:
    term = np.frombuffer(terms, dtype=np.float64)
    d = np.zeros_like(term)
    for _ in range(times):
        moved = _round(d + term, bits)
        if np.array_equal(moved, d):
            break
        d = moved
    return d


def _round(x: np.ndarray, bits: int) -> np.ndarray:
    """``x`` rounded to ``bits`` significant bits, to nearest, ties to even."""
    mantissa, exponent = np.frexp(x)
    return np.ldexp(np.round(np.ldexp(mantissa, bits)), exponent - bits)


def _clock(gpu, zero: bool, purpose: str) -> float:
    return gpu.mhz * (1.0 if zero or purpose == "lat" else RANDOM_CLOCK_DROP)


def simulate(gpu, launch, kernel: Kernel, a, b, layout, iters, out, b_layout=None, meta=None) -> float:
    iterations = int(iters)
    warpgroups = launch.blocks * launch.threads // WARPGROUP
    swapped = getattr(gpu, "wgmma_metadata_halves_swapped", False)
    product = _product(kernel, a, b, int(layout), None if b_layout is None else int(b_layout), meta, swapped)
    times = iterations if kernel.purpose == "lat" else kernel.batch
    d = _chain(product, times, kernel.wgmma.chain_bits)
    d = d.astype(np.float32) if kernel.wgmma.accumulator == "f32" else d.astype(np.int64).astype(np.int32)
    rows, cols = d_fragment_index(kernel.n)
    fragments = np.repeat(d[rows, cols][None], warpgroups, axis=0)
    if getattr(gpu, "wgmma_corrupt_all", False):
        fragments[:, 5, 1] += 1
    if getattr(gpu, "wgmma_corrupt", False):
        fragments[warpgroups - 1, 3, 0] += 1
    fragments = fragments.view(np.uint32)
    zero = not product.any() and not a.data.any()
    mhz = _clock(gpu, zero, kernel.purpose)
    if kernel.purpose == "lat":
        per = kernel.n / 2 + LATENCY_BASE
        cycles = np.full(warpgroups, gpu.clock_read + gpu.edge + iterations * per * gpu._jitter())
    else:
        per_sm = max(1, warpgroups // min(gpu.sm_count, launch.blocks))
        flop = kernel.flop() * kernel.batch * iterations * per_sm
        rate = FLOP_PER_CLK_PER_SM[kernel.wgmma.name] * THROUGHPUT_EFFICIENCY["zero" if zero else "random"]
        rate *= 2 * SPARSE_EFFICIENCY if kernel.sparse else 1.0
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


KERNELS = {k.name: _bind(k) for k in kernels()}
