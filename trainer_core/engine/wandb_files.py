"""Reads W&B's offline transaction logs (`run-<id>.wandb`): what an offline W&B run really holds.

The file is W&B's record log: a 7-byte header (":W&B", magic 0xBEE1, version 0), then 32 KiB
blocks of chunks, each with a CRC-32 (of its type byte, then its data), a length and a type
(full, first, middle, last); the joined data of a record's chunks is one `Record` protobuf of the
installed wandb package. W&B writes it about once a second, so after a kill it can end earlier
than RUN/wandb.json says; a torn tail ends the reading. wandb has no Python reader of its own.
"""

from __future__ import annotations

import json
import struct
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Any

HEADER = b":W&B" + struct.pack("<HB", 0xBEE1, 0)
BLOCK = 32768
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def raw_records(data: bytes, name: str = "the file") -> Iterator[tuple[int, bytes]]:
    """(end offset, record bytes) of every whole record in a transaction log's bytes."""
    if data[: len(HEADER)] != HEADER:
        raise ValueError(f"{name} is not a W&B transaction log (header {data[:7]!r})")
    pending, pos = b"", len(HEADER)
    while pos + CHUNK_HEADER <= len(data):
        if BLOCK - pos % BLOCK < CHUNK_HEADER:  # a block's tail too short for a header: padding
            pos += BLOCK - pos % BLOCK
            continue
        crc, length, kind = struct.unpack("<IHB", data[pos : pos + CHUNK_HEADER])
        chunk = data[pos + CHUNK_HEADER : pos + CHUNK_HEADER + length]
        if len(chunk) < length or zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != crc:
            return  # torn or unwritten tail
        pos += CHUNK_HEADER + length
        if kind == FULL:
            yield pos, chunk
        elif kind == FIRST:
            pending = chunk
        elif kind == MIDDLE:
            pending += chunk
        elif kind == LAST:
            yield pos, pending + chunk


def read_records(path: Path) -> list[Any]:
    """Every whole record of one .wandb file, as `wandb_internal_pb2.Record`."""
    return [record for _, record in records_with_ends(path)]


def records_with_ends(path: Path) -> list[tuple[int, Any]]:
    """(end offset, `wandb_internal_pb2.Record`) of every whole record of one .wandb file."""
    from wandb.proto import wandb_internal_pb2

    found = []
    for end, raw in raw_records(path.read_bytes(), str(path)):
        record = wandb_internal_pb2.Record()  # type: ignore[attr-defined]  # generated, no stub
        record.ParseFromString(raw)
        found.append((end, record))
    return found


def history_step(record: Any) -> int | None:
    """The step of a history record (its `_step` item); None for any other record."""
    if record.WhichOneof("record_type") != "history":
        return None
    for item in record.history.item:
        if item.key == "_step":
            return int(json.loads(item.value_json))
    return int(record.history.step.num)


def run_logs(folder: Path, run_id: str) -> list[Path]:
    """The transaction logs of W&B run `run_id` under a `wandb/` folder, one per segment."""
    return sorted(folder.glob(f"*run-*-{run_id}*/run-{run_id}.wandb"))


def last_logged_step(folder: Path, run_id: str) -> int | None:
    """The last step W&B's files hold for `run_id` (0: no row yet); None when there is no file."""
    logs = run_logs(folder, run_id)
    if not logs:
        return None
    steps = [history_step(record) for log in logs for _, record in records_with_ends(log)]
    return max((step for step in steps if step is not None), default=0)
