"""Preloading voice features: cache hits skip decoding, damaged entries heal, disk mode streams, bad files skip."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import soundfile as sf
import torch

from trainer_core.contract.errors import DataError
from trainer_core.contract.profile import Profile
from trainer_core.data.audio import decode_calls, load_audio
from trainer_core.data.mel import MelExtractor
from trainer_core.data.preload import ProgressReporter, VoiceFeatures, preload_voice
from trainer_core.data.scan import scan_data
from trainer_core.data.scan_report import DataReport, VoiceItem
from trainer_core.data.voice_dataset import VoiceDataset

TEST_VOICE = Path(__file__).parent / "fixtures" / "voice"


@pytest.fixture(scope="module")
def demo_report() -> DataReport:
    return scan_data(TEST_VOICE, "voice")


def make_profile(cache_dir: Path, **audio: Any) -> Profile:
    profile = Profile()
    profile.data.cache_dir = cache_dir
    profile.data.num_workers = 2
    for key, value in audio.items():
        setattr(profile.audio, key, value)
    return profile


def expected_mel(path: Path, profile: Profile) -> torch.Tensor:
    a = profile.audio
    wave = load_audio(path, a.sample_rate, a.trim_silence, a.trim_top_db, a.normalize)
    return MelExtractor(a, torch.device("cpu"))([wave])[0]


def write_tone(path: Path, seconds: float, sr: int, channels: int = 1, subtype: str = "PCM_16") -> Path:
    t = np.arange(int(seconds * sr)) / sr
    wave = 0.5 * np.sin(2 * np.pi * 330.0 * t) * np.hanning(len(t))
    sf.write(path, np.repeat(wave[:, None], channels, axis=1), sr, subtype=subtype)
    return path


def small_corpus(folder: Path) -> Path:
    """Three short recordings with sidecar transcripts: mono 22.05 kHz, stereo 44.1 kHz, 8-bit 48 kHz."""
    folder.mkdir()
    write_tone(folder / "a.wav", 0.6, 22050)
    write_tone(folder / "b.wav", 0.9, 44100, channels=2)
    write_tone(folder / "c.wav", 1.2, 48000, subtype="PCM_U8")
    for name, text in (("a", "first"), ("b", "second"), ("c", "third")):
        (folder / f"{name}.txt").write_text(text, encoding="utf-8")
    return folder


def assert_same_mels(a: VoiceFeatures, b: VoiceFeatures, atol: float = 0.0) -> None:
    assert a.frames == b.frames
    for i in range(len(a)):
        torch.testing.assert_close(a.get_mel(i), b.get_mel(i), rtol=0, atol=atol)


def test_first_run_decodes_and_reports_progress_second_run_is_all_cache_hits(
    demo_report: DataReport, tmp_path: Path
) -> None:
    profile = make_profile(tmp_path / "cache")
    events: list[dict[str, Any]] = []
    before = decode_calls()
    first = preload_voice(demo_report, profile, "cpu", "ram", events.append)
    assert decode_calls() - before == len(demo_report.items) == len(first) == 40
    assert (first.cache_hits, first.decoded, first.skipped, first.where) == (0, 40, [], "ram")
    assert first.item_ids == [item.item_id for item in demo_report.items]
    assert first.texts == [item.text for item in demo_report.items]
    assert first.bytes_in_ram == first.feature_bytes == sum(first.frames) * 80 * 4
    assert events[-1] == {"done": 40, "total": 40, "bytes": first.feature_bytes, "stage": "decode"}
    assert [e["done"] for e in events] == sorted(e["done"] for e in events)
    # Last-bit float32 differences only: the workers run torch on fewer intra-op threads than this test.
    torch.testing.assert_close(first.get_mel(5), expected_mel(first.paths[5], profile), rtol=0, atol=1e-5)

    events.clear()
    before = decode_calls()
    second = preload_voice(demo_report, profile, "cpu", "ram", events.append)
    assert decode_calls() == before
    assert (second.cache_hits, second.decoded) == (40, 0)
    assert events[-1] == {"done": 40, "total": 40, "bytes": first.feature_bytes, "stage": "cache"}
    assert_same_mels(first, second)


@pytest.mark.parametrize("where", ["ram", "disk"])
def test_a_damaged_cache_is_rebuilt_with_a_warning(demo_report: DataReport, tmp_path: Path, where: str) -> None:
    profile = make_profile(tmp_path / "cache")
    first = preload_voice(demo_report, profile, "cpu", "ram")
    cache = first.cache
    assert cache is not None and cache.data_path is not None
    cache.data_path.write_bytes(cache.data_path.read_bytes()[:1000])  # truncated
    before = decode_calls()
    second = preload_voice(demo_report, profile, "cpu", where)
    assert decode_calls() - before == 40 and (second.cache_hits, second.decoded) == (0, 40)
    assert "computed again" in second.describe()["cache_warnings"][0]
    assert_same_mels(first, second, atol=1e-5)
    third = preload_voice(demo_report, profile, "cpu", where)
    assert (third.cache_hits, third.describe()["cache_warnings"]) == (40, [])
    assert_same_mels(second, third)


def test_disk_mode_reads_each_mel_from_the_cache_per_batch(demo_report: DataReport, tmp_path: Path) -> None:
    profile = make_profile(tmp_path / "cache")
    on_disk = preload_voice(demo_report, profile, "cpu", "disk")
    assert on_disk.where == "disk" and on_disk.mels is None and on_disk.bytes_in_ram == 0
    in_ram = preload_voice(demo_report, profile, "cpu", "ram")
    assert in_ram.cache_hits == 40
    encode = lambda text: [ord(c) + 1 for c in text]  # noqa: E731
    disk_data = VoiceDataset(on_disk, encode, 0.1, seed=3, bucket_size=8)
    ram_data = VoiceDataset(in_ram, encode, 0.1, seed=3, bucket_size=8)
    disk_batches = disk_data.train_batches(0, 8)
    for ram_batch, n in ram_data.train_batches(0, 8):
        reads_before = on_disk.disk_reads
        disk_batch, m = next(disk_batches)
        # Each batch reads its own items from disk, no more and no fewer.
        assert m == n and on_disk.disk_reads - reads_before == n
        for name in ram_batch:
            torch.testing.assert_close(disk_batch[name], ram_batch[name], rtol=0, atol=0)
    assert on_disk.disk_reads == disk_data.train_items() == 36


def test_disk_mode_survives_the_cache_file_going_and_recomputes_a_changed_recording(tmp_path: Path) -> None:
    voice = tmp_path / "voice"
    shutil.copytree(TEST_VOICE, voice)
    profile = make_profile(tmp_path / "cache")
    on_disk = preload_voice(scan_data(voice, "voice"), profile, "cpu", "disk")
    expected = [on_disk.get_mel(i).clone() for i in (3, 4)]
    assert on_disk.cache is not None and on_disk.cache.data_path is not None
    on_disk.cache.data_path.unlink()  # the mapping outlives the file
    torch.testing.assert_close(on_disk.get_mel(3), expected[0], rtol=0, atol=0)
    stat = on_disk.paths[4].stat()
    os.utime(on_disk.paths[4], ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    before = decode_calls()
    torch.testing.assert_close(on_disk.get_mel(4), expected[1], rtol=0, atol=1e-5)
    assert decode_calls() - before == 1


def test_cache_misses_when_parameters_or_the_file_change(tmp_path: Path) -> None:
    report = scan_data(small_corpus(tmp_path / "voice"), "voice")
    profile = make_profile(tmp_path / "cache")
    assert preload_voice(report, profile, "cpu", "ram").decoded == 3
    assert preload_voice(report, make_profile(tmp_path / "cache", n_mels=64), "cpu", "ram").decoded == 3
    stat = os.stat(tmp_path / "voice" / "b.wav")
    os.utime(tmp_path / "voice" / "b.wav", ns=(stat.st_atime_ns, stat.st_mtime_ns + 10**9))
    again = preload_voice(report, profile, "cpu", "ram")
    assert (again.cache_hits, again.decoded) == (2, 1)


def test_stereo_44k_and_8bit_48k_recordings_are_converted(tmp_path: Path) -> None:
    report = scan_data(small_corpus(tmp_path / "voice"), "voice")
    profile = make_profile(tmp_path / "cache", trim_silence=False)
    features = preload_voice(report, profile, "cpu", "ram")
    by_id = dict(zip(features.item_ids, features.frames, strict=True))
    # At 22050 Hz with a 256-sample hop, whatever the source rate or channel count.
    assert by_id == {"a": 1 + 13230 // 256, "b": 1 + 19845 // 256, "c": 1 + 26460 // 256}


def test_undecodable_files_are_skipped_and_listed_unless_nothing_is_left(tmp_path: Path) -> None:
    report = scan_data(small_corpus(tmp_path / "voice"), "voice")
    broken = tmp_path / "voice" / "broken.wav"
    shutil.copy(tmp_path / "voice" / "a.wav", broken)
    report.items.append(VoiceItem(broken, "gone", 0.6, 22050, 1, "WAV", "PCM_16", 10, "broken", "broken.txt"))
    # Damaged after the scan: the preload is where it is found.
    broken.write_bytes(b"RIFF" + os.urandom(64))
    features = preload_voice(report, make_profile(tmp_path / "cache"), "cpu", "ram")
    assert features.item_ids == [item.item_id for item in report.items[:3]]
    assert [(path, "broken.wav" in reason) for path, reason in features.skipped] == [(broken, True)]
    lone = DataReport(tmp_path / "voice", "voice", "test", items=[report.items[-1]])
    with pytest.raises(DataError, match="none of the 1 recordings.*broken.wav"):
        preload_voice(lone, make_profile(tmp_path / "cache"), "cpu", "ram")


def test_disk_mode_needs_a_writable_cache_but_ram_mode_does_not(tmp_path: Path) -> None:
    report = scan_data(small_corpus(tmp_path / "voice"), "voice")
    not_a_folder = tmp_path / "cache-is-a-file"
    not_a_folder.write_text("x")
    assert len(preload_voice(report, make_profile(not_a_folder), "cpu", "ram")) == 3
    with pytest.raises(DataError, match="cannot write the feature cache.*data.cache_dir"):
        preload_voice(report, make_profile(not_a_folder), "cpu", "disk")


def test_progress_callbacks_are_rate_limited_and_always_end_with_the_total() -> None:
    calls: list[dict[str, Any]] = []
    reporter = ProgressReporter(500, calls.append, interval_s=3600.0)
    for _ in range(500):
        reporter.advance("decode", 1, 10)
    reporter.finish("decode")
    assert calls == [
        {"done": 1, "total": 500, "bytes": 10, "stage": "decode"},
        {"done": 500, "total": 500, "bytes": 5000, "stage": "decode"},
    ]
