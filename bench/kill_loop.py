"""Benchmark: the kill drill. SIGKILL the trainer inside every phase of training and check what
survives each kill.

Each kill targets one phase and holds the trainer exactly there through the fault switches of
trainer_core/engine/faults.py (VEGA_FAULT_HOLD_AT with VEGA_FAULTS=1; the trainer writes a marker
file, then blocks): write (a checkpoint's temp file about half written), rename (fsynced, before
the rename), prune (removing old checkpoints), step (a plain step between checkpoints), validation,
sampling (before a sample is made), preload (the first progress of a cold preload), preload_decode
(a cold preload with some recordings decoded and the rest not), cache_write (the feature cache's
data file or its index half written), best_write (a new best checkpoint's temp file half written),
best_json (best.json half written) and sample_write (a sample or view file half written). Phases
take turns, so the default 36 kills give every phase 3. The kills are shared between a tiny LM run
(text samples), a tiny two-optimizer vocoder run (wav samples) and a tiny TTS run (wav samples and
png views); the preload-phase kills go to the voice runs, whose cache folder is deleted first so
that the preload really decodes and writes. All three save a checkpoint every step with keep_last 2
and validate every few steps.

A kill counts only when the trainer was held at its phase and its exit status is -9; one that
exited on its own first is a failure (vacuous_kills). After every kill (bench/kill_checks.py,
bench/kill_files.py): the newest checkpoint loads, every announced checkpoint is still there and
loads (or was pruned for newer ones), best.json names a checkpoint that loads, every announced
sample and view file (and every other file in samples/) is whole, the feature cache loads (or is
empty) and serves only right features, the event log parses, and the next segment's `--resume auto`
starts from the newest checkpoint, reaches a later step, and (after a preload kill) rebuilds the
cache. A run that never announced a checkpoint fails. Each run ends with a segment that resumes and
is stopped with SIGTERM (exit 0, `stopped`).

Negative controls (--control, and run after the drill unless --tiny) each name the counter they
must trip: `in-place` writes checkpoints without the temp file and rename (unreadable_latest),
`samples-in-place` sample files (torn_samples), `best-in-place` best.json (bad_best),
`cache-in-place` the feature cache (bad_cache), each killed mid-write; `vacuous` lets the trainer
finish before its hold point (vacuous_kills). Under --control the drill must fail (exit 1).

    .venv/bin/python bench/kill_loop.py --kills 36
"""

from __future__ import annotations

import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any, NamedTuple

import common
import kill_checks as checks
import kill_files as files
from kill_checks import Tally
from kill_runs import KEEP_LAST, RUNS, WAIT_S, Run, Segment, make_runs, start_segment

from trainer_core.engine.faults import (
    BEST_IN_PLACE_ENV,
    CACHE_IN_PLACE_ENV,
    HOLD_PHASES,
    IN_PLACE_ENV,
    SAMPLE_IN_PLACE_ENV,
)

DEFAULT_KILLS = 36  # 3 in each of the 12 phases
# Which arrival at the phase to hold: late enough that this process has announced a
# checkpoint (a fresh run validates and samples at step 0; the vocoder's two optimizers each
# pass the step hook once per step).
NTH = {
    "write": 2,
    "rename": 2,
    "prune": 1,
    "step": 3,
    "validation": 2,
    "sampling": 2,
    "preload": 1,
    "preload_decode": 3,
    "cache_write": 1,
    "best_write": 1,
    "best_json": 1,
    "sample_write": 1,
}
# Held before the resume; the cache is deleted first, so that the preload decodes and writes.
PRELOAD_PHASES = ("preload", "preload_decode", "cache_write")
# The runs that take turns at a phase; the others rotate over OTHER_RUNS.
RUNS_AT = {
    "preload": ("vocoder", "tts"),
    "preload_decode": ("tts", "vocoder"),
    "cache_write": ("vocoder", "tts"),
    "best_write": ("lm", "tts"),
    "best_json": ("tts", "lm"),
    "sample_write": ("tts", "vocoder", "lm"),
}
OTHER_RUNS = ("lm", "vocoder", "lm", "tts")


