"""A seeded corpus of damaged inputs, for every kind of file the ``gpuprobe`` command reads.

Each case is rebuilt from its kind and seed alone (``random.Random(seed)`` over a fixed original), so a case
that fails is named by its test id and comes back exactly as it failed. Three kinds of damage:

* bytes, for any file (:func:`damaged_bytes`): bits flipped, the file truncated, a 64-byte run
  overwritten with random bytes, random bytes inserted;
* structure, for a JSON document (:func:`damaged_json`): a node of the wrong type, a key removed, NaN
  and the infinities, numbers too large for a float, a number spelled as a string, nesting deeper than a
  parser recurses, a string whose bytes are not UTF-8; and for a TOML document (:func:`damaged_toml`)
  the same, one assignment at a time;
* text, for PTX and CUDA source (:func:`damaged_source`): lines dropped, repeated or edited; and PTX's
  own directives (``//@repeat``, ``//@for``, ``//@include``, ``.target``) bent (:func:`bent`).
"""

from __future__ import annotations

import json
import random
import re
from typing import Any

BYTE_DAMAGE = ("flip", "truncate", "run", "insert")

#: Damage that makes a document garbage wherever it lands on a number the file is judged by.
GARBAGE_NUMBERS = ("nan", "infinity", "-infinity", "huge-float", "huge-int", "numeric-string")
#: Damage that no reader may accept anywhere: nesting a parser cannot follow, bytes that are not UTF-8.
UNREADABLE = ("deep", "not-utf8")
JSON_DAMAGE = ("wrong-type", "missing-key", *GARBAGE_NUMBERS, *UNREADABLE)

DEPTH = 100_000  # far beyond any parser's recursion limit
DERIVED = "detection"  # a fact's record that reading recomputes from its samples: not a number the file is judged by
_OTHER_TYPES: list[Any] = ["fast", 7, 2.5, True, None, [1, "a"], {"a": 1}]


def damaged_bytes(data: bytes, kind: str, rng: random.Random) -> bytes:
    """``data`` with one kind of byte damage (:data:`BYTE_DAMAGE`) at places ``rng`` picks."""
    out = bytearray(data)
    if kind == "flip":
        for _ in range(rng.randint(1, 8)):
            index = rng.randrange(len(out))
            out[index] ^= 1 << rng.randrange(8)
    elif kind == "truncate":
        del out[rng.randrange(len(out)) :]
    elif kind == "run":
        start = rng.randrange(len(out))
        out[start : start + 64] = rng.randbytes(64)
    elif kind == "insert":
        start = rng.randrange(len(out) + 1)
        out[start:start] = rng.randbytes(rng.randint(1, 64))
    else:
        raise ValueError(f"unknown byte damage {kind!r}")
    return bytes(out)


# ---------------------------------------------------------------- JSON ---------------------------

Path_ = tuple[str | int, ...]


def nodes(value: Any, path: Path_ = ()) -> list[tuple[Path_, Any]]:
    """Every node below ``value`` (not ``value`` itself) with its path of keys and indices, in document order."""
    children: list[tuple[str | int, Any]] = []
    if isinstance(value, dict):
        children = list(value.items())
    elif isinstance(value, list):
        children = list(enumerate(value))
    found = []
    for key, child in children:
        found.append(((*path, key), child))
        found += nodes(child, (*path, key))
    return found


def replaced(value: Any, path: Path_, new: Any) -> Any:
    """``value`` with the node at ``path`` replaced by ``new`` (``value`` itself is left as it was)."""
    if not path:
        return new
    head, rest = path[0], path[1:]
    if isinstance(value, dict):
        return {**value, head: replaced(value[head], rest, new)}
    return [replaced(item, rest, new) if index == head else item for index, item in enumerate(value)]


def removed(value: Any, path: Path_) -> Any:
    """``value`` without the dict entry at ``path`` (whose last step is a key)."""
    head, rest = path[0], path[1:]
    if not rest:
        return {k: v for k, v in value.items() if k != head}
    if isinstance(value, dict):
        return {**value, head: removed(value[head], rest)}
    return [removed(item, rest) if index == head else item for index, item in enumerate(value)]


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


