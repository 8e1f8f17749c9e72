"""The runs under a runs root: a summary row per run folder, the newest run,
loss curves for overlays.

A summary never reads a whole event log: it takes session.json when the run wrote one, otherwise the
first lines (the hello event) and the last few hundred kilobytes of events.jsonl. The status comes
from `runner.run_status` (the log's last hello/finished event plus the process table), so a run
resumed into its folder shows as live even though an older session.json says finished. A folder with
a profile or checkpoints but no event log, or with an unreadable profile, is listed with its
`problem`; the user's tags (`vega_tui.run_notes`) come with each summary.
"""

from __future__ import annotations

import json
import math
import os
import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, BinaryIO

from trainer_core.contract import rundir
from vega_tui.run_compare import read_profile
from vega_tui.run_notes import read_tags
from vega_tui.run_state import Series
from vega_tui.runner import modified_at, run_status

# How much of the end of events.jsonl a summary reads when there is no session.json.
SUMMARY_TAIL_BYTES = 256 * 1024
HEAD_LINES = 20
HEAD_LINE_MAX_BYTES = 64 * 1024  # a longer line at the head is cut, fails to parse and is skipped
CURVE_READ_BYTES = 8 * 1024 * 1024
_STEP_RE = re.compile(rb'"type"\s*:\s*"step"')


@dataclass(frozen=True)
class RunSummary:
    """One row of the runs screen. `started` is a unix time; numbers are
    None when the run never told."""

    path: Path
    name: str
    status: str
    profile: str | None
    step: int | None
    best_val_loss: float | None
    final_loss: float | None
    duration_s: float | None
    started: float | None
    profile_path: str | None = None
    device: str | None = None
    tags: tuple[str, ...] = ()
    problem: str | None = None  # what is wrong (no event log, an unreadable profile), if anything


# --------------------------------------------------------------------------------------------------
# Finding runs


def default_runs_root() -> Path:
    """./runs when the current folder has one, else the runs/ folder of this checkout."""
    here = Path.cwd() / "runs"
    if here.is_dir():
        return here
    return Path(__file__).resolve().parent.parent / "runs"


def _run_dirs(runs_root: Path) -> list[Path]:
    """Folders directly under `runs_root` holding an event log, a profile or checkpoints."""
    try:
        children = list(runs_root.iterdir())
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return []
    marks = (rundir.EVENTS, rundir.PROFILE, rundir.CHECKPOINTS)
    runs = [child for child in children if child.name != rundir.TRASH and child.is_dir()]
    return [child for child in runs if any((child / mark).exists() for mark in marks)]


def list_runs(runs_root: Path | str) -> list[RunSummary]:
    """Every run folder directly under `runs_root`, newest first; broken ones with a problem."""
    summaries = [_summary_or_problem(path) for path in _run_dirs(Path(runs_root))]
    return sorted(summaries, key=lambda s: (s.started or 0.0, s.name), reverse=True)


def newest_run(runs_root: Path | str) -> Path | None:
    """The most recently started run folder under `runs_root` that has an event log, or None."""
    runs = [run for run in list_runs(runs_root) if (run.path / rundir.EVENTS).is_file()]
    return runs[0].path if runs else None


def _summary_or_problem(path: Path) -> RunSummary:
    try:
        return summarize_run(path)
    except Exception as exc:  # noqa: BLE001 - one damaged folder must not hide the others
        unknown = (None,) * 5
        return RunSummary(path, path.name, "empty", *unknown, modified_at(path), problem=repr(exc))


# --------------------------------------------------------------------------------------------------
# One run


