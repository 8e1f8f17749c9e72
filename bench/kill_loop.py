"""Benchmark: SIGKILL the trainer at random moments, N times in a row, and check what survives every kill.

Each segment starts `trainer_core train` (with `--resume auto` after the first), waits until it trains,
sleeps a random 0..--max-delay seconds and SIGKILLs it. The run saves a checkpoint every step with
keep_last 2, validates every few steps (so best.json moves too), and the fault hook
`debug.hold_checkpoint_write_s` holds every write half-way for a moment, so kills land while a checkpoint
is being written and pruned as well as between steps. After every kill:

- the newest complete checkpoint loads (weights_only) ............................ unreadable_latest, target 0
- the next segment's `--resume auto` continues from exactly that checkpoint ...... failed_resumes, target 0
- every complete line of events.jsonl parses, seq never repeats; only the last line
  may be cut, and the next writer ends it so that readers skip it ................ event_log_damage, target 0
- no checkpoint announced by a checkpoint_saved event is gone unless a newer one
  replaced it, at least keep_last remain, and best.json names an existing file .. lost_checkpoints, target 0

A last segment resumes once more and is stopped with SIGTERM (it must end `stopped`, exit 0). Timings:
seconds from start to "resumed from", and per checkpoint write.

    .venv/bin/python bench/kill_loop.py --kills 25
"""

from __future__ import annotations

import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path
from typing import Any

import common

from trainer_core.contract.event_lines import parse_event
from trainer_core.contract.eventlog import EventReader
from trainer_core.contract.protocol import Event, ProtocolError
from trainer_core.engine.checkpoint import CheckpointError, list_checkpoints, load_checkpoint, read_best
from trainer_core.tiny_profiles import tiny_profile

KEEP_LAST = 2


def kill_loop_profile(keep_last: int, hold_s: float) -> str:
    """The tiny LM (trainer_core.tiny_profiles) twice as wide and deep, saving at every step."""
    return tiny_profile(
        "lm",
        run={"name": "kill-loop", "seed": 11},
        model={"hidden": 64, "encoder_layers": 2, "dropout": None},
        train={
            "lr": 1e-3,
            "max_steps": 1000000,
            "eval_every_steps": 7,
            "checkpoint_every_steps": 1,
            "keep_last": keep_last,
        },
        sample={"max_new_bytes": 8},
        logging={"step_interval_s": 0.1},
        debug={"hold_checkpoint_write_s": hold_s},
    )


WORDS = [
    "the",
    "river",
    "runs",
    "past",
    "a",
    "quiet",
    "town",
    "where",
    "small",
    "dogs",
    "sleep",
    "in",
    "the",
    "sun",
    "and",
    "old",
    "people",
    "read",
    "long",
    "letters",
    "from",
    "far",
    "away",
    "while",
    "the",
    "wind",
    "moves",
    "slowly",
    "over",
    "green",
    "hills",
]
RESUMED_RE = re.compile(r"^resumed from (?P<path>\S+): step (?P<step>\d+),")
WAIT_S = 120.0  # generous: the machine is shared


@dataclass
class Tally:
    """What the loop found; the four counters must stay 0."""

    kills: int = 0
    unreadable_latest: int = 0
    failed_resumes: int = 0
    event_log_damage: int = 0
    lost_checkpoints: int = 0
    killed_mid_write: int = 0
    previous_cut_lines: int = 0
    resume_seconds: list[float] = field(default_factory=list)
    write_seconds: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def fail(self, counter: str, message: str) -> None:
        setattr(self, counter, getattr(self, counter) + 1)
        self.problems.append(f"kill {self.kills}: {message}")


# ---------------------------------------------------------------------------------------------------------------
# The workspace and one trainer segment


