"""Nsight Compute's raw CSV page, read strictly: one counted kernel launch per row, with its NVTX stack.

The format relied on is in docs/witness.md ("Reading the raw CSV page"). Anything else is a
:class:`MalformedCsv`: a one-line error naming the row, never a guess.
"""

from __future__ import annotations

import csv
import math
import re
from collections.abc import Iterator
from dataclasses import dataclass

from gpuprobe.core.errors import GpuprobeError

# What the witness counts, per kernel launch (see gpuprobe.measure.witness.compare for what each witnesses).
DRAM_READ = "dram__bytes_read.sum"
DRAM_WRITE = "dram__bytes_write.sum"
L2_READ_SECTORS = "lts__t_sectors_srcunit_tex_op_read.sum"
L2_WRITE_SECTORS = "lts__t_sectors_srcunit_tex_op_write.sum"
SHARED_CONFLICTS = ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
                    "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum")  # fmt: skip
SHARED_WAVEFRONTS = ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
                     "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum")  # fmt: skip
METRICS = (DRAM_READ, DRAM_WRITE, L2_READ_SECTORS, L2_WRITE_SECTORS, *SHARED_CONFLICTS, *SHARED_WAVEFRONTS)
# The units a metric may come in, each with its factor to the one used here (bytes, sectors): base
# units are asked for (--print-units base); a metric not listed is a count, whatever its unit is called.
UNITS = {
    "dram__": {"byte": 1.0},
    "lts__t_sectors": {"sector": 1.0},
}

IDENTITY = ("ID", "Process ID", "Kernel Name", "Block Size", "Grid Size")
PUSH_POP = "Push/Pop_Range"  # in the push/pop NVTX column's header
NOT_COLLECTED = "n/a"
_GROUPED = re.compile(r"-?\d{1,3}(,\d{3})+(\.\d+)?")
_DIMS = re.compile(r"\(\s*(\d+)\s*,\s*(\d+)\s*,\s*(\d+)\s*\)")
_QUOTED = re.compile(r'"([^"]*)"')
PAYLOAD_FIELDS = 6  # after a range's message: PL_Type, PL_Value, CLR_Type, Color, Msg_Type, Msg


class MalformedCsv(GpuprobeError):
    """ncu's CSV is not what the witness can read."""


@dataclass(frozen=True)
class Counted:
    """One kernel launch ncu profiled: which process and launch, the kernel, its grid and block, the NVTX
    push/pop ranges it ran in (outermost first), and each of :data:`METRICS` in base units (None: n/a)."""

    process: str
    launch_id: int
    kernel: str
    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    ranges: tuple[str, ...]
    values: dict[str, float | None]

    @property
    def blocks(self) -> int:
        return math.prod(self.grid)

    @property
    def threads(self) -> int:
        return math.prod(self.block)

    def innermost(self, prefix: str) -> str | None:
        """The innermost range whose name starts with ``prefix``; None when it ran in none."""
        return next((name for name in reversed(self.ranges) if name.startswith(prefix)), None)


def parse_raw(text: str, source: str) -> list[Counted]:
    """Every launch of every table in ncu's output ``text`` (``source`` names it in errors), in print order."""
    rows = list(csv.reader(line for line in text.splitlines() if line.strip() and not line.startswith("==")))
    launches: list[Counted] = []
    for header, units, body, first in _tables(rows, source):
        launches += [_launch(header, units, row, f"{source}: row {first + k}") for k, row in enumerate(body)]
    return launches


def _tables(rows: list[list[str]], source: str) -> Iterator[tuple[list[str], list[str], list[list[str]], int]]:
    """(header, units, data rows, number of the first data row) of each table (what comes before the first
    header is not a table); no header, or a header without a units row, is malformed."""
    starts = [k for k, row in enumerate(rows) if row[:2] == ["ID", "Process ID"]]
    if not starts:
        raise MalformedCsv(f'{source}: no header row ("ID","Process ID",...): not ncu\'s --csv --page raw output')
    for start, end in zip(starts, [*starts[1:], len(rows)], strict=True):
        header = rows[start]
        _require_columns(header, source)
        if end - start < 2 or rows[start + 1][0].strip():
            raise MalformedCsv(f"{source}: row {start + 2} should hold the units (--page raw), not a launch")
        units = rows[start + 1]
        if len(units) != len(header):
            raise MalformedCsv(f"{source}: row {start + 2} has {len(units)} units for {len(header)} columns")
        yield header, units, rows[start + 2 : end], start + 3


