"""The CUDA compiler pieces: finding them, the content cache, and one-line errors at the source."""

from __future__ import annotations

import os
import re
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import NoReturn

import pytest

from gpuprobe.core import cache
from gpuprobe.core.arch import parse_arch
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.kernels import toolchain
from gpuprobe.kernels.cubin import build_ptx
from gpuprobe.kernels.ptxsource import combine
from gpuprobe.kernels.tool_limits import BrokenTool
from gpuprobe.kernels.toolchain import (
    TOOLKIT_VARIABLE,
    assemble_ptx,
    compile_cuda,
    disassemble,
    find_tool,
    locate_tool,
    toolkit_description,
)
from tests.test_cli import user_error

SM80 = parse_arch("sm_80")
SM90A = parse_arch("sm_90a")

HEADER = [".version 8.7", ".target sm_80", ".address_size 64", ""]
GOOD_KERNEL = [
    ".visible .entry tc_store(.param .u64 out)",
    "{",
    "\t.reg .u64 %rd<3>;",
    "\tld.param.u64 %rd1, [out];",
    "\tcvta.to.global.u64 %rd1, %rd1;",
    "\tst.global.u64 [%rd1], %rd1;",
    "\tret;",
    "}",
]


def ptx_text(*body: str) -> str:
    """A PTX file: the usual header, then ``body`` lines."""
    return "\n".join([*HEADER, *body]) + "\n"


def one_line(error: BaseException) -> str:
    """The error message, after checking it is a single line."""
    message = str(error)
    assert message and "\n" not in message, message
    return message


def no_subprocess(*args: object, **kwargs: object) -> NoReturn:
    """Stands in for subprocess.Popen where a cache hit must run no tool."""
    raise AssertionError(f"a tool was run on a cache hit: {args!r}")


# ---------------------------------------------------------------- discovery -----


def make_executable(path: Path, script: str = "#!/bin/sh\nexit 0\n") -> Path:
    """Write a small shell script at ``path`` and mark it executable."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(script)
    path.chmod(path.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    return path


@pytest.fixture
def fresh_lookup(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Forget cached tool locations before and after, so a fake never leaks into other tests.

    GPUPROBE_TOOLKIT is unset too: the suite may run under it (that is how a toolkit is chosen),
    and the discovery tests each set it themselves where they mean to.
    """
    monkeypatch.delenv(TOOLKIT_VARIABLE, raising=False)
    locate_tool.cache_clear()
    yield
    locate_tool.cache_clear()


@pytest.fixture
def no_wheels(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fresh_lookup: None) -> Path:
    """Hide the PyPI wheels (pathfinder finds nothing), CUDA_HOME/CUDA_PATH, and PATH.

    Returns an empty directory that PATH points at.
    """
    import cuda.pathfinder

    monkeypatch.setattr(cuda.pathfinder, "find_nvidia_binary_utility", lambda name: None)
    monkeypatch.delenv("CUDA_HOME", raising=False)
    monkeypatch.delenv("CUDA_PATH", raising=False)
    empty = tmp_path / "empty-path"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    return empty


@pytest.mark.parametrize("name", ["ptxas", "nvdisasm", "cuobjdump"])
def test_find_tool_uses_the_wheels_through_pathfinder(name: str, fresh_lookup: None) -> None:
    from cuda.pathfinder import find_nvidia_binary_utility

    found = find_tool(name)
    assert found == Path(find_nvidia_binary_utility(name))
    assert found.is_file() and os.access(found, os.X_OK)


def test_pathfinder_wins_over_cuda_home(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, fresh_lookup: None) -> None:
    fake = make_executable(tmp_path / "cuda" / "bin" / "ptxas")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    assert find_tool("ptxas") != fake


@pytest.mark.parametrize("var", ["CUDA_HOME", "CUDA_PATH"])
def test_cuda_home_fallback(var: str, no_wheels: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    fake = make_executable(tmp_path / "toolkit" / "bin" / "ptxas")
    monkeypatch.setenv(var, str(tmp_path / "toolkit"))
    assert find_tool("ptxas") == fake


def test_cuda_home_fallback_without_pathfinder(
    no_wheels: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """cuda.pathfinder not installed at all (ImportError) is the same as it finding nothing."""
    import sys

    monkeypatch.setitem(sys.modules, "cuda.pathfinder", None)
    fake = make_executable(tmp_path / "toolkit" / "bin" / "nvdisasm")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "toolkit"))
    assert find_tool("nvdisasm") == fake


