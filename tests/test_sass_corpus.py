"""The SASS parser against the CUDA tools themselves, over a varied corpus of kernels.

Every ``tests/sass_corpus/*.cu`` file is compiled with NVRTC for each arch it declares (first line
``// archs: sm_90a`` or ``// archs: all``). For every cubin, ``nvdisasm -c`` (run here directly, not
through gpuprobe) is the reference instruction list and ``cuobjdump -res-usage`` the reference
resource figures; gpuprobe's parse of the full listing must agree with both, kernel by kernel and
instruction by instruction. A hypothesis fuzz test checks that no input makes the parser raise
anything but :class:`GpuprobeError`, or take more than linear-ish time.

The reference outputs are cached by content like every other tool output, so a warm run starts no
tool at all.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from gpuprobe.core.arch import SUPPORTED_ARCHS, Arch, parse_arch
from gpuprobe.core.cache import cached_file, content_key
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.kernels.sass import Instruction, Kernel, Listing, Loop, parse_listing, split_operands
from gpuprobe.kernels.toolchain import compile_cuda, disassemble, find_tool, tool_version

CORPUS = Path(__file__).parent / "sass_corpus"
INSTRUCTION_BYTES = 16  # every supported arch (sm_75 and later) encodes 128-bit instructions


# ---------------------------------------------------------------- the corpus ---------------------


def declared_archs(source: Path) -> list[Arch]:
    """The archs a corpus file asks for on its first line (``// archs: ...``); all by default."""
    first = source.read_text().split("\n", 1)[0].strip()
    match = re.fullmatch(r"//\s*archs:\s*(?P<archs>.*)", first)
    if match is None or match["archs"].strip() == "all":
        return list(SUPPORTED_ARCHS)
    return [parse_arch(name) for name in match["archs"].split()]


CASES: list[tuple[Path, Arch]] = [
    (source, arch) for source in sorted(CORPUS.glob("*.cu")) for arch in declared_archs(source)
]


def case_id(source: Path, arch: Arch) -> str:
    """The test id of one corpus file compiled for one arch, e.g. ``wgmma-sm_90a``."""
    return f"{source.stem}-{arch.name}"


CASE_IDS = [case_id(source, arch) for source, arch in CASES]


@dataclass(frozen=True)
class Reference:
    """What the CUDA tools themselves say about one cubin."""

    instructions: dict[str, list[tuple[int, str]]]  # kernel -> (offset, normalised text), in order
    labels: dict[str, dict[str, int]]  # kernel -> label -> offset of the instruction it names
    resources: dict[str, dict[str, str]]  # function -> cuobjdump field (REG, STACK, ...) -> value


@dataclass(frozen=True)
class Case:
    """One corpus file compiled for one arch: gpuprobe's parse and the tools' reference."""

    name: str
    arch: Arch
    listing: Listing
    reference: Reference


def _cached_tool_output(tool: str, args: list[str], cubin: Path) -> str:
    """Run ``tool args cubin``, cached by the tool's identity and the cubin's content."""
    path = find_tool(tool)
    data = cubin.read_bytes()
    key = content_key("test_sass_corpus", tool, str(path), tool_version(tool), " ".join(args), data)

    def produce() -> bytes:
        proc = subprocess.run([str(path), *args, str(cubin)], capture_output=True, text=True, check=False, timeout=300)
        if proc.returncode != 0:
            raise GpuprobeError(f"{tool} {' '.join(args)} failed on {cubin}: {proc.stderr.strip()[:200]}")
        return proc.stdout.encode()

    return cached_file(key, f".{tool}.txt", produce).read_text()


_RAW_SECTION = re.compile(r"^\s*\.section\s+(?P<name>[^,\s]+)")
_RAW_INSTRUCTION = re.compile(r"^\s*/\*(?P<offset>[0-9a-fA-F]+)\*/\s+(?P<text>\S.*?)\s*$")
_RAW_LABEL = re.compile(r"^(?P<name>[^\s:]+):$")


def normalise(text: str) -> str:
    """nvdisasm's instruction text without the ``;`` and with whitespace normalised around commas.

    A trailing ``(*"..."*)`` annotation (BRX's branch targets) is the disassembler's comment: it is
    kept verbatim, commas included, one space after the operands instead of nvdisasm's padding.
    """
    text = text.strip()
    if text.endswith(";"):
        text = text[:-1].rstrip()
    note = ""
    start = text.find("(*")
    if start >= 0 and text.endswith("*)"):
        text, note = text[:start].rstrip(), " " + text[start:]
    return re.sub(r"\s*,\s*", ", ", text) + note


def reference_code(text: str) -> tuple[dict[str, list[tuple[int, str]]], dict[str, dict[str, int]]]:
    """Instructions and labels per ``.text.<kernel>`` section of ``nvdisasm -c`` output."""
    instructions: dict[str, list[tuple[int, str]]] = {}
    labels: dict[str, dict[str, int]] = {}
    kernel: str | None = None
    pending: list[str] = []

    def close() -> None:
        if kernel is not None and pending:
            end = instructions[kernel][-1][0] + INSTRUCTION_BYTES if instructions[kernel] else 0
            labels[kernel].update(dict.fromkeys(pending, end))
        pending.clear()

    for line in text.splitlines():
        if match := _RAW_SECTION.match(line):
            close()
            name = match["name"]
            kernel = name[len(".text.") :] if name.startswith(".text.") else None
            if kernel is not None:
                instructions.setdefault(kernel, [])
                labels.setdefault(kernel, {})
        elif kernel is None:
            continue
        elif match := _RAW_INSTRUCTION.match(line):
            offset = int(match["offset"], 16)
            instructions[kernel].append((offset, normalise(match["text"])))
            labels[kernel].update(dict.fromkeys(pending, offset))
            pending.clear()
        elif match := _RAW_LABEL.match(line.strip()):
            pending.append(match["name"])
    close()
    return instructions, labels


def reference_resources(text: str) -> dict[str, dict[str, str]]:
    """``cuobjdump -res-usage``: ``Function name:`` then a line of ``FIELD:value`` pairs."""
    found: dict[str, dict[str, str]] = {}
    function = None
    for line in text.splitlines():
        if match := re.match(r"^\s*Function (?P<name>\S+):\s*$", line):
            function = match["name"]
        elif function is not None and "REG:" in line:
            found[function] = dict(re.findall(r"([A-Z]+(?:\[\d+\])?):(\S+)", line))
            function = None
    return found


def build_case(source: Path, arch: Arch) -> Case:
    """Compile one corpus file for one arch; parse it with gpuprobe and ask the tools about it."""
    compiled = compile_cuda(source.read_text(), arch, source.name)
    listing = parse_listing(disassemble(compiled.cubin))
    instructions, labels = reference_code(_cached_tool_output("nvdisasm", ["-c"], compiled.cubin))
    resources = reference_resources(_cached_tool_output("cuobjdump", ["-res-usage"], compiled.cubin))
    return Case(case_id(source, arch), arch, listing, Reference(instructions, labels, resources))


@pytest.fixture(scope="session")
def corpus() -> dict[str, Case | Exception]:
    """Every corpus case, built once per session (in parallel: the tools are separate processes)."""
    try:
        for tool in ("nvdisasm", "cuobjdump"):
            find_tool(tool)
    except GpuprobeError as exc:
        pytest.skip(str(exc))

    def attempt(source: Path, arch: Arch) -> Case | Exception:
        try:
            return build_case(source, arch)
        except Exception as exc:  # reported by the test of this case, not by every test
            return exc

    with ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2)) as pool:
        built = list(pool.map(lambda case: attempt(*case), CASES))
    return dict(zip(CASE_IDS, built, strict=True))


