"""The CUDA C++ build path: NVRTC found and chosen as the tools are, its PTX joined to the hand-written
PTX in the one module per arch, what keys its caches, per-arch contract rules, the loop analysis that
keeps an out-of-line slow path from wrapping the clock reads, and `gpuprobe sass` on a .cu file."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

from gpuprobe import pytest_plugin
from gpuprobe.cli import main
from gpuprobe.core.arch import SUPPORTED_ARCHS, parse_arch
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.kernels import nvrtc, outcomes, registry
from gpuprobe.kernels.contracts import Rule, check
from gpuprobe.kernels.cubin import build_for, build_ptx
from gpuprobe.kernels.cudasource import source_inputs, translation_unit
from gpuprobe.kernels.flow import Step, back_edges
from gpuprobe.kernels.ptxsource import Generated, combine
from gpuprobe.kernels.registry import PTX_DIR, Probe, all_probes, find_probe, load_family
from gpuprobe.kernels.sass import read_cubin
from gpuprobe.kernels.toolchain import TOOLKIT_VARIABLE, assemble_ptx, compile_cuda
from gpuprobe.measure import session
from tests.helpers.checked import measured_module
from tests.test_cli import refusal, run, write

SM80, SM90A = parse_arch("sm_80"), parse_arch("sm_90a")
KERNEL = 'extern "C" __global__ void tc_cuda(unsigned* out) { out[threadIdx.x] = threadIdx.x * 3u; }\n'


def one_line(error: BaseException) -> str:
    message = str(error)
    assert message and "\n" not in message, message
    return message


@pytest.fixture
def toolkit_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A directory laid out as a toolkit (bin/ptxas, bin/nvdisasm, lib/ NVRTC, include/ headers: links to
    this environment's), chosen with GPUPROBE_TOOLKIT."""
    found = nvrtc.locate_nvrtc()
    headers = nvrtc.include_dirs()
    root = tmp_path / "toolkit"
    (root / "bin").mkdir(parents=True)
    from gpuprobe.kernels.toolchain import find_tool

    for tool in ("ptxas", "nvdisasm"):
        (root / "bin" / tool).symlink_to(find_tool(tool))
    (root / "lib").symlink_to(found.path.parent)
    runtime = next(d for d in headers if (d / nvrtc.COOPERATIVE_GROUPS).is_file())
    (root / "include").symlink_to(runtime)
    cccl = next(d for d in headers if (d / nvrtc.LIBCUDACXX).is_file())
    cccl_root = cccl.parent.parent if cccl.name == "cccl" else cccl.parent
    monkeypatch.setenv(TOOLKIT_VARIABLE, os.pathsep.join([str(root), str(cccl_root)]))
    return root


# ---- finding NVRTC and the headers ---------------------------------------------------------------


def test_nvrtc_and_its_headers_are_found_without_a_choice() -> None:
    found = nvrtc.locate_nvrtc()
    assert found.path.name.startswith("libnvrtc.so") and found.version[0] >= 12
    dirs = nvrtc.include_dirs()
    assert any((d / nvrtc.COOPERATIVE_GROUPS).is_file() for d in dirs)
    assert (dirs[0] / nvrtc.LIBCUDACXX).is_file()  # CCCL first: the chosen libcu++ wins
    assert nvrtc.describe().startswith(f"NVRTC {found.version[0]}.{found.version[1]} (")


def test_gpuprobe_toolkit_chooses_nvrtc_and_the_headers(toolkit_dir: Path) -> None:
    found = nvrtc.locate_nvrtc()
    assert found.found_by == TOOLKIT_VARIABLE and found.path == (toolkit_dir / "lib").resolve() / found.path.name
    assert (toolkit_dir / "include").resolve() in nvrtc.include_dirs()
    compiled = compile_cuda(KERNEL, SM80, "chosen.cu")
    assert "tc_cuda" in compiled.log


