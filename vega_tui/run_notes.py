"""A run's notes and tags: `notes.md` and `tags.json` in its folder, written by the dashboard only.

The trainer never reads or writes these names, so the dashboard may write them while a trainer is
writing the same folder. Each is replaced atomically (a temp file beside it, fsync, rename), so a
reader sees the old file or the new one, never half of one.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from trainer_core.contract import rundir
from trainer_core.contract.atomic_file import atomic_write_text
from trainer_core.contract.errors import VegaError

MAX_TAGS = 32
MAX_TAG_CHARS = 40
_TAG_SPLIT = re.compile(r"[,\s]+")


@dataclass(frozen=True)
class RunNotes:
    """What the user wrote about one run; `problem`: why a file was unreadable."""

    notes: str = ""
    tags: list[str] = field(default_factory=list)
    problem: str | None = None


def parse_tags(text: str) -> list[str]:
    """Tags from what the user typed: split on commas and spaces, duplicates dropped."""
    tags: list[str] = []
    for tag in _TAG_SPLIT.split(text):
        tag = tag.strip()[:MAX_TAG_CHARS]
        if tag and tag not in tags:
            tags.append(tag)
    return tags[:MAX_TAGS]


def read_tags(run_dir: Path) -> tuple[list[str], str | None]:
    """(tags, problem) from the run's tags.json; no file: no tags; a bad one: none, a problem."""
    path = run_dir / rundir.TAGS
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return [], None
    except (OSError, ValueError) as exc:
        return [], f"{path.name}: {exc}"
    tags = data.get("tags") if isinstance(data, dict) else None
    if not isinstance(tags, list) or not all(isinstance(tag, str) for tag in tags):
        return [], f'{path.name}: expected {{"tags": ["name", ...]}}'
    return parse_tags(",".join(tags)), None


def read_notes(run_dir: Path) -> RunNotes:
    """The run's notes.md and tags.json (empty when never written)."""
    tags, problem = read_tags(run_dir)
    try:
        notes = (run_dir / rundir.NOTES).read_text(encoding="utf-8")
    except FileNotFoundError:
        notes = ""
    except (OSError, ValueError) as exc:
        notes, problem = "", f"{rundir.NOTES}: {exc}"
    return RunNotes(notes, tags, problem)


def write_notes(run_dir: Path, notes: str, tags: list[str]) -> None:
    """Replace the run's notes.md and tags.json; an empty note or tag list removes its file."""
    if not (run_dir / rundir.EVENTS).is_file() and not (run_dir / rundir.PROFILE).is_file():
        raise VegaError(f"{run_dir} is not a run folder (no {rundir.EVENTS}); notes not written")
    _write_or_remove(run_dir / rundir.NOTES, notes.rstrip() + "\n" if notes.strip() else "")
    kept = parse_tags(",".join(tags))
    text = json.dumps({"tags": kept}, ensure_ascii=False) + "\n" if kept else ""
    _write_or_remove(run_dir / rundir.TAGS, text)


def _write_or_remove(target: Path, text: str) -> None:
    try:
        if text:
            atomic_write_text(target, text)
        else:
            target.unlink(missing_ok=True)
    except OSError as exc:
        why = exc.strerror or exc
        raise VegaError(f"cannot write {target}: {why}; check the folder's permissions") from exc
