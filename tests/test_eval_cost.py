"""Evaluation that stays cheap: Griffin-Lim in batches, the floor and the vocoder's reference
cached, and scores as before. "As before" is computed here through the old path (each sentence
vocoded alone, nothing cached), not typed in.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

import numpy as np
import pytest
import torch

from trainer_core.contract.profile_audio import AudioSection, TtsSection
from trainer_core.data.audio import load_audio
from trainer_core.data.mel import MelExtractor
from trainer_core.models.copy_synthesis import clip_scores, reference_scores
from trainer_core.models.eval_cache import EvalCache
from trainer_core.models.free_running import FreeRunning, HeldOutSentence
from trainer_core.models.griffin_lim import mel_to_audio
from trainer_core.models.griffin_lim_batch import mels_to_audio
from trainer_core.models.text_frontend import TextEncoder
from trainer_core.models.tts import build_tts_model
from trainer_core.models.tts_config import TtsConfig
from trainer_core.scoring.speech_scores import Scores, score_heard

TEST_VOICE = Path(__file__).resolve().parent / "fixtures" / "voice"
NAMES = ["demo_003", "demo_008"]  # two lengths, so the batch is padded
TTS = TtsSection(griffin_lim_iters=8)
AUDIO = AudioSection()


def sentences() -> list[HeldOutSentence]:
    lines = (TEST_VOICE / "metadata.csv").read_text().splitlines()
    texts = {row[0]: row[1] for row in (line.split("|") for line in lines if line)}
    return [HeldOutSentence(n, texts[n], TEST_VOICE / "wavs" / f"{n}.wav") for n in NAMES]


def assert_same(new: Scores, old: Scores) -> None:
    assert len(new.items) == len(old.items) == len(NAMES)
    for a, b in zip(new.items, old.items, strict=True):
        for key, value in asdict(b).items():
            got = asdict(a)[key]
            if isinstance(value, float):
                assert got == pytest.approx(value, abs=1e-4), (a.item_id, key)
            else:
                assert got == value, (a.item_id, key)


def alone(mel: np.ndarray, iterations: int = TTS.griffin_lim_iters) -> np.ndarray:
    """The old path: one mel through Griffin-Lim by itself."""
    return mel_to_audio(mel, AUDIO, iterations)


def test_griffin_lim_in_a_batch_gives_each_sentence_what_it_gets_alone() -> None:
    free = FreeRunning(sentences(), AUDIO, TTS, vocoder=None)
    mels = [r.mel for r in free.recordings()]
    assert len({m.shape[1] for m in mels}) == 2
    batched = mels_to_audio(mels, AUDIO, TTS.griffin_lim_iters)
    for mel, wave in zip(mels, batched, strict=True):
        single = alone(mel)
        assert wave.shape == single.shape and wave.dtype == np.float32
        assert np.abs(wave - single).max() < 1e-4 * max(1.0, float(np.abs(single).max()))


def test_a_fixed_checkpoint_scores_as_the_old_path_did_and_the_floor_is_kept(
    tmp_path: Path,
) -> None:
    held = sentences()
    encoder = TextEncoder.build([s.text for s in held], "chars")
    config = TtsConfig(
        vocab_size=len(encoder.symbols), n_mels=AUDIO.n_mels, hidden=16, encoder_layers=1,
        decoder_layers=1, heads=2, ffn_mult=1, dropout=0.0,
    )  # fmt: skip
    model = build_tts_model(config, seed=0)  # the fixed checkpoint: weights from seed 0
    # The old path: each sentence spoken and vocoded alone; the floor one recording at a time.
    old = FreeRunning(held, AUDIO, TTS, vocoder=None)

    def speak_alone(s: HeldOutSentence) -> tuple[np.ndarray, np.ndarray | None]:
        mel = model.synthesise(encoder.encode(s.text), TTS.length_scale).float().numpy()
        return alone(mel), mel

    model.eval()
    old_scores = old.score_speech(speak_alone)
    rate, hop = AUDIO.sample_rate, AUDIO.hop_length
    old_floor = Scores([score_heard(r, alone(r.mel), old.mel_of, rate, hop) for r in old.recordings()])
    model.train()
    cache = EvalCache(tmp_path / "evaluation")
    new = FreeRunning(held, AUDIO, TTS, vocoder=None, cache=cache)
    progress: list[tuple[int, int]] = []
    new.progress = lambda done, total: progress.append((done, total))
    assert_same(new.score(model, encoder), old_scores)
    assert model.training  # put back as it was
    assert progress == [(0, 2), (1, 2), (2, 2)]
    assert_same(new.floor(), old_floor)
    (entry,) = (tmp_path / "evaluation").glob("*.json")
    # The next evaluation reads the floor instead of vocoding: an edited entry is what it gets.
    kept = json.loads(entry.read_text())
    assert kept["seconds"] > 0 and new.floor_seconds == kept["seconds"]
    kept["items"][0]["distance"] = 123.0
    entry.write_text(json.dumps(kept))
    again = FreeRunning(held, AUDIO, TTS, vocoder=None, cache=cache)
    assert again.floor().items[0].distance == 123.0
    # Other settings are another entry: the edited one is not read for them.
    other = FreeRunning(held, AUDIO, TtsSection(griffin_lim_iters=4), vocoder=None, cache=cache)
    assert other.floor().items[0].distance != 123.0
    assert len(list((tmp_path / "evaluation").glob("*.json"))) == 2
    # A damaged entry is a miss, recomputed, not an error.
    entry.write_text('{"items": [{"distance": 1}]}')
    assert_same(FreeRunning(held, AUDIO, TTS, vocoder=None, cache=cache).floor(), old_floor)


def test_the_vocoder_reference_is_as_before_and_computed_once(tmp_path: Path) -> None:
    clips = [torch.from_numpy(load_audio(s.path, AUDIO.sample_rate)) for s in sentences()[:2]]
    resolutions = [(512, 128, 512), (256, 64, 256)]
    extractor = MelExtractor(AUDIO)
    totals = {"mel": 0.0, "stft": 0.0}
    for clip in clips:  # the old path: one clip at a time
        heard = torch.from_numpy(alone(extractor.batch(clip[None])[0]))[None]
        for name, value in clip_scores(heard, clip[None], extractor, resolutions).items():
            totals[name] += float(value) / len(clips)
    cache = EvalCache(tmp_path)
    got = reference_scores(clips, AUDIO, resolutions, TTS.griffin_lim_iters, cache)
    # Within 1e-4 of each figure (the log-magnitude STFT distance is about 3.7: relative).
    assert got["mel_l1"] == pytest.approx(totals["mel"], abs=1e-4)
    assert got["stft_distance"] == pytest.approx(totals["stft"], rel=1e-4)
    (entry,) = tmp_path.glob("*.json")
    entry.write_text(json.dumps({"mel_l1": 9.0, "stft_distance": 9.0}))
    iterations = TTS.griffin_lim_iters
    assert reference_scores(clips, AUDIO, resolutions, iterations, cache)["mel_l1"] == 9.0
    assert reference_scores(clips, AUDIO, resolutions[:1], iterations, cache)["mel_l1"] != 9.0