def write_workspace(root: Path, hold_s: float) -> tuple[Path, Path]:
    """A small English-like corpus and the profile; returns (profile, corpus folder)."""
    rng = random.Random(0)
    corpus = root / "corpus"
    corpus.mkdir(parents=True)
    for n in range(6):
        lines = [" ".join(rng.choice(WORDS) for _ in range(12)).capitalize() + "." for _ in range(60)]
        (corpus / f"doc-{n}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    profile = root / "kill.toml"
    profile.write_text(kill_loop_profile(KEEP_LAST, hold_s), encoding="utf-8")
    (root / "config").mkdir()
    return profile, corpus


@dataclass
class Segment:
    """One trainer process of the run and the events it has appended so far."""

    proc: subprocess.Popen
    started: float
    reader: EventReader
    events: list[Event] = field(default_factory=list)

    def poll(self) -> list[Event]:
        fresh = self.reader.poll()
        self.events.extend(fresh)
        return fresh

    def wait_for(self, predicate, what: str, timeout: float = WAIT_S) -> Event | None:
        """The first new event matching `predicate`, or None when the process exits or time runs out."""
        deadline = time.monotonic() + timeout
        checked = 0
        while time.monotonic() < deadline:
            exited = self.proc.poll() is not None
            self.poll()
            for event in self.events[checked:]:
                if predicate(event):
                    return event
            checked = len(self.events)
            if exited:
                return None
            time.sleep(0.02)
        raise TimeoutError(f"no {what} within {timeout:g} s")


def start_segment(
    root: Path, profile: Path, corpus: Path, run_dir: Path, resume: bool, number: int, step_sleep_s: float
) -> Segment:
    argv = [*common.TRAINER_CORE, "train", "--profile", str(profile), "--data", str(corpus), "--run-dir", str(run_dir)]
    argv += ["--resume", "auto"] if resume else []
    env = {k: v for k, v in os.environ.items() if not k.startswith("VEGA_")}
    env.update(VEGA_CONFIG_DIR=str(root / "config"), OMP_NUM_THREADS="1", VEGA_FAULT_STEP_SLEEP_S=str(step_sleep_s))
    log = run_dir / "events.jsonl"
    reader = EventReader(log)
    reader.offset = log.stat().st_size if log.exists() else 0  # this segment's events only
    with open(root / f"segment-{number:03d}.err", "wb") as err:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=err, env=env)
    return Segment(proc, time.monotonic(), reader)


# ---------------------------------------------------------------------------------------------------------------
# Checks after a kill


def check_newest_checkpoint(run_dir: Path, tally: Tally) -> Path | None:
    """The newest complete checkpoint, after proving it loads; None when there is none."""
    complete = list_checkpoints(run_dir / "checkpoints")
    if not complete:
        return None
    try:
        load_checkpoint(complete[0])
    except CheckpointError as exc:
        tally.fail("unreadable_latest", f"{complete[0].name} does not load: {exc}")
    return complete[0]


def check_event_log(run_dir: Path, tally: Tally) -> None:
    """Every complete line parses except the cut lines earlier kills left; seq strictly increases."""
    data = (run_dir / "events.jsonl").read_bytes()
    *complete, tail = data.split(b"\n")
    broken, seqs = 0, []
    for line in complete:
        try:
            seqs.append(parse_event(line).seq)
        except ProtocolError:
            broken += 1
    if broken > tally.previous_cut_lines:
        tally.fail("event_log_damage", f"{broken - tally.previous_cut_lines} complete line(s) do not parse")
    if any(b <= a for a, b in pairwise(seqs)):
        tally.fail("event_log_damage", "seq numbers repeat or go back")
    tally.previous_cut_lines += 1 if tail else 0


def check_retained(run_dir: Path, events: list[Event], newest: Path | None, tally: Tally) -> None:
    """Announced checkpoints survive (or a newer one replaced them); keep_last of them remain; best.json is sound."""
    saved = sorted({e.step for e in events if e.type == "checkpoint_saved"})
    folder = run_dir / "checkpoints"
    newest_step = int(newest.stem.split("-")[1]) if newest else -1
    if saved and newest_step < saved[-1]:
        tally.fail("lost_checkpoints", f"step {saved[-1]} was announced saved, the newest file is step {newest_step}")
    if len(list_checkpoints(folder)) < min(KEEP_LAST, len(saved)):
        tally.fail("lost_checkpoints", f"fewer than keep_last={KEEP_LAST} checkpoints remain")
    if (folder / "best.json").exists() and read_best(folder) is None:
        tally.fail("lost_checkpoints", "best.json names a checkpoint that is gone or is unreadable")


def check_resume(segment: Segment, newest: Path | None, tally: Tally) -> None:
    """The new segment must say it resumed from `newest` and then train the step after it."""
    if newest is None:
        return
    said = segment.wait_for(lambda e: e.type == "log" and e.message.startswith("resumed from"), "resume message")
    match = RESUMED_RE.match(said.message) if said is not None else None
    if match is None or Path(match["path"]).name != newest.name:
        got = said.message if said is not None else f"exit {segment.proc.returncode} before resuming"
        tally.fail("failed_resumes", f"expected to resume from {newest.name}; got: {got}")
        return
    tally.resume_seconds.append(time.monotonic() - segment.started)
    step = int(match["step"])
    first = segment.wait_for(lambda e: e.type == "step", "first step after resume")
    if first is None or first.step_series[0] != step + 1:
        got = first.step_series[0] if first is not None else "none"
        tally.fail("failed_resumes", f"resumed at step {step} but the next step reported was {got}")


