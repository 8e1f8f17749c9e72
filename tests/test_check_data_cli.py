"""`trainer-core check-data` through a real subprocess: JSON shape, exit codes, clean errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import soundfile as sf

TEST_VOICE = Path(__file__).parent / "fixtures" / "voice"


def check_data(*args: str | Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "trainer_core", "check-data", *map(str, args)]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def make_small_voice_folder(root: Path) -> Path:
    """Two usable clips listed in metadata.csv and one clip with no transcript."""
    sr = 16000
    t = np.arange(sr) / sr
    for index, name in enumerate(["one", "two", "orphan"]):
        tone = 0.4 * np.sin(2 * np.pi * (150 + 50 * index) * t)
        sf.write(str(root / f"{name}.wav"), tone.astype(np.float32), sr, subtype="PCM_16")
    (root / "metadata.csv").write_text("one|First clip.\ntwo|Second clip.\n", encoding="utf-8")
    return root


def test_json_output_shape_without_and_with_items(tmp_path: Path) -> None:
    folder = make_small_voice_folder(tmp_path)
    result = check_data(folder, "--json")
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert {"path", "mode", "reason", "summary", "problems", "warnings"} <= set(report)
    assert "items" not in report
    assert report["mode"] == "voice"
    assert report["summary"]["voice"]["usable"] == 2
    assert report["summary"]["voice"]["sample_rates"] == {"16000": 3}
    assert [(Path(p["path"]).name, p["kind"]) for p in report["problems"]] == [("orphan.wav", "missing_transcript")]

    with_items = json.loads(check_data(folder, "--json", "--items").stdout)
    assert sorted(item["text"] for item in with_items["items"]) == ["First clip.", "Second clip."]
    assert all(item["sample_rate"] == 16000 and item["channels"] == 1 for item in with_items["items"])


def test_duration_and_mode_options_are_applied(tmp_path: Path) -> None:
    folder = make_small_voice_folder(tmp_path)
    result = check_data(folder, "--json", "--max-duration", "0.5", "--min-duration", "0.1")
    assert result.returncode == 2
    assert "none of the 3 audio files" in result.stderr and "too long" in result.stderr
    text_mode = check_data(folder, "--data-mode", "text")
    assert text_mode.returncode == 2
    assert "text mode needs .txt/.md/.jsonl files" in text_mode.stderr


def test_missing_folder_exits_2_without_traceback(tmp_path: Path) -> None:
    missing = tmp_path / "does-not-exist"
    result = check_data(missing, "--json")
    assert result.returncode == 2
    assert result.stdout == ""
    assert result.stderr.startswith("error: ")
    assert str(missing) in result.stderr
    assert "Traceback" not in result.stderr


def test_nothing_usable_lists_what_was_found(tmp_path: Path) -> None:
    (tmp_path / "photo.png").write_bytes(b"\x89PNG")
    (tmp_path / "archive.zip").write_bytes(b"PK")
    result = check_data(tmp_path)
    assert result.returncode == 2
    assert "found 1 .png, 1 .zip" in result.stderr or "found 1 .zip, 1 .png" in result.stderr
    assert "Traceback" not in result.stderr


def test_human_output_on_the_demo_corpus(tmp_path: Path) -> None:
    result = check_data(TEST_VOICE)
    assert result.returncode == 0, result.stderr
    assert "Summary" in result.stdout
    assert "voice, because the folder has audio with transcripts" in result.stdout
    assert "22050 Hz" in result.stdout
    assert "Skipped" not in result.stdout
