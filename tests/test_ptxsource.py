"""The PTX comment directives (``//@repeat``, ``//@for``) and combining files into one module."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from gpuprobe.core.arch import Arch, parse_arch
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.kernels import includes
from gpuprobe.kernels.includes import MAX_INCLUDE_BYTES, include_root
from gpuprobe.kernels.ptxsource import (
    MAX_EXPANDED_CHARS,
    MAX_EXPANDED_LINES,
    MAX_EXPANSION_STEPS,
    combine,
    entry_parameters,
    expand,
    expansion_inputs,
    ptx_version,
)
from gpuprobe.kernels.source_tree import PTX_DIR
from tests.test_cli import refusal, run, write
from tests.test_fuzz_includes import answered_fifo, bounded_memory  # noqa: F401 (bounded_memory: a fixture)

SM80 = parse_arch("sm_80")
SM90A = parse_arch("sm_90a")


def src(*lines: str) -> str:
    """Join source lines into file text (with the final newline an editor writes)."""
    return "\n".join(lines) + "\n"


def one_line_error(excinfo: pytest.ExceptionInfo[GpuprobeError]) -> str:
    """The error's message, after checking it is a single line."""
    message = str(excinfo.value)
    assert "\n" not in message, message
    return message


# ---------------------------------------------------------------- //@repeat -----


def test_plain_text_passes_through_with_origins() -> None:
    expanded = expand(src("a", "b", "", "// comment"), "f.ptx")
    assert expanded.lines == ["a", "b", "", "// comment"]
    assert expanded.origins == [("f.ptx", 1), ("f.ptx", 2), ("f.ptx", 3), ("f.ptx", 4)]


def test_repeat_repeats_only_the_next_line() -> None:
    expanded = expand(src("head", "//@repeat 3", "\tld.global.cg.u64 %rd1, [%rd1];", "tail"), "f.ptx")
    assert expanded.lines == ["head"] + ["\tld.global.cg.u64 %rd1, [%rd1];"] * 3 + ["tail"]
    # Every copy points at the line that was written, not at the directive.
    assert expanded.origins == [("f.ptx", 1)] + [("f.ptx", 3)] * 3 + [("f.ptx", 4)]


def test_repeat_zero_drops_the_line_and_directive_is_not_emitted() -> None:
    expanded = expand(src("//@repeat 0", "gone", "kept"), "f.ptx")
    assert expanded.lines == ["kept"]
    assert expanded.origins == [("f.ptx", 3)]


def test_repeat_tolerates_indentation() -> None:
    expanded = expand(src("\t//@repeat 2", "\tx;"), "f.ptx")
    assert expanded.lines == ["\tx;", "\tx;"]


@pytest.mark.parametrize(
    ("text", "line"),
    [
        (src("a", "//@repeat 2", "//@for X in p q", "{X}", "//@endfor", "after"), 2),
        (src("a", "//@repeat 2"), 2),
        (src("//@for X in p q", "{X}", "//@repeat 4", "//@endfor"), 3),
    ],
    ids=["before-for", "at-end-of-file", "at-end-of-block"],
)
def test_repeat_without_a_line_to_repeat_is_an_error(text: str, line: int) -> None:
    """``//@repeat N`` must be followed by a PTX line; it must never apply to a later one.

    Today a repeat before a ``//@for`` silently repeats the first line *after* the block (here
    ``after`` comes out twice), and a trailing repeat silently does nothing.
    """
    with pytest.raises(GpuprobeError) as excinfo:
        expand(text, "f.ptx")
    assert one_line_error(excinfo).startswith(f"f.ptx:{line}:")


# ---------------------------------------------------------------- //@for --------


def test_for_substitutes_each_value() -> None:
    text = src(
        "//@for CACHE in ca cg cs",
        ".visible .entry chase_{CACHE}()",
        "ld.global.{CACHE}.u64 %rd1, [%rd1];",
        "//@endfor",
    )
    expanded = expand(text, "f.ptx")
    assert expanded.lines == [
        ".visible .entry chase_ca()",
        "ld.global.ca.u64 %rd1, [%rd1];",
        ".visible .entry chase_cg()",
        "ld.global.cg.u64 %rd1, [%rd1];",
        ".visible .entry chase_cs()",
        "ld.global.cs.u64 %rd1, [%rd1];",
    ]
    assert expanded.origins == [("f.ptx", 2), ("f.ptx", 3)] * 3