def get_case(corpus: dict[str, Case | Exception], name: str) -> Case:
    """One built case; its build error, if it had one, raised here (or a skip without NVRTC)."""
    case = corpus[name]
    if isinstance(case, GpuprobeError) and "NVRTC not available" in str(case):
        pytest.skip(str(case))
    if isinstance(case, Exception):
        raise case
    return case


def all_cases(corpus: dict[str, Case | Exception]) -> list[Case]:
    """Every built case, in corpus order."""
    return [get_case(corpus, name) for name in CASE_IDS]


def instructions_of(case: Case) -> Iterator[tuple[Kernel, Instruction]]:
    """Every parsed instruction of a case, with its kernel."""
    for kernel in case.listing.kernels.values():
        for ins in kernel.instructions:
            yield kernel, ins


def find(case: Case, kernel: str, opcode: str) -> list[Instruction]:
    """The kernel's instructions whose full opcode is ``opcode``."""
    return [ins for ins in case.listing.kernel(kernel).instructions if ins.opcode == opcode]


def opcodes(case: Case) -> set[str]:
    """The full opcodes (with modifiers) a case's kernels use."""
    return {ins.opcode for _, ins in instructions_of(case)}


pytestmark = pytest.mark.static


# ---------------------------------------------------------------- agreement with the tools -------


