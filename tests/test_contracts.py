"""SASS contract rules: each kind holding and failing, on hand-written listings and on real cubins.

Also the project's NEGATIVE CONTROL: tests/negative/broken_chase.{ptx,toml} declares broken chase
kernels with memory.latency.global_cg's exact contract, and every one of them must be rejected,
each by the rule that exists to catch its kind of break.
"""

from __future__ import annotations

import dataclasses
import functools
import re
from pathlib import Path
from typing import Any

import pytest

from gpuprobe.core.arch import SUPPORTED_ARCHS, Arch, parse_arch
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.kernels.check import check_all, check_probe
from gpuprobe.kernels.contracts import Rule, Violation, check, check_rule, clock_reads, timed_loops
from gpuprobe.kernels.cubin import BuiltModule, build_ptx
from gpuprobe.kernels.registry import PTX_DIR, Probe, all_probes, find_probe, load_family
from gpuprobe.kernels.sass import Kernel, apply_compile_log, parse_listing
from tests.helpers.checked import measured_module

NEGATIVE_DIR = Path(__file__).resolve().parent / "negative"
SM80 = parse_arch("sm_80")
LOAD = r"LDG\.E\.64\.STRONG\.GPU"


# ---------------------------------------------------------------- hand-written listings


def listing_text(code: list[str], name: str = "k", frame: int = 0, registers: int = 16) -> str:
    """A minimal nvdisasm-style listing of one entry kernel: its resource attributes, then its code.

    Lines of ``code`` that end in ``:`` are labels; every other line is an instruction, placed 16
    bytes after the previous one, written the way nvdisasm writes it.
    """
    out = [
        "\t.target\tsm_80",
        "",
        "//--------------------- .nv.info                 --------------------------",
        '\t.section\t.nv.info,"",@"SHT_CUDA_INFO"',
        "\t.align\t4",
        "",
        "\t//----- nvinfo : EIATTR_REGCOUNT",
        "\t.align\t\t4",
        "        /*0000*/ \t.byte\t0x04, 0x2f",
        "        /*0002*/ \t.short\t(.L_1 - .L_0)",
        ".L_0:",
        f"        /*0004*/ \t.word\tindex@({name})",
        f"        /*0008*/ \t.word\t0x{registers:08x}",
        "",
        "\t//----- nvinfo : EIATTR_FRAME_SIZE",
        "\t.align\t\t4",
        ".L_1:",
        "        /*000c*/ \t.byte\t0x04, 0x11",
        "        /*000e*/ \t.short\t(.L_3 - .L_2)",
        ".L_2:",
        f"        /*0010*/ \t.word\tindex@({name})",
        f"        /*0014*/ \t.word\t0x{frame:08x}",
        "",
        f"//--------------------- .text.{name}                  --------------------------",
        f'\t.section\t.text.{name},"ax",@progbits',
        f'\t.sectioninfo\t@"SHI_REGISTERS={registers}"',
        "\t.align\t128",
        f"        .global         {name}",
        f"        .type           {name},@function",
        f'        .other          {name},@"STO_CUDA_ENTRY STV_DEFAULT"',
        f"{name}:",
        f".text.{name}:",
    ]
    offset = 0
    for line in code:
        if line.endswith(":"):
            out.append(line)
        else:
            out.append(f"        /*{offset:04x}*/                   {line} ;")
            offset += 16
    return "\n".join(out) + "\n"


def sass(code: list[str], **attributes: Any) -> Kernel:
    """Parse a hand-written listing (see :func:`listing_text`) and return its one kernel."""
    return parse_listing(listing_text(code, **attributes)).kernel(attributes.get("name", "k"))


def edit(code: list[str], old: str, *new: str) -> list[str]:
    """``code`` with the single line ``old`` replaced by ``new`` (zero or more lines)."""
    assert code.count(old) == 1, old
    index = code.index(old)
    return [*code[:index], *new, *code[index + 1 :]]


def rule(**entry: Any) -> Rule:
    """A rule as a TOML contract entry would declare it."""
    return Rule.from_dict(entry, "test")


