"""Data scan: real audio and text files written into tmp folders, every problem kind, auto mode decisions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from trainer_core.contract.errors import DataError
from trainer_core.data.scan import estimate_preload_bytes, scan_data
from trainer_core.data.scan_report import DataReport, TextItem, VoiceItem


def write_voice(
    path: Path,
    seconds: float,
    sr: int = 22050,
    channels: int = 1,
    amplitude: float = 0.5,
    subtype: str = "PCM_16",
    seed: int = 0,
) -> Path:
    """A speech-like test signal: two harmonics plus a little noise, written as a real audio file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    t = np.arange(int(seconds * sr)) / sr
    rng = np.random.default_rng(seed)
    mono = np.sin(2 * np.pi * 180 * t) + 0.5 * np.sin(2 * np.pi * 360 * t) + 0.05 * rng.standard_normal(t.size)
    mono = amplitude * mono / np.max(np.abs(mono))
    data = np.stack([mono] * channels, axis=1) if channels > 1 else mono
    sf.write(str(path), data.astype(np.float32), sr, subtype=subtype)
    return path


def write_clipped(path: Path, seconds: float = 1.0, sr: int = 22050) -> Path:
    t = np.arange(int(seconds * sr)) / sr
    # A sine driven to 3x full scale, clipped as an overloaded recorder would.
    data = np.clip(3.0 * np.sin(2 * np.pi * 220 * t), -1.0, 1.0)
    sf.write(str(path), data.astype(np.float32), sr, subtype="PCM_16")
    return path


