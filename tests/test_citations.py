"""Every citation in the expectation files is there, and every file it names can be found.

A citation (a fact's or datasheet entry's ``source`` and ``note``, the ``[device]`` source, a comment)
may name a file of this repository, such as ``docs/datasheets.md`` or a sibling expectation file: that
file must exist. Or it may name a file of a published repository, such as gpu-benches'
``gpu-stream/h200.txt``: then that repository is named earlier in the same clause, so a reader knows
where to look. A file named with neither (a research note that never shipped) fails.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

from gpuprobe.judge.expectations import DEFAULT_DIRECTORY, FAMILIES_DIRECTORY, family_files

REPOSITORY_ROOT = Path(__file__).resolve().parents[1]
EXPECTATION_FILES = [*sorted(DEFAULT_DIRECTORY.glob("*.toml")), *family_files(FAMILIES_DIRECTORY)]

#: Published repositories whose files the citations name (owner/name, as on GitHub). A citation of a file
#: in a repository not listed here fails until the repository is added.
REPOSITORIES = frozenset(
    {
        "Azure/AI-benchmarking-guide",
        "HPMLL/NVIDIA-Hopper-Benchmark",
        "Johnsonms/NVIDIA-Hopper-Benchmark",
        "NVIDIA/cuda-python",
        "aalanwyr/face2cuda",
        "accel-sim/accel-sim-framework",
        "caps-tum/mt4g",
        "cupy/cupy",
        "gunrock/gunrock",
        "jdh4/della-gpu-A100",
        "markdewing/AI_kernels",
        "mlcommons/inference_results_v3.1",
        "mlcommons/inference_results_v4.1",
        "neozhang307/SyncMicrobenchmark",
        "openxla/xla",
        "router-gao/cuda-demo",
        "sjfeng1999/gpu-arch-microbenchmark",
        "smallscientist1/cuda_microbenchmark",
        "stas00/ml-engineering",
        "sylvia-ymlin/cuda-kernels-from-scratch",
        "te42kyfo/gpu-benches",
        "thamada/nvidia-smi",
        "waynehacking8/blackwell-tensorcore-kernels",
        "xxrjun/gpu-benches",
        "xytpai/nvbench",
    }
)
#: The short names the citations use for some of them.
SHORT_NAMES = {"gpu-benches": "te42kyfo/gpu-benches", "mt4g": "caps-tum/mt4g"}
#: Paths that start here are this repository's own, whatever the clause names.
OWN_TOP_LEVEL = ("gpuprobe/", "docs/", "tests/", "probes/", "ptx/", "scripts/")

_FILE = re.compile(
    r"(?<![\w./*{}-])[\w.*{}-]+(?:/[\w.*{}-]+)*"
    r"\.(?:md|py|toml|txt|log|dat|cu|cuh|cpp|h|json|csv|yaml|yml|sh|ipynb|pdf|html)(?![\w/-])"
)
_SENTENCE_END = re.compile(r"\. (?=[A-Z])")
_URL = re.compile(r"(?:https?://)?(?:[\w-]+\.)+[a-z]{2,}/\S*")
_SHORT_NAME = re.compile(r"(?<![\w/-])(?:" + "|".join(map(re.escape, SHORT_NAMES)) + r")(?![\w/-])")


def clause_before(text: str, end: int) -> str:
    """The text of the clause ``text[end]`` sits in, up to ``end``: from the last ``;`` or sentence end,
    or the opening of an unclosed parenthesis, whichever is later (a closed parenthesis is part of it)."""
    start, outer = 0, []
    for i, char in enumerate(text[:end]):
        if char == "(":
            outer.append(start)
            start = i + 1
        elif char == ")" and outer:
            start = outer.pop()
        elif char == ";" or _SENTENCE_END.match(text, i):
            start = i + 1
    return text[start:end]


def names_a_repository(clause: str) -> bool:
    """True when ``clause`` names a repository of :data:`REPOSITORIES` (or a short name, or a GitHub URL)."""
    return "github.com/" in clause or _SHORT_NAME.search(clause) is not None or any(r in clause for r in REPOSITORIES)


def exists_here(name: str, citing_file: Path) -> bool:
    """True when ``name`` is a file of this repository, from its root, the citing file's folder or the
    expectations folder."""
    if "*" in name or "{" in name:
        return False
    return any((base / name).is_file() for base in (REPOSITORY_ROOT, citing_file.parent, DEFAULT_DIRECTORY))


def unresolved_files(text: str, citing_file: Path) -> list[str]:
    """The file names in ``text`` that are neither in this repository nor attributed to a repository."""
    urls = [match.span() for match in _URL.finditer(text)]
    missing = []
    for match in _FILE.finditer(text):
        if any(start <= match.start() < end for start, end in urls):
            continue
        name = match.group()
        if exists_here(name, citing_file):
            continue
        if name.startswith(OWN_TOP_LEVEL) or not names_a_repository(clause_before(text, match.start())):
            missing.append(name)
    return missing


def entries(data: dict) -> list[tuple[str, dict]]:
    """(where, table) for every fact and datasheet entry of one expectations file: a model file's
    ``facts."<id>"``, a family file's ``facts."<id>".<model>``."""
    found = []
    for table in ("facts", "datasheet"):
        for key, entry in data.get(table, {}).items():
            if "source" in entry or "unit" in entry:  # a model file's entry
                found.append((f'{table}."{key}"', entry))
            else:  # a family file's: one entry per model
                found += [(f'{table}."{key}".{model}', each) for model, each in entry.items()]
    return found


