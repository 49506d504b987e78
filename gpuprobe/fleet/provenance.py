"""Whether two runs (or a fleet's files) came from one board, one machine, one driver, one gpuprobe and one stage.

A comparison's numbers mean "the software changed" only when the rest did not. Each results file records
where it came from (:func:`gpuprobe.core.results.provenance`): the board (UUID and serial), the machine
(host name, machine id hash, boot id), the driver, the gpuprobe version and commit, and the stage. This
module tells, for two runs, which of these differ, which are the same and which the files cannot tell
(a file written before gpuprobe recorded them), and words it for the first lines of ``gpuprobe compare``
and ``gpuprobe fleet``:

- **board**: the UUIDs, else the serials, when both files record them. Another board of one model is
  another GPU: a difference may be the board's (the two stored H200 runs ran on two).
- **host**: another host name, or the same name with other machine ids (two VMs both called "vm"), is
  another host; the same name without a machine id on both sides cannot be told apart. A host cost
  (``host.*``, ``launch.*``) moves with the host by far more than any allowance (up to 202 % between
  the two stored H200 runs, two VMs), so ``compare`` labels such a change DIFFERENT HOST, or UNKNOWN when it
  cannot tell, never WORSE. Another boot of one machine (the boot id alone differs) is the same host: a
  driver update needs one, and its regressions must still show.
- **driver**: NVML's driver version where both record it, else CUDA's driver version.
- **code**: the gpuprobe version and git commit; uncommitted changes on either side mean the code may
  differ even at one commit. Where a file does not record it, the probes' cubin hash still tells whether
  the kernels were the same.
- **stage**: a smoke-stage run measures each family's cheapest probes once with minimal settings under
  the full run's fact ids; ``compare`` refuses to set one against a full run (:func:`stage_refusal`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from enum import StrEnum

from gpuprobe.core.results import Provenance

HOST_COSTS = "host costs (host.*, launch.*)"
SHORT_HASH = 12


class Relation(StrEnum):
    """What two files say about one aspect of where they came from."""

    SAME = "same"
    DIFFERENT = "different"
    UNKNOWN = "unknown"  # a file does not record it


def _relation(before: str, now: str) -> Relation | None:
    """Two recorded values: SAME or DIFFERENT; None when a side records nothing."""
    if not before or not now:
        return None
    return Relation.SAME if before == now else Relation.DIFFERENT


def board_relation(base: Provenance, new: Provenance) -> Relation:
    """One board when the UUIDs (else the serials) agree; another when either pair recorded on both differs."""
    found = [r for r in (_relation(base.uuid, new.uuid), _relation(base.serial, new.serial)) if r is not None]
    if Relation.DIFFERENT in found:
        return Relation.DIFFERENT
    return Relation.SAME if found else Relation.UNKNOWN


def host_relation(base: Provenance, new: Provenance) -> Relation:
    """One boot of one machine is the same host; another host name, or other machine ids, is another host. The
    same machine id across two boots cannot tell: VMs cloned from one image share it (the device machines here
    all answer "vm" and carry their image's machine id), and a host name alone tells nothing."""
    if _relation(base.boot_id, new.boot_id) == Relation.SAME:
        return Relation.SAME
    if Relation.DIFFERENT in (_relation(base.hostname, new.hostname), _relation(base.machine_id, new.machine_id)):
        return Relation.DIFFERENT
    return Relation.UNKNOWN


def driver_relation(base: Provenance, new: Provenance) -> Relation:
    """NVML's driver versions where both record one, else CUDA's."""
    return _relation(base.driver, new.driver) or _relation(base.cuda_driver, new.cuda_driver) or Relation.UNKNOWN


def code_relation(base: Provenance, new: Provenance) -> Relation:
    """SAME only where both record one commit and neither had uncommitted changes; DIFFERENT where the versions,
    the commits or the probes' cubins differ; else UNKNOWN (a version alone names no code: it stayed 0.1.0 over
    hundreds of commits)."""
    if Relation.DIFFERENT in (_relation(base.version, new.version), _relation(base.commit, new.commit),
                              _relation(base.cubin_sha256, new.cubin_sha256)):  # fmt: skip
        return Relation.DIFFERENT
    if base.commit and base.commit == new.commit and base.dirty is False and new.dirty is False:
        return Relation.SAME
    return Relation.UNKNOWN


def stage_refusal(base: Provenance, new: Provenance, base_name: str, new_name: str) -> str | None:
    """Why two runs of different stages cannot be compared, or None when their stages agree."""
    if base.stage == new.stage:
        return None
    return (
        f"{base_name} is a {base.stage}-stage run and {new_name} a {new.stage}-stage run: a smoke run measures "
        f"each family's cheapest probes once with minimal settings under the full run's fact ids, so its "
        f"numbers are not comparable with a full run's; compare two runs of one stage"
    )


def _cubins(base: Provenance, new: Provenance) -> str:
    relation = _relation(base.cubin_sha256, new.cubin_sha256)
    if relation == Relation.SAME:
        return f"the probes' cubin is the same (sha256 {base.cubin_sha256[:SHORT_HASH]})"
    if relation == Relation.DIFFERENT:
        return f"the probes' cubins differ (sha256 {base.cubin_sha256[:SHORT_HASH]}, {new.cubin_sha256[:SHORT_HASH]})"
    return "no cubin hash to tell by"


def _pair(base_name: str, base_text: str, new_name: str, new_text: str) -> str:
    return f"{base_name} {base_text}; {new_name} {new_text}"


def board_line(base: Provenance, new: Provenance, base_name: str, new_name: str) -> str | None:
    """The line saying the boards differ or cannot be told apart; None for one board."""
    pair = _pair(base_name, base.board_text(), new_name, new.board_text())
    relation = board_relation(base, new)
    if relation == Relation.DIFFERENT:
        return f"DIFFERENT BOARDS: {pair}: another physical GPU, so a change may be the board's"
    if relation == Relation.UNKNOWN:
        return f"BOARD NOT KNOWN TO BE THE SAME: {pair}: cannot tell whether one GPU was measured"
    return None


def host_line(base: Provenance, new: Provenance, base_name: str, new_name: str) -> str | None:
    """The line saying the hosts differ or cannot be told apart; None for one host."""
    pair = _pair(base_name, base.host_text(), new_name, new.host_text())
    relation = host_relation(base, new)
    if relation == Relation.DIFFERENT:
        return f"DIFFERENT HOSTS: {pair}: {HOST_COSTS} that changed are DIFFERENT HOST, not WORSE"
    if relation == Relation.UNKNOWN:
        return (
            f"HOST NOT KNOWN TO BE THE SAME: {pair}: a host name alone does not tell two machines apart, so "
            f"{HOST_COSTS} that changed are UNKNOWN, not WORSE"
        )
    return None


def driver_line(base: Provenance, new: Provenance, base_name: str, new_name: str) -> str | None:
    """The line saying the drivers differ; None for one driver, or none recorded."""
    if driver_relation(base, new) != Relation.DIFFERENT:
        return None
    pair = _pair(base_name, base.driver_text(), new_name, new.driver_text())
    return f"DIFFERENT DRIVERS: {pair}: a change may be the driver's"


def code_line(base: Provenance, new: Provenance, base_name: str, new_name: str) -> str | None:
    """The line saying the gpuprobe code differs, may differ, or is not recorded; None for one clean commit."""
    relation = code_relation(base, new)
    pair = _pair(base_name, base.code_text(), new_name, new.code_text())
    cubins = _cubins(base, new)
    if relation == Relation.DIFFERENT:
        return f"DIFFERENT GPUPROBE CODE: {pair}: a change may be the code's; {cubins}"
    if relation == Relation.SAME:
        return None
    if base.version and new.version:
        why = "a version names no code (a wheel or a copied checkout records no commit: GPUPROBE_COMMIT names it)"
        if base.commit and new.commit:
            why = "uncommitted changes, or a checkout git could not read"
        return f"GPUPROBE CODE MAY DIFFER: {pair}: {why}; {cubins}"
    unrecorded = " and ".join(name for name, p in ((base_name, base), (new_name, new)) if not p.version)
    return (
        f"GPUPROBE CODE NOT RECORDED in {unrecorded} (written before results recorded it): cannot tell whether "
        f"the code changed; {cubins}"
    )


def provenance_lines(base: Provenance, new: Provenance, base_name: str = "BASE", new_name: str = "NEW") -> list[str]:
    """What a comparison of two runs opens with: each of board, host, driver and gpuprobe code that differs
    or that the files cannot tell, one line each (the stage is :func:`stage_refusal`'s)."""
    lines = (line(base, new, base_name, new_name) for line in (board_line, host_line, driver_line, code_line))
    return [line for line in lines if line]


# ---------------------------------------------------------------- many files (a fleet)


def _counted(values: Counter[str], files: int) -> str:
    """``580.159.04 on 8, 570.86 on 4``: each value and how many files have it, commonest first."""
    return ", ".join(f"{value} on {count}" for value, count in values.most_common()) + f" of {files} files"


def fleet_lines(runs: Sequence[tuple[str, Provenance]]) -> list[str]:
    """What a fleet report opens with: the drivers, the gpuprobe code and the stages its files differ in (or
    code none records), and a board found in several files of one stage (measured twice, it counts twice).
    Boards and hosts that differ are a fleet's nature, not a warning."""
    files = len(runs)
    lines: list[str] = []
    if not runs:
        return lines
    drivers = Counter(p.driver_text() for _, p in runs)
    if len(drivers) > 1:
        lines.append(f"DRIVERS DIFFER: {_counted(drivers, files)}: a GPU's difference may be its driver's")
    codes = Counter(p.code_text() for _, p in runs)
    if len(codes) > 1:
        lines.append(f"GPUPROBE CODE DIFFERS: {_counted(codes, files)}: a GPU's difference may be the code's")
    elif not runs[0][1].version:
        lines.append(f"GPUPROBE CODE NOT RECORDED in the {files} files: cannot tell whether one gpuprobe measured them")
    stages = Counter(p.stage for _, p in runs)
    if len(stages) > 1:
        lines.append(
            f"STAGES DIFFER: {_counted(stages, files)}: smoke-stage files are grouped apart from full runs "
            f"(their facts share ids, not settings)"
        )
    boards: dict[tuple[str, str], list[str]] = {}
    for name, p in runs:
        if p.uuid or p.serial:
            boards.setdefault((p.uuid or p.serial, p.stage), []).append(name)
    twice = [f"{board} in {', '.join(names)}" for (board, _), names in sorted(boards.items()) if len(names) > 1]
    if twice:
        more = f" and {len(twice) - 3} more" if len(twice) > 3 else ""
        lines.append(
            f"ONE BOARD IN SEVERAL FILES: {'; '.join(twice[:3])}{more}: measured more than once, a GPU counts more "
            f"than once"
        )
    return lines


def hosts_text(runs: Sequence[tuple[str, Provenance]]) -> str:
    """``on 3 host(s)``, a host known by its name and machine id; files without a machine id are counted by
    name, which VMs share, and the text says how many."""
    hosts = len({(p.hostname, p.machine_id) for _, p in runs})
    by_name = sum(not p.machine_id for _, p in runs)
    return f"on {hosts} host(s)" + (f" ({by_name} file(s) name their host without a machine id)" if by_name else "")
