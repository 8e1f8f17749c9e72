"""Griffin-Lim vocoder: log-mel spectrograms back to audio, and 16-bit WAV writing.

The acoustic model predicts natural-log mel power clamped at a floor (`audio.log_floor`), computed
from a power spectrogram with librosa's mel filterbank, as in `trainer_core.data.mel`. Inversion undoes
each step: exp (values at the floor become silence), a non-negative least-squares mel -> linear-frequency power inverse
(librosa.feature.inverse.mel_to_stft, which takes the square root to magnitudes), then Griffin-Lim
phase reconstruction with the same STFT parameters. Not a neural vocoder, but it makes samples
audible with nothing to download.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from trainer_core.errors import VegaError

if TYPE_CHECKING:
    from trainer_core.profile import AudioSection

# Peak level of written samples: loud enough to hear, with headroom against clipping.
PEAK_LEVEL = 0.9


def mel_power(log_mel: np.ndarray, log_floor: float) -> np.ndarray:
    """Undo log(max(mel, floor)): mel power, with anything at or below the floor as silence."""
    power = np.exp(log_mel.astype(np.float64))
    return np.where(power > log_floor, power, 0.0)


def mel_to_audio(log_mel, audio_cfg: AudioSection, n_iter: int = 32) -> np.ndarray:
    """(n_mels, T) log-mel (numpy or tensor) -> float32 mono audio at `audio_cfg.sample_rate`."""
    import librosa

    log_mel = log_mel.detach().float().cpu().numpy() if hasattr(log_mel, "detach") else np.asarray(log_mel)
    if log_mel.ndim != 2 or log_mel.shape[0] != audio_cfg.n_mels:
        raise VegaError(f"expected a ({audio_cfg.n_mels}, frames) mel spectrogram, got shape {log_mel.shape}")
    a = audio_cfg
    power = mel_power(log_mel, a.log_floor)
    magnitude = librosa.feature.inverse.mel_to_stft(
        power, sr=a.sample_rate, n_fft=a.n_fft, power=2.0, fmin=a.f_min, fmax=a.f_max
    )
    audio = librosa.griffinlim(
        magnitude, n_iter=n_iter, hop_length=a.hop_length, win_length=a.win_length, n_fft=a.n_fft,
        window="hann", center=True, random_state=0,
    )
    return audio.astype(np.float32)


def normalise_peak(audio: np.ndarray, level: float = PEAK_LEVEL) -> np.ndarray:
    """Scale so the loudest sample is at `level` (silence stays silence)."""
    peak = float(np.max(np.abs(audio))) if audio.size else 0.0
    return audio if peak == 0.0 else audio * (level / peak)


def write_wav(path: str | Path, audio: np.ndarray, sample_rate: int) -> Path:
    """Write mono float audio as 16-bit PCM WAV (peak-normalised); creates the parent folder."""
    import soundfile

    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        soundfile.write(str(path), normalise_peak(np.asarray(audio, dtype=np.float32)), sample_rate, subtype="PCM_16")
    except (OSError, RuntimeError) as exc:
        raise VegaError(f"could not write {path}: {exc}") from exc
    return path
