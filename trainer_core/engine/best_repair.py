"""A resumed run whose best.json cannot be read: rebuild it from the event log.

best.json keeps the best checkpoint from pruning (`CheckpointManager._prune` keeps it beside the
newest `train.keep_last`). A damaged one reads as "no best", and the next prunes would remove the
best model silently. The run's events.jsonl announced every best (`best_model` events): the newest
one whose file is still there is written back into best.json, with a warning naming both files.
"""

from __future__ import annotations

import json
from pathlib import Path

from trainer_core.atomic import atomic_write_text
from trainer_core.contract import rundir
from trainer_core.contract.eventlog import EventReader
from trainer_core.contract.protocol import BestModelEvent
from trainer_core.engine.checkpoint_manager import (
    BEST_FILENAME,
    STEP_FILE_RE,
    checkpoint_dir,
    read_best,
)


def repair_best(run_dir: Path) -> str | None:
    """None when best.json is fine or absent; else what was done about it (a warning)."""
    folder = checkpoint_dir(run_dir)
    path = folder / BEST_FILENAME
    if not path.exists() or read_best(folder) is not None:
        return None
    found = _newest_best(run_dir / rundir.EVENTS, folder)
    if found is None:
        return (
            f"{path} cannot be read and {rundir.EVENTS} names no best checkpoint that is still "
            "here: the best model is unknown until a validation records a new one, and older "
            "checkpoints are pruned by step"
        )
    name, step, val_loss = found
    record = {"step": step, "path": name, "val_loss": val_loss}
    try:
        atomic_write_text(path, json.dumps(record, indent=2) + "\n")
    except OSError as exc:
        why = exc.strerror or exc
        return f"{path} cannot be read, and rewriting it failed ({why}): {name} may be pruned"
    rebuilt = f"rebuilt from {rundir.EVENTS}, the best checkpoint is {name} (step {step})"
    return f"{path} could not be read: {rebuilt}"


def _newest_best(events: Path, folder: Path) -> tuple[str, int, float | None] | None:
    """(file name, step, val_loss) of the newest `best_model` event whose file is in `folder`."""
    if not events.is_file():
        return None
    bests = [e for e in EventReader(events).read_to_end() if isinstance(e, BestModelEvent)]
    for event in reversed(bests):
        name = Path(str(event.path)).name
        if STEP_FILE_RE.match(name) and (folder / name).is_file():
            return name, int(event.step), event.val_loss
    return None
