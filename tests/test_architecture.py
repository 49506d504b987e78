"""The package's shape: stages import only what lies below them, nothing imports in a circle, and each
family is one package with its kernels in the parallel ``ptx/<family>/`` folder (docs/architecture.md).

Imports are read from the source (every ``import``, at module level or inside a function), so a
cycle hidden in a function-level import is caught as well.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

import gpuprobe
from gpuprobe.families import catalog
from gpuprobe.kernels.registry import PTX_DIR, all_probes

PACKAGE = Path(gpuprobe.__file__).resolve().parent
REPO = PACKAGE.parent

#: What each stage may import, besides itself. The arrows point one way: from the CPU-only stages at
#: the bottom (core, kernels, judge, output) through the runner and the families to the run (measure);
#: judge holds expectations to the facts the probes declare (the kernels' registry); fleet reads stored results
#: files and judges them again as a run does, so sits above the families, whose invariants it needs. The
#: top-level modules (cli, the pytest plugin, the public API) may import anything.
ALLOWED: dict[str, frozenset[str]] = {
    "core": frozenset(),
    "kernels": frozenset({"core"}),
    "judge": frozenset({"core", "kernels"}),
    "output": frozenset({"core", "judge"}),  # results files only: what it needs of the probes is written in them
    "runner": frozenset({"core", "kernels"}),
    "families": frozenset({"core", "kernels", "judge", "output", "runner"}),
    "measure": frozenset({"core", "kernels", "judge", "output", "runner", "families"}),
    "fleet": frozenset({"core", "judge", "output", "families"}),
    # the simulated GPU (gpuprobe demo, the tests) stands in for the runner, and runs the session
    "simulated": frozenset({"core", "kernels", "judge", "output", "runner", "families", "measure"}),
}
TOP = frozenset({"__init__", "__main__", "api", "cli", "pytest_plugin"})
#: The modules of ``gpuprobe/families/`` that are not families: the toolkit they share, and the catalog.
CATALOG = "gpuprobe.families.catalog"


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@cache
def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(PACKAGE.rglob("*.py"))}


def _is_package(name: str) -> bool:
    return modules().get(name, Path()).name == "__init__.py"


@cache
def imports_of(name: str) -> frozenset[str]:
    """The gpuprobe modules ``name`` imports: ``from gpuprobe.x import y`` is ``gpuprobe.x.y`` when
    ``y`` is a module, else ``gpuprobe.x``."""
    path = modules()[name]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, f"{name}: relative import; gpuprobe imports absolutely"
            base = node.module or ""
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in modules())
    return frozenset(m for m in found if m in modules() and m != name)


def stage_of(name: str) -> str:
    """``gpuprobe.output.report`` -> ``output``; the top-level modules are their own name. A family's simulation
    (``gpuprobe.families.<family>.simulated``) lives in its folder but belongs to the simulated GPU's stage."""
    parts = name.split(".")
    if len(parts) == 4 and parts[1] == "families" and parts[3] == "simulated":
        return "simulated"
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_module_is_in_a_stage_or_on_top() -> None:
    stray = [m for m in modules() if stage_of(m) not in ALLOWED and stage_of(m) not in TOP]
    assert not stray, f"modules outside the stages: {stray} (see docs/architecture.md for where they go)"


@pytest.mark.parametrize("stage", sorted(ALLOWED))
def test_a_stage_imports_only_the_stages_below_it(stage: str) -> None:
    backward = [
        f"{name} -> {target}"
        for name in modules()
        if stage_of(name) == stage
        for target in imports_of(name)
        if stage_of(target) != stage and stage_of(target) not in ALLOWED[stage]
    ]
    assert not backward, f"{stage} may import only {sorted(ALLOWED[stage])}: {backward}"


def test_nothing_below_the_families_imports_the_catalog() -> None:
    importers = {name for name in modules() if CATALOG in imports_of(name)}
    assert all(stage_of(name) in ("measure", "fleet", "simulated", *TOP) for name in importers), sorted(importers)


