"""The data-scan cache: what probing each audio file found, kept so that an
unchanged corpus is not read again.

Probing a big corpus reads every file's header and decodes its samples (silence and clipping
checks): on 28,000 clips that is most of the start-up time, on every start. The cache keeps each
file's `AudioFacts` keyed by its path inside the data folder, its size and its mtime_ns: a file
whose size or mtime changed is probed again, a removed one is dropped at the next write, a new one
is probed and added. Facts do not depend on scan settings (duration limits, transcripts, thresholds
are applied to them on every scan); the libsndfile version and the cache format version are part of
the key, since a newer decoder may read files differently. Failed reads are not kept: a file that
could not be read (permissions, a half-copied file) is tried again.

Location: `<data.cache_dir or the user cache folder>/scan/<corpus digest>.json`, beside the feature
cache (data.cache_location). Written atomically (a temporary file renamed into place) and only when
something changed; a damaged or unreadable cache file is a logged warning and a full rescan, never
an error, and a cache that cannot be written leaves the scan's result untouched.
"""

from __future__ import annotations

import json
import logging
import os
import threading
from pathlib import Path
from typing import Any

import soundfile as sf

from trainer_core.atomic import atomic_write_text
from trainer_core.data.audio_probe import AudioFacts, AudioHeader, Levels
from trainer_core.data.cache_location import cache_folder, corpus_digest

log = logging.getLogger("trainer_core")

SCAN_CACHE_VERSION = 2  # 2: levels also count non-finite samples and decoded frames


def scan_cache_folder(cache_dir: Path | None) -> Path:
    """Where scan caches live for a profile's data.cache_dir (None: the user cache folder)."""
    return cache_folder(cache_dir) / "scan"


def _identity(path: Path) -> tuple[int, int] | None:
    try:
        stat = os.stat(path)
    except OSError:
        return None
    return stat.st_size, stat.st_mtime_ns


def _facts_from_row(row: Any) -> tuple[int, int, AudioFacts] | None:
    """(size, mtime_ns, facts) of one stored row, or None when the row is malformed."""
    try:
        size, mtime_ns, header, levels = row
        measured = None
        if levels is not None:
            measured = Levels(float(levels[0]), float(levels[1]), int(levels[2]), int(levels[3]))
        facts = AudioFacts(
            header=AudioHeader(
                int(header[0]), int(header[1]), int(header[2]), str(header[3]), str(header[4])
            ),
            levels=measured,
        )
        return int(size), int(mtime_ns), facts
    except (TypeError, ValueError, IndexError):
        return None


def _row(size: int, mtime_ns: int, facts: AudioFacts) -> list[Any]:
    h = facts.header
    assert h is not None  # only readable files are stored
    header = [h.frames, h.sample_rate, h.channels, h.format, h.subtype]
    return [size, mtime_ns, header, list(facts.levels) if facts.levels is not None else None]


class ScanCache:
    """Facts per audio file of one corpus: `lookup` before probing, `record`
    after, `save` at the end."""

    def __init__(self, folder: Path, root: Path) -> None:
        self.root = root
        self.path = Path(folder) / f"{corpus_digest(root)}.json"
        self._prefix = os.path.join(str(root), "")
        self._stored: dict[str, list[Any]] = {}
        self._rows: dict[str, list[Any]] = {}
        self._lock = threading.Lock()
        self.hits = self.misses = 0
        self._load()

    def _key_fields(self) -> dict[str, Any]:
        return {
            "format_version": SCAN_CACHE_VERSION,
            "libsndfile": sf.__libsndfile_version__,
            "root": os.path.abspath(self.root),
        }

    def _load(self) -> None:
        try:
            text = self.path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return
        except (OSError, UnicodeDecodeError) as exc:
            log.warning(
                "the data-scan cache %s cannot be read (%s): rescanning every file", self.path, exc
            )
            return
        try:
            data = json.loads(text)
            files = data["files"] if isinstance(data, dict) else None
            if not isinstance(files, dict):
                raise ValueError("no file table")
        except (ValueError, KeyError) as exc:
            log.warning(
                "the data-scan cache %s is damaged (%s): rescanning every file", self.path, exc
            )
            return
        if {key: data.get(key) for key in self._key_fields()} == self._key_fields():
            # another format, decoder or folder: start afresh (rewritten after the scan)
            self._stored = files

    def _key(self, path: Path) -> str:
        """The path inside the data folder (scanned paths all start with
        it), else the absolute path."""
        text = str(path)
        return text[len(self._prefix) :] if text.startswith(self._prefix) else os.path.abspath(text)

    def lookup(self, path: Path) -> tuple[tuple[int, int] | None, AudioFacts | None]:
        """(size and mtime_ns now, facts stored for exactly that size and mtime
        or None); stat before reading."""
        identity = _identity(path)
        parsed = (
            _facts_from_row(self._stored.get(self._key(path))) if identity is not None else None
        )
        hit = parsed is not None and (parsed[0], parsed[1]) == identity
        with self._lock:
            self.hits, self.misses = self.hits + hit, self.misses + (not hit)
        return identity, parsed[2] if hit and parsed is not None else None

    def record(
        self, path: Path, identity: tuple[int, int] | None, facts: AudioFacts | None
    ) -> None:
        """Keep what probing found, under the size and mtime seen before
        reading (readable headers only)."""
        if identity is None or facts is None or facts.header is None:
            return
        row = _row(identity[0], identity[1], facts)
        with self._lock:
            self._rows[self._key(path)] = row

    def save(self) -> bool:
        """Write the files recorded in this scan (removed files drop out) when
        anything changed; True if written."""
        if self._rows == self._stored:
            return False
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_text(
                self.path,
                json.dumps({**self._key_fields(), "files": self._rows}, separators=(",", ":")),
            )
        except OSError as exc:
            log.warning(
                "the data-scan cache %s cannot be written (%s): the next scan reads every file"
                " again",
                self.path,
                exc,
            )
            return False
        self._stored = dict(self._rows)
        return True