def citations(path: Path) -> list[tuple[str, str]]:
    """(where, text) for every citation in one expectation file, comment blocks included."""
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    found = []
    for where, entry in entries(data):
        found += [(f"{where}.{field}", entry[field]) for field in ("source", "note") if field in entry]
    if "source" in data.get("device", {}):
        found.append(("device.source", data["device"]["source"]))
    block: list[str] = []
    for number, line in enumerate([*path.read_text(encoding="utf-8").splitlines(), ""], start=1):
        if line.lstrip().startswith("#"):
            block.append(line.lstrip().lstrip("#").strip())
        elif block:
            found.append((f"comment ending at line {number - 1}", " ".join(block)))
            block = []
    return found


def _name(path: Path) -> str:
    return str(path.relative_to(DEFAULT_DIRECTORY.parent))


@pytest.mark.parametrize("path", EXPECTATION_FILES, ids=_name)
def test_every_entry_cites_something(path):
    data = tomllib.loads(path.read_text(encoding="utf-8"))
    cited = entries(data)
    if "device" in data:
        cited.append(("[device]", data["device"]))
    empty = [key for key, entry in cited if not str(entry.get("source", "")).strip()]
    assert not empty, f"{_name(path)}: no source for {empty}"


@pytest.mark.parametrize("path", EXPECTATION_FILES, ids=_name)
def test_every_file_a_citation_names_can_be_found(path):
    problems = [
        f"{_name(path)}: {where}: names {name!r}, which is not in this repository and follows no repository name"
        for where, text in citations(path)
        for name in unresolved_files(text, path)
    ]
    assert not problems, "\n".join(problems)


def test_the_expectation_files_are_all_read():
    families = {path.parent.name for path in EXPECTATION_FILES if path.parent != DEFAULT_DIRECTORY}
    assert len(families) >= 20 and {"memory", "wgmma", "mma", "bandwidth", "async_copy"} <= families


CITING = DEFAULT_DIRECTORY / "h200.toml"


@pytest.mark.parametrize(
    ("text", "missing"),
    [
        ("GPU_SPECS.md: H200 SXM 132 SMs", "GPU_SPECS.md"),
        ("NVIDIA H100 SXM5 datasheet / GPU_SPECS.md: 3.35 TB/s; mt4g (caps-tum/mt4g sample_results)", "GPU_SPECS.md"),
        ("Johnsonms/NVIDIA-Hopper-Benchmark raw/wgmma_*.log (research/compute.md 3.1)", "research/compute.md"),
        ("markdewing/AI_kernels latency/data/h100sxm.dat; held 1980 MHz (METHODOLOGY.md section 4)", "METHODOLOGY.md"),
        ("gpu-benches gpu-stream/h200.txt. Floor: see reference/GPU_SPECS.md", "reference/GPU_SPECS.md"),
        ("te42kyfo/gpu-benches gpu-stream/h200.txt; derived in docs/datasheet.md", "docs/datasheet.md"),
        ("stas00/ml-engineering compute/accelerator/README.md, as gpuprobe/peaks.py", "gpuprobe/peaks.py"),
    ],
)
def test_a_file_neither_here_nor_in_a_named_repository_is_found_out(text, missing):
    assert unresolved_files(text, CITING) == [missing]


@pytest.mark.parametrize(
    "text",
    [
        "NVIDIA H100 whitepaper V1.04, Table 3: 989.4 TFLOP/s; docs/datasheets.md (h100_sxm)",
        "inherited from h100_sxm.toml; see tests/data/recorded_latency/a40.txt",
        "gpu-benches (RRZE, github.com/te42kyfo/gpu-benches) gpu-latency/h100_pcie.txt (commit a7dc559): 34.2",
        "markdewing/AI_kernels latency/data/h100sxm.dat (commit b6bc563), by latency/cuda/latency.cu: 700, gh200.dat",
        "Johnsonms/NVIDIA-Hopper-Benchmark summary.md (commit 2af634c; 5120-bit) and raw/alu_lat_float.log: 4.07",
        "vendor spec sheet (saulelectric.com/nvidia-h200.html); Luo et al. arXiv:2402.13499 Table IV",
        "no published measurement found",
    ],
)
def test_a_file_here_or_in_a_named_repository_resolves(text):
    assert unresolved_files(text, CITING) == []
