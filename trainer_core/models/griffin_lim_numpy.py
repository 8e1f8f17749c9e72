"""Griffin-Lim in numpy alone: log-mels back to audio where torch is not installed (`synth --onnx`
of a voice exported without a vocoder).

The same steps as the torch version (`trainer_core.models.griffin_lim`): values at the log floor
become silence, mel power goes back to linear-frequency power by non-negative least squares
(projected gradient from the clamped pseudo-inverse), its square root is the magnitude, and fast
Griffin-Lim (momentum 0.99, a seeded random start) finds a phase. The STFT and its inverse match
`torch.stft` / `torch.istft` with `center=True` and zero padding. The random start comes from
numpy's generator, so the wave is not the torch version's sample for sample.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from trainer_core.contract.errors import VegaError
from trainer_core.contract.profile_audio import AudioSection
from trainer_core.data.mel_filters import mel_filterbank

# As in trainer_core.models.griffin_lim: the momentum, the least-squares
# refinement and the floor judgement.
MOMENTUM = 0.99
NNLS_STEPS = 50
FLOOR_TOLERANCE = 1e-5
# Where the summed squared windows fall below this, samples are left
# undivided (torch.istft would refuse).
ENVELOPE_FLOOR = 1e-11


def hann_window(win_length: int, n_fft: int) -> np.ndarray:
    """Periodic Hann window of `win_length` centred in `n_fft` samples
    (torch.hann_window, as torch.stft pads it)."""
    window = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(win_length) / win_length)
    full = np.zeros(n_fft)
    left = (n_fft - win_length) // 2
    full[left : left + win_length] = window
    return full


def stft(wave: np.ndarray, n_fft: int, hop: int, window: np.ndarray) -> np.ndarray:
    """(S,) wave -> (n_fft // 2 + 1, 1 + S // hop) complex spectrum, frames
    centred (zero padding)."""
    padded = np.pad(wave, n_fft // 2)
    frames = np.lib.stride_tricks.sliding_window_view(padded, n_fft)[::hop]
    return np.fft.rfft(frames * window, axis=1).T


def istft(spectrum: np.ndarray, n_fft: int, hop: int, window: np.ndarray) -> np.ndarray:
    """Inverse of `stft`: (bins, T) -> (hop * (T - 1),) wave, windowed overlap-add
    divided by the window envelope."""
    frames = np.fft.irfft(spectrum.T, n=n_fft, axis=1) * window
    wave = _overlap_add(frames, hop)
    envelope = _overlap_add(np.broadcast_to(window**2, frames.shape), hop)
    wave = wave / np.where(envelope > ENVELOPE_FLOOR, envelope, 1.0)
    half = n_fft // 2
    return wave[half : len(wave) - half]


def _overlap_add(frames: np.ndarray, hop: int) -> np.ndarray:
    """(T, n) frames, frame t starting at sample t * hop -> (n + hop * (T - 1),)
    sum; one pass per hop-wide slice."""
    count, width = frames.shape
    out = np.zeros(width + hop * count, dtype=frames.dtype)
    for start in range(0, width, hop):
        piece = frames[:, start : start + hop]
        out[start : start + hop * count].reshape(count, hop)[:, : piece.shape[1]] += piece
    return out[: width + hop * (count - 1)]


@lru_cache(maxsize=8)
def _inverse_parts(
    sample_rate: int, n_fft: int, n_mels: int, f_min: float, f_max: float | None
) -> tuple[np.ndarray, np.ndarray, float]:
    basis = mel_filterbank(sample_rate, n_fft, n_mels, f_min, f_max).astype(np.float64)
    step = 1.0 / float(np.linalg.norm(basis, ord=2) ** 2)  # 1 / Lipschitz constant of the gradient
    return basis, np.linalg.pinv(basis), step


def mel_power_to_magnitude(power: np.ndarray, a: AudioSection) -> np.ndarray:
    """(n_mels, T) mel power -> (1 + n_fft // 2, T) linear magnitude, non-negative least squares."""
    basis, pinv, step = _inverse_parts(a.sample_rate, a.n_fft, a.n_mels, a.f_min, a.f_max)
    linear = np.maximum(pinv @ power, 0.0)
    for _ in range(NNLS_STEPS):
        linear = np.maximum(linear - step * (basis.T @ (basis @ linear - power)), 0.0)
    return np.sqrt(linear)


def griffin_lim(magnitude: np.ndarray, a: AudioSection, n_iter: int) -> np.ndarray:
    """Phase for a (bins, T) magnitude by fast Griffin-Lim from a seeded
    random start; returns the 1-D wave."""
    window = hann_window(a.win_length, a.n_fft)
    phase = np.random.default_rng(0).random(magnitude.shape)
    angles = np.exp(2j * np.pi * phase)
    previous = np.zeros_like(angles)
    for _ in range(n_iter):
        rebuilt = stft(
            istft(magnitude * angles, a.n_fft, a.hop_length, window), a.n_fft, a.hop_length, window
        )
        angles = rebuilt - previous * (MOMENTUM / (1 + MOMENTUM))
        angles /= np.abs(angles) + 1e-16
        previous = rebuilt
    return istft(magnitude * angles, a.n_fft, a.hop_length, window)


def mel_to_audio(log_mel: np.ndarray, a: AudioSection, n_iter: int = 32) -> np.ndarray:
    """(n_mels, T) log-mel -> float32 mono audio at `a.sample_rate`."""
    mel = np.asarray(log_mel, dtype=np.float64)
    if mel.ndim != 2 or mel.shape[0] != a.n_mels:
        raise VegaError(f"expected a ({a.n_mels}, frames) mel spectrogram, got shape {mel.shape}")
    # Judged in the log domain: exp(log(floor)) in float32 lands a hair above the floor.
    power = np.where(mel <= math.log(a.log_floor) + FLOOR_TOLERANCE, 0.0, np.exp(mel))
    return griffin_lim(mel_power_to_magnitude(power, a), a, n_iter).astype(np.float32)
