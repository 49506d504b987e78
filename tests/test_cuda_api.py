"""The launch path's use of CuPy, cuda-bindings and NVML, held against the installed packages themselves.

A stand-in module only shows that gpuprobe calls what the stand-in's author believed the API to be.
Here the API is the real one, introspected:

- :class:`ApiScan` parses the runner's modules that call them (:data:`SCANNED`, read as one source by
  :func:`runner_source`) and follows every attribute chain that starts at one of
  those libraries (an import, ``self._cp``, a local alias, a parameter such as ``nv``), through what
  their calls return, to the object it names in the imported module. Each must exist; each call must
  bind to the function's signature (``inspect.signature`` for Python functions, the signature Cython
  embeds as the docstring's first line otherwise); an attribute read on a value the scan cannot place
  is itself a failure, so a new call into the libraries cannot slip past. Deliberately breaking
  the runner's source shows each kind of mistake is caught.
- cuda-bindings converts a call's arguments before it looks for the driver, so with the driver
  library taken away (in a fresh process, its loader made to fail) every cuda-bindings call the runner
  makes runs for real up to the driver: a wrong argument type is a TypeError there, as it would be
  on a GPU. :class:`DriverDouble` then answers each call in the types its documentation returns.
- CuPy's ``getDeviceProperties()`` needs a GPU to call, and cuBLAS a library CI does not have; both
  are read statically from the compiled extension modules (see the tests' docstrings).

None of this needs a GPU or skips without one.
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import functools
import importlib
import importlib.util
import inspect
import itertools
import json
import os
import re
import subprocess
import sys
import types
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from gpuprobe.runner import cublaslt, cupy_launcher, device, launch_paths, tensor_map

RUNNER = Path(cupy_launcher.__file__).parent
REPO = RUNNER.parents[1]
# The runner's modules that call CuPy, cuda-bindings, pycuda or NVML, scanned as one source.
SCANNED = ("cupy_launcher", "launch_paths", "driver", "device", "nvml", "tensor_map")


@functools.cache
def _sources() -> tuple[tuple[str, str], ...]:
    """Each of :data:`SCANNED` as (file name, source), its imports of the others made ``pass`` (line for line):
    in one source a name then means what its own module defines, and the scan follows calls across them."""
    scanned = {f"gpuprobe.runner.{name}" for name in SCANNED}
    sources = []
    for name in SCANNED:
        path = RUNNER / f"{name}.py"
        lines = path.read_text().splitlines()
        for node in ast.walk(ast.parse("\n".join(lines))):
            if isinstance(node, ast.ImportFrom) and node.module in scanned:
                first = node.lineno - 1
                lines[first] = " " * node.col_offset + "pass"
                lines[first + 1 : node.end_lineno] = [""] * (node.end_lineno - node.lineno)
        sources.append((path.name, "\n".join(lines) + "\n"))
    return tuple(sources)


def runner_source() -> str:
    """The scanned modules as one source (see :func:`_sources`)."""
    return "".join(text for _, text in _sources())


def where(line: int) -> str:
    """``file:line`` of a line of :func:`runner_source`."""
    for name, text in _sources():
        count = text.count("\n")
        if line <= count:
            return f"{name}:{line}"
        line -= count
    return f"?:{line}"

# Packages whose API the scan checks; anything else (Python, NumPy, gpuprobe) is plain.
LIBRARIES = ("cupy", "cupy_backends", "cuda.bindings", "cuda.pathfinder", "pynvml", "pycuda")
OPTIONAL = ("pycuda",)  # may be absent where this runs: its uses are listed, not checked

# What a name holds where the runner's code does not say (a parameter typed Any, a lambda's parameter, a
# helper's result typed Any): the same thing wherever the runner uses the name. None: a plain value.
NAMES = {"nv": "pynvml", "runtime": "cupy.cuda.runtime", "h": None, "handle": None}


# ---- what values are ------------------------------------------------------------------------


@dataclass(frozen=True)
class Lib:
    """A library object (module, class, function, constant), or with ``instance`` an instance of the class."""

    obj: Any
    path: str
    instance: bool = False
    bound: bool = False  # a function reached through an instance: its first parameter (self) is given


@dataclass(frozen=True)
class Plain:
    """A value of Python, NumPy or gpuprobe itself: not checked. ``props`` marks CuPy's device properties."""

    props: bool = False


PLAIN = Plain()


@dataclass(frozen=True)
class Absent:
    """From an optional package not installed here."""

    path: str


@dataclass(frozen=True)
class Binary:
    """An extension module that cannot be imported here (cuBLAS without libcublas): read from its file."""

    path: str
    file: Path


@dataclass(frozen=True)
class Items:
    """A tuple of known positions."""

    items: tuple[Any, ...]


@dataclass(frozen=True)
class Many:
    """A list, dict or other container of one kind of value."""

    item: Any


@dataclass(frozen=True)
class Union:
    """One of several kinds of value (``a if c else b``, ``x | None``)."""

    members: tuple[Any, ...]


@dataclass(frozen=True)
class Own:
    """An instance of a class of the runner (its attributes from its assignments and methods)."""

    name: str


@dataclass(frozen=True)
class OwnClass:
    """A class of the runner itself: calling it makes an :class:`Own`."""

    name: str


@dataclass(frozen=True)
class OwnFunction:
    """A function or method of the runner: a call gives what its return annotation says."""

    node: ast.FunctionDef


UNKNOWN = None


# What the libraries' documentation says these return, where no signature line says it.
def _returns() -> dict[Any, Any]:
    import cupy
    import pynvml

    return {
        cupy.RawModule.get_function: cupy.RawKernel,
        cupy.cuda.Stream.end_capture: cupy.cuda.graph.Graph,
        cupy.cuda.get_current_stream: cupy.cuda.Stream,
        cupy.zeros: cupy.ndarray,
        cupy.asarray: cupy.ndarray,
        cupy.arange: cupy.ndarray,
        cupy.ndarray.view: cupy.ndarray,
        cupy.cuda.runtime.getDeviceProperties: Plain(props=True),
        pynvml.nvmlDeviceGetPciInfo: pynvml.nvmlPciInfo_t,
    }


def _attribute_types() -> dict[tuple[Any, str], Any]:
    import cupy

    return {(cupy.ndarray, "data"): cupy.cuda.MemoryPointer, (cupy.RawKernel, "kernel"): cupy.cuda.function.Function}


def _elements() -> dict[Any, Any]:
    """What the list a library function returns holds."""
    import pynvml

    # nvmlStructToFriendlyObject copies each field of the ctypes struct
    return {pynvml.nvmlDeviceGetComputeRunningProcesses: pynvml.c_nvmlProcessInfo_v3_t}


