"""Writes ptx/roofline/tensor.ptx: the tensor-core roofline's kernels on sm_90a, TMA feeding wgmma.

Two kinds of kernel, per wgmma type (bf16, e4m3, tf32, s8):

* ``gp_rt_tma_<type>_r<R>(tmap, layout, chunk, steps, stages, out)``: the dram and l2 levels. One warpgroup a
  block; thread 0 keeps ``stages`` (2 .. :data:`MAX_STAGES`) tile pairs in flight, each a TMA load
  (cp.async.bulk.tensor.2d, one box of :data:`BOX_ROWS` rows of 128 bytes: A, 64 x 32 bytes, then B, 256 x 32
  bytes, both already in core-matrix order in global memory) completing its stage's mbarrier. Step k waits for
  its stage, issues R m64n256 wgmmas on it (A and B from shared memory, accumulating), commits them, waits for
  the previous step's group (wait_group 1, so the tensor cores always hold one), and, after a block barrier (each
  warp's wait_group covers its own share of the group alone), thread 0 refills the stage that group read: a stage
  is refilled a step after it is read, so one stage alone would wait for a load never issued. Block b walks tiles
  ``b x chunk + (k mod chunk)``: each tile once per launch when ``steps <= chunk`` (the dram level), its chunk over
  and over (the l2 level). R is the intensity knob:
  ``2 x 64 x 256 x K x R`` flop per tile pair of 10 KiB. The steps' span is bracketed by %globaltimer and
  %clock64; the record and D are written as the wgmma family's kernels write them.
* ``gp_rts_tput_ss_<type>_n<N>``: the shared level, operands resident in shared memory (no loads in the loop):
  the wgmma family's throughput kernel (:func:`gpuprobe.families.wgmma.ptx.kernel_text`) under a name and a
  shared-memory symbol of its own, at N 16 .. 256, whose smem bytes per flop are the intensity.

And, in ptx/roofline/tensor_sync.ptx (sm_80, sm_86, sm_89) and ptx/roofline/fill.ptx (every arch with a sweep):

* ``gp_rt_sync_<type>_r<R>(src, chunk, steps, out)`` (bf16, tf32, s8): the dram and l2 levels before Hopper. Four
  warps a block; every thread cp.asyncs its five 16-byte chunks of each tile pair into a ring of
  :data:`SYNC_STAGES` stages, three pairs ahead; a step waits for its pair (wait_group 2 and one barrier), each warp
  loads its 16 rows of A and all of B with 17 ldmatrix.x4 (the pairs' core-matrix order is conflict-free for it)
  and issues R x 32 mma.sync (m16n8k16 bf16, m16n8k8 tf32, m16n8k32 s8), accumulating its 16 x 256 slice of D in the
  registers the wgmma D fragment layout names, so one check serves both. The same walk, records and D as the TMA
  kernels'.
* ``gp_rt_replicate(src, period, dst, bytes)``, which fills the tiles' region on the device from a few distinct
  tile pairs (the host uploads one period, not the region).

``tests/test_roofline_tensor.py`` holds the committed file equal to what this module writes. Regenerate with
``python -m gpuprobe.families.roofline.tensor_ptx > ptx/roofline/tensor.ptx``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuprobe.families.wgmma.layout import TYPES, WgmmaType
from gpuprobe.families.wgmma.ptx import (
    A_BYTES,
    Kernel,
    accumulator_stores,
    descriptor_lines,
    kernel_text,
    shared_symbol,
    wgmma_line,
)

TENSOR_TYPES = ("bf16", "e4m3", "tf32", "s8")
REPEATS = (1, 2, 4, 8, 16)  # wgmmas a stage: the dram and l2 levels' intensity knob
SHARED_N = (16, 32, 64, 128, 256)  # the shared level's N: its intensity knob
RING_N = 256
ROW_BYTES = 128  # the tensor map's row: 64 bf16 elements
PAIR_BYTES = A_BYTES + RING_N * 32  # a stage: A then B, 10 KiB
BOX_ROWS = PAIR_BYTES // ROW_BYTES  # 80 rows: one box a stage
MAX_STAGES = 8  # the kernels' barriers
SMEM_ALIGN = 128  # a stage starts on a 128-byte boundary (the dynamic shared memory asked for includes it)
RING_THREADS = 128  # one warpgroup a block
RING_PREFIX = "gp_rt"
SHARED_PREFIX = "gp_rts"
REPLICATE_KERNEL = "gp_rt_replicate"
SYNC_TYPES = ("bf16", "tf32", "s8")  # mma.sync's types on sm_80+ (fp8 mma.sync is sm_89's)
SYNC_STAGES = 4  # the cp.async ring's stages (cp.async.wait_group takes their count less two as an immediate)
SYNC_PREFIX = "gp_rt_sync"
SYNC_CHUNKS = PAIR_BYTES // 16 // RING_THREADS  # 16-byte cp.async a thread a stage: 5
# mma.sync's shape per type (K = 32 bytes of it, as the tile pair holds) and its accumulator
SYNC_SHAPES = {"bf16": "m16n8k16.row.col.f32.bf16.bf16.f32", "tf32": "m16n8k8.row.col.f32.tf32.tf32.f32",
               "s8": "m16n8k32.row.col.s32.s8.s8.s32"}  # fmt: skip
N_BLOCKS = RING_N // 8  # mma.sync's n8 blocks across B: 32


@dataclass(frozen=True)
class RingKernel:
    """A TMA-fed wgmma kernel: its type and its wgmmas a stage."""

    wgmma: WgmmaType
    repeats: int

    @property
    def name(self) -> str:
        return ring_name(self.wgmma.name, self.repeats)

    @property
    def mma(self) -> Kernel:
        """The wgmma it issues, as the wgmma family's generator describes one (m64n256, A and B from shared memory)."""
        return Kernel("tput", "ss", self.wgmma, RING_N, prefix=RING_PREFIX)

    @property
    def registers(self) -> int:
        return RING_N // 2

    def flop_per_step(self) -> int:
        return self.repeats * self.wgmma.flop(RING_N)


