"""The ``gpuprobe`` command: outputs and JSON schemas, and one stderr line with exit 2 for bad input."""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import gpuprobe.runner.device
from gpuprobe.cli import main
from gpuprobe.core.arch import parse_arch
from gpuprobe.core.results import SCHEMA, SCHEMA_VERSION, Device, Fact, Results, code_record, save
from gpuprobe.kernels.check import STATUSES
from gpuprobe.kernels.registry import all_probes, find_probe
from gpuprobe.kernels.toolchain import assemble_ptx
from gpuprobe.output.sections import Plot, Section

PREFIX = "gpuprobe: error: "

CHASE_PTX = """\
.version 8.7
.target sm_80
.address_size 64

.visible .entry cli_chase(.param .u64 start, .param .u32 iters, .param .u64 out)
{
	.reg .u32 %r<3>;
	.reg .u64 %rd<4>;
	.reg .pred %p<2>;
	ld.param.u64 %rd1, [start];
	ld.param.u32 %r1, [iters];
LOOP:
	.pragma "nounroll";
//@repeat 4
	ld.global.cg.u64 %rd1, [%rd1];
	sub.u32 %r1, %r1, 1;
	setp.ne.u32 %p1, %r1, 0;
	@%p1 bra LOOP;
	ld.param.u64 %rd2, [out];
	st.global.u64 [%rd2], %rd1;
	ret;
}

.visible .entry cli_empty()
{
	ret;
}
"""

CUDA_SOURCE = 'extern "C" __global__ void cli_cuda(int *p) { p[threadIdx.x] = (int)threadIdx.x * 3; }\n'

REPO = Path(__file__).resolve().parents[1]


def run(capsys: pytest.CaptureFixture[str], *argv: str) -> tuple[int, str, str]:
    """Run the CLI in-process; return its exit status, stdout and stderr."""
    code = main(list(argv))
    captured = capsys.readouterr()
    return code, captured.out, captured.err


def user_error(capsys: pytest.CaptureFixture[str], *argv: str) -> str:
    """Run a command that must fail as a user error: exit 2 and exactly one stderr line, no output.

    Returns the message after the ``gpuprobe: error:`` prefix.
    """
    return refusal(*run(capsys, *argv))


def refusal(code: int, out: str, err: str) -> str:
    """What a command refused with (the message after ``gpuprobe: error:``), asserting that it refused as a user
    error does: exit 2 and exactly one stderr line, no output."""
    assert code == 2, (code, out, err)
    assert err.startswith(PREFIX) and err.endswith("\n") and err.count("\n") == 1, err
    assert "Traceback" not in err
    assert out == ""
    return err[len(PREFIX) : -1]


def write(path: Path, text: str | bytes) -> Path:
    """Write text or bytes to ``path`` and return it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text)
    return path


def has_keys(data: dict[str, Any], *keys: str) -> bool:
    """Whether ``data`` is a dict holding at least ``keys``."""
    return isinstance(data, dict) and set(keys) <= set(data)


# ---------------------------------------------------------------- list ---------


def _table_rows(out: str) -> dict[str, str]:
    """The table's rows by probe name, each with its wrapped continuation lines joined on."""
    rows: dict[str, str] = {}
    name = ""
    for line in out.split("\n\n", 1)[0].splitlines()[2:]:  # below the header and its rule
        if line.startswith(" "):
            rows[name] += " " + line.strip()
        else:
            name = line.split()[0]
            rows[name] = line
    return rows


def test_list_is_one_table_row_per_probe_with_its_archs_and_facts(capsys: pytest.CaptureFixture[str]) -> None:
    from gpuprobe.cli.probes import arch_span

    code, out, err = run(capsys, "list")
    assert code == 0 and err == ""
    assert out.splitlines()[0].split() == ["probe", "archs", "facts"]
    rows = _table_rows(out)
    assert list(rows) == [p.name for p in all_probes()]
    for probe in all_probes():
        assert rows[probe.name].split(maxsplit=1)[1].startswith(arch_span(probe.archs) + " ")
        assert rows[probe.name].split()[-len(probe.facts) or -1 :] == [f + "," for f in probe.facts[:-1]] + [
            probe.facts[-1] if probe.facts else "-"
        ]
        assert probe.doc not in out  # what each isolates: asked for by family
    families = list(dict.fromkeys(p.family for p in all_probes()))
    assert f"{len(all_probes())} probe(s) of {len(families)} families: {families[0]}, " in out
    # the facts column wrapped to the longest fact id (with its comma): the table is as wide as the longest
    # probe name, the widest archs (e.g. "sm_90 and newer") and that, with two spaces between columns
    names, ids = max(len(p.name) for p in all_probes()), max(len(f) for p in all_probes() for f in p.facts)
    archs = max(len(arch_span(p.archs)) for p in all_probes())
    assert max(len(line) for line in out.splitlines()) == names + 2 + archs + 2 + ids + 1
    # 170 KB with every doc; 62 KB with every probe's facts (issue 24); 81 KB at 392 probes, 103 KB at 519 (207 and
    # 198 bytes a probe): a row that grows a doc or repeats its facts breaks the bound
    assert len(out) < 210 * len(all_probes())