def test_for_binds_tuples_of_names_that_vary_together() -> None:
    text = src(
        "//@for OP:TYPE:REGS in ffma:f32:{%x0,%x1} dfma:f64:{%y0}",
        ".entry k_{OP}() {TYPE} {REGS}",
        "//@endfor",
    )
    assert expand(text, "f.ptx").lines == [".entry k_ffma() f32 {%x0,%x1}", ".entry k_dfma() f64 {%y0}"]


def test_a_value_may_hold_an_inner_loops_placeholder() -> None:
    """Outer names are replaced first: a register list from an outer tuple, its chain from an inner loop."""
    text = src(
        "//@for D in {%d{S}_0,%d{S}_1}",
        "//@for S in 3 5",
        "mma {D};",
        "//@endfor",
        "//@endfor",
    )
    assert expand(text, "f.ptx").lines == ["mma {%d3_0,%d3_1};", "mma {%d5_0,%d5_1};"]


def test_an_inner_for_takes_its_values_from_the_enclosing_loops() -> None:
    text = src(
        "//@for ILP:R1 in 1:0 2:1",
        "//@for S in 0 {R1}",
        "x{S}",
        "//@endfor",
        "//@endfor",
    )
    assert expand(text, "f.ptx").lines == ["x0", "x0", "x0", "x1"]


def test_for_tuple_of_the_wrong_length_is_a_one_line_error() -> None:
    with pytest.raises(GpuprobeError) as excinfo:
        expand(src("//@for A:B in 1:2 3", "x", "//@endfor"), "f.ptx")
    assert one_line_error(excinfo) == "f.ptx:1: //@for A:B: '3' is not 2 values"


def test_nested_for_binds_both_names() -> None:
    text = src(
        "//@for A in x y",  # 1
        "//@for B in 1 2",  # 2
        "{A}{B}",  # 3
        "//@endfor",  # 4
        "end_{A}",  # 5
        "//@endfor",  # 6
        "last",  # 7
    )
    expanded = expand(text, "f.ptx")
    assert expanded.lines == ["x1", "x2", "end_x", "y1", "y2", "end_y", "last"]
    assert [line for _, line in expanded.origins] == [3, 3, 5, 3, 3, 5, 7]


def test_inner_for_shadows_outer_name() -> None:
    text = src("//@for A in x", "//@for A in y", "{A}", "//@endfor", "{A}", "//@endfor")
    assert expand(text, "f.ptx").lines == ["y", "x"]


def test_repeat_inside_for_with_substitution() -> None:
    text = src("//@for R in 1 2", "//@repeat 2", "ld.u32 %r{R}, [%r{R}];", "//@endfor")
    expanded = expand(text, "f.ptx")
    assert expanded.lines == ["ld.u32 %r1, [%r1];"] * 2 + ["ld.u32 %r2, [%r2];"] * 2
    assert {origin for origin in expanded.origins} == {("f.ptx", 3)}


def test_substitution_leaves_ptx_braces_and_unbound_names_alone() -> None:
    text = src("//@for N in 4", "mov.b64 %rd1, {%r1, %r2}; // {N} {OTHER} {", "//@endfor")
    assert expand(text, "f.ptx").lines == ["mov.b64 %rd1, {%r1, %r2}; // 4 {OTHER} {"]


def test_substitution_outside_for_is_untouched() -> None:
    assert expand(src("{CACHE}"), "f.ptx").lines == ["{CACHE}"]


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        (src("a", "//@for X in p q", "{X}"), "f.ptx:2:", "//@for without //@endfor"),
        (src("a", "b", "//@endfor"), "f.ptx:3:", "//@endfor without //@for"),
        (src("//@for A in p", "//@for B in q", "{A}{B}", "//@endfor"), "f.ptx:1:", "//@for without //@endfor"),
        (src("//@for A in p", "{A}", "//@endfor", "//@endfor"), "f.ptx:4:", "//@endfor without //@for"),
        (src("//@for A in p", "//@for B in q", "//@endfor", "//@endfor", "//@endfor"), "f.ptx:5:", "without //@for"),
    ],
    ids=["for-unclosed", "endfor-alone", "nested-unclosed", "extra-endfor", "nested-extra-endfor"],
)
def test_unbalanced_for_is_a_one_line_error_with_file_and_line(text: str, where: str, what: str) -> None:
    with pytest.raises(GpuprobeError) as excinfo:
        expand(text, "f.ptx")
    message = one_line_error(excinfo)
    assert message.startswith(where), message
    assert what in message