# A clean chase: a clock read, one loop of three dependent loads (the last feeds the first), a
# clock read, the stores of the results, and nvdisasm's trailing self-branch.
CHASE = [
    "IMAD.MOV.U32 R1, RZ, RZ, c[0x0][0x28]",  # 0000
    "MOV R2, c[0x0][0x160]",  # 0010
    "CS2R R4, SR_CLOCKLO",  # 0020
    ".L_x_1:",
    "LDG.E.64.STRONG.GPU R2, [R2.64]",  # 0030
    "LDG.E.64.STRONG.GPU R6, [R2.64]",  # 0040
    "LDG.E.64.STRONG.GPU R2, [R6.64]",  # 0050
    "IADD3 R0, R0, -0x1, RZ",  # 0060
    "ISETP.NE.AND P0, PT, R0, RZ, PT",  # 0070
    "@P0 BRA `(.L_x_1)",  # 0080
    "CS2R R8, SR_CLOCKLO",  # 0090
    "STG.E.64 [R10.64], R8",  # 00a0
    "STG.E.64 [R10.64+0x8], R2",  # 00b0
    "EXIT",  # 00c0
    ".L_x_2:",
    "BRA `(.L_x_2)",  # 00d0
]


# A spin as ptxas lays it out for sm_75: the acquire loop (.L_x_1 .. the BRA at 0x70) and a YIELD
# convergence loop (.L_x_2 .. the BRA.U at 0x60) interleave: each starts inside the other.
INTERLEAVED_SPIN = [
    "CS2R R4, SR_CLOCKLO",  # 0000
    ".L_x_1:",
    "LDG.E.STRONG.GPU R11, [R8]",  # 0010
    "ISETP.NE.U32.AND P2, PT, R11, UR4, PT",  # 0020
    "@!P2 BRA `(.L_x_3)",  # 0030
    ".L_x_2:",
    "YIELD",  # 0040
    "VOTEU.ANY UR6, UPT, PT",  # 0050
    "@!P2 BRA.U `(.L_x_1)",  # 0060
    "BRA `(.L_x_2)",  # 0070
    ".L_x_3:",
    "CS2R R12, SR_CLOCKLO",  # 0080
    "EXIT",  # 0090
]


def test_interleaved_loops_are_one_loop_their_union() -> None:
    kernel = sass(INTERLEAVED_SPIN)
    assert [(loop.start, loop.end) for loop in kernel.loops] == [(0x10, 0x70)]
    bracket = rule(rule="clock_bracket", reads=2, loops=1)
    assert check_rule(kernel, bracket) is None


def test_hand_written_listing_parses_as_intended() -> None:
    kernel = sass(CHASE, frame=0, registers=12)
    assert kernel.entry and kernel.registers == 12 and kernel.local_bytes == 0
    assert [i.offset for i in clock_reads(kernel)] == [0x20, 0x90]
    assert [(loop.start, loop.end) for loop in kernel.loops] == [(0x30, 0x80), (0xD0, 0xD0)]
    assert [(loop.start, loop.end) for loop in timed_loops(kernel)] == [(0x30, 0x80)]


def test_a_contracts_rules_share_one_look_at_the_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """The loops and the clock reads are found once per kernel, not once per rule that needs them."""
    kernel = sass(CHASE)
    found = Kernel.loops.fget
    assert found is not None
    looked: list[str] = []

    def counted(self: Kernel) -> list:
        looked.append(self.name)
        return found(self)

    monkeypatch.setattr(Kernel, "loops", property(counted))
    rules = [
        rule(rule="clock_bracket", reads=2, loops=1),
        rule(rule="count", region="timed_loop", opcode=r"LDG\..*", count=3),
        rule(rule="dependent_chain", region="timed_loop", opcode=r"LDG\..*"),
        rule(rule="count", region="timed_outside_loop", opcode=".*", max=0),
        rule(rule="forbid", region="timed", opcode="BAR.*"),
    ]
    assert check(kernel, rules) == []
    assert looked == ["k"]


# ---------------------------------------------------------------- each rule kind -


def test_forbid() -> None:
    kernel = sass(CHASE)
    assert check_rule(kernel, rule(rule="forbid", opcode=r"(LDL|STL)(\..*)?")) is None
    assert check_rule(kernel, rule(rule="forbid", region="timed_loop", opcode=r"STG(\..*)?")) is None
    violation = check_rule(kernel, rule(rule="forbid", opcode=r"STG(\..*)?"))
    assert violation is not None
    assert violation.message == "2 forbidden instruction(s)"
    assert violation.lines == ["/*00a0*/ STG.E.64 [R10.64], R8 ;", "/*00b0*/ STG.E.64 [R10.64+0x8], R2 ;"]


def test_forbid_matches_the_whole_mnemonic() -> None:
    kernel = sass(CHASE)
    assert check_rule(kernel, rule(rule="forbid", opcode="LDG")) is None  # modifiers not matched
    assert check_rule(kernel, rule(rule="forbid", opcode=r"LDG\.E\.64")) is None
    assert check_rule(kernel, rule(rule="forbid", opcode=r"LDG\.E\.64\.STRONG\.GPU")) is not None