def test_the_archs_a_probe_targets_read_short() -> None:
    from gpuprobe.cli.probes import arch_span
    from gpuprobe.core.arch import SUPPORTED_ARCHS, parse_arch

    def span(*names: str) -> str:
        return arch_span([parse_arch(n) for n in names])

    assert arch_span(SUPPORTED_ARCHS) == "all"
    assert span("sm_90", "sm_90a", "sm_100a", "sm_120") == "sm_90 and newer"
    assert span("sm_75", "sm_80", "sm_86", "sm_89") == "sm_75–sm_89"
    assert span("sm_89", "sm_120") == "sm_89 sm_120" and span("sm_90a") == "sm_90a"


def test_list_of_a_family_or_probes_adds_what_each_isolates(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "list", "memory", "launch.graph")
    assert code == 0
    chosen = [p for p in all_probes() if p.family == "memory" or p.name == "launch.graph"]
    assert list(_table_rows(out)) == [p.name for p in chosen]
    counted = f"{len(chosen)} probe(s) of 2 families: "
    assert counted + "launch, memory" in out or counted + "memory, launch" in out
    for probe in chosen:
        assert f"\n{probe.name}\n    " in out and " ".join(probe.doc.split()) in " ".join(out.split())
    code, out, _ = run(capsys, "list", "mma.f16")
    assert set(_table_rows(out)) == {p.name for p in all_probes() if p.name.startswith("mma.f16.")}


def test_list_of_an_unknown_family_names_the_families(capsys: pytest.CaptureFixture[str]) -> None:
    assert user_error(capsys, "list", "memry").startswith("no family or probe matches 'memry'; families: alu, ")


def test_list_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "list", "--json")
    assert code == 0
    data = json.loads(out)
    assert list(data) == ["probes"]
    assert [p["name"] for p in data["probes"]] == [p.name for p in all_probes()]
    for entry in data["probes"]:
        assert has_keys(entry, "name", "family", "archs", "facts")
        assert isinstance(entry["name"], str) and isinstance(entry["family"], str)
        assert entry["archs"] and all(parse_arch(a).name == a for a in entry["archs"])
        assert isinstance(entry["facts"], list) and all(isinstance(f, str) and "." in f for f in entry["facts"])
        assert entry["facts"] or entry["family"] == "selftest"  # the opt-in fault self-test measures nothing


# ---------------------------------------------------------------- check --------


def targeted_count(*archs: str) -> tuple[int, int]:
    """(probe x arch pairs a probe targets, pairs it does not) over ``archs``."""
    pairs = [p.supports(parse_arch(a)) for p in all_probes() for a in archs]
    return sum(pairs), len(pairs) - sum(pairs)


def only_progress(err: str) -> bool:
    """Whether a check's stderr holds nothing but its progress lines (said on a cold cache alone)."""
    return all(line.startswith("gpuprobe check: ") for line in err.splitlines())


