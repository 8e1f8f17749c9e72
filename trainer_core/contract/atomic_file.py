"""Crash-safe file replacement: write a temp file beside the target, fsync,
rename, fsync the folder.

A crash at any moment leaves either the old file or the complete new one, never a torn file.
Temp names start with "." and end with ".<pid>.tmp" so they never match what they replace.
In the contract wing so that the dashboard (notes, tags) writes files the way the trainer does;
the kill drill's fault points wrap these in `trainer_core.atomic`.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, TypeVar

T = TypeVar("T")
TEMP_PREFIX = "."
TEMP_SUFFIX = ".tmp"


def temp_path_for(target: Path) -> Path:
    return target.with_name(f"{TEMP_PREFIX}{target.name}.{os.getpid()}{TEMP_SUFFIX}")


def fsync_dir(folder: Path) -> None:
    """Persist a rename inside `folder` (some platforms cannot open a folder; harmless there)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def atomic_write(
    target: Path,
    write: Callable[[BinaryIO], T],
    before_replace: Callable[[], None] | None = None,
) -> T:
    """Call `write(file)` on a temp file, then make it `target` atomically; returns its result.

    On any failure the temp file is removed and `target` is left as it was. `before_replace` runs
    after the fsync, just before the rename (a fault-injection point).
    """
    temp = temp_path_for(target)
    try:
        with open(temp, "wb") as file:
            result = write(file)
            file.flush()
            os.fsync(file.fileno())
        if before_replace is not None:
            before_replace()
        os.replace(temp, target)
    except BaseException:
        temp.unlink(missing_ok=True)
        raise
    fsync_dir(target.parent)
    return result


def atomic_write_text(target: Path, text: str) -> None:
    atomic_write(target, lambda file: file.write(text.encode("utf-8")))