def test_count() -> None:
    kernel = sass(CHASE)
    assert check_rule(kernel, rule(rule="count", region="timed_loop", opcode=LOAD, count=3)) is None
    assert check_rule(kernel, rule(rule="count", region="timed_loop", opcode=LOAD, min=3)) is None
    assert check_rule(kernel, rule(rule="count", region="timed_loop", opcode=LOAD, min=1, max=3)) is None
    too_few = check_rule(kernel, rule(rule="count", region="timed_loop", opcode=LOAD, count=32))
    assert too_few is not None and too_few.message == "found 3"
    assert [line[:10] for line in too_few.lines] == ["/*0030*/ L", "/*0040*/ L", "/*0050*/ L"]
    too_many = check_rule(kernel, rule(rule="count", region="timed_loop", opcode=LOAD, max=2))
    assert too_many is not None and too_many.message == "found 3"


def test_count_of_nothing_shows_the_region() -> None:
    """When nothing matches, the region itself is shown, so the reader sees what is there instead."""
    kernel = sass(CHASE)
    violation = check_rule(kernel, rule(rule="count", region="timed_loop", opcode=r"LDS(\..*)?", count=1))
    assert violation is not None and violation.message == "found 0"
    assert len(violation.lines) == 6 and violation.lines[-1] == "/*0080*/ @P0 BRA `(.L_x_1) ;"


def test_count_zero_in_timed_region() -> None:
    back_to_back = ["CS2R R4, SR_CLOCKLO", "CS2R R6, SR_CLOCKLO", "EXIT"]
    assert check_rule(sass(back_to_back), rule(rule="count", region="timed", opcode=".*", count=0)) is None
    violation = check_rule(sass(CHASE), rule(rule="count", region="timed", opcode=".*", count=0))
    assert violation is not None and violation.message == "found 6"


def test_only_memory() -> None:
    only = rule(rule="only_memory", region="timed_loop", opcode=LOAD)
    assert check_rule(sass(CHASE), only) is None
    assert check_rule(sass(CHASE), rule(rule="only_memory", opcode=LOAD)) is not None  # STG in the kernel
    setp = "ISETP.NE.AND P0, PT, R0, RZ, PT"
    polluted = edit(CHASE, setp, "LDS R12, [R13]", "@P0 ST.E [R14.64], R12", setp)
    violation = check_rule(sass(polluted), only)
    assert violation is not None and violation.message == "2 other memory instruction(s)"
    assert violation.lines == ["/*0070*/ LDS R12, [R13] ;", "/*0080*/ @P0 ST.E [R14.64], R12 ;"]


def test_clock_bracket() -> None:
    bracket = rule(rule="clock_bracket", reads=2, loops=1)
    assert check_rule(sass(CHASE), bracket) is None
    assert check_rule(sass(CHASE), rule(rule="clock_bracket")) is None  # the defaults: 2 reads, 1 loop

    third = edit(CHASE, "IADD3 R0, R0, -0x1, RZ", "IADD3 R0, R0, -0x1, RZ", "S2R R12, SR_CLOCKLO")
    violation = check_rule(sass(third), bracket)
    assert violation is not None and violation.message == "found 3 clock reads"
    assert violation.lines == [
        "/*0020*/ CS2R R4, SR_CLOCKLO ;",
        "/*0070*/ S2R R12, SR_CLOCKLO ;",
        "/*00a0*/ CS2R R8, SR_CLOCKLO ;",
    ]

    violation = check_rule(sass(CHASE), rule(rule="clock_bracket", reads=2, loops=0))
    assert violation is not None and violation.message == "found 1 loop(s) between the clock reads"

    outside = edit(CHASE, "CS2R R4, SR_CLOCKLO", "NOP")
    violation = check_rule(sass(outside), bracket)
    assert violation is not None and violation.message == "found 1 clock reads"


def test_clock_bracket_catches_a_read_inside_a_later_loop() -> None:
    """Right number of reads and of bracketed loops, but the last read sits inside another loop."""
    code = [
        *CHASE[:10],  # up to and including the chase loop's branch (0x80)
        "CS2R R8, SR_CLOCKLO",  # 0090
        ".L_x_3:",
        "CS2R R12, SR_CLOCKLO",  # 00a0, inside the loop below
        "@P1 BRA `(.L_x_3)",  # 00b0
        "EXIT",  # 00c0
    ]
    violation = check_rule(sass(code), rule(rule="clock_bracket", reads=3, loops=1))
    assert violation is not None and violation.message == "a clock read sits inside a loop"
    assert violation.lines == ["/*00a0*/ CS2R R12, SR_CLOCKLO ;"]