# ---------------------------------------------------------------- .version ------


def test_ptx_version_reads_first_directive_numerically() -> None:
    assert ptx_version(src("// x", ".version 8.10", ".version 7.0"), "f.ptx") == (8, 10)


def test_ptx_version_missing_is_an_error() -> None:
    with pytest.raises(GpuprobeError) as excinfo:
        ptx_version(src(".target sm_80"), "f.ptx")
    assert one_line_error(excinfo) == "f.ptx: no .version directive"


# ---------------------------------------------------------------- combine() -----


def write_ptx(directory: Path, name: str, version: str, target: str, body: list[str]) -> Path:
    """A PTX file with its own header, as a family file is written."""
    path = directory / name
    path.write_text(src(f".version {version}", f".target {target}", ".address_size 64", "", *body))
    return path


@pytest.fixture
def two_files(tmp_path: Path) -> list[Path]:
    body = ["// first", "//@repeat 2", "first_line;", "//@for S in x y", "f_{S};", "//@endfor"]
    first = write_ptx(tmp_path, "a.ptx", "8.0", "sm_75", body)
    (tmp_path / "sub").mkdir()
    second = write_ptx(tmp_path / "sub", "b.ptx", "8.7", "sm_80", ["// second", "second_line;"])
    return [first, second]


def test_combine_writes_one_header_for_the_requested_arch(two_files: list[Path], tmp_path: Path) -> None:
    module = combine(two_files, SM90A, tmp_path)
    lines = module.text.splitlines()
    assert lines[:3] == [".version 8.7", ".target sm_90a", ".address_size 64"]
    assert sum(line.lstrip().startswith(".version") for line in lines) == 1
    assert sum(line.lstrip().startswith(".target") for line in lines) == 1
    assert sum(line.lstrip().startswith(".address_size") for line in lines) == 1
    assert module.text.endswith("\n")


def test_combine_takes_the_highest_version_whatever_the_order(two_files: list[Path], tmp_path: Path) -> None:
    forward = combine(two_files, SM80, tmp_path).text.splitlines()[0]
    backward = combine(list(reversed(two_files)), SM80, tmp_path).text.splitlines()[0]
    assert forward == backward == ".version 8.7"


def test_combine_version_compares_numerically(tmp_path: Path) -> None:
    files = [write_ptx(tmp_path, "a.ptx", "8.9", "sm_80", []), write_ptx(tmp_path, "b.ptx", "8.10", "sm_80", [])]
    assert combine(files, SM80, tmp_path).text.splitlines()[0] == ".version 8.10"


def test_combine_gives_every_line_its_origin(two_files: list[Path], tmp_path: Path) -> None:
    module = combine(two_files, SM80, tmp_path)
    lines = module.text.splitlines()
    assert len(lines) == len(module.origins)
    # the header: .version where the newest was asked for, .target and .address_size where first written
    assert module.origins[:3] == [("sub/b.ptx", 1), ("a.ptx", 2), ("a.ptx", 3)]
    sources = {"a.ptx": two_files[0].read_text().splitlines(), "sub/b.ptx": two_files[1].read_text().splitlines()}
    for line, (path, number) in zip(lines[3:], module.origins[3:], strict=True):
        assert path in sources, path  # shown relative to the root
        written = sources[path][number - 1]
        assert line == written or ("{S}" in written and line in ("f_x;", "f_y;")), (line, path, number)
    body = [(line, origin) for line, origin in zip(lines, module.origins, strict=True) if line.endswith(";")]
    assert body == [
        ("first_line;", ("a.ptx", 7)),
        ("first_line;", ("a.ptx", 7)),
        ("f_x;", ("a.ptx", 9)),
        ("f_y;", ("a.ptx", 9)),
        ("second_line;", ("sub/b.ptx", 6)),
    ]


def test_combine_shows_absolute_paths_outside_the_root(two_files: list[Path], tmp_path: Path) -> None:
    module = combine(two_files, SM80, tmp_path / "sub")
    shown = {path for path, _ in module.origins[3:]}
    assert shown == {str(two_files[0]), "b.ptx"}


def test_a_header_line_no_file_wrote_is_the_headers(tmp_path: Path) -> None:
    bare = tmp_path / "bare.ptx"
    bare.write_text(src("// a comment", ".version 8.7", "x;"))
    assert combine([bare], SM80, tmp_path).origins[:3] == [("bare.ptx", 2), ("<header>", 2), ("<header>", 3)]


