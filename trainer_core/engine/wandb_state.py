"""RUN/wandb.json: the W&B run a run folder logs to, and the last step whose row W&B holds.

Written atomically after each row W&B commits, so that a resume after a kill continues the same
W&B run and skips the steps it already has (they are trained again from the checkpoint).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from trainer_core.atomic import atomic_write_text

STATE = "wandb.json"


@dataclass
class WandbState:
    run_id: str
    project: str
    last_step: int = 0
    """Rows up to this step are in W&B: a resumed run logs only later steps."""


def read_state(run_dir: Path) -> tuple[WandbState | None, str | None]:
    """(state, None); (None, None) when there is no file; (None, why) when it cannot be used."""
    path = run_dir / STATE
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        state = WandbState(str(raw["run_id"]), str(raw["project"]), int(raw.get("last_step", 0)))
    except FileNotFoundError:
        return None, None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return None, f"{path} cannot be read ({exc})"
    if not state.run_id:
        return None, f"{path} names no W&B run (run_id is empty)"
    return state, None


def write_state(run_dir: Path, state: WandbState) -> None:
    atomic_write_text(run_dir / STATE, json.dumps(asdict(state), indent=1) + "\n")