@dataclass(frozen=True)
class SyncKernel:
    """A cp.async-fed mma.sync kernel (sm_80+): its type and how often it multiplies each staged tile pair."""

    wgmma: WgmmaType  # the operand type, as the wgmma family describes it (K = 32 bytes of it)
    repeats: int

    @property
    def name(self) -> str:
        return f"{SYNC_PREFIX}_{self.wgmma.name}_r{self.repeats}"

    @property
    def registers(self) -> int:
        return RING_N // 2  # a warp's 16 x 256 slice of D: 32 n8 blocks of 4 registers a thread

    def flop_per_step(self) -> int:
        return self.repeats * self.wgmma.flop(RING_N)


def ring_name(type_name: str, repeats: int) -> str:
    return f"{RING_PREFIX}_tma_{type_name}_r{repeats}"


def shared_kernel(type_name: str, n: int) -> Kernel:
    """The shared level's kernel of ``type_name`` at ``n``: the wgmma family's throughput kernel, renamed."""
    return Kernel("tput", "ss", TYPES[type_name], n, prefix=SHARED_PREFIX)


def ring_kernels() -> list[RingKernel]:
    return [RingKernel(TYPES[t], r) for t in TENSOR_TYPES for r in REPEATS]


def sync_kernels() -> list[SyncKernel]:
    return [SyncKernel(TYPES[t], r) for t in SYNC_TYPES for r in REPEATS]


def shared_kernels() -> list[Kernel]:
    return [shared_kernel(t, n) for t in TENSOR_TYPES for n in SHARED_N]


def _issue(stage: str, label: str) -> list[str]:
    """Thread 0 loads the next tile pair into ``stage``: arm its barrier for the pair's bytes, one box, then
    advance the issued count (%r9) and the tile's place in the chunk (%r10, wrapping at ``chunk``)."""
    return [
        f"\tmad.lo.u32 %r14, {stage}, 8, %r5;        // the stage's barrier",
        f"\tmad.lo.u32 %r15, {stage}, {PAIR_BYTES}, %r4;  // the stage",
        "\tadd.u32 %r16, %r8, %r10;",
        f"\tmul.lo.u32 %r16, %r16, {BOX_ROWS};          // the tile's first row",
        f"\tmbarrier.arrive.expect_tx.shared::cta.b64 %rd10, [%r14], {PAIR_BYTES};",
        "\tcp.async.bulk.tensor.2d.shared::cta.global.tile.mbarrier::complete_tx::bytes [%r15], [%rd1, {0, %r16}], "
        "[%r14];",
        "\tadd.u32 %r9, %r9, 1;",
        "\tadd.u32 %r10, %r10, 1;",
        "\tsetp.eq.u32 %p4, %r10, %r1;",
        f"\t@%p4 bra {label}_WRAP;",
        f"\tbra {label}_DONE;",
        f"{label}_WRAP:",
        "\tmov.u32 %r10, 0;",
        f"{label}_DONE:",
    ]


