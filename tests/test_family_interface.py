"""What every measurement family provides beyond its probes: a time plan and a first-contact smoke check."""

from __future__ import annotations

import dataclasses
import json

import pytest

from gpuprobe.families.base import Plan, Smoke
from gpuprobe.families.catalog import BY_NAME, OPT_IN
from gpuprobe.measure.plan import SMOKE, family_plan, family_seconds
from gpuprobe.simulated.gpu import SimulatedGpu, measure_family, smoke_part, suite_options
from tests.helpers.devices import A100_SXM, H100_SXM, H200

MEASURED = [name for name in BY_NAME if name not in OPT_IN]
SMOKE_FAMILY_S = 4.0  # a family's smoke probes on an H200, beyond starting its measuring process


@pytest.mark.parametrize("name", list(BY_NAME))
def test_every_family_declares_a_plan_and_a_smoke_check(name: str) -> None:
    family = BY_NAME[name]
    assert family.name == name and callable(family.plan), f"{name} has no plan(settings, device)"
    smoke = family.smoke
    assert isinstance(smoke, Smoke), f"{name} has no smoke check"
    assert smoke.probes and set(smoke.probes) <= set(family.probes), smoke.probes
    assert isinstance(smoke.settings, family.settings)


@pytest.mark.parametrize("name", list(BY_NAME))
def test_settings_survive_their_json_form(name: str) -> None:
    """A family's settings cross into the measuring process as JSON: its defaults and its smoke settings
    come back equal, every Stopping in them included."""
    family = BY_NAME[name]
    for settings in (family.settings(), family.smoke.settings):
        assert family.settings_from(json.loads(json.dumps(dataclasses.asdict(settings)))) == settings


@pytest.mark.parametrize("device", [H200, H100_SXM, A100_SXM], ids=lambda d: d.name)
@pytest.mark.parametrize("name", list(BY_NAME))
def test_a_plan_counts_real_work_and_the_smoke_settings_plan_less(name: str, device) -> None:
    family = BY_NAME[name]
    full, smoke = family.plan(family.settings(), device), family.plan(family.smoke.settings, device)
    assert isinstance(full, Plan) and isinstance(smoke, Plan)
    assert full.probes >= 1 and full.launches >= full.probes and full.gpu_s > 0
    assert family_seconds(smoke) <= family_seconds(full)


@pytest.mark.parametrize("name", MEASURED)
def test_a_family_smoke_check_fits_its_share_of_the_first_contact_stage_on_an_h200(name: str) -> None:
    plan = family_plan(name, BY_NAME[name], SMOKE, BY_NAME[name].smoke.settings, H200).plan
    assert plan is not None and family_seconds(plan, child_start=False) < SMOKE_FAMILY_S, plan


@pytest.mark.parametrize("name", MEASURED)
def test_a_family_smoke_probes_run_and_verify_themselves_on_the_simulated_gpu(name: str) -> None:
    family = BY_NAME[name]
    # GPU 0 of two (the multi-GPU families measure too), of the arch the family's smoke probes need
    gpu = SimulatedGpu(**suite_options(peer_node={"count": 2}, **smoke_part(name)))
    measured = measure_family(family, gpu, set(family.smoke.probes), family.smoke.settings)
    assert list(measured) == [p for p in family.probes if p in family.smoke.probes]
    for probe, outcome in measured.items():
        assert outcome.outcome.status == "ok", f"{probe}: {outcome.outcome.detail}"
