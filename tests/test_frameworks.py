"""The frameworks family's host side: its stamp kernel (library_timing's text, its contract from sm_80), the checks of
a matmul's and attention's results, the runs against the simulated GPU (facts on success, each missing library
not_run with its reason, a wrong result and a rate above the peak caught), the CuPy side's one stream and the order
of its timed batch (PyTorch stood in for), and the time the plan needs."""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import types
import warnings
from collections.abc import Iterator

import numpy as np
import pytest

from gpuprobe.core.arch import SUPPORTED_ARCHS, parse_arch
from gpuprobe.core.errors import ProbeFailure
from gpuprobe.families import frameworks, instruction_peak
from gpuprobe.families.frameworks import Case, simulated
from gpuprobe.families.library_timing import clock_stamp_text
from gpuprobe.families.wgmma import HOPPER_FLOP_PER_CLK_PER_SM
from gpuprobe.families.wgmma.simulated import cublas_mhz
from gpuprobe.kernels.registry import PTX_DIR, all_probes
from gpuprobe.measure.plan import family_seconds
from gpuprobe.runner import flight
from gpuprobe.runner.cupy_launcher import CupyLauncher
from gpuprobe.runner.frameworks import (
    TORCH_MISSING,
    TRITON_MISSING,
    CupyFrameworks,
    Prepared,
    Work,
    _first_call,
    open_frameworks,
)
from gpuprobe.runner.launcher import LaunchPathUnavailable
from gpuprobe.runner.triton_tiles import triton_refusal
from gpuprobe.simulated.gpu import measure_family, simulated_gpu
from tests.helpers.checked import contract_results
from tests.helpers.devices import H200

FAST = frameworks.Settings(calls=2)
PEAK_PER_CLOCK = 4000.0  # the instruction peak the tests' runs found, flop per clock per SM (wgmma's 4096 x 0.98)


def _state(*dtypes: str) -> dict:
    state: dict = {}
    for dtype in dtypes:
        scale = HOPPER_FLOP_PER_CLK_PER_SM[dtype] / 4096
        instruction_peak.record(state, dtype, [PEAK_PER_CLOCK * scale], f"wgmma.throughput.{dtype}")
    return state


def _run(gpu=None, state=None, runnable=None, settings=FAST):
    gpu = gpu if gpu is not None else simulated_gpu(sm_count=4, noise=0.0)
    names = set(frameworks.PROBES) if runnable is None else set(runnable)
    state = _state("bf16", "f16", "e4m3") if state is None else state
    return measure_family(frameworks, gpu, names, settings, state)


def _facts(measured) -> dict:
    return {f.id: f for m in measured.values() for f in m.facts}


def test_the_probe_order_is_the_declared_family() -> None:
    declared = [p for p in all_probes() if p.family == "frameworks"]
    assert set(frameworks.PROBES) == {p.name for p in declared}
    facts = {f for p in declared for f in p.facts}
    made = {f"{case.prefix}.{what}" for name in frameworks.PROBES for case in frameworks.cases(FAST, name)
            for what, _ in frameworks.RATE_FACTS}  # fmt: skip
    assert facts == made


def test_the_stamp_is_library_timings_clock_stamp() -> None:
    text = (PTX_DIR / "frameworks" / "frameworks.ptx").read_text()
    assert clock_stamp_text(frameworks.STAMP_KERNEL) in text


def test_contracts_hold_from_sm_80_and_sm_75_is_explicitly_unsupported() -> None:
    results = contract_results([p for p in all_probes() if p.family == "frameworks"], SUPPORTED_ARCHS)
    for r in results:
        if parse_arch(r.arch).number >= 80:
            assert r.status == "ok", (r.probe, r.arch, r.detail)
        else:
            assert r.status == "unsupported" and "does not target" in r.detail, (r.probe, r.arch)


def test_attention_counts_its_two_matmuls_halved_by_the_causal_mask() -> None:
    shape = (4, 16, 4096, 128)
    assert Work("cudnn", "bf16", shape).flop == 4 * 4 * 16 * 4096**2 * 128
    assert Work("cudnn", "bf16", shape, causal=True).flop == 2 * 4 * 16 * 4096**2 * 128
    assert Work("torch", "e4m3", (8192,)).flop == 2 * 8192**3


@pytest.mark.parametrize(
    ("library", "dtype", "shape"),
    [("torch", "f32", (64,)), ("keras", "bf16", (64,)), ("torch", "bf16", (1, 2, 3, 4)), ("cudnn", "bf16", (64,))],
)
def test_work_that_means_nothing_is_refused(library: str, dtype: str, shape: tuple) -> None:
    with pytest.raises(ValueError, match="Work"):
        Work(library, dtype, shape)


