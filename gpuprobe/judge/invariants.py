"""Cross-generation invariants: what must hold on any NVIDIA GPU, known model or not.

A measurement family adds its own as ``INVARIANTS`` in its module: functions
``(facts: dict[str, Fact], device: Device) -> list[Check]``, each leaving out what was not measured.

These are asserted in discovery mode (an unknown GPU has no per-model expectations) and on every
known model as well. Each check is a :class:`Check` (name, ok, detail, the facts it holds, and whether
it is physics); a check whose facts were not measured is skipped, i.e. left out of the list rather
than reported as passing. A failed check marks the facts it names: none of them may pass beside it
(:mod:`gpuprobe.judge.verdicts`). A physics check holds under any settings (a figure against what the
device can do, a sign), so a smoke run is held to it too; the others compare facts measured the same
way, which only a full run's settings promise. The physics every fact obeys, whatever its family, is
:mod:`gpuprobe.judge.physics`.

- Latency ordering: shared < L1 < L2 (< far L2) < DRAM, over whichever of these were measured.
- ``capacity.l2`` within a factor 0.4–1.6 of the L2 size the device reports: the near/far split,
  address hashing and the replacement policy blur the knee, but not by more than that.
- ``capacity.l1`` between 16 KiB and the unified L1/shared-memory size of one SM. CUDA reports only
  the shared-memory part (``shared_per_sm_bytes``); the unified array is larger by the smallest
  carve-out, 28 KiB on sm_80/sm_89/sm_90 and 32 KiB on sm_70/sm_75, so ``L1_MARGIN_BYTES`` is added.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from typing import NamedTuple

from gpuprobe.core.results import Device, Fact

KIB = 1024

#: The latency facts in the order they must increase.
LATENCY_ORDER = ("latency.shared", "latency.l1", "latency.l2", "latency.l2_far", "latency.dram")

L2_FACTOR_LOW = 0.4
L2_FACTOR_HIGH = 1.6
L1_MIN_BYTES = 16 * KIB
L1_MARGIN_BYTES = 32 * KIB
L1_MAX_UNKNOWN_BYTES = 256 * KIB



class Check(NamedTuple):
    """One invariant's outcome: its stable name, whether it holds, what it compared, the facts it holds
    (a failure marks each of them), whether it is physics (held in a smoke run too), and whether it holds
    only within the noise (``doubtful``: the medians are the wrong way round, their CIs overlap; a PASS
    beside it would claim more than the samples show)."""

    name: str
    ok: bool
    detail: str
    facts: tuple[str, ...] = ()
    physics: bool = False
    doubtful: bool = False

#: What a family exports in ``INVARIANTS``: the checks it adds, given the facts and the device.
InvariantCheck = Callable[[dict[str, Fact], Device], list[Check]]


def _value(facts: dict[str, Fact], fact_id: str) -> Fact | None:
    """The fact if it was measured (has a value), else None."""
    fact = facts.get(fact_id)
    return fact if fact is not None and fact.value is not None else None


def measured(facts: dict[str, Fact], *ids: str) -> list[Fact] | None:
    """The facts of ``ids`` in order if every one was measured, else None (a check needing them is left out)."""
    found = [_value(facts, i) for i in ids]
    return None if any(f is None for f in found) else found  # type: ignore[return-value]


def _kib(value: float) -> str:
    return f"{value / KIB:.1f} KiB"


def _mib(value: float) -> str:
    return f"{value / (KIB * KIB):.2f} MiB"


def latency_order_checks(facts: dict[str, Fact]) -> list[Check]:
    """One check per consecutive pair of measured latencies in ``LATENCY_ORDER``."""
    present = [fact for fact_id in LATENCY_ORDER if (fact := _value(facts, fact_id)) is not None]
    checks: list[Check] = []
    for lower, upper in itertools.pairwise(present):
        name = f"latency_order.{lower.id.removeprefix('latency.')}_below_{upper.id.removeprefix('latency.')}"
        if lower.unit != upper.unit:
            checks.append((name, False, f"cannot compare {lower.id} in {lower.unit} with {upper.id} in {upper.unit}"))
            continue
        ok = lower.value < upper.value
        relation = "<" if ok else "≥"
        detail = f"{lower.id} = {lower.value:g} {lower.unit} {relation} {upper.id} = {upper.value:g} {upper.unit}"
        checks.append(Check(name, ok, detail, (lower.id, upper.id)))
    return checks


def l2_capacity_check(facts: dict[str, Fact], device: Device) -> list[Check]:
    """``capacity.l2`` against the L2 size the device reports (skipped when either is missing)."""
    fact = _value(facts, "capacity.l2")
    if fact is None or not device.l2_bytes or device.l2_bytes <= 0:
        return []
    low, high = L2_FACTOR_LOW * device.l2_bytes, L2_FACTOR_HIGH * device.l2_bytes
    ok = fact.unit == "byte" and low <= fact.value <= high
    detail = (
        f"capacity.l2 = {fact.value:g} {fact.unit} ({_mib(fact.value)}); device reports {_mib(device.l2_bytes)}, "
        f"allowed {L2_FACTOR_LOW:g}–{L2_FACTOR_HIGH:g}× = {_mib(low)}–{_mib(high)}"
    )
    return [Check("capacity_l2_near_device_l2", ok, detail, (fact.id,))]


def l1_limit_bytes(device: Device) -> tuple[float, str]:
    """The largest plausible L1 of one SM, and where that number comes from."""
    if device.shared_per_sm_bytes:
        limit = device.shared_per_sm_bytes + L1_MARGIN_BYTES
        return limit, f"shared memory per SM {_kib(device.shared_per_sm_bytes)} + {_kib(L1_MARGIN_BYTES)} carve-out"
    return L1_MAX_UNKNOWN_BYTES, "shared memory per SM unknown; the largest unified L1/shared array"


def l1_capacity_check(facts: dict[str, Fact], device: Device) -> list[Check]:
    """``capacity.l1`` between 16 KiB and the unified L1/shared size of one SM."""
    fact = _value(facts, "capacity.l1")
    if fact is None:
        return []
    limit, why = l1_limit_bytes(device)
    ok = fact.unit == "byte" and L1_MIN_BYTES <= fact.value <= limit
    detail = (
        f"capacity.l1 = {fact.value:g} {fact.unit} ({_kib(fact.value)}); allowed {_kib(L1_MIN_BYTES)}–{_kib(limit)} "
        f"({why})"
    )
    return [Check("capacity_l1_within_sm", ok, detail, (fact.id,))]


def check_invariants(
    facts: dict[str, Fact], device: Device, family_checks: Iterable[InvariantCheck] = ()
) -> list[Check]:
    """Every cross-generation invariant whose facts were measured: the general ones here, then
    ``family_checks`` (what the families export as ``INVARIANTS``; the catalog collects them). Each is a
    :class:`Check` naming the facts it holds: a failed check that named none would leave a PASS beside it.

    Names are stable ids (they become facts ``invariant.<name>``), e.g. ``latency_order.l1_below_l2``.
    """
    return [
        *latency_order_checks(facts),
        *l2_capacity_check(facts, device),
        *l1_capacity_check(facts, device),
        *(_named(result, check) for check in family_checks for result in check(facts, device)),
    ]


def _named(result: Check, check: InvariantCheck) -> Check:
    """A family's check as it must be: a Check that names the facts it holds."""
    if not isinstance(result, Check) or not result.facts:
        raise TypeError(f"{check.__qualname__} gave {result!r}: a Check naming the facts it holds")
    return result