def test_combine_needs_files() -> None:
    with pytest.raises(GpuprobeError) as excinfo:
        combine([], Arch(80))
    assert one_line_error(excinfo) == "no PTX sources to build for sm_80"


def test_combine_missing_file_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(GpuprobeError) as excinfo:
        combine([tmp_path / "absent.ptx"], SM80, tmp_path)
    assert one_line_error(excinfo) == f"{tmp_path / 'absent.ptx'}: no such file"


def test_combine_file_that_is_not_text_is_one_line(tmp_path: Path) -> None:
    binary = tmp_path / "binary.ptx"
    binary.write_bytes(b".version 8.7\n\xff\xfe\x00\n")
    with pytest.raises(GpuprobeError) as excinfo:
        combine([binary], SM80, tmp_path)
    message = one_line_error(excinfo)
    assert message.startswith(f"{binary}: cannot read")


def test_combine_file_without_version_is_named(tmp_path: Path) -> None:
    good = write_ptx(tmp_path, "good.ptx", "8.7", "sm_80", [])
    bad = tmp_path / "bad.ptx"
    bad.write_text(src(".target sm_80", "x;"))
    with pytest.raises(GpuprobeError) as excinfo:
        combine([good, bad], SM80, tmp_path)
    assert one_line_error(excinfo) == "bad.ptx: no .version directive"


def test_combine_directive_errors_name_the_file(tmp_path: Path) -> None:
    bad = write_ptx(tmp_path, "bad.ptx", "8.7", "sm_80", ["a;", "//@for X in p"])
    with pytest.raises(GpuprobeError) as excinfo:
        combine([bad], SM80, tmp_path)
    assert one_line_error(excinfo).startswith("bad.ptx:6: //@for without //@endfor")


def test_the_memory_family_expands() -> None:
    """The real family: both chase variants written out, 32 loads each, and every line traced."""
    from gpuprobe.kernels.source_tree import PTX_DIR, SOURCE_ROOT

    module = combine([PTX_DIR / "memory" / "memory.ptx"], SM90A, SOURCE_ROOT)
    lines = module.text.splitlines()
    assert len(lines) == len(module.origins)
    entries = [line.split("(")[0].split()[-1] for line in lines if ".entry" in line]
    assert entries == [
        "gp_sm_clock",
        "gp_clock_overhead",
        "gp_loop_overhead",
        "gp_chase_global_ca",
        "gp_chase_global_cg",
        "gp_chase_shared",
        "gp_chase_warp_v16",
    ]
    for cache, warm_ups in (("ca", 1), ("cg", 2)):  # the warp-wide chase warms its first block with one cg load
        assert sum(line.strip() == f"ld.global.{cache}.u64 %rd1, [%rd1];" for line in lines) == 32 + warm_ups
    assert not any(line.lstrip().startswith("//@") or "{CACHE}" in line for line in lines)
    assert {path for path, _ in module.origins[3:]} == {"ptx/memory/memory.ptx"}


@pytest.mark.parametrize("line", ["//@for X in", "//@repeat", "//@repeat two", "//@forr X in a"])
def test_a_malformed_directive_is_an_error_not_a_comment(line: str) -> None:
    with pytest.raises(GpuprobeError, match=r"f\.ptx:2: malformed directive"):
        expand(f"a\n{line}\nb\n", "f.ptx")


# ---------------------------------------------------------------- //@include -----


def test_include_expands_the_file_beside_with_the_loops_names_bound(tmp_path: Path) -> None:
    (tmp_path / "body.ptxinc").write_text(src("k_{V}", "//@repeat 2", "x{V}"))
    text = src("//@for V in a b", "//@include body.ptxinc", "//@endfor", "end")
    expanded = expand(text, "ptx/f.ptx", tmp_path)
    assert expanded.lines == ["k_a", "xa", "xa", "k_b", "xb", "xb", "end"]
    assert expanded.origins[:3] == [("ptx/body.ptxinc", 1), ("ptx/body.ptxinc", 3), ("ptx/body.ptxinc", 3)]
    assert expanded.origins[-1] == ("ptx/f.ptx", 4)


def test_an_include_that_cannot_be_read_is_a_one_line_error(tmp_path: Path) -> None:
    with pytest.raises(GpuprobeError) as excinfo:
        expand(src("x", "//@include body.ptxinc"), str(tmp_path / "f.ptx"))
    assert one_line_error(excinfo) == f"{tmp_path / 'f.ptx'}:2: //@include body.ptxinc: no such file beside it"


