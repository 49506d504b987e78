"""The probe registry: ptx/*.toml declarations, and one-line errors for bad family files."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from gpuprobe.core.arch import SUPPORTED_ARCHS, parse_arch
from gpuprobe.core.errors import GpuprobeError
from gpuprobe.kernels.contracts import RULE_KINDS
from gpuprobe.kernels.nvrtc import cuda_to_ptx
from gpuprobe.kernels.ptxsource import expand
from gpuprobe.kernels.registry import PTX_DIR, Probe, all_probes, find_probe, load_family
from gpuprobe.kernels.source_tree import SOURCE_ROOT

DOTTED_ID = re.compile(r"^[a-z][a-z0-9_]*(\.[a-z0-9_]+)+$")
ENTRY = re.compile(r"^\s*\.visible\s+\.entry\s+(\w+)\s*\(", re.MULTILINE)


def entries_of(source: Path) -> list[str]:
    """The kernel names a PTX file defines, after its directives are expanded; those of a CUDA C++ file
    as NVRTC's PTX of it defines them (for the first arch its declaration targets: cached by content)."""
    if source.suffix == ".cu":
        arch = next(p.archs[0] for p in all_probes() if p.source == source)
        return ENTRY.findall(cuda_to_ptx(source.read_text(), arch, str(source), (source.parent,)))
    expanded = "\n".join(expand(source.read_text(), str(source)).lines)
    return ENTRY.findall(expanded)


# ---------------------------------------------------------------- the real registry


def test_the_package_reads_the_checkouts_kernels_through_its_link() -> None:
    """``gpuprobe/ptx`` links to ``ptx/`` (a wheel carries the files there as package data), so a checkout
    and an installed wheel read the same kernels and show the same paths."""
    link = Path(__file__).resolve().parents[1] / "gpuprobe" / "ptx"
    assert link.is_symlink() and (Path(__file__).resolve().parents[1] / "ptx") == PTX_DIR
    assert PTX_DIR.parent == SOURCE_ROOT and find_probe("alu.ffma.ilp1").source_label == "ptx/alu/alu.ptx"


def test_every_family_file_loads() -> None:
    tomls = sorted(PTX_DIR.glob("*/*.toml"))
    assert tomls, "no families under ptx/<family>/"
    for toml in tomls:
        probes = load_family(toml)
        assert probes, toml
        assert {p.source for p in probes} in ({toml.with_suffix(".ptx")}, {toml.with_suffix(".cu")})


def test_all_probes_is_every_family() -> None:
    probes = all_probes()
    assert len(probes) == sum(len(load_family(t)) for t in PTX_DIR.glob("*/*.toml"))
    names = [p.name for p in probes]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("probe", all_probes(), ids=lambda p: p.name)
def test_each_probe_is_fully_declared(probe: Probe) -> None:
    assert DOTTED_ID.match(probe.name), probe.name
    assert probe.name.split(".")[0] == probe.family
    assert len(probe.doc.split()) >= 8, "a probe's doc explains what it measures and how"
    assert "\n" not in probe.doc and probe.doc == probe.doc.strip()
    assert probe.kernel in entries_of(probe.source), f"{probe.kernel} is not an .entry of {probe.source_label}"
    from gpuprobe.families.catalog import OPT_IN

    assert probe.facts or probe.family in OPT_IN, "every measuring probe produces at least one fact"
    for fact in probe.facts:  # a per-pair fact is declared as its prefix and ".*" (p2p.ce.bandwidth.*)
        assert DOTTED_ID.match(fact.removesuffix(".*")), f"fact id {fact!r} is not dotted lower case"
    assert probe.contract, "every probe states its SASS contract"
    assert all(rule.kind in RULE_KINDS for rule in probe.contract)
    assert probe.archs and set(probe.archs) <= set(SUPPORTED_ARCHS)
    assert probe.source_label == str(probe.source.relative_to(SOURCE_ROOT))