# ---------------------------------------------------------------------------------------------------------------
# The loop


def kill_at_random(segment: Segment, run_dir: Path, max_delay_s: float, rng: random.Random, tally: Tally) -> None:
    """Wait until the segment trains, then SIGKILL it after a random delay."""
    if segment.wait_for(lambda e: e.type == "step", "a step") is None:
        raise RuntimeError(f"the trainer exited ({segment.proc.returncode}) before training")
    time.sleep(rng.uniform(0.0, max_delay_s))
    segment.proc.kill()
    segment.proc.wait()
    tally.kills += 1
    if any((run_dir / "checkpoints").glob(".step-*.tmp")):
        tally.killed_mid_write += 1


def inspect(run_dir: Path, all_events: list[Event], tally: Tally) -> Path | None:
    newest = check_newest_checkpoint(run_dir, tally)
    check_event_log(run_dir, tally)
    check_retained(run_dir, all_events, newest, tally)
    return newest


def run_loop(root: Path, kills: int, max_delay_s: float, hold_s: float, step_sleep_s: float, seed: int) -> Tally:
    profile, corpus = write_workspace(root, hold_s)
    run_dir, tally, rng = root / "run", Tally(), random.Random(seed)
    all_events: list[Event] = []
    newest: Path | None = None
    for number in range(kills + 1):
        segment = start_segment(root, profile, corpus, run_dir, number > 0, number, step_sleep_s)
        check_resume(segment, newest, tally)
        if number == kills:
            return finish_cleanly(segment, tally)
        kill_at_random(segment, run_dir, max_delay_s, rng, tally)
        segment.poll()
        all_events.extend(segment.events)
        tally.write_seconds.extend(e.seconds for e in segment.events if e.type == "checkpoint_saved")
        newest = inspect(run_dir, all_events, tally)
    return tally


def finish_cleanly(segment: Segment, tally: Tally) -> Tally:
    """The last segment: train a little, SIGTERM, and it must end as `stopped` with exit code 0."""
    segment.wait_for(lambda e: e.type == "step", "a step")
    segment.proc.send_signal(signal.SIGTERM)
    code = segment.proc.wait(timeout=WAIT_S)
    end = segment.wait_for(lambda e: e.type == "finished", "finished event", timeout=5)
    if code != 0 or end is None or end.status != "stopped":
        tally.fail("failed_resumes", f"the last segment did not stop cleanly (exit {code}, {end and end.status})")
    return tally


# ---------------------------------------------------------------------------------------------------------------
# Report


def report(tally: Tally, result: common.Result) -> None:
    for name in ("unreadable_latest", "failed_resumes", "event_log_damage", "lost_checkpoints"):
        value = getattr(tally, name)
        result.add(name, value, target="= 0", met=value == 0)
    result.add("kills", tally.kills)
    result.add(
        "kills during a checkpoint write",
        tally.killed_mid_write,
        detail="a half-written temp file was left in checkpoints/",
    )
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
        detail="includes the injected hold; " + common.spread(tally.write_seconds),
    )
    result.notes.extend(tally.problems[:20])


def main(argv: list[str] | None = None) -> int:
    parser = common.base_parser(__doc__.split("\n\n")[0])
    parser.add_argument("--kills", type=int, default=25, help="SIGKILLs in the loop (default 25)")
    parser.add_argument("--max-delay", type=float, default=1.5, help="longest random wait before a kill, seconds")
    parser.add_argument("--hold", type=float, default=0.02, help="seconds each checkpoint write is held half-written")
    parser.add_argument("--step-sleep", type=float, default=0.01, help="seconds of sleep injected in every step")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random kill moments")
    parser.add_argument("--keep", action="store_true", help="keep the workspace (printed) instead of deleting it")
    args = parser.parse_args(argv)
    if args.kills < 1:
        parser.error("--kills must be at least 1")
    settings: dict[str, Any] = {k: getattr(args, k) for k in ("kills", "max_delay", "hold", "step_sleep", "seed")}
    result = common.start_result("kill_loop", "Random SIGKILLs: checkpoints, resume and event log survive", settings)
    started = time.monotonic()
    root = Path(tempfile.mkdtemp(prefix="vega-kill-"))  # short: the control socket path must fit
    try:
        tally = run_loop(root, args.kills, args.max_delay, args.hold, args.step_sleep, args.seed)
    finally:
        if args.keep:
            print(f"workspace kept: {root}")
        else:
            shutil.rmtree(root, ignore_errors=True)
    report(tally, result)
    common.finish_result(result, started, args.out)
    return 0 if all(f.met is not False for f in result.figures) else 1


if __name__ == "__main__":
    sys.exit(main())
