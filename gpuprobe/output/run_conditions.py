"""The conditions a run measured under, summed up for the sheet: temperature, power, clocks, clock-event
(throttle) reasons, other tenants, ECC, MIG and the part's settings.

Four records feed it, all as the run wrote them: NVML read by the run before its first and after its
last family (``clocks["nvml_before"]`` / ``clocks["nvml_after"]``), NVML and the device's own SM clock
read by the measuring process just before and after every probe (each probe's ``conditions``), the NVML
device record taken once (``environment["device_record"]``: limits, ECC, MIG, persistence, PCIe), and the
SM clock each tensor-core probe read inside its own timed kernels (its ``*.sm_clock`` facts), and each probe's
trajectory (NVML sampled every few ms while it measured, and the energy counter: ``conditions["trajectory"]``,
:mod:`gpuprobe.runner.trajectory`). The rows "while measuring" come from the trajectories: the readings around
the probes alone miss a burst (the first H200 run: NVML 1890-1980 MHz and at most 163 W around the probes,
1610-1800 MHz inside the tensor-core kernels). A reading NVML refused is stored as its error text and is left
out here; a run without NVML says so. The part's settings (application clocks, the power limit, persistence) are
shown as the run found them: gpuprobe never changes them.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from gpuprobe.core.numbers import fmt_num
from gpuprobe.core.results import Results

# NVML's clock-event reason bits (nvmlClocksEventReason*), in bit order.
CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "GPU idle"),
    (0x2, "application clocks setting"),
    (0x4, "SW power cap"),
    (0x8, "HW slowdown"),
    (0x10, "sync boost"),
    (0x20, "SW thermal slowdown"),
    (0x40, "HW thermal slowdown"),
    (0x80, "HW power brake"),
    (0x100, "display clock setting"),
)
NOT_RECORDED = "not recorded"
# The reason NVML names while an application-clock or a locked-clock (nvidia-smi -lgc) setting holds the clock.
APPLICATION_CLOCKS = 0x2


def _number(value: Any) -> float | None:
    """A reading as a number; None for an error text, a missing reading or a bool."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value)


def nvml_readings(results: Results) -> list[dict[str, Any]]:
    """Every NVML snapshot of the run: the run's own before and after, and each probe's before and after."""
    readings = [results.clocks.get("nvml_before"), results.clocks.get("nvml_after")]
    for outcome in results.probes.values():
        readings += [outcome.conditions.get("nvml_before"), outcome.conditions.get("nvml_after")]
    return [r for r in readings if isinstance(r, dict) and "error" not in r]


def probe_readings(results: Results) -> list[dict[str, Any]]:
    """The NVML snapshots taken around the probes (while the run measured)."""
    readings = []
    for outcome in results.probes.values():
        readings += [outcome.conditions.get("nvml_before"), outcome.conditions.get("nvml_after")]
    return [r for r in readings if isinstance(r, dict) and "error" not in r]


def _values(readings: Iterable[dict[str, Any]], key: str) -> list[float]:
    return [v for v in (_number(r.get(key)) for r in readings) if v is not None]


def _span(values: list[float], unit: str) -> str | None:
    """ "36 – 41 °C", or "1980 MHz" when every reading agrees; None without readings."""
    if not values:
        return None
    low, high = min(values), max(values)
    if low == high:
        return f"{fmt_num(low)} {unit}"
    return f"{fmt_num(low)} – {fmt_num(high)} {unit}"


def reason_names(bits: int) -> list[str]:
    """The names of the clock-event reasons set in ``bits``; an unknown bit by its value."""
    names = [name for bit, name in CLOCK_EVENT_REASONS if bits & bit]
    known = sum(bit for bit, _ in CLOCK_EVENT_REASONS)
    if bits & ~known:
        names.append(f"other ({bits & ~known:#x})")
    return names


