"""On-disk cache of log-mel features: one packed, memory-mapped file per corpus and parameter set.

Layout: `<folder>/<params digest>/<corpus digest>.index.json` plus the float32 data file it names,
`<corpus digest>.<token>.f32`. The index lists, per recording (absolute path), its size and mtime_ns
when the features were made and where its (n_mels, frames) block starts in the data file. A
recording whose size or mtime changed misses; one that disappeared is dropped at the next write;
new ones are added. The params digest covers every setting that changes the numbers and the
format version, so another profile (or the old one-.npy-per-recording format, version 1, which is
left alone) never reads these.

Reading a hit is one json parse and one stat per recording; the data file is mapped copy-on-write,
so the tensors handed out are views of the page cache (writing to one never reaches the file).

Writing: a new data file under a fresh name, then the index, each to a temporary file fsynced
and renamed into place (trainer_core.atomic), so a reader sees the old pair or the new pair,
never half of one; the kill drill holds a writer half-way through either file (hold phase
cache_write). The replaced data file is
removed afterwards (a process that still maps it keeps its pages). Files are never rewritten in
place, so a mapping never shrinks under a reader. A damaged index or a data file shorter than its
index says is a warning and a rebuild, never an error; audio is never touched.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np
import torch

from trainer_core import fault_points
from trainer_core.atomic import write_replacing, write_whole
from trainer_core.contract.confined_path import inside_or_none
from trainer_core.contract.profile_audio import AudioSection
from trainer_core.data.cache_location import cache_folder, corpus_digest

log = logging.getLogger("trainer_core")

CACHE_FORMAT_VERSION = 2
# Leftover data or temporary files older than this are removed at the next write (younger ones may
# belong to another process writing right now).
ORPHAN_AGE_S = 3600.0


def feature_params(audio: AudioSection) -> dict[str, Any]:
    """Every audio setting that changes the cached numbers."""
    return {
        "sample_rate": audio.sample_rate,
        "n_fft": audio.n_fft,
        "hop_length": audio.hop_length,
        "win_length": audio.win_length,
        "n_mels": audio.n_mels,
        "f_min": audio.f_min,
        "f_max": audio.f_max,
        "log_floor": audio.log_floor,
        "trim_silence": audio.trim_silence,
        "trim_top_db": audio.trim_top_db,
        "normalize": audio.normalize,
    }


def params_digest(params: dict[str, Any]) -> str:
    """Short stable digest of the feature parameters and the cache format version."""
    text = json.dumps({**params, "cache_format_version": CACHE_FORMAT_VERSION}, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


def file_identity(key: str) -> tuple[int, int] | None:
    """(size, mtime_ns) of a recording, or None when it cannot be stat'ed."""
    try:
        stat = os.stat(key)
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


@dataclass(frozen=True)
class Entry:
    """One recording's block in the data file (offset and size in float32 values)."""

    size: int
    mtime_ns: int
    offset: int
    frames: int


class CacheDamaged(ValueError):
    """The index or data file cannot be trusted; the message says what is wrong."""