def test_a_toolkit_without_nvrtc_is_a_one_line_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TOOLKIT_VARIABLE, str(tmp_path))
    with pytest.raises(GpuprobeError) as excinfo:
        nvrtc.locate_nvrtc()
    assert one_line(excinfo.value) == (
        f"NVRTC not found in {TOOLKIT_VARIABLE} ({tmp_path}): looked for libnvrtc.so in each one's lib64/, lib/ "
        "and itself"
    )


def test_a_library_that_is_not_nvrtc_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "libnvrtc.so.13").write_text("not a library\n")
    monkeypatch.setenv(TOOLKIT_VARIABLE, str(tmp_path))
    with pytest.raises(GpuprobeError) as excinfo:
        nvrtc.locate_nvrtc()
    assert "cannot load it as NVRTC" in one_line(excinfo.value)


def test_a_toolkit_without_the_cuda_headers_names_what_is_missing(toolkit_dir: Path, monkeypatch) -> None:
    monkeypatch.setenv(TOOLKIT_VARIABLE, str(toolkit_dir))  # without CCCL's directory
    (toolkit_dir / "include").unlink()
    with pytest.raises(GpuprobeError) as excinfo:
        nvrtc.include_dirs()
    assert one_line(excinfo.value) == (
        f"CUDA header cooperative_groups.h not found in {TOOLKIT_VARIABLE}'s include/ and include/cccl: "
        "pip install nvidia-cuda-runtime"
    )


# ---- compiling, and what keys the caches ----------------------------------------------------------


def test_an_nvrtc_error_is_one_line_at_the_file_and_line(tmp_path: Path) -> None:
    source = tmp_path / "broken.cu"
    source.write_text('#include "coop.cuh"\n__global__ void k() { undefined_thing = 1; }\n')
    (tmp_path / "coop.cuh").write_text("#pragma once\n")
    with pytest.raises(GpuprobeError) as excinfo:
        build_ptx([source], SM80)
    message = one_line(excinfo.value)
    assert f"{source}(2): error" in message and "undefined_thing" in message and message.endswith("[sm_80]")


def test_a_compile_is_cached_by_content(monkeypatch: pytest.MonkeyPatch) -> None:
    first = nvrtc.cuda_to_ptx(KERNEL, SM80, "a.cu")
    monkeypatch.setattr(nvrtc, "_compile", lambda *args: pytest.fail("compiled again on a cache hit"))
    assert nvrtc.cuda_to_ptx(KERNEL, SM80, "b.cu") == first
    assert ".target sm_80" in first and "tc_cuda" in first


def test_an_edit_to_a_file_the_translation_unit_includes_compiles_again(tmp_path: Path) -> None:
    """The translation unit is include lines: the bytes of what they (and what those) include key the compile."""
    (tmp_path / "probe.cu").write_text('#include "common.cuh"\n' + KERNEL)
    (tmp_path / "common.cuh").write_text("#pragma once\n#define GP_FACTOR 3u\n")
    unit = '#include "probe.cu"\n'
    first = nvrtc.cuda_to_ptx(unit, SM80, "unit", (tmp_path,))
    (tmp_path / "probe.cu").write_text('#include "common.cuh"\n' + KERNEL.replace("3u", "GP_FACTOR * 5u"))
    second = nvrtc.cuda_to_ptx(unit, SM80, "unit", (tmp_path,))
    (tmp_path / "common.cuh").write_text("#pragma once\n#define GP_FACTOR 7u\n")
    third = nvrtc.cuda_to_ptx(unit, SM80, "unit", (tmp_path,))
    assert "15" in second and "35" in third and len({first, second, third}) == 3


