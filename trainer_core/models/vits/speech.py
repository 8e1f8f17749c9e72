"""A VITS voice speaking: sample sentences at each evaluation, held-out
sentences for free-running scores.

VITS speaks audio directly, so there is no vocoder to hear it through. Every utterance draws
its noise from a fixed seed: the same weights say a sentence the same way at every
evaluation, and scores move only when the model does. The free-running floor is each held-out
recording re-made by the model's own decoder from its posterior (no text involved): what the
decoder alone costs at this step.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import torch

from trainer_core.models.base import SampleResult
from trainer_core.models.free_running import (
    FreeRunning,
    FreeRunningResult,
    HeldOutSentence,
    pick_sentences,
)
from trainer_core.models.griffin_lim import write_wav
from trainer_core.models.voice_task import MAX_SAMPLE_SPEAKERS, sample_name, samples_folder

if TYPE_CHECKING:
    from trainer_core.contract.profile import Profile
    from trainer_core.data.vits_dataset import VitsDataset
    from trainer_core.data.wave_preload import Waves
    from trainer_core.models.vits.batch_audio import BatchAudio
    from trainer_core.models.vits.symbols import SymbolTable
    from trainer_core.models.vits.synthesizer import Synthesizer

# Every utterance starts its noise from this seed.
SPEECH_SEED = 1234


class VitsSpeaker:
    """Turns text (and a speaker id) into audio with a VITS generator, at a
    voice's noise and length scales."""

    def __init__(
        self,
        symbols: SymbolTable,
        scales: Mapping[str, float],
        speaker_names: list[str],
        sample_rate: int,
    ) -> None:
        self.symbols, self.speaker_names, self.sample_rate = symbols, speaker_names, sample_rate
        self.noise_scale, self.noise_scale_w = scales["noise_scale"], scales["noise_scale_w"]
        self.length_scale = scales["length_scale"]

    @classmethod
    def from_profile(
        cls, symbols: SymbolTable, profile: Profile, speaker_names: list[str]
    ) -> VitsSpeaker:
        return cls(symbols, inference_scales(profile), speaker_names, profile.audio.sample_rate)

    @torch.no_grad()
    def speak(
        self,
        model: Synthesizer,
        text: str,
        speaker: int | None = None,
        length_scale: float | None = None,
        noise_scales: tuple[float, float] | None = None,
    ) -> np.ndarray:
        """Float32 mono audio for `text`, its sentences spoken one by one and joined, as Piper's
        runtime speaks them (empty when it has no symbol the voice knows)."""
        sentences = self.symbols.encode_sentences(text)
        if not sentences:
            return np.zeros(0, dtype=np.float32)
        noise, noise_w = (
            noise_scales if noise_scales is not None else (self.noise_scale, self.noise_scale_w)
        )
        device = next(model.parameters()).device
        sid = (
            torch.tensor([speaker], dtype=torch.int64, device=device)
            if speaker is not None
            else None
        )
        was_training = model.training
        model.eval()
        devices = [device] if device.type == "cuda" else []
        parts = []
        try:
            with torch.random.fork_rng(devices=devices):
                torch.manual_seed(SPEECH_SEED)
                for ids in sentences:
                    x = torch.tensor([ids], dtype=torch.int64, device=device)
                    lengths = torch.tensor([len(ids)], dtype=torch.int64, device=device)
                    out = model.infer(
                        x, lengths, sid, noise, length_scale or self.length_scale, noise_w
                    )
                    parts.append(out.audio[0, 0].float().cpu().numpy())
        finally:
            model.train(was_training)
        return np.concatenate(parts)

    def free_running(self, model: Synthesizer, free: VitsFreeRunning) -> FreeRunningResult:
        """The held-out sentences spoken from text, and the floor re-made from their recordings."""
        started = time.perf_counter()
        floor = free.floor_of(lambda sentence: free.reconstruct(model, sentence))
        scores = free.score_speech(lambda s: (self.speak(model, s.text, s.speaker), None))
        return FreeRunningResult(scores, floor, "vits", time.perf_counter() - started)


class VitsFreeRunning(FreeRunning):
    """FreeRunning over a VITS task's held-out recordings, which can also be
    re-made through the posterior."""

    def __init__(
        self, sentences: list[HeldOutSentence], profile: Profile, waves: Waves, audio: BatchAudio
    ) -> None:
        super().__init__(sentences, profile.audio, profile.tts, None, vocoder_name="vits")
        self.waves, self.batch_audio = waves, audio
        self._index = {item_id: i for i, item_id in enumerate(waves.item_ids)}

    def reconstruct(self, model: Synthesizer, sentence: HeldOutSentence) -> np.ndarray:
        wave = self.waves.get(self._index[sentence.item_id])
        return reconstruct_wave(model, wave, self.batch_audio, sentence.speaker)


@torch.no_grad()
def reconstruct_wave(
    model: Synthesizer, wave: torch.Tensor, audio: BatchAudio, speaker: int | None
) -> np.ndarray:
    """A recording re-made by the model's posterior encoder and decoder (no
    text): float32 mono audio."""
    device = next(model.parameters()).device
    samples = wave.to(device)[None]
    lengths = torch.tensor([samples.shape[1]], dtype=torch.int64, device=device)
    spec, spec_lens = audio.spectrogram(samples, lengths)
    sid = torch.tensor([speaker], device=device) if speaker is not None else None
    was_training = model.training
    model.eval()
    try:
        return model.reconstruct(spec, spec_lens, sid)[0, 0].float().cpu().numpy()
    finally:
        model.train(was_training)


def inference_scales(profile: Profile) -> dict[str, float]:
    v = profile.vits
    return {
        "noise_scale": v.noise_scale,
        "noise_scale_w": v.noise_scale_w,
        "length_scale": v.length_scale,
    }


def held_out_free_running(
    dataset: VitsDataset,
    waves: Waves,
    profile: Profile,
    audio: BatchAudio,
    speaker_ids: list[int] | None,
) -> VitsFreeRunning:
    """The fixed set: held-out items spread over their lengths (as the voice task picks them)."""
    ids = dataset.val_ids
    seconds = [waves.lengths[i] / profile.audio.sample_rate for i in ids]
    candidates = [
        HeldOutSentence(
            waves.item_ids[i],
            waves.texts[i],
            waves.paths[i],
            speaker_ids[i] if speaker_ids else None,
        )
        for i in ids
    ]
    picked = pick_sentences(candidates, seconds, profile.train.free_running_items)
    return VitsFreeRunning([candidates[k] for k in picked], profile, waves, audio)


def write_samples(
    model: Synthesizer, speaker: VitsSpeaker, sentences: list[str], out_dir: Path, step: int
) -> list[SampleResult]:
    """Every sentence spoken to `samples/step-N/NN.wav` (NN-<speaker>.wav
    for each of the first speakers)."""
    folder, rate = samples_folder(out_dir, step), speaker.sample_rate
    names = speaker.speaker_names
    voices: list[str | None] = list(names[:MAX_SAMPLE_SPEAKERS]) if len(names) >= 2 else [None]
    results = []
    for number, sentence in enumerate(sentences, start=1):
        for voice in voices:
            audio = speaker.speak(
                model, sentence, names.index(voice) if voice is not None else None
            )
            if audio.size == 0:
                continue
            path = write_wav(folder / sample_name(number, voice), audio, rate)
            results.append(SampleResult(kind="audio", path=path, text=sentence))
    return results