METADATA_ROWS = [
    "good_01|Hello there, Dr. Who.|Hello there, Doctor Who.",
    "good_02|Guten Tag, schöne Grüße aus Köln.",
    "good_03|こんにちは、世界。|",
    "",
    "stereo|A stereo clip at forty-four point one.",
    "short|Too short.",
    "silent|Nothing to hear.",
    "clipped|Far too loud.",
    "corrupt|Broken file.",
    "empty|Empty file.",
    "flacclip|This one was converted to FLAC.",
    "ghost|No audio file has this id.",
    "emptytext|   |",
    "a row without any separator",
    "good_01|A duplicate id.",
]


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The messy voice folder the issue describes: every problem kind next to good files."""
    root = tmp_path_factory.mktemp("voice")
    wavs = root / "wavs"
    for index, name in enumerate(["good_01", "good_02", "good_03", "emptytext", "notranscript"]):
        write_voice(wavs / f"{name}.wav", 1.0, seed=index)
    write_voice(wavs / "stereo.wav", 1.2, sr=44100, channels=2)
    write_voice(wavs / "short.wav", 0.1)
    write_voice(wavs / "silent.wav", 1.0, amplitude=1e-5)
    write_clipped(wavs / "clipped.wav")
    (wavs / "corrupt.wav").write_bytes(np.random.default_rng(1).bytes(4096))
    (wavs / "empty.wav").write_bytes(b"")
    write_voice(root / "flac" / "flacclip.flac", 0.8)
    write_voice(root / "speakers" / "side_01.wav", 0.9)
    (root / "speakers" / "side_01.lab").write_text("Ein Satz mit Umlauten: äöü ß.\n", encoding="utf-8")
    (root / "speakers" / "phone.m4a").write_bytes(b"\x00" * 64)
    # BOM and CRLF line ends, as spreadsheet exports write them.
    text = "\r\n".join(METADATA_ROWS) + "\r\n"
    (root / "metadata.csv").write_bytes(b"\xef\xbb\xbf" + text.encode("utf-8"))
    return root


@pytest.fixture(scope="module")
def report(corpus: Path) -> DataReport:
    return scan_data(corpus, workers=2)


def problem_for(report: DataReport, name: str) -> tuple[str, str]:
    found = [(p.kind, p.reason) for p in report.problems if p.path.name == name]
    assert len(found) == 1, f"expected one problem for {name}, got {found}"
    return found[0]


def items_by_name(report: DataReport) -> dict[str, VoiceItem]:
    return {item.path.name: item for item in report.items if isinstance(item, VoiceItem)}


def test_messy_corpus_is_voice_with_the_good_files_usable(report: DataReport, corpus: Path) -> None:
    assert report.mode == "voice"
    assert report.path == corpus.resolve()
    assert set(items_by_name(report)) == {
        "good_01.wav",
        "good_02.wav",
        "good_03.wav",
        "stereo.wav",
        "flacclip.flac",
        "side_01.wav",
    }
    assert "voice" in report.reason and "6 of 13 audio files" in report.reason


@pytest.mark.parametrize(
    ("name", "kind", "words"),
    [
        ("corrupt.wav", "unreadable", "unreadable: format not recognised"),
        ("empty.wav", "empty", "0 bytes"),
        ("short.wav", "too_short", "0.10 s"),
        ("silent.wav", "silent", "dBFS"),
        ("clipped.wav", "clipped", "full scale"),
        ("notranscript.wav", "missing_transcript", "notranscript.txt"),
        ("emptytext.wav", "empty_transcript", "metadata.csv line"),
        ("phone.m4a", "unsupported_format", "convert it to WAV or FLAC"),
    ],
)
def test_each_problem_file_has_the_right_reason(report: DataReport, name: str, kind: str, words: str) -> None:
    found_kind, reason = problem_for(report, name)
    assert found_kind == kind
    assert words in reason


def test_metadata_rows_problems_carry_line_numbers(report: DataReport, corpus: Path) -> None:
    rows = {p.reason for p in report.problems if p.path == corpus.resolve() / "metadata.csv"}
    assert "line 12: 'ghost' listed in metadata.csv but no audio file 'ghost.*' found" in rows
    assert any(r.startswith("line 14: expected id|text") for r in rows)
    assert any(r.startswith("line 15: duplicate id 'good_01' (first at line 1)") for r in rows)


def test_stereo_44k_is_usable_and_reported_as_such(report: DataReport) -> None:
    stereo = items_by_name(report)["stereo.wav"]
    assert (stereo.channels, stereo.sample_rate) == (2, 44100)
    assert stereo.duration_s == pytest.approx(1.2, abs=1e-3)
    assert report.voice.sample_rates["44100"] == 1
    assert report.voice.channels["2"] == 1


def test_transcripts_from_normalized_column_flac_stem_sidecar_and_non_ascii(report: DataReport) -> None:
    items = items_by_name(report)
    assert items["good_01.wav"].text == "Hello there, Doctor Who."
    assert items["good_02.wav"].text == "Guten Tag, schöne Grüße aus Köln."
    assert items["good_03.wav"].text == "こんにちは、世界。"
    assert items["flacclip.flac"].text == "This one was converted to FLAC."
    assert items["flacclip.flac"].format == "FLAC"
    assert items["side_01.wav"].text == "Ein Satz mit Umlauten: äöü ß."
    assert items["side_01.wav"].transcript_source == "side_01.lab"
    assert "こ" in report.voice.charset and "ß" in report.voice.charset


def test_summary_counts_hours_and_histograms(report: DataReport) -> None:
    voice = report.voice
    assert (voice.audio_files, voice.usable, voice.skipped, voice.unsupported_files) == (13, 6, 7, 1)
    assert voice.hours_usable == pytest.approx((3 * 1.0 + 1.2 + 0.8 + 0.9) / 3600, rel=1e-3)
    assert voice.hours_all > voice.hours_usable
    assert voice.formats["FLAC/PCM_16"] == 1
    assert voice.sample_rates["22050"] >= 9
    assert report.problem_counts()["unreadable"] == 1


def test_report_json_round_trips_and_items_are_optional(report: DataReport) -> None:
    full = json.loads(json.dumps(report.to_dict()))
    assert full["mode"] == "voice"
    assert len(full["items"]) == 6
    assert {"path", "text", "duration_s", "sample_rate", "channels"} <= set(full["items"][0])
    assert all(set(p) == {"path", "reason", "kind"} for p in full["problems"])
    assert "items" not in report.to_dict(include_items=False)


def test_too_long_and_duplicate_stems(tmp_path: Path) -> None:
    write_voice(tmp_path / "long.wav", 2.0)
    write_voice(tmp_path / "clip.wav", 1.0)
    write_voice(tmp_path / "flac" / "clip.flac", 1.0)
    (tmp_path / "metadata.csv").write_text("long|Long one.\nclip|Same clip twice.\n", encoding="utf-8")
    report = scan_data(tmp_path, max_duration_s=1.5, workers=1)
    assert problem_for(report, "long.wav")[0] == "too_long"
    kinds = sorted(p.kind for p in report.problems if p.path.stem == "clip")
    assert kinds == ["duplicate"] and len(report.items) == 1


def test_ogg_mp3_and_path_style_ids_match_by_stem(tmp_path: Path) -> None:
    write_voice(tmp_path / "audio" / "one.ogg", 1.0, subtype="VORBIS")
    write_voice(tmp_path / "audio" / "two.mp3", 1.0, subtype="MPEG_LAYER_III")
    # Ids written as paths with the old extension still match the converted files by stem.
    (tmp_path / "metadata.csv").write_text("wavs/one.wav|One.\nwavs/two.wav|Two.\n", encoding="utf-8")
    report = scan_data(tmp_path)
    assert report.problems == []
    assert {name: item.text for name, item in items_by_name(report).items()} == {"one.ogg": "One.", "two.mp3": "Two."}
    assert set(report.voice.formats) == {"OGG/VORBIS", "MP3/MPEG_LAYER_III"}


def test_text_folder_counts_jsonl_lines_and_non_utf8(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("first line\nsecond line\n", encoding="utf-8")
    (tmp_path / "b.md").write_bytes("caf\xe9 latin-1\n".encode("latin-1"))
    (tmp_path / "c.jsonl").write_text('{"text": "héllo"}\n{"title": "no text"}\nnot json\n', encoding="utf-8")
    (tmp_path / "d.txt").write_text("   \n", encoding="utf-8")
    report = scan_data(tmp_path)
    assert report.mode == "text" and "no audio" in report.reason
    assert {item.path.name for item in report.items} == {"a.txt", "b.md", "c.jsonl"}
    assert all(isinstance(item, TextItem) for item in report.items)
    assert report.text.jsonl_lines_without_text == 2
    assert report.text.non_utf8_files == 1
    assert {w.path.name for w in report.warnings} == {"b.md", "c.jsonl"}
    assert problem_for(report, "d.txt")[0] == "empty"
    jsonl = next(item for item in report.items if item.path.name == "c.jsonl")
    assert jsonl.text_bytes == len("héllo".encode())


def test_auto_falls_back_to_text_when_audio_has_no_transcripts(tmp_path: Path) -> None:
    write_voice(tmp_path / "a.wav", 1.0)
    write_voice(tmp_path / "b.wav", 1.0)
    (tmp_path / "corpus.txt").write_text("Some text to learn from.\n", encoding="utf-8")
    report = scan_data(tmp_path)
    assert report.mode == "text"
    assert "none of the 2 audio files is usable (2 missing transcript)" in report.reason


def test_transcript_sidecars_and_metadata_are_not_a_text_corpus(tmp_path: Path) -> None:
    (tmp_path / "a.wav").write_bytes(b"not audio at all" * 10)
    (tmp_path / "a.txt").write_text("A transcript.", encoding="utf-8")
    (tmp_path / "metadata.csv").write_text("a|A transcript.\n", encoding="utf-8")
    with pytest.raises(DataError, match=r"no audio with transcripts and no \.txt/\.md/\.jsonl files") as info:
        scan_data(tmp_path)
    assert "1 unreadable" in str(info.value)


def test_auto_error_lists_what_was_found(tmp_path: Path) -> None:
    for name in ["a.png", "b.png", "c.png", "d.zip"]:
        (tmp_path / name).write_bytes(b"x")
    with pytest.raises(DataError) as info:
        scan_data(tmp_path)
    message = str(info.value)
    assert f"no audio with transcripts and no .txt/.md/.jsonl files in {tmp_path.resolve()}" in message
    assert "found 3 .png, 1 .zip" in message


def test_missing_and_empty_folders_are_named(tmp_path: Path) -> None:
    missing = tmp_path / "nope"
    with pytest.raises(DataError, match=f"{missing}.*does not exist"):
        scan_data(missing)
    empty = tmp_path / "empty"
    (empty / ".hidden").mkdir(parents=True)
    (empty / ".DS_Store").write_bytes(b"x")
    with pytest.raises(DataError, match=f"{empty}.*is empty"):
        scan_data(empty)


def test_explicit_voice_without_transcripts_says_why(tmp_path: Path) -> None:
    for index in range(3):
        write_voice(tmp_path / f"clip_{index}.wav", 0.6, seed=index)
    (tmp_path / "notes.txt").write_text("text that would do for text mode", encoding="utf-8")
    with pytest.raises(DataError) as info:
        scan_data(tmp_path, mode="voice")
    message = str(info.value)
    assert "none of the 3 audio files" in message and "3 missing transcript" in message
    assert "metadata.csv" in message


def test_explicit_voice_without_audio_and_text_without_text(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("hello", encoding="utf-8")
    with pytest.raises(DataError, match=r"voice mode needs audio .* has none: found 1 \.txt"):
        scan_data(tmp_path, mode="voice")
    voice_only = tmp_path / "voice"
    write_voice(voice_only / "a.wav", 0.6)
    (voice_only / "a.txt").write_text("A transcript.", encoding="utf-8")
    with pytest.raises(DataError, match="text mode needs .txt/.md/.jsonl files"):
        scan_data(voice_only, mode="text")


def test_estimate_preload_bytes_counts_audio_mels_and_text(tmp_path: Path) -> None:
    write_voice(tmp_path / "a.wav", 1.0, sr=16000)
    (tmp_path / "a.txt").write_text("abc", encoding="utf-8")
    report = scan_data(tmp_path, mode="voice")
    samples = 22050  # one second resampled to the target rate
    expected = 4 * samples + 4 * 80 * (samples // 256 + 1) + 3
    assert estimate_preload_bytes(report, 22050, 256, 80) == expected