def test_the_header_identity_follows_the_cooperative_groups_headers_and_cccls_version(tmp_path: Path) -> None:
    include = tmp_path / "include"
    (include / "cooperative_groups").mkdir(parents=True)
    (include / "cuda" / "std" / "__cccl").mkdir(parents=True)
    (include / "cooperative_groups.h").write_text("// cg\n")
    (include / "cooperative_groups" / "reduce.h").write_text("// one\n")
    version = include / "cuda" / "std" / "__cccl" / "version.h"
    version.write_text("#define CCCL_VERSION 3000001\n")
    before = nvrtc._header_bytes(include)
    (include / "cooperative_groups" / "reduce.h").write_text("// two\n")
    edited = nvrtc._header_bytes(include)
    version.write_text("#define CCCL_VERSION 3005000\n")
    assert len({b"".join(before), b"".join(edited), b"".join(nvrtc._header_bytes(include))}) == 3


def test_a_cuda_file_reads_its_includes_beside_it_and_they_key_the_check(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("GPUPROBE_CACHE", str(tmp_path / "cache"))
    (tmp_path / "probe.cu").write_text('#include "common.cuh"\n#include <cooperative_groups.h>\n' + KERNEL)
    (tmp_path / "common.cuh").write_text('#pragma once\n#include "deeper.cuh"\n')
    (tmp_path / "deeper.cuh").write_text("#pragma once\n")
    inputs = source_inputs(tmp_path / "probe.cu")
    assert set(inputs) == {tmp_path / "probe.cu", tmp_path / "common.cuh", tmp_path / "deeper.cuh"}
    probe = Probe("toy.cuda", "toy", "tc_cuda", tmp_path / "probe.cu", (SM80,), (), "doc", ())
    key = outcomes.outcome_key([probe], SM80)
    (tmp_path / "deeper.cuh").write_text("#pragma once\n// edited\n")
    assert outcomes.outcome_key([probe], SM80) != key
    assert translation_unit([tmp_path / "probe.cu"], tmp_path) == '#include "probe.cu"\n'


# ---- where an include may lead (issue 25, cases n78-n81) -------------------------------------------

INCLUDING = '#include {}\nextern "C" __global__ void k(float* o) {{ o[0] = 1; }}\n'
REPO = Path(__file__).resolve().parents[1]
ADDRESS_SPACE = 3 * 2**30  # what the trial's gpuprobe died of a MemoryError under (n79)


def sass_in_a_bounded_process(path: Path) -> subprocess.CompletedProcess[str]:
    """``python -m gpuprobe sass PATH`` with its address space bounded: a guard that regresses is a MemoryError
    there, never a machine out of memory (the trial's was killed at 23 GB, n78)."""

    def bound() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))

    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run([sys.executable, "-m", "gpuprobe", "sass", str(path)], env=env, capture_output=True,
                          text=True, preexec_fn=bound, check=False)  # fmt: skip


@pytest.mark.parametrize("device", ["/dev/zero", "/dev/urandom"], ids=["n78-n79-zero", "n80-urandom"])
def test_a_cuda_include_of_a_device_is_refused_before_it_is_read(tmp_path: Path, device: str) -> None:
    path = write(tmp_path / "k.cu", INCLUDING.format(f'"{device}"'))
    proc = sass_in_a_bounded_process(path)
    message = refusal(proc.returncode, proc.stdout, proc.stderr)
    assert message == f'{path}:1: #include "{device}": leads outside {tmp_path}, the folder its includes must stay in'


UP = "../" * 12  # more than any folder here is deep


@pytest.mark.parametrize(
    "include", ['"/etc/passwd"', f'"{UP}etc/hostname"', "</etc/passwd>", f"<{UP}etc/passwd>", f"<cuda/{UP}etc/passwd>"]
)
def test_a_cuda_include_outside_the_folder_is_refused_before_nvrtc_runs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, include: str
) -> None:
    """n81: NVRTC read /etc/passwd and quoted it back; now it never sees the source (nor can an angle-bracket
    name climb out of the CUDA headers)."""
    monkeypatch.setattr(nvrtc, "_compile", lambda *args: pytest.fail("NVRTC ran"))
    path = write(tmp_path / "k.cu", INCLUDING.format(include))
    message = refusal(*run(capsys, "sass", str(path)))
    assert message.startswith(f"{path}:1: #include {include}: leads outside"), message


