"""Scores that do not change between evaluations, kept on disk beside the feature cache.

The free-running floor (recordings re-synthesised through Griffin-Lim) and the vocoder's
Griffin-Lim reference depend only on the recordings, the [audio] settings and the iteration count.
They are computed once and found again by a digest of exactly those, so a resume or
`trainer-core evaluate` does not pay for them again.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from trainer_core.atomic import write_whole
from trainer_core.contract.errors import VegaError

if TYPE_CHECKING:
    from trainer_core.contract.profile_audio import AudioSection

# Bumped when what is cached, or how it is computed, changes: old entries are then never read.
VERSION = 1


def digest(kind: str, audio: AudioSection, iterations: int, arrays: Iterable[np.ndarray]) -> str:
    """A name for one result: what it is, its settings and the bytes it was computed from."""
    settings = [VERSION, kind, audio.model_dump(mode="json"), iterations]
    h = hashlib.sha256(json.dumps(settings).encode())
    for array in arrays:
        contiguous = np.ascontiguousarray(array)
        h.update(f"{contiguous.dtype}{contiguous.shape}".encode())
        h.update(contiguous.tobytes())
    return h.hexdigest()[:32]


class EvalCache:
    """JSON results under `folder`, one file per digest; an entry that cannot be read or written
    is a miss (None as the folder: nothing is kept)."""

    def __init__(self, folder: Path | None) -> None:
        self.folder = folder

    def get(self, key: str) -> Any | None:
        if self.folder is None:
            return None
        try:
            return json.loads((self.folder / f"{key}.json").read_text())
        except (OSError, ValueError):
            return None

    def put(self, key: str, value: Any) -> None:
        if self.folder is None:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            write_whole(self.folder / f"{key}.json", json.dumps(value).encode(), "cache_write")
        except (OSError, VegaError):
            pass  # a cache that cannot be written only costs the next evaluation its time
