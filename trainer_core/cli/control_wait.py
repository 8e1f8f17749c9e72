"""Wait until a queued control request is done: the checkpoint a `save` writes, the
validation an `evaluate` runs.

The trainer acknowledges a command as soon as it is queued and does the work at the end of its
current step, so "ok" alone does not mean a checkpoint is on disk. The client notes where
events.jsonl ends before it sends the command, then follows the log from there until the matching
event (or the run's `finished` event, or the trainer process vanishing, or the time limit).
Torch-free: `trainer-core ctl` and the dashboard can use it.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from trainer_core.contract.control_client import ControlError
from trainer_core.contract.eventlog import EventReader
from trainer_core.contract.protocol import Event
from trainer_core.contract.rundir import EVENTS

# The event that says each waitable command is done.
DONE_EVENT = {"save": "checkpoint_saved", "evaluate": "validation"}
POLL_S = 0.1


def log_end(run_dir: Path | str) -> int:
    """Bytes in the run's events.jsonl now (0 when there is none yet)."""
    try:
        return (Path(run_dir) / EVENTS).stat().st_size
    except FileNotFoundError:
        return 0


def wait_until_done(
    run_dir: Path | str, cmd: str, start_offset: int, timeout: float, trainer_pid: int | None = None
) -> Event:
    """The first `DONE_EVENT[cmd]` event written after `start_offset`; ControlError if the
    run ends, the trainer process is gone, or `timeout` seconds pass first (the request
    then stays queued in the trainer)."""
    wanted = DONE_EVENT[cmd]
    reader = EventReader(Path(run_dir) / EVENTS, start_offset=start_offset)
    deadline = time.monotonic() + timeout
    while True:
        for event in reader.poll():
            if event.type == wanted:
                return event
            if event.type == "finished":
                raise ControlError(
                    f"{cmd}: the run ended ({getattr(event, 'status', 'finished')}) before it was"
                    " done"
                )
        if reader.pending_bytes:
            continue
        if trainer_pid is not None and not pid_alive(trainer_pid):
            raise ControlError(
                f"{cmd}: the trainer (pid {trainer_pid}) exited before it was done; see trainer.log"
            )
        if time.monotonic() >= deadline:
            raise ControlError(
                f"{cmd}: not done after {timeout:g} s (the trainer may be in a long step or"
                " validation); it stays queued: watch the dashboard, or ask again with a longer"
                " --wait"
            )
        time.sleep(POLL_S)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