def test_a_cuda_include_by_macro_cannot_be_checked_so_is_refused(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    path = write(tmp_path / "k.cu", '#define SECRET "/etc/passwd"\n' + INCLUDING.format("SECRET"))
    message = refusal(*run(capsys, "sass", str(path)))
    assert message.startswith(f"{path}:2: #include SECRET: names no file in quotes or angle brackets"), message


def test_a_line_of_many_comments_is_read_at_once(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The include finder tried every way of splitting a run of comments before giving a line up: 64 ``/**/``
    before a ``#`` that is no directive would have held ``gpuprobe sass`` (and ``check``) for longer than a life."""
    path = write(tmp_path / "k.cu", "/**/" * 64 + " int x;\n" + "/**/" * 64 + ' #include "/etc/passwd"\n')
    message = refusal(*run(capsys, "sass", str(path)))
    assert message.startswith(f'{path}:2: #include "/etc/passwd": leads outside'), message


def test_a_header_that_includes_itself_through_dotdot_is_read_once_more_at_most(tmp_path: Path) -> None:
    """Each round added ``../x`` to its path, a new place: 800 reads of it (each up to 4 MiB) until the path was
    too long for the OS."""
    write(tmp_path / "x" / "a.h", '#pragma once\n#include "../x/a.h"\n')
    source = write(tmp_path / "k.cu", INCLUDING.format('"x/a.h"'))
    assert set(source_inputs(source)) == {source, tmp_path / "x" / "a.h", tmp_path / "x" / ".." / "x" / "a.h"}


def test_a_source_of_no_folder_may_include_only_the_cuda_headers(tmp_path: Path, monkeypatch) -> None:
    """A source given as a string (no folder: NVRTC looks in the working one) named no folder it must stay in."""
    monkeypatch.chdir(tmp_path)
    write(tmp_path / "near.h", "#pragma once\n")
    with pytest.raises(GpuprobeError, match=r'^k.cu:1: #include "near.h": leads outside the CUDA headers, where'):
        nvrtc.cuda_to_ptx(INCLUDING.format('"near.h"'), SM80, "k.cu")


def test_a_cuda_include_through_a_link_out_of_the_tree_is_refused(capsys: pytest.CaptureFixture[str],
                                                                  tmp_path: Path) -> None:  # fmt: skip
    write(tmp_path / "src" / "k.cu", INCLUDING.format('"inner.cuh"'))
    write(tmp_path / "src" / "inner.cuh", '#pragma once\n#include "host.cuh"\n')
    (tmp_path / "src" / "host.cuh").symlink_to("/etc/hostname")  # not a device: the old code read it whole
    message = refusal(*run(capsys, "sass", str(tmp_path / "src" / "k.cu")))
    assert message.startswith(f'{tmp_path / "src" / "inner.cuh"}:2: #include "host.cuh": leads outside'), message


def probe_of(source: Path) -> Probe:
    """A probe of ``source``, for every arch."""
    return Probe("toy.include", "toy", "k", source, SUPPORTED_ARCHS, (), "doc", ())


@pytest.mark.parametrize(
    ("name", "text", "refused"),
    [("k.cu", INCLUDING.format('"/etc/passwd"'), '1: #include "/etc/passwd"'),
     ("k.ptx", ".version 8.0\n//@include /etc/passwd\n", "2: //@include /etc/passwd")],
    ids=["cuda", "ptx"],
)  # fmt: skip
def test_check_stops_at_a_refused_include_with_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, name: str, text: str,
    refused: str
) -> None:  # fmt: skip
    """A probe source whose include is refused is a broken tree: one line and exit 2, not one ERROR per probe."""
    source = write(tmp_path / name, text)
    monkeypatch.setattr(registry, "all_probes", lambda: [probe_of(source)])
    assert refusal(*run(capsys, "check", "--arch", "sm_80")).startswith(f"{source}:{refused}: leads outside")


def test_the_demo_stops_at_a_refused_include_with_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = write(tmp_path / "k.ptx", ".version 8.0\n//@include /etc/passwd\n")
    monkeypatch.setattr(session, "all_probes", lambda: [probe_of(source)])
    message = refusal(*run(capsys, "demo", "-o", str(tmp_path / "out")))
    assert message.startswith(f"{source}:2: //@include /etc/passwd: leads outside"), message


def test_pytest_probes_fails_a_refused_include_with_its_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    source = write(tmp_path / "k.cu", INCLUDING.format('"/etc/passwd"'))
    monkeypatch.setattr(pytest_plugin, "all_probes", lambda: [probe_of(source)])
    pytest_plugin._checked.cache_clear()
    try:
        with pytest.raises(pytest.fail.Exception) as excinfo:
            pytest_plugin.assert_contract(probe_of(source), SM80)
    finally:
        pytest_plugin._checked.cache_clear()
    assert not excinfo.value.pytrace
    assert one_line(excinfo.value).startswith(f'{source}:1: #include "/etc/passwd": leads outside')


# ---- one module per arch ---------------------------------------------------------------------------


def test_nvrtc_ptx_joins_the_hand_written_ptx_in_one_cubin() -> None:
    module = build_for(all_probes(), SM90A)
    kernels = module.listing.kernels
    assert "gp_coop_reduce_add_32_lat" in kernels and "gp_warp_redux_add_lat" in kernels
    assert module.parameters["gp_coop_tile_shfl_lat"] == [("u64", "gp_coop_tile_shfl_lat_param_0"),
                                                          ("u32", "gp_coop_tile_shfl_lat_param_1"),
                                                          ("u64", "gp_coop_tile_shfl_lat_param_2")]  # fmt: skip
    assert {p.suffix for p in module.sources} == {".ptx", ".cu"}


def test_a_ptxas_too_old_for_nvrtcs_ptx_is_an_error_at_nvrtcs_ptx(tmp_path: Path) -> None:
    ptx = nvrtc.cuda_to_ptx(KERNEL, SM80, "a.cu").replace(".version ", ".version 99.", 1)
    hand = PTX_DIR / "memory" / "memory.ptx"
    module = combine([hand], SM80, PTX_DIR.parent, [Generated("NVRTC's PTX of a.cu", ptx)])
    assert module.text.startswith(".version 99.")
    with pytest.raises(GpuprobeError) as excinfo:
        assemble_ptx(module.text, SM80, "probes-sm_80", module.origins)
    assert one_line(excinfo.value).startswith("NVRTC's PTX of a.cu:")


def test_a_listing_may_parse_the_code_of_some_kernels_only() -> None:
    """What the coop family reads in its measuring process: its kernels' and their twins' code, all the
    kernels still listed with their resources."""
    module = measured_module(SM90A)
    wanted = {"gp_coop_reduce_add_32_lat", "gp_warp_redux_add_lat"}
    partial = read_cubin(module.cubin, wanted)
    assert set(partial.kernels) == set(module.listing.kernels)
    assert {n for n, k in partial.kernels.items() if k.instructions} == wanted
    assert (
        partial.kernel("gp_coop_reduce_add_32_lat").to_json()
        == read_cubin(module.cubin).kernel("gp_coop_reduce_add_32_lat").to_json()
    )


def test_sass_of_a_cu_file_shows_what_the_build_compiled(capsys: pytest.CaptureFixture[str]) -> None:
    kernel = find_probe("coop.reduce.add.32").kernel
    code = main(["sass", str(PTX_DIR / "coop" / "tiles.cu"), "--arch", "sm_80", "--kernel", kernel, "--json"])
    assert code == 0
    shown = json.loads(capsys.readouterr().out)["kernels"][0]["instructions"]
    built = measured_module(SM80).listing.kernel(kernel).to_json()["instructions"]
    assert [i["opcode"] for i in shown] == [i["opcode"] for i in built]


def test_a_declaration_names_ptx_or_cuda_source(tmp_path: Path) -> None:
    (tmp_path / "k.cpp").write_text("")
    (tmp_path / "k.toml").write_text('family = "toy"\nsource = "k.cpp"\nmin_arch = "sm_80"\nprobe = []\n')
    with pytest.raises(GpuprobeError, match="neither PTX"):
        load_family(tmp_path / "k.toml")


# ---- rules per arch ----------------------------------------------------------------------------------


def test_a_rule_holds_on_the_archs_it_names() -> None:
    newer = Rule.from_dict({"rule": "count", "opcode": "REDUX", "count": 1, "min_arch": "sm_80"}, "t")
    older = Rule.from_dict({"rule": "forbid", "opcode": "REDUX", "max_arch": "sm_75"}, "t")
    assert newer.applies_to(SM80) and newer.applies_to(SM90A) and not newer.applies_to(parse_arch("sm_75"))
    assert older.applies_to(parse_arch("sm_75")) and not older.applies_to(SM80)
    assert newer.describe().endswith("(on sm_80 and newer)") and older.describe().endswith("(on sm_75 and older)")
    with pytest.raises(GpuprobeError, match="min_arch: unknown arch 'sm_70'"):
        Rule.from_dict({"rule": "no_local", "min_arch": "sm_70"}, "t")
    with pytest.raises(GpuprobeError, match="newer than max_arch"):
        Rule.from_dict({"rule": "no_local", "min_arch": "sm_90", "max_arch": "sm_80"}, "t")


def test_clock_bracket_may_bound_the_loops_between_the_clock_reads() -> None:
    kernel = measured_module(SM90A).listing.kernel(find_probe("coop.memcpy_async.barrier").kernel)
    bounded = Rule.from_dict({"rule": "clock_bracket", "reads": 2, "min": 1, "max": 48}, "t")
    exact = Rule.from_dict({"rule": "clock_bracket", "reads": 2, "loops": 1}, "t")
    assert check(kernel, [bounded]) == [] and check(kernel, [exact]) != []
    assert bounded.describe() == "2 clock reads bracketing 1..48 loops"


# ---- loops: back edges only ---------------------------------------------------------------------------


def steps(*rows: tuple[str, bool, int, int | None]) -> list[Step]:
    """(opcode, predicated, operand count, target index) per instruction, 16 bytes apart."""
    return [Step(16 * i, op, pred, ops, None if t is None else 16 * t) for i, (op, pred, ops, t) in enumerate(rows)]


def test_a_loop_closes_at_its_back_edge() -> None:
    code = steps(("CS2R", False, 2, None), ("SHFL.IDX", False, 4, None), ("ISETP.NE.AND", False, 4, None),
                 ("BRA", True, 1, 1), ("CS2R", False, 2, None), ("EXIT", False, 0, None))  # fmt: skip
    assert back_edges(code) == {48}


def test_a_slow_path_that_resumes_inside_the_loop_is_no_loop() -> None:
    """The loop body tests convergence (BRA.DIV) and jumps to code laid out after EXIT, which branches
    back to resume: backward in the layout, but the point it resumes at does not dominate it."""
    code = steps(
        ("CS2R", False, 2, None),  # 0: the first clock read
        ("BRA.DIV", True, 2, 8),  # 1: loop head: not converged? to the slow path
        ("SHFL.BFLY", False, 4, None),  # 2: the fast collective
        ("IADD3", False, 4, None),  # 3: resume point
        ("BRA", True, 1, 1),  # 4: the loop's back edge
        ("CS2R", False, 2, None),  # 5: the second clock read
        ("EXIT", False, 0, None),  # 6
        ("NOP", False, 0, None),  # 7
        ("WARPSYNC.COLLECTIVE", False, 2, 9),  # 8: the slow path
        ("SHFL.BFLY", False, 4, None),  # 9
        ("BRA", False, 1, 3),  # 10: back to the resume point
    )
    assert back_edges(code) == {64}


def test_an_indirect_branch_leaves_the_flow_unknown() -> None:
    assert back_edges(steps(("BRX", False, 1, None), ("BRA", True, 1, 0))) is None