@pytest.mark.parametrize(
    "change",
    [
        {"matmul_n": 1000},
        {"matmul_n": 512},
        {"calls": 0},
        {"attention_shape": (1, 1, 128, 64)},
        {"attention_shape": (1, 2, 4096)},
    ],
)
def test_settings_that_mean_nothing_are_refused(change: dict) -> None:
    with pytest.raises(ValueError, match="Settings"):
        dataclasses.replace(frameworks.Settings(), **change)


# --------------------------------------------------------------------------- the result checks


def test_the_matmul_check_allows_rounding_and_catches_a_wrong_element() -> None:
    rng, span = np.random.default_rng(0), 255  # bf16's value range
    a, b = (rng.integers(-span, span + 1, shape).astype(np.float64) for shape in ((4, 4096), (4096, 4)))
    case = Case("library.torch_matmul.bf16", Work("torch", "bf16", (4096,)))
    exact = a @ b
    assert frameworks.term_spread("bf16", 4096) == pytest.approx(64 * 255 * 256 / 3)
    frameworks.check_matmul(case, {"a": a, "b": b, "c": exact * (1 + 2.0**-8)})  # an ulp of bf16 off: rounding
    wrong = exact.copy()
    wrong[2, 1] += frameworks.term_spread("bf16", 4096) / 4  # a quarter of a sum's spread: a wrong term, or worse
    with pytest.raises(ProbeFailure, match=r"C\[2, 1\].*1 of 16 sampled elements off"):
        frameworks.check_matmul(case, {"a": a, "b": b, "c": wrong})


def test_causal_attention_lets_the_first_query_see_the_first_key_alone() -> None:
    rng = np.random.default_rng(1)
    q, k, v = rng.standard_normal((2, 16)), rng.standard_normal((32, 16)), rng.standard_normal((32, 16))
    causal = frameworks.attention_reference(q, k, v, [0, 31], causal=True)
    full = frameworks.attention_reference(q, k, v, [0, 31], causal=False)
    np.testing.assert_allclose(causal[0], v[0])
    np.testing.assert_allclose(causal[1], full[1])  # the last query sees every key either way
    case = Case("library.sdpa.bf16.causal", Work("cudnn", "bf16", (1, 1, 32, 16), causal=True))
    frameworks.check_attention(case, {"q": q, "k": k, "v": v, "o": causal}, [0, 31])
    with pytest.raises(ProbeFailure, match="query row 0"):
        frameworks.check_attention(case, {"q": q, "k": k, "v": v, "o": full}, [0, 31])  # the mask ignored


# --------------------------------------------------------------------------- on the simulated GPU


def test_every_rate_its_clock_and_its_fraction_of_the_peak_at_that_clock() -> None:
    gpu = simulated_gpu(sm_count=4, noise=0.0)
    measured = _run(gpu)
    assert {n: m.outcome.status for n, m in measured.items()} == dict.fromkeys(frameworks.PROBES, "ok")
    facts = _facts(measured)
    mhz = cublas_mhz(gpu)
    for name in frameworks.PROBES:
        for case in frameworks.cases(FAST, name):
            share = simulated.SHARES[simulated.work_key(case.work)]
            dense = HOPPER_FLOP_PER_CLK_PER_SM[case.work.dtype]
            assert facts[f"{case.prefix}.sm_clock"].value == pytest.approx(mhz, rel=0.01)
            assert facts[f"{case.prefix}.tflops"].value == pytest.approx(share * dense * 4 * mhz / 1e6, rel=0.01)
            expected = share * dense / (PEAK_PER_CLOCK * dense / 4096)
            assert facts[f"{case.prefix}.fraction_of_peak"].value == pytest.approx(expected, rel=0.01), case.prefix
    assert gpu.launches.count(frameworks.STAMP_KERNEL) == 2 * 7 * FAST.sampling.max_repeats  # 7 cases, 2 stamps each
    assert "4x16x4096x128 causal" in measured[frameworks.SDPA_PROBE].outcome.detail


def test_without_an_instruction_peak_the_fraction_is_unmeasured_with_the_reason() -> None:
    measured = _run(state=_state("bf16"), runnable=["frameworks.torch_matmul.e4m3", "frameworks.torch_matmul.bf16"])
    facts = _facts(measured)
    share = facts["library.torch_matmul.e4m3.fraction_of_peak"]
    assert share.value is None and share.detail == instruction_peak.missing_reason("e4m3")
    assert facts["library.torch_matmul.e4m3.tflops"].value > 0
    assert facts["library.torch_matmul.bf16.fraction_of_peak"].value > 0