def _cycle(graph: dict[str, frozenset[str]]) -> list[str] | None:
    """One import cycle of ``graph`` as a path that ends where it starts, else None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return [*path[path.index(target) :], target]
            if target not in state and (found := visit(target)):
                return found
        path.pop()
        state[node] = 2
        return None

    return next((found for node in sorted(graph) if node not in state and (found := visit(node))), None)


def test_no_import_cycles() -> None:
    # A package's own __init__ is imported on the way to any of its modules, so an edge from a module
    # to the package that holds it is not a cycle; every other edge counts.
    graph = {
        name: frozenset(t for t in imports_of(name) if not (_is_package(t) and name.startswith(t + ".")))
        for name in modules()
    }
    assert _cycle(graph) is None, " -> ".join(_cycle(graph) or [])


def test_the_cycle_finder_finds_a_cycle() -> None:
    graph = {"a": frozenset({"b"}), "b": frozenset({"c"}), "c": frozenset({"a"}), "d": frozenset({"a"})}
    assert _cycle(graph) == ["a", "b", "c", "a"]
    assert _cycle({"a": frozenset({"b"}), "b": frozenset()}) is None


def test_the_toolkit_imports_no_family() -> None:
    """The flat modules of ``gpuprobe/families/`` are what families share; they never reach into one."""
    toolkit = [m for m, p in modules().items() if m.startswith("gpuprobe.families.") and m.count(".") == 2
               and p.name != "__init__.py" and m != CATALOG]  # fmt: skip
    family_packages = {m for m in modules() if m.startswith("gpuprobe.families.") and _is_package(m)}
    reaching = [f"{m} -> {t}" for m in toolkit for t in imports_of(m) if any(t.startswith(f) for f in family_packages)]
    assert toolkit and not reaching, reaching


@pytest.mark.parametrize("family", sorted(catalog.BY_NAME))
def test_each_family_is_one_package_with_its_kernels_beside_it(family: str) -> None:
    package = PACKAGE / "families" / family
    assert (package / "__init__.py").is_file(), f"family {family} is not a package under gpuprobe/families/"
    declared = {p.family for p in all_probes() if p.source.parent == PTX_DIR / family}
    assert declared == {family}, f"ptx/{family}/ declares families {sorted(declared)}, not {family!r}"


def test_every_kernel_folder_belongs_to_a_family() -> None:
    packages = set(catalog.BY_NAME)
    folders = {path.name for path in PTX_DIR.iterdir() if path.is_dir()}
    assert folders - packages == {"common"}, "ptx/ holds a folder no family owns (shared kernels go in ptx/common/)"


def test_importing_gpuprobe_loads_nothing_but_its_public_names() -> None:
    """``import gpuprobe`` is cheap (the CLI, the pytest plugin and user scripts all start with it):
    the public names load their modules when first used."""
    code = "import sys, gpuprobe; print(sorted(m for m in sys.modules if m.startswith('gpuprobe.')))"
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert loaded.stdout.strip() == "[]"


@pytest.mark.parametrize("module", ["gpuprobe.families.catalog", "gpuprobe.measure.child"])
def test_a_measuring_process_loads_no_matplotlib_and_no_simulation(module: str) -> None:
    """Every family's process imports the catalog and draws nothing: matplotlib (a quarter of a second to
    import) loads when a plot is drawn (``gpuprobe.output.plots.new_figure``), not with the families; and
    the families' simulations, though each sits in its family's folder, load only with the simulated GPU."""
    code = (f"import sys, {module}; print(sorted(m for m in sys.modules if m == 'matplotlib' "
            "or m.startswith('gpuprobe.simulated') or m.endswith('.simulated')))")  # fmt: skip
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert loaded.stdout.strip() == "[]"


#: What every family folder holds (docs/architecture.md, "A new family: copy this folder"); besides these, a
#: family may keep helper modules named for what they hold, a ``plot.py``, and ``expectations.toml`` (every model's).
FAMILY_FILES = ("__init__.py", "simulated.py")


@pytest.mark.parametrize("family", catalog.FAMILIES, ids=lambda f: f.name)
def test_every_family_folder_has_the_same_shape(family) -> None:
    """A family is its folder (its ``FAMILY``, its simulation, its expectations), its kernels in ``ptx/<name>/``,
    and its two test modules: nothing of it lives anywhere else."""
    import importlib

    folder = PACKAGE / "families" / family.name
    missing = [name for name in FAMILY_FILES if not (folder / name).is_file()]
    assert not missing, f"gpuprobe/families/{family.name}/ lacks {missing}"
    assert importlib.import_module(f"gpuprobe.families.{family.name}").FAMILY is family
    strays = [p.name for p in folder.iterdir() if p.suffix not in (".py", ".toml") and p.name != "__pycache__"]
    assert not strays and not (folder / "expectations").exists(), f"gpuprobe/families/{family.name}/ holds {strays}"
    assert any((PTX_DIR / family.name).glob("*.toml")), f"ptx/{family.name}/ declares no probes"
    for tests in (REPO / "probes" / f"test_{family.name}.py", REPO / "tests" / f"test_{family.name}.py"):
        assert tests.is_file(), f"{tests.relative_to(REPO)} is missing"


def test_no_family_lives_outside_its_folder() -> None:
    """The parallel trees of before (expectations per family beside the models, simulated kernels beside the
    simulated GPU) are gone: a family's files are in its folder."""
    assert not [p for p in (PACKAGE / "expectations").iterdir() if p.is_dir()]
    assert not (PACKAGE / "simulated" / "kernels").exists()


@pytest.mark.parametrize("name", gpuprobe.__all__)
def test_every_public_name_resolves(name: str) -> None:
    assert getattr(gpuprobe, name) is not None
    assert name in dir(gpuprobe)


def test_an_unknown_public_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'run_everything'"):
        _ = gpuprobe.run_everything