def _reason_counts(bits: list[int], of: str) -> str:
    """ "SW power cap in 3 of 40 readings, ..." for each reason set in any of ``bits``; "" when none is."""
    counts: dict[str, int] = {}
    for value in bits:
        for name in reason_names(value):
            counts[name] = counts.get(name, 0) + 1
    return ", ".join(f"{name} in {n} of {len(bits)} {of}" for name, n in counts.items())


def _reasons_text(readings: list[dict[str, Any]], clocks: dict[str, Any]) -> str:
    """Which clock-event reasons the probes' readings showed, each with how many readings; then the run's
    own readings at its start and end."""
    parts = []
    bits = [int(v) for v in _values(readings, "clock_event_reasons")]
    if bits:
        seen = _reason_counts(bits, "readings")
        parts.append(f"around the probes: {seen}" if seen else f"none in {len(bits)} readings around the probes")
    for key, when in (("nvml_before", "at the run's start"), ("nvml_after", "at its end")):
        record = clocks.get(key)
        value = _number(record.get("clock_event_reasons")) if isinstance(record, dict) else None
        if value is not None:
            parts.append(f"{when}: {', '.join(reason_names(int(value))) or 'none'}")
    return "; ".join(parts) or NOT_RECORDED


def _processes_text(readings: list[dict[str, Any]]) -> str | None:
    others = _values(readings, "compute_processes")
    if not others:
        return None
    busy = sum(1 for n in others if n > 0)
    if not busy:
        return f"none in {len(others)} readings"
    return f"up to {fmt_num(max(others))}, in {busy} of {len(others)} readings"


def _mode(record: dict[str, Any], key: str, names: dict[int, str]) -> str | None:
    """A mode with its pending value when a reset would change it: "enabled (pending: disabled)"."""
    current, pending = _number(record.get(f"{key}_current")), _number(record.get(f"{key}_pending"))
    if current is None:
        return None
    text = names.get(int(current), str(int(current)))
    if pending is not None and pending != current:
        text += f" (pending after reset: {names.get(int(pending), str(int(pending)))})"
    return text


ON_OFF = {0: "disabled", 1: "enabled"}


def _power_text(readings: list[dict[str, Any]], record: dict[str, Any]) -> str | None:
    span = _span(_values(readings, "power_w"), "W")
    limit = _number(record.get("power_enforced_limit_w")) or _number(record.get("power_limit_w"))
    if span is None and limit is None:
        return None
    text = span or NOT_RECORDED
    if limit is not None:
        text += f" (limit {fmt_num(limit)} W)"
    return text


def _sm_clock_text(results: Results, readings: list[dict[str, Any]], record: dict[str, Any]) -> str | None:
    """The device's own SM clock around the probes, with NVML's reading and its maximum and application clock."""
    own = [
        v
        for outcome in results.probes.values()
        for v in (_number(outcome.conditions.get("sm_mhz_before")), _number(outcome.conditions.get("sm_mhz_after")))
        if v is not None
    ]
    parts = []
    if own:
        parts.append(f"{_span(own, 'MHz')} from the device's timers")
    nvml = _span(_values(readings, "sm_clock_mhz"), "MHz")
    if nvml:
        parts.append(f"{nvml} by NVML")
    most = _number(record.get("sm_clock_max_mhz")) or next(iter(_values(readings, "sm_clock_max_mhz")), None)
    if most is not None:
        parts.append(f"max {fmt_num(most)} MHz")
    app = _number(record.get("sm_clock_application_mhz"))
    if app is not None:
        parts.append(f"application clock {fmt_num(app)} MHz")
    return ", ".join(parts) or None


def _kernel_clock_text(results: Results) -> str | None:
    """The SM clock the tensor-core probes read inside their timed kernels (%clock64 over %globaltimer): its
    span over the configurations, and the slowest one."""
    clocks = [f for f in results.facts if f.id.startswith("tensor.") and f.id.endswith(".sm_clock") and f.value]
    if not clocks:
        return None
    slowest = min(clocks, key=lambda f: f.value or 0.0).id.removesuffix(".sm_clock")
    span = _span([f.value for f in clocks if f.value is not None], "MHz")
    return f"{span} over {len(clocks)} tensor-core configurations (%clock64 over %globaltimer); slowest: {slowest}"


