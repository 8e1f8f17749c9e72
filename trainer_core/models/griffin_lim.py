"""Griffin-Lim vocoder in torch: log-mel spectrograms back to audio, and 16-bit WAV writing.

The acoustic model predicts natural-log mel power clamped at a floor (`audio.log_floor`), computed
from a power spectrogram with librosa's mel filterbank, as in `trainer_core.data.mel`. Inversion
undoes each step: exp (values at the floor become silence), a non-negative least-squares mel ->
linear-frequency power inverse (projected gradient from the clamped pseudo-inverse), its square root
as magnitudes, then Griffin-Lim phase reconstruction with momentum and the same STFT parameters.
Everything runs in torch on the input's device (a GPU too), and nothing here imports librosa: a cold
`synth` stays short. Not a neural vocoder, but it makes samples audible with nothing to download.
"""

from __future__ import annotations

import io
import math
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from trainer_core.atomic import write_whole
from trainer_core.contract.errors import VegaError

if TYPE_CHECKING:
    import torch

    from trainer_core.contract.profile_audio import AudioSection

# Peak level of written samples: loud enough to hear, with headroom against clipping.
PEAK_LEVEL = 0.9
# librosa's default: the "fast Griffin-Lim" momentum that converges in far fewer iterations.
MOMENTUM = 0.99
# Projected-gradient steps refining the pseudo-inverse towards the
# non-negative least-squares answer.
NNLS_STEPS = 50
# Log-mel values this close to log(floor) count as the floor (float32 rounding).
FLOOR_TOLERANCE = 1e-5


def mel_power(log_mel: np.ndarray, log_floor: float) -> np.ndarray:
    """Undo log(max(mel, floor)): mel power, with anything at or below the floor as silence."""
    power = np.exp(log_mel.astype(np.float64))
    return np.where(power > log_floor, power, 0.0)


def mel_to_audio(log_mel, audio_cfg: AudioSection, n_iter: int = 32) -> np.ndarray:
    """(n_mels, T) log-mel (numpy or tensor, on any device) -> float32 mono
    audio at `audio_cfg.sample_rate`."""
    magnitude = log_mel_to_magnitude(log_mel, audio_cfg)
    return griffin_lim(magnitude, audio_cfg, n_iter).cpu().numpy().astype(np.float32)


def log_mel_to_magnitude(log_mel, audio_cfg: AudioSection) -> torch.Tensor:
    """(n_mels, T) log-mel (numpy or tensor) -> (1 + n_fft // 2, T) linear
    magnitude for Griffin-Lim."""
    import torch

    mel = (
        log_mel.detach().float()
        if isinstance(log_mel, torch.Tensor)
        else torch.from_numpy(np.asarray(log_mel))
    )
    if mel.dim() != 2 or mel.shape[0] != audio_cfg.n_mels:
        raise VegaError(
            f"expected a ({audio_cfg.n_mels}, frames) mel spectrogram, got shape {tuple(mel.shape)}"
        )
    mel = mel.float()
    # Judged in the log domain: exp(log(floor)) in float32 lands a hair above the floor.
    at_floor = mel <= math.log(audio_cfg.log_floor) + FLOOR_TOLERANCE
    power = torch.where(at_floor, torch.zeros_like(mel), torch.exp(mel))
    return mel_power_to_magnitude(power, audio_cfg)


@lru_cache(maxsize=8)
def _inverse_parts(sample_rate: int, n_fft: int, n_mels: int, f_min: float, f_max: float | None):
    import torch

    from trainer_core.data.mel_filters import mel_filterbank

    basis = torch.from_numpy(mel_filterbank(sample_rate, n_fft, n_mels, f_min, f_max)).double()
    # 1 / Lipschitz constant of the gradient
    step = 1.0 / float(torch.linalg.matrix_norm(basis, ord=2) ** 2)
    return basis.float(), torch.linalg.pinv(basis).float(), step


def mel_power_to_magnitude(power: torch.Tensor, a: AudioSection) -> torch.Tensor:
    """(n_mels, T) mel power -> (1 + n_fft // 2, T) linear magnitude, non-negative least squares."""
    import torch

    basis, pinv, step = (
        x.to(power.device) if isinstance(x, torch.Tensor) else x
        for x in _inverse_parts(a.sample_rate, a.n_fft, a.n_mels, a.f_min, a.f_max)
    )
    linear = (pinv @ power).clamp_(min=0.0)
    for _ in range(NNLS_STEPS):
        linear = (linear - step * (basis.T @ (basis @ linear - power))).clamp_(min=0.0)
    return linear.sqrt()


def griffin_lim(magnitude: torch.Tensor, a: AudioSection, n_iter: int) -> torch.Tensor:
    """Phase for a (bins, T) magnitude by fast Griffin-Lim (seeded random
    start); returns the 1-D wave."""
    import torch

    window = torch.hann_window(a.win_length, periodic=True, device=magnitude.device)

    def istft(spec: torch.Tensor) -> torch.Tensor:
        return torch.istft(
            spec,
            n_fft=a.n_fft,
            hop_length=a.hop_length,
            win_length=a.win_length,
            window=window,
            center=True,
        )

    def stft(wave: torch.Tensor) -> torch.Tensor:
        return torch.stft(
            wave,
            n_fft=a.n_fft,
            hop_length=a.hop_length,
            win_length=a.win_length,
            window=window,
            center=True,
            pad_mode="constant",
            return_complex=True,
        )

    generator = torch.Generator(device="cpu").manual_seed(0)
    phase = torch.rand(magnitude.shape, generator=generator).to(magnitude.device)
    angles = torch.polar(torch.ones_like(magnitude), 2 * torch.pi * phase)
    previous = torch.zeros_like(angles)
    for _ in range(n_iter):
        rebuilt = stft(istft(magnitude * angles))
        angles = rebuilt.sub(previous, alpha=MOMENTUM / (1 + MOMENTUM))
        angles.div_(angles.abs().add_(1e-16))  # in place: this loop is most of a sentence's cost
        previous = rebuilt
    return istft(magnitude * angles)


def normalise_peak(audio: np.ndarray, level: float = PEAK_LEVEL) -> np.ndarray:
    """Scale so the loudest sample is at `level` (silence stays silence)."""
    peak = float(np.max(np.abs(audio))) if audio.size else 0.0
    return audio if peak == 0.0 else audio * (level / peak)


def write_wav(path: str | Path, audio: np.ndarray, sample_rate: int) -> Path:
    """Mono float audio as 16-bit PCM WAV (peak-normalised), atomically; makes the folder."""
    import soundfile

    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        buffer = io.BytesIO()
        peaked = normalise_peak(np.asarray(audio, dtype=np.float32))
        soundfile.write(buffer, peaked, sample_rate, subtype="PCM_16", format="WAV")
        write_whole(path, buffer.getvalue(), "sample_write")  # a kill never leaves a torn sample
    except (OSError, RuntimeError) as exc:
        raise VegaError(f"could not write {path}: {exc}") from exc
    return path
