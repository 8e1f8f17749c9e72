"""Preload voice features: every usable recording's log-mel, from the feature cache or computed now.

First each item is looked up in the feature cache (stage "cache"). The misses are decoded in a thread
pool (soundfile and soxr release the GIL), longest first in chunks of MEL_BATCH so that each chunk's
mels are computed as one similar-length batch on the training device, and written to the cache
(stage "decode"); the next chunks decode while the current one is transformed. A second run with the
same files and parameters is therefore all cache hits and decodes nothing.

where="ram": every mel is kept in RAM as a float32 tensor (exact, and no disk access per step).
where="disk": only frame counts are kept; `get_mel` reads the cache entry each time it is asked, and
recomputes (and rewrites) an entry that has vanished or been damaged since.

A recording that fails to decode here is skipped and listed in `VoiceFeatures.skipped`; only when
nothing is left is that an error.
"""

from __future__ import annotations

import time
from collections import deque
from contextlib import closing
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np
import torch

from trainer_core.data.audio import AudioDecodeError, load_audio
from trainer_core.data.feature_cache import FeatureCache, feature_params
from trainer_core.data.mel import MelExtractor
from trainer_core.data.scan_report import DataReport, VoiceItem
from trainer_core.errors import DataError
from trainer_core.profile import AudioSection, Profile

PreloadWhere = Literal["ram", "disk"]
ProgressCallback = Callable[[dict[str, Any]], None]

# Waves per mel batch: large enough to keep a GPU busy, small enough that 16 long clips fit anywhere.
MEL_BATCH = 16
# Chunks decoded ahead of the one being transformed: keeps the decoders busy, bounds the waves in RAM.
DECODE_LOOKAHEAD = 2
PROGRESS_INTERVAL_S = 0.25


class ProgressReporter:
    """Counts items and feature bytes, and calls back at most every `interval_s` (plus once at the end)."""

    def __init__(self, total: int, callback: ProgressCallback | None, interval_s: float = PROGRESS_INTERVAL_S) -> None:
        self.total = total
        self.callback = callback
        self.interval_s = interval_s
        self.done = 0
        self.bytes = 0
        self._last = float("-inf")

    def _emit(self, stage: str) -> None:
        if self.callback is not None:
            self.callback({"done": self.done, "total": self.total, "bytes": self.bytes, "stage": stage})
        self._last = time.monotonic()

    def advance(self, stage: str, items: int = 1, nbytes: int = 0) -> None:
        self.done += items
        self.bytes += nbytes
        if time.monotonic() - self._last >= self.interval_s:
            self._emit(stage)

    def finish(self, stage: str) -> None:
        self._emit(stage)


def mel_bytes(n_mels: int, frames: int) -> int:
    """Bytes of one float32 (n_mels, frames) mel."""
    return 4 * n_mels * frames


@dataclass
class VoiceFeatures:
    """Texts and mel features of the usable recordings, in the scan's order, from RAM or the disk cache."""

    texts: list[str]
    frames: list[int]
    item_ids: list[str]
    paths: list[Path]
    where: PreloadWhere
    n_mels: int
    log_floor: float
    audio: AudioSection
    seconds: float = 0.0
    cache_hits: int = 0
    decoded: int = 0
    skipped: list[tuple[Path, str]] = field(default_factory=list)
    cache: FeatureCache | None = None
    mels: list[torch.Tensor] | None = None
    disk_reads: int = 0
    _fallback_extractor: MelExtractor | None = field(default=None, repr=False)

    def __len__(self) -> int:
        return len(self.texts)

    @property
    def bytes_in_ram(self) -> int:
        """Bytes of mel data held in RAM (float32; none in disk mode)."""
        if self.mels is None:
            return 0
        return sum(mel.numel() * mel.element_size() for mel in self.mels)

    @property
    def feature_bytes(self) -> int:
        """Bytes of all features, wherever they live."""
        return sum(mel_bytes(self.n_mels, frames) for frames in self.frames)

    def get_mel(self, i: int) -> torch.Tensor:
        """(n_mels, frames[i]) float32 log-mel of item `i`."""
        if self.mels is not None:
            return self.mels[i]
        return self._read_from_disk(i)

    def _read_from_disk(self, i: int) -> torch.Tensor:
        assert self.cache is not None  # Disk-mode features always carry their cache.
        self.disk_reads += 1
        mel = self.cache.get(self.paths[i])
        if mel is None or mel.shape[1] != self.frames[i]:
            mel = self._recompute(i)
        return mel

    def _recompute(self, i: int) -> torch.Tensor:
        """Features of item `i` computed again on the CPU (its cache entry vanished or was damaged mid-run)."""
        if self._fallback_extractor is None:
            self._fallback_extractor = MelExtractor(self.audio, torch.device("cpu"))
        path, audio = self.paths[i], self.audio
        try:
            wave = load_audio(path, audio.sample_rate, audio.trim_silence, audio.trim_top_db, audio.normalize)
        except AudioDecodeError as exc:
            raise DataError(f"{exc} (it decoded at preload but not now: was it changed during training?)") from exc
        mel = self._fallback_extractor([wave])[0]
        assert self.cache is not None
        self.cache.put(path, mel)
        return mel

    def describe(self) -> dict[str, Any]:
        """JSON-ready summary for events and logs."""
        return {
            "items": len(self),
            "where": self.where,
            "bytes_in_ram": self.bytes_in_ram,
            "feature_bytes": self.feature_bytes,
            "seconds": self.seconds,
            "cache_hits": self.cache_hits,
            "decoded": self.decoded,
            "skipped": len(self.skipped),
            "cache_entries_rewritten": self.cache.corrupt_entries if self.cache is not None else 0,
            "cache_folder": str(self.cache.entries_dir) if self.cache is not None else None,
        }


