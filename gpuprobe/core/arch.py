"""The GPU architectures gpuprobe compiles for, and how a device's compute capability maps to one."""

from __future__ import annotations

import re
from dataclasses import dataclass

from gpuprobe.core.errors import GpuprobeError


@dataclass(frozen=True, order=True)
class Arch:
    """A compilation target such as ``sm_90a``: version number plus an optional feature suffix."""

    number: int  # 90 for sm_90a
    suffix: str = ""  # "a" for the arch-specific feature set (wgmma, tcgen05)

    @property
    def name(self) -> str:
        return f"sm_{self.number}{self.suffix}"

    @property
    def cc(self) -> str:
        return f"{self.number // 10}.{self.number % 10}"

    def __str__(self) -> str:
        return self.name


SUPPORTED_ARCHS: tuple[Arch, ...] = (
    Arch(75),
    Arch(80),
    Arch(86),
    Arch(89),
    Arch(90),
    Arch(90, "a"),
    Arch(100, "a"),
    Arch(120),
)

_ARCH_PATTERN = re.compile(r"^(?:sm_?)?(\d{2,3})([af]?)$")


def parse_arch(text: str) -> Arch:
    """Parse ``sm_90a`` / ``90a`` into a supported Arch; anything else is a one-line error."""
    match = _ARCH_PATTERN.match(text.strip().lower())
    arch = Arch(int(match.group(1)), match.group(2)) if match else None
    if arch not in SUPPORTED_ARCHS:
        supported = ", ".join(a.name for a in SUPPORTED_ARCHS)
        raise GpuprobeError(f"unknown arch {text!r}; supported: {supported}")
    return arch


def parse_arch_list(text: str | None) -> list[Arch]:
    """``"sm_80,sm_90a"`` -> Arches; None or "all" -> every supported arch ("all" beside another is refused)."""
    parts = [part.strip() for part in ("all" if text is None else text).split(",") if part.strip()]
    if [part.lower() for part in parts] == ["all"]:
        return list(SUPPORTED_ARCHS)
    if "all" in (part.lower() for part in parts):
        raise GpuprobeError(f"'all' cannot be combined with other archs in {text!r}: it names every one already")
    archs = [parse_arch(part) for part in parts]
    if not archs:
        raise GpuprobeError(f"no arch in {text!r}; give e.g. sm_80,sm_90a or all")
    twice = sorted({arch.name for arch in archs if archs.count(arch) > 1})
    if twice:
        raise GpuprobeError(f"{', '.join(twice)} given more than once in {text!r}")
    return archs


def arch_for_device(major: int, minor: int) -> Arch:
    """The cubin target to load on a device of compute capability ``major.minor``.

    Hopper and Blackwell datacenter parts get their ``a`` target (a superset of the plain one,
    and required for wgmma/tcgen05). A capability gpuprobe does not compile for is an error,
    not a silent fallback: a cubin for another arch would not be the code that was inspected.
    """
    number = major * 10 + minor
    for suffix in ("a", ""):
        if Arch(number, suffix) in SUPPORTED_ARCHS:
            return Arch(number, suffix)
    supported = ", ".join(a.name for a in SUPPORTED_ARCHS)
    raise GpuprobeError(f"compute capability {major}.{minor} is not a supported arch; supported: {supported}")