# Lazily loaded modules, and where they really are.
BINARY_ALIASES = {"cupy.cuda.cublas": "cupy_backends.cuda.libs.cublas"}


# ---- signatures -------------------------------------------------------------------------------

_SIGNATURE_LINE = re.compile(r"^(?:[\w.]*\.)?(?P<name>\w+)\((?P<params>.*)\)(?:\s*->\s*(?P<returns>[\w.\[\]]+))?\s*$")


def _split_top(text: str) -> list[str]:
    parts, depth, current = [], 0, ""
    for char in text:
        depth += char in "([{"
        depth -= char in ")]}"
        if char == "," and depth == 0:
            parts.append(current)
            current = ""
        else:
            current += char
    return [p.strip() for p in [*parts, current] if p.strip()]


def parse_signature_line(line: str, name: str) -> tuple[inspect.Signature, str | None] | None:
    """The signature Cython embeds as a docstring's first line (``memcpyAsync(intptr_t dst, ...) -> int``,
    C types before names, ``: annotations`` after), when that line names ``name``; its return type text."""
    match = _SIGNATURE_LINE.match(line.strip())
    if not match or match["name"] != name:
        return None
    parameters, kind = [], inspect.Parameter.POSITIONAL_OR_KEYWORD
    for piece in _split_top(match["params"].replace("\\*", "*")):
        if piece == "*":
            kind = inspect.Parameter.KEYWORD_ONLY
            continue
        declared, has_default, _ = piece.partition("=")
        declared = declared.split(":")[0].strip()
        token = declared.split()[-1]
        if token.startswith("**"):
            parameters.append(inspect.Parameter(token[2:], inspect.Parameter.VAR_KEYWORD))
        elif token.startswith("*") and len(declared.split()) == 1:
            parameters.append(inspect.Parameter(token[1:], inspect.Parameter.VAR_POSITIONAL))
            kind = inspect.Parameter.KEYWORD_ONLY
        else:
            default = None if has_default else inspect.Parameter.empty
            parameters.append(inspect.Parameter(token.lstrip("*"), kind, default=default))
    return inspect.Signature(parameters), match["returns"]


def signature_of(obj: Any, name: str) -> tuple[inspect.Signature, str | None] | None:
    """``obj``'s signature and declared return type: from inspect, else from the embedded docstring line."""
    doc = (getattr(obj, "__doc__", None) or "").strip().splitlines()
    parsed = parse_signature_line(doc[0], name) if doc else None
    try:
        return inspect.signature(obj), parsed[1] if parsed else None
    except (TypeError, ValueError):
        return parsed


def documented_outputs(function: Any) -> list[str]:
    """The values a cuda-bindings function returns after its CUresult, by the type names its
    docstring's Returns section gives (``device : :py:obj:`~.CUdevice```, ``pi : int``)."""
    doc = function.__doc__ or ""
    section = doc.split("Returns\n-------\n", 1)[1].split("\n\n", 1)[0] if "Returns\n-------" in doc else ""
    return [m[1] for m in re.finditer(r"^\w+ : (?::py:obj:`~\.)?([\w.]+)`?", section, re.M)]


# ---- the scan -----------------------------------------------------------------------------------


@dataclass
class Finding:
    """One use in the runner that the installed packages contradict, or that the scan cannot place."""

    line: int
    text: str
    problem: str

    def __str__(self) -> str:
        return f"{where(self.line)}: {self.text}: {self.problem}"