def _require_columns(header: list[str], source: str) -> None:
    missing = [c for c in (*IDENTITY, *METRICS) if c not in header]
    if not any(PUSH_POP in cell for cell in header):
        missing.append("the NVTX push/pop column (run ncu with --nvtx)")
    if missing:
        raise MalformedCsv(f"{source}: the header lacks {', '.join(missing)}")
    if len(set(header)) != len(header):
        raise MalformedCsv(f"{source}: the header repeats a column")


def _launch(header: list[str], units: list[str], row: list[str], where: str) -> Counted:
    if len(row) != len(header):
        raise MalformedCsv(f"{where} has {len(row)} cells for {len(header)} columns")
    cell = dict(zip(header, row, strict=True))
    unit = dict(zip(header, units, strict=True))
    nvtx = next(cell[c] for c in header if PUSH_POP in c)
    try:
        launch_id = int(cell["ID"])
    except ValueError:
        raise MalformedCsv(f"{where}: ID {cell['ID']!r} is not a number") from None
    return Counted(
        process=cell["Process ID"].strip(),
        launch_id=launch_id,
        kernel=cell["Kernel Name"].split("(", 1)[0].strip(),
        grid=_dims(cell["Grid Size"], f"{where}, Grid Size"),
        block=_dims(cell["Block Size"], f"{where}, Block Size"),
        ranges=push_pop_ranges(nvtx, where),
        values={m: _value(cell[m], unit[m], m, f"{where}, {m}") for m in METRICS},
    )


def _dims(text: str, where: str) -> tuple[int, int, int]:
    match = _DIMS.fullmatch(text.strip())
    if match is None:
        raise MalformedCsv(f"{where}: {text!r} is not (x, y, z)")
    x, y, z = (int(g) for g in match.groups())
    return x, y, z


def _value(text: str, unit: str, metric: str, where: str) -> float | None:
    """A metric's value in bytes, sectors or a count (:data:`UNITS`); None when ncu could not
    collect it ("n/a")."""
    allowed = next((units for prefix, units in UNITS.items() if metric.startswith(prefix)), None)
    if allowed is not None and unit.strip() not in allowed:
        raise MalformedCsv(f"{where}: unit {unit!r}, not {' or '.join(allowed)} (run ncu with --print-units base)")
    factor = 1.0 if allowed is None else allowed[unit.strip()]
    shown = text.strip()
    if shown == NOT_COLLECTED:
        return None
    number = shown.replace(",", "") if _GROUPED.fullmatch(shown) else shown
    try:
        value = float(number)
    except ValueError:
        raise MalformedCsv(f"{where}: {text!r} is not a number") from None
    if not math.isfinite(value):
        raise MalformedCsv(f"{where}: {text!r} is not a finite number")
    return value * factor


def push_pop_ranges(cell: str, where: str) -> tuple[str, ...]:
    """The range names in an NVTX push/pop cell, outermost first (see the module for the cell's form); none for
    an empty cell or a thread id alone (a launch outside every range)."""
    entries = _QUOTED.findall(cell)
    if not entries and cell.strip() and not cell.strip().isdigit():
        raise MalformedCsv(f"{where}: NVTX cell {cell!r} is neither a thread id nor quoted ranges")
    names = []
    for entry in entries:
        domain, _, rest = entry.partition(":")
        parts = rest.rsplit(":", PAYLOAD_FIELDS)
        if not domain or len(parts) != PAYLOAD_FIELDS + 1:
            raise MalformedCsv(f"{where}: NVTX range {entry!r} is not domain:range:{PAYLOAD_FIELDS} fields")
        names.append(parts[0])
    return tuple(names)
