"""The kill drill's checks after every SIGKILL, and the tally they fill (bench/kill_loop.py runs them).

After each kill of a run folder:
- the newest complete checkpoint loads (weights_only) ........................... unreadable_latest
- every checkpoint a checkpoint_saved event announced still exists and loads, unless
  keep_last newer loadable ones replaced it (pruning); best.json names a file .... lost_checkpoints
- every complete line of events.jsonl parses and seq never goes back .............. event_log_damage
and the next segment's `--resume auto` starts from the newest loadable checkpoint
and reaches a later step ......................................................... failed_resumes
A segment that exits on its own before it is held and SIGKILLed (exit status not -9)
counts as ........................................................................ vacuous_kills
All five must stay 0.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from trainer_core.contract.event_lines import parse_event
from trainer_core.contract.protocol import Event, ProtocolError
from trainer_core.engine.checkpoint import CheckpointError, list_checkpoints, load_checkpoint, read_best

ZERO_COUNTERS = ("vacuous_kills", "unreadable_latest", "lost_checkpoints", "failed_resumes", "event_log_damage")
RESUMED_RE = re.compile(r"^resumed from (?P<path>\S+): step (?P<step>\d+),")


@dataclass
class Tally:
    """What the drill found; the ZERO_COUNTERS must stay 0."""

    kills: int = 0
    by_phase: Counter[str] = field(default_factory=Counter)
    by_run: Counter[str] = field(default_factory=Counter)
    announced: int = 0
    vacuous_kills: int = 0
    unreadable_latest: int = 0
    lost_checkpoints: int = 0
    failed_resumes: int = 0
    event_log_damage: int = 0
    resume_seconds: list[float] = field(default_factory=list)
    write_seconds: list[float] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    def fail(self, counter: str, message: str) -> None:
        setattr(self, counter, getattr(self, counter) + 1)
        self.problems.append(message)

    def failures(self) -> int:
        return sum(getattr(self, name) for name in ZERO_COUNTERS)


def step_of(path: Path) -> int:
    return int(path.stem.split("-")[1])


def loads(path: Path) -> str | None:
    """None when the checkpoint loads; else why not."""
    try:
        load_checkpoint(path)
    except CheckpointError as exc:
        return str(exc)
    return None


def newest_loadable(run_dir: Path, tally: Tally, where: str) -> Path | None:
    """The newest checkpoint that loads, after counting an unreadable newest one."""
    complete = list_checkpoints(run_dir / "checkpoints")
    if complete and (why := loads(complete[0])) is not None:
        tally.fail("unreadable_latest", f"{where}: the newest checkpoint {complete[0].name} does not load: {why}")
    return next((p for p in complete if loads(p) is None), None)


def check_announced(run_dir: Path, events: list[Event], keep_last: int, tally: Tally, where: str) -> None:
    """Every announced checkpoint exists and loads, or keep_last newer loadable ones made pruning it right."""
    folder = run_dir / "checkpoints"
    loadable = sorted(step_of(p) for p in list_checkpoints(folder) if loads(p) is None)
    for step in sorted({e.step for e in events if e.type == "checkpoint_saved"}):
        if step in loadable or sum(1 for s in loadable if s > step) >= keep_last:
            continue
        tally.fail("lost_checkpoints", f"{where}: announced checkpoint step {step} is gone or unreadable")
    if (folder / "best.json").exists() and read_best(folder) is None:
        tally.fail("lost_checkpoints", f"{where}: best.json names a checkpoint that is gone")


def check_event_log(run_dir: Path, cut_lines: int, tally: Tally, where: str) -> int:
    """Every complete line parses except the cut lines earlier kills left; returns the new count of cut lines."""
    data = (run_dir / "events.jsonl").read_bytes()
    *complete, tail = data.split(b"\n")
    broken, seqs = 0, []
    for line in complete:
        try:
            seqs.append(parse_event(line).seq)
        except ProtocolError:
            broken += 1
    if broken > cut_lines:
        tally.fail("event_log_damage", f"{where}: {broken - cut_lines} complete line(s) do not parse")
    if any(b <= a for a, b in pairwise(seqs)):
        tally.fail("event_log_damage", f"{where}: seq numbers repeat or go back")
    return cut_lines + (1 if tail else 0)


def resumed_step(events: list[Event], expected: Path, tally: Tally, where: str) -> int | None:
    """The step a segment said it resumed from, if it resumed from `expected`; else a failed resume."""
    said = next((e for e in events if e.type == "log" and e.message.startswith("resumed from")), None)
    match = RESUMED_RE.match(said.message) if said is not None else None
    if match is None or Path(match["path"]).name != expected.name:
        got = said.message if said is not None else "no 'resumed from' message"
        tally.fail("failed_resumes", f"{where}: expected to resume from {expected.name}; got: {got}")
        return None
    return int(match["step"])


def reached_step(events: list[Event], run_dir: Path) -> int:
    """The latest step a segment trained: from its step and checkpoint events, or the newest file on disk."""
    stepped = [max(e.step_series or [e.step]) for e in events if e.type == "step"]
    saved = [e.step for e in events if e.type == "checkpoint_saved"]
    on_disk = [step_of(p) for p in list_checkpoints(run_dir / "checkpoints")[:1]]
    return max([*stepped, *saved, *on_disk], default=-1)
