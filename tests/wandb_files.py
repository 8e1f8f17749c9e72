"""Reads W&B's offline run files back: each `run-<id>.wandb` transaction log under `wandb/`.

The file is W&B's record log: a 7-byte header (":W&B", magic 0xBEE1, version 0), then 32 KiB
blocks of chunks, each with a CRC-32 (of its type byte, then its data), a length and a type
(full, first, middle, last); the joined data of a record's chunks is one `Record` protobuf of the
installed wandb package. The package has no Python reader of its own any more (its Go service
reads and writes these files), so the tests keep this one; a torn tail ends the reading.
"""

from __future__ import annotations

import json
import struct
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
BLOCK = 32768
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def read_records(path: Path) -> list[Any]:
    """Every whole record of one .wandb file, as `wandb_internal_pb2.Record`."""
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    if data[: len(HEADER)] != HEADER:
        raise ValueError(f"{path} is not a W&B transaction log (header {data[:7]!r})")
    records, pending, pos = [], b"", len(HEADER)
    while pos + CHUNK_HEADER <= len(data):
        if BLOCK - pos % BLOCK < CHUNK_HEADER:  # a block's tail too short for a header: padding
            pos += BLOCK - pos % BLOCK
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos : pos + CHUNK_HEADER])
        chunk = data[pos + CHUNK_HEADER : pos + CHUNK_HEADER + length]
        if len(chunk) < length or zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != crc:
            break  # torn or unwritten tail
        pos += CHUNK_HEADER + length
        if kind == FULL:
            records.append(chunk)
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            records.append(pending + chunk)
    parsed = []
    for raw in records:
        record = wandb_internal_pb2.Record()
        record.ParseFromString(raw)
        parsed.append(record)
    return parsed


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