@pytest.mark.parametrize(("missing", "reason", "not_run"), [
    ({"torch": ""}, TORCH_MISSING, frameworks.PROBES),
    ({"triton": TRITON_MISSING}, TRITON_MISSING, [frameworks.TRITON_PROBE]),
    ({"cudnn": "PyTorch has no cuDNN SDPA backend here (cuDNN is not available)"}, "no cuDNN SDPA backend",
     [frameworks.SDPA_PROBE]),
])  # fmt: skip
def test_a_missing_library_is_not_run_with_its_reason(missing: dict, reason: str, not_run: list) -> None:
    gpu = simulated_gpu(sm_count=4, noise=0.0, family_options={"frameworks_missing": missing})
    measured = _run(gpu)
    for name, m in measured.items():
        if name not in not_run:
            assert m.outcome.status == "ok", name
            continue
        assert m.outcome.status == "not_run" and reason in m.outcome.detail, name
        assert m.facts and all(f.value is None and reason in f.detail for f in m.facts), name
    assert {f.id for m in measured.values() for f in m.facts} == {
        f for p in all_probes() if p.family == "frameworks" for f in p.facts
    }


def test_a_wrong_result_fails_every_probe() -> None:
    gpu = simulated_gpu(sm_count=4, noise=0.0, family_options={"frameworks_corrupt": True})
    measured = _run(gpu)
    for name, m in measured.items():
        assert m.outcome.status == "failed" and m.facts == [], name
        assert "NumPy" in m.outcome.detail, name


def test_a_rate_above_the_peak_at_its_clock_fails_the_probe() -> None:
    gpu = simulated_gpu(sm_count=4, noise=0.0, family_options={"frameworks_share": {"torch.bf16": 1.1}})
    outcome = _run(gpu, runnable=["frameworks.torch_matmul.bf16"])["frameworks.torch_matmul.bf16"].outcome
    assert outcome.status == "failed" and "impossible on the same tensor cores" in outcome.detail


def test_the_simulated_gpus_frameworks_are_recorded_like_its_calls() -> None:
    records: list = []
    recorder = flight.RecordingLauncher(simulated_gpu(sm_count=4), records.append, lambda n, ms, error: None)
    opened = open_frameworks(recorder)
    with pytest.raises(LaunchPathUnavailable, match="no Frameworks"):
        open_frameworks(object())
    recorder.wrapped.frameworks_missing = {"triton": TRITON_MISSING}
    with pytest.raises(LaunchPathUnavailable, match=TRITON_MISSING):
        opened.framework_sample(Work("triton", "bf16", (1024,)), [0], [0])
    assert records[-1]["call"] == "frameworks.framework_sample"


# --------------------------------------------------------------------------- the CuPy side, PyTorch stood in for


class _Stream:
    def __init__(self, pointer: int) -> None:
        self.cuda_stream = pointer


class _TorchCuda:
    """torch.cuda as far as the binding uses it; ``reports``: a stream PyTorch reports whatever was set."""

    def __init__(self, reports: int | None = None) -> None:
        self.current, self.reports, self.made = _Stream(0), reports, []

    def is_available(self) -> bool:
        return True

    def default_stream(self, index: int) -> _Stream:
        return _Stream(0)

    def ExternalStream(self, pointer: int, device: int) -> _Stream:  # PyTorch's name
        self.made.append(pointer)
        return _Stream(pointer)

    @contextlib.contextmanager
    def device(self, index: int) -> Iterator[None]:
        yield

    @contextlib.contextmanager
    def stream(self, stream: _Stream) -> Iterator[None]:
        before, self.current = self.current, stream
        yield
        self.current = before

    def current_stream(self, index: int) -> _Stream:
        return _Stream(self.reports) if self.reports is not None else self.current


class _Launcher:
    """The CuPy launcher's parts a CupyFrameworks uses (its stamped batch the real one's), logging what it
    enqueues, on CuPy stream ``pointer``."""

    def __init__(self, pointer: int) -> None:
        self.device_index, self.log = 0, []
        self.signatures = {frameworks.STAMP_KERNEL: [("u32", "slot"), ("u64", "out")]}
        log = self.log

        made: list[str] = []

        class Event:
            def __init__(self) -> None:
                self.name = ("start", "stop")[len(made)]
                made.append(self.name)

            def record(self) -> None:
                log.append(self.name)

        cuda = types.SimpleNamespace(get_current_stream=lambda: types.SimpleNamespace(ptr=pointer), Event=Event,
                                     Device=lambda: types.SimpleNamespace(synchronize=lambda: log.append("sync")),
                                     get_elapsed_time=lambda start, stop: 12.5)  # fmt: skip
        self._cp = types.SimpleNamespace(cuda=cuda)

    def _hold(self, launches: int) -> None:
        self.log.append(f"hold {launches}")

    def _enqueue(self, kernel: str, grid: int, block: int, args: list, shared: int, cooperative: bool) -> None:
        self.log.append(f"{kernel} slot {int(args[0])} x {grid}")

    stamped_ms = CupyLauncher.stamped_ms  # the launcher's own, on these parts