@dataclass
class _Slots:
    """Per-item results while preloading: a mel (ram) or a frame count (disk), or a skip reason."""

    where: PreloadWhere
    mels: dict[int, torch.Tensor] = field(default_factory=dict)
    frames: dict[int, int] = field(default_factory=dict)
    skipped: dict[int, str] = field(default_factory=dict)

    def keep(self, index: int, mel: torch.Tensor) -> None:
        self.frames[index] = int(mel.shape[1])
        if self.where == "ram":
            self.mels[index] = mel


def voice_items(report: DataReport) -> list[VoiceItem]:
    """The report's voice items; DataError when it holds none."""
    items = [item for item in report.items if isinstance(item, VoiceItem)]
    if not items:
        raise DataError(
            f"no usable recordings with transcripts in {report.path} (the scan chose {report.mode} data): "
            "add audio with a metadata.csv or <stem>.txt transcripts"
        )
    return items


def _lookup(cache: FeatureCache, item: VoiceItem, where: PreloadWhere) -> tuple[torch.Tensor | None, int | None]:
    """(mel, frames) from the cache: ram mode reads the whole entry, disk mode only its header."""
    if where == "ram":
        mel = cache.get(item.path)
        return mel, None if mel is None else int(mel.shape[1])
    return None, cache.peek_frames(item.path)


def _load_hits(
    items: list[VoiceItem], cache: FeatureCache, slots: _Slots, reporter: ProgressReporter, workers: int
) -> list[int]:
    """Fill `slots` from the cache, reading entries in a thread pool; return the indices of the misses."""
    misses: list[int] = []
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="vega-cache") as pool:
        found = pool.map(lambda item: _lookup(cache, item, slots.where), items)
        for index, (mel, frames) in enumerate(found):
            if frames is None:
                misses.append(index)
                continue
            if mel is not None:
                slots.keep(index, mel)
            else:
                slots.frames[index] = frames
            reporter.advance("cache", 1, mel_bytes(cache.n_mels, frames))
    return misses


def _decode_one(item: VoiceItem, audio: AudioSection) -> np.ndarray | str:
    """The decoded wave, or the reason it could not be decoded."""
    try:
        return load_audio(item.path, audio.sample_rate, audio.trim_silence, audio.trim_top_db, audio.normalize)
    except AudioDecodeError as exc:
        return str(exc)


def _decoded_chunks(
    items: list[VoiceItem], misses: list[int], audio: AudioSection, workers: int
) -> Iterator[list[tuple[int, np.ndarray | str]]]:
    """Decode the misses in the pool; yield chunks of (index, wave or reason) in submission order."""
    order = sorted(misses, key=lambda i: -items[i].duration_s)
    chunks = [order[start : start + MEL_BATCH] for start in range(0, len(order), MEL_BATCH)]
    with ThreadPoolExecutor(max_workers=max(1, workers), thread_name_prefix="vega-decode") as pool:
        pending: deque[list[tuple[int, Future[np.ndarray | str]]]] = deque()
        for chunk in chunks:
            pending.append([(i, pool.submit(_decode_one, items[i], audio)) for i in chunk])
            if len(pending) > DECODE_LOOKAHEAD:
                yield [(i, future.result()) for i, future in pending.popleft()]
        while pending:
            yield [(i, future.result()) for i, future in pending.popleft()]


