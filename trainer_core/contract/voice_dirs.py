"""Where this machine keeps voices to start from: the machine file's
`[voices] dirs` (Piper checkpoints).

    [voices]
    dirs = ["~/voices/piper", "/data/piper-checkpoints"]

Like `[tasks]`, it describes this machine, not a job: the loader takes it out of the machine file's
layer and a profile cannot set it. The dashboard's "Start from" list offers every Piper checkpoint
(`*.ckpt` with a voice config beside it) found in these folders and one level below them. Relative
folders are relative to the machine file. Torch-free.
"""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from trainer_core.contract.errors import ProfileError

VOICES_TABLE = "voices"
EXAMPLE = f'[{VOICES_TABLE}] dirs = ["~/voices/piper"]'


def voice_dirs_of(table: Any, label: str, base: Path) -> list[Path]:
    """The folders a machine file's [voices] table names; a malformed table
    is an error naming the key."""
    if table is None:
        return []
    if not isinstance(table, dict):
        raise ProfileError(f"{label}: {VOICES_TABLE} must be a table, for example {EXAMPLE}")
    unknown = sorted(set(table) - {"dirs"})
    if unknown:
        raise ProfileError(
            f"{label}: unknown key {VOICES_TABLE}.{unknown[0]}: the [voices] table holds only dirs"
        )
    dirs = table.get("dirs", [])
    if not isinstance(dirs, list) or not all(isinstance(d, str) and d for d in dirs):
        raise ProfileError(
            f"{label}: {VOICES_TABLE}.dirs must be a list of folder names, for example {EXAMPLE}"
        )
    return [
        (
            (base / Path(d).expanduser()).resolve()
            if not Path(d).expanduser().is_absolute()
            else Path(d).expanduser()
        )
        for d in dirs
    ]


def machine_voice_dirs(machine_file: Path) -> list[Path]:
    """The machine file's voice folders (none when the file or the table is absent or unreadable:
    the loader reports a broken machine file where profiles are loaded)."""
    try:
        data = tomllib.loads(machine_file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return []
    return voice_dirs_of(
        data.get(VOICES_TABLE), f"machine file {machine_file}", machine_file.parent
    )
