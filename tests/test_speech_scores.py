"""The free-running yardstick's parts: DTW against a hand-worked case and a brute-force reference, voicing on
known signals, and the whole score on real recordings (a re-synthesis scores near, a wrong sentence far)."""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import pytest

from trainer_core.contract.profile_audio import AudioSection
from trainer_core.data.audio import load_audio
from trainer_core.data.pitch import pitch_track, voiced_frames
from trainer_core.models.free_running import FreeRunning, HeldOutSentence, pick_sentences
from trainer_core.scoring.dtw import dtw
from trainer_core.scoring.speech_scores import score_heard

TEST_VOICE = Path(__file__).resolve().parent / "fixtures" / "voice"


def test_dtw_on_a_case_worked_by_hand() -> None:
    # Costs |a_i - b_j|: rows [1, 3], [1, 1], [3, 1]; the cheapest path costs 1 + 1 + 1 over three steps.
    found = dtw(np.array([[0.0, 2.0, 4.0]]), np.array([[1.0, 3.0]]))
    assert found.distance == pytest.approx(1.0)
    assert (found.path_a[0], found.path_b[0]) == (0, 0) and (found.path_a[-1], found.path_b[-1]) == (2, 1)
    assert len(found.path_a) == 3


def test_identical_sequences_align_on_the_diagonal_at_zero_cost() -> None:
    a = np.random.default_rng(1).standard_normal((4, 9))
    found = dtw(a, a)
    assert found.distance == 0.0
    assert list(found.path_a) == list(found.path_b) == list(range(9))


def brute_force(a: np.ndarray, b: np.ndarray) -> tuple[float, int]:
    """(cheapest total cost, its path's length) over monotonic paths, cell by cell in plain Python."""
    cost = np.abs(a[:, :, None] - b[:, None, :]).mean(axis=0)
    best: dict[tuple[int, int], tuple[float, int]] = {(0, 0): (cost[0, 0], 1)}
    for i, j in itertools.product(range(cost.shape[0]), range(cost.shape[1])):
        if (i, j) != (0, 0):
            total, length = min(best[p] for p in ((i - 1, j - 1), (i - 1, j), (i, j - 1)) if p in best)
            best[(i, j)] = (total + cost[i, j], length + 1)
    return best[(cost.shape[0] - 1, cost.shape[1] - 1)]


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_dtw_matches_a_plain_reference_on_random_sequences(seed: int) -> None:
    rng = np.random.default_rng(seed)
    a, b = rng.standard_normal((3, 7)), rng.standard_normal((3, 11))
    found = dtw(a, b)
    costs = np.abs(a[:, found.path_a] - b[:, found.path_b]).mean(axis=0)
    assert found.distance == pytest.approx(costs.mean())
    total, length = brute_force(a, b)
    assert costs.sum() == pytest.approx(total) and len(costs) == length


def test_dtw_refuses_empty_sequences() -> None:
    with pytest.raises(ValueError, match="at least one frame"):
        dtw(np.zeros((2, 0)), np.zeros((2, 3)))


def test_voicing_of_a_tone_noise_and_silence() -> None:
    rate, hop = 22050, 256
    t = np.arange(rate) / rate
    tone = 0.5 * np.sin(2 * np.pi * 140 * t)
    noise = 0.3 * np.random.default_rng(0).standard_normal(rate)
    assert voiced_frames(tone, rate, hop).mean() > 0.95
    assert voiced_frames(noise, rate, hop).mean() < 0.05
    # Silence after a tone: loud enough only where the tone is.
    both = voiced_frames(np.concatenate([tone, np.zeros(rate)]), rate, hop)
    assert both[: len(both) // 2 - 4].mean() > 0.95 and both[len(both) // 2 + 4 :].mean() == 0.0


@pytest.mark.parametrize("f0", [75.0, 110.0, 180.0, 320.0])
def test_pitch_of_a_tone_and_of_a_sawtooth_rich_in_harmonics(f0: float) -> None:
    rate, hop = 22050, 256
    t = np.arange(rate) / rate
    for wave in (0.5 * np.sin(2 * np.pi * f0 * t), 0.3 * (2 * ((f0 * t) % 1) - 1)):
        track = pitch_track(wave, rate, hop)
        assert track.voiced.mean() > 0.95
        # Within 1 %, and never an octave off: the sawtooth's second harmonic is as strong a candidate.
        assert np.median(track.f0[track.voiced]) == pytest.approx(f0, rel=0.01)
        assert np.all(np.abs(np.log2(track.f0[track.voiced] / f0)) < 0.5)


def test_a_recording_played_faster_is_that_many_cents_sharp() -> None:
    import soxr

    audio = AudioSection()
    free = FreeRunning(demo_sentences(["demo_003"]), audio, _tts(), vocoder=None)
    (reference,) = free.recordings()
    wave = load_audio(free.sentences[0].path, audio.sample_rate)
    sharp = soxr.resample(wave, audio.sample_rate, round(audio.sample_rate / 2 ** (100 / 1200)))  # +100 cents
    itself = score_heard(reference, wave, free.mel_of, audio.sample_rate, audio.hop_length)
    shifted = score_heard(reference, sharp, free.mel_of, audio.sample_rate, audio.hop_length)
    assert itself.f0_error_cents == 0.0
    assert shifted.f0_error_cents == pytest.approx(100, abs=30)
    assert shifted.duration_ratio == pytest.approx(2 ** (-100 / 1200), rel=0.02)


def demo_sentences(names: list[str]) -> list[HeldOutSentence]:
    rows = [line.split("|") for line in (TEST_VOICE / "metadata.csv").read_text().splitlines() if line]
    texts = {row[0]: row[1] for row in rows}
    return [HeldOutSentence(name, texts[name], TEST_VOICE / "wavs" / f"{name}.wav") for name in names]


def test_a_resynthesis_scores_near_and_a_wrong_sentence_far() -> None:
    audio = AudioSection()
    free = FreeRunning(demo_sentences(["demo_003", "demo_017"]), audio, _tts(), vocoder=None)
    right, other = free.recordings()
    floor = free.floor().items[0]
    wave = load_audio(TEST_VOICE / "wavs" / "demo_017.wav", audio.sample_rate)
    wrong = score_heard(right, wave, free.mel_of, audio.sample_rate, audio.hop_length)
    itself = score_heard(right, load_audio(free.sentences[0].path, audio.sample_rate), free.mel_of, 22050, 256)
    assert itself.distance == 0.0 and itself.duration_ratio == 1.0 and itself.vuv_agreement == 1.0
    assert floor.distance < 0.5 * wrong.distance
    assert floor.vuv_agreement > wrong.vuv_agreement
    assert wrong.duration_ratio == pytest.approx(other.mel.shape[1] / right.mel.shape[1])


def _tts():
    from trainer_core.contract.profile_audio import TtsSection

    return TtsSection(griffin_lim_iters=8)


def test_sentences_spread_over_lengths_and_skip_the_longest() -> None:
    candidates = demo_sentences([f"demo_{i:03d}" for i in range(1, 11)])
    seconds = [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0, 9.0, 30.0]
    picked = pick_sentences(candidates, seconds, 3)
    assert len(picked) == 3 and 9 not in picked
    assert picked == sorted(picked) and max(seconds[i] for i in picked) - min(seconds[i] for i in picked) >= 4
    assert pick_sentences(candidates[:2], seconds[:2], 5) == [0, 1]
