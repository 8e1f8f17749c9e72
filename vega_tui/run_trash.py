"""Disk use of run folders, deleting a run to the trash under its runs root, emptying the trash.

A delete is a rename into `ROOT/.trash/NAME-<YYYYmmdd-HHMMSS>` (one atomic step on the same file
system), so a mistake is undone by moving the folder back; only emptying the trash frees the space.
A live run is never moved: `run_status` (the log's last hello or finished event and the process
table, the test the runs list shows) must not say live, its control socket must not answer, and a
run that never finished must not have written its log in the last `REMOTE_STALE_AFTER_S` seconds.
"""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from trainer_core.contract import rundir
from trainer_core.contract.errors import VegaError
from vega_tui import runner


class RunIsLive(VegaError):
    """The run's trainer is still writing its folder: it cannot be deleted now."""


def folder_bytes(path: Path) -> int:
    """Bytes of every file under `path` (links not followed); files that vanish are skipped."""
    total, pending = 0, [path]
    while pending:
        folder = pending.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue  # removed meanwhile (an old checkpoint), or unreadable: counted as nothing
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    pending.append(Path(entry.path))
                else:
                    total += entry.stat(follow_symlinks=False).st_size
            except OSError:
                continue
    return total


def trash_dir(runs_root: Path) -> Path:
    return runs_root / rundir.TRASH


def live_reason(run_dir: Path) -> str | None:
    """Why `run_dir` counts as live (a trainer may still write it), or None: safe to move."""
    status = runner.run_status(run_dir)
    if status == "live":
        return "its trainer is running"
    if runner.socket_ready(run_dir):
        return "its control socket answers"
    if status in ("finished", "stopped", "failed"):
        return None
    # A starting trainer may not have written its hello yet: a fresh log, or a fresh folder.
    written = runner.modified_at(run_dir / rundir.EVENTS) or runner.modified_at(run_dir)
    age = time.time() - written if written is not None else None
    if age is not None and age < runner.REMOTE_STALE_AFTER_S:
        return f"it was written {age:.0f} s ago (a trainer may be starting, or run elsewhere)"
    return None


def move_to_trash(run_dir: Path, runs_root: Path, now: float | None = None) -> Path:
    """Move `run_dir` (a folder directly under `runs_root`) into the trash; returns where it went.

    Raises RunIsLive for a live run and VegaError when the folder is not a run under `runs_root`.
    """
    run_dir, runs_root = Path(run_dir), Path(runs_root)
    under_root = run_dir.parent.resolve() == runs_root.resolve() and run_dir.name != rundir.TRASH
    if not (under_root and run_dir.is_dir()):
        raise VegaError(f"{run_dir} is not a run folder directly under {runs_root}; nothing moved")
    reason = live_reason(run_dir)
    if reason is not None:
        raise RunIsLive(f"{run_dir.name} is live: {reason}; stop it first, then delete it")
    trash = trash_dir(runs_root)
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(time.time() if now is None else now))
    target, n = trash / f"{run_dir.name}-{stamp}", 1
    try:
        trash.mkdir(exist_ok=True)
        while target.exists():
            n += 1
            target = trash / f"{run_dir.name}-{stamp}-{n}"
        os.rename(run_dir, target)
    except OSError as exc:
        why = exc.strerror or exc
        raise VegaError(f"cannot move {run_dir} to {trash}: {why}; nothing was deleted") from exc
    return target


def trash_contents(runs_root: Path) -> tuple[int, int]:
    """(folders, bytes) in the trash; (0, 0) when there is none."""
    try:
        entries = list(trash_dir(runs_root).iterdir())
    except OSError:
        return 0, 0
    return len(entries), sum(_entry_bytes(entry) for entry in entries)


def empty_trash(runs_root: Path) -> tuple[int, list[str]]:
    """Remove everything in the trash: (bytes freed, "NAME (why)" for each entry that stayed)."""
    try:
        entries = list(trash_dir(runs_root).iterdir())
    except FileNotFoundError:
        return 0, []
    except OSError as exc:
        return 0, [f"{trash_dir(runs_root)} ({exc.strerror or exc})"]
    freed, failed = 0, []
    for entry in entries:
        size = _entry_bytes(entry)
        try:
            if entry.is_dir() and not entry.is_symlink():
                shutil.rmtree(entry)
            else:
                entry.unlink()
        except OSError as exc:
            failed.append(f"{entry.name} ({exc.strerror or exc})")
            continue
        freed += size
    return freed, failed


def _entry_bytes(entry: Path) -> int:
    if entry.is_dir() and not entry.is_symlink():
        return folder_bytes(entry)
    try:
        return entry.lstat().st_size
    except OSError:
        return 0