def trajectories(results: Results) -> dict[str, dict[str, Any]]:
    """Each probe's trajectory record (the clocks and power sampled while it measured), by probe."""
    found = {name: outcome.conditions.get("trajectory") for name, outcome in results.probes.items()}
    return {name: record for name, record in found.items() if isinstance(record, dict) and record.get("readings")}


def _sampled(records: dict[str, dict[str, Any]], key: str, stat: str) -> dict[str, float]:
    """``record[key][stat]`` of each probe's trajectory that has it, by probe."""
    found = {name: (record.get(key) or {}).get(stat) for name, record in records.items()}
    return {name: float(v) for name, v in found.items() if _number(v) is not None}


def _measuring_clock_text(records: dict[str, dict[str, Any]]) -> str | None:
    """The SM clock NVML read while the probes measured: its span, and the probe that ran slowest."""
    lows, highs = _sampled(records, "sm_mhz", "min"), _sampled(records, "sm_mhz", "max")
    if not lows:
        return None
    slowest = min(lows, key=lambda name: lows[name])
    return (f"{_span([*lows.values(), *highs.values()], 'MHz')} over {len(lows)} probes "
            f"({sum(r['readings'] for r in records.values())} readings); slowest: {slowest}")  # fmt: skip


def _measuring_power_text(records: dict[str, dict[str, Any]], record: dict[str, Any]) -> str | None:
    """The power NVML read while the probes measured (the largest reading), and what the energy counter moved."""
    peaks = _sampled(records, "power_w", "max")
    energy = _spent(records)
    if not peaks and energy is None:
        return None
    parts = []
    if peaks:
        hottest = max(peaks, key=lambda name: peaks[name])
        parts.append(f"up to {fmt_num(peaks[hottest])} W ({hottest})")
    limit = _number(record.get("power_enforced_limit_w")) or _number(record.get("power_limit_w"))
    if limit is not None:
        parts.append(f"limit {fmt_num(limit)} W")
    if energy is not None:
        parts.append(f"energy counter: {fmt_num(energy[0])} J in {duration(energy[1])} of measuring")
    return "; ".join(parts)


def _spent(records: dict[str, dict[str, Any]]) -> tuple[float, float] | None:
    """The joules the energy counter moved over the trajectories that have it, and their seconds; None when none has."""
    counted = [r for r in records.values() if _number(r.get("energy_j")) is not None]
    if not counted:
        return None
    return sum(float(r["energy_j"]) for r in counted), sum(float(r["seconds"]) for r in counted)


def _measuring_reasons_text(records: dict[str, dict[str, Any]]) -> str | None:
    """Which clock-event reasons NVML named while the probes measured, each with how many probes saw it."""
    bits = [int(r["reasons"]) for r in records.values() if isinstance(r.get("reasons"), int)]
    if not bits:
        return None
    return _reason_counts(bits, "probes") or f"none in {len(bits)} probes"


def ran_at(results: Results, probes: Iterable[str], energy: bool = True) -> str:
    """ "SM 1551 – 1755 MHz, ≤ 780 W, 12.3 J in 510 ms": what ``probes`` ran at, by NVML sampled while
    they measured (their trajectories), the energy only with ``energy``; "" when none of them has one."""
    records = {name: record for name, record in trajectories(results).items() if name in set(probes)}
    lows, highs = _sampled(records, "sm_mhz", "min"), _sampled(records, "sm_mhz", "max")
    peaks = _sampled(records, "power_w", "max")
    spent = _spent(records) if energy else None
    parts = [f"SM {_span([*lows.values(), *highs.values()], 'MHz')}"] if lows else []
    parts += [f"≤ {fmt_num(max(peaks.values()))} W"] if peaks else []
    if spent is not None:
        parts.append(f"{fmt_num(spent[0])} J in {duration(spent[1])}")
    return ", ".join(parts)