def summarize_run(run_dir: Path | str) -> RunSummary:
    """The summary row for one run folder."""
    path = Path(run_dir)
    status = run_status(path)
    head = _head_events(path / rundir.EVENTS)
    tail = _tail_events(path / rundir.EVENTS)
    # A live run may have been resumed into a folder whose session.json
    # describes the previous trainer.
    session = _read_session(path / rundir.SESSION) if status != "live" else None
    hello = next((e for e in head if e.get("type") == "hello"), {})
    facts = _facts_from_events(head + tail)
    if session is not None:
        facts.update({k: v for k, v in _facts_from_session(session).items() if v is not None})
    profile_path = hello.get("profile_path") or facts.get("profile_path")
    tags, tags_problem = read_tags(path)
    problems = folder_problems(path) + ([tags_problem] if tags_problem else [])
    return RunSummary(
        path=path,
        name=path.name,
        status=status,
        profile=Path(profile_path).stem if profile_path else None,
        step=facts.get("step"),
        best_val_loss=facts.get("best_val_loss"),
        final_loss=facts.get("final_loss"),
        duration_s=facts.get("duration_s"),
        started=_number(hello.get("t")) or facts.get("started") or modified_at(path),
        profile_path=profile_path,
        device=facts.get("device"),
        tags=tuple(tags),
        problem="; ".join(problems) or None,
    )


# profile.toml -> ((mtime_ns, size), problem): the list refreshes every 2 s; parse each once.
_profile_checks: dict[Path, tuple[tuple[int, int], str | None]] = {}


def folder_problems(path: Path) -> list[str]:
    """What is wrong with a run folder: a missing or unreadable event log or profile."""
    problems = []
    events = path / rundir.EVENTS
    if not events.is_file():
        problems.append(f"no {rundir.EVENTS} (the trainer never started here, or it was removed)")
    elif not os.access(events, os.R_OK):
        problems.append(f"cannot read {rundir.EVENTS} (permission denied)")
    profile = path / rundir.PROFILE
    try:
        st = profile.stat()
        identity = (st.st_mtime_ns, st.st_size)
    except OSError:
        identity = (-1, -1)
    cached = _profile_checks.get(profile)
    if cached is None or cached[0] != identity:
        cached = (identity, read_profile(path)[1])
        _profile_checks[profile] = cached
    if cached[1] is not None:
        problems.append(cached[1])
    return problems


def _facts_from_events(events: list[dict[str, Any]]) -> dict[str, Any]:
    """Latest step, loss, best validation loss, duration and device seen in the given events."""
    facts: dict[str, Any] = {}
    first_t = _number(events[0].get("t")) if events else None
    for event in events:
        kind = event.get("type")
        if kind == "step":
            facts["step"] = event.get("step")
            facts["final_loss"] = _number(event.get("loss"))
        elif kind == "best_model":
            facts["best_val_loss"] = _number(event.get("val_loss"))
        elif kind == "device_selected":
            facts["device"] = event.get("device")
        elif kind == "finished":
            facts.update(_facts_from_finished(event))
        t = _number(event.get("t"))
        if t is not None and first_t is not None and "finished_seconds" not in facts:
            facts["duration_s"] = t - first_t
    return facts


def _facts_from_finished(event: dict[str, Any]) -> dict[str, Any]:
    summary = event.get("summary") or {}
    facts = {
        "step": event.get("step"),
        "duration_s": _number(event.get("seconds")),
        "finished_seconds": True,
    }
    for key in ("final_loss", "best_val_loss"):
        if _number(summary.get(key)) is not None:
            facts[key] = _number(summary.get(key))
    return facts


def _facts_from_session(session: dict[str, Any]) -> dict[str, Any]:
    summary = session.get("summary") or {}
    return {
        "step": summary.get("steps"),
        "final_loss": _number(summary.get("final_loss")),
        "best_val_loss": _number(summary.get("best_val_loss")),
        "duration_s": _number(session.get("seconds")),
        "started": _parse_time(session.get("started")),
        "profile_path": session.get("profile"),
        "device": session.get("device"),
    }


# --------------------------------------------------------------------------------------------------
# Reading pieces of files


def _read_session(path: Path) -> dict[str, Any] | None:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None  # missing, or half-written by a crash: fall back to the event log
    return data if isinstance(data, dict) else None


def _decode_lines(lines: list[bytes]) -> list[dict[str, Any]]:
    events = []
    for line in lines:
        try:
            event = json.loads(line)
        except ValueError:
            continue
        if isinstance(event, dict):
            events.append(event)
    return events