def test_every_kernel_belongs_to_a_probe() -> None:
    """Each kernel of a source is a probe's own, or the twin a probe declares (both held to a contract)."""
    twins = {(p.source, p.twin.kernel) for p in all_probes() if p.twin}
    declared = {(p.source, p.kernel) for p in all_probes()} | twins
    for source in {p.source for p in all_probes()}:
        for kernel in entries_of(source):
            assert (source, kernel) in declared, f"{kernel} in {source.name} is not declared by any probe"


def test_each_fact_has_one_producer() -> None:
    facts = [fact for probe in all_probes() for fact in probe.facts]
    assert len(facts) == len(set(facts))


def test_memory_family_targets_every_supported_arch_from_sm_75() -> None:
    probe = find_probe("memory.latency.global_cg")
    assert probe.archs == SUPPORTED_ARCHS
    assert probe.supports(parse_arch("sm_90a"))
    assert "latency.l2" in probe.facts


def test_vars_are_substituted_into_opcode_patterns() -> None:
    probe = find_probe("memory.latency.global_cg")
    opcodes = {rule.opcode for rule in probe.contract if rule.region == "timed_loop"}
    load = r"LDG\.E\.64\.STRONG\.GPU"
    assert opcodes == {load, load + r"|U?IADD3|VIADD|IADD|U?ISETP(\.\w+)*|BRA(\.U)?"}


def test_family_rules_apply_to_every_probe_of_the_family() -> None:
    for probe in all_probes():
        if probe.family == "memory":
            assert probe.contract[0].kind == "no_local"
            assert probe.contract[1].kind == "forbid"


def test_find_probe_unknown_is_one_line() -> None:
    with pytest.raises(GpuprobeError) as excinfo:
        find_probe("memory.latency.nonsense")
    assert str(excinfo.value) == "no probe named 'memory.latency.nonsense'"


# ---------------------------------------------------------------- bad family files


GOOD_FAMILY = """\
family = "toy"
source = "toy.ptx"
archs = ["sm_80", "sm_90a"]
doc = "A family for tests."

[[contract]]
rule = "no_local"

[[probe]]
name = "toy.first"
kernel = "toy_first"
facts = ["toy.first"]
vars = { load = 'LDG\\.E\\.64' }
doc = "The first toy probe."

  [[probe.contract]]
  rule = "count"
  region = "timed_loop"
  opcode = '{load}'
  count = 4
"""