def _store_mels(
    items: list[VoiceItem], decoded: list[tuple[int, np.ndarray]], mels: list[torch.Tensor], cache: FeatureCache,
    slots: _Slots,
) -> None:
    for (index, _), mel in zip(decoded, mels, strict=True):
        if not cache.put(items[index].path, mel) and slots.where == "disk":
            raise DataError(
                f"cannot write the feature cache in {cache.entries_dir}: streaming from disk needs a writable "
                "cache; set data.cache_dir to a writable folder, or data.preload = \"ram\""
            )
        slots.keep(index, mel)


def _compute_misses(
    items: list[VoiceItem], misses: list[int], profile: Profile, extractor: MelExtractor, cache: FeatureCache,
    slots: _Slots, reporter: ProgressReporter,
) -> None:
    """Decode, transform and cache the misses chunk by chunk."""
    decoded = _decoded_chunks(items, misses, profile.audio, profile.data.num_workers)
    # closing(): an error mid-way shuts the decode pool down now, not whenever the generator is collected.
    with closing(decoded) as chunks:
        for chunk in chunks:
            _transform_chunk(items, chunk, extractor, cache, slots, reporter)


def _transform_chunk(
    items: list[VoiceItem], chunk: list[tuple[int, np.ndarray | str]], extractor: MelExtractor,
    cache: FeatureCache, slots: _Slots, reporter: ProgressReporter,
) -> None:
    """Mels of one decoded chunk, cached and kept; decode failures go to `slots.skipped`."""
    waves = [(i, result) for i, result in chunk if not isinstance(result, str)]
    slots.skipped.update((i, result) for i, result in chunk if isinstance(result, str))
    mels = extractor([wave for _, wave in waves])
    _store_mels(items, waves, mels, cache, slots)
    reporter.advance("decode", len(chunk), sum(mel.numel() * 4 for mel in mels))


def _no_features_left(items: list[VoiceItem], skipped: dict[int, str]) -> DataError:
    reasons = "; ".join(skipped[i] for i in sorted(skipped)[:3])
    more = f" (and {len(skipped) - 3} more)" if len(skipped) > 3 else ""
    return DataError(f"none of the {len(items)} recordings could be decoded: {reasons}{more}")


def _assemble(items: list[VoiceItem], slots: _Slots, cache: FeatureCache, audio: AudioSection) -> VoiceFeatures:
    kept = [i for i in range(len(items)) if i in slots.frames]
    if not kept:
        raise _no_features_left(items, slots.skipped)
    return VoiceFeatures(
        texts=[items[i].text for i in kept],
        frames=[slots.frames[i] for i in kept],
        item_ids=[items[i].item_id for i in kept],
        paths=[items[i].path for i in kept],
        where=slots.where,
        n_mels=audio.n_mels,
        log_floor=audio.log_floor,
        audio=audio,
        skipped=[(items[i].path, reason) for i, reason in sorted(slots.skipped.items())],
        cache=cache,
        mels=[slots.mels[i] for i in kept] if slots.where == "ram" else None,
    )


def preload_voice(
    report: DataReport,
    profile: Profile,
    device: torch.device | str,
    where: PreloadWhere,
    progress: ProgressCallback | None = None,
) -> VoiceFeatures:
    """Features of every usable recording in `report`, cached on disk and kept in RAM or streamed from disk."""
    if where not in ("ram", "disk"):
        raise ValueError(f"where must be \"ram\" or \"disk\", got {where!r}")
    started = time.perf_counter()
    items = voice_items(report)
    cache = FeatureCache(profile.data.cache_dir, feature_params(profile.audio))
    reporter = ProgressReporter(len(items), progress)
    slots = _Slots(where)
    misses = _load_hits(items, cache, slots, reporter, profile.data.num_workers)
    if misses:
        extractor = MelExtractor(profile.audio, torch.device(device))
        _compute_misses(items, misses, profile, extractor, cache, slots, reporter)
    reporter.finish("decode" if misses else "cache")
    features = _assemble(items, slots, cache, profile.audio)
    features.cache_hits = len(items) - len(misses)
    features.decoded = len(misses)
    features.seconds = time.perf_counter() - started
    return features
