"""What ncu counted, held to what each probe says its launches moved: the witness facts.

A counted launch belongs to the probe of its innermost ``gpuprobe:<probe>`` NVTX range. For each quantity
a probe claims (its series ``launch``, :data:`QUANTITIES`), its last two launches' counts apart over their
claims apart is ``witness.<probe>.<quantity>``. docs/witness.md says whose launch is whose, what a probe
claims and what is compared.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from gpuprobe.core.results import Fact, ProbeOutcome
from gpuprobe.families.bandwidth.patterns import L2_SECTOR_BYTES
from gpuprobe.measure.witness.counters import (
    DRAM_READ,
    DRAM_WRITE,
    L2_READ_SECTORS,
    L2_WRITE_SECTORS,
    SHARED_CONFLICTS,
    SHARED_WAVEFRONTS,
    Counted,
)
from gpuprobe.output.witness import CONFLICTS_KEY, LABELS, LAUNCHES_KEY, fact_id
from gpuprobe.runner.launcher import NVTX_PREFIX, probe_range


@dataclass(frozen=True)
class Quantity:
    """One thing a counter witnesses: the fact id's part (what it is in words: ``LABELS``), the metric and its
    bytes per counted unit."""

    key: str
    metric: str
    scale: float = 1.0

    @property
    def label(self) -> str:
        return LABELS[self.key]


QUANTITIES = (
    Quantity("dram_read_bytes", DRAM_READ),
    Quantity("dram_write_bytes", DRAM_WRITE),
    Quantity("l2_read_bytes", L2_READ_SECTORS, L2_SECTOR_BYTES),  # lts__t_sectors counts 32-byte sectors
    Quantity("l2_write_bytes", L2_WRITE_SECTORS, L2_SECTOR_BYTES),
)
CLAIM_NAMES = {"moved_bytes": "dram_read_bytes"}  # bandwidth's goodput record: the bytes DRAM moved for a read


def claims_of(outcome: ProbeOutcome) -> dict[str, list[float]] | None:
    """The probe's ``launch`` series, its claim columns under their quantities' keys; None without one."""
    record = outcome.series.get("launch")
    if not record:
        return None
    columns = {CLAIM_NAMES.get(name, name): [float(v) for v in values] for name, values in record.items()}
    lengths = {len(values) for values in columns.values()}
    return columns if len(lengths) == 1 and lengths != {0} else None


def probes_launches(counted: Sequence[Counted], probe: str, kernel: str) -> list[Counted]:
    """The launches of ``kernel`` ncu counted in ``probe``'s innermost range, in the last process that made any."""
    own = [c for c in counted if c.innermost(NVTX_PREFIX) == probe_range(probe) and c.kernel == kernel]
    return [c for c in own if c.process == own[-1].process] if own else []


def _claimed_shape(claims: Mapping[str, list[float]], k: int) -> tuple[int, int] | None:
    if "blocks" not in claims or "threads" not in claims:
        return None
    return round(claims["blocks"][k]), round(claims["threads"][k])


def pair(claims: Mapping[str, list[float]], launches: Sequence[Counted]) -> list[Counted] | str:
    """The counted launch of each claimed one (the last ones, in order), or why there is none."""
    wanted = len(next(iter(claims.values())))
    shapes = {_claimed_shape(claims, k) for k in range(wanted)} - {None}
    fitting = [c for c in launches if not shapes or (c.blocks, c.threads) in shapes]
    if len(fitting) < wanted:
        return f"ncu counted {len(fitting)} such launches, the probe claims {wanted}"
    paired = fitting[-wanted:]
    wrong = [k for k, c in enumerate(paired) if _claimed_shape(claims, k) not in (None, (c.blocks, c.threads))]
    if wrong:
        k = wrong[0]
        return f"claimed launch {k + 1} ran {paired[k].blocks} x {paired[k].threads}, not {_claimed_shape(claims, k)}"
    return paired


