"""A run cut to a few probes: for a test about a few facts, the probes that measure them, not every probe of
their families."""

from __future__ import annotations

import dataclasses
from collections.abc import Collection

from gpuprobe.families import catalog
from gpuprobe.families.base import Family


def families_cut_to(probes: Collection[str]) -> dict[str, Family]:
    """The catalog's families with any of ``probes``, in catalog order, each cut to those probes (in its own
    order). A run's parent hands each family's probes to the measuring child, which measures those alone: in
    place of the catalog's ``BY_NAME`` in :mod:`gpuprobe.measure.session`, a run measures ``probes`` alone."""
    families = {name: family for name, family in catalog.BY_NAME.items() if set(family.probes) & set(probes)}
    assert set(probes) <= {name for family in families.values() for name in family.probes}, probes
    return {name: dataclasses.replace(family, probes=tuple(p for p in family.probes if p in probes))
            for name, family in families.items()}  # fmt: skip
