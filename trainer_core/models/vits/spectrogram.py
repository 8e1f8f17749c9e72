"""Piper's audio features, batched on the waves' device: linear magnitude spectrograms, log-mels.

A clip of S samples is reflect-padded by (n_fft - hop) / 2 on each side over its own length and cut
into S // hop frames of a Hann-windowed STFT (not centred); the magnitude is sqrt(re^2 + im^2 +
1e-6). In a zero-padded batch each item is padded over its own length, so an item gives the frames
it gives alone, and the frames past its end are zero (as Piper's collate leaves them). Log-mels are
log(max(filterbank @ magnitude, 1e-5)) with Vega's Slaney filterbank (`data.mel_filters`, the same
numbers as librosa's). Everything is computed in float32, also under autocast.
"""

from __future__ import annotations

import torch
from torch import Tensor

from trainer_core.data.mel_filters import mel_filterbank

MAGNITUDE_EPS = 1e-6
MEL_FLOOR = 1e-5


def spectrogram_lengths(lengths: Tensor, hop: int) -> Tensor:
    """Frames of clips of `lengths` samples: S // hop."""
    return torch.div(lengths, hop, rounding_mode="floor")


def _reflect_each(waves: Tensor, lengths: Tensor, pad: int) -> Tensor:
    """(B, S) -> (B, S + 2 pad): each item reflect-padded over its own length, zeros after."""
    batch, samples = waves.shape
    lengths = lengths.to(device=waves.device, dtype=torch.long)[:, None]
    source = torch.arange(samples + 2 * pad, device=waves.device)[None, :] - pad
    source = source.abs()
    last = (lengths - 1).clamp(min=0)
    source = torch.where(source > last, 2 * last - source, source)
    inside = torch.arange(samples + 2 * pad, device=waves.device)[None, :] < lengths + 2 * pad
    source = source.clamp(0, max(samples - 1, 0)).expand(batch, -1)
    return waves.gather(1, source) * inside


def linear_spectrogram(waves: Tensor, lengths: Tensor, n_fft: int, hop: int, win: int) -> Tensor:
    """(B, S) zero-padded waves and (B,) lengths -> (B, n_fft // 2 + 1, S // hop) magnitudes."""
    if (n_fft - hop) % 2:
        sizes = f"n_fft {n_fft}, hop {hop}"
        raise ValueError(f"n_fft - hop must be even (S samples give S // hop frames), got {sizes}")
    pad = (n_fft - hop) // 2
    with torch.autocast(waves.device.type, enabled=False):
        padded = _reflect_each(waves.float(), lengths, pad)
        window = torch.hann_window(win, device=waves.device)
        stft = torch.stft(
            padded,
            n_fft,
            hop_length=hop,
            win_length=win,
            window=window,
            center=False,
            return_complex=True,
        )
        real = torch.view_as_real(stft)
        magnitude = torch.sqrt(real.pow(2).sum(-1) + MAGNITUDE_EPS)
        frames = spectrogram_lengths(lengths.to(waves.device), hop)
        inside = torch.arange(magnitude.shape[-1], device=waves.device)[None, :] < frames[:, None]
        return magnitude * inside[:, None, :]


def mel_filterbank_tensor(
    sample_rate: int,
    n_fft: int,
    n_mels: int,
    f_min: float,
    f_max: float | None,
    device: torch.device | str = "cpu",
) -> Tensor:
    """(n_mels, n_fft // 2 + 1) float32 Slaney filterbank (f_max None: half the sample rate)."""
    return torch.from_numpy(mel_filterbank(sample_rate, n_fft, n_mels, f_min, f_max)).to(device)


def spec_to_mel(spec: Tensor, filterbank: Tensor) -> Tensor:
    """(B, n_fft // 2 + 1, T) magnitudes -> (B, n_mels, T) natural-log mels."""
    with torch.autocast(spec.device.type, enabled=False):
        mel = torch.matmul(filterbank.to(device=spec.device, dtype=torch.float32), spec.float())
        return torch.log(torch.clamp(mel, min=MEL_FLOOR))


def mel_spectrogram(
    waves: Tensor,
    n_fft: int,
    hop: int,
    win: int,
    filterbank: Tensor,
    lengths: Tensor | None = None,
) -> Tensor:
    """(B, S) or (B, 1, S) waves -> (B, n_mels, S // hop) log-mels (`lengths` None: all whole)."""
    waves = waves.reshape(waves.shape[0], -1)
    if lengths is None:
        lengths = torch.full(
            (waves.shape[0],),
            waves.shape[1],
            dtype=torch.long,
            device=waves.device,
        )
    return spec_to_mel(linear_spectrogram(waves, lengths, n_fft, hop, win), filterbank)
