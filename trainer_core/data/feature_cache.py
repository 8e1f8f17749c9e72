"""On-disk cache of log-mel features, keyed by file identity and feature parameters.

Layout: `<folder>/<params digest>/<file key>.npy`, one float32 (n_mels, frames) array per recording.
The file key is a sha256 of the recording's absolute path, size and mtime_ns, so an edited or replaced
recording misses; the params digest covers every setting that changes the numbers (and the cache
format version), so a profile with other features never reads these. Entries are written to a
temporary file and renamed into place, so readers never see half an entry; an entry that cannot be
read or has the wrong shape counts as a miss and is rewritten, never as an error. Arrays are read
with `allow_pickle=False`: a cache file can never run code.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import tempfile
import threading
from pathlib import Path
from typing import Any

import numpy as np
import torch

from trainer_core.profile import AudioSection

CACHE_FORMAT_VERSION = 1


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


def default_cache_folder() -> Path:
    """The per-user feature cache folder, used when the profile leaves data.cache_dir unset."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("vega")) / "features"


def params_digest(params: dict[str, Any]) -> str:
    """Short stable digest of the feature parameters and the cache format version."""
    text = json.dumps({**params, "cache_format_version": CACHE_FORMAT_VERSION}, sort_keys=True)
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:20]


def file_key(path: Path) -> str | None:
    """sha256 of (absolute path, size, mtime_ns), or None when the file cannot be stat'ed."""
    absolute = path.resolve()
    try:
        stat = absolute.stat()
    except OSError:
        return None
    identity = f"{absolute}\0{stat.st_size}\0{stat.st_mtime_ns}"
    return hashlib.sha256(identity.encode("utf-8", errors="surrogateescape")).hexdigest()


class FeatureCache:
    """Get and put (n_mels, frames) float32 mel tensors for recordings."""

    def __init__(self, folder: Path | None, params: dict[str, Any]) -> None:
        self.folder = Path(folder) if folder is not None else default_cache_folder()
        self.params = dict(params)
        self.n_mels = int(params["n_mels"])
        # One subfolder per parameter set: other profiles' features never collide, and can be removed alone.
        self.entries_dir = self.folder / params_digest(self.params)
        self.corrupt_entries = 0
        self._count_lock = threading.Lock()  # Lookups run in a thread pool.

    def entry_path(self, path: Path) -> Path | None:
        """Where the features of `path` live (whether or not they exist yet); None if it cannot be stat'ed."""
        key = file_key(Path(path))
        return None if key is None else self.entries_dir / f"{key}.npy"

    def _valid(self, array: np.ndarray) -> bool:
        return array.dtype == np.float32 and array.ndim == 2 and array.shape[0] == self.n_mels and array.shape[1] > 0

    def _count_corrupt(self) -> None:
        """Count an unreadable entry (it will be rewritten by the caller); returns None, a miss."""
        with self._count_lock:
            self.corrupt_entries += 1

    def get(self, path: Path) -> torch.Tensor | None:
        """The cached features of `path`, or None on a miss (absent, unreadable or malformed entry)."""
        entry = self.entry_path(path)
        if entry is None or not entry.is_file():
            return None
        try:
            array = np.load(entry, allow_pickle=False)
        except (OSError, ValueError, EOFError):
            return self._count_corrupt()
        if not self._valid(array):
            return self._count_corrupt()
        return torch.from_numpy(array)

    def peek_frames(self, path: Path) -> int | None:
        """The frame count of a cached entry from its header alone (no data read), or None on a miss."""
        entry = self.entry_path(path)
        if entry is None or not entry.is_file():
            return None
        try:
            # Memory-mapping checks the header and that the file is long enough, without reading the data.
            array = np.load(entry, mmap_mode="r", allow_pickle=False)
        except (OSError, ValueError, EOFError):
            return self._count_corrupt()
        if not self._valid(array):
            return self._count_corrupt()
        return int(array.shape[1])

    def _write_params_note(self) -> None:
        # A human-readable note of what this folder holds; written once, atomically like the entries.
        note = self.entries_dir / "params.json"
        if not note.exists():
            self._atomic_write(note, json.dumps(self.params, indent=2, sort_keys=True).encode("utf-8"))

    def _atomic_write(self, target: Path, data: bytes) -> None:
        fd, temp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.stem}.", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            os.replace(temp, target)
        except BaseException:
            Path(temp).unlink(missing_ok=True)
            raise

    def put(self, path: Path, mel: torch.Tensor) -> bool:
        """Store the features of `path`; False (and nothing written) when the cache folder is not writable."""
        entry = self.entry_path(path)
        if entry is None:
            return False
        array = np.ascontiguousarray(mel.detach().cpu().numpy(), dtype=np.float32)
        try:
            self.entries_dir.mkdir(parents=True, exist_ok=True)
            self._write_params_note()
            self._atomic_write(entry, _npy_bytes(array))
        except OSError:
            return False
        return True


def _npy_bytes(array: np.ndarray) -> bytes:
    """`array` serialised in .npy format (header + raw data)."""
    buffer = io.BytesIO()
    np.save(buffer, array, allow_pickle=False)
    return buffer.getvalue()