def test_corpus_covers_every_supported_arch() -> None:
    covered = {arch for _, arch in CASES}
    assert covered == set(SUPPORTED_ARCHS)
    assert len(CASES) >= 40


@pytest.mark.parametrize("name", CASE_IDS)
def test_instruction_lists_match_nvdisasm(corpus: dict[str, Case | Exception], name: str) -> None:
    case = get_case(corpus, name)
    expected = case.reference.instructions
    assert expected, "nvdisasm -c printed no code sections"
    assert sorted(case.listing.kernels) == sorted(expected)
    assert case.listing.arch == case.arch.name
    for kernel_name, reference in expected.items():
        kernel = case.listing.kernel(kernel_name)
        parsed = [(ins.offset, ins.text()) for ins in kernel.instructions]
        assert len(parsed) == len(reference), kernel_name
        for got, want in zip(parsed, reference, strict=True):
            assert got == want, f"{kernel_name} at /*{want[0]:04x}*/"
        assert kernel.labels == case.reference.labels[kernel_name]


@pytest.mark.parametrize("name", CASE_IDS)
def test_instruction_structure(corpus: dict[str, Case | Exception], name: str) -> None:
    """Predicates stay out of opcodes, operands are non-empty and bracket-balanced, branches resolve."""
    case = get_case(corpus, name)
    for kernel, ins in instructions_of(case):
        where = f"{kernel.name} /*{ins.offset:04x}*/ {ins.text()}"
        assert re.fullmatch(r"[A-Z][A-Z0-9_]*(\.[A-Za-z0-9_]+)*", ins.opcode), where
        assert ins.predicate is None or re.fullmatch(r"@!?U?P(T|\d)", ins.predicate), where
        for operand in ins.operands:
            assert operand and operand == operand.strip(), where
            assert operand.count("[") == operand.count("]"), where
            assert operand.count("(") == operand.count(")"), where
            assert "`" not in operand or re.fullmatch(r"(\S+ )?`\([^()`,\s]+\)", operand), where
            assert "(*" not in operand, where
        target = ins.branch_target()
        if ins.base in ("BRA", "CALL", "BSSY", "RET") and target is not None:
            assert target in kernel.labels, where
    assert all(not ins.opcode.startswith("@") for _, ins in instructions_of(case))