def test_dependent_chain() -> None:
    chain = rule(rule="dependent_chain", region="timed_loop", opcode=LOAD)
    assert check_rule(sass(CHASE), chain) is None

    independent = [
        line.replace("[R6.64]", "[R2.64+0x80]") if line.startswith("LDG") and "R6.64" in line else line
        for line in CHASE
    ]
    violation = check_rule(sass(independent), chain)
    assert violation is not None and violation.message == "1 load(s) not fed by the previous one"
    assert violation.lines == ["/*0050*/ LDG.E.64.STRONG.GPU R2, [R2.64+0x80] ;"]


def test_dependent_chain_wraps_around_a_loop_only() -> None:
    """In a loop the first load must take the last one's value; in straight-line code it need not."""
    no_wrap = edit(CHASE, "LDG.E.64.STRONG.GPU R2, [R6.64]", "LDG.E.64.STRONG.GPU R8, [R6.64]")
    assert check_rule(sass(no_wrap), rule(rule="dependent_chain", region="kernel", opcode=LOAD)) is None
    violation = check_rule(sass(no_wrap), rule(rule="dependent_chain", region="timed_loop", opcode=LOAD))
    assert violation is not None
    assert violation.lines == ["/*0030*/ LDG.E.64.STRONG.GPU R2, [R2.64] ;"]


def test_dependent_chain_with_uniform_and_shared_addresses() -> None:
    code = ["CS2R R4, SR_CLOCKLO", ".L_x_0:", "LDS R3, [R3]", "LDS R3, [R3+0x4]", "LDS.U R3, [R3]", "@P0 BRA `(.L_x_0)",
            "CS2R R6, SR_CLOCKLO", "EXIT"]  # fmt: skip
    assert check_rule(sass(code), rule(rule="dependent_chain", region="timed_loop", opcode=r"LDS(\.U)?")) is None
    uniform = edit(code, "LDS R3, [R3+0x4]", "LDS R3, [UR4+0x4]")
    violation = check_rule(sass(uniform), rule(rule="dependent_chain", region="timed_loop", opcode=r"LDS(\.U)?"))
    assert violation is not None and violation.lines == ["/*0020*/ LDS R3, [UR4+0x4] ;"]


def test_dependent_chain_is_broken_by_a_write_between_the_loads() -> None:
    """The address register must hold the previous load's value when the next load issues."""
    chain = rule(rule="dependent_chain", region="timed_loop", opcode=LOAD)
    copied = edit(
        CHASE, "LDG.E.64.STRONG.GPU R6, [R2.64]", "IMAD.MOV.U32 R2, RZ, RZ, R20", "LDG.E.64.STRONG.GPU R6, [R2.64]"
    )
    violation = check_rule(sass(copied), chain)
    assert violation is not None and violation.lines == ["/*0050*/ LDG.E.64.STRONG.GPU R6, [R2.64] ;"]
    high_half = edit(CHASE, "LDG.E.64.STRONG.GPU R6, [R2.64]", "MOV R3, R21", "LDG.E.64.STRONG.GPU R6, [R2.64]")
    assert check_rule(sass(high_half), chain) is not None  # a 64-bit address is a register pair
    other = edit(CHASE, "LDG.E.64.STRONG.GPU R6, [R2.64]", "MOV R9, R21", "LDG.E.64.STRONG.GPU R6, [R2.64]")
    assert check_rule(sass(other), chain) is None


def test_dependent_chain_loads_must_be_unpredicated() -> None:
    guarded = edit(CHASE, "LDG.E.64.STRONG.GPU R6, [R2.64]", "@P1 LDG.E.64.STRONG.GPU R6, [R2.64]")
    violation = check_rule(sass(guarded), rule(rule="dependent_chain", region="timed_loop", opcode=LOAD))
    assert violation is not None and violation.lines == ["/*0040*/ @P1 LDG.E.64.STRONG.GPU R6, [R2.64] ;"]


def test_control_off_chain() -> None:
    off_chain = rule(rule="control_off_chain", region="timed_loop", opcode=LOAD)
    assert check_rule(sass(CHASE), off_chain) is None
    waits = edit(CHASE, "ISETP.NE.AND P0, PT, R0, RZ, PT", "ISETP.NE.AND P0, PT, R2, RZ, PT")
    violation = check_rule(sass(waits), off_chain)
    assert violation is not None and violation.message == "1 instruction(s) wait for the chain"
    assert violation.lines == ["/*0070*/ ISETP.NE.AND P0, PT, R2, RZ, PT ;"]
    high_half = edit(CHASE, "IADD3 R0, R0, -0x1, RZ", "IADD3 R0, R7, -0x1, RZ")  # R7 is half of R6:R7
    assert check_rule(sass(high_half), off_chain) is not None