class Kill(NamedTuple):
    run: str
    phase: str
    nth: int


def nth_for(run: str, phase: str, turn: int) -> int:
    """cache_write alternates the data file (1) and the index (2); the TTS's 3rd sample file is
    its mel.png."""
    if phase == "cache_write":
        return 1 + turn % 2
    if phase == "sample_write" and run == "tts":
        return 3
    return NTH[phase]


def schedule(kills: int) -> list[Kill]:
    """Phases in turn, each phase's runs in turn; a run's first kill is never a preload one
    (nothing saved yet)."""
    turns: Counter[str] = Counter()
    plan = []
    for index in range(kills):
        number = index % len(HOLD_PHASES)
        phase, turn = HOLD_PHASES[number], turns[HOLD_PHASES[number]]
        runs = RUNS_AT.get(phase)
        run = runs[turn % len(runs)] if runs else OTHER_RUNS[(turn + number) % len(OTHER_RUNS)]
        plan.append(Kill(run, phase, nth_for(run, phase, turn)))
        turns[phase] += 1
    for run in RUNS:
        mine = [i for i, kill in enumerate(plan) if kill.run == run]
        later = next((i for i in mine if plan[i].phase not in PRELOAD_PHASES), None)
        if mine and plan[mine[0]].phase in PRELOAD_PHASES and later is not None:
            plan[mine[0]], plan[later] = plan[later], plan[mine[0]]
    return plan


TINY_SCHEDULE = [
    Kill("lm", "write", 2),
    Kill("lm", "best_json", 1),
    Kill("vocoder", "rename", 2),
    Kill("vocoder", "cache_write", 2),
    Kill("vocoder", "sample_write", 1),
]


# --------------------------------------------------------------------------------------------------
# The drill


def end_segment(run: Run, segment: Segment, tally: Tally) -> None:
    """Collect the segment's events and check the resume it was to make (not after a preload-phase
    hold: the trainer preloads before it resumes)."""
    run.events.extend(segment.poll())
    tally.write_seconds.extend(e.seconds for e in segment.events if e.type == "checkpoint_saved")
    if run.expect is None or segment.held_phase() in PRELOAD_PHASES:
        return
    where = f"{run.name} segment {run.segments}"
    resumed = checks.resumed_step(segment.events, run.expect, tally, where)
    if resumed is None:
        return
    said = next(
        e for e in segment.events if e.type == "log" and e.message.startswith("resumed from")
    )
    tally.resume_seconds.append(said.t - segment.started_wall)
    if checks.reached_step(segment.events, run.run_dir) <= resumed:
        tally.fail(
            "failed_resumes", f"{where}: resumed at step {resumed} but trained no later step"
        )


def check_files(run: Run, segment: Segment, tally: Tally, where: str) -> None:
    """What a segment leaves besides checkpoints: best.json, samples and views, the cache."""
    checks.check_best(run.run_dir, run.events, tally, where)
    files.check_samples(run.run_dir, run.events, tally, where)
    if run.cache is not None:
        files.check_cache(run.cache, run.data, run.audio(), segment.preload_items(), tally, where)


def kill_at(run: Run, kill: Kill, tally: Tally, extra_env: dict[str, str]) -> None:
    """One kill: hold the trainer at `kill.phase`, SIGKILL it, check exit status, files, event log
    and resume."""
    where = f"{run.name} segment {run.segments + 1} ({kill.phase})"
    if kill.phase in PRELOAD_PHASES:
        run.clear_cache()
    segment = start_segment(run, f"{kill.phase}:{kill.nth}", extra_env)
    held = segment.wait_held()
    segment.proc.kill()
    code = segment.proc.wait()
    if not held or code != -signal.SIGKILL:
        tally.fail(
            "vacuous_kills",
            f"{where}: the trainer was not held and killed there (exit status {code})",
        )
    else:
        tally.kills += 1
        tally.by_phase[kill.phase] += 1
        tally.by_run[run.name] += 1
    end_segment(run, segment, tally)
    run.expect = checks.newest_loadable(run.run_dir, tally, where)
    checks.check_announced(run.run_dir, run.events, KEEP_LAST, tally, where)
    check_files(run, segment, tally, where)
    if (run.run_dir / "events.jsonl").exists():
        run.cut_lines = checks.check_event_log(run.run_dir, run.cut_lines, tally, where)