@pytest.mark.parametrize("name", CASE_IDS)
def test_resources_match_cuobjdump(corpus: dict[str, Case | Exception], name: str) -> None:
    case = get_case(corpus, name)
    resources = case.reference.resources
    entries = {k.name for k in case.listing.kernels.values() if k.entry}
    assert entries == set(resources)
    for kernel_name, usage in resources.items():
        kernel = case.listing.kernel(kernel_name)
        assert kernel.registers == int(usage["REG"]), kernel_name
        assert kernel.shared_bytes == int(usage["SHARED"]), kernel_name
        stack = None if usage["STACK"] == "UNKNOWN" else int(usage["STACK"])
        assert kernel.local_bytes == stack, kernel_name


# ---------------------------------------------------------------- loops ----------------------------

# Kernels whose source loops, and an opcode each loop-carrying kernel must have inside a loop.
SOURCE_LOOPS = {
    "uniform_loop": "FFMA",
    "generic_and_local": "STL",
    "nested_frames": "STL",
    "calls": "FFMA",
    "cp_async_pipeline": "LDGDEPBAR",
    "cp_async_mbarrier": None,
    "tma_tiles": "UTMALDG.2D",
    "bulk_copy": "SYNCS.PHASECHK.TRANS64.TRYWAIT",
    "wgmma_pipelined": "WARPGROUP.ARRIVE",
    "tcgen05_mma": "SYNCS.PHASECHK.TRANS64.TRYWAIT",
}
# Kernels with no loop in the source and none made by the compiler.
STRAIGHT = {
    "widths", "mma_turing", "ldmatrix_stmatrix", "mma_ampere", "mma_fp8", "integer_ops", "packed_half",
    "doubles", "special_functions", "clocks", "warp_collectives", "barriers", "wgmma_kinds", "wmma_f16_s8",
    "wmma_ampere", "cluster_exchange",
}  # fmt: skip


def real_loops(kernel: Kernel) -> list[Loop]:
    """Kernel.loops less ptxas's end-of-code ``L: BRA L`` (an unreachable self-branch, then NOPs)."""
    last_code = max((ins.offset for ins in kernel.instructions if ins.base != "NOP"), default=-1)
    return [
        loop for loop in kernel.loops
        if not (loop.start == loop.end == last_code)
    ]  # fmt: skip


@pytest.mark.parametrize("name", CASE_IDS)
def test_loops_where_the_source_loops(corpus: dict[str, Case | Exception], name: str) -> None:
    case = get_case(corpus, name)
    for kernel in case.listing.kernels.values():
        loops = real_loops(kernel)
        if kernel.name in STRAIGHT:
            assert loops == [], kernel.name
        if kernel.name in SOURCE_LOOPS:
            assert loops, f"{kernel.name}: no loop found"
            wanted = SOURCE_LOOPS[kernel.name]
            inside = {ins.opcode for loop in loops for ins in kernel.between(loop.start, loop.end)}
            assert wanted is None or wanted in inside, kernel.name
        for loop in kernel.loops:
            assert kernel.labels[loop.label] == loop.start <= loop.end


def test_every_corpus_kernel_has_a_loop_expectation(corpus: dict[str, Case | Exception]) -> None:
    names = {kernel for case in all_cases(corpus) for kernel in case.listing.kernels}
    assert names - set(SOURCE_LOOPS) - STRAIGHT <= {"atomics", "indirect"}  # compiler-made loops only


# ---------------------------------------------------------------- specific instructions ----------