_MARK = "@@raw@@"  # stands for raw JSON text, put in place after json.dumps


def damaged_json(document: Any, kind: str, rng: random.Random, under: tuple[str, ...] = ()) -> bytes:
    """``document`` as JSON bytes with one kind of structural damage (:data:`JSON_DAMAGE`) at a node ``rng``
    picks; damage to numbers lands on a number below one of the top-level keys ``under`` (anywhere, if empty),
    never on one that reading recomputes (:data:`DERIVED`)."""
    every = nodes(document)
    if kind == "wrong-type":
        path, old = rng.choice(every)
        new = rng.choice([v for v in _OTHER_TYPES if type(v) is not type(old)])
        return json.dumps(replaced(document, path, new)).encode()
    if kind == "missing-key":
        path, _ = rng.choice([(p, v) for p, v in every if isinstance(p[-1], str)])
        return json.dumps(removed(document, path)).encode()
    if kind in GARBAGE_NUMBERS:
        numbers = [(p, v) for p, v in every if _is_number(v) and (not under or p[0] in under) and DERIVED not in p]
        path, old = rng.choice(numbers)
        raw = {"nan": "NaN", "infinity": "Infinity", "-infinity": "-Infinity", "huge-float": "1e999",
               "huge-int": "1" + "0" * 400, "numeric-string": json.dumps(str(old))}[kind]  # fmt: skip
    elif kind == "deep":
        path, _ = rng.choice(every)
        raw = "[" * DEPTH + "]" * DEPTH
    elif kind == "not-utf8":
        path, _ = rng.choice([(p, v) for p, v in every if isinstance(v, str)])
        raw = '"\udcff\udcfe not UTF-8"'
    else:
        raise ValueError(f"unknown JSON damage {kind!r}")
    text = json.dumps(replaced(document, path, _MARK)).replace(json.dumps(_MARK), raw)
    return text.encode("utf-8", errors="surrogateescape")


# ---------------------------------------------------------------- TOML ---------------------------

TOML_DAMAGE = ("wrong-type", "missing-key", "nan", "infinity", "huge-float", "huge-int", *UNREADABLE)
_ASSIGNMENT = re.compile(r'^(?P<key>\s*[\w."-]+\s*)=')
_TOML_VALUES = {
    "nan": ["nan", "-nan"],
    "infinity": ["inf", "-inf", "+inf"],
    "huge-float": ["1e999", "-1e999"],
    "huge-int": ["1" + "0" * 400],
    "deep": ["[" * DEPTH + "]" * DEPTH, "{ a = " * 5_000 + "1" + " }" * 5_000],
    "wrong-type": ['"fast"', "7", "2.5", "true", '[1, "a"]', "{ a = 1 }", '""', "[]", "1979-05-27"],
}


def damaged_toml(text: str, kind: str, rng: random.Random) -> bytes:
    """``text`` (a TOML document) with one assignment, which ``rng`` picks, given a damaged value or dropped
    (``missing-key``), as bytes (:data:`TOML_DAMAGE`)."""
    lines = text.splitlines()
    index = rng.choice([i for i, line in enumerate(lines) if _ASSIGNMENT.match(line)])
    key = _ASSIGNMENT.match(lines[index])["key"]  # type: ignore[index]
    if kind == "missing-key":
        del lines[index]
    elif kind == "not-utf8":
        lines[index] = f'{key}= "\udcff\udcfe not UTF-8"'
    else:
        lines[index] = f"{key}= {rng.choice(_TOML_VALUES[kind])}"
    return ("\n".join(lines) + "\n").encode("utf-8", errors="surrogateescape")


# ---------------------------------------------------------------- PTX and CUDA source --------------

SOURCE_DAMAGE = ("drop-line", "repeat-line", "edit")

