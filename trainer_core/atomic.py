"""The kill drill's crash-safe writers: `write_replacing` and `write_whole` carry its fault points.

The atomic replacement itself (temp file, fsync, rename, fsync the folder) lives in
`trainer_core.contract.atomic_file`, shared with the dashboard; its names are re-exported here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import BinaryIO, TypeVar

from trainer_core import fault_points
from trainer_core.contract.atomic_file import (
    TEMP_PREFIX,
    TEMP_SUFFIX,
    atomic_write,
    atomic_write_text,
    fsync_dir,
    temp_path_for,
)

__all__ = [
    "TEMP_PREFIX",
    "TEMP_SUFFIX",
    "atomic_write",
    "atomic_write_text",
    "fsync_dir",
    "temp_path_for",
    "write_replacing",
    "write_whole",
]

T = TypeVar("T")


def write_replacing(target: Path, write: Callable[[BinaryIO], T], phase: str) -> T:
    """`atomic_write`, unless the kill drill's negative control for `phase` is on: then straight
    into `target`, as a writer without the temp file and rename would."""
    if not fault_points.in_place(phase):
        return atomic_write(target, write)
    with open(target, "wb") as file:
        return write(file)


def write_whole(target: Path, data: bytes, phase: str) -> None:
    """`data` as `target` atomically; the drill's hold point `phase` sits half-way through."""

    def write(file: BinaryIO) -> None:
        half = len(data) // 2
        file.write(data[:half])
        file.flush()  # the half is on disk while the drill holds the writer here
        fault_points.point(phase)
        file.write(data[half:])

    write_replacing(target, write, phase)
