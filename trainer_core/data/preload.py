"""Preload voice features: every usable recording's log-mel, from the feature cache or computed now.

First each item is looked up in the feature cache (stage "cache"): one index read and a stat per
recording, the features themselves being views of the cache's memory-mapped data file. The
misses are computed by whole-file workers (stage "decode"): each thread decodes, resamples,
trims and transforms one recording at a time, longest first, with torch's intra-op threads cut
to cores / workers for the duration so the workers and torch's own pool do not fight over the
same cores (soundfile, soxr, numpy and torch all release the GIL). The new features are then
written to the cache in one packed write, so a second run with the same files and parameters is
all cache hits and decodes nothing.

where="ram": every mel is kept as a float32 tensor (computed ones in process memory, cached ones as
views of the mapped cache file, i.e. the page cache: no read per step).
where="disk": only frame counts are kept; `get_mel` asks the cache each time, and recomputes (and
queues for the cache) an entry whose recording changed since.

With pitch=True each recording also gets its log-F0 track
(`trainer_core.data.pitch`), one value per mel frame, cached beside the mel under its
own parameters; an item is a cache hit only when both are.

A recording that fails to decode here is skipped and listed in `VoiceFeatures.skipped`; only when
nothing is left is that an error.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

import torch

from trainer_core import fault_points
from trainer_core.contract.errors import DataError
from trainer_core.contract.profile import Profile
from trainer_core.contract.profile_audio import AudioSection
from trainer_core.data.audio import AudioDecodeError, load_audio
from trainer_core.data.feature_cache import FeatureCache, feature_params
from trainer_core.data.mel import MelExtractor
from trainer_core.data.pitch import log_f0_feature, pitch_params
from trainer_core.data.scan_report import DataReport, VoiceItem

PreloadWhere = Literal["ram", "disk"]
ProgressCallback = Callable[[dict[str, Any]], None]

PROGRESS_INTERVAL_S = 0.25


class ProgressReporter:
    """Counts items and feature bytes, and calls back at most every
    `interval_s` (plus once at the end)."""

    def __init__(
        self, total: int, callback: ProgressCallback | None, interval_s: float = PROGRESS_INTERVAL_S
    ) -> None:
        self.total = total
        self.callback = callback
        self.interval_s = interval_s
        self.done = 0
        self.bytes = 0
        self._last = float("-inf")

    def _emit(self, stage: str) -> None:
        if self.callback is not None:
            self.callback(
                {"done": self.done, "total": self.total, "bytes": self.bytes, "stage": stage}
            )
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
    """Texts and mel features of the usable recordings, in the scan's order,
    from RAM or the disk cache."""

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
    pitch_cache: FeatureCache | None = None  # set when the features include the pitch track
    pitches: list[torch.Tensor] | None = None  # (1, frames) log-F0 rows, ram mode with pitch only
    disk_reads: int = 0
    # each item's speaker name ("" for single-speaker data)
    speakers: list[str] = field(default_factory=list)
    held_out: list[bool] | None = None  # the corpus's own split (data.corpus_layout); None: Vega's
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

    @property
    def has_pitch(self) -> bool:
        return self.pitch_cache is not None

    def get_pitch(self, i: int) -> torch.Tensor:
        """(frames[i],) float32 log F0 of item `i` (0 on unvoiced frames); only when `has_pitch`."""
        if self.pitches is not None:
            return self.pitches[i][0]
        if self.pitch_cache is None:
            raise ValueError(
                "these features were preloaded without the pitch track (preload_voice(pitch=True))"
            )
        row = self.pitch_cache.get(self.paths[i])
        if row is None or row.shape[1] != self.frames[i]:
            row = self._recompute(i)[1]
            assert row is not None  # the pitch cache is set, so the recompute made the track too
        return row[0]

    def _read_from_disk(self, i: int) -> torch.Tensor:
        assert self.cache is not None  # Disk-mode features always carry their cache.
        self.disk_reads += 1
        mel = self.cache.get(self.paths[i])
        if mel is None or mel.shape[1] != self.frames[i]:
            mel = self._recompute(i)[0]
        return mel

    def _recompute(self, i: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Features of item `i` computed again on the CPU (its recording
        changed since the preload)."""
        if self._fallback_extractor is None:
            self._fallback_extractor = MelExtractor(self.audio, torch.device("cpu"))
        result = features_of(self.paths[i], self.audio, self._fallback_extractor, self.has_pitch)
        if isinstance(result, str):
            raise DataError(
                f"{result} (it decoded at preload but not now: was it changed during training?)"
            )
        assert self.cache is not None
        _queue(self.paths[i], result, self.cache, self.pitch_cache)
        return result

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
            "cache_warnings": list(self.cache.warnings) if self.cache is not None else [],
            "cache_folder": str(self.cache.entries_dir) if self.cache is not None else None,
        }


