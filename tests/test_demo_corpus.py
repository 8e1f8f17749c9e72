"""The bundled demo voices: big enough to generalise, small on disk, and rebuilt byte for byte by their script."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from conftest import DEMO_VOICE, REPO
from trainer_core.data.scan import scan_data

SPANISH = DEMO_VOICE.parent / "voice-es"


def test_demo_voice_is_at_least_300_clips_and_10_minutes_of_clean_compressed_speech() -> None:
    report = scan_data(DEMO_VOICE)
    assert report.mode == "voice" and report.problems == []
    assert report.voice.usable == report.voice.audio_files >= 300
    assert report.voice.hours_usable * 60 >= 10
    assert report.voice.formats == {"OGG/VORBIS": report.voice.usable}
    assert report.voice.sample_rates == {"22050": report.voice.usable}
    on_disk = sum(p.stat().st_size for p in (DEMO_VOICE / "clips").iterdir())
    assert on_disk < 8 * 2**20  # the package stays small: about 6 MB for 17 minutes


def test_second_speaker_is_a_short_spanish_corpus() -> None:
    report = scan_data(SPANISH)
    assert report.mode == "voice" and report.problems == []
    assert report.voice.usable >= 50 and 1 <= report.voice.hours_usable * 60 <= 5
    texts = (SPANISH / "metadata.csv").read_text(encoding="utf-8")
    assert "ñ" in texts or "á" in texts  # symbols the English corpus does not have


def test_the_script_rebuilds_the_shipped_clips_byte_for_byte(tmp_path: Path) -> None:
    script = REPO / "scripts" / "make_demo_voice.py"
    done = subprocess.run(
        [sys.executable, str(script), "--clips", "12", "--out", str(tmp_path)], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    rebuilt = (tmp_path / "voice" / "metadata.csv").read_text(encoding="utf-8").splitlines()
    assert rebuilt == (DEMO_VOICE / "metadata.csv").read_text(encoding="utf-8").splitlines()[:12]
    for folder, shipped in (("voice", DEMO_VOICE), ("voice-es", SPANISH)):
        made = sorted((tmp_path / folder / "clips").iterdir())
        assert made and all(p.read_bytes() == (shipped / "clips" / p.name).read_bytes() for p in made), folder