@dataclass
class ApiScan:
    """Every use of the libraries in the runner's source, resolved against the installed packages."""

    source: str
    problems: list[Finding] = field(default_factory=list)
    uses: set[str] = field(default_factory=set)  # dotted paths of the library objects used
    unchecked: set[str] = field(default_factory=set)  # uses of optional packages not installed here
    property_keys: set[str] = field(default_factory=set)  # keys read from CuPy's getDeviceProperties()
    shapeless: set[str] = field(default_factory=set)  # cuda-bindings classes made whose signature nothing states
    exempt_functions: frozenset[str] = frozenset()

    def __post_init__(self) -> None:
        self.tree = ast.parse(self.source)
        self.returns, self.attribute_types, self.elements = _returns(), _attribute_types(), _elements()
        self.module_env: dict[str, Any] = {}
        self.functions = {n.name: n for n in self.tree.body if isinstance(n, ast.FunctionDef)}
        self.classes = {n.name: n for n in self.tree.body if isinstance(n, ast.ClassDef)}
        self.class_attributes: dict[str, dict[str, Any]] = {name: {} for name in self.classes}
        self.recording = False
        self.function_name = ""
        for _ in range(2):  # the first pass learns what ``self.x`` holds, the second records
            self._scan_module()
            self.recording = True

    # -- bookkeeping
    def _problem(self, node: ast.AST, problem: str) -> None:
        if self.recording and self.function_name not in self.exempt_functions:
            finding = Finding(getattr(node, "lineno", 0), ast.unparse(node)[:90], problem)
            if all(str(f) != str(finding) for f in self.problems):
                self.problems.append(finding)

    def _root(self, dotted: str, node: ast.AST) -> Any:
        if not dotted.startswith(LIBRARIES):
            return PLAIN
        try:
            return Lib(importlib.import_module(dotted), dotted)
        except ModuleNotFoundError:
            if dotted.startswith(OPTIONAL):
                return Absent(dotted)
            self._problem(node, f"cannot import {dotted}")
            return UNKNOWN

    # -- statements
    def _scan_module(self) -> None:
        env = self.module_env
        for name in [*self.functions, *self.classes]:
            env.setdefault(name, OwnFunction(self.functions[name]) if name in self.functions else OwnClass(name))
        for node in self.tree.body:
            self.function_name = ""
            if isinstance(node, ast.FunctionDef):
                self._scan_function(node, env, owner=None)
            elif isinstance(node, ast.ClassDef):
                self._scan_class(node, env)
            else:
                self._statements([node], env)

    def _scan_class(self, node: ast.ClassDef, env: dict[str, Any]) -> None:
        attributes = self.class_attributes.setdefault(node.name, {})
        for item in node.body:
            if isinstance(item, ast.FunctionDef):
                attributes.setdefault(item.name, OwnFunction(item))
            elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                attributes[item.target.id] = self._annotation(item.annotation, env)
        for item in node.body:
            if isinstance(item, ast.FunctionDef):
                self._scan_function(item, env, owner=node.name)

    def _scan_function(self, node: ast.FunctionDef, outer: dict[str, Any], owner: str | None) -> None:
        self.function_name = node.name
        env = dict(outer)
        arguments = node.args
        for position, argument in enumerate([*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]):
            if owner and position == 0:
                env[argument.arg] = Own(owner)
            else:
                env[argument.arg] = self._parameter(argument, env)
        for extra in (arguments.vararg, arguments.kwarg):
            if extra:
                env[extra.arg] = PLAIN
        for default in [*arguments.defaults, *arguments.kw_defaults]:
            if default is not None:
                self._type(default, env)
        self._statements(node.body, env, owner)

    def _parameter(self, argument: ast.arg, env: dict[str, Any]) -> Any:
        if argument.annotation is not None and ast.unparse(argument.annotation) != "Any":
            return self._annotation(argument.annotation, env)
        return self._named(argument.arg, argument)

    def _named(self, name: str, node: ast.AST) -> Any:
        if name not in NAMES:
            return UNKNOWN
        return PLAIN if NAMES[name] is None else self._resolve_dotted(NAMES[name], node)

    def _resolve_dotted(self, dotted: str, node: ast.AST) -> Any:
        module, *attributes = dotted.split(".", 1)
        value = self._root(module, node)
        for name in attributes[0].split(".") if attributes else []:
            value = self._attribute(value, name, node)
        return value

    def _statements(self, body: list[ast.stmt], env: dict[str, Any], owner: str | None = None) -> None:
        for node in body:
            self._statement(node, env, owner)

    def _statement(self, node: ast.stmt, env: dict[str, Any], owner: str | None) -> None:
        if isinstance(node, ast.Import | ast.ImportFrom):
            self._import(node, env)
        elif isinstance(node, ast.Assign):
            value = self._type(node.value, env)
            for target in node.targets:
                self._bind(target, value, env, owner)
        elif isinstance(node, ast.AnnAssign):
            value = self._type(node.value, env) if node.value is not None else UNKNOWN
            declared = self._annotation(node.annotation, env)
            self._bind(node.target, declared if declared is not UNKNOWN else value, env, owner)
        elif isinstance(node, ast.AugAssign):
            self._type(node.value, env)
            self._type(node.target, env)
        elif isinstance(node, ast.For):
            self._bind(node.target, self._element(node.iter, env), env, owner)
            self._statements(node.body + node.orelse, env, owner)
        elif isinstance(node, ast.With):
            for item in node.items:
                value = self._type(item.context_expr, env)
                if item.optional_vars is not None:
                    self._bind(item.optional_vars, value, env, owner)
            self._statements(node.body, env, owner)
        elif isinstance(node, ast.Try):
            self._statements(node.body, env, owner)
            for handler in node.handlers:
                if handler.type is not None:
                    self._type(handler.type, env)
                if handler.name:
                    env[handler.name] = PLAIN
                self._statements(handler.body, env, owner)
            self._statements(node.orelse + node.finalbody, env, owner)
        elif isinstance(node, ast.If | ast.While):
            self._type(node.test, env)
            self._statements(node.body + node.orelse, env, owner)
        elif isinstance(node, ast.FunctionDef):
            name = self.function_name
            self._scan_function(node, env, owner=None)
            self.function_name = name
        elif isinstance(node, ast.ClassDef):
            self._scan_class(node, env)
        else:  # Expr, Return, Raise, Assert, Delete, Pass, ...
            for child in ast.iter_child_nodes(node):
                if isinstance(child, ast.expr):
                    self._type(child, env)

    def _import(self, node: ast.Import | ast.ImportFrom, env: dict[str, Any]) -> None:
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    env[alias.asname] = self._root(alias.name, node)
                else:
                    top = alias.name.split(".")[0]
                    env[top] = self._root(top, node) if alias.name.startswith(LIBRARIES) else PLAIN
            return
        package = node.module or ""
        for alias in node.names:
            dotted = f"{package}.{alias.name}"
            if not package.startswith(LIBRARIES):
                value = PLAIN
            elif importlib.util.find_spec(package) is not None and _is_module(dotted):
                value = self._root(dotted, node)
            else:
                value = self._attribute(self._root(package, node), alias.name, node)
            env[alias.asname or alias.name] = value

    def _bind(self, target: ast.expr, value: Any, env: dict[str, Any], owner: str | None) -> None:
        if isinstance(target, ast.Name):
            env[target.id] = self._named(target.id, target) if value is UNKNOWN else value
        elif isinstance(target, ast.Tuple | ast.List):
            items = value.items if isinstance(value, Items) and len(value.items) == len(target.elts) else None
            for position, element in enumerate(target.elts):
                if isinstance(element, ast.Starred):
                    self._bind(element.value, PLAIN, env, owner)
                elif items is not None:
                    self._bind(element, items[position], env, owner)
                else:
                    self._bind(element, PLAIN if value == PLAIN else self._item(value), env, owner)
        elif isinstance(target, ast.Attribute):
            base = self._type(target.value, env)
            if isinstance(base, Own) and owner == base.name:
                known = self.class_attributes[owner].get(target.attr, UNKNOWN)
                if known is UNKNOWN or isinstance(known, OwnFunction):
                    self.class_attributes[owner][target.attr] = value
            else:
                self._attribute(base, target.attr, target)
                if isinstance(base, Lib) and base.instance and not _settable(base.obj, target.attr):
                    self._problem(target, f"{base.obj.__qualname__}.{target.attr} cannot be set")
        elif isinstance(target, ast.Subscript):
            self._type(target, env)

    def _item(self, value: Any) -> Any:
        """One element of an iterable of ``value``'s kind."""
        if isinstance(value, Many):
            return value.item
        if isinstance(value, Items):
            return _union(value.items)
        if isinstance(value, Absent):
            return value
        return PLAIN if value == PLAIN else UNKNOWN

    def _element(self, iterable: ast.expr, env: dict[str, Any]) -> Any:
        if isinstance(iterable, ast.Call) and ast.unparse(iterable.func) == "zip":
            return Items(tuple(self._item(self._type(a, env)) for a in iterable.args))
        value = self._type(iterable, env)
        if isinstance(iterable, ast.Call):
            function = self._type(iterable.func, env)
            if isinstance(function, Lib) and _key(function.obj) in self.elements:
                return Lib(self.elements[_key(function.obj)], f"{function.path}()[]", instance=True)
        return self._item(value)

    # -- annotations
    def _annotation(self, node: ast.expr, env: dict[str, Any]) -> Any:
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            return self._annotation(ast.parse(node.value, mode="eval").body, env)
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return _union((self._annotation(node.left, env), self._annotation(node.right, env)))
        if isinstance(node, ast.Subscript):
            container, inner = ast.unparse(node.value), node.slice
            parts = inner.elts if isinstance(inner, ast.Tuple) else [inner]
            if container == "tuple":
                return Items(tuple(self._annotation(p, env) for p in parts))
            if container in ("dict", "list", "set", "frozenset"):
                return Many(self._annotation(parts[-1], env))
            return PLAIN
        if ast.unparse(node) == "Any":
            return UNKNOWN
        if isinstance(node, ast.Name) and node.id in self.classes:
            return Own(node.id)
        with self._quiet():
            value = self._type(node, env)
        if isinstance(value, Lib) and isinstance(value.obj, type):
            return Lib(value.obj, value.path, instance=True)
        return PLAIN

    @contextlib.contextmanager
    def _quiet(self) -> Iterator[None]:
        recording, self.recording = self.recording, False
        try:
            yield
        finally:
            self.recording = recording

    # -- expressions
    def _type(self, node: ast.expr | None, env: dict[str, Any]) -> Any:
        if node is None:
            return PLAIN
        if isinstance(node, ast.Name):
            if node.id in env:
                return env[node.id]
            return PLAIN if hasattr(builtins, node.id) else UNKNOWN
        if isinstance(node, ast.Attribute):
            return self._attribute(self._type(node.value, env), node.attr, node)
        if isinstance(node, ast.Call):
            return self._call(node, env)
        if isinstance(node, ast.Subscript):
            return self._subscript(node, env)
        if isinstance(node, ast.IfExp):
            self._type(node.test, env)
            return _union((self._type(node.body, env), self._type(node.orelse, env)))
        if isinstance(node, ast.BoolOp):
            return _union(tuple(self._type(v, env) for v in node.values))
        if isinstance(node, ast.Tuple | ast.List):
            items = tuple(self._type(e, env) for e in node.elts)
            starred = any(isinstance(e, ast.Starred) for e in node.elts)
            return Many(_union(items)) if starred else Items(items)
        if isinstance(node, ast.ListComp | ast.GeneratorExp | ast.SetComp | ast.DictComp):
            inner = dict(env)
            for generator in node.generators:
                self._bind(generator.target, self._element(generator.iter, inner), inner, None)
                for condition in generator.ifs:
                    self._type(condition, inner)
            if isinstance(node, ast.DictComp):
                self._type(node.key, inner)
                return Many(self._type(node.value, inner))
            return Many(self._type(node.elt, inner))
        if isinstance(node, ast.Lambda):
            inner = dict(env)
            for argument in node.args.args:
                inner[argument.arg] = self._parameter(argument, inner)
            self._type(node.body, inner)
            return PLAIN
        if isinstance(node, ast.Starred):
            return self._type(node.value, env)
        for child in ast.iter_child_nodes(node):  # constants, operators, f-strings, dicts, ...
            if isinstance(child, ast.expr):
                self._type(child, env)
        return PLAIN

    def _subscript(self, node: ast.Subscript, env: dict[str, Any]) -> Any:
        base = self._type(node.value, env)
        self._type(node.slice, env)
        if isinstance(base, Plain) and base.props:
            self._property_key(node.slice, node)
            return PLAIN
        if isinstance(base, Many):
            return base.item
        if isinstance(base, Items):
            index = node.slice
            if isinstance(index, ast.Constant) and isinstance(index.value, int) and index.value < len(base.items):
                return base.items[index.value]
            return base if isinstance(index, ast.Slice) else _union(base.items)
        if isinstance(base, Lib) and base.instance and base.obj.__name__ == "ndarray":
            return base  # a CuPy array's slice is an array
        if base == PLAIN or isinstance(base, Absent):
            return base
        return UNKNOWN

    def _property_key(self, key: ast.expr, node: ast.AST) -> None:
        if isinstance(key, ast.Constant) and isinstance(key.value, str):
            self.property_keys.add(key.value)
        else:
            self._problem(node, "a device property read by a key the scan cannot see")

    def _attribute(self, base: Any, name: str, node: ast.AST) -> Any:
        if isinstance(base, Union):
            found = [m for m in base.members if self._has(m, name)]
            if not found:
                self._problem(node, f"none of {_describe(base)} has .{name}")
                return UNKNOWN
            with self._quiet():
                return _union(tuple(self._attribute(m, name, node) for m in found))
        if base == PLAIN or isinstance(base, Plain | Many | Items | OwnClass):
            return PLAIN
        if isinstance(base, Absent):
            if self.recording:
                self.unchecked.add(f"{base.path}.{name}")
            return Absent(f"{base.path}.{name}")
        if isinstance(base, Own):
            attributes = self.class_attributes[base.name]
            if name not in attributes:
                self._problem(node, f"{base.name} has no attribute {name}")
                return UNKNOWN
            return attributes[name]
        if isinstance(base, Binary):
            return self._binary_attribute(base, name, node)
        if isinstance(base, Lib):
            return self._library_attribute(base, name, node)
        self._problem(node, f"what holds .{name} is not known to the scan (see NAMES and _returns)")
        return UNKNOWN

    def _has(self, value: Any, name: str) -> bool:
        if isinstance(value, Lib):
            return _instance_has(value.obj, name) if value.instance else hasattr(value.obj, name)
        return value == PLAIN or isinstance(value, Plain | Absent | Own | OwnClass)

    def _library_attribute(self, base: Lib, name: str, node: ast.AST) -> Any:
        path = f"{base.path}.{name}"
        if base.instance:
            if not _instance_has(base.obj, name):
                self._problem(node, f"{base.obj.__module__}.{base.obj.__qualname__} has no attribute {name}")
                return UNKNOWN
            self._use(f"{base.obj.__module__}.{base.obj.__qualname__}.{name}")
            if (base.obj, name) in self.attribute_types:
                return Lib(self.attribute_types[base.obj, name], path, instance=True)
            member = inspect.getattr_static(base.obj, name, None)
            return Lib(getattr(base.obj, name), path, bound=True) if callable(member) else UNKNOWN
        try:
            value = getattr(base.obj, name)
        except ImportError:  # a lazily loaded module whose library is not installed here
            if path in BINARY_ALIASES:
                spec = importlib.util.find_spec(BINARY_ALIASES[path])
                return Binary(path, Path(spec.origin))
            self._problem(node, f"{path} cannot be loaded here")
            return UNKNOWN
        except AttributeError:
            self._problem(node, f"{base.path} has no attribute {name}")
            return UNKNOWN
        self._use(path)
        return Lib(value, path)

    def _binary_attribute(self, base: Binary, name: str, node: ast.AST) -> Any:
        path = f"{base.path}.{name}"
        if name in ("__name__", "__file__"):
            return PLAIN
        if name not in _embedded_signatures(base.file):
            self._problem(node, f"{base.file.name} has no function {name}")
            return UNKNOWN
        self._use(path)
        return Binary(path, base.file)

    def _use(self, path: str) -> None:
        if self.recording:
            self.uses.add(path)

    # -- calls
    def _call(self, node: ast.Call, env: dict[str, Any]) -> Any:
        text = ast.unparse(node.func)
        constant = node.args[1].value if len(node.args) > 1 and isinstance(node.args[1], ast.Constant) else None
        if text == "getattr" and isinstance(constant, str):
            return self._attribute(self._type(node.args[0], env), constant, node)
        if text == "importlib.import_module" and isinstance(node.args[0], ast.Constant):
            return self._root(node.args[0].value, node)
        function = self._type(node.func, env)
        arguments = [self._type(a, env) for a in node.args]
        for keyword in node.keywords:
            self._type(keyword.value, env)
        if isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            receiver = self._type(node.func.value, env)
            if isinstance(receiver, Plain) and receiver.props:
                self._property_key(node.args[0], node)
                return PLAIN
        if isinstance(function, OwnFunction) and function.node.name == "driver_call":
            return self._driver_call(node, arguments)
        if isinstance(function, OwnClass):
            return Own(function.name)
        if isinstance(function, OwnFunction):
            returns = function.node.returns
            return self._annotation(returns, self.module_env) if returns is not None else PLAIN
        if isinstance(function, Lib):
            return self._library_call(function, node)
        if isinstance(function, Binary):
            self._check_arguments(_embedded_signatures(function.file)[function.path.rsplit(".", 1)[1]], node, 0)
            return UNKNOWN
        if isinstance(function, Absent):
            return function
        return PLAIN if function == PLAIN or isinstance(function, Plain) else UNKNOWN

    def _library_call(self, function: Lib, node: ast.Call) -> Any:
        obj, name = function.obj, function.path.rsplit(".", 1)[-1]
        if function.instance:  # a callable object: its class's __call__, less self
            self._check_found(signature_of(obj.__call__, "__call__"), node, function.path, skip=1)
            return UNKNOWN
        found = signature_of(obj, obj.__name__ if isinstance(obj, type) else name)
        self._check_found(found, node, function.path, 1 if function.bound else 0, isinstance(obj, type))
        if isinstance(obj, type):
            return Lib(obj, function.path, instance=True)
        if _key(obj) in self.returns:
            declared = self.returns[_key(obj)]
            return declared if isinstance(declared, Plain) else Lib(declared, f"{function.path}()", instance=True)
        module = sys.modules.get(_module_name(obj))
        if _module_name(obj).startswith("cuda.bindings"):
            outputs = ["CUresult", *documented_outputs(obj)]
            return Items(tuple(_instance_of(getattr(module, t, None), t) for t in outputs))
        declared = found[1] if found else None
        if declared and isinstance(getattr(module, declared, None), type):
            return Lib(getattr(module, declared), f"{function.path}()", instance=True)
        return PLAIN if declared in ("int", "str", "tuple", "intptr_t", "size_t", "bool", "float") else UNKNOWN

    def _driver_call(self, node: ast.Call, arguments: list[Any]) -> Any:
        """``driver_call(driver.cuX, *args)``: ``cuX(*args)``, its CUresult taken off."""
        function = arguments[0] if arguments else UNKNOWN
        if not isinstance(function, Lib):
            self._problem(node, "driver_call of something the scan cannot place")
            return UNKNOWN
        inner = ast.Call(func=node.args[0], args=node.args[1:], keywords=node.keywords)
        ast.copy_location(inner, node)
        outputs = self._library_call(function, inner)
        values = outputs.items[1:] if isinstance(outputs, Items) else ()
        return values[0] if len(values) == 1 else Items(tuple(values))

    def _check_found(self, found: Any, node: ast.Call, path: str, skip: int, constructor: bool = False) -> None:
        if found is None:
            if constructor and path.startswith("cuda.bindings"):  # a struct that states no constructor
                self.shapeless.add(path)  # the driver-path run makes one for real
            else:
                self._problem(node, f"{path}: no signature to check the call against")
            return
        self._check_arguments(found[0], node, skip)

    def _check_arguments(self, signature: inspect.Signature, node: ast.Call, skip: int) -> None:
        if any(isinstance(a, ast.Starred) for a in node.args) or any(k.arg is None for k in node.keywords):
            return  # the count is a run-time matter: the driver-path test runs those calls
        try:
            signature.bind(*[None] * (skip + len(node.args)), **{k.arg: None for k in node.keywords if k.arg})
        except TypeError as exc:
            self._problem(node, f"does not fit {signature} ({exc})")


