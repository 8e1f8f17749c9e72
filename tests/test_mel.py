"""Log-mel features: parity with librosa on real speech and a chirp, batching, frame counts."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import soundfile as sf
import torch

from trainer_core.contract.profile_audio import AudioSection
from trainer_core.data.librosa_mel import librosa_power_mel
from trainer_core.data.mel import MelExtractor, filter_bands, mel_filterbank

DEMO_WAVS = Path(__file__).parent / "fixtures" / "voice" / "wavs"


def chirp(seconds: float, sr: int, f0: float = 60.0, f1: float = 7000.0) -> np.ndarray:
    """A linear sweep from f0 to f1 Hz fading out, over faint noise so that every mel band has energy."""
    t = np.arange(int(seconds * sr)) / sr
    phase = 2 * np.pi * (f0 * t + (f1 - f0) * t**2 / (2 * seconds))
    noise = 0.003 * np.random.default_rng(7).standard_normal(len(t))
    return (0.6 * np.sin(phase) * np.linspace(1.0, 0.2, len(t)) + noise).astype(np.float32)


def librosa_log_mel(wave: np.ndarray, audio: AudioSection) -> np.ndarray:
    return librosa_power_mel(wave, audio)


def assert_matches_librosa(wave: np.ndarray, audio: AudioSection) -> None:
    ours = MelExtractor(audio, torch.device("cpu"), precision="float64")([wave])[0].numpy()
    reference = librosa_log_mel(wave, audio)
    assert ours.shape == reference.shape
    np.testing.assert_allclose(ours, np.log(np.maximum(reference, audio.log_floor)), rtol=0, atol=1e-5)
    # The issue asks for a relative error of the mel power below 1e-4 wherever the reference is above the
    # floor; the float64 STFT gives ~1e-6, so hold it to 1e-5 (the float32 default is checked below).
    above = reference > audio.log_floor
    assert above.mean() > 0.5
    relative = np.abs(np.exp(ours[above]) - reference[above]) / reference[above]
    assert relative.max() < 1e-5


@pytest.mark.parametrize("name", ["demo_001.wav", "demo_023.wav"])
def test_matches_librosa_on_demo_speech(name: str) -> None:
    wave, sr = sf.read(DEMO_WAVS / name, dtype="float32")
    assert_matches_librosa(wave, AudioSection(sample_rate=sr))


def test_matches_librosa_on_a_chirp() -> None:
    assert_matches_librosa(chirp(1.5, 22050), AudioSection())


def test_matches_librosa_with_a_short_window_full_band_and_16k() -> None:
    # win_length < n_fft: both centre the window inside the FFT frame; f_max None means Nyquist.
    audio = AudioSection(sample_rate=16000, n_fft=512, hop_length=160, win_length=400, n_mels=64, f_max=None)
    assert_matches_librosa(chirp(1.0, 16000, f1=7800.0), audio)


@pytest.mark.parametrize("name", ["demo_001.wav", "demo_023.wav"])
def test_float32_default_stays_close_to_float64_and_librosa(name: str) -> None:
    wave, sr = sf.read(DEMO_WAVS / name, dtype="float32")
    audio = AudioSection(sample_rate=sr)
    ours = MelExtractor(audio, torch.device("cpu"))([wave])[0].numpy()
    wide = MelExtractor(audio, torch.device("cpu"), precision="float64")([wave])[0].numpy()
    reference = librosa_log_mel(wave, audio)
    assert ours.dtype == np.float32 and ours.shape == wide.shape == reference.shape
    above = reference > audio.log_floor
    for other in (wide, np.log(np.maximum(reference, audio.log_floor))):
        # A float32 FFT: ~1e-4 relative in quiet bands next to loud ones, i.e. ~1e-4 in the log domain.
        np.testing.assert_allclose(ours, other, rtol=0, atol=5e-4)
    relative = np.abs(np.exp(ours[above].astype(np.float64)) - reference[above]) / reference[above]
    assert relative.max() < 5e-4


def test_banded_projection_equals_the_dense_filterbank() -> None:
    audio = AudioSection(n_mels=64, f_max=None)
    filterbank = mel_filterbank(audio)
    bands = filter_bands(filterbank, per_band=7)
    assert [b[0] for b in bands] == list(range(0, 64, 7)) and bands[-1][1] == 64
    # Every non-zero weight lies inside its group's bins, so skipping the rest loses nothing.
    for first, end, lo, hi in bands:
        assert not filterbank[first:end, :lo].any() and not filterbank[first:end, hi:].any()
    wave = chirp(0.7, 22050)
    power = np.abs(np.fft.rfft(wave[:1024] * np.hanning(1024))) ** 2
    dense = filterbank @ power
    banded = np.concatenate([filterbank[f:e, lo:hi] @ power[lo:hi] for f, e, lo, hi in bands])
    np.testing.assert_allclose(banded, dense, rtol=1e-5)


def test_unknown_precision_is_refused() -> None:
    with pytest.raises(ValueError, match="precision"):
        MelExtractor(AudioSection(), "cpu", precision="float16")  # type: ignore[arg-type]


@pytest.mark.parametrize(("precision", "atol"), [("float64", 0.0), ("float32", 1e-5)])
def test_batched_equals_one_by_one_and_frames_follow_the_length(precision: str, atol: float) -> None:
    extractor = MelExtractor(AudioSection(), torch.device("cpu"), precision=precision)  # type: ignore[arg-type]
    speech, _ = sf.read(DEMO_WAVS / "demo_002.wav", dtype="float32")
    waves = [speech, chirp(0.4, 22050), speech[:700], chirp(2.0, 22050), speech[:300]]
    batched = extractor(waves)
    for wave, mel in zip(waves, batched, strict=True):
        alone = extractor([wave])[0]
        assert mel.shape == (80, extractor.frames_for(len(wave))) == (80, 1 + len(wave) // 256)
        assert mel.dtype == torch.float32 and mel.device.type == "cpu" and mel.is_contiguous()
        # float32 matmuls block differently for other frame counts (last-bit differences); the preload
        # transforms every file alone, so its features never depend on batch-mates.
        torch.testing.assert_close(mel, alone, rtol=0, atol=atol)


def test_silence_sits_at_the_log_floor_and_bad_waves_are_refused() -> None:
    extractor = MelExtractor(AudioSection(log_floor=1e-5), torch.device("cpu"))
    mel = extractor([np.zeros(4000, np.float32)])[0]
    assert torch.all(mel == torch.log(torch.tensor(1e-5)))
    assert extractor.pad_value == pytest.approx(np.log(1e-5))
    assert extractor([]) == []
    with pytest.raises(ValueError, match="wave 1"):
        extractor([np.zeros(100, np.float32), np.zeros(0, np.float32)])


def test_odd_fft_size_frame_count_matches_librosa() -> None:
    audio = AudioSection(n_fft=1023, win_length=1023, hop_length=200)
    wave = chirp(0.5, 22050)
    ours = MelExtractor(audio, torch.device("cpu"))([wave])[0]
    assert ours.shape[1] == librosa_log_mel(wave, audio).shape[1]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_features_match_the_cpu_ones() -> None:
    waves = [sf.read(DEMO_WAVS / f"demo_{i:03d}.wav", dtype="float32")[0] for i in (3, 4, 5)]
    on_cpu = MelExtractor(AudioSection(), torch.device("cpu"))(waves)
    on_gpu = MelExtractor(AudioSection(), torch.device("cuda"))(waves)
    for a, b in zip(on_cpu, on_gpu, strict=True):
        assert b.device.type == "cpu"
        torch.testing.assert_close(a, b, rtol=0, atol=5e-4)  # float32 FFTs of two libraries