#: A probe-shaped PTX file: every directive gpuprobe expands, two kernels, one that loops.
PTX = """\
.version 8.7
.target sm_90a
.address_size 64

//@include fuzz_common.ptxinc

.visible .entry fuzz_chase(.param .u64 start, .param .u32 iters, .param .u64 out)
{
	.reg .u32 %r<3>;
	.reg .u64 %rd<4>;
	.reg .pred %p<2>;
	ld.param.u64 %rd1, [start];
	ld.param.u32 %r1, [iters];
LOOP:
	.pragma "nounroll";
//@for OP in cg ca
//@repeat 4
	ld.global.{OP}.u64 %rd1, [%rd1];
//@endfor
	sub.u32 %r1, %r1, 1;
	setp.ne.u32 %p1, %r1, 0;
	@%p1 bra LOOP;
	ld.param.u64 %rd2, [out];
	st.global.u64 [%rd2], %rd1;
	ret;
}
"""

#: The file the PTX includes, beside it.
PTX_INCLUDE_NAME = "fuzz_common.ptxinc"
PTX_INCLUDE = """\
.visible .entry fuzz_store(.param .u64 out)
{
	.reg .u64 %rd<2>;
	ld.param.u64 %rd1, [out];
	st.global.u32 [%rd1], 7;
	ret;
}
"""

CUDA = """\
extern "C" __global__ void fuzz_scale(const float *in, float *out, int n)
{
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) {
        out[i] = 3.0f * in[i] + 1.0f;
    }
}
"""

#: Lines of :data:`PTX` bent, each (as it is, as it becomes): one case per pair.
BENT_DIRECTIVES = [
    ("//@repeat 4", "//@repeat 99999999999"),  # a count with extra digits: an error, not memory exhausted
    ("//@repeat 4", "//@repeat 0"),
    ("//@repeat 4", "//@repeat"),
    ("//@endfor", ""),
    ("//@for OP in cg ca", "//@for OP:T in cg ca"),
    (  # loops inside loops that ask for 1.3 million lines, where a probe file expands to 12,000 at most
        "//@repeat 4\n\tld.global.{OP}.u64 %rd1, [%rd1];",
        "//@for A in " + "cg " * 800 + "\n//@for B in " + "ca " * 800 + "\n\tld.global.{A}.u64 %rd1, [%rd1];"
        "\n//@endfor\n//@endfor",
    ),
    ("//@include fuzz_common.ptxinc", "//@include missing.ptxinc"),
    ("//@include fuzz_common.ptxinc", "//@include fuzz.ptx"),  # includes itself, over and over
    ("//@include fuzz_common.ptxinc", "//@include ."),  # a directory
    ("//@include fuzz_common.ptxinc", "//@include fuzz common"),
    (".target sm_90a", ".target sm_91"),
    (".target sm_90a", ""),
    (".version 8.7", ".version 99.9"),
    ("\tret;\n}", "\tret;\n"),
]


def damaged_source(text: str, kind: str, rng: random.Random) -> str:
    """``text`` (PTX or CUDA source) with one kind of damage (:data:`SOURCE_DAMAGE`) that keeps it UTF-8 text,
    so that it reaches the compiler."""
    lines = text.splitlines()
    index = rng.randrange(len(lines))
    if kind == "drop-line":
        del lines[index]
    elif kind == "repeat-line":
        lines.insert(index, lines[index])
    elif kind == "edit":
        line = lines[index] or " "
        at = rng.randrange(len(line))
        lines[index] = line[:at] + rng.choice(["", chr(rng.randrange(32, 127)), "\t", "é", "\x00"]) + line[at + 1 :]
    else:
        raise ValueError(f"unknown source damage {kind!r}")
    return "\n".join(lines) + "\n"


def bent(text: str, case: int) -> str:
    """``text`` with the line of :data:`BENT_DIRECTIVES` number ``case`` bent."""
    old, new = BENT_DIRECTIVES[case]
    assert old in text, f"{old!r} is not in the text"
    return text.replace(old, new, 1)
