"""Run folder layout (docs/architecture.md): names of the files a run
writes, and creating a fresh folder.

Torch-free: the dashboard uses these names to find a run's events, socket and checkpoints.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from trainer_core.contract.confined_path import component_problem, inside
from trainer_core.contract.errors import ProfileError, VegaError

EVENTS = "events.jsonl"
PROFILE = "profile.toml"
SESSION = "session.json"
LOG = "trainer.log"
SOCKET = "control.sock"
CHECKPOINTS = "checkpoints"
SAMPLES = "samples"
EXPORT = "export"
ONNX = "onnx"  # `trainer-core export --onnx RUN` writes here by default
REPORT = "report.png"
ITEMS = "items.jsonl"  # a voice run's items (id, path, held out) as its first start chose them
# A voice run's pictures of one held-out clip, in each evaluation's sample folder
# (`samples/step-<8 digits>/`).
MEL_VIEW = "mel.png"
ALIGNMENT_VIEW = "alignment.png"
# Written by the dashboard only (never the trainer): the user's notes and
# tags on a run, each atomically.
NOTES = "notes.md"
TAGS = "tags.json"
TRASH = ".trash"  # under a runs root: run folders the dashboard deleted, until the user empties it


def default_runs_dir() -> Path:
    return Path.cwd() / "runs"


def run_dir_name(name: str, now: float | None = None) -> str:
    """`<name>-<YYYYmmdd-HHMMSS>` in local time, as people read it in `ls runs/`."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now if now is not None else time.time()))
    return f"{name}-{stamp}"


def propose_run_dir(runs_dir: Path | None, name: str, now: float | None = None) -> Path:
    """A run folder path that does not exist yet (a numeric suffix avoids same-second clashes).

    The profile already checked run.name; this refuses again, so no caller can put a run outside
    `runs_dir` (a link at the proposed name included).
    """
    problem = component_problem(name)
    if problem is not None:
        raise ProfileError(f'run.name = {name!r}: {problem}; choose a plain name like "my-voice"')
    runs = runs_dir or default_runs_dir()
    where = f"the runs folder {runs}"
    base = inside(runs, run_dir_name(name, now), field="run.name", source=where)
    candidate, n = base, 1
    while candidate.exists():
        n += 1
        candidate = base.with_name(f"{base.name}-{n}")
    return candidate


def create_run_dir(path: Path) -> Path:
    """Create the run folder and its sub-folders, failing with a clear
    message when it cannot be written."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        for sub in (CHECKPOINTS, SAMPLES, EXPORT):
            (path / sub).mkdir(exist_ok=True)
    except OSError as exc:
        raise VegaError(
            f"cannot create run folder {path}: {exc.strerror or exc}; choose another --run-dir"
        ) from exc
    if not os.access(path, os.W_OK):
        raise VegaError(
            f"run folder {path} is not writable; choose another --run-dir or fix its permissions"
        )
    return path


def is_run_dir(path: Path) -> bool:
    return (path / EVENTS).is_file() or (path / CHECKPOINTS).is_dir()
