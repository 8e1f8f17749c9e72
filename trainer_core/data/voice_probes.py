"""Probing many recordings and turning the usable ones into items: shared by the folder scan and
corpus readers.

`probe_all` judges files the data-scan cache knows inline and reads the rest in parallel;
`voice_item` and `voice_summary` build the scan's items and figures from the probes, whatever
layout the corpus has (`data.scan` for plain folders, `data.common_voice` and `data.parquet_corpus`
for corpora as people have them).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

from trainer_core.data.audio_probe import AudioProbe, DurationLimits, probe_audio
from trainer_core.data.scan_cache import ScanCache
from trainer_core.data.scan_report import VoiceItem, VoiceSummary
from trainer_core.data.speakers import SpeakerLayout, speaker_figures
from trainer_core.data.transcripts import Transcript

T = TypeVar("T")
R = TypeVar("R")


def parallel_map(fn: Callable[[T], R], values: list[T], workers: int) -> list[R]:
    if workers <= 1 or len(values) <= 1:
        return [fn(value) for value in values]
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="scan") as pool:
        return list(pool.map(fn, values))


def probe_all(
    pairs: list[tuple[Path, Transcript | None]],
    limits: DurationLimits,
    workers: int,
    cache: ScanCache | None,
) -> list[AudioProbe]:
    """Probes in file order: files the cache knows are judged inline (a stat each), the rest read
    in parallel.

    Handing tens of thousands of cache hits to a thread pool would cost more than judging them.
    """
    if cache is None:
        return parallel_map(lambda pair: probe_audio(pair[0], pair[1], limits), pairs, workers)
    probes: list[AudioProbe | None] = [None] * len(pairs)
    missing: list[tuple[int, tuple[int, int] | None]] = []
    for index, (path, transcript) in enumerate(pairs):
        identity, known = cache.lookup(path)
        if known is None:
            missing.append((index, identity))
        else:
            probe = probes[index] = probe_audio(path, transcript, limits, known)
            cache.record(path, identity, probe.facts)

    def read(entry: tuple[int, tuple[int, int] | None]) -> AudioProbe:
        path, transcript = pairs[entry[0]]
        probe = probe_audio(path, transcript, limits)
        cache.record(path, entry[1], probe.facts)
        return probe

    for (index, _), probe in zip(missing, parallel_map(read, missing, workers), strict=True):
        probes[index] = probe
    cache.save()
    return [probe for probe in probes if probe is not None]


def voice_item(probe: AudioProbe, transcript: Transcript, item_id: str | None = None) -> VoiceItem:
    """A usable probe as an item (`item_id`: the file's stem unless the corpus names its items)."""
    header = probe.header
    assert header is not None  # Only probes without problems become items, and those have headers.
    return VoiceItem(
        path=probe.path,
        text=transcript.text,
        duration_s=header.duration_s,
        sample_rate=header.sample_rate,
        channels=header.channels,
        format=header.format,
        subtype=header.subtype,
        size_bytes=probe.size_bytes,
        item_id=item_id if item_id is not None else probe.path.stem,
        transcript_source=transcript.source,
        speaker=transcript.speaker,
    )


def histogram(values: Iterable[object]) -> dict[str, int]:
    return {str(key): count for key, count in Counter(values).most_common()}


def voice_summary(
    audio_files: int,
    unsupported: int,
    probes: list[AudioProbe],
    items: list[VoiceItem],
    layout: SpeakerLayout,
) -> VoiceSummary:
    """Figures over `audio_files` recordings probed (`unsupported`: more in formats Vega does not
    read).
    """
    headers = [probe.header for probe in probes if probe.header is not None]
    durations = [item.duration_s for item in items]
    transcripts = "".join(item.text for item in items)
    return VoiceSummary(
        audio_files=audio_files,
        usable=len(items),
        skipped=audio_files - len(items),
        unsupported_files=unsupported,
        hours_usable=sum(durations) / 3600.0,
        hours_all=sum(h.duration_s for h in headers) / 3600.0,
        audio_bytes=sum(probe.size_bytes for probe in probes),
        usable_bytes=sum(item.size_bytes for item in items),
        duration_min_s=min(durations) if durations else None,
        duration_max_s=max(durations) if durations else None,
        duration_mean_s=sum(durations) / len(durations) if durations else None,
        formats=histogram(f"{h.format}/{h.subtype}" for h in headers),
        sample_rates=histogram(h.sample_rate for h in headers),
        channels=histogram(h.channels for h in headers),
        transcript_chars=len(transcripts),
        charset="".join(sorted(set(transcripts))),
        speaker_mode=layout.mode,
        speaker_reason=layout.reason,
        speakers=speaker_figures(items),
        held_out=sum(1 for item in items if item.held_out),
    )
