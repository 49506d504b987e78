"""``gpuprobe run`` (and ``run --plan``) and ``gpuprobe demo``; the run options the pytest plugin shares."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from gpuprobe.cli.common import EXIT_FAILED, say_ignored_toolkit_homes
from gpuprobe.core.errors import GpuprobeError, require_count, require_index, require_seconds
from gpuprobe.core.files import require_writable_folder

if TYPE_CHECKING:
    from gpuprobe.measure.isolation import ChildPolicy


def add_run_options(addoption: Callable[..., Any], prefix: str = "") -> None:
    """The options of a run, for ``gpuprobe run`` (``parser.add_argument``, no prefix) and the pytest plugin
    (``group.addoption``, prefix ``gpuprobe-``: ``--gpuprobe-device``), so that both take the same."""
    addoption(f"--{prefix}model", metavar="KEY",
              help="judge as this GPU model (an expectations key, see gpuprobe expectations) instead of the "
              "detected one")  # fmt: skip
    addoption(f"--{prefix}device", type=int, default=0, metavar="N", help="CUDA device index to measure (default 0)")
    addoption(f"--{prefix}deadline", type=float, metavar="S",
              help="stop measuring S seconds after the run starts: what is left is not_run (deadline), the results "
              "partial")  # fmt: skip
    addoption(f"--{prefix}probe-time-limit", type=float, metavar="S",
              help="kill a probe that runs longer than S seconds (default 120)")  # fmt: skip
    addoption(f"--{prefix}cooldown", type=float, metavar="S",
              help="seconds to wait before re-measuring a throttled probe (default 3)")  # fmt: skip
    addoption(f"--{prefix}inject-fault", action="store_true",
              help="also run a probe that faults on purpose, to show the run survives (self-test)")  # fmt: skip
    addoption(f"--{prefix}process-per-family", action="store_true",
              help="measure each family in a fresh process, isolated from the others (a process start each, "
              "about 2 s; default: one process serves family after family, a fresh one only after a crash or "
              "timeout)")  # fmt: skip


def check_run_options(option: Callable[[str], Any], prefix: str = "") -> ChildPolicy:
    """Refuse a device index or a limit in seconds that means nothing, in one line naming the option as given
    (a GpuprobeError); return the measuring processes' policy with ``--probe-time-limit``, ``--cooldown`` and
    ``--process-per-family``. ``option`` reads an option of :func:`add_run_options` by its name without the prefix
    (``"cooldown"``)."""
    from gpuprobe.measure.isolation import user_policy

    require_index(option("device"), f"--{prefix}device")
    require_seconds(option("deadline"), f"--{prefix}deadline")
    require_seconds(option("probe_time_limit"), f"--{prefix}probe-time-limit")
    require_seconds(option("cooldown"), f"--{prefix}cooldown", zero_ok=True)
    return user_policy(option("probe_time_limit"), option("cooldown"), bool(option("process_per_family")))


def cmd_plan(args: argparse.Namespace) -> int:
    """``gpuprobe run --plan``: the time plan, for the local GPU or (``--model``) a model's [device] record."""
    from gpuprobe.core.results import load
    from gpuprobe.judge.expectations import load_all, resolve_model
    from gpuprobe.measure.plan import FULL, SMOKE, calibration, model_device, render_plan, run_plan
    from gpuprobe.runner.device import device_identity, gpu_unavailable_reason

    require_count(args.gpus, "--gpus")
    if args.model:
        device = model_device(resolve_model(args.model, load_all()), 1 if args.gpus is None else args.gpus)
    else:
        reason = gpu_unavailable_reason()
        if reason:
            raise GpuprobeError(f"{reason}; give --model KEY to plan for a GPU model (gpuprobe expectations)")
        device = device_identity(args.device)
    factor = calibration(load(Path(args.calibrate)), args.calibrate) if args.calibrate else 1.0
    if factor is None:
        print(f"gpuprobe: warning: {args.calibrate} records no family measured to the end: the plan is not calibrated",
              file=sys.stderr)  # fmt: skip
    plan = run_plan(device, SMOKE if args.smoke else FULL, calibration=factor or 1.0,
                    process_per_family=args.process_per_family)  # fmt: skip
    print(render_plan(plan, args.deadline), end="")
    return 0


