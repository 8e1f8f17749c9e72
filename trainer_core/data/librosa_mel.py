"""librosa's own mel spectrogram with a profile's audio settings: the reference Vega's torch mel is
checked against, and the per-file baseline the preload benchmark races."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from trainer_core.contract.profile_audio import AudioSection


def librosa_power_mel(
    wave: np.ndarray, audio: AudioSection, sample_rate: int | None = None
) -> np.ndarray:
    """Power mel (n_mels, frames), centred with reflect padding as
    `trainer_core.data.mel` computes it."""
    import librosa  # imported here: it is slow to import and most callers never need it

    mel: np.ndarray = librosa.feature.melspectrogram(
        y=wave,
        sr=sample_rate or audio.sample_rate,
        n_fft=audio.n_fft,
        hop_length=audio.hop_length,
        win_length=audio.win_length,
        center=True,
        pad_mode="reflect",
        power=2.0,
        n_mels=audio.n_mels,
        fmin=audio.f_min,
        fmax=audio.f_max,
    )
    return mel
