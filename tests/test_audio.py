"""Decoding recordings into training audio: downmix, resample, trim, normalise, and clear decode errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf

from trainer_core.contract.errors import VegaError
from trainer_core.data.audio import (
    AudioDecodeError,
    decode_calls,
    frame_energies,
    load_audio,
    read_samples,
    running_frame_energies,
    trim_bounds,
)

DEMO_WAVS = Path(__file__).parent / "fixtures" / "voice" / "wavs"


def tone(seconds: float, sr: int, freq: float = 440.0, amplitude: float = 0.5) -> np.ndarray:
    t = np.arange(int(seconds * sr)) / sr
    return (amplitude * np.sin(2 * np.pi * freq * t)).astype(np.float32)


def dominant_frequency(wave: np.ndarray, sr: int) -> float:
    spectrum = np.abs(np.fft.rfft(wave * np.hanning(len(wave))))
    return float(np.fft.rfftfreq(len(wave), 1 / sr)[np.argmax(spectrum)])


def test_demo_wav_decodes_to_float32_mono_in_range() -> None:
    path = DEMO_WAVS / "demo_001.wav"
    raw, sr = sf.read(path, dtype="float32")
    wave = load_audio(path, 22050)
    assert sr == 22050 and wave.dtype == np.float32 and wave.ndim == 1
    assert np.abs(wave).max() <= 1.0
    # The demo files carry a little padding: trimming shortens them, never to nothing.
    assert 0.5 * len(raw) < len(wave) <= len(raw)
    untrimmed = load_audio(path, 22050, trim_silence=False)
    np.testing.assert_array_equal(untrimmed, raw)


def test_stereo_44k_is_averaged_to_mono_and_resampled_to_22k(tmp_path: Path) -> None:
    left, right = tone(1.0, 44100, amplitude=0.6), tone(1.0, 44100, amplitude=0.2)
    path = tmp_path / "stereo.wav"
    sf.write(path, np.stack([left, right], axis=1), 44100, subtype="PCM_16")
    wave = load_audio(path, 22050, trim_silence=False)
    assert len(wave) == 22050
    assert dominant_frequency(wave, 22050) == pytest.approx(440.0, abs=2.0)
    # The mean of 0.6 and 0.2 amplitude channels in phase: 0.4 (taking one channel would give 0.6 or 0.2).
    assert np.abs(wave[1000:-1000]).max() == pytest.approx(0.4, abs=0.01)


def test_channels_in_antiphase_cancel_when_averaged(tmp_path: Path) -> None:
    left = tone(0.5, 22050)
    path = tmp_path / "antiphase.flac"
    sf.write(path, np.stack([left, -left], axis=1), 22050, subtype="PCM_16")
    assert np.abs(load_audio(path, 22050, trim_silence=False)).max() < 1e-3


def test_8bit_48k_file_is_converted(tmp_path: Path) -> None:
    path = tmp_path / "old.wav"
    sf.write(path, tone(0.8, 48000, freq=300.0), 48000, subtype="PCM_U8")
    wave = load_audio(path, 22050, trim_silence=False)
    assert len(wave) == round(0.8 * 22050)
    assert dominant_frequency(wave, 22050) == pytest.approx(300.0, abs=3.0)


def test_leading_and_trailing_silence_are_trimmed(tmp_path: Path) -> None:
    sr = 22050
    speechlike = tone(1.0, sr, freq=220.0, amplitude=0.5)
    padded = np.concatenate([np.zeros(sr // 2, np.float32), speechlike, np.zeros(int(0.7 * sr), np.float32)])
    path = tmp_path / "padded.wav"
    sf.write(path, padded, sr, subtype="FLOAT")
    wave = load_audio(path, sr, trim_silence=True, top_db=40.0)
    # Frames are 2048 samples centred on a 512-sample hop: a cut lands within half a frame plus a hop.
    start, end = trim_bounds(padded, 40.0)
    assert abs(start - sr // 2) <= 1536 and abs(end - (sr // 2 + sr)) <= 1536
    assert len(wave) == end - start


def test_trim_cut_points_match_librosa_on_real_speech() -> None:
    import librosa

    raw, _ = sf.read(DEMO_WAVS / "demo_007.wav", dtype="float32")
    hiss = 1e-4 * np.random.default_rng(0).standard_normal(9000).astype(np.float32)
    noisy = np.concatenate([np.zeros(5000, np.float32), raw, hiss])
    for top_db in (30.0, 40.0, 60.0):
        _, expected = librosa.effects.trim(noisy, top_db=top_db)
        assert trim_bounds(noisy, top_db) == (int(expected[0]), int(expected[1]))


def test_digital_silence_is_left_alone_and_normalize_sets_the_peak(tmp_path: Path) -> None:
    assert trim_bounds(np.zeros(4000, np.float32), 40.0) == (0, 4000)
    path = tmp_path / "quiet.wav"
    sf.write(path, tone(0.5, 22050, amplitude=0.1), 22050, subtype="PCM_16")
    wave = load_audio(path, 22050, trim_silence=False, normalize=True)
    assert np.abs(wave).max() == pytest.approx(0.95, abs=1e-4)


def test_undecodable_and_empty_files_raise_errors_naming_them(tmp_path: Path) -> None:
    garbage = tmp_path / "garbage.wav"
    garbage.write_bytes(b"RIFF\x00\x00\x00\x00WAVEnot really audio" * 3)
    with pytest.raises(AudioDecodeError, match="garbage.wav") as caught:
        load_audio(garbage, 22050)
    assert isinstance(caught.value, VegaError)
    empty = tmp_path / "empty.wav"
    sf.write(empty, np.zeros(0, np.float32), 22050, subtype="PCM_16")
    with pytest.raises(AudioDecodeError, match="empty.wav.*no samples"):
        load_audio(empty, 22050)
    with pytest.raises(AudioDecodeError, match="missing.wav"):
        load_audio(tmp_path / "missing.wav", 22050)


def test_each_decode_is_counted() -> None:
    before = decode_calls()
    load_audio(DEMO_WAVS / "demo_002.wav", 22050)
    assert decode_calls() == before + 1


@pytest.mark.parametrize("channels", [1, 2])
def test_16_bit_pcm_read_as_int16_gives_libsndfile_float_samples(tmp_path: Path, channels: int) -> None:
    path = tmp_path / "pcm16.wav"
    wave = np.repeat(tone(0.3, 16000, amplitude=0.9)[:, None], channels, axis=1)
    wave[:5] = [[-1.0] * channels, [1.0] * channels, [0.0] * channels, [-0.5] * channels, [3e-5] * channels]
    sf.write(path, wave, 16000, subtype="PCM_16")
    ours, rate = read_samples(path)
    reference, _ = sf.read(path, dtype="float32", always_2d=True)
    assert rate == 16000 and ours.dtype == np.float32
    np.testing.assert_array_equal(ours, reference)


@pytest.mark.parametrize("length", [1, 511, 512, 513, 2048, 2049, 30001])
def test_block_frame_energies_equal_the_running_sum_ones(length: int) -> None:
    wave = np.random.default_rng(length).standard_normal(length).astype(np.float32)
    fast = frame_energies(wave, 2048, 512)
    np.testing.assert_allclose(fast, running_frame_energies(wave, 2048, 512), rtol=1e-5, atol=1e-12)
    # Frame and hop lengths that do not tile fall back to the running sum.
    assert len(frame_energies(wave, 1000, 300)) == 1 + (length + 1000 - 1000) // 300
