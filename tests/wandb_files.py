"""Reads W&B's offline run files back, for the tests: each `run-<id>.wandb` transaction log
under `wandb/` (read by `trainer_core.engine.wandb_files`), as run id, config, rows and exit."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from trainer_core.engine.wandb_files import read_records


@dataclass
class WandbFile:
    """One W&B run segment (one process's .wandb file): run id, config, history rows, exit."""

    path: Path
    run_id: str = ""
    config: dict[str, Any] = field(default_factory=dict)
    rows: list[dict[str, Any]] = field(default_factory=list)
    exit_code: int | None = None

    def steps(self, key: str) -> dict[int, Any]:
        """`_step` -> value of `key`, for the rows that hold it."""
        return {row["_step"]: row[key] for row in self.rows if key in row}


def read_wandb_file(path: Path) -> WandbFile:
    found = WandbFile(path)
    for record in read_records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            found.run_id = record.run.run_id
            found.config.update(_config(record.run.config))
        elif kind == "config":
            found.config.update(_config(record.config))
        elif kind == "history":
            found.rows.append(_row(record.history.item))
        elif kind == "exit":
            found.exit_code = record.exit.exit_code
    return found


def _config(config: Any) -> dict[str, Any]:
    return {item.key: json.loads(item.value_json) for item in config.update}


def _row(items: Any) -> dict[str, Any]:
    """A history row: `train/loss` -> 0.5; media (nested keys) -> {"_type", "path", ...}."""
    row: dict[str, Any] = {}
    for item in items:
        keys = list(item.nested_key) or [item.key]
        value = json.loads(item.value_json)
        target = row
        for key in keys[:-1]:
            target = target.setdefault(key, {})
        target[keys[-1]] = value
    return row


def wandb_files(folder: Path) -> list[WandbFile]:
    """Every run segment under `folder` (a `wandb/` folder), oldest first (by folder name)."""
    return [read_wandb_file(path) for path in sorted(folder.glob("*run-*/run-*.wandb"))]


def logged_steps(files: list[WandbFile], key: str = "train/loss") -> list[int]:
    """Each step whose row holds `key`, once per row in all segments (twice if logged twice)."""
    return sorted(step for found in files for step in found.steps(key))


def repeated(steps: list[int]) -> list[int]:
    return sorted({step for step in steps if steps.count(step) > 1})
