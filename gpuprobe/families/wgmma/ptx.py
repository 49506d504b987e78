"""Writes ptx/wgmma/wgmma.ptx: the wgmma kernels, one per (latency|throughput, SS|RS, type, N).

PTX has no way to spell "accumulator registers %d0 .. %d{N/2-1}" other than listing them, and the
list changes with N, so the file is generated rather than written by hand with ``//@for``; the
file is committed, read, compiled and contract-checked like any other probe source, and
``tests/test_wgmma.py`` holds it equal to what this module writes. Regenerate with
``python -m gpuprobe.families.wgmma > ptx/wgmma/wgmma.ptx``.

Every dense kernel has the signature ``(a, b, layout, iters, out)``: ``a`` is A in core-matrix order
(SS) or the warpgroup's A registers (RS), ``b`` is B in core-matrix order, ``layout`` the
descriptor bits less the start address (:mod:`gpuprobe.families.wgmma.layout`), ``iters`` the
timed loop's trip count. A sparse kernel (wgmma.mma_async.sp, A from shared memory, 2:4 sparse:
:mod:`gpuprobe.families.sparsity`) takes ``(a, b, layout, b_layout, meta, iters, out)``: A's kept
elements (64 x 32 bytes, as a dense A), B of twice the K (N x 64 bytes, its own layout bits) and
each thread's metadata register. Each warpgroup ``g`` (of all blocks) writes ``[cycles, ns, start, end]``
(u64) at ``out + 32 g`` and, after the ``32 x warpgroups`` bytes of those, its accumulator
registers, thread by thread in register order.

One more kernel times no wgmma: ``gp_wg_clock_stamp(slot, out)`` is the SM clock's witness around
work the suite does not write, cuBLAS's GEMMs (:data:`CLOCK_STAMP_KERNEL`,
:func:`gpuprobe.families.library_timing.clock_stamp_text`).
"""

from __future__ import annotations

from dataclasses import dataclass

from gpuprobe.families.library_timing import clock_stamp_text
from gpuprobe.families.wgmma.layout import N_VALUES, TYPES, WgmmaType
from gpuprobe.kernels.registry import unroll_of

LATENCY_THREADS = 128  # one warpgroup
THROUGHPUT_MAX_THREADS = 384  # up to three warpgroups a block
A_BYTES = 2048  # 64 rows x 32 bytes: B follows A in shared memory
THROUGHPUT_N = 256
SMALLER_THROUGHPUT_N = (64, 128)  # bf16 from shared memory only: how the rate falls with N
SPARSE_N = (64, 128, 256)  # bf16 sparse wgmma (A from shared memory): latency and throughput beside the dense

_TYPE_SUFFIX = {"bf16": "f32.bf16.bf16", "f16": "f32.f16.f16", "tf32": "f32.tf32.tf32",
                "e4m3": "f32.e4m3.e4m3", "s8": "s32.s8.s8"}  # fmt: skip


@dataclass(frozen=True)
class Kernel:
    """One generated kernel."""

    purpose: str  # "lat" or "tput"
    source: str  # "ss" (A in shared memory) or "rs" (A in registers)
    wgmma: WgmmaType
    n: int
    sparse: bool = False  # wgmma.mma_async.sp: A 2:4 sparse, K twice the dense one's
    prefix: str = "gp_wg"  # its name's and its shared memory's: another family's copy has its own

    @property
    def name(self) -> str:
        return kernel_name(self.purpose, self.source, self.wgmma.name, self.n, self.sparse, self.prefix)

    @property
    def k(self) -> int:
        """K of one wgmma: 32 bytes of the type, twice that for a sparse A (half of it kept)."""
        return self.wgmma.k * (2 if self.sparse else 1)

    @property
    def b_row_bytes(self) -> int:
        """Bytes of one row of B (K-major): K elements."""
        return self.k * self.wgmma.element_bytes

    def flop(self) -> int:
        """Operations of one wgmma (the logical K: a sparse one counts the zeros it skips, as datasheets do)."""
        return 2 * 64 * self.n * self.k

    @property
    def batch(self) -> int:
        """wgmmas issued back to back between waits (1 in a latency loop): the unroll its probe declares."""
        return unroll_of(self.name)

    @property
    def registers(self) -> int:
        return self.n // 2