def test_an_include_is_found_beside_the_file_by_default(tmp_path: Path) -> None:
    (tmp_path / "body.ptxinc").write_text(src("y"))
    assert expand(src("//@include body.ptxinc"), str(tmp_path / "f.ptx")).lines == ["y"]


def test_expansion_inputs_are_the_files_the_expansion_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Nested includes resolve from the probe file's folder, as the expansion resolves them (in a probe tree,
    where ``../common`` is inside it)."""
    monkeypatch.setattr(includes, "PTX_DIR", tmp_path)
    (tmp_path / "common").mkdir()
    (tmp_path / "family").mkdir()
    top = tmp_path / "family" / "f.ptx"
    top.write_text(src("//@for V in a b", "//@include ../common/outer.ptxinc", "//@endfor"))
    (tmp_path / "common" / "outer.ptxinc").write_text(src("o{V}", "//@include inner.ptxinc"))
    (tmp_path / "family" / "inner.ptxinc").write_text(src("i{V}"))
    (tmp_path / "common" / "inner.ptxinc").write_text(src("never read"))
    assert expand(top.read_text(), str(top)).lines == ["oa", "ia", "ob", "ib"]
    inputs = expansion_inputs(top)
    assert inputs == {
        top: top.read_bytes(),
        tmp_path / "family" / "../common/outer.ptxinc": (tmp_path / "common" / "outer.ptxinc").read_bytes(),
        tmp_path / "family" / "inner.ptxinc": b"i{V}\n",
    }


def test_expansion_inputs_name_an_include_that_is_no_file_and_stop_at_a_cycle(tmp_path: Path) -> None:
    top = tmp_path / "f.ptx"
    top.write_text(src("//@include f.ptx", "//@include gone.ptxinc"))
    assert expansion_inputs(top) == {top: top.read_bytes(), tmp_path / "gone.ptxinc": None}


def test_an_include_of_itself_stops(tmp_path: Path) -> None:
    (tmp_path / "self.ptxinc").write_text(src("//@include self.ptxinc"))
    with pytest.raises(GpuprobeError, match="includes nested too deep"):
        expand(src("//@include self.ptxinc"), "f.ptx", tmp_path)


# ---- where an include may lead (issue 25, cases n74-n77): inside the probe's folder, to a regular file ----

KERNEL_WITH_INCLUDE = (
    ".version 8.0\n.target sm_90a\n.address_size 64\n.visible .entry k()\n{{\n//@include {}\nret;\n}}\n"
)


def sass_refuses_include(capsys: pytest.CaptureFixture[str], folder: Path, include: str) -> str:
    """``gpuprobe sass`` on a kernel in ``folder`` that includes ``include``: its refusal (exit 2, one line),
    which names the line and the include as written."""
    path = write(folder / "src" / "k.ptx", KERNEL_WITH_INCLUDE.format(include))
    message = refusal(*run(capsys, "sass", str(path)))
    assert message.startswith(f"{path}:6: //@include {include}: "), message
    return message


@pytest.mark.usefixtures("bounded_memory")
@pytest.mark.parametrize(
    "include",
    ["/etc/passwd", "../../../../../../../../etc/hostname", "/proc/self/environ", "../k.ptx", "/dev/zero"],
    ids=["n74-absolute", "n75-dotdot", "n76-environ", "n75-one-up", "n77-device"],
)
def test_an_include_outside_the_probes_folder_is_refused_before_it_is_read(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, include: str
) -> None:
    """The trial's ptxas quoted /etc/passwd's first word and the host name (n74-n76); /dev/zero was "no such
    file beside it" (n77). Now each is refused, naming why, and nothing outside the folder is opened."""
    write(tmp_path / "k.ptx", "secret\n")
    opened: list[str] = []
    monkeypatch.setattr(includes, "read_regular", lambda path, *args: opened.append(str(path)) or b"")
    message = sass_refuses_include(capsys, tmp_path, include)
    assert message.endswith(f"leads outside {tmp_path / 'src'}, the folder its includes must stay in"), message
    assert opened == []


@pytest.mark.usefixtures("bounded_memory")
def test_an_include_that_leads_out_through_a_symlink_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "zero.ptxinc").symlink_to("/dev/zero")
    assert "leads outside" in sass_refuses_include(capsys, tmp_path, "zero.ptxinc")


