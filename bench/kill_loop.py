"""Benchmark: the kill drill. SIGKILL the trainer at chosen phases of training and check what survives every kill.

Each kill targets one phase and holds the trainer exactly there through the fault switches of
trainer_core/engine/faults.py (VEGA_FAULT_HOLD_AT; the trainer writes a marker file, then blocks):
write (a checkpoint's temp file about half written), rename (fsynced, before the rename), prune (removing
old checkpoints), step (a plain step between checkpoints), validation, sampling, preload. Phases take
turns, so 30 kills give every phase at least 4; the kills are shared between a tiny LM run and a tiny
two-optimizer vocoder run (preload kills are the vocoder's: text runs have no preload). Both runs save a
checkpoint every step with keep_last 2 and validate every few steps.

A kill counts only when the trainer was held at its phase and its exit status is -9; one that exited on
its own first is a failure (vacuous_kills). After every kill (bench/kill_checks.py): the newest checkpoint
loads, every announced checkpoint is still there and loads (or was pruned for newer ones), the event log
parses, and the next segment's `--resume auto` starts from the newest checkpoint and reaches a later step.
A run that never announced a checkpoint fails. Each run ends with a segment that resumes and is stopped
with SIGTERM (exit 0, `stopped`).

Negative controls (--control, and run after the drill unless --tiny): `in-place` writes checkpoints
without the temp file and rename (VEGA_FAULT_CHECKPOINT_IN_PLACE), so a kill mid-write must show up as an
unreadable checkpoint; `vacuous` lets the trainer finish before its hold point, so the kill must show up as
vacuous. Under --control the drill must fail (exit 1).

    .venv/bin/python bench/kill_loop.py --kills 30
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import common
import kill_checks as checks

from trainer_core.contract.eventlog import EventReader
from trainer_core.contract.protocol import Event
from trainer_core.engine.faults import HOLD_AT_ENV, HOLD_MARKER_ENV, HOLD_PHASES, IN_PLACE_ENV
from trainer_core.tiny_profiles import tiny_profile

KEEP_LAST = 2
WAIT_S = 120.0  # generous: the machine is shared
# Which arrival at the phase to hold: late enough that this process has announced a checkpoint (a fresh run
# validates and samples at step 0; the vocoder's two optimizers each pass the step hook once per step).
NTH = {"write": 2, "rename": 2, "prune": 1, "step": 3, "validation": 2, "sampling": 2, "preload": 1}
TINY_SCHEDULE = (("lm", "write"), ("lm", "prune"), ("vocoder", "rename"), ("vocoder", "preload"))
RUNS = ("lm", "vocoder")


def run_of(index: int, phase: str) -> str:
    """Preload kills go to the vocoder (text has no preload), and so does every fourth other kill."""
    return "vocoder" if phase == "preload" or index % 4 == 1 else "lm"


def schedule(kills: int) -> list[tuple[str, str]]:
    """(run, phase) for each kill: phases in turn; a run's first kill is never a preload (nothing saved yet)."""
    plan = [(run_of(i, HOLD_PHASES[i % len(HOLD_PHASES)]), HOLD_PHASES[i % len(HOLD_PHASES)]) for i in range(kills)]
    for run in RUNS:
        mine = [i for i, (r, _) in enumerate(plan) if r == run]
        later = next((i for i in mine if plan[i][1] != "preload"), None)
        if mine and plan[mine[0]][1] == "preload" and later is not None:
            plan[mine[0]], plan[later] = plan[later], plan[mine[0]]
    return plan


# ---------------------------------------------------------------------------------------------------------------
# The workspace: one run folder per model


def lm_profile(max_steps: int) -> str:
    return tiny_profile(
        "lm",
        run={"name": "kill-lm", "seed": 11},
        train={"max_steps": max_steps, "eval_every_steps": 7, "checkpoint_every_steps": 1, "keep_last": KEEP_LAST},
        sample={"max_new_bytes": 8},
        logging={"step_interval_s": 0.1},
    )


def vocoder_profile(cache: Path) -> str:
    return tiny_profile(
        "vocoder",
        run={"name": "kill-vocoder", "seed": 5},
        data={"path": str(common.SMALL_VOICE), "cache_dir": str(cache)},
        train={"max_steps": 1000000, "eval_every_steps": 5, "checkpoint_every_steps": 1, "keep_last": KEEP_LAST},
        logging={"step_interval_s": 0.1},
    )


def write_corpus(folder: Path) -> Path:
    """A small English text corpus from the bundled demo text."""
    folder.mkdir(parents=True)
    text = " ".join(common.corpus_sentences(300))
    (folder / "corpus.txt").write_text(text + "\n", encoding="utf-8")
    return folder


@dataclass
class Run:
    """One run folder under drill: its profile and data, the events of all its segments, what to resume from."""

    name: str
    root: Path
    profile: Path
    data: Path
    events: list[Event] = field(default_factory=list)
    expect: Path | None = None  # the checkpoint the next segment must resume from
    segments: int = 0
    cut_lines: int = 0

    @property
    def run_dir(self) -> Path:
        return self.root / self.name


