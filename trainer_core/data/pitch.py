"""Voiced or not, and the pitch, per mel frame, from a waveform: the normalised
autocorrelation in the pitch range.

Frames are centred on the mel frames (frame t at sample t * hop), so decisions line up with a mel of
the same hop. A frame is voiced when it is loud enough against the clip's loudest frame and
periodic: its autocorrelation at some lag of a 60-400 Hz period reaches `PERIODICITY` of its energy.

As a training feature (`log_f0_feature`, cached next to the mel with `pitch_params`), the track is
one row per mel frame: the natural log of F0 in Hz where voiced, 0 where not.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from trainer_core.contract.profile_audio import AudioSection

LOWEST_PITCH_HZ = 60.0
HIGHEST_PITCH_HZ = 400.0
# Autocorrelation peak, as a share of the frame's energy, above which a frame counts as periodic.
PERIODICITY = 0.5
# Frames this far below the clip's loudest frame are silence, never voiced.
SILENCE_DB = 35.0
# A shorter lag whose correlation reaches this share of the best one is taken as
# the period (no octave errors).
OCTAVE_MARGIN = 0.9


def frames_of(wave: np.ndarray, hop: int, width: int) -> np.ndarray:
    """(frames, width) windows centred at every hop, reflect-padded like a centred STFT."""
    padded = np.pad(
        wave.astype(np.float64),
        width // 2,
        mode="reflect" if len(wave) > width // 2 else "constant",
    )
    count = 1 + len(wave) // hop
    starts = np.arange(count) * hop
    return padded[starts[:, None] + np.arange(width)[None, :]]


@dataclass(frozen=True)
class PitchTrack:
    """Per mel frame: the fundamental frequency in Hz (0 where unvoiced) and
    whether the frame is voiced."""

    f0: np.ndarray
    voiced: np.ndarray


def pitch_track(wave: np.ndarray, sample_rate: int, hop: int) -> PitchTrack:
    """Voicing and F0 of the frames centred at t * hop, from each frame's
    normalised autocorrelation."""
    longest = int(sample_rate / LOWEST_PITCH_HZ)
    shortest = int(sample_rate / HIGHEST_PITCH_HZ)
    frames = frames_of(wave, hop, 2 * longest)
    frames = frames - frames.mean(axis=1, keepdims=True)
    spectrum = np.fft.rfft(frames, n=4 * longest, axis=1)
    autocorrelation = np.fft.irfft(np.abs(spectrum) ** 2, axis=1)[:, : longest + 1]
    energy = np.maximum(autocorrelation[:, 0], 1e-12)
    # Unbiased: a lag of tau overlaps only width - tau samples of the frame.
    lags = np.arange(shortest, longest + 1)
    normalised = (
        autocorrelation[:, shortest : longest + 1]
        * (2 * longest / (2 * longest - lags))
        / energy[:, None]
    )
    best = normalised.max(axis=1)
    level = 10.0 * np.log10(energy)
    voiced = (best >= PERIODICITY) & (level >= level.max() - SILENCE_DB)
    period = _fundamental_lags(normalised, best) + shortest
    f0 = np.where(voiced, sample_rate / np.maximum(period, 1e-9), 0.0)
    return PitchTrack(f0, voiced)


def _fundamental_lags(normalised: np.ndarray, best: np.ndarray) -> np.ndarray:
    """Per frame, the peak at the shortest lag that comes within OCTAVE_MARGIN of the best
    one (a multiple of the period correlates as well as the period itself), refined
    between samples by a parabola."""
    first = (normalised >= OCTAVE_MARGIN * best[:, None]).argmax(axis=1)
    rows = np.arange(len(normalised))
    top = normalised.shape[1] - 1
    peak = first.copy()
    # climb to the local maximum; stops after a few steps in practice
    for _ in range(normalised.shape[1]):
        step = (peak < top) & (normalised[rows, np.minimum(peak + 1, top)] > normalised[rows, peak])
        if not step.any():
            break
        peak = peak + step
    left = normalised[rows, np.maximum(peak - 1, 0)]
    middle = normalised[rows, peak]
    right = normalised[rows, np.minimum(peak + 1, top)]
    curvature = left - 2 * middle + right
    shift = np.where(
        np.abs(curvature) > 1e-12,
        0.5 * (left - right) / np.where(curvature == 0, 1, curvature),
        0.0,
    )
    return peak + np.clip(shift, -0.5, 0.5)


def voiced_frames(wave: np.ndarray, sample_rate: int, hop: int) -> np.ndarray:
    """(1 + len(wave) // hop,) booleans: is the frame centred at t * hop voiced?"""
    return pitch_track(wave, sample_rate, hop).voiced


# Bumped when the pitch feature's numbers change, so old cached tracks are never read.
PITCH_FEATURE_VERSION = 1


def pitch_params(mel_params: dict[str, Any]) -> dict[str, Any]:
    """Feature-cache parameters of the log-F0 row: the mel's (same decoding,
    trimming and hop) plus its own."""
    return {**mel_params, "feature": "log_f0", "rows": 1, "pitch_version": PITCH_FEATURE_VERSION}


def log_f0_feature(wave: np.ndarray, audio: AudioSection, frames: int) -> torch.Tensor:
    """(1, frames) float32: log F0 in Hz on voiced frames, 0 elsewhere, for
    the mel of the same wave."""
    track = pitch_track(np.asarray(wave), audio.sample_rate, audio.hop_length)
    values = np.zeros(frames, dtype=np.float32)
    count = min(frames, len(track.f0))
    voiced = track.voiced[:count]
    values[:count][voiced] = np.log(track.f0[:count][voiced])
    return torch.from_numpy(values).reshape(1, frames)
