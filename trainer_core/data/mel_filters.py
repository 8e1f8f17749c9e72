"""The Slaney-style mel filterbank (librosa's default: `htk=False`,
`norm="slaney"`), in numpy alone.

Written here rather than imported because `import librosa.filters` costs ~1.5 s, which
dominated a cold `trainer-core synth`. tests/test_mel.py checks it against librosa's
filterbank for every shipped profile. Mel scale: linear below 1 kHz (200/3 Hz per mel),
logarithmic above (27 mels per factor 6.4); each filter is a triangle between its neighbours'
centres, scaled to unit area (2 / bandwidth).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

_F_SP = 200.0 / 3  # Hz per mel on the linear part
_MIN_LOG_HZ = 1000.0
_MIN_LOG_MEL = _MIN_LOG_HZ / _F_SP
_LOG_STEP = np.log(6.4) / 27.0


def hz_to_mel(hz: ArrayLike) -> np.ndarray:
    """Slaney mel scale of `hz` (a number or an array of them)."""
    hz_arr = np.asarray(hz, dtype=np.float64)
    linear = hz_arr / _F_SP
    return np.where(
        hz_arr >= _MIN_LOG_HZ,
        _MIN_LOG_MEL + np.log(np.maximum(hz_arr, 1e-10) / _MIN_LOG_HZ) / _LOG_STEP,
        linear,
    )


def mel_to_hz(mel: ArrayLike) -> np.ndarray:
    """Inverse of hz_to_mel."""
    mel_arr = np.asarray(mel, dtype=np.float64)
    return np.where(
        mel_arr >= _MIN_LOG_MEL,
        _MIN_LOG_HZ * np.exp(_LOG_STEP * (mel_arr - _MIN_LOG_MEL)),
        _F_SP * mel_arr,
    )


def mel_filterbank(
    sample_rate: int, n_fft: int, n_mels: int, f_min: float, f_max: float | None
) -> np.ndarray:
    """(n_mels, 1 + n_fft // 2) float32 weights turning a power spectrum into mel bands."""
    f_max = sample_rate / 2.0 if f_max is None else float(f_max)
    bin_hz = np.linspace(0.0, sample_rate / 2.0, 1 + n_fft // 2)
    centres = mel_to_hz(np.linspace(hz_to_mel(f_min), hz_to_mel(f_max), n_mels + 2))
    widths = np.diff(centres)
    offsets = centres[:, None] - bin_hz[None, :]
    rising = -offsets[:-2] / widths[:-1, None]
    falling = offsets[2:] / widths[1:, None]
    weights = np.maximum(0.0, np.minimum(rising, falling))
    weights *= (2.0 / (centres[2:] - centres[:-2]))[:, None]
    return weights.astype(np.float32)