def test_hgmma_keeps_every_modifier(corpus: dict[str, Case | Exception]) -> None:
    case = get_case(corpus, "wgmma-sm_90a")
    kinds = case.listing.kernel("wgmma_kinds")
    assert {ins.opcode for ins in kinds.instructions if ins.base.endswith("GMMA")} == {
        "HGMMA.64x8x16.F32",
        "HGMMA.64x8x16.F32.BF16",
        "HGMMA.64x8x8.F32.TF32",
        "QGMMA.64x8x32.F32.E4M3.E5M2",
        "IGMMA.64x8x32.S8.U8.SAT",
    }
    (f16,) = find(case, "wgmma_kinds", "HGMMA.64x8x16.F32")
    assert re.fullmatch(r"R\d+", f16.operands[0])
    assert re.fullmatch(r"gdesc\[UR\d+\]\.negB\.tnspB", f16.operands[1])  # scale-b -1, transposed B
    assert f16.operands[2:] == ("RZ", "!UPT", "gsb0")  # scale-d predicate as an operand
    (bf16,) = find(case, "wgmma_kinds", "HGMMA.64x8x16.F32.BF16")
    assert len(bf16.operands) == 4
    assert re.fullmatch(r"R\d+", bf16.operands[1])  # A from registers
    assert re.fullmatch(r"gdesc\[UR\d+\]", bf16.operands[2])
    (depbar,) = find(case, "wgmma_kinds", "WARPGROUP.DEPBAR.LE")
    assert depbar.operands == ("gsb0", "0x0")
    pipelined = opcodes(case)
    assert {"WARPGROUP.ARRIVE", "HGMMA.64x16x16.F32", "USETMAXREG.TRY_ALLOC.CTAPOOL"} <= pipelined
    assert "USETMAXREG.DEALLOC.CTAPOOL" in pipelined


def test_predicates(corpus: dict[str, Case | Exception]) -> None:
    seen: dict[str, set[str]] = {}
    for case in all_cases(corpus):
        for _, ins in instructions_of(case):
            if ins.predicate:
                seen.setdefault(re.sub(r"\d+", "N", ins.predicate), set()).add(case.arch.name)
    assert set(seen) >= {"@PN", "@!PN", "@!UPN", "@!PT", "@!UPT"}
    assert seen["@!PN"] == {arch.name for arch in SUPPORTED_ARCHS}

    tcgen = get_case(corpus, "tcgen05-sm_100a")
    guarded = [ins for ins in tcgen.listing.kernel("tcgen05_mma").instructions if ins.predicate == "@!UP0"]
    assert any(ins.opcode == "SYNCS.EXCH.64" for ins in guarded)
    # Predicates as operands (not guards): negated true-predicates and uniform branch conditions.
    operands = {
        (ins.base, re.sub(r"\d+", "N", op))
        for case in all_cases(corpus) for _, ins in instructions_of(case) for op in ins.operands
    }  # fmt: skip
    assert {("LOP3", "!PT"), ("ULOP3", "!UPT"), ("BRA", "!UPN"), ("BRA", "UPN")} <= operands


def test_async_copy_and_barrier_opcodes(corpus: dict[str, Case | Exception]) -> None:
    for arch in ("sm_80", "sm_86", "sm_89", "sm_90", "sm_90a", "sm_100a", "sm_120"):
        case = get_case(corpus, f"async_copy-{arch}")
        found = opcodes(case)
        assert {"LDGSTS.E.BYPASS.128", "LDGSTS.E", "LDGDEPBAR", "DEPBAR.LE"} <= found, arch
        assert any(op.startswith("ARRIVES.LDGSTSBAR.64") for op in found), arch
        (bypass, *_) = find(case, "cp_async_pipeline", "LDGSTS.E.BYPASS.128")
        assert len(bypass.operands) == 2 and all(op.endswith("]") for op in bypass.operands)
    for arch in ("sm_90", "sm_90a", "sm_100a", "sm_120"):
        case = get_case(corpus, f"hopper_async-{arch}")
        found = opcodes(case)
        assert {"UTMALDG.2D", "UTMASTG.2D", "UTMAPF.L2.2D", "UTMAREDG.2D.ADD", "UBLKCP.S.G", "UBLKCP.G.S"} <= found
        assert {"SYNCS.EXCH.64", "SYNCS.ARRIVE.TRANS64", "SYNCS.PHASECHK.TRANS64.TRYWAIT"} <= found
        assert {"UCGABAR_ARV", "UCGABAR_WAIT", "ELECT", "FENCE.VIEW.ASYNC.S", "ACQBULK", "PREEXIT"} <= found
        (load,) = find(case, "tma_tiles", "UTMALDG.2D")
        assert all(re.fullmatch(r"\[UR\d+\]", op) for op in load.operands)
        wait = find(case, "tma_tiles", "SYNCS.PHASECHK.TRANS64.TRYWAIT")[0]
        assert re.fullmatch(r"P\d", wait.operands[0]) and wait.operands[1].startswith("[")


