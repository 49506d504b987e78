"""The run's conditions on the sheet, from what the simulated GPU's NVML reports around each probe and
from the records a session writes (``clocks["nvml_before"]`` / ``["nvml_after"]``, the device record)."""

from __future__ import annotations

from gpuprobe.core.results import Device, Fact, ProbeOutcome, Results
from gpuprobe.measure.conditions import TRAJECTORY_KEY, ConditionRecorder
from gpuprobe.output import run_conditions
from gpuprobe.output.run_conditions import NOT_RECORDED, condition_rows, reason_names
from gpuprobe.runner.trajectory import Reading, Trajectory
from gpuprobe.simulated.gpu import FaultyGpu, ptx_parameters

DEVICE = Device(name="Simulated GPU", cc="9.0", arch="sm_90a", sm_count=132, l2_bytes=50 * 2**20)
RECORD = {"power_limit_w": 700.0, "power_enforced_limit_w": 650.0, "ecc_mode_current": 1, "ecc_mode_pending": 0,
          "mig_mode_current": 0, "mig_mode_pending": 0, "persistence_mode": 1, "performance_state": 0,
          "pcie_generation": 4, "pcie_width": 16, "pcie_generation_max": 5, "pcie_width_max": 16,
          "sm_clock_application_mhz": 1980, "sm_clock_max_mhz": 1980}  # fmt: skip


def measured_on(gpu: FaultyGpu, probes: int) -> dict[str, ProbeOutcome]:
    """``probes`` probes measured between the simulated GPU's clock and NVML snapshots, as a measuring
    process measures them."""
    recorder = ConditionRecorder(gpu, ptx_parameters(), clock_usable=True)
    return {f"toy.p{i}": recorder.measure(f"toy.p{i}", lambda i=i: _ok(f"toy.p{i}")).outcome for i in range(probes)}


def _ok(name: str):
    from gpuprobe.families.base import Measured

    return Measured(name, ProbeOutcome("ok"))


def results_of(probes: dict[str, ProbeOutcome], **records) -> Results:
    return Results(DEVICE, [Fact("latency.l2", 261.0, "cycle")], probes, **records)


def test_the_simulated_gpus_nvml_reaches_the_sheet() -> None:
    probes = measured_on(FaultyGpu(mhz=1755.0, noise=0.0), 30)
    rows = dict(condition_rows(results_of(probes)))
    # The simulated part's temperature climbs a degree every 20 readings, its power a watt a reading.
    assert rows["GPU temperature (NVML, around the probes)"] == "40 – 43 °C"
    assert rows["Power draw (NVML, around the probes)"] == "151 – 210 W"
    assert rows["SM clock around the probes"].startswith("1755 MHz from the device's timers, 1755 MHz by NVML")
    assert rows["Clock-event (throttle) reasons"] == "none in 60 readings around the probes"
    assert rows["Other compute processes"] == "none in 60 readings"
    assert rows["ECC"] == rows["MIG"] == NOT_RECORDED  # the simulated GPU has no device record


def test_throttling_and_other_tenants_are_counted_by_reading() -> None:
    probes = measured_on(FaultyGpu(mhz=1755.0, noise=0.0, throttle="always", shared="always"), 4)
    probes["toy.p0"].conditions["attempts"] = 2
    results = results_of(probes)
    results.facts.append(Fact("latency.l1", 33.0, "cycle", verdict="throttled"))
    rows = dict(condition_rows(results))
    assert rows["Clock-event (throttle) reasons"] == "around the probes: HW thermal slowdown in 8 of 8 readings"
    assert rows["Other compute processes"] == "up to 1, in 8 of 8 readings"
    assert rows["Disturbed measurements"] == "1 probe measured again; facts marked throttled: 1, shared: 0"


def test_the_runs_own_readings_and_the_device_record() -> None:
    before = {"temperature_c": 35, "power_w": 70.5, "clock_event_reasons": 0x1, "sm_clock_mhz": 345}
    after = {"temperature_c": 52, "power_w": 180.0, "clock_event_reasons": 0, "sm_clock_mhz": "unavailable (x)"}
    results = results_of({}, clocks={"nvml_before": before, "nvml_after": after},
                         environment={"device_record": RECORD})  # fmt: skip
    rows = dict(condition_rows(results))
    assert rows["GPU temperature (NVML, around the probes)"] == "35 – 52 °C"
    assert rows["Power draw (NVML, around the probes)"] == "70.5 – 180 W (limit 650 W)"  # the enforced limit
    assert rows["Clock-event (throttle) reasons"] == "at the run's start: GPU idle; at its end: none"
    assert rows["ECC"] == "enabled (pending after reset: disabled)"
    assert (rows["MIG"], rows["Persistence mode"], rows["Performance state"]) == ("disabled", "enabled", "P0")
    assert rows["PCIe link"] == "gen 4 x16 (the link can do gen 5 x16)"
    assert "max 1980 MHz, application clock 1980 MHz" in rows["SM clock around the probes"]