def _is_module(dotted: str) -> bool:
    try:
        return importlib.util.find_spec(dotted) is not None
    except (ImportError, ValueError):
        return False


def _key(obj: Any) -> Any:
    """What identifies a library function in the tables (a bound or unbound method by its function)."""
    return getattr(obj, "__func__", obj)


def _module_name(obj: Any) -> str:
    """The module a library function is defined in (a method descriptor: its class's)."""
    owner = getattr(obj, "__objclass__", None)
    return getattr(obj, "__module__", None) or getattr(owner, "__module__", "") or ""


def _instance_of(found: Any, name: str) -> Any:
    return Lib(found, name, instance=True) if isinstance(found, type) else PLAIN


def _instance_has(cls: type, name: str) -> bool:
    """``name`` on instances of ``cls``: a class member, or an instance attribute its docstring lists
    (Cython classes document ``~Stream.ptr (intptr_t)`` that way, and set it per instance)."""
    if hasattr(cls, name):
        return True
    doc = inspect.getdoc(cls) or ""
    return re.search(rf"(~{cls.__name__}\.{name}\b|^\s*{name} \()", doc, re.M) is not None


def _settable(cls: type, name: str) -> bool:
    """Whether instances of ``cls`` take an assignment to ``name``: a property with a setter, a Cython
    attribute whose documentation says "Can be set", or a field of a cuda-bindings struct (the driver-path
    test sets those on a real one)."""
    member = inspect.getattr_static(cls, name, None)
    if isinstance(member, property):
        return member.fset is not None
    if inspect.isgetsetdescriptor(member) or inspect.ismemberdescriptor(member):
        return "Can be set" in (member.__doc__ or "") or cls.__module__.startswith("cuda.bindings")
    return member is None or not callable(member)