def kernel_name(purpose: str, source: str, type_name: str, n: int, sparse: bool = False, prefix: str = "gp_wg") -> str:
    return f"{prefix}{'sp' if sparse else ''}_{purpose}_{source}_{type_name}_n{n}"


def kernels() -> list[Kernel]:
    """Latency kernels for every type, N and operand source; throughput kernels at N = 256, and for
    bf16 from shared memory at the smaller N too."""
    found = []
    for wgmma in TYPES.values():
        for source in ("ss", "rs"):
            found += [Kernel("lat", source, wgmma, n) for n in N_VALUES]
            found.append(Kernel("tput", source, wgmma, THROUGHPUT_N))
    found += [Kernel("tput", "ss", TYPES["bf16"], n) for n in SMALLER_THROUGHPUT_N]
    found += [Kernel(purpose, "ss", TYPES["bf16"], n, sparse=True) for purpose in ("lat", "tput") for n in SPARSE_N]
    return found


def _operand_modifiers(kernel: Kernel, accumulate: bool) -> str:
    """scale-d, then imm-scale-a/b (floats) and imm-trans-a/b (16-bit types; no trans-a for RS)."""
    parts = ["1" if accumulate else "0"]
    if kernel.wgmma.accumulator == "f32":
        parts += ["1", "1"]
    if kernel.wgmma.element_bytes == 2:
        parts += ["0", "0"] if kernel.source == "ss" else ["0"]
    return ", ".join(parts)


def wgmma_line(kernel: Kernel, accumulate: bool) -> str:
    d = ", ".join(f"%d{i}" for i in range(kernel.registers))
    a = "%rd8" if kernel.source == "ss" else "{%a0, %a1, %a2, %a3}"
    shape = f"m64n{kernel.n}k{kernel.k}"
    sparse = ".sp" if kernel.sparse else ""
    metadata = "%r20, 0, " if kernel.sparse else ""  # the thread's metadata register, sparsity selector 0
    return (
        f"\twgmma.mma_async{sparse}.sync.aligned.{shape}.{_TYPE_SUFFIX[kernel.wgmma.name]} "
        f"{{{d}}}, {a}, %rd9, {metadata}{_operand_modifiers(kernel, accumulate)};"
    )


def _copy(label: str, chunks: int, source: str, offset: int) -> list[str]:
    """The block copies ``chunks`` x 16 bytes from ``source`` to shared memory at ``offset``."""
    return [
        "\tmov.u32 %r6, %r2;",
        f"{label}:",
        f"\tsetp.ge.u32 %p1, %r6, {chunks};",
        f"\t@%p1 bra {label}_DONE;",
        "\tmul.wide.u32 %rd5, %r6, 16;",
        f"\tadd.u64 %rd6, {source}, %rd5;",
        "\tld.global.v4.u32 {%r7, %r8, %r9, %r10}, [%rd6];",
        "\tshl.b32 %r11, %r6, 4;",
        "\tadd.u32 %r11, %r11, %r4;",
        f"\tst.shared.v4.u32 [%r11+{offset}], {{%r7, %r8, %r9, %r10}};",
        "\tadd.u32 %r6, %r6, %r3;",
        f"\tbra {label};",
        f"{label}_DONE:",
    ]


def descriptor_lines(target: str, address: str, layout: str = "%rd3") -> list[str]:
    """``target`` = ``layout`` bits | (shared ``address`` >> 4) & 0x3FFF."""
    return [
        f"\tcvt.u64.u32 %rd7, {address};",
        "\tshr.u64 %rd7, %rd7, 4;",
        "\tand.b64 %rd7, %rd7, 16383;",
        f"\tor.b64 {target}, {layout}, %rd7;",
    ]