def test_only_is_an_allow_list() -> None:
    allowed = rule(rule="only", region="timed_loop", opcode=rf"{LOAD}|IADD3|ISETP(\.\w+)*|BRA")
    assert check_rule(sass(CHASE), allowed) is None
    fenced = edit(CHASE, "IADD3 R0, R0, -0x1, RZ", "IADD3 R0, R0, -0x1, RZ", "MEMBAR.SC.GPU")
    violation = check_rule(sass(fenced), allowed)
    assert violation is not None and violation.lines == ["/*0070*/ MEMBAR.SC.GPU ;"]


def test_timed_outside_loop_sees_what_the_clock_reads_time_besides_the_loop() -> None:
    nothing_else = rule(rule="count", region="timed_outside_loop", opcode=".*", max=0)
    assert check_rule(sass(CHASE), nothing_else) is None
    extra = edit(CHASE, "CS2R R8, SR_CLOCKLO", "STG.E.64 [R10.64+0x10], R2", "CS2R R8, SR_CLOCKLO")
    violation = check_rule(sass(extra), nothing_else)
    assert violation is not None and violation.lines == ["/*0090*/ STG.E.64 [R10.64+0x10], R2 ;"]


def test_dependent_chain_needs_the_loads() -> None:
    violation = check_rule(sass(CHASE), rule(rule="dependent_chain", region="timed_loop", opcode=r"LDS(\..*)?"))
    assert violation is not None and violation.message == "no such instructions"


def test_no_local() -> None:
    no_local = rule(rule="no_local")
    assert check_rule(sass(CHASE), no_local) is None
    violation = check_rule(sass(CHASE, frame=16), no_local)
    assert violation is not None and violation.message == "stack frame 16 bytes, spills 0 bytes"


def test_no_local_sees_spills_from_the_compile_log() -> None:
    listing = parse_listing(listing_text(CHASE))
    apply_compile_log(
        listing,
        "ptxas info    : Function properties for k\n"
        "ptxas         .     0 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads\n",
    )
    violation = check_rule(listing.kernel("k"), rule(rule="no_local"))
    assert violation is not None and violation.message == "stack frame 0 bytes, spills 16 bytes"


def test_regions_that_do_not_exist_are_violations_not_crashes() -> None:
    one_read = edit(CHASE, "CS2R R8, SR_CLOCKLO", "NOP")
    violation = check_rule(sass(one_read), rule(rule="count", region="timed", opcode=".*", count=0))
    assert violation is not None and violation.message == "region 'timed' needs two clock reads, found 1"

    two_loops = edit(CHASE, "@P0 BRA `(.L_x_1)", "@P0 BRA `(.L_x_1)", ".L_x_9:", "NOP", "@P1 BRA `(.L_x_9)")
    violation = check_rule(sass(two_loops), rule(rule="forbid", region="timed_loop", opcode="HMMA.*"))
    assert violation is not None
    assert violation.message == "region 'timed_loop' needs exactly one loop between the clock reads, found 2"

    straight = [line for line in CHASE if "BRA" not in line]
    violation = check_rule(sass(straight), rule(rule="count", region="timed_loop", opcode=LOAD, count=3))
    assert violation is not None
    assert violation.message == "region 'timed_loop' needs exactly one loop between the clock reads, found 0"


def test_timed_loop_is_the_innermost() -> None:
    inner = edit(CHASE, "LDG.E.64.STRONG.GPU R6, [R2.64]", ".L_x_5:", "LDG.E.64.STRONG.GPU R6, [R2.64]")
    inner = edit(inner, "IADD3 R0, R0, -0x1, RZ", "@P2 BRA `(.L_x_5)", "IADD3 R0, R0, -0x1, RZ")
    loops = timed_loops(sass(inner))
    assert [(loop.start, loop.end) for loop in loops] == [(0x40, 0x60)]


def test_violation_text_names_the_rule_and_shows_the_lines() -> None:
    forbid = rule(rule="forbid", opcode=r"STG(\..*)?")
    (violation,) = check(sass(CHASE), [rule(rule="no_local"), forbid])
    text = str(violation)
    assert text.splitlines() == [
        r"rule 'forbid STG(\..*)? in kernel' violated: 2 forbidden instruction(s)",
        "    /*00a0*/ STG.E.64 [R10.64], R8 ;",
        "    /*00b0*/ STG.E.64 [R10.64+0x8], R2 ;",
    ]


