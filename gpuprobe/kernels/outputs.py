"""What each tool's output must be before it is cached: a tool that exits 0 may still have written nothing,
or something else, and whatever is cached is read back later as if the tool had just said it.

* ptxas writes a cubin: an ELF file of the 64-bit class, little-endian, for the CUDA machine
  (``EM_CUDA``), whose section headers and sections lie inside it (a file cut short is no cubin);
* nvdisasm prints a listing holding each code section of the cubin (``.text.<function>``, one per
  kernel or function, when it has code) with at least one instruction: a listing that is not SASS
  has none, and a kernel missing from it would vanish from the check;
* NVRTC writes PTX: text with its ``.version`` and ``.target`` directives.

Each check says what is wrong in a few words, or None; its caller names the tool. The two patterns of
the listing's grammar used here are the parser's (:mod:`gpuprobe.kernels.sass`) too.
"""

from __future__ import annotations

import re
import struct

# The terminator is stripped in code: a lazy body before optional trailing ``\s*;?\s*`` backtracks cubically.
INSTRUCTION = re.compile(r"^\s*/\*(?P<offset>[0-9a-fA-F]+)\*/\s+(?P<body>[^\s.].*)$")
SECTION = re.compile(r"^\s*\.section\s+(?P<name>[^,\s]+)")

_ELF_MAGIC = b"\x7fELF"
_ELFCLASS64, _ELFDATA2LSB, _EM_CUDA = 2, 1, 190
_SHT_NOBITS = 8  # a section that takes no room in the file (.bss-like)
# e_ident, e_type, e_machine, e_version, e_entry, e_phoff, e_shoff, e_flags, e_ehsize, e_phentsize, e_phnum,
# e_shentsize, e_shnum, e_shstrndx
_FILE_HEADER = struct.Struct("<16sHHIQQQIHHHHHH")
# sh_name, sh_type, sh_flags, sh_addr, sh_offset, sh_size, sh_link, sh_info, sh_addralign, sh_entsize
_SECTION_HEADER = struct.Struct("<IIQQQQIIQQ")
_CODE_PREFIX = ".text."
_PTX_DIRECTIVES = (".version", ".target")


def _sections(data: bytes) -> list[tuple[str, int]]:
    """The name and size of each section of the cubin ``data``; a ValueError saying why it is no cubin."""
    if not data:
        raise ValueError("empty")
    if not data.startswith(_ELF_MAGIC):
        raise ValueError("no ELF header")
    if len(data) < _FILE_HEADER.size:
        raise ValueError("its ELF header is cut short")
    ident, _, machine, _, _, phoff, shoff, _, _, phentsize, phnum, shentsize, shnum, shstrndx = (
        _FILE_HEADER.unpack_from(data)
    )
    if ident[4] != _ELFCLASS64 or ident[5] != _ELFDATA2LSB:
        raise ValueError("not a 64-bit little-endian ELF file")
    if machine != _EM_CUDA:
        raise ValueError(f"an ELF file for machine {machine}, not CUDA ({_EM_CUDA})")
    if shentsize != _SECTION_HEADER.size or not shstrndx < shnum:
        raise ValueError("no table of section names")
    if shoff + shnum * shentsize > len(data) or phoff + phnum * phentsize > len(data):
        raise ValueError("its headers lie past its end (cut short or damaged)")
    headers = [_SECTION_HEADER.unpack_from(data, shoff + i * shentsize) for i in range(shnum)]
    if any(kind != _SHT_NOBITS and offset + size > len(data) for _, kind, _, _, offset, size, *_ in headers):
        raise ValueError("a section lies past its end (cut short or damaged)")
    names_at, names_size = headers[shstrndx][4], headers[shstrndx][5]
    names = data[names_at : names_at + names_size]
    return [(_name(names, header[0]), header[5]) for header in headers]


def _name(names: bytes, start: int) -> str:
    end = names.find(b"\0", start)
    return names[start : end if end >= 0 else len(names)].decode("utf-8", "replace")


def cubin_problem(data: bytes) -> str | None:
    """What makes ``data`` no cubin ("empty", "no ELF header", ...), or None when it is one."""
    try:
        _sections(data)
    except ValueError as exc:
        return str(exc)
    return None


def code_sections(cubin: bytes) -> list[str]:
    """The names of the cubin's code sections that hold code (``.text.<function>``); ``cubin`` is one."""
    return [name for name, size in _sections(cubin) if name.startswith(_CODE_PREFIX) and size > 0]


def listing_problem(listing: str, cubin: bytes) -> str | None:
    """What makes ``listing`` not nvdisasm's SASS of ``cubin`` (a cubin: see :func:`cubin_problem`): the code
    sections it lacks, or holds without an instruction; None when it holds every one with instructions."""
    section, with_code = "", set()
    for line in listing.splitlines():
        if line.lstrip().startswith(".section") and (match := SECTION.match(line)):
            section = match["name"]
        elif section not in with_code and INSTRUCTION.match(line):
            with_code.add(section)
    missing = [name[len(_CODE_PREFIX) :] for name in code_sections(cubin) if name not in with_code]
    if not missing:
        return None
    more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
    return f"no instructions of {missing[0]}{more}"


def ptx_problem(ptx: str) -> str | None:
    """What makes ``ptx`` no PTX module (empty, or without ``.version`` or ``.target``), or None."""
    if not ptx.strip():
        return "empty"
    missing = [name for name in _PTX_DIRECTIVES if not re.search(rf"^\s*{re.escape(name)}\s", ptx, re.MULTILINE)]
    return f"no {' or '.join(missing)} directive" if missing else None