def kernel_text(kernel: Kernel) -> str:
    threads = LATENCY_THREADS if kernel.purpose == "lat" else THROUGHPUT_MAX_THREADS
    acc = kernel.wgmma.accumulator
    zero = "0f00000000" if acc == "f32" else "0"
    what = (
        "latency: one warpgroup, each wgmma waits for the last"
        if kernel.purpose == "lat"
        else (f"throughput: every warpgroup issues {kernel.batch} wgmmas, then waits")
    )
    sparse = ", .param .u64 b_layout, .param .u64 meta" if kernel.sparse else ""
    lines = [
        f"// {kernel.wgmma.name} m64n{kernel.n}k{kernel.k}{', 2:4 sparse A' if kernel.sparse else ''}, A from "
        f"{'shared memory' if kernel.source == 'ss' else 'registers'}; {what}.",
        f".visible .entry {kernel.name}(.param .u64 a, .param .u64 b, .param .u64 layout{sparse}, .param .u32 iters, "
        ".param .u64 out)",
        f".maxntid {threads}, 1, 1",
        "{",
        "\t.reg .pred %p<4>;",
        "\t.reg .b32 %r<24>;",
        "\t.reg .b64 %rd<24>;",
        f"\t.reg .{acc} %d<{kernel.registers}>;",
    ]
    if kernel.source == "rs":
        lines.append("\t.reg .b32 %a<4>;")
    lines += [
        "\tld.param.u64 %rd1, [a];",
        "\tld.param.u64 %rd2, [b];",
        "\tld.param.u64 %rd3, [layout];",
        "\tld.param.u32 %r1, [iters];",
        "\tld.param.u64 %rd4, [out];",
        "\tcvta.to.global.u64 %rd1, %rd1;",
        "\tcvta.to.global.u64 %rd2, %rd2;",
        "\tcvta.to.global.u64 %rd4, %rd4;",
        "\tmov.u32 %r2, %tid.x;",
        "\tmov.u32 %r3, %ntid.x;",
        f"\tmov.u32 %r4, {shared_symbol(kernel.prefix)};",
        "\tand.b32 %r5, %r2, 127;",
        *_copy("COPY_B", kernel.n * kernel.b_row_bytes // 16, "%rd2", A_BYTES),
    ]
    if kernel.sparse:
        lines += [
            "\tld.param.u64 %rd22, [b_layout];",
            "\tld.param.u64 %rd23, [meta];",
            "\tcvta.to.global.u64 %rd23, %rd23;",
            "\tmul.wide.u32 %rd5, %r5, 4;",
            "\tadd.u64 %rd6, %rd23, %rd5;",
            "\tld.global.u32 %r20, [%rd6];  // the thread's metadata register",
        ]
    if kernel.source == "ss":
        lines += _copy("COPY_A", A_BYTES // 16, "%rd1", 0)
    else:
        lines += [
            "\tmul.wide.u32 %rd5, %r5, 16;",
            "\tadd.u64 %rd6, %rd1, %rd5;",
            "\tld.global.v4.u32 {%a0, %a1, %a2, %a3}, [%rd6];",
        ]
    lines += [
        "\tfence.proxy.async.shared::cta;  // the generic-proxy stores, before wgmma's async-proxy reads",
        "\tbar.sync 0;",
        *descriptor_lines("%rd8", "%r4"),
        f"\tadd.u32 %r12, %r4, {A_BYTES};",
        *descriptor_lines("%rd9", "%r12", "%rd22" if kernel.sparse else "%rd3"),
        *(f"\tmov.{acc} %d{i}, {zero};" for i in range(kernel.registers)),
        "\tshr.u32 %r13, %r2, 7;",
        "\tshr.u32 %r14, %r3, 7;",
        "\tmov.u32 %r15, %ctaid.x;",
        "\tmad.lo.u32 %r16, %r15, %r14, %r13;  // this warpgroup, of all",
        "\tmov.u32 %r17, %nctaid.x;",
        "\tmul.lo.u32 %r18, %r17, %r14;  // warpgroups in the grid",
        "\twgmma.fence.sync.aligned;",
        "\tbar.sync 0;",
        "\tmov.u64 %rd10, %globaltimer;",
        "\tmov.u64 %rd11, %clock64;",
        "LOOP:",
        '\t.pragma "nounroll";',
        "\twgmma.fence.sync.aligned;  // ptxas 12.8 and 13.0 inject it here if absent (C7519): same SASS",
    ]
    # Latency: every wgmma accumulates onto the last one's D. Throughput: the first of a batch
    # starts D afresh (scale-d = 0), so D is batch x A @ B whatever the trip count.
    lines += [wgmma_line(kernel, accumulate=kernel.purpose == "lat" or i > 0) for i in range(kernel.batch)]
    lines += [
        "\twgmma.commit_group.sync.aligned;",
        "\twgmma.wait_group.sync.aligned 0;",
        "\tsub.u32 %r1, %r1, 1;",
        "\tsetp.ne.u32 %p2, %r1, 0;",
        "\t@%p2 bra LOOP;",
        "\tmov.u64 %rd12, %clock64;",
        "\tmov.u64 %rd13, %globaltimer;",
        "\tsetp.ne.u32 %p3, %r5, 0;",
        "\t@%p3 bra RECORDED;",
        "\tsub.u64 %rd14, %rd12, %rd11;",
        "\tsub.u64 %rd15, %rd13, %rd10;",
        "\tmul.wide.u32 %rd16, %r16, 32;",
        "\tadd.u64 %rd17, %rd4, %rd16;",
        "\tst.global.v2.u64 [%rd17], {%rd14, %rd15};",
        "\tst.global.v2.u64 [%rd17+16], {%rd10, %rd13};",
        "RECORDED:",
        "\tmul.wide.u32 %rd18, %r18, 32;",
        "\tadd.u64 %rd19, %rd4, %rd18;",
        "\tmad.lo.u32 %r19, %r16, 128, %r5;",
        f"\tmul.wide.u32 %rd20, %r19, {kernel.registers * 4};",
        "\tadd.u64 %rd21, %rd19, %rd20;",
    ]
    lines += accumulator_stores(kernel.registers, acc, "%rd21")
    return "\n".join(lines)


def accumulator_stores(registers: int, accumulator: str, address: str) -> list[str]:
    """The kernel's end: its ``registers`` accumulator registers (%d0 ..) stored four at a time from ``address``
    (f32, or the s32 of an integer accumulator as b32), then ``ret``."""
    store = "f32" if accumulator == "f32" else "b32"
    lines = []
    for j in range(0, registers, 4):
        regs = ", ".join(f"%d{j + i}" for i in range(4))
        lines.append(f"\tst.global.v4.{store} [{address}+{4 * j}], {{{regs}}};")
    return [*lines, "\tret;", "}", ""]


def shared_symbol(prefix: str) -> str:
    """The dynamic shared memory a module's kernels of ``prefix`` address (declared once in its header)."""
    return f"{prefix}_smem"


HEADER = """\
// wgmma probes (sm_90a): latency and throughput of wgmma.mma_async per type, N and operand source.
// GENERATED by gpuprobe/families/wgmma/ptx.py (python -m gpuprobe.families.wgmma > ptx/wgmma/wgmma.ptx):
// edit the generator, not this file. See the module's docstring for the kernels' interface.
.version 8.7
.target sm_90a
.address_size 64

// A (2048 bytes) then B (N x 32 bytes; N x 64 for a sparse wgmma), in core-matrix order, no swizzle.
.extern .shared .align 128 .b8 gp_wg_smem[];
"""


CLOCK_STAMP_KERNEL = "gp_wg_clock_stamp"


def module_text() -> str:
    return HEADER + "\n" + "\n".join(kernel_text(k) for k in kernels()) + "\n" + clock_stamp_text(CLOCK_STAMP_KERNEL)
