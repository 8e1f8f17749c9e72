"""Free-running evaluation of an acoustic model: held-out sentences spoken from text
alone (predicted durations, no teacher forcing), heard through the vocoder and
scored against their recordings.

Used by the voice task every few validations and by `trainer-core evaluate`. The recordings'
scores through the same vocoder are the floor: what the vocoder alone costs, and the best an
acoustic model could reach with it.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from trainer_core.data.audio import load_audio
from trainer_core.data.mel import MelExtractor
from trainer_core.models.eval_cache import EvalCache, digest
from trainer_core.models.griffin_lim import mel_to_audio
from trainer_core.models.griffin_lim_batch import evaluation_threads, mels_to_audio
from trainer_core.scoring.speech_scores import ItemScore, Recording, Scores, recording, score_heard

if TYPE_CHECKING:
    from trainer_core.contract.profile_audio import AudioSection, TtsSection
    from trainer_core.models.text_frontend import TextEncoder
    from trainer_core.models.tts import AcousticModel

# Log-mel (n_mels, frames) -> waveform: the vocoder the scores are heard through.
Vocoder = Callable[[np.ndarray], np.ndarray]
# A held-out sentence -> (the audio a model speaks for it, the log-mel it
# predicted on the way, if any).
Speak = Callable[["HeldOutSentence"], tuple[np.ndarray, np.ndarray | None]]
# Recordings longer than this are left out of the set: DTW and Griffin-Lim cost grows with length.
MAX_SECONDS = 12.0


@dataclass(frozen=True)
class HeldOutSentence:
    """A held-out recording and its transcript."""

    item_id: str
    text: str
    path: Path
    # the speaker id the model says it with (voices with several speakers)
    speaker: int | None = None


def pick_sentences(
    candidates: Sequence[HeldOutSentence], seconds: Sequence[float], count: int
) -> list[int]:
    """Indices of `count` candidates spread evenly over their lengths (short
    to long), longest ones left out."""
    usable = sorted((s, i) for i, s in enumerate(seconds) if s <= MAX_SECONDS) or sorted(
        (s, i) for i, s in enumerate(seconds)
    )
    if len(usable) <= count:
        return sorted(i for _, i in usable)
    step = len(usable) / count
    return sorted(usable[int(k * step + step / 2)][1] for k in range(count))


class FreeRunning:
    """Scores an acoustic model on fixed held-out sentences; the recordings
    are decoded once, on first use."""

    def __init__(
        self,
        sentences: Sequence[HeldOutSentence],
        audio: AudioSection,
        tts: TtsSection,
        vocoder: Vocoder | None,
        vocoder_name: str | None = None,
        cache: EvalCache | None = None,
    ) -> None:
        self.sentences = list(sentences)
        self.audio, self.tts = audio, tts
        named = "griffin-lim" if vocoder is None else str(getattr(vocoder, "name", "custom"))
        self.vocoder_name = vocoder_name or named
        self.vocode: Vocoder = vocoder or (
            lambda mel: mel_to_audio(mel, audio, tts.griffin_lim_iters)
        )
        # Griffin-Lim: sentences vocoded in batches and the floor cached (not
        # for a model that speaks audio).
        self._griffin_lim = vocoder is None and self.vocoder_name == "griffin-lim"
        self.cache = cache or EvalCache(None)
        self._extractor = MelExtractor(audio)
        self._recordings: list[Recording] | None = None
        self._floor: Scores | None = None
        # (sentences scored, sentences in the pass)
        self.progress: Callable[[int, int], None] | None = None
        # what computing the floor took (here, or when it was cached)
        self.floor_seconds: float | None = None

    def mel_of(self, wave: np.ndarray) -> np.ndarray:
        return self._extractor([np.asarray(wave, dtype=np.float32)])[0].numpy()

    def recordings(self) -> list[Recording]:
        if self._recordings is None:
            a = self.audio
            self._recordings = [
                recording(
                    s.item_id,
                    s.text,
                    load_audio(s.path, a.sample_rate, a.trim_silence, a.trim_top_db, a.normalize),
                    self.mel_of,
                    a.sample_rate,
                    a.hop_length,
                )
                for s in self.sentences
            ]
        return self._recordings

    def floor(self) -> Scores:
        """The recordings re-synthesised from their own mels through the vocoder (computed once,
        and with Griffin-Lim kept in the cache for the next run)."""
        if self._floor is None:
            a, recordings = self.audio, self.recordings()
            key = digest("floor", a, self.tts.griffin_lim_iters, [r.mel for r in recordings])
            if self._griffin_lim and self._kept_floor(self.cache.get(key)):
                return self._floor  # type: ignore[return-value]  # set by _kept_floor
            started = time.perf_counter()
            heard = self.vocode_many([r.mel for r in recordings])
            self._floor = Scores(
                [
                    score_heard(r, wave, self.mel_of, a.sample_rate, a.hop_length)
                    for r, wave in zip(recordings, heard, strict=True)
                ]
            )
            self.floor_seconds = time.perf_counter() - started
            if self._griffin_lim:
                items = [vars(item) for item in self._floor.items]
                self.cache.put(key, {"seconds": self.floor_seconds, "items": items})
        return self._floor

    def _kept_floor(self, kept: object) -> bool:
        """Take the floor from a cache entry; False (a miss) when it is not one this code wrote."""
        if not isinstance(kept, dict):
            return False
        try:
            floor = Scores([ItemScore(**item) for item in kept["items"]])
            seconds = float(kept["seconds"])
        except (KeyError, TypeError, ValueError):
            return False
        if len(floor.items) != len(self.sentences):
            return False
        self._floor, self.floor_seconds = floor, seconds
        return True

    def vocode_many(self, mels: list[np.ndarray]) -> list[np.ndarray]:
        """Each mel heard through the vocoder; Griffin-Lim takes them in batches."""
        if self._griffin_lim:
            return mels_to_audio(mels, self.audio, self.tts.griffin_lim_iters)
        return [self.vocode(mel) for mel in mels]

    def score(self, model: AcousticModel, encoder: TextEncoder) -> Scores:
        """Every sentence spoken by `model` (in eval mode, no gradient),
        vocoded together, and scored."""
        self._report(0)
        was_training = model.training
        model.eval()
        try:
            mels = [
                model.synthesise(encoder.encode(s.text), self.tts.length_scale, s.speaker)
                .float()
                .cpu()
                .numpy()
                for s in self.sentences
            ]
        finally:
            model.train(was_training)
        heard, a = self.vocode_many(mels), self.audio
        items = []
        for r, wave, mel in zip(self.recordings(), heard, mels, strict=True):
            items.append(
                score_heard(r, wave, self.mel_of, a.sample_rate, a.hop_length, predicted_mel=mel)
            )
            self._report(len(items))
        return Scores(items)

    def _report(self, done: int) -> None:
        if self.progress is not None:
            self.progress(done, len(self.sentences))

    def score_speech(self, speak: Speak) -> Scores:
        """Every sentence as `speak` says it, scored against its recording."""
        a = self.audio
        items = []
        for r, sentence in zip(self.recordings(), self.sentences, strict=True):
            heard, mel = speak(sentence)
            items.append(
                score_heard(r, heard, self.mel_of, a.sample_rate, a.hop_length, predicted_mel=mel)
            )
        return Scores(items)

    def floor_of(self, resynthesise: Callable[[HeldOutSentence], np.ndarray]) -> Scores:
        """The recordings as `resynthesise` re-makes them (a model's own
        decoder, which changes as it trains)."""
        a = self.audio
        return Scores(
            [
                score_heard(r, resynthesise(s), self.mel_of, a.sample_rate, a.hop_length)
                for r, s in zip(self.recordings(), self.sentences, strict=True)
            ]
        )


@dataclass(frozen=True)
class FreeRunningResult:
    """One free-running evaluation: the model's scores, the floor and how long scoring took."""

    scores: Scores
    floor: Scores
    vocoder: str
    seconds: float
    # of `seconds`, what computing the floor took (once per run, or never if cached)
    floor_seconds: float = 0.0


def evaluate_free_running(
    free: FreeRunning, model: AcousticModel, encoder: TextEncoder
) -> FreeRunningResult:
    started = time.perf_counter()
    with evaluation_threads():
        floor = free.floor()
        floor_seconds = time.perf_counter() - started
        scores = free.score(model, encoder)
    return FreeRunningResult(
        scores, floor, free.vocoder_name, time.perf_counter() - started, floor_seconds
    )