def _union(members: tuple[Any, ...]) -> Any:
    flat: list[Any] = []
    for member in members:
        for part in member.members if isinstance(member, Union) else (member,):
            if part not in flat:
                flat.append(part)
    known = [m for m in flat if m is not UNKNOWN]
    if not known:
        return UNKNOWN
    return known[0] if len(known) == 1 else Union(tuple(known))


def _describe(value: Any) -> str:
    if isinstance(value, Union):
        return ", ".join(_describe(m) for m in value.members)
    return value.path if isinstance(value, Lib) else type(value).__name__


@functools.cache
def _embedded_signatures(file: Path) -> dict[str, inspect.Signature]:
    """The function signatures Cython embedded in an extension module's docstrings, from its file."""
    found: dict[str, inspect.Signature] = {}
    for raw in re.findall(rb"[\x20-\x7e]+", file.read_bytes()):
        match = _SIGNATURE_LINE.match(raw.decode())
        if match and match["name"] not in found:
            parsed = parse_signature_line(raw.decode(), match["name"])
            if parsed:
                found[match["name"]] = parsed[0]
    return found


@pytest.fixture(scope="module")
def scan() -> ApiScan:
    return ApiScan(runner_source(), exempt_functions=_pycuda_exemption())


def _pycuda_exemption() -> frozenset[str]:
    """The pycuda path is checked only where pycuda is installed (it is optional, and CI lacks it)."""
    return frozenset() if importlib.util.find_spec("pycuda") else frozenset({"pycuda_launch"})