def write_family(directory: Path, text: str, name: str = "toy", with_source: bool = True) -> Path:
    """Write ``name.toml`` (and an empty ``toy.ptx`` beside it) into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    if with_source:
        (directory / "toy.ptx").write_text(".version 8.7\n.target sm_80\n.address_size 64\n")
    path = directory / f"{name}.toml"
    path.write_text(text)
    return path


def load_error(path: Path) -> str:
    """Load a family that must fail; return the one-line message after checking it names the file."""
    with pytest.raises(GpuprobeError) as excinfo:
        load_family(path)
    message = str(excinfo.value)
    assert "\n" not in message, message
    assert message.startswith(f"{path}: "), message
    return message


def test_the_good_family_loads(tmp_path: Path) -> None:
    (probe,) = load_family(write_family(tmp_path, GOOD_FAMILY))
    assert probe.name == "toy.first" and probe.family == "toy" and probe.kernel == "toy_first"
    assert probe.archs == (parse_arch("sm_80"), parse_arch("sm_90a"))
    assert [r.kind for r in probe.contract] == ["no_local", "count"]
    assert probe.contract[1].opcode == r"LDG\.E\.64"
    assert probe.source_label == str(tmp_path / "toy.ptx")


def test_named_rule_sets_are_shared_by_the_probes_that_use_them(tmp_path: Path) -> None:
    text = GOOD_FAMILY.replace('doc = "The first toy probe."', 'doc = "The first toy probe."\nuse = ["timed"]')
    text += '\n[[rules.timed]]\nrule = "clock_bracket"\n\n[[rules.timed]]\nrule = "forbid"\nopcode = \'{load}\'\n'
    (probe,) = load_family(write_family(tmp_path, text))
    assert [r.kind for r in probe.contract] == ["no_local", "clock_bracket", "forbid", "count"]
    assert probe.contract[2].opcode == r"LDG\.E\.64"  # the set's placeholders take the probe's vars


def test_an_unknown_rule_set_is_one_line(tmp_path: Path) -> None:
    text = GOOD_FAMILY.replace('doc = "The first toy probe."', 'doc = "The first toy probe."\nuse = ["timd"]')
    assert "probe[0]: uses unknown rule set 'timd'" in load_error(write_family(tmp_path, text))


def test_min_arch_means_that_arch_and_newer(tmp_path: Path) -> None:
    text = GOOD_FAMILY.replace('archs = ["sm_80", "sm_90a"]', 'min_arch = "sm_90"')
    (probe,) = load_family(write_family(tmp_path, text))
    assert [a.name for a in probe.archs] == ["sm_90", "sm_90a", "sm_100a", "sm_120"]


@pytest.mark.parametrize(
    ("old", "new", "expected"),
    [
        ('doc = "A family for tests."', 'dok = "typo"', "unknown key(s) ['dok']"),
        ('name = "toy.first"', 'name = "toy.first"\nfact = ["x.y"]', "probe[0]: unknown key(s) ['fact']"),
        ('family = "toy"', "", "missing key 'family'"),
        ('source = "toy.ptx"', "", "missing key 'source'"),
        ('source = "toy.ptx"', 'source = "nope.ptx"', "source 'nope.ptx' does not exist"),
        ('doc = "The first toy probe."', "", "probe[0]: missing key 'doc'"),
        ('kernel = "toy_first"', "", "probe[0]: missing key 'kernel'"),
        ('archs = ["sm_80", "sm_90a"]', "", "give 'archs' or 'min_arch'"),
        ("opcode = '{load}'", "opcode = '{lod}'", "probe[0]: contract[0] uses undefined var 'lod'"),
        ('rule = "count"', 'rule = "cuont"', "probe[0]: contract[0]: unknown contract rule 'cuont'"),
        ('region = "timed_loop"', 'region = "loop"', "probe[0]: contract[0]: unknown region 'loop'"),
        ('rule = "no_local"', 'rule = "no_local"\nopcdoe = "X"', "contract[0]: unknown contract key(s) ['opcdoe']"),
        ("opcode = '{load}'", "opcode = 'LDG('", "probe[0]: contract[0]: bad opcode pattern 'LDG('"),
    ],
    ids=[
        "unknown-family-key",
        "unknown-probe-key",
        "missing-family",
        "missing-source-key",
        "source-file-missing",
        "missing-doc",
        "missing-kernel",
        "no-archs",
        "undefined-var",
        "unknown-rule",
        "unknown-region",
        "unknown-rule-key",
        "bad-regex",
    ],
)
def test_bad_family_is_one_line_naming_file_and_key(tmp_path: Path, old: str, new: str, expected: str) -> None:
    assert old in GOOD_FAMILY
    message = load_error(write_family(tmp_path, GOOD_FAMILY.replace(old, new, 1)))
    assert expected in message, message


def test_undefined_var_in_a_family_rule(tmp_path: Path) -> None:
    text = GOOD_FAMILY.replace('rule = "no_local"', "rule = \"forbid\"\nopcode = '{store}'")
    assert "contract[0] uses undefined var 'store'" in load_error(write_family(tmp_path, text))


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ('archs = ["sm_80", "sm_90a"]', 'archs = ["sm_80", "sm_70"]', "archs"),
        ('archs = ["sm_80", "sm_90a"]', 'min_arch = "sm_99"', "min_arch"),
    ],
    ids=["archs", "min_arch"],
)
def test_bad_arch_names_file_and_key(tmp_path: Path, old: str, new: str, key: str) -> None:
    """An unsupported arch in a family file must say which file and which key hold it."""
    message = load_error(write_family(tmp_path, GOOD_FAMILY.replace(old, new)))
    assert key in message and "unknown arch" in message


def test_toml_syntax_error_is_one_line_with_position(tmp_path: Path) -> None:
    message = load_error(write_family(tmp_path, GOOD_FAMILY.replace('family = "toy"', 'family = "toy')))
    assert re.search(r"line \d+", message), message


def test_regex_quantifier_in_an_opcode_pattern_is_not_a_placeholder(tmp_path: Path) -> None:
    """``{2}`` and ``{1,3}`` are regex quantifiers, not ``{var}`` placeholders, and must load as written."""
    text = GOOD_FAMILY.replace("opcode = '{load}'", r"opcode = 'LDG(\.\w+){2,3}'")
    (probe,) = load_family(write_family(tmp_path, text))
    assert probe.contract[1].opcode == r"LDG(\.\w+){2,3}"
    text = GOOD_FAMILY.replace("opcode = '{load}'", r"opcode = '{load}(\.\w+){1}'")
    (probe,) = load_family(write_family(tmp_path, text))
    assert probe.contract[1].opcode == r"LDG\.E\.64(\.\w+){1}"


@pytest.mark.parametrize(
    ("old", "new", "key"),
    [
        ('facts = ["toy.first"]', 'facts = "toy.first"', "facts"),
        ('doc = "The first toy probe."', "doc = 5", "doc"),
        ('name = "toy.first"', "name = 5", "name"),
        ("vars = { load = 'LDG\\.E\\.64' }", 'vars = "LDG"', "vars"),
        ('archs = ["sm_80", "sm_90a"]', 'archs = "sm_80"', "archs"),
        ('[[contract]]\nrule = "no_local"', 'contract = ["no_local"]', "contract"),
    ],
    ids=["facts-string", "doc-int", "name-int", "vars-string", "archs-string", "contract-not-tables"],
)
def test_wrongly_typed_values_are_one_line_errors(tmp_path: Path, old: str, new: str, key: str) -> None:
    """A value of the wrong TOML type is a one-line error naming file and key.

    Today ``facts = "toy.first"`` silently becomes ten one-letter fact ids, ``name = 5`` is
    accepted as an int, and doc/vars/contract of the wrong type raise AttributeError/ValueError
    tracebacks; ``archs = "sm_80"`` reports "unknown arch 's'" without naming file or key.
    """
    assert old in GOOD_FAMILY
    message = load_error(write_family(tmp_path, GOOD_FAMILY.replace(old, new)))
    assert key in message, message


# ---------------------------------------------------------------- all_probes() ---


def test_duplicate_names_across_files(tmp_path: Path) -> None:
    write_family(tmp_path / "toy", GOOD_FAMILY, "a_family")
    write_family(tmp_path / "toy2", GOOD_FAMILY.replace('family = "toy"', 'family = "toy2"'), "b_family")
    with pytest.raises(GpuprobeError) as excinfo:
        all_probes.__wrapped__(tmp_path)
    assert str(excinfo.value) == "duplicate probe name(s): toy.first"


def test_all_probes_of_a_directory(tmp_path: Path) -> None:
    write_family(tmp_path / "toy", GOOD_FAMILY, "a_family")
    second = GOOD_FAMILY.replace('name = "toy.first"', 'name = "toy.second"')
    write_family(tmp_path / "toy", second, "b_family")
    assert [p.name for p in all_probes.__wrapped__(tmp_path)] == ["toy.first", "toy.second"]


def test_all_probes_bad_file_names_it(tmp_path: Path) -> None:
    write_family(tmp_path / "toy", GOOD_FAMILY, "a_family")
    bad = write_family(tmp_path / "toy", "family = [", "b_family")
    with pytest.raises(GpuprobeError) as excinfo:
        all_probes.__wrapped__(tmp_path)
    assert str(excinfo.value).startswith(f"{bad}: ")


def test_all_probes_without_sources_is_one_line(tmp_path: Path) -> None:
    with pytest.raises(GpuprobeError) as excinfo:
        all_probes.__wrapped__(tmp_path / "absent")
    message = str(excinfo.value)
    assert "\n" not in message and message.startswith("probe sources not found at ")


def test_every_declared_family_has_a_measurement_that_runs_exactly_its_probes() -> None:
    from gpuprobe.families.catalog import BY_NAME

    declared: dict[str, set[str]] = {}
    for probe in all_probes():
        declared.setdefault(probe.family, set()).add(probe.name)
    assert set(declared) == set(BY_NAME)
    for name, family in BY_NAME.items():
        assert set(family.probes) == declared[name], name
        assert len(family.probes) == len(set(family.probes))


# ---------------------------------------------------------------- one declaration, several probes

EACH_FAMILY = """\
family = "toy"
source = "toy.ptx"
archs = ["sm_80"]
doc = "A family for tests."