def _with_torch(monkeypatch: pytest.MonkeyPatch, cuda: _TorchCuda) -> None:
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    monkeypatch.delitem(sys.modules, "triton.runtime", raising=False)


@pytest.mark.parametrize("pointer", [0, 2])  # CuPy's legacy default stream, its per-thread default stream
def test_the_timed_batch_is_one_streams_hold_stamp_events_calls_stamp(monkeypatch, pointer: int) -> None:
    cuda = _TorchCuda()
    _with_torch(monkeypatch, cuda)
    launcher = _Launcher(pointer)
    runner = CupyFrameworks(launcher)  # type: ignore[arg-type]
    work = Work("torch", "bf16", (1024,))
    runner._prepared[work] = Prepared(lambda: launcher.log.append(f"call on {cuda.current_stream(0).cuda_stream}"), {})
    assert runner.time_framework(work, 3, (frameworks.STAMP_KERNEL, 8, object())) == 12.5
    stamp, call = frameworks.STAMP_KERNEL, f"call on {pointer}"  # every call made on CuPy's stream
    assert launcher.log == ["hold 14", f"{stamp} slot 0 x 8", "start", call, call, call, "stop", f"{stamp} slot 1 x 8",
                            "sync"]  # fmt: skip
    assert cuda.made == ([] if pointer == 0 else [pointer])


def test_a_framework_on_another_stream_is_refused_before_anything_is_enqueued(monkeypatch) -> None:
    _with_torch(monkeypatch, _TorchCuda(reports=0x1234))
    launcher = _Launcher(0)
    runner = CupyFrameworks(launcher)  # type: ignore[arg-type]
    work = Work("torch", "bf16", (1024,))
    runner._prepared[work] = Prepared(lambda: None, {})
    with pytest.raises(ProbeFailure, match=r"not CuPy's.*0x1234"):
        runner.time_framework(work, 3, (frameworks.STAMP_KERNEL, 8, object()))
    assert launcher.log == []


def _refused() -> None:
    warnings.warn("cuDNN attention kernel not used because: head dim 100 is not supported", stacklevel=1)
    raise RuntimeError("No available kernel. Aborting execution.")


def test_a_backend_that_refuses_the_inputs_is_not_run_with_pytorchs_warnings() -> None:
    work = Work("cudnn", "bf16", (1, 1, 256, 100))
    with pytest.raises(LaunchPathUnavailable, match=r"no cuDNN SDPA backend here \(cuDNN attention kernel not used"):
        _first_call(work, Prepared(_refused, {}))
    with pytest.raises(RuntimeError, match="No available kernel"):  # a matmul's error is no missing backend
        _first_call(Work("torch", "bf16", (1024,)), Prepared(_refused, {}))


def test_missing_pytorch_and_triton_are_named(monkeypatch) -> None:
    runner = CupyFrameworks(_Launcher(0))  # type: ignore[arg-type]
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch raises ImportError
    with pytest.raises(LaunchPathUnavailable, match=f"^{TORCH_MISSING}$"):
        runner.time_framework(Work("torch", "bf16", (1024,)), 1, (frameworks.STAMP_KERNEL, 8, object()))
    monkeypatch.setitem(sys.modules, "triton", None)
    monkeypatch.delitem(sys.modules, "gpuprobe.runner.triton_matmul", raising=False)
    with pytest.raises(LaunchPathUnavailable, match=f"^{TRITON_MISSING}$"):
        runner._triton_matmul()


# --------------------------------------------------------------------------- the plan


def test_the_planned_work_fits_the_time_budget() -> None:
    """Worst case on an H200 (``frameworks.plan``): every batch taken at PLANNED_TFLOPS, PyTorch's start and Triton's
    compile, every launcher call's round trip."""
    plan = frameworks.plan(frameworks.Settings(), H200)
    assert plan.probes == len(frameworks.PROBES)
    total = family_seconds(plan, child_start=False)
    assert total < 5.0, f"the frameworks family could take {total:.2f} s"
    greedy = frameworks.plan(dataclasses.replace(frameworks.Settings(), matmul_n=16384), H200)
    assert family_seconds(greedy, child_start=False) > 5.0  # the bound counts the work: it can fail


def test_the_triton_tiles_are_refused_where_a_block_cannot_hold_them_with_the_reason() -> None:
    """144 KiB a block: an H100 (227 KiB opt-in) runs them; an sm_86 or sm_89 part (99 KiB) is not run, saying why,
    where Triton would refuse the launch with an error of its own."""
    assert triton_refusal(227 * 1024) == ""
    assert triton_refusal(99 * 1024) == ("the Triton matmul's 128 x 256 x 64 tiles in 3 stages need 144 KiB of "
                                         "shared memory a block; this GPU gives 99 KiB")  # fmt: skip