def test_violation_text_shortens_long_lists() -> None:
    many = Violation("forbid X in kernel", "20 forbidden instruction(s)", [f"/*{i:04x}*/ X ;" for i in range(20)])
    lines = str(many).splitlines()
    assert len(lines) == 1 + 12 + 1
    assert lines[-1] == "    ... 8 more"


def test_check_reports_every_broken_rule_in_order() -> None:
    rules = [rule(rule="no_local"), rule(rule="forbid", opcode="EXIT"), rule(rule="clock_bracket", loops=2)]
    violations = check(sass(CHASE, frame=8), rules)
    assert [v.rule for v in violations] == [r.describe() for r in rules]


@pytest.mark.parametrize(
    ("kind", "description"),
    [
        ({"rule": "count", "opcode": "X", "count": 3, "region": "timed"}, "count X in timed == 3"),
        ({"rule": "count", "opcode": "X", "min": 1, "max": 4}, "count X in kernel in [1, 4]"),
        ({"rule": "clock_bracket", "reads": 3, "loops": 2}, "3 clock reads bracketing 2 loop(s)"),
        ({"rule": "no_local"}, "no local memory (stack frame, spills)"),
        ({"rule": "only_memory", "opcode": "LDS", "region": "timed_loop"}, "only_memory LDS in timed_loop"),
    ],
)
def test_rule_descriptions(kind: dict[str, Any], description: str) -> None:
    assert Rule.from_dict(kind, "test").describe() == description


# ---------------------------------------------------------------- rule validation


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        ({"rule": "fordid", "opcode": "X"}, "test: unknown contract rule 'fordid'; known: forbid, count,"),
        ({"opcode": "X"}, "test: unknown contract rule None"),
        ({"rule": "forbid", "opcode": "LDG("}, "test: bad opcode pattern 'LDG('"),
        ({"rule": "forbid"}, "test: rule 'forbid' needs an opcode pattern"),
        ({"rule": "count", "count": 2}, "test: rule 'count' needs an opcode pattern"),
        ({"rule": "only_memory", "opcode": ""}, "test: rule 'only_memory' needs an opcode pattern"),
        ({"rule": "dependent_chain", "region": "timed_loop"}, "test: rule 'dependent_chain' needs an opcode pattern"),
        ({"rule": "forbid", "opcode": "X", "region": "loop"}, "test: unknown region 'loop'; known: kernel, timed,"),
        ({"rule": "forbid", "opcdoe": "X"}, "test: unknown contract key(s) ['opcdoe']"),
        ({"rule": "no_local", "kind": "forbid"}, "test: unknown contract key(s) ['kind']"),
        ({"rule": "count", "opcode": "X"}, "test: rule 'count' needs count, min or max"),
    ],
)
def test_bad_rules_are_one_line_errors(entry: dict[str, Any], expected: str) -> None:
    with pytest.raises(GpuprobeError) as excinfo:
        Rule.from_dict(entry, "test")
    message = str(excinfo.value)
    assert "\n" not in message
    assert message.startswith(expected), message


@pytest.mark.parametrize(
    "entry",
    [
        {"rule": "forbid", "opcode": 5},
        {"rule": "count", "opcode": "X", "count": "32"},
        {"rule": "clock_bracket", "reads": "2"},
        {"rule": "clock_bracket", "loops": [1]},
    ],
    ids=["opcode-int", "count-str", "reads-str", "loops-list"],
)
def test_wrongly_typed_rule_values_are_one_line_errors(entry: dict[str, Any]) -> None:
    """A TOML typo such as ``count = "32"`` must be caught when the contract is read.

    Today ``opcode = 5`` raises TypeError from re.compile (a traceback), ``count = "32"`` is
    accepted and raises TypeError when checked, and ``reads = "2"`` is accepted and then never
    equals the number of reads, so it reports a bogus violation.
    """
    with pytest.raises(GpuprobeError) as excinfo:
        Rule.from_dict(entry, "test")
    assert "\n" not in str(excinfo.value) and str(excinfo.value).startswith("test: ")


# ---------------------------------------------------------------- real cubins ---


@functools.cache
def built(source: Path, arch: Arch) -> BuiltModule:
    """One module per (source, arch) for this test session (the compile cache makes it cheap anyway)."""
    return build_ptx([source], arch)


def real_kernel(name: str, arch: Arch = SM80) -> Kernel:
    """A kernel of the real memory-latency family, compiled for ``arch`` (in the module a run measures with)."""
    return measured_module(arch).listing.kernel(name)


def negative_kernel(name: str, arch: Arch = SM80) -> Kernel:
    """A kernel of the negative-control family, compiled for ``arch``."""
    return built(NEGATIVE_DIR / "broken_chase.ptx", arch).listing.kernel(name)


