"""Preload the recordings themselves, for tasks that train on audio (the vocoder).

Each usable recording of the scan is decoded, resampled and trimmed exactly as for its mel features
(`trainer_core.data.preload`), so a vocoder hears the audio the acoustic model's mels came from. The
samples live in the feature cache as one (1, samples) float32 row under their own parameters: a
second run decodes nothing. where="ram" keeps views of the mapped cache file (or the decoded arrays
when the cache is not writable); where="disk" keeps only lengths and reads a recording's row when a
batch needs it. A recording that fails to decode is skipped and listed, as for mels.
"""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from trainer_core import fault_points
from trainer_core.contract.errors import DataError
from trainer_core.contract.profile import Profile
from trainer_core.contract.profile_audio import AudioSection
from trainer_core.data.audio import AudioDecodeError, load_audio
from trainer_core.data.feature_cache import FeatureCache
from trainer_core.data.preload import (
    PreloadWhere,
    ProgressCallback,
    ProgressReporter,
    held_out_flags,
    voice_items,
)
from trainer_core.data.scan_report import DataReport, VoiceItem

WAVE_FEATURE_VERSION = 1


def wave_params(audio: AudioSection) -> dict[str, Any]:
    """Feature-cache parameters of the decoded samples: only what changes
    them (not the mel settings)."""
    return {
        "feature": "wave",
        "rows": 1,
        "sample_rate": audio.sample_rate,
        "trim_silence": audio.trim_silence,
        "trim_top_db": audio.trim_top_db,
        "normalize": audio.normalize,
        "wave_version": WAVE_FEATURE_VERSION,
    }


@dataclass
class Waves:
    """The usable recordings' samples in the scan's order, from RAM or the disk cache."""

    item_ids: list[str]
    texts: list[str]
    paths: list[Path]
    lengths: list[int]
    where: PreloadWhere
    audio: AudioSection
    cache: FeatureCache
    rows: list[torch.Tensor] | None = None
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    seconds: float = 0.0
    cache_hits: int = 0
    decoded: int = 0
    speakers: list[str] = field(default_factory=list)
    """Each item's speaker name ("" for single-speaker data)."""
    held_out: list[bool] | None = None
    """Each item's held-out flag when the corpus has its own split
    (data.corpus_layout), else None."""

    def __len__(self) -> int:
        return len(self.item_ids)

    def get(self, i: int) -> torch.Tensor:
        """(lengths[i],) float32 samples of item `i`."""
        if self.rows is not None:
            return self.rows[i][0]
        row = self.cache.get(self.paths[i])
        if row is not None and row.shape[1] == self.lengths[i]:
            return row[0]
        decoded = _decode_row(self.paths[i], self.audio)
        if isinstance(decoded, str):
            raise DataError(
                f"{decoded} (it decoded at preload but not now: was it changed during training?)"
            )
        return decoded[0]

    def segment(self, i: int, start: int, length: int) -> torch.Tensor:
        """`length` samples of item `i` from `start`, zero-padded past its end."""
        wave = self.get(i)[start : start + length]
        if wave.shape[0] == length:
            return wave
        return torch.nn.functional.pad(wave, (0, length - wave.shape[0]))

    @property
    def hours(self) -> float:
        return sum(self.lengths) / self.audio.sample_rate / 3600

    def describe(self) -> dict[str, Any]:
        return {
            "items": len(self),
            "where": self.where,
            "bytes_in_ram": 4 * sum(self.lengths) if self.rows is not None else 0,
            "feature_bytes": 4 * sum(self.lengths),
            "seconds": self.seconds,
            "cache_hits": self.cache_hits,
            "decoded": self.decoded,
            "skipped": len(self.skipped),
            "cache_entries_rewritten": self.cache.corrupt_entries,
            "cache_warnings": list(self.cache.warnings),
            "cache_folder": str(self.cache.entries_dir),
        }