# A ring kernel's block record, written by one thread a block (the others branch to RECORDED): the cycles and ns
# between its clock reads (%rd5 .. %rd11, %rd4 .. %rd12) and its first and last %globaltimer, at out + 32 x block
# (%rd2, %r7).
BLOCK_RECORD = (
    "\tsub.u64 %rd13, %rd11, %rd5;",
    "\tsub.u64 %rd14, %rd12, %rd4;",
    "\tmul.wide.u32 %rd15, %r7, 32;",
    "\tadd.u64 %rd16, %rd2, %rd15;",
    "\tst.global.v2.u64 [%rd16], {%rd13, %rd14};",
    "\tst.global.v2.u64 [%rd16+16], {%rd4, %rd12};",
    "RECORDED:",
)


def ring_text(kernel: RingKernel) -> str:
    acc = kernel.wgmma.accumulator
    zero = "0f00000000" if acc == "f32" else "0"
    mma = kernel.mma
    lines = [
        f"// {kernel.wgmma.name}: TMA tile pairs into a ring of stages, {kernel.repeats} m64n{RING_N}k{mma.k} wgmma a "
        "stage (A and B from shared memory).",
        f".visible .entry {kernel.name}(.param .align 64 .b8 tmap[128], .param .u64 layout, .param .u32 chunk, "
        ".param .u32 steps, .param .u32 stages, .param .u64 out)",
        f".maxntid {RING_THREADS}, 1, 1",
        "{",
        "\t.reg .pred %p<12>;",
        "\t.reg .b32 %r<40>;",
        "\t.reg .b64 %rd<32>;",
        f"\t.reg .{acc} %d<{kernel.registers}>;",
        "\tmov.u64 %rd1, tmap;",
        "\tcvta.param.u64 %rd1, %rd1;            // the tensor map's generic address",
        "\tld.param.u64 %rd3, [layout];",
        "\tld.param.u32 %r1, [chunk];",
        "\tld.param.u32 %r2, [steps];",
        "\tld.param.u32 %r3, [stages];",
        "\tld.param.u64 %rd2, [out];",
        "\tcvta.to.global.u64 %rd2, %rd2;",
        f"\tmov.u32 %r4, {shared_symbol(RING_PREFIX)};",
        f"\tadd.u32 %r4, %r4, {SMEM_ALIGN - 1};",
        f"\tand.b32 %r4, %r4, {-SMEM_ALIGN};             // stage 0",
        f"\tmov.u32 %r5, {RING_PREFIX}_bars;",
        "\tmov.u32 %r6, %tid.x;",
        "\tmov.u32 %r7, %ctaid.x;",
        "\tmul.lo.u32 %r8, %r7, %r1;             // the block's first tile",
        "\tmov.u32 %r9, 0;                       // tile pairs issued",
        "\tmov.u32 %r10, 0;                      // the next one's place in the chunk",
        "\tsetp.eq.u32 %p1, %r6, 0;              // thread 0 issues the loads",
        "\t@!%p1 bra INITED;",
        "\tmov.u32 %r11, 0;",
        "INIT:",
        "\tmad.lo.u32 %r12, %r11, 8, %r5;",
        "\tmbarrier.init.shared::cta.b64 [%r12], 1;",
        "\tadd.u32 %r11, %r11, 1;",
        "\tsetp.lt.u32 %p2, %r11, %r3;",
        "\t@%p2 bra INIT;",
        "\tfence.mbarrier_init.release.cluster;",
        "\tmin.u32 %r13, %r3, %r2;               // the first stages, never past the steps",
        "PROLOGUE:",
        "\tsetp.ge.u32 %p3, %r9, %r13;",
        "\t@%p3 bra INITED;",
        *_issue("%r9", "FIRST"),
        "\tbra PROLOGUE;",
        "INITED:",
        "\tbar.sync 0;",
        *(f"\tmov.{acc} %d{i}, {zero};" for i in range(kernel.registers)),
        "\tmov.u32 %r17, 0;                      // step",
        "\tmov.u32 %r18, 0;                      // its stage",
        "\tmov.u32 %r19, 0;                      // the phase it waits for",
        "\tmov.u32 %r20, 0;                      // the stage the previous step read",
        "\tmov.u64 %rd4, %globaltimer;",
        "\tmov.u64 %rd5, %clock64;",
        "STEP:",
        "\tmad.lo.u32 %r21, %r18, 8, %r5;",
        "WAIT:",
        "\tmbarrier.try_wait.parity.shared::cta.b64 %p5, [%r21], %r19;",
        "\t@!%p5 bra WAIT;",
        f"\tmad.lo.u32 %r22, %r18, {PAIR_BYTES}, %r4;",
        f"\tadd.u32 %r23, %r22, {A_BYTES};",
        *descriptor_lines("%rd8", "%r22"),
        *descriptor_lines("%rd9", "%r23"),
        "\twgmma.fence.sync.aligned;",
        *(wgmma_line(mma, accumulate=True) for _ in range(kernel.repeats)),
        "\twgmma.commit_group.sync.aligned;",
        "\twgmma.wait_group.sync.aligned 1;      // this warp's share of the previous step's wgmmas is done",
        # wait_group waits for the groups "committed by the executing threads", its .sync for the warp alone (PTX ISA
        # 9.7.15.7.3, wgmma.wait_group): each warp's share of a wgmma reads its rows of A and all of B, so thread 0
        # may refill the stage only once every warp has waited (CUTLASS's PipelineTmaAsync::consumer_release has
        # every consumer arrive on the stage's empty barrier). It also keeps a lagging warp from meeting the stage's
        # mbarrier re-armed a phase ahead, where its try_wait.parity would read the old phase as still pending.
        "\tbar.sync 0;                           // every warp's share is: the stage is free",
        "\t@!%p1 bra REFILLED;",
        "\tsetp.eq.u32 %p6, %r17, 0;",
        "\tsetp.ge.or.u32 %p6, %r9, %r2, %p6;    // no previous step, or every step's tiles issued",
        "\t@%p6 bra REFILLED;",
        *_issue("%r20", "REFILL"),
        "REFILLED:",
        "\tmov.u32 %r20, %r18;",
        "\tadd.u32 %r17, %r17, 1;",
        "\tadd.u32 %r18, %r18, 1;",
        "\tsetp.lt.u32 %p7, %r18, %r3;",
        "\t@%p7 bra NEXT;",
        "\tmov.u32 %r18, 0;",
        "\txor.b32 %r19, %r19, 1;",
        "NEXT:",
        "\tsetp.lt.u32 %p8, %r17, %r2;",
        "\t@%p8 bra STEP;",
        "\twgmma.wait_group.sync.aligned 0;",
        "\tmov.u64 %rd11, %clock64;",
        "\tmov.u64 %rd12, %globaltimer;",
        "\tand.b32 %r24, %r6, 127;",
        "\tsetp.ne.u32 %p9, %r24, 0;",
        "\t@%p9 bra RECORDED;",
        *BLOCK_RECORD,
        "\tmov.u32 %r25, %nctaid.x;",
        "\tmul.wide.u32 %rd17, %r25, 32;",
        "\tadd.u64 %rd18, %rd2, %rd17;           // D follows every block's record",
        "\tmad.lo.u32 %r26, %r7, 128, %r24;",
        f"\tmul.wide.u32 %rd19, %r26, {kernel.registers * 4};",
        "\tadd.u64 %rd20, %rd18, %rd19;",
    ]
    lines += accumulator_stores(kernel.registers, acc, "%rd20")
    return "\n".join(lines)