def test_check_text(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(capsys, "check", "--arch", "sm_80,sm_90a")
    assert code == 0 and only_progress(err), err
    ok, unsupported = targeted_count("sm_80", "sm_90a")
    assert unsupported > 0  # wgmma and clusters are not on sm_80
    assert out.splitlines()[-1] == f"{ok} ok, 0 violated, {unsupported} unsupported, 0 error"
    assert sum(line.startswith("ok ") for line in out.splitlines()) == ok


def test_check_json_schema(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(capsys, "check", "--arch", "sm_80,sm_90a", "--json")
    assert code == 0
    data = json.loads(out)
    assert list(data) == ["results"]
    results = data["results"]
    assert len(results) == len(all_probes()) * 2
    for entry in results:
        assert has_keys(entry, "probe", "arch", "status", "detail")
        targeted = find_probe(entry["probe"]).supports(parse_arch(entry["arch"]))
        assert entry["status"] in STATUSES and entry["status"] == ("ok" if targeted else "unsupported")
        assert entry["arch"] in ("sm_80", "sm_90a")
        assert isinstance(entry["detail"], str)
    assert {(e["probe"], e["arch"]) for e in results} == {
        (p.name, a) for p in all_probes() for a in ("sm_80", "sm_90a")
    }


def test_check_unknown_arch(capsys: pytest.CaptureFixture[str]) -> None:
    message = user_error(capsys, "check", "--arch", "sm_80,sm_70")
    assert message.startswith("unknown arch 'sm_70'; supported: sm_75")


def test_check_an_arch_given_twice_is_refused(capsys: pytest.CaptureFixture[str]) -> None:
    message = user_error(capsys, "check", "--arch", "sm_90a,sm_80,90a")
    assert message == "sm_90a given more than once in 'sm_90a,sm_80,90a'"


@pytest.mark.parametrize("archs", ["all,sm_75", "sm_80, ALL"])
def test_check_all_in_a_list_of_archs_says_it_cannot_be_combined(capsys, archs: str) -> None:
    message = user_error(capsys, "check", "--arch", archs)
    assert message == f"'all' cannot be combined with other archs in {archs!r}: it names every one already"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["fleet", ".", "--top", "0"], "--top must be at least 1, got 0"),
        (["fleet", ".", "--top", "-1"], "--top must be at least 1, got -1"),
        (["fleet", ".", "--jobs", "0"], "--jobs must be at least 1, got 0"),
        (["fleet", ".", "--jobs", "-3"], "--jobs must be at least 1, got -3"),
        (["run", "--repeat", "0"], "--repeat must be at least 1, got 0"),
    ],
)
def test_a_count_below_one_is_refused(capsys: pytest.CaptureFixture[str], argv: list[str], message: str) -> None:
    assert user_error(capsys, *argv) == message


# ---------------------------------------------------------------- sass ---------


def sass_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    """``gpuprobe sass --json ...``, checked against the documented schema."""
    code, out, err = run(capsys, "sass", *argv, "--json")
    assert code == 0 and err == "", err
    data = json.loads(out)
    assert has_keys(data, "arch", "kernels")
    for kernel in data["kernels"]:
        assert has_keys(kernel, "name", "registers", "shared_bytes", "local_bytes", "instructions", "loops")
        assert isinstance(kernel["registers"], int) and kernel["local_bytes"] == 0
        for ins in kernel["instructions"]:
            assert has_keys(ins, "offset", "predicate", "opcode", "operands")
            assert isinstance(ins["offset"], int) and isinstance(ins["operands"], list)
        for loop in kernel["loops"]:
            assert has_keys(loop, "start", "end")
    return data