def make_runs(root: Path, lm_max_steps: int = 1000000) -> dict[str, Run]:
    (root / "config").mkdir(parents=True, exist_ok=True)
    corpus = write_corpus(root / "corpus")
    (root / "lm.toml").write_text(lm_profile(lm_max_steps), encoding="utf-8")
    (root / "vocoder.toml").write_text(vocoder_profile(root / "cache"), encoding="utf-8")
    return {
        "lm": Run("lm", root, root / "lm.toml", corpus),
        "vocoder": Run("vocoder", root, root / "vocoder.toml", common.SMALL_VOICE),
    }


# ---------------------------------------------------------------------------------------------------------------
# One trainer segment


@dataclass
class Segment:
    proc: subprocess.Popen
    started: float
    reader: EventReader
    marker: Path
    events: list[Event] = field(default_factory=list)
    started_wall: float = field(default_factory=time.time)  # to compare with the events' unix times

    def poll(self) -> list[Event]:
        self.events.extend(self.reader.poll())
        return self.events

    def wait_held(self) -> bool:
        """True once the trainer says it is held; False when it exits first (or never gets there)."""
        deadline = time.monotonic() + WAIT_S
        while time.monotonic() < deadline:
            if self.marker.exists():
                return True
            if self.proc.poll() is not None:
                return self.marker.exists()
            time.sleep(0.02)
        return False


def start_segment(run: Run, hold: str | None, extra_env: dict[str, str]) -> Segment:
    run.segments += 1
    argv = [*common.TRAINER_CORE, "train", "--profile", str(run.profile), "--data", str(run.data)]
    argv += ["--run-dir", str(run.run_dir)] + (["--resume", "auto"] if run.segments > 1 else [])
    marker = run.root / f"{run.name}-{run.segments:03d}.held"
    env = {k: v for k, v in os.environ.items() if not k.startswith("VEGA_")}
    env.update(VEGA_CONFIG_DIR=str(run.root / "config"), OMP_NUM_THREADS="1", VEGA_FAULTS="1", **extra_env)
    env.update({HOLD_AT_ENV: hold, HOLD_MARKER_ENV: str(marker)} if hold else {})
    log = run.run_dir / "events.jsonl"
    reader = EventReader(log)
    reader.offset = log.stat().st_size if log.exists() else 0  # this segment's events only
    with open(run.root / f"{run.name}-{run.segments:03d}.err", "wb") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env)
    return Segment(proc, time.monotonic(), reader, marker)


def end_segment(run: Run, segment: Segment, tally: checks.Tally) -> None:
    """Collect the segment's events and check the resume it was to make (not for preload: it holds first)."""
    run.events.extend(segment.poll())
    tally.write_seconds.extend(e.seconds for e in segment.events if e.type == "checkpoint_saved")
    held_phase = segment.marker.read_text().split()[0] if segment.marker.exists() else None
    if run.expect is None or held_phase == "preload":
        return
    where = f"{run.name} segment {run.segments}"
    resumed = checks.resumed_step(segment.events, run.expect, tally, where)
    if resumed is None:
        return
    said = next(e for e in segment.events if e.type == "log" and e.message.startswith("resumed from"))
    tally.resume_seconds.append(said.t - segment.started_wall)
    if checks.reached_step(segment.events, run.run_dir) <= resumed:
        tally.fail("failed_resumes", f"{where}: resumed at step {resumed} but trained no later step")


# ---------------------------------------------------------------------------------------------------------------
# The drill


def kill_at(run: Run, phase: str, tally: checks.Tally, extra_env: dict[str, str], nth: int | None = None) -> None:
    """One kill: hold the trainer at `phase`, SIGKILL it, check exit status, files, event log and the resume."""
    where = f"{run.name} segment {run.segments + 1} ({phase})"
    segment = start_segment(run, f"{phase}:{nth or NTH[phase]}", extra_env)
    held = segment.wait_held()
    segment.proc.kill()
    code = segment.proc.wait()
    if not held or code != -signal.SIGKILL:
        tally.fail("vacuous_kills", f"{where}: the trainer was not held and killed there (exit status {code})")
    else:
        tally.kills += 1
        tally.by_phase[phase] += 1
        tally.by_run[run.name] += 1
    end_segment(run, segment, tally)
    run.expect = checks.newest_loadable(run.run_dir, tally, where)
    checks.check_announced(run.run_dir, run.events, KEEP_LAST, tally, where)
    if (run.run_dir / "events.jsonl").exists():
        run.cut_lines = checks.check_event_log(run.run_dir, run.cut_lines, tally, where)


