"""Copy synthesis: a recording's mel turned back into audio and scored against the recording itself.

How a vocoder is judged: for each held-out clip, its log-mel (Vega's own mel code) goes through the
vocoder, and the result is compared with the recording by mel L1 (the log-mel of the output against
the clip's) and a multi-resolution STFT distance (spectral convergence plus log-magnitude L1 at
several FFT sizes). Griffin-Lim on the same clips gives the reference a trained vocoder should
beat; it is computed once per run.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from trainer_core.contract.profile_audio import AudioSection
from trainer_core.data.mel import MelExtractor
from trainer_core.models.eval_cache import EvalCache, digest
from trainer_core.models.gan_vocoder import multi_resolution_stft_distance

Resolutions = Sequence[tuple[int, int, int]]
# The reference's scores, as events and the dashboard name them.
REFERENCE_NAMES = ("mel_l1", "stft_distance")
WaveFromMel = Callable[[torch.Tensor], torch.Tensor]  # (n_mels, T) log-mel -> (samples,) wave


def fit_length(wave: torch.Tensor, length: int) -> torch.Tensor:
    """`wave` cut or zero-padded to `length` samples (a vocoder's output is whole hops long)."""
    if wave.shape[-1] >= length:
        return wave[..., :length]
    return torch.nn.functional.pad(wave, (0, length - wave.shape[-1]))


def clip_scores(
    heard: torch.Tensor, recording: torch.Tensor, extractor: MelExtractor, resolutions: Resolutions
) -> dict[str, torch.Tensor]:
    """Mel L1 and MR-STFT distance of `heard` against `recording`, both (B,
    samples) on one device."""
    heard = fit_length(heard, recording.shape[-1])
    mel_l1 = (extractor.batch(heard) - extractor.batch(recording)).abs().mean()
    stft = multi_resolution_stft_distance(heard.float(), recording.float(), resolutions)
    return {"mel": mel_l1, "stft": stft}


@torch.no_grad()
def reference_scores(
    recordings: Sequence[torch.Tensor],
    audio: AudioSection,
    resolutions: Resolutions,
    griffin_lim_iters: int,
    cache: EvalCache | None = None,
) -> dict[str, float]:
    """Griffin-Lim's mean copy-synthesis scores over `recordings` ((samples,) CPU waves): the line
    to beat. Vocoded in batches, and kept in `cache` by a digest of the recordings and settings."""
    from trainer_core.models.griffin_lim_batch import evaluation_threads, mels_to_audio

    cache = cache or EvalCache(None)
    kind = f"griffin_lim_reference {[list(r) for r in resolutions]}"
    key = digest(kind, audio, griffin_lim_iters, [r.detach().cpu().numpy() for r in recordings])
    kept = cache.get(key)
    if isinstance(kept, dict) and set(kept) == set(REFERENCE_NAMES):
        return {name: float(kept[name]) for name in REFERENCE_NAMES}
    extractor = MelExtractor(audio)
    totals = {"mel": 0.0, "stft": 0.0}
    with evaluation_threads():
        mels = [extractor.batch(recording[None])[0] for recording in recordings]
        heard = mels_to_audio(mels, audio, griffin_lim_iters)
        for recording, wave in zip(recordings, heard, strict=True):
            scores = clip_scores(
                torch.from_numpy(wave)[None], recording[None], extractor, resolutions
            )
            for name, value in scores.items():
                totals[name] += float(value)
    count = max(1, len(recordings))
    result = {"mel_l1": totals["mel"] / count, "stft_distance": totals["stft"] / count}
    cache.put(key, result)
    return result