# ---- the tests ----------------------------------------------------------------------------------


def test_every_library_use_in_the_runner_exists_and_takes_the_arguments_it_is_given(scan: ApiScan) -> None:
    assert not scan.problems, "\n".join(str(p) for p in scan.problems)


def test_the_scan_covers_the_launch_path(scan: ApiScan) -> None:
    import pynvml

    process_record = pynvml.c_nvmlProcessInfo_v3_t.__qualname__  # an alias of an older struct's name
    expected = {
        "cupy.RawModule",
        "cupy._core.raw.RawKernel.max_dynamic_shared_size_bytes",
        "cupy.cuda.function.Function.ptr",
        "cupy.cuda.runtime.memcpyAsync",
        "cupy.cuda.driver.occupancyMaxActiveBlocksPerMultiprocessor",
        "cupy.cuda.stream.Stream.end_capture",
        "cupy.cuda.graph.Graph.upload",
        "cupy.cuda.cublas.gemmEx",
        "cupy.cuda.alloc_pinned_memory",
        "cuda.bindings.driver.cuLaunchKernel",
        "cuda.bindings.driver.cuDeviceGetUuid",
        "cuda.bindings.driver.cuOccupancyMaxActiveClusters",
        "cuda.bindings.driver.CUlaunchConfig.hStream",
        "pynvml.nvmlDeviceGetComputeRunningProcesses",
        f"pynvml.{process_record}.pid",
        "pynvml.nvmlDeviceGetEccMode",
        "pynvml.nvmlPciInfo_t.busId",
        "pynvml.NVML_CLOCK_SM",
    }
    assert expected <= scan.uses, sorted(expected - scan.uses)
    assert not scan.unchecked or all(u.startswith("pycuda") for u in scan.unchecked)


@pytest.mark.parametrize(
    ("old", "new", "problem"),
    [
        ("runtime.memcpyAsync(dst.data.ptr,", "runtime.memcpyAsynk(dst.data.ptr,", "has no attribute memcpyAsynk"),
        ("runtime.memcpyDeviceToDevice, stream)", "runtime.memcpyDeviceToDevice, stream, 0)", "does not fit"),
        ("nv.nvmlDeviceGetPowerUsage(h)", "nv.nvmlDeviceGetPowerUsage(h, 0)", "does not fit"),
        ("graph.upload(stream)", "graph.uplode(stream)", "Graph has no attribute uplode"),
        ("config.sharedMemBytes = shared_bytes", "config.sharedMem = shared_bytes", "no attribute sharedMem"),
        ("compute_type, -1)", "compute_type)", "does not fit"),
        ("driver_call(driver.cuInit, 0)", "driver_call(driver.cuInit, 0, 0)", "does not fit"),
        ("function.kernel.ptr, threads", "function.kernel.pointer, threads", "no attribute pointer"),
        ("p.pid for p", "p.pids for p", "no attribute pids"),
        ("args).launch", "args).lunch", "DriverLaunch has no attribute lunch"),
        (".preferred_shared_memory_carveout = 0", ".num_regs = 0", "RawKernel.num_regs cannot be set"),
        ("return int(buffer.data.ptr)", "return int(mystery.data.ptr)", "not known to the scan"),
    ],
)
def test_a_wrong_use_of_the_libraries_is_caught(old: str, new: str, problem: str) -> None:
    source = runner_source()
    assert old in source
    broken = ApiScan(source.replace(old, new, 1), exempt_functions=_pycuda_exemption())
    assert any(problem in str(p) for p in broken.problems), [str(p) for p in broken.problems]


def test_signature_lines_are_read_as_cython_writes_them() -> None:
    signature, returns = parse_signature_line(
        "RawModule.get_function(self, str name) -> RawKernel", "get_function"
    ) or (None, None)
    assert list(signature.parameters) == ["self", "name"] and returns == "RawKernel"
    signature, _ = parse_signature_line(
        "cuOccupancyMaxActiveClusters(func, CUlaunchConfig config: Optional[CUlaunchConfig])",
        "cuOccupancyMaxActiveClusters",
    ) or (None, None)
    assert list(signature.parameters) == ["func", "config"]
    signature, _ = parse_signature_line("f(a, \\*, int shared_mem=0, **kwargs)", "f") or (None, None)
    signature.bind(1, shared_mem=2, other=3)
    with pytest.raises(TypeError):
        signature.bind(1, 2)
    assert parse_signature_line("other(a)", "f") is None


# ---- CuPy's device properties, statically ---------------------------------------------------------