def test_bracketed_operands_stay_whole(corpus: dict[str, Case | Exception]) -> None:
    def operands(case_name: str) -> set[str]:
        return {op for _, ins in instructions_of(get_case(corpus, case_name)) for op in ins.operands}

    hopper = operands("memory-sm_90")
    assert any(re.fullmatch(r"desc\[UR\d+\]\[R\d+\.64(\+0x[0-9a-f]+)?\]", op) for op in hopper)
    assert any(re.fullmatch(r"c\[0x0\]\[0x[0-9a-f]+\]", op) for op in hopper)
    assert any(re.fullmatch(r"c\[0x3\]\[R\d+(\+0x[0-9a-f]+)?\]", op) for op in hopper)  # indexed __constant__
    assert any(re.fullmatch(r"\[R\d+\.64\]", op) for op in operands("memory-sm_80"))
    assert any(re.fullmatch(r"gdesc\[UR\d+\]", op) for op in operands("wgmma-sm_90a"))
    blackwell = get_case(corpus, "tcgen05-sm_100a")
    (mma,) = find(blackwell, "tcgen05_mma", "UTCHMMA")
    assert [re.sub(r"\d+", "N", op) for op in mma.operands] == [
        "gdesc[URN]", "gdesc[URN]", "tmem[URN]", "tmem[URN]", "idesc[URN]", "UPN",
    ]  # fmt: skip
    assert any(re.fullmatch(r"tmem\[UR\d+\+0x8\]", op) for op in operands("tcgen05-sm_100a"))


def test_indirect_branch_annotation(corpus: dict[str, Case | Exception]) -> None:
    for arch in ("sm_100a", "sm_120"):
        case = get_case(corpus, f"memory-{arch}")
        kernel = case.listing.kernel("indirect")
        brx = [ins for ins in kernel.instructions if ins.base == "BRX"]
        assert brx, arch
        for ins in brx:
            assert re.fullmatch(r"R\d+ -0x[0-9a-f]+", ins.operands[0]) and len(ins.operands) == 1
            assert ins.annotation is not None and ins.annotation.startswith('(*"BRANCH_TARGETS ')
            targets = ins.annotation[len('(*"BRANCH_TARGETS ') : -len('"*)')].split(",")
            assert all(target in kernel.labels for target in targets)
            assert ins.to_json()["annotation"] == ins.annotation


def test_calls_and_recursion(corpus: dict[str, Case | Exception]) -> None:
    for arch in SUPPORTED_ARCHS:
        case = get_case(corpus, f"memory-{arch.name}")
        calls = case.listing.kernel("calls")
        targets = {ins.branch_target() for ins in calls.instructions if ins.base == "CALL"}
        assert {"$calls$polynomial", "$calls$_Z9fibonaccij"} <= targets
        assert any(ins.base == "RET" for ins in calls.instructions)
        assert calls.local_bytes is None  # recursive: no static stack bound, as cuobjdump says
        assert case.listing.kernel("generic_and_local").local_bytes == 128
        nested = case.listing.kernel("nested_frames")
        assert nested.local_bytes is not None and nested.local_bytes >= 32 + 64  # callee frame included


# ---------------------------------------------------------------- fuzzing --------------------------

