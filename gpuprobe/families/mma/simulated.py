"""The mma.sync chain kernels on the simulated GPU: D = C + A B in NumPy, time from a model.

Each lane's fragments are decoded from the buffer the host uploaded (the PTX ISA layouts of
gpuprobe.families.mma.fragments, whose positions tests/test_mma.py checks against the ISA's
figures), A, B and C are assembled, and every lane writes the sum of its 8 chains, each at
C + A B, encoded in the accumulator type. Time per iteration on an SM is
:func:`~gpuprobe.simulated.chain_output.iteration_cycles` over a loop of 16 mma (32 in a twin): the
chain bound (16 / ILP dependent mma at the variant's latency, and the loop branch's :data:`LOOP_BUBBLE`
where the mma's latency does not hide it), the issue bound (each warp's mma and its loop control) and
the pipe bound (the SM's multiply-adds over the variant's peak). A 16-mma f16 m16n8k8 loop timed alone
so reads (16 x 16 + 14) / 16 = 16.875 cycles a step, as an H200 did, and m16n8k16 its 24; the twin's
difference reads 16. ``gpu.mma_corrupt = True`` flips a bit of one lane's D;
``gpu.mma_peak`` (e.g. ``{"f16.m16n8k16": 0.95}``) scales a variant's peak. Blocks are placed on
SMs, and their timer read, as :mod:`gpuprobe.simulated.chain_output` says (now and then two blocks on one
SM). Nothing it produces is a measurement.
"""

from __future__ import annotations

import functools
import math

import numpy as np

from gpuprobe.families.issue_sweep import TWIN_PASSES, body_of, twin_kernel
from gpuprobe.families.mma import ILPS, SPARSE_ILPS, Settings
from gpuprobe.families.mma.fragments import (
    CHAINS,
    LANES,
    VARIANTS,
    Variant,
    a_position,
    accumulator_words,
    b_position,
    c_positions,
    decode,
)
from gpuprobe.families.mma.numerics import NUMERIC_VARIANTS
from gpuprobe.families.mma.sparse import METADATA_WORD, SPARSE_LANE_WORDS, SPARSE_VARIANTS, SparseVariant
from gpuprobe.simulated.chain_output import iteration_cycles, place_blocks, warps_on_sm, write
from gpuprobe.simulated.simulation import Simulation

FAST_SETTINGS = Settings(warps=(1, 4, 32), latency_target_cycles=100_000, sweep_target_cycles=100_000)

# (name, shape): (latency in cycles, peak multiply-adds per clock per SM), H100-like
TIMING: dict[tuple[str, str], tuple[float, float]] = {
    ("f16", "m16n8k8"): (16.0, 1000.0),
    ("f16_f16acc", "m16n8k8"): (16.0, 1000.0),
    ("f16", "m16n8k16"): (24.0, 1340.0),
    ("f16_f16acc", "m16n8k16"): (24.0, 1340.0),
    ("bf16", "m16n8k16"): (24.0, 1340.0),
    ("tf32", "m16n8k8"): (24.0, 670.0),
    ("int8", "m8n8k16"): (16.0, 2000.0),
    ("int8", "m16n8k32"): (24.0, 2680.0),
    ("int4", "m8n8k32"): (16.0, 4000.0),
    ("int4", "m16n8k64"): (24.0, 5000.0),
    ("e4m3", "m16n8k32"): (24.0, 2600.0),
    ("e5m2", "m16n8k32"): (24.0, 2600.0),
}
# mma.sp: latency, and the dense-equivalent multiply-adds per clock per SM (zeros counted): 1.5-1.8 x the dense
SPARSE_TIMING: dict[tuple[str, str], tuple[float, float]] = {
    ("f16", "m16n8k16"): (20.0, 2000.0),
    ("f16", "m16n8k32"): (28.0, 2400.0),
    ("bf16", "m16n8k32"): (28.0, 2400.0),
    ("int8", "m16n8k32"): (20.0, 4000.0),
    ("int8", "m16n8k64"): (28.0, 4800.0),
    ("e4m3", "m16n8k64"): (28.0, 4600.0),
}
_BITS = {"f16": 16, "bf16": 16, "tf32": 32, "int8": 8, "int4": 4, "e4m3": 8, "e5m2": 8}
# Cycles an iteration's loop control adds to a chain of 16-cycle mma (an H200's f16 m16n8k8: 16.875 x 16 =
# 256 + 14); ptxas's schedule of a 24-cycle or longer mma hides it (m16n8k16 read 24.0 there).
LOOP_BUBBLE = 14.0
HIDDEN_BEHIND = 24.0  # the mma latency from which the loop control hides in the chain's stalls


def loop_bubble(latency: float) -> float:
    """The cycles a chain of mma of ``latency`` waits each iteration for its loop's branch."""
    return 0.0 if latency >= HIDDEN_BEHIND else LOOP_BUBBLE