@functools.cache
def cython_string_constants(file: Path) -> set[str]:
    """The string constants of a compiled Cython module.

    Cython 3 keeps a module's string constants in one zlib-compressed blob, cut into strings by an
    array of their lengths (uint32, stored after the blob); older Cython stores each as its own C
    string. Both are read: every NUL-delimited string, and every compressed table whose lengths are
    found right after it and add up to exactly the blob's size (which is what makes the cut sound)."""
    data = file.read_bytes()
    found = {s.decode() for s in re.findall(rb"[\x20-\x7e]{2,}", data)}
    for start in (m.start() for m in re.finditer(rb"\x78[\x01\x5e\x9c\xda]", data)):
        inflater = zlib.decompressobj()
        try:
            blob = inflater.decompress(data[start:])
        except zlib.error:
            continue
        if not inflater.eof or len(blob) < 64:
            continue
        end = len(data) - len(inflater.unused_data)
        for table in range(end + (-end) % 4, min(end + 512, len(data) - 4), 4):
            words = np.frombuffer(data, dtype="<u4", count=min(len(blob), (len(data) - table) // 4), offset=table)
            sums = np.cumsum(words, dtype=np.int64)
            last = int(np.searchsorted(sums, len(blob)))
            if last < len(sums) and sums[last] == len(blob) and words[: last + 1].min() > 0:
                bounds = [0, *sums[: last + 1].tolist()]
                found |= {blob[a:b].decode("utf-8", "replace") for a, b in itertools.pairwise(bounds)}
                break
    return found


def _runtime_extension() -> Path:
    return Path(importlib.util.find_spec("cupy_backends.cuda.api.runtime").origin)


def test_every_device_property_the_runner_reads_is_one_cupys_cuda13_build_fills(scan: ApiScan) -> None:
    """``getDeviceProperties`` builds its dict in Cython with string-literal keys, one statement per field
    (and, in a CUDA 13 build, fills ``clockRate``, ``memoryClockRate`` and a few others that CUDA 13
    dropped from cudaDeviceProp through cudaDeviceGetAttribute). Cython's compile-time ``IF
    CUPY_CUDA_VERSION`` removes the branches a build does not take, with their literals. So a key the runner
    reads is one this build can produce only if it is among the string constants compiled into the
    installed runtime extension (cupy_backends/cuda/api/runtime*.so). The keys are taken from the runner's
    source by the scan (subscripts and ``.get`` on what getDeviceProperties returned), not listed here."""
    constants = cython_string_constants(_runtime_extension())
    assert {"multiProcessorCount", "l2CacheSize", "clockRate", "memoryClockRate"} <= scan.property_keys
    missing = scan.property_keys - constants
    assert not missing, f"not in CuPy's runtime module: {sorted(missing)}"


def test_a_device_property_key_cupy_does_not_fill_is_caught() -> None:
    source = runner_source().replace('props["l2CacheSize"]', 'props["l2CacheBytes"]', 1)
    keys = ApiScan(source, exempt_functions=_pycuda_exemption()).property_keys
    assert keys - cython_string_constants(_runtime_extension()) == {"l2CacheBytes"}


def test_the_string_table_reader_tells_a_key_from_a_part_of_one() -> None:
    constants = cython_string_constants(_runtime_extension())
    assert {"clockRate", "memoryClockRate", "sharedMemPerBlockOptin", "pciBusID"} <= constants
    assert "ClockRate" not in constants and "clockRateX" not in constants  # no substrings, no inventions


def test_cupys_cooperative_launch_would_shrink_a_grid_so_the_launcher_refuses_it_first() -> None:
    """Why ``CupyLauncher`` checks a cooperative grid itself: CuPy's installed launch code (its compiled
    cupy/cuda/function module) reduces a grid above occupancy x SMs, with a warning, rather than refuse it."""
    constants = cython_string_constants(Path(importlib.util.find_spec("cupy.cuda.function").origin))
    assert "The grid size will be reduced from {} to {}, as the specified grid size exceeds the limit." in constants


# ---- cuBLAS, statically where libcublas is absent --------------------------------------------------


def test_gemmex_takes_the_19_arguments_the_runner_passes(scan: ApiScan) -> None:
    """CuPy's cublas module cannot be imported without libcublas (CI has none), but the signature Cython
    embeds in ``gemmEx``'s docstring is in the extension module's file; the scan checks the call against it."""
    file = Path(importlib.util.find_spec("cupy_backends.cuda.libs.cublas").origin)
    gemm = _embedded_signatures(file)["gemmEx"]
    assert len(gemm.parameters) == 19 and list(gemm.parameters)[-2:] == ["computeType", "algo"]
    assert "cupy.cuda.cublas.gemmEx" in scan.uses


def test_graph_capture_is_in_relaxed_mode() -> None:
    """``graph_replay`` captures CuPy launches, during which CuPy asks the runtime for the current device:
    allowed only in relaxed capture mode, which is ``begin_capture()``'s default as CuPy documents it."""
    import cupy

    documented = " ".join(cupy.cuda.Stream.begin_capture.__doc__.split())
    assert "Default is :data:`~cupy.cuda.runtime.streamCaptureModeRelaxed`" in documented
    assert "stream.begin_capture()" in runner_source()  # no mode given


def test_the_cublas_module_cupy_loads_lazily_is_the_one_read() -> None:
    import cupy

    assert "from cupy_backends.cuda.libs import cublas" in inspect.getsource(cupy.cuda.__getattr__)


def test_gemm_data_types_are_cudas() -> None:
    """Every GEMM type's A and B type and C type, and cuBLASLt's scale type, are CUDA 13's cudaDataType values
    (library_types.h, as cuda-bindings' runtime module has them): s8 is CUDA_R_8I in, CUDA_R_32I out; e4m3 is
    CUDA_R_8F_E4M3 in, CUDA_R_16BF out."""
    import cupy
    from cuda.bindings import runtime as cuda_runtime

    runtime = cupy.cuda.runtime
    assert [cupy_launcher._GEMM_TYPES[t][0] for t in ("f16", "bf16", "tf32")] == [
        runtime.CUDA_R_16F,
        runtime.CUDA_R_16BF,
        runtime.CUDA_R_32F,
    ]
    kinds = {"f16": ("16F", "16F"), "bf16": ("16BF", "16BF"), "tf32": ("32F", "32F"), "f32": ("32F", "32F"),
             "s8": ("8I", "32I"), "e4m3": ("8F_E4M3", "16BF")}  # fmt: skip
    names = {name for pair in kinds.values() for name in pair}
    value = {name: int(getattr(cuda_runtime.cudaDataType, f"CUDA_R_{name}")) for name in names}
    assert {t: types[:2] for t, types in cupy_launcher._GEMM_TYPES.items()} == {
        t: (value[a], value[c]) for t, (a, c) in kinds.items()
    }
    assert value["32F"] == cublaslt.CUDA_R_32F


# ---- cuda-bindings calls, run up to the driver --------------------------------------------------------


class NoDriver(RuntimeError):
    """The driver library, taken away: what cuda-bindings meets once it has converted a call's arguments."""


class DriverDouble(types.ModuleType):
    """``cuda.bindings.driver`` with its types and enums, and functions that answer without a driver.

    Each ``cu*`` call is recorded. With ``convert`` the real function is called first: it must convert
    its arguments and then fail for want of the driver (:class:`NoDriver`), which proves the call's shape
    (a TypeError propagates). Then it answers ``answers[name](*args)`` where given, else CUDA_SUCCESS and
    a default value of each type its documentation returns."""

    def __init__(self, answers: dict[str, Callable[..., tuple[Any, ...]]] | None = None, convert: bool = False):
        super().__init__("cuda.bindings.driver")
        from cuda.bindings import driver

        self._real, self._answers, self._convert = driver, dict(answers or {}), convert
        self.calls: list[tuple[str, tuple[Any, ...]]] = []

    def __getattr__(self, name: str) -> Any:
        value = getattr(self._real, name)
        if not (name.startswith("cu") and callable(value) and not isinstance(value, type)):
            return value

        def call(*args: Any) -> tuple[Any, ...]:
            if self._convert:
                try:
                    value(*args)
                except NoDriver:
                    pass
                else:
                    raise AssertionError(f"{name} reached a driver: the loader was not taken away")
            self.calls.append((name, args))
            if name in self._answers:
                return self._answers[name](*args)
            return (self._real.CUresult.CUDA_SUCCESS, *(self._default(t) for t in documented_outputs(value)))

        call.__name__ = name
        return call

    def _default(self, type_name: str) -> Any:
        found = getattr(self._real, type_name, None)
        return found() if isinstance(found, type) else 0


@contextlib.contextmanager
def driver_double(double: DriverDouble) -> Iterator[DriverDouble]:
    """``from cuda.bindings import driver`` gives ``double`` while inside."""
    import cuda.bindings

    real = cuda.bindings.driver
    saved = sys.modules["cuda.bindings.driver"]
    cuda.bindings.driver = double
    sys.modules["cuda.bindings.driver"] = double
    try:
        yield double
    finally:
        cuda.bindings.driver = real
        sys.modules["cuda.bindings.driver"] = saved


def driver_paths_report(cubin: str) -> dict[str, Any]:
    """Run, in this process, every path of the runner that calls cuda-bindings, with the driver library taken
    away and the calls converted for real: the driver functions called, or the error that stopped one."""
    import cuda.bindings._internal.driver as loader

    def no_driver(name: str) -> Any:
        raise NoDriver(name)

    loader.load_nvidia_dynamic_lib = no_driver  # cuda-bindings finds libcuda through this, on first use
    from cuda.bindings import driver

    try:
        driver.cuDriverGetVersion()
    except NoDriver:
        pass
    else:
        return {"error": "a driver was already loaded in this process"}
    answers = {
        "cuFuncGetAttribute": lambda which, f: (driver.CUresult.CUDA_SUCCESS, 2 if which.name.endswith("WIDTH") else 1),
        "cuOccupancyMaxActiveClusters": lambda f, config: (driver.CUresult.CUDA_SUCCESS, 66),
    }
    launcher = types.SimpleNamespace(cubin=cubin, device_index=0, address=lambda buffer: 0x7F0000001000)
    with driver_double(DriverDouble(answers, convert=True)) as double:
        try:
            device.cuda_uuid(0)
            launch_paths.DriverLaunch(launcher, 0, "gp_k", 4, (32, 2), [np.uint32(7), object()]).launch()
            cluster = cupy_launcher._required_cluster(0x1234)
            clusters = cupy_launcher._max_active_clusters(0x1234, cluster, 128, 4096, 0)
            encoded = tensor_map.encode_tensor_map(0x7F0000001000, tensor_map.TileMap(4096, 64, 128, 64, 128, 256))
        except Exception as exc:
            return {"error": f"{type(exc).__name__}: {exc}", "called": [c[0] for c in double.calls]}
        try:  # the shape the review found: extra=None is refused before the driver is needed
            driver.cuLaunchKernel(driver.CUfunction(0), 1, 1, 1, 1, 1, 1, 0, driver.CUstream(0), 0, None)
            refused = ""
        except TypeError as exc:
            refused = str(exc)
    return {
        "called": sorted({c[0] for c in double.calls}),
        "cluster": cluster,
        "clusters": clusters,
        "tensor_map_bytes": len(encoded.tobytes()),
        "extra_none": refused,
    }


@pytest.fixture(scope="module")
def driver_paths(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    """:func:`driver_paths_report` in a fresh process: there no driver can have been loaded before the
    loader is taken away (on a GPU machine this test process may already have loaded one)."""
    cubin = tmp_path_factory.mktemp("cubin") / "probes.cubin"
    cubin.write_bytes(b"\x7fELF")
    code = f"import json, tests.test_cuda_api as t; print(json.dumps(t.driver_paths_report({str(cubin)!r})))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=120, check=False,
        env={**os.environ, "PYTHONPATH": str(REPO)},
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_every_cuda_bindings_call_converts_its_arguments(driver_paths: dict[str, Any], scan: ApiScan) -> None:
    assert "error" not in driver_paths, driver_paths
    named = {u.rsplit(".", 1)[1] for u in scan.uses if u.startswith("cuda.bindings.driver.cu")}
    used = {name for name in named if not name.startswith("cuuint")}  # cuuint32_t/64_t: integer types, not calls
    assert set(driver_paths["called"]) == used  # every driver function the runner names was run
    # made (the config's fields set, the integers wrapped for cuTensorMapEncodeTiled's lists) in that run
    driver = "cuda.bindings.driver"
    assert scan.shapeless == {f"{driver}.CUlaunchConfig", f"{driver}.cuuint64_t", f"{driver}.cuuint32_t"}


def test_a_tensor_map_is_encoded_by_the_driver_into_the_128_bytes_a_kernel_takes(driver_paths: dict[str, Any]) -> None:
    assert "cuTensorMapEncodeTiled" in driver_paths["called"] and driver_paths["tensor_map_bytes"] == 128


def test_the_driver_path_run_would_have_caught_extra_none(driver_paths: dict[str, Any]) -> None:
    assert "integer" in driver_paths["extra_none"]


def test_a_cluster_kernels_shape_and_co_resident_clusters_come_from_the_driver(driver_paths: dict[str, Any]) -> None:
    assert driver_paths["cluster"] == [2, 1, 1] and driver_paths["clusters"] == 66


def test_cuda_bindings_outputs_are_read_from_its_documentation() -> None:
    from cuda.bindings import driver

    assert documented_outputs(driver.cuDeviceGet) == ["CUdevice"]
    assert documented_outputs(driver.cuDeviceGetUuid) == ["CUuuid"]
    assert documented_outputs(driver.cuLaunchKernel) == []
    assert documented_outputs(driver.cuOccupancyMaxActiveClusters) == ["int"]


def test_pynvml_process_records_have_the_pid_field_read() -> None:
    import pynvml

    source = inspect.getsource(pynvml.nvmlDeviceGetComputeRunningProcesses_v3)
    assert "c_nvmlProcessInfo_v3_t" in source and "nvmlStructToFriendlyObject" in source
    assert "pid" in [name for name, _ in pynvml.c_nvmlProcessInfo_v3_t._fields_]
