"""Writes ptx/roofline/tensor.ptx: the tensor-core roofline's kernels on sm_90a, TMA feeding wgmma.

Two kinds of kernel, per wgmma type (bf16, e4m3, tf32, s8):

* ``gp_rt_tma_<type>_r<R>(tmap, layout, chunk, steps, stages, out)``: the dram and l2 levels. One warpgroup a
  block; thread 0 keeps ``stages`` (at most :data:`MAX_STAGES`) tile pairs in flight, each a TMA load
  (cp.async.bulk.tensor.2d, one box of :data:`BOX_ROWS` rows of 128 bytes: A, 64 x 32 bytes, then B, 256 x 32
  bytes, both already in core-matrix order in global memory) completing its stage's mbarrier. Step k waits for
  its stage, issues R m64n256 wgmmas on it (A and B from shared memory, accumulating), commits them, waits for
  the previous step's group (wait_group 1, so the tensor cores always hold one), and thread 0 refills the stage
  that group read. Block b walks tiles ``b x chunk + (k mod chunk)``: each tile once per launch when ``steps <=
  chunk`` (the dram level), its chunk over and over (the l2 level). R is the intensity knob:
  ``2 x 64 x 256 x K x R`` flop per tile pair of 10 KiB. The steps' span is bracketed by %globaltimer and
  %clock64; the record and D are written as the wgmma family's kernels write them.
* ``gp_rts_tput_ss_<type>_n<N>``: the shared level, operands resident in shared memory (no loads in the loop):
  the wgmma family's throughput kernel (:func:`gpuprobe.families.wgmma.ptx.kernel_text`) under a name and a
  shared-memory symbol of its own, at N 16 .. 256, whose smem bytes per flop are the intensity.

And ``gp_rt_replicate(src, period, dst, bytes)``, which fills the tiles' region on the device from a few
distinct tile pairs (the host uploads one period, not the region).

``tests/test_roofline_tensor.py`` holds the committed file equal to what this module writes. Regenerate with
``python -m gpuprobe.families.roofline.tensor_ptx > ptx/roofline/tensor.ptx``.
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuprobe.families.wgmma.layout import TYPES, WgmmaType
from gpuprobe.families.wgmma.ptx import A_BYTES, Kernel, _descriptor, _wgmma, kernel_text, shared_symbol

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


def ring_name(type_name: str, repeats: int) -> str:
    return f"{RING_PREFIX}_tma_{type_name}_r{repeats}"


def shared_kernel(type_name: str, n: int) -> Kernel:
    """The shared level's kernel of ``type_name`` at ``n``: the wgmma family's throughput kernel, renamed."""
    return Kernel("tput", "ss", TYPES[type_name], n, prefix=SHARED_PREFIX)


def ring_kernels() -> list[RingKernel]:
    return [RingKernel(TYPES[t], r) for t in TENSOR_TYPES for r in REPEATS]


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
        *_descriptor("%rd8", "%r22"),
        *_descriptor("%rd9", "%r23"),
        "\twgmma.fence.sync.aligned;",
        *(_wgmma(mma, accumulate=True) for _ in range(kernel.repeats)),
        "\twgmma.commit_group.sync.aligned;",
        "\twgmma.wait_group.sync.aligned 1;      // the previous step's wgmmas are done with its stage",
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
        "\tsub.u64 %rd13, %rd11, %rd5;",
        "\tsub.u64 %rd14, %rd12, %rd4;",
        "\tmul.wide.u32 %rd15, %r7, 32;",
        "\tadd.u64 %rd16, %rd2, %rd15;",
        "\tst.global.v2.u64 [%rd16], {%rd13, %rd14};",
        "\tst.global.v2.u64 [%rd16+16], {%rd4, %rd12};",
        "RECORDED:",
        "\tmov.u32 %r25, %nctaid.x;",
        "\tmul.wide.u32 %rd17, %r25, 32;",
        "\tadd.u64 %rd18, %rd2, %rd17;           // D follows every block's record",
        "\tmad.lo.u32 %r26, %r7, 128, %r24;",
        f"\tmul.wide.u32 %rd19, %r26, {kernel.registers * 4};",
        "\tadd.u64 %rd20, %rd18, %rd19;",
    ]
    store = "f32" if acc == "f32" else "b32"
    for j in range(0, kernel.registers, 4):
        regs = ", ".join(f"%d{j + i}" for i in range(4))
        lines.append(f"\tst.global.v4.{store} [%rd20+{4 * j}], {{{regs}}};")
    lines += ["\tret;", "}", ""]
    return "\n".join(lines)


def replicate_text() -> str:
    """``gp_rt_replicate(src, period, dst, bytes)``: dst's 16-byte chunk i = src's chunk i mod (period / 16),
    over ``bytes`` (both multiples of 16), a grid-stride loop."""
    return "\n".join([
        "// The tiles' region from one period of tile pairs: dst[i] = src[i mod period], 16 bytes at a time.",
        f".visible .entry {REPLICATE_KERNEL}(.param .u64 src, .param .u64 period, .param .u64 dst, .param .u64 bytes)",
        "{",
        "\t.reg .pred %p<2>;",
        "\t.reg .b32 %r<12>;",
        "\t.reg .b64 %rd<16>;",
        "\tld.param.u64 %rd1, [src];",
        "\tld.param.u64 %rd2, [period];",
        "\tld.param.u64 %rd3, [dst];",
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
    parts = [HEADER, *(ring_text(k) for k in ring_kernels()), *(kernel_text(k) for k in shared_kernels()),
             replicate_text()]  # fmt: skip
    return "\n".join(parts)


if __name__ == "__main__":
    print(module_text(), end="")