@dataclass
class _Slots:
    """Per-item results while preloading: a mel (ram) or a frame count (disk), or a skip reason."""

    where: PreloadWhere
    mels: dict[int, torch.Tensor] = field(default_factory=dict)
    pitches: dict[int, torch.Tensor] = field(default_factory=dict)
    frames: dict[int, int] = field(default_factory=dict)
    skipped: dict[int, str] = field(default_factory=dict)

    def keep(self, index: int, mel: torch.Tensor, pitch: torch.Tensor | None = None) -> None:
        self.frames[index] = int(mel.shape[1])
        if self.where == "ram":
            self.mels[index] = mel
            if pitch is not None:
                self.pitches[index] = pitch


def voice_items(report: DataReport) -> list[VoiceItem]:
    """The report's voice items; DataError when it holds none."""
    items = [item for item in report.items if isinstance(item, VoiceItem)]
    if not items:
        raise DataError(
            f"no usable recordings with transcripts in {report.path} (the scan chose {report.mode}"
            " data): add audio with a metadata.csv or <stem>.txt transcripts"
        )
    return items


def held_out_flags(items: list[VoiceItem]) -> list[bool] | None:
    """Each item's held-out flag when the corpus has its own split, else None (the hash split)."""
    flags = [item.held_out for item in items]
    return flags if any(flags) else None


def _load_hits(
    items: list[VoiceItem],
    caches: tuple[FeatureCache, FeatureCache | None],
    slots: _Slots,
    reporter: ProgressReporter,
) -> list[int]:
    """Fill `slots` from the caches (ram mode keeps views of them, disk mode
    frame counts); return the misses."""
    cache, pitch_cache = caches
    misses: list[int] = []
    for index, item in enumerate(items):
        mel = cache.get(item.path) if slots.where == "ram" else None
        frames = int(mel.shape[1]) if mel is not None else cache.frames(item.path)
        pitch = (
            pitch_cache.get(item.path) if pitch_cache is not None and slots.where == "ram" else None
        )
        pitch_frames = (
            int(pitch.shape[1]) if pitch is not None else _frames_in(pitch_cache, item.path, frames)
        )
        if frames is None or pitch_frames != frames:
            misses.append(index)
            continue
        if mel is not None:
            slots.keep(index, mel, pitch)
        else:
            slots.frames[index] = frames
        reporter.advance("cache", 1, mel_bytes(cache.n_mels, frames))
    return misses


def _frames_in(cache: FeatureCache | None, path: Path, default: int | None) -> int | None:
    """Frames of `path` in an optional cache; `default` when there is no
    such cache (nothing to match)."""
    return default if cache is None else cache.frames(path)


def usable_cores() -> int:
    """CPU cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # macOS and Windows have no affinity call
        return os.cpu_count() or 1


def torch_threads_for(workers: int, device: torch.device) -> int:
    """torch intra-op threads per worker: the cores shared out, so workers x
    threads never exceeds them."""
    if device.type != "cpu":
        return torch.get_num_threads()
    return max(1, usable_cores() // workers)


@contextmanager
def intra_op_threads(count: int) -> Iterator[None]:
    """torch.set_num_threads(count) for the block, then back to what it was
    (the setting is process-wide)."""
    before = torch.get_num_threads()
    torch.set_num_threads(count)
    try:
        yield
    finally:
        torch.set_num_threads(before)


Features = tuple[torch.Tensor, torch.Tensor | None]  # the mel and, when asked for, the log-F0 row


def features_of(
    path: Path, audio: AudioSection, extractor: MelExtractor, pitch: bool
) -> Features | str:
    """One recording decoded, resampled, trimmed and transformed; or the
    reason it could not be decoded."""
    try:
        wave = load_audio(
            path, audio.sample_rate, audio.trim_silence, audio.trim_top_db, audio.normalize
        )
    except AudioDecodeError as exc:
        return str(exc)
    mel = extractor([wave])[0]
    return mel, log_f0_feature(wave, audio, int(mel.shape[1])) if pitch else None


def _queue(
    path: Path, features: Features, cache: FeatureCache, pitch_cache: FeatureCache | None
) -> None:
    """Queue freshly computed features for the caches' next flush."""
    cache.put(path, features[0])
    if pitch_cache is not None and features[1] is not None:
        pitch_cache.put(path, features[1])


