"""What a person watching a run sees: the family, probes done of how many, the time left by the plan, and a
crash or timeout the moment it happens. RunProgress on a recorded sink and a clock the test moves."""

from __future__ import annotations

import io
from dataclasses import dataclass, field

from gpuprobe.core.results import ProbeOutcome
from gpuprobe.measure.progress import PLAIN_EVERY_S, RunProgress, StreamSink, duration

OK = ProbeOutcome("ok", "")


@dataclass
class Recorded:
    """A sink that keeps what it is told."""

    live: bool = False
    lines: list[str] = field(default_factory=list)
    statuses: list[str] = field(default_factory=list)
    closed: bool = False

    def line(self, text: str) -> None:
        self.lines.append(text)

    def status(self, text: str) -> None:
        self.statuses.append(text)

    def close(self) -> None:
        self.closed = True


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_durations_read_as_a_person_reads_them() -> None:
    assert [duration(s) for s in (0.4, 45, 130, 3900)] == ["0 s", "45 s", "2 min 10 s", "1 h 05 min"]


def test_each_family_says_its_probes_and_the_time_left_by_the_plan_then_how_it_ended() -> None:
    sink, clock = Recorded(), Clock()
    progress = RunProgress(sink, [("memory", 2, 60.0), ("wgmma", 0, 30.0), ("launch", 4, 40.0)], 20.0, clock=clock)
    progress.family_started("memory")
    assert sink.lines == [
        "gpuprobe: [1/2] memory: 2 probes, about 1 min 00 s by the plan; about 2 min 00 s left in all"
    ]
    clock.now += 60
    progress.probe_ended("memory", "memory.a", OK)
    assert progress.seconds_left() == 30 + 40 + 20  # half the family's plan, the next family's, the report's
    clock.now += 60
    progress.probe_ended("memory", "memory.b", ProbeOutcome("failed", "self-check"))
    progress.family_ended("memory")
    assert sink.lines[-1] == "gpuprobe: [1/2] memory done in 2 min 00 s: 1/2 ok, 1 failed"
    # memory took twice its plan: what is left is planned at that pace
    assert progress.seconds_left() == 2 * 40 + 20
    progress.family_started("wgmma")  # nothing to measure on this arch: not counted, not said
    progress.family_started("launch")
    assert sink.lines[-1].startswith("gpuprobe: [2/2] launch: 4 probes, about 1 min 20 s by the plan")


def test_a_crash_or_timeout_is_one_line_at_once_and_the_family_end_counts_them_all() -> None:
    sink, clock = Recorded(), Clock()
    progress = RunProgress(sink, [("launch", 3, 10.0)], clock=clock)
    progress.family_started("launch")
    crash = ProbeOutcome("crashed", "child killed by signal 6;\n stderr: " + "x" * 500)
    progress.probe_ended("launch", "launch.stream", crash)
    assert sink.lines[-1].startswith(
        "gpuprobe: [1/1] launch: launch.stream CRASHED: child killed by signal 6; stderr: x"
    )
    assert sink.lines[-1].endswith("…") and len(sink.lines[-1]) < 300
    progress.probe_ended("launch", "launch.graph", ProbeOutcome("timeout", "ran past its limit"))
    progress.probe_ended("launch", "launch.event", crash)
    assert len(sink.lines) == 2  # the family's first failure is said at once; the rest at its end
    progress.family_ended("launch")
    assert sink.lines[-1] == "gpuprobe: [1/1] launch done in 0 s: 0/3 ok, 2 crashed, 1 timeout"
    progress.close()
    assert sink.closed


def test_without_a_terminal_a_long_family_says_where_it_is_at_most_every_half_minute() -> None:
    sink, clock = Recorded(), Clock()
    progress = RunProgress(sink, [("wgmma", 100, 500.0)], clock=clock)
    progress.family_started("wgmma")
    for _ in range(40):
        clock.now += 5
        progress.probe_ended("wgmma", "wgmma.p", OK)
    said = sink.lines[1:]
    assert len(said) == 40 * 5 // PLAIN_EVERY_S
    assert said[0] == "gpuprobe: [1/1] wgmma: 6/100 probes; about 7 min 50 s left"
    assert not sink.statuses


def test_on_a_terminal_a_bar_follows_every_probe() -> None:
    sink, clock = Recorded(live=True), Clock()
    progress = RunProgress(sink, [("memory", 2, 10.0), ("launch", 2, 10.0)], clock=clock)
    progress.family_started("memory")
    progress.probe_ended("memory", "memory.a", OK)
    assert sink.statuses[-1] == "[#####---------------] 1/4 probes | [1/2] memory 1/2 | about 15 s left"
    assert len(sink.lines) == 1  # the family's start; no progress lines besides the bar


def test_a_skipped_family_and_the_deadline_shorten_the_time_left() -> None:
    sink, clock = Recorded(), Clock()
    progress = RunProgress(sink, [("memory", 2, 100.0), ("launch", 2, 100.0)], deadline=clock.now + 50, clock=clock)
    assert progress.seconds_left() == 50  # the plan says 200 s, the deadline allows 50
    progress.family_skipped("launch", "the run's deadline came first")
    assert sink.lines == ["gpuprobe: [2/2] launch not measured: the run's deadline came first"]
    clock.now += 60
    assert progress.seconds_left() == 0


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_stream_on_a_terminal_keeps_the_bar_below_the_lines_and_clears_it_at_the_end() -> None:
    screen = Terminal()
    sink = StreamSink(screen)
    assert sink.live and not StreamSink(io.StringIO()).live
    sink.status("[#---] 1/4")
    sink.line("gpuprobe: launch: launch.stream CRASHED")
    sink.close()
    erase = "\r\x1b[K"
    assert screen.getvalue() == f"{erase}[#---] 1/4{erase}gpuprobe: launch: launch.stream CRASHED\n[#---] 1/4{erase}"