def test_sass_ptx_json(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = write(tmp_path / "chase.ptx", CHASE_PTX)
    data = sass_json(capsys, str(source))
    assert data["arch"] == "sm_80"  # from the file's .target
    kernels = {k["name"]: k for k in data["kernels"]}
    assert set(kernels) == {"cli_chase", "cli_empty"}
    chase = kernels["cli_chase"]
    loads = [i for i in chase["instructions"] if i["opcode"] == "LDG.E.64.STRONG.GPU"]
    assert len(loads) == 4
    assert any(i["predicate"] == "@P0" and i["opcode"] == "BRA" for i in chase["instructions"])
    assert any(loop["start"] <= loads[0]["offset"] <= loop["end"] for loop in chase["loops"])


def test_sass_ptx_for_another_arch_and_kernel_filter(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = write(tmp_path / "chase.ptx", CHASE_PTX)
    data = sass_json(capsys, str(source), "--arch", "sm_90a", "--kernel", "cli_empty")
    assert data["arch"] == "sm_90a"
    assert [k["name"] for k in data["kernels"]] == ["cli_empty"]


def test_sass_text(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = write(tmp_path / "chase.ptx", CHASE_PTX)
    code, out, _ = run(capsys, "sass", str(source), "--kernel", "cli_chase")
    assert code == 0
    lines = out.splitlines()
    assert lines[0].startswith("// cli_chase (sm_80): ")
    assert "registers" in lines[0] and "bytes stack" in lines[0]
    assert sum("LDG.E.64.STRONG.GPU" in line for line in lines) == 4
    assert all("|" in line for line in lines if "LDG" in line)  # the loop is marked


def test_sass_cuda(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = write(tmp_path / "k.cu", CUDA_SOURCE)
    data = sass_json(capsys, str(source), "--arch", "sm_80", "--kernel", "cli_cuda")
    assert data["arch"] == "sm_80"
    (kernel,) = data["kernels"]
    assert any(i["opcode"].startswith("STG") for i in kernel["instructions"])


def test_sass_cubin(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    compiled = assemble_ptx(CHASE_PTX.replace("//@repeat 4\n", ""), parse_arch("sm_86"), "chase")
    cubin = tmp_path / "chase.cubin"
    shutil.copyfile(compiled.cubin, cubin)
    data = sass_json(capsys, str(cubin), "--kernel", "cli_chase")
    assert data["arch"] == "sm_86"
    assert sum(i["opcode"].startswith("LDG") for i in data["kernels"][0]["instructions"]) == 1


@pytest.mark.parametrize("kernel", ["", "  "])
def test_sass_an_empty_kernel_name_is_refused(capsys: pytest.CaptureFixture[str], tmp_path: Path, kernel: str) -> None:
    source = write(tmp_path / "chase.ptx", CHASE_PTX)
    message = user_error(capsys, "sass", str(source), "--kernel", kernel)
    assert message == "--kernel names no kernel: give one, or leave --kernel out for all of them"


def test_sass_unknown_kernel(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = write(tmp_path / "chase.ptx", CHASE_PTX)
    message = user_error(capsys, "sass", str(source), "--kernel", "nope")
    assert message == "no kernel 'nope' in the cubin (it has: cli_chase, cli_empty)"


def test_sass_ptx_that_does_not_assemble(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "bad.ptx", CHASE_PTX.replace("sub.u32 %r1, %r1, 1;", "sub.u32 %r1, %r9, 1;"))
    monkeypatch.chdir(tmp_path)
    message = user_error(capsys, "sass", "bad.ptx")
    assert message.startswith("bad.ptx:16: ptxas error: "), message
    assert "'sub'" in message and "[sm_80]" in message  # ptxas's own text, and the arch


def test_sass_ptx_bad_directive(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path / "bad.ptx", CHASE_PTX.replace("//@repeat 4", "//@for X in 1 2"))
    monkeypatch.chdir(tmp_path)
    assert user_error(capsys, "sass", "bad.ptx") == "bad.ptx:14: //@for without //@endfor"


@pytest.mark.parametrize(
    ("name", "source"),
    [
        ("none.ptx", ".version 8.0\n.target sm_80\n.address_size 64\n"),
        ("helper.ptx", ".version 8.0\n.target sm_80\n.address_size 64\n.func helper()\n{\nret;\n}\n"),
        ("helper.cu", "__device__ int helper(int x) { return x + 1; }\n"),
    ],
)
def test_sass_a_source_with_no_kernel_says_so(capsys, tmp_path: Path, name: str, source: str) -> None:
    path = write(tmp_path / name, source)
    assert user_error(capsys, "sass", str(path)).startswith(f"no kernels in {path}: nothing to disassemble")


def test_version_is_the_one_results_record(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.startswith(f"gpuprobe {code_record()['version']}")


@pytest.mark.parametrize("name", ["H100", "h100", "RTX"])
def test_expectations_a_name_several_models_hold_is_ambiguous_naming_them(capsys, name: str) -> None:
    message = user_error(capsys, "expectations", name)
    keys = "h100_pcie, h100_sxm" if name.lower() == "h100" else "rtx_4090, rtx_5090"
    assert message == f"{name!r} is ambiguous: matches {keys} (give one of those keys)"


def test_sass_nvrtc_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = write(tmp_path / "bad.cu", CUDA_SOURCE.replace("threadIdx.x * 3", "threadIdy.x * 3"))
    message = user_error(capsys, "sass", str(source))
    assert "(1): error" in message and "threadIdy" in message


@pytest.mark.parametrize(
    ("name", "content", "expected"),
    [
        ("notes.cubin", "not a cubin at all\n", "not a cubin (no ELF header)"),
        ("cut.cubin", b"\x7fELF\x02\x01\x01" + b"\0" * 9, "not a cubin (its ELF header is cut short)"),
        ("notes.txt", "hello\n", "expected a .ptx, .cu or .cubin file"),
        ("notarget.ptx", ".version 8.7\n.address_size 64\n", "no .target directive; give --arch"),
        ("old.ptx", ".version 8.7\n.target sm_70\n.address_size 64\n", "unknown arch 'sm_70'"),
    ],
    ids=["text-as-cubin", "truncated-elf", "unknown-suffix", "no-target", "unsupported-target"],
)
def test_sass_bad_files(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, name: str, content: str | bytes, expected: str
) -> None:
    path = write(tmp_path / name, content)
    message = user_error(capsys, "sass", str(path))
    assert expected in message, message


def test_sass_host_elf_is_not_a_cubin(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    interpreter = Path(sys.executable).resolve()
    if interpreter.read_bytes()[:4] != b"\x7fELF":
        pytest.skip("the Python interpreter is not an ELF file on this platform")
    path = tmp_path / "host.cubin"
    shutil.copyfile(interpreter, path)
    assert f"{path}: not a cubin (an ELF file for machine " in user_error(capsys, "sass", str(path))


def test_sass_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert user_error(capsys, "sass", str(tmp_path / "absent.ptx")) == f"{tmp_path / 'absent.ptx'}: no such file"


def test_sass_on_something_that_is_not_a_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = tmp_path / "kernels.ptx"
    folder.mkdir()
    assert user_error(capsys, "sass", str(folder)) == f"{folder}: not a file"
    assert user_error(capsys, "sass", os.devnull) == f"{os.devnull}: not a file"


def test_a_path_shut_to_the_user_is_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A file in a folder the user may not look into (which the tests, run as root, cannot make): the system's
    refusal, on one line, where no check before it looked."""
    shut = tmp_path / "shut" / "k.ptx"

    def refuse(path: Path) -> bool:
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(Path, "is_file", refuse)
    assert user_error(capsys, "sass", str(shut)) == f"{shut}: Permission denied"


def test_an_error_that_quotes_line_breaks_is_one_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """A message quotes what the user gave (a file name, a key of a TOML file) or a tool printed: whatever breaks
    a line in it (a newline, a carriage return, a line separator) is a space."""
    odd = tmp_path / "two\nlines\rthree\u2028four.ptx"
    assert user_error(capsys, "sass", str(odd)) == f"{tmp_path}/two lines three four.ptx: no such file"


def test_sass_unknown_arch(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    source = write(tmp_path / "chase.ptx", CHASE_PTX)
    assert user_error(capsys, "sass", str(source), "--arch", "sm_99").startswith("unknown arch 'sm_99'")


# ---------------------------------------------------------------- run ----------


def test_run_without_gpu(capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(gpuprobe.runner.device, "gpu_unavailable_reason", lambda: "no GPU: the test says there is none")
    assert user_error(capsys, "run", "-o", str(tmp_path)) == "no GPU: the test says there is none"
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--device", "-1"], "--device must be a device index of 0 or more, got -1"),
        (["--lock-wait", "-5"], "--lock-wait must be at least 0 seconds, got -5.0"),
        (["--lock-wait", "nan"], "--lock-wait must be at least 0 seconds, got nan"),
        (["--model", "nosuchmodel"], "unknown GPU model 'nosuchmodel'; known models: a10, a100, "),
        (["-o", "{file}"], "{file}: not a folder"),
        (["-o", "{file}/out"], "{file}/out: cannot make this folder ({file} is not a folder)"),
    ],
)
def test_run_refuses_what_would_mean_nothing_before_looking_for_a_gpu(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, argv: list[str], message: str
) -> None:
    def no_measuring(*args: object) -> None:
        raise AssertionError("the GPU was looked for")

    monkeypatch.setattr("gpuprobe.api.local_device", no_measuring)
    a_file = write(tmp_path / "a-file", "not a folder")
    argv = [arg.format(file=a_file) for arg in argv]
    assert user_error(capsys, "run", *argv).startswith(message.format(file=a_file))


def test_a_cuda_home_that_is_no_toolkit_is_said(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))
    source = write(tmp_path / "chase.ptx", CHASE_PTX)
    code, out, err = run(capsys, "sass", str(source), "--kernel", "cli_empty")
    assert code == 0 and "cli_empty" in out
    ignored = f"CUDA_HOME={tmp_path / 'cuda'} is not a CUDA toolkit (no bin/ptxas or bin/nvdisasm in it): ignored"
    assert err == f"gpuprobe: warning: {ignored}\n"
    write(tmp_path / "cuda" / "bin" / "ptxas", "")  # one that holds the tools is no news
    assert run(capsys, "sass", str(source), "--kernel", "cli_empty")[2] == ""


def test_run_shows_its_progress_and_an_interrupt_says_where_the_partial_results_are(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """``gpuprobe run`` on the simulated part (the device check's rehearsal stand-in, in this process and in the
    measuring children), two families, Ctrl-C as the second starts."""
    from gpuprobe import api
    from gpuprobe.families import catalog
    from gpuprobe.measure import progress, session
    from gpuprobe.simulated.gpu import FaultyGpu, suite_options

    rehearsal = REPO / "tests" / "rehearsal"
    monkeypatch.setenv("GPUPROBE_REHEARSAL", "1")
    monkeypatch.setenv("GPUPROBE_REHEARSAL_OPTIONS", json.dumps({"faults": {}}))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(rehearsal), str(REPO), os.environ.get("PYTHONPATH", "")]))
    monkeypatch.setattr(gpuprobe.runner.device, "gpu_unavailable_reason", lambda: None)
    monkeypatch.setattr(
        api, "device_identity", lambda index=0: FaultyGpu(**suite_options(name="Rehearsal GPU")).device()
    )
    two = {name: catalog.BY_NAME[name] for name in ("l2_partition", "launch")}
    monkeypatch.setattr(session, "BY_NAME", two)
    measure = session.run_family

    def stopped_in_launch(spec, order, policy, **kwargs):
        if spec["family"] == "launch":
            raise KeyboardInterrupt
        yield from measure(spec, order, policy, **kwargs)

    monkeypatch.setattr(session, "run_family", stopped_in_launch)
    monkeypatch.setattr(progress, "PLAIN_EVERY_S", math.inf)  # no line within a family, however slow the machine
    out = tmp_path / "out"
    code, _, err = run(capsys, "run", "-o", str(out))
    assert code == 130
    lines = err.splitlines()
    assert lines[0].startswith("gpuprobe: [1/2] l2_partition: 1 probe, about ") and lines[0].endswith(" left in all")
    assert lines[1].startswith("gpuprobe: [1/2] l2_partition done in ") and lines[1].endswith(": 1/1 ok")
    assert lines[2].startswith("gpuprobe: [2/2] launch: 3 probes, about ")
    results, sheet = out / "results.json", out / "factsheet.md"
    assert lines[3:] == [f"gpuprobe: interrupted; partial results in {results}, {sheet} (gpuprobe report {results} "
                         "renders them again)"]  # fmt: skip
    assert results.is_file() and sheet.is_file()


def test_run_on_this_machine_without_gpu(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """Unpatched: on a machine with no usable GPU, ``run`` says why in one line."""
    reason = gpuprobe.runner.device.gpu_unavailable_reason()
    if reason is None:
        pytest.skip("a GPU is present: `run` would measure")
    assert user_error(capsys, "run", "-o", str(tmp_path)) == reason
    assert reason.startswith("no GPU: ")


# ---------------------------------------------------------------- report -------


def small_results() -> Results:
    """A tiny, made-up results file (test data, never a real measurement)."""
    device = Device(name="Test GPU", cc="8.0", arch="sm_80", sm_count=108, l2_bytes=40 * 2**20)
    samples = [199.0, 200.0, 201.0]
    fact = Fact(id="latency.l2", value=200.0, unit="cycles", samples=samples, probe="memory.latency.global_cg")
    return Results(device=device, facts=[fact], partial=False)


def test_report_leaves_out_a_plot_there_is_not_the_memory_to_draw_with_one_warning(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def out_of_memory(results: Results, dpi: int) -> bytes:
        raise MemoryError

    greedy = Section("Greedy", ("latency.",), plot=Plot("greedy", "greedy.png", "greedy", out_of_memory))
    monkeypatch.setattr("gpuprobe.families.catalog.sections", lambda: (greedy,))
    save(small_results(), tmp_path / "results.json")
    code, _, err = run(capsys, "report", str(tmp_path / "results.json"))
    assert code == 0 and err == "gpuprobe: warning: greedy.png left out of the fact sheet: not the memory to draw it\n"
    assert (tmp_path / "factsheet.md").is_file() and not (tmp_path / "greedy.png").exists()


def test_running_out_of_memory_elsewhere_is_one_line(capsys, monkeypatch: pytest.MonkeyPatch) -> None:
    def out_of_memory(args: object) -> int:
        raise MemoryError

    monkeypatch.setattr("gpuprobe.cli.probes.cmd_list", out_of_memory)
    assert user_error(capsys, "list").startswith("out of memory")


def test_report_writes_the_fact_sheet(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    results = tmp_path / "run" / "results.json"
    save(small_results(), results)
    code, out, err = run(capsys, "report", str(results))
    assert code == 0 and err == ""
    sheet = tmp_path / "run" / "factsheet.md"
    assert out.splitlines() == [f"wrote {sheet}"]
    text = sheet.read_text()
    assert "Test GPU" in text and "latency.l2" in text


def test_report_to_another_directory(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    save(small_results(), results)
    code, _, _ = run(capsys, "report", str(results), "-o", str(tmp_path / "out"))
    assert code == 0
    assert (tmp_path / "out" / "factsheet.md").is_file()


def results_file(tmp_path: Path, data: object) -> Path:
    """A results.json holding ``data`` as JSON."""
    return write(tmp_path / "results.json", json.dumps(data))


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        ("{ this is not json", "corrupt results file (not JSON: "),
        ("", "corrupt results file (not JSON: "),
        (b"\xff\xfe\x00garbage", "cannot read"),
        ({"hello": "world"}, "not a gpuprobe results file"),
        ([1, 2, 3], "not a gpuprobe results file"),
        ({"schema": SCHEMA}, "results file has no schema_version"),
        ({"schema": SCHEMA, "schema_version": SCHEMA_VERSION + 1}, f"results schema {SCHEMA_VERSION + 1} is newer"),
        ({"schema": SCHEMA, "schema_version": 0}, "results schema 0 is not supported"),
        ({"schema": SCHEMA, "schema_version": SCHEMA_VERSION}, "corrupt results file (KeyError"),
        (
            {"schema": SCHEMA, "schema_version": SCHEMA_VERSION, "device": {"name": "x"}, "facts": []},
            "corrupt results file (TypeError",
        ),
        (
            {
                "schema": SCHEMA,
                "schema_version": SCHEMA_VERSION,
                "device": {"name": "x", "cc": "8.0", "arch": "sm_80", "sm_count": 1, "l2_bytes": 1},
                "facts": [{"id": "a.b", "value": "fast", "unit": "ns"}],
            },
            "corrupt results file (ValueError",
        ),
    ],
    ids=[
        "not-json",
        "empty",
        "not-utf8",
        "foreign-json",
        "json-list",
        "no-version",
        "newer-schema",
        "schema-zero",
        "no-device",
        "device-incomplete",
        "bad-fact-value",
    ],
)
def test_report_bad_results(capsys: pytest.CaptureFixture[str], tmp_path: Path, content: object, expected: str) -> None:
    if isinstance(content, str | bytes):
        path = write(tmp_path / "results.json", content)
    else:
        path = results_file(tmp_path, content)
    message = user_error(capsys, "report", str(path))
    assert message.startswith(f"{path}: "), message
    assert expected in message, message
    assert not (tmp_path / "factsheet.md").exists()


def test_every_reader_refuses_a_file_no_run_writes(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """One validator behind every reader: report and compare refuse the file (exit 2, one line), fleet skips it
    and says why, the index shows the run as broken."""
    good = tmp_path / "good" / "results.json"
    save(small_results(), good)
    data = json.loads(good.read_text())
    data["facts"][0]["value"] = float("inf")  # written by hand: gpuprobe writes a non-finite number as null
    bad = write(tmp_path / "reports" / "bad-gpu" / "results.json", json.dumps(data))
    why = "invalid results file: fact 'latency.l2': value is inf, not a finite number"
    assert user_error(capsys, "report", str(bad)) == f"{bad}: {why}"
    assert user_error(capsys, "compare", str(good), str(bad)) == f"{bad}: {why}"
    code, out, _ = run(capsys, "fleet", str(bad), str(good))  # the fleet skips it, says why, and judges the rest
    assert code == 0 and "1 GPU(s) from 1 results file(s)" in out and "1 file(s) skipped" in out and why in out
    code, _, _ = run(capsys, "index", str(tmp_path / "reports"))
    assert code == 0 and why in (tmp_path / "reports" / "README.md").read_text()
    assert not (tmp_path / "reports" / "bad-gpu" / "factsheet.md").exists()


def test_report_missing_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert user_error(capsys, "report", str(tmp_path / "absent.json")) == f"{tmp_path / 'absent.json'}: no such file"


# ---------------------------------------------------------------- python -m ----


def run_module(*argv: str) -> subprocess.CompletedProcess[str]:
    """``python -m gpuprobe ...`` from the checkout, as a user runs it."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    return subprocess.run(
        [sys.executable, "-m", "gpuprobe", *argv], cwd=REPO, env=env, capture_output=True, text=True, timeout=300
    )


def test_python_m_gpuprobe_check() -> None:
    proc = run_module("check", "--arch", "sm_80")
    assert proc.returncode == 0, proc.stderr
    assert only_progress(proc.stderr), proc.stderr
    ok, unsupported = targeted_count("sm_80")
    assert proc.stdout.splitlines()[-1] == f"{ok} ok, 0 violated, {unsupported} unsupported, 0 error"


def test_python_m_gpuprobe_user_error() -> None:
    proc = run_module("check", "--arch", "sm_70")
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith(PREFIX) and proc.stderr.count("\n") == 1, proc.stderr


# ---------------------------------------------------------------- the machine around the command


@pytest.mark.parametrize("argv", [["list"], ["check", "--arch", "sm_80"], ["sass", "ptx/alu/alu.ptx"]])
def test_a_reader_that_closes_the_pipe_ends_the_command_quietly(argv: list[str]) -> None:
    """``gpuprobe list | head``: the reader is gone before the first line (closed at once, while the command
    is still starting), so the first write meets a closed pipe, deterministically."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    command = [sys.executable, "-m", "gpuprobe", *argv]
    with subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE) as proc:
        proc.stdout.close()
        stderr = proc.stderr.read().decode()
        code = proc.wait(timeout=300)
    assert (code, stderr) == (128 + 13, "")


def test_report_into_a_place_that_cannot_be_a_folder(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    save(small_results(), results)
    a_file = write(tmp_path / "taken", "")
    assert (
        user_error(capsys, "report", str(results), "-o", str(a_file))
        == f"{a_file}: cannot make this folder (File exists)"
    )
    below_a_file = a_file / "out"
    assert user_error(capsys, "report", str(results), "-o", str(below_a_file)).startswith(
        f"{below_a_file}: cannot make"
    )
    assert not list(tmp_path.glob("*.png")), "no plot is written for a sheet that cannot be"


def test_report_where_the_sheet_is_a_folder(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    save(small_results(), results)
    (tmp_path / "out" / "factsheet.md").mkdir(parents=True)
    message = user_error(capsys, "report", str(results), "-o", str(tmp_path / "out"))
    assert message.startswith(f"{tmp_path / 'out' / 'factsheet.md'}: cannot write (")


def test_index_where_the_index_is_a_folder(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    (tmp_path / "README.md").mkdir()
    assert user_error(capsys, "index", str(tmp_path)).startswith(f"{tmp_path / 'README.md'}: cannot write (")


def test_fleet_run_into_a_file(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    a_file = write(tmp_path / "taken", "")
    message = user_error(capsys, "fleet-run", str(a_file), "--gpus", "0", "--tests", str(REPO / "probes"))
    assert message == f"{a_file}: cannot make this folder (File exists)"


@pytest.mark.parametrize("command", [["check", "--arch", "sm_80"], ["sass", "ptx/alu/alu.ptx"]])
@pytest.mark.parametrize("bad", ["a file", "below a file"])
def test_a_cache_that_cannot_be_written_is_one_line(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command: list[str], bad: str
) -> None:
    cache = write(tmp_path / "cache", "")
    cache = cache if bad == "a file" else cache / "below"
    monkeypatch.setenv("GPUPROBE_CACHE", str(cache))
    monkeypatch.chdir(REPO)
    message = user_error(capsys, *command)
    assert message.startswith(f"cannot write the cache in {cache} (") and message.endswith(
        "a folder gpuprobe may write"
    )


def test_each_command_group_adds_the_commands_the_table_names() -> None:
    """``gpuprobe.cli.GROUPS`` (which group a command's arguments import) is what each group's ``add_commands`` adds,
    in --help's order."""
    import argparse
    import importlib

    from gpuprobe.cli import GROUPS

    for group, commands in GROUPS.items():
        subparsers = argparse.ArgumentParser().add_subparsers()
        importlib.import_module(f"gpuprobe.cli.{group}").add_commands(subparsers)
        assert tuple(subparsers.choices) == commands, group


def test_a_command_imports_its_own_group_alone_and_a_typo_still_lists_every_command() -> None:
    """``gpuprobe check`` builds no other group's parser (nor imports what they need: every family, NumPy); a
    mistyped command is told every choice, and --help lists every command with its help."""
    code = (
        "import sys; from gpuprobe.cli import build_parser; build_parser(['check', '--arch', 'sm_90a'])\n"
        "heavy = [m for m in ('gpuprobe.cli.fleet', 'gpuprobe.cli.run', 'gpuprobe.families.catalog', 'numpy')"
        " if m in sys.modules]\n"
        "print(heavy)"
    )
    imported = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert imported.strip() == "[]"
    typo = subprocess.run([sys.executable, "-m", "gpuprobe", "chekc"], capture_output=True, text=True)
    assert typo.returncode == 2 and "invalid choice: 'chekc'" in typo.stderr
    assert all(name in typo.stderr for name in ("'check'", "'fleet'", "'fleet-links'", "'expectations'"))
    helped = subprocess.run([sys.executable, "-m", "gpuprobe", "--help"], capture_output=True, text=True, check=True)
    assert "compare many GPUs' results" in helped.stdout and "every probe, its family, archs and facts" in helped.stdout