def _decode_row(path: Path, audio: AudioSection) -> torch.Tensor | str:
    """(1, samples) float32 of one recording, or the reason it could not be decoded."""
    try:
        wave = load_audio(
            path, audio.sample_rate, audio.trim_silence, audio.trim_top_db, audio.normalize
        )
    except AudioDecodeError as exc:
        return str(exc)
    return torch.from_numpy(wave).reshape(1, -1)


def _decode_misses(
    items: list[VoiceItem],
    misses: list[int],
    profile: Profile,
    cache: FeatureCache,
    reporter: ProgressReporter,
) -> tuple[dict[int, torch.Tensor], dict[int, str]]:
    """Decode the recordings the cache lacks on whole-file threads (decoding
    releases the GIL), longest first."""
    decoded: dict[int, torch.Tensor] = {}
    skipped: dict[int, str] = {}
    order = sorted(misses, key=lambda i: -items[i].duration_s)
    with ThreadPoolExecutor(
        max_workers=max(1, profile.data.num_workers), thread_name_prefix="vega-waves"
    ) as pool:
        for index, row in zip(
            order, pool.map(lambda i: _decode_row(items[i].path, profile.audio), order), strict=True
        ):
            if isinstance(row, str):
                skipped[index] = row
                reporter.advance("decode")
                continue
            cache.put(items[index].path, row)
            decoded[index] = row
            reporter.advance("decode", 1, 4 * row.shape[1])
            fault_points.point("preload_decode")  # the drill: some items decoded, not all
    return decoded, skipped


def _kept_row(
    i: int,
    items: list[VoiceItem],
    decoded: dict[int, torch.Tensor],
    cache: FeatureCache,
    written: bool,
) -> torch.Tensor | None:
    mapped = cache.get(items[i].path) if written or i not in decoded else None
    return mapped if mapped is not None else decoded.get(i)


def preload_waves(
    report: DataReport,
    profile: Profile,
    where: PreloadWhere,
    progress: ProgressCallback | None = None,
) -> Waves:
    """The samples of every usable recording in `report`, cached on disk and
    kept in RAM or read from disk."""
    started = time.perf_counter()
    items = voice_items(report)
    cache = FeatureCache(profile.data.cache_dir, wave_params(profile.audio), report.path)
    reporter = ProgressReporter(len(items), progress)
    lengths = {i: cache.frames(item.path) for i, item in enumerate(items)}
    misses = [i for i, length in lengths.items() if length is None]
    decoded, skipped = (
        _decode_misses(items, misses, profile, cache, reporter) if misses else ({}, {})
    )
    written = cache.flush()
    if not written and where == "disk":
        raise DataError(
            f"cannot write the feature cache in {cache.entries_dir}: streaming audio from disk"
            " needs a writable cache; set data.cache_dir to a writable folder, or data.preload ="
            ' "ram"'
        )
    reporter.finish("decode" if misses else "cache")
    kept = [i for i in range(len(items)) if i not in skipped]
    if not kept:
        reasons = "; ".join(skipped[i] for i in sorted(skipped)[:3])
        raise DataError(f"none of the {len(items)} recordings could be decoded: {reasons}")
    lengths.update({i: int(row.shape[1]) for i, row in decoded.items()})
    # Once written, decoded rows are read back as views of the mapped cache:
    # the OS can page them out.
    rows = [_kept_row(i, items, decoded, cache, written) for i in kept] if where == "ram" else None
    decoded.clear()
    return Waves(
        item_ids=[items[i].item_id for i in kept],
        texts=[items[i].text for i in kept],
        paths=[items[i].path for i in kept],
        lengths=[int(lengths[i] or 0) for i in kept],
        where=where,
        audio=profile.audio,
        cache=cache,
        rows=rows,  # type: ignore[arg-type]  # every kept item is decoded or a cache hit
        skipped=[(items[i].path, reason) for i, reason in sorted(skipped.items())],
        seconds=time.perf_counter() - started,
        cache_hits=len(items) - len(misses),
        decoded=len(misses),
        speakers=[items[i].speaker for i in kept],
        held_out=held_out_flags([items[i] for i in kept]),
    )
