"""The data-scan cache on real audio files: unchanged files are not read again, every change is noticed.

"Not read again" is shown without looking inside the scan: a file's samples are replaced by silence of the
very same size and its mtime is put back, so only a scan that trusted the cache still calls it usable.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from test_scan import write_voice
from trainer_core.data.scan import scan_data
from trainer_core.data.scan_cache import ScanCache
from trainer_core.data.scan_report import DataReport


def make_corpus(root: Path, names: tuple[str, ...] = ("a", "b", "c")) -> Path:
    for index, name in enumerate(names):
        write_voice(root / "wavs" / f"{name}.wav", 1.0 + 0.1 * index, seed=index)
    (root / "wavs" / "broken.wav").write_bytes(np.random.default_rng(3).bytes(2048))
    rows = [f"{name}|Sentence number {i}." for i, name in enumerate((*names, "broken"))]
    (root / "metadata.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
    return root


def cached_scan(root: Path, cache: Path, **kwargs) -> DataReport:
    return scan_data(root, "voice", workers=2, cache_folder=cache, **kwargs)


def cache_table(root: Path, cache: Path) -> dict:
    return json.loads(ScanCache(cache, root.resolve()).path.read_text(encoding="utf-8"))["files"]


def usable_names(report: DataReport) -> list[str]:
    return sorted(item.path.name for item in report.items)


def silence_in_place(path: Path) -> None:
    """Replace the samples with silence of exactly the same size, then put the old mtime back."""
    before, info = path.stat(), sf.info(str(path))
    write_voice(path, info.frames / info.samplerate, sr=info.samplerate, amplitude=1e-6)
    assert path.stat().st_size == before.st_size
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))


@pytest.fixture
def corpus(tmp_path: Path) -> Path:
    return make_corpus(tmp_path / "voice")


def test_warm_scan_gives_the_cold_result_and_keeps_only_readable_files(corpus: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cold = cached_scan(corpus, cache)
    table = cache_table(corpus, cache)
    assert sorted(table) == ["wavs/a.wav", "wavs/b.wav", "wavs/c.wav"]  # the unreadable file is tried again
    warm = cached_scan(corpus, cache)
    assert warm.to_dict(include_items=True) == cold.to_dict(include_items=True)
    assert usable_names(warm) == ["a.wav", "b.wav", "c.wav"]
    assert [p.kind for p in warm.problems] == ["unreadable"]


def test_unchanged_file_is_not_probed_again(corpus: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cached_scan(corpus, cache)
    silence_in_place(corpus / "wavs" / "a.wav")
    # Same path, size and mtime: the cache's facts stand (a fresh probe would find silence).
    assert "a.wav" in usable_names(cached_scan(corpus, cache))
    fresh = scan_data(corpus, "voice", workers=1)
    assert "a.wav" not in usable_names(fresh)
    assert [p.kind for p in fresh.problems if p.path.name == "a.wav"] == ["silent"]


def test_changed_file_is_probed_again(corpus: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cached_scan(corpus, cache)
    clip = corpus / "wavs" / "b.wav"
    silence_in_place(clip)
    stat = clip.stat()
    os.utime(clip, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))  # touched: a newer mtime
    report = cached_scan(corpus, cache)
    assert [p.kind for p in report.problems if p.path.name == "b.wav"] == ["silent"]
    # A longer recording under the same name: a new size, a new duration.
    write_voice(clip, 2.5, seed=9)
    longer = next(item for item in cached_scan(corpus, cache).items if item.path.name == "b.wav")
    assert longer.duration_s == pytest.approx(2.5, abs=0.01)


def test_removed_file_is_dropped_and_new_file_added(corpus: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cached_scan(corpus, cache)
    (corpus / "wavs" / "c.wav").unlink()
    write_voice(corpus / "wavs" / "d.wav", 1.3, seed=4)
    with (corpus / "metadata.csv").open("a", encoding="utf-8") as handle:
        handle.write("d|A new sentence.\n")
    report = cached_scan(corpus, cache)
    assert usable_names(report) == ["a.wav", "b.wav", "d.wav"]
    assert sorted(cache_table(corpus, cache)) == ["wavs/a.wav", "wavs/b.wav", "wavs/d.wav"]


def test_settings_apply_to_cached_facts(corpus: Path, tmp_path: Path) -> None:
    """Duration limits are not part of the key: the cached durations are judged by the new limits."""
    cache = tmp_path / "cache"
    cached_scan(corpus, cache)
    report = cached_scan(corpus, cache, max_duration_s=1.05)
    assert usable_names(report) == ["a.wav"]
    assert sorted(p.kind for p in report.problems) == ["too_long", "too_long", "unreadable"]


@pytest.mark.parametrize("damage", [b"\x00\xff not json", b'{"files": [1, 2]}', b"", b'{"format_version": 1, '])
def test_damaged_cache_means_a_rescan_never_an_error(
    corpus: Path, tmp_path: Path, damage: bytes, caplog: pytest.LogCaptureFixture
) -> None:
    cache = tmp_path / "cache"
    cold = cached_scan(corpus, cache)
    path = ScanCache(cache, corpus.resolve()).path
    path.write_bytes(damage)
    silence_in_place(corpus / "wavs" / "a.wav")  # a rescan must notice this
    report = cached_scan(corpus, cache)
    assert "damaged" in caplog.text and str(path) in caplog.text
    assert "a.wav" not in usable_names(report) and len(report.items) == len(cold.items) - 1
    assert sorted(cache_table(corpus, cache)) == ["wavs/a.wav", "wavs/b.wav", "wavs/c.wav"]  # rewritten whole


def test_malformed_rows_are_probed_again(corpus: Path, tmp_path: Path) -> None:
    cache = tmp_path / "cache"
    cached_scan(corpus, cache)
    path = ScanCache(cache, corpus.resolve()).path
    data = json.loads(path.read_text(encoding="utf-8"))
    data["files"]["wavs/a.wav"] = ["junk"]
    path.write_text(json.dumps(data), encoding="utf-8")
    silence_in_place(corpus / "wavs" / "a.wav")
    assert "a.wav" not in usable_names(cached_scan(corpus, cache))


def test_unwritable_cache_folder_leaves_the_scan_intact(corpus: Path, tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("a file where the cache folder would go", encoding="utf-8")
    report = cached_scan(corpus, blocker / "scan")
    assert usable_names(report) == ["a.wav", "b.wav", "c.wav"]