SAMPLE = """\t.target\tsm_90a
\t.section\t.nv.info,"",@"SHT_CUDA_INFO"
\t//----- nvinfo : EIATTR_REGCOUNT
        /*0004*/ \t.word\tindex@(k)
        /*0008*/ \t.word\t0x00000016
\t//----- nvinfo : EIATTR_FRAME_SIZE
        /*0010*/ \t.word\tindex@(k)
        /*0014*/ \t.word\t0x00000010
\t//----- nvinfo : EIATTR_MIN_STACK_SIZE
        /*001c*/ \t.word\tindex@(k)
        /*0020*/ \t.word\t0xffffffff
\t.section\t.text.k,"ax",@progbits
        .other          k,@"STO_CUDA_ENTRY STV_DEFAULT"
k:
.text.k:
        /*0000*/                   LDC R1, c[0x0][0x28] ;
        /*0010*/                   BSSY.RECONVERGENT B0, `(.L_x_0) ;
.L_x_2:
        /*0020*/                   LDG.E.128 R4, desc[UR4][R2.64+0x10] ;
        /*0030*/              @!P0 BRA `(.L_x_2) ;
        /*0040*/                   @!UP0 SYNCS.EXCH.64 URZ, [UR7], UR4 ;
        /*0050*/                   HGMMA.64x8x16.F32 R24, gdesc[UR4].negB.tnspB, RZ, !UPT, gsb0 ;
        /*0060*/                   BRX R4 -0x140                 (*"BRANCH_TARGETS .L_x_0,.L_x_2"*);
        /*0070*/                   FSETP.GTU.FTZ.AND P0, PT, |R0|, +INF , PT ;
.L_x_0:
        /*0080*/                   EXIT ;
.L_x_1:
        /*0090*/                   BRA `(.L_x_1);
\t.section\t.nv.shared.k,"aw",@nobits
\t.zero\t\t1536
"""
SAMPLE_LINES = SAMPLE.splitlines()
TOKENS = [
    "/*0000*/", "/*00a0*/ ", ".section", ".text.", ".text.k", ".nv.info", ".nv.shared.", ".word", ".zero", "index@(",
    "index@(k)", ")", "(", "[", "]", "{", "}", "`", "`(", "(*", "*)", '"', ",", ";", ":", "@", "@!P0", "@!UPT", "@UP1",
    "//----- nvinfo : ", "EIATTR_REGCOUNT", "EIATTR_FRAME_SIZE", "EIATTR_MIN_STACK_SIZE", "0x", "0xffffffff", "08",
    "-1", "LDG.E", "BRA", "BRX", ".L_x_0", ".L_x_0:", "k:", ".other", "k,@\"STO_CUDA_ENTRY", ".target", "sm_90a", "\t",
    " ", "\n", "\r", "\x00", "\u2028", "٣", "R1", "desc[UR4][R2.64]",
]  # fmt: skip


@st.composite
def mutated_listings(draw: st.DrawFn) -> str:
    """The sample listing after a few random line edits: deletions, copies, swaps, splices, junk."""
    lines = list(SAMPLE_LINES)
    junk = st.one_of(st.text(max_size=40), st.lists(st.sampled_from(TOKENS), max_size=12).map("".join))
    for _ in range(draw(st.integers(0, 6))):
        if not lines:
            lines.append(draw(junk))
            continue
        at = draw(st.integers(0, len(lines) - 1))
        action = draw(st.sampled_from(["delete", "copy", "swap", "splice", "insert", "truncate"]))
        if action == "delete":
            del lines[at]
        elif action == "copy":
            lines.insert(draw(st.integers(0, len(lines))), lines[at])
        elif action == "swap":
            other = draw(st.integers(0, len(lines) - 1))
            lines[at], lines[other] = lines[other], lines[at]
        elif action == "splice":
            line = lines[at]
            start = draw(st.integers(0, len(line)))
            end = draw(st.integers(start, len(line)))
            lines[at] = line[:start] + draw(junk) + line[end:]
        elif action == "insert":
            lines.insert(at, draw(junk))
        else:
            lines[at] = lines[at][: draw(st.integers(0, len(lines[at])))]
    return "\n".join(lines)