def test_cuda_home_without_the_tool_falls_through_to_path(
    no_wheels: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "toolkit" / "bin").mkdir(parents=True)
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "toolkit"))
    on_path = make_executable(no_wheels / "cuobjdump")
    assert find_tool("cuobjdump") == on_path


def test_cuda_home_wins_over_path(no_wheels: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    home = make_executable(tmp_path / "toolkit" / "bin" / "ptxas")
    make_executable(no_wheels / "ptxas")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "toolkit"))
    assert find_tool("ptxas") == home


def test_path_fallback(no_wheels: Path) -> None:
    fake = make_executable(no_wheels / "ptxas")
    assert find_tool("ptxas") == fake


@pytest.mark.parametrize(
    ("name", "package"),
    [("ptxas", "nvidia-cuda-nvcc"), ("nvdisasm", "nvidia-cuda-nvdisasm"), ("cuobjdump", "nvidia-cuda-cuobjdump")],
)
def test_missing_tool_is_one_line_saying_what_to_install(name: str, package: str, no_wheels: Path) -> None:
    with pytest.raises(GpuprobeError) as excinfo:
        find_tool(name)
    message = one_line(excinfo.value)
    assert message.startswith(f"{name} not found: pip install {package}")
    assert "CUDA_HOME" in message


def test_found_tool_is_the_one_that_runs(no_wheels: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A ptxas from CUDA_HOME is run, and its diagnostics are mapped like the real one's."""
    make_executable(
        tmp_path / "toolkit" / "bin" / "ptxas",
        "#!/bin/sh\n"
        'if [ "$1" = "--version" ]; then echo "Cuda compilation tools, release 0.0, V0.0.0"; exit 0; fi\n'
        'echo "ptxas input.ptx, line 6; error   : fake diagnostic from CUDA_HOME" >&2\n'
        "exit 255\n",
    )
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "toolkit"))
    monkeypatch.setenv("GPUPROBE_CACHE", str(tmp_path / "cache"))
    source = tmp_path / "k.ptx"
    source.write_text(ptx_text(*GOOD_KERNEL))
    module = combine([source], SM80, tmp_path)
    with pytest.raises(GpuprobeError) as excinfo:
        assemble_ptx(module.text, SM80, "k", module.origins)
    # Module line 6 is the kernel's 2nd line ("{"): file line 6 too (header replaced 1:1).
    assert one_line(excinfo.value) == "k.ptx:6: ptxas error: fake diagnostic from CUDA_HOME [sm_80]"


# ---------------------------------------------------------------- GPUPROBE_TOOLKIT --


def fake_tool(path: Path, version: str) -> Path:
    """A tool at ``path`` whose ``--version`` says CUDA release ``version`` (as ``V<version>``)."""
    major_minor = ".".join(version.split(".")[:2])
    return make_executable(
        path,
        "#!/bin/sh\n"
        'echo "NVIDIA (R) fake tool"\n'
        f'echo "Cuda compilation tools, release {major_minor}, V{version}"\n'
        f'echo "Build cuda_{major_minor}.r{major_minor}/compiler.0_0"\n',
    )


