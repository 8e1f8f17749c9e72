"""Voiced or not, per mel frame, from a waveform: the normalised autocorrelation peak in the pitch range.

Frames are centred on the mel frames (frame t at sample t * hop), so decisions line up with a mel of the same
hop. A frame is voiced when it is loud enough against the clip's loudest frame and periodic: its autocorrelation
at some lag of a 60-400 Hz period reaches `PERIODICITY` of its energy.
"""

from __future__ import annotations

import numpy as np

LOWEST_PITCH_HZ = 60.0
HIGHEST_PITCH_HZ = 400.0
# Autocorrelation peak, as a share of the frame's energy, above which a frame counts as periodic.
PERIODICITY = 0.5
# Frames this far below the clip's loudest frame are silence, never voiced.
SILENCE_DB = 35.0


def frames_of(wave: np.ndarray, hop: int, width: int) -> np.ndarray:
    """(frames, width) windows centred at every hop, reflect-padded like a centred STFT."""
    padded = np.pad(wave.astype(np.float64), width // 2, mode="reflect" if len(wave) > width // 2 else "constant")
    count = 1 + len(wave) // hop
    starts = np.arange(count) * hop
    return padded[starts[:, None] + np.arange(width)[None, :]]


def voiced_frames(wave: np.ndarray, sample_rate: int, hop: int) -> np.ndarray:
    """(1 + len(wave) // hop,) booleans: is the frame centred at t * hop voiced?"""
    longest = int(sample_rate / LOWEST_PITCH_HZ)
    shortest = int(sample_rate / HIGHEST_PITCH_HZ)
    frames = frames_of(wave, hop, 2 * longest)
    frames = frames - frames.mean(axis=1, keepdims=True)
    spectrum = np.fft.rfft(frames, n=4 * longest, axis=1)
    autocorrelation = np.fft.irfft(np.abs(spectrum) ** 2, axis=1)[:, : longest + 1]
    energy = autocorrelation[:, 0]
    # Unbiased: a lag of tau overlaps only width - tau samples of the frame.
    lags = np.arange(shortest, longest + 1)
    peak = (autocorrelation[:, shortest : longest + 1] * (2 * longest / (2 * longest - lags))).max(axis=1)
    periodic = peak >= PERIODICITY * np.maximum(energy, 1e-12)
    level = 10.0 * np.log10(np.maximum(energy, 1e-12))
    loud = level >= level.max() - SILENCE_DB
    return periodic & loud
