"""The one long-minus-short sampler and its guards: a difference under the timer's resolution or of the
wrong sign is widened and retried, and otherwise fails the probe with its numbers."""

from __future__ import annotations

import pytest

from gpuprobe.core.errors import ProbeFailure
from gpuprobe.families.differencing import (
    CLOCK64,
    EVENTS,
    RESOLVED_TICKS,
    SMOKE_SAMPLING,
    WIDENINGS,
    Difference,
    DifferencedSettings,
    Lengths,
    resolved_step,
    samples_plan,
)
from gpuprobe.families.planning import CHECKED_LAUNCH_CALLS
from gpuprobe.families.sampling import ONE_SAMPLE, Stopping
from tests.helpers.devices import H200


class Kernel:
    """A launch costing ``fixed`` plus ``per_step`` for each of ``steps`` x iterations, in the timer's unit;
    its first launch pays ``first_use`` more (a kernel's lazy load, seen by a host timer)."""

    def __init__(self, fixed: float, per_step: float, steps: int = 1, first_use: float = 0.0) -> None:
        self.fixed, self.per_step, self.steps, self.first_use = fixed, per_step, steps, first_use
        self.calls: list[int] = []

    def __call__(self, iterations: int) -> float:
        extra = self.first_use if not self.calls else 0.0
        self.calls.append(iterations)
        return self.fixed + extra + iterations * self.steps * self.per_step


def test_a_resolved_difference_is_the_cost_of_one_step() -> None:
    kernel = Kernel(fixed=77.0, per_step=4.0, steps=32)
    difference = Difference(kernel, Lengths(8, 40, 32), "gp_alu_ffma")
    assert difference.sample() == pytest.approx(4.0)
    assert kernel.calls == [8, 40]  # %clock64 in the kernel: no warm-up launch


def test_a_difference_under_the_resolution_is_widened_and_the_wider_gap_kept() -> None:
    """Two launches 0.4 us apart read by CUDA events (0.5 us ticks): the gap doubles until it spans
    RESOLVED_TICKS ticks, and the next sample starts from there."""
    kernel = Kernel(fixed=0.003, per_step=0.0004)  # ms: 0.4 us a step
    difference = Difference(kernel, Lengths(1, 2, 1), "gp_gs_step", EVENTS)
    assert difference.sample() == pytest.approx(0.0004)
    gap = difference.lengths.long - difference.lengths.short
    assert gap * 0.0004 >= RESOLVED_TICKS * EVENTS.tick > (gap // 2) * 0.0004
    calls = len(kernel.calls)
    difference.sample()
    assert kernel.calls[calls:] == [difference.lengths.short, difference.lengths.long]


def test_a_first_launch_that_pays_for_loading_the_kernel_is_not_a_sample() -> None:
    """The smoke stage's −20.64 us launch step: one launch short, two long, the short one first ever."""
    kernel = Kernel(fixed=0.005, per_step=0.00186, first_use=0.020)
    difference = Difference(kernel, Lengths(1, 2, 1), "gp_gs_step", EVENTS)
    assert difference.sample() == pytest.approx(0.00186)
    assert kernel.calls[0] == 1  # the untimed warm-up


def test_a_difference_that_never_resolves_fails_with_its_numbers() -> None:
    kernel = Kernel(fixed=500.0, per_step=0.0)  # a loop the compiler emptied, a clock that stood still
    difference = Difference(kernel, Lengths(2, 6, 32), "gp_bar_block")
    with pytest.raises(ProbeFailure, match=r"gp_bar_block: long minus short is 0 cycles, not positive") as failure:
        difference.sample()
    assert f"widened {WIDENINGS} times" in str(failure.value)
    assert len(kernel.calls) == 2 * (WIDENINGS + 1)
    assert "6 took 500, 2 500" in str(failure.value)  # every try's readings


def test_a_negative_difference_fails_even_when_large() -> None:
    kernel = Kernel(fixed=10_000.0, per_step=-50.0)
    with pytest.raises(ProbeFailure, match="not positive"):
        Difference(kernel, Lengths(1, 401, 1), "gp_gs_grid").sample()


def test_the_gap_is_never_widened_past_what_the_kernel_can_take() -> None:
    kernel = Kernel(fixed=0.0, per_step=0.1)  # cycles: 100 ticks need a gap of 1000
    difference = Difference(kernel, Lengths(1, 100, 1), "chase", CLOCK64, longest=300)
    with pytest.raises(ProbeFailure, match=r"under 100 ticks of %clock64.*it takes at most 300;"):
        difference.sample()
    assert max(kernel.calls) <= 300


def test_samples_stop_by_the_stopping_rule() -> None:
    kernel = Kernel(fixed=77.0, per_step=4.0, steps=32)
    samples = Difference(kernel, Lengths(8, 40, 32), "gp_alu_ffma").samples(Stopping(3, 9, 0.01, 10.0))
    assert samples == [pytest.approx(4.0)] * 3  # noiseless: the fewest samples do


@pytest.mark.parametrize("short, long", [(0, 4), (4, 4), (5, 4)])
def test_lengths_must_grow(short: int, long: int) -> None:
    with pytest.raises(ValueError, match="Lengths"):
        Lengths(short, long, 32)


def test_two_readings_of_fixed_lengths_are_held_to_the_same_guard() -> None:
    """A copy of a whole buffer cannot widen: its difference is resolved or the probe fails with its numbers."""
    lengths = Lengths(64 << 20, 256 << 20, 1)
    assert resolved_step(lengths, 1.2, 4.7, EVENTS, "cudaMemcpy") == pytest.approx(3.5 / (192 << 20))
    with pytest.raises(ProbeFailure, match=r"cudaMemcpy: long minus short is 0.02 ms, under 100 ticks.*fixed"):
        resolved_step(lengths, 1.2, 1.22, EVENTS, "cudaMemcpy")
    with pytest.raises(ProbeFailure, match="not positive"):
        resolved_step(lengths, 1.2, 1.1, EVENTS, "cudaMemcpy")


def test_differenced_settings_give_each_kernel_its_lengths_and_plan_the_most_repeats() -> None:
    """The two loop lengths are the settings'; the operations per iteration are the kernel's declared unroll;
    the plan counts every sample the settings' Stopping allows at most, each a short and a long launch."""
    settings = DifferencedSettings(short_iterations=2, long_iterations=6, sampling=Stopping(1, 4))
    assert settings.lengths(16) == Lengths(2, 6, 16)
    plan = samples_plan(settings, H200, 10.0, 16, serial=2)
    assert plan.launches == 2 * 4 * CHECKED_LAUNCH_CALLS
    assert plan.gpu_s > samples_plan(settings, H200, 10.0, 8).gpu_s
    assert DifferencedSettings(**SMOKE_SAMPLING).sampling == ONE_SAMPLE
    with pytest.raises(ValueError, match="Lengths"):
        DifferencedSettings(short_iterations=4, long_iterations=4)