def _head_events(path: Path) -> list[dict[str, Any]]:
    try:
        with open(path, "rb") as handle:
            lines = [handle.readline(HEAD_LINE_MAX_BYTES) for _ in range(HEAD_LINES)]
    except OSError:
        return []
    return _decode_lines([line for line in lines if line.endswith(b"\n")])


def _tail_events(path: Path) -> list[dict[str, Any]]:
    """Events in the last SUMMARY_TAIL_BYTES of the log (the first, possibly cut, line dropped)."""
    try:
        with open(path, "rb") as handle:
            size = handle.seek(0, 2)
            start = max(0, size - SUMMARY_TAIL_BYTES)
            handle.seek(start)
            data = handle.read()
    except OSError:
        return []
    lines = data.split(b"\n")
    if start > 0:
        lines = lines[1:]
    return _decode_lines(lines)


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return float(value) if math.isfinite(value) else None


def _parse_time(text: Any) -> float | None:
    if not isinstance(text, str):
        return None
    try:
        return datetime.strptime(text, "%Y-%m-%dT%H:%M:%S%z").timestamp()
    except ValueError:
        return None


# --------------------------------------------------------------------------------------------------
# Loss curves for overlays


# (events.jsonl, max_points) -> (device, inode, bytes read, curve so far, cut last line):
# the runs screen asks again on every refresh, and a long run's log must be read once, then
# only what was appended since.
_curve_cache: dict[tuple[Path, int], tuple[int, int, int, Series, bytes]] = {}


def loss_curve(run_dir: Path | str, max_points: int = 500) -> tuple[list[float], list[float]]:
    """(steps, training losses) of a run, downsampled to at most
    `max_points` points keeping min and max.

    Reads the step events of RUN/events.jsonl (bad lines skipped) in windows of CURVE_READ_BYTES,
    the first time whole, later only the bytes appended since; ([], []) when there are none.
    """
    path = (Path(run_dir) / rundir.EVENTS).absolute()
    key = (path, max(4, max_points))
    try:
        handle = open(path, "rb")  # noqa: SIM115 - the `with` below owns it; only open() errors are caught here
    except OSError:
        _curve_cache.pop(key, None)
        return [], []
    with handle:
        info = os.fstat(handle.fileno())
        cached = _curve_cache.get(key)
        if cached is None or not _same_log(handle, info, cached[:3], cached[4]):
            # new, replaced or truncated: from 0
            cached = (info.st_dev, info.st_ino, 0, Series(key[1]), b"")
        _, _, offset, series, partial = cached
        handle.seek(offset)
        while chunk := handle.read(CURVE_READ_BYTES):
            offset += len(chunk)
            lines = (partial + chunk).split(b"\n")
            partial = lines.pop()
            for line in lines:
                if _STEP_RE.search(line):
                    _add_step_line(series, line)
    _curve_cache[key] = (info.st_dev, info.st_ino, offset, series, partial)
    points = series.points()
    return [x for x, _ in points], [y for _, y in points]


def _same_log(
    handle: BinaryIO, info: os.stat_result, read: tuple[int, int, int], partial: bytes
) -> bool:
    """Whether the file is the one read before, only longer: same identity, not shorter, and the
    last line read whole still ends where it did (a file rewritten in place fails this)."""
    dev, ino, offset = read
    if (info.st_dev, info.st_ino) != (dev, ino) or info.st_size < offset:
        return False
    newline_at = offset - len(partial) - 1
    if newline_at < 0:
        return True
    handle.seek(newline_at)
    return handle.read(1) == b"\n"


def _add_step_line(series: Series, line: bytes) -> None:
    try:
        event = json.loads(line)
    except ValueError:
        return
    if not isinstance(event, dict) or event.get("type") != "step":
        return
    steps, losses = event.get("step_series") or [], event.get("loss_series") or []
    pairs: Iterable[tuple[Any, Any]] = (  # JSON values, checked by _number before use
        zip(steps, losses, strict=True)
        if steps and len(steps) == len(losses)
        else [(event.get("step"), event.get("loss"))]
    )
    for step, loss in pairs:
        if _number(step) is not None and _number(loss) is not None:
            series.append(step, loss)