def test_an_include_that_is_no_regular_file_says_so(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "src" / "folder.ptxinc").mkdir(parents=True)
    assert sass_refuses_include(capsys, tmp_path, "folder.ptxinc").endswith(": not a regular file")


def test_an_include_larger_than_the_limit_is_refused_having_read_one_byte_more(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    big = write(tmp_path / "src" / "big.ptxinc", "")
    os.truncate(big, MAX_INCLUDE_BYTES + 1)  # sparse: no disk, and a read of it all would still be bounded
    message = sass_refuses_include(capsys, tmp_path, "big.ptxinc")
    assert message.endswith(f": larger than {MAX_INCLUDE_BYTES:,} bytes"), message


def test_expansion_inputs_read_no_source_that_is_no_regular_file(tmp_path: Path) -> None:
    """What keys ``gpuprobe check``'s outcome: a probe source that is a FIFO was read whole there, waiting for ever."""
    with answered_fifo(tmp_path / "f.ptx") as opened:
        with pytest.raises(GpuprobeError, match=r"f\.ptx: not a regular file"):
            expansion_inputs(tmp_path / "f.ptx")
        assert not opened.is_set()


def test_the_probe_tree_is_one_folder_for_its_includes() -> None:
    """``../common/`` is inside the probe tree: a probe's include root is ``ptx/``, not the probe's folder."""
    assert include_root(PTX_DIR / "alu") == PTX_DIR and include_root(PTX_DIR.parent) == PTX_DIR.parent
    expansion_inputs(next(PTX_DIR.glob("host_transfer/*.ptx")))  # includes ../common/: not refused


def test_entry_parameters_read_scalars_and_arrays_passed_by_value() -> None:
    """A TMA tensor map is a 128-byte, 64-byte aligned parameter (PTX ISA, "Tensor-map"): its type keeps its length."""
    text = (
        ".visible .entry k(.param .align 64 .b8 tmap[128], .param .u32 n, .param .u64 out)\n{\n}\n"
        ".visible .entry j(.param .u64 a)\n{\n}\n"
    )
    assert entry_parameters(text) == {"k": [("b8[128]", "tmap"), ("u32", "n"), ("u64", "out")], "j": [("u64", "a")]}


@pytest.mark.parametrize(
    "lines",
    [
        ["//@repeat 99999999999", "x;"],  # a count with extra digits
        ["//@for A in " + "a " * 1000, "//@for B in " + "b " * 1000, "{A}{B};", "//@endfor", "//@endfor"],
    ],
    ids=["repeat", "nested-for"],
)
def test_an_expansion_too_large_to_be_a_probe_is_an_error_not_exhausted_memory(lines: list[str]) -> None:
    with pytest.raises(GpuprobeError) as excinfo:
        expand(src("head;", *lines), "huge.ptx")
    assert one_line_error(excinfo).endswith(f"expands to more than {MAX_EXPANDED_LINES:,} lines")


def test_a_nest_of_loops_that_writes_nothing_is_an_error_not_a_loop_for_days() -> None:
    """10^9 passes of an empty body wrote no line, so no line limit stopped them."""
    loops = [f"//@for {name} in " + "v " * 1000 for name in "ABC"]
    with pytest.raises(GpuprobeError) as excinfo:
        expand(src("head;", *loops, *["//@endfor"] * 3), "idle.ptx")
    assert one_line_error(excinfo) == f"idle.ptx:4: takes more than {MAX_EXPANSION_STEPS:,} steps to expand"


def test_a_large_include_in_a_loop_is_an_error_not_gigabytes(tmp_path: Path) -> None:
    """Each pass read and kept the include again: 1000 passes of a 4 MiB line would hold 4 GB."""
    write(tmp_path / "wide.inc", "// " + "x" * (MAX_INCLUDE_BYTES - 10) + "\n")
    with pytest.raises(GpuprobeError) as excinfo:
        expand(src("head;", "//@for A in " + "a " * 1000, "//@include wide.inc", "//@endfor"), "k.ptx", tmp_path)
    assert one_line_error(excinfo) == f"k.ptx:3: expands to more than {MAX_EXPANDED_CHARS:,} characters"


def test_an_expansion_of_the_largest_size_is_made() -> None:
    expanded = expand(src("head;", f"//@repeat {MAX_EXPANDED_LINES - 1}", "x;"), "big.ptx")
    assert len(expanded.lines) == MAX_EXPANDED_LINES