[[probe]]
name = "toy.ffma.ilp{ILP}.{T}"
kernel = "toy_{T}_ilp{ILP}"
facts = ["toy.{T}.ilp{ILP}.latency"]
each = { T = ["f32", "f64"], ILP = [1, 4] }
vars = { op = 'FFMA' }
doc = "A {T} chain, {ILP} independent chains per thread."

  [[probe.contract]]
  rule = "count"
  opcode = '{op}'
  count = "8 * {ILP}"
"""


def test_each_declares_one_probe_per_combination(tmp_path: Path) -> None:
    probes = load_family(write_family(tmp_path, EACH_FAMILY))
    assert [p.name for p in probes] == [
        "toy.ffma.ilp1.f32",
        "toy.ffma.ilp4.f32",
        "toy.ffma.ilp1.f64",
        "toy.ffma.ilp4.f64",
    ]
    four = probes[1]
    assert four.kernel == "toy_f32_ilp4" and four.facts == ("toy.f32.ilp4.latency",)
    assert four.doc == "A f32 chain, 4 independent chains per thread."
    assert [(r.opcode, r.count) for r in four.contract] == [("FFMA", 32)]


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        (
            ('each = { T = ["f32", "f64"], ILP = [1, 4] }', "each = { T = [] , ILP = [1] }"),
            "each.T must be a non-empty list",
        ),
        (('count = "8 * {ILP}"', 'count = "8 / {ILP}"'), "is not an integer expression"),
        (('count = "8 * {ILP}"', 'count = "{WIDTH}"'), "undefined var 'WIDTH'"),
        (('name = "toy.ffma.ilp{ILP}.{T}"', 'name = "toy.ffma.{N}"'), "undefined var 'N'"),
    ],
)
def test_bad_each_or_bound_is_one_line(tmp_path: Path, change: tuple[str, str], problem: str) -> None:
    path = write_family(tmp_path, EACH_FAMILY.replace(*change))
    with pytest.raises(GpuprobeError, match=re.escape(problem)) as excinfo:
        load_family(path)
    assert "\n" not in str(excinfo.value)


# ---------------------------------------------------------------- unroll: one number for host and contract


def test_a_declared_unroll_is_the_count_the_sass_contract_holds() -> None:
    """A probe's ``unroll`` (operations per loop iteration, which the host divides its differences by) is
    also what its SASS contract counts (``{UNROLL}``): the host's number is the one the kernel is held to."""
    for path in sorted(PTX_DIR.glob("*/*.toml")):
        probes = load_family(path)
        if any(p.unroll is not None for p in probes):
            text = path.read_text(encoding="utf-8")
            assert "{UNROLL}" in text, f"{path.name} declares unroll but its contract counts no {{UNROLL}}"


def test_unroll_of_names_the_declared_count_and_refuses_a_kernel_without_one() -> None:
    from gpuprobe.kernels.registry import unroll_of

    declared = [p for p in all_probes() if p.unroll is not None]
    for probe in declared:
        assert unroll_of(probe.kernel) == probe.unroll
    undeclared = next(p for p in all_probes() if p.unroll is None)
    with pytest.raises(GpuprobeError, match=f"kernel {undeclared.kernel}: its declarations give unroll"):
        unroll_of(undeclared.kernel)


def test_a_rule_made_once_is_never_taken_for_a_table_that_only_looks_equal(tmp_path: Path) -> None:
    """Rules are made once per distinct table (a family's rules repeat for each probe): ``count = true`` equals
    ``count = 1`` to Python, yet after a family with ``count = 1`` loaded, one with ``count = true`` is refused."""
    assert load_family(write_family(tmp_path / "one", GOOD_FAMILY.replace("count = 4", "count = 1")))
    message = load_error(write_family(tmp_path / "true", GOOD_FAMILY.replace("count = 4", "count = true")))
    assert "'count' must be an integer" in message
