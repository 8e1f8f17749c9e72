"""Where Vega's caches live: the per-user cache folder (or data.cache_dir) and one name per corpus.

Torch-free, shared by the feature cache (data.feature_cache) and the data-scan cache
(data.scan_cache), so both follow the same rule: data.cache_dir when the profile sets
it, else the user cache folder.
"""

from __future__ import annotations

import hashlib
import os
from pathlib import Path


def default_cache_folder() -> Path:
    """The per-user feature cache folder, used when the profile leaves data.cache_dir unset."""
    import platformdirs

    return Path(platformdirs.user_cache_dir("vega")) / "features"


def cache_folder(cache_dir: Path | None) -> Path:
    """data.cache_dir when set, else the per-user default."""
    return Path(cache_dir) if cache_dir is not None else default_cache_folder()


def corpus_digest(corpus: Path) -> str:
    """Short digest of the corpus folder's absolute path: one packed file per corpus."""
    text = os.path.abspath(corpus)
    return hashlib.sha256(text.encode("utf-8", errors="surrogateescape")).hexdigest()[:16]
