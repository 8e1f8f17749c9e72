"""Decode one recording into training audio: float32 mono at the profile's rate,
trimmed, optionally normalised.

soundfile decodes (WAV, FLAC, OGG, MP3 where libsndfile has it; any bit depth), channels are
averaged, soxr resamples ('HQ') when the file's rate differs from the target, and leading/trailing
silence is trimmed with a frame-RMS rule that gives the same cut points as `librosa.effects.trim`
(2048-sample frames, 512-sample hop, threshold `top_db` below the loudest frame) without importing
librosa. soundfile and soxr release the GIL, so `load_audio` runs well in a thread pool.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

import numpy as np
import soundfile as sf
import soxr

from trainer_core.contract.errors import VegaError

TRIM_FRAME_LENGTH = 2048
TRIM_HOP_LENGTH = 512
# Same floor as librosa.power_to_db, so an all-quiet stretch compares the same way.
TRIM_AMIN = 1e-10
# Peak level after normalising: a little headroom below full scale.
NORMALIZE_PEAK = 0.95

_decode_lock = threading.Lock()
_decode_calls = 0


class AudioDecodeError(VegaError):
    """A recording that cannot be decoded into samples; the message names the file."""


def decode_calls() -> int:
    """How many times `load_audio` has decoded a file in this process (tests
    use it to prove cache hits)."""
    return _decode_calls


def _count_decode() -> None:
    global _decode_calls
    with _decode_lock:
        _decode_calls += 1


# libsndfile's own scale for 16-bit PCM read as float: int16 / 32768.
PCM16_SCALE = np.float32(1.0 / 32768.0)


def _read(path: Path) -> tuple[np.ndarray, int]:
    """(frames, channels) samples and the rate. 16-bit PCM is read as int16 and scaled here: the
    same numbers as libsndfile's float conversion at about half its cost."""
    with sf.SoundFile(str(path)) as handle:
        if handle.subtype == "PCM_16":
            raw = handle.read(dtype="int16", always_2d=True)
            return np.multiply(raw, PCM16_SCALE, dtype=np.float32), int(handle.samplerate)
        return handle.read(dtype="float32", always_2d=True), int(handle.samplerate)


def read_samples(path: Path) -> tuple[np.ndarray, int]:
    """(frames, channels) float32 samples and the file's sample rate;
    AudioDecodeError on failure."""
    try:
        data, rate = _read(path)
    except (sf.LibsndfileError, RuntimeError, OSError, ValueError, TypeError) as exc:
        raise AudioDecodeError(
            f"cannot decode audio file {path}: {exc}; re-export it as 16-bit WAV or FLAC, or"
            " remove it"
        ) from exc
    if data.size == 0:
        raise AudioDecodeError(f"audio file {path} holds no samples: re-export it or remove it")
    return data, rate


def to_mono(data: np.ndarray) -> np.ndarray:
    """Average the channels of (frames, channels) samples into a contiguous 1-D array."""
    mono = data[:, 0] if data.shape[1] == 1 else data.mean(axis=1, dtype=np.float32)
    return np.ascontiguousarray(mono, dtype=np.float32)


def resample(wave: np.ndarray, source_sr: int, target_sr: int) -> np.ndarray:
    """`wave` at `target_sr` (unchanged when the rates match)."""
    if source_sr == target_sr:
        return wave
    return np.asarray(soxr.resample(wave, source_sr, target_sr, quality="HQ"), dtype=np.float32)


def frame_energies(wave: np.ndarray, frame_length: int, hop_length: int) -> np.ndarray:
    """Mean square of each centred frame (zero padding at the edges), one frame per hop."""
    half = frame_length // 2
    if frame_length % hop_length or half % hop_length:
        return running_frame_energies(wave, frame_length, hop_length)
    # Frames are whole runs of hop-long blocks: square-sum each block once,
    # then add neighbouring blocks.
    full = len(wave) // hop_length
    blocks = np.zeros(full + 1 + 2 * (half // hop_length), dtype=np.float64)
    lead = half // hop_length
    body = wave[: full * hop_length].reshape(full, hop_length)
    blocks[lead : lead + full] = np.einsum("ij,ij->i", body, body)
    tail = wave[full * hop_length :]
    blocks[lead + full] = float(np.dot(tail, tail))
    running = np.concatenate(([0.0], np.cumsum(blocks)))
    per_frame = frame_length // hop_length
    count = 1 + (len(wave) + 2 * half - frame_length) // hop_length
    return (running[per_frame : per_frame + count] - running[:count]) / frame_length


def running_frame_energies(wave: np.ndarray, frame_length: int, hop_length: int) -> np.ndarray:
    """`frame_energies` for any frame and hop lengths, from a running sum over every sample."""
    half = frame_length // 2
    squared = np.pad(wave.astype(np.float64) ** 2, (half, half))
    running = np.concatenate(([0.0], np.cumsum(squared)))
    starts = np.arange(0, len(squared) - frame_length + 1, hop_length)
    return (running[starts + frame_length] - running[starts]) / frame_length


def trim_bounds(wave: np.ndarray, top_db: float) -> tuple[int, int]:
    """(start, end) sample indices of the non-silent part: frames within
    `top_db` of the loudest one."""
    energy = frame_energies(wave, TRIM_FRAME_LENGTH, TRIM_HOP_LENGTH)
    loudest = max(float(energy.max()), TRIM_AMIN) if energy.size else TRIM_AMIN
    level_db = 10.0 * np.log10(np.maximum(energy, TRIM_AMIN) / loudest)
    loud = np.flatnonzero(level_db > -top_db)
    if loud.size == 0:
        return 0, len(wave)
    start = int(loud[0]) * TRIM_HOP_LENGTH
    end = min(len(wave), (int(loud[-1]) + 1) * TRIM_HOP_LENGTH)
    return start, end


def trim(wave: np.ndarray, top_db: float) -> np.ndarray:
    """`wave` without its leading and trailing silence (see `trim_bounds`)."""
    start, end = trim_bounds(wave, top_db)
    return wave[start:end]


def peak_normalize(wave: np.ndarray) -> np.ndarray:
    """Scale so that the loudest sample sits at NORMALIZE_PEAK (digital
    silence is left as it is)."""
    peak = float(np.abs(wave).max()) if wave.size else 0.0
    return wave if peak <= 0.0 else (wave * (NORMALIZE_PEAK / peak)).astype(np.float32)


def load_audio(
    path: str | os.PathLike[str],
    target_sr: int,
    trim_silence: bool = True,
    top_db: float = 40.0,
    normalize: bool = False,
) -> np.ndarray:
    """Decode `path` into float32 mono samples in [-1, 1] at `target_sr`;
    AudioDecodeError names a bad file."""
    _count_decode()
    data, source_sr = read_samples(Path(path))
    wave = resample(to_mono(data), source_sr, target_sr)
    if trim_silence:
        wave = trim(wave, top_db)
    if normalize:
        wave = peak_normalize(wave)
    # Resampling can overshoot full scale by a hair on clipped input; training audio stays in range.
    # The wave is this function's own array (decoded, resampled or trimmed
    # here), so clip it in place.
    return np.clip(wave, -1.0, 1.0, out=wave)