def _last_two(values: Sequence[float]) -> tuple[int, int] | None:
    """The indices of the last two launches that claim something (> 0); None when fewer do."""
    claiming = [k for k, v in enumerate(values) if v > 0]
    return (claiming[-2], claiming[-1]) if len(claiming) >= 2 else None


def _apart(paired: Sequence[Counted], metrics: Sequence[str], scale: float, short: int, long: int) -> float | None:
    """What ``metrics`` (summed, times ``scale``) counted in launch ``long`` beyond launch ``short``."""
    values = [paired[k].values[m] for k in (short, long) for m in metrics]
    if any(v is None for v in values):
        return None
    half = len(metrics)
    return scale * (sum(values[half:]) - sum(values[:half]))  # type: ignore[arg-type]


def _launch_text(paired: Sequence[Counted], claims: Mapping[str, list[float]], short: int, long: int) -> str:
    passes = claims.get("passes")
    shown = [f"ID {paired[k].launch_id}" + (f", {passes[k]:g} passes" if passes else "") for k in (long, short)]
    return f"the long launch ({shown[0]}) beyond the short ({shown[1]})"


def per_pass(claims: Mapping[str, list[float]] | None, key: str) -> float | None:
    """The bytes a pass ``claims`` say ``key`` moved, at the long launch of their last two claiming it; None
    where they say nothing of it (or of passes)."""
    chosen = _last_two(claims.get(key, [])) if claims else None
    passes = claims.get("passes") if claims else None
    if chosen is None or not passes or passes[chosen[1]] <= 0:
        return None
    return claims[key][chosen[1]] / passes[chosen[1]]  # type: ignore[index]


@dataclass(frozen=True)
class Claim:
    """What the probe claims its long launch moved beyond its short one (``bytes``) and where that comes from."""

    bytes: float
    source: str


def claim_of(key: str, claims: Mapping[str, list[float]], suite: Mapping[str, list[float]] | None,
             short: int, long: int) -> Claim | None:  # fmt: skip
    """The full run's bytes a pass (the figure in RESULTS.json) times the passes between launches ``short`` and
    ``long`` where the full run recorded its claims, else this witness run's own claim; None where neither
    claims ``key``. A witness run whose own claim differs (another measured DRAM granule) says so."""
    own = claims[key][long] - claims[key][short] if key in claims else None
    full, passes = per_pass(suite, key), claims.get("passes")
    if full is None or not passes:
        return None if not own else Claim(own, "this witness run's claim (the full run recorded none)")
    claim = full * (passes[long] - passes[short])
    differs = own is not None and abs(own - claim) > 0.01 * abs(claim)
    return Claim(
        claim, f"the full run's {full:,.0f} bytes a pass" + (f"; the witness run's {own:,.0f}" if differs else "")
    )


def quantity_facts(probe: str, q: Quantity, claims: Mapping[str, list[float]], paired: Sequence[Counted],
                   suite: Mapping[str, list[float]] | None = None) -> list[Fact]:  # fmt: skip
    """``.counted`` for ``q``, and where the probe claims it (``suite``: the full run's claims) ``.claimed`` and
    the comparison."""
    chosen = _last_two(claims.get(q.key, []))
    short, long = chosen or (len(paired) - 2, len(paired) - 1)
    counted = _apart(paired, (q.metric,), q.scale, short, long)
    where = f"{probe}: {_launch_text(paired, claims, short, long)}"
    if counted is None:
        return [Fact(fact_id(probe, q.key, "counted"), None, "byte", probe=probe,
                     detail=f"{where}: ncu reported {q.metric} n/a")]  # fmt: skip
    said = f"{where}: {counted:,.0f} bytes {q.label} ({q.metric})"
    facts = [Fact(fact_id(probe, q.key, "counted"), counted, "byte", samples=[counted], probe=probe, detail=said)]
    claim = claim_of(q.key, claims, suite, short, long)
    if claim is None:
        return facts
    claim_text = f"{where}: the probe claims {claim.bytes:,.0f} bytes {q.label} ({claim.source})"
    facts.append(Fact(fact_id(probe, q.key, "claimed"), claim.bytes, "byte", samples=[claim.bytes], probe=probe,
                      detail=claim_text))  # fmt: skip
    if claim.bytes <= 0:
        return facts
    ratio = counted / claim.bytes
    detail = f"{said}, where the probe claims {claim.bytes:,.0f} ({claim.source}): counted / claimed = {ratio:.3f}"
    return [*facts, Fact(fact_id(probe, q.key), ratio, "fraction", samples=[ratio], probe=probe, detail=detail)]


