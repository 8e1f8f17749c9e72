"""Voice bad input end to end: a folder holding every kind of problem file still trains on the good ones.

Also: `check-data` and the trainer's `--voice-mode auto` make the same decision on the same folder.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

import trainer_core
from conftest import run_here
from trainer_core.contract.eventlog import read_all

DEMO = Path(trainer_core.__file__).parent / "demo"
TINY_TTS = [
    "model.hidden=32",
    "model.encoder_layers=1",
    "model.decoder_layers=1",
    "model.heads=2",
    "model.ffn_mult=2",
    "train.batch_size=4",
    "train.max_steps=3",
    "train.warmup_steps=1",
    "data.val_fraction=0.2",
    'sample.sentences=["A short test."]',
    "tts.griffin_lim_iters=4",
    'tts.text_units="chars"',
]


def tone(
    path: Path,
    seconds: float,
    sr: int = 22050,
    channels: int = 1,
    subtype: str = "PCM_16",
    amplitude: float = 0.5,
    freq: float = 200.0,
) -> None:
    """A voiced-sounding test signal (a tone with a harmonic and a little noise) as a real audio file."""
    t = np.arange(int(seconds * sr)) / sr
    rng = np.random.default_rng(int(freq))
    mono = np.sin(2 * np.pi * freq * t) + 0.4 * np.sin(4 * np.pi * freq * t) + 0.05 * rng.standard_normal(t.size)
    mono = amplitude * mono / np.abs(mono).max()
    data = np.stack([mono] * channels, axis=1) if channels > 1 else mono
    sf.write(str(path), data.astype(np.float32), sr, subtype=subtype)


def build_bad_folder(root: Path) -> dict[str, str]:
    """Good clips plus one file per bad-input case; returns {file name: expected reason fragment}."""
    wavs = root / "wavs"
    wavs.mkdir(parents=True)
    rows = []
    for i in range(8):  # plain good clips
        tone(wavs / f"good_{i}.wav", 1.0 + 0.1 * i, freq=150 + 20 * i)
        rows.append(f"good_{i}|Good clip number {i}.")
    tone(wavs / "stereo44.wav", 1.2, sr=44100, channels=2)  # converted, not rejected
    tone(wavs / "rate48.wav", 1.1, sr=48000)
    tone(wavs / "eight_bit.wav", 1.3, subtype="PCM_U8")
    rows += ["stereo44|A stereo clip.", "rate48|A clip at forty eight kilohertz.", "eight_bit|An eight bit clip."]
    (wavs / "corrupt.wav").write_bytes(os.urandom(4096))
    (wavs / "empty.wav").write_bytes(b"")
    sf.write(str(wavs / "zero_frames.wav"), np.zeros(0, dtype=np.float32), 22050)
    sf.write(str(wavs / "silent.wav"), np.zeros(22050, dtype=np.float32), 22050)
    sf.write(str(wavs / "clipped.wav"), np.clip(3 * np.sin(np.arange(22050) / 5.0), -1, 1).astype(np.float32), 22050)
    (wavs / "phone.m4a").write_bytes(b"\x00\x00\x00\x18ftypM4A " + os.urandom(64))
    tone(wavs / "no_transcript.wav", 1.0)
    tone(wavs / "half_hour.wav", 30 * 60, sr=8000, subtype="PCM_U8")
    rows += [
        f"{name}|Text for {name}."
        for name in ("corrupt", "empty", "zero_frames", "silent", "clipped", "phone", "half_hour")
    ]
    rows += ["ghost|This line has no audio file.", "four|columns|are|too many"]
    body = ("\n".join(rows) + "\n").encode("utf-8") + b"latin|caf\xe9 au lait\n"
    (root / "metadata.csv").write_bytes(body)
    return {
        "corrupt.wav": "",
        "empty.wav": "empty",
        "zero_frames.wav": "empty",
        "silent.wav": "silent",
        "clipped.wav": "clipped",
        "phone.m4a": "unsupported",
        "no_transcript.wav": "transcript",
        "half_hour.wav": "too long",
        "ghost": "no audio file",
        "4 column": "column",
        "UTF-8": "UTF-8",
    }


def trainer(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    """`trainer-core ARGS` through its entry point in this process (conftest.run_here)."""
    return run_here(dict(os.environ) if env is None else env, *args)


@pytest.fixture
def isolated_env(tmp_path: Path) -> dict:
    (tmp_path / "config").mkdir()
    return {
        **os.environ,
        "VEGA_CONFIG_DIR": str(tmp_path / "config"),
        "NUMBA_CACHE_DIR": os.environ.get("NUMBA_CACHE_DIR", str(tmp_path / "numba")),
    }


def test_every_bad_file_is_listed_with_its_reason_and_the_rest_trains(tmp_path: Path, isolated_env: dict) -> None:
    data = tmp_path / "corpus"
    expected = build_bad_folder(data)
    run_dir = tmp_path / "run"
    sets = [a for s in [*TINY_TTS, f'data.cache_dir="{tmp_path / "cache"}"'] for a in ("--set", s)]
    done = trainer(
        "train",
        "--profile",
        "tts-small",
        "--data",
        str(data),
        "--run-dir",
        str(run_dir),
        "--voice-mode",
        "voice",
        *sets,
        env=isolated_env,
    )
    assert done.returncode == 0, done.stderr
    events = read_all(run_dir / "events.jsonl")
    scan = next(e for e in events if e.type == "data_scan")
    assert scan.usable == 11  # 8 plain clips + stereo 44.1 kHz + 48 kHz + 8-bit, all converted
    reasons = "\n".join(f"{p.path} {p.reason}" for p in scan.problems)
    for name, fragment in expected.items():
        line = next((ln for ln in reasons.splitlines() if name in ln), None)
        assert line is not None, f"{name} not listed:\n{reasons}"
        assert fragment.lower() in line.lower(), line
    too_long = next(ln for ln in reasons.splitlines() if "half_hour" in ln)
    assert "1800.0 s" in too_long and "maximum 20 s" in too_long  # the length and the limit are named
    log = (run_dir / "trainer.log").read_text()
    assert "silent.wav" in log and "half_hour.wav" in log  # skipped files are listed in trainer.log too
    assert events[-1].type == "finished" and events[-1].status == "completed"


@pytest.mark.parametrize("folder", ["voice", "text", "mixed"])
def test_check_data_and_auto_mode_agree(folder: str, tmp_path: Path, isolated_env: dict) -> None:
    if folder == "voice":
        data = Path(__file__).parent / "fixtures" / "voice"
    elif folder == "text":
        data = DEMO / "text" / "corpus"
    else:
        data = tmp_path / "mixed"
        data.mkdir()
        for i in range(3):
            tone(data / f"clip{i}.wav", 1.0)
            (data / f"clip{i}.txt").write_text(f"Clip {i}.", encoding="utf-8")
        (data / "notes.md").write_text("# Notes\nSome prose that is not a transcript.\n", encoding="utf-8")
    scanned = trainer("check-data", str(data), "--json", env=isolated_env)
    assert scanned.returncode == 0, scanned.stderr
    planned = trainer(
        "train",
        "--profile",
        "demo",
        "--data",
        str(data),
        "--voice-mode",
        "auto",
        "--dry-run",
        "--json",
        env=isolated_env,
    )
    assert planned.returncode == 0, planned.stderr
    scan_mode = json.loads(scanned.stdout)["mode"]
    plan_mode = json.loads(planned.stdout)["data"]["mode"]
    assert scan_mode == plan_mode == ("text" if folder == "text" else "voice")