def finish_cleanly(run: Run, tally: Tally, extra_env: dict[str, str]) -> None:
    """The last segment: resume, train a step further, SIGTERM; it must end
    `stopped` with exit status 0."""
    segment = start_segment(run, None, extra_env)
    deadline = time.monotonic() + WAIT_S
    start = run.expect and checks.step_of(run.expect)
    while time.monotonic() < deadline and segment.proc.poll() is None:
        if checks.reached_step(segment.poll(), run.run_dir) > (start or 0):
            break
        time.sleep(0.05)
    segment.proc.send_signal(signal.SIGTERM)
    code = segment.proc.wait(timeout=WAIT_S)
    end_segment(run, segment, tally)
    end = next((e for e in segment.events if e.type == "finished"), None)
    if code != 0 or end is None or end.status != "stopped":
        status = end.status if end is not None else "no finished event"
        tally.fail(
            "failed_resumes",
            f"{run.name}: the last segment did not stop cleanly (exit {code}, {status})",
        )
    check_files(run, segment, tally, f"{run.name} last segment")


def run_drill(root: Path, plan: list[Kill], env: dict[str, str], final: bool = True) -> Tally:
    runs, tally = make_runs(root), Tally()
    for kill in plan:
        kill_at(runs[kill.run], kill, tally, env)
    for run in runs.values():
        if run.segments and final:
            finish_cleanly(run, tally, env)
        count_announced(run, tally)
    return tally


def count_announced(run: Run, tally: Tally) -> None:
    """A run that never announced a checkpoint tested nothing: that fails the drill."""
    announced = sum(1 for e in run.events if e.type == "checkpoint_saved")
    tally.announced += announced
    if run.segments and announced == 0:
        tally.fail(
            "lost_checkpoints",
            f"{run.name}: no checkpoint was ever announced: the drill tested nothing",
        )


def control_vacuous(root: Path) -> Tally:
    """Negative control: the trainer finishes (8 steps) before the step it is to
    be held at; the kill is vacuous."""
    runs, tally = make_runs(root, lm_max_steps=8), Tally()
    kill_at(runs["lm"], Kill("lm", "step", 1000), tally, {})
    count_announced(runs["lm"], tally)
    return tally


class Control(NamedTuple):
    """A negative control: one kill with a fault switch on, and the counter it exists to trip."""

    kill: Kill
    switch: str | None
    counter: str


CONTROLS = {
    "in-place": Control(Kill("lm", "write", 2), IN_PLACE_ENV, "unreadable_latest"),
    "samples-in-place": Control(
        Kill("vocoder", "sample_write", 1),
        SAMPLE_IN_PLACE_ENV,
        "torn_samples",
    ),
    "best-in-place": Control(Kill("lm", "best_json", 1), BEST_IN_PLACE_ENV, "bad_best"),
    "cache-in-place": Control(Kill("vocoder", "cache_write", 2), CACHE_IN_PLACE_ENV, "bad_cache"),
    "vacuous": Control(Kill("lm", "step", 1000), None, "vacuous_kills"),
}


def run_control(name: str, root: Path) -> Tally:
    control = CONTROLS[name]
    if control.switch is None:  # no switch: a trainer that ends before its hold point
        return control_vacuous(root)
    return run_drill(root, [control.kill], {control.switch: "1"}, final=False)


# --------------------------------------------------------------------------------------------------
# Report