def assert_lines_are_the_kernels(violation: Violation, kernel: Kernel) -> None:
    """Every SASS line a violation shows is an instruction of the kernel, at its offset."""
    assert violation.lines
    by_offset = {ins.offset: ins for ins in kernel.instructions}
    for line in violation.lines:
        match = re.fullmatch(r"/\*([0-9a-f]{4,})\*/ (.*) ;", line)
        assert match, line
        assert by_offset[int(match[1], 16)].text() == match[2]


@pytest.mark.parametrize(
    "entry",
    [
        {"rule": "forbid", "opcode": r"(LDL|STL)(\..*)?"},
        {"rule": "forbid", "region": "timed_loop", "opcode": r"(STG|BAR|MEMBAR)(\..*)?"},
        {"rule": "count", "region": "timed_loop", "opcode": LOAD, "count": 32},
        {"rule": "count", "region": "kernel", "opcode": r"STG\.E\.64", "count": 3},
        {"rule": "only_memory", "region": "timed_loop", "opcode": LOAD},
        {"rule": "clock_bracket", "reads": 2, "loops": 1},
        {"rule": "dependent_chain", "region": "timed_loop", "opcode": LOAD},
        {"rule": "dependent_chain", "region": "kernel", "opcode": LOAD},
        {"rule": "no_local"},
    ],
    ids=lambda entry: entry["rule"],
)
@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
def test_every_rule_kind_holds_on_the_real_l2_chase(entry: dict[str, Any], arch: str) -> None:
    assert check_rule(real_kernel("gp_chase_global_cg", parse_arch(arch)), rule(**entry)) is None


def test_forbid_fails_on_real_code() -> None:
    kernel = real_kernel("gp_sm_clock")
    violation = check_rule(kernel, rule(rule="forbid", opcode=r"STG(\..*)?"))
    assert violation is not None and violation.message == "2 forbidden instruction(s)"
    assert_lines_are_the_kernels(violation, kernel)


def test_count_fails_on_real_code() -> None:
    kernel = real_kernel("gp_chase_shared")
    violation = check_rule(kernel, rule(rule="count", region="timed_loop", opcode=LOAD, count=32))
    assert violation is not None and violation.message == "found 0"
    assert_lines_are_the_kernels(violation, kernel)
    assert any(" LDS" in line for line in violation.lines)  # shows what the loop holds instead


def test_only_memory_fails_on_real_code() -> None:
    kernel = real_kernel("gp_chase_shared")
    violation = check_rule(kernel, rule(rule="only_memory", region="timed_loop", opcode=LOAD))
    assert violation is not None and violation.message == "32 other memory instruction(s)"
    assert_lines_are_the_kernels(violation, kernel)


def test_clock_bracket_fails_on_real_code() -> None:
    kernel = real_kernel("gp_clock_overhead")
    violation = check_rule(kernel, rule(rule="clock_bracket", reads=2, loops=1))
    assert violation is not None and violation.message == "found 0 loop(s) between the clock reads"
    assert_lines_are_the_kernels(violation, kernel)
    assert all("SR_CLOCKLO" in line for line in violation.lines)


def test_dependent_chain_fails_on_real_code() -> None:
    kernel = negative_kernel("neg_independent_loads")
    violation = check_rule(kernel, rule(rule="dependent_chain", region="timed_loop", opcode=LOAD))
    assert violation is not None and violation.message == "32 load(s) not fed by the previous one"
    assert_lines_are_the_kernels(violation, kernel)


def test_no_local_fails_on_real_code() -> None:
    kernel = negative_kernel("neg_local_array")
    violation = check_rule(kernel, rule(rule="no_local"))
    assert violation is not None and violation.message.startswith("stack frame 256 bytes")


# ---------------------------------------------------------------- NEGATIVE CONTROL


@functools.cache
def negative_probes() -> tuple[Probe, ...]:
    """The negative-control family, loaded the way the registry loads a real one, each probe held
    to the real L2 chase's contract (so the control can never drift from what it controls)."""
    real = find_probe("memory.latency.global_cg").contract
    return tuple(dataclasses.replace(p, contract=real) for p in load_family(NEGATIVE_DIR / "broken_chase.toml"))


# The contract kinds each broken kernel must break, and nothing else: each break is caught by the
# rule that exists for it (an unrolled loop also leaves "the timed loop" undefined, so every
# timed_loop rule reports that).
EXPECTED_BREAKS = {
    "negative.independent_loads": {"dependent_chain", "control_off_chain", "only"},
    "negative.local_array": {"no_local", "forbid", "count", "only", "only_memory", "control_off_chain"},
    "negative.clock_in_loop": {"clock_bracket", "only", "control_off_chain"},
    "negative.unrolled": {"clock_bracket", "count", "only", "only_memory", "dependent_chain", "control_off_chain"},
}