def _decode(kind: str, bits: int) -> float:
    if kind == "f16":
        return float(np.uint16(bits).view(np.float16))
    if kind == "bf16":
        return float(np.uint32(bits << 16).view(np.float32))
    if kind == "tf32":
        return float(np.uint32(bits & 0xFFFFE000).view(np.float32))  # the low 13 mantissa bits are not read
    if kind in ("int8", "int4"):
        width = _BITS[kind]
        return float(bits - (1 << width) if bits >> (width - 1) else bits)
    exponent_bits, bias = (4, 7) if kind == "e4m3" else (5, 15)
    mantissa_bits = 7 - exponent_bits
    sign = -1.0 if bits & 0x80 else 1.0
    exponent = (bits >> mantissa_bits) & ((1 << exponent_bits) - 1)
    mantissa = bits & ((1 << mantissa_bits) - 1)
    if exponent == 0:
        return sign * mantissa * 2.0 ** (1 - bias - mantissa_bits)
    return sign * (1 + mantissa / (1 << mantissa_bits)) * 2.0 ** (exponent - bias)


def element(v: Variant, word: int, j: int) -> float:
    bits = _BITS[v.input_type]
    return _decode(v.input_type, (int(word) >> (bits * j)) & ((1 << bits) - 1))


def _accumulator_value(v: Variant, words: np.ndarray, i: int) -> float:
    if v.accumulator == "f16":
        return float(np.uint16((int(words[i // 2]) >> (16 * (i % 2))) & 0xFFFF).view(np.float16))
    if v.accumulator == "s32":
        return float(np.uint32(words[i]).view(np.int32))
    return float(np.uint32(words[i]).view(np.float32))


def sparse_a(v: SparseVariant, kept: np.ndarray, fragments: np.ndarray, swapped: bool = False) -> np.ndarray:
    """A (16 x K) from its kept elements (16 x K/2) and the lanes' metadata registers as the hardware reads
    them with selector 0: for 16-bit types lane 4 q + p holds K part p (16 elements) of row q (low half)
    and q + 8 (high); for 8-bit ones lanes 4 q and 4 q + 1 hold rows q and q + 8, K 0..31, lanes + 2 K
    32..63 (as an H200 read them); ``swapped``: a part that reads the row pair the other way round."""
    a = np.zeros((v.m, v.k))
    for row in range(v.m):
        half, q = divmod(row, 8)
        half ^= int(swapped)
        for chunk in range(v.k // 4):
            if v.per_register == 2:  # 16-bit: lane 4 q + p, K part p, the row pair's halves
                word = int(fragments[4 * q + chunk // 4, METADATA_WORD])
                nibble = (word >> (16 * half + 4 * (chunk % 4))) & 0xF
            else:  # 8-bit: lane 4 q + half + 2 (K part), one row's 8 chunks
                word = int(fragments[4 * q + half + 2 * (chunk // 8), METADATA_WORD])
                nibble = (word >> (4 * (chunk % 8))) & 0xF
            a[row, 4 * chunk + (nibble & 3)] = kept[row, 2 * chunk]
            a[row, 4 * chunk + (nibble >> 2)] = kept[row, 2 * chunk + 1]
    return a


def lane_results(v: Variant, fragments: np.ndarray, swapped: bool = False) -> np.ndarray:
    """What each lane writes (4 words): the sum of 8 chains, each at C + A B, from the raw fragments (an mma.sp's
    A from its kept elements, placed by the metadata)."""
    held = v.compressed if isinstance(v, SparseVariant) else v
    a, b, c = np.zeros((held.m, held.k)), np.zeros((v.k, v.n)), np.zeros((v.m, v.n))
    e = v.per_register
    for lane in range(LANES):
        words = fragments[lane]
        for r in range(v.a_registers):
            for j in range(e):
                a[a_position(held, lane, r, j)] = element(v, words[r], j)
        for r in range(v.b_registers):
            for j in range(e):
                b[b_position(v, lane, r, j)] = element(v, words[8 + r], j)
        for i, position in enumerate(c_positions(v, lane)):
            c[position] = _accumulator_value(v, words[12:16], i)
    if isinstance(v, SparseVariant):
        a = sparse_a(v, a, fragments, swapped)
    d = (c + a @ b) * CHAINS
    out = np.zeros((LANES, 4), dtype=np.uint32)
    for lane in range(LANES):
        out[lane, : v.d_words] = accumulator_words(v, [d[p] for p in c_positions(v, lane)])
    return out


@functools.lru_cache(maxsize=64)
def cached_lane_results(v: Variant, fragments: bytes, swapped: bool = False) -> np.ndarray:
    words = SPARSE_LANE_WORDS if isinstance(v, SparseVariant) else 16
    return lane_results(v, np.frombuffer(fragments, dtype=np.uint32).reshape(LANES, words), swapped)


def simulate(v: Variant, ilp: int, passes: int):
    latency, peak = (SPARSE_TIMING if isinstance(v, SparseVariant) else TIMING)[(v.name, v.shape)]
    instructions = passes * body_of(v.kernel(ilp))

    def execute(gpu, launch, iters, fragments, out) -> float:
        iterations = int(iters)
        sms = place_blocks(gpu, launch)
        swapped = getattr(gpu, "mma_metadata_halves_swapped", False)
        lanes = cached_lane_results(v, fragments.data.tobytes(), swapped)
        rate = peak * getattr(gpu, "mma_peak", {}).get(f"{v.name}.{v.shape}", 1.0)  # a slower part, if asked
        warps = warps_on_sm(launch, sms)
        chain = latency * instructions / ilp
        per_iteration = iteration_cycles(instructions, chain, warps * instructions * v.fmas / rate, warps,
                                         loop_bubble(latency))  # fmt: skip
        sums = lanes[np.arange(launch.blocks * launch.threads) % LANES]
        if getattr(gpu, "mma_corrupt", False):
            sums[-1, 0] ^= 1 << 20
        results = np.ascontiguousarray(sums).view(np.uint64).reshape(-1, 2)
        return write(gpu, launch, sms, out, per_iteration, iterations, results)

    return execute


KERNELS = {twin_kernel(v.kernel(ilp), passes): simulate(v, ilp, passes)
           for v in VARIANTS for ilp in ILPS for passes in (1, TWIN_PASSES)}  # fmt: skip
KERNELS.update({twin_kernel(v.kernel(ilp), passes): simulate(v, ilp, passes)
                for v in SPARSE_VARIANTS for ilp in SPARSE_ILPS for passes in (1, TWIN_PASSES)})  # fmt: skip


def _keep(value: float, bits: int, nearest: bool) -> float:
    """``value`` with ``bits`` mantissa bits, the rest truncated toward zero or rounded to nearest."""
    if value == 0.0:
        return 0.0
    scale = 2.0 ** (math.floor(math.log2(abs(value))) - bits)
    return (round(value / scale) if nearest else math.trunc(value / scale)) * scale


def numeric_d(v: Variant, a: np.ndarray, b: np.ndarray, c: np.ndarray, gpu) -> np.ndarray:
    """The modelled tensor core: tf32 inputs keep ``gpu.tf32_bits`` (10) bits, truncated unless
    ``gpu.tf32_nearest``; each D cell sums C and its products exactly, keeps ``gpu.tensor_sum_bits``
    (23) fraction bits below its largest term, truncating, and rounds to f32."""
    if v.input_type == "tf32":
        keep = np.vectorize(lambda x: _keep(x, getattr(gpu, "tf32_bits", 10), getattr(gpu, "tf32_nearest", False)))
        a, b = keep(a), keep(b)
    bits = getattr(gpu, "tensor_sum_bits", 23)
    d = np.zeros_like(c)
    for i in range(v.m):
        for j in range(v.n):
            terms = [c[i, j], *(a[i, :] * b[:, j])]
            largest = max(abs(t) for t in terms)
            total = math.fsum(terms)
            if largest:
                quantum = 2.0 ** (math.floor(math.log2(largest)) - bits)
                total = math.trunc(total / quantum) * quantum
            d[i, j] = float(np.float32(total))
    return d


def simulate_numerics(v: Variant):
    def execute(gpu, launch, fragments, out) -> None:
        words = fragments.data.view(np.uint32).reshape(LANES, 16)
        a, b, c = np.zeros((v.m, v.k)), np.zeros((v.k, v.n)), np.zeros((v.m, v.n))
        bits = 32 // v.per_register
        for lane in range(LANES):
            for r in range(v.a_registers):
                for j in range(v.per_register):
                    a[a_position(v, lane, r, j)] = decode(
                        v.input_type, (int(words[lane, r]) >> (bits * j)) & ((1 << bits) - 1)
                    )
            for r in range(v.b_registers):
                for j in range(v.per_register):
                    b[b_position(v, lane, r, j)] = decode(
                        v.input_type, (int(words[lane, 8 + r]) >> (bits * j)) & ((1 << bits) - 1)
                    )
            for i, position in enumerate(c_positions(v, lane)):
                c[position] = decode("f32", int(words[lane, 12 + i]))
        d = numeric_d(v, a, b, c, gpu)
        lanes = np.zeros((LANES, 4), dtype=np.uint32)
        for lane in range(LANES):
            lanes[lane] = [np.float32(d[p]).view(np.uint32) for p in c_positions(v, lane)]
        if getattr(gpu, "mma_corrupt", False):
            lanes[5, 1] ^= 1 << 22
        out.data.view(np.uint32)[: lanes.size] = lanes.ravel()

    return execute


KERNELS.update({f"gp_mma_numerics_{v.name}_{v.shape}": simulate_numerics(v) for v in NUMERIC_VARIANTS})

SIMULATION = Simulation(kernels=KERNELS, fast_settings=FAST_SETTINGS)