def _compute_misses(
    items: list[VoiceItem],
    misses: list[int],
    profile: Profile,
    extractor: MelExtractor,
    caches: tuple[FeatureCache, FeatureCache | None],
    slots: _Slots,
    reporter: ProgressReporter,
) -> None:
    """Whole-file workers compute the misses, longest first; the features
    are queued for the caches."""
    workers = max(1, profile.data.num_workers)
    order = sorted(misses, key=lambda i: -items[i].duration_s)
    compute = partial(
        features_of, audio=profile.audio, extractor=extractor, pitch=caches[1] is not None
    )
    with (
        intra_op_threads(torch_threads_for(workers, extractor.device)),
        ThreadPoolExecutor(max_workers=workers, thread_name_prefix="vega-preload") as pool,
    ):
        for index, result in zip(
            order, pool.map(compute, (items[i].path for i in order)), strict=True
        ):
            if isinstance(result, str):
                slots.skipped[index] = result
                reporter.advance("decode")
                continue
            _queue(items[index].path, result, *caches)
            slots.keep(index, *result)
            reporter.advance("decode", 1, result[0].numel() * 4)
            fault_points.point("preload_decode")  # the drill: some items decoded, not all


def _write_cache(caches: tuple[FeatureCache, FeatureCache | None], where: PreloadWhere) -> None:
    """Write the new features in one packed write per cache; only disk mode cannot do without it."""
    written = [cache.flush() for cache in caches if cache is not None]
    cache = caches[0]
    if not all(written) and where == "disk":
        raise DataError(
            f"cannot write the feature cache in {cache.entries_dir}: streaming from disk needs a"
            ' writable cache; set data.cache_dir to a writable folder, or data.preload = "ram"'
        )


def _no_features_left(items: list[VoiceItem], skipped: dict[int, str]) -> DataError:
    reasons = "; ".join(skipped[i] for i in sorted(skipped)[:3])
    more = f" (and {len(skipped) - 3} more)" if len(skipped) > 3 else ""
    return DataError(f"none of the {len(items)} recordings could be decoded: {reasons}{more}")


def _assemble(
    items: list[VoiceItem],
    slots: _Slots,
    caches: tuple[FeatureCache, FeatureCache | None],
    audio: AudioSection,
) -> VoiceFeatures:
    cache, pitch_cache = caches
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
        pitch_cache=pitch_cache,
        pitches=(
            [slots.pitches[i] for i in kept]
            if slots.where == "ram" and pitch_cache is not None
            else None
        ),
        speakers=[items[i].speaker for i in kept],
        held_out=held_out_flags([items[i] for i in kept]),
    )


def preload_voice(
    report: DataReport,
    profile: Profile,
    device: torch.device | str,
    where: PreloadWhere,
    progress: ProgressCallback | None = None,
    pitch: bool = False,
) -> VoiceFeatures:
    """Features of every usable recording in `report` (with pitch=True also their log-F0 tracks),
    cached on disk and kept in RAM or streamed from disk."""
    if where not in ("ram", "disk"):
        raise ValueError(f'where must be "ram" or "disk", got {where!r}')
    started = time.perf_counter()
    items = voice_items(report)
    params = feature_params(profile.audio)
    cache = FeatureCache(profile.data.cache_dir, params, report.path)
    pitch_cache = (
        FeatureCache(profile.data.cache_dir, pitch_params(params), report.path) if pitch else None
    )
    reporter = ProgressReporter(len(items), progress)
    slots = _Slots(where)
    misses = _load_hits(items, (cache, pitch_cache), slots, reporter)
    if misses:
        extractor = MelExtractor(profile.audio, torch.device(device))
        _compute_misses(items, misses, profile, extractor, (cache, pitch_cache), slots, reporter)
    _write_cache((cache, pitch_cache), where)
    reporter.finish("decode" if misses else "cache")
    features = _assemble(items, slots, (cache, pitch_cache), profile.audio)
    features.cache_hits = len(items) - len(misses)
    features.decoded = len(misses)
    features.seconds = time.perf_counter() - started
    return features