def report(tally: Tally, result: common.Result, plan: list[Kill], per_phase: int) -> None:
    wanted = len(plan)
    result.add(
        "kills",
        tally.kills,
        target=f"= {wanted}",
        met=tally.kills == wanted,
        detail="held, SIGKILL, exit -9",
    )
    for phase in HOLD_PHASES:
        if any(kill.phase == phase for kill in plan):
            count = tally.by_phase[phase]
            result.add(f"kills at {phase}", count, target=f">= {per_phase}", met=count >= per_phase)
    for run, label in (("lm", "LM"), ("vocoder", "two-optimizer vocoder"), ("tts", "TTS")):
        if any(kill.run == run for kill in plan):
            result.add(f"kills on the {label} run", tally.by_run[run])
    for name in checks.ZERO_COUNTERS:
        value = getattr(tally, name)
        result.add(name, value, target="= 0", met=value == 0)
    result.add("checkpoints announced", tally.announced, target="> 0", met=tally.announced > 0)
    report_coverage(tally, result, plan)
    result.add(
        "start to resumed (median)",
        common.median(tally.resume_seconds),
        "s",
        detail=common.spread(tally.resume_seconds),
    )
    result.add(
        "checkpoint write (median)",
        common.median(tally.write_seconds),
        "s",
        detail=common.spread(tally.write_seconds),
    )
    result.notes.extend(tally.messages()[:20])


def report_coverage(tally: Tally, result: common.Result, plan: list[Kill]) -> None:
    """What the file checks looked at: none of it may be empty where the plan makes such files."""
    checked = tally.checked_files
    views = sum(1 for path in checked if path.endswith(".png"))
    rows = (
        ("sample and view files checked", len(checked), True),
        ("view files (png) checked", views, any(kill.run == "tts" for kill in plan)),
        ("feature cache checks", tally.caches_checked, any(kill.run != "lm" for kill in plan)),
        ("best.json checks", tally.bests_checked, True),
    )
    for name, value, expected in rows:
        target, met = ("> 0", value > 0) if expected else ("", None)
        result.add(name, value, target=target, met=met)


def report_control(name: str, tally: Tally, result: common.Result) -> None:
    """A control row is met only when the counter it exists to trip did."""
    counter = CONTROLS[name].counter
    caught = getattr(tally, counter)
    detail = "; ".join(tally.messages(counter)[:2]).replace("\n", " ")[:300]
    name = f"negative control ({name}): {counter}"
    result.add(name, caught, target="> 0", met=caught > 0, detail=detail)


def hide_workspace(result: common.Result, root: Path) -> None:
    """Messages name files in the deleted temporary workspace: show them relative to it, as docs may
    not point outside the repository."""
    result.notes = [note.replace(str(root), "WORKSPACE") for note in result.notes]
    for figure in result.figures:
        figure.detail = figure.detail.replace(str(root), "WORKSPACE")


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.split("\n\n")[0])
    kills = f"SIGKILLs in the drill (default {DEFAULT_KILLS}; --tiny: {len(TINY_SCHEDULE)})"
    parser.add_argument("--kills", type=int, default=DEFAULT_KILLS, help=kills)
    parser.add_argument(
        "--control", choices=sorted(CONTROLS), help="run only this negative control (must fail)"
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the workspace (printed) instead of deleting it"
    )
    args = parser.parse_args(argv)
    if args.kills < 1:
        parser.error("--kills must be at least 1")
    plan = list(TINY_SCHEDULE) if args.tiny else schedule(args.kills)
    per_phase = 1 if args.tiny else max(1, min(3, args.kills // len(HOLD_PHASES)))
    settings: dict[str, Any] = {
        "kills": len(plan),
        "control": args.control,
        "schedule": plan,
        "nth": NTH,
    }
    settings["tiny"] = args.tiny
    title = "Kill drill: SIGKILLs held at every phase of training"
    result = common.start_result("kill", title, settings)
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="vega-kill-"))  # short: the control socket path must fit
    try:
        if args.control:
            tally = run_control(args.control, root / args.control)
            report(tally, result, [CONTROLS[args.control].kill], 1)
            report_control(args.control, tally, result)
        else:
            report(run_drill(root / "drill", plan, {}), result, plan, per_phase)
            for name in {} if args.tiny else CONTROLS:
                report_control(name, run_control(name, root / name), result)
    finally:
        if args.keep:
            print(f"workspace kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    hide_workspace(result, root)
    common.finish_result(result, started, args.out)
    return 0 if all(f.met is not False for f in result.figures) else 1


if __name__ == "__main__":
    sys.exit(main())