def duration(seconds: float) -> str:
    """ "1.556 ms" under a second, else "12.3 s"."""
    return f"{fmt_num(seconds * 1e3)} ms" if seconds < 1 else f"{fmt_num(seconds)} s"


def _power_limit_text(record: dict[str, Any]) -> str | None:
    """The power limit NVML enforced, against the board's default: "700 W, the default" or "500 W, below the
    default 700 W"; the management limit where it differs from the enforced one."""
    enforced = _number(record.get("power_enforced_limit_w"))
    managed, default = _number(record.get("power_limit_w")), _number(record.get("power_default_limit_w"))
    limit = enforced if enforced is not None else managed
    if limit is None:
        return None
    if default is None:
        text = f"{fmt_num(limit)} W, default {NOT_RECORDED}"
    elif limit == default:
        text = f"{fmt_num(limit)} W, the default"
    else:
        text = f"{fmt_num(limit)} W, {'below' if limit < default else 'above'} the default {fmt_num(default)} W"
    if enforced is not None and managed is not None and managed != enforced:
        text += f"; management limit {fmt_num(managed)} W"
    return text


def _application_clocks(record: dict[str, Any]) -> tuple[bool | None, str]:
    """Whether the application clocks were set away from their defaults (None: not known), and what they were:
    "at their defaults (SM 1980 MHz, memory 3201 MHz)", "set: SM 1500 MHz (default 1980 MHz), ..."."""
    read = [(name, app, _number(record.get(f"{key}_default_application_mhz")))
            for name, key in (("SM", "sm_clock"), ("memory", "mem_clock"))
            if (app := _number(record.get(f"{key}_application_mhz"))) is not None]  # fmt: skip
    if not read:
        return None, f"application clocks {NOT_RECORDED}"
    if all(app == default for _, app, default in read):
        return False, f"application clocks at their defaults ({', '.join(f'{n} {fmt_num(a)} MHz' for n, a, _ in read)})"
    shown = ", ".join(
        f"{name} {fmt_num(app)} MHz (default {NOT_RECORDED if default is None else f'{fmt_num(default)} MHz'})"
        for name, app, default in read
    )
    moved = any(default is not None and app != default for _, app, default in read)
    return (True, f"application clocks set: {shown}") if moved else (None, f"application clocks {shown}")


def _held_by_a_setting(records: dict[str, dict[str, Any]], readings: list[dict[str, Any]]) -> tuple[bool | None, str]:
    """Whether NVML named "application clocks setting" (:data:`APPLICATION_CLOCKS`) while the probes measured
    (their trajectories), else in its readings around them (None: no reading), and in how many."""
    bits, where = [int(r["reasons"]) for r in records.values() if isinstance(r.get("reasons"), int)], "probes"
    if not bits:
        bits, where = [int(v) for v in _values(readings, "clock_event_reasons")], "readings around the probes"
    name = dict(CLOCK_EVENT_REASONS)[APPLICATION_CLOCKS]
    if not bits:
        return None, f"the reason '{name}': {NOT_RECORDED}"
    seen = sum(1 for value in bits if value & APPLICATION_CLOCKS)
    return seen > 0, f"'{name}' named in {seen} of {len(bits)} {where}"


def _clocks_locked_text(
    records: dict[str, dict[str, Any]], readings: list[dict[str, Any]], record: dict[str, Any]
) -> str:
    """Whether a setting held the clocks, as the run found them: "yes" when the application clocks were set away
    from their defaults or NVML named the reason such a setting gives, "no sign of it" when neither, else "not
    known"; then each reading. NVML has no query for a clock locked by ``nvidia-smi -lgc``: only the reason."""
    set_apart, clocks = _application_clocks(record)
    held, reason = _held_by_a_setting(records, readings)
    if set_apart or held:
        answer = "yes"
    elif held is False and set_apart is not None:
        answer = "no sign of it"
    else:
        answer = "not known"
    return f"{answer}: {clocks}; {reason}; a clock locked by nvidia-smi -lgc: {NOT_RECORDED} (NVML has no query for it)"


