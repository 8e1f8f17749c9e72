"""The kill drill's checks after every SIGKILL, and the tally they fill
(bench/kill_loop.py runs them).

After each kill of a run folder:
- the newest complete checkpoint loads (weights_only) ........................... unreadable_latest
- every checkpoint a checkpoint_saved event announced still exists and loads, unless
  keep_last newer loadable ones replaced it (pruning) ............................. lost_checkpoints
- every complete line of events.jsonl parses and seq never goes back .............. event_log_damage
- once a best_model event was announced, best.json parses and names a checkpoint that
  loads, no older than the last announced best (and best.json never names a
  missing or unloadable file) ..................................................... bad_best
- samples, views and the feature cache are whole (bench/kill_files.py) .. torn_samples, bad_cache
and the next segment's `--resume auto` starts from the newest loadable checkpoint
and reaches a later step ......................................................... failed_resumes
A segment that exits on its own before it is held and SIGKILLed (exit status not -9)
counts as ........................................................................ vacuous_kills
All eight must stay 0.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass, field
from itertools import pairwise
from pathlib import Path

from trainer_core.contract.event_lines import parse_event
from trainer_core.contract.protocol import Event, ProtocolError
from trainer_core.engine.checkpoint_manager import (
    BEST_FILENAME,
    STEP_FILE_RE,
    CheckpointError,
    list_checkpoints,
    load_checkpoint,
)

ZERO_COUNTERS = (
    "vacuous_kills",
    "unreadable_latest",
    "lost_checkpoints",
    "failed_resumes",
    "event_log_damage",
    "torn_samples",
    "bad_cache",
    "bad_best",
)
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
    torn_samples: int = 0
    bad_cache: int = 0
    bad_best: int = 0
    checked_files: set[str] = field(default_factory=set)  # sample and view files checked
    caches_checked: int = 0
    bests_checked: int = 0
    resume_seconds: list[float] = field(default_factory=list)
    write_seconds: list[float] = field(default_factory=list)
    problems: list[tuple[str, str]] = field(default_factory=list)  # (counter, message)
    _seen: set[tuple[str, str]] = field(default_factory=set)

    def fail(self, counter: str, message: str) -> None:
        setattr(self, counter, getattr(self, counter) + 1)
        self.problems.append((counter, message))

    def fail_once(self, counter: str, key: str, message: str) -> None:
        """Count a damaged file once, however many later checks still find it."""
        if (counter, key) not in self._seen:
            self._seen.add((counter, key))
            self.fail(counter, message)

    def messages(self, counter: str | None = None) -> list[str]:
        return [message for name, message in self.problems if counter in (None, name)]

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
        tally.fail(
            "unreadable_latest",
            f"{where}: the newest checkpoint {complete[0].name} does not load: {why}",
        )
    return next((p for p in complete if loads(p) is None), None)


def check_announced(
    run_dir: Path, events: list[Event], keep_last: int, tally: Tally, where: str
) -> None:
    """Every announced checkpoint exists and loads, or keep_last newer
    loadable ones made pruning it right."""
    folder = run_dir / "checkpoints"
    loadable = sorted(step_of(p) for p in list_checkpoints(folder) if loads(p) is None)
    for step in sorted({e.step for e in events if e.type == "checkpoint_saved"}):
        if step in loadable or sum(1 for s in loadable if s > step) >= keep_last:
            continue
        tally.fail(
            "lost_checkpoints", f"{where}: announced checkpoint step {step} is gone or unreadable"
        )


def best_problem(folder: Path, announced: int | None) -> str | None:
    """None when best.json is right: absent before any best was announced, else whole, naming a
    checkpoint that loads, of a step no older than `announced` (the last best_model event's)."""
    path = folder / BEST_FILENAME
    if not path.exists():
        missing = f"{BEST_FILENAME} is missing after best step {announced} was announced"
        return None if announced is None else missing
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
        name, step = record["path"], record["step"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return f"{BEST_FILENAME} is torn or damaged ({exc!r})"
    if not isinstance(name, str) or not STEP_FILE_RE.match(name) or not isinstance(step, int):
        return f"{BEST_FILENAME} names no checkpoint file ({name!r}, step {step!r})"
    if (why := loads(folder / name)) is not None:
        return f"{BEST_FILENAME} names {name}, which does not load: {why}"
    if announced is not None and step < announced:
        return f"{BEST_FILENAME} names step {step}, older than the announced best step {announced}"
    return None


def check_best(run_dir: Path, events: list[Event], tally: Tally, where: str) -> None:
    tally.bests_checked += 1
    announced = max((e.step for e in events if e.type == "best_model"), default=None)
    if (why := best_problem(run_dir / "checkpoints", announced)) is not None:
        tally.fail("bad_best", f"{where}: {why}")


def check_event_log(run_dir: Path, cut_lines: int, tally: Tally, where: str) -> int:
    """Every complete line parses except the cut lines earlier kills left;
    returns the new count of cut lines."""
    data = (run_dir / "events.jsonl").read_bytes()
    *complete, tail = data.split(b"\n")
    broken, seqs = 0, []
    for line in complete:
        try:
            seqs.append(parse_event(line).seq)
        except ProtocolError:
            broken += 1
    if broken > cut_lines:
        tally.fail(
            "event_log_damage", f"{where}: {broken - cut_lines} complete line(s) do not parse"
        )
    if any(b <= a for a, b in pairwise(seqs)):
        tally.fail("event_log_damage", f"{where}: seq numbers repeat or go back")
    return cut_lines + (1 if tail else 0)


def resumed_step(events: list[Event], expected: Path, tally: Tally, where: str) -> int | None:
    """The step a segment said it resumed from, if it resumed from
    `expected`; else a failed resume."""
    said = next(
        (e for e in events if e.type == "log" and e.message.startswith("resumed from")), None
    )
    match = RESUMED_RE.match(said.message) if said is not None else None
    if match is None or Path(match["path"]).name != expected.name:
        got = said.message if said is not None else "no 'resumed from' message"
        tally.fail(
            "failed_resumes", f"{where}: expected to resume from {expected.name}; got: {got}"
        )
        return None
    return int(match["step"])


def reached_step(events: list[Event], run_dir: Path) -> int:
    """The latest step a segment trained: from its step and checkpoint
    events, or the newest file on disk."""
    stepped = [max(e.step_series or [e.step]) for e in events if e.type == "step"]
    saved = [e.step for e in events if e.type == "checkpoint_saved"]
    on_disk = [step_of(p) for p in list_checkpoints(run_dir / "checkpoints")[:1]]
    return max([*stepped, *saved, *on_disk], default=-1)
