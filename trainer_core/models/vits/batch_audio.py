"""A VITS batch's audio features, on the device: linear spectrograms for the
posterior, log-mels for the loss.

Everything follows Piper's conventions (`vits.spectrogram`): magnitude spectrograms of each
item over its own length, mels of those magnitudes, and the same mel of the decoder's audio,
all in float32 even under autocast.
"""

from __future__ import annotations

import torch

from trainer_core.contract.profile_audio import AudioSection
from trainer_core.models.vits.config import VitsConfig
from trainer_core.models.vits.segments import slice_segments
from trainer_core.models.vits.spectrogram import (
    linear_spectrogram,
    mel_filterbank_tensor,
    spec_to_mel,
    spectrogram_lengths,
)


class BatchAudio:
    """Spectrograms and mels of waves with one [audio] section's settings, on one device."""

    def __init__(self, audio: AudioSection, device: torch.device) -> None:
        self.audio = audio
        a = audio
        self.filterbank = mel_filterbank_tensor(
            a.sample_rate, a.n_fft, a.n_mels, a.f_min, a.f_max, device
        )

    def spectrogram(
        self, wave: torch.Tensor, lengths: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """(B, S) zero-padded waves and their lengths -> (B, n_fft // 2 + 1,
        frames) magnitudes, frame counts."""
        a = self.audio
        spec = linear_spectrogram(wave, lengths, a.n_fft, a.hop_length, a.win_length)
        return spec, spectrogram_lengths(lengths, a.hop_length)

    def mel_of_spectrogram(self, spec: torch.Tensor) -> torch.Tensor:
        return spec_to_mel(spec, self.filterbank)

    def mel(self, audio: torch.Tensor) -> torch.Tensor:
        """Log-mel of (B, 1, S) or (B, S) audio, frames as the spectrogram's (S // hop of them)."""
        wave = audio.reshape(audio.shape[0], -1).float()
        lengths = torch.full((wave.shape[0],), wave.shape[1], dtype=torch.int64, device=wave.device)
        return self.mel_of_spectrogram(self.spectrogram(wave, lengths)[0])

    @staticmethod
    def segment_frames(x: torch.Tensor, starts: torch.Tensor, frames: int) -> torch.Tensor:
        """`frames` columns of each item of (B, C, T) from its start, zero-padded past the end."""
        return slice_segments(x, starts, frames)

    @staticmethod
    def masked_mel_l1(
        target: torch.Tensor, heard: torch.Tensor, lengths: torch.Tensor
    ) -> torch.Tensor:
        """Mean |target - heard| over each item's own frames (and every mel band)."""
        frames = min(target.shape[-1], heard.shape[-1])
        mask = (torch.arange(frames, device=target.device)[None, :] < lengths[:, None]).to(
            target.dtype
        )
        error = (target[..., :frames] - heard[..., :frames]).abs().mean(dim=1)
        return (error * mask).sum() / mask.sum().clamp(min=1.0)


def cut_segments(wave: torch.Tensor, starts: torch.Tensor, config: VitsConfig) -> torch.Tensor:
    """The real audio under each decoded latent segment: (B, S) waves -> (B, 1, segment_size)."""
    return slice_segments(wave[:, None], starts * config.hop_length, config.segment_size)