def test_negative_control_declares_kernels_only_and_takes_the_real_contract() -> None:
    """The negative family states no rules of its own: its contract is memory.latency.global_cg's."""
    declared = load_family(NEGATIVE_DIR / "broken_chase.toml")
    assert {p.name for p in declared} == set(EXPECTED_BREAKS)
    for probe in declared:
        assert probe.contract == ()
        assert probe.archs == (parse_arch("sm_80"), parse_arch("sm_90a"))


@pytest.mark.parametrize("arch", ["sm_80", "sm_90a"])
@pytest.mark.parametrize("name", sorted(EXPECTED_BREAKS))
def test_negative_control_is_violated_by_the_expected_rule(name: str, arch: str) -> None:
    target = parse_arch(arch)
    probe = next(p for p in negative_probes() if p.name == name)
    result = check_probe(probe, built(probe.source, target))
    assert result.status == "violated", result.detail
    kinds = {r.describe(): r.kind for r in probe.contract}
    assert {kinds[v.rule] for v in result.violations} == EXPECTED_BREAKS[name], result.detail
    assert result.detail == "\n".join(str(v) for v in result.violations)


def test_negative_control_details_show_the_broken_code() -> None:
    module = built(NEGATIVE_DIR / "broken_chase.ptx", SM80)
    results = {p.name: check_probe(p, module) for p in negative_probes()}

    local = results["negative.local_array"]
    assert "stack frame 256 bytes" in local.detail
    assert re.search(r"/\*[0-9a-f]+\*/ STL\.64 ", local.detail) and re.search(r"/\*[0-9a-f]+\*/ LDL\.64 ", local.detail)
    assert local.resources["local_bytes"] == 256

    clock = results["negative.clock_in_loop"]
    (bracket,) = [v for v in clock.violations if v.rule.startswith("2 clock reads")]
    assert bracket.message == "found 3 clock reads"
    assert sum("SR_CLOCKLO" in line for line in bracket.lines) == 3

    unrolled = results["negative.unrolled"]
    assert "found 2 loop(s) between the clock reads" in unrolled.detail

    independent = results["negative.independent_loads"]
    assert "32 load(s) not fed by the previous one" in independent.detail
    assert "... 20 more" in independent.detail


def test_the_real_l2_chase_passes_the_same_contract() -> None:
    """The other half of the control: the same rules accept the correct kernel."""
    for arch in ("sm_80", "sm_90a"):
        module = measured_module(parse_arch(arch))
        assert check_probe(find_probe("memory.latency.global_cg"), module).status == "ok"


def test_every_registered_probe_holds_its_contract_on_every_arch_it_targets() -> None:
    probes = {p.name: p for p in all_probes()}
    results = check_all(probes.values(), SUPPORTED_ARCHS)
    assert len(results) == len(probes) * len(SUPPORTED_ARCHS)
    targeted = {(r.probe, r.arch): probes[r.probe].supports(parse_arch(r.arch)) for r in results}
    wrong = [r for r in results if r.status != ("ok" if targeted[r.probe, r.arch] else "unsupported")]
    assert not wrong, "\n".join(f"{r.arch} {r.probe}: {r.status}: {r.detail}" for r in wrong)


# CUDA 12.8, the oldest toolkit the suite accepts (README, "Toolkits"), reads PTX ISA 8.7 at most.
OLDEST_TOOLKIT_PTX_ISA = (8, 7)
PTX_VERSION = re.compile(r"^\s*\.version\s+(\d+)\.(\d+)", re.MULTILINE)


def test_every_ptx_file_assembles_with_the_oldest_supported_toolkit() -> None:
    """A newer .version still assembles with the newest ptxas, which these tests run, so only the
    toolkit matrix (ptxas 12.8) would see it: hold every file to 12.8's ISA here as well."""
    versions = {path.name: PTX_VERSION.search(path.read_text()) for path in sorted(PTX_DIR.glob("*/*.ptx"))}
    assert len(versions) > 20
    too_new = {
        name: match.group(0).strip() if match else "no .version"
        for name, match in versions.items()
        if match is None or (int(match[1]), int(match[2])) > OLDEST_TOOLKIT_PTX_ISA
    }
    assert not too_new, f"CUDA 12.8 reads PTX ISA {OLDEST_TOOLKIT_PTX_ISA}: {too_new}"