def conflict_facts(probe: str, claims: Mapping[str, list[float]], paired: Sequence[Counted]) -> list[Fact]:
    """The shared-memory bank conflicts of the probe's last two launches apart, per wavefront and in all; none
    where its kernel touches no shared memory."""
    short, long = len(paired) - 2, len(paired) - 1
    conflicts = _apart(paired, SHARED_CONFLICTS, 1.0, short, long)
    wavefronts = _apart(paired, SHARED_WAVEFRONTS, 1.0, short, long)
    if conflicts is None or not wavefronts:
        return []
    share = conflicts / wavefronts
    where = f"{probe}: {_launch_text(paired, claims, short, long)}"
    said = f"{where}: {conflicts:,.0f} shared-memory bank conflicts in {wavefronts:,.0f} wavefronts (loads and stores)"
    return [
        Fact(fact_id(probe, CONFLICTS_KEY), share, "fraction", samples=[share], probe=probe,
             detail=f"{said}: {share:.3f} a wavefront, where its layout claims none"),
        Fact(fact_id(probe, CONFLICTS_KEY, "counted"), conflicts, "count", samples=[conflicts], probe=probe,
             detail=said),
    ]  # fmt: skip


def unpaired(probe: str, why: str) -> list[Fact]:
    """The one fact of a probe whose launches could not be witnessed: why not."""
    return [Fact(fact_id(probe, LAUNCHES_KEY), None, "count", probe=probe, detail=f"{probe}: not witnessed: {why}")]


def witness_facts(
    probe: str, kernel: str, outcome: ProbeOutcome | None, counted: Sequence[Counted], suite: ProbeOutcome | None = None
) -> list[Fact]:
    """Every witness fact of ``probe`` (whose kernel is ``kernel``): its launches in the witness run
    (``outcome``) paired with what ncu counted, held to what the full run (``suite``, its outcome of the probe)
    claims a pass moves (see the module), or why they could not be."""
    if outcome is None or outcome.status != "ok":
        ended = "was not measured" if outcome is None else f"ended {outcome.status}: {outcome.detail}"
        return unpaired(probe, f"the witness run's probe {ended}")
    claims = claims_of(outcome)
    if claims is None or len(next(iter(claims.values()))) < 2:
        return unpaired(probe, "it records no short and long launch in its series 'launch'")
    launches = probes_launches(counted, probe, kernel)
    paired = pair(claims, launches)
    where = f"{kernel} in NVTX range {probe_range(probe)}"
    if isinstance(paired, str):
        return unpaired(probe, f"{where}: {paired}")
    count = float(len(paired))
    detail = (f"{probe}: ncu counted {len(launches)} launches of {where}; the last {len(paired)} are the probe's "
              f"claimed ones (IDs {', '.join(str(c.launch_id) for c in paired)})")  # fmt: skip
    facts = [Fact(fact_id(probe, LAUNCHES_KEY), count, "count", samples=[count], probe=probe, detail=detail)]
    suite_claims = claims_of(suite) if suite is not None else None
    for quantity in QUANTITIES:
        facts += quantity_facts(probe, quantity, claims, paired, suite_claims)
    return facts + conflict_facts(probe, claims, paired)
