"""Copy synthesis: a recording's mel turned back into audio and scored against the recording itself.

How a vocoder is judged: for each held-out clip, its log-mel (Vega's own mel code) goes through the vocoder,
and the result is compared with the recording by mel L1 (the log-mel of the output against the clip's) and a
multi-resolution STFT distance (spectral convergence plus log-magnitude L1 at several FFT sizes). Griffin-Lim
on the same clips gives the reference a trained vocoder should beat; it is computed once per run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from trainer_core.contract.profile import AudioSection
from trainer_core.data.mel import MelExtractor
from trainer_core.models.gan_vocoder import multi_resolution_stft_distance

Resolutions = Sequence[tuple[int, int, int]]
WaveFromMel = Callable[[torch.Tensor], torch.Tensor]  # (n_mels, T) log-mel -> (samples,) wave


def fit_length(wave: torch.Tensor, length: int) -> torch.Tensor:
    """`wave` cut or zero-padded to `length` samples (a vocoder's output is whole hops long)."""
    if wave.shape[-1] >= length:
        return wave[..., :length]
    return torch.nn.functional.pad(wave, (0, length - wave.shape[-1]))


def clip_scores(
    heard: torch.Tensor, recording: torch.Tensor, extractor: MelExtractor, resolutions: Resolutions
) -> dict[str, torch.Tensor]:
    """Mel L1 and MR-STFT distance of `heard` against `recording`, both (B, samples) on one device."""
    heard = fit_length(heard, recording.shape[-1])
    mel_l1 = (extractor.batch(heard) - extractor.batch(recording)).abs().mean()
    stft = multi_resolution_stft_distance(heard.float(), recording.float(), resolutions)
    return {"mel": mel_l1, "stft": stft}


@torch.no_grad()
def reference_scores(
    recordings: Sequence[torch.Tensor], audio: AudioSection, resolutions: Resolutions, griffin_lim_iters: int
) -> dict[str, float]:
    """Griffin-Lim's mean copy-synthesis scores over `recordings` ((samples,) CPU waves): the line to beat."""
    from trainer_core.models.vocoder import mel_to_audio

    extractor = MelExtractor(audio)
    totals = {"mel": 0.0, "stft": 0.0}
    for recording in recordings:
        mel = extractor.batch(recording[None])[0]
        heard = torch.from_numpy(mel_to_audio(mel, audio, griffin_lim_iters))[None]
        for name, value in clip_scores(heard, recording[None], extractor, resolutions).items():
            totals[name] += float(value)
    count = max(1, len(recordings))
    return {"mel_l1": totals["mel"] / count, "stft_distance": totals["stft"] / count}