def finish_cleanly(run: Run, tally: checks.Tally, extra_env: dict[str, str]) -> None:
    """The last segment: resume, train a step further, SIGTERM; it must end `stopped` with exit status 0."""
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
        tally.fail("failed_resumes", f"{run.name}: the last segment did not stop cleanly (exit {code}, {status})")


def run_drill(root: Path, plan: list[tuple[str, str]], extra_env: dict[str, str], final: bool = True) -> checks.Tally:
    runs, tally = make_runs(root), checks.Tally()
    for name, phase in plan:
        kill_at(runs[name], phase, tally, extra_env)
    for run in runs.values():
        if run.segments and final:
            finish_cleanly(run, tally, extra_env)
        count_announced(run, tally)
    return tally


def count_announced(run: Run, tally: checks.Tally) -> None:
    """A run that never announced a checkpoint tested nothing: that fails the drill."""
    announced = sum(1 for e in run.events if e.type == "checkpoint_saved")
    tally.announced += announced
    if run.segments and announced == 0:
        tally.fail("lost_checkpoints", f"{run.name}: no checkpoint was ever announced: the drill tested nothing")


def control_in_place(root: Path) -> checks.Tally:
    """Negative control: non-atomic checkpoint writes, killed mid-write; the drill must find the damage."""
    return run_drill(root, [("lm", "write")], {IN_PLACE_ENV: "1"}, final=False)


def control_vacuous(root: Path) -> checks.Tally:
    """Negative control: the trainer finishes (8 steps) before the step it is to be held at; the kill is vacuous."""
    runs, tally = make_runs(root, lm_max_steps=8), checks.Tally()
    kill_at(runs["lm"], "step", tally, {}, nth=1000)
    count_announced(runs["lm"], tally)
    return tally


# name -> (the control, the kills it plans)
CONTROLS = {"in-place": (control_in_place, [("lm", "write")]), "vacuous": (control_vacuous, [("lm", "step")])}


# ---------------------------------------------------------------------------------------------------------------
# Report


def report(tally: checks.Tally, result: common.Result, plan: list[tuple[str, str]], per_phase: int) -> None:
    wanted = len(plan)
    result.add("kills", tally.kills, target=f"= {wanted}", met=tally.kills == wanted, detail="held, SIGKILL, exit -9")
    for phase in HOLD_PHASES:
        if any(p == phase for _, p in plan):
            count = tally.by_phase[phase]
            result.add(f"kills at {phase}", count, target=f">= {per_phase}", met=count >= per_phase)
    result.add("kills on the two-optimizer vocoder run", tally.by_run["vocoder"])
    for name in checks.ZERO_COUNTERS:
        value = getattr(tally, name)
        result.add(name, value, target="= 0", met=value == 0)
    result.add("checkpoints announced", tally.announced, target="> 0", met=tally.announced > 0)
    result.add(
        "start to resumed (median)",
        common.median(tally.resume_seconds),
        "s",
        detail=common.spread(tally.resume_seconds),
    )
    result.add(
        "checkpoint write (median)", common.median(tally.write_seconds), "s", detail=common.spread(tally.write_seconds)
    )
    result.notes.extend(tally.problems[:20])


def report_control(name: str, tally: checks.Tally, result: common.Result) -> None:
    caught = tally.failures()
    detail = "; ".join(tally.problems[:2]).replace("\n", " ")[:300]
    result.add(f"negative control ({name}): failures found", caught, target="> 0", met=caught > 0, detail=detail)


def hide_workspace(result: common.Result, root: Path) -> None:
    """Messages name files in the deleted temporary workspace: show them relative to it, as docs may not
    point outside the repository."""
    result.notes = [note.replace(str(root), "WORKSPACE") for note in result.notes]
    for figure in result.figures:
        figure.detail = figure.detail.replace(str(root), "WORKSPACE")


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=30, help="SIGKILLs in the drill (default 30; --tiny: 4)")
    parser.add_argument("--control", choices=sorted(CONTROLS), help="run only this negative control (must fail)")
    parser.add_argument("--keep", action="store_true", help="keep the workspace (printed) instead of deleting it")
    args = parser.parse_args(argv)
    if args.kills < 1:
        parser.error("--kills must be at least 1")
    plan = list(TINY_SCHEDULE) if args.tiny else schedule(args.kills)
    per_phase = 1 if args.tiny else max(1, min(3, args.kills // len(HOLD_PHASES)))
    settings: dict[str, Any] = {"kills": len(plan), "control": args.control, "schedule": plan, "nth": NTH}
    settings["tiny"] = args.tiny
    title = "Kill drill: SIGKILLs held at every phase of training"
    result = common.start_result("kill", title, settings)
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="vega-kill-"))  # short: the control socket path must fit
    try:
        if args.control:
            control, planned = CONTROLS[args.control]
            report(control(root / args.control), result, planned, 1)
        else:
            report(run_drill(root / "drill", plan, {}), result, plan, per_phase)
            for name, (control, _) in ({} if args.tiny else CONTROLS).items():
                report_control(name, control(root / name), result)
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