def _copy_stage(stage: str) -> list[str]:
    """Every thread copies its five 16-byte chunks of tile pair %r10 (of the block's chunk) into ``stage`` with
    cp.async (L2 only), then advances the tile's place in the chunk, wrapping at ``chunk``."""
    lines = [
        f"\tmad.lo.u32 %r15, {stage}, {PAIR_BYTES}, %r4;  // the stage",
        "\tadd.u32 %r16, %r8, %r10;",
        f"\tmul.wide.u32 %rd6, %r16, {PAIR_BYTES};",
        "\tadd.u64 %rd6, %rd6, %rd1;               // the tile pair",
    ]
    for c in range(SYNC_CHUNKS):
        offset = c * RING_THREADS * 16
        lines.append(f"\tcp.async.cg.shared.global [%r17+{offset}], [%rd7+{offset}], 16;")
    lines[4:4] = ["\tadd.u32 %r17, %r15, %r11;               // this thread's first chunk",
                  "\tcvt.u64.u32 %rd7, %r11;", "\tadd.u64 %rd7, %rd7, %rd6;"]  # fmt: skip
    return [*lines, "\tadd.u32 %r10, %r10, 1;", "\tsetp.eq.u32 %p4, %r10, %r1;", "\tselp.u32 %r10, 0, %r10, %p4;"]