PARSE_BOUND_S = 30.0
"""What a parse may take before it counts as hung: a bound, not a benchmark. The longest input here parses
in a quarter of a second on a busy 2-core machine, linearly; a parse quadratic in its 200,000-character
lines would take minutes."""


@contextlib.contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    """Fail (rather than hang) when the body runs longer than ``seconds`` (where SIGALRM exists)."""
    if not hasattr(signal, "setitimer"):
        yield
        return

    def expire(signum: int, frame: object) -> None:
        raise TimeoutError(f"took longer than {seconds} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def parse_everything(text: str) -> None:
    """parse_listing plus everything derived from it; only GpuprobeError may escape."""
    with time_limit(PARSE_BOUND_S):
        try:
            listing = parse_listing(text)
        except GpuprobeError:
            return
        listing.to_json()
        for kernel in listing.kernels.values():
            for ins in kernel.instructions:
                ins.text()
                ins.branch_target()


def test_sample_listing_parses() -> None:
    listing = parse_listing(SAMPLE)
    kernel = listing.kernel("k")
    assert kernel.entry and kernel.registers == 0x16 and kernel.shared_bytes == 1536
    assert kernel.local_bytes is None  # MIN_STACK_SIZE 0xffffffff: recursion, no bound
    assert [ins.offset for ins in kernel.instructions] == list(range(0, 0xA0, 0x10))
    assert kernel.instructions[3].predicate == "@!P0"
    assert kernel.instructions[4].predicate == "@!UP0"
    assert kernel.instructions[2].operands == ("R4", "desc[UR4][R2.64+0x10]")
    assert kernel.instructions[7].operands == ("P0", "PT", "|R0|", "+INF", "PT")
    assert [(loop.start, loop.end) for loop in kernel.loops] == [(0x20, 0x30), (0x90, 0x90)]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_listings())
def test_fuzz_mutated_listings(text: str) -> None:
    parse_everything(text)


@settings(max_examples=200, deadline=None)
@given(st.one_of(st.text(), st.lists(st.sampled_from(TOKENS), max_size=60).map("".join)))
def test_fuzz_arbitrary_text(text: str) -> None:
    parse_everything(text)


def split_char_by_char(text: str) -> tuple[str, ...]:
    """The operand split, one character at a time: what :func:`split_operands` must agree with."""
    closing = {"[": "]", "(": ")", "{": "}"}
    parts, depth, current = [], [], []
    for char in text:
        if char in closing:
            depth.append(closing[char])
        elif depth and char == depth[-1]:
            depth.pop()
        elif char == "," and not depth:
            parts.append("".join(current).strip())
            current = []
            continue
        current.append(char)
    tail = "".join(current).strip()
    return (*parts, tail) if tail or parts else ()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(["R2", " ", ",", "[", "]", "(", ")", "{", "}", "`", "c", "0x1", "\t"]), max_size=30))
def test_operands_split_as_a_character_by_character_scan_would(tokens: list[str]) -> None:
    text = "".join(tokens)
    assert split_operands(text) == split_char_by_char(text)


@pytest.mark.parametrize(
    "line",
    [
        "        /*0000*/ A" + " " * 200_000 + "x",
        "        /*0000*/ A" + " " * 200_000 + ";x",
        "        /*0000*/ A (*" + " " * 200_000 + "*)x",
        "        /*0000*/ A " + "(*" * 100_000,
        "        /*0000*/ BRA " + "`(" * 100_000,
        "        /*0000*/ A " + "[" * 100_000 + "," * 100_000,
        "        /*" + "0" * 200_000,
    ],
    ids=["spaces", "spaces-semicolon", "annotation", "open-annotations", "backquotes", "brackets", "offset"],
)
def test_long_lines_parse_in_linear_time(line: str) -> None:
    parse_everything(".section .text.k\n" + line + "\n" + line)  # within PARSE_BOUND_S