class FeatureCache:
    """Get and put (n_mels, frames) float32 mel tensors (or (rows, frames) ones)
    for the recordings of one corpus."""

    def __init__(self, folder: Path | None, params: dict[str, Any], corpus: Path) -> None:
        self.folder = cache_folder(folder)
        self.params = dict(params)
        # Values per frame: the mel bins, or params["rows"] for another per-frame
        # feature (the pitch track's 1).
        self.n_mels = int(params["rows"] if "rows" in params else params["n_mels"])
        # One subfolder per parameter set: other profiles' features never
        # collide, and can be removed alone.
        self.entries_dir = self.folder / params_digest(self.params)
        self.name = corpus_digest(corpus)
        self.index_path = self.entries_dir / f"{self.name}.index.json"
        self.corrupt_entries = 0
        self.warnings: list[str] = []
        self.data_path: Path | None = None
        self._entries: dict[str, Entry] = {}
        self._data: np.ndarray | None = None
        self._pending: dict[str, tuple[tuple[int, int], np.ndarray]] = {}
        # Entries to drop (changed, removed or damaged): the next flush rewrites.
        self._dirty = False
        self._lock = threading.Lock()  # Workers put while the main thread reads.
        self._open()

    # Reading

    def _open(self) -> None:
        """Load the index and map its data file; a damaged pair is a warning and an empty cache."""
        try:
            text = self.index_path.read_text(encoding="utf-8")
        except (FileNotFoundError, NotADirectoryError):
            return  # Nothing cached yet (or an unusable folder, which the first write reports).
        except (OSError, UnicodeDecodeError) as exc:
            return self._damaged(f"cannot read {self.index_path}: {exc}")
        try:
            self._entries, self.data_path, self._data = self._parse(text)
        except CacheDamaged as exc:
            return self._damaged(str(exc))

    def _damaged(self, reason: str) -> None:
        message = (
            f"feature cache {reason}; its features will be computed again and the cache rewritten"
        )
        log.warning(message)
        self.warnings.append(message)
        self.corrupt_entries += len(self._entries)
        self._entries, self.data_path, self._data, self._dirty = {}, None, None, True

    def _parse(self, text: str) -> tuple[dict[str, Entry], Path | None, np.ndarray | None]:
        try:
            index = json.loads(text)
            version, data_name, data_bytes = (
                index["format_version"],
                index["data_file"],
                index["data_bytes"],
            )
            rows = index["entries"]
        except (ValueError, TypeError, KeyError) as exc:
            raise CacheDamaged(f"index {self.index_path} is damaged ({exc!r})") from exc
        if version != CACHE_FORMAT_VERSION or index.get("params") != self.params:
            raise CacheDamaged(f"index {self.index_path} is format {version!r} or other parameters")
        # One file name, in this folder even through a link: no read goes elsewhere.
        plain = isinstance(data_name, str) and Path(data_name).name == data_name
        data_path = inside_or_none(self.entries_dir, data_name) if plain else None
        if data_path is None or not isinstance(data_bytes, int):
            raise CacheDamaged(f"index {self.index_path} names no valid data file ({data_name!r})")
        data = self._map(data_path, data_bytes)
        entries = self._entries_from(rows, 0 if data is None else len(data))
        return entries, data_path, data

    def _map(self, data_path: Path, data_bytes: int) -> np.ndarray | None:
        """The data file mapped copy-on-write, after checking its length against the index."""
        try:
            actual = data_path.stat().st_size
        except OSError as exc:
            raise CacheDamaged(f"data file {data_path} is missing ({exc.strerror})") from exc
        if actual != data_bytes or data_bytes % 4:
            raise CacheDamaged(
                f"data file {data_path} holds {actual} bytes, its index says {data_bytes}"
            )
        if data_bytes == 0:
            return None
        try:
            return np.memmap(data_path, dtype=np.float32, mode="c")
        except (OSError, ValueError) as exc:
            raise CacheDamaged(f"data file {data_path} cannot be mapped ({exc})") from exc

    def _entries_from(self, rows: Any, values: int) -> dict[str, Entry]:
        if not isinstance(rows, dict):
            raise CacheDamaged(f"index {self.index_path} has no entry table")
        entries: dict[str, Entry] = {}
        for key, row in rows.items():
            entry = self._entry(row, values)
            if entry is None:
                self.corrupt_entries += 1
                self._dirty = True
                continue
            entries[key] = entry
        return entries

    def _entry(self, row: Any, values: int) -> Entry | None:
        """The index row as an Entry, or None when it is malformed or points
        outside the data file."""
        if not (
            isinstance(row, list) and len(row) == 4 and all(type(v) is int and v >= 0 for v in row)
        ):
            return None
        entry = Entry(*row)
        end = entry.offset + self.n_mels * entry.frames
        return entry if entry.frames > 0 and end <= values else None

    def _hit(self, key: str) -> Entry | None:
        entry = self._entries.get(key)
        if entry is None:
            return None
        if file_identity(key) != (entry.size, entry.mtime_ns):
            self._dirty = True  # Changed or removed since: drop it at the next write.
            return None
        return entry

    def frames(self, path: Path) -> int | None:
        """The frame count of the cached features of `path`, or None on a
        miss (nothing read but the index)."""
        key = os.path.abspath(path)
        with self._lock:
            pending = self._pending.get(key)
        if pending is not None:
            return int(pending[1].shape[1])
        entry = self._hit(key)
        return None if entry is None else entry.frames

    def get(self, path: Path) -> torch.Tensor | None:
        """The cached features of `path` (a view of the mapped file), or None on a miss."""
        key = os.path.abspath(path)
        with self._lock:
            pending = self._pending.get(key)
        if pending is not None:
            return torch.from_numpy(pending[1])
        entry = self._hit(key)
        if entry is None or self._data is None:
            return None
        block = self._data[entry.offset : entry.offset + self.n_mels * entry.frames]
        if not np.isfinite(block).all():  # bit rot: no feature computation writes NaN or inf
            self._bad_values(key)
            return None
        return torch.from_numpy(block.reshape(self.n_mels, entry.frames))

    def _bad_values(self, key: str) -> None:
        """Drop a cached block holding NaN or inf (a miss from now on); the first is a warning."""
        message = (
            f"feature cache data file {self.data_path} holds NaN or infinite values (first for "
            f"{key}): those features will be computed again and the cache rewritten"
        )
        with self._lock:
            first = not any("NaN or infinite" in warning for warning in self.warnings)
            self.warnings += [message] if first else []
            self._entries.pop(key, None)
            self.corrupt_entries += 1
            self._dirty = True
        if first:
            log.warning(message)

    # Writing

    def put(self, path: Path, mel: torch.Tensor) -> None:
        """Queue the features of `path` for the next `flush` (they are
        served from memory until then)."""
        key = os.path.abspath(path)
        identity = file_identity(key)
        if identity is None:
            return
        array = np.ascontiguousarray(mel.detach().cpu().numpy(), dtype=np.float32)
        with self._lock:
            self._pending[key] = (identity, array)

    def flush(self) -> bool:
        """Write the packed pair if anything changed; False (nothing replaced)
        when the folder is not writable."""
        with self._lock:
            if not self._pending and not self._dirty:
                return True
            blocks = self._blocks_to_keep()
        try:
            self.entries_dir.mkdir(parents=True, exist_ok=True)
            entries, data_path = self._write_pair(blocks)
        except OSError as exc:
            log.warning("cannot write the feature cache in %s: %s", self.entries_dir, exc)
            return False
        old_path = self.data_path
        self._entries, self.data_path = entries, data_path
        self._data = self._map(data_path, data_path.stat().st_size)
        self._pending.clear()
        self._dirty = False
        self._remove_replaced(old_path)
        return True

    def _blocks_to_keep(self) -> list[tuple[str, tuple[int, int], np.ndarray]]:
        """Old entries whose recording is unchanged, then the queued ones
        (which win over old ones)."""
        blocks = []
        for key, entry in self._entries.items():
            if key in self._pending or self._data is None:
                continue
            if file_identity(key) == (entry.size, entry.mtime_ns):
                block = self._data[entry.offset : entry.offset + self.n_mels * entry.frames]
                blocks.append((key, (entry.size, entry.mtime_ns), block))
        blocks.extend(
            (key, identity, array.reshape(-1)) for key, (identity, array) in self._pending.items()
        )
        return blocks

    def _write_pair(
        self, blocks: list[tuple[str, tuple[int, int], np.ndarray]]
    ) -> tuple[dict[str, Entry], Path]:
        data_path = self.entries_dir / f"{self.name}.{secrets.token_hex(6)}.f32"
        entries: dict[str, Entry] = {}

        def write_data(handle: BinaryIO) -> int:
            offset = 0
            for number, (key, (size, mtime_ns), block) in enumerate(blocks):
                if number == len(blocks) // 2 and number:
                    handle.flush()  # half the blocks on disk while the drill holds us here
                    fault_points.point("cache_write")
                handle.write(np.ascontiguousarray(block, dtype=np.float32).data.cast("B"))
                entries[key] = Entry(size, mtime_ns, offset, len(block) // self.n_mels)
                offset += len(block)
            return offset

        offset = write_replacing(data_path, write_data, "cache_write")
        index = {
            "format_version": CACHE_FORMAT_VERSION,
            "params": self.params,
            "data_file": data_path.name,
            "data_bytes": 4 * offset,
            "entries": {
                key: [e.size, e.mtime_ns, e.offset, e.frames] for key, e in entries.items()
            },
        }
        try:
            text = json.dumps(index, separators=(",", ":"))
            write_whole(self.index_path, text.encode("utf-8"), "cache_write")
        except BaseException:
            data_path.unlink(missing_ok=True)  # Nothing refers to it: the old pair stays in force.
            raise
        return entries, data_path

    def _remove_replaced(self, old_path: Path | None) -> None:
        """Remove the data file just replaced, and leftovers of interrupted writes."""
        if old_path is not None and old_path != self.data_path:
            old_path.unlink(missing_ok=True)
        cutoff = time.time() - ORPHAN_AGE_S
        for pattern in (f"{self.name}.*.f32", f".{self.name}*.tmp"):
            for path in self.entries_dir.glob(pattern):
                try:
                    if path != self.data_path and path.stat().st_mtime < cutoff:
                        path.unlink()
                except OSError:
                    continue