def _sampled(bits: int) -> ProbeOutcome:
    """A probe whose trajectory (NVML sampled while it measured) named the clock-event reasons ``bits``."""
    readings = [Reading(0.0, 1500.0, 3201.0, 300.0, 50.0, 0), Reading(0.5, 1500.0, 3201.0, 420.0, 55.0, bits)]
    return ProbeOutcome("ok", conditions={TRAJECTORY_KEY: Trajectory(readings).record()})


def test_clocks_held_by_a_setting_and_the_power_limit_as_the_run_found_them() -> None:
    """Application clocks set away from their defaults, and NVML naming the reason such a setting (or a clock
    locked with nvidia-smi -lgc) gives while one of two probes measured; a limit lowered from the default."""
    record = {**RECORD, "sm_clock_application_mhz": 1500, "sm_clock_default_application_mhz": 1980,
              "mem_clock_application_mhz": 3201, "mem_clock_default_application_mhz": 3201,
              "power_default_limit_w": 700.0}  # fmt: skip
    probes = {"toy.held": _sampled(0x2 | 0x4), "toy.free": _sampled(0)}
    rows = dict(condition_rows(results_of(probes, environment={"device_record": record})))
    assert rows["Clocks locked"] == (
        "yes: application clocks set: SM 1500 MHz (default 1980 MHz), memory 3201 MHz (default 3201 MHz); "
        "'application clocks setting' named in 1 of 2 probes; "
        f"a clock locked by nvidia-smi -lgc: {NOT_RECORDED} (NVML has no query for it)"
    )
    assert rows["Power limit"] == "650 W, below the default 700 W; management limit 700 W"
    assert rows["Persistence mode"] == "enabled"


def test_clocks_at_their_defaults_show_no_sign_of_a_setting_and_without_readings_it_is_not_known() -> None:
    record = {**RECORD, "sm_clock_default_application_mhz": 1980, "power_enforced_limit_w": 700.0,
              "power_default_limit_w": 700.0}  # fmt: skip
    rows = dict(condition_rows(results_of({"toy.p": _sampled(0x4)}, environment={"device_record": record})))
    assert rows["Clocks locked"].startswith(
        "no sign of it: application clocks at their defaults (SM 1980 MHz); 'application clocks setting' named in "
        "0 of 1 probes; "
    )
    assert rows["Power limit"] == "700 W, the default"
    bare = dict(condition_rows(results_of({})))
    assert bare["Clocks locked"].startswith(
        f"not known: application clocks {NOT_RECORDED}; the reason 'application clocks setting': {NOT_RECORDED}; "
    )
    assert bare["Power limit"] == bare["Persistence mode"] == NOT_RECORDED


def test_a_run_without_nvml_says_so() -> None:
    rows = condition_rows(results_of({"toy.p": ProbeOutcome("ok", conditions={"nvml_before": None})}))
    assert rows[0] == ("NVML", "no readings in this results file (NVML absent where it ran, or an older file)")
    assert dict(rows)["GPU temperature (NVML, around the probes)"] == NOT_RECORDED


def test_reason_bits_by_name() -> None:
    assert reason_names(0) == []
    assert reason_names(0x1 | 0x4 | 0x80) == ["GPU idle", "SW power cap", "HW power brake"]
    assert reason_names(0x1000) == ["other (0x1000)"]
    assert [bit for bit, _ in run_conditions.CLOCK_EVENT_REASONS] == [1 << i for i in range(9)]


def test_the_clock_the_tensor_cores_ran_at_is_shown_beside_nvml_s_readings_around_the_probes() -> None:
    """The first H200 run: NVML read 1890-1980 MHz around the probes, the wgmma kernels ran at 1610-1800."""
    from pathlib import Path

    from gpuprobe.core.results import load

    rows = dict(condition_rows(load(Path(__file__).resolve().parents[1] / "reports" / "nvidia-h200" / "results.json")))
    assert rows["SM clock inside the tensor-core kernels"].startswith("1610 – 1800 MHz over 24 tensor-core configura")
    assert rows["SM clock inside the tensor-core kernels"].endswith("slowest: tensor.wgmma.e4m3.m64n256k32.ss")