def _quad(name: str, first: int) -> str:
    """Four consecutive registers as a vector operand: ``{%d4, %d5, %d6, %d7}``."""
    return "{" + ", ".join(f"{name}{first + i}" for i in range(4)) + "}"


def sync_text(kernel: SyncKernel) -> str:
    acc = kernel.wgmma.accumulator
    zero = "0f00000000" if acc == "f32" else "0"
    shape = SYNC_SHAPES[kernel.wgmma.name]
    b_loads = [f"\tldmatrix.sync.aligned.m8n8.x4.shared.b16 {_quad('%b', 4 * j)}, [%r23+{512 * j}];"
               for j in range(N_BLOCKS // 2)]  # fmt: skip
    mmas = [f"\tmma.sync.aligned.{shape} {_quad('%d', 4 * j)}, {_quad('%a', 0)}, {{%b{2 * j}, %b{2 * j + 1}}}, "
            f"{_quad('%d', 4 * j)};" for j in range(N_BLOCKS)]  # fmt: skip
    lines = [
        f"// {kernel.wgmma.name}: cp.async tile pairs into a ring of {SYNC_STAGES} stages, ldmatrix, then "
        f"{kernel.repeats} x {N_BLOCKS} mma.sync.{shape.split('.')[0]} a warp a stage.",
        f".visible .entry {kernel.name}(.param .u64 src, .param .u32 chunk, .param .u32 steps, .param .u64 out)",
        f".maxntid {RING_THREADS}, 1, 1",
        "{",
        "\t.reg .pred %p<12>;",
        "\t.reg .b32 %r<40>;",
        "\t.reg .b64 %rd<32>;",
        "\t.reg .b32 %a<4>;",
        f"\t.reg .b32 %b<{2 * N_BLOCKS}>;",
        f"\t.reg .{acc} %d<{kernel.registers}>;",
        "\tld.param.u64 %rd1, [src];",
        "\tcvta.to.global.u64 %rd1, %rd1;",
        "\tld.param.u32 %r1, [chunk];",
        "\tld.param.u32 %r2, [steps];",
        "\tld.param.u64 %rd2, [out];",
        "\tcvta.to.global.u64 %rd2, %rd2;",
        f"\tmov.u32 %r4, {shared_symbol(RING_PREFIX)};",
        f"\tadd.u32 %r4, %r4, {SMEM_ALIGN - 1};",
        f"\tand.b32 %r4, %r4, {-SMEM_ALIGN};             // stage 0",
        "\tmov.u32 %r6, %tid.x;",
        "\tmov.u32 %r7, %ctaid.x;",
        "\tmul.lo.u32 %r8, %r7, %r1;             // the block's first tile",
        "\tmov.u32 %r9, 0;                       // tile pairs issued",
        "\tmov.u32 %r10, 0;                      // the next one's place in the chunk",
        "\tshl.b32 %r11, %r6, 4;                 // this thread's first 16-byte chunk of a pair",
        "\tand.b32 %r12, %r6, 31;                // lane",
        "\tshr.u32 %r13, %r6, 5;                 // warp: rows 16 w .. 16 w + 15 of A and D",
        "\tshr.u32 %r14, %r12, 3;                // the lane's 8 x 8 matrix of an ldmatrix.x4",
        "\tand.b32 %r18, %r14, 1;",
        "\tshl.b32 %r18, %r18, 1;",
        "\tshr.u32 %r19, %r14, 1;",
        "\tor.b32 %r18, %r18, %r19;             // A: matrices (rows 0-7, k 0), (8-15, 0), (0-7, 1), (8-15, 1)",
        "\tshl.b32 %r19, %r13, 2;",
        "\tadd.u32 %r18, %r18, %r19;",
        "\tshl.b32 %r18, %r18, 7;",
        "\tand.b32 %r19, %r12, 7;",
        "\tshl.b32 %r19, %r19, 4;",
        "\tadd.u32 %r20, %r18, %r19;             // the lane's row of A in a stage",
        "\tshl.b32 %r21, %r12, 4;",
        f"\tadd.u32 %r21, %r21, {A_BYTES};         // the lane's row of B in a stage",
        "\tmov.u32 %r3, 0;",
        "PROLOGUE:",
        f"\tsetp.ge.u32 %p3, %r3, {SYNC_STAGES - 1};",
        "\t@%p3 bra PROLOGUED;",
        "\tsetp.ge.u32 %p5, %r9, %r2;",
        "\t@%p5 bra FIRST_EMPTY;",
        *_copy_stage("%r3"),
        "\tadd.u32 %r9, %r9, 1;",
        "FIRST_EMPTY:",
        "\tcp.async.commit_group;                // one group a stage, empty past the steps",
        "\tadd.u32 %r3, %r3, 1;",
        "\tbra PROLOGUE;",
        "PROLOGUED:",
        *(f"\tmov.{acc} %d{i}, {zero};" for i in range(kernel.registers)),
        "\tmov.u32 %r24, 0;                      // step",
        "\tmov.u32 %r25, 0;                      // its stage",
        f"\tmov.u32 %r26, {SYNC_STAGES - 1};                      // the stage the step's refill writes",
        "\tbar.sync 0;",
        "\tmov.u64 %rd4, %globaltimer;",
        "\tmov.u64 %rd5, %clock64;",
        "STEP:",
        f"\tcp.async.wait_group {SYNC_STAGES - 2};         // this thread's copies of the step's pair are done",
        "\tbar.sync 0;                           // everyone's, and everyone is done with the refill's stage",
        "\tsetp.ge.u32 %p6, %r9, %r2;",
        "\t@%p6 bra REFILLED;",
        *_copy_stage("%r26"),
        "\tadd.u32 %r9, %r9, 1;",
        "REFILLED:",
        "\tcp.async.commit_group;",
        f"\tmad.lo.u32 %r22, %r25, {PAIR_BYTES}, %r4;",
        "\tadd.u32 %r23, %r22, %r21;",
        "\tadd.u32 %r22, %r22, %r20;",
        "\tldmatrix.sync.aligned.m8n8.x4.shared.b16 {%a0, %a1, %a2, %a3}, [%r22];",
        *b_loads,
    ]
    for _ in range(kernel.repeats):
        lines += mmas
    lines += [
        "\tmov.u32 %r26, %r25;",
        "\tadd.u32 %r24, %r24, 1;",
        "\tadd.u32 %r25, %r25, 1;",
        f"\tsetp.eq.u32 %p7, %r25, {SYNC_STAGES};",
        "\tselp.u32 %r25, 0, %r25, %p7;",
        "\tsetp.lt.u32 %p8, %r24, %r2;",
        "\t@%p8 bra STEP;",
        "\tmov.u64 %rd11, %clock64;",
        "\tmov.u64 %rd12, %globaltimer;",
        "\tcp.async.wait_group 0;",
        "\tsetp.ne.u32 %p9, %r6, 0;",
        "\t@%p9 bra RECORDED;",
        *BLOCK_RECORD,
        "\tmov.u32 %r27, %nctaid.x;",
        "\tmul.wide.u32 %rd17, %r27, 32;",
        "\tadd.u64 %rd18, %rd2, %rd17;           // D follows every block's record",
        "\tmad.lo.u32 %r28, %r7, 128, %r6;",
        f"\tmul.wide.u32 %rd19, %r28, {kernel.registers * 4};",
        "\tadd.u64 %rd20, %rd18, %rd19;",
    ]
    lines += accumulator_stores(kernel.registers, acc, "%rd20")
    return "\n".join(lines)


SYNC_HEADER = f"""\
// The tensor-core roofline before Hopper (sm_80+): cp.async tile pairs into a ring of {SYNC_STAGES} shared-memory
// stages, ldmatrix, then R x {N_BLOCKS} mma.sync a warp a stage (dram, l2).
// GENERATED by gpuprobe/families/roofline/tensor_ptx.py (python -m gpuprobe.families.roofline.tensor_ptx sync >
// ptx/roofline/tensor_sync.ptx): edit the generator, not this file. See the module's docstring for the interface.
.version 8.7
.target sm_80
.address_size 64

// The ring's stages (A then B, core-matrix order), 128-byte aligned by the kernel.
.extern .shared .align 128 .b8 {shared_symbol(RING_PREFIX)}[];
"""


def sync_module_text() -> str:
    return "\n".join([SYNC_HEADER, *(sync_text(k) for k in sync_kernels())])


FILL_HEADER = """\
// The tensor-core roofline's DRAM region, filled on the device from one period of tile pairs (sm_80+: every arch
// with a tensor sweep, wgmma's or mma.sync's).
// GENERATED by gpuprobe/families/roofline/tensor_ptx.py (python -m gpuprobe.families.roofline.tensor_ptx fill >
// ptx/roofline/fill.ptx): edit the generator, not this file.
.version 8.7
.target sm_80
.address_size 64
"""


def fill_module_text() -> str:
    return "\n".join([FILL_HEADER, replicate_text()])


def replicate_text() -> str:
    """``gp_rt_replicate(src, period, bytes, out)``: out's 16-byte chunk i = src's chunk i mod (period / 16),
    over ``bytes`` (both multiples of 16), a grid-stride loop."""
    return "\n".join([
        "// The tiles' region from one period of tile pairs: out[i] = src[i mod period], 16 bytes at a time.",
        f".visible .entry {REPLICATE_KERNEL}(.param .u64 src, .param .u64 period, .param .u64 bytes, .param .u64 out)",
        "{",
        "\t.reg .pred %p<2>;",
        "\t.reg .b32 %r<12>;",
        "\t.reg .b64 %rd<16>;",
        "\tld.param.u64 %rd1, [src];",
        "\tld.param.u64 %rd2, [period];",
        "\tld.param.u64 %rd3, [out];",
        "\tld.param.u64 %rd4, [bytes];",
        "\tcvta.to.global.u64 %rd1, %rd1;",
        "\tcvta.to.global.u64 %rd3, %rd3;",
        "\tmov.u32 %r1, %tid.x;",
        "\tmov.u32 %r2, %ntid.x;",
        "\tmov.u32 %r3, %ctaid.x;",
        "\tmov.u32 %r4, %nctaid.x;",
        "\tmad.lo.u32 %r5, %r3, %r2, %r1;",
        "\tmul.wide.u32 %rd5, %r5, 16;           // this thread's first chunk",
        "\tmul.wide.u32 %rd6, %r4, %r2;",
        "\tshl.b64 %rd6, %rd6, 4;                // the grid's stride",
        "COPY:",
        "\tsetp.ge.u64 %p1, %rd5, %rd4;",
        "\t@%p1 bra DONE;",
        "\trem.u64 %rd7, %rd5, %rd2;",
        "\tadd.u64 %rd8, %rd1, %rd7;",
        "\tld.global.v4.u32 {%r6, %r7, %r8, %r9}, [%rd8];",
        "\tadd.u64 %rd9, %rd3, %rd5;",
        "\tst.global.v4.u32 [%rd9], {%r6, %r7, %r8, %r9};",
        "\tadd.u64 %rd5, %rd5, %rd6;",
        "\tbra COPY;",
        "DONE:",
        "\tret;",
        "}",
        "",
    ])  # fmt: skip


HEADER = f"""\
// The tensor-core roofline (sm_90a): TMA tile pairs feeding wgmma at R wgmmas a stage (dram, l2), and wgmma on
// operands resident in shared memory at N 16 .. 256 (shared).
// GENERATED by gpuprobe/families/roofline/tensor_ptx.py (python -m gpuprobe.families.roofline.tensor_ptx >
// ptx/roofline/tensor.ptx): edit the generator, not this file. See the module's docstring for the interfaces.
.version 8.7
.target sm_90a
.address_size 64

.shared .align 8 .b64 {RING_PREFIX}_bars[{MAX_STAGES}];
// The ring's stages (A then B, core-matrix order, no swizzle), 128-byte aligned by the kernel.
.extern .shared .align 128 .b8 {shared_symbol(RING_PREFIX)}[];
// The shared level's A (2048 bytes) then B (N x 32 bytes), as the wgmma family's kernels lay them.
.extern .shared .align 128 .b8 {shared_symbol(SHARED_PREFIX)}[];
"""


def module_text() -> str:
    return "\n".join([HEADER, *(ring_text(k) for k in ring_kernels()), *(kernel_text(k) for k in shared_kernels())])


if __name__ == "__main__":
    import sys

    texts = {"sync": sync_module_text, "fill": fill_module_text}
    print(texts.get(" ".join(sys.argv[1:]), module_text)(), end="")