def cmd_run(args: argparse.Namespace) -> int:
    from gpuprobe.api import local_device
    from gpuprobe.core.files import write_atomic
    from gpuprobe.families import catalog
    from gpuprobe.fleet.repeatability import render_markdown, repeatability
    from gpuprobe.judge.expectations import match_model
    from gpuprobe.measure.plan import FULL, SMOKE, unproven_probes
    from gpuprobe.measure.progress import StreamSink
    from gpuprobe.measure.session import FIRST_CONTACT_NAME, default_out_dir, run_suite
    from gpuprobe.output.first_contact import family_rows, verdict_line
    from gpuprobe.runner.launcher import LauncherSpec

    require_count(args.repeat, "--repeat")
    policy = check_run_options(lambda name: getattr(args, name))
    require_seconds(args.lock_wait, "--lock-wait", zero_ok=True)
    if args.unproven_first is not None and not (args.smoke and Path(args.unproven_first).is_dir()):
        raise GpuprobeError(f"--unproven-first {args.unproven_first}: needs --smoke and a folder of real runs' results")
    if args.gpus is not None and not (args.plan and args.model):
        raise GpuprobeError("--gpus: give it with --plan --model KEY (a run counts the GPUs it sees)")
    if args.plan:
        return cmd_plan(args)
    if args.model is not None:
        match_model("", args.model)  # an unknown key is refused before any GPU time is spent
    if args.output:
        require_writable_folder(Path(args.output))
    say_ignored_toolkit_homes()
    device = local_device(args.device)
    if args.model is None and match_model(device.name) is None:
        print(f"{device.name!r} has no expectations: discovery mode (facts reported, invariants asserted)")
    out_dir = Path(args.output) if args.output else default_out_dir(device, args.smoke)
    launcher = LauncherSpec(device_index=args.device)
    stage = FULL
    if args.smoke:
        first = unproven_probes(Path(args.unproven_first)) if args.unproven_first else frozenset()
        stage = dataclasses.replace(SMOKE, first=first)
        if first:
            print(f"measuring first the {len(first)} probes no run under {args.unproven_first} proved")
    runs = []
    for index in range(args.repeat):
        target = out_dir if args.repeat == 1 else out_dir / f"run-{index + 1}"
        runs.append(run_suite(device, launcher, target, args.model, policy=policy, lock_wait_s=args.lock_wait,
                              inject_fault=args.inject_fault, stage=stage, deadline_s=args.deadline,
                              progress=StreamSink(sys.stderr)))  # fmt: skip
        print(f"wrote {target}/results.json and its {FIRST_CONTACT_NAME if args.smoke else 'fact sheet'}")
    results = runs[-1]
    if args.smoke:
        print(verdict_line(family_rows(results, catalog.probes_by_family(smoke=results.stage == "smoke"))))
    else:
        for fact in results.facts:
            print(f"{fact.verdict.upper():9} {fact.detail}")
    if len(runs) > 1:
        table = render_markdown(repeatability(runs))
        write_atomic(out_dir / "repeatability.md", table)
        print(table)
    failed = [f for run in runs for f in run.facts if f.verdict == "fail"]
    not_ok = [n for run in runs for n, p in run.probes.items() if p.status != "ok"]
    print(f"{len(failed)} failed facts, {len(not_ok)} probes not ok")
    return EXIT_FAILED if failed or not_ok else 0


def cmd_demo(args: argparse.Namespace) -> int:
    from gpuprobe.measure.progress import StreamSink
    from gpuprobe.output.sheet import SIMULATED_TEXT
    from gpuprobe.simulated.demo import DEMO_DIR, demo_families, run_demo
    from gpuprobe.simulated.gpu import SimulatedGpu, suite_options

    families = demo_families(args.families)
    if families is not None:
        require_measurable(families, SimulatedGpu(**suite_options()).device().arch)
    out_dir = Path(args.output) if args.output else DEMO_DIR
    require_writable_folder(out_dir)
    results = run_demo(out_dir, families, progress=StreamSink(sys.stderr))
    print(f"wrote {out_dir}/results.json and its fact sheet {out_dir}/factsheet.md ({len(results.facts)} facts)")
    print(SIMULATED_TEXT.split(". ", 1)[0] + ": gpuprobe report --format html shows it as a page")
    return 0


def require_measurable(families: Sequence[str], arch: str) -> None:
    """Families named for a demo of which none measures anything on the simulated GPU's ``arch`` are a
    one-line GpuprobeError saying why (no probe of theirs runs on it, or they are opt-in)."""
    from gpuprobe.families.catalog import OPT_IN
    from gpuprobe.measure.plan import left_out_line, runs_on
    from gpuprobe.measure.session import chosen_families

    chosen = chosen_families(families, inject_fault=False)
    if any(runs_on(family, arch) for family in chosen.values()):
        return
    opt_in = [name for name in families if name in OPT_IN]
    reasons = [left_out_line(list(chosen), arch)] if chosen else []
    reasons += [f"{', '.join(opt_in)}: measured only by gpuprobe run --inject-fault"] if opt_in else []
    raise GpuprobeError(f"--families: nothing to measure on the simulated GPU ({'; '.join(reasons)})")


def add_commands(subparsers: Any) -> None:
    """Register ``run`` and ``demo`` on the ``gpuprobe`` command's subparsers."""
    p = subparsers.add_parser("run", help="measure on the local GPU and write reports/<gpu-slug>/")
    p.add_argument("-o", "--output", help="directory for results.json and the fact sheet")
    add_run_options(p.add_argument)
    p.add_argument("--repeat", type=int, default=1, help="run the suite N times and report run-to-run differences")
    p.add_argument("--lock-wait", type=float, default=60.0, help="seconds to wait for another run on this GPU")
    p.add_argument(
        "--smoke",
        action="store_true",
        help="first contact: each family's cheapest probes once, written up in first-contact.md",
    )
    p.add_argument(
        "--unproven-first",
        metavar="REPORTS",
        help="with --smoke: measure first, beside the cheapest probes, every probe no real run under REPORTS proved",
    )
    p.add_argument(
        "--plan",
        action="store_true",
        help="print the time plan per family and measure nothing (with --model: no GPU needed)",
    )
    p.add_argument(
        "--calibrate",
        metavar="RESULTS.json",
        help="with --plan: correct the plan by the actual/planned seconds of an earlier run",
    )
    p.add_argument(
        "--gpus",
        type=int,
        metavar="N",
        help="with --plan --model: the GPUs the run would see (default 1; the multi-GPU families need 2 or more)",
    )
    p.set_defaults(func=cmd_run)

    p = subparsers.add_parser("demo", help="the whole suite on the simulated GPU: what a run writes, stamped SIMULATED")
    p.add_argument("-o", "--output", help="directory for the results and fact sheet (default: gpuprobe-demo)")
    p.add_argument("--families", metavar="A,B", help="only these families (default: all; see gpuprobe list)")
    p.set_defaults(func=cmd_demo)