def test_the_toolkit_override_wins_over_everything(
    fresh_lookup: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """GPUPROBE_TOOLKIT beats the wheels (which this venv has), CUDA_HOME and PATH."""
    chosen = make_executable(tmp_path / "chosen" / "bin" / "ptxas")
    make_executable(tmp_path / "home" / "bin" / "ptxas")
    make_executable(tmp_path / "on-path" / "ptxas")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", str(tmp_path / "on-path"))
    monkeypatch.setenv(TOOLKIT_VARIABLE, str(tmp_path / "chosen"))
    assert locate_tool("ptxas") == toolchain.Tool("ptxas", chosen, TOOLKIT_VARIABLE)
    assert find_tool("ptxas") == chosen


def test_the_toolkit_override_takes_a_bin_directory_itself(
    fresh_lookup: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A wheel's ``nvidia/cu13/bin`` (or a toolkit's ``bin``) can be named directly."""
    direct = make_executable(tmp_path / "nvidia" / "cu13" / "bin" / "nvdisasm")
    monkeypatch.setenv(TOOLKIT_VARIABLE, str(direct.parent))
    assert find_tool("nvdisasm") == direct


def test_the_toolkit_override_is_a_search_list(
    fresh_lookup: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Directories separated by os.pathsep: the first that has a tool gives it, each tool on its own."""
    first_ptxas = make_executable(tmp_path / "a" / "bin" / "ptxas")
    make_executable(tmp_path / "b" / "bin" / "ptxas")
    second_nvdisasm = make_executable(tmp_path / "b" / "nvdisasm")
    monkeypatch.setenv(TOOLKIT_VARIABLE, os.pathsep.join([str(tmp_path / "a"), "", str(tmp_path / "b")]))
    assert find_tool("ptxas") == first_ptxas
    assert find_tool("nvdisasm") == second_nvdisasm


def test_the_toolkit_override_never_falls_back(
    fresh_lookup: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A chosen toolkit lacking the tool is an error, even though the wheels and PATH have one."""
    (tmp_path / "partial" / "bin").mkdir(parents=True)
    make_executable(tmp_path / "partial" / "bin" / "ptxas")
    make_executable(tmp_path / "on-path" / "nvdisasm")
    monkeypatch.setenv("PATH", str(tmp_path / "on-path"))
    monkeypatch.setenv(TOOLKIT_VARIABLE, str(tmp_path / "partial"))
    with pytest.raises(GpuprobeError) as excinfo:
        find_tool("nvdisasm")
    assert one_line(excinfo.value) == (
        f"nvdisasm not found in {TOOLKIT_VARIABLE} ({tmp_path / 'partial'}): "
        "looked for nvdisasm and bin/nvdisasm in each"
    )


def test_the_toolkit_override_naming_no_directory_is_one_line(
    fresh_lookup: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A mistyped directory is named, even when another directory of the list has the tool."""
    make_executable(tmp_path / "real" / "bin" / "ptxas")
    typo = tmp_path / "raal"
    monkeypatch.setenv(TOOLKIT_VARIABLE, os.pathsep.join([str(tmp_path / "real"), str(typo)]))
    with pytest.raises(GpuprobeError) as excinfo:
        find_tool("ptxas")
    assert one_line(excinfo.value) == f"{TOOLKIT_VARIABLE} names {typo}, which is not a directory"


@pytest.mark.parametrize("folder", ["missing", "empty"])
def test_check_under_a_toolkit_that_is_not_there_is_one_line(
    fresh_lookup: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str], folder: str
) -> None:
    """``gpuprobe check`` says it once, before any build, not once per probe (as ``sass`` and ``run`` do)."""
    (tmp_path / "empty").mkdir()
    monkeypatch.setenv(TOOLKIT_VARIABLE, str(tmp_path / folder))
    said = {
        "missing": f"{TOOLKIT_VARIABLE} names {tmp_path / folder}, which is not a directory",
        "empty": f"ptxas not found in {TOOLKIT_VARIABLE} ({tmp_path / folder}): looked for ptxas and bin/ptxas in each",
    }
    assert user_error(capsys, "check", "--arch", "sm_90a") == said[folder]


def test_a_linked_tool_is_named_by_the_file_that_runs(
    fresh_lookup: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A directory of symbolic links (one tool from here, one from there) records the real files."""
    real = fake_tool(tmp_path / "cuda-12.8" / "bin" / "ptxas", "12.8.93")
    (tmp_path / "chosen").mkdir()
    (tmp_path / "chosen" / "ptxas").symlink_to(real)
    monkeypatch.setenv(TOOLKIT_VARIABLE, str(tmp_path / "chosen"))
    assert find_tool("ptxas") == real


def test_an_empty_toolkit_override_is_unset(no_wheels: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    on_path = make_executable(no_wheels / "ptxas")
    monkeypatch.setenv(TOOLKIT_VARIABLE, "")
    assert locate_tool("ptxas") == toolchain.Tool("ptxas", on_path, "PATH")


def test_toolkit_description_names_exact_versions_and_where_each_came_from(
    fresh_lookup: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The results file records which ptxas and nvdisasm built and read the cubin, to the patch level."""
    ptxas = fake_tool(tmp_path / "cuda-13.0" / "bin" / "ptxas", "13.0.88")
    nvdisasm = fake_tool(tmp_path / "nvdisasm-13.2" / "nvdisasm", "13.2.86")
    monkeypatch.setenv(TOOLKIT_VARIABLE, os.pathsep.join([str(tmp_path / "cuda-13.0"), str(nvdisasm.parent)]))
    assert toolkit_description() == (
        f"ptxas V13.0.88 ({ptxas}, found by {TOOLKIT_VARIABLE}); "
        f"nvdisasm V13.2.86 ({nvdisasm}, found by {TOOLKIT_VARIABLE}); "
        f"NVRTC unusable (NVRTC not found in {TOOLKIT_VARIABLE} ({tmp_path / 'cuda-13.0'}, {nvdisasm.parent}): "
        "looked for libnvrtc.so in each one's lib64/, lib/ and itself)"
    )


def test_toolkit_description_of_a_tool_without_a_patch_version(
    fresh_lookup: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A release line without ``V<a>.<b>.<c>`` is kept whole rather than cut to something vaguer."""
    make_executable(tmp_path / "odd" / "ptxas", '#!/bin/sh\necho "ptxas, release 99"\n')
    fake_tool(tmp_path / "odd" / "nvdisasm", "13.5.37")
    monkeypatch.setenv(TOOLKIT_VARIABLE, str(tmp_path / "odd"))
    assert toolkit_description().startswith(f"ptxas ptxas, release 99 ({tmp_path / 'odd' / 'ptxas'}, found by")


def test_versions_are_per_tool_file_not_per_tool_name(
    fresh_lookup: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Choosing another toolkit in the same process reports that toolkit's version, not the first one's."""
    for version in ("12.8.93", "13.0.88"):
        fake_tool(tmp_path / version / "bin" / "ptxas", version)
        monkeypatch.setenv(TOOLKIT_VARIABLE, str(tmp_path / version))
        locate_tool.cache_clear()
        assert toolchain.tool_version("ptxas") == f"Cuda compilation tools, release {version[:4]}, V{version}"


def test_the_real_toolkit_is_described_exactly() -> None:
    """Whatever toolkit this suite runs under (the wheels, or GPUPROBE_TOOLKIT) is named by V-number."""
    description = toolkit_description()
    one = r"{0} V\d+\.\d+\.\d+ \(/\S+/{0}, found by (GPUPROBE_TOOLKIT|cuda\.pathfinder|CUDA_HOME|CUDA_PATH|PATH)\)"
    nvrtc = r"NVRTC \d+\.\d+ \(/\S+/libnvrtc\.so[.\d]*, found by \S+\), CCCL \d+\.\d+\.\d+ \(/\S+\)"
    assert re.fullmatch(f"{one.format('ptxas')}; {one.format('nvdisasm')}; {nvrtc}", description), description


# ---------------------------------------------------------------- the cache -----


def test_cache_dir_honours_gpuprobe_cache_then_xdg(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("GPUPROBE_CACHE", raising=False)
    assert cache.cache_dir() == tmp_path / "xdg" / "gpuprobe"
    monkeypatch.setenv("GPUPROBE_CACHE", str(tmp_path / "mine"))
    assert cache.cache_dir() == tmp_path / "mine"


def test_content_key_separates_parts() -> None:
    assert cache.content_key("ab", "c") != cache.content_key("a", "bc")
    assert cache.content_key("x", b"y") == cache.content_key(b"x", "y")


def test_cached_file_produces_once_and_never_stores_a_failure(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("GPUPROBE_CACHE", str(tmp_path))
    calls: list[int] = []

    def fail() -> bytes:
        calls.append(0)
        raise GpuprobeError("no")

    key = cache.content_key("test")
    with pytest.raises(GpuprobeError):
        cache.cached_file(key, ".bin", fail)
    assert not list(tmp_path.rglob("*.bin"))

    def produce() -> bytes:
        calls.append(1)
        return b"data"

    first = cache.cached_file(key, ".bin", produce)
    second = cache.cached_file(key, ".bin", produce)
    assert first == second and first.read_bytes() == b"data"
    assert first.is_relative_to(tmp_path)
    assert calls == [0, 1]
    assert not [p for p in tmp_path.rglob("*") if p.name.startswith(".tmp-")]


@pytest.fixture
def private_cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty GPUPROBE_CACHE for tests about the cache itself."""
    directory = tmp_path / "cache"
    monkeypatch.setenv("GPUPROBE_CACHE", str(directory))
    return directory


def test_assemble_is_cached_by_content(private_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = ptx_text(*GOOD_KERNEL)
    first = assemble_ptx(text, SM80, "k")
    assert first.cubin.is_relative_to(private_cache)
    assert first.cubin.read_bytes().startswith(b"\x7fELF")
    assert "tc_store" in first.log and "registers" in first.log
    mtime = first.cubin.stat().st_mtime_ns

    with monkeypatch.context() as patched:
        patched.setattr(subprocess, "Popen", no_subprocess)
        again = assemble_ptx(text, SM80, "another name, same content")
    assert again == first
    assert again.cubin.stat().st_mtime_ns == mtime

    edited = assemble_ptx(text + "// an edit\n", SM80, "k")
    other_arch = assemble_ptx(text, SM90A, "k")
    assert len({first.cubin, edited.cubin, other_arch.cubin}) == 3
    assert len(list(private_cache.rglob("*.cubin"))) == 3


def test_a_failed_assembly_is_not_cached(private_cache: Path) -> None:
    text = ptx_text(*GOOD_KERNEL).replace("st.global.u64", "st.global.u99")
    for _ in range(2):
        with pytest.raises(GpuprobeError):
            assemble_ptx(text, SM80, "k")
    assert not list(private_cache.rglob("*.cubin"))


def test_another_toolkit_never_gets_a_cached_cubin(
    private_cache: Path, fresh_lookup: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The cache key holds the ptxas file and its version: switching toolkits compiles again.

    Two wrappers around the real ptxas stand for two toolkits: same version at another path, then
    the same path reporting another version; each gets its own cubin, and an unchanged one hits.
    """
    real = find_tool("ptxas")
    wrapper = '#!/bin/sh\nif [ "$1" = "--version" ]; then echo "release {v}, V{v}"; exit 0; fi\nexec {real} "$@"\n'
    text = ptx_text(*GOOD_KERNEL)
    cubins = []
    for directory, version in (("one", "1.0.1"), ("two", "1.0.1"), ("two", "1.0.2")):
        make_executable(tmp_path / directory / "ptxas", wrapper.format(v=version, real=real))
        monkeypatch.setenv(TOOLKIT_VARIABLE, str(tmp_path / directory))
        locate_tool.cache_clear()
        toolchain._version_line.cache_clear()
        cubins.append(assemble_ptx(text, SM80, "k").cubin)
    assert len(set(cubins)) == 3
    with monkeypatch.context() as patched:
        patched.setattr(subprocess, "Popen", no_subprocess)
        assert assemble_ptx(text, SM80, "k").cubin == cubins[-1]


def test_disassembly_is_cached(private_cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    compiled = assemble_ptx(ptx_text(*GOOD_KERNEL), SM80, "k")
    listing = disassemble(compiled.cubin)
    assert ".text.tc_store" in listing
    monkeypatch.setattr(subprocess, "Popen", no_subprocess)
    assert disassemble(compiled.cubin) == listing
    assert len(list(private_cache.rglob("*.sass"))) == 1


# ---------------------------------------------------------------- ptxas errors --


def write(path: Path, text: str) -> Path:
    """Write ``text`` to ``path`` (making folders) and return the path."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def assemble_files(files: list[Path], root: Path, arch: str = "sm_80") -> str:
    """Combine and assemble, returning the one-line error that must result."""
    target = parse_arch(arch)
    module = combine(files, target, root)
    with pytest.raises(GpuprobeError) as excinfo:
        assemble_ptx(module.text, target, "module", module.origins)
    return one_line(excinfo.value)


def chase_kernel(load_lines: list[str]) -> list[str]:
    """A small chase kernel whose loop body is ``load_lines`` (directives allowed)."""
    return [
        ".visible .entry tc_chase(.param .u64 start, .param .u64 out)",  # 5
        "{",  # 6
        "\t.reg .u64 %rd<4>;",  # 7
        "\t.reg .u32 %r<2>;",  # 8
        "\t.reg .pred %p<2>;",  # 9
        "\tld.param.u64 %rd1, [start];",  # 10
        "\tmov.u32 %r1, 8;",  # 11
        "LOOP:",  # 12
        *load_lines,  # 13...
        "\tsub.u32 %r1, %r1, 1;",
        "\tsetp.ne.u32 %p1, %r1, 0;",
        "\t@%p1 bra LOOP;",
        "\tld.param.u64 %rd2, [out];",
        "\tst.global.u64 [%rd2], %rd1;",
        "\tret;",
        "}",
    ]


def test_ptxas_error_names_the_original_line(tmp_path: Path) -> None:
    source = write(tmp_path / "bad.ptx", ptx_text(*chase_kernel(["\tld.global.u64 %rd1, [%rd9];"])))
    message = assemble_files([source], tmp_path)
    assert message.startswith("bad.ptx:13: ptxas error: ")
    assert "[sm_80]" in message


def test_ptxas_error_inside_repeat_names_the_repeated_line(tmp_path: Path) -> None:
    body = ["\tld.global.u64 %rd1, [%rd1];", "//@repeat 16", "\tld.global.bogus.u64 %rd1, [%rd1];"]
    source = write(tmp_path / "bad.ptx", ptx_text(*chase_kernel(body)))
    message = assemble_files([source], tmp_path)
    assert message.startswith("bad.ptx:15: ptxas error: "), message
    assert "more)" in message  # 16 copies of the mistake, reported once with a count
    assert "[sm_80]" in message


def test_ptxas_error_inside_for_names_the_body_line(tmp_path: Path) -> None:
    body = [
        "//@for CACHE in cg ca nonsense",  # 13
        "\tld.global.{CACHE}.u64 %rd1, [%rd1];",  # 14
        "//@endfor",  # 15
    ]
    source = write(tmp_path / "bad.ptx", ptx_text(*chase_kernel(body)))
    message = assemble_files([source], tmp_path)
    assert message.startswith("bad.ptx:14: ptxas error: "), message
    assert "nonsense" in message


def test_ptxas_error_in_the_second_file_of_a_module(tmp_path: Path) -> None:
    good = write(tmp_path / "good.ptx", ptx_text("//@repeat 5", "// padding", *GOOD_KERNEL))
    bad_body = ["//@for X in 1 2", "// {X}", "//@endfor", *chase_kernel(["\tadd.u64 %rd1, %rd1, %undefined;"])]
    bad = write(tmp_path / "fam" / "bad.ptx", ptx_text(*bad_body))
    message = assemble_files([good, bad], tmp_path)
    assert message.startswith("fam/bad.ptx:16: ptxas error: "), message


def test_ptxas_syntax_error_names_the_original_line(tmp_path: Path) -> None:
    """A missing semicolon is a ptxas *fatal* parse error: it too must point at the source.

    It must not fall back to ptxas's raw text, which names gpuprobe's temporary input.ptx and the
    line number in the combined module.
    """
    body = ["//@repeat 4", "\tld.global.u64 %rd1, [%rd1];", "\tld.global.u64 %rd1, [%rd1]"]
    source = write(tmp_path / "bad.ptx", ptx_text("//@repeat 3", "// padding", *chase_kernel(body)))
    message = assemble_files([source], tmp_path)
    assert "input.ptx" not in message and "gpuprobe-" not in message, message
    assert message.startswith(("bad.ptx:17: ptxas", "bad.ptx:18: ptxas")), message  # at or after the line
    assert "syntax error" in message


def test_ptxas_error_without_origins_uses_the_module_name() -> None:
    text = ptx_text(*chase_kernel(["\tld.global.u64 %rd1, [%rd9];"]))
    with pytest.raises(GpuprobeError) as excinfo:
        assemble_ptx(text, SM80, "generated")
    assert one_line(excinfo.value).startswith("generated:13: ptxas error: ")


def test_arch_specific_instruction_reports_the_arch(tmp_path: Path) -> None:
    kernel = [".visible .entry tc_fence()", "{", "\twgmma.fence.sync.aligned;", "\tret;", "}"]
    source = write(tmp_path / "hopper.ptx", ptx_text(*kernel))
    message = assemble_files([source], tmp_path, "sm_80")
    assert message.startswith("hopper.ptx:7: ptxas error: ")
    assert message.endswith("[sm_80]")
    module = combine([source], SM90A, tmp_path)
    assert assemble_ptx(module.text, SM90A, "hopper", module.origins).cubin.is_file()


def test_build_ptx_names_the_family_that_broke(tmp_path: Path) -> None:
    good = write(tmp_path / "good.ptx", ptx_text(*GOOD_KERNEL))
    bad = write(tmp_path / "bad.ptx", ptx_text(*chase_kernel(["\tld.global.u64 %rd1, [%rd9];"])))
    with pytest.raises(GpuprobeError) as excinfo:
        build_ptx([good, bad], SM80)
    assert one_line(excinfo.value).startswith(f"{bad}:13: ptxas error: ")


# ---------------------------------------------------------------- NVRTC ---------


def test_nvrtc_error_is_one_line_at_the_source_line() -> None:
    source = 'extern "C" __global__ void k(int *p)\n{\n    p[0] = undefined_thing;\n}\n'
    with pytest.raises(GpuprobeError) as excinfo:
        compile_cuda(source, SM80, "bad.cu")
    message = one_line(excinfo.value)
    assert message.startswith("bad.cu(3): error")
    assert "undefined_thing" in message
    assert message.endswith("[sm_80]")


def test_nvrtc_several_errors_still_one_line() -> None:
    source = "__global__ void k()\n{\n    a = 1;\n    b = 2;\n    c = 3;\n}\n"
    with pytest.raises(GpuprobeError) as excinfo:
        compile_cuda(source, SM90A, "many.cu")
    assert one_line(excinfo.value).startswith("many.cu(3): error")


def test_nvrtc_compiles_and_caches() -> None:
    source = 'extern "C" __global__ void tc_nvrtc(int *p) { p[threadIdx.x] = 7; }\n'
    compiled = compile_cuda(source, SM80, "ok.cu")
    assert compiled.cubin.read_bytes().startswith(b"\x7fELF")
    assert "tc_nvrtc" in compiled.log
    assert compile_cuda(source, SM80, "renamed.cu") == compiled


# ---------------------------------------------------------------- nvdisasm ------


def test_disassemble_rejects_a_file_that_is_not_elf(tmp_path: Path) -> None:
    path = write(tmp_path / "notes.cubin", "this is text\nover two lines\n")
    with pytest.raises(GpuprobeError) as excinfo:
        disassemble(path)
    assert one_line(excinfo.value) == f"{path}: not a cubin (no ELF header)"


def test_disassemble_missing_file(tmp_path: Path) -> None:
    with pytest.raises(GpuprobeError) as excinfo:
        disassemble(tmp_path / "absent.cubin")
    assert one_line(excinfo.value).endswith("absent.cubin: no such file")


@pytest.mark.parametrize("keep", [16, 64, 0.5, -64], ids=["16B", "64B", "half", "less-64B"])
def test_disassemble_truncated_cubin_is_one_line(keep: float, tmp_path: Path) -> None:
    data = assemble_ptx(ptx_text(*GOOD_KERNEL), SM80, "k").cubin.read_bytes()
    cut = int(len(data) * keep) if isinstance(keep, float) else keep
    path = tmp_path / "cut.cubin"
    path.write_bytes(data[:cut])
    with pytest.raises(GpuprobeError) as excinfo:
        disassemble(path)
    message = one_line(excinfo.value)
    assert message.startswith(f"{path}: not a cubin (")


# ---------------------------------------------------------------- what a tool prints ----------------


def talking_tool(path: Path, action: str) -> Path:
    """A tool at ``path`` whose ``--version`` is CUDA 13.5's and which otherwise runs the shell ``action``."""
    return make_executable(
        path,
        "#!/bin/sh\n"
        'if [ "$1" = --version ]; then echo "Cuda compilation tools, release 13.5, V13.5.0"; exit 0; fi\n'
        f"{action}\n",
    )


@pytest.fixture
def own_toolkit(fresh_lookup: None, private_cache: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """An empty folder that GPUPROBE_TOOLKIT names, for the fake tools a test puts in it."""
    folder = tmp_path / "toolkit"
    folder.mkdir()
    monkeypatch.setenv(TOOLKIT_VARIABLE, str(folder))
    return folder


def elf_file(path: Path) -> Path:
    """A cubin in form without code (all that gpuprobe checks before nvdisasm reads it)."""
    from tests.test_check_cache import cuda_elf

    path.write_bytes(cuda_elf())
    return path


def test_a_tool_message_that_is_not_utf8_is_shown_in_one_line(own_toolkit: Path, tmp_path: Path) -> None:
    """nvdisasm echoes a corrupt cubin's bytes: its message is shown, each byte that is not UTF-8 and each
    character that is not printable (an escape sequence) as U+FFFD, never a UnicodeDecodeError."""
    talking_tool(
        own_toolkit / "nvdisasm",
        r"""printf 'nvdisasm fatal   : Invalid section ".te\377\376\033[31m"\nmore\n' >&2; exit 1""",
    )
    cubin = elf_file(tmp_path / "odd.cubin")
    with pytest.raises(GpuprobeError) as excinfo:
        disassemble(cubin)
    expected = f'{cubin}: nvdisasm cannot read it: nvdisasm fatal : Invalid section ".te\ufffd\ufffd\ufffd[31m"'
    assert one_line(excinfo.value) == expected


def test_a_listing_that_is_not_utf8_is_read(own_toolkit: Path, tmp_path: Path) -> None:
    """A cubin that nvdisasm reads, whose symbol names are not UTF-8 (a damaged one), is listed."""
    with pytest.MonkeyPatch.context() as real_tools:
        real_tools.delenv(TOOLKIT_VARIABLE)
        locate_tool.cache_clear()
        listing = disassemble(assemble_ptx(ptx_text(*GOOD_KERNEL), SM80, "k").cubin).encode()
    locate_tool.cache_clear()
    printed = write(tmp_path / "listing.bin", "").with_suffix(".bin")
    printed.write_bytes(listing.replace(b"tc_store", b"tc_st\xffre"))
    talking_tool(own_toolkit / "nvdisasm", f"cat '{printed}'")
    assert "tc_st\ufffdre" in disassemble(elf_file(tmp_path / "named.cubin"))


@pytest.mark.parametrize(("action", "said"), [("exit 3", "exit status 3"), ("kill -9 $$", "killed by signal 9")])
def test_a_tool_that_fails_silently_says_how_it_ended(own_toolkit: Path, tmp_path: Path, action: str,
                                                      said: str) -> None:  # fmt: skip
    talking_tool(own_toolkit / "nvdisasm", action)
    with pytest.raises(GpuprobeError) as excinfo:
        disassemble(elf_file(tmp_path / "quiet.cubin"))
    assert one_line(excinfo.value).endswith(f"nvdisasm cannot read it: {said}, no message")


@pytest.mark.parametrize(
    ("action", "said"),
    [
        ("exit 0", "it printed nothing"),
        (r"printf 'ptxas says \033[2J hi\377\n'; exit 0", 'it printed "ptxas says \ufffd[2J hi\ufffd"'),
        ("yes garbage | head -c 3000; exit 0", f'it printed "{"garbage " * 25}..." (2999 characters)'),
    ],
)
def test_a_ptxas_that_writes_no_cubin_is_named_with_what_it_printed(own_toolkit: Path, action: str, said: str) -> None:
    """n59: a ptxas that exits 0 but writes no cubin is named (not the temporary file it did not write), with
    its output cleaned and shortened; a check stops at it (BrokenTool) rather than blame every probe."""
    talking_tool(own_toolkit / "ptxas", action)
    with pytest.raises(BrokenTool) as excinfo:
        assemble_ptx(ptx_text(*GOOD_KERNEL), SM80, "k.ptx")
    assert one_line(excinfo.value) == f"k.ptx: ptxas exited 0 but wrote no cubin; {said} [sm_80]"


def test_a_ptxas_diagnostic_that_is_not_utf8_is_placed_at_its_line(own_toolkit: Path) -> None:
    talking_tool(
        own_toolkit / "ptxas", r"""printf 'ptxas %s, line 5; error   : Unknown symbol \377\n' "$4" >&2; exit 1"""
    )
    with pytest.raises(GpuprobeError) as excinfo:
        assemble_ptx(ptx_text(*GOOD_KERNEL), SM80, "k", [("k.ptx", n) for n in range(1, 13)])
    assert one_line(excinfo.value) == "k.ptx:5: ptxas error: Unknown symbol \ufffd [sm_80]"


def test_ptxas_fatal_error_on_a_line_names_the_original_line(tmp_path: Path) -> None:
    """ptxas says "Unexpected non-ASCII character encountered on line N" of its input: the source line is named."""
    source = write(
        tmp_path / "accent.ptx", ptx_text("//@repeat 3", "// padding", *chase_kernel(["\tadd.u64 %rd1, %rd1, 1; é"]))
    )
    assert (
        assemble_files([source], tmp_path)
        == "accent.ptx:15: ptxas error: Unexpected non-ASCII character encountered [sm_80]"
    )


def test_ptxas_error_at_the_end_of_input_names_the_last_line(tmp_path: Path) -> None:
    source = write(tmp_path / "open.ptx", ptx_text(*GOOD_KERNEL[:-1]))  # no closing brace
    assert assemble_files([source], tmp_path).startswith(
        f"open.ptx:{len(HEADER) + len(GOOD_KERNEL) - 1}: ptxas error: "
    )


def test_ptxas_error_about_the_version_names_the_file_that_asked_for_it(tmp_path: Path) -> None:
    old = write(tmp_path / "old.ptx", ptx_text(*GOOD_KERNEL))
    new = write(tmp_path / "new.ptx", "// a newer PTX ISA than ptxas knows\n" + ptx_text().replace("8.7", "99.9"))
    assert assemble_files([old, new], tmp_path).startswith("new.ptx:2: ptxas error: Unsupported .version 99.9")


def test_nvrtc_error_at_the_end_of_the_source_names_the_file() -> None:
    with pytest.raises(GpuprobeError) as excinfo:
        compile_cuda('extern "C" __global__ void k(int *p)\n{\n    p[0] = 1;\n', SM90A, "open.cu")
    assert one_line(excinfo.value) == 'open.cu: At end of source: error: expected a "}" [sm_90a]'


def test_nvrtc_that_cannot_be_loaded_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file named as NVRTC that is none (a broken or foreign install): one line naming it and why."""
    (tmp_path / "lib64").mkdir()
    (tmp_path / "lib64" / "libnvrtc.so.13").write_bytes(b"not a shared library")
    monkeypatch.setenv("GPUPROBE_TOOLKIT", str(tmp_path))
    with pytest.raises(GpuprobeError) as excinfo:
        compile_cuda('extern "C" __global__ void k() {}\n', SM90A, "k.cu")
    assert "cannot load it as NVRTC" in one_line(excinfo.value)