def _pcie_text(record: dict[str, Any]) -> str | None:
    gen, width = _number(record.get("pcie_generation")), _number(record.get("pcie_width"))
    if gen is None or width is None:
        return None
    text = f"gen {fmt_num(gen)} x{fmt_num(width)}"
    gen_max, width_max = _number(record.get("pcie_generation_max")), _number(record.get("pcie_width_max"))
    if gen_max is not None and width_max is not None and (gen_max, width_max) != (gen, width):
        text += f" (the link can do gen {fmt_num(gen_max)} x{fmt_num(width_max)})"
    return text


def _retried_text(results: Results) -> str:
    """How many probes were measured again, and how many facts are marked throttled or shared."""
    again = sum(1 for o in results.probes.values() if (_number(o.conditions.get("attempts")) or 1) > 1)
    marked = {v: sum(1 for f in results.facts if f.verdict == v) for v in ("throttled", "shared")}
    if not again and not any(marked.values()):
        return "none: no probe measured again, no fact marked throttled or shared"
    probes = f"{again} probe{'s' if again != 1 else ''} measured again"
    return f"{probes}; facts marked throttled: {marked['throttled']}, shared: {marked['shared']}"


def _rows(results: Results) -> Iterator[tuple[str, str | None]]:
    record = results.environment.get("device_record")
    record = record if isinstance(record, dict) else {}
    readings = probe_readings(results)
    sampled = trajectories(results)
    yield "SM clock while measuring (NVML, every 5 ms)", _measuring_clock_text(sampled)
    yield "Power while measuring (NVML)", _measuring_power_text(sampled, record)
    yield "Clock-event reasons while measuring", _measuring_reasons_text(sampled)
    hottest = [float(r["temperature_c"]) for r in sampled.values() if _number(r.get("temperature_c")) is not None]
    yield "GPU temperature while measuring", _span(hottest, "°C")
    yield "GPU temperature (NVML, around the probes)", _span(_values(nvml_readings(results), "temperature_c"), "°C")
    yield "Power draw (NVML, around the probes)", _power_text(nvml_readings(results), record)
    yield "SM clock around the probes", _sm_clock_text(results, readings or nvml_readings(results), record)
    kernel_clock = _kernel_clock_text(results)
    if kernel_clock:
        yield "SM clock inside the tensor-core kernels", kernel_clock
    yield "Clock-event (throttle) reasons", _reasons_text(readings, results.clocks)
    yield "Other compute processes", _processes_text(readings)
    yield "Disturbed measurements", _retried_text(results)
    yield "ECC", _mode(record, "ecc_mode", ON_OFF)
    yield "MIG", _mode(record, "mig_mode", ON_OFF)
    persistence = _number(record.get("persistence_mode"))
    yield "Persistence mode", None if persistence is None else ON_OFF.get(int(persistence), str(persistence))
    yield "Power limit", _power_limit_text(record)
    yield "Clocks locked", _clocks_locked_text(sampled, readings, record)
    pstate = _number(record.get("performance_state"))
    yield "Performance state", None if pstate is None else f"P{int(pstate)}"
    yield "PCIe link", _pcie_text(record)


def condition_rows(results: Results) -> list[tuple[str, str]]:
    """(what, summary) for each condition of the run, "not recorded" where the run has no reading of it."""
    rows = [(label, text or NOT_RECORDED) for label, text in _rows(results)]
    if not nvml_readings(results) and not results.environment.get("device_record"):
        rows.insert(0, ("NVML", "no readings in this results file (NVML absent where it ran, or an older file)"))
    return rows
